"""The bulk trace path (pyadapter/dump/tracebulk.py) against the per-record loop, on a real multi-step dump.

Both must find the same traces, the same first NaN/Inf, the same incident window (with the same round numbers)
and stop at the same byte on damage, whatever the chunk size (records then straddle chunk boundaries
everywhere). The dump: the bench's Keras MLP for 120 steps, NaN in the last one (~5 MB of traces)."""

from __future__ import annotations

import os
import random
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pyadapter.dump import scan_dump, traces
from pyadapter.dump.files import find_host_files
from pyadapter.dump.graphs import load_host_dump
from pyadapter.dump.health import LAYOUTS
from pyadapter.dump.producers import Producers
from pyadapter.dump.tfrecord import masked_crc32c
from pyadapter.dump.tracebulk import TensorTable

REPO = Path(__file__).resolve().parent.parent
PROGRAM = REPO / "bench" / "programs" / "mlp_fit_last_step_nan.py"
ORIGIN_LINE = next(i for i, line in enumerate(PROGRAM.read_text().splitlines(), 1) if "# ORIGIN" in line)
STEPS = 120


@pytest.fixture(scope="module")
def real_dump(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dump = tmp_path_factory.mktemp("bulk") / "dump"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    run = subprocess.run(
        [sys.executable, "-m", "pyadapter", "run", "--dump", str(dump), "--", str(PROGRAM), str(STEPS)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return dump


def _trace_file(dump: Path) -> Path:
    (path,) = dump.glob("*.graph_execution_traces")
    return path


def _scan(dump: Path, *, bulk: bool) -> tuple:
    (files,) = find_host_files(str(dump))
    host = load_host_dump(files)
    seen: list[int] = []
    result = traces.scan_traces(str(_trace_file(dump)), host, LAYOUTS["FULL_HEALTH"], seen.append, bulk=bulk)
    issue = result.issue.to_json() if result.issue else None
    return (
        result.traces_read,
        result.first_nonfinite_index,
        result.window,
        issue,
        result.undecodable,
        result.ops_missing_from_graphs,
        result.stopped_after_window,
        sum(seen),
    )


def _copy(dump: Path, dst: Path) -> Path:
    shutil.copytree(dump, dst)
    return dst


def _offsets(data: bytes) -> list[int]:
    out, pos = [], 0
    while pos < len(data):
        out.append(pos)
        pos += 16 + struct.unpack_from("<Q", data, pos)[0]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("chunk", [None, 4096, 1000, 333])
def test_bulk_reads_the_same_as_the_per_record_loop_at_any_chunk_size(real_dump, monkeypatch, chunk):
    reference = _scan(real_dump, bulk=False)
    assert reference[1] is not None and reference[2], "the dump has its NaN in the last step"
    if chunk:
        monkeypatch.setattr(traces, "BULK_CHUNK_SIZE", chunk)
    assert _scan(real_dump, bulk=True) == reference
    findings = scan_dump(real_dump)
    assert findings.origin is not None and (findings.origin.file, findings.origin.line) == (
        str(PROGRAM),
        ORIGIN_LINE,
    )


def _damaged(dump: Path, tmp_path: Path, name: str, change) -> Path:  # type: ignore[no-untyped-def]
    copy = _copy(dump, tmp_path / name)
    path = _trace_file(copy)
    data = path.read_bytes()
    path.write_bytes(change(data, _offsets(data)))
    return copy


def _relength(record: bytes) -> bytes:
    """A record framed with a valid length and length CRC (data CRC left zero: it is not checked)."""
    length = struct.pack("<Q", len(record))
    return length + struct.pack("<I", masked_crc32c(length)) + record + b"\0\0\0\0"


def _with_longer_device(data: bytes, offsets: list[int], at: int) -> bytes:
    """The record at index ``at`` with a longer device name: its tail (marker to end) differs from the rest."""
    start, end = offsets[at], offsets[at + 1]
    record = data[start + 12 : end - 4]
    device = b"/job:localhost/replica:0/task:0/device:CPU:0"
    assert record.endswith(bytes([0x32, len(device)]) + device)
    longer = device + b"/x"
    changed = record[: -len(device) - 2] + bytes([0x32, len(longer)]) + longer
    return data[:start] + _relength(changed) + data[end:]


DAMAGE = {
    # length and CRC damage in the middle: the file stops exactly there in both paths
    "length": lambda d, o: d[: o[len(o) // 2]] + struct.pack("<Q", 77) + d[o[len(o) // 2] + 8 :],
    "length-crc": lambda d, o: d[: o[len(o) // 3] + 8] + b"\1\2\3\4" + d[o[len(o) // 3] + 12 :],
    "truncated": lambda d, o: d[: o[len(o) // 2] + 100],
    "truncated-header": lambda d, o: d[: o[len(o) // 2] + 7],
    # records the bulk path cannot take: a damaged marker, a stray candidate byte, a different tail
    "marker": lambda d, o: d[: o[50] + 70] + bytes([d[o[50] + 70] ^ 0xFF]) + d[o[50] + 71 :],
    "stray-quote": lambda d, o: d[: o[60] + 40] + b'"X' + d[o[60] + 42 :],
    "other-tail": lambda d, o: _with_longer_device(d, o, len(o) // 4),
    "two-tails": lambda d, o: _with_longer_device(
        _with_longer_device(d, o, 100), _offsets(_with_longer_device(d, o, 100)), 101
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_bulk_stops_or_steps_aside_exactly_where_the_per_record_loop_does(
    real_dump, tmp_path, monkeypatch, kind
):
    dump = _damaged(real_dump, tmp_path, kind, DAMAGE[kind])
    reference = _scan(dump, bulk=False)
    monkeypatch.setattr(traces, "BULK_CHUNK_SIZE", 4096)
    assert _scan(dump, bulk=True) == reference
    if kind.startswith(("length", "truncated")):
        assert reference[3] is not None and reference[3]["offset"] > 0, "the damage is reported where it is"


def test_round_counting_in_bulk_matches_one_record_at_a_time() -> None:
    """observe_many (rounds found by binary search over a batch) against observe (one sighting at a time), on
    random sightings of random tensors in up to three graphs, split into random batches."""
    rng = np.random.default_rng(7)
    for _ in range(300):
        one, many = TensorTable(), TensorTable()
        tensors = int(rng.integers(1, 12))
        for t in range(tensors):
            graph = f"g{rng.integers(0, 3)}"
            one.add(bytes([t]) * 8, t, graph)
            many.add(bytes([t]) * 8, t, graph)
        n = int(rng.integers(1, 300))
        rows = rng.integers(0, tensors, n)
        offsets = np.cumsum(rng.integers(1, 50, n))
        for row, offset in zip(rows.tolist(), offsets.tolist(), strict=True):
            one.observe(row, offset)
        cuts = sorted(set(rng.integers(0, n, 4).tolist()) | {0, n})
        for lo, hi in zip(cuts, cuts[1:], strict=False):
            many.observe_many(rows[lo:hi], offsets[lo:hi])
        assert one.to_entries()[0] == many.to_entries()[0]
        assert np.array_equal(one.last_seen, many.last_seen)


def test_producers_map_answers_like_a_dict_with_ids_out_of_order_and_pruning() -> None:
    """The execution scan's compact producer map (pyadapter/dump/producers.py) against a plain dict: mostly
    increasing ids, some out of order or repeated, and the scan's halving bound applied on the way."""
    rng = random.Random(3)
    for _ in range(200):
        compact, plain = Producers(), {}
        newest = 0
        for i in range(rng.randint(0, 400)):
            if rng.random() < 0.9:
                newest += rng.randint(1, 3)
                tensor_id = newest
            else:
                tensor_id = rng.randint(-5, newest + 5)
            value = (i, i * 10, rng.randint(0, 3))
            compact.set(tensor_id, *value)
            plain[tensor_id] = value
            if len(plain) > 50 and rng.random() < 0.05:
                cutoff = sorted(plain)[len(plain) // 2]
                plain = {k: v for k, v in plain.items() if k >= cutoff}
                compact.drop_older_half()
            assert len(compact) == len(plain)
        assert dict(compact.items()) == plain
        for tensor_id in range(-6, newest + 6):
            assert (tensor_id in compact) == (tensor_id in plain)
            assert compact.get(tensor_id) == plain.get(tensor_id)


def test_producers_set_outputs_is_set_for_each_output_slot() -> None:
    """``set_outputs`` (one call per execution, the scan's path) against a plain dict filled slot by slot: one or
    several outputs, mostly new increasing ids, some out of order or repeated (its fast path must not skip them)."""
    rng = random.Random(5)
    for _ in range(200):
        compact, plain = Producers(), {}
        newest = 0
        for i in range(rng.randint(0, 300)):
            ids = []
            for _slot in range(rng.choice((1, 1, 1, 2, 3))):
                if rng.random() < 0.85:
                    newest += rng.randint(1, 3)
                    ids.append(newest)
                else:
                    ids.append(rng.randint(-5, newest + 5))
            compact.set_outputs(ids, i, i * 10)
            for slot, tensor_id in enumerate(ids):
                plain[tensor_id] = (i, i * 10, slot)
            assert len(compact) == len(plain)
        assert dict(compact.items()) == plain
        for tensor_id in range(-6, newest + 6):
            assert compact.get(tensor_id) == plain.get(tensor_id)
