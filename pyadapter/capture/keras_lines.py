"""Which Keras line an object is from, Keras 3 (``keras``) or Keras 2 (``tf_keras``, what ``tf.keras`` is under
``TF_USE_LEGACY_KERAS=1``), and the small questions the shared code asks of either: an optimizer's variables, a
model's metric variables and frozen weights, whether an optimizer is built, steps per execution.

tf_keras is looked up in ``sys.modules`` only, so it is never imported where the program did not import it (an
object can only be a tf_keras object when it is). No NaN Lens imports: the gate, the guards, the bundle reader and
replay all ask here. The tf_keras work itself (its train function, its loader) is in `legacy_keras`.
"""

from __future__ import annotations

import os
import sys
from typing import Any

KERAS3 = "keras"
TF_KERAS = "tf_keras"
ENV = "TF_USE_LEGACY_KERAS"

ACCEPTS = (
    "NanGuard guards a compiled Keras model: a keras.Model (Keras 3) or a tf_keras.Model (tf.keras under "
    "TF_USE_LEGACY_KERAS=1)"
)


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
    for holder, name in (
        (getattr(tf_keras, "optimizers", None), "Optimizer"),
        (getattr(getattr(tf_keras, "optimizers", None), "legacy", None), "Optimizer"),
    ):
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
    """An optimizer's state: its variables (a list in Keras 3, a CallableList in tf_keras, a method in tf_keras
    legacy), then the variables it updates (Keras 3, once built).

    The updated variables are usually the models' own (callers list the models' variables first and drop
    repeats), but a custom loop may train more with the same optimizer than the models it names: a second model,
    a bare ``tf.Variable`` (a learned temperature). Those are part of the step's state too: captured, restored
    around a re-run, set again in a replay (else the replay trains them from their initial values, or a rebuilt
    optimizer refuses them with "Unknown variable")."""
    variables = optimizer.variables
    if callable(variables) and not isinstance(variables, (list, tuple)):
        variables = variables()
    variables = list(variables)
    if keras_line(optimizer) == KERAS3:
        seen = {id(v) for v in variables}
        for variable in getattr(optimizer, "_trainable_variables", None) or []:
            if id(variable) not in seen:
                seen.add(id(variable))
                variables.append(variable)
    if is_loss_scale_optimizer(optimizer):
        # tf_keras's LossScaleOptimizer lists only its inner optimizer's variables; the loss scale and its growth
        # counter decide whether the replayed step overflows, so they belong to the step's state too.
        state = getattr(optimizer, "_loss_scale", None)
        for variable in (getattr(state, "_weights", None) or {}).values():
            if all(variable is not seen for seen in variables):
                variables.append(variable)
    return variables


def trained_variables(optimizer: Any) -> list[Any]:
    """The variables a built Keras 3 optimizer updates (a custom loop's bare ``tf.Variable`` weights among them,
    which no model lists); [] for tf_keras or an optimizer not built yet."""
    if keras_line(optimizer) != KERAS3:
        return []
    return list(getattr(optimizer, "_trainable_variables", None) or [])


def metrics_variables(model: Any) -> list[Any]:
    """Keras 3's ``model.metrics_variables``; tf_keras has none, its metrics hold their own variables."""
    found = getattr(model, "metrics_variables", None)
    if found is not None:
        return list(found)
    return [v for metric in getattr(model, "metrics", []) for v in metric.variables]


def model_variables(model: Any) -> list[Any]:
    """The model's variables, then its stateful RNN layers' states (``GRU(stateful=True)``), which Keras keeps out of
    ``model.variables`` (made untracked): the hidden state a step starts from is the step's state as much as the
    weights. Left out, the bundle did not hold it, and the scene, the window's rate search and both replays ran from
    whatever state the last run left (a state of 1e19 after the failing step: "no rate kept the window finite")."""
    try:
        variables = list(model.variables)
    except ValueError:
        # tf_keras raises for a model not built yet (a Sequential with no input shape, before its first batch):
        # NanGuard crashed in on_train_begin. It has no variables yet; the first step builds them.
        return []
    seen = {id(v) for v in variables}
    for state in rnn_states(model):
        if id(state) not in seen:
            seen.add(id(state))
            variables.append(state)
    return variables


def rnn_states(model: Any) -> list[Any]:
    """The state variables of the model's stateful RNN layers (Keras 3 and tf_keras), once they are made."""
    import tensorflow as tf

    layers = model._flatten_layers() if hasattr(model, "_flatten_layers") else []
    found = []
    for layer in layers:
        states = getattr(layer, "states", None) if getattr(layer, "stateful", False) is True else None
        if states is None:
            continue
        found += [s for s in tf.nest.flatten(states) if hasattr(s, "assign") and hasattr(s, "numpy")]
    return found


def frozen_weights(model: Any) -> list[Any]:
    """The weights of the model's layers that have ``trainable=False`` (a pretrained backbone or embedding table
    under a trained head), each once: no step changes them, as either line runs a frozen layer's BatchNorm in
    inference mode. Setting ``trainable`` on a layer sets it on its sublayers too. Empty for an object that is not
    a Keras layer (a tf.Module)."""
    layers = model._flatten_layers() if hasattr(model, "_flatten_layers") else []  # itself and every sublayer
    found: dict[int, Any] = {}
    for layer in layers:
        if not layer.trainable:
            found.update((id(w), w) for w in layer.weights)
    return list(found.values())


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


def steps_per_execution(model: Any) -> int:
    """Keras 3's ``model.steps_per_execution`` (an int), or tf_keras's variable of it, which under a
    MirroredStrategy is a MirroredVariable that ``int()`` refuses (the guard crashed in ``on_train_begin``)."""
    value = getattr(model, "_steps_per_execution", None) if is_tf_keras(model) else None
    if value is None:
        value = getattr(model, "steps_per_execution", None)
    if value is None:
        return 1
    if hasattr(value, "numpy"):
        value = value.numpy()
    return max(1, int(value))


# ---- the replay process -------------------------------------------------------------------------------------


def use_line_of_bundle(line: str | None, where: str) -> None:
    """Make this process's ``tf.keras`` the bundle's Keras line before the program touches it.

    A tf_keras bundle sets ``TF_USE_LEGACY_KERAS=1`` (inherited by the processes a replay starts). When
    ``tf.keras`` was already resolved to the other line in this process, nothing can switch it: one line says so.
    """
    if line != TF_KERAS:
        return
    import importlib.util

    if (
        importlib.util.find_spec("tf_keras") is None
    ):  # found, not imported: this runs before TensorFlow starts
        raise MixedKerasError(
            f"{where}: the bundle was captured with tf_keras (Keras 2, TF_USE_LEGACY_KERAS=1), which is not "
            "installed here; pip install tf_keras"
        )
    os.environ[ENV] = "1"
    tf = sys.modules.get("tensorflow")
    loader = getattr(tf, "keras", None) if tf is not None else None
    resolved = (
        getattr(loader, "_tfll_keras_version", None) if getattr(loader, "_tfll_initialized", False) else None
    )
    if resolved is not None and resolved != "tf_keras":
        raise MixedKerasError(
            f"{where}: the bundle was captured with tf_keras, but tf.keras in this process is already Keras 3; "
            "replay it in a new process started with TF_USE_LEGACY_KERAS=1"
        )
