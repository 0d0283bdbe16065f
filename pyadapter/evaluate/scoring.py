"""Scoring: one row per program (expected vs found line, op, time, replay verdicts) and the summary counts."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyadapter.evaluate.runner import Outcome


@dataclass
class Location:
    file: str  # absolute
    line: int  # in a notebook: the line within the cell
    cell: int | None = None  # in a notebook: the cell's 0-based index among all its cells

    def show(self, base: Path) -> str:
        cell = f" (cell {self.cell})" if self.cell is not None else ""
        return f"{display_path(self.file, base)}:{self.line}{cell}"

    def same_place(self, other: Location) -> bool:
        """Same file, line and (for a notebook) cell."""
        return same_file(self.file, other.file) and self.line == other.line and self.cell == other.cell


@dataclass
class Row:
    program: str
    path: str
    method: str
    expected: Location | None
    title: str = ""
    found: Location | None = None
    role: str | None = None  # origin / backward-origin
    op: str | None = None  # the origin op's type
    op_name: str | None = None
    exact_line: bool = False
    reproduced: dict[str, bool | None] = field(default_factory=lambda: {"graph": None, "eager": None})
    check_numerics_op: str | None = None
    check_numerics_line: Location | None = None
    check_numerics_agree: bool | None = None  # None when check_numerics did not name an op (or was not run)
    seconds: dict[str, float] = field(default_factory=dict)
    message: str = ""
    error: str | None = None

    def to_json(self, base: Path) -> dict[str, Any]:
        def loc(location: Location | None) -> dict[str, Any] | None:
            if location is None:
                return None
            out: dict[str, Any] = {"file": display_path(location.file, base), "line": location.line,
                                   "path": location.file}
            if location.cell is not None:
                out["cell"] = location.cell
            return out

        return {
            "program": self.program,
            "title": self.title,
            "path": self.path,
            "method": self.method,
            "expected": loc(self.expected),
            "found": loc(self.found),
            "role": self.role,
            "op": self.op,
            "op_name": self.op_name,
            "exact_line": self.exact_line,
            "reproduced": self.reproduced,
            "check_numerics": {
                "op": self.check_numerics_op,
                "line": loc(self.check_numerics_line),
                "agree": self.check_numerics_agree,
            },
            "seconds": {k: round(v, 2) for k, v in self.seconds.items()},
            "message": self.message,
            "error": self.error,
        }


def display_path(file: str, base: Path) -> str:
    """`file` relative to the zoo folder when inside it (e.g. ``zoolib/divergences.py``); an installed package's
    file from its package folder on (``tensorflow/python/...``); else as given."""
    try:
        if Path(file).resolve().is_relative_to(base.resolve()):
            return os.path.relpath(file, base)
    except (ValueError, OSError):
        return file
    for marker in ("site-packages", "dist-packages"):
        parts = Path(file).parts
        if marker in parts:
            return "/".join(parts[parts.index(marker) + 1:])
    return file


def same_file(a: str, b: str) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return a == b


def origin_of(findings: dict[str, Any] | None) -> dict[str, Any] | None:
    origin = (findings or {}).get("origin")
    return origin if isinstance(origin, dict) else None


def score(outcome: Outcome) -> Row:
    program = outcome.program
    expected = (Location(str(program.origin.file), program.origin.line, program.origin.cell)
                if program.origin else None)
    row = Row(
        program=program.name,
        path=str(program.path),
        method=program.method,
        expected=expected,
        title=program.title,
        reproduced=dict(outcome.reproduced),
        seconds=dict(outcome.seconds),
        error=outcome.error,
    )
    origin = origin_of(outcome.findings)
    if origin is not None:
        cell = origin.get("cell")
        row.found = Location(str(origin.get("file", "")), int(origin.get("line", 0)),
                             cell if isinstance(cell, int) and not isinstance(cell, bool) else None)
        row.role = origin.get("role")
        op = origin.get("op") or {}
        row.op, row.op_name = op.get("type"), op.get("name")
        row.message = str(origin.get("message", ""))
        # A notebook finding is exact when it names the .ipynb, the marked cell and the line within that cell.
        row.exact_line = expected is not None and row.found.same_place(expected)
    elif outcome.findings is not None and row.error is None:
        row.error = "located no origin (the findings say the step stayed finite)"
    cn = outcome.check_numerics
    if cn is not None:
        row.check_numerics_op = cn.op_type
        if cn.file and cn.line:
            row.check_numerics_line = Location(cn.file, cn.line)
        if cn.op_type is not None and row.op is not None:
            row.check_numerics_agree = cn.op_type == row.op
    return row


@dataclass
class Summary:
    programs: int
    exact_line: int
    reproduced: int  # bundles whose step reproduced non-finite values in both graph and eager replay
    reproduced_graph: int
    reproduced_eager: int
    bundles: int  # rows that had a bundle to replay
    check_numerics_agree: int
    check_numerics_reported: int  # rows where check_numerics named an op and we found an origin to compare
    errors: int

    @property
    def exact_fraction(self) -> float:
        return self.exact_line / self.programs if self.programs else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "programs": self.programs,
            "exact_line": self.exact_line,
            "exact_fraction": round(self.exact_fraction, 4),
            "reproduced": self.reproduced,
            "reproduced_graph": self.reproduced_graph,
            "reproduced_eager": self.reproduced_eager,
            "bundles": self.bundles,
            "check_numerics_agree": self.check_numerics_agree,
            "check_numerics_compared": self.check_numerics_reported,
            "errors": self.errors,
        }


def summarize(rows: list[Row]) -> Summary:
    replayed = [r for r in rows if r.method == "capture" and any(v is not None for v in r.reproduced.values())]
    return Summary(
        programs=len(rows),
        exact_line=sum(r.exact_line for r in rows),
        reproduced=sum(bool(r.reproduced.get("graph")) and bool(r.reproduced.get("eager")) for r in replayed),
        reproduced_graph=sum(bool(r.reproduced.get("graph")) for r in replayed),
        reproduced_eager=sum(bool(r.reproduced.get("eager")) for r in replayed),
        bundles=len(replayed),
        check_numerics_agree=sum(r.check_numerics_agree is True for r in rows),
        check_numerics_reported=sum(r.check_numerics_agree is not None for r in rows),
        errors=sum(r.error is not None for r in rows),
    )
