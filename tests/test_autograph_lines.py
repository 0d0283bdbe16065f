"""Autograph records the ops of a function with backslash continuations one line too high per continuation above
them (it unfolds them before parsing): a physics-informed step's ``tf.math.log(kappa)`` was marked on the comment
above it. The frames of converted code are mapped back to the source's lines (`pyadapter.dump.autograph_lines`),
checked here against TensorFlow's own record of a traced function."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from pyadapter.dump.autograph_lines import AutographLines
from pyadapter.findings import Frame

tf = pytest.importorskip("tensorflow")

MODULE = """
import tensorflow as tf

kappa = tf.Variable(0.5)


def inner(a):
    b = tf.reduce_mean(a) + \\
        tf.reduce_sum(a)
    return tf.math.log(kappa) + b  # INNER-LOG


class Loss:
    @tf.function
    def __call__(self, a):
        first = tf.reduce_max(a) + \\
            tf.reduce_min(a)
        second = tf.reduce_sum(a) + \\
            tf.reduce_prod(a)
        # a comment the Sqrt was marked on
        root = tf.sqrt(first + second)  # SQRT
        return root + inner(a)
"""


def _marked(path: Path, marker: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if marker in line)


def _op_frames(graph: object, op_type: str, path: Path) -> list[Frame]:
    (op,) = [op for op in graph.get_operations() if op.type == op_type]  # type: ignore[attr-defined]
    return [Frame(file=f.filename, line=f.lineno, function=f.name) for f in op.traceback]


def test_converted_frames_get_their_source_lines_back(tmp_path: Path) -> None:
    path = tmp_path / "pinn_loss.py"
    path.write_text(MODULE, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("pinn_loss", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    graph = module.Loss().__call__.get_concrete_function(tf.TensorSpec([3])).graph
    lines = AutographLines(lambda p: Path(p).read_text() if os.path.isfile(p) else None)

    for op_type, marker in (("Sqrt", "# SQRT"), ("Log", "# INNER-LOG")):
        frames = _op_frames(graph, op_type, path)
        recorded = [f.line for f in frames if f.file == str(path)][-1]
        assert recorded < _marked(path, marker), (
            "TensorFlow still records it too high: the test shows the bug"
        )
        mapped = [f.line for f in lines.correct(frames) if f.file == str(path)][-1]
        assert mapped == _marked(path, marker), (op_type, recorded, mapped)


def test_frames_outside_converted_code_are_left_as_recorded() -> None:
    """Eager code (no autograph frame on the stack) is recorded where it is."""
    source = "def step(a):\n    b = a + \\\n        a\n    return log(b)\n"
    frames = [Frame(file="/w/train.py", line=4, function="step"), Frame(file="/site/math_ops.py", line=9)]
    lines = AutographLines(lambda p: source if p == "/w/train.py" else None)
    assert lines.correct(frames) == frames
    # Converted, the return is autograph's line 3 (the continued statement counted once): line 4 of the source.
    inside = [
        Frame(file="/site/tensorflow/autograph_util.py", line=41),
        Frame(file="/w/train.py", line=3, function="step"),
        frames[1],
    ]
    assert [f.line for f in lines.correct(inside)] == [41, 4, 9]
