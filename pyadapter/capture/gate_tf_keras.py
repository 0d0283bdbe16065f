"""The gate's hooks on a tf_keras (Keras 2, ``TF_USE_LEGACY_KERAS=1``) optimizer: it updates through
``apply_gradients(grads_and_vars)`` rather than Keras 3's ``apply``, so that call is the one gated
(`pyadapter.capture.gate_update`), with the optimizer's slots built outside the cond."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyadapter.capture import keras_lines
from pyadapter.capture.gate_update import gate_update


class _TfKerasVariables:
    """What the gate reads of an optimizer for its backups: its variables now (as a list, for either tf_keras
    optimizer kind)."""

    def __init__(self, optimizer: Any) -> None:
        self._optimizer = optimizer

    @property
    def variables(self) -> list[Any]:
        return keras_lines.optimizer_variables(self._optimizer)

    @property
    def dynamic_scale(self) -> Any:
        """A dynamic LossScaleOptimizer's current scale (the name Keras 3's has), None otherwise: tf_keras's stops
        halving at 1 and skips every step whose gradients are non-finite there, silently, as Keras 3's does."""
        optimizer = self._optimizer
        if keras_lines.is_loss_scale_optimizer(optimizer) and getattr(optimizer, "dynamic", False):
            return optimizer.loss_scale
        return None


def _gated_apply_gradients(optimizer: Any, original: Any, active: Callable[[], Any]) -> Any:
    loss_scaling = keras_lines.is_loss_scale_optimizer(optimizer)

    def apply_gradients(grads_and_vars: Any, *args: Any, **kwargs: Any) -> Any:
        scope = active()  # the guarded call being traced, if any
        if scope is None:
            return original(grads_and_vars, *args, **kwargs)
        pairs = list(grads_and_vars)
        if not pairs:
            return original(pairs, *args, **kwargs)
        grads = [g for g, _ in pairs]
        variables = [v for _, v in pairs]
        # Slots are made outside the cond (as apply_gradients does in init_scope) so they exist once, whichever
        # branch runs.
        keras_lines.build_optimizer(getattr(optimizer, "inner_optimizer", optimizer), variables)
        if loss_scaling:
            keras_lines.build_optimizer(optimizer, variables)

        def apply(grads_: Any, variables_: Any) -> Any:
            original(list(zip(grads_, variables_, strict=True)), *args, **kwargs)

        record = scope.record()
        gated = gate_update(
            _TfKerasVariables(optimizer),
            apply,
            grads,
            variables,
            variables,
            list(record.losses),
            scope.config,
            check_grads=not loss_scaling,
            keep_backup=scope.keeps_copies,
        )
        record.gates.append(gated)
        return optimizer.iterations

    return apply_gradients


def patch_optimizer(optimizer: Any, patch: Any, active: Callable[[], Any], recording: Any) -> None:
    """The gate's hooks on a tf_keras optimizer (it updates through ``apply_gradients(grads_and_vars)`` and scales
    losses with ``get_scaled_loss``), through `gate.hooks`'s ``patch(obj, name, make)``; ``active`` returns the
    guarded call being traced, ``recording`` is the gate's loss recorder."""
    patch(optimizer, "apply_gradients", lambda original: _gated_apply_gradients(optimizer, original, active))
    patch(optimizer, "get_scaled_loss", lambda original: recording(original, takes_loss_argument=True))
