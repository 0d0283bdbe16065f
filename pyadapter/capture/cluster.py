"""Multi-worker training (MultiWorkerMirroredStrategy): who this process is in the cluster, how the workers agree
outside the compiled step, and the per-worker shards of a failing step's batch.

Inside the step the gate's all-reduce makes every worker see the same verdict (``gate.py``), so every worker's
NanGuard reaches its failing-step code at the same step. There the workers talk through `WorkerChannel.sum`, a
small all-reduce: the chief's run name at the start, then "my shard is written" before the chief assembles the
bundle, then the bundle's final name. Every worker calls it the same number of times in the same order.

A shard is the worker's own replicas' part of the global batch, written by the worker to a staging folder next to
the bundle (``.<bundle>.shards/worker-<i>.npz``) through ``storage`` (tf.io.gfile), so it works on a shared local
disk and on gs:// alike; the chief reads them back, so the capture folder must be one all workers can reach.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from pyadapter.capture import storage, structure

SHARDS_DIR = "shards"


def shard_file(worker: int) -> str:
    """A worker's shard inside a bundle (a relative bundle path)."""
    return f"{SHARDS_DIR}/worker-{worker}.npz"


@dataclass(frozen=True)
class ClusterInfo:
    """This process's place in a multi-worker cluster (from the strategy's cluster resolver / TF_CONFIG)."""

    task_type: str
    task_id: int
    worker_index: int  # 0 for the chief (or worker 0 when there is no chief), then the workers in order
    num_workers: int
    tasks: tuple[str, ...]  # "chief:0", "worker:0", ... by worker index
    addresses: tuple[str, ...]  # by worker index
    local_replicas: int

    @property
    def is_chief(self) -> bool:
        return self.worker_index == 0

    @property
    def task(self) -> str:
        """How TF_CONFIG names this task, e.g. "worker:1"."""
        return f"{self.task_type}:{self.task_id}"

    def to_json(self) -> dict[str, Any]:
        return {
            "num_workers": self.num_workers,
            "workers": [
                {"index": i, "task": task, "address": address}
                for i, (task, address) in enumerate(zip(self.tasks, self.addresses, strict=True))
            ],
            "local_replicas": self.local_replicas,
        }


def cluster_of(strategy: tf.distribute.Strategy) -> ClusterInfo | None:
    """The cluster this process trains in, or None when it trains alone (one worker)."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return None
    resolver = strategy.cluster_resolver
    spec = resolver.cluster_spec().as_dict() if resolver is not None else {}
    tasks: list[tuple[str, int, str]] = []
    for job in ("chief", "worker"):
        addresses = spec.get(job) or []
        if isinstance(addresses, dict):  # sparse job: {index: address}
            items = sorted(addresses.items())
        else:
            items = list(enumerate(addresses))
        tasks += [(job, int(index), str(address)) for index, address in items]
    if len(tasks) < 2 or resolver is None or resolver.task_type not in ("chief", "worker"):
        return None
    me = (resolver.task_type, int(resolver.task_id))
    index = next(i for i, (job, task_id, _) in enumerate(tasks) if (job, task_id) == me)
    return ClusterInfo(
        task_type=me[0],
        task_id=me[1],
        worker_index=index,
        num_workers=len(tasks),
        tasks=tuple(f"{job}:{task_id}" for job, task_id, _ in tasks),
        addresses=tuple(address for _, _, address in tasks),
        local_replicas=len(strategy.extended.worker_devices),
    )


class WorkerChannel:
    """Sums a small float64 vector over the workers (each worker's value counted once, whatever its number of
    local replicas). A collective: every worker must call `sum` with the same length, in the same order."""

    def __init__(self, strategy: tf.distribute.Strategy) -> None:
        self.strategy = strategy

    def sum(self, values: np.ndarray) -> np.ndarray:
        values = np.asarray(values, dtype=np.float64)
        first: list[int] = []

        def per_replica(context: Any) -> Any:
            # Only this worker's first local replica contributes: the sum counts each worker once.
            first.append(context.replica_id_in_sync_group)
            return tf.constant(values if len(first) == 1 else np.zeros_like(values))

        distributed = self.strategy.experimental_distribute_values_from_function(per_replica)
        return np.asarray(self.strategy.reduce(tf.distribute.ReduceOp.SUM, distributed, axis=None).numpy())


# ---- shards ---------------------------------------------------------------------------------------------------


def staged_shard(staging: str, worker: int) -> str:
    """Where `worker` stages its shard (a file in the staging folder next to the bundle)."""
    return storage.join(staging, f"worker-{worker}.npz")


def stage_shard(staging: str, worker: int, arrays: dict[str, np.ndarray]) -> None:
    """Writes this worker's shard (flat arrays, as `structure.describe` made them) to the staging folder."""
    buffer = io.BytesIO()
    structure.write_npz(buffer, arrays)
    storage.write_file(staged_shard(staging, worker), buffer.getvalue())


def read_staged_shard(staging: str, worker: int) -> tuple[bytes, dict[str, np.ndarray]]:
    """(the shard file's bytes, its arrays read without pickle)."""
    data = storage.read_file(staged_shard(staging, worker))
    return data, structure.read_npz(io.BytesIO(data), f"worker {worker}'s shard")


def join_shards(shards: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The global batch's flat arrays: the workers' shards concatenated in worker order (scalars from the first)."""
    joined: dict[str, np.ndarray] = {}
    for key in shards[0]:
        parts = [shard[key] for shard in shards if key in shard]
        joined[key] = parts[0] if parts[0].ndim == 0 else np.concatenate(parts, axis=0)
    return joined


def rows(arrays: dict[str, np.ndarray]) -> int:
    """Batch rows in a shard (the leading dimension of its first non-scalar array)."""
    for value in arrays.values():
        if value.ndim:
            return int(value.shape[0])
    return 0
