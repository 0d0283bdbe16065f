"""The one way NaN Lens starts a child (pyadapter/childproc.py): real child interpreters, timed out, cancelled,
streamed, and never left running."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from pyadapter.childproc import child_env, run_python, terminate_children


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); a reaped child does not exist.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_output_exit_code_and_environment() -> None:
    run = run_python(
        [
            "-c",
            "import os, sys; print(os.environ['TF_CPP_MIN_LOG_LEVEL'], os.environ['X']); "
            "print('oops', file=sys.stderr); sys.exit(3)",
        ],
        env={"X": "given"},
        timeout=60,
    )
    assert (run.returncode, run.stdout.split(), run.stderr.strip(), run.timed_out) == (
        3,
        ["2", "given"],
        "oops",
        False,
    )
    assert child_env()["PYTHONUNBUFFERED"] == "1"


def test_lines_arrive_while_the_child_runs_with_stderr_merged() -> None:
    seen: list[tuple[float, str]] = []
    started = time.monotonic()
    code = "import sys, time; print('first', flush=True); print('to stderr', file=sys.stderr); time.sleep(1.5); print('last')"
    run = run_python(
        ["-c", code], stderr="merge", on_line=lambda line: seen.append((time.monotonic(), line)), timeout=60
    )
    assert run.returncode == 0
    assert [line for _, line in seen] == ["first", "to stderr", "last"]
    assert seen[0][0] - started < seen[-1][0] - started - 1.0, (
        "the first line was handed on before the child ended"
    )


def test_a_child_that_outlives_its_time_is_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    code = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)"
    started = time.monotonic()
    run = run_python(["-c", code], timeout=3)
    assert run.timed_out and time.monotonic() - started < 30
    assert not _alive(int(pid_file.read_text()))


def test_a_streamed_child_that_outlives_its_time_is_killed(tmp_path: Path) -> None:
    code = "import time; print('working', flush=True); time.sleep(60)"
    lines: list[str] = []
    run = run_python(["-c", code], timeout=3, on_line=lines.append)
    assert run.timed_out and lines == ["working"]


def test_cancel_stops_the_child(tmp_path: Path) -> None:
    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()
    started = time.monotonic()
    run = run_python(["-c", "import time; time.sleep(60)"], cancel=cancel, stdout="discard", stderr="discard")
    assert run.cancelled and run.returncode != 0 and time.monotonic() - started < 30


def test_terminate_children_stops_a_running_child(tmp_path: Path) -> None:
    result: dict[str, object] = {}

    def run() -> None:
        result["run"] = run_python(
            ["-c", "import time; print('up', flush=True); time.sleep(60)"],
            on_line=lambda line: result.setdefault("up", line),
        )

    worker = threading.Thread(target=run)
    worker.start()
    deadline = time.monotonic() + 30
    while "up" not in result and time.monotonic() < deadline:
        time.sleep(0.05)
    terminate_children()  # what a server shutting down does
    worker.join(timeout=30)
    assert not worker.is_alive() and result["run"].returncode != 0  # type: ignore[attr-defined]


def test_a_child_that_cannot_start_raises_oserror(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        run_python(["-c", "pass"], cwd=str(tmp_path / "missing"), timeout=10)
