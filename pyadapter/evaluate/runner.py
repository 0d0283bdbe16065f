"""Run one zoo program end to end: train it (capture or dump), locate the origin, replay, second opinion.

A script runs as ``python PROGRAM``; a notebook runs headless in a real Jupyter kernel
(``python -m pyadapter.evaluate.notebook``), where NanGuard names its findings after the ``.ipynb`` and its cells.

Every child process is bounded by a timeout; whatever goes wrong becomes the outcome's one-line ``error``.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyadapter.evaluate.checknumerics import CheckNumericsResult, run_check_numerics
from pyadapter.evaluate.corpus import Program
from pyadapter.evaluate.notebook import run_argv as notebook_argv
from pyadapter.evaluate.processes import Completed, last_line, quiet_tf_env, run_bounded


@dataclass
class Limits:
    """Seconds allowed for each child process of one program."""

    run: float = 180.0
    locate: float = 300.0
    replay: float = 180.0
    check_numerics: float = 180.0


@dataclass
class Outcome:
    program: Program
    findings: dict[str, Any] | None = None  # the nanlens.findings/1 document
    artifact: str | None = None  # the bundle or dump folder that was located
    reproduced: dict[str, bool | None] = field(default_factory=lambda: {"graph": None, "eager": None})
    check_numerics: CheckNumericsResult | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    error: str | None = None


def find_bundles(capture_dir: Path) -> list[Path]:
    """Complete bundles (a folder with manifest.json, not a hidden partial), oldest first."""
    if not capture_dir.is_dir():
        return []
    bundles = [
        p.parent
        for p in capture_dir.rglob("manifest.json")
        if not any(x.startswith(".") for x in p.parent.parts[-1:])
    ]
    return sorted(bundles, key=lambda p: p.stat().st_mtime)


def _failure(what: str, done: Completed, timeout: float) -> str:
    if done.timed_out:
        return f"{what} timed out after {timeout:g} s"
    tail = last_line(done.stderr) or last_line(done.stdout)
    return f"{what} exited with {done.returncode}" + (f": {tail}" if tail else "")


def _run_program(program: Program, work: Path, limits: Limits, outcome: Outcome) -> Path | None:
    """Train the program; returns the bundle or dump folder to locate, or None (outcome.error says why)."""
    env = quiet_tf_env({"NANLENS_CAPTURE_DIR": str(work / "captures")})
    if program.method == "capture":
        argv = notebook_argv(program.path) if program.is_notebook else [sys.executable, str(program.path)]
        done = run_bounded(argv, cwd=work, timeout=limits.run, env=env)
        outcome.seconds["run"] = done.seconds
        bundles = find_bundles(work / "captures")
        if not bundles:
            outcome.error = "no capture bundle: " + _failure("the program", done, limits.run)
            return None
        return bundles[0]
    dump_dir = work / "dump"
    argv = [sys.executable, "-m", "pyadapter", "run", "--dump", str(dump_dir), "--", str(program.path)]
    done = run_bounded(argv, cwd=work, timeout=limits.run, env=env)
    outcome.seconds["run"] = done.seconds
    if not dump_dir.is_dir() or not any(dump_dir.rglob("tfdbg_events.*")):
        outcome.error = "no dump: " + _failure("nanlens run --dump", done, limits.run)
        return None
    return dump_dir


def _trusting(program: Program) -> dict[str, str]:
    """The corpus's programs run because the evaluator was asked to run them, from a scratch folder: trusted by
    name, as a user's ``--trust-entry`` would."""
    from pyadapter.replay.trust import TRUST_ENV

    return quiet_tf_env({TRUST_ENV: str(Path(program.path).resolve())})


def _locate(kind: str, artifact: Path, work: Path, limits: Limits, outcome: Outcome) -> None:
    out = work / "findings.json"
    argv = [sys.executable, "-m", "pyadapter.evaluate.worker", kind, str(artifact), str(out)]
    done = run_bounded(argv, cwd=work, timeout=limits.locate, env=_trusting(outcome.program))
    outcome.seconds["locate"] = done.seconds
    document: dict[str, Any] | None = None
    if out.is_file():
        try:
            document = json.loads(out.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            document = None
    if document is None:
        outcome.error = _failure("locate", done, limits.locate)
    elif "error" in document and "schema" not in document:
        outcome.error = f"locate failed: {document['error']}"
    else:
        outcome.findings = document


def reproduced_from_findings(findings: dict[str, Any] | None) -> dict[str, bool | None] | None:
    """The graph/eager replay verdicts a bundle's findings carry, if they carry them."""
    bundle = (findings or {}).get("bundle") or {}
    found: dict[str, bool | None] = {}
    summary = bundle.get("reproduced")
    if isinstance(summary, dict):
        for mode in ("graph", "eager"):
            if isinstance(summary.get(mode), bool):
                found[mode] = summary[mode]
        if found:
            return found
    verdicts = bundle.get("verdicts")
    if not isinstance(verdicts, dict):
        return None
    for mode in ("graph", "eager"):
        verdict = verdicts.get(mode)
        if isinstance(verdict, dict) and "reproduced" in verdict:
            found[mode] = bool(verdict["reproduced"]) if verdict["reproduced"] is not None else None
        elif isinstance(verdict, bool):
            found[mode] = verdict
    return found if found else None


def _replay(bundle: Path, work: Path, limits: Limits, outcome: Outcome) -> None:
    """Graph and eager reproduction, from the locate findings or else from `nanlens replay --json`."""
    known = reproduced_from_findings(outcome.findings)
    if known is not None and all(known.get(m) is not None for m in ("graph", "eager")):
        outcome.reproduced.update(known)
        return
    argv = [sys.executable, "-m", "pyadapter", "replay", str(bundle), "--json"]
    done = run_bounded(argv, cwd=work, timeout=limits.replay, env=_trusting(outcome.program))
    outcome.seconds["replay"] = done.seconds
    try:
        document = json.loads(done.stdout)
        reproduced = document["reproduced"]
        for mode in ("graph", "eager"):
            if isinstance(reproduced.get(mode), bool):
                outcome.reproduced[mode] = reproduced[mode]
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
        if outcome.error is None:
            outcome.error = "replay gave no verdict: " + _failure("nanlens replay", done, limits.replay)


def evaluate_program(
    program: Program, zoo_dir: Path, limits: Limits, *, check_numerics: bool = True, keep: Path | None = None
) -> Outcome:
    """Everything for one program, in a scratch folder (kept under `keep` when given)."""
    outcome = Outcome(program)
    if program.problem:
        outcome.error = program.problem
        return outcome
    if keep is not None:
        work = keep / program.name
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
    else:
        work = Path(tempfile.mkdtemp(prefix=f"nanlens-eval-{program.name}-"))
    try:
        artifact = _run_program(program, work, limits, outcome)
        if artifact is not None:
            outcome.artifact = str(artifact)
            kind = "bundle" if program.method == "capture" else "dump"
            _locate(kind, artifact, work, limits, outcome)
            if kind == "bundle" and outcome.findings is not None:
                _replay(artifact, work, limits, outcome)
        if check_numerics:
            outcome.check_numerics = run_check_numerics(program.path, zoo_dir, limits.check_numerics)
            outcome.seconds["check_numerics"] = outcome.check_numerics.seconds
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return outcome
