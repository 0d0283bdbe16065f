"""`nanlens replay`: rerun a capture bundle's failing step and say whether it makes NaN/Inf again."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import TYPE_CHECKING

from pyadapter.printable import printable

if TYPE_CHECKING:
    from pyadapter.replay.verdict import Mode, ReplayReport

HELP = "rerun a capture bundle's failing step (graph and/or eager) and say whether the NaN comes back"
DESCRIPTION = """\
Bring back the failing step of a capture bundle (written by NanGuard or guard_step), run it once from the
captured state, and report whether the loss, the gradients or the updated weights are non-finite again.

Two routes bring the step back, and the report names the one taken. A script that keeps its training under
`if __name__ == "__main__":` is imported as a module and its model loaded from the bundle's model.keras.
Anything else (a notebook, a script that trains at module level, a model that cannot be deserialized) is
re-entered: your program runs as it did in training (a notebook's code cells in order) until its first
`fit` / guarded step, which does not train: the captured weights, optimizer state, random state and batch
are loaded into the objects your code just built, the step runs, and the program ends there.

With neither --graph nor --eager both modes run; a NaN that appears in only one of them is a finding in
itself and is reported as such. --eager runs tf.functions, Keras `call`s and tf.data functions line by line:
it is what a debug session launches, so breakpoints in your step, layers and losses stop with real tensors.

Only your own code runs: the bundle's program must lie inside the current folder, be unchanged since the capture
(a notebook: its code cells), and be named by a bundle your own NanGuard sealed, else nanlens refuses in one line
naming the file (and, for an unsealed bundle, the arguments it would pass); --trust-entry PATH runs it anyway
(e.g. after your own fix). Progress, and what the replayed program prints, go to stderr.

--window replays the bundle's window instead (a guard with window=K, the default, keeps the state K to 2K-1
steps before the failing one and the batches since): every step from that state up to the failing one, in graph
mode, at the learning rate your code sets now on the line the cause names (the fix you made), or at
--learning-rate (a constant rate only: a schedule's fix is replayed as the edited code builds it), and at the
captured rate for comparison; --find-learning-rate also finds the largest rate that
keeps the window finite (halving, then bisecting; at most --search-seconds). For a divergence the captured step
alone is no test of a fix: it starts from weights that are already blown up.

exit status: 0 the NaN reproduced (in at least one mode; --window: the window went non-finite), 1 every mode
stayed finite (--window: the window stayed finite), 2 error.

examples:
  nanlens replay .nanlens/captures/train-20250101-120000-step4711
  nanlens replay BUNDLE --eager --json
  nanlens replay BUNDLE --window --learning-rate 3e-5
  nanlens replay BUNDLE --window --find-learning-rate --json
  python -m debugpy --listen 5678 --wait-for-client -m pyadapter replay BUNDLE --eager
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from pyadapter.replay.trust import add_trust_argument

    parser.add_argument("bundle", metavar="BUNDLE", help="the capture bundle directory")
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument(
        "--graph", action="store_true", help="run the step only as a traced graph (tf.function)"
    )
    modes.add_argument("--eager", action="store_true", help="run the step only eagerly (debugger-friendly)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(
        "--window",
        action="store_true",
        help="replay the bundle's window (the steps from the guard's state copy to the failing one), graph mode",
    )
    parser.add_argument(
        "--learning-rate",
        type=_positive_float,
        default=None,
        metavar="LR",
        help="with --window: replay at this learning rate (default: the one your code sets now on the cause's "
        "line); not for a rate a schedule gives: edit the schedule and replay with --trust-entry",
    )
    parser.add_argument(
        "--find-learning-rate",
        action="store_true",
        help="with --window: also find the largest learning rate that keeps the window finite",
    )
    parser.add_argument(
        "--search-seconds",
        type=_positive_float,
        default=60.0,
        metavar="SECONDS",
        help="with --find-learning-rate: stop trying rates after SECONDS (default 60)",
    )
    add_trust_argument(parser)
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop a re-entered program that has not reached its first training step after SECONDS (default 600)",
    )


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number: {text!r}")
    return value


def format_report(report: ReplayReport) -> str:
    """The human report: which step, what the guard saw, one line per mode, the note, warnings."""
    lines = [f"bundle {report.bundle}: {report.where()}"]
    if report.captured:
        lines.append(f"  captured: {report.captured}")
    if report.entry_script:
        lines.append(f"  entry script: {report.entry_script}")
    if report.route:
        lines.append(f"  route: {report.route}")
    for verdict in report.verdicts.values():
        lines.append(f"  {verdict.describe()}")
    if report.workers:
        lines.append(f"each worker's shard alone ({len(report.workers)} workers):")
        lines.extend(f"  {w.task} ({w.rows} rows): {w.summary}" for w in report.workers)
    if report.note:
        lines.append(f"note: {report.note}")
    if report.warnings:
        lines.append("warnings:")
        lines.extend(f"  {w}" for w in report.warnings)
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    from pyadapter.commands.errors import CliError
    from pyadapter.replay.errors import ReplayError, error_text
    from pyadapter.replay.locate import check_bundle
    from pyadapter.replay.trust import allow

    modes: tuple[Mode, ...] = ("graph",) if args.graph else ("eager",) if args.eager else ("graph", "eager")
    allow(args.trust_entry)
    if not args.window and (args.learning_rate is not None or args.find_learning_rate):
        raise CliError("--learning-rate and --find-learning-rate go with --window")
    if args.window and (args.graph or args.eager):
        raise CliError("--window replays in graph mode only; drop --graph/--eager")
    if args.window:
        return _main_window(args)
    try:
        check_bundle(args.bundle)  # a bad bundle or missing script fails before TensorFlow starts
        from pyadapter.replay.session import replay_bundle

        def progress(phase: str, fraction: float) -> None:
            if phase != "done":
                print(printable(f"nanlens replay: {phase}"), file=sys.stderr, flush=True)

        # stdout carries the report alone (the JSON, or the text a user saves): what the replayed program prints
        # (a notebook's model.summary(), Keras's progress) goes to stderr, beside nanlens's own progress.
        with contextlib.redirect_stdout(sys.stderr):
            report = replay_bundle(args.bundle, modes, progress=progress, reentry_timeout=args.timeout)
    except ReplayError as exc:
        raise CliError(str(exc)) from None
    except Exception as exc:  # an unforeseen failure in the user's code or ours: still one line
        raise CliError(f"replay failed: {error_text(exc)}") from None
    if args.json:
        for warning in report.warnings:
            print(printable(f"nanlens: warning: {warning}"), file=sys.stderr)
        data = report.to_json()
        # Every mode that ran stayed finite (and none failed): what "Verify fix on captured step" asks.
        data.setdefault(
            "finite",
            bool(report.verdicts)
            and not any(v.reproduced or v.error is not None for v in report.verdicts.values()),
        )
        print(json.dumps(data, indent=2))
    else:
        print(printable(format_report(report)))  # the report's strings are the bundle's
    return 0 if any(report.reproduced.values()) else 1


def _main_window(args: argparse.Namespace) -> int:
    from pyadapter.commands.errors import CliError
    from pyadapter.replay.errors import ReplayError
    from pyadapter.replay.locate import check_bundle

    try:
        check_bundle(args.bundle)
        from pyadapter.replay.window_bundle import replay_bundle_window

        print("nanlens replay: replaying the window", file=sys.stderr, flush=True)
        with contextlib.redirect_stdout(sys.stderr):  # the program's prints: stderr (stdout is the report's)
            report = replay_bundle_window(
                args.bundle,
                learning_rate=args.learning_rate,
                search=args.find_learning_rate,
                search_seconds=args.search_seconds,
                reentry_timeout=args.timeout,
            )
    except ReplayError as exc:
        raise CliError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - an unforeseen failure in the user's code or ours: still one line
        lines = str(exc).strip().splitlines()
        raise CliError(f"window replay failed: {type(exc).__name__}: {lines[0] if lines else ''}") from None
    if args.json:
        for warning in report.warnings:
            print(printable(f"nanlens: warning: {warning}"), file=sys.stderr)
        print(json.dumps(report.to_json(), indent=2))
    else:
        from pyadapter.findings_text import format_number

        rate_text = "unknown" if report.learning_rate is None else format_number(report.learning_rate)
        lines = [
            f"bundle {report.bundle}: window of steps {report.start_step}-{report.end_step} ({report.steps} steps)",
            f"  learning rate: {rate_text} ({report.rate_from})",
            f"  {report.message()}",
        ]
        if report.route:
            lines.append(f"  route: {report.route}")
        if report.warnings:
            lines.append("warnings:")
            lines.extend(f"  {w}" for w in report.warnings)
        print(printable("\n".join(lines)))
    return 1 if report.finite else 0
