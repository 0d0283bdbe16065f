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


# What a tf_keras model.keras may name: tf_keras's own objects of these families (``keras.layers``, and the engine's
# ``tf_keras.src.engine.functional`` for Functional and Sequential), and the user's own objects, found by name among
# the program's custom objects or tf_keras's registry (which only code already imported fills).
_FAMILIES = frozenset(
    {
        "activations",
        "constraints",
        "engine",
        "initializers",
        "layers",
        "losses",
        "metrics",
        "mixed_precision",
        "models",
        "optimizers",
        "regularizers",
    }
)
_BUILTIN_FAMILIES = (
    "activations",
    "constraints",
    "initializers",
    "losses",
    "metrics",
    "optimizers",
    "regularizers",
)
# Layers whose config names code to run: a Lambda's function (bytecode, or any function of any loaded module by
# name), a SavedModel reloaded (its graph runs when loaded), a TF Hub module.
_CODE_LAYERS = frozenset({"Lambda", "ReloadedLayer", "TFSMLayer", "KerasLayer"})
_DATA_CLASSES = frozenset({"__tensor__", "__numpy__", "__bytes__"})  # values, built without any lookup
_SPECS = frozenset({"TensorSpec", "RaggedTensorSpec", "SparseTensorSpec"})


def foreign_object(config: Any, custom_objects: dict[str, Any] | None) -> str | None:
    """The first object `config` (a model.keras's config.json) names that is neither tf_keras's own nor the
    user's, as "module.Name", or None. tf_keras's loader in "safe mode" still imports any module a config names and
    calls its class's ``from_config``: a bundle's model.keras naming ``tf_keras.src.export.export_lib.ReloadedLayer``
    with a SavedModel path ran that SavedModel's graph (it wrote a file) while the replay loaded the model.

    Judged as tf_keras resolves them (`serialization_lib._retrieve_class_or_fn`): a class by its
    ``registered_name`` among the user's objects (its ``class_name`` there counts for nothing: with a null
    registered name tf_keras imports the module), else by ``module`` and ``class_name``, which must be a plain name
    of one of tf_keras's modelling families; a function by its name; a type spec by ``spec_name``."""
    import tf_keras

    def own(name: Any) -> bool:
        return (
            isinstance(name, str)
            and bool(name)
            and (tf_keras.saving.get_registered_object(name, custom_objects=custom_objects) is not None)
        )

    def keras_module(module: Any) -> bool:
        if not isinstance(module, str):
            return False
        parts = module.split(".")
        if parts[0] not in ("keras", "tf_keras"):
            return False
        if parts[1:2] == ["src"]:
            return len(parts) > 2 and parts[2] in _FAMILIES
        return len(parts) == 1 or parts[1] in _FAMILIES

    stack = [config]
    while stack:
        value = stack.pop()
        if isinstance(value, list):
            stack.extend(value)
            continue
        if not isinstance(value, dict):
            continue
        stack.extend(value.values())
        if "class_name" not in value:
            continue
        module, class_name = value.get("module"), value.get("class_name")
        registered = value.get("registered_name", class_name)
        shown = f"{module}.{class_name}"
        if class_name in _DATA_CLASSES:
            continue
        if class_name == "__typespec__":
            spec = value.get("spec_name")
            if (
                spec in _SPECS
                and registered is None
                and isinstance(module, str)
                and module.startswith("tensorflow.")
            ):
                continue
            return f"{module}.{spec}"
        if class_name == "function":
            name = value.get("config")
            if own(name):
                continue
            if (
                isinstance(name, str)
                and name.isidentifier()
                and registered in (None, "function", name)
                and module in ("builtins", None, *(f"keras.{f}" for f in _BUILTIN_FAMILIES))
                and any(getattr(getattr(tf_keras, f), name, None) is not None for f in _BUILTIN_FAMILIES)
            ):
                continue
            return f"{module}.{name}"
        if not isinstance(class_name, str) or not class_name.isidentifier() or class_name.startswith("__"):
            return shown  # "core.Lambda" (a dotted name reaches past the family), "__lambda__" (bytecode)
        if own(registered):
            continue
        if class_name in _CODE_LAYERS or registered in _CODE_LAYERS:
            return shown
        if module is None or keras_module(module):
            continue
        return shown
    return None


def load_model(path: Any, custom_objects: dict[str, Any] | None, compile: bool) -> Any:
    """tf_keras's own ``.keras`` loader, safe mode (a Lambda's bytecode is refused: the step is re-entered), after
    `foreign_object` found nothing in its config that is neither tf_keras's nor the program's own."""
    import tf_keras

    from pyadapter.capture.model_archive import read_config

    foreign = foreign_object(read_config(path), custom_objects)
    if foreign is not None:
        raise ValueError(
            f"it names {foreign}, which is neither tf_keras's own nor defined by the program; "
            "a bundle's model is loaded only from those"
        )
    from tf_keras.src.saving.serialization_lib import SafeModeScope

    # The scope, not only the argument: a program that calls enable_unsafe_deserialization() (to load its own Lambda
    # models) turns safe mode off globally, and the global wins over the argument.
    with SafeModeScope(True):
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
