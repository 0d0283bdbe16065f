"""Finding the dump files in a directory and grouping them by writer (one group per host/process).

A tfdbg2 writer names its six files ``tfdbg_events.<unix seconds>.<hostname>.<suffix>``; several hosts (or
several runs) can share one dump directory, each with its own six files.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from pyadapter.dump.errors import ScanError

SUFFIXES = ("metadata", "source_files", "stack_frames", "graphs", "execution", "graph_execution_traces")
_NAME_RE = re.compile(r"^tfdbg_events\.(\d+)\.(.+)\.(" + "|".join(SUFFIXES) + r")$")


@dataclass
class HostFiles:
    """The files one writer produced."""

    prefix: str
    host: str
    timestamp: int
    paths: dict[str, str] = field(default_factory=dict)

    def path(self, suffix: str) -> str | None:
        return self.paths.get(suffix)

    def size(self, suffix: str) -> int:
        p = self.paths.get(suffix)
        try:
            return os.path.getsize(p) if p else 0
        except OSError:
            return 0

    @property
    def total_size(self) -> int:
        return sum(self.size(s) for s in SUFFIXES)

    def missing(self) -> list[str]:
        return [s for s in SUFFIXES if s not in self.paths]


def find_host_files(dump_dir: str) -> list[HostFiles]:
    """All writers' file groups in ``dump_dir``, oldest first; ScanError if there are none."""
    if not os.path.exists(dump_dir):
        raise ScanError(f"no such dump directory: {dump_dir}")
    if not os.path.isdir(dump_dir):
        raise ScanError(f"not a directory: {dump_dir} (pass the dump directory, not one of its files)")
    try:
        names = os.listdir(dump_dir)
    except OSError as exc:
        raise ScanError(f"cannot list {dump_dir}: {exc.strerror or exc}") from None
    groups: dict[str, HostFiles] = {}
    for name in sorted(names):
        m = _NAME_RE.match(name)
        if not m:
            continue
        ts, host, suffix = m.group(1), m.group(2), m.group(3)
        prefix = f"tfdbg_events.{ts}.{host}"
        group = groups.setdefault(prefix, HostFiles(prefix=prefix, host=host, timestamp=int(ts)))
        group.paths[suffix] = os.path.join(dump_dir, name)
    if not groups:
        if not names:
            raise ScanError(f"{dump_dir} is empty: no tfdbg2 dump files (tfdbg_events.*)")
        raise ScanError(
            f"{dump_dir} is not a tfdbg2 dump: no tfdbg_events.* files among its {len(names)} entries"
        )
    return sorted(groups.values(), key=lambda g: (g.timestamp, g.host))
