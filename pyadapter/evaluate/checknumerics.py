"""TensorFlow's own answer: run a program under ``tf.debugging.enable_check_numerics()`` and read which op fired.

check_numerics raises InvalidArgumentError at the first op (in execution order) whose output holds NaN/Inf:
``!!! Detected Infinity or NaN in output 0 of graph op "Log" (# of outputs: 1) !!!``. We take that op type, and
the innermost frame of "defined at" that lies in the zoo folder, as a second opinion next to our own origin.
"""

from __future__ import annotations

import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pyadapter.evaluate.processes import last_line, quiet_tf_env, run_bounded

# Runs the program as __main__ (so its `if __name__ == "__main__":` block trains) with check_numerics on.
_BOOTSTRAP = """\
import runpy, sys
program = sys.argv[1]
sys.argv = [program]
sys.path.insert(0, __import__("os").path.dirname(program))
import tensorflow as tf
tf.debugging.enable_check_numerics()
runpy.run_path(program, run_name="__main__")
"""

_DETECTED = re.compile(r'Detected Infinity or NaN in output (\d+) of (graph|eagerly-executing) op "([^"]+)"')
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')
_BANNER_FRAME = re.compile(r"^\s*\+ (\S+) \(L(\d+)\) ", re.MULTILINE)


@dataclass
class CheckNumericsResult:
    op_type: str | None  # None when check_numerics did not fire
    op_kind: str | None = None  # "graph" or "eagerly-executing"
    file: str | None = None  # innermost frame inside the zoo folder, where TensorFlow tells one
    line: int | None = None
    seconds: float = 0.0
    error: str | None = None  # the run failed for another reason, or timed out

    def to_json(self) -> dict[str, object]:
        return {
            "op": self.op_type,
            "kind": self.op_kind,
            "file": self.file,
            "line": self.line,
            "seconds": round(self.seconds, 2),
            "error": self.error,
        }


def parse_check_numerics(output: str, zoo_dir: Path | None = None) -> CheckNumericsResult:
    """The op type (and, when listed, the zoo-local creation line) from a check_numerics failure's output."""
    found = _DETECTED.search(output)
    if not found:
        return CheckNumericsResult(op_type=None)
    result = CheckNumericsResult(op_type=found.group(3), op_kind=found.group(2))
    if zoo_dir is None:
        return result
    root = zoo_dir.resolve()
    # Preferred: the banner's own "Stack trace of op's creation" (outermost first, `+ PATH (L32) func`, long paths
    # shortened to `...tail`), which the check_numerics callback recorded when the op was made; it is right also
    # for ops in tf.data functions, whose node traceback only shows where the pipeline was started.
    zoo_files = [p.resolve() for p in root.rglob("*.py")]
    for match in _BANNER_FRAME.finditer(output, found.end()):
        text = match.group(1)
        tail = text[3:] if text.startswith("...") else None
        for file in zoo_files:
            if (tail is not None and str(file).endswith(tail)) or (
                tail is None and Path(text).resolve() == file
            ):
                result.file, result.line = str(file), int(match.group(2))
    if result.file is not None:
        return result
    # Else the graph node's "defined at (most recent call last)" frames, or for an eager op the Python traceback:
    # both come before the banner, outermost first.
    defined_at = output.rfind("defined at", 0, found.start())
    for match in _FRAME.finditer(output, max(defined_at, 0), found.start()):
        file = Path(match.group(1)).resolve()
        if file.is_relative_to(root):
            result.file, result.line = str(file), int(match.group(2))
    return result


def run_check_numerics(program: Path, zoo_dir: Path, timeout: float) -> CheckNumericsResult:
    """Run the program once under check_numerics, in a scratch folder, and parse what fired. A notebook runs in
    a Jupyter kernel with a first cell of its own that enables check_numerics; its failing cell's traceback
    names the op (its frames are the kernel's cell files, so no zoo line is read from them)."""
    from pyadapter.evaluate.notebook import is_notebook
    from pyadapter.evaluate.notebook import run_argv as notebook_argv

    notebook = is_notebook(program)
    with tempfile.TemporaryDirectory(prefix="nanlens-cn-") as scratch:
        env = quiet_tf_env({"NANLENS_CAPTURE_DIR": str(Path(scratch) / "captures")})
        if notebook:
            argv = notebook_argv(program, check_numerics=True)
        else:
            argv = [sys.executable, "-c", _BOOTSTRAP, str(program.resolve())]
        done = run_bounded(argv, cwd=Path(scratch), timeout=timeout, env=env)
    if done.timed_out:
        return CheckNumericsResult(op_type=None, seconds=done.seconds, error=f"timed out after {timeout:g} s")
    result = parse_check_numerics(done.stdout + "\n" + done.stderr, zoo_dir)
    result.seconds = done.seconds
    ok_codes = (0, 1, 3) if notebook else (0, 1)  # a notebook's cell that raised is exit status 3
    if result.op_type is None and done.returncode not in ok_codes:
        result.error = f"exit {done.returncode}: {last_line(done.stderr)}"
    return result
