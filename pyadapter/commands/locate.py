"""`nanlens locate`: replay a capture bundle's step under a FULL_HEALTH dump and name the line that made NaN/Inf."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import TYPE_CHECKING

from pyadapter.printable import printable

if TYPE_CHECKING:
    from pyadapter.findings import Findings

HELP = "replay a capture bundle's step with a health dump and name the line where NaN/Inf starts"
DESCRIPTION = """\
Rerun the failing step of a capture bundle (from NanGuard or guard_step) once in graph mode while
TensorFlow dumps the health (NaN/Inf/zero counts) of every tensor, scan that dump, and report the causal
origin: the first op that produced NaN/Inf from finite inputs, at the line of your code that created it.
The replay verdicts of graph and eager mode come with it. Progress, and what the replayed program prints, go to stderr.

It also says why, with the line to change (the findings' "cause"): op (a wrong op on finite inputs),
divergence (the loss grew step after step until an op overflowed: the optimizer's line), data (the batch held
NaN/Inf before any op: the reading line, the row's index in the array passed to fit, its line in the CSV file),
precision (a float16 overflow: the layer to keep in float32) or unknown. Only read: the bundle, your sources.

A bundle whose origin NanGuard or guard_step already located at the scene (when the step failed, in the
training process: `findings.json` in the bundle) is answered from that file at once, with no replay and no
code run; --replay locates it again from the bundle.

If the captured batch already holds NaN/Inf, the step did not make it: the script is then run again under a
dump (`nanlens run --dump`, with the argv and folder it ran with) up to that step, to find the op that made it
before the step, e.g. in a tf.data map function. That happens by itself when the step is at most 2000 and
the arrays given to fit, or those a Dataset.from_tensor_slices pipeline was sliced from, do not hold the value
(when they do, as the guard found at the scene, no pipeline op made it); --rerun-pipeline forces it,
--no-rerun-pipeline skips it. What the script writes as it runs
again (its logs, a CSVLogger's history, np.save, model and checkpoint saves, TensorBoard summaries) is kept from
training's files; writes TensorFlow makes itself (tf.io.write_file, a TFRecordWriter) are not.

A replay runs only your own code: the bundle's program must lie inside the current folder, be unchanged since the
capture, and be named by a bundle your own NanGuard sealed (~/.nanlens/bundle-seal.key), else nanlens refuses in
one line naming the file (and, for an unsealed bundle, the arguments it would pass); --trust-entry PATH runs it
anyway.

examples:
  nanlens locate .nanlens/captures/train-20250101-120000-step4711
  nanlens locate BUNDLE --json > findings.json
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from pyadapter.replay.trust import add_trust_argument

    parser.add_argument(
        "bundle",
        metavar="BUNDLE",
        help="the capture bundle directory, or its URL (gs://..., s3://...: pulled into .nanlens/captures first)",
    )
    parser.add_argument("--json", action="store_true", help="print the findings JSON (nanlens.findings/1)")
    parser.add_argument("-o", "--output", metavar="FILE", help="also write the findings JSON to FILE")
    parser.add_argument(
        "--dump-dir", metavar="DIR", help="keep the replay's tfdbg2 dump in DIR (new or empty)"
    )
    parser.add_argument(
        "--replay",
        action="store_true",
        help="replay the step even when the bundle holds findings located at the scene",
    )
    rerun = parser.add_mutually_exclusive_group()
    rerun.add_argument(
        "--rerun-pipeline",
        dest="rerun_pipeline",
        action="store_const",
        const=True,
        default=None,
        help=(
            "when the captured batch holds NaN/Inf, re-run the script under a dump whatever the step, and also when "
            "the arrays given to fit (or sliced into the dataset) hold it (by default no pipeline op is looked for "
            "then)"
        ),
    )
    rerun.add_argument(
        "--no-rerun-pipeline",
        dest="rerun_pipeline",
        action="store_const",
        const=False,
        help="never re-run the script (only say how)",
    )
    add_trust_argument(parser)
    parser.add_argument(
        "--isolate",
        action="store_true",
        help="replay in a child process (as the language server does) instead of in this one",
    )


def format_report(findings: Findings) -> str:
    """Origin file:line, the source line, op, health, where it spread, the cause, then the replay verdicts."""
    from pyadapter import findings_text as text
    from pyadapter.cause import cause_of

    bundle = findings.bundle or {}
    none = (
        "no line marked: the step was not replayed"
        if bundle.get("not_replayed")
        else "no NaN or Inf in the graph replay of the step"
    )
    lines = text.origin_lines(findings, none=none)
    lines.extend(text.cause_lines(cause_of(findings), findings))
    where = f"step {bundle.get('step')}"
    if bundle.get("epoch") is not None:
        where += f" (epoch {bundle['epoch']}, batch {bundle.get('batch_index')}; counting from 0)"
    if bundle.get("origin_from") == "scene":
        seconds = (findings.extra.get("located_at_scene") or {}).get("seconds")
        took = f" in {seconds} s" if seconds is not None else ""
        lines.append(
            f"located at the scene{took}, when the step failed (findings.json in the bundle; --replay "
            "locates again from the bundle)"
        )
    if bundle.get("not_replayed"):
        lines.append(f"{where} from {findings.source_path}: not replayed (the warning says why)")
        lines.extend(text.warning_lines(findings))
        return "\n".join(lines)
    lines.append(f"replay of {where} from {findings.source_path}:")
    if bundle.get("route"):
        lines.append(f"  route: {bundle['route']}")
    for data in (bundle.get("verdicts") or {}).values():
        lines.append(f"  {text.verdict_sentence(data)}")
    workers = bundle.get("workers") or []
    if workers:
        lines.append(f"each worker's shard replayed alone ({len(workers)} workers):")
        for worker in workers:
            lines.append(f"  {worker.get('task')} ({worker.get('rows')} rows): {worker.get('summary')}")
    lines.extend(text.warning_lines(findings))
    return "\n".join(lines)


def _local_bundle(location: str) -> str:
    """A bundle URL is pulled (verified) into the editor's captures folder first, as `nanlens pull` does."""
    from pyadapter.capture.storage import is_remote

    if not is_remote(location):
        return location
    from pyadapter.commands.pull import DEFAULT_DIR, pull_bundle

    path = pull_bundle(location)
    print(
        printable(f"nanlens locate: pulled {location} into {os.path.join(DEFAULT_DIR, path.name)}"),
        file=sys.stderr,
    )
    return str(path)


class _Heartbeat:
    """A line on stderr every `EVERY` seconds while a long phase runs ("still re-running ... (30 s)"), from a daemon
    thread that stops when the next phase starts or locate ends."""

    EVERY = 15.0

    def __init__(self) -> None:
        import threading

        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, phase: str) -> None:
        import threading
        import time

        self._stopped = threading.Event()
        stopped, started = self._stopped, time.monotonic()

        def beat() -> None:
            while not stopped.wait(self.EVERY):
                elapsed = time.monotonic() - started
                print(
                    printable(f"nanlens locate: still {phase} ({elapsed:.0f} s)"), file=sys.stderr, flush=True
                )

        self._thread = threading.Thread(target=beat, name="nanlens-locate-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            self._thread = None


def main(args: argparse.Namespace) -> int:
    from pyadapter.commands.errors import CliError
    from pyadapter.replay.errors import ReplayError, error_text
    from pyadapter.replay.locate import RERUN_PHASE, locate_bundle

    shown: set[str] = set()
    heartbeat = _Heartbeat()

    def progress(phase: str, fraction: float) -> None:
        if phase not in shown and phase != "done":  # one line per phase, not per scanned block
            shown.add(phase)
            heartbeat.stop()
            if phase == RERUN_PHASE:
                # The longest phase (a minute or more: the program runs again to the failing step, every op dumped),
                # and silent: a user took it for a hang. Say what runs, then how long it has run.
                print(
                    printable(
                        f"nanlens locate: {phase} (your program runs again up to the failing step with every op of "
                        "its input pipeline dumped; this takes longer than that part of training did)"
                    ),
                    file=sys.stderr,
                    flush=True,
                )
                heartbeat.start(phase)
            else:
                print(printable(f"nanlens locate: {phase}"), file=sys.stderr, flush=True)

    from pyadapter.replay.trust import allow

    allow(args.trust_entry)
    bundle = _local_bundle(args.bundle)
    try:
        # stdout carries the report alone (the JSON, or the text a user saves): what the replayed program prints
        # (a notebook's model.summary(), Keras's progress) goes to stderr, beside nanlens's own progress.
        with contextlib.redirect_stdout(sys.stderr):
            findings = locate_bundle(
                bundle,
                progress=progress,
                isolate=args.isolate,
                dump_dir=args.dump_dir,
                rerun_pipeline=args.rerun_pipeline,
                replay=args.replay,
            )
    except ReplayError as exc:
        raise CliError(str(exc)) from None
    except Exception as exc:  # an unforeseen failure in the user's code or ours: still one line
        raise CliError(f"locate failed: {error_text(exc)}") from None
    finally:
        heartbeat.stop()
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as fh:
                fh.write(findings.dumps() + "\n")
        except OSError as exc:
            raise CliError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    if args.json:
        print(findings.dumps())
    else:
        print(printable(format_report(findings)))  # the findings' strings are the bundle's
    return 0
