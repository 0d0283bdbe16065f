"""Run a small TensorFlow cluster of worker processes on 127.0.0.1 (MultiWorkerMirroredStrategy tests).

Each worker gets TF_CONFIG with free ports; all are started together, waited for with a deadline and killed
(process group) if it passes, so a hang fails the test instead of the CI run.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def free_ports(n: int) -> list[int]:
    sockets = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass
class WorkerRun:
    index: int
    returncode: int | None  # None: killed at the deadline
    stdout: str
    stderr: str

    def tail(self, lines: int = 25) -> str:
        return f"worker {self.index} rc={self.returncode}\n" + "\n".join(self.stderr.splitlines()[-lines:])


def run_cluster(
    argv_for: list[list[str]], *, cwd: Path, timeout: float = 240.0, extra_env: dict[str, str] | None = None
) -> list[WorkerRun]:
    """Starts one process per argv (worker i gets argv_for[i]) as a cluster; returns when all exit or at the
    deadline (then every worker is killed and its returncode is None)."""
    ports = free_ports(len(argv_for))
    workers = [f"127.0.0.1:{p}" for p in ports]
    procs = []
    logs = []
    for index, argv in enumerate(argv_for):
        env = dict(os.environ)
        env.update(extra_env or {})
        env["TF_CONFIG"] = json.dumps(
            {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        )
        env["TF_CPP_MIN_LOG_LEVEL"] = "2"
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        env["CUDA_VISIBLE_DEVICES"] = ""
        out = open(cwd / f"worker-{index}.out", "w+", encoding="utf-8")  # noqa: SIM115 - read back below
        err = open(cwd / f"worker-{index}.err", "w+", encoding="utf-8")  # noqa: SIM115
        logs.append((out, err))
        procs.append(
            subprocess.Popen(
                [sys.executable, *argv],
                cwd=cwd,
                env=env,
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
    deadline = time.monotonic() + timeout
    codes: list[int | None] = [None] * len(procs)
    try:
        for i, proc in enumerate(procs):
            try:
                codes[i] = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                codes[i] = None
    finally:
        for proc in procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
    runs = []
    for i, (out, err) in enumerate(logs):
        out.seek(0)
        err.seek(0)
        runs.append(WorkerRun(i, codes[i], out.read(), err.read()))
        out.close()
        err.close()
    return runs
