"""What the editor is sent: diagnostics, hover Markdown, CodeLenses and the `nanlens/findings` payload.

Pure functions of the server's source records (see docs/protocol.md); no I/O except through the ``line_text``
callable the caller passes in (the current text of a line, used to underline the code, not the indentation).
A finding's place is its file and, for notebook code, its cell (``Place``): a cell's findings are shown on that
cell's document, never on the ``.ipynb`` file (whose lines are JSON); ``uri_of`` says where a place is shown.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from lsprotocol import types

from pyadapter.capture.records import readable_inside
from pyadapter.findings import Finding
from pyadapter.findings_text import (
    change_message,
    finding_message,
    health_detail,
    index_text,
    place_text,
    provenance_note,
    shown_inputs,
)
from pyadapter.server.state import SourceRecord, same_file

if TYPE_CHECKING:
    from pyadapter.cause.model import Cause

DIAGNOSTIC_SOURCE = "NaN Lens"
STALE_PREFIX = "(stale) "
REPLAY_COMMAND = "nanlens.replayEagerly"
DEBUG_COMMAND = "nanlens.debugEagerly"
VERIFY_COMMAND = "nanlens.verifyFix"
VERIFY_TITLE = "$(check) Verify fix on captured step"
LOCATE_COMMAND = "nanlens.locateBundle"
# The pictures of a source (the client's webviews draw them; extension/src/core/pictures.ts).
SHOW_OP_GRAPH = "nanlens.showOpGraph"
SHOW_TIMELINE = "nanlens.showTimeline"
GRAPH_TITLE = "$(type-hierarchy) Show op graph"
TIMELINE_TITLE = "$(graph-line) Health timeline"

# (absolute file, 1-based line, notebook cell index or None) -> the line's current text, or None when unknown.
LineText = Callable[[str, int, "int | None"], "str | None"]
# Where a finding is shown: (absolute file, notebook cell index or None for a plain source file).
Place = tuple[str, "int | None"]
# A place -> the URI of the document that shows it, or None when no editor document shows it now.
PlaceUri = Callable[[str, "int | None"], "str | None"]

_ROLE_TITLES = {
    "origin": "origin of the non-finite values",
    "backward-origin": "origin of the non-finite values (backward pass)",
    "propagated": "carries non-finite values",
}
# Every string in a hover comes from a findings.json or a dump, which anyone may have written: escaped, it can
# turn into no emphasis, link, image (``![](https://...)`` fetches on hover), ``command:`` URI or HTML.
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]()!<>|~])")
# A line break would let the text start a block of its own (a heading, a list item), and a blank line ends a
# paragraph and with it any code span still open, leaving the rest live Markdown.
_LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029]+")


def no_line_text(_file: str, _line: int, _cell: int | None = None) -> str | None:
    return None


def place_of(finding: Finding) -> Place:
    return finding.file, finding.cell


def escape_markdown(text: object) -> str:
    """``text`` as plain Markdown text, on one line: its metacharacters escaped."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", _LINE_BREAKS.sub(" ", str(text)))


def code_span(text: object) -> str:
    """``text`` as one Markdown code span it cannot leave: the fence is longer than any run of backticks in it
    (CommonMark), padded with a space when the text touches a backtick (one space each side is dropped), and on
    one line. Inside a code span nothing is interpreted, so nothing in ``text`` is escaped."""
    text = _LINE_BREAKS.sub(" ", str(text))
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if longest or (text.startswith(" ") and text.endswith(" ")) else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def line_range(finding: Finding, line_text: LineText) -> types.Range:
    """The finding's line from its first non-blank character to its end (whole line when the text is unknown)."""
    return place_range(finding.file, finding.line, finding.cell, line_text)


def place_range(file: str, line: int, cell: int | None, line_text: LineText) -> types.Range:
    """A 1-based line of a file (or cell) from its first non-blank character to its end."""
    line0 = max(line - 1, 0)
    text = line_text(file, line, cell)
    if not text:
        return types.Range(types.Position(line0, 0), types.Position(line0, 0))
    text = text.rstrip("\r\n")
    start = len(text) - len(text.lstrip())
    return types.Range(types.Position(line0, start), types.Position(line0, len(text)))


def severity(finding: Finding, stale: bool) -> types.DiagnosticSeverity:
    if stale:
        return types.DiagnosticSeverity.Information
    if finding.role == "propagated":
        return types.DiagnosticSeverity.Warning
    return types.DiagnosticSeverity.Error


def diagnostic(
    record: SourceRecord, finding: Finding, line_text: LineText, uri_of: PlaceUri
) -> types.Diagnostic:
    stale = record.is_stale(finding)
    related = None
    origin = record.findings.origin if record.findings else None
    origin_uri = uri_of(*place_of(origin)) if finding.role == "propagated" and origin is not None else None
    if origin is not None and origin_uri is not None:
        related = [
            types.DiagnosticRelatedInformation(
                location=types.Location(uri=origin_uri, range=line_range(origin, line_text)),
                message=f"the non-finite values start here: {finding_message(origin)}",
            )
        ]
    return types.Diagnostic(
        range=line_range(finding, line_text),
        message=(STALE_PREFIX if stale else "") + finding_message(finding),
        severity=severity(finding, stale),
        source=DIAGNOSTIC_SOURCE,
        code=finding.op.type,
        data={"sourceId": record.id, "role": finding.role},
        related_information=related,
    )


def diagnostics_by_place(
    records: Iterable[SourceRecord], line_text: LineText, uri_of: PlaceUri
) -> dict[Place, list[types.Diagnostic]]:
    """Every finding of every source as a diagnostic, grouped by place (file, notebook cell or None)."""
    out: dict[Place, list[types.Diagnostic]] = {}
    for record in records:
        for finding in record.all_findings():
            out.setdefault(place_of(finding), []).append(diagnostic(record, finding, line_text, uri_of))
        change = change_diagnostic(record, line_text, uri_of)
        if change is not None:
            out.setdefault(change[0], []).append(change[1])
    return out


def change_diagnostic(
    record: SourceRecord, line_text: LineText, uri_of: PlaceUri
) -> tuple[Place, types.Diagnostic] | None:
    """A Warning on the line the cause says to change (the optimizer, the reading line, the layer), pointing back
    at the origin; none for an ``op`` cause, whose line to change is the origin itself (already an Error)."""
    cause = record.cause
    if cause is None or cause.change is None or cause.kind == "op":
        return None
    change = cause.change
    origin = record.findings.origin if record.findings else None
    if (
        origin is not None
        and (origin.line, origin.cell) == (change.line, change.cell)
        and same_file(origin.file, change.file)
        and cause.kind == "unknown"
    ):
        return None
    stale = change.file in record.stale_files
    related = None
    origin_uri = uri_of(*place_of(origin)) if origin is not None else None
    if origin is not None and origin_uri is not None:
        related = [
            types.DiagnosticRelatedInformation(
                location=types.Location(uri=origin_uri, range=line_range(origin, line_text)),
                message=f"the non-finite values start here: {finding_message(origin)}",
            )
        ]
    related = (related or []) + data_related(cause) or None
    return (change.file, change.cell), types.Diagnostic(
        range=place_range(change.file, change.line, change.cell, line_text),
        message=(STALE_PREFIX if stale else "") + change_message(cause),
        severity=types.DiagnosticSeverity.Information if stale else types.DiagnosticSeverity.Warning,
        source=DIAGNOSTIC_SOURCE,
        code=cause.kind,
        data={"sourceId": record.id, "role": "change", "cause": cause.kind},
        related_information=related,
    )


def causes_at(
    records: Iterable[SourceRecord], file: str, line0: int, cell: int | None = None
) -> list[SourceRecord]:
    """The sources whose cause says to change this 0-based line of a file (of one cell of a notebook)."""
    out = []
    for record in records:
        change = record.cause.change if record.cause is not None else None
        if (
            change is not None
            and change.line - 1 == line0
            and change.cell == cell
            and same_file(change.file, file)
        ):
            out.append(record)
    return out


def cause_markdown(record: SourceRecord, on_change_line: bool) -> str:
    """The cause section of a hover: its kind, its sentence, and where to change what."""
    cause = record.cause
    if cause is None:
        return ""
    where_from = cause.provenance or {}
    sentence = str(where_from.get("sentence") or "")
    # A data cause's summary already names the bad record ("... touched it: weather.csv line 1044: field ..."):
    # that mention becomes the link, and the record is not said a second time under "from".
    named = bool(sentence) and bool(where_from.get("file")) and sentence in cause.summary
    if named:
        before, _, after = cause.summary.partition(sentence)
        summary = escape_markdown(before) + data_place_markdown(where_from) + escape_markdown(after)
    else:
        summary = escape_markdown(cause.summary)
    lines = [f"**NaN Lens: cause — {escape_markdown(cause.kind)}**", "", summary]
    if cause.change is not None:
        change = cause.change
        where = (
            "this line"
            if on_change_line
            else code_span(place_text(os.path.basename(change.file), change.line, change.cell))
        )
        lines += ["", f"- change {where}: {escape_markdown(change.what)}"]
    record_text = where_from.get("text")
    record_text = record_text if isinstance(record_text, str) else ""
    if named:
        if record_text:
            lines.append(f"- the record: {code_span(record_text)}")
    elif where_from.get("file"):
        lines.append(f"- from: {data_place_markdown(where_from)}")
        if record_text:
            lines.append(f"  - {code_span(record_text)}")
    elif (index := index_text(where_from)) is not None:
        lines.append(f"- from: {escape_markdown(index)}")
    note = provenance_note(cause)
    if note:
        lines.append(f"- note: {escape_markdown(note)}")
    if on_change_line and record.findings is not None and record.findings.origin is not None:
        origin = record.findings.origin
        lines.append(
            f"- the non-finite values start at {code_span(f'{os.path.basename(origin.file)}:{origin.line}')}: "
            f"{escape_markdown(finding_message(origin))}"
        )
    lines.append(f"- source: {record.kind} {code_span(record.label)}")
    return "\n".join(lines)


def data_link(provenance: dict[str, Any]) -> str | None:
    """A file URI opening the bad record's line (``#L517``: VS Code opens a linked file at that line), when the
    locate read that file inside the workspace just now (``openable``) and it is a text file with a line. The
    server re-decides ``openable`` for every findings file it loads (``compute``): a bundle's word is not enough."""
    file, line = provenance.get("file"), provenance.get("line")
    if not provenance.get("openable") or not isinstance(file, str) or not os.path.isabs(file):
        return None
    if not isinstance(line, int) or isinstance(line, bool) or line < 1:
        return None
    uri = Path(file).as_uri().replace("(", "%28").replace(")", "%29")  # parentheses would end the link
    return f"{uri}#L{line}"


def data_place_markdown(provenance: dict[str, Any]) -> str:
    """'[turbine.csv line 517](file:///...#L517): field 'rotor_rpm' is 'nan'' (a link when ``data_link`` has one)."""
    name = os.path.basename(str(provenance["file"]))
    line, record = provenance.get("line"), provenance.get("record")
    where = escape_markdown(f"line {line}" if line is not None else f"record {record}")
    link = data_link(provenance)
    text = f"[{escape_markdown(name)} {where}]({link})" if link else f"{code_span(name)} {where}"
    sentence = str(provenance.get("sentence") or "")
    if ": " in sentence:
        text += ": " + escape_markdown(sentence.split(": ", 1)[1])
    if provenance.get("row") is not None and line is not None:
        text += f" (data row {escape_markdown(provenance['row'])})"
    return text


def data_related(cause: Cause) -> list[types.DiagnosticRelatedInformation]:
    """The bad record's line as related information of a data cause's Warning (clickable in Problems)."""
    link = data_link(cause.provenance or {})
    if cause.kind != "data" or link is None:
        return []
    provenance = cause.provenance or {}
    line0 = int(provenance["line"]) - 1
    return [
        types.DiagnosticRelatedInformation(
            location=types.Location(
                uri=link.split("#", 1)[0],
                range=types.Range(types.Position(line0, 0), types.Position(line0, 0)),
            ),
            message=f"the bad record: {provenance.get('sentence') or os.path.basename(str(provenance['file']))}",
        )
    ]


def diagnostics_by_file(
    records: Iterable[SourceRecord], line_text: LineText, file_uri: Callable[[str], str]
) -> dict[str, list[types.Diagnostic]]:
    """The diagnostics of plain source files (notebook cells left out), grouped by absolute file path."""

    def uri_of(file: str, cell: int | None) -> str | None:
        return file_uri(file) if cell is None else None

    by_place = diagnostics_by_place(records, line_text, uri_of)
    return {file: diags for (file, cell), diags in by_place.items() if cell is None}


def findings_at(
    records: Iterable[SourceRecord], file: str, line0: int, cell: int | None = None
) -> list[tuple[SourceRecord, Finding]]:
    """The findings on a 0-based line of a file (of one cell of a notebook), origins first."""
    hits = [
        (r, f)
        for r in records
        for f in r.all_findings()
        if f.line - 1 == line0 and f.cell == cell and same_file(f.file, file)
    ]
    return sorted(hits, key=lambda rf: rf[1].role == "propagated")


def hover_markdown(hits: list[tuple[SourceRecord, Finding]]) -> str:
    """One section per finding on the line: op, type, graph, step, health, inputs' health, message."""
    sections = []
    for record, finding in hits:
        op = finding.op
        lines = [f"**NaN Lens: {escape_markdown(_ROLE_TITLES.get(finding.role, finding.role))}**", ""]
        if record.is_stale(finding):
            lines += ["*(stale) this file changed since the dump; the line may have moved.*", ""]
        lines += [escape_markdown(finding_message(finding)), ""]
        # Every name below is the findings' (a bundle's, a dump's): in code spans it cannot leave.
        lines.append(f"- op: {code_span(op.name)} of type {code_span(op.type)}")
        if op.forward_op:
            lines.append(f"- gradient of: {code_span(op.forward_op)}")
        if op.graph:
            lines.append(f"- graph: {code_span(op.graph)}")
        # A bundle's op step counts steps of its one-step replay (always 0); the training step is the bundle's.
        step = record.step if record.kind == "bundle" and record.step is not None else op.step
        if step is None:
            step = record.step
        if step is not None:
            lines.append(f"- step: {escape_markdown(step)}")
        if op.host and record.findings and len(record.findings.hosts) > 1:  # a multi-host dump: which machine
            task = f" ({escape_markdown(op.task)})" if op.task else ""
            lines.append(f"- host: {code_span(op.host)}{task}")
        if op.device:
            lines.append(f"- device: {code_span(op.device)}")
        lines.append(f"- output: {escape_markdown(health_detail(finding.health))}")
        if finding.inputs:
            lines.append("- inputs:")
            for item in shown_inputs(finding):
                lines.append(f"  - {code_span(item.name)}: {escape_markdown(health_detail(item.health))}")
        lines.append(f"- source: {record.kind} {code_span(record.label)}")
        if finding.role != "propagated" and record.cause is not None and record.cause.kind != "unknown":
            lines += ["", cause_markdown(record, on_change_line=False)]
        if record.status == "ok" and record.findings is not None and finding is record.findings.origin:
            lines += ["", picture_links(record)]
        sections.append("\n".join(lines))
    return "\n\n---\n\n".join(sections)


def picture_links(record: SourceRecord) -> str:
    """Hover links to the source's op graph and health timeline (the client trusts these two commands only)."""
    args = quote(json.dumps([{"sourceId": record.id}]), safe="")
    return (
        f'[Show op graph](command:{SHOW_OP_GRAPH}?{args} "The origin op, its inputs and consumers") · '
        f'[Health timeline](command:{SHOW_TIMELINE}?{args} "Where the non-finite values begin")'
    )


def replay_target(record: SourceRecord, origin: Finding, folders: list[str] | None = None) -> dict[str, Any]:
    """The replay's stop: the origin, and for a notebook's cell the cell file its breakpoint goes on. With
    `folders` (the workspace's), a cell file is written only for a notebook inside them: a finding is its writer's
    word, and one naming a notebook elsewhere had its cells written beside it, outside the workspace."""
    target = {"bundle": record.path, "file": origin.file, "line": origin.line, "step": record.step}
    if origin.cell is not None:
        target["cell"] = origin.cell
        inside = folders is None or (origin.file.endswith(".ipynb") and readable_inside(origin.file, folders))
        cell_file = replay_cell_file(origin.file, origin.cell) if inside else None
        if cell_file is not None:
            target["cellFile"] = cell_file
    return target


def replay_cell_file(notebook: str, cell: int) -> str | None:
    """The file a replay runs a notebook's cell from (its breakpoint goes there), written now so the debugger can
    bind to it; None if the notebook cannot be read."""
    from pathlib import Path

    from pyadapter.replay.reentry import cell_file, write_cell_files

    try:
        write_cell_files(Path(notebook))
    except (OSError, ValueError):
        return None
    return str(cell_file(Path(notebook), cell))


def replay_command(record: SourceRecord, origin: Finding) -> types.Command | None:
    """'Replay eagerly' for a bundle; 'Run eagerly under debugger' for a dump of a known script (not a notebook:
    the nanlens debugger runs scripts); None otherwise."""
    if record.kind == "bundle":
        step = record.step
        title = "$(debug-alt) Replay eagerly" + (f" (step {step})" if step is not None else "")
        return types.Command(title=title, command=REPLAY_COMMAND, arguments=[replay_target(record, origin)])
    script = record.entry_script
    if script is None or origin.cell is not None:
        return None
    return types.Command(
        title="$(debug-alt) Run eagerly under debugger",
        command=DEBUG_COMMAND,
        arguments=[{"script": script, "file": origin.file, "line": origin.line}],
    )


def code_lenses(
    records: Iterable[SourceRecord], file: str, line_text: LineText, cell: int | None = None
) -> list[types.CodeLens]:
    """'Replay eagerly' (bundle) or 'Run eagerly under debugger' (dump with a known script) on origin lines, plus
    'Verify fix on captured step' on a bundle's origin line once its file changed since the locate, then 'Show op
    graph' and 'Health timeline' (the client's webviews draw them). ``cell``: the lenses of that cell of the
    notebook ``file``."""
    lenses: list[tuple[SourceRecord, types.CodeLens]] = []
    for record in records:
        origin = record.findings.origin if record.findings else None
        if origin is None or origin.cell != cell or not same_file(origin.file, file):
            continue
        at_origin = line_range(origin, line_text)
        command = replay_command(record, origin)
        if command is not None:
            lenses.append((record, types.CodeLens(range=at_origin, command=command)))
        if record.kind == "bundle" and record.is_stale(origin):
            # The file changed since the locate: perhaps a fix; replaying the captured step tells.
            verify = types.Command(
                title=VERIFY_TITLE,
                command=VERIFY_COMMAND,
                arguments=[{"sourceId": record.id, "bundle": record.path}],
            )
            lenses.append((record, types.CodeLens(range=at_origin, command=verify)))
        if record.status == "ok":  # its pictures can be drawn
            for title, command_id in ((GRAPH_TITLE, SHOW_OP_GRAPH), (TIMELINE_TITLE, SHOW_TIMELINE)):
                picture = types.Command(title=title, command=command_id, arguments=[{"sourceId": record.id}])
                lenses.append((record, types.CodeLens(range=at_origin, command=picture)))
    # Several sources on one line: say which lens is which (the title alone would repeat).
    per_line: dict[int, set[str]] = {}
    for record, lens in lenses:
        per_line.setdefault(lens.range.start.line, set()).add(record.id)
    for record, lens in lenses:
        if len(per_line[lens.range.start.line]) > 1 and lens.command is not None:
            lens.command.title += f" · {record.label}"
    return [lens for _, lens in lenses]


def locate_title(record: SourceRecord) -> str:
    """The Locate lens of a bundle waiting for the user: it says what locating runs."""
    entry = record.entry
    runs = f" (runs {os.path.basename(entry)})" if entry else ""
    where = f", {record.foreign}" if record.foreign else ""
    return f"$(search) Locate NaN in {record.label}{where}{runs}"


def locate_lenses(
    records: Iterable[SourceRecord], file: str, cell: int | None = None
) -> list[types.CodeLens]:
    """'Locate NaN in <bundle> (runs train.py)' on the first line of the program of each bundle that waits for the
    user's Locate (no findings; locating replays the step, which runs that program). Not on notebooks' cells."""
    lenses = []
    for record in sorted(records, key=lambda r: r.path):
        entry = record.entry
        if record.status != "unlocated" or entry is None or cell is not None or not same_file(entry, file):
            continue
        command = types.Command(title=locate_title(record), command=LOCATE_COMMAND, arguments=[record.path])
        lenses.append(
            types.CodeLens(range=types.Range(types.Position(0, 0), types.Position(0, 0)), command=command)
        )
    return lenses


def finding_json(record: SourceRecord, finding: Finding) -> dict[str, Any]:
    return {**finding.to_json(), "stale": record.is_stale(finding)}


def source_json(record: SourceRecord) -> dict[str, Any]:
    origin = record.findings.origin if record.findings else None
    return {
        "id": record.id,
        "kind": record.kind,
        "path": record.path,
        "label": record.label,
        "step": record.step,
        "status": record.status,
        "error": record.error,
        "origin": finding_json(record, origin) if origin is not None else None,
        "findings": [finding_json(record, f) for f in record.all_findings()],
        # A bundle's program (what locating or replaying it runs), why it is foreign, and a refusal to run it.
        "entry": record.entry,
        "foreign": record.foreign,
        "untrusted": record.untrusted.to_json() if record.untrusted is not None else None,
        # Why, with the line to change (findings' top-level ``cause``); its line is marked apart from the findings.
        "cause": record.cause.to_json() if record.cause is not None else None,
    }


def findings_notification(records: Iterable[SourceRecord]) -> dict[str, Any]:
    """The `nanlens/findings` payload: the full current state, sources sorted by path."""
    return {"sources": [source_json(r) for r in sorted(records, key=lambda r: r.path)]}
