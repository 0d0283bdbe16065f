"""Computing a source's findings: the jobs that scan a dump or load / locate a bundle in the server's thread pool,
the watcher's events that start them, and what their results do to the source records.

Functions over the one server object (``NanLensServer`` in core.py holds every piece of state); they run on the
event loop thread, except ``compute`` itself (a pool thread) and the progress report it sends back with
``loop.call_soon_threadsafe``. A source is computed by one job at a time: asked again while running, it runs
once more after (``Job.rerun``); rescan/clear bump ``ls.generation`` so older results are dropped.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lsprotocol import types

from pyadapter.server.compute import ComputeError, ComputeResult, NotLocated, compute, finding_files
from pyadapter.server.consent import Untrusted, foreign_reason, refusal_of
from pyadapter.server.progress import ProgressBar
from pyadapter.server.sources import Fingerprint, SourceRef, WatchEvents, fingerprint, read_bundle_manifest
from pyadapter.server.staleness import snapshot_files
from pyadapter.server.state import SourceRecord

if TYPE_CHECKING:
    from pyadapter.server.core import NanLensServer

log = logging.getLogger("nanlens.server")


@dataclass
class Job:
    """One running computation of a source's findings."""

    ref: SourceRef
    generation: int
    cancel: threading.Event = field(default_factory=threading.Event)
    done: asyncio.Future | None = None  # resolved (on the loop) once the record holds the result
    # Changed or asked for again while running: (fingerprint, use_cache, may_locate) of the run to follow.
    rerun: tuple[Fingerprint | None, bool, bool] | None = None
    started: float = field(default_factory=time.monotonic)
    may_locate: bool = False  # a bundle without findings may be located (replayed) by this job


def handle_watch_events(ls: NanLensServer, events: WatchEvents) -> None:
    """Sources gone, new or changed (a growing dump, a new bundle), and marked files edited on disk."""
    changed = False
    for source_id in events.removed:
        if source_id in ls.records and source_id not in ls.pinned:
            log.info("source gone: %s", source_id)
            cancel_job(ls, source_id)
            del ls.records[source_id]
            changed = True
    for ref, fp in events.scan:
        changed = schedule_job(ls, ref, fp) or changed
    if events.files_changed:
        ls.documents.forget_disk()
        changed = ls.refresh_staleness(set(events.files_changed)) or changed
    if changed:
        ls.publish()


def schedule_job(ls: NanLensServer, ref: SourceRef, fp: Fingerprint | None) -> bool:
    """Start a (re)scan now, or later when the last one of this source ended too recently; True if started."""
    assert ls.loop is not None
    ended, duration = ls.timing.get(ref.id, (0.0, 0.0))
    delay = ended + 2 * duration - time.monotonic()
    if delay <= 0 or ref.id in ls.jobs or ref.id not in ls.records:
        start_job(ls, ref, fp)
        return True
    if (handle := ls.delayed.pop(ref.id, None)) is not None:
        handle.cancel()
    ls.delayed[ref.id] = ls.loop.call_later(delay, _start_delayed, ls, ref, fp)
    return False


def _start_delayed(ls: NanLensServer, ref: SourceRef, fp: Fingerprint | None) -> None:
    ls.delayed.pop(ref.id, None)
    start_job(ls, ref, fp)
    ls.publish()


def start_job(
    ls: NanLensServer,
    ref: SourceRef,
    fp: Fingerprint | None,
    use_cache: bool = True,
    may_locate: bool | None = None,
) -> Job:
    """Compute a source's findings in the pool; a source already being computed is queued to run again.
    ``may_locate``: a bundle without findings may be located (True: the user asked); None: as the automatic
    setting says for this bundle."""
    assert ls.loop is not None
    record = ls.records.get(ref.id)
    if record is None:
        record = ls.records[ref.id] = SourceRecord(ref, pinned=ref.id in ls.pinned)
    if ref.kind == "bundle":
        record.manifest = read_bundle_manifest(ref.path)
        record.foreign = foreign_reason(
            ref.path, record.manifest, pulled=os.path.normpath(ref.path) in ls.pulled
        )
    allowed = may_locate if may_locate is not None else ls.may_locate_automatically(record)
    running = ls.jobs.get(ref.id)
    if running is not None:
        previous = running.rerun or (fp, True, False)
        running.rerun = (fp, use_cache and previous[1], allowed or previous[2])
        return running
    record.status, record.error = "scanning", None
    job = Job(ref, ls.generation, done=ls.loop.create_future(), may_locate=allowed)
    ls.jobs[ref.id] = job
    verb = "scanning dump" if ref.kind == "dump" else "locating bundle"
    bar = ProgressBar(ls, f"NaN Lens: {verb} {ref.name}")
    loop = ls.loop
    if ref.kind == "dump":
        bar.start()
    # A bundle's bar appears when a locate starts (its first report): loading findings shows none.

    def show(message: str | None, percentage: int | None) -> None:  # loop thread
        if bar.state == "new":
            bar.start()
        bar.report(message, percentage)

    def report(message: str | None, percentage: int | None) -> None:  # worker thread
        if not loop.is_closed():
            loop.call_soon_threadsafe(show, message, percentage)

    cwd = ls.cwd_for(ref.path) if ref.kind == "bundle" else None
    trust = tuple(sorted(ls.trusted.get(os.path.normpath(ref.path), ())))
    log.info("%s %s", verb if ref.kind == "dump" or allowed else "reading bundle", ref.path)
    future = loop.run_in_executor(
        ls.executor,
        lambda: compute(
            ref, fp, report, job.cancel, use_cache=use_cache, may_locate=allowed, cwd=cwd, trust=trust
        ),
    )
    future.add_done_callback(lambda f: _job_finished(ls, job, bar, f))
    return job


def cancel_all_jobs(ls: NanLensServer) -> None:
    for source_id in set(ls.jobs) | set(ls.delayed):
        cancel_job(ls, source_id)


def cancel_job(ls: NanLensServer, source_id: str) -> None:
    if (handle := ls.delayed.pop(source_id, None)) is not None:
        handle.cancel()
    job = ls.jobs.pop(source_id, None)
    if job is not None:
        job.cancel.set()
        job.rerun = None
        if job.done is not None and not job.done.done():
            job.done.set_result(None)


def _job_finished(ls: NanLensServer, job: Job, bar: ProgressBar, future: asyncio.Future) -> None:
    try:
        _finish_job(ls, job, bar, future)
    except Exception:  # a done-callback's exception would vanish into asyncio's log: say what failed
        log.exception("handling the result for %s failed", job.ref.path)


def _finish_job(ls: NanLensServer, job: Job, bar: ProgressBar, future: asyncio.Future) -> None:
    """Loop thread: store the result (unless rescan/clear made it obsolete), publish, run a queued rerun."""
    bar.end()
    ls.timing[job.ref.id] = (time.monotonic(), time.monotonic() - job.started)
    if ls.jobs.get(job.ref.id) is job:
        del ls.jobs[job.ref.id]
    record = ls.records.get(job.ref.id)
    current = job.generation == ls.generation and record is not None and not job.cancel.is_set()
    if current:
        assert record is not None
        try:
            result: ComputeResult = future.result()
        except NotLocated as exc:
            _record_unlocated(ls, record, str(exc), exc.untrusted)
        except ComputeError as exc:
            _record_error(ls, record, str(exc))
        except Exception as exc:  # compute() converts everything; this is belt and braces
            log.exception("unexpected failure computing %s", job.ref.path)
            _record_error(ls, record, f"{type(exc).__name__}: {exc}")
        else:
            _record_result(ls, record, result)
        ls.publish()
    if job.done is not None and not job.done.done():
        job.done.set_result(record if current else None)
    if current and job.rerun is not None:
        fp, use_cache, may_locate = job.rerun
        start_job(ls, job.ref, fp if fp is not None else fingerprint(job.ref), use_cache, may_locate or None)


def _record_result(ls: NanLensServer, record: SourceRecord, result: ComputeResult) -> None:
    record.status, record.error, record.findings = "ok", None, result.findings
    record.untrusted = None
    record.snapshot = snapshot_files(finding_files(result.findings), result.made_at, result.recorded_hashes)
    record.stale_files = set()
    ls.refresh_staleness(record.files())
    origin = result.findings.origin
    where = f"origin {origin.op.type} at {origin.file}:{origin.line}" if origin else "no non-finite values"
    log.info("%s: %s (%d marked lines)", record.label, where, len(record.all_findings()))


def _record_unlocated(
    ls: NanLensServer, record: SourceRecord, message: str, untrusted: Untrusted | None
) -> None:
    """A bundle without findings waits for the user's Locate (no message: the editor offers it). When its
    program would be refused (outside the workspace, changed), the record says so now: the editor's notice and
    the Captures view name the file before the user clicks, not only in the question after."""
    if untrusted is None and record.ref.kind == "bundle":
        trusted = ls.trusted.get(os.path.normpath(record.path), set())
        untrusted = refusal_of(record.path, record.manifest, ls.cwd_for(record.path), trusted)
    record.status, record.error, record.findings = "unlocated", None, None
    record.snapshot, record.stale_files, record.untrusted = {}, set(), untrusted
    why = f"; {record.foreign}" if record.foreign else ""
    log.info("%s: %s%s", record.path, message, why)


def _record_error(ls: NanLensServer, record: SourceRecord, message: str) -> None:
    record.untrusted = None
    record.status, record.error, record.findings = "error", message, None
    record.snapshot, record.stale_files = {}, set()
    log.warning("%s: %s", record.path, message)
    if (record.id, message) not in ls.shown_errors:  # one message per problem, not one per poll
        ls.shown_errors.add((record.id, message))
        ls.show_message(types.MessageType.Warning, f"{record.label}: {message}")
