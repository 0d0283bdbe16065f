"""`nanlens scan`: find where NaN/Inf starts in a tfdbg2 dump."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING, TextIO

from pyadapter.printable import printable

if TYPE_CHECKING:
    from pyadapter.findings import Findings

HELP = "find the op and source line where NaN/Inf starts in a tfdbg2 dump"
DESCRIPTION = """\
Stream a tfdbg2 dump directory (from `nanlens run` or tf.debugging.experimental.enable_dump_debug_info)
and report the causal origin: the first op that produced NaN/Inf from finite inputs, at the innermost line
of your own code that created it, plus the lines it spread to. Damaged dumps (killed runs) are read as far
as they go; what was skipped is listed. The cause is said when the findings alone tell it (a wrong op, a
float16 overflow); a dump holds no loss history, so a divergence needs `nanlens locate` on a NanGuard bundle.

examples:
  nanlens scan .nanlens/dumps/20250101-120000
  nanlens scan DUMP --json > findings.json
"""

# Show a progress bar by default only for dumps at least this large (and only on a terminal).
PROGRESS_MIN_BYTES = 20_000_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dump", metavar="DUMP", help="the dump directory")
    parser.add_argument("--json", action="store_true", help="print the findings JSON (nanlens.findings/1)")
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: on for large dumps when stderr is a terminal)",
    )


class ProgressBar:
    """A one-line text bar on stderr, redrawn at most ~10 times a second."""

    def __init__(self, stream: TextIO | None = None, min_total: int = 0, label: str = "scanning") -> None:
        self.stream = stream or sys.stderr
        self.label = label
        self.min_total = min_total
        self.last_draw = 0.0
        self.drawn = False

    def __call__(self, done: int, total: int) -> None:
        if total < self.min_total:
            return
        now = time.monotonic()
        if done < total and now - self.last_draw < 0.1:
            return
        self.last_draw = now
        width = 30
        filled = int(width * done / max(total, 1))
        bar = "#" * filled + "." * (width - filled)
        self.stream.write(
            f"\r{self.label} [{bar}] {100 * done // max(total, 1):3d}% {done / 1e6:.0f}/{total / 1e6:.0f} MB"
        )
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\r" + " " * 70 + "\r")
            self.stream.flush()


def format_report(findings: Findings) -> str:
    """The short human report: the dump read, the origin and where it spread, the cause, the warnings."""
    from pyadapter import findings_text as text
    from pyadapter.cause import cause_of

    scan = findings.extra.get("scan", {})
    mode = findings.tensor_debug_mode or "unknown mode"
    hosts = ", ".join(findings.hosts)
    counts = (
        f"{scan.get('traces_read', 0):,} graph traces, {scan.get('executions_read', 0):,} eager executions"
    )
    lines = [f"dump {findings.source_path} (host {hosts}, {mode}; {counts}; {scan.get('seconds', 0):.2f} s)"]
    if not scan.get("health_recorded", True):
        none = f"cannot tell where NaN/Inf starts: the dump was recorded in {mode} mode (no NaN/Inf counts)"
    else:
        none = "no NaN or Inf found"
    lines.extend(text.origin_lines(findings, none=none))
    lines.extend(text.cause_lines(cause_of(findings), findings))
    lines.extend(text.warning_lines(findings))
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    from pyadapter.commands.errors import CliError
    from pyadapter.dump import ScanError, scan_dump

    show = args.progress
    bar = None
    if show or (show is None and sys.stderr.isatty()):
        bar = ProgressBar(min_total=0 if show else PROGRESS_MIN_BYTES)
    try:
        findings = scan_dump(args.dump, progress=bar)
    except ScanError as exc:
        raise CliError(str(exc)) from None
    finally:
        if bar is not None:
            bar.close()
    if findings.origin is not None:  # no bundle: the cause is read from the findings alone (no loss history)
        from pyadapter.cause import attach_cause

        attach_cause(findings)
    try:
        # A dump's op names and files are the dump's: no control characters reach the terminal.
        print(findings.dumps() if args.json else printable(format_report(findings)))
        sys.stdout.flush()
    except BrokenPipeError:  # `nanlens scan DUMP | head`: the reader left; that is fine
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
