"""What of a Keras model NanGuard keeps and saves: the variables the window copies, the optimizer slots built
before the first copy, and the bundle's model.keras and weights.npz."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import keras

from pyadapter.capture import bundle_format, keras_lines, model_archive, rng, snapshot, step_state
from pyadapter.capture.train_function import model_optimizers


def state_variables(model: keras.Model) -> list[Any]:
    """What the window copies: the model's variables, its optimizers' (slots, iterations, learning rate) and its
    seed generators' states."""
    return snapshot.unique(
        [
            *keras_lines.model_variables(model),
            *(v for o in model_optimizers(model) for v in keras_lines.optimizer_variables(o)),
            *(v for _, v in rng.seed_generator_states(model)),
        ]
    )


def build_own_optimizer(model: keras.Model) -> None:
    """Make the slots of a model's only optimizer now, as its first update would (Keras's own ``train_step``
    builds it on the model's trainable variables, under its name scope), so the window's first copy holds them:
    a run that blows up in its first steps then has a window from step 0. Custom steps are left alone (an
    optimizer may train only some variables); their window starts after the first step. So is a model not built
    yet: a subclass whose head was built in ``__init__`` (keras.io's RetinaNet) has some of its variables only, and
    an optimizer built on those refused the rest at the first update ("Unknown variable")."""
    optimizers = model_optimizers(model)
    if (
        not getattr(model, "built", True)
        or keras_lines.is_tf_keras(model)
        or len(optimizers) != 1
        or optimizers[0] is not getattr(model, "optimizer", None)
        or type(model).train_step is not keras.Model.train_step
        or keras_lines.optimizer_built(optimizers[0])
    ):
        return
    from pyadapter.capture.optimizers import build_optimizers

    with model.distribute_strategy.scope():
        build_optimizers(optimizers, list(model.trainable_variables))


@contextlib.contextmanager
def _keras_save_warnings_shown_nowhere() -> Iterator[None]:
    """Keras's UserWarnings while it saves ("You are saving a model that has not yet been built": a subclass built
    only inside its step) are not printed. Not by warnings.catch_warnings: leaving it resets every warning's
    once-per-place record, so a skip-mode run (a bundle per epoch) printed Keras's "Your input ran out of data"
    again at every epoch."""
    shown = warnings.showwarning

    def show(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
        if not issubclass(category, UserWarning):
            shown(message, category, *args, **kwargs)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


def _save_error_text(model: keras.Model, exc: Exception) -> str:
    """One line for why model.keras was not written: the first sentence of the error (Keras's begins with a newline,
    and the bundle said only "NotImplementedError: "); an empty one names the layer whose get_config fails."""
    message = " ".join(str(exc).split()).split(". ")[0]  # Keras's start with a newline and run to a paragraph
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    if message:
        return text
    for layer in model._flatten_layers(include_self=False):
        try:
            layer.get_config()
        except Exception as inner:  # noqa: BLE001 - any failure names the layer
            what = str(inner).strip().splitlines()[0] if str(inner).strip() else type(inner).__name__
            return f"{text}: layer {type(layer).__name__} ({layer.name}) cannot give its config: {what}"
    return text


def save_keras_state(
    writer: bundle_format.BundleWriter,
    model: keras.Model,
    seed_states: dict,
    kept: list[tuple[Any, str]] | None = None,
) -> dict:
    """model.keras (architecture and compile settings: `model_archive`) and weights.npz (every model and optimizer
    value, streamed one variable at a time), with the seed states from before the step. `kept`: what the model's
    train_step keeps in variables of its own (accumulators, a micro-step counter), with the program's names for
    them (``self.n_acc``), in weights.npz's `step_state.GROUP` under those names."""
    seeds = dict(rng.seed_generator_states(model, with_global=True))
    after = {path: seeds[path].numpy() for path in seed_states if path in seeds}
    extra: dict[str, Any] = {}
    described: list[dict[str, Any]] = []
    try:
        for path, value in seed_states.items():
            if path in seeds:
                seeds[path].assign(value)
        model_file = writer.file(bundle_format.MODEL_FILE)
        try:
            with _keras_save_warnings_shown_nowhere():
                model_archive.save(model, model_file, keras_lines.keras_line(model) or keras_lines.KERAS3)
        except Exception as exc:  # noqa: BLE001 - e.g. a custom object without get_config: keep the rest
            model_file.unlink(missing_ok=True)
            extra["model_save_error"] = _save_error_text(model, exc)
        values, total = snapshot.variable_values(
            [
                ("model", keras_lines.model_variables(model)),
                (
                    "optimizer",
                    [v for o in model_optimizers(model) for v in keras_lines.optimizer_variables(o)],
                ),
                (step_state.GROUP, [v for v, _ in kept or []]),
            ],
            described,
            {id(v): name for v, name in kept or []},
        )
        # Written while the seed states are the captured ones: the values are read as they are written.
        writer.write_arrays(bundle_format.WEIGHTS_FILE, values, total)
    finally:
        for path, value in after.items():
            seeds[path].assign(value)
    return {"weights": {"file": bundle_format.WEIGHTS_FILE, "variables": described}, **extra}
