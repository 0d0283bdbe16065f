"""The gated update: inside the traced step, ``tf.cond(loss and gradients finite, apply, skip)`` around one
optimizer update, agreed across replicas, with the weights checked (and optionally restored) after it and, with
history on, the update's size measured from what the optimizer writes. `pyadapter.capture.gate`'s hooks call
`gate_update` for each ``optimizer.apply`` / ``apply_gradients`` of a guarded step.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import keras
import tensorflow as tf

from pyadapter.capture.gate_checks import (
    NOT_MEASURED,
    combine_norms,
    dense,
    exact_norms,
    finite_flags,
    finite_flags_and_norm,
    forward_state_flags,
    gather_rows,
    is_float,
    ones,
    rare_cond,
    sampled_half_squares32,
    squares_fit_flags,
)
from pyadapter.capture.snapshot import unique, variable_path

if TYPE_CHECKING:
    from pyadapter.capture.gate import GateConfig


@dataclass
class Gate:
    """One gated optimizer update as traced: what it checked and the flags it returned (per replica)."""

    grad_names: list[str]
    weight_names: list[str]
    ok: Any
    loss_ok: Any
    grads_ok: Any
    weights_ok: Any
    applied: Any
    local_ok: Any  # this replica's own loss and gradients, before the replicas agreed
    # (variable, value before this update): kept when the step updates several optimizers, so that a later update
    # of the same step that fails can take this one back (a GAN's generator update after a NaN discriminator's)
    backup: list[tuple[Any, Any]] = field(default_factory=list)
    # History (GateConfig.history), float32 scalars: L2 norms of this replica's checked gradients, of the checked
    # weights after the update, and of the update itself (-1.0: not measured); None when off.
    grad_norm: Any = None
    weight_norm: Any = None
    update_norm: Any = None
    # bool scalar: the optimizer's constant learning rate (a variable the program may assign between steps) was
    # finite; None for a schedule (a function of the step count, which the window re-runs as it ran)
    rate_ok: Any = None
    # History on, float32 scalar: that constant rate as this update read it (None for a schedule): a program that
    # raises its rate as it trains (a hand schedule's lost minus sign) shows in the history, not only the window.
    learning_rate: Any = None


# ---- measuring the update (history on) ----------------------------------------------------------------------


class _UpdateSink(threading.local):
    """While a gated update runs: the checked weights, and what the optimizer writes into them (the sums of squares
    of the updates with history on; the rows written by sparse updates). Thread-local: MirroredStrategy traces each
    replica in its own thread, so its replicas' writes are not seen here (their weights are checked in full)."""

    def __init__(self) -> None:
        self.targets: dict[int, Any] | None = None
        self.measure = False  # history on: keep `squares`
        self.squares: list[Any] = []  # half sums of squares (L2Loss) of each update
        # id(checked weight) -> the row indices of its sparse (IndexedSlices) writes; `dense`: ids written whole
        self.rows: dict[int, list[Any]] = {}
        self.dense: set[int] = set()
        self.graph: Any = None  # where the update is applied; an update made in a nested one (a
        # LossScaleOptimizer applies inside its own tf.cond) cannot be returned from it: then not measured
        self.complete = True


_update_sink = _UpdateSink()


@contextlib.contextmanager
def _watching_updates(weights: list[Any], measure: bool) -> Iterator[_UpdateSink]:
    targets: dict[int, Any] = {}
    for weight in weights:
        targets[id(weight)] = weight
        inner = getattr(
            weight, "value", None
        )  # Keras's TF optimizer updates the keras.Variable's tf.Variable
        if inner is not None and not callable(inner):
            targets[id(inner)] = weight
    sink = _update_sink
    fields = ("targets", "measure", "squares", "rows", "dense", "graph", "complete")
    previous = [getattr(sink, name) for name in fields]
    sink.targets, sink.measure, sink.squares, sink.rows, sink.dense = targets, measure, [], {}, set()
    sink.graph, sink.complete = _current_graph(), True
    try:
        yield sink
    finally:
        for name, value in zip(fields, previous, strict=True):
            setattr(sink, name, value)


def written_rows(sink: _UpdateSink, weight: Any) -> Any:
    """The row indices the update wrote into `weight` when every write the sink saw was sparse (an SGD step on an
    embedding table: ``scatter_sub`` of the looked-up rows), else None (written whole, or not seen)."""
    rows = sink.rows.get(id(weight))
    if not rows or id(weight) in sink.dense or not sink.complete:
        return None
    return rows[0] if len(rows) == 1 else tf.concat([tf.cast(r, tf.int64) for r in rows], axis=0)


def _current_graph() -> Any:
    return None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()


def watched_assign(original: Any, kind: str) -> Any:
    """optimizer.assign / assign_add / assign_sub that also records the squared size of a checked weight's update.
    ``assign_add``/``assign_sub`` get the update itself (SGD, Adam, RMSprop...); ``assign`` gets the new value, so
    the update is new - old, read before the write (ordered by automatic control dependencies)."""

    def wrapper(variable: Any, value: Any) -> Any:
        sink = _update_sink
        targets = sink.targets
        if targets is not None and id(variable) in targets and _current_graph() is not sink.graph:
            sink.complete = False
        elif targets is not None and id(variable) in targets:
            weight = id(targets[id(variable)])
            if isinstance(value, tf.IndexedSlices):
                sink.rows.setdefault(weight, []).append(value.indices)
            else:
                sink.dense.add(weight)
            if sink.measure:
                # Read before the write (automatic control dependencies keep program order).
                old = variable if kind == "assign" else None
                sink.squares.append(sampled_half_squares32(value, old))
        return original(variable, value)

    return wrapper


# ---- the gate -----------------------------------------------------------------------------------------------

# Keras optimizers whose state keeps no square of the gradient: a finite gradient too large to square is no harm to
# them (`finite_flags_and_norm`'s ``squares_must_fit``); a divergence under them stops at the first non-finite value.
_NO_SQUARES = frozenset({"SGD", "Lion", "Adamax"})


def squares_gradients(optimizer: Any) -> bool:
    """Whether `optimizer` squares the gradients it gets (Adam, RMSprop, Adagrad, ... and any optimizer with
    clipnorm or global_clipnorm, which take their norm); unknown optimizers count as squaring."""
    clips = any(getattr(optimizer, name, None) for name in ("clipnorm", "global_clipnorm"))
    return clips or type(optimizer).__name__ not in _NO_SQUARES


def gate_update(
    optimizer: Any,
    original_apply: Any,
    grads: list[Any],
    variables_arg: Any,
    variables: list[Any],
    losses: list[Any],
    config: GateConfig,
    check_grads: bool,
    keep_backup: bool = False,
    forward_state: list[tuple[Any, Any]] | None = None,
) -> Gate:
    present = [i for i, g in enumerate(grads) if g is not None]
    grad_names = [variable_path(variables[i]) for i in present] if check_grads else []
    checked_weights = (
        [variables[i] for i in present if is_float(variables[i])] if config.check_weights else []
    )
    weight_names = [variable_path(v) for v in checked_weights]
    history = config.history
    replica_context = tf.distribute.get_replica_context()
    several_replicas = (
        tf.distribute.has_strategy()
        and replica_context is not None
        and replica_context.num_replicas_in_sync > 1
    )

    def weights_norm(ok: Any) -> Any:
        # History: the checked weights as they are (a skipped update leaves them).
        if not checked_weights:
            return tf.constant(NOT_MEASURED)
        # In its own function: the skip branch is the one healthy steps do not take (see rare_cond).
        return rare_cond(
            tf.logical_not(ok),
            lambda: combine_norms(exact_norms(checked_weights, finite_flags(checked_weights))),
            lambda: tf.constant(NOT_MEASURED),
        )

    def apply_and_check(do_apply: Any) -> tuple[Any, ...]:
        backup = []
        if config.protect_weights:
            state = [v for v in list(variables) + list(optimizer.variables) if v is not None]
            backup = [(v, tf.identity(dense(v))) for v in state]
        update_norm = tf.constant(NOT_MEASURED)
        # Each replica writes its own copy of the weights: the updates would be counted once per replica.
        with _watching_updates(checked_weights, measure=history and not several_replicas) as sink:
            do_apply()
            if sink.measure and sink.squares and sink.complete:
                # Squares that overflow float32 read as Inf here; history.rows tells that from a non-finite update
                # by the weights after it (finite weights: the update was finite too).
                update_norm = tf.sqrt(2.0 * tf.add_n(sink.squares))
            # A weight the update wrote only some rows of (a sparse update of an embedding table) is checked on
            # those rows: the others are as the last step's check found them. Reading the whole 1M-row table
            # instead doubled an embedding model's step. The history's weight norm samples such a table
            # (`finite_flags_and_norm`).
            written = [written_rows(sink, w) for w in checked_weights]
        checked = [
            w if rows is None else gather_rows(w, rows)
            for w, rows in zip(checked_weights, written, strict=True)
        ]
        if history:
            tables = [
                w if rows is not None else None for w, rows in zip(checked_weights, written, strict=True)
            ]
            weight_flags, weight_norm = finite_flags_and_norm(checked, tables)
            weight_norm = weight_norm if checked_weights else tf.constant(NOT_MEASURED)
        else:
            weight_flags = finite_flags(checked)
        weights_ok = tf.reduce_all(weight_flags)
        if config.protect_weights:

            def undo() -> Any:
                for v, old in backup:
                    v.assign(old)
                return tf.constant(False)

            applied = rare_cond(weights_ok, lambda: tf.constant(True), undo)
        else:
            applied = tf.constant(True)
        if history:
            return weight_flags, applied, weight_norm, update_norm
        return weight_flags, applied

    def skip(ok: Any) -> tuple[Any, ...]:
        if history:
            return ones(len(checked_weights)), tf.constant(False), weights_norm(ok), tf.constant(NOT_MEASURED)
        return ones(len(checked_weights)), tf.constant(False)

    def decide(ok: Any, do_apply: Any, cond: Any = tf.cond) -> tuple[Any, ...]:
        return cond(ok, lambda: apply_and_check(do_apply), lambda: skip(ok))

    grad_norm = None
    squares = squares_gradients(optimizer)
    if history and check_grads:
        grad_flags, grad_norm = finite_flags_and_norm([grads[i] for i in present], squares_must_fit=squares)
    elif check_grads:
        checked = [grads[i] for i in present]
        grad_flags = squares_fit_flags(checked) if squares else finite_flags(checked)
    else:
        grad_flags = ones(0)
        collapsed = _loss_scale_collapsed(optimizer)
        if collapsed is not None and present:
            # A LossScaleOptimizer skips a step whose scaled gradients overflow and halves its scale: its business,
            # while the scale is high. At LOSS_SCALE_FLOOR or below the scaled loss is no larger than the loss, so no
            # overflow the scale made explains non-finite gradients: the model makes them (a -1e9 attention mask
            # cast to float16 is -inf), and the optimizer skipped steps without end, silently, as the scale fell to
            # 1e-3. Judged then as without loss scaling; a healthy scale pays one comparison, not a pass over
            # every gradient (the check runs in the rare branch).
            checked = [grads[i] for i in present]
            grad_flags = rare_cond(collapsed, lambda: finite_flags(checked), lambda: ones(len(checked)))
            grad_names = [variable_path(variables[i]) for i in present]
    if history and grad_norm is None:
        grad_norm = tf.constant(NOT_MEASURED)  # a LossScaleOptimizer's gradients are scaled: not the model's
    loss_ok = tf.reduce_all(finite_flags(losses))
    local_ok = tf.logical_and(loss_ok, tf.reduce_all(grad_flags))
    in_sync = tf.distribute.has_strategy() and replica_context is not None
    if in_sync and replica_context.num_replicas_in_sync > 1:
        # Every replica, on every worker, must take the same branch: the update all-reduces the gradients, so one
        # replica skipping it while another applies would hang the collective (MultiWorkerMirroredStrategy) or
        # diverge the copies. One small all-reduce of "bad" counts gives all replicas the same flags.
        bad = tf.cast(tf.logical_not(tf.concat([tf.reshape(loss_ok, [1]), grad_flags], axis=0)), tf.float32)
        agreed = tf.equal(replica_context.all_reduce(tf.distribute.ReduceOp.SUM, bad), 0.0)
        loss_ok, grad_flags = agreed[0], agreed[1:]
    ok = tf.logical_and(loss_ok, tf.reduce_all(grad_flags))
    rate_ok = _rate_finite(optimizer)
    learning_rate = _rate_value(optimizer) if history else None
    if rate_ok is not None:
        # An Inf rate set between steps (a LearningRateScheduler's lambda at a division by zero) makes finite
        # gradients a non-finite update. Applied, it had to be taken back by re-running the window from its copy,
        # and that copy's rate was the old one: the bundle held a rate and weights training never had, and its
        # replay stayed finite. One scalar read: the update is not applied, and the state is the step's own.
        ok = tf.logical_and(ok, rate_ok)
    if forward_state and not several_replicas:
        # Read after the forward pass's writes (automatic control dependencies keep program order).
        ok = tf.logical_and(ok, tf.reduce_all(forward_state_flags(forward_state)))
    backup: list[tuple[Any, Any]] = []
    if keep_backup and not (in_sync and replica_context.num_replicas_in_sync > 1):
        # Read before the update (automatic control dependencies keep program order): one copy of what this
        # optimizer changes, for models that train several optimizers in one step.
        state = [v for v in list(variables) + list(optimizer.variables) if v is not None]
        backup = [(v, tf.identity(dense(v))) for v in unique(state)]
    needs_merge = in_sync and not tf.__internal__.distribute.strategy_supports_no_merge_call()
    if needs_merge:

        def merge_fn(distribution: Any, ok: Any, grads: Any) -> tuple[Any, Any]:
            agreed_ok = distribution.experimental_local_results(ok)[0]  # the same on every replica

            def do_apply() -> None:  # `grads` is per replica here: each replica applies its own
                distribution.extended.call_for_each_replica(original_apply, args=(grads, variables_arg))

            return decide(agreed_ok, do_apply)

        outcome = replica_context.merge_call(merge_fn, args=(ok, grads))
    else:
        # One replica: the update runs as a function (rare_cond), not lowered into the step. Lowered, every
        # variable, slot and gradient it reads gets a Switch node and every output a Merge, run on every step: with
        # the checks' branches this was 4% of a 70-variable Transformer's CPU step (1M parameters); as a function,
        # 0.6%. Several replicas keep tf.cond: their update all-reduces inside it, across replica threads.
        outcome = decide(
            ok, lambda: original_apply(grads, variables_arg), tf.cond if several_replicas else rare_cond
        )
    weight_flags, applied = outcome[0], outcome[1]
    all_ok = tf.logical_and(ok, tf.reduce_all(weight_flags))
    return Gate(
        grad_names,
        weight_names,
        all_ok,
        loss_ok,
        grad_flags,
        weight_flags,
        applied,
        local_ok,
        backup,
        grad_norm=grad_norm,
        weight_norm=outcome[2] if history else None,
        update_norm=outcome[3] if history else None,
        rate_ok=rate_ok,
        learning_rate=learning_rate,
    )


# Keras's LossScaleOptimizer starts at 2**15, halves on each step that overflows and doubles after 2000 that do not.
LOSS_SCALE_FLOOR = 1.0


def _loss_scale_collapsed(optimizer: Any) -> Any:
    """A bool scalar in the step: a Keras LossScaleOptimizer's dynamic scale is at or below `LOSS_SCALE_FLOOR`
    (tf_keras's stops there, Keras 3's falls on); None for any other optimizer."""
    scale = getattr(optimizer, "dynamic_scale", None)
    if scale is None or not hasattr(scale, "dtype"):
        return None
    return tf.less_equal(tf.cast(scale, tf.float32), LOSS_SCALE_FLOOR)


def _rate_finite(optimizer: Any) -> Any:
    """Whether `optimizer`'s learning rate is finite (a bool scalar in the step): its constant rate, or a Keras
    schedule's at the optimizer's step count; None when it is neither (or not a float)."""
    from pyadapter.capture.learning_rate import learning_rate_variable

    variable = learning_rate_variable(optimizer)
    if variable is None:
        return _scheduled_rate_finite(optimizer)
    if not is_float(variable):
        return None
    return tf.reduce_all(tf.math.is_finite(tf.convert_to_tensor(variable)))


def _scheduled_rate_finite(optimizer: Any) -> Any:
    """Whether a Keras ``LearningRateSchedule`` gives a finite rate at the optimizer's step count, computed in the
    step (a few scalar ops, as the optimizer's own update computes it). The tutorial's Transformer schedule with
    ``warmup_steps=0`` is ``0 ** -1.5 * 0``, NaN, at step 0: the finite gradients made every weight NaN, and a
    model built by its first step had no window copy to take the update back from. None for anything else."""
    inner = getattr(optimizer, "inner_optimizer", None)
    if inner is not None:
        return _scheduled_rate_finite(inner)
    schedule = getattr(optimizer, "_learning_rate", None)
    iterations = getattr(optimizer, "iterations", None)
    if iterations is None or not isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
        return None
    try:
        rate = tf.convert_to_tensor(schedule(iterations))
    except Exception:  # noqa: BLE001 - the check is an addition: a schedule it cannot run is left to the window
        return None
    if not rate.dtype.is_floating:
        return None
    return tf.reduce_all(tf.math.is_finite(rate))


def _rate_value(optimizer: Any) -> Any:
    """`optimizer`'s constant learning rate as a float32 scalar in the step, or None (a schedule, not a float)."""
    from pyadapter.capture.learning_rate import learning_rate_variable

    variable = learning_rate_variable(optimizer)
    if variable is None or not is_float(variable):
        return None
    return tf.cast(tf.reshape(tf.convert_to_tensor(variable), []), tf.float32)


def undo_if_step_failed(gate: Gate, step_ok: Any) -> None:
    def undo() -> Any:
        for variable, value in gate.backup:
            variable.assign(value)
        return tf.constant(True)

    rare_cond(tf.logical_and(tf.logical_not(step_ok), gate.applied), undo, lambda: tf.constant(False))
