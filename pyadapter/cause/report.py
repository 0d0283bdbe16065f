"""The cause in words for the CLI (``nanlens locate`` / ``nanlens scan``): its sentence and the line to change."""

from __future__ import annotations

from pyadapter.cause.model import Cause


def cause_lines(cause: Cause | None) -> list[str]:
    """``cause: divergence — <summary>`` and ``change: file:line (cell N): what``; [] without a cause."""
    if cause is None:
        return []
    lines = [f"cause: {cause.kind} — {cause.summary}"]
    if cause.change is not None:
        change = cause.change
        cell = f" (cell {change.cell}, line {change.line} of the cell)" if change.cell is not None else ""
        lines.append(f"  change: {change.file}:{change.line}{cell}: {change.what}")
    where = cause.provenance or {}
    if where.get("note"):
        lines.append(f"  note: {where['note']}")
    return lines
