"""The Keras 2 line (``tf_keras``, what ``tf.keras`` is under ``TF_USE_LEGACY_KERAS=1``): what differs from Keras 3.

NanGuard, guard_step, locate and replay are written against Keras 3; this module holds the tf_keras specifics so
that the shared code only asks small questions ("which line is this object from?", "what are this optimizer's
variables?") and hands the tf_keras work here:

- which line an object belongs to, told from the object itself: tf_keras is looked up in ``sys.modules`` only, so
  it is never imported where the program did not import it (an object can only be a tf_keras object when it is);
- the gate hooks for tf_keras optimizers: they update through ``apply_gradients(grads_and_vars)`` (there is no
  Keras 3 ``apply``) and scale losses with ``get_scaled_loss``; both the current optimizers
  (``tf_keras.optimizers.Optimizer``, ``LossScaleOptimizerV3``) and the legacy ones (``optimizers.legacy``,
  OptimizerV2) are gated by wrapping that one method;
- `LegacyGuardedTrainFunction`: NanGuard's guarded ``train_function`` built like tf_keras's own
  ``make_train_function`` (``strategy.run(train_step)``, the ``_train_counter`` increment, tf_keras's log
  reduction);
- saving and loading ``model.keras`` with tf_keras's own saving (``safe_mode=True``: no lambda bytecode);
- the replay process: a tf_keras bundle's program must see ``tf.keras`` as tf_keras, so the variable is set before
  ``tf.keras`` is first touched (TensorFlow resolves it lazily, on first attribute access).
"""

from __future__ import annotations

import os
import sys
from typing import Any

KERAS3 = "keras"
TF_KERAS = "tf_keras"
ENV = "TF_USE_LEGACY_KERAS"

ACCEPTS = ("NanGuard guards a compiled Keras model: a keras.Model (Keras 3) or a tf_keras.Model (tf.keras under "
           "TF_USE_LEGACY_KERAS=1)")


class MixedKerasError(TypeError):
    """Objects of the two Keras lines (Keras 3 and tf_keras) handed to one guard, or an object of neither."""


# ---- which line ---------------------------------------------------------------------------------------------


def _tf_keras() -> Any:
    return sys.modules.get("tf_keras")


def _keras3() -> Any:
    module = sys.modules.get("keras")
    version = str(getattr(module, "__version__", ""))
    return module if version.startswith("3.") else None


def _tf_keras_optimizer_types(tf_keras: Any) -> tuple[type, ...]:
    types: list[type] = []
    for holder, name in ((getattr(tf_keras, "optimizers", None), "Optimizer"),
                         (getattr(getattr(tf_keras, "optimizers", None), "legacy", None), "Optimizer")):
        value = getattr(holder, name, None)
        if isinstance(value, type):
            types.append(value)
    lso = getattr(getattr(tf_keras, "mixed_precision", None), "LossScaleOptimizer", None)
    if isinstance(lso, type):
        types.append(lso)
    return tuple(types)


def keras_line(obj: Any) -> str | None:
    """``"keras"`` (Keras 3), ``"tf_keras"`` or None for a model, layer or optimizer of neither."""
    keras = _keras3()
    if keras is not None and isinstance(obj, (keras.layers.Layer, keras.optimizers.Optimizer)):
        return KERAS3
    tf_keras = _tf_keras()
    if tf_keras is not None and (
        isinstance(obj, tf_keras.layers.Layer) or isinstance(obj, _tf_keras_optimizer_types(tf_keras))
    ):
        return TF_KERAS
    return None


def is_tf_keras(obj: Any) -> bool:
    return keras_line(obj) == TF_KERAS


def is_model(obj: Any) -> bool:
    """A Keras model of either line."""
    keras = _keras3()
    if keras is not None and isinstance(obj, keras.Model):
        return True
    tf_keras = _tf_keras()
    return tf_keras is not None and isinstance(obj, tf_keras.Model)


def is_optimizer(obj: Any) -> bool:
    """A Keras optimizer of either line (tf_keras: current, legacy and its LossScaleOptimizers)."""
    keras = _keras3()
    if keras is not None and isinstance(obj, keras.optimizers.Optimizer):
        return True
    tf_keras = _tf_keras()
    return tf_keras is not None and isinstance(obj, _tf_keras_optimizer_types(tf_keras))


def is_loss_scale_optimizer(optimizer: Any) -> bool:
    """A tf_keras LossScaleOptimizer (either version; Keras 3's is asked in gate.py)."""
    tf_keras = _tf_keras()
    lso = getattr(getattr(tf_keras, "mixed_precision", None), "LossScaleOptimizer", None)
    return isinstance(lso, type) and isinstance(optimizer, lso)


def _describe(obj: Any) -> str:
    kind = type(obj)
    return f"{kind.__module__.split('.')[0]}.{kind.__qualname__}"


def check_model(model: Any, who: str = "NanGuard") -> str:
    """The model's Keras line; a one-line MixedKerasError for an object of neither line (a raw tf.Module) or a
    model whose optimizers come from the other line."""
    line = keras_line(model) if is_model(model) else None
    if line is None:
        raise MixedKerasError(f"{ACCEPTS.replace('NanGuard', who)}; got {_describe(model)}")
    return line


def check_same_line(objects: list[Any], who: str) -> str | None:
    """The one Keras line of `objects` (models and optimizers; None when none is Keras); a one-line
    MixedKerasError when they mix Keras 3 and tf_keras objects."""
    lines: dict[str, Any] = {}
    for obj in objects:
        line = keras_line(obj)
        if line is not None:
            lines.setdefault(line, obj)
    if len(lines) > 1:
        raise MixedKerasError(
            f"{who} got objects of both Keras lines: {_describe(lines[KERAS3])} (Keras 3) and "
            f"{_describe(lines[TF_KERAS])} (tf_keras); build the model and optimizer with one of them (under "
            "TF_USE_LEGACY_KERAS=1 use tf.keras / tf_keras for both, else keras)"
        )
    return next(iter(lines), None)


def manifest_entry(objects: list[Any]) -> dict[str, str]:
    """``{"keras_line": "tf_keras"}`` for a bundle of tf_keras objects (a replay must use the same line), else
    nothing: a bundle without the entry is a Keras 3 one, as every bundle written before it."""
    return {"keras_line": TF_KERAS} if any(is_tf_keras(obj) for obj in objects) else {}


# ---- small differences --------------------------------------------------------------------------------------


def optimizer_variables(optimizer: Any) -> list[Any]:
    """An optimizer's variables: a list (Keras 3), a CallableList (tf_keras) or a method (tf_keras legacy)."""
    variables = optimizer.variables
    if callable(variables) and not isinstance(variables, (list, tuple)):
        variables = variables()
    variables = list(variables)
    if is_loss_scale_optimizer(optimizer):
        # tf_keras's LossScaleOptimizer lists only its inner optimizer's variables; the loss scale and its growth
        # counter decide whether the replayed step overflows, so they belong to the step's state too.
        state = getattr(optimizer, "_loss_scale", None)
        for variable in (getattr(state, "_weights", None) or {}).values():
            if all(variable is not seen for seen in variables):
                variables.append(variable)
    return variables


def metrics_variables(model: Any) -> list[Any]:
    """Keras 3's ``model.metrics_variables``; tf_keras has none, its metrics hold their own variables."""
    found = getattr(model, "metrics_variables", None)
    if found is not None:
        return list(found)
    return [v for metric in getattr(model, "metrics", []) for v in metric.variables]


def optimizer_built(optimizer: Any) -> bool:
    if hasattr(optimizer, "built"):  # Keras 3
        return bool(optimizer.built)
    if hasattr(optimizer, "_built"):  # tf_keras
        return bool(optimizer._built)
    return bool(getattr(optimizer, "_weights", None))  # tf_keras legacy: slots made on first apply


def build_optimizer(optimizer: Any, trainable: list[Any]) -> None:
    """Make a tf_keras optimizer's slot variables over `trainable`, in the name scope ``apply_gradients`` uses."""
    import tensorflow as tf

    if optimizer_built(optimizer) or not trainable:
        return
    with tf.name_scope(getattr(optimizer, "name", None) or "optimizer"), tf.init_scope():
        if hasattr(optimizer, "_create_all_weights"):  # legacy OptimizerV2
            optimizer._create_all_weights(trainable)
        else:
            optimizer.build(trainable)


# ---- the gate for tf_keras optimizers -----------------------------------------------------------------------


class _VariablesView:
    """What the gate reads of an optimizer for its backups: its variables now (as a list, for either tf_keras
    optimizer kind)."""

    def __init__(self, optimizer: Any) -> None:
        self._optimizer = optimizer

    @property
    def variables(self) -> list[Any]:
        return optimizer_variables(self._optimizer)


def _gated_apply_gradients(optimizer: Any, original: Any) -> Any:
    from pyadapter.capture import gate

    loss_scaling = is_loss_scale_optimizer(optimizer)

    def apply_gradients(grads_and_vars: Any, *args: Any, **kwargs: Any) -> Any:
        scope = gate._active
        if scope is None:
            return original(grads_and_vars, *args, **kwargs)
        pairs = list(grads_and_vars)
        if not pairs:
            return original(pairs, *args, **kwargs)
        grads = [g for g, _ in pairs]
        variables = [v for _, v in pairs]
        # Slots are made outside the cond (as apply_gradients does in init_scope) so they exist once, whichever
        # branch runs.
        build_optimizer(getattr(optimizer, "inner_optimizer", optimizer), variables)
        if loss_scaling:
            build_optimizer(optimizer, variables)

        def apply(grads_: Any, variables_: Any) -> Any:
            original(list(zip(grads_, variables_, strict=True)), *args, **kwargs)

        record = scope.record()
        gated = gate._gate(_VariablesView(optimizer), apply, grads, variables, variables, list(record.losses),
                           scope.config, check_grads=not loss_scaling, keep_backup=scope.several_optimizers)
        record.gates.append(gated)
        return optimizer.iterations

    return apply_gradients


def patch_optimizer(optimizer: Any, patch: Any) -> None:
    """The gate's hooks on a tf_keras optimizer, through gate.hooks's `patch(obj, name, make)`."""
    from pyadapter.capture import gate

    patch(optimizer, "apply_gradients", lambda original: _gated_apply_gradients(optimizer, original))
    patch(optimizer, "get_scaled_loss", lambda original: gate._recording(original, takes_loss_argument=True))


# ---- NanGuard's train function for tf_keras -------------------------------------------------------------------


def _reduce_logs(model: Any, outputs: Any, strategy: Any) -> Any:
    try:
        from tf_keras.src.engine.training import reduce_per_replica
    except ImportError:  # pragma: no cover - tf_keras internals moved
        import tensorflow as tf

        return tf.nest.map_structure(lambda v: strategy.experimental_local_results(v)[0], outputs)
    return reduce_per_replica(outputs, strategy, reduction=getattr(model, "distribute_reduction_method", "auto"))


def steps_per_execution(model: Any) -> int:
    value = getattr(model, "_steps_per_execution", None)
    return 1 if value is None else max(1, int(value.numpy()))


def make_one_step(function: Any, model: Any) -> Any:
    """The inner guarded step of `LegacyGuardedTrainFunction` (``guard.GuardedTrainFunction._make_one_step``'s
    tf_keras twin): tf_keras's ``run_step`` (train_step, then ``_train_counter += 1``) under the gate."""
    import tensorflow as tf

    from pyadapter.capture import gate

    config, strategy, restore_metrics = function.config, function.strategy, function.restore_metrics

    def replica_step(data: Any) -> Any:
        model_ = function.model_ref()
        snapshot_values = []
        if restore_metrics:
            snapshot_values = [(v, tf.identity(v)) for v in metrics_variables(model_)]
        logs = model_.train_step(data)
        if restore_metrics and snapshot_values and gate._active is not None:
            ok = gate.local_ok(gate._active)

            def restore() -> Any:
                for variable, value in snapshot_values:
                    variable.assign(value)
                return tf.constant(False)

            tf.cond(ok, lambda: tf.constant(True), restore)
        counter = getattr(model_, "_train_counter", None)
        if counter is not None:
            with tf.control_dependencies([t for t in tf.nest.flatten(logs) if isinstance(t, tf.Tensor)][:1]):
                counter.assign_add(1)
        return logs

    def one_step_on_data(data: Any) -> Any:
        from pyadapter.capture.guard import model_optimizers

        model_ = function.model_ref()
        with gate.hooks(model_optimizers(model_), [model_], config) as scope:
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

    return tf_keras.models.load_model(str(path), custom_objects=custom_objects, compile=compile, safe_mode=True)


def wrap_loss_scale(model: Any) -> bool:
    """Put tf_keras's LossScaleOptimizer (default settings) back around a loaded model's bare optimizer; whether
    it was needed."""
    if is_loss_scale_optimizer(model.optimizer):
        return False
    import tf_keras

    model.optimizer = tf_keras.mixed_precision.LossScaleOptimizer(model.optimizer)
    return True


# ---- the replay process -------------------------------------------------------------------------------------


def use_line_of_bundle(line: str | None, where: str) -> None:
    """Make this process's ``tf.keras`` the bundle's Keras line before the program touches it.

    A tf_keras bundle sets ``TF_USE_LEGACY_KERAS=1`` (inherited by the processes a replay starts). When
    ``tf.keras`` was already resolved to the other line in this process, nothing can switch it: one line says so.
    """
    if line != TF_KERAS:
        return
    import importlib.util

    if importlib.util.find_spec("tf_keras") is None:  # found, not imported: this runs before TensorFlow starts
        raise MixedKerasError(
            f"{where}: the bundle was captured with tf_keras (Keras 2, TF_USE_LEGACY_KERAS=1), which is not "
            "installed here; pip install tf_keras"
        )
    os.environ[ENV] = "1"
    tf = sys.modules.get("tensorflow")
    loader = getattr(tf, "keras", None) if tf is not None else None
    resolved = getattr(loader, "_tfll_keras_version", None) if getattr(loader, "_tfll_initialized", False) else None
    if resolved is not None and resolved != "tf_keras":
        raise MixedKerasError(
            f"{where}: the bundle was captured with tf_keras, but tf.keras in this process is already Keras 3; "
            "replay it in a new process started with TF_USE_LEGACY_KERAS=1"
        )
