"""Quick fixes and "Verify fix on captured step" in the language server, without TensorFlow: code actions built
for NaN Lens diagnostics, the verify lens on a stale bundle origin, the verify verdicts, and one stdio session
(codeAction -> WorkspaceEdit, the lens once the file changed, verifyFix answering with a one-line reason)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.uris import from_fs_path

from pyadapter.findings import Finding, Findings, InputHealth, OpRef, TensorHealth
from pyadapter.fixes import TextEdit, apply_edits
from pyadapter.server import render
from pyadapter.server.code_actions import code_actions
from pyadapter.server.sources import SourceRef
from pyadapter.server.staleness import text_hash
from pyadapter.server.state import SourceRecord
from pyadapter.server.verify import ReplayRun, verdict_of

PROGRAM = (
    "import tensorflow as tf\n"
    "\n"
    "\n"
    "def cross_entropy(y_true, probs):\n"
    "    log_probs = tf.math.log(probs)  # ORIGIN\n"
    "    return -tf.reduce_sum(y_true * log_probs, axis=-1)\n"
)
ORIGIN_LINE = 5


def make_findings(program: Path, bundle: Path) -> Findings:
    origin = Finding(
        file=str(program),
        line=ORIGIN_LINE,
        role="origin",
        op=OpRef("cross_entropy/Log", "Log", graph="train_step"),
        health=TensorHealth(dtype="float32", shape=[64, 10], size=640, neg_inf=3),
        inputs=[InputHealth("probs:0", TensorHealth(dtype="float32", size=640, zero=3))],
        message="Log produced 3 -inf of 640",
    )
    propagated = Finding(
        file=str(program),
        line=ORIGIN_LINE + 1,
        role="propagated",
        op=OpRef("Mul", "Mul"),
        health=TensorHealth(dtype="float32", size=640, nan=3),
    )
    return Findings("bundle", str(bundle), origin, [origin, propagated], bundle={"step": 7})


def make_record(tmp_path: Path, stale: bool = False, kind: str = "bundle") -> tuple[SourceRecord, Path]:
    program = tmp_path / "train.py"
    program.write_text(PROGRAM)
    record = SourceRecord(
        SourceRef(kind, str(tmp_path / "run-step7")),
        status="ok",  # type: ignore[arg-type]
        findings=make_findings(program, tmp_path / "run-step7"),
    )
    if stale:
        record.stale_files.add(str(program))
    return record, program


def line_text(path: str, line: int, cell: int | None = None) -> str | None:
    lines = Path(path).read_text().splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else None


def lsp_edits(action: types.CodeAction, uri: str) -> list[TextEdit]:
    assert action.edit is not None and action.edit.changes is not None
    return [
        TextEdit(e.range.start.line + 1, e.range.start.character, e.range.end.character, e.new_text)
        for e in action.edit.changes[uri]
    ]


# --- code actions -----------------------------------------------------------------------------------------------------


def test_origin_diagnostic_gets_quick_fixes_as_workspace_edits(tmp_path: Path) -> None:
    record, program = make_record(tmp_path)
    uri = from_fs_path(str(program))
    diagnostics = render.diagnostics_by_file([record], line_text, from_fs_path)[str(program)]
    actions = code_actions({record.id: record}, str(program), uri, PROGRAM, diagnostics)
    assert [a.kind for a in actions] == [types.CodeActionKind.QuickFix] * 3
    assert all(a.title.startswith("NaN Lens: ") for a in actions)
    assert [a.is_preferred for a in actions] == [True, None, None]
    origin_diagnostic = next(d for d in diagnostics if d.data["role"] == "origin")
    assert actions[0].diagnostics == [origin_diagnostic]  # attached to the origin, not the propagated line
    fixed = apply_edits(PROGRAM, lsp_edits(actions[0], uri)).splitlines()
    assert (
        fixed[ORIGIN_LINE - 1] == "    log_probs = tf.math.log(tf.clip_by_value(probs, 1e-7, 1.0))  # ORIGIN"
    )
    assert fixed[ORIGIN_LINE] == PROGRAM.splitlines()[ORIGIN_LINE]


def test_no_actions_for_propagated_or_foreign_diagnostics(tmp_path: Path) -> None:
    record, program = make_record(tmp_path)
    uri = from_fs_path(str(program))
    diagnostics = render.diagnostics_by_file([record], line_text, from_fs_path)[str(program)]
    propagated = [d for d in diagnostics if d.data["role"] == "propagated"]
    assert code_actions({record.id: record}, str(program), uri, PROGRAM, propagated) == []
    foreign = types.Diagnostic(range=diagnostics[0].range, message="E501", source="ruff")
    assert code_actions({record.id: record}, str(program), uri, PROGRAM, [foreign]) == []
    assert code_actions({}, str(program), uri, PROGRAM, diagnostics) == []  # the source is gone


def test_columns_are_sent_in_utf16_units(tmp_path: Path) -> None:
    record, program = make_record(tmp_path)
    text = PROGRAM.replace("    log_probs = ", "    s = '😀'; log_probs = ")
    uri = from_fs_path(str(program))
    diagnostics = render.diagnostics_by_file([record], line_text, from_fs_path)[str(program)]
    action = code_actions({record.id: record}, str(program), uri, text, diagnostics)[0]
    start = action.edit.changes[uri][0].range.start.character  # type: ignore[union-attr,index]
    line = text.splitlines()[ORIGIN_LINE - 1]
    assert start == len(line[: line.index("probs)")].encode("utf-16-le")) // 2 == line.index("probs)") + 1


# --- the verify lens --------------------------------------------------------------------------------------------------


def test_stale_bundle_origin_gets_a_verify_lens_after_the_replay_lens(tmp_path: Path) -> None:
    fresh, program = make_record(tmp_path)
    assert [
        lens.command.command for lens in render.code_lenses([fresh], str(program), line_text) if lens.command
    ] == ["nanlens.replayEagerly", "nanlens.showOpGraph", "nanlens.showTimeline"]
    stale, _ = make_record(tmp_path, stale=True)
    lenses = render.code_lenses([stale], str(program), line_text)
    assert [lens.command.title for lens in lenses if lens.command] == [
        "$(debug-alt) Replay eagerly (step 7)",
        "$(check) Verify fix on captured step",
        "$(type-hierarchy) Show op graph",
        "$(graph-line) Health timeline",
    ]
    assert all(lens.range.start.line == ORIGIN_LINE - 1 for lens in lenses)
    assert lenses[1].command is not None
    assert lenses[1].command.arguments == [{"sourceId": stale.id, "bundle": stale.path}]


def test_a_stale_dump_gets_no_verify_lens(tmp_path: Path) -> None:
    record, program = make_record(tmp_path, stale=True, kind="dump")
    assert not any(
        lens.command and lens.command.command == "nanlens.verifyFix"
        for lens in render.code_lenses([record], str(program), line_text)
    )


# --- verdicts ---------------------------------------------------------------------------------------------------------


def _report(graph: bool, eager: bool, error: str | None = None) -> dict:
    verdicts = {
        m: {"mode": m, "reproduced": r, "error": error if m == "graph" else None}
        for m, r in (("graph", graph), ("eager", eager))
    }
    finite = not graph and not eager and error is None
    return {"reproduced": {"graph": graph, "eager": eager}, "verdicts": verdicts, "finite": finite}


def test_verdicts_of_the_replay() -> None:
    assert verdict_of(ReplayRun(_report(False, False))) == {
        "verified": True,
        "reproduced": {"graph": False, "eager": False},
        "message": "finite on the captured step",
    }
    still = verdict_of(ReplayRun(_report(True, False)))
    assert still["verified"] is False and still["message"] == "still non-finite: NaN/Inf again in graph mode"
    broken = verdict_of(ReplayRun(_report(False, False, error="NameError: name 'tf' is not defined")))
    assert broken["verified"] is False and broken["message"].startswith("the step failed: graph: NameError")
    failed = verdict_of(ReplayRun(None, "entry script /x/train.py does not exist"))
    assert failed == {
        "verified": False,
        "reproduced": {},
        "message": "replay failed: entry script /x/train.py does not exist",
    }


# --- over stdio -------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_code_action_verify_lens_and_verify_command_over_stdio(tmp_path: Path) -> None:
    from test_server_lsp import Session, run  # the stdio harness of the server's own tests

    program = tmp_path / "train.py"
    program.write_text(PROGRAM)
    bundle = tmp_path / "captures" / "run-step7"
    bundle.mkdir(parents=True)
    (bundle / "manifest.json").write_text(json.dumps({"format": "nanlens.bundle/1", "step": 7}))
    data = make_findings(program, bundle).to_json()
    data["source_snapshots"] = {str(program): text_hash(PROGRAM)}
    Path(str(bundle) + ".findings.json").write_text(json.dumps(data))
    uri = from_fs_path(str(program))

    async def body() -> None:
        async with Session(tmp_path, {"captureDirs": ["captures"], "dumpDirs": []}) as s:
            await s.wait_for("the bundle source", lambda: s.settled("bundle", bundle))
            diagnostic = await s.wait_for(
                "the origin diagnostic",
                lambda: next(
                    (d for d in s.diagnostics_of(program) if (d.data or {}).get("role") == "origin"), None
                ),
            )
            actions = await s.client.text_document_code_action_async(
                types.CodeActionParams(
                    text_document=types.TextDocumentIdentifier(uri=uri),
                    range=diagnostic.range,
                    context=types.CodeActionContext(diagnostics=[diagnostic]),
                )
            )
            assert actions and all(isinstance(a, types.CodeAction) for a in actions)
            preferred = [a for a in actions if isinstance(a, types.CodeAction) and a.is_preferred]
            assert len(preferred) == 1 and preferred[0].kind == types.CodeActionKind.QuickFix
            fixed = apply_edits(PROGRAM, lsp_edits(preferred[0], uri))
            assert "tf.clip_by_value(probs, 1e-7, 1.0)" in fixed.splitlines()[ORIGIN_LINE - 1]
            assert len(await s.code_lenses(program)) == 1  # nothing changed yet: no verify lens

            program.write_text(fixed)  # the user applied the fix and saved
            lenses: list[types.CodeLens] = []
            for _ in range(150):  # the watcher polls the file every 1.5 s
                lenses = await s.code_lenses(program)
                if len(lenses) == 2:
                    break
                await asyncio.sleep(0.2)
            assert [lens.command.command for lens in lenses if lens.command] == [
                "nanlens.replayEagerly",
                "nanlens.verifyFix",
            ]
            # This bundle holds no real capture: the replay fails and says why, in one line.
            result = await s.command("nanlens.server.verifyFix", {"sourceId": f"bundle:{bundle}"})
            result = json.loads(json.dumps(result, default=lambda o: o._asdict()))
            assert result["verified"] is False and result["message"].startswith("replay failed: ")
            assert "\n" not in result["message"]
            await s.wait_for("the message", lambda: any("replay failed" in m.message for m in s.messages))

    run(body())
