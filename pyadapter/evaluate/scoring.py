"""Scoring: one row per program (expected vs found line and cause, op, time, replay verdicts) and the summary.

The line found is the findings' ``cause.change`` (the line to change for the cause, e.g. the optimizer's
construction for a divergence) when the findings carry one, else the origin finding's line. The cause found is
``cause.kind``; findings without a ``cause`` count as "unknown".
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyadapter.evaluate.runner import Outcome
from pyadapter.findings_text import place_text


@dataclass
class Location:
    file: str  # absolute
    line: int  # in a notebook: the line within the cell
    cell: int | None = None  # in a notebook: the cell's 0-based index among all its cells

    def show(self, base: Path) -> str:
        return place_text(display_path(self.file, base), self.line, self.cell)

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
    line_from: str | None = None  # where `found` came from: "cause.change" or "origin"
    expected_cause: str | None = None  # the program's # CAUSE: kind; None when it marks none
    cause: str | None = None  # the cause found: the findings' cause.kind, "unknown" without one
    cause_summary: str = ""
    cause_hit: bool | None = None  # None when the program marks no cause or nothing was located
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
            out: dict[str, Any] = {
                "file": display_path(location.file, base),
                "line": location.line,
                "path": location.file,
            }
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
            "line_from": self.line_from,
            "cause": {
                "expected": self.expected_cause,
                "found": self.cause,
                "hit": self.cause_hit,
                "summary": self.cause_summary,
            },
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
            return "/".join(parts[parts.index(marker) + 1 :])
    return file


def same_file(a: str, b: str) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return a == b


def origin_of(findings: dict[str, Any] | None) -> dict[str, Any] | None:
    origin = (findings or {}).get("origin")
    return origin if isinstance(origin, dict) else None


def cause_of(findings: dict[str, Any] | None) -> dict[str, Any] | None:
    cause = (findings or {}).get("cause")
    return cause if isinstance(cause, dict) else None


def _location(where: Any) -> Location | None:
    """A findings location (``{"file", "line", "cell"?}``) or None when it is not one."""
    if not isinstance(where, dict) or not where.get("file"):
        return None
    line, cell = where.get("line"), where.get("cell")
    if not isinstance(line, int) or isinstance(line, bool):
        return None
    return Location(
        str(where["file"]), line, cell if isinstance(cell, int) and not isinstance(cell, bool) else None
    )


def score(outcome: Outcome) -> Row:
    program = outcome.program
    expected = (
        Location(str(program.origin.file), program.origin.line, program.origin.cell)
        if program.origin
        else None
    )
    row = Row(
        program=program.name,
        path=str(program.path),
        method=program.method,
        expected=expected,
        title=program.title,
        expected_cause=program.cause,
        reproduced=dict(outcome.reproduced),
        seconds=dict(outcome.seconds),
        error=outcome.error,
    )
    origin = origin_of(outcome.findings)
    cause = cause_of(outcome.findings)
    change = _location(cause.get("change")) if cause is not None else None
    if origin is not None:
        cell = origin.get("cell")
        row.found = Location(
            str(origin.get("file", "")),
            int(origin.get("line", 0)),
            cell if isinstance(cell, int) and not isinstance(cell, bool) else None,
        )
        row.line_from = "origin"
        row.role = origin.get("role")
        op = origin.get("op") or {}
        row.op, row.op_name = op.get("type"), op.get("name")
        row.message = str(origin.get("message", ""))
    if change is not None:  # the line to change for the cause wins over the op's line
        row.found, row.line_from = change, "cause.change"
    if row.found is not None:
        # A notebook finding is exact when it names the .ipynb, the marked cell and the line within that cell.
        row.exact_line = expected is not None and row.found.same_place(expected)
    if outcome.findings is not None and (origin is not None or cause is not None):
        kind = cause.get("kind") if cause is not None else None
        row.cause = kind if isinstance(kind, str) and kind else "unknown"
        row.cause_summary = str(cause.get("summary", "")) if cause is not None else ""
        if program.cause is not None:
            row.cause_hit = row.cause == program.cause
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
    cause_programs: int = 0  # rows whose program marks a # CAUSE
    cause_hit: int = 0  # of those, rows whose cause found is the marked one
    # per marked cause kind: {"programs", "cause_hit", "exact_line", "both"} ("both": cause and line right)
    by_cause: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def exact_fraction(self) -> float:
        return self.exact_line / self.programs if self.programs else 0.0

    @property
    def cause_fraction(self) -> float:
        return self.cause_hit / self.cause_programs if self.cause_programs else 0.0

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
            "cause_programs": self.cause_programs,
            "cause_hit": self.cause_hit,
            "cause_fraction": round(self.cause_fraction, 4),
            "by_cause": self.by_cause,
        }


def summarize(rows: list[Row]) -> Summary:
    replayed = [
        r for r in rows if r.method == "capture" and any(v is not None for v in r.reproduced.values())
    ]
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
        cause_programs=sum(r.expected_cause is not None for r in rows),
        cause_hit=sum(r.cause_hit is True for r in rows),
        by_cause=by_cause(rows),
    )


def by_cause(rows: list[Row]) -> dict[str, dict[str, int]]:
    """Per marked cause kind (in `CAUSE_KINDS` order, then any other): how many programs, how many had their cause
    found, their line found, and both."""
    from pyadapter.evaluate.corpus import CAUSE_KINDS

    kinds = sorted(
        {r.expected_cause for r in rows if r.expected_cause is not None},
        key=lambda k: (CAUSE_KINDS.index(k) if k in CAUSE_KINDS else len(CAUSE_KINDS), k),
    )
    table = {}
    for kind in kinds:
        mine = [r for r in rows if r.expected_cause == kind]
        table[kind] = {
            "programs": len(mine),
            "cause_hit": sum(r.cause_hit is True for r in mine),
            "exact_line": sum(r.exact_line for r in mine),
            "both": sum(r.cause_hit is True and r.exact_line for r in mine),
        }
    return table
