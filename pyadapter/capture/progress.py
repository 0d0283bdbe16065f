"""Progress of a bundle write on stderr: silent for a write that ends within a second, then a line at most every
second ("NanGuard: writing the capture bundle: weights.npz 45% of 1.1 GB, 3.2 s") and a last line with the size,
the time and the process's peak RSS. Nothing here imports TensorFlow."""

from __future__ import annotations

import sys
import time
from typing import TextIO

QUIET_SECONDS = 1.0  # a write that ends within this never prints
EVERY_SECONDS = 1.0


def size_text(size: float) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{int(size)} bytes"


def peak_rss_bytes() -> int | None:
    """The process's peak resident set size so far (Linux, macOS), or None where it cannot be read."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # macOS counts bytes, Linux KB


class WriteProgress:
    """Counts the bytes of one stage of a write at a time ("weights.npz", "checking") against its expected total
    and prints on `stream` once the write has taken longer than `QUIET_SECONDS`."""

    def __init__(
        self, label: str = "NanGuard: writing the capture bundle", stream: TextIO | None = None
    ) -> None:
        self.label = label
        self.stream = stream
        self.started = time.monotonic()
        self.stage_name = ""
        self.done = 0
        self.total = 0
        self.written = 0
        self.printed = False
        self._last = 0.0

    def stage(self, name: str, total: int) -> None:
        self.stage_name, self.done, self.total = name, 0, max(int(total), 0)
        self._maybe_print()

    def advance(self, count: int, written: bool = True) -> None:
        self.done += count
        if written:
            self.written += count
        self._maybe_print()

    def _maybe_print(self) -> None:
        now = time.monotonic()
        elapsed = now - self.started
        if elapsed < QUIET_SECONDS or now - self._last < EVERY_SECONDS:
            return
        self._last = now
        share = (
            f" {min(100 * self.done // self.total, 100)}% of {size_text(self.total)}" if self.total else ""
        )
        self._print(f"{self.label}: {self.stage_name}{share}, {elapsed:.1f} s")

    def finish(self, where: object) -> None:
        """The last line, only when progress was shown: what was written, how long it took, the peak RSS."""
        if not self.printed:
            return
        peak = peak_rss_bytes()
        rss = f", process peak RSS {size_text(peak)}" if peak else ""
        elapsed = time.monotonic() - self.started
        self._print(f"{self.label}: done, {size_text(self.written)} in {elapsed:.1f} s{rss}: {where}")

    def _print(self, line: str) -> None:
        self.printed = True
        print(line, file=self.stream or sys.stderr, flush=True)
