"""A scoped fix that lets Keras 3 ``model.fit`` start under MultiWorkerMirroredStrategy.

Keras 3 (3.5 through 3.15 at least, keras-team/keras#20585, tensorflow/tensorflow#72388) builds the model from
the first batch before training by ``strategy.reduce("MEAN", batch)`` on the whole nested ``(x, y)`` batch;
MultiWorkerMirroredStrategy's reduce takes one value, not a structure, so every multi-worker ``fit`` raises
"Attempt to convert a value (PerReplica...) ... to a Tensor" before its first step, guarded or not. NanGuard
exists to run where training runs, so it installs this fix when it is created: the same reduction, leaf by leaf.
Only that case changes; with any other strategy the original method runs untouched.

(Keras's own per-step log reduction has the matching bug, ``reduce("MEAN", scalar, axis=0)``; NanGuard's
guarded train function reduces its logs itself, see ``guard.py``.)
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from pyadapter.capture.cluster import cluster_of

_MARK = "_nanlens_multiworker_fix"


def install_multiworker_fit_fix() -> None:
    """Idempotent; a no-op when Keras has changed so that the fix does not apply."""
    try:
        from keras.src.backend.tensorflow.trainer import TensorFlowTrainer
    except ImportError:  # pragma: no cover - another backend or a moved module
        return
    original = getattr(TensorFlowTrainer, "_maybe_symbolic_build", None)
    if original is None or getattr(original, _MARK, False):
        return

    def _maybe_symbolic_build(self: Any, iterator: Any = None, data_batch: Any = None) -> Any:
        strategy = getattr(self, "_distribute_strategy", None)
        if iterator is None or strategy is None or cluster_of(strategy) is None:
            return original(self, iterator=iterator, data_batch=data_batch)
        for _, _, batches in iterator:
            batch = next(batches)
            data_batch = tf.nest.map_structure(
                lambda value: (
                    strategy.reduce("MEAN", value, axis=None)
                    if isinstance(value, tf.distribute.DistributedValues)
                    else value
                ),
                batch,
            )
            break
        return original(self, iterator=None, data_batch=data_batch)

    setattr(_maybe_symbolic_build, _MARK, True)
    _maybe_symbolic_build.__wrapped__ = original  # type: ignore[attr-defined]
    TensorFlowTrainer._maybe_symbolic_build = _maybe_symbolic_build
