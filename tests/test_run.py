"""`nanlens run`: the script runs like `python SCRIPT.py`, and the dump it leaves is readable (even if killed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from programs.harness import PROGRAMS, env, marker_line, nanlens

from pyadapter.dump import ScanError, scan_dump

pytestmark = pytest.mark.slow


def test_script_gets_argv_path_and_main_like_python(tmp_path: Path) -> None:
    helper = tmp_path / "helper_mod.py"
    helper.write_text("VALUE = 'imported from the script folder'\n")
    script = tmp_path / "show.py"
    script.write_text(
        "import sys\n"
        "import helper_mod\n"
        "print('name', __name__)\n"
        "print('argv', sys.argv[1:])\n"
        "print('argv0', sys.argv[0])\n"
        "print(helper_mod.VALUE)\n"
        "sys.exit(3)\n"
    )
    work = tmp_path / "cwd"
    work.mkdir()
    result = nanlens("run", "--", str(script), "--flag", "x y", cwd=work)
    assert result.returncode == 3, result.stderr
    assert "name __main__" in result.stdout
    assert "argv ['--flag', 'x y']" in result.stdout
    assert f"argv0 {script}" in result.stdout
    assert "imported from the script folder" in result.stdout
    # Default dump directory: .nanlens/dumps/<YYYYmmdd-HHMMSS> under the working directory.
    dumps = list((work / ".nanlens" / "dumps").iterdir())
    assert len(dumps) == 1 and len(dumps[0].name) == len("20250101-120000")
    assert f"dump written to {dumps[0]}" in result.stderr
    assert "exited with code 3" in result.stderr
    assert any(p.name.endswith(".graph_execution_traces") for p in dumps[0].iterdir())


def test_a_module_of_a_package_runs_like_python_dash_m(tmp_path: Path) -> None:
    """``nanlens run -- -m trainer.show ARGS`` as ``python -m trainer.show ARGS``: found from the working directory,
    its relative imports work, and a module that is not there is python's one line."""
    package = tmp_path / "trainer"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "values.py").write_text("VALUE = 'relative import works'\n")
    (package / "show.py").write_text(
        "import sys\nfrom .values import VALUE\nprint('name', __name__)\nprint('argv', sys.argv[1:])\n"
        "print('argv0', sys.argv[0])\nprint(VALUE)\n"
    )
    result = nanlens("run", "--no-dump", "--eager", "--", "-m", "trainer.show", "--flag", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "name __main__" in result.stdout and "argv ['--flag']" in result.stdout
    assert f"argv0 {package / 'show.py'}" in result.stdout and "relative import works" in result.stdout
    missing = nanlens("run", "--no-dump", "--eager", "--", "-m", "trainer.nothere", cwd=tmp_path)
    assert missing.returncode == 1 and "No module named 'trainer.nothere'" in missing.stderr


def test_failing_script_prints_its_traceback_and_exits_1(tmp_path: Path) -> None:
    dump = tmp_path / "dump"
    result = nanlens("run", "--dump", str(dump), "--", "raises_after_nan.py")
    assert result.returncode == 1
    traceback_text = result.stderr[result.stderr.index("Traceback") :]
    assert "RuntimeError: the script failed after the NaN" in traceback_text
    assert "pyadapter" not in traceback_text.split("RuntimeError")[0], "traceback starts at the script"
    assert f"dump written to {dump}" in result.stderr
    origin = scan_dump(dump).origin
    assert origin is not None and (origin.file, origin.line) == marker_line("raises_after_nan.py")


def test_eager_flag_runs_functions_eagerly_and_dump_still_finds_the_line(tmp_path: Path) -> None:
    dump = tmp_path / "dump"
    result = nanlens("run", "--eager", "--dump", str(dump), "--", "log_softmax.py")
    assert result.returncode == 0, result.stderr
    findings = scan_dump(dump)
    # Functions ran eagerly: no graph traces, one Execution per op.
    assert findings.extra["scan"]["traces_read"] == 0
    origin = findings.origin
    assert origin is not None and (origin.file, origin.line) == marker_line("log_softmax.py")
    assert origin.op.type == "Log" and origin.op.execution_index is not None


def test_eager_flag_reaches_dataset_map_functions(tmp_path: Path) -> None:
    """With --eager, tf.data map functions run as Python: their ops are recorded with the user's line."""
    dump = tmp_path / "dump"
    result = nanlens("run", "--eager", "--dump", str(dump), "--", "dataset_map_nan.py")
    assert result.returncode == 0, result.stderr
    origin = scan_dump(dump).origin
    assert origin is not None and (origin.file, origin.line) == marker_line("dataset_map_nan.py")


def test_eager_context_manager_restores_settings(tmp_path: Path) -> None:
    script = tmp_path / "toggle.py"
    script.write_text(
        "import tensorflow as tf\n"
        "import pyadapter\n"
        "from tensorflow.python.data.ops import debug_mode\n"
        "with pyadapter.eager():\n"
        "    print('inside', tf.config.functions_run_eagerly(), debug_mode.DEBUG_MODE)\n"
        "print('after', tf.config.functions_run_eagerly(), debug_mode.DEBUG_MODE)\n"
    )
    result = subprocess.run(
        [sys.executable, str(script)], env=env(), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "inside True True" in result.stdout
    assert "after False False" in result.stdout


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_killed_run_leaves_a_scannable_dump(tmp_path: Path, sig: signal.Signals) -> None:
    dump = tmp_path / "dump"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyadapter", "run", "--dump", str(dump), "--", "killed_run.py"],
        cwd=PROGRAMS,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "ready", proc.stderr.read() if proc.stderr else ""
        # While the script sleeps, the flush thread must get the NaN step onto disk within a few seconds.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if dump.is_dir() and _origin_or_none(dump) is not None:
                break
            time.sleep(0.5)
        else:
            pytest.fail("the running program's dump never showed the NaN on disk")
        os.kill(proc.pid, sig)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if sig == signal.SIGTERM:
        assert proc.returncode == 128 + signal.SIGTERM, stderr
        assert f"dump written to {dump}" in stderr
    else:
        assert proc.returncode == -signal.SIGKILL
    findings = scan_dump(dump)
    origin = findings.origin
    assert origin is not None, findings.extra["warnings"]
    assert (origin.file, origin.line) == marker_line("killed_run.py")


def _origin_or_none(dump: Path):  # type: ignore[no-untyped-def]
    try:
        return scan_dump(dump).origin
    except ScanError:
        return None


def test_missing_script_is_a_one_line_error(tmp_path: Path) -> None:
    result = nanlens("run", "--dump", str(tmp_path / "d"), "--", "no_such_script.py")
    assert result.returncode == 2
    assert result.stderr.strip() == "nanlens: error: no such script: no_such_script.py"


def test_refuses_a_directory_that_already_holds_a_dump(tmp_path: Path) -> None:
    (tmp_path / "tfdbg_events.1.host.metadata").write_bytes(b"")
    result = nanlens("run", "--dump", str(tmp_path), "--", "log_softmax.py")
    assert result.returncode == 2
    assert "already holds a dump" in result.stderr and "Traceback" not in result.stderr
