"""Multi-worker training (MultiWorkerMirroredStrategy): who this process is in the cluster, how the workers agree
outside the compiled step, and the per-worker shards of a failing step's batch.

Inside the step the gate's all-reduce makes every worker see the same verdict (``gate.py``), so every worker's
NanGuard reaches its failing-step code at the same step. There the workers talk through `WorkerChannel.sum`, a
small all-reduce: the chief's run name at the start, then "my shard is written" before the chief assembles the
bundle, then the bundle's final name. Every worker calls it the same number of times in the same order.

A shard is the worker's own replicas' part of the global batch, written by the worker to a staging folder next to
the bundle (``.<bundle>.shards/worker-<i>.npz``) through ``tf.io.gfile``, so it works on a shared local disk
and on gs:// alike; the chief reads them back, so the capture folder must be one all workers can reach.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

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

    def one_hot_sum(self, index: int, count: int, value: float) -> np.ndarray:
        """Every worker puts `value` at its own `index` of a vector of `count`; returns the whole vector."""
        vector = np.zeros(count, np.float64)
        vector[index] = value
        return self.sum(vector)


# ---- shards ---------------------------------------------------------------------------------------------------


def write_shard(path: str, arrays: dict[str, np.ndarray]) -> None:
    """Writes one worker's shard (flat arrays, as `structure.describe` made them) with tf.io.gfile."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    tf.io.gfile.makedirs(path.rsplit("/", 1)[0])
    if tf.io.gfile.exists(path):  # left by an earlier attempt; some filesystems (ram://) append on "wb"
        tf.io.gfile.remove(path)
    with tf.io.gfile.GFile(path, "wb") as handle:
        handle.write(buffer.getvalue())


def read_shard(path: str) -> bytes:
    with tf.io.gfile.GFile(path, "rb") as handle:
        return handle.read()


def load_shard(data: bytes) -> dict[str, np.ndarray]:
    """A shard's arrays, read without pickle."""
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        return {key: archive[key] for key in archive.files}


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


def remove_tree(path: str) -> None:
    try:
        if tf.io.gfile.exists(path):
            tf.io.gfile.rmtree(path)
    except tf.errors.OpError:
        pass  # a leftover staging folder is harmless; the bundle is complete without it

