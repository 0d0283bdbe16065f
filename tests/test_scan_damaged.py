"""Damaged, empty, foreign and half-written dump directories: one-line errors or partial results, never a
traceback or a hang. Damage is done by hand to copies of a real dump (tests/programs/log_softmax.py)."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
from programs.harness import marker_line, nanlens, program_dumps

from pyadapter.dump import ScanError, scan_dump
from pyadapter.dump.tfrecord import masked_crc32c

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real_dump(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = program_dumps(tmp_path_factory.getbasetemp() / "program-dumps")["log_softmax.py"]
    assert run.returncode == 0, run.stderr[-2000:]
    return run.dump


def copy_dump(src: Path, dst: Path, *, without: tuple[str, ...] = ()) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        if not f.name.endswith(without) or not without:
            shutil.copy(f, dst / f.name)
    return dst


def only(dump: Path, suffix: str) -> Path:
    (path,) = dump.glob(f"*.{suffix}")
    return path


def record_offsets(path: Path) -> list[int]:
    data = path.read_bytes()
    offsets, pos = [], 0
    while pos < len(data):
        offsets.append(pos)
        pos += 16 + struct.unpack_from("<Q", data, pos)[0]
    return offsets


def test_truncated_trace_file_keeps_what_was_written(real_dump: Path, tmp_path: Path) -> None:
    dump = copy_dump(real_dump, tmp_path / "d")
    traces = only(dump, "graph_execution_traces")
    data = traces.read_bytes()
    last = record_offsets(traces)[-1]
    traces.write_bytes(data[: last + (len(data) - last) // 2])  # cut the last record in half

    findings = scan_dump(dump)

    assert findings.origin is not None
    assert (findings.origin.file, findings.origin.line) == marker_line("log_softmax.py")
    (skipped,) = findings.extra["skipped"]
    assert skipped["file"] == str(traces) and skipped["offset"] == last
    assert "truncated record" in skipped["reason"]
    assert any("graph_execution_traces" in w and "truncated" in w for w in findings.extra["warnings"])


def test_truncated_inside_a_record_header(real_dump: Path, tmp_path: Path) -> None:
    dump = copy_dump(real_dump, tmp_path / "d")
    traces = only(dump, "graph_execution_traces")
    traces.write_bytes(traces.read_bytes() + b"\x07\x00\x00")
    findings = scan_dump(dump)
    assert findings.origin is not None
    assert "truncated record header" in findings.extra["skipped"][0]["reason"]


def test_corrupt_length_in_the_middle_stops_that_file_only(real_dump: Path, tmp_path: Path) -> None:
    dump = copy_dump(real_dump, tmp_path / "d")
    graphs = only(dump, "graphs")
    data = bytearray(graphs.read_bytes())
    third = record_offsets(graphs)[2]
    data[third : third + 8] = struct.pack("<Q", 1 << 60)  # absurd length, checksum no longer matches
    graphs.write_bytes(bytes(data))

    findings = scan_dump(dump)

    (skipped,) = findings.extra["skipped"]
    assert skipped["offset"] == third and "corrupt record header" in skipped["reason"]
    assert findings.extra["scan"]["traces_read"] > 0


def test_huge_length_with_valid_checksum_is_truncation_not_a_hang(real_dump: Path, tmp_path: Path) -> None:
    dump = copy_dump(real_dump, tmp_path / "d")
    execution = only(dump, "execution")
    length = struct.pack("<Q", 1 << 40)
    execution.write_bytes(
        execution.read_bytes() + length + struct.pack("<I", masked_crc32c(length)) + b"x" * 10
    )
    findings = scan_dump(dump)
    assert any("truncated record" in s["reason"] for s in findings.extra["skipped"])


def test_half_written_dump_without_graphs_reports_the_op_it_cannot_place(
    real_dump: Path, tmp_path: Path
) -> None:
    """SIGKILL without NaN Lens' flushing: traces on disk, .graphs / .stack_frames never written."""
    dump = copy_dump(real_dump, tmp_path / "d", without=(".graphs", ".stack_frames"))
    findings = scan_dump(dump)
    assert findings.origin is None
    assert findings.extra["unlocated_origin"]["op"]["name"] == "Log"
    warnings = "\n".join(findings.extra["warnings"])
    assert "no .graphs file" in warnings and "no .stack_frames file" in warnings
    assert "Log" in warnings and "no source location" in warnings

    result = nanlens("scan", str(dump))
    assert result.returncode == 0 and "Traceback" not in result.stderr
    assert "NaN/Inf starts at op Log" in result.stdout and "no .graphs file" in result.stdout


def test_zero_byte_files_from_an_unflushed_run(real_dump: Path, tmp_path: Path) -> None:
    dump = tmp_path / "d"
    dump.mkdir()
    for f in real_dump.iterdir():
        (dump / f.name).write_bytes(b"")
    with pytest.raises(ScanError, match="all empty"):
        scan_dump(dump)


def test_metadata_only_is_a_partial_result(real_dump: Path, tmp_path: Path) -> None:
    dump = tmp_path / "d"
    dump.mkdir()
    meta = only(real_dump, "metadata")
    shutil.copy(meta, dump / meta.name)
    findings = scan_dump(dump)
    assert findings.origin is None and findings.findings == []
    assert sum("no ." in w for w in findings.extra["warnings"]) == 5
    assert findings.extra["scan"]["tensorflow_version"]
