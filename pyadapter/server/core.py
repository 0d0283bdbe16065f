"""The pygls server object: all the server's state, the settings and roots, publishing it to the client, and the
user's rescan / clear / locate. Its LSP features are in features.py and commands.py (registered by app.py); the
jobs that compute findings in jobs.py; what the user's documents say in documents.py.

Threads: the LSP event loop owns all state and is the only thread that talks to the client. The folder watcher
(sources.FolderWatcher) and the compute workers (compute.compute in a thread pool) hand their results over with
``loop.call_soon_threadsafe``. See docs/protocol.md for what is sent.

No user code runs unasked: a bundle without findings is located (replayed, which runs its program) only on the
user's Locate, or automatically when the setting allows it for the user's own bundles (consent.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from pyadapter import __version__
from pyadapter.childproc import terminate_children
from pyadapter.server import render
from pyadapter.server.consent import mark_pulled
from pyadapter.server.documents import Documents
from pyadapter.server.jobs import Job, cancel_all_jobs, handle_watch_events, start_job
from pyadapter.server.notebooks import NOTEBOOK_SYNC
from pyadapter.server.settings import Settings, root_problem, watched_roots
from pyadapter.server.sources import (
    FolderWatcher,
    SourceRef,
    WatchEvents,
    fingerprint,
    source_at,
)
from pyadapter.server.staleness import is_stale
from pyadapter.server.state import SourceRecord, same_file

log = logging.getLogger("nanlens.server")

FINDINGS_NOTIFICATION = "nanlens/findings"


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
        self.shown_errors: set[tuple[str, str]] = set()
        self.documents = Documents(lambda: self.workspace)  # the text the user sees, by file or document URI
        self._settings_problems: list[str] = []
        # Rescans of a growing dump wait for twice their last duration after the previous one ended, so a big
        # dump of a running training job costs it at most a third of a core.
        self.timing: dict[str, tuple[float, float]] = {}  # source id -> (monotonic end, duration)
        self.delayed: dict[str, asyncio.TimerHandle] = {}
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
                start_job(self, record.ref, fingerprint(record.ref))
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

    def finding_files_of(self, notebook_uri: str) -> set[str]:
        """The findings' spellings of this notebook's file (empty when no finding points into it)."""
        path = to_fs_path(notebook_uri)
        if path is None:
            return set()
        return {f for r in self.records.values() for f in r.files() if same_file(path, f)}

    def publish(self) -> None:
        """Send the whole current state: changed diagnostics, the findings notification, a CodeLens refresh."""
        self.documents.forget_disk()
        docs = self.documents
        diagnostics: dict[str, list[types.Diagnostic]] = {}
        for (path, cell), diags in render.diagnostics_by_place(
            self.records.values(), docs.line_text, docs.uri_of
        ).items():
            uri = docs.uri_of(path, cell)
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
                    texts[path] = self.documents.current_text(path)
                stale = is_stale(record.snapshot.get(path), texts[path], path)
                if stale != (path in record.stale_files):
                    changed = True
                    (record.stale_files.add if stale else record.stale_files.discard)(path)
        return changed

    # --- computing findings (jobs.py) ------------------------------------------------------------------------

    def _from_watcher(self, events: WatchEvents) -> None:
        """Watcher thread: hand the events to the loop."""
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(handle_watch_events, self, events)

    # --- commands -------------------------------------------------------------------------------------------------

    def rescan(self) -> None:
        self.generation += 1
        cancel_all_jobs(self)
        self.records.clear()
        self.shown_errors.clear()
        self.watcher.reset()
        for ref in self.pinned.values():
            start_job(self, ref, fingerprint(ref))
        self.publish()

    def clear(self) -> None:
        self.generation += 1
        cancel_all_jobs(self)
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
            job = start_job(self, ref, fingerprint(ref), use_cache=not force, may_locate=run or None)
            self.publish()
        assert job.done is not None
        await asyncio.shield(job.done)
        while (running := self.jobs.get(ref.id)) is not None and running.done is not None:
            await asyncio.shield(running.done)  # a rerun queued meanwhile: answer with the newest result
        located = self.records.get(ref.id)
        return (
            render.source_json(located)
            if located is not None
            else render.source_json(SourceRecord(ref, status="error", error="cleared before it finished"))
        )

    def stop_work(self) -> None:
        self.watcher.stop()
        cancel_all_jobs(self)
        terminate_children()
        self.executor.shutdown(wait=False, cancel_futures=True)
