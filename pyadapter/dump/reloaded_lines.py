"""The lines of a function IPython's ``%autoreload`` recompiled alone, as its file has them.

IPython 9's ``%autoreload 2`` (its ``deduperreload``) patches a function edited in a module with code compiled from
``ast.unparse`` of that one function, under the module's file name: its lines count from the function's first line
(1 = its first decorator or ``def``; a method's from a wrapping ``class`` line), not from the top of the file, and
unparse drops comments and joins wrapped expressions. A dump's frame named ``losses.py:2``, a blank line, for the
``return`` on line 10. A user frame of a function ``f`` whose line lies outside every ``def f`` of its file is
mapped back here: ``f`` is unparsed as autoreload does, and the statement at the frame's line of that text is found
again in the file. A line inside a ``def f`` (every frame of code compiled from its file) is left as it is.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Callable

from pyadapter.dump.frames import is_user_file
from pyadapter.findings import Frame


class ReloadedLines:
    """Maps frames of recompiled functions back to their file's lines; one per dump host (files parsed once)."""

    def __init__(self, source_text: Callable[[str], str | None]) -> None:
        self._source_text = source_text
        self._trees: dict[str, ast.Module | None] = {}

    def _tree(self, path: str) -> ast.Module | None:
        if path not in self._trees:
            source = self._source_text(path)
            try:
                self._trees[path] = ast.parse(source) if source is not None else None
            except (SyntaxError, ValueError):
                self._trees[path] = None
        return self._trees[path]

    def correct(self, frames: list[Frame]) -> list[Frame]:
        """``frames`` with the lines of recompiled functions' frames mapped back to the file's."""
        out = list(frames)
        for index, frame in enumerate(out):
            if frame.cell is not None or not frame.function.isidentifier() or not is_user_file(frame.file):
                continue
            tree = self._tree(frame.file)
            line = _file_line(tree, frame.function, frame.line) if tree is not None else None
            if line is not None and line != frame.line:
                out[index] = Frame(file=frame.file, line=line, function=frame.function, cell=frame.cell)
        return out


def _file_line(tree: ast.Module, name: str, line: int) -> int | None:
    """The file's line of line `line` of function `name` recompiled alone; None when the line is one of a ``def
    name`` of the file already, or when the file has no one function of that name."""
    found: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, bool]] = []
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and child.name == name:
                found.append((child, isinstance(parent, ast.ClassDef)))
    if not found:
        return None
    for node, _ in found:
        start = min([d.lineno for d in node.decorator_list] + [node.lineno])
        if start <= line <= (node.end_lineno or node.lineno):
            return None
    if len(found) != 1:
        return None
    node, method = found[0]
    try:
        again = ast.parse(textwrap.dedent(ast.unparse(node))).body[0]
    except (SyntaxError, ValueError, IndexError):
        return None
    offset = 1 if method else 0  # autoreload compiles a method inside "class __autoreload_class__:"
    for recompiled, original in zip(ast.walk(again), ast.walk(node), strict=False):
        if isinstance(recompiled, ast.stmt) and recompiled.lineno + offset == line:
            return original.lineno if isinstance(original, ast.stmt) else None
    return None
