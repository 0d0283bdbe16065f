"""``nanlens.server.verifyFix``: replay a bundle's captured step with the user's current code and say whether
the fix cured it; when it did not, locate again so the marker moves to the new origin.

The replay runs in a child process (``python -m pyadapter replay BUNDLE --json``, graph and eager) started in the
workspace folder, so the user's files are imported fresh from disk, never from a module cached in the server.
After the user's own edit the program differs from the capture, and the replay refuses it until the user says so:
the answer then carries ``untrusted`` (the file, why) and no message, the editor asks, naming the file, and calls
again with ``{"trustEntry": [file]}`` (passed on as ``--trust-entry``).
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
) -> ReplayRun:
    """Blocking: ``nanlens replay BUNDLE --json`` in a fresh interpreter started in ``cwd``, trusting the files in
    ``trust`` (``--trust-entry``); exit 0/1 carry a report, 2 an error."""
    args = ["-m", "pyadapter", "replay", bundle, "--json"]
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
    bar = ProgressBar(
        ls, "NaN Lens: verifying the fix on the captured step" + (f" {step}" if step is not None else "")
    )
    bar.start()
    bar.report("replaying the step in graph and eager mode", None)
    cwd = ls.cwd_for(bundle)
    trust = ls.trust(bundle, (options or {}).get("trustEntry"))
    try:
        run = await ls.loop.run_in_executor(ls.executor, lambda: run_replay(bundle, cwd=cwd, trust=trust))
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
    result = verdict_of(run)
    log.info("verify %s: %s", bundle, result["message"])
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
