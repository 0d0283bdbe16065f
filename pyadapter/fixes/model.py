"""Quick-fix records, the epsilon a dtype can hold, and applying edits to text (no TensorFlow, no editor)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TextEdit:
    """Replace ``[start_col, end_col)`` of one 1-based ``line`` (columns count characters) with ``new_text``."""

    line: int
    start_col: int
    end_col: int
    new_text: str


@dataclass
class QuickFix:
    """One rewrite offered for an origin line: its title and the edits that make it."""

    title: str
    edits: list[TextEdit] = field(default_factory=list)
    preferred: bool = False  # the one an editor applies on "auto fix"


# Half precision cannot hold 1e-7 (float16's smallest normal is 6.1e-5): a clamp uses 1e-4; a value added to
# O(1) numbers (or kept apart from 1.0) uses 1e-3, the float16 spacing near 1 being 9.8e-4.
_CLAMP_EPSILON = {
    "float16": 1e-4,
    "half": 1e-4,
    "bfloat16": 1e-4,
    "float32": 1e-7,
    "float": 1e-7,
    "float64": 1e-12,
    "double": 1e-12,
}
_ADD_EPSILON = {"float16": 1e-3, "half": 1e-3, "bfloat16": 1e-3}


def epsilon(dtype: str | None, additive: bool = False) -> float:
    """The epsilon a fix uses for a tensor of ``dtype`` ('float16', 'float32', ...); float32's when unknown."""
    name = (dtype or "float32").lower().removeprefix("tf.")
    if additive and name in _ADD_EPSILON:
        return _ADD_EPSILON[name]
    return _CLAMP_EPSILON.get(name, 1e-7)


def format_epsilon(value: float) -> str:
    """1e-07 -> '1e-7': how a person writes it."""
    mantissa, _, exponent = f"{value:e}".partition("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def apply_edits(text: str, edits: list[TextEdit]) -> str:
    """The text with the edits made (edits must not overlap); what an editor does with a WorkspaceEdit."""
    lines = text.splitlines(keepends=True)
    for edit in sorted(edits, key=lambda e: (e.line, e.start_col), reverse=True):
        if not 0 < edit.line <= len(lines):
            raise ValueError(f"edit of line {edit.line} outside the text ({len(lines)} lines)")
        line = lines[edit.line - 1]
        lines[edit.line - 1] = line[: edit.start_col] + edit.new_text + line[edit.end_col :]
    return "".join(lines)
