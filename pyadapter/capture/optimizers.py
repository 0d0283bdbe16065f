"""Building an optimizer's slots before its first update, as that update would build them (same names, same
scopes): the guard builds the model's optimizer at train begin for its window copy; replay builds the optimizers
it loads captured slots into."""

from __future__ import annotations

from typing import Any


def build_optimizers(optimizers: list[Any], trainable: list[Any], name_scopes: bool = True) -> None:
    """Build each optimizer that is not built yet, and a built LossScaleOptimizer's inner optimizer if it is not,
    on `trainable`, in the name scopes ``apply`` uses (so the slots get the paths they had in training).
    tf_keras optimizers are built as their ``apply_gradients`` builds them. ``name_scopes=False``: a plain
    ``build`` (what a checkpoint restore needs: names do not matter to it)."""
    from pyadapter.capture import keras_lines

    for optimizer in optimizers:
        if not trainable:
            return
        if keras_lines.is_tf_keras(optimizer):
            keras_lines.build_optimizer(getattr(optimizer, "inner_optimizer", optimizer), trainable)
            keras_lines.build_optimizer(optimizer, trainable)
            continue
        if not name_scopes:
            if not optimizer.built:
                optimizer.build(trainable)
            continue
        import keras

        if not optimizer.built:
            with keras.name_scope(optimizer.name, caller=optimizer):
                optimizer.build(trainable)
        inner = getattr(optimizer, "inner_optimizer", None)
        if inner is not None and not inner.built:
            with (
                keras.name_scope(optimizer.name, caller=optimizer),
                keras.name_scope(inner.name, caller=inner),
            ):
                inner.build(trainable)
