"""Turning a source into Findings: a fresh precomputed findings.json, a dump scan, or a bundle locate.

Runs in worker threads, never on the LSP loop. Dumps are scanned in-process (the scanner reads records without
TensorFlow). Bundles are located in a child process (``python -m pyadapter.server.locate_worker``): locating
replays the step under TensorFlow for 10-30 s, and a child keeps TensorFlow's memory and global state out of
the server and can be stopped. Its result is cached as ``<bundle>.findings.json`` beside the bundle (never
inside: a bundle's files are hashed).

Locating runs the bundle's program, so it happens only when the caller says it may (``may_locate``: the user
asked, or the automatic setting allows it for this bundle; see consent.py); otherwise a bundle without findings
raises NotLocated. The child starts in the workspace folder (``cwd``), where the replay refuses a program outside
it or changed since the capture unless it is in ``trust`` (``--trust-entry``); that refusal is NotLocated too,
carrying the file for the editor's question.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyadapter.childproc import run_python
from pyadapter.findings import Findings, FindingsError, load_findings
from pyadapter.server.consent import Untrusted, untrusted_of
from pyadapter.server.sources import Fingerprint, SourceRef
from pyadapter.server.staleness import dump_source_hashes, snapshot_files

log = logging.getLogger("nanlens.server.compute")

# (message or None, percentage 0-100 or None); called from worker threads.
ProgressReport = Callable[[str | None, int | None], None]

# Extra key in findings.json files this server writes: the hashes of the user files when the findings were made.
SNAPSHOT_KEY = "source_snapshots"


class ComputeError(Exception):
    """A source that yields no findings; the message is one line for the user."""


class NotLocated(ComputeError):
    """A bundle without findings that waits for the user: locating it was not asked for, or the replay refused
    to run its program without the user's say (``untrusted``: which file, why)."""

    def __init__(self, message: str, untrusted: Untrusted | None = None) -> None:
        super().__init__(message)
        self.untrusted = untrusted


@dataclass
class ComputeResult:
    findings: Findings
    cache_path: str | None  # the findings.json that was loaded or written, if any
    recorded_hashes: dict[str, str]  # user file -> text hash when the findings were made, where known
    made_at: float  # epoch seconds the findings describe the code at (for staleness)


def cache_candidates(ref: SourceRef) -> list[str]:
    """Where precomputed findings may sit: ``<dir>/findings.json`` and ``<dir>.findings.json`` beside it."""
    path = ref.path.rstrip(os.sep)
    return [os.path.join(path, "findings.json"), path + ".findings.json"]


def fresh_cache(ref: SourceRef, fp: Fingerprint | None) -> str | None:
    """A precomputed findings.json at least as new as the source's content, if there is one. A bundle's own
    findings.json (located at the scene by NanGuard, written with the bundle) is always its answer."""
    # Compared in integer nanoseconds: a file written in the same clock tick as the source has the same
    # st_mtime_ns, but its float st_mtime can be one ulp below newest_mtime_ns / 1e9 (seen in CI).
    newest = fp.newest_mtime_ns if fp else 0
    if ref.kind == "bundle":
        own = os.path.join(ref.path.rstrip(os.sep), "findings.json")
        beside = ref.path.rstrip(os.sep) + ".findings.json"
        if os.path.isfile(own) and not os.path.isfile(beside):
            return own
    for candidate in cache_candidates(ref):
        try:
            if os.stat(candidate).st_mtime_ns >= newest:
                return candidate
        except OSError:
            continue
    return None


def progress_callback(report: ProgressReport) -> Callable[..., None]:
    """A tolerant ``progress=`` callback for the engines: accepts a message, a fraction, a percentage or
    (done, total), positionally or by keyword, and forwards (message, percentage)."""

    def callback(*args: Any, **kwargs: Any) -> None:
        message: str | None = None
        numbers: list[float] = []
        for value in (*args, *kwargs.values()):
            if isinstance(value, str) and message is None:
                message = value
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                numbers.append(float(value))
            elif isinstance(value, dict):
                callback(**value)
                return
        fraction = kwargs.get("fraction")
        percentage: int | None = None
        if isinstance(fraction, (int, float)):
            percentage = int(fraction * 100)
        elif "done" in kwargs and kwargs.get("total"):
            percentage = int(100 * kwargs["done"] / kwargs["total"])
        elif len(numbers) >= 2 and numbers[1] > 0:
            percentage = int(100 * numbers[0] / numbers[1])
        elif len(numbers) == 1:
            percentage = int(numbers[0] * 100) if numbers[0] <= 1.0 else int(numbers[0])
        if percentage is not None:
            percentage = max(0, min(100, percentage))
        try:
            report(message, percentage)
        except Exception:  # progress is decoration; never let it break a scan
            log.debug("progress report failed", exc_info=True)

    return callback


def load_cached(path: str, ref: SourceRef) -> tuple[Findings, dict[str, str]]:
    """A precomputed findings.json for this source and the file hashes it recorded (if this server wrote it)."""
    # One inside the bundle (located at the scene) is a symlink never, as CaptureBundle.load holds; one beside may be.
    inside = os.path.dirname(path) == ref.path.rstrip(os.sep)
    findings = load_findings(path, follow_symlinks=not inside)
    if findings.source_kind != ref.kind:
        raise FindingsError(f"{path} describes a {findings.source_kind}, not a {ref.kind}")
    recorded = findings.extra.get(SNAPSHOT_KEY)
    recorded = {str(k): str(v) for k, v in recorded.items()} if isinstance(recorded, dict) else {}
    return findings, recorded


def scan_dump_dir(ref: SourceRef, report: ProgressReport) -> Findings:
    try:
        from pyadapter.dump import ScanError, scan_dump
    except ImportError as exc:
        raise ComputeError(f"dump scanning is not available in this NaN Lens install ({exc})") from None
    generic = progress_callback(report)

    def progress(*args: Any, **kwargs: Any) -> None:
        # scan_dump reports (done_bytes, total_bytes); say it in megabytes, and pass any other shape along.
        if len(args) == 2 and not kwargs and all(isinstance(a, int) for a in args) and args[1] > 0:
            done, total = args
            report(f"{done / 1e6:.1f} of {total / 1e6:.1f} MB", min(100, 100 * done // total))
        else:
            generic(*args, **kwargs)

    try:
        return scan_dump(ref.path, progress=progress)
    except ScanError as exc:
        raise ComputeError(_one_line(exc)) from None


def locate_bundle_dir(
    ref: SourceRef,
    report: ProgressReport,
    cancel: threading.Event,
    cwd: str | None = None,
    trust: tuple[str, ...] = (),
) -> tuple[Findings, str | None]:
    """Locate in a child process started in ``cwd`` (the workspace folder), trusting the files in ``trust``;
    returns the findings and where they were written (the cache when possible)."""
    cache_path = ref.path.rstrip(os.sep) + ".findings.json"
    parent = os.path.dirname(cache_path)
    writable = os.access(parent, os.W_OK)
    fd, tmp_path = tempfile.mkstemp(
        prefix=".nanlens-locate-", suffix=".json", dir=parent if writable else None
    )
    os.close(fd)
    args = ["-m", "pyadapter.server.locate_worker", ref.path, tmp_path]
    for path in trust:
        args += ["--trust-entry", path]
    log.info(
        "locating %s (in %s%s)",
        ref.path,
        cwd or os.getcwd(),
        f"; trusting {', '.join(trust)}" if trust else "",
    )
    report("starting the locate worker", 0)
    error: str | None = None

    def on_line(line: str) -> None:  # the worker speaks JSON lines: progress, or an error
        nonlocal error
        try:
            message = json.loads(line)
        except ValueError:
            return
        if not isinstance(message, dict):
            return
        if "progress" in message and isinstance(message["progress"], dict):
            p = message["progress"]
            report(p.get("message"), p.get("percentage"))
        elif "error" in message:
            error = str(message["error"])

    try:
        # stderr is the server's own (the extension's log shows it)
        child = run_python(args, cwd=cwd, stderr="inherit", on_line=on_line, cancel=cancel)
    except OSError as exc:
        _remove(tmp_path)
        raise ComputeError(f"cannot start the locate worker: {exc.strerror or exc}") from None
    code = child.returncode
    try:
        if cancel.is_set():
            raise ComputeError("locating was stopped")
        if error is not None and (untrusted := untrusted_of(error)) is not None:
            raise NotLocated(untrusted.message, untrusted)
        if error is not None or code != 0:
            raise ComputeError(error or f"the locate worker failed (exit code {code}); see the NaN Lens log")
        try:
            findings = load_findings(tmp_path)
        except FindingsError as exc:
            raise ComputeError(f"the locate worker wrote bad findings: {exc}") from None
        if writable:
            os.replace(tmp_path, cache_path)
            return findings, cache_path
        log.info("%s is not writable: the located findings are not cached", parent)
        return findings, None
    finally:
        if os.path.exists(tmp_path):
            _remove(tmp_path)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def finding_files(findings: Findings) -> list[str]:
    files = {f.file for f in findings.findings}
    if findings.origin is not None:
        files.add(findings.origin.file)
    return sorted(files)


def write_snapshot(cache_path: str, findings: Findings, hashes: dict[str, str]) -> None:
    """Record in our own cache file the user files' hashes at locate time (atomically; best effort)."""
    findings.extra[SNAPSHOT_KEY] = hashes
    tmp = cache_path + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(findings.dumps())
        os.replace(tmp, cache_path)
    except OSError as exc:
        log.warning("cannot update %s: %s", cache_path, exc.strerror or exc)
        _remove(tmp)


def compute(
    ref: SourceRef,
    fp: Fingerprint | None,
    report: ProgressReport,
    cancel: threading.Event,
    *,
    use_cache: bool = True,
    may_locate: bool = True,
    cwd: str | None = None,
    trust: tuple[str, ...] = (),
) -> ComputeResult:
    """Findings for one source; raises ComputeError with a one-line message on anything that goes wrong, and
    NotLocated for a bundle that has no findings yet and may not be located (or whose program was refused)."""
    try:
        return _compute(ref, fp, report, cancel, use_cache, may_locate, cwd, trust)
    except ComputeError:
        raise
    except MemoryError:
        raise ComputeError("ran out of memory while reading this source") from None
    except Exception as exc:  # an engine bug must not take the server down: one line, details in the log
        log.exception("computing findings for %s failed", ref.path)
        raise ComputeError(f"{type(exc).__name__}: {_one_line(exc)}") from None


def _compute(
    ref: SourceRef,
    fp: Fingerprint | None,
    report: ProgressReport,
    cancel: threading.Event,
    use_cache: bool,
    may_locate: bool,
    cwd: str | None,
    trust: tuple[str, ...],
) -> ComputeResult:
    content_time = fp.newest_mtime if fp else time.time()
    findings: Findings | None = None
    recorded: dict[str, str] = {}
    cache_path: str | None = None
    made_at = content_time
    if use_cache and (cached := fresh_cache(ref, fp)):
        try:
            findings, recorded = load_cached(cached, ref)
            cache_path = cached
            log.info("loaded precomputed findings %s", cached)
            if ref.kind == "bundle":
                made_at = os.stat(cached).st_mtime  # a locate replays the code as it was when it ran
        except (FindingsError, OSError) as exc:
            log.warning("ignoring precomputed findings %s: %s", cached, _one_line(exc))
            findings = None
    if findings is None and ref.kind == "dump":
        findings = scan_dump_dir(ref, report)
    elif findings is None:
        if not may_locate:
            raise NotLocated("not located yet: locating replays the step, which runs the bundle's program")
        started = time.time()
        findings, cache_path = locate_bundle_dir(ref, report, cancel, cwd, trust)
        made_at = started
        recorded = snapshot_files(finding_files(findings), made_at)
        if cache_path is not None:
            write_snapshot(cache_path, findings, recorded)
    if ref.kind == "dump" and not recorded:
        recorded = dump_source_hashes(ref.path, finding_files(findings))
    if ref.kind == "bundle" and "cause" not in findings.extra:
        # A bundle's own findings.json (located at the scene) or an older locate's cache: the cause is read from
        # the findings and the bundle here, as locate_bundle does for the rest (reads only, runs nothing).
        from pyadapter.cause import attach_cause

        attach_cause(findings, ref.path, folders=[cwd or os.getcwd()])  # data files: the workspace's only
    link_only_inside(findings, [cwd or os.getcwd()])
    return ComputeResult(findings, cache_path, recorded, made_at)


def link_only_inside(findings: Findings, folders: list[str]) -> None:
    """The hover links a data cause's bad record (``provenance.openable``) only when its file is a regular file
    inside ``folders`` now, as a locate here decides it. A findings.json is the word of whoever wrote it (a bundle
    carries its own, located at the scene; a cache sits beside it): its cause may name any file as openable
    (``file:///home/me/.ssh/id_rsa#L1``)."""
    from pyadapter.capture.records import readable_inside
    from pyadapter.cause import FINDINGS_KEY

    cause = findings.extra.get(FINDINGS_KEY)
    provenance = cause.get("provenance") if isinstance(cause, dict) else None
    if not isinstance(provenance, dict) or not provenance.get("openable"):
        return
    file = provenance.get("file")
    if not isinstance(file, str) or readable_inside(file, folders) is None:
        provenance["openable"] = False
