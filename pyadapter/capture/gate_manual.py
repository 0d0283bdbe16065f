"""The gate for a step that updates its variables by hand, with no Keras optimizer to gate.

tensorflow.org's "Basic training loops" trains a ``tf.Module`` this way, and so does much research code::

    dw, db = tape.gradient(loss, [model.w, model.b])
    model.w.assign_sub(learning_rate * dw)

There is no ``optimizer.apply`` to put in a ``tf.cond`` (`pyadapter.capture.gate_update`), so the writes
themselves are gated: while the step is traced, each guarded variable's ``assign`` / ``assign_add`` /
``assign_sub`` (and their ``scatter_*`` forms) writes what it was given only when every loss and gradient the step
recorded before the write is finite, and otherwise writes nothing new (an added 0, or the value it holds). A select
per write, no branch: the write returns what the user's code expects (the variable) either way. A Keras
variable's own ``assign_sub`` goes through its tf.Variable's ``assign``, so Keras weights updated by hand are
gated too.

Gradients are recorded from ``tf.GradientTape.gradient`` (`pyadapter.capture.tape_targets`), losses as for every
guarded step. After the step the written variables are checked, as the weights after an optimizer's update are.
The same select holds back a guard_step's writes of variables it keeps by hand beside an optimizer (gradient
accumulators); `pyadapter.capture.gate` decides per write (`watching_writes` here sees them all).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

from pyadapter.capture.gate_checks import (
    NOT_MEASURED,
    dense,
    finite_flags,
    finite_flags_and_norm,
    is_float,
    ones,
    sampled_half_squares32,
)
from pyadapter.capture.snapshot import variable_path

WRITES = ("assign", "assign_add", "assign_sub", "scatter_add", "scatter_sub", "scatter_update")


@dataclass
class ManualRecord:
    """What one traced call of a step that writes by hand recorded: its gradients and the variables it wrote."""

    gradients: list[tuple[str, Any]] = field(default_factory=list)  # (name, gradient tensor)
    written: dict[int, Any] = field(default_factory=dict)  # id -> tf.Variable, in write order
    # id -> (a variable of no float dtype the step writes, its value before the step's first write): a micro-step
    # counter, ``micro_step.assign_add(1)``; part of the step's state, not checked, put back when the step fails
    counters: dict[int, tuple[Any, Any]] = field(default_factory=dict)
    # id -> (a float variable of the step's own that no model, optimizer or metric lists, its value before the
    # step's first write): an accumulator of gradients; put back when the step fails, with what a branch of the step
    # wrote into it (``a.assign(tf.zeros_like(a))`` after applying), which no write's own gate can hold back
    others_saved: dict[int, tuple[Any, Any]] = field(default_factory=dict)
    write_ok: Any = None  # the condition the last write used (whether the writes went through)
    update_squares: list[Any] = field(default_factory=list)  # history on: half sums of squares of the updates
    _ok_key: tuple[int, int] | None = None


def record_gradients(record: ManualRecord, sources: Any, result: Any, names: dict[int, str]) -> None:
    """Keep ``tape.gradient(target, sources)``'s float gradients, named by their source variables (`names`: the
    step's own names for its variables, by id; else the variable's)."""
    flat_sources = tf.nest.flatten(sources)
    flat_result = tf.nest.flatten(result, expand_composites=False)
    for index, gradient in enumerate(flat_result):
        if gradient is None or not is_float(gradient):
            continue
        source = flat_sources[index] if index < len(flat_sources) else None
        name = names.get(id(source)) or (
            variable_path(source) if hasattr(source, "assign") else f"gradient {index}"
        )
        record.gradients.append((name, gradient))


def writes_ok(record: ManualRecord, losses: list[Any]) -> Any:
    """bool scalar: every loss and gradient recorded so far is finite (one set of checks per new record)."""
    key = (len(losses), len(record.gradients))
    if record._ok_key != key or record.write_ok is None:
        flags = [
            tf.reduce_all(finite_flags(losses)),
            tf.reduce_all(finite_flags([g for _, g in record.gradients])),
        ]
        record.write_ok = tf.logical_and(*flags)
        record._ok_key = key
    return record.write_ok


def held_back(variable: Any, kind: str, value: Any, ok: Any) -> Any:
    """`value` as the write of `kind` should get it: itself when `ok`, else what leaves the variable as it is."""
    if kind.startswith("scatter_"):
        values = tf.convert_to_tensor(value.values, dtype=variable.dtype)
        if kind == "scatter_update":
            keep = tf.gather(variable, value.indices)
        else:
            keep = tf.zeros_like(values)
        return tf.IndexedSlices(tf.where(ok, values, keep), value.indices, value.dense_shape)
    value = tf.convert_to_tensor(value, dtype=variable.dtype)
    keep = variable.read_value() if kind == "assign" else tf.zeros_like(value)
    return tf.where(ok, value, keep)


def inner(variable: Any) -> Any:
    """A keras.Variable's tf.Variable (its own assign methods end there); a tf.Variable as it is."""
    value = getattr(variable, "value", None)
    return value if isinstance(value, tf.Variable) else variable


def ids(variables: list[Any]) -> set[int]:
    """The ids a write is seen under: each variable's and, for a keras.Variable, its tf.Variable's."""
    return {id(v) for variable in variables for v in (variable, inner(variable))}


@contextlib.contextmanager
def watching_writes(decide: Callable[[Any, str, Any], Any | None]) -> Iterator[None]:
    """While the block runs, every write of a tf.Variable (the WRITES methods, on the class: a step makes its
    variables where it likes, and a keras.Variable's writes end in its tf.Variable's) passes its value through
    ``decide(variable, kind, value)`` first, which returns the value to write (None: as given)."""
    from tensorflow.python.ops import resource_variable_ops

    # ResourceVariable (what tf.Variable makes) defines some write methods over BaseResourceVariable's.
    classes = (resource_variable_ops.ResourceVariable, resource_variable_ops.BaseResourceVariable)
    originals = {
        (cls, kind): cls.__dict__[kind] for cls in classes for kind in WRITES if kind in cls.__dict__
    }
    for (cls, kind), original in originals.items():
        setattr(cls, kind, _deciding(kind, original, decide))
    try:
        yield
    finally:
        for (cls, kind), original in originals.items():
            setattr(cls, kind, original)


def _deciding(kind: str, original: Any, decide: Callable[[Any, str, Any], Any | None]) -> Any:
    @tf.autograph.experimental.do_not_convert
    def write(self: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        replaced = decide(self, kind, value)
        return original(self, value if replaced is None else replaced, *args, **kwargs)

    return write


@dataclass
class ManualVerdict:
    """The parts of a step's verdict that its writes by hand give (see `pyadapter.capture.gate.combine`)."""

    grad_names: list[str]
    weight_names: list[str]
    grads_ok: Any
    weights_ok: Any
    applied: Any
    grad_norm: Any = None
    weight_norm: Any = None
    update_norm: Any = None


def update_squares(variable: Any, kind: str, value: Any) -> Any:
    """Half the sum of squares of one write's update (sampled for large ones, as an optimizer's): the value added
    or subtracted, or the new value less the old."""
    if kind.startswith("scatter_"):
        return sampled_half_squares32(
            value.values, tf.gather(variable, value.indices) if kind == "scatter_update" else None
        )
    return sampled_half_squares32(value, variable if kind == "assign" else None)


def manual_verdict(
    record: ManualRecord, check_weights: bool, history: bool, names: dict[int, str]
) -> ManualVerdict:
    """Checks after the step: its gradients, and the variables it wrote (read after the writes: automatic control
    dependencies keep program order)."""
    gradients = [g for _, g in record.gradients]
    written = list(record.written.values()) if check_weights else []
    if history:
        grads_ok, grad_norm = finite_flags_and_norm(gradients)
        weights_ok, weight_norm = finite_flags_and_norm(written)
        if not gradients:
            grad_norm = tf.constant(NOT_MEASURED)
        if not written:
            weight_norm = tf.constant(NOT_MEASURED)
    else:
        grads_ok, grad_norm = finite_flags(gradients), None
        weights_ok, weight_norm = (finite_flags([dense(w) for w in written]) if written else ones(0)), None
    applied = record.write_ok if record.write_ok is not None else tf.constant(False)
    update_norm = (
        tf.sqrt(2.0 * tf.add_n(record.update_squares)) if history and record.update_squares else None
    )
    return ManualVerdict(
        grad_names=[name for name, _ in record.gradients],
        weight_names=[names.get(id(w)) or variable_path(w) for w in written],
        grads_ok=grads_ok,
        weights_ok=weights_ok,
        applied=applied,
        grad_norm=grad_norm,
        weight_norm=weight_norm,
        update_norm=update_norm,
    )
