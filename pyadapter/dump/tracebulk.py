"""Bulk path of the trace scan: frame, classify and count rounds for thousands of trace records per numpy call.

The per-record loop in ``traces.py`` costs about a microsecond of Python per record; a long run's dump has
millions. This module does the same work a chunk at a time, without a Python step per record:

- Framing. In a health mode every trace record ends the same way: the health TensorProto (found by its fixed
  prefix, ``HealthLayout.marker``) followed by the device name, so "record end - marker position" (the tail)
  is one number per file. All markers of a chunk are found with one vectorized byte search; each predicts
  where the next record starts (marker + tail + footer). The prediction is then *verified*, not trusted:
  every predicted header must carry a length whose CRC matches (checked against a small table of verified
  lengths) and that length must lead exactly to the next predicted start. Starting from a record boundary
  the per-record loop had reached, a chain of verified records is exactly the framing that loop would have
  found; the first record that breaks the chain (other tail, corrupt length, no marker, a stray candidate)
  is placed on its own by the per-record rules (``traces.py``), which report damage as before.
- Classifying. The tensor id (8 raw bytes) and the non-finite counters are gathered for all records at once;
  ids are looked up in a sorted array of known ids. A record with an unknown id or a non-finite counter ends
  the batch (the caller places it, or opens the incident window, record by record).
- Rounds (see ``traces.py``): a graph's round ends when one of its tensors is traced again. With each
  record's previous sighting of its tensor (``prev``), a new round starts at the first record whose ``prev``
  is at or after the current round's start; over a batch that is a binary search in the running maximum of
  ``prev``, so the Python work is one step per round (one per training step), not per record.

State lives in ``TensorTable`` arrays; ``to_entries`` turns it into the per-record loop's dicts for the
window, which needs the per-record logic anyway.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from pyadapter.dump.tfrecord import HEADER_SIZE, masked_crc32c

_pack_u64 = struct.Struct("<Q").pack
_U64 = np.dtype("<u8")
_U32 = np.dtype("<u4")


def _rows(a: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """``a[at[i] : at[i] + width]`` for each i, as a (len(at), width) uint8 array (C order, so rows can be
    viewed as wider integers). Indexing a sliding-window view copies whole rows, several times faster than
    indexing with a 2-D array of byte positions."""
    windows = np.ndarray((len(a) - width + 1, width), np.uint8, buffer=a, strides=(1, 1))  # no copy
    return windows[at]


# Tensor ids below this are looked up in a dense array (8 bytes an id up to the largest: at most 2 MB).
_DENSE_IDS = 1 << 18


def _small(values: np.ndarray, bound: int) -> np.ndarray:
    """``values`` (all < bound) as int16 when they fit: numpy's stable sort is a radix sort for 16-bit ints."""
    return values.astype(np.int16) if bound < 1 << 15 else values


@dataclass
class TensorTable:
    """Per traced tensor: its key, graph and last sighting; per graph: its current round's start and number."""

    tensor_ids: list[int] = field(default_factory=list)
    keys: list[bytes] = field(default_factory=list)
    key_row: dict[bytes, int] = field(default_factory=dict)
    graph_ids: list[str] = field(default_factory=list)
    graph_row: dict[str, int] = field(default_factory=dict)
    graph_of: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    last_seen: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    round_start: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    round_no: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    _sorted_keys: np.ndarray = field(default_factory=lambda: np.zeros(0, _U64))
    _sorted_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    _row_keys: np.ndarray = field(default_factory=lambda: np.zeros(1, _U64))
    _dense: np.ndarray | None = None
    _dirty: bool = True

    def add(self, key: bytes, tensor_id: int, graph_id: str) -> int:
        """A new tensor (never seen); returns its row."""
        g = self.graph_row.get(graph_id)
        if g is None:
            g = self.graph_row[graph_id] = len(self.graph_ids)
            self.graph_ids.append(graph_id)
            if g >= len(self.round_start):
                grow = max(16, 2 * len(self.round_start))
                self.round_start = np.concatenate([self.round_start, np.full(grow, -1, np.int64)])
                self.round_no = np.concatenate([self.round_no, np.zeros(grow, np.int64)])
        row = self.key_row[key] = len(self.keys)
        self.keys.append(key)
        self.tensor_ids.append(tensor_id)
        if row >= len(self.graph_of):
            grow = max(1024, 2 * len(self.graph_of))
            self.graph_of = np.concatenate([self.graph_of, np.zeros(grow, np.int64)])
            self.last_seen = np.concatenate([self.last_seen, np.full(grow, -1, np.int64)])
        self.graph_of[row] = g
        self._dirty = True
        return row

    def rows_of(self, keys: np.ndarray) -> np.ndarray:
        """Row of each 8-byte key (as uint64), -1 for keys not in the table.

        Keys are float64 tensor ids: small integers, so a dense array indexed by the id finds the row (the
        row's own key is compared bit for bit, so e.g. -0.0 is not taken for tensor 0); ids beyond
        ``_DENSE_IDS`` fall back to a binary search."""
        if self._dirty:
            self._rebuild_lookup()
        if not len(self._sorted_keys):
            return np.full(len(keys), -1, np.int64)
        if self._dense is not None:
            ids = keys.view(np.float64)
            with np.errstate(invalid="ignore"):
                at = np.where((ids >= 0) & (ids < len(self._dense)), ids, 0).astype(np.int64)
            rows = self._dense[at]
            return np.where((rows >= 0) & (self._row_keys[rows] == keys), rows, -1)
        at = np.minimum(np.searchsorted(self._sorted_keys, keys), len(self._sorted_keys) - 1)
        return np.where(self._sorted_keys[at] == keys, self._sorted_rows[at], -1)

    def _rebuild_lookup(self) -> None:
        packed = [(int(np.frombuffer(k, _U64)[0]), r) for r, k in enumerate(self.keys) if len(k) == 8]
        self._sorted_keys = np.array([k for k, _ in packed], _U64)
        self._sorted_rows = np.array([r for _, r in packed], np.int64)
        order = np.argsort(self._sorted_keys, kind="stable")
        self._sorted_keys = self._sorted_keys[order]
        self._sorted_rows = self._sorted_rows[order]
        row_keys = np.zeros(len(self.keys) + 1, _U64)  # the last entry stands for "no row" (-1)
        row_keys[self._sorted_rows] = self._sorted_keys
        self._row_keys = row_keys
        ids = self._sorted_keys.view(np.float64)
        whole = (ids >= 0) & (ids < _DENSE_IDS) & (ids == np.floor(ids))
        self._dense = None
        if len(ids) and whole.all():
            dense = np.full(int(ids.max()) + 1, -1, np.int64)
            dense[ids.astype(np.int64)] = self._sorted_rows
            self._dense = dense
        self._dirty = False

    def observe(self, row: int, offset: int) -> None:
        """One sighting (the per-record loop's rule, on the arrays)."""
        g = self.graph_of[row]
        if self.last_seen[row] >= self.round_start[g]:
            self.round_start[g] = offset
            self.round_no[g] += 1
        self.last_seen[row] = offset

    def observe_many(self, rows: np.ndarray, offsets: np.ndarray) -> None:
        """Sightings in file order (offsets increasing); same result as ``observe`` on each in turn."""
        k = len(rows)
        if k == 0:
            return
        # prev[i]: the previous sighting of rows[i] (in this batch, else from before it).
        order = np.argsort(_small(rows, len(self.keys)), kind="stable")
        by_row = rows[order]
        offs = offsets[order]
        first = np.empty(k, bool)
        first[0] = True
        np.not_equal(by_row[1:], by_row[:-1], out=first[1:])
        prev_sorted = np.empty(k, np.int64)
        prev_sorted[1:] = offs[:-1]
        prev_sorted[first] = self.last_seen[by_row[first]]
        prev = np.empty(k, np.int64)
        prev[order] = prev_sorted
        last = np.empty(k, bool)
        last[-1] = True
        last[:-1] = first[1:]
        self.last_seen[by_row[last]] = offs[last]

        graphs = self.graph_of[rows]
        if graphs[0] == graphs[-1] and (graphs == graphs[0]).all():
            groups = [(int(graphs[0]), offsets, prev)]
        else:
            g_order = np.argsort(_small(graphs, len(self.graph_ids)), kind="stable")
            g_sorted = graphs[g_order]
            cuts = np.flatnonzero(g_sorted[1:] != g_sorted[:-1]) + 1
            groups = [(int(graphs[part[0]]), offsets[part], prev[part]) for part in np.split(g_order, cuts)]
        for g, offs_g, prev_g in groups:
            running_max = np.maximum.accumulate(prev_g)
            start = int(self.round_start[g])
            rounds = int(self.round_no[g])
            n = len(offs_g)
            while True:
                # The first sighting whose tensor was already seen in the current round starts the next one.
                j = int(running_max.searchsorted(start, "left"))
                if j >= n:
                    break
                start = int(offs_g[j])
                rounds += 1
            self.round_start[g] = start
            self.round_no[g] = rounds

    def to_entries(self) -> tuple[dict[str, list], dict[bytes, list]]:
        """The per-record loop's state: graph id -> [round start, round, graph id], key -> [graph state, last
        sighting, tensor id, graph id]."""
        graph_state = {
            gid: [int(self.round_start[g]), int(self.round_no[g]), gid]
            for g, gid in enumerate(self.graph_ids)
        }
        entries: dict[bytes, list] = {}
        last_seen = self.last_seen.tolist()
        graph_of = self.graph_of.tolist()
        for row, key in enumerate(self.keys):
            gid = self.graph_ids[graph_of[row]]
            entries[key] = [graph_state[gid], last_seen[row], self.tensor_ids[row], gid]
        return graph_state, entries


@dataclass
class Batch:
    """What one bulk step accepted: ``count`` records, the file after them starting at buffer position ``end``."""

    count: int
    end: int
    anomaly: bool  # stopped at a record it could not take (the caller places it record by record)


class BulkFramer:
    """Finds, verifies and classifies runs of trace records in a buffer (see the module docstring)."""

    def __init__(self, marker: bytes, nonfinite: tuple[int, int]) -> None:
        if len(marker) != 10:
            raise ValueError("a health marker is 10 bytes (TensorProto dtype, shape, content tag and length)")
        self.marker_bytes = marker
        self.marker_len = len(marker)
        self.marker_head = int.from_bytes(marker[:2], "little")
        self.marker_rest = int.from_bytes(marker[2:], "little")
        lo, hi = nonfinite
        self.content_len = hi  # id (first 8 bytes) .. end of the non-finite counters
        self.body_len = 6 + self.marker_len + hi
        self.lo_word, self.hi_word = lo // 8, hi // 8
        self.tail: int | None = None  # record data end - marker position, learnt from a placed record
        self._verified_lengths = np.zeros(0, _U64)
        self._verified_crcs = np.zeros(0, _U32)

    def learn_tail(self, tail: int) -> None:
        if tail >= self.marker_len + self.content_len:
            self.tail = tail

    def markers(self, a: np.ndarray, start: int, n: int) -> np.ndarray:
        """Likely marker positions in ``a[start:n]`` (ascending), by three of its bytes. Candidates are not
        trusted: ``take`` checks the whole marker of every record it accepts, and a stray candidate inside a
        record breaks the chain there, so that record goes to the per-record loop."""
        m = self.marker_bytes
        key = self.marker_len - 2  # the '"' (tensor_content tag) byte: rare in trace records
        begin = start + key
        stop = n - 1
        if stop <= begin:
            return np.zeros(0, np.int64)
        # Python ints, not numpy int64 scalars: those would promote the whole uint8 buffer to int64.
        hits = np.flatnonzero(a[begin:stop] == m[key]) + begin
        hits = hits[a[hits + 1] == m[key + 1]]
        hits = hits[a[hits - 1] == m[key - 1]]
        return hits - key

    def _lengths_valid(self, lengths: np.ndarray, crcs: np.ndarray) -> np.ndarray:
        """Whether each (length, length CRC) pair is a valid record header. The lengths are those of a chain
        of records (each leads to the next), so there are few distinct ones: a CRC is computed once per length."""
        table = self._verified_lengths
        at = np.minimum(np.searchsorted(table, lengths), max(len(table) - 1, 0))
        known = table[at] == lengths if len(table) else np.zeros(len(lengths), bool)
        if not known.all():
            merged = dict(zip(table.tolist(), self._verified_crcs.tolist(), strict=True))
            for length in np.unique(lengths[~known]).tolist():
                merged[length] = masked_crc32c(_pack_u64(length))
            ordered = sorted(merged)
            self._verified_lengths = table = np.array(ordered, _U64)
            self._verified_crcs = np.array([merged[k] for k in ordered], _U32)
            at = np.searchsorted(table, lengths)
        return self._verified_crcs[at] == crcs

    def take(
        self, a: np.ndarray, n: int, pos: int, markers: np.ndarray, limit: int, table: TensorTable
    ) -> tuple[Batch, np.ndarray, np.ndarray]:
        """Accept the longest run of verified, known, finite records from buffer position ``pos`` (a record
        boundary), at most ``limit``. Returns the batch and the accepted records' buffer starts and rows."""
        empty = np.zeros(0, np.int64)
        if self.tail is None:
            return Batch(0, pos, True), empty, empty
        first = int(markers.searchsorted(pos + HEADER_SIZE))
        found = markers[first : first + limit]
        ends = found + (self.tail + 4)  # + footer: where the next record would start
        fits = int(ends.searchsorted(n, "right"))
        anomaly = False
        found, ends = found[:fits], ends[:fits]
        k = len(found)
        if k == 0:
            return Batch(0, pos, False), empty, empty
        starts = np.empty(k, np.int64)
        starts[0] = pos
        starts[1:] = ends[:-1]
        # The chain first: the marker after its record's header (so the header lies inside the buffer), and
        # each length leading exactly to the next predicted start.
        inside = found >= starts + HEADER_SIZE
        if not inside.all():
            k = int(np.argmin(inside))
            anomaly = True
            found, starts, ends = found[:k], starts[:k], ends[:k]
        header = _rows(a, starts, 16).view(_U64)  # length, then its CRC in the low half of the next word
        lengths = header[:, 0]
        chained = starts.astype(_U64) + (HEADER_SIZE + 4) + lengths == ends.astype(_U64)
        if not chained.all():
            k = int(np.argmin(chained))
            anomaly = True
            found, starts, lengths, header = found[:k], starts[:k], lengths[:k], header[:k]
        crcs = (header[:, 1] & 0xFFFFFFFF).astype(_U32)
        good = self._lengths_valid(lengths, crcs)
        # From 6 bytes before the marker: [.. marker[0:2]] [marker[2:10]] [tensor id] [health words ..].
        body = _rows(a, found - 6, self.body_len).view(_U64)
        good &= body[:, 0] >> 48 == self.marker_head
        good &= body[:, 1] == self.marker_rest
        health = body[:, 2 + self.lo_word].copy()
        for word in range(3 + self.lo_word, 2 + self.hi_word):
            health |= body[:, word]
        good &= health == 0
        rows = table.rows_of(body[:, 2].copy())
        good &= rows >= 0
        if good.all():
            count = len(good)
        else:
            count = int(np.argmin(good))
            anomaly = True
        end = int(ends[count - 1]) if count else pos
        return Batch(count, end, anomaly), starts[:count], rows[:count]
