"""Quick fixes for known NaN patterns: pure functions from (source text, origin finding) to text edits.

Public API (no TensorFlow, no editor):

- ``quick_fixes(source, finding) -> list[QuickFix]``: the fixes for a finding's line, preferred first.
- ``fixes_for_line(source, line, op_type, dtype=None, forward_op=None, backward=False) -> list[QuickFix]``
- ``cause_fixes(source, cause) -> list[QuickFix]``: the fixes that match a cause (``pyadapter.cause``) on its
  change line: a lower learning rate / clipnorm (divergence), filtering non-finite records where the data is read
  (data), ``dtype="float32"`` on the layer (precision).
- ``QuickFix(title, edits, preferred)``, ``TextEdit(line, start_col, end_col, new_text)`` (1-based line,
  character columns), ``apply_edits(text, edits) -> str``, ``epsilon(dtype, additive=False) -> float``.
"""

from __future__ import annotations

from pyadapter.findings import Finding
from pyadapter.fixes.cause import cause_fixes
from pyadapter.fixes.model import QuickFix, TextEdit, apply_edits, epsilon
from pyadapter.fixes.patterns import family_of, fixes_for
from pyadapter.fixes.source import read_line

__all__ = ["QuickFix", "TextEdit", "apply_edits", "cause_fixes", "epsilon", "fixes_for_line", "quick_fixes"]


def fixes_for_line(
    source: str,
    line: int,
    op_type: str,
    dtype: str | None = None,
    forward_op: str | None = None,
    backward: bool = False,
) -> list[QuickFix]:
    """The fixes for an op of ``op_type`` made on 1-based ``line`` of ``source``; [] where no pattern applies."""
    family = family_of(op_type, forward_op)
    if family is None:
        return []
    src = read_line(source, line)
    if src is None:
        return []
    backward = backward or op_type.endswith("Grad")
    fixes = fixes_for(src, family, dtype, backward)
    return sorted(fixes, key=lambda f: not f.preferred)  # stable: the rest keep their order


def quick_fixes(source: str, finding: Finding) -> list[QuickFix]:
    """The fixes for an origin finding (origin or backward-origin; a propagated finding gets none)."""
    if finding.role == "propagated":
        return []
    dtype = finding.health.dtype if finding.health is not None else None
    if dtype is None:
        dtype = next(
            (i.health.dtype for i in finding.inputs if i.health is not None and i.health.dtype), None
        )
    return fixes_for_line(
        source,
        finding.line,
        finding.op.type,
        dtype,
        finding.op.forward_op,
        backward=finding.role == "backward-origin",
    )
