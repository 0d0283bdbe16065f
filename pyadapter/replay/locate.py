"""``locate_bundle``: replay a bundle's step once in graph mode under a FULL_HEALTH dump, scan the dump, and
return Findings for the bundle (its step and the replay verdicts in ``findings.bundle``).

By default the dumped replay runs in a child process (``pyadapter.replay.worker``): dumping instruments every op
TensorFlow runs in its process, and the caller may be a long-lived one (the language server). ``isolate=False``
runs it here instead (the ``nanlens locate`` command does: it saves a second TensorFlow start). This module does
not import TensorFlow itself.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyadapter.findings import Findings
from pyadapter.replay.errors import ReplayError
from pyadapter.replay.verdict import ReplayReport

# progress(phase message, fraction done 0..1)
Progress = Callable[[str, float], None]

PHASES = {"loading bundle": 0.0, "replaying with dump": 0.45, "scanning": 0.85, "done": 1.0}
DEFAULT_TIMEOUT = 900.0  # seconds for the child's whole replay; a real step is seconds to a minute


def _report_progress(progress: Progress | None, phase: str, fraction: float | None = None) -> None:
    if progress is None:
        return
    try:
        progress(phase, PHASES.get(phase, 0.0) if fraction is None else fraction)
    except Exception:  # progress is decoration; never let it break a locate
        pass


def check_bundle(path: str | Path) -> None:
    """Fail fast, without TensorFlow: a tampered bundle or a missing entry script is one line."""
    from pyadapter.capture.bundle import BundleError, CaptureBundle
    from pyadapter.replay.entry import EntryScriptError, check_entry_script

    try:
        bundle = CaptureBundle.load(path)
    except BundleError as exc:
        raise ReplayError(str(exc)) from None
    if bundle.entry_script is None:
        raise ReplayError(f"{bundle.path}: the bundle does not record its entry script, so its code cannot be found")
    try:
        check_entry_script(bundle.entry_script, None)
    except EntryScriptError as exc:
        raise ReplayError(str(exc)) from None


def _run_worker(path: str, dump_dir: str, progress: Progress | None, timeout: float) -> ReplayReport:
    from pyadapter.replay.worker import PROGRESS_PREFIX

    with tempfile.TemporaryDirectory(prefix="nanlens-locate-report-") as tmp:
        report_path = os.path.join(tmp, "report.json")
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        env["PYTHONUNBUFFERED"] = "1"
        try:
            child = subprocess.Popen(
                [sys.executable, "-m", "pyadapter.replay.worker", path, dump_dir, report_path],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                text=True,
                errors="replace",
            )
        except OSError as exc:
            raise ReplayError(f"cannot start the replay worker: {exc.strerror or exc}") from None
        tail: collections.deque[str] = collections.deque(maxlen=40)

        def read_output() -> None:
            assert child.stdout is not None
            for line in child.stdout:
                if line.startswith(PROGRESS_PREFIX):
                    _report_progress(progress, line[len(PROGRESS_PREFIX):].strip())
                else:
                    tail.append(line.rstrip("\n"))

        reader = threading.Thread(target=read_output, name="nanlens-locate-output", daemon=True)
        reader.start()
        try:
            code = child.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            raise ReplayError(f"replaying the step took longer than {timeout:.0f} s; stopped") from None
        except BaseException:  # interrupted: do not leave the child running
            child.kill()
            child.wait()
            raise
        reader.join(timeout=5)
        try:
            with open(report_path, encoding="utf-8") as fh:
                result: dict[str, Any] = json.load(fh)
        except (OSError, json.JSONDecodeError):
            last = next((line for line in reversed(tail) if line.strip()), "")
            raise ReplayError(
                f"the replay worker ended without a result (exit code {code})" + (f": {last.strip()}" if last else "")
            ) from None
    if "error" in result:
        raise ReplayError(str(result["error"]))
    return ReplayReport.from_json(result["report"])


def _run_here(path: str, dump_dir: str, progress: Progress | None) -> ReplayReport:
    from pyadapter.replay.dumping import dump_replay

    return dump_replay(path, dump_dir, phase=lambda message: _report_progress(progress, message))


def bundle_section(report: ReplayReport) -> dict[str, Any]:
    """``findings.bundle``: the bundle's step and what replaying it showed."""
    return {
        "path": report.bundle,
        "kind": report.kind,
        "step": report.step,
        "epoch": report.epoch,
        "batch_index": report.batch_index,
        "entry_script": report.entry_script,
        "captured": report.captured,
        "reproduced": report.reproduced,
        "verdicts": report.verdicts_json(),
        "note": report.note,
        "non_finite_inputs": list(report.non_finite_inputs),
    }


def locate_bundle(
    path: str | Path,
    *,
    progress: Progress | None = None,
    isolate: bool = True,
    dump_dir: str | Path | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    pictures: bool = True,
) -> Findings:
    """Find the op, file and line where the bundle's step first made NaN/Inf.

    ``progress(phase, fraction)`` is called with the phases "loading bundle", "replaying with dump",
    "scanning", "done". ``dump_dir`` keeps the dump there (it must not exist or be empty); by default it goes to
    a temporary directory that is removed. Raises ReplayError (one line) for a bad bundle, a missing entry
    script, a step that cannot run, or a dump that cannot be scanned. With ``pictures`` (default) the op graph
    and health timeline made from the dump are added as ``findings.extra["pictures"]`` (``pyadapter.pictures``).
    """
    from pyadapter.dump import ScanError, scan_dump

    bundle_path = str(Path(path).absolute())
    _report_progress(progress, "loading bundle")
    check_bundle(bundle_path)

    keep = dump_dir is not None
    if keep:
        target = Path(dump_dir).absolute()  # type: ignore[arg-type]
        if target.exists() and any(target.iterdir()):
            raise ReplayError(f"dump directory {target} is not empty")
        target.mkdir(parents=True, exist_ok=True)
        dump_path = str(target)
    else:
        dump_path = tempfile.mkdtemp(prefix="nanlens-locate-dump-")
    try:
        if isolate:
            report = _run_worker(bundle_path, dump_path, progress, timeout)
        else:
            report = _run_here(bundle_path, dump_path, progress)
        _report_progress(progress, "scanning")

        def scan_progress(done: int, total: int) -> None:
            _report_progress(progress, "scanning", PHASES["scanning"] + 0.15 * done / max(total, 1))

        try:
            findings = scan_dump(dump_path, progress=scan_progress)
        except ScanError as exc:
            raise ReplayError(f"the replay's dump cannot be scanned: {exc}") from None
        if pictures:  # the op graph and timeline need the dump, which is removed below
            from pyadapter.pictures.build import attach_bundle_pictures

            attach_bundle_pictures(findings, dump_path, bundle_path)
    finally:
        if not keep:
            shutil.rmtree(dump_path, ignore_errors=True)

    findings.source_kind = "bundle"
    findings.source_path = bundle_path
    findings.bundle = bundle_section(report)
    warnings = list(report.warnings) + list(findings.extra.get("warnings", []))
    if report.note:
        warnings.append(report.note)
    findings.extra["warnings"] = warnings
    if keep:
        findings.extra["dump"] = dump_path
    _report_progress(progress, "done")
    return findings
