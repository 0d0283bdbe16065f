"""Rebuild a bundle's failing step: import the entry script, restore model, optimizer, batch and random state.

The result is a `StepProgram` (see ``step.py``) that runs the same step the training ran:
- Keras fit bundles: ``model.train_step(batch)`` on the model loaded from ``model.keras`` (compiled, with its
  optimizer state), the batch exactly as ``train_step`` received it.
- custom-loop bundles (``guard_step``): the guarded step function, found by name in the entry script, with its
  captured arguments, after the checkpoint is read back into the objects it was written from.
"""

from __future__ import annotations

import contextlib
import warnings as warnings_module
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import tensorflow as tf

from pyadapter.capture import rng, step_state
from pyadapter.capture.batchcodec import values_of
from pyadapter.capture.bundle_format import KIND_FIT, BundleError
from pyadapter.capture.gate import forward_state_variables
from pyadapter.capture.keras_lines import model_variables, optimizer_variables, trained_variables
from pyadapter.capture.reader import CaptureBundle
from pyadapter.capture.snapshot import (
    to_tensors,  # noqa: F401 - the batch as the step takes it (shards, reentry)
    unique,
)
from pyadapter.capture.structure import StructureError, holds_objects, with_objects
from pyadapter.replay.entry import (
    EntryScript,
    EntryScriptError,
    custom_objects,
    import_entry_script,
)
from pyadapter.replay.errors import ReplayError
from pyadapter.replay.restore import load_model, restore_checkpoint, restore_rng, step_function, undecorated
from pyadapter.replay.state import StateMismatch, assign_captured_state
from pyadapter.replay.step import StepProgram
from pyadapter.replay.trust import safe_cwd


@dataclass
class Rebuilt:
    bundle: CaptureBundle
    entry: EntryScript | None  # None when re-entry ran the user's own program (nothing imported by us)
    program: StepProgram
    warnings: list[str] = field(default_factory=list)
    bad_inputs: list[str] = field(default_factory=list)  # batch leaves holding NaN/Inf already


def open_bundle(path: str | Path) -> CaptureBundle:
    """The verified bundle; a tampered, incomplete or foreign one is a one-line ReplayError."""
    try:
        bundle = CaptureBundle.load(path)
    except BundleError as exc:
        raise ReplayError(str(exc)) from None
    use_keras_line(bundle)
    return bundle


def use_keras_line(bundle: CaptureBundle) -> None:
    """A tf_keras bundle: make this process's (and its children's) tf.keras tf_keras before the program runs."""
    from pyadapter.capture.keras_lines import MixedKerasError, use_line_of_bundle

    try:
        use_line_of_bundle(bundle.keras_line, str(bundle.path))
    except MixedKerasError as exc:
        raise ReplayError(str(exc)) from None


def import_entry(bundle: CaptureBundle) -> EntryScript:
    script = bundle.entry_script
    if script is None:
        raise ReplayError(
            f"{bundle.path}: the bundle does not record its entry script, so its code cannot be found"
        )
    recorded = bundle.manifest.get("entry_script") or {}
    argv = recorded.get("argv")
    try:
        return import_entry_script(
            script,
            bundle.entry_script_sha256,
            argv=[str(a) for a in argv[1:]] if isinstance(argv, list) else None,
            cwd=safe_cwd(bundle, Path(script).resolve()),  # the recorded folder only inside the replay's own
            module=recorded.get("module") if isinstance(recorded.get("module"), str) else None,
        )
    except EntryScriptError as exc:
        raise ReplayError(str(exc)) from None


def rebuild(source: str | Path | CaptureBundle) -> Rebuilt:
    """Everything needed to run the bundle's step again, from the captured state. Given the loaded bundle whose
    program `trust.check_entry` passed, it uses that one: loading the manifest again would run what the folder
    holds by then (a manifest swapped in after the check)."""
    bundle = source if isinstance(source, CaptureBundle) else open_bundle(source)
    entry = import_entry(bundle)
    warnings = list(entry.warnings)
    if bundle.manifest.get("state") == "after_update":
        warnings.append(
            "the bundle holds the weights after the failing update (it could not be held back), so the replay "
            "starts from already non-finite or changed weights"
        )
    try:
        if bundle.kind == KIND_FIT:
            program = _keras_program(bundle, entry, warnings)
        else:
            program = _loop_program(bundle, entry, warnings)
    except BundleError as exc:
        raise ReplayError(str(exc)) from None
    program.snapshot()
    bad_inputs = non_finite_inputs(bundle.batch())
    if bad_inputs:
        warnings.append(
            "the captured batch already holds non-finite values ("
            + "; ".join(bad_inputs)
            + "): the NaN comes "
            "from the data or the input pipeline (e.g. a tf.data map function) before the step; `nanlens locate "
            f"{bundle.path}` names the line that made it (re-running the input pipeline under a dump when the "
            "arrays given to fit did not hold it)"
        )
    return Rebuilt(bundle=bundle, entry=entry, program=program, warnings=warnings, bad_inputs=bad_inputs)


def non_finite_inputs(batch: Any) -> list[str]:
    """'x: 3 NaN, 1 -inf of 512' for each floating-point leaf of the batch that is not all finite."""
    import numpy as np

    found: list[str] = []

    def visit(value: Any, name: str) -> None:
        value = values_of(value)  # a ragged/sparse leaf: its values
        if isinstance(value, dict):
            for key, item in value.items():
                visit(item, f"{name}[{key!r}]" if name else str(key))
        elif isinstance(value, (list, tuple)):
            labels = ("x", "y", "sample_weight") if not name and len(value) <= 3 else None
            for index, item in enumerate(value):
                visit(item, labels[index] if labels else f"{name}[{index}]")
        elif isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.floating):
            nan = int(np.isnan(value).sum())
            pos = int(np.isposinf(value).sum())
            neg = int(np.isneginf(value).sum())
            if nan or pos or neg:
                parts = [f"{n} {label}" for n, label in ((nan, "NaN"), (neg, "-inf"), (pos, "+inf")) if n]
                found.append(f"{name or 'batch'}: {', '.join(parts)} of {value.size}")

    visit(batch, "")
    return found


def _keras_program(bundle: CaptureBundle, entry: EntryScript, warnings: list[str]) -> StepProgram:
    objects = custom_objects(entry.module)
    if bundle.model_path is None:
        reason = bundle.manifest.get("model_save_error")
        # Said in the route ("the bundle alone could not rebuild the step (...)"): why there is none, in the user's terms.
        raise ReplayError(
            f"{bundle.path}: the bundle has no model.keras"
            + (f": saving the model failed with {reason}" if isinstance(reason, str) and reason else "")
        )
    try:
        # A model that cannot come back from its config (a subclass without get_config, a Lambda layer, which
        # safe mode rightly refuses) fails here, and the step is re-entered instead (`session.py`).
        with _optimizer_loading_skipped() as skipped:
            model = load_model(
                bundle, custom_objects=objects, entry_module=entry.module, restore_values=False
            )
    except (ValueError, BundleError) as exc:
        raise ReplayError(f"{bundle.path}: {exc}") from None
    if not getattr(model, "built", True):
        # Rebuilt from its config without variables (built only by its first call): the captured values have no
        # place to go, and the step would run on fresh ones. Keras's whole archive fails here too; re-entry does it.
        raise ReplayError(
            f"{bundle.path}: model.keras rebuilds an unbuilt model; the captured values have no place"
        )
    if model.optimizer is None:
        raise ReplayError(
            f"{bundle.path}: model.keras was saved without its optimizer; the step cannot be rerun"
        )
    _restore_loss_scaling(bundle, model, warnings)
    # Every model and optimizer value from weights.npz, by path: a model rebuilt from its config gets its values
    # here; from an archive with values (older bundles), what Keras loaded is overwritten with the same values,
    # and what it skipped (an optimizer whose variables it could not match) is set here.
    captured = bundle.weight_entries()
    try:
        state_warnings = (
            assign_captured_state(captured, model, [model.optimizer], require_all=True) if captured else []
        )
    except StateMismatch as exc:
        # The model its saved config builds is not the one training built: Keras's automatic get_config of a
        # subclass can record a constructor argument wrong (``dropout=0.1`` saved as 0.0, so no Dropout seed
        # variable), and the step ran on fresh weights, "reproducing" a NaN of its own. Re-entry builds the model
        # with the program's own code (`session.py`).
        raise ReplayError(
            f"{bundle.path}: model.keras rebuilds a model unlike the one training built: {exc}"
        ) from None
    warnings.extend(state_warnings)
    if state_warnings or not captured:
        warnings.extend(skipped)  # Keras's own word on what it could not load, when the state is incomplete
    # What the model's train_step keeps itself (``self.n_acc``), by the program's names: a model rebuilt without it
    # would not take the branch training took, and the step is re-entered instead (`session.py`).
    kept, missed = step_state.assign(step_state.namespace_of(model.train_step), bundle.step_state_entries())
    if missed:
        raise ReplayError(f"{bundle.path}: on the model model.keras rebuilds, {missed[0]}")
    return keras_step_program(bundle, model, [model.optimizer], to_tensors(bundle.batch()), kept=kept)


def keras_step_program(
    bundle: CaptureBundle, model: Any, optimizers: list[Any], data: Any, kept: list[Any] | None = None
) -> StepProgram:
    """``model.train_step(data)`` with the model's and optimizers' variables (and `kept`: what its train_step keeps
    in variables of its own, accumulators and a micro-step counter) as its state, and the bundle's random state and
    fresh metrics before each run (both routes: a model loaded from the bundle, or the program's own)."""

    def before_run() -> None:
        restore_rng(bundle, model)
        model.reset_metrics()

    return StepProgram(
        step=model.train_step,
        args=(data,),
        state=unique(
            [*model_variables(model), *(v for o in optimizers for v in optimizer_variables(o)), *(kept or [])]
        ),
        trainable=list(model.trainable_variables),
        optimizers=list(optimizers),
        forward_state=forward_state_variables([model]),
        before_run=before_run,
        description=f"{type(model).__name__}.train_step on the captured batch",
    )


def loop_step_program(
    bundle: CaptureBundle,
    step: Any,
    models: list[Any],
    optimizers: list[Any],
    args: tuple,
    kwargs: dict[str, Any],
    by_hand: list[Any] | None = None,
    kept: list[Any] | None = None,
) -> StepProgram:
    """A guard_step function on its captured arguments (tensors), with the models' and optimizers' variables (and
    `by_hand`: the tf.Module and bare variables a step without optimizer writes itself; `kept`: what the step keeps
    in variables of its own, accumulators and a micro-step counter) as its state, and the bundle's random state and
    fresh metrics before each run (both routes)."""

    def before_run() -> None:
        for model in models or [None]:
            restore_rng(bundle, model)
        for model in models:
            model.reset_metrics()

    return StepProgram(
        step=step,
        args=args,
        kwargs=kwargs,
        state=unique(
            [v for m in models for v in model_variables(m)]
            + [v for o in optimizers for v in optimizer_variables(o)]
            + list(by_hand or [])
            + list(kept or [])
        ),
        # What the optimizers update counts too: a loop's bare tf.Variable weights, which no model lists, were not
        # checked after the replayed update (an update that made them NaN "stayed finite").
        trainable=unique(
            [v for m in models for v in m.trainable_variables]
            + [v for o in optimizers for v in trained_variables(o)]
            + list(by_hand or [])
        ),
        optimizers=list(optimizers),
        forward_state=forward_state_variables(list(models)),
        before_run=before_run,
        description=f"{getattr(step, '__qualname__', 'the step')} on the captured arguments",
        plain_python=(bundle.manifest.get("step_function") or {}).get("tf_function") is False,
    )


def _restore_loss_scaling(bundle: CaptureBundle, model: Any, warnings: list[str]) -> None:
    """Training's optimizer was a LossScaleOptimizer but the model came back with the bare one: wrap it again.

    Only ``compile``'s automatic wrapping of a ``mixed_float16`` model can be lost this way (an optimizer the
    user wrapped is saved as a LossScaleOptimizer), and that one has Keras's default settings; its scale and
    counter are then set from weights.npz with the rest."""
    from pyadapter.capture import keras_lines, legacy_keras

    if not bundle.model_info.get("loss_scale_optimizer"):
        return
    if bundle.keras_line == keras_lines.TF_KERAS:
        if not legacy_keras.wrap_loss_scale(model):
            return
    else:
        import keras

        if isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer):
            return
        model.optimizer = keras.optimizers.LossScaleOptimizer(model.optimizer, name="loss_scale_optimizer")
    warnings.append(
        f"the model came back without the LossScaleOptimizer compile() put around its optimizer in training "
        f"(saved dtype policy: {bundle.saved_dtype_policy_name() or 'unknown'}); wrapped it again with Keras's "
        "default settings and the captured loss scale"
    )


_KERAS_OPTIMIZER_SKIP = "Skipping variable loading for optimizer"


@contextlib.contextmanager
def _optimizer_loading_skipped() -> Iterator[list[str]]:
    """Collects Keras's "Skipping variable loading for optimizer ..." warnings (one line each) instead of
    showing them: `assign_captured_state` sets those values from weights.npz right after and checks them.
    Every other warning is shown as usual."""
    skipped: list[str] = []
    with warnings_module.catch_warnings(record=True) as caught:
        warnings_module.simplefilter("always")
        yield skipped
    for item in caught:
        text = str(item.message)
        if text.startswith(_KERAS_OPTIMIZER_SKIP):
            skipped.append("Keras: " + text.strip().splitlines()[0])
        else:
            warnings_module.warn_explicit(
                item.message, item.category, item.filename, item.lineno, source=item.source
            )


def _find_checkpoint(bundle: CaptureBundle, module: ModuleType, step: Any) -> Any:
    """The tf.train.Checkpoint the bundle's checkpoint was written from, as the imported script builds it again:
    the guarded step's own, a module-level Checkpoint holding the recorded names, or one made from module-level
    objects with those names."""
    names = list((bundle.manifest.get("checkpoint") or {}).get("objects") or [])
    own = getattr(step, "checkpoint", None)
    if isinstance(own, tf.train.Checkpoint):
        return own
    for value in vars(module).values():
        if isinstance(value, tf.train.Checkpoint) and all(hasattr(value, name) for name in names):
            return value
    if names and all(name in vars(module) for name in names):
        return tf.train.Checkpoint(**{name: getattr(module, name) for name in names})
    listed = ", ".join(names) or "nothing"
    raise ReplayError(
        f"{bundle.path}: the checkpoint holds {listed}, but {module.__file__} defines no such objects at module "
        "level; build the model and optimizer at module level so replay can restore them"
    )


def what_each_optimizer_trains(
    bundle: CaptureBundle, checkpoint: Any, trainable: list[Any]
) -> list[tuple[Any, list[Any]]]:
    """Each optimizer the checkpoint holds, with the variables to build it on: those the bundle recorded it
    training (``manifest["checkpoint"]["trains"]``, in slot order; a checkpoint restores slots by position, so a
    GAN's two optimizers built on every model's variables refused their values), else every model's trainable
    variables (a bundle written before the record, or a variable the rebuilt models do not hold)."""
    from pyadapter.capture.keras_lines import is_optimizer
    from pyadapter.capture.loop_bundle import trackable_children
    from pyadapter.capture.snapshot import variable_path

    trains = (bundle.manifest.get("checkpoint") or {}).get("trains") or {}
    by_path = {variable_path(v): v for v in trainable}
    found = []
    for name, value in trackable_children(checkpoint).items():
        if not is_optimizer(value):
            continue
        paths = trains.get(name) or []
        own = [by_path[p] for p in paths if p in by_path]
        found.append((value, own if paths and len(own) == len(paths) else trainable))
    return found


def _checkpoint_children(checkpoint: Any) -> list[Any]:
    from pyadapter.capture.loop_bundle import trackable_children

    return list(trackable_children(checkpoint).values())


def _check_restored(bundle: CaptureBundle, state: list[Any], warnings: list[str]) -> None:
    """Compare what the checkpoint restored with the raw values in weights.npz (matched by variable path); where
    they differ (objects the script builds differently now), the raw values win and the user is told."""
    import numpy as np

    from pyadapter.capture.snapshot import variable_path

    raw = bundle.weights()
    if not raw:
        return
    fixed, missing = [], 0
    for variable in state:
        value = raw.get(variable_path(variable))
        if value is None:
            missing += 1
            continue
        current = variable.numpy()
        if current.shape == value.shape and not np.array_equal(current, value, equal_nan=True):
            variable.assign(value)
            fixed.append(variable_path(variable))
    if fixed:
        warnings.append(
            f"{len(fixed)} variables did not match their captured values after the checkpoint restore "
            f"(first: {fixed[0]}); set from weights.npz instead"
        )
    if missing:
        warnings.append(
            f"{missing} variables of the rebuilt objects are not in the bundle; they keep their values"
        )


def _check_trains_only(bundle: CaptureBundle, entry: EntryScript, state: list[Any]) -> None:
    """Refuse (ReplayError, one line) a rebuild whose objects hold fewer variables than the bundle captured: the
    step's optimizer trained more than the checkpoint's objects (a second model, a bare tf.Variable), and an
    optimizer built on the checkpoint's alone refuses the rest ("Unknown variable"). The program's own objects
    are then used (re-entry), which build the optimizer on everything the step trains."""
    captured = len((bundle.manifest.get("weights") or {}).get("variables") or [])  # counted, not read
    held = len(state)
    if captured > held:
        raise ReplayError(
            f"{bundle.path}: the step trains {captured - held} more variables than its checkpoint's objects hold "
            f"({captured} captured, {held} rebuilt from {entry.path.name}: a second model or a tf.Variable its "
            "optimizer also trains); replay runs the program itself for them"
        )


def _loop_program(bundle: CaptureBundle, entry: EntryScript, warnings: list[str]) -> StepProgram:
    from pyadapter.capture.keras_lines import is_model, is_optimizer
    from pyadapter.replay.state import build_optimizers

    try:
        step = step_function(bundle, entry.module)
    except BundleError as exc:
        raise ReplayError(f"{exc}; define the step function at module level so replay can find it") from None
    checkpoint = _find_checkpoint(bundle, entry.module, step)
    children = _checkpoint_children(checkpoint)
    models = [v for v in children if is_model(v)]  # Keras 3 or tf_keras
    optimizers = [v for v in children if is_optimizer(v)]
    trainable = [v for m in models for v in m.trainable_variables]
    # Optimizer slots are made on first use; make them now so the checkpoint's values land in them.
    for optimizer, own in what_each_optimizer_trains(bundle, checkpoint, trainable):
        build_optimizers([optimizer], own, name_scopes=False)
    state = unique(
        [v for m in models for v in model_variables(m)]
        + [v for o in optimizers for v in optimizer_variables(o)]
    )
    _check_trains_only(bundle, entry, state)
    restore_checkpoint(bundle, checkpoint).expect_partial()
    # A checkpoint holds no SeedGenerator state (Dropout's): each run sets it from the bundle's random state
    # (`restore_rng`), so it differing after the restore is not news ("3 variables did not match").
    seeds = {id(v) for m in models for _, v in rng.seed_generator_states(m)}
    _check_restored(bundle, [v for v in state if id(v) not in seeds], warnings)
    args, kwargs = captured_arguments(bundle)
    return loop_step_program(bundle, undecorated(step), models, optimizers, args, kwargs)


def _per_replica(bundle: CaptureBundle, captured: Any, live: Any) -> Any:
    """The captured arguments with each one the program passes per replica (a distributed dataset's element, for
    ``strategy.run`` inside the step) split again into the replicas' parts the bundle recorded
    (``manifest["replica_rows"]``), each on its replica's device. Handed whole, every replica got the whole global
    batch: a 0/0 of one replica's shard with no labelled row stayed finite in every replay."""
    import tensorflow as tf

    from pyadapter.capture.loop_bundle import REPLICA_ROWS_KEY

    rows = bundle.manifest.get(REPLICA_ROWS_KEY)
    if not (isinstance(rows, list) and rows and all(type(r) is int and r >= 0 for r in rows)):
        return captured

    def split(held: Any, program: Any) -> Any:
        if not isinstance(program, tf.distribute.DistributedValues) or not isinstance(held, tf.Tensor):
            return held
        devices = [getattr(v, "device", "") for v in program.values]
        if len(devices) != len(rows) or held.shape.rank in (None, 0) or held.shape[0] != sum(rows):
            return held
        parts = []
        for part, device in zip(tf.split(held, rows, axis=0), devices, strict=True):
            with tf.device(device):
                parts.append(tf.identity(part))
        return type(program)(tuple(parts))

    try:  # the program's call and the captured one nest alike (a distributed value is one leaf of it)
        return tf.nest.map_structure(split, captured, live, check_types=False)
    except (TypeError, ValueError):  # they do not: nothing to pair, the arguments stay as captured
        return captured


def _variables_of_the_program(
    held: tuple[tuple[Any, ...], dict[str, Any]], live: tuple[tuple[Any, ...], dict[str, Any]]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The step's arguments with each one the program passed as a ``tf.Variable`` (the tensorflow.org style
    transfer's ``train_step(image)``, whose step applies gradients to it) being the program's variable, set to the
    captured value: the bundle holds its value as an array, and a replay that passed a tensor failed in
    ``apply_gradients`` ("EagerTensor object has no attribute '_unique_id'")."""

    def variable_for(value: Any, program_value: Any) -> Any:
        if not (hasattr(program_value, "assign") and hasattr(program_value, "shape")):
            return value
        if tuple(getattr(value, "shape", ())) != tuple(program_value.shape):
            return value
        program_value.assign(value)
        return program_value

    args = tuple(
        variable_for(value, live[0][i]) if i < len(live[0]) else value for i, value in enumerate(held[0])
    )
    kwargs = {k: variable_for(v, live[1][k]) if k in live[1] else v for k, v in held[1].items()}
    return args, kwargs


def captured_arguments(
    bundle: CaptureBundle, live: tuple[tuple[Any, ...], dict[str, Any]] | None = None
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A guard_step bundle's captured arguments, as tensors. An argument that was an object (a model passed to the
    step: the bundle names its class only) is the program's own, from `live` (the arguments of the program's call
    of the step, in a re-entry); without them such a bundle is a ReplayError."""
    held_args, held_kwargs = bundle.step_arguments()
    args = tuple(to_tensors(list(held_args)))
    kwargs = {k: to_tensors(v) for k, v in held_kwargs.items()}
    if live is not None:
        args, kwargs = _per_replica(bundle, (args, kwargs), (tuple(live[0]), dict(live[1])))
        args, kwargs = _variables_of_the_program((args, kwargs), (tuple(live[0]), dict(live[1])))
    found = holds_objects((args, kwargs))
    if found is None:
        return args, kwargs
    if live is None:
        raise ReplayError(
            f"{bundle.path}: the step takes {found} as an argument, which a bundle does not hold; the program "
            "itself is run for it"
        )
    try:
        args, kwargs = with_objects((args, kwargs), (tuple(live[0]), dict(live[1])))
    except StructureError as exc:
        raise ReplayError(f"{bundle.path}: {exc}") from None
    return args, kwargs
