"""`nanlens eval`: score NaN Lens on a corpus of NaN bug programs (the zoo)."""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HELP = "score NaN Lens on a corpus of NaN bug programs (each marks its bug with # ORIGIN and # CAUSE:)"
DESCRIPTION = """Score NaN Lens on a corpus of NaN bug programs.

Every top-level zoo_*.py program and zoo_*.ipynb notebook in ZOO_DIR marks the line a user must fix with one
`# ORIGIN` comment (in the program, a notebook's code cell, or a zoo-local module it imports) and names its cause
with one `# CAUSE: <kind>` comment in the program (op, divergence, data or precision). Each program is
run in its own process (a notebook headless in a Jupyter kernel, as Jupyter runs it): under NanGuard when it
trains with NanGuard/guard_step (then its bundle is located and replayed in graph and eager mode), else with
`nanlens run --dump` (then the dump is scanned). A notebook's origin must name the .ipynb, the marked cell and
the line within it. The line found (the findings' cause.change when they carry one, else the origin) is
compared with the marked line, and the findings' cause.kind ("unknown" without one) with the marked cause. A
second run under tf.debugging.enable_check_numerics() tells which op type TensorFlow itself reports first.

Prints a table (Markdown) on stdout and one progress line per program on stderr; --json prints
{"programs", "exact_line", "cause_hit", "cause_programs", "by_cause", "reproduced", "check_numerics_agree",
"rows": [...]} instead, where "by_cause" gives per marked cause its programs and how many had the cause, the
line and both right, "reproduced" counts bundles whose step made NaN/Inf again in both graph and eager replay,
and "check_numerics_agree" the programs where check_numerics stops at the same op type as our origin. Each child process is bounded by
--timeout; a program that fails is a row with an error. Exit status 0 when every program was scored (misses
included), 1 when some row has an error.

examples:
  nanlens eval tests/zoo --jobs 2
  nanlens eval tests/zoo --only log_of_zero,zoo_sqrt* --json
  nanlens eval tests/zoo --json --markdown table.md > results.json"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "zoo_dir",
        metavar="ZOO_DIR",
        help="folder of zoo_*.py programs and zoo_*.ipynb notebooks (e.g. tests/zoo)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    parser.add_argument(
        "--only",
        action="append",
        metavar="PATTERN",
        default=[],
        help="only programs whose name matches: a glob (zoo_sqrt*) or a substring; comma-separated or repeated",
    )
    parser.add_argument(
        "--jobs", type=int, default=1, metavar="N", help="programs evaluated at once (default 1)"
    )
    parser.add_argument(
        "--no-check-numerics", action="store_true", help="skip the second run under enable_check_numerics"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=180.0,
        metavar="SECONDS",
        help="limit for each child process: the program's run, the locate, the replay, check_numerics (default 180)",
    )
    parser.add_argument(
        "--keep", metavar="DIR", help="keep each program's bundle/dump and findings under DIR/<program>/"
    )
    parser.add_argument(
        "--markdown", metavar="FILE", help="also write the Markdown table to FILE (e.g. together with --json)"
    )


def main(args: argparse.Namespace) -> int:
    from pyadapter.commands.errors import CliError
    from pyadapter.evaluate.corpus import CorpusError, discover
    from pyadapter.evaluate.report import markdown_table, progress_line
    from pyadapter.evaluate.runner import Limits, Outcome, evaluate_program
    from pyadapter.evaluate.scoring import Row, score, summarize

    if args.jobs < 1:
        raise CliError("--jobs must be at least 1")
    if args.timeout <= 0:
        raise CliError("--timeout must be positive")
    zoo_dir = Path(args.zoo_dir)
    try:
        programs = discover(zoo_dir, args.only)
    except CorpusError as exc:
        raise CliError(str(exc)) from None
    if args.markdown and not Path(args.markdown).resolve().parent.is_dir():
        raise CliError(f"cannot write --markdown {args.markdown}: its folder does not exist")
    keep = Path(args.keep).resolve() if args.keep else None
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
    limits = Limits(run=args.timeout, locate=args.timeout, replay=args.timeout, check_numerics=args.timeout)

    total = len(programs)
    done_count = 0
    lock = threading.Lock()
    started = time.perf_counter()

    def one(index: int) -> Row:
        nonlocal done_count
        program = programs[index]
        t0 = time.perf_counter()
        try:
            outcome = evaluate_program(
                program, zoo_dir, limits, check_numerics=not args.no_check_numerics, keep=keep
            )
        except Exception as exc:  # a row with an error, never a crash of the whole evaluation
            outcome = Outcome(program, error=f"{type(exc).__name__}: {exc}".splitlines()[0])
        row = score(outcome)
        row.seconds["total"] = time.perf_counter() - t0
        with lock:
            done_count += 1
            print(progress_line(done_count, total, row, zoo_dir), file=sys.stderr, flush=True)
        return row

    with ThreadPoolExecutor(max_workers=min(args.jobs, total)) as pool:
        rows = list(pool.map(one, range(total)))

    summary = summarize(rows)
    elapsed = time.perf_counter() - started
    table = markdown_table(rows, summary, zoo_dir)
    if args.markdown:
        try:
            Path(args.markdown).write_text(table + "\n", encoding="utf-8")
        except OSError as exc:
            print(f"nanlens: cannot write {args.markdown}: {exc.strerror or exc}", file=sys.stderr)
    if args.json:
        document = summary.to_json()
        document["seconds"] = round(elapsed, 1)
        document["rows"] = [row.to_json(zoo_dir) for row in rows]
        print(json.dumps(document, indent=2))
    else:
        print(table)
    return 1 if summary.errors else 0
