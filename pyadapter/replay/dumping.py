"""Replay a bundle's step in graph mode under a FULL_HEALTH tfdbg2 dump (in this process; imports TensorFlow).

The dump holds the step alone: the captured state is restored before dumping starts, and the checks of the
result run after it stops. The eager verdict is taken first, without dumping. ``jit_compile`` is off for the
replayed function: XLA has no kernel for the dump's DebugNumericSummaryV2 op.
"""

from __future__ import annotations

import functools
import shutil
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import tensorflow as tf

from pyadapter.dump.recorder import EAGER_DUMP
from pyadapter.dump.recorder import step_dump as dumping
from pyadapter.replay.errors import ReplayError
from pyadapter.replay.rebuild import Rebuilt
from pyadapter.replay.scene import STATEFUL_RANDOM_TRIES
from pyadapter.replay.session import new_report, with_captured_step
from pyadapter.replay.shards import worker_verdicts
from pyadapter.replay.step import run_step
from pyadapter.replay.verdict import NOT_A_GRAPH, Mode, ReplayReport, StepVerdict


def dump_replay(
    path: str | Path, dump_dir: str | Path, *, phase: Callable[[str], None] | None = None
) -> ReplayReport:
    """Bring the bundle's step back, judge it eagerly, then run it in graph mode while dumping into `dump_dir`."""

    def run(rebuilt: Rebuilt) -> ReplayReport:
        report = new_report(rebuilt)
        report.verdicts["eager"] = run_step(rebuilt.program, "eager")
        if rebuilt.bundle.cluster:
            if phase:
                phase("replaying each worker's shard")
            report.workers = worker_verdicts(rebuilt)
        if phase:
            phase("replaying with dump")
        rebuilt.program.restore()
        try:
            report.verdicts["graph"] = run_step(
                rebuilt.program, "graph", restore=False, around=lambda: dumping(dump_dir)
            )
        except tf.errors.OpError as exc:  # e.g. a user tf.function with jit_compile=True inside the step
            raise ReplayError(
                f"the dumped replay failed: {type(exc).__name__}: {exc.message.splitlines()[0]}"
            ) from None
        except ReplayError as exc:
            if not rebuilt.program.plain_python:
                raise
            # A plain Python step that hands its tensors to NumPy cannot run as a graph: its eager run is the one
            # dumped (training ran it so), and the graph mode's verdict says why it has none.
            report.verdicts["graph"] = StepVerdict(mode="graph", error=f"{NOT_A_GRAPH}: {exc}")
            if phase:
                phase("replaying eagerly with dump (the step is plain Python)")
            rebuilt.program.restore()
            # A fresh folder, as for a second draw below: tfdbg keeps its writer on the graph run's root.
            eager_dir = Path(dump_dir) / "plain-python"
            eager = run_step(rebuilt.program, "eager", restore=False, around=lambda: dumping(eager_dir))
            _take_dump(eager_dir, Path(dump_dir))
            eager.dumped = True
            report.verdicts["eager"] = eager
            report.verdicts = {mode: report.verdicts[mode] for mode in ("graph", "eager")}
            return report
        tries = 1
        while not report.verdicts["graph"].reproduced and report.verdicts["graph"].stateful_random:
            if tries == STATEFUL_RANDOM_TRIES:
                break
            # The step draws unseeded random numbers (a GAN's noise): the dumped run drew others than training did
            # and stayed finite; draw again, from the captured state, into an empty dump.
            tries += 1
            if phase:
                phase(f"replaying with dump again (run {tries}: the step draws unseeded random numbers)")
            # A fresh folder: tfdbg keeps one writer per dump root, and enabling it again on a root whose files
            # were removed crashes the process. The draw's files then take the first dump's place.
            draw_dir = Path(dump_dir) / f"draw-{tries}"
            rebuilt.program.restore()
            report.verdicts["graph"] = run_step(
                rebuilt.program,
                "graph",
                restore=False,
                around=functools.partial(dumping, draw_dir),
                draw=tries - 1,
            )
            _take_dump(draw_dir, Path(dump_dir))
        if tries > 1:
            report.warnings.append(
                f"the dumped run {'reproduced the NaN in run' if report.verdicts['graph'].reproduced else 'stayed finite in all'} "
                f"{tries}: the step draws unseeded random numbers, each run other ones"
            )
        report.verdicts["graph"].dumped = True
        graph, eager = report.verdicts["graph"], report.verdicts["eager"]
        if not graph.reproduced and eager.reproduced and not graph.stateful_random:
            # The dumped graph came out finite where training's and the eager run did not (a matrix only just not
            # positive definite: a dump keeps every op's output). The eager run under a dump of its own, beside
            # the graph's, is where locate looks next (`EAGER_DUMP`).
            if phase:
                phase("replaying eagerly with dump")
            rebuilt.program.restore()
            run_step(
                rebuilt.program, "eager", restore=False, around=lambda: dumping(Path(dump_dir) / EAGER_DUMP)
            )
        report.bad_rows, report.first_huge = _values_of_the_step(
            rebuilt, str(dump_dir), eager_first=not report.verdicts["graph"].stateful_random
        )
        # Keep the report's modes in the usual order.
        report.verdicts = {mode: report.verdicts[mode] for mode in ("graph", "eager")}
        return report

    report, route = with_captured_step(path, run)
    report.route = route
    return report


def _take_dump(source: Path, target: Path) -> None:
    """The dump in `source` replaces the one in `target`'s top level (its sub-folders stay); `source` is removed."""
    for entry in target.iterdir():
        if entry.is_file():
            entry.unlink()
    for entry in source.iterdir():
        shutil.move(str(entry), str(target / entry.name))
    source.rmdir()


def _values_of_the_step(
    rebuilt: Rebuilt, dump_dir: str, *, eager_first: bool
) -> tuple[dict | None, dict | None]:
    """(the batch rows the origin op's NaN/Inf came from, where the values first grew huge), as JSON or None
    (`pyadapter.replay.rowvalues`), each from one more run from the captured state (the rows eager unless the step
    draws unseeded random numbers); the origin is the dump's, scanned here (the caller scans it again: it is
    small)."""
    from pyadapter.dump import ScanError, scan_dump
    from pyadapter.replay.callsite import bundle_training_call
    from pyadapter.replay.rowvalues import first_huge, origin_rows

    try:
        # Placed as the locate places it: an optimizer's op has no line of the user's but the training call.
        origin = scan_dump(dump_dir, entry_frame=bundle_training_call(rebuilt.bundle)).origin
    except ScanError:
        return None, None

    def run_values(mode: Mode, around: Callable[[], AbstractContextManager[None]]) -> None:
        rebuilt.program.restore()
        run_step(rebuilt.program, mode, restore=False, around=around)

    rows = origin_rows(origin, rebuilt.bundle.batch(), run_values, eager_first=eager_first)
    huge = first_huge(origin, run_values) if eager_first else None
    return (None if rows is None else rows.to_json()), (None if huge is None else huge.to_json())
