"""The Keras 2 line's own work (``tf_keras``, what ``tf.keras`` is under ``TF_USE_LEGACY_KERAS=1``).

NanGuard, guard_step, locate and replay are written against Keras 3. Which line an object is from, and the small
questions asked of either, are answered in `keras_lines`; the gate hooks tf_keras optimizers itself (their
``apply_gradients`` / ``get_scaled_loss``). What is left is tf_keras's own:

- `make_one_step`: NanGuard's guarded ``train_function`` step built like tf_keras's own ``make_train_function``
  (``strategy.run(train_step)``, the ``_train_counter`` increment, tf_keras's log reduction);
- loading ``model.keras`` with tf_keras's own saving (``safe_mode=True``: no lambda bytecode), and putting a lost
  LossScaleOptimizer back around a loaded model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyadapter.capture import gate
from pyadapter.capture.keras_lines import is_loss_scale_optimizer, metrics_variables

# ---- NanGuard's train function for tf_keras -------------------------------------------------------------------


def _reduce_logs(model: Any, outputs: Any, strategy: Any) -> Any:
    try:
        from tf_keras.src.engine.training import reduce_per_replica
    except ImportError:  # pragma: no cover - tf_keras internals moved
        import tensorflow as tf

        return tf.nest.map_structure(lambda v: strategy.experimental_local_results(v)[0], outputs)
    return reduce_per_replica(
        outputs, strategy, reduction=getattr(model, "distribute_reduction_method", "auto")
    )


def make_one_step(function: Any, model: Any, optimizers_of: Callable[[Any], list[Any]]) -> Any:
    """The inner guarded step of `LegacyGuardedTrainFunction` (``guard.GuardedTrainFunction._make_one_step``'s
    tf_keras twin): tf_keras's ``run_step`` (train_step, then ``_train_counter += 1``) under the gate."""
    import tensorflow as tf

    config, strategy, restore_metrics = function.config, function.strategy, function.restore_metrics

    def replica_step(data: Any) -> Any:
        model_ = function.model_ref()
        logs = gate.train_step_keeping_metrics(
            model_.train_step, data, metrics_variables(model_) if restore_metrics else []
        )
        counter = getattr(model_, "_train_counter", None)
        if counter is not None:
            with tf.control_dependencies([t for t in tf.nest.flatten(logs) if isinstance(t, tf.Tensor)][:1]):
                counter.assign_add(1)
        return logs

    def one_step_on_data(data: Any) -> Any:
        model_ = function.model_ref()
        with gate.hooks(optimizers_of(model_), [model_], config) as scope:
            outputs = strategy.run(replica_step, args=(data,))
            verdict, meta = gate.combine(scope)
        function.meta = meta
        return _reduce_logs(model_, outputs, strategy), verdict

    if not model.run_eagerly:
        one_step_on_data = tf.function(one_step_on_data, reduce_retracing=True, jit_compile=model.jit_compile)
    return one_step_on_data


# ---- model.keras ----------------------------------------------------------------------------------------------


def load_model(path: Any, custom_objects: dict[str, Any] | None, compile: bool) -> Any:
    """tf_keras's own ``.keras`` loader, safe mode (a Lambda's bytecode is refused: the step is re-entered)."""
    import tf_keras

    return tf_keras.models.load_model(
        str(path), custom_objects=custom_objects, compile=compile, safe_mode=True
    )


def wrap_loss_scale(model: Any) -> bool:
    """Put tf_keras's LossScaleOptimizer (default settings) back around a loaded model's bare optimizer; whether
    it was needed."""
    if is_loss_scale_optimizer(model.optimizer):
        return False
    import tf_keras

    model.optimizer = tf_keras.mixed_precision.LossScaleOptimizer(model.optimizer)
    return True
