"""Unit tests of the language server's pure parts: rendering, settings, source discovery, staleness, caching.

No TensorFlow and no server process here; tests/test_server_lsp.py drives the real server over stdio.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import pytest
from lsprotocol import types

from pyadapter.findings import Finding, Findings, Frame, InputHealth, OpRef, TensorHealth
from pyadapter.server import render
from pyadapter.server.compute import ComputeError, compute, fresh_cache, progress_callback
from pyadapter.server.settings import Settings, parse_settings, root_problem, watched_roots
from pyadapter.server.sources import (
    Debouncer,
    Fingerprint,
    FolderWatcher,
    SourceRef,
    discover,
    fingerprint,
    source_at,
)
from pyadapter.server.staleness import CHANGED_AFTER_SOURCE, is_stale, snapshot_files, text_hash
from pyadapter.server.state import SourceRecord

BUNDLE_MANIFEST = {"format": "nanlens.bundle/1", "step": 12}


def make_finding(
    file: str, line: int, role: str = "origin", op_type: str = "Log", message: str = ""
) -> Finding:
    return Finding(
        file=file,
        line=line,
        role=role,  # type: ignore[arg-type]
        op=OpRef(name=f"model/{op_type}", type=op_type, graph="__inference_train_step_42", step=12),
        health=TensorHealth(dtype="float32", shape=[2], size=2, neg_inf=1, zero=0, pos=1),
        inputs=[InputHealth("model/probs_1:0", TensorHealth(dtype="float32", size=2, zero=1, pos=1))],
        stack=[Frame(file, 3, "<module>"), Frame(file, line, "compute")],
        message=message,
    )


def make_record(tmp_path: Path, kind: str = "dump", stale: bool = False) -> tuple[SourceRecord, str]:
    user_file = tmp_path / "train.py"
    user_file.write_text("import tensorflow as tf\n\ny = tf.math.log(x)  # ORIGIN\nz = y * 2\n")
    origin = make_finding(
        str(user_file), 3, message="Log produced 1 -inf from input model/probs_1:0 which holds 1 zeros"
    )
    propagated = make_finding(str(user_file), 4, role="propagated", op_type="Mul")
    findings = Findings(
        source_kind=kind,
        source_path=str(tmp_path / "src"),
        origin=origin,  # type: ignore[arg-type]
        findings=[origin, propagated],
        bundle={"step": 12} if kind == "bundle" else None,
    )
    record = SourceRecord(SourceRef(kind, str(tmp_path / "run-step12")), status="ok", findings=findings)  # type: ignore[arg-type]
    if stale:
        record.stale_files.add(str(user_file))
    return record, str(user_file)


PICTURE_COMMANDS = (render.SHOW_OP_GRAPH, render.SHOW_TIMELINE)


def run_lenses(lenses: list[types.CodeLens]) -> list[types.CodeLens]:
    """The lenses that replay or debug (every origin line of a readable source also gets the two picture lenses)."""
    return [lens for lens in lenses if lens.command is None or lens.command.command not in PICTURE_COMMANDS]


def disk_line_text(path: str, line: int, cell: int | None = None) -> str | None:
    lines = Path(path).read_text().splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else None


def uri(path: str) -> str:
    return "file://" + path


# --- render -------------------------------------------------------------------------------------------------------


def test_diagnostics_mark_origin_as_error_and_propagated_as_warning(tmp_path: Path) -> None:
    record, user_file = make_record(tmp_path)
    diags = render.diagnostics_by_file([record], disk_line_text, uri)[user_file]
    by_line = {d.range.start.line + 1: d for d in diags}
    origin, propagated = by_line[3], by_line[4]
    assert origin.severity == types.DiagnosticSeverity.Error
    assert origin.source == "NaN Lens" and origin.code == "Log"
    assert origin.data == {"sourceId": record.id, "role": "origin"}
    assert origin.message.startswith("Log produced 1 -inf")
    # Underlines the code, not the indentation or past the line's end.
    assert (origin.range.start.character, origin.range.end.character) == (
        0,
        len("y = tf.math.log(x)  # ORIGIN"),
    )
    assert propagated.severity == types.DiagnosticSeverity.Warning
    assert propagated.related_information and propagated.related_information[0].location.range.start.line == 2


def test_stale_findings_are_information_prefixed_stale(tmp_path: Path) -> None:
    record, user_file = make_record(tmp_path, stale=True)
    diags = render.diagnostics_by_file([record], disk_line_text, uri)[user_file]
    assert all(d.severity == types.DiagnosticSeverity.Information for d in diags)
    assert all(d.message.startswith("(stale) ") for d in diags)
    payload = render.findings_notification([record])
    assert payload["sources"][0]["origin"]["stale"] is True
    assert all(f["stale"] for f in payload["sources"][0]["findings"])


def test_origin_listed_once_even_when_engine_lists_it_in_findings(tmp_path: Path) -> None:
    record, _ = make_record(tmp_path)
    assert [f.role for f in record.all_findings()] == ["origin", "propagated"]
    assert record.findings is not None
    record.findings.findings = record.findings.findings[1:]  # an engine that keeps the origin apart
    assert [f.role for f in record.all_findings()] == ["origin", "propagated"]


def test_hover_shows_op_type_graph_step_health_inputs_and_message(tmp_path: Path) -> None:
    record, user_file = make_record(tmp_path)
    hits = render.findings_at([record], user_file, 2)
    assert [f.role for _, f in hits] == ["origin"]
    text = render.hover_markdown(hits)
    for expected in (
        "`model/Log`",
        "`Log`",
        "__inference_train_step_42",
        "step: 12",
        "1 -inf of 2",
        "model/probs_1:0",
        "finite \\(2 values, 1 zero\\)",  # parentheses escaped: no link can form around them
        "Log produced 1 -inf from input model/probs\\_1:0",
    ):
        assert expected in text, expected
    assert render.findings_at([record], user_file, 0) == []


def test_hover_of_stale_finding_says_so(tmp_path: Path) -> None:
    record, user_file = make_record(tmp_path, stale=True)
    assert "(stale)" in render.hover_markdown(render.findings_at([record], user_file, 2))


def test_message_built_when_engine_gave_none(tmp_path: Path) -> None:
    finding = make_finding(str(tmp_path / "a.py"), 1, role="backward-origin", op_type="SqrtGrad")
    assert render.finding_message(finding) == "SqrtGrad produced 1 -inf of 2 in the backward pass"


def test_bundle_origin_gets_replay_lens_with_replay_target(tmp_path: Path) -> None:
    record, user_file = make_record(tmp_path, kind="bundle")
    lenses = run_lenses(render.code_lenses([record], user_file, disk_line_text))
    assert len(lenses) == 1
    lens = lenses[0]
    assert lens.range.start.line == 2
    assert lens.command is not None
    assert lens.command.title == "$(debug-alt) Replay eagerly (step 12)"
    assert lens.command.command == "nanlens.replayEagerly"
    assert lens.command.arguments == [{"bundle": record.path, "file": user_file, "line": 3, "step": 12}]


def test_origin_lines_get_the_picture_lenses_and_hover_links_from_the_server(tmp_path: Path) -> None:
    """The server owns every lens and hover of an origin line; the client only draws the pictures they open."""
    bundle, user_file = make_record(tmp_path, kind="bundle")
    args = [{"sourceId": bundle.id}]
    pictures = [
        (lens.range.start.line, lens.command.title, lens.command.command, lens.command.arguments)
        for lens in render.code_lenses([bundle], user_file, disk_line_text)
        if lens.command is not None and lens.command.command in PICTURE_COMMANDS
    ]
    assert pictures == [
        (2, "$(type-hierarchy) Show op graph", "nanlens.showOpGraph", args),
        (2, "$(graph-line) Health timeline", "nanlens.showTimeline", args),
    ]
    hover = render.hover_markdown(render.findings_at([bundle], user_file, 2))
    encoded = urllib.parse.quote(json.dumps(args), safe="")
    assert f"[Show op graph](command:nanlens.showOpGraph?{encoded} " in hover
    assert f"[Health timeline](command:nanlens.showTimeline?{encoded} " in hover
    assert json.loads(urllib.parse.unquote(encoded)) == args  # what VS Code hands the command
    # Only the origin's line, and only a source whose pictures can be drawn.
    assert "command:" not in render.hover_markdown(render.findings_at([bundle], user_file, 3))
    bundle.status = "error"
    assert "command:" not in render.hover_markdown(render.findings_at([bundle], user_file, 2))
    assert all(
        lens.command is None or lens.command.command not in PICTURE_COMMANDS
        for lens in render.code_lenses([bundle], user_file, disk_line_text)
    )
    # Two sources on one line: each picture lens says which.
    first, _ = make_record(tmp_path, kind="dump")
    titles = {
        lens.command.title
        for lens in render.code_lenses([first, bundle], user_file, disk_line_text)
        if lens.command is not None and lens.command.command == render.SHOW_OP_GRAPH
    }
    assert titles == {f"$(type-hierarchy) Show op graph · {first.label}"}
    bundle.status = "ok"
    second = SourceRecord(
        SourceRef("bundle", str(tmp_path / "other-run")), status="ok", findings=bundle.findings
    )
    titles = {
        lens.command.title
        for lens in render.code_lenses([bundle, second], user_file, disk_line_text)
        if lens.command is not None and lens.command.command == render.SHOW_OP_GRAPH
    }
    assert titles == {f"$(type-hierarchy) Show op graph · {r.label}" for r in (bundle, second)}


def test_dump_origin_gets_debug_lens_when_script_is_known(tmp_path: Path) -> None:
    record, user_file = make_record(tmp_path, kind="dump")
    lenses = run_lenses(render.code_lenses([record], user_file, disk_line_text))
    assert len(lenses) == 1 and lenses[0].command is not None
    assert lenses[0].command.title == "$(debug-alt) Run eagerly under debugger"
    assert lenses[0].command.command == "nanlens.debugEagerly"
    assert lenses[0].command.arguments == [{"script": user_file, "file": user_file, "line": 3}]
    assert record.findings is not None and record.findings.origin is not None
    record.findings.origin.stack = []  # no module frame: the script is unknown, so no lens
    assert run_lenses(render.code_lenses([record], user_file, disk_line_text)) == []


def test_lenses_of_two_sources_on_one_line_say_which_is_which(tmp_path: Path) -> None:
    first, user_file = make_record(tmp_path, kind="bundle")
    second = SourceRecord(
        SourceRef("bundle", str(tmp_path / "other-run")), status="ok", findings=first.findings
    )
    titles = [
        lens.command.title
        for lens in run_lenses(render.code_lenses([first, second], user_file, disk_line_text))
        if lens.command
    ]
    assert len(set(titles)) == 2 and all(
        t.startswith("$(debug-alt) Replay eagerly (step 12) · ") for t in titles
    )


def test_findings_notification_matches_protocol(tmp_path: Path) -> None:
    record, _ = make_record(tmp_path, kind="bundle")
    error = SourceRecord(SourceRef("dump", str(tmp_path / "broken")), status="error", error="truncated dump")
    payload = render.findings_notification([record, error])
    json.dumps(payload)  # must be plain JSON
    by_kind = {s["kind"]: s for s in payload["sources"]}
    bundle = by_kind["bundle"]
    assert bundle["id"] == f"bundle:{record.path}"
    assert bundle["label"] == "run-step12 (step 12)" and bundle["step"] == 12 and bundle["status"] == "ok"
    assert bundle["origin"]["role"] == "origin" and bundle["origin"]["line"] == 3
    assert [f["role"] for f in bundle["findings"]] == ["origin", "propagated"]
    assert by_kind["dump"] == {
        "id": f"dump:{error.path}",
        "kind": "dump",
        "path": error.path,
        "label": "broken",
        "step": None,
        "status": "error",
        "error": "truncated dump",
        "origin": None,
        "findings": [],
        "entry": None,
        "foreign": None,
        "untrusted": None,
        "cause": None,
    }


# --- settings -------------------------------------------------------------------------------------------------------


def test_settings_accept_both_shapes_and_fall_back_per_key() -> None:
    bare = parse_settings({"captureDirs": ["caps"], "dumpDirs": "dumps", "logLevel": "debug"})
    assert bare == Settings(("caps",), ("dumps",), "DEBUG")
    nested = parse_settings({"settings": {"nanlens": {"dumpDirs": ["d"]}}})
    assert nested.dump_dirs == ("d",) and nested.capture_dirs == Settings().capture_dirs
    bad = parse_settings({"captureDirs": 3, "logLevel": "LOUD"})
    assert bad.capture_dirs == Settings().capture_dirs and bad.log_level == "INFO"
    assert len(bad.problems) == 2 and "captureDirs" in bad.problems[0]
    assert parse_settings("nonsense").problems


def test_relative_dirs_resolve_per_workspace_folder(tmp_path: Path) -> None:
    settings = Settings(capture_dirs=("caps", str(tmp_path / "abs")), dump_dirs=("caps",))
    roots = watched_roots(settings, ["/w1", "/w2"])
    assert [r.path for r in roots] == ["/w1/caps", "/w2/caps", str(tmp_path / "abs")]
    assert [r.explicit for r in roots] == [False, False, True]


def test_root_problems_for_missing_absolute_and_non_folder(tmp_path: Path) -> None:
    a_file = tmp_path / "f.txt"
    a_file.write_text("x")
    settings = Settings(
        capture_dirs=(str(tmp_path / "missing"), str(a_file), "relative-missing"), dump_dirs=()
    )
    problems = [root_problem(r) for r in watched_roots(settings, [str(tmp_path)])]
    assert "does not exist" in (problems[0] or "")
    assert "not a folder" in (problems[1] or "")
    assert problems[2] is None  # a default like .nanlens/dumps appears once the user makes a dump


# --- sources ---------------------------------------------------------------------------------------------------------


def make_dump_dir(path: Path, payload: bytes = b"x") -> Path:
    path.mkdir(parents=True)
    (path / "tfdbg_events.1700000000.host.metadata").write_bytes(b"m")
    (path / "tfdbg_events.1700000000.host.graph_execution_traces").write_bytes(payload)
    return path


def make_bundle_dir(path: Path, manifest: dict | None = None) -> Path:
    path.mkdir(parents=True)
    (path / "manifest.json").write_text(json.dumps(manifest or BUNDLE_MANIFEST))
    (path / "step.npz").write_bytes(b"data")
    return path


def test_discover_finds_bundles_and_dumps_not_other_folders(tmp_path: Path) -> None:
    dump = make_dump_dir(tmp_path / ".nanlens" / "dumps" / "run1")
    bundle = make_bundle_dir(tmp_path / "captures" / "run-step12")
    make_bundle_dir(tmp_path / "captures" / "other", {"format": "something-else/1"})
    (tmp_path / "captures" / "notes").mkdir()
    found = discover([str(tmp_path / ".nanlens"), str(tmp_path / "captures"), str(tmp_path / "missing")])
    assert found == [SourceRef("dump", str(dump)), SourceRef("bundle", str(bundle))]
    assert discover([str(dump)]) == [SourceRef("dump", str(dump))]  # a root may be a source itself
    assert source_at(str(bundle)) == SourceRef("bundle", str(bundle))
    assert source_at(str(tmp_path / "captures" / "other")) is None


def test_fingerprint_follows_growth_and_ignores_precomputed_findings(tmp_path: Path) -> None:
    dump = make_dump_dir(tmp_path / "run1")
    ref = SourceRef("dump", str(dump))
    before = fingerprint(ref)
    (dump / "findings.json").write_text("{}")
    assert fingerprint(ref) == before
    with open(dump / "tfdbg_events.1700000000.host.graph_execution_traces", "ab") as fh:
        fh.write(b"more")
    after = fingerprint(ref)
    assert after is not None and before is not None and after.total_size == before.total_size + 4
    bundle = make_bundle_dir(tmp_path / "b")
    assert fingerprint(SourceRef("bundle", str(bundle))) == fingerprint(SourceRef("bundle", str(bundle)))
    assert fingerprint(SourceRef("dump", str(tmp_path / "gone"))) is None


def test_debouncer_scans_new_at_once_then_when_settled_or_every_max_wait() -> None:
    d = Debouncer(max_wait=5.0)
    fp = [Fingerprint(1, size, size) for size in range(10)]
    assert d.observe("s", fp[0], 0.0) is True  # new: at once
    assert d.observe("s", fp[0], 1.0) is False  # unchanged
    assert d.observe("s", fp[1], 2.0) is False  # growing...
    assert d.observe("s", fp[1], 3.0) is True  # ...settled for one poll
    # Growing at every poll: rescanned after max_wait, not at every poll.
    assert [d.observe("s", fp[i], 3.0 + i) for i in range(2, 9)] == [False] * 5 + [True, False]
    d.forget("s")
    assert d.observe("s", fp[9], 20.0) is True


def test_watcher_reports_new_changed_removed_sources_and_changed_files(tmp_path: Path) -> None:
    user_file = tmp_path / "train.py"
    user_file.write_text("a = 1\n")
    watcher = FolderWatcher(lambda events: None, max_wait=0.0)
    watcher.set_roots([str(tmp_path)])
    watcher.set_watched_files([str(user_file)])
    dump = make_dump_dir(tmp_path / "run1")
    first = watcher.poll()
    assert (
        [ref.path for ref, _ in first.scan] == [str(dump)] and not first.removed and not first.files_changed
    )
    assert not watcher.poll()
    with open(dump / "tfdbg_events.1700000000.host.graph_execution_traces", "ab") as fh:
        fh.write(b"more")
    user_file.write_text("a = 2  # edited\n")
    second = watcher.poll()
    assert [ref.path for ref, _ in second.scan] == [str(dump)] and second.files_changed == [str(user_file)]
    for child in dump.iterdir():
        child.unlink()
    dump.rmdir()
    assert watcher.poll().removed == [f"dump:{dump}"]


# --- staleness ---------------------------------------------------------------------------------------------------------


def test_text_hash_ignores_line_endings_and_final_newline() -> None:
    assert text_hash("a\nb\n") == text_hash("a\r\nb") == text_hash("a\nb")
    assert text_hash("a\nb\n") != text_hash("a\nb\nc\n")


def test_snapshot_prefers_recorded_text_and_flags_files_edited_after_the_source(tmp_path: Path) -> None:
    old = tmp_path / "old.py"
    new = tmp_path / "new.py"
    old.write_text("x = 1\n")
    new.write_text("x = 2\n")
    source_time = time.time() - 100
    os.utime(old, (source_time - 50, source_time - 50))
    snap = snapshot_files(
        [str(old), str(new), str(tmp_path / "recorded.py")],
        source_time,
        {str(tmp_path / "recorded.py"): text_hash("r = 0\n")},
    )
    assert snap[str(old)] == text_hash("x = 1\n")
    assert snap[str(new)] == CHANGED_AFTER_SOURCE
    assert not is_stale(snap[str(old)], "x = 1\n")
    assert is_stale(snap[str(old)], "x = 1\nprint(x)\n")
    assert is_stale(snap[str(new)], "x = 2\n")
    assert is_stale(snap[str(old)], None)  # the file is gone
    assert not is_stale(None, "anything")  # nothing recorded, nothing to say


# --- compute: caches and progress -----------------------------------------------------------------------------------


def write_findings(path: Path, kind: str, source: Path) -> None:
    origin = make_finding(str(source.parent / "train.py"), 3)
    path.write_text(Findings(kind, str(source), origin, [origin]).dumps())  # type: ignore[arg-type]


def test_precomputed_findings_used_only_when_newer_than_the_content(tmp_path: Path) -> None:
    bundle = make_bundle_dir(tmp_path / "run-step12")
    ref = SourceRef("bundle", str(bundle))
    beside = Path(str(bundle) + ".findings.json")
    write_findings(beside, "bundle", bundle)
    content = fingerprint(ref)
    assert content is not None
    os.utime(beside, (content.newest_mtime + 5, content.newest_mtime + 5))
    assert fresh_cache(ref, content) == str(beside)
    os.utime(beside, (content.newest_mtime - 5, content.newest_mtime - 5))
    assert fresh_cache(ref, content) is None  # the bundle was rewritten after: recompute
    # Written in the same clock tick as the bundle (coarse file-system timestamps): still fresh. Every ns value in
    # one second is tried: compared as floats, about one in seven such ties was judged older.
    for nanos in range(
        content.newest_mtime_ns - content.newest_mtime_ns % 10**9,
        content.newest_mtime_ns - content.newest_mtime_ns % 10**9 + 10**9,
        7_919_111,
    ):
        os.utime(beside, ns=(nanos, nanos))
        tied = fingerprint(ref)
        assert tied is not None
        tied = type(tied)(tied.files, tied.total_size, nanos)
        assert fresh_cache(ref, tied) == str(beside), nanos

    os.utime(beside, (content.newest_mtime + 5, content.newest_mtime + 5))
    loaded = compute(ref, content, lambda m, p: None, threading.Event())
    assert loaded.cache_path == str(beside)
    assert loaded.findings.origin is not None and loaded.findings.origin.line == 3


def test_precomputed_findings_of_the_wrong_kind_are_not_used(tmp_path: Path) -> None:
    dump = make_dump_dir(tmp_path / "run1")
    write_findings(dump / "findings.json", "bundle", dump)
    ref = SourceRef("dump", str(dump))
    try:
        compute(ref, fingerprint(ref), lambda m, p: None, threading.Event())
    except ComputeError as exc:  # falls through to scanning the (fake) dump: a one-line error, no traceback
        assert "\n" not in str(exc)


def test_progress_callback_accepts_the_usual_shapes() -> None:
    seen: list[tuple[str | None, int | None]] = []
    cb = progress_callback(lambda m, p: seen.append((m, p)))
    cb("reading traces", 0.5)
    cb("step", 3, 4)
    cb(message="done", fraction=1.0)
    cb(done=1, total=4)
    cb(42)
    cb({"message": "dict", "percentage": 7})
    assert seen == [("reading traces", 50), ("step", 75), ("done", 100), (None, 25), (None, 42), ("dict", 7)]


def test_hover_of_bundle_finding_shows_the_training_step_not_the_replay_step(tmp_path: Path) -> None:
    record, user_file = make_record(tmp_path, kind="bundle")
    assert record.findings is not None and record.findings.origin is not None
    record.findings.origin.op.step = (
        0  # locate replays the bundle's one step: the dump's step counter starts at 0
    )
    text = render.hover_markdown(render.findings_at([record], user_file, 2))
    assert "step: 12" in text and "step: 0" not in text


# --- notebooks --------------------------------------------------------------------------------------------------------

NOTEBOOK_JSON = {
    "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": ["# Training\n", "A markdown cell first."]},
        {
            "cell_type": "code",
            "metadata": {},
            "outputs": [],
            "execution_count": 1,
            "source": ["import tensorflow as tf\n"],
        },
        {
            "cell_type": "code",
            "metadata": {},
            "outputs": [],
            "execution_count": 2,
            "source": "x = tf.constant([0.0])\n    y = tf.math.log(x)  # ORIGIN\nz = y * 2",
        },
    ],
    "metadata": {},
    "nbformat": 4,
    "nbformat_minor": 5,
}


def make_notebook_record(tmp_path: Path, kind: str = "bundle") -> tuple[SourceRecord, str]:
    """A source whose origin is on line 2 of cell 2 (the second code cell) of analysis.ipynb."""
    notebook = tmp_path / "analysis.ipynb"
    notebook.write_text(json.dumps(NOTEBOOK_JSON))
    origin = make_finding(str(notebook), 2, message="Log produced 1 -inf")
    origin.cell = 2
    propagated = make_finding(str(notebook), 3, role="propagated", op_type="Mul")
    propagated.cell = 2
    findings = Findings(
        source_kind=kind,
        source_path=str(tmp_path / "src"),
        origin=origin,  # type: ignore[arg-type]
        findings=[origin, propagated],
        bundle={"step": 12} if kind == "bundle" else None,
    )
    record = SourceRecord(SourceRef(kind, str(tmp_path / "run-step12")), status="ok", findings=findings)  # type: ignore[arg-type]
    return record, str(notebook)


def notebook_line_text(path: str, line: int, cell: int | None = None) -> str | None:
    from pyadapter.server.notebooks import cell_sources

    cells = cell_sources(Path(path).read_text())
    assert cells is not None and cell is not None
    lines = cells[cell].splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else None


def test_notebook_findings_go_to_their_cell_and_never_onto_the_ipynb(tmp_path: Path) -> None:
    record, notebook = make_notebook_record(tmp_path)
    # Plain files only: the .ipynb's own lines are JSON, so its findings have no diagnostics by file.
    assert render.diagnostics_by_file([record], notebook_line_text, uri) == {}
    cell_uri = "vscode-notebook-cell:" + notebook + "#W2sZmlsZQ%3D%3D"
    by_place = render.diagnostics_by_place(
        [record], notebook_line_text, lambda f, c: cell_uri if c == 2 else None if c is not None else uri(f)
    )
    assert list(by_place) == [(notebook, 2)]
    by_line = {d.range.start.line + 1: d for d in by_place[(notebook, 2)]}
    origin, propagated = by_line[2], by_line[3]
    assert origin.severity == types.DiagnosticSeverity.Error and origin.code == "Log"
    # Underlined from the code of the cell's line, not column 0 of its indentation.
    assert (origin.range.start.character, origin.range.end.character) == (
        4,
        len("    y = tf.math.log(x)  # ORIGIN"),
    )
    assert propagated.related_information and propagated.related_information[0].location.uri == cell_uri
    # The origin's cell not shown anywhere (its notebook is closed): no related location rather than a wrong one.
    closed = render.diagnostics_by_place([record], notebook_line_text, lambda f, c: None)
    assert all(d.related_information is None for d in closed[(notebook, 2)])


def test_notebook_hover_and_lens_match_the_cell_not_just_the_line(tmp_path: Path) -> None:
    record, notebook = make_notebook_record(tmp_path)
    assert [f.role for _, f in render.findings_at([record], notebook, 1, cell=2)] == ["origin"]
    assert render.findings_at([record], notebook, 1) == []  # the file without a cell: not this finding
    assert render.findings_at([record], notebook, 1, cell=1) == []  # another cell's line 2
    assert "`Log`" in render.hover_markdown(render.findings_at([record], notebook, 1, cell=2))
    assert render.code_lenses([record], notebook, notebook_line_text) == []
    assert render.code_lenses([record], notebook, notebook_line_text, cell=0) == []
    lenses = run_lenses(render.code_lenses([record], notebook, notebook_line_text, cell=2))
    assert len(lenses) == 1 and lenses[0].command is not None and lenses[0].range.start.line == 1
    assert lenses[0].command.title == "$(debug-alt) Replay eagerly (step 12)"
    (target,) = lenses[0].command.arguments
    assert Path(target.pop("cellFile")).is_file(), "the cell file a replay runs, where the breakpoint goes"
    assert target == {"bundle": record.path, "file": notebook, "line": 2, "step": 12, "cell": 2}
    payload = render.findings_notification([record])
    assert payload["sources"][0]["origin"]["cell"] == 2
    assert [f["cell"] for f in payload["sources"][0]["findings"]] == [2, 2]


def test_notebook_dump_origin_gets_no_debug_script_lens(tmp_path: Path) -> None:
    record, notebook = make_notebook_record(tmp_path, kind="dump")
    assert record.findings is not None
    record.findings.extra["entry_script"] = str(tmp_path / "train.py")  # a script, but the origin is a cell's
    assert run_lenses(render.code_lenses([record], notebook, notebook_line_text, cell=2)) == []


def test_same_line_in_two_cells_is_two_findings(tmp_path: Path) -> None:
    record, notebook = make_notebook_record(tmp_path)
    assert record.findings is not None and record.findings.origin is not None
    twin = Finding.from_json({**record.findings.origin.to_json(), "cell": 1})
    record.findings.findings.append(twin)
    assert [(f.cell, f.line) for f in record.all_findings()] == [(2, 2), (2, 3), (1, 2)]


def test_notebook_cells_from_disk_and_from_the_synced_notebook(tmp_path: Path) -> None:
    from pyadapter.server.notebooks import cell_place, cell_sources, cell_uri, find_notebook

    sources = cell_sources(json.dumps(NOTEBOOK_JSON))
    assert sources is not None and len(sources) == 3
    assert sources[0] == "# Training\nA markdown cell first." and sources[1] == "import tensorflow as tf\n"
    assert cell_sources("not json") is None and cell_sources(json.dumps({"cells": 3})) is None
    assert cell_sources(None) is None

    path = str(tmp_path / "a b.ipynb")
    nb_uri = "file://" + str(tmp_path).replace(" ", "%20") + "/a%20b.ipynb"
    cells = [
        types.NotebookCell(
            kind=types.NotebookCellKind.Markup, document="vscode-notebook-cell:/x/a%20b.ipynb#m0"
        ),
        types.NotebookCell(
            kind=types.NotebookCellKind.Code, document="vscode-notebook-cell:/x/a%20b.ipynb#c1"
        ),
    ]
    notebook = types.NotebookDocument(uri=nb_uri, notebook_type="jupyter-notebook", version=1, cells=cells)
    assert find_notebook([notebook], path) is notebook
    assert cell_uri([notebook], path, 1) == "vscode-notebook-cell:/x/a%20b.ipynb#c1"
    assert cell_uri([notebook], path, 2) is None and cell_uri([notebook], path, -1) is None
    assert cell_uri([notebook], str(tmp_path / "other.ipynb"), 0) is None
    # The client may spell the cell URI quoted or not.
    assert cell_place(notebook, "vscode-notebook-cell:/x/a b.ipynb#c1") == (path, 1)
    assert cell_place(notebook, "vscode-notebook-cell:/x/a%20b.ipynb#m0") == (path, 0)
    assert cell_place(notebook, "vscode-notebook-cell:/x/other.ipynb#c1") is None
    assert cell_place(None, "vscode-notebook-cell:/x/a%20b.ipynb#c1") is None


def test_a_notebook_is_stale_when_its_code_changes_not_its_outputs(tmp_path: Path) -> None:
    from pyadapter.server.staleness import content_hash

    notebook = tmp_path / "analysis.ipynb"
    text = json.dumps(NOTEBOOK_JSON)
    notebook.write_text(text)
    ran = json.loads(text)
    ran["cells"][2]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["nan\n"]}]
    ran["cells"][2]["execution_count"] = 7
    ran["metadata"]["widgets"] = {"state": {}}
    assert content_hash(str(notebook), json.dumps(ran, indent=1)) == content_hash(str(notebook), text)
    edited = json.loads(text)
    edited["cells"][2]["source"] = "x = tf.constant([1.0])\n"
    assert content_hash(str(notebook), json.dumps(edited)) != content_hash(str(notebook), text)
    # A notebook saved after the run (new outputs) is compared by its code, not called changed for its mtime.
    source_time = time.time() - 100
    snap = snapshot_files([str(notebook)], source_time)
    assert snap[str(notebook)] == content_hash(str(notebook), text)
    assert not is_stale(snap[str(notebook)], json.dumps(ran), str(notebook))
    assert is_stale(snap[str(notebook)], json.dumps(edited), str(notebook))
    # Not notebook JSON after all: hashed as text.
    assert content_hash(str(notebook), "garbage") == text_hash("garbage")


def test_quick_fixes_in_a_cell_know_the_imports_of_earlier_cells() -> None:
    from pyadapter.server.code_actions import fixes_with_preamble
    from pyadapter.server.notebooks import import_preamble

    preamble = import_preamble(
        [
            "import numpy as np\nimport tensorflow as tf\nx = 1",
            "# Notes",
            "from tensorflow import keras\nfrom a import (\n    b,\n)\n  import os",
        ]
    )
    assert preamble == "import numpy as np\nimport tensorflow as tf\nfrom tensorflow import keras\n"
    cell = "def loss(x):\n    return tf.math.log(x)\n"
    finding = Finding(
        file="/nb.ipynb",
        line=2,
        cell=2,
        role="origin",
        op=OpRef(name="Log", type="Log"),
        health=TensorHealth(dtype="float32", size=2, neg_inf=1),
    )
    assert fixes_with_preamble(cell, finding, "") == []  # `tf` unknown in the cell alone
    fixes = fixes_with_preamble(cell, finding, preamble)
    assert fixes and all(
        edit.line == 2 for fix in fixes for edit in fix.edits
    )  # lines of the cell, not the preamble
    assert "tf.maximum" in fixes[0].edits[0].new_text


# --- consent: no bundle's program runs unasked (server/consent.py) ---------------------------------------------------


def test_settings_read_the_automatic_locate_switch() -> None:
    assert Settings().locate_automatic is False
    assert parse_settings({"locateAutomatic": True}).locate_automatic is True
    bad = parse_settings({"locateAutomatic": "yes"})
    assert bad.locate_automatic is False and "nanlens.locate.automatic" in bad.problems[0]


def test_a_refusal_to_run_the_program_is_recognised_in_the_replay_error_line() -> None:
    from pyadapter.server.consent import untrusted_of

    cli = (
        "nanlens: error: not running /w s/train.py: its code changed since the capture (sha256 differs from the "
        "bundle's record); if the change is yours, add --trust-entry /w s/train.py"
    )
    found = untrusted_of("some TensorFlow noise\n" + cli + "\n")
    assert found is not None and found.file == "/w s/train.py" and found.reason == "changed"
    assert found.message == cli.removeprefix("nanlens: error: ")
    worker = (
        "not running /elsewhere/x.py: the bundle names it, but it is outside /ws (the folder nanlens runs in); "
        "if it is your code, run nanlens from its folder or add --trust-entry /elsewhere/x.py"
    )
    outside = untrusted_of(worker)
    assert outside is not None and outside.file == "/elsewhere/x.py" and outside.reason == "outside"
    assert untrusted_of("replay failed: the step raised ValueError") is None
    assert untrusted_of(None) is None and untrusted_of("") is None


def test_a_bundle_is_foreign_when_pulled_unsealed_or_recorded_on_another_host(tmp_path: Path) -> None:
    from pyadapter.capture.seal import sealed
    from pyadapter.server.consent import foreign_reason, mark_pulled, this_host

    recorded = {**BUNDLE_MANIFEST, "host": {"hostname": this_host()}, "entry_script": {"path": "/w/train.py"}}
    own = sealed(recorded)
    bundle = str(tmp_path / "run-step12")
    assert foreign_reason(bundle, own) is None
    # A hostname is anyone's to write: without this user's seal the bundle is not taken as the user's own.
    assert foreign_reason(bundle, recorded) == "not sealed by your NanGuard here"
    assert foreign_reason(bundle, {**recorded, "host": {"hostname": "node-7"}}) == "captured on node-7"
    edited = {**own, "entry_script": {"path": "/w/train.py", "argv": ["train.py", "--out", "/"]}}
    assert foreign_reason(bundle, edited) == "not sealed by your NanGuard here"
    assert foreign_reason(bundle, BUNDLE_MANIFEST) == "not sealed by your NanGuard here"
    assert foreign_reason(bundle, own, pulled=True) == "pulled"
    mark_pulled(bundle)  # beside the bundle, never inside it
    assert Path(bundle + ".pulled").is_file() and foreign_reason(bundle, own) == "pulled"


def test_a_bundle_without_findings_is_not_located_unless_allowed(tmp_path: Path, monkeypatch) -> None:
    import subprocess

    from pyadapter.server.compute import NotLocated

    def no_child(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"a child was started: {args}")

    monkeypatch.setattr(subprocess, "Popen", no_child)
    bundle = make_bundle_dir(tmp_path / "run-step12")
    ref = SourceRef("bundle", str(bundle))
    reports: list[tuple[str | None, int | None]] = []
    try:
        compute(
            ref, fingerprint(ref), lambda m, p: reports.append((m, p)), threading.Event(), may_locate=False
        )
    except NotLocated as exc:
        assert exc.untrusted is None and "not located" in str(exc)
    else:
        raise AssertionError("a bundle without findings was answered without a locate")
    assert reports == []  # no progress: nothing ran
    write_findings(
        bundle / "findings.json", "bundle", bundle
    )  # located at the scene: shown, still nothing runs
    shown = compute(
        ref, fingerprint(ref), lambda m, p: reports.append((m, p)), threading.Event(), may_locate=False
    )
    assert shown.findings.origin is not None and reports == []


def test_a_locate_refused_by_the_replay_waits_for_the_user_with_the_file(tmp_path: Path, monkeypatch) -> None:
    """The locate child's one-line refusal (the program changed / lies outside) is NotLocated carrying the file,
    and the child ran in the workspace folder with the files the user trusted."""
    from pyadapter.childproc import ChildRun
    from pyadapter.server import compute as compute_module

    refusal = "not running /ws/train.py: its code changed since the capture; add --trust-entry /ws/train.py"
    started: list[dict] = []

    # A stand-in for the locate child (a real one would need a real bundle and TensorFlow): it prints the refusal
    # line the worker prints, and exits 1.
    def child(args: list[str], **kwargs: object) -> ChildRun:
        started.append({"cmd": args, "cwd": kwargs.get("cwd")})
        kwargs["on_line"](json.dumps({"error": refusal}))  # type: ignore[operator]
        return ChildRun(1)

    monkeypatch.setattr(compute_module, "run_python", child)
    bundle = make_bundle_dir(tmp_path / "captures" / "run-step12")
    ref = SourceRef("bundle", str(bundle))
    try:
        compute_module.compute(
            ref,
            fingerprint(ref),
            lambda m, p: None,
            threading.Event(),
            cwd=str(tmp_path),
            trust=("/ws/other.py",),
        )
    except compute_module.NotLocated as exc:
        assert exc.untrusted is not None and exc.untrusted.file == "/ws/train.py"
        assert exc.untrusted.reason == "changed"
    else:
        raise AssertionError("the refusal was not recognised")
    (child,) = started
    assert child["cwd"] == str(tmp_path)
    assert child["cmd"][-2:] == ["--trust-entry", "/ws/other.py"]
    assert not list((tmp_path / "captures").glob("*.findings.json"))  # nothing cached


def test_check_entry_says_whether_a_replay_would_run_the_program(tmp_path: Path) -> None:
    import hashlib

    from pyadapter.server.consent import check_entry, refusal_of

    ws = tmp_path / "ws"
    ws.mkdir()
    program = ws / "train.py"
    program.write_text("print('train')\n")
    from pyadapter.capture.seal import sealed

    recorded = {
        **BUNDLE_MANIFEST,
        "entry_script": {"path": str(program), "sha256": hashlib.sha256(program.read_bytes()).hexdigest()},
    }
    manifest = sealed(recorded)  # as this user's NanGuard wrote it
    bundle = str(ws / "captures" / "run-step12")
    mine = check_entry(bundle, manifest, str(ws), set())
    assert mine == {"entry": str(program), "trusted": True, "untrusted": None, "error": None}
    handed = check_entry(bundle, recorded, str(ws), set())  # the same fields, written by someone else
    assert handed["trusted"] is False and handed["untrusted"]["reason"] == "untrusted"
    outside = check_entry(bundle, manifest, str(tmp_path / "other"), set())
    assert outside["trusted"] is False and outside["untrusted"]["reason"] == "outside"
    assert outside["untrusted"]["file"] == str(program)
    # What a waiting bundle's record carries, so the editor names the refusal before the user clicks Locate.
    refused = refusal_of(bundle, manifest, str(tmp_path / "other"), set())
    assert refused is not None and (refused.file, refused.reason) == (str(program), "outside")
    assert refusal_of(bundle, manifest, str(ws), set()) is None
    program.write_text("print('fixed')\n")
    changed = check_entry(bundle, manifest, str(ws), set())
    assert changed["trusted"] is False and changed["untrusted"]["reason"] == "changed"
    assert check_entry(bundle, manifest, str(ws), {str(program)})["trusted"] is True
    program.unlink()
    gone = check_entry(bundle, manifest, str(ws), set())
    assert gone["trusted"] is None and "missing" in gone["error"]


def test_a_bundle_waiting_for_the_user_gets_a_locate_lens_on_its_program(tmp_path: Path) -> None:
    program = tmp_path / "train.py"
    program.write_text("import tensorflow as tf\n")
    record = SourceRecord(
        SourceRef("bundle", str(tmp_path / "captures" / "run-step12")),
        status="unlocated",
        manifest={**BUNDLE_MANIFEST, "entry_script": {"path": str(program)}},
        foreign="captured on node-7",
    )
    (lens,) = render.locate_lenses([record], str(program))
    assert lens.range.start.line == 0 and lens.command is not None
    assert (
        lens.command.title
        == "$(search) Locate NaN in run-step12 (step 12), captured on node-7 (runs train.py)"
    )
    assert lens.command.command == "nanlens.locateBundle" and lens.command.arguments == [record.path]
    assert render.locate_lenses([record], str(tmp_path / "other.py")) == []
    record.status = "ok"
    assert render.locate_lenses([record], str(program)) == []
    source = render.source_json(SourceRecord(record.ref, status="unlocated", manifest=record.manifest))
    assert source["status"] == "unlocated" and source["entry"] == str(program) and source["origin"] is None


def test_a_rescan_asked_too_soon_after_the_last_one_waits_then_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A growing dump rescans at most once per twice its last scan's duration: the later start must happen."""
    import asyncio
    from types import SimpleNamespace

    from pyadapter.server import jobs

    ref = SourceRef("dump", "/w/.nanlens/dumps/run")
    events: list[str] = []
    monkeypatch.setattr(jobs, "start_job", lambda ls, started, fp: events.append(f"start {started.id}"))
    loop = asyncio.new_event_loop()
    try:
        ls = SimpleNamespace(
            loop=loop,
            timing={ref.id: (time.monotonic(), 0.05)},  # the last scan just ended and took 50 ms
            delayed={},
            jobs={},
            records={ref.id: SourceRecord(ref)},
            publish=lambda: events.append("publish"),
        )
        assert jobs.schedule_job(ls, ref, None) is False and events == []  # type: ignore[arg-type]
        loop.run_until_complete(asyncio.sleep(0.3))
    finally:
        loop.close()
    assert events == [f"start {ref.id}", "publish"] and ls.delayed == {}


def test_data_cause_hover_links_the_bad_record_once(tmp_path: Path) -> None:
    """A data cause's sentence names the bad record; the hover makes that mention the link and does not repeat
    it under "from" (it used to say the same record twice in one hover)."""
    from pyadapter.cause import FINDINGS_KEY
    from pyadapter.cause.model import Cause, Change

    record, user_file = make_record(tmp_path, kind="bundle")
    csv = tmp_path / "weather.csv"
    csv.write_text("pressure,rain\n1.0,2.0\nnan,3.0\n")
    sentence = "weather.csv line 3: field 'pressure' is 'nan'"
    cause = Cause(
        "data",
        f"the data held NaN/Inf before any op touched it: {sentence} (x[1, 0] = nan, batch 0, row 1)",
        change=Change(user_file, 3, "filter or repair non-finite records where the data is read (read_csv)"),
        provenance={
            "file": str(csv),
            "line": 3,
            "row": 1,
            "field": "pressure",
            "sentence": sentence,
            "text": "nan,3.0",
            "openable": True,
        },
    )
    assert record.findings is not None
    record.findings.extra[FINDINGS_KEY] = cause.to_json()

    hover = render.cause_markdown(record, on_change_line=True)
    link = f"{csv.as_uri()}#L3"
    assert f"touched it: [weather.csv line 3]({link}): field 'pressure' is 'nan' (data row 1)" in hover
    assert hover.count("field 'pressure' is 'nan'") == 1
    assert "- the record: `nan,3.0`" in hover and "- from:" not in hover

    # An array passed to fit names no record in its sentence: "from" still says where the value came from.
    cause.summary = (
        "the data held NaN/Inf before any op touched it: x[1, 0] = nan, index 7 of the array passed to fit"
    )
    cause.provenance = {"file": str(csv), "line": 3, "row": 1, "openable": True}
    record.findings.extra[FINDINGS_KEY] = cause.to_json()
    assert f"- from: [weather.csv line 3]({link}) (data row 1)" in render.cause_markdown(
        record, on_change_line=True
    )


def test_a_batch_index_in_the_hover_says_array_or_dataset_as_the_cause_does(tmp_path: Path) -> None:
    """No file record: the hover's "from" gives the element's index, in the words of the cause's sentence (a
    tf.data pipeline passed to fit is a dataset's element, not an array's index)."""
    from pyadapter.cause import FINDINGS_KEY
    from pyadapter.cause.model import Cause

    record, _ = make_record(tmp_path, kind="bundle")
    assert record.findings is not None
    for source, expected in (("array", "index 300 of the array"), ("dataset", "element 300 of the dataset")):
        cause = Cause(
            "op",
            "a Log op read the batch's y as it came, and y holds 1 zero for it: y[44, 0] = 0",
            provenance={"source": source, "index": 300, "batch_row": 44, "shuffled": False},
        )
        record.findings.extra[FINDINGS_KEY] = cause.to_json()
        assert f"- from: {expected} passed to fit" in render.cause_markdown(record, on_change_line=False)


# --- what a crafted findings file can put in a hover -------------------------------------------------------------

# Closes the op's code span, then a `command:` link (runs an editor command when clicked) and an image (fetched
# when the hover shows).
INJECTED = "`) [x](command:workbench.action.terminal.sendSequence?%7B%7D) ![b](https://e/p.png) `"


def rendered_links(markdown: str) -> list[str]:
    """The links and images a CommonMark renderer (as the editor's hover) makes of ``markdown``."""
    markdown_it = pytest.importorskip("markdown_it")
    page = markdown_it.MarkdownIt("commonmark").render(markdown)
    return re.findall(r'<a href="([^"]*)"', page) + re.findall(r'<img src="([^"]*)"', page)


def test_names_from_a_findings_file_cannot_put_links_or_images_in_the_hover(tmp_path: Path) -> None:
    from pyadapter.cause import FINDINGS_KEY
    from pyadapter.cause.model import Cause, Change

    record, user_file = make_record(tmp_path, kind="bundle")
    # The bundle's folder name is the source's label.
    record.ref = SourceRef("bundle", str(tmp_path / "run`) [l](command:x) ![i](x.png) `"))
    assert record.findings is not None and record.findings.origin is not None
    origin = record.findings.origin
    origin.op.name, origin.op.graph, origin.op.forward_op = INJECTED, "``" + INJECTED, INJECTED
    origin.op.device = f"cpu\n\n{INJECTED}"  # a blank line ends the paragraph, and any code span open in it
    origin.inputs[0].name = INJECTED
    origin.message = f"Log produced NaN {INJECTED} <img src=https://e/q.png>"
    record.findings.extra[FINDINGS_KEY] = Cause(
        "data",
        f"the data held NaN {INJECTED}",
        change=Change(f"/w/{INJECTED}.py", 3, f"filter {INJECTED}"),
        provenance={
            "file": f"/w/{INJECTED}.csv",
            "line": 3,
            "text": f"nan,`\n\n{INJECTED}",
            "note": INJECTED,
        },
    ).to_json()

    hover = render.hover_markdown(render.findings_at([record], user_file, 2))
    assert "`Log`" in hover and INJECTED in hover  # the names are shown, as code
    # The only links are the server's own two picture commands; no image at all.
    links = rendered_links(hover)
    assert len(links) == 2 and all(
        link.startswith(("command:nanlens.showOpGraph?", "command:nanlens.showTimeline?")) for link in links
    )
    assert rendered_links(render.cause_markdown(record, on_change_line=False)) == []
    assert rendered_links(render.cause_markdown(record, on_change_line=True)) == []


def test_code_span_holds_any_text_on_one_line() -> None:
    assert render.code_span("model/Log") == "`model/Log`"
    assert render.code_span("a`b") == "`` a`b ``"
    assert render.code_span("``x") == "``` ``x ```"
    assert render.code_span("a\n\nb") == "`a b`"


def test_a_bundle_cause_linking_a_file_outside_the_workspace_gets_no_link(tmp_path: Path) -> None:
    """A bundle's own findings.json (located at the scene) carries its cause; its data record is linked only when
    the file is inside the workspace now, whatever ``openable`` the file says."""
    from pyadapter.cause import FINDINGS_KEY
    from pyadapter.cause.model import Cause

    workspace = tmp_path / "ws"
    secret = tmp_path / "home" / ".ssh" / "id_rsa"
    secret.parent.mkdir(parents=True)
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    inside = workspace / "weather.csv"
    bundle = make_bundle_dir(workspace / "captures" / "run-step12")
    inside.write_text("pressure,rain\nnan,3.0\n")
    origin = make_finding(str(workspace / "train.py"), 3)
    findings = Findings("bundle", str(bundle), origin, [origin])  # type: ignore[arg-type]

    def hover_of(data_file: Path) -> tuple[str, list[types.DiagnosticRelatedInformation]]:
        sentence = f"{data_file.name} line 1: field 'pressure' is 'nan'"
        cause = Cause(
            "data",
            f"the data held NaN/Inf before any op touched it: {sentence}",
            provenance={"file": str(data_file), "line": 1, "sentence": sentence, "openable": True},
        )
        findings.extra[FINDINGS_KEY] = cause.to_json()
        (bundle / "findings.json").write_text(findings.dumps())
        ref = SourceRef("bundle", str(bundle))
        result = compute(ref, fingerprint(ref), lambda m, p: None, threading.Event(), cwd=str(workspace))
        record = SourceRecord(ref, status="ok", findings=result.findings)
        assert record.cause is not None
        return render.cause_markdown(record, on_change_line=False), render.data_related(record.cause)

    hover, related = hover_of(secret)
    assert "file:" not in hover and related == []
    assert "`id_rsa` line 1" in hover  # still named, as text
    hover, related = hover_of(inside)
    assert f"[weather.csv line 1]({inside.as_uri()}#L1)" in hover and len(related) == 1


# --- files that are not files -------------------------------------------------------------------------------------


def within_a_second(call: Callable[[], object], fifo: Path) -> object:
    """``call()``'s answer, failing (not hanging) when it waits more than a second; a reader left stuck in open()
    of the FIFO is let go by opening its other end."""
    answer: list[object] = []
    worker = threading.Thread(target=lambda: answer.append(call()), daemon=True)
    worker.start()
    worker.join(1.0)
    if worker.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # the stuck open() returns; the read sees EOF
        worker.join(5.0)
        pytest.fail(f"still waiting on the FIFO {fifo} after a second")
    return answer[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_fifo_named_manifest_or_findings_is_no_source_and_never_waited_on(tmp_path: Path) -> None:
    captures = tmp_path / "captures"
    bundle = make_bundle_dir(captures / "run-step12")
    stuck = captures / "fifo"
    stuck.mkdir()
    os.mkfifo(stuck / "manifest.json")
    found = within_a_second(lambda: discover([str(captures)]), stuck / "manifest.json")
    assert found == [SourceRef("bundle", str(bundle))]  # the FIFO's folder is left out, the rest still shows

    # A bundle whose findings.json is a FIFO: not taken for findings, and not waited on.
    os.mkfifo(bundle / "findings.json")
    ref = SourceRef("bundle", str(bundle))

    def load() -> object:
        try:
            compute(ref, fingerprint(ref), lambda m, p: None, threading.Event(), may_locate=False)
        except ComputeError as exc:
            return str(exc)
        return None

    assert within_a_second(load, bundle / "findings.json") == (
        "not located yet: locating replays the step, which runs the bundle's program"
    )
    # A finding may name any file as its own: its text is read to underline the line.
    from pyadapter.server.staleness import read_text

    assert within_a_second(lambda: read_text(str(stuck / "manifest.json")), stuck / "manifest.json") is None


def test_a_replay_target_writes_cell_files_only_for_a_notebook_in_the_workspace(tmp_path: Path) -> None:
    """A finding is its writer's word. One naming /dev/zero as its notebook grew the server's memory until it ran
    out (the notebook was read whole), and one naming a notebook elsewhere had that notebook's cells written into
    a .nanlens/cells folder beside it, outside the workspace."""
    import dataclasses
    import json

    from pyadapter.capture.notebook_file import NotebookError, read_notebook_cells
    from pyadapter.server.render import replay_target

    workspace, elsewhere = tmp_path / "workspace", tmp_path / "elsewhere"
    workspace.mkdir()
    elsewhere.mkdir()
    cells = {"cells": [{"cell_type": "code", "source": "x = 1\n", "metadata": {}, "outputs": []}]}
    notebook = {**cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    for folder in (workspace, elsewhere):
        (folder / "train.ipynb").write_text(json.dumps(notebook))
    record, _ = make_record(tmp_path, kind="bundle")
    assert record.findings is not None and record.findings.origin is not None
    for named, written in (
        ("/dev/zero", False),
        (str(elsewhere / "train.ipynb"), False),
        (str(workspace / "train.ipynb"), True),
    ):
        origin = dataclasses.replace(record.findings.origin, file=named, cell=0, line=1)
        target = replay_target(record, origin, [str(workspace)])
        assert ("cellFile" in target) == written, (named, target)
    assert not (elsewhere / ".nanlens").exists(), "cell files written beside a notebook outside the workspace"
    assert (workspace / ".nanlens" / "cells").is_dir()
    with pytest.raises(NotebookError, match="not a regular file"):
        read_notebook_cells("/dev/zero")
