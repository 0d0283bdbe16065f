"""Quick fixes verified on the captured step, with real TensorFlow: for the demo and seven zoo patterns, copy
the program, run it under NanGuard (or guard_step) to capture the failing step, apply the quick fix the editor
would offer for the marked line to the copy, and replay the bundle (``nanlens replay BUNDLE --json``, the
server's verify worker): the step must now be finite in graph and in eager mode. Then, on the same capture, a
fix that does not cure the bug (sqrt clamped at 0 instead of at an epsilon: its gradient at 0 is still inf)
must be reported as not verified by the server's `nanlens.server.verifyFix` (over stdio), which locates again
and marks the origin.

The capture+fix+replay pipelines run two at a time (2 cores) in one session fixture; each test reads its row.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pyadapter.fixes import apply_edits, fixes_for_line
from pyadapter.server.verify import run_replay, verdict_of

ROOT = Path(__file__).resolve().parents[1]
ZOO = ROOT / "tests" / "zoo"


@dataclass
class Case:
    name: str
    program: Path
    marker: str  # the comment marking the line to fix
    op_type: str  # what the locator reports there (tests/zoo/README.md)
    forward_op: str | None = None
    pick: str | None = None  # a substring of the fix's title when the preferred one is not wanted
    # After the quick fix: a hand edit of the original line ("old=>new") that must NOT cure the step.
    wrong_rewrite: str | None = None


CASES = [
    Case("demo", ROOT / "demo" / "train.py", "# BUG", "Log"),
    Case("log_of_zero", ZOO / "zoo_log_of_zero.py", "# ORIGIN", "Log"),
    Case("zero_std", ZOO / "zoo_zero_std.py", "# ORIGIN", "RealDiv"),
    Case("sqrt_negative", ZOO / "zoo_sqrt_negative.py", "# ORIGIN", "Sqrt"),
    Case("softmax_exp_overflow", ZOO / "zoo_softmax_exp_overflow.py", "# ORIGIN", "Exp"),
    Case("where_hides_nan", ZOO / "zoo_where_hides_nan.py", "# ORIGIN", "Log"),
    Case("gradient_penalty", ZOO / "zoo_gradient_penalty.py", "# ORIGIN", "SqrtGrad", forward_op="norm/Sqrt"),
    Case(
        "sqrt_backward_only",
        ZOO / "zoo_sqrt_backward_only.py",
        "# ORIGIN",
        "SqrtGrad",
        forward_op="Sqrt",
        # Then the wrong fix on the same capture: clamping at 0 keeps sqrt's inf gradient at 0.
        wrong_rewrite="tf.sqrt(tf.reduce_sum(tf.square(diff), axis=-1))=>"
        "tf.sqrt(tf.maximum(tf.reduce_sum(tf.square(diff), axis=-1), 0.0))",
    ),
]


@dataclass
class Outcome:
    case: Case
    line: int = 0
    fix_title: str = ""
    fixed_line: str = ""
    bundle: Path | None = None
    verdict: dict[str, Any] = field(default_factory=dict)
    report: dict[str, Any] | None = None
    error: str | None = None
    wrong_line: str = ""
    wrong_verify: dict[str, Any] = field(default_factory=dict)  # the server's answer and what it showed
    seconds: float = 0.0


def _env() -> dict[str, str]:
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": str(ROOT)}


def _pipeline(case: Case, workdir: Path) -> Outcome:
    import time

    started = time.monotonic()
    out = Outcome(case)
    workdir.mkdir(parents=True)
    program = workdir / case.program.name
    shutil.copy(case.program, program)
    text = program.read_text()
    out.line = next(i for i, line in enumerate(text.splitlines(), 1) if case.marker in line)
    captures = workdir / "captures"
    run = subprocess.run(
        [sys.executable, str(program)],
        cwd=workdir,
        env={**_env(), "NANLENS_CAPTURE_DIR": str(captures)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    bundles = sorted(p.parent for p in captures.glob("*/manifest.json"))
    if not bundles:
        out.error = f"no bundle captured (exit {run.returncode}): {run.stderr[-800:]}"
        return out
    out.bundle = bundles[0]
    fixes = fixes_for_line(text, out.line, case.op_type, "float32", case.forward_op)
    chosen = [f for f in fixes if case.pick in f.title] if case.pick else [f for f in fixes if f.preferred]
    if not chosen:
        out.error = f"no quick fix offered: {[f.title for f in fixes]}"
        return out
    out.fix_title = chosen[0].title
    fixed = apply_edits(text, chosen[0].edits)
    program.write_text(fixed)
    out.fixed_line = fixed.splitlines()[out.line - 1]
    # The fix changed the program since the capture: the replay runs it only as the user's trusted file.
    replay = run_replay(str(out.bundle), cwd=str(workdir), trust=[str(program)])
    out.report, out.verdict = replay.report, verdict_of(replay)
    if replay.report is None:
        out.error = f"replay failed: {replay.error}"
    if case.wrong_rewrite is not None:
        old, new = case.wrong_rewrite.split("=>")
        lines = text.splitlines(keepends=True)
        assert old in lines[out.line - 1]
        lines[out.line - 1] = lines[out.line - 1].replace(old, new)
        program.write_text("".join(lines))
        out.wrong_line = lines[out.line - 1].rstrip("\n")
        out.wrong_verify = asyncio.run(asyncio.wait_for(_verify_in_server(workdir, out), 400))
    out.seconds = time.monotonic() - started
    print(f"{case.name}: {out.seconds:.1f} s", file=sys.stderr)
    return out


async def _verify_in_server(workdir: Path, out: Outcome) -> dict[str, Any]:
    """``nanlens.server.verifyFix`` in a real server over stdio (watching nothing, so only the verify locates)."""
    from test_server_lsp import Session  # the stdio harness of the server's own tests

    async with Session(workdir, {"captureDirs": [], "dumpDirs": []}) as s:
        program = workdir / out.case.program.name
        # The user's edit changed the program: the replay refuses it and the answer names it for the question.
        refused = await s.command("nanlens.server.verifyFix", str(out.bundle))
        refused = json.loads(json.dumps(refused, default=lambda o: o._asdict()))
        # The user said yes: the editor calls again with the file trusted.
        answer = await s.command("nanlens.server.verifyFix", str(out.bundle), {"trustEntry": [str(program)]})
        answer = json.loads(json.dumps(answer, default=lambda o: o._asdict()))
        await s.wait_for("the markers", lambda: s.diagnostics_of(program))
        return {
            "refused": refused,
            "answer": answer,
            "messages": [m.message for m in s.messages],
            "marked": sorted(
                {(d.range.start.line + 1, (d.data or {}).get("role")) for d in s.diagnostics_of(program)}
            ),
        }


@pytest.fixture(scope="session")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    base = tmp_path_factory.mktemp("fixes")
    with ThreadPoolExecutor(max_workers=2) as pool:
        # The longest pipeline (two replays and a locate) first, so the two workers end together.
        ordered = sorted(CASES, key=lambda c: c.wrong_rewrite is None)
        futures = {c.name: pool.submit(_pipeline, c, base / c.name) for c in ordered}
        return {name: f.result() for name, f in futures.items()}


@pytest.mark.slow
@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_quick_fix_makes_the_captured_step_finite(outcomes: dict[str, Outcome], name: str) -> None:
    out = outcomes[name]
    assert out.error is None, out.error
    assert out.verdict["verified"] is True, (out.fix_title, out.fixed_line, out.verdict, out.report)
    assert out.verdict["reproduced"] == {"graph": False, "eager": False}
    assert out.verdict["message"] == "finite on the captured step"
    assert out.report is not None and out.report["finite"] is True
    # The step really ran in both modes and every number came back finite.
    for mode in ("graph", "eager"):
        verdict = out.report["verdicts"][mode]
        assert (
            verdict["error"] is None and verdict["loss_finite"] is True and verdict["weights_finite"] is True
        )


@pytest.mark.slow
def test_a_fix_that_does_not_cure_is_not_verified_and_the_origin_is_located_again(
    outcomes: dict[str, Outcome],
) -> None:
    out = outcomes["sqrt_backward_only"]
    assert out.error is None, out.error
    refused = out.wrong_verify["refused"]
    assert refused["verified"] is False and refused["untrusted"]["reason"] == "changed", refused
    assert Path(refused["untrusted"]["file"]).name == out.case.program.name
    answer = out.wrong_verify["answer"]
    assert answer["verified"] is False, (out.wrong_line, answer)
    assert any(answer["reproduced"].values())
    assert answer["message"].startswith("still non-finite")
    # The server located again with the current code: the origin is still the sqrt's gradient on the marked
    # line, the marker is there, and the user was told in one message.
    origin = answer["origin"]
    assert Path(origin["file"]).name == out.case.program.name
    assert origin["line"] == out.line and origin["role"] == "backward-origin"
    assert (out.line, "backward-origin") in out.wrong_verify["marked"]
    assert any(
        m.startswith("NaN Lens: still non-finite") and f":{out.line}" in m
        for m in out.wrong_verify["messages"]
    )
