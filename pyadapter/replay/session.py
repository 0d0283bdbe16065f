"""``replay_bundle``: rebuild a bundle's step and run it in graph and/or eager mode; the verdicts of each."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path

from pyadapter.replay.debugger import breakpoints_paused
from pyadapter.replay.rebuild import Rebuilt, rebuild
from pyadapter.replay.shards import worker_verdicts
from pyadapter.replay.step import run_step
from pyadapter.replay.verdict import MODES, Mode, ReplayReport

# progress(phase message, fraction done 0..1)
Progress = Callable[[str, float], None]


def new_report(rebuilt: Rebuilt) -> ReplayReport:
    bundle = rebuilt.bundle
    return ReplayReport(
        bundle=str(bundle.path),
        entry_script=str(bundle.entry_script or ""),
        step=bundle.step,
        epoch=bundle.epoch,
        batch_index=bundle.batch_index,
        kind=bundle.kind,
        captured=bundle.non_finite.summary(),
        warnings=list(rebuilt.warnings),
        non_finite_inputs=list(rebuilt.bad_inputs),
    )


def replay_bundle(
    path: str | Path, modes: Sequence[Mode] = MODES, *, progress: Progress | None = None
) -> ReplayReport:
    """Rebuild the bundle's step and run it once per mode from the captured state.

    Raises ReplayError (one line) when the bundle is tampered with, its entry script is missing or fails to
    import, or the step cannot run at all.
    """
    if progress:
        progress("loading bundle", 0.0)
    # Under a debugger, breakpoints stop only in the eager run: elsewhere the user's code sees symbolic tensors.
    with breakpoints_paused():
        rebuilt = rebuild(path)
    report = new_report(rebuilt)
    for index, mode in enumerate(modes):
        if progress:
            progress(f"replaying in {mode} mode", 0.3 + 0.7 * index / len(modes))
        with breakpoints_paused() if mode == "graph" else contextlib.nullcontext():
            report.verdicts[mode] = run_step(rebuilt.program, mode)
    if rebuilt.bundle.cluster:  # a multi-worker bundle: whose data was it?
        if progress:
            progress("replaying each worker's shard", 0.95)
        with breakpoints_paused():
            report.workers = worker_verdicts(rebuilt)
    if progress:
        progress("done", 1.0)
    return report
