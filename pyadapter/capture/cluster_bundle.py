"""One bundle for a failing step under MultiWorkerMirroredStrategy: every worker stages its shard of the batch,
the chief assembles them into one bundle (the protocol is in `pyadapter.capture.cluster`).

Every worker runs the same collectives in the same order whatever fails locally, so no worker waits for one that
gave up. NanGuard passes in how to read its batch back and how to write a bundle, so this module knows shards and
collectives, not Keras.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from pyadapter.capture import cluster, storage, structure


@dataclass
class ChiefBatch:
    """What the chief writes: the global batch and what the bundle says about its shards."""

    data: Any
    seed_states: dict[str, np.ndarray]
    note: str  # the bundle's batch note
    files: dict[str, bytes]  # the shards, as bundle files
    manifest: dict[str, Any]  # the manifest's "cluster" entry


def write_cluster_bundle(
    info: cluster.ClusterInfo,
    strategy: tf.distribute.Strategy,
    capture_dir: Path | str,
    name: str,
    local_ok: bool,
    read_batch: Callable[[], tuple[Any, dict[str, np.ndarray]]],
    write: Callable[[ChiefBatch], Path | str],
) -> Path | str:
    """Returns the bundle's path (the same on every worker) or raises with the reason. ``local_ok``: this worker's
    own data was finite; ``read_batch``: this worker's part of the batch and the seed states; ``write``: the
    chief writes the bundle."""
    channel = cluster.WorkerChannel(strategy)
    staging = storage.join(str(capture_dir), f".{name}.shards")
    staged, local_error = 1.0, None
    described: Any = None
    seed_states: dict[str, np.ndarray] = {}
    try:
        data, seed_states = read_batch()
        arrays: dict[str, np.ndarray] = {}
        described = structure.describe(data, arrays)
        cluster.stage_shard(staging, info.worker_index, arrays)
    except Exception as exc:  # noqa: BLE001 - the other workers must still hear from this one
        staged, local_error = 0.0, f"{type(exc).__name__}: {exc}".splitlines()[0]
    n = info.num_workers
    mine = np.zeros(2 * n)
    mine[info.worker_index] = staged
    mine[n + info.worker_index] = 0.0 if local_ok else 1.0
    agreed = channel.sum(mine)
    staged_by, bad_by = agreed[:n] > 0.5, agreed[n:] > 0.5
    suffix, chief_error = -1.0, None
    if info.is_chief:
        try:
            if described is None:
                raise RuntimeError(f"the chief's own shard failed: {local_error}")
            path = write(_assemble(info, staging, staged_by, bad_by, described, seed_states))
            final = str(path).rstrip("/").rsplit("/", 1)[-1]
            suffix = 0.0 if final == name else float(final.rsplit("-", 1)[1])
        except Exception as exc:  # noqa: BLE001 - said below, on every worker
            chief_error = f"{type(exc).__name__}: {exc}".splitlines()[0]
        finally:
            storage.remove_tree(staging)
    suffix = float(channel.sum(np.array([suffix if info.is_chief else 0.0]))[0])
    if suffix < 0:
        raise RuntimeError(chief_error or f"the chief ({info.tasks[0]}) could not write the bundle")
    if local_error is not None:
        raise RuntimeError(f"this worker's shard could not be staged ({local_error}); the bundle lacks it")
    final_name = name if suffix == 0 else f"{name}-{int(suffix)}"
    if isinstance(capture_dir, Path):
        return capture_dir / final_name
    return storage.join(capture_dir, final_name)


def _assemble(
    info: cluster.ClusterInfo,
    staging: str,
    staged_by: np.ndarray,
    bad_by: np.ndarray,
    described: Any,
    seed_states: dict[str, np.ndarray],
) -> ChiefBatch:
    """The chief reads the staged shards back and joins them into the global batch, in worker order."""
    shards, files, layout = [], {}, []
    for worker in range(info.num_workers):
        entry: dict[str, Any] = {
            "worker": worker,
            "task": info.tasks[worker],
            "address": info.addresses[worker],
            "own_data_non_finite": bool(bad_by[worker]),
        }
        if staged_by[worker]:
            raw, arrays = cluster.read_staged_shard(staging, worker)
            shards.append(arrays)
            files[cluster.shard_file(worker)] = raw
            entry.update(file=cluster.shard_file(worker), rows=cluster.rows(arrays))
        else:
            entry.update(file=None, rows=0, missing="the worker could not stage its shard")
        layout.append(entry)
    if not shards:
        raise RuntimeError("no worker could stage its shard of the batch")
    data = structure.rebuild(described, cluster.join_shards(shards), any_rows=True)
    manifest = {
        **info.to_json(),
        "written_by": info.tasks[info.worker_index],
        "shards": layout,
        "non_finite_workers": [info.tasks[w] for w in range(info.num_workers) if bad_by[w]],
    }
    note = f"global batch: the {len(shards)} workers' shards ({cluster.SHARDS_DIR}/) concatenated in worker order"
    return ChiefBatch(data, seed_states, note, files, manifest)
