"""The lines of converted code after a backslash continuation, as the source has them.

Autograph removes backslash continuations from a function's source before parsing it (``_unfold_continuations`` in
tensorflow/python/autograph/pyct/parser.py), so the lines it maps the function's ops back to count each continued
statement as one line: in a physics-informed training step, ``loss_bc = ... + \\`` over two lines put the
``tf.math.log(kappa)`` of line 74 at line 73, a comment, and every later op one line too high. The frames of
converted code (those inside autograph's own frame on the stack) are mapped back here, from the function's source:
the first line of the statement autograph counted. Code with no continuation is left as it is.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable
from dataclasses import dataclass

from pyadapter.findings import Frame


@dataclass(frozen=True)
class _Function:
    name: str
    start: int  # the first line of its source as inspect.getsource gives it (its first decorator, or def)
    end: int
    # unfolded line number -> the source line that starts it, for the lines at and after the first continuation
    lines: dict[int, int]


def _functions(source: str) -> list[_Function]:
    """The functions of a file whose own source holds a backslash continuation, with their line maps."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    text_lines = source.split("\n")
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.end_lineno is None:
            continue
        start = min([d.lineno for d in node.decorator_list] + [node.lineno])
        end = node.end_lineno
        if not any(text_lines[i - 1].endswith("\\") for i in range(start, min(end, len(text_lines)) + 1)):
            continue
        lines: dict[int, int] = {}
        unfolded = start
        joined = False
        for number in range(start, min(end, len(text_lines)) + 1):
            if not joined:
                lines[unfolded] = number
            joined = text_lines[number - 1].endswith("\\")
            if not joined:
                unfolded += 1
        out.append(_Function(node.name, start, end, lines))
    return out


class AutographLines:
    """Maps the frames of converted code back to their source lines; one per dump host (files parsed once)."""

    def __init__(self, source_text: Callable[[str], str | None]) -> None:
        self._source_text = source_text
        self._files: dict[str, list[_Function]] = {}

    def _functions_of(self, path: str) -> list[_Function]:
        found = self._files.get(path)
        if found is None:
            source = self._source_text(path)
            found = _functions(source) if source is not None and "\\\n" in source else []
            self._files[path] = found
        return found

    def correct(self, frames: list[Frame]) -> list[Frame]:
        """``frames`` (outermost first) with the lines of the frames inside autograph's own frame mapped back."""
        inside = next((i for i, f in enumerate(frames) if _is_autograph_file(f.file)), None)
        if inside is None:
            return frames
        out = list(frames)
        for index in range(inside + 1, len(out)):
            frame = out[index]
            functions = self._functions_of(frame.file)
            if not functions:
                continue
            line = _source_line(functions, frame.function, frame.line)
            if line is not None and line != frame.line:
                out[index] = Frame(file=frame.file, line=line, function=frame.function, cell=frame.cell)
        return out


def _is_autograph_file(path: str) -> bool:
    return "autograph" in os.path.basename(path) or f"{os.sep}autograph{os.sep}" in path


def _source_line(functions: list[_Function], name: str, line: int) -> int | None:
    """The source line of an unfolded ``line`` in the function called ``name``; None when no one function of that
    name holds it (two methods ``call`` of two classes, say: then the line stays as recorded)."""
    holders = [f for f in functions if f.name == name and f.start <= line <= f.end]
    if len(holders) != 1:
        return None
    return holders[0].lines.get(line)
