"""The pygls server object and its LSP features: one feature per decorated function, state on the server.

Threads: the LSP event loop owns all state and is the only thread that talks to the client. The folder watcher
(sources.FolderWatcher) and the compute workers (compute.compute in a thread pool) hand their results over with
``loop.call_soon_threadsafe``. See docs/protocol.md for what is sent.

No user code runs unasked: a bundle without findings is located (replayed, which runs its program) only on the
user's Locate, or automatically when the setting allows it for the user's own bundles (consent.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import from_fs_path, to_fs_path
from pygls.workspace import TextDocument

from pyadapter import __version__
from pyadapter.childproc import terminate_children
from pyadapter.server import render
from pyadapter.server.compute import (
    ComputeError,
    ComputeResult,
    NotLocated,
    compute,
    finding_files,
)
from pyadapter.server.consent import Untrusted, check_entry, foreign_reason, mark_pulled, refusal_of
from pyadapter.server.notebooks import (
    NOTEBOOK_SYNC,
    cell_place,
    cell_sources,
    cell_uri,
    find_notebook,
    import_preamble,
)
from pyadapter.server.progress import ProgressBar
from pyadapter.server.settings import Settings, parse_settings, root_problem, watched_roots
from pyadapter.server.sources import (
    Fingerprint,
    FolderWatcher,
    SourceRef,
    WatchEvents,
    fingerprint,
    read_bundle_manifest,
    source_at,
)
from pyadapter.server.staleness import is_stale, read_text, snapshot_files
from pyadapter.server.state import SourceRecord, same_file

log = logging.getLogger("nanlens.server")

FINDINGS_NOTIFICATION = "nanlens/findings"
CMD_LOCATE = "nanlens.server.locateBundle"
CMD_RESCAN = "nanlens.server.rescan"
CMD_CLEAR = "nanlens.server.clear"
CMD_PICTURES = "nanlens.server.pictureModel"
CMD_VERIFY = "nanlens.server.verifyFix"
CMD_CHECK_ENTRY = "nanlens.server.checkEntry"
CMD_REPLAY_TARGET = "nanlens.server.replayTarget"


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


class NanLensServer(LanguageServer):
    """All server state lives here; it is only touched on the event loop thread."""

    def __init__(self, poll_interval: float = 1.5) -> None:
        super().__init__("nanlens", __version__, notebook_document_sync=NOTEBOOK_SYNC)
        self.workspace_folders: list[str] = []
        self.settings = Settings()
        self.records: dict[str, SourceRecord] = {}
        self.pinned: dict[
            str, SourceRef
        ] = {}  # sources added by locateBundle, watched even outside the roots
        self.jobs: dict[str, Job] = {}
        self.generation = 0  # bumped by rescan/clear: results of older jobs are dropped
        self.loop: asyncio.AbstractEventLoop | None = None
        self.watcher = FolderWatcher(self._from_watcher, interval=poll_interval)
        self.executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="nanlens-compute")
        self._published: dict[str, list[types.Diagnostic]] = {}  # document URI -> what it was last sent
        self._shown_errors: set[tuple[str, str]] = set()
        self._disk_lines: dict[str, list[str] | None] = {}
        self._disk_cells: dict[str, list[str] | None] = {}  # .ipynb -> its cells' source, read from disk
        self._settings_problems: list[str] = []
        # Rescans of a growing dump wait for twice their last duration after the previous one ended, so a big
        # dump of a running training job costs it at most a third of a core.
        self._timing: dict[str, tuple[float, float]] = {}  # source id -> (monotonic end, duration)
        self._delayed: dict[str, asyncio.TimerHandle] = {}
        # Consent, for this session: bundle path -> the programs the user agreed to run for it (--trust-entry),
        # and the bundles pulled into the workspace (foreign even where the folder keeps no mark).
        self.trusted: dict[str, set[str]] = {}
        self.pulled: set[str] = set()

    # --- settings and roots -------------------------------------------------------------------------------------

    def refresh_workspace_folders(self) -> None:
        folders = [to_fs_path(f.uri) for f in self.workspace.folders.values()]
        if not folders and self.workspace.root_path:
            folders = [self.workspace.root_path]
        self.workspace_folders = [f for f in folders if f]

    def apply_settings(self, settings: Settings) -> None:
        """Use new settings: log level, watched folders; one message for everything wrong with them. Turning on
        the automatic locate locates the user's own bundles that were waiting for a click."""
        automatic_now = settings.locate_automatic and not self.settings.locate_automatic
        self.settings = settings
        logging.getLogger("nanlens").setLevel(settings.log_level)
        roots = watched_roots(settings, self.workspace_folders)
        problems = list(settings.problems) + [p for p in map(root_problem, roots) if p]
        for problem in problems:
            log.warning("%s", problem)
        # One message per distinct set of problems: clients often resend unchanged settings right after start.
        if problems and problems != self._settings_problems:
            self.show_message(types.MessageType.Warning, "; ".join(problems))
        self._settings_problems = problems
        log.info("watching %s", ", ".join(r.path for r in roots) or "nothing (no workspace folder)")
        self.update_watcher_roots()
        if automatic_now and self.loop is not None:
            waiting = [
                r
                for r in self.records.values()
                if r.status == "unlocated" and r.untrusted is None and r.id not in self.jobs
            ]
            for record in waiting:
                self.start_job(record.ref, fingerprint(record.ref))
            if waiting:
                self.publish()

    def cwd_for(self, path: str) -> str | None:
        """Where a replay of this bundle runs: the workspace folder holding it, else the first one. The replay
        runs only a program inside that folder (or one the user trusted)."""
        target = os.path.abspath(path)
        for folder in self.workspace_folders:
            base = os.path.abspath(folder)
            if target == base or target.startswith(base.rstrip(os.sep) + os.sep):
                return folder
        return self.workspace_folders[0] if self.workspace_folders else None

    def trust(self, bundle: str, files: object) -> tuple[str, ...]:
        """Remember the programs the user agreed to run for this bundle (a list of paths from the editor) and
        return every one known for it this session."""
        known = self.trusted.setdefault(os.path.normpath(bundle), set())
        if isinstance(files, list):
            known.update(os.path.abspath(f) for f in files if isinstance(f, str) and f.strip())
        return tuple(sorted(known))

    def may_locate_automatically(self, record: SourceRecord) -> bool:
        """Whether a bundle without findings is located unasked: only with the setting on, and only the user's own
        (captured on this host, not pulled)."""
        return self.settings.locate_automatic and record.foreign is None

    def update_watcher_roots(self) -> None:
        roots = [r.path for r in watched_roots(self.settings, self.workspace_folders)]
        self.watcher.set_roots(roots + [ref.path for ref in self.pinned.values()])

    # --- talking to the client ----------------------------------------------------------------------------------

    def show_message(self, kind: types.MessageType, text: str) -> None:
        self.window_show_message(types.ShowMessageParams(type=kind, message=f"NaN Lens: {text}"))

    def open_document(self, path: str) -> TextDocument | None:
        """The editor's buffer for a file, if open (matched by path: clients spell URIs differently)."""
        doc = self.workspace.text_documents.get(from_fs_path(path))
        if doc is not None:
            return doc
        for uri, doc in self.workspace.text_documents.items():
            if (doc_path := to_fs_path(uri)) is not None and same_file(doc_path, path):
                return doc
        return None

    def current_text(self, path: str) -> str | None:
        """The file as the user sees it: the editor buffer when open, else the disk. An open notebook: its
        cells' current sources, as notebook JSON (staleness hashes a notebook by its cells' sources only)."""
        notebook = find_notebook(self.workspace.notebook_documents.values(), path)
        if notebook is not None:
            docs = [self.synced_document(cell.document) for cell in notebook.cells]
            return json.dumps({"cells": [{"source": doc.source if doc is not None else ""} for doc in docs]})
        doc = self.open_document(path)
        return doc.source if doc is not None else read_text(path)

    def line_text(self, path: str, line: int, cell: int | None = None) -> str | None:
        if cell is not None:
            lines = self.cell_lines(path, cell)
        elif (doc := self.open_document(path)) is not None:
            lines = doc.lines
        else:
            if path not in self._disk_lines:
                text = read_text(path)
                self._disk_lines[path] = text.splitlines() if text is not None else None
            lines = self._disk_lines[path]
        return lines[line - 1] if lines is not None and 0 < line <= len(lines) else None

    # --- notebooks: a finding's `cell` is shown on that cell's document (pyadapter/server/notebooks.py) ---------

    def cell_lines(self, path: str, cell: int) -> list[str] | None:
        """A notebook cell's lines: the editor's cell when the notebook is open, else the .ipynb on disk."""
        uri = cell_uri(self.workspace.notebook_documents.values(), path, cell)
        doc = self.synced_document(uri) if uri is not None else None
        if doc is not None:
            return doc.lines
        if path not in self._disk_cells:
            self._disk_cells[path] = cell_sources(read_text(path))
        cells = self._disk_cells[path]
        return cells[cell].splitlines() if cells is not None and 0 <= cell < len(cells) else None

    def synced_document(self, uri: str) -> TextDocument | None:
        """A document the client opened (a notebook cell's included), never one read from disk."""
        return self.workspace.text_documents.get(unquote(uri))

    def place_of_uri(self, uri: str) -> render.Place | None:
        """The (file, cell) a document shows: a file URI is its path; a synced notebook cell is (.ipynb, index)."""
        path = to_fs_path(uri)
        if path is not None:
            return path, None
        return cell_place(self.workspace.get_notebook_document(cell_uri=uri), uri)

    def uri_of(self, path: str, cell: int | None) -> str | None:
        """The document URI that shows a place: the file's, or the cell's while its notebook is open."""
        if cell is None:
            return from_fs_path(path)
        return cell_uri(self.workspace.notebook_documents.values(), path, cell)

    def finding_files_of(self, notebook_uri: str) -> set[str]:
        """The findings' spellings of this notebook's file (empty when no finding points into it)."""
        path = to_fs_path(notebook_uri)
        if path is None:
            return set()
        return {f for r in self.records.values() for f in r.files() if same_file(path, f)}

    def publish(self) -> None:
        """Send the whole current state: changed diagnostics, the findings notification, a CodeLens refresh."""
        self._disk_lines.clear()
        self._disk_cells.clear()
        diagnostics: dict[str, list[types.Diagnostic]] = {}
        for (path, cell), diags in render.diagnostics_by_place(
            self.records.values(), self.line_text, self.uri_of
        ).items():
            uri = self.uri_of(path, cell)
            if uri is not None:  # a cell of a notebook that is not open: nowhere to show it yet
                diagnostics.setdefault(uri, []).extend(diags)
        for uri in sorted(set(self._published) | set(diagnostics)):
            new = diagnostics.get(uri, [])
            if self._published.get(uri) != new:
                self.text_document_publish_diagnostics(
                    types.PublishDiagnosticsParams(uri=uri, diagnostics=new)
                )
        self._published = {u: d for u, d in diagnostics.items() if d}
        self.protocol.notify(FINDINGS_NOTIFICATION, render.findings_notification(self.records.values()))
        caps = self.client_capabilities
        if caps and caps.workspace and caps.workspace.code_lens and caps.workspace.code_lens.refresh_support:
            self.workspace_code_lens_refresh(None)
        self.watcher.set_watched_files({f for r in self.records.values() for f in r.files()})

    def refresh_staleness(self, files: set[str] | None = None) -> bool:
        """Recheck which findings' files changed since their source; True when anything flipped."""
        changed = False
        texts: dict[str, str | None] = {}
        for record in self.records.values():
            for path in record.files():
                if files is not None and path not in files:
                    continue
                if path not in texts:
                    texts[path] = self.current_text(path)
                stale = is_stale(record.snapshot.get(path), texts[path], path)
                if stale != (path in record.stale_files):
                    changed = True
                    (record.stale_files.add if stale else record.stale_files.discard)(path)
        return changed

    # --- computing findings ---------------------------------------------------------------------------------------

    def _from_watcher(self, events: WatchEvents) -> None:
        """Watcher thread: hand the events to the loop."""
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.handle_watch_events, events)

    def handle_watch_events(self, events: WatchEvents) -> None:
        changed = False
        for source_id in events.removed:
            if source_id in self.records and source_id not in self.pinned:
                log.info("source gone: %s", source_id)
                self.cancel_job(source_id)
                del self.records[source_id]
                changed = True
        for ref, fp in events.scan:
            changed = self.schedule_job(ref, fp) or changed
        if events.files_changed:
            self._disk_lines.clear()
            self._disk_cells.clear()
            changed = self.refresh_staleness(set(events.files_changed)) or changed
        if changed:
            self.publish()

    def schedule_job(self, ref: SourceRef, fp: Fingerprint | None) -> bool:
        """Start a (re)scan now, or later when the last one of this source ended too recently; True if started."""
        assert self.loop is not None
        ended, duration = self._timing.get(ref.id, (0.0, 0.0))
        delay = ended + 2 * duration - time.monotonic()
        if delay <= 0 or ref.id in self.jobs or ref.id not in self.records:
            self.start_job(ref, fp)
            return True
        if (handle := self._delayed.pop(ref.id, None)) is not None:
            handle.cancel()
        self._delayed[ref.id] = self.loop.call_later(delay, self._start_delayed, ref, fp)
        return False

    def _start_delayed(self, ref: SourceRef, fp: Fingerprint | None) -> None:
        self._delayed.pop(ref.id, None)
        self.start_job(ref, fp)
        self.publish()

    def start_job(
        self, ref: SourceRef, fp: Fingerprint | None, use_cache: bool = True, may_locate: bool | None = None
    ) -> Job:
        """Compute a source's findings in the pool; a source already being computed is queued to run again.
        ``may_locate``: a bundle without findings may be located (True: the user asked); None: as the automatic
        setting says for this bundle."""
        assert self.loop is not None
        record = self.records.get(ref.id)
        if record is None:
            record = self.records[ref.id] = SourceRecord(ref, pinned=ref.id in self.pinned)
        if ref.kind == "bundle":
            record.manifest = read_bundle_manifest(ref.path)
            record.foreign = foreign_reason(
                ref.path, record.manifest, pulled=os.path.normpath(ref.path) in self.pulled
            )
        allowed = may_locate if may_locate is not None else self.may_locate_automatically(record)
        running = self.jobs.get(ref.id)
        if running is not None:
            previous = running.rerun or (fp, True, False)
            running.rerun = (fp, use_cache and previous[1], allowed or previous[2])
            return running
        record.status, record.error = "scanning", None
        job = Job(ref, self.generation, done=self.loop.create_future(), may_locate=allowed)
        self.jobs[ref.id] = job
        verb = "scanning dump" if ref.kind == "dump" else "locating bundle"
        bar = ProgressBar(self, f"NaN Lens: {verb} {ref.name}")
        loop = self.loop
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

        cwd = self.cwd_for(ref.path) if ref.kind == "bundle" else None
        trust = tuple(sorted(self.trusted.get(os.path.normpath(ref.path), ())))
        log.info("%s %s", verb if ref.kind == "dump" or allowed else "reading bundle", ref.path)
        future = loop.run_in_executor(
            self.executor,
            lambda: compute(
                ref, fp, report, job.cancel, use_cache=use_cache, may_locate=allowed, cwd=cwd, trust=trust
            ),
        )
        future.add_done_callback(lambda f: self._job_finished(job, bar, f))
        return job

    def cancel_all_jobs(self) -> None:
        for source_id in set(self.jobs) | set(self._delayed):
            self.cancel_job(source_id)

    def cancel_job(self, source_id: str) -> None:
        if (handle := self._delayed.pop(source_id, None)) is not None:
            handle.cancel()
        job = self.jobs.pop(source_id, None)
        if job is not None:
            job.cancel.set()
            job.rerun = None
            if job.done is not None and not job.done.done():
                job.done.set_result(None)

    def _job_finished(self, job: Job, bar: ProgressBar, future: asyncio.Future) -> None:
        try:
            self._finish_job(job, bar, future)
        except Exception:  # a done-callback's exception would vanish into asyncio's log: say what failed
            log.exception("handling the result for %s failed", job.ref.path)

    def _finish_job(self, job: Job, bar: ProgressBar, future: asyncio.Future) -> None:
        """Loop thread: store the result (unless rescan/clear made it obsolete), publish, run a queued rerun."""
        bar.end()
        self._timing[job.ref.id] = (time.monotonic(), time.monotonic() - job.started)
        if self.jobs.get(job.ref.id) is job:
            del self.jobs[job.ref.id]
        record = self.records.get(job.ref.id)
        current = job.generation == self.generation and record is not None and not job.cancel.is_set()
        if current:
            assert record is not None
            try:
                result: ComputeResult = future.result()
            except NotLocated as exc:
                self._record_unlocated(record, str(exc), exc.untrusted)
            except ComputeError as exc:
                self._record_error(record, str(exc))
            except Exception as exc:  # compute() converts everything; this is belt and braces
                log.exception("unexpected failure computing %s", job.ref.path)
                self._record_error(record, f"{type(exc).__name__}: {exc}")
            else:
                self._record_result(record, result)
            self.publish()
        if job.done is not None and not job.done.done():
            job.done.set_result(record if current else None)
        if current and job.rerun is not None:
            fp, use_cache, may_locate = job.rerun
            self.start_job(
                job.ref, fp if fp is not None else fingerprint(job.ref), use_cache, may_locate or None
            )

    def _record_result(self, record: SourceRecord, result: ComputeResult) -> None:
        record.status, record.error, record.findings = "ok", None, result.findings
        record.untrusted = None
        record.snapshot = snapshot_files(
            finding_files(result.findings), result.made_at, result.recorded_hashes
        )
        record.stale_files = set()
        self.refresh_staleness(record.files())
        origin = result.findings.origin
        where = (
            f"origin {origin.op.type} at {origin.file}:{origin.line}" if origin else "no non-finite values"
        )
        log.info("%s: %s (%d marked lines)", record.label, where, len(record.all_findings()))

    def _record_unlocated(self, record: SourceRecord, message: str, untrusted: Untrusted | None) -> None:
        """A bundle without findings waits for the user's Locate (no message: the editor offers it). When its
        program would be refused (outside the workspace, changed), the record says so now: the editor's notice and
        the Captures view name the file before the user clicks, not only in the question after."""
        if untrusted is None and record.ref.kind == "bundle":
            trusted = self.trusted.get(os.path.normpath(record.path), set())
            untrusted = refusal_of(record.path, record.manifest, self.cwd_for(record.path), trusted)
        record.status, record.error, record.findings = "unlocated", None, None
        record.snapshot, record.stale_files, record.untrusted = {}, set(), untrusted
        why = f"; {record.foreign}" if record.foreign else ""
        log.info("%s: %s%s", record.path, message, why)

    def _record_error(self, record: SourceRecord, message: str) -> None:
        record.untrusted = None
        record.status, record.error, record.findings = "error", message, None
        record.snapshot, record.stale_files = {}, set()
        log.warning("%s: %s", record.path, message)
        if (record.id, message) not in self._shown_errors:  # one message per problem, not one per poll
            self._shown_errors.add((record.id, message))
            self.show_message(types.MessageType.Warning, f"{record.label}: {message}")

    # --- commands -------------------------------------------------------------------------------------------------

    def rescan(self) -> None:
        self.generation += 1
        self.cancel_all_jobs()
        self.records.clear()
        self._shown_errors.clear()
        self.watcher.reset()
        for ref in self.pinned.values():
            self.start_job(ref, fingerprint(ref))
        self.publish()

    def clear(self) -> None:
        self.generation += 1
        self.cancel_all_jobs()
        self.records.clear()
        self.pinned.clear()
        self.update_watcher_roots()
        self.publish()

    async def locate(
        self, path: str, force: bool = False, *, run: bool = True, trust: object = None, pulled: bool = False
    ) -> dict[str, Any]:
        """The user's Locate: show the bundle's findings, else replay it (``run``; False: only show it, as after
        a pull), trusting ``trust`` (programs the user agreed to run for it) besides those trusted before."""
        if not os.path.isabs(path) and self.workspace_folders:
            path = os.path.join(self.workspace_folders[0], path)
        path = os.path.normpath(os.path.abspath(path))
        ref = source_at(path)
        if ref is None:
            message = (
                f"{path} is not a capture bundle (no manifest.json with format nanlens.bundle/1) or a dump"
            )
            log.warning("%s", message)
            self.show_message(types.MessageType.Error, message)
            record = SourceRecord(SourceRef("bundle", path), status="error", error=message)
            return render.source_json(record)
        self.pinned[ref.id] = ref
        self.update_watcher_roots()
        if ref.kind == "bundle":
            self.trust(ref.path, trust)
            if pulled:
                self.pulled.add(os.path.normpath(ref.path))
                mark_pulled(ref.path)
        # Already being computed (the watcher saw it first): wait for that rather than compute it twice, unless
        # that computation may not locate and this one may (it then runs again, locating).
        job = self.jobs.get(ref.id)
        if job is None or force or (run and not job.may_locate):
            job = self.start_job(ref, fingerprint(ref), use_cache=not force, may_locate=run or None)
            self.publish()
        assert job.done is not None
        await asyncio.shield(job.done)
        while (running := self.jobs.get(ref.id)) is not None and running.done is not None:
            await asyncio.shield(running.done)  # a rerun queued meanwhile: answer with the newest result
        record = self.records.get(ref.id)
        return (
            render.source_json(record)
            if record is not None
            else render.source_json(SourceRecord(ref, status="error", error="cleared before it finished"))
        )

    def stop_work(self) -> None:
        self.watcher.stop()
        self.cancel_all_jobs()
        terminate_children()
        self.executor.shutdown(wait=False, cancel_futures=True)


def _path_of(uri: str) -> str | None:
    return to_fs_path(uri)


def _options(value: Any) -> dict[str, Any]:
    """A command's options object (pygls may hand it over as a namedtuple-like object)."""
    if isinstance(value, dict):
        return value
    if hasattr(value, "_asdict"):
        return dict(value._asdict())
    return {}


def create_server(poll_interval: float = 1.5) -> NanLensServer:
    server = NanLensServer(poll_interval=poll_interval)

    @server.feature(types.INITIALIZE)
    def initialize(ls: NanLensServer, params: types.InitializeParams) -> None:
        ls.settings = parse_settings(params.initialization_options)

    @server.feature(types.INITIALIZED)
    def initialized(ls: NanLensServer, params: types.InitializedParams) -> None:
        ls.loop = asyncio.get_running_loop()
        ls.refresh_workspace_folders()
        log.info(
            "NaN Lens server %s ready; workspace folders: %s", __version__, ls.workspace_folders or "none"
        )
        ls.window_log_message(
            types.LogMessageParams(types.MessageType.Info, f"NaN Lens server {__version__} ready")
        )
        ls.apply_settings(ls.settings)
        ls.watcher.start()
        ls.publish()  # an empty state at first, so the client knows the server is up

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(ls: NanLensServer, params: types.DidChangeConfigurationParams) -> None:
        settings = params.settings
        if not (isinstance(settings, dict) and isinstance(settings.get("nanlens"), dict)):
            log.debug("ignoring a configuration change without nanlens settings")
            return
        ls.apply_settings(parse_settings(settings["nanlens"]))

    @server.feature(types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    def did_change_workspace_folders(
        ls: NanLensServer, params: types.DidChangeWorkspaceFoldersParams
    ) -> None:
        ls.refresh_workspace_folders()
        ls.update_watcher_roots()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: NanLensServer, params: types.DidOpenTextDocumentParams) -> None:
        _recheck(ls, params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: NanLensServer, params: types.DidChangeTextDocumentParams) -> None:
        _recheck(ls, params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: NanLensServer, params: types.DidCloseTextDocumentParams) -> None:
        _recheck(ls, params.text_document.uri)

    # A notebook with findings opened, edited or closed: its cells' documents changed (where diagnostics and
    # lenses go), and so may its findings' staleness (its cells' sources as the user sees them).
    @server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    def notebook_did_open(ls: NanLensServer, params: types.DidOpenNotebookDocumentParams) -> None:
        if files := ls.finding_files_of(params.notebook_document.uri):
            ls.refresh_staleness(files)
            ls.publish()

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def notebook_did_change(ls: NanLensServer, params: types.DidChangeNotebookDocumentParams) -> None:
        cells = params.change.cells
        if cells is None or not (cells.structure or cells.text_content):
            return  # metadata or execution state only
        if files := ls.finding_files_of(params.notebook_document.uri):
            # Cells added, removed or moved: cell N is another document now. Typing: only if staleness flipped.
            if ls.refresh_staleness(files) or cells.structure:
                ls.publish()

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def notebook_did_close(ls: NanLensServer, params: types.DidCloseNotebookDocumentParams) -> None:
        if files := ls.finding_files_of(params.notebook_document.uri):
            ls.refresh_staleness(files)
            ls.publish()

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def hover(ls: NanLensServer, params: types.HoverParams) -> types.Hover | None:
        place = ls.place_of_uri(params.text_document.uri)
        if place is None:
            return None
        hits = render.findings_at(ls.records.values(), place[0], params.position.line, place[1])
        # The line a cause says to change (the optimizer's, the reading line): its own section, unless the
        # origin's hover on that same line already says the cause.
        changes = [
            r
            for r in render.causes_at(ls.records.values(), place[0], params.position.line, place[1])
            if not any(record is r and f.role != "propagated" for record, f in hits)
        ]
        if not hits and not changes:
            return None
        sections = [render.hover_markdown(hits)] if hits else []
        sections += [render.cause_markdown(r, on_change_line=True) for r in changes]
        return types.Hover(
            contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value="\n\n---\n\n".join(sections)),
            range=render.place_range(place[0], params.position.line + 1, place[1], ls.line_text),
        )

    @server.feature(types.TEXT_DOCUMENT_CODE_LENS, types.CodeLensOptions(resolve_provider=False))
    def code_lens(ls: NanLensServer, params: types.CodeLensParams) -> list[types.CodeLens]:
        place = ls.place_of_uri(params.text_document.uri)
        if place is None:
            return []
        return render.locate_lenses(ls.records.values(), place[0], place[1]) + render.code_lenses(
            ls.records.values(), place[0], ls.line_text, place[1]
        )

    @server.command(CMD_LOCATE)
    async def locate_bundle(ls: NanLensServer, *args: Any) -> dict[str, Any] | None:
        path = args[0] if args else None
        options = _options(args[1] if len(args) > 1 else None)
        if not isinstance(path, str) or not path.strip():
            ls.show_message(types.MessageType.Error, f"{CMD_LOCATE} needs a bundle path (got {path!r})")
            return None
        pulled = options.get("pulled") is True
        run = options.get("run", not pulled) is not False
        return await ls.locate(
            path, force=bool(options.get("force")), run=run, trust=options.get("trustEntry"), pulled=pulled
        )

    @server.command(CMD_CHECK_ENTRY)
    async def check_bundle_entry(ls: NanLensServer, *args: Any) -> dict[str, Any]:
        """Before the editor starts a replay itself (Replay eagerly): would it run the bundle's program?"""
        path = args[0] if args else None
        options = _options(args[1] if len(args) > 1 else None)
        if not isinstance(path, str) or not path.strip():
            return {
                "entry": None,
                "trusted": None,
                "untrusted": None,
                "error": f"{CMD_CHECK_ENTRY} needs a bundle",
            }
        path = os.path.normpath(os.path.abspath(path))
        root = options.get("root") if isinstance(options.get("root"), str) else ls.cwd_for(path)
        trusted = set(ls.trust(path, options.get("trustEntry")))
        manifest = read_bundle_manifest(path)
        assert ls.loop is not None
        return await ls.loop.run_in_executor(ls.executor, lambda: check_entry(path, manifest, root, trusted))

    @server.command(CMD_REPLAY_TARGET)
    async def bundle_replay_target(ls: NanLensServer, *args: Any) -> dict[str, Any] | None:
        """Where a replay of a located bundle stops: its origin, and for a notebook origin the cell file the
        debugger binds to (the Captures view has only the finding; the CodeLens gets this from the server too)."""
        path = args[0] if args else None
        if not isinstance(path, str) or not path.strip():
            return None
        record = next(
            (
                r
                for r in ls.records.values()
                if r.kind == "bundle" and same_file(r.path, path) and r.findings is not None
            ),
            None,
        )
        if record is None or record.findings is None or record.findings.origin is None:
            return None
        origin = record.findings.origin
        assert ls.loop is not None
        # Writing a notebook's cell files reads the notebook: off the event loop.
        return await ls.loop.run_in_executor(ls.executor, lambda: render.replay_target(record, origin))

    @server.command(CMD_RESCAN)
    def rescan(ls: NanLensServer, *args: Any) -> None:
        log.info("rescan requested")
        ls.rescan()

    @server.command(CMD_CLEAR)
    def clear(ls: NanLensServer, *args: Any) -> None:
        log.info("clear requested")
        ls.clear()

    @server.command(CMD_PICTURES)
    async def picture_model(ls: NanLensServer, *args: Any) -> dict[str, Any]:
        from pyadapter.server.pictures import picture_model as serve_pictures

        return await serve_pictures(ls, args[0] if args else None)

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix]),
    )
    def code_action(ls: NanLensServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        from pyadapter.server.code_actions import code_actions

        uri = params.text_document.uri
        place = ls.place_of_uri(uri)
        if place is None:
            return []
        path, cell = place
        if cell is None:
            return code_actions(ls.records, path, uri, ls.current_text(path), params.context.diagnostics)
        doc = ls.synced_document(uri)
        notebook = ls.workspace.get_notebook_document(cell_uri=uri)
        earlier = [
            d.source
            for c in (notebook.cells[:cell] if notebook else [])
            if c.kind == types.NotebookCellKind.Code and (d := ls.synced_document(c.document)) is not None
        ]
        return code_actions(
            ls.records,
            path,
            uri,
            doc.source if doc is not None else None,
            params.context.diagnostics,
            cell,
            preamble=import_preamble(earlier),
        )

    @server.command(CMD_VERIFY)
    async def verify_fix(ls: NanLensServer, *args: Any) -> dict[str, Any]:
        from pyadapter.server.verify import verify_fix as run_verify

        return await run_verify(ls, args[0] if args else None, _options(args[1] if len(args) > 1 else None))

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: NanLensServer, params: None) -> None:
        log.info("shutting down")
        ls.stop_work()

    return server


def _recheck(ls: NanLensServer, uri: str) -> None:
    """An editor buffer opened, changed or closed: its findings may have become (or stopped being) stale."""
    path = _path_of(uri)
    if (
        path is not None
        and any(path in r.files() for r in ls.records.values())
        and ls.refresh_staleness({path})
    ):
        ls.publish()


def serve(log_level: str = "INFO") -> None:
    logging.basicConfig(
        stream=sys.stderr, level=log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    # pygls logs every message body at INFO; keep that for DEBUG only.
    logging.getLogger("pygls").setLevel(logging.DEBUG if log_level == "DEBUG" else logging.WARNING)
    log.info("starting NaN Lens language server %s (python %s)", __version__, sys.version.split()[0])
    server = create_server()
    try:
        server.start_io()
    finally:
        server.stop_work()
