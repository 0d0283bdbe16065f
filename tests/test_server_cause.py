"""The cause in the language server, over stdio with the real server: a divergence captured by NanGuard (its
findings located at the scene, written into the bundle without a cause) gets its cause when the server loads the
bundle; the optimizer line gets a Warning saying what to change and why, its hover states the growth, the origin's
hover says the cause, ``nanlens/findings`` carries it, and the code action there lowers the learning rate."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from lsprotocol import types
from pygls.uris import from_fs_path

from pyadapter.cause.model import format_number
from pyadapter.fixes import TextEdit, apply_edits

pytestmark = pytest.mark.slow

PROGRAM = Path(__file__).parent / "programs" / "cause_divergence.py"


def test_the_optimizer_line_gets_the_cause_diagnostic_hover_and_fix(tmp_path: Path) -> None:
    from test_server_lsp import Session, run  # the stdio harness of the server's own tests

    program = tmp_path / PROGRAM.name
    shutil.copy(PROGRAM, program)
    done = subprocess.run(
        [sys.executable, str(program), "captures"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    bundle = next(p for p in (tmp_path / "captures").iterdir() if (p / "findings.json").is_file())
    text = program.read_text()
    change_line = next(
        i for i, line in enumerate(text.splitlines(), 1) if "# CHANGE" in line and "``" not in line
    )
    uri = from_fs_path(str(program))

    async def body() -> None:
        async with Session(tmp_path, {"captureDirs": ["captures"], "dumpDirs": []}) as s:
            source = await s.wait_for("the bundle source", lambda: s.settled("bundle", bundle))
            cause = source["cause"]
            assert cause["kind"] == "divergence" and cause["change"]["line"] == change_line
            warning = await s.wait_for(
                "the change diagnostic",
                lambda: next(
                    (d for d in s.diagnostics_of(program) if (d.data or {}).get("role") == "change"), None
                ),
            )
            assert warning.severity == types.DiagnosticSeverity.Warning and warning.code == "divergence"
            assert warning.range.start.line == change_line - 1
            rate = cause["evidence"]["rate_per_step"]
            # The guard searched its window for the largest finite learning rate: the advice is half of it.
            window = cause["evidence"]["window"]
            largest, suggested = (
                format_number(window["largest_finite_learning_rate"]),
                format_number(window["suggested_learning_rate"]),
            )
            assert warning.message.startswith(
                f"change here: learning rate 7e-5 (SGD, momentum 0.9): largest finite over the {window['steps']}-step "
                f"window: {largest}; try {suggested}"
            )
            assert f"grew x{rate:.3g} per step for {cause['evidence']['steps']} steps" in warning.message
            assert warning.related_information  # points back at where the values went non-finite

            hover = await s.hover(program, change_line)
            assert hover is not None
            value = hover.contents.value  # type: ignore[union-attr]
            assert "cause — divergence" in value and f"x{rate:.3g} per step" in value
            origin_line = source["origin"]["line"]
            origin_hover = await s.hover(program, origin_line)
            assert origin_hover is not None and "cause — divergence" in origin_hover.contents.value  # type: ignore[union-attr]

            actions = await s.client.text_document_code_action_async(
                types.CodeActionParams(
                    text_document=types.TextDocumentIdentifier(uri=uri),
                    range=warning.range,
                    context=types.CodeActionContext(diagnostics=[warning]),
                )
            )
            assert actions
            titles = [a.title for a in actions if isinstance(a, types.CodeAction)]
            assert titles[:2] == [
                f"NaN Lens: lower the learning rate to {suggested} (largest finite over the {window['steps']}-step "
                f"window: {largest})",
                "NaN Lens: clip the gradients: add clipnorm=1.0 to the optimizer",
            ]
            first = actions[0]
            assert isinstance(first, types.CodeAction) and first.edit and first.edit.changes
            edits = [
                TextEdit(e.range.start.line + 1, e.range.start.character, e.range.end.character, e.new_text)
                for e in first.edit.changes[uri]
            ]
            assert (
                f"SGD(learning_rate={suggested}, momentum=0.9)"
                in apply_edits(text, edits).splitlines()[change_line - 1]
            )

            # "Verify fix" after the fix is applied: a divergence is verified over the guard's window (the captured
            # step alone starts from blown-up weights), at the rate the edited line sets, against the captured one.
            program.write_text(apply_edits(text, edits))
            answer = await s.command("nanlens.server.verifyFix", str(bundle), {"trustEntry": [str(program)]})
            answer = json.loads(json.dumps(answer, default=lambda o: o._asdict()))
            assert answer["verified"] is True, answer["message"]
            assert answer["window"]["learning_rate_from"].startswith("source ")
            assert answer["window"]["captured"]["finite"] is False
            assert "window stays finite at learning rate" in answer["message"]

    run(body())
