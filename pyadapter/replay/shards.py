"""Multi-worker bundles: which worker's data made the step non-finite.

The bundle's batch is the union of the workers' shards, and the replay runs that union on one machine. To say
whose data it was, each worker's shard is also run alone (eagerly, from the same captured state): a shard whose
step goes non-finite on its own is that worker's doing. NanGuard's own record from training (each worker's
loss and gradients before the workers agreed) is kept beside it.
"""

from __future__ import annotations

import dataclasses

from pyadapter.capture.bundle_format import KIND_FIT, BundleError
from pyadapter.replay.errors import ReplayError
from pyadapter.replay.rebuild import Rebuilt, to_tensors
from pyadapter.replay.step import run_step
from pyadapter.replay.verdict import WorkerVerdict


def worker_verdicts(rebuilt: Rebuilt) -> list[WorkerVerdict]:
    """One verdict per worker shard (empty for a single-process bundle). Leaves the program restored."""
    layout = rebuilt.bundle.cluster
    if not layout or rebuilt.bundle.kind != KIND_FIT:
        return []
    verdicts = []
    for shard in layout.get("shards") or []:
        if not isinstance(shard, dict) or not shard.get("file"):
            continue
        worker = int(shard.get("worker", -1))
        try:
            data = rebuilt.bundle.shard_batch(worker)
        except BundleError as exc:
            raise ReplayError(str(exc)) from None
        program = dataclasses.replace(rebuilt.program, args=(to_tensors(data),))
        verdict = run_step(program, "eager")
        verdicts.append(
            WorkerVerdict(
                worker=worker,
                task=str(shard.get("task") or f"worker:{worker}"),
                rows=int(shard.get("rows") or 0),
                reproduced=verdict.reproduced,
                summary=verdict.describe(),
                seen_at_capture=bool(shard.get("own_data_non_finite")),
            )
        )
    rebuilt.program.restore()
    return verdicts


def describe_workers(verdicts: list[WorkerVerdict]) -> str | None:
    """One sentence for the origin's message: whose data made it."""
    if not verdicts:
        return None
    bad = [v.task for v in verdicts if v.reproduced]
    total = len(verdicts)
    if not bad:
        return (
            f"none of the {total} workers' shards goes non-finite alone: the NaN needs the whole global batch "
            "(e.g. a batch statistic)"
        )
    whose = " and ".join(bad)
    return f"{whose}'s data produced it (of {total} workers; each shard replayed alone)"
