"""Running a child process with a time limit, killing its whole process group when the limit passes."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Completed:
    returncode: int | None  # None when it timed out
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False


def quiet_tf_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a child that runs TensorFlow: quiet logs, our own overrides on top."""
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def run_bounded(
    argv: Sequence[str], *, cwd: Path, timeout: float, env: dict[str, str] | None = None
) -> Completed:
    """Run argv in its own session; after `timeout` seconds kill the session's process group (the child and
    anything it started) so a hung TensorFlow program cannot outlive the evaluation."""
    started = time.perf_counter()
    with subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            stdout, stderr = proc.communicate()
            return Completed(None, stdout, stderr, time.perf_counter() - started, timed_out=True)
        except BaseException:
            _kill_group(proc)
            raise
    return Completed(proc.returncode, stdout, stderr, time.perf_counter() - started)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def last_line(text: str, limit: int = 300) -> str:
    """The last non-empty line of a child's output, for a one-line error."""
    for line in reversed(text.strip().splitlines()):
        if line.strip():
            return line.strip()[:limit]
    return ""
