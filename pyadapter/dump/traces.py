"""The hot loop: stream ``.graph_execution_traces`` and cut out the incident around the first NaN/Inf.

A dump of a long run holds hundreds of thousands of traces, nearly all finite. Up to the first non-finite
one they are taken in bulk, thousands per numpy step (``tracebulk.py``: same framing checks, same
classification, same round counting, measured ~4x less CPU than the loop below on the 173 MB bench dump);
the incident window and any record the bulk path cannot take go through the per-record loop. There, each
record is classified without decoding it: the health vector's bytes are found by their fixed TensorProto prefix
(``HealthLayout.marker``), the tensor id is read as 8 raw bytes (used directly as a dict key), and the
non-finite counters are compared against zero bytes. Only records that fail that test, or that the fast
path cannot place, are parsed as protobufs. Every record's length CRC is checked before its length is used, at
the cost of looking its 12 header bytes up among those already verified (a trace file has a few dozen distinct
lengths); the first bad one stops the file there (measured: 1-3% of this loop's CPU time).

Trace order inside one graph execution is not topological (debug ops run in parallel; tf.data functions
interleave), and traces carry no execution number. So per graph the reader keeps "rounds": a graph's round
ends when one of its tensors is traced a second time (the next execution, or the next loop iteration).
From the first non-finite trace on, every trace is kept (with its graph's round number) until each graph
that went non-finite has finished that round and a short tail has passed; that window, plus the rest of the
rounds that were open when it started, is what ``origin.py`` analyses. Memory is bounded by the number of
distinct tensors plus the window, never by the number of traces.

Rounds are counted from the first trace of the file on purpose: a reader that started in the middle of an
execution would put every later round boundary in the wrong place (measured: skipping the all-finite
prefix with C-level byte searches saved only ~30% of this loop's CPU time and broke that alignment).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from typing import Any, BinaryIO

import numpy as np

from pyadapter.dump.events import MODE_NAMES, parse_event, tensor_values
from pyadapter.dump.graphs import HostDump, OpInfo
from pyadapter.dump.health import HealthLayout, tensor_id_of
from pyadapter.dump.tfrecord import (
    CHUNK_SIZE,
    CORRUPT_HEADER,
    FOOTER_SIZE,
    HEADER_SIZE,
    NOT_TFRECORD,
    ReadIssue,
    classify_stop,
    header_problem,
    verified_length,
)
from pyadapter.dump.tracebulk import BulkFramer, TensorTable
from pyadapter.dump.tracewindow import (  # noqa: F401 - the scan's records, read from here too
    MAX_WINDOW_TRACES,
    TAIL_TRACES,
    TraceEntry,
    TraceScan,
    Window,
)

# Bulk phase: buffer size (with numpy temporaries about twice this is in use) and records per numpy step.
BULK_CHUNK_SIZE = 1 << 20
BULK_LIMIT = 1 << 14
# A bulk step that takes fewer records than this before stopping at one it cannot take makes the next
# records go one by one (doubling up to _MAX_PENALTY while that keeps happening), so a file the bulk path
# does not fit costs about what the per-record loop costs, not a numpy step per record.
_BULK_MIN = 32
_MAX_PENALTY = 4096

_pack_double = struct.Struct("<d").pack
_unpack_u64 = struct.Struct("<Q").unpack_from
_unpack_double = struct.Struct("<d").unpack_from


def detect_trace_mode(path: str, issues: list[ReadIssue] | None = None) -> str | None:
    """The tensor_debug_mode of the first trace record, or None if there is none; why not is appended to
    `issues` (a damaged first record means no trace of the file is read)."""
    from pyadapter.dump.tfrecord import RecordFile

    records = RecordFile(path, chunk_size=1 << 16)  # one record is needed, not a chunk of them
    for offset, data in records.records():
        event = parse_event(data)
        if event is not None and event.HasField("graph_execution_trace"):
            return MODE_NAMES.get(event.graph_execution_trace.tensor_debug_mode, "UNSPECIFIED")
        if issues is not None:
            issues.append(
                ReadIssue(path, offset, "first record is not a graph execution trace (traces not read)")
            )
        return None
    if issues is not None and records.issue is not None:
        issues.append(records.issue)
    return None


def _parse_trace(record: bytes, result: TraceScan) -> Any | None:
    """The GraphExecutionTrace of a record, or None (counted as undecodable) when it is not one."""
    event = parse_event(record)
    if event is None or not event.HasField("graph_execution_trace"):
        result.undecodable += 1
        return None
    return event.graph_execution_trace


def _identify(
    trace: Any, host: HostDump, layout: HealthLayout, result: TraceScan, synthetic_ids: list[int]
) -> tuple[bytes, int, str, bool]:
    """Place a trace the fast paths could not: find or invent its tensor.

    Returns (key, tensor id, graph id, non-finite). An op the ``.graphs`` file does not have (killed run) is
    added to ``host`` from what the trace itself says.
    """
    values = tensor_values(trace.tensor_proto)
    bad = layout.reports_health and not layout.is_finite(values)
    op = host.ops.get((trace.tfdbg_context_id, trace.op_name))
    if op is not None and trace.output_slot < len(op.output_tensor_ids):
        tensor_id = op.output_tensor_ids[trace.output_slot]
    else:
        found = tensor_id_of(values)
        tensor_id = found if found is not None else 0
        if found is None or found not in host.tensors:
            if found is None:
                synthetic_ids[0] -= 1
                tensor_id = synthetic_ids[0]
            result.ops_missing_from_graphs += 1
            if op is None:
                op = OpInfo(graph_id=trace.tfdbg_context_id, name=trace.op_name, type="")
                host.ops[(op.graph_id, op.name)] = op
            host.tensors[tensor_id] = (op, trace.output_slot)
    key = _pack_double(float(tensor_id)) if tensor_id >= 0 else f"#{tensor_id}".encode()
    return key, tensor_id, trace.tfdbg_context_id, bad


def scan_traces(
    path: str,
    host: HostDump,
    layout: HealthLayout,
    on_bytes: Callable[[int], None] | None = None,
    *,
    bulk: bool = True,
) -> TraceScan:
    """Stream one trace file; see the module docstring.

    Up to the first non-finite trace the records are taken in bulk (``tracebulk.py``); from there on (the
    incident window, a few thousand traces) record by record. ``bulk=False`` reads every record one by one
    (the reference the bulk path is tested against).
    """
    result = TraceScan(path=path)
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        result.issue = ReadIssue(path, 0, f"cannot open: {exc.strerror or exc}")
        return result
    synthetic_ids = [-1]
    lengths: dict[bytes, int] = {}
    with f:
        file_size = os.fstat(f.fileno()).st_size
        result.bytes_total = file_size
        try:
            if bulk and layout.nonfinite_bytes is not None:
                handover = _bulk_phase(f, file_size, host, layout, result, on_bytes, lengths, synthetic_ids)
                if handover is None:
                    return result
                start, index, table = handover
                graph_state, entries = table.to_entries()
            else:
                start, index, graph_state, entries = 0, 0, {}, {}
                _fill_entries(host, graph_state, entries)
            _per_record(
                f,
                file_size,
                start,
                index,
                graph_state,
                entries,
                host,
                layout,
                result,
                on_bytes,
                lengths,
                synthetic_ids,
            )
        except OSError as exc:
            result.issue = ReadIssue(path, 0, f"cannot read: {exc.strerror or exc}", result.traces_read)
    return result


def _fill_entries(host: HostDump, graph_state: dict[str, list], entries: dict[bytes, list]) -> None:
    for tensor_id, (op, _slot) in host.tensors.items():
        state = graph_state.get(op.graph_id)
        if state is None:
            state = graph_state[op.graph_id] = [-1, 0, op.graph_id]
        entries[_pack_double(float(tensor_id))] = [state, -1, tensor_id, op.graph_id]


def _read_full(f: BinaryIO, view: memoryview) -> int:
    """Fill ``view`` from ``f``; fewer bytes only at the end of the file."""
    got = 0
    while got < len(view):
        n = f.readinto(view[got:])  # type: ignore[attr-defined]  # a file opened "rb" (typing.BinaryIO omits it)
        if not n:
            break
        got += n
    return got


def _bulk_phase(
    f: BinaryIO,
    file_size: int,
    host: HostDump,
    layout: HealthLayout,
    result: TraceScan,
    on_bytes: Callable[[int], None] | None,
    lengths: dict[bytes, int],
    synthetic_ids: list[int],
) -> tuple[int, int, TensorTable] | None:
    """Read records in bulk up to the first non-finite one. Returns (its offset, its index, the state) for the
    per-record loop, or None when the file ended (or stopped at damage, recorded in ``result.issue``) first."""
    path = result.path
    table = TensorTable()
    for tensor_id, (op, _slot) in host.tensors.items():
        table.add(_pack_double(float(tensor_id)), tensor_id, op.graph_id)
    assert layout.nonfinite_bytes is not None
    framer = BulkFramer(layout.marker, layout.nonfinite_bytes)
    marker = layout.marker
    marker_len = len(marker)
    lo, hi = layout.nonfinite_bytes
    zeros = bytes(hi - lo)
    key_row = table.key_row

    buf = bytearray(BULK_CHUNK_SIZE)
    n = _read_full(f, memoryview(buf))
    eof = n < len(buf)
    base = pos = index = 0
    slow_left = 0  # records to place one by one before trying bulk again (after bulk keeps failing early)
    penalty = 0
    while True:
        a = np.frombuffer(buf, np.uint8, n)
        markers = framer.markers(a, pos, n)
        while True:
            if slow_left == 0 and framer.tail is not None:
                batch, starts, rows = framer.take(a, n, pos, markers, BULK_LIMIT, table)
                if batch.count:
                    table.observe_many(rows, starts + base)
                    index += batch.count
                    pos = batch.end
                if batch.anomaly and batch.count < _BULK_MIN:
                    penalty = min(max(2 * penalty, _BULK_MIN), _MAX_PENALTY)
                    slow_left = penalty
                elif batch.count >= _BULK_MIN:
                    penalty = 0
            else:
                slow_left = max(slow_left - 1, 0)
            # One record by the per-record rules: the one bulk stopped at, or the next one.
            if n - pos < HEADER_SIZE:
                break
            header = bytes(buf[pos : pos + HEADER_SIZE])
            length = lengths.get(header)
            if length is None:
                length = verified_length(lengths, header, 0)
                if length < 0:
                    reason = NOT_TFRECORD if base + pos == 0 else CORRUPT_HEADER
                    result.issue = ReadIssue(path, base + pos, reason, index)
                    result.traces_read = index
                    if on_bytes:
                        on_bytes(pos)
                    return None
            start = pos + HEADER_SIZE
            end = start + length
            if end + FOOTER_SIZE > n:
                break
            record = bytes(buf[start:end])
            p = record.find(marker)
            row = None
            if p >= 0:
                c = p + marker_len
                bad = record[c + lo : c + hi] != zeros
                row = key_row.get(record[c : c + 8])
                framer.learn_tail(length - p)
                if bad:
                    return _handover(on_bytes, base, pos, index, table)
            if row is None:
                trace = _parse_trace(record, result)
                if trace is not None:
                    if layout.reports_health and not layout.is_finite(tensor_values(trace.tensor_proto)):
                        # placed (and the window opened) by the per-record loop, which parses it again
                        return _handover(on_bytes, base, pos, index, table)
                    key, tensor_id, graph_id, _bad = _identify(trace, host, layout, result, synthetic_ids)
                    row = key_row.get(key)
                    if row is None:
                        row = table.add(key, tensor_id, graph_id)
            if row is not None:
                table.observe(row, base + pos)
            index += 1
            pos = end + FOOTER_SIZE
        del a
        if on_bytes:
            on_bytes(pos)
        rest = n - pos
        if eof:
            if rest:
                tail = bytes(buf[pos:n])
                result.issue = ReadIssue(
                    path, base + pos, classify_stop(tail, 0, rest, file_size, base + pos), index
                )
            result.traces_read = index
            return None
        size = BULK_CHUNK_SIZE
        if rest >= HEADER_SIZE:
            tail = bytes(buf[pos:n])
            problem = header_problem(f, tail, 0, base + pos, file_size)
            if problem is not None:
                result.issue = ReadIssue(path, base + pos, problem, index)
                result.traces_read = index
                return None
            size = max(size, HEADER_SIZE + _unpack_u64(tail, 0)[0] + FOOTER_SIZE)  # a record must fit whole
        if size > len(buf):
            fresh = bytearray(size)
            fresh[:rest] = buf[pos:n]
            buf = fresh
        else:
            buf[:rest] = buf[pos:n]
        got = _read_full(f, memoryview(buf)[rest:])
        eof = rest + got < len(buf)
        n = rest + got
        base += pos
        pos = 0


def _handover(
    on_bytes: Callable[[int], None] | None, base: int, pos: int, index: int, table: TensorTable
) -> tuple[int, int, TensorTable]:
    if on_bytes:
        on_bytes(pos)
    return base + pos, index, table


def _per_record(
    f: BinaryIO,
    file_size: int,
    start_offset: int,
    index: int,
    graph_state: dict[str, list],
    entries: dict[bytes, list],
    host: HostDump,
    layout: HealthLayout,
    result: TraceScan,
    on_bytes: Callable[[int], None] | None,
    lengths: dict[bytes, int],
    synthetic_ids: list[int],
) -> None:
    """The per-record loop from ``start_offset`` (a record boundary) to the end of the incident window."""
    path = result.path
    marker = layout.marker
    marker_len = len(marker)
    lo, hi = layout.nonfinite_bytes or (0, 0)
    zeros = bytes(hi - lo)

    def slow(record: bytes) -> tuple[list | None, bool]:
        trace = _parse_trace(record, result)
        if trace is None:
            return None, False
        key, tensor_id, graph_id, bad = _identify(trace, host, layout, result, synthetic_ids)
        entry = entries.get(key)
        if entry is None:
            state = graph_state.get(graph_id)
            if state is None:
                state = graph_state[graph_id] = [-1, 0, graph_id]
            entry = entries[key] = [state, -1, tensor_id, graph_id]
        return entry, bad

    window: Window | None = None
    done = False
    corrupt = False
    find = bytes.find
    entries_get = entries.get
    header_size, footer_size = HEADER_SIZE, FOOTER_SIZE
    chunk = min(CHUNK_SIZE, BULK_CHUNK_SIZE)  # the window is a few thousand records: no need for more
    f.seek(start_offset)
    base = start_offset
    buf = f.read(chunk)
    pos = 0
    eof = len(buf) < chunk
    while True:
        n = len(buf)
        last_header = n - header_size
        last_end = n - footer_size
        while pos <= last_header:
            start = pos + header_size
            try:
                end = start + lengths[buf[pos:start]]
            except KeyError:  # a length not seen yet: check its CRC once
                length = verified_length(lengths, buf, pos)
                if length < 0:
                    corrupt = True
                    break
                end = start + length
            if end > last_end:
                break
            p = find(buf, marker, start, end)
            if p >= 0:
                c = p + marker_len
                entry = entries_get(buf[c : c + 8])
                bad = buf[c + lo : c + hi] != zeros
            else:
                entry = None
            if entry is None:
                entry, bad = slow(buf[start:end])
                if entry is None:
                    index += 1
                    pos = end + footer_size
                    continue
            offset = base + pos
            state = entry[0]
            if entry[1] >= state[0]:
                state[0] = offset
                state[1] += 1
            entry[1] = offset
            if bad or window is not None:
                wall_time = _unpack_double(buf, start + 1)[0] if buf[start] == 0x09 else 0.0
                if window is None:
                    window = Window(graph_state, entries)
                    window.open(entry)
                    result.first_nonfinite_index = index
                if window.add(index, offset, entry, bad, wall_time):
                    done = True
                    index += 1
                    pos = end + footer_size
                    break
            index += 1
            pos = end + footer_size
        if on_bytes:
            on_bytes(pos)
        if done:
            result.stopped_after_window = base + pos < file_size
            break
        if corrupt:
            reason = NOT_TFRECORD if base + pos == 0 else CORRUPT_HEADER
            result.issue = ReadIssue(path, base + pos, reason, index)
            break
        if eof:
            if pos < n:
                result.issue = ReadIssue(
                    path, base + pos, classify_stop(buf, pos, n - pos, file_size, base + pos), index
                )
            break
        need = chunk  # read from the first unfinished record on (re-read, not kept: one buffer at a time)
        if pos + HEADER_SIZE <= n:
            problem = header_problem(f, buf, pos, base, file_size)
            if problem is not None:
                result.issue = ReadIssue(path, base + pos, problem, index)
                break
            need = max(need, HEADER_SIZE + _unpack_u64(buf, pos)[0] + FOOTER_SIZE)
        base += pos
        pos = 0
        del buf
        f.seek(base)
        buf = f.read(need)
        eof = len(buf) < need
    result.traces_read = index
    if window is not None:
        result.window = window.window
