"""Reading one line of Python for the fixers: its AST nodes, their text and columns, the tensor namespaces in use.

The whole file is parsed when it parses (so a rewrite can see the enclosing function and the imports); a file
being edited that does not parse falls back to the origin line alone. Columns are characters of the line (the
AST counts UTF-8 bytes).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

NamespaceKind = Literal["tf", "keras", "numpy"]


@dataclass(frozen=True)
class Namespace:
    """How to spell a helper op in the namespace the user's code already uses (tf.*, keras.ops.*, np.*)."""

    prefix: str
    kind: NamespaceKind

    def maximum(self, x: str, value: str) -> str:
        return f"{self.prefix}.maximum({x}, {value})"

    def clip(self, x: str, low: str, high: str) -> str:
        name = "clip_by_value" if self.kind == "tf" else "clip"
        return f"{self.prefix}.{name}({x}, {low}, {high})"

    def divide_no_nan(self, a: str, b: str) -> str | None:
        if self.kind == "tf":
            return f"{self.prefix}.math.divide_no_nan({a}, {b})"
        if self.kind == "keras":
            return f"{self.prefix}.divide_no_nan({a}, {b})"
        return None

    def reduce_max(self, x: str, axis: str) -> str:
        name = "reduce_max" if self.kind == "tf" else "max"
        return f"{self.prefix}.{name}({x}, axis={axis}, keepdims=True)"

    def softmax(self, x: str, axis: str) -> str | None:
        if self.kind == "tf":
            return f"{self.prefix}.nn.softmax({x}, axis={axis})"
        if self.kind == "keras":
            return f"{self.prefix}.softmax({x}, axis={axis})"
        return None

    def where(self, cond: str, a: str, b: str) -> str:
        return f"{self.prefix}.where({cond}, {a}, {b})"

    def ones_like(self, x: str) -> str:
        return f"{self.prefix}.ones_like({x})"


@dataclass
class LineSource:
    """The origin line and what is known around it."""

    text: str  # the line, without its end of line
    line: int  # 1-based
    nodes: list[ast.AST]  # every node that starts and ends on the line
    tree: ast.Module | None  # the whole file, when it parsed
    aliases: dict[str, Namespace] = field(default_factory=dict)  # name a call starts with -> its namespace
    lines: list[str] = field(default_factory=list)  # every line of the source
    _line_number_in_tree: int = 0  # the line's number in the parsed tree (1 when only the line was parsed)
    _col_shift: int = 0  # characters stripped before parsing the line alone

    def span(self, node: ast.AST) -> tuple[int, int] | None:
        """The node's [start, end) columns in the line, or None when it spans several lines."""
        lineno, end_lineno = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        if lineno != self._line_number_in_tree or end_lineno != lineno:
            return None
        stripped = self.text[self._col_shift :]
        raw = stripped.encode("utf-8")
        start = len(raw[: node.col_offset].decode("utf-8", errors="ignore"))  # type: ignore[attr-defined]
        end = len(raw[: node.end_col_offset].decode("utf-8", errors="ignore"))  # type: ignore[attr-defined]
        return start + self._col_shift, end + self._col_shift

    def place(self, node: ast.AST) -> tuple[int, int, int] | None:
        """(1-based line, start, end) of a single-line node anywhere in the parsed file."""
        if self.tree is None:
            span = self.span(node)
            return (self.line, *span) if span is not None else None
        lineno, end_lineno = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        if lineno is None or lineno != end_lineno or not 0 < lineno <= len(self.lines):
            return None
        raw = self.lines[lineno - 1].encode("utf-8")
        start = len(raw[: node.col_offset].decode("utf-8", errors="ignore"))  # type: ignore[attr-defined]
        end = len(raw[: node.end_col_offset].decode("utf-8", errors="ignore"))  # type: ignore[attr-defined]
        return lineno, start, end

    def segment(self, node: ast.AST) -> str:
        span = self.span(node)
        return self.text[span[0] : span[1]] if span is not None else ""

    def default_namespace(self) -> Namespace | None:
        """For `/` and `**`: TensorFlow when imported, else keras.ops, else NumPy."""
        for kind in ("tf", "keras", "numpy"):
            for namespace in self.aliases.values():
                if namespace.kind == kind:
                    return namespace
        return None

    def namespace_of(self, call: ast.Call) -> Namespace | None:
        """The namespace of a call like tf.math.log / keras.ops.log / ops.log / np.log; None for other calls."""
        name = dotted_name(call.func)
        if name is None or "." not in name:
            return None
        head = name.rsplit(".", 1)[0]
        for prefix in sorted(self.aliases, key=len, reverse=True):
            if head == prefix or head.startswith(prefix + "."):
                return self.aliases[prefix]
        return None

    def enclosing_scope(self) -> ast.AST | None:
        """The innermost function (else the module) holding the line."""
        if self.tree is None:
            return None
        best: ast.AST = self.tree
        for node in ast.walk(self.tree):
            if (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and node.lineno <= self.line <= (node.end_lineno or node.lineno)
                and node.lineno >= getattr(best, "lineno", 0)
            ):
                best = node
        return best


def dotted_name(node: ast.AST) -> str | None:
    """'tf.math.log' for the expression tf.math.log; None for anything but names and attributes."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def last_name(call: ast.Call) -> str | None:
    name = dotted_name(call.func)
    return name.rsplit(".", 1)[-1] if name else None


def _aliases(tree: ast.Module | None, text: str) -> dict[str, Namespace]:
    aliases: dict[str, Namespace] = {}
    if tree is None:  # only the line: guess from the usual spellings it uses
        for prefix, kind in (("tf", "tf"), ("keras.ops", "keras"), ("ops", "keras"), ("np", "numpy")):
            if f"{prefix}." in text:
                aliases[prefix] = Namespace(prefix, kind)  # type: ignore[arg-type]
        return aliases
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for item in node.names:
                bound = item.asname or item.name
                if item.name == "tensorflow":
                    aliases[bound] = Namespace(bound, "tf")
                elif item.name in ("keras", "tensorflow.keras"):
                    aliases[f"{bound}.ops"] = Namespace(f"{bound}.ops", "keras")
                elif item.name == "keras.ops":
                    aliases[bound] = Namespace(bound, "keras")
                elif item.name == "numpy":
                    aliases[bound] = Namespace(bound, "numpy")
        elif isinstance(node, ast.ImportFrom) and node.module:
            for item in node.names:
                bound = item.asname or item.name
                if node.module in ("keras", "tensorflow") and item.name == "ops":
                    aliases[bound] = Namespace(bound, "keras")
                elif node.module == "tensorflow" and item.name == "keras":
                    aliases[f"{bound}.ops"] = Namespace(f"{bound}.ops", "keras")
    return aliases


def read_line(source: str, line: int) -> LineSource | None:
    """The parsed line ``line`` (1-based) of ``source``; None when it is out of range or does not parse."""
    lines = source.splitlines()
    if not 0 < line <= len(lines):
        return None
    text = lines[line - 1]
    try:
        tree: ast.Module | None = ast.parse(source)
        number, shift = line, 0
    except SyntaxError:
        tree = None
    if tree is None:
        shift = len(text) - len(text.lstrip())
        try:
            alone = ast.parse(text.strip())
        except SyntaxError:
            return None
        number = 1
    root = tree if tree is not None else alone
    nodes = [
        n
        for n in _walk(root)
        if getattr(n, "lineno", None) == number and getattr(n, "end_lineno", None) == number
    ]
    out = LineSource(text=text, line=line, nodes=nodes, tree=tree, aliases=_aliases(tree, text), lines=lines)
    out._line_number_in_tree, out._col_shift = number, shift
    return out


def _walk(root: ast.AST) -> Iterator[ast.AST]:
    yield from ast.walk(root)
