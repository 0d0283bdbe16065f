"""IPython 9's ``%autoreload 2`` recompiles an edited function alone, from ``ast.unparse`` of it, under its module's
file name: a frame of it names a line counted from the function's first line (a loss's ``return`` on line 10 of
losses.py was "losses.py:2", a blank line). `pyadapter.dump.reloaded_lines` maps such frames back to the file.
The recompiled code here is compiled as autoreload compiles it (its ``deduperreload`` steps), and the line a frame
names is Python's own, read from a traceback; the real kernel's case is in test_notebook.py."""

from __future__ import annotations

import ast
import textwrap
import traceback
from pathlib import Path

from pyadapter.dump.reloaded_lines import ReloadedLines
from pyadapter.findings import Frame

LOSSES = """import math


def mse(a, b):
    return (a - b) ** 2


def rmsle(a, b):
    # the model predicts the price itself
    scale = 1.0
    return scale * math.sqrt(
        math.log(a + 1.0) - math.log(b + 1.0))


class Losses:
    @staticmethod
    def first(a):
        # a comment unparse drops
        return math.log(a)
"""


def _recompiled_frame_line(path: Path, name: str, method: bool, *args: float) -> int:
    """The line Python names for the failing statement of `name` recompiled as autoreload does."""
    tree = ast.parse(path.read_text())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)
    code = textwrap.dedent(ast.unparse(node))
    if method:
        code = "class __autoreload_class__:\n" + textwrap.indent(code, "    ")
    scope: dict = {"math": __import__("math")}
    exec(compile(ast.parse(code), str(path), mode="exec", dont_inherit=True), scope, scope)
    function = getattr(scope["__autoreload_class__"], name) if method else scope[name]
    try:
        function(*args)
    except ValueError as exc:
        return traceback.extract_tb(exc.__traceback__)[-1].lineno or 0
    raise AssertionError("the function did not fail")


def test_a_recompiled_function_s_line_is_mapped_back_to_its_file(tmp_path):
    path = tmp_path / "losses.py"
    path.write_text(LOSSES)
    lines = ReloadedLines(lambda p: Path(p).read_text())
    recorded = _recompiled_frame_line(path, "rmsle", False, -3.0, 1.0)
    assert recorded < 8  # counted from the def: a line of mse, or blank, in the file
    (frame,) = lines.correct([Frame(file=str(path), line=recorded, function="rmsle")])
    assert frame.line == 11  # the return statement's first line
    recorded = _recompiled_frame_line(path, "first", True, 0.0)
    (frame,) = lines.correct([Frame(file=str(path), line=recorded, function="first")])
    assert frame.line == 19


def test_a_line_inside_its_function_and_other_names_are_left_as_they_are(tmp_path):
    path = tmp_path / "losses.py"
    path.write_text(LOSSES)
    lines = ReloadedLines(lambda p: Path(p).read_text())
    frames = [
        Frame(file=str(path), line=11, function="rmsle"),  # compiled from the file itself
        Frame(file=str(path), line=2, function="<module>"),
        Frame(file=str(path), line=2, function="not_in_the_file"),
    ]
    assert lines.correct(frames) == frames
