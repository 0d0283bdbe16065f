"""Rebuild TensorFlow/Keras objects from a verified `CaptureBundle`: the model from model.keras, a custom loop's
checkpoint, the guarded step function and the random state as they were before the failing update.

The bundle reader (``pyadapter.capture.reader``) only reads data; everything here imports TensorFlow or Keras
when called (importing this module does not)::

    bundle = CaptureBundle.load(path)
    model = load_model(bundle, entry_module=module)   # compiled, optimizer state restored (Keras fit bundles)
    restore_rng(bundle, model)                        # RNG states as they were before the step
    model.train_step(to_tensors(bundle.batch()))      # the step as fit ran it (x, y[, sample_weight])

For custom loops: ``restore_checkpoint(bundle, model=..., optimizer=...)``, ``step = step_function(bundle,
module)``, ``args, kwargs = bundle.step_arguments()``, then ``step(*args, **kwargs)``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from pyadapter.capture import model_archive, rng
from pyadapter.capture.bundle_format import BundleError
from pyadapter.capture.reader import CaptureBundle
from pyadapter.dump.frames import is_user_file


def load_model(
    bundle: CaptureBundle,
    custom_objects: dict[str, Any] | None = None,
    entry_module: ModuleType | None = None,
    compile: bool = True,
    restore_values: bool = True,
) -> Any:
    """The compiled Keras model with its optimizer state, as it was before the failing update.

    A bundle's model.keras holds the architecture and compile settings; the values are in weights.npz (see
    ``pyadapter.capture.model_archive``), set into the rebuilt model and its optimizer by variable path unless
    `restore_values` is False (the caller sets them itself). An archive that holds its values (bundles written
    before, tf_keras models, models with assets) is loaded by Keras with them.

    Loaded with ``safe_mode=True`` (no lambda bytecode). Custom classes must be importable: pass `entry_module`
    (from ``pyadapter.replay.entry.import_entry_script``) to offer every class and function defined in it by name,
    and/or `custom_objects`.

    Loaded under the dtype policy the model was saved with (see `saved_dtype_policy`): a ``mixed_float16`` model
    comes back ``mixed_float16`` and compiled with the LossScaleOptimizer ``compile`` wrapped around its optimizer
    in training, even in a process whose global policy is still float32.
    """
    if bundle.model_path is None:
        reason = bundle.manifest.get("model_save_error")
        why = f": saving it failed with {reason}" if reason else f" (kind {bundle.kind})"
        raise BundleError(
            f"{bundle.path}: no model.keras in this bundle{why}; weights.npz has the raw values"
        )
    objects: dict[str, Any] = {}
    if entry_module is not None:
        for name, value in vars(entry_module).items():
            if callable(value) and getattr(value, "__module__", None) == entry_module.__name__:
                objects[name] = value
    objects.update(custom_objects or {})
    try:
        with saved_dtype_policy(bundle):
            if bundle.keras_line == "tf_keras":
                from pyadapter.capture import legacy_keras

                return legacy_keras.load_model(bundle.model_path, objects or None, compile)
            if model_archive.holds_values(bundle.model_path):
                import keras

                with model_archive.safe_mode():
                    return keras.saving.load_model(
                        bundle.model_path, custom_objects=objects or None, compile=compile, safe_mode=True
                    )
            model = model_archive.model_from_config(
                model_archive.read_config(bundle.model_path), objects or None, compile
            )
            if not getattr(model, "built", True) and restore_values:
                # Keras's whole archive fails to load into such a model; so must this, or the step would run on
                # the fresh variables its first call makes (the replay then re-enters the program instead).
                raise ValueError(
                    "the model comes back unbuilt from its config: the captured values have no place"
                )
    except Exception as error:  # Keras raises many kinds; the caller needs one line
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise BundleError(
            f"{bundle.path}: model.keras could not be loaded: {type(error).__name__}: {first}"
        ) from error
    if restore_values:
        from pyadapter.replay.state import assign_captured_state

        optimizer = getattr(model, "optimizer", None)
        assign_captured_state(bundle.weight_entries(), model, [optimizer] if optimizer is not None else [])
    return model


@contextlib.contextmanager
def saved_dtype_policy(bundle: CaptureBundle) -> Iterator[None]:
    """Within this block the global Keras dtype policy is the saved model's (`CaptureBundle.saved_dtype_policy_name`).

    Keras rebuilds a Sequential or functional model under the global policy, not the one it was saved with, and
    ``compile`` adds a LossScaleOptimizer only for a ``mixed_float16`` model: loaded in a process that has not set
    the policy, a mixed-precision model would come back float32, with its bare optimizer, whose variables then do
    not match the saved ones. Training set the policy globally, so this is the state the model was built in."""
    name = bundle.saved_dtype_policy_name()
    if name is None:
        yield
        return
    import keras

    previous = keras.config.dtype_policy()
    if previous.name == name:
        yield
        return
    keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def restore_checkpoint(bundle: CaptureBundle, checkpoint: Any = None, **objects: Any) -> Any:
    """Restores a custom-loop bundle's tf.train.Checkpoint into `checkpoint` or into the `objects` given by the
    names used when guarding (e.g. ``model=..., optimizer=...``). Returns the restore status."""
    prefix = bundle.checkpoint_prefix
    if prefix is None:
        raise BundleError(f"{bundle.path}: no checkpoint in this bundle (kind {bundle.kind})")
    import tensorflow as tf

    if checkpoint is None:
        checkpoint = tf.train.Checkpoint(**objects)
    try:
        return checkpoint.read(str(prefix))
    except Exception as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise BundleError(
            f"{bundle.path}: checkpoint could not be restored: {type(error).__name__}: {first}"
        ) from error


def step_function(bundle: CaptureBundle, module: ModuleType) -> Any:
    """The guarded step function (custom-loop bundles), looked up by qualified name in the imported entry module.
    If it was a tf.function, the undecorated Python function is at ``.python_function``."""
    info = bundle.manifest.get("step_function") or {}
    target: Any = module
    qualname = info.get("qualname")
    if not qualname:
        raise BundleError(f"{bundle.path}: no step function recorded")
    owner: Any = None
    for part in qualname.split("."):
        if part == "<locals>" or not hasattr(target, part):
            raise BundleError(
                f"{bundle.path}: step function {qualname} is not reachable from {module.__name__}"
            )
        owner, target = target, getattr(target, part)
    # The name is the bundle's word: `train.tf.io.write_file` is reachable from a program that imports tensorflow,
    # and `train.housekeeping.purge_runs` from one that imports its own clean-up module; the replay would call it
    # with the captured batch. Only a function the program guards itself (guard_step) is a step.
    defined_in = _code_file(target)
    if defined_in is None or not is_user_file(defined_in):
        raise BundleError(
            f"{bundle.path}: step function {qualname} is not a function of the program's own code"
            + (f" (it is defined in {defined_in})" if defined_in else "")
        )
    if not _guarded_by_the_program(target, module):
        if isinstance(owner, type):
            # ``self.train_step = guard_step(tf.function(self._train_step))`` in a trainer's __init__: the step
            # needs the object the program makes as it runs (re-entry reaches it), not the class.
            raise BundleError(
                f"{bundle.path}: step function {qualname} is a method: its {owner.__name__} object exists only "
                "while the program runs"
            )
        raise BundleError(
            f"{bundle.path}: step function {qualname} is not a step the program guards with guard_step"
        )
    return target


def undecorated(value: Any) -> Any:
    """The Python function under guard_step's and tf.function's ``python_function`` layers (the function itself
    when it has none)."""
    for _ in range(8):
        inner = getattr(value, "python_function", None)
        if inner is None:
            break
        value = inner
    return value


def _guarded_by_the_program(target: Any, module: ModuleType) -> bool:
    """Whether `target` is a guard_step the program made, or the function one of its module's guard_steps wraps
    (``step = guard_step(train_step)``: the recorded name is the function's)."""
    from pyadapter.capture.loop import GuardedStep

    if isinstance(target, GuardedStep):
        return True
    function = undecorated(target)
    return any(
        isinstance(value, GuardedStep) and undecorated(value) is function
        for value in list(vars(module).values())
    )


def _code_file(value: Any) -> str | None:
    """The file a function's code was compiled from, through a tf.function (``python_function``), a bound method
    (``__func__``) and ``functools.wraps`` layers; None for anything that has no Python code (a builtin, a class)."""
    for _ in range(16):
        code = getattr(value, "__code__", None)
        if code is not None:
            return str(code.co_filename)
        inner = next(
            (
                getattr(value, name)
                for name in ("python_function", "__func__", "__wrapped__")
                if hasattr(value, name)
            ),
            None,
        )
        if inner is None:
            return None
        value = inner
    return None


def restore_rng(bundle: CaptureBundle, model: Any = None) -> None:
    """Sets numpy, python `random` and the TF global generator to their captured states, and the Keras
    SeedGenerators of `model` to their states from before the failing step (so dropout masks repeat)."""
    rng.restore(bundle.rng, model)
