"""What a guard_step bundle holds beyond the common parts (`pyadapter.capture.writer`): the step's arguments as
its batch, which step function it was, a tf.train.Checkpoint of what is trained and the weights, all from before
the update (see `pyadapter.capture.loop`)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import tensorflow as tf

from pyadapter.capture import bundle_format, keras_lines, learning_rate, rng, snapshot, step_state
from pyadapter.capture import writer as bundle_writer
from pyadapter.capture.verdict import NonFiniteReport

if TYPE_CHECKING:
    from pyadapter.capture.loop import GuardedStep


def trackable_children(checkpoint: Any) -> dict[str, Any]:
    """The objects a tf.train.Checkpoint was given, by name (`Checkpoint(model=m, optimizer=o)`)."""
    children = {}
    for name, value in vars(checkpoint).items():
        if not name.startswith("_"):
            children[name] = value
    return children


def optimizers_trained(checkpoint: Any) -> dict[str, dict[str, list[str]]]:
    """``{"trains": {name: [variable path, ...]}}``: what each built Keras 3 optimizer the checkpoint holds updates,
    in the order it made its slots. A checkpoint restores an optimizer's slots by position, so a rebuild from the
    bundle builds each optimizer on its own variables in that order; built on every model's variables, a GAN's two
    Adams made slots that did not line up ("Received incompatible tensor with shape (16, 2)")."""
    trains = {
        name: [snapshot.variable_path(v) for v in keras_lines.trained_variables(value)]
        for name, value in trackable_children(checkpoint).items()
        if keras_lines.is_optimizer(value) and keras_lines.trained_variables(value)
    }
    return {"trains": trains} if trains else {}


def _is_variable(value: Any) -> bool:
    """A tf.Variable, or a Keras 3 variable (``keras.Variable``: an ``assign``, a ``path`` and a ``shape``; an
    optimizer has the first two), without importing Keras here (a tf_keras program's guard)."""
    return isinstance(value, tf.Variable) or all(hasattr(value, name) for name in ("assign", "path", "shape"))


def batch_of(args: Any, kwargs: Any) -> dict[str, Any]:
    """A loop step's batch as the bundle holds it: its arguments, as numpy."""
    return {
        "args": list(snapshot.to_numpy_structure(tuple(args))),
        "kwargs": snapshot.to_numpy_structure(dict(kwargs)),
    }


# Rows of each replica's part of the per-replica arguments (``[64, 64]``), in replica order: the bundle holds them
# concatenated, and a replay hands each replica its own part again (`pyadapter.replay.rebuild.captured_arguments`).
REPLICA_ROWS_KEY = "replica_rows"


def replica_rows_entry(args: Any, kwargs: Any) -> dict[str, Any]:
    """``{"replica_rows": [...]}`` for a step given per-replica arguments (``strategy.run`` inside it), else {}."""
    for leaf in tf.nest.flatten((args, kwargs), expand_composites=False):
        if isinstance(leaf, tf.distribute.DistributedValues):
            parts = list(leaf.values)
            if parts and all(getattr(p, "shape", None) is not None and p.shape.rank for p in parts):
                return {REPLICA_ROWS_KEY: [int(p.shape[0]) for p in parts]}
    return {}


def write_bundle(
    guarded: GuardedStep,
    report: NonFiniteReport,
    step: int,
    index: int,
    args: tuple,
    kwargs: dict,
    seed_states: dict[str, np.ndarray],
    files: Mapping[str, bundle_format.ExtraFile] | None = None,
    scene: dict[str, Any] | None = None,
) -> Path | str:
    batch = batch_of(args, kwargs)
    distributed = any(isinstance(v, tf.distribute.DistributedValues) for v in tf.nest.flatten((args, kwargs)))
    function = guarded.python_function
    step_info = {
        "module": getattr(function, "__module__", None),
        "qualname": getattr(function, "__qualname__", None),
        "file": _source_file(function),
        "tf_function": isinstance(guarded.step_function, tf.types.experimental.PolymorphicFunction),
        "jit_compile": getattr(guarded.step_function, "_jit_compile", None),
        # No Keras optimizer: the step writes its variables itself (`gate_manual`); the cause then looks for the
        # learning rate where the step is given it.
        "updates_by_hand": not guarded.optimizers,
        # Arguments that are variables (the image keras.io's style transfer optimizes, passed in): what the step
        # trains, not features in raw units.
        "variable_arguments": [i for i, value in enumerate(args) if _is_variable(value)],
    }
    checkpoint_objects = sorted(trackable_children(guarded.checkpoint))
    return bundle_writer.write_bundle(
        capture_dir=guarded.capture_dir,
        run=guarded.run_name or snapshot.default_run_name(),
        kind=bundle_format.KIND_LOOP,
        step=step,
        epoch=None,
        batch_index=index,
        on_nan=guarded.on_nan,
        report=report,
        batch=batch,
        batch_note="per-replica arguments concatenated into global batches" if distributed else None,
        seed_states=seed_states,
        history=guarded._history,
        extra={
            # A plain Python step's draws from Python's and NumPy's generators: their states before it.
            **(
                {"rng": rng.capture(seed_states, guarded.host_random_before)}
                if guarded.host_random_before is not None
                else {}
            ),
            "step_function": step_info,
            "checkpoint": {
                "prefix": bundle_format.CHECKPOINT_PREFIX,
                "objects": checkpoint_objects,
                **optimizers_trained(guarded.checkpoint),
            },
            **(
                {
                    "optimizer_iterations": int(guarded.optimizers[0].iterations.numpy()),
                    **learning_rate.manifest_entry(guarded.rate_first()[0], report.update_in_state),
                }
                if guarded.optimizers
                else {}  # a step that updates by hand
            ),
            **keras_lines.manifest_entry([*guarded.models, *guarded.optimizers]),
            **replica_rows_entry(args, kwargs),
            **(scene or {}),
        },
        save_state=lambda writer: _save_state(guarded, writer, seed_states, files or {}, args, kwargs),
        verbose=guarded.verbose,
    )


def _save_state(
    guarded: GuardedStep,
    writer: bundle_format.BundleWriter,
    seed_states: dict[str, np.ndarray],
    files: Mapping[str, bundle_format.ExtraFile],
    args: tuple,
    kwargs: dict,
) -> dict:
    for name, content in files.items():
        writer.write_extra(name, content)
    seeds = dict(guarded._seed_states(with_global=True))
    after = {path: seeds[path].numpy() for path in seed_states if path in seeds}
    try:
        for path, value in seed_states.items():
            if path in seeds:
                seeds[path].assign(value)
        prefix = writer.file(bundle_format.CHECKPOINT_PREFIX)
        guarded.checkpoint.write(str(prefix))
        groups = [("model", keras_lines.model_variables(m)) for m in guarded.models]
        groups += [("optimizer", keras_lines.optimizer_variables(o)) for o in guarded.optimizers]
        groups.append(("module", guarded.hand_variables()))
        # What the step keeps by hand (accumulators, a micro-step counter), under the program's names for it.
        kept = guarded.step_state(args, kwargs)
        groups.append((step_state.GROUP, [v for v, _ in kept]))
        described: list[dict[str, Any]] = []
        names = {**guarded.hand_variable_names(), **{id(v): name for v, name in kept}}
        values, total = snapshot.variable_values(groups, described, names)
        writer.write_arrays(bundle_format.WEIGHTS_FILE, values, total)  # streamed, one variable at a time
    finally:
        for path, value in after.items():
            seeds[path].assign(value)
    return {"weights": {"file": bundle_format.WEIGHTS_FILE, "variables": described}}


def _source_file(function: Any) -> str | None:
    # A tf.function method reached through its instance (``self.step = guard_step(...)(self._train_step)``) wraps
    # the user's method in a function of TensorFlow's own file; the method's file is under ``__wrapped__``.
    code = getattr(inspect.unwrap(function), "__code__", None)
    return str(Path(code.co_filename).absolute()) if code is not None else None
