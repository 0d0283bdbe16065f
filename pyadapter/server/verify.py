"""``nanlens.server.verifyFix``: replay a bundle's captured step with the user's current code and say whether
the fix cured it; when it did not, locate again so the marker moves to the new origin.

The replay runs in a child process (``python -m pyadapter replay BUNDLE --json``, graph and eager) started in the
workspace folder, so the user's files are imported fresh from disk, never from a module cached in the server.
After the user's own edit the program differs from the capture, and the replay refuses it until the user says so:
the answer then carries ``untrusted`` (the file, why) and no message, the editor asks, naming the file, and calls
again with ``{"trustEntry": [file]}`` (passed on as ``--trust-entry``).

For a divergence whose bundle holds the guard's window, the captured step alone is no test (it starts from weights
that are blown up already): the fix is verified over the window instead (``nanlens replay BUNDLE --window``: the
steps from the guard's state copy to the failing one, at the learning rate the code sets now, against the captured
rate), and the answer carries ``window`` (that replay's JSON).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from pyadapter.childproc import run_python
from pyadapter.server.consent import untrusted_of
from pyadapter.server.pictures import find_record
from pyadapter.server.progress import ProgressBar

if TYPE_CHECKING:
    from pyadapter.server.core import NanLensServer

log = logging.getLogger("nanlens.server.verify")

REPLAY_TIMEOUT = 600.0  # seconds; a replay of one step takes 10-30 s on a small CPU


@dataclass
class ReplayRun:
    """What the replay child said: its JSON report, or one line of error."""

    report: dict[str, Any] | None
    error: str | None = None


def run_replay(
    bundle: str,
    timeout: float = REPLAY_TIMEOUT,
    cwd: str | None = None,
    trust: tuple[str, ...] | list[str] = (),
    window: bool = False,
) -> ReplayRun:
    """Blocking: ``nanlens replay BUNDLE --json`` (``--window``: over the guard's window) in a fresh interpreter
    started in ``cwd``, trusting the files in ``trust`` (``--trust-entry``); exit 0/1 carry a report, 2 an error."""
    args = ["-m", "pyadapter", "replay", bundle, "--json", *(["--window"] if window else [])]
    for path in trust:
        args += ["--trust-entry", path]
    try:
        proc = run_python(args, cwd=cwd, timeout=timeout)
    except OSError as exc:
        return ReplayRun(None, f"cannot start the replay: {exc.strerror or exc}")
    if proc.timed_out:
        return ReplayRun(None, f"the replay took longer than {timeout:.0f} s")
    out, err = proc.stdout, proc.stderr
    if proc.returncode in (0, 1):
        try:
            return ReplayRun(json.loads(out))
        except json.JSONDecodeError:
            pass
    lines = [line for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("nanlens: error:")]
    message = (errors or lines or [f"exit code {proc.returncode}"])[-1].removeprefix("nanlens: error: ")
    return ReplayRun(None, message)


def wants_window(record: Any) -> bool:
    """A divergence whose bundle holds the guard's window: verified over the window."""
    from pyadapter.cause import cause_of

    manifest = getattr(record, "manifest", None) or {}
    findings = getattr(record, "findings", None)
    cause = cause_of(findings) if findings is not None else None
    return isinstance(manifest.get("window"), dict) and cause is not None and cause.kind == "divergence"


def window_verdict_of(run: ReplayRun) -> dict[str, Any]:
    """The command's answer from a window replay: verified when the window stayed finite at the code's rate."""
    if run.report is None:
        return {"verified": False, "reproduced": {}, "message": f"window replay failed: {run.error}"}
    report = run.report
    finite = bool(report.get("finite"))
    message = str(
        report.get("message") or ("the window stays finite" if finite else "the window goes non-finite")
    )
    return {"verified": finite, "reproduced": {"window": not finite}, "message": message, "window": report}


def verdict_of(run: ReplayRun) -> dict[str, Any]:
    """The command's answer from a replay: verified, per-mode reproduced, and a one-line message."""
    if run.report is None:
        return {"verified": False, "reproduced": {}, "message": f"replay failed: {run.error}"}
    report = run.report
    reproduced = {str(k): bool(v) for k, v in (report.get("reproduced") or {}).items()}
    verdicts = report.get("verdicts") or {}
    failed = [
        f"{mode}: {v['error']}"
        for mode, v in verdicts.items()
        if isinstance(v, dict) and v.get("error") and not v.get("reproduced")
    ]
    finite = report.get("finite")
    if finite is None:  # a report from before the field existed
        finite = bool(reproduced) and not any(reproduced.values()) and not failed
    if finite:
        message = "finite on the captured step"
    elif failed and not any(reproduced.values()):
        message = "the step failed: " + "; ".join(failed)
    else:
        modes = [m for m, r in reproduced.items() if r]
        message = (
            f"still non-finite: NaN/Inf again in {' and '.join(modes)} mode" if modes else "still non-finite"
        )
    return {"verified": bool(finite), "reproduced": reproduced, "message": message}


async def verify_fix(
    ls: NanLensServer, wanted: object, options: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The command: replay, tell the user, and on failure locate again (force) so the marker follows.
    ``options["trustEntry"]``: programs the user agreed to run for this bundle."""
    record = find_record(ls.records, wanted)
    bundle = None
    if record is not None and record.kind == "bundle":
        bundle = record.path
    elif isinstance(wanted, str) and os.path.isfile(os.path.join(wanted, "manifest.json")):
        bundle = os.path.abspath(wanted)
    if bundle is None:
        message = "verifying a fix needs a capture bundle (a dump has no step to replay)"
        ls.show_message(types.MessageType.Warning, message)
        return {"verified": False, "reproduced": {}, "message": message}
    assert ls.loop is not None
    step = record.step if record is not None else None
    window = record is not None and wants_window(record)
    what = "over the window before the captured step" if window else "on the captured step"
    bar = ProgressBar(ls, f"NaN Lens: verifying the fix {what}" + (f" {step}" if step is not None else ""))
    bar.start()
    bar.report(
        "replaying the window in graph mode" if window else "replaying the step in graph and eager mode", None
    )
    cwd = ls.cwd_for(bundle)
    trust = ls.trust(bundle, (options or {}).get("trustEntry"))
    try:
        run = await ls.loop.run_in_executor(
            ls.executor, lambda: run_replay(bundle, cwd=cwd, trust=trust, window=window)
        )
    finally:
        bar.end()
    untrusted = untrusted_of(run.error) if run.report is None else None
    if untrusted is not None:
        # Not a failure: the replay waits for the user's say about this program; the editor asks.
        log.info("verify %s: %s", bundle, untrusted.message)
        return {
            "verified": False,
            "reproduced": {},
            "message": f"not run: {untrusted.message}",
            "untrusted": untrusted.to_json(),
        }
    result = window_verdict_of(run) if window else verdict_of(run)
    log.info("verify %s: %s", bundle, result["message"])
    if window:  # a diverging window has no new origin to move to: the learning rate is still too high
        kind = types.MessageType.Info if result["verified"] else types.MessageType.Warning
        ls.show_message(kind, ("fix verified: " if result["verified"] else "") + result["message"])
        return result
    if result["verified"]:
        ls.show_message(types.MessageType.Info, f"fix verified: {result['message']}")
        return result
    if run.report is not None and any(result["reproduced"].values()):
        source = await ls.locate(bundle, force=True)
        origin = source.get("origin")
        if isinstance(origin, dict):
            result["origin"] = origin
            result["message"] += (
                f"; the origin is now {origin['op']['type']} at "
                f"{os.path.basename(origin['file'])}:{origin['line']}"
            )
    ls.show_message(types.MessageType.Warning, result["message"])
    return result
