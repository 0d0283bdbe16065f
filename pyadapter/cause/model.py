"""The ``cause`` record of a findings document: why the run went non-finite, with evidence in numbers, and the
line of the user's code to change (``findings.extra["cause"]``; docs/protocol.md "Cause")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypeGuard

from pyadapter.findings_text import format_number  # noqa: F401 - the cause sentences and fixes take it from here

CauseKind = Literal["op", "divergence", "data", "precision", "unknown"]
KINDS: tuple[str, ...] = ("op", "divergence", "data", "precision", "unknown")
# The key of the cause in a findings document (a top-level field; the schema allows added fields).
FINDINGS_KEY = "cause"


@dataclass
class Change:
    """The line to change: file (the .ipynb for notebook code, then ``cell`` is set), 1-based line, and what."""

    file: str
    line: int
    what: str
    cell: int | None = None
    # What the fixes need to know about the line ("optimizer", "learning_rate", "reading", "layer"), not shown.
    target: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"file": self.file, "line": self.line}
        if self.cell is not None:
            out["cell"] = self.cell
        out["what"] = self.what
        if self.target:
            out["target"] = self.target
        return out

    @classmethod
    def from_json(cls, data: Any) -> Change | None:
        if not isinstance(data, dict):
            return None
        file, line, cell = data.get("file"), data.get("line"), data.get("cell")
        if not isinstance(file, str) or not _is_int(line) or line < 1:
            return None
        return cls(
            file=file,
            line=line,
            what=str(data.get("what") or ""),
            cell=cell if _is_int(cell) and cell >= 0 else None,
            target=str(data.get("target") or ""),
        )


@dataclass
class Cause:
    """One class of failure and its evidence: op, divergence, data, precision or unknown."""

    kind: CauseKind
    summary: str
    evidence: dict[str, Any] = field(default_factory=dict)
    change: Change | None = None
    provenance: dict[str, Any] | None = None  # data: where the bad element came from

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "summary": self.summary,
            "evidence": self.evidence,
            "change": self.change.to_json() if self.change else None,
        }
        if self.provenance is not None:
            out["provenance"] = self.provenance
        return out

    @classmethod
    def from_json(cls, data: Any) -> Cause | None:
        """The cause of a findings document, or None when absent or not a cause (a bundle is data: no raise)."""
        if not isinstance(data, dict) or data.get("kind") not in KINDS:
            return None
        evidence = data.get("evidence")
        provenance = data.get("provenance")
        return cls(
            kind=data["kind"],
            summary=str(data.get("summary") or ""),
            evidence=evidence if isinstance(evidence, dict) else {},
            change=Change.from_json(data.get("change")),
            provenance=provenance if isinstance(provenance, dict) else None,
        )


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def positive_numbers(*values: Any) -> list[float] | None:
    """The values as floats when each is a positive number (int or float, not a bool), else None: numbers read
    from a manifest are data and may be anything."""
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in values):
        return [float(v) for v in values]
    return None
