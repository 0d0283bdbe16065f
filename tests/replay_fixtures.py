"""Real capture bundles for the replay, locate and debugger tests, made once per test session.

Each program in tests/programs/replay_*.py trains until its NaN, with NanGuard (Keras fit) or guard_step (custom
loop), and marks the line that makes the NaN with `# ORIGIN`. The programs are started together on first
use (they are independent; together they take about as long as the slowest), and each is waited for when a test
first needs its bundle. Test modules wrap `captured(name, tmp_path_factory)` in a session-scoped fixture.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

PROGRAMS = Path(__file__).parent / "programs"
REPO = Path(__file__).parent.parent


@dataclass(frozen=True)
class Program:
    name: str
    script: str  # run with the capture directory as its one argument
    origin_file: str  # the file holding the `# ORIGIN` line


REPLAY_PROGRAMS = {
    "keras_layer": Program("keras_layer", "replay_keras_layer.py", "replay_keras_layer.py"),
    "custom_loop": Program("custom_loop", "replay_custom_loop.py", "replay_custom_loop.py"),
    "loss_module": Program("loss_module", "replay_loss_main.py", "replay_loss_lib.py"),
    "subclassed": Program("subclassed", "replay_subclassed.py", "replay_subclassed.py"),
    # Shaped as users write them (training at module level): replayed by re-entry.
    "module_level_vae": Program(
        "module_level_vae", "replay_module_level_vae.py", "replay_module_level_vae.py"
    ),
    "subclass_args": Program("subclass_args", "replay_subclass_args.py", "replay_subclass_args.py"),
    "loop_in_function": Program(
        "loop_in_function", "replay_loop_in_function.py", "replay_loop_in_function.py"
    ),
}


@dataclass(frozen=True)
class Captured:
    program: Program
    bundle: Path
    script: Path
    origin_file: Path
    origin_line: int


def origin_line(path: Path) -> int:
    """The 1-based line that carries the `# ORIGIN` marker (exactly one per program)."""
    lines = [
        i for i, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if "# ORIGIN" in text
    ]
    assert len(lines) == 1, f"{path} must mark exactly one line with # ORIGIN, found {lines}"
    return lines[0]


def quiet_env() -> dict[str, str]:
    env = dict(os.environ)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return env


_started: dict[str, tuple[subprocess.Popen[str], Path]] = {}
_done: dict[str, Captured] = {}


def _start_all(root: Path) -> None:
    for name, program in REPLAY_PROGRAMS.items():
        capture_dir = root / name
        _started[name] = (
            subprocess.Popen(
                [sys.executable, str(PROGRAMS / program.script), str(capture_dir)],
                cwd=str(root),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=quiet_env(),
            ),
            capture_dir,
        )


def captured(name: str, tmp_path_factory: pytest.TempPathFactory) -> Captured:
    """The bundle `name`'s program wrote (running all programs on first use)."""
    if name in _done:
        return _done[name]
    if not _started:
        _start_all(tmp_path_factory.mktemp("replay-captures"))
    process, capture_dir = _started[name]
    try:
        output, _ = process.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    bundles = (
        [p for p in capture_dir.iterdir() if (p / "manifest.json").is_file()] if capture_dir.is_dir() else []
    )
    assert len(bundles) == 1, (
        f"{name}: expected one capture bundle in {capture_dir}, output:\n{output[-3000:]}"
    )
    program = REPLAY_PROGRAMS[name]
    origin_file = PROGRAMS / program.origin_file
    _done[name] = Captured(
        program=program,
        bundle=bundles[0],
        script=PROGRAMS / program.script,
        origin_file=origin_file,
        origin_line=origin_line(origin_file),
    )
    return _done[name]


def nanlens(*args: str, timeout: float = 300, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the CLI as a user does (`python -m pyadapter`, the same as `nanlens`)."""
    return subprocess.run(
        [sys.executable, "-m", "pyadapter", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=quiet_env(),
        cwd=str(cwd) if cwd else None,
    )
