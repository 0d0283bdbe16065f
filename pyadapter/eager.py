"""The eager toggle: run tf.functions and tf.data functions as plain Python, so breakpoints inside them hit.

``tf.config.run_functions_eagerly(True)`` makes tf.function bodies run op by op, but it does not reach
functions passed to tf.data transformations (``Dataset.map`` etc.); ``tf.data.experimental.enable_debug_mode()``
does. ``eager()`` switches both on, at once, and is a context manager that restores them on exit::

    with pyadapter.eager():
        train_step(batch)      # a breakpoint inside train_step (a tf.function) now stops

    pyadapter.eager()          # or just switch on for the rest of the program

tf.data debug mode only affects datasets created after it is switched on.
"""

from __future__ import annotations

import warnings
from typing import Any


class EagerMode:
    """Eager execution of tf.function and tf.data functions; restores the previous settings on exit."""

    def __init__(self) -> None:
        import tensorflow as tf

        self._tf = tf
        self.previous_functions_eagerly = bool(tf.config.functions_run_eagerly())
        self.previous_data_debug_mode = _data_debug_mode()
        tf.config.run_functions_eagerly(True)
        try:
            tf.data.experimental.enable_debug_mode()
        except ValueError as exc:  # called inside graph mode (e.g. from within a tf.function trace)
            warnings.warn(f"nanlens: tf.data debug mode not enabled: {exc}", stacklevel=3)
        self.active = True

    def restore(self) -> None:
        """Put both settings back as they were (idempotent)."""
        if not self.active:
            return
        self._tf.config.run_functions_eagerly(self.previous_functions_eagerly)
        if self.previous_data_debug_mode is False:
            _set_data_debug_mode(False)
        self.active = False

    def __enter__(self) -> EagerMode:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.restore()


def eager() -> EagerMode:
    """Switch eager tf.function and tf.data execution on; use as ``with eager(): ...`` to switch back."""
    return EagerMode()


def _debug_mode_module() -> Any:
    try:
        from tensorflow.python.data.ops import debug_mode
    except ImportError:  # pragma: no cover - private module moved
        return None
    return debug_mode


def _data_debug_mode() -> bool | None:
    module = _debug_mode_module()
    return bool(getattr(module, "DEBUG_MODE", False)) if module is not None else None


def _set_data_debug_mode(value: bool) -> None:
    module = _debug_mode_module()
    if module is not None and hasattr(module, "toggle_debug_mode"):
        module.toggle_debug_mode(value)
