"""Shared helpers for the scan/run tests: run the small TF programs in this folder under `nanlens run`.

The dumps are generated once per test session (two programs at a time) and shared by every test module
that asks for them, whichever module asks first.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

PROGRAMS = Path(__file__).resolve().parent
REPO = PROGRAMS.parent.parent
MARKER = "# ORIGIN"

# program file -> (file holding the ORIGIN marker, expected origin op type, expected role)
EXPECTED: dict[str, tuple[str, str, str]] = {
    "log_softmax.py": ("log_softmax.py", "Log", "origin"),
    "zero_std.py": ("zero_std.py", "RealDiv", "origin"),
    "sqrt_negative.py": ("sqrt_negative.py", "Sqrt", "origin"),
    "exp_overflow.py": ("exp_overflow.py", "Exp", "origin"),
    "exp_sum_overflow.py": ("exp_sum_overflow.py", "Sum", "origin"),
    "softmax_quotient_underflow.py": ("softmax_quotient_underflow.py", "Log", "origin"),
    "multiline_statement.py": ("multiline_statement.py", "Exp", "origin"),
    "keras_poisson_linear.py": ("keras_poisson_linear.py", "Log", "origin"),
    "keras_loss_subclass_log.py": ("keras_loss_subclass_log.py", "Log", "origin"),
    "dataset_map_nan.py": ("dataset_map_nan.py", "Log", "origin"),
    "backward_sqrt.py": ("backward_sqrt.py", "SqrtGrad", "backward-origin"),
    "norm_at_zero.py": ("norm_at_zero.py", "SqrtGrad", "backward-origin"),
    "backward_pow.py": ("backward_pow.py", "Pow", "backward-origin"),
    "backward_atan2.py": ("backward_atan2.py", "RealDiv", "backward-origin"),
    "softmax_masked_log.py": ("softmax_masked_log.py", "Log", "origin"),
    "custom_loss_main.py": ("nanlens_losses.py", "RealDiv", "origin"),
    "keras_fit.py": ("keras_fit.py", "RealDiv", "origin"),
    "eager_program.py": ("eager_program.py", "RealDiv", "origin"),
}


def env() -> dict[str, str]:
    out = dict(os.environ)
    out["TF_CPP_MIN_LOG_LEVEL"] = "2"
    out["PYTHONPATH"] = str(REPO) + os.pathsep + out.get("PYTHONPATH", "")
    return out


def nanlens(*args: str, cwd: Path | None = None, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """Run `python -m pyadapter ARGS` (same as the `nanlens` console script)."""
    return subprocess.run(
        [sys.executable, "-m", "pyadapter", *args],
        cwd=str(cwd or PROGRAMS),
        env=env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def marker_line(file_name: str, marker: str = MARKER) -> tuple[str, int]:
    """(absolute path, line number) of the `# ORIGIN` marker (or another one) in a program."""
    path = PROGRAMS / file_name
    for number, text in enumerate(path.read_text().splitlines(), start=1):
        if marker in text:
            return str(path), number
    raise AssertionError(f"{file_name} has no {marker} marker")


@dataclass
class ProgramRun:
    program: str
    dump: Path
    returncode: int
    stdout: str
    stderr: str


_RUNS: dict[str, ProgramRun] = {}


def run_program(program: str, dump: Path, *extra: str) -> ProgramRun:
    proc = nanlens("run", "--dump", str(dump), *extra, "--", program)
    return ProgramRun(program, dump, proc.returncode, proc.stdout, proc.stderr)


def program_dumps(root: Path) -> dict[str, ProgramRun]:
    """Dumps of every program in EXPECTED (generated on first call, in ``root``)."""
    if not _RUNS:
        root.mkdir(parents=True, exist_ok=True)
        jobs = {name: root / name.replace(".py", "") for name in EXPECTED}
        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = {name: pool.submit(run_program, name, dump) for name, dump in jobs.items()}
            for name, future in futures.items():
                _RUNS[name] = future.result()
    return _RUNS
