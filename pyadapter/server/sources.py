"""Watched folders: find capture bundles and tfdbg2 dumps, and notice when they appear, grow or go away.

A plain stat poll (every ~1.5 s) in one daemon thread: no new dependency, works on every file system, and a
dump being written by a running training job shows up as a growing fingerprint. Changes are debounced so a
growing dump is rescanned when it settles, or at most every ``max_wait`` seconds while it keeps growing.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from pyadapter.capture.bundle_format import is_partial

log = logging.getLogger("nanlens.server.sources")

SourceKind = Literal["bundle", "dump"]
BUNDLE_FORMAT = "nanlens.bundle/1"
BUNDLE_MANIFEST = "manifest.json"
DUMP_PREFIX = "tfdbg_events."
# Folders never worth descending into while looking for sources.
SKIP_DIRS = frozenset(
    {".git", "__pycache__", "node_modules", ".venv", "venv", "site-packages", ".mypy_cache"}
)
MAX_DEPTH = 3  # a root, its children, grandchildren: captures/run-1/, .nanlens/dumps/run-1/
MAX_DIRS_PER_POLL = 5000  # a root pointed at a huge tree must not make each poll crawl it all


@dataclass(frozen=True)
class SourceRef:
    kind: SourceKind
    path: str  # absolute, normalized

    @property
    def id(self) -> str:
        return f"{self.kind}:{self.path}"

    @property
    def name(self) -> str:
        return os.path.basename(self.path.rstrip(os.sep)) or self.path


@dataclass(frozen=True)
class Fingerprint:
    """What changes when a source's files change: count, total bytes, newest modification."""

    files: int
    total_size: int
    newest_mtime_ns: int

    @property
    def newest_mtime(self) -> float:
        return self.newest_mtime_ns / 1e9


def is_dump_file(name: str) -> bool:
    return name.startswith(DUMP_PREFIX)


def read_bundle_manifest(path: str) -> dict | None:
    """The bundle's manifest when ``path`` is a ``nanlens.bundle/1`` directory, else None."""
    from pyadapter import safejson

    try:
        # Bounded in size and nesting, and a regular file only (a FIFO would hang the watcher in open): one
        # crafted manifest must not fail or stop every poll. A symlink is no manifest, as for CaptureBundle.load.
        manifest = safejson.load_file(
            os.path.join(path, BUNDLE_MANIFEST), max_bytes=64 << 20, follow_symlinks=False
        )
    except (OSError, ValueError):
        return None
    if isinstance(manifest, dict) and manifest.get("format") == BUNDLE_FORMAT:
        return manifest
    return None


def classify_dir(path: str, names: Iterable[str]) -> SourceKind | None:
    """'dump' for a tfdbg2 dump dir (has tfdbg_events.*.metadata), 'bundle' for a capture bundle, else None."""
    names = set(names)
    if any(is_dump_file(n) and n.endswith(".metadata") for n in names):
        return "dump"
    if BUNDLE_MANIFEST in names and read_bundle_manifest(path) is not None:
        return "bundle"
    return None


def source_at(path: str) -> SourceRef | None:
    """The source a folder is, if any (used for explicit paths such as the locateBundle command)."""
    path = os.path.abspath(path)
    try:
        with os.scandir(path) as entries:
            names = [e.name for e in entries]
    except OSError:
        return None
    kind = classify_dir(path, names)
    return SourceRef(kind, path) if kind else None


def discover(roots: Iterable[str], max_depth: int = MAX_DEPTH) -> list[SourceRef]:
    """Every bundle and dump under the roots (breadth first, not below a source, sorted by path)."""
    found: dict[str, SourceRef] = {}
    visited = 0
    queue: list[tuple[str, int]] = [(os.path.abspath(r), 0) for r in roots]
    seen_dirs: set[str] = set()
    while queue:
        path, depth = queue.pop(0)
        if path in seen_dirs:
            continue
        seen_dirs.add(path)
        visited += 1
        if visited > MAX_DIRS_PER_POLL:
            log.warning(
                "stopped looking for dumps/bundles after %d folders; point the settings at smaller folders",
                MAX_DIRS_PER_POLL,
            )
            break
        try:
            with os.scandir(path) as it:
                entries = list(it)
        except OSError:
            continue
        kind = classify_dir(path, (e.name for e in entries))
        if kind:
            found[path] = SourceRef(kind, path)
            continue
        if depth >= max_depth:
            continue
        for entry in entries:
            try:
                is_dir = entry.is_dir(follow_symlinks=True)
            except OSError:
                is_dir = False
            # A writer's hidden partial folder may already hold a complete manifest.json (killed just before
            # its rename): it is not a bundle until it has its name, and the next writer removes it.
            if (
                is_dir
                and entry.name not in SKIP_DIRS
                and not entry.name.endswith(".tmp")
                and not is_partial(entry.name)
            ):
                queue.append((entry.path, depth + 1))
    return sorted(found.values(), key=lambda r: r.path)


def fingerprint(ref: SourceRef) -> Fingerprint | None:
    """The source's current fingerprint, or None when it is gone. Precomputed findings.json files don't count."""
    count = size = newest = 0
    try:
        if ref.kind == "dump":
            with os.scandir(ref.path) as it:
                for entry in it:
                    if is_dump_file(entry.name) and entry.is_file():
                        st = entry.stat()
                        count, size, newest = count + 1, size + st.st_size, max(newest, st.st_mtime_ns)
        else:
            for dirpath, _dirnames, filenames in os.walk(ref.path):
                for name in filenames:
                    if dirpath == ref.path and name == "findings.json":
                        continue
                    try:
                        st = os.stat(os.path.join(dirpath, name))
                    except OSError:
                        continue
                    count, size, newest = count + 1, size + st.st_size, max(newest, st.st_mtime_ns)
            if count == 0 and not os.path.isdir(ref.path):
                return None
    except OSError:
        return None
    return Fingerprint(count, size, newest)


@dataclass
class _Seen:
    reported: Fingerprint | None = None  # the fingerprint last handed out for scanning
    last: Fingerprint | None = None  # the fingerprint seen at the previous poll
    pending_since: float | None = None  # when the fingerprint first differed from `reported`


@dataclass
class Debouncer:
    """Decides when a changed source is worth scanning again.

    New sources are scanned at once. A changed one is scanned when its fingerprint held still for one poll
    (the writer paused or finished) or, while it keeps growing, every ``max_wait`` seconds (live markers).
    """

    max_wait: float = 5.0
    _seen: dict[str, _Seen] = field(default_factory=dict)

    def observe(self, source_id: str, fp: Fingerprint, now: float) -> bool:
        seen = self._seen.get(source_id)
        if seen is None:
            self._seen[source_id] = _Seen(reported=fp, last=fp)
            return True
        previous, seen.last = seen.last, fp
        if fp == seen.reported:
            seen.pending_since = None
            return False
        if seen.pending_since is None:
            seen.pending_since = now
        if fp == previous or now - seen.pending_since >= self.max_wait:
            seen.reported, seen.pending_since = fp, None
            return True
        return False

    def forget(self, source_id: str) -> None:
        self._seen.pop(source_id, None)

    def forget_all(self) -> None:
        self._seen.clear()

    def known(self) -> set[str]:
        return set(self._seen)


@dataclass
class WatchEvents:
    """What one poll found: sources to (re)scan, sources gone, user files whose text may have changed."""

    scan: list[tuple[SourceRef, Fingerprint]] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)  # source ids
    files_changed: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.scan or self.removed or self.files_changed)


def _file_stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


class FolderWatcher:
    """Polls the watched roots (and the user files that findings point at) in a daemon thread.

    ``on_events`` is called from the watcher thread; the server hands the events over to its event loop.
    """

    def __init__(
        self, on_events: Callable[[WatchEvents], None], interval: float = 1.5, max_wait: float = 5.0
    ):
        self._on_events = on_events
        self._interval = interval
        self._debouncer = Debouncer(max_wait=max_wait)
        self._lock = threading.Lock()
        self._roots: list[str] = []
        self._files: dict[str, tuple[int, int] | None] = {}
        self._refs: dict[str, SourceRef] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="nanlens-watcher", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def set_roots(self, roots: Iterable[str]) -> None:
        with self._lock:
            self._roots = list(roots)
        self._wake.set()

    def set_watched_files(self, files: Iterable[str]) -> None:
        """User source files to stat each poll; a changed one is reported in ``files_changed``."""
        with self._lock:
            old = self._files
            self._files = {f: old[f] if f in old else _file_stamp(f) for f in files}

    def reset(self) -> None:
        """Forget every source seen, so the next poll reports all of them as new (rescan)."""
        with self._lock:
            self._debouncer.forget_all()
            self._refs.clear()
        self._wake.set()

    def poll_now(self) -> None:
        self._wake.set()

    def poll(self) -> WatchEvents:
        """One poll; public so tests and the server can run it synchronously."""
        with self._lock:
            roots = list(self._roots)
        refs = discover(roots)
        now = time.monotonic()
        events = WatchEvents()
        with self._lock:
            current = {r.id: r for r in refs}
            for source_id in set(self._refs) - set(current):
                self._debouncer.forget(source_id)
                events.removed.append(source_id)
            for ref in refs:
                fp = fingerprint(ref)
                if fp is None:
                    continue
                if self._debouncer.observe(ref.id, fp, now):
                    events.scan.append((ref, fp))
            self._refs = current
            for path, stamp in list(self._files.items()):
                new_stamp = _file_stamp(path)
                if new_stamp != stamp:
                    self._files[path] = new_stamp
                    events.files_changed.append(path)
        return events

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                events = self.poll()
                if events:
                    self._on_events(events)
            except Exception:  # the watcher must outlive any odd file system state
                log.exception("watcher poll failed")
            self._wake.wait(self._interval)
            self._wake.clear()
