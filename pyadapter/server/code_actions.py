"""``textDocument/codeAction``: the quick fixes of ``pyadapter.fixes`` for NaN Lens origin diagnostics.

Each action carries the diagnostic it fixes and a WorkspaceEdit of the open document; columns are converted
from characters to UTF-16 code units (the LSP default position encoding).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from lsprotocol import types

from pyadapter.cause import Cause
from pyadapter.findings import Finding
from pyadapter.fixes import QuickFix, cause_fixes, quick_fixes
from pyadapter.server.render import DIAGNOSTIC_SOURCE
from pyadapter.server.state import SourceRecord, same_file

TITLE_PREFIX = "NaN Lens: "


def _utf16(text: str, col: int) -> int:
    return len(text[:col].encode("utf-16-le")) // 2


def _text_edit(fix_line_text: str, line: int, start: int, end: int, new_text: str) -> types.TextEdit:
    return types.TextEdit(
        range=types.Range(
            types.Position(line - 1, _utf16(fix_line_text, start)),
            types.Position(line - 1, _utf16(fix_line_text, end)),
        ),
        new_text=new_text,
    )


def action_of(fix: QuickFix, uri: str, text: str, diagnostic: types.Diagnostic) -> types.CodeAction:
    lines = text.splitlines()
    edits = [
        _text_edit(
            lines[e.line - 1] if e.line <= len(lines) else "", e.line, e.start_col, e.end_col, e.new_text
        )
        for e in fix.edits
    ]
    return types.CodeAction(
        title=TITLE_PREFIX + fix.title,
        kind=types.CodeActionKind.QuickFix,
        diagnostics=[diagnostic],
        is_preferred=fix.preferred or None,
        edit=types.WorkspaceEdit(changes={uri: edits}),
    )


def fixes_with_preamble(text: str, finding: Finding, preamble: str) -> list[QuickFix]:
    """The fixes of ``finding`` in ``text`` read after ``preamble`` (a notebook's imports from earlier cells, so
    the fixer knows what ``tf`` is); edits come back in ``text``'s lines, and a fix touching the preamble is
    dropped (the preamble is not in the document)."""
    if not preamble:
        return quick_fixes(text, finding)
    if not preamble.endswith("\n"):
        preamble += "\n"
    shift = len(preamble.splitlines())
    out = []
    for fix in quick_fixes(preamble + text, dataclasses.replace(finding, line=finding.line + shift)):
        if all(edit.line > shift for edit in fix.edits):
            out.append(
                dataclasses.replace(
                    fix, edits=[dataclasses.replace(e, line=e.line - shift) for e in fix.edits]
                )
            )
    return out


def cause_fixes_with_preamble(text: str, cause: Cause, preamble: str) -> list[QuickFix]:
    """``cause_fixes`` on the change line of ``text`` read after ``preamble`` (a notebook's earlier cells' imports),
    as ``fixes_with_preamble`` does for an origin."""
    if cause.change is None:
        return []
    if not preamble:
        return cause_fixes(text, cause)
    if not preamble.endswith("\n"):
        preamble += "\n"
    shift = len(preamble.splitlines())
    moved = dataclasses.replace(
        cause, change=dataclasses.replace(cause.change, line=cause.change.line + shift)
    )
    return [
        dataclasses.replace(fix, edits=[dataclasses.replace(e, line=e.line - shift) for e in fix.edits])
        for fix in cause_fixes(preamble + text, moved)
        if all(edit.line > shift for edit in fix.edits)
    ]


def code_actions(
    records: dict[str, SourceRecord],
    path: str,
    uri: str,
    text: str | None,
    diagnostics: Iterable[types.Diagnostic],
    cell: int | None = None,
    preamble: str = "",
) -> list[types.CodeAction]:
    """Quick fixes for the NaN Lens origin diagnostics the client sent (those in the requested range), and the
    cause's fixes for its change-line diagnostic (``pyadapter.fixes.cause_fixes``).
    ``cell``: the document is that cell of the notebook ``path``, ``text`` the cell's text and ``preamble`` the
    imports of the cells before it."""
    if text is None:
        return []
    actions: list[types.CodeAction] = []
    seen: set[tuple[str, int]] = set()
    for diagnostic in diagnostics:
        if diagnostic.source != DIAGNOSTIC_SOURCE or not isinstance(diagnostic.data, dict):
            continue
        record = records.get(str(diagnostic.data.get("sourceId")))
        if record is None or diagnostic.data.get("role") == "propagated":
            continue
        line = diagnostic.range.start.line + 1
        if diagnostic.data.get("role") == "change":  # the line a cause says to change: the cause's own fixes
            cause = record.cause
            change = cause.change if cause is not None else None
            if (
                cause is None
                or change is None
                or change.line != line
                or change.cell != cell
                or not same_file(change.file, path)
                or (cause.kind, line) in seen
            ):
                continue
            seen.add((cause.kind, line))
            actions.extend(
                action_of(fix, uri, text, diagnostic)
                for fix in cause_fixes_with_preamble(text, cause, preamble)
            )
            continue
        for finding in record.all_findings():
            if (
                finding.role == "propagated"
                or finding.line != line
                or finding.cell != cell
                or not same_file(finding.file, path)
            ):
                continue
            if (finding.op.type, line) in seen:  # two sources with the same origin: offer the fixes once
                continue
            seen.add((finding.op.type, line))
            actions.extend(
                action_of(fix, uri, text, diagnostic) for fix in fixes_with_preamble(text, finding, preamble)
            )
    return actions
