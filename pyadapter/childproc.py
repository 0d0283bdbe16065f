"""Running a NaN Lens child: this interpreter on one of our modules, started and stopped by the same rules.

Every child (the replay worker of `nanlens locate`, the input-pipeline re-run, the server's locate worker and its
fix-verifying replay) gets the same environment (TensorFlow's C++ logging quiet unless the user set it, unbuffered
output so progress lines arrive as they are printed), is killed when it outlives its time or when the caller is
interrupted or cancelled (never orphaned), and is registered while it runs so a server shutting down can stop it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

Stream = Literal["pipe", "merge", "inherit", "discard"]

# Children still running, so a server shutting down can stop them rather than orphan them.
_running: set[subprocess.Popen] = set()
_running_lock = threading.Lock()


@dataclass
class ChildRun:
    """How a child ended and what it printed (what was piped and not handed to ``on_line``)."""

    returncode: int
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    cancelled: bool = False


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a child: quiet TensorFlow (unless set), unbuffered output, then ``extra``."""
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


@contextlib.contextmanager
def _registered(proc: subprocess.Popen) -> Iterator[None]:
    with _running_lock:
        _running.add(proc)
    try:
        yield
    finally:
        with _running_lock:
            _running.discard(proc)


def terminate_children() -> None:
    """Stop every child still running (a server shutting down)."""
    with _running_lock:
        children = list(_running)
    for proc in children:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    """terminate, then kill if it does not go within 5 s; reaps the process."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _pipe(mode: Stream) -> int | None:
    return {
        "pipe": subprocess.PIPE,
        "discard": subprocess.DEVNULL,
        "inherit": None,
        "merge": subprocess.STDOUT,
    }[mode]


def run_python(
    args: list[str],
    *,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    stdout: Stream = "pipe",
    stderr: Stream = "pipe",
    on_line: Callable[[str], None] | None = None,
    cancel: threading.Event | None = None,
) -> ChildRun:
    """Run ``python ARGS`` (this interpreter) to its end and return how it ended.

    ``stderr="merge"`` sends it into stdout. With ``on_line``, stdout is read line by line as the child prints and
    every line goes to it (not into ``ChildRun.stdout``). ``timeout`` / ``cancel`` stop the child (``timed_out`` /
    ``cancelled`` set); an exception in the caller (KeyboardInterrupt) stops it too and propagates. Raises OSError
    when the child cannot be started at all.
    """
    if stdout == "merge":
        raise ValueError("stdout cannot be merged into itself")
    proc = subprocess.Popen(
        [sys.executable, *args],
        cwd=cwd,
        env=child_env(env),
        stdin=subprocess.DEVNULL,
        stdout=_pipe(stdout),
        stderr=_pipe(stderr),
        text=True,
        encoding="utf-8",
        errors="replace",
    )
    stopped = threading.Event()

    def watch_cancel() -> None:
        assert cancel is not None
        while proc.poll() is None and not stopped.is_set():
            if cancel.wait(0.5):
                _stop(proc)
                return

    with _registered(proc):
        if cancel is not None:
            threading.Thread(target=watch_cancel, name="nanlens-child-cancel", daemon=True).start()
        try:
            if on_line is not None and proc.stdout is not None:
                out, err = _stream(proc, on_line, timeout)
            else:
                out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return ChildRun(proc.returncode, timed_out=True)
        except BaseException:  # interrupted: leave nothing running
            proc.kill()
            proc.wait()
            raise
        finally:
            stopped.set()
    return ChildRun(proc.returncode, out or "", err or "", cancelled=bool(cancel and cancel.is_set()))


def _stream(proc: subprocess.Popen, on_line: Callable[[str], None], timeout: float | None) -> tuple[str, str]:
    """Hand stdout's lines to ``on_line`` as they come (in a thread, so ``timeout`` holds while the child is
    silent); returns ("", stderr)."""
    errors: list[str] = []

    def read_stdout() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            on_line(line.rstrip("\n"))

    def read_stderr() -> None:
        assert proc.stderr is not None
        errors.append(proc.stderr.read())

    readers = [threading.Thread(target=read_stdout, name="nanlens-child-stdout", daemon=True)]
    if proc.stderr is not None:
        readers.append(threading.Thread(target=read_stderr, name="nanlens-child-stderr", daemon=True))
    for reader in readers:
        reader.start()
    proc.wait(timeout=timeout)
    for reader in readers:
        reader.join(timeout=5)
    return "", "".join(errors)
