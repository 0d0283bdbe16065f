"""The in-graph gate: inside the compiled step, apply an update only if the loss and gradients are finite.

While a guarded step is traced (or run eagerly), hooks sit on the optimizer and the model:

- ``optimizer.scale_loss`` and ``model.compute_loss`` record the losses the step computes (Keras's own
  ``train_step`` and most custom ones go through them);
- ``optimizer.apply`` (which ``apply_gradients`` calls) becomes ``tf.cond(all finite, apply, skip)``. The
  check covers the recorded losses and every gradient, and after an applied update the trainable weights.

With a ``LossScaleOptimizer`` non-finite gradients are its normal business (it halves the scale and skips the
step itself), so only the losses and weights are judged. Under a ``tf.distribute`` strategy with several
replicas (MirroredStrategy, MultiWorkerMirroredStrategy) the replicas' flags are all-reduced first, so every
replica on every worker takes the same branch and none applies a failing update.

The hooks are instance attributes present only while the step is being traced; the graph they produce keeps the
gate. Healthy steps cost a few reductions and one `If`; nothing leaves the device.

With ``GateConfig(history=True)`` the step also measures what `pyadapter.capture.history` keeps of it (global
gradient norm, weight norm, update norm, max |y_pred|) as one float32 vector, ``Verdict.metrics``. The gradient
and weight checks then reduce each tensor to its sum of squares instead of its sum, so the norms cost no extra
pass over them (see `finite_flags_and_norm` for why the verdict stays the same); the optimizer's writes to
the checked weights are watched to measure the update without keeping a copy of the weights. Off: not one op more.

This module holds the hooks and the verdict; the checks are in `gate_checks`, the gated update in `gate_update`,
tf_keras's hooks in `gate_tf_keras`.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import tensorflow as tf

from pyadapter.capture import gate_manual, gate_tf_keras, keras_lines, tape_targets
from pyadapter.capture.gate_checks import (
    NOT_MEASURED,
    combine_norms,
    dense,
    finite_flags,
    finite_flags_and_norm,
    forward_state_flags,
    is_float,
    max_abs,
    ones,
    rare_cond,
    too_large_to_square,
)
from pyadapter.capture.gate_update import Gate, gate_update, undo_if_step_failed, watched_assign
from pyadapter.capture.snapshot import non_finite_variables, unique, variable_path
from pyadapter.capture.verdict import NonFiniteReport

# The in-graph checks (gate_checks) and the gated update (gate_update) live apart; these names are part of what
# the gate offers (tests check finite_flags and finite_flags_and_norm directly).
__all__ = [
    "GateConfig",
    "GateMeta",
    "GuardError",
    "Verdict",
    "combine",
    "finite_flags",
    "finite_flags_and_norm",
    "hooks",
    "is_loss_scale_optimizer",
    "local_ok",
    "record_loss",
    "report",
    "train_step_keeping_metrics",
    "written_by_hand",
]


class GuardError(RuntimeError):
    """NanGuard cannot guard this step (e.g. the update runs in a nested tf.function)."""


@dataclass(frozen=True)
class GateConfig:
    """What the gate checks. Part of the traced graph, so a change needs a new trace."""

    check_weights: bool = True
    protect_weights: bool = False
    history: bool = False  # measure the step's history metrics (Verdict.metrics)


class Verdict(NamedTuple):
    """Tensors a guarded step returns next to its own outputs (combined over replicas)."""

    ok: Any  # bool scalar: every check passed
    loss_ok: Any  # bool scalar: every recorded loss finite
    grads_ok: Any  # bool [G]: per checked gradient (names in GateMeta.grad_names)
    weights_ok: Any  # bool [W]: per trainable weight after an applied update (GateMeta.weight_names)
    applied: Any  # bool scalar: the update reached the variables
    # float32 scalar: this step's loss (sum over replicas of the first recorded loss); 0.0 when the step recorded
    # none (GateMeta.has_loss is the flag). Finite on purpose: a NaN constant in the graph would trip
    # tf.debugging.enable_check_numerics at the guard instead of at the user's bug.
    loss: Any
    # bool scalar: this process's replicas' own loss and gradients were finite. Under MultiWorkerMirroredStrategy
    # ``ok`` is the whole cluster's verdict; this says whether this worker's data was among the bad.
    local_ok: Any
    # float32 [5] (history.METRICS: gradient norm, weight norm, update norm, max |y_pred|, learning rate; -1.0
    # where not measured) with GateConfig(history=True); else None.
    metrics: Any = None
    # bool scalar: every gated optimizer's constant learning rate was finite; None when no rate is a variable.
    rate_ok: Any = None


@dataclass
class GateMeta:
    """Static facts of the most recent trace, to name what a failing verdict points at."""

    grad_names: list[str] = field(default_factory=list)
    weight_names: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    gated: bool = False  # an optimizer update was found and gated
    forward_names: list[str] = field(default_factory=list)  # those of weight_names the forward pass writes
    # those of forward_names the step wrote after its optimizer update (a center loss's ``centers.assign_sub``)
    written_after_update: list[str] = field(default_factory=list)

    @property
    def has_loss(self) -> bool:
        """Whether the step recorded a loss (else Verdict.loss is a 0.0 placeholder, not a loss)."""
        return "loss" in self.checked


@dataclass
class _Record:
    losses: list[Any] = field(default_factory=list)
    gates: list[Gate] = field(default_factory=list)
    output_max: list[Any] = field(default_factory=list)  # max |y_pred| per compute_loss call (history on)
    manual: gate_manual.ManualRecord = field(default_factory=gate_manual.ManualRecord)  # writes by hand
    # what optimizer.scale_loss returned: the scaled loss, not the loss
    scaled: list[Any] = field(default_factory=list)
    # id -> (variable, its value before the step's first write): the model's own non-trainable state the forward
    # pass writes (BatchNormalization's moving statistics), put back when the step fails
    forward_saved: dict[int, tuple[Any, Any]] = field(default_factory=dict)
    # ids of those the step wrote after an optimizer update of its own (a center loss's ``centers.assign_sub`` after
    # apply_gradients): when such a write fails the step, that update is taken back too (`combine`)
    written_after_update: set[int] = field(default_factory=set)


class RepeatedUpdate(GuardError):
    """Raised while a step is traced: its one optimizer updates a second time (a WGAN critic's extra steps), and no
    copy of the state was kept before the first update, so a failing step could not be taken back whole. The
    caller traces the step again with ``hooks(..., copy_before_updates=True)`` (`GuardedTrainFunction`). On its way
    out of tf.function and ``strategy.run`` AutoGraph turns it into a StagingError: the caller learns of it from the
    ``on_repeated_update`` callback instead."""


class StateWrittenAfterUpdate(RepeatedUpdate):
    """Raised while a step is traced: it writes the model's non-trainable state after its optimizer update (a center
    loss's ``self.centers.assign_sub(...)`` after apply_gradients), and no copy was kept before the update, so a
    failing write could not take the update back. Handled as `RepeatedUpdate`: the step is traced again with
    copies."""


class _CallScope:
    """The records of one guarded call being traced, one per thread (MirroredStrategy traces each replica in its
    own thread)."""

    def __init__(
        self,
        config: GateConfig,
        several_optimizers: bool = False,
        manual_names: dict[int, str] | None = None,
        copy_before_updates: bool = False,
        on_repeated_update: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        self.several_optimizers = several_optimizers
        # Each update keeps a copy of what it changes, to take back a step of several updates whole: always with
        # several optimizers; with one, once a trace found it applied more than once (`RepeatedUpdate`).
        self.keeps_copies = several_optimizers or copy_before_updates
        self.on_repeated_update = on_repeated_update
        # Not None: the step updates its variables by hand (no optimizer); their names by id (`gate_manual`).
        self.manual_names = manual_names
        self._records: dict[int, _Record] = {}
        self._lock = threading.Lock()
        # The guarded call's own graph while it is traced (None when it runs eagerly): an update traced in another
        # graph is inside a branch of the step (`_BranchGate`).
        self.graph: Any = None

    def record(self) -> _Record:
        ident = threading.get_ident()
        with self._lock:
            return self._records.setdefault(ident, _Record())

    def records(self) -> list[_Record]:
        with self._lock:
            return list(self._records.values())


_active: _CallScope | None = None


def is_loss_scale_optimizer(optimizer: Any) -> bool:
    if keras_lines.is_loss_scale_optimizer(optimizer):  # tf_keras's (looked up, never imported)
        return True
    try:
        import keras
    except ImportError:
        return False
    return isinstance(optimizer, keras.optimizers.LossScaleOptimizer)


# ---- hooks --------------------------------------------------------------------------------------------------


def _recording(original: Any, takes_loss_argument: bool) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        scope = _active
        if scope is not None:
            loss = (args[0] if args else kwargs.get("loss")) if takes_loss_argument else result
            if loss is not None and is_float(loss):
                scope.record().losses.append(loss)
            if takes_loss_argument:
                scope.record().scaled.append(result)
            if scope.config.history and not takes_loss_argument:
                # compute_loss(x, y, y_pred, sample_weight, training): the history's max |y_pred|
                y_pred = args[2] if len(args) > 2 else kwargs.get("y_pred")
                if y_pred is not None:
                    scope.record().output_max.append(max_abs(y_pred))
        return result

    return wrapper


def _gated_apply(optimizer: Any, original_apply: Any) -> Any:
    loss_scaling = is_loss_scale_optimizer(optimizer)

    def apply(grads: Any, trainable_variables: Any = None) -> Any:
        scope = _active
        if scope is None:
            return original_apply(grads, trainable_variables)
        grads = list(grads)
        if not grads:
            return original_apply(grads, trainable_variables)
        if trainable_variables is None:
            if not optimizer.built:
                return original_apply(grads, trainable_variables)  # Keras raises its own clear error
            variables = list(optimizer._trainable_variables)
        else:
            trainable_variables = list(trainable_variables)
            variables = trainable_variables
            if not optimizer.built:
                # As BaseOptimizer.apply does, outside the cond so the variables are created once; and outside the
                # trace (init_scope), so that they hold their initial values even when this trace is abandoned
                # (`RepeatedUpdate`) and the step traced again.
                import keras

                with tf.init_scope(), keras.name_scope(optimizer.name, caller=optimizer):
                    optimizer.build(variables)
                optimizer.built = True
        record = scope.record()
        if record.gates and not scope.keeps_copies and scope.on_repeated_update is not None:
            scope.on_repeated_update()
            raise RepeatedUpdate(f"{type(optimizer).__name__} updates more than once in one step")
        gate = gate_update(
            optimizer,
            original_apply,
            grads,
            trainable_variables,
            variables,
            list(record.losses),
            scope.config,
            check_grads=not loss_scaling,
            keep_backup=scope.keeps_copies,
            # What the forward pass wrote before this update (BatchNormalization's moving variance of a batch whose
            # variance overflowed): an update is not applied over it (`combine` names it and puts it back).
            forward_state=list(record.forward_saved.values()) if scope.config.check_weights else [],
        )
        if scope.graph is not None and tf.compat.v1.get_default_graph() is not scope.graph:
            gate = _BranchGate.export(gate, optimizer, len(record.gates)) or gate
        record.gates.append(gate)
        return None

    return apply


def forward_state_variables(models: list[Any]) -> list[Any]:
    """The float non-trainable variables of `models` that are not metrics': what a forward pass may write (a
    BatchNormalization's moving mean and variance). None under several replicas (each writes its own copy)."""
    context = tf.distribute.get_replica_context()
    if tf.distribute.has_strategy() and (context is None or context.num_replicas_in_sync > 1):
        return []
    metrics = {id(v) for m in models for v in keras_lines.metrics_variables(m)}
    found = []
    for model in models:
        try:
            held = list(getattr(model, "non_trainable_variables", None) or [])
        except ValueError:  # tf_keras: a model not built yet (a Sequential with no input shape) lists none
            held = []
        # A stateful RNN's state (`keras_lines.rnn_states`) too: a failing step's forward pass wrote it.
        for variable in [*held, *keras_lines.rnn_states(model)]:
            if id(variable) not in metrics and is_float(variable):
                found.append(variable)
    return unique(found)


def _refused_v1_update(*args: Any, **kwargs: Any) -> Any:
    # A tf.compat.v1.train optimizer writes with its own kernels (ResourceApplyGradientDescent...), past the
    # variables' assign methods that a step without a Keras optimizer is gated at: refused rather than let through
    # unchecked while the guard says the update was not applied.
    raise GuardError(
        "guard_step cannot gate a tf.compat.v1.train optimizer's update; use the Keras optimizer of the same "
        "name (keras.optimizers.SGD, Adam...) and pass it as optimizer=, or write the update with assign_sub"
    )


def _in_graph(graph: Any) -> bool:
    """Whether the code running now is traced in `graph` itself (not a function or a branch inside it)."""
    return (None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()) is graph


def _deciding_writes(
    graph: Any, forward: set[int], manual: set[int] | None, known: Callable[[], list[Any]] | None
) -> Any:
    """`gate_manual.watching_writes`'s `decide` for one traced guarded step: what each write of a float variable in
    the step's own graph does.

    - `forward` (a model's non-trainable state a forward pass writes: BatchNormalization's moving statistics): the
      value before the step's first write is kept, put back when the step fails (`combine`); the write goes on. A
      write after the step's optimizer update (`StateWrittenAfterUpdate`) takes that update back with it.
    - `manual` (the variables of a step with no optimizer): written only when the losses and gradients recorded
      before the write are finite (`gate_manual.held_back`), their updates measured with history on.
    - with `known` (guard_step's and fit's: the models', optimizers' and metrics' variables, which the gate and the
      metric restore take care of), any other variable (an accumulator of gradients, ``acc.assign_add(g)``)
      likewise. `known` is listed again at a write to a variable it did not list: a step's first trace makes
      variables it knows (Keras's compile metrics, built at their first update).
    Writes elsewhere (an optimizer's, inside the gate's branch) go as written."""
    known_ids: set[int] = set()

    def is_known(variable: Any) -> bool:
        if known is None or id(variable) in known_ids:
            return True
        known_ids.update(gate_manual.ids(list(known())))
        return id(variable) in known_ids

    def decide(variable: Any, kind: str, value: Any) -> Any:
        scope = _active
        if scope is None:
            return None
        if not is_float(variable):
            # A counter the step keeps (``micro_step.assign_add(1)`` deciding ``if micro_step % 4 == 0``): state a
            # re-run of the step starts from, as the accumulators it counts for.
            if (
                known is not None
                and not is_known(variable)
                and (manual is None or id(variable) not in manual)
                and _in_graph(graph)
                and not tf.distribute.has_strategy()
            ):
                counters = (
                    scope.record().manual.counters
                )  # (a record is made per thread: only when one is kept)
                if id(variable) not in counters:
                    counters[id(variable)] = (variable, tf.identity(variable.read_value()))
            return None
        here = None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()
        by_hand = manual is not None and id(variable) in manual
        if by_hand and here is not graph:
            raise GuardError(
                "the step's update ran inside a nested tf.function; remove @tf.function from the inner step "
                "(the guarded function is compiled already)"
            )
        if here is not graph:
            return None
        record = scope.record()
        if id(variable) in forward:
            if record.gates:
                # The step's own write after its update (s42e p3: a center loss's ``centers.assign_sub`` of 0/0): a
                # failing write is the step's, and the update before it is taken back with it (`combine`), which
                # needs a copy from before the update. Steps that write nothing after theirs keep none.
                if not scope.keeps_copies and scope.on_repeated_update is not None:
                    scope.on_repeated_update()
                    raise StateWrittenAfterUpdate(f"{variable_path(variable)} is written after the update")
                record.written_after_update.add(id(variable))
            if id(variable) not in record.forward_saved:
                record.forward_saved[id(variable)] = (variable, tf.identity(variable.read_value()))
            return None
        if not by_hand and is_known(variable):
            return None
        context = tf.distribute.get_replica_context()
        if tf.distribute.has_strategy() and context is not None and context.num_replicas_in_sync > 1:
            if not by_hand:
                return None  # each replica writes its own copy: as written
            raise GuardError(
                "guard_step cannot gate variables updated by hand under a tf.distribute strategy with several "
                "replicas; update them with a Keras optimizer (optimizer.apply_gradients)"
            )
        ok = gate_manual.writes_ok(record.manual, record.losses)
        if not by_hand and id(variable) not in record.manual.others_saved:
            record.manual.others_saved[id(variable)] = (variable, tf.identity(variable.read_value()))
        record.manual.written[id(variable)] = variable  # part of the step's state (the window restores it)
        value = gate_manual.held_back(variable, kind, value, ok)
        if by_hand and scope.config.history:
            record.manual.update_squares.append(gate_manual.update_squares(variable, kind, value))
        return value

    return decide


def _listing(variables: list[Any] | Callable[[], list[Any]] | None) -> Callable[[], list[Any]]:
    """`variables` as a function listing them (a list is listed as it is)."""
    if callable(variables):
        return variables
    listed = list(variables or [])
    return lambda: listed


@contextlib.contextmanager
def hooks(
    optimizers: list[Any],
    models: list[Any],
    config: GateConfig,
    manual_variables: list[Any] | None = None,
    manual_names: dict[int, str] | None = None,
    known_variables: list[Any] | Callable[[], list[Any]] | None = None,
    copy_before_updates: bool = False,
    on_repeated_update: Callable[[], None] | None = None,
) -> Iterator[_CallScope]:
    """Installs the recording and gating hooks on `optimizers` and `models` while a guarded step is traced (or
    run eagerly); yields the scope that collects what the step recorded. With `manual_variables` (a step with no
    optimizer), their writes are gated instead (`gate_manual`), named by `manual_names`. With `known_variables`
    (guard_step's and fit's models', optimizers' and metrics' variables, or a function listing them), writes to any
    other variable in the step are held back on a failing step too (`_deciding_writes`). `copy_before_updates`: each optimizer update keeps a copy of
    what it changes (as with several optimizers); `on_repeated_update`: when no copies are kept, a second update by
    the one optimizer calls it and raises `RepeatedUpdate`, for the caller to trace again with copies."""
    global _active
    if _active is not None:
        raise GuardError("a guarded step is already being traced (nested NanGuard / guard_step)")
    manual = manual_variables is not None
    scope = _CallScope(
        config,
        several_optimizers=len(unique(optimizers)) > 1,
        manual_names=dict(manual_names or {}) if manual else None,
        copy_before_updates=copy_before_updates,
        on_repeated_update=on_repeated_update,
    )
    patched: list[tuple[Any, str, Any]] = []
    missing = object()

    def patch(obj: Any, name: str, make: Any) -> None:
        if obj is None or not callable(getattr(obj, name, None)):
            return
        previous = obj.__dict__.get(name, missing)
        obj.__dict__[name] = make(getattr(obj, name))  # bypasses Keras/TF attribute tracking
        patched.append((obj, name, previous))

    for optimizer in unique(optimizers):
        if keras_lines.is_tf_keras(
            optimizer
        ):  # tf_keras updates through apply_gradients, scales with get_scaled_loss
            gate_tf_keras.patch_optimizer(optimizer, patch, lambda: _active, _recording)
            continue
        patch(optimizer, "apply", lambda original, o=optimizer: _gated_apply(o, original))
        patch(optimizer, "scale_loss", lambda original: _recording(original, takes_loss_argument=True))
    for model in unique(models):
        patch(model, "compute_loss", lambda original: _recording(original, takes_loss_argument=False))
    if config.history or config.check_weights:
        # The optimizer's writes to the checked weights: their size (history) and which rows a sparse update wrote
        # (the weights check then reads those rows, not the table). A LossScaleOptimizer's inner optimizer is the
        # one that writes the weights.
        writers = unique(
            [w for o in optimizers for w in (o, getattr(o, "inner_optimizer", None)) if w is not None]
        )
        for writer in writers:
            for kind in ("assign", "assign_add", "assign_sub"):
                patch(writer, kind, lambda original, k=kind: watched_assign(original, k))
    # A scalar the step differentiates is a loss too (see tape_targets); under loss scaling, not one that
    # optimizer.scale_loss returned: overflowing the scaled loss is the LossScaleOptimizer's business. A custom
    # train_step that never calls scale_loss (Keras 3 wraps the optimizer at compile under mixed_float16, unasked)
    # differentiates its own loss, and an Inf there went unseen: 3 epochs of "loss: inf", no stop.
    names = scope.manual_names or {}
    others = known_variables is not None
    targets = (
        tape_targets.recording(_record_unless_scaled)
        if any(is_loss_scale_optimizer(o) for o in optimizers)
        else tape_targets.recording(
            record_loss,
            (
                lambda sources, result: gate_manual.record_gradients(
                    scope.record().manual, sources, result, names
                )
            )
            if manual or others
            else None,
        )
    )
    graph = None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()
    writes = gate_manual.watching_writes(
        _deciding_writes(
            graph,
            forward=gate_manual.ids(forward_state_variables(unique(models))),
            manual=gate_manual.ids(list(manual_variables or [])) if manual else None,
            known=_listing(known_variables) if others else None,
        )
    )
    v1_optimizer = tf.compat.v1.train.Optimizer
    v1_apply = v1_optimizer.__dict__["apply_gradients"]
    if manual:
        v1_optimizer.apply_gradients = _refused_v1_update  # the class: the step may make its optimizer late
    scope.graph = graph
    _active = scope
    try:
        with targets, writes:
            yield scope
    finally:
        _active = None
        if manual:
            v1_optimizer.apply_gradients = v1_apply
        for obj, name, previous in reversed(patched):
            if previous is missing:
                obj.__dict__.pop(name, None)
            else:
                obj.__dict__[name] = previous


def train_step_keeping_metrics(train_step: Any, data: Any, metric_variables: list[Any]) -> Any:
    """``train_step(data)`` inside a guarded step; when the gate rejects the step, the metric variables are put back
    as they were (skip mode: a skipped batch leaves no trace in the epoch's metrics). Without metric variables it is
    just the call."""
    saved = [(v, tf.identity(dense(v))) for v in metric_variables]
    logs = train_step(data)
    scope = _active
    if saved and scope is not None:

        def restore() -> Any:
            for variable, value in saved:
                variable.assign(value)
            return tf.constant(False)

        rare_cond(local_ok(scope), lambda: tf.constant(True), restore)
    return logs


def _record_unless_scaled(target: Any) -> Any:
    """`record_loss` of a differentiated scalar, unless optimizer.scale_loss made it (the scaled loss, whose
    argument is recorded already)."""
    scope = _active
    if scope is not None and any(target is scaled for scaled in scope.record().scaled):
        return target
    return record_loss(target)


def record_loss(loss: Any) -> Any:
    """Adds `loss` to the checks of the guarded step being traced (no-op elsewhere); returns `loss`.

    For custom steps that compute their loss without ``model.compute_loss`` / ``optimizer.scale_loss``: call it
    before ``optimizer.apply`` so a non-finite loss blocks the update even when the gradients are finite.
    """
    scope = _active
    if scope is not None and loss is not None and is_float(loss):
        scope.record().losses.append(loss)
    return loss


# ---- combining what the replicas recorded -------------------------------------------------------------------


def _same_graph(values: list[Any]) -> bool:
    if tf.executing_eagerly():
        return True
    graph = tf.compat.v1.get_default_graph()
    for value in values:
        owner = getattr(value, "graph", None)
        if owner is not None and owner is not graph:
            # A FuncGraph may be built inside `graph` (cond branches are not, their outputs are): accept outer
            # graphs of the current one only.
            return False
    return True


def written_by_hand(scope: _CallScope) -> list[Any]:
    """The variables the traced step wrote itself (not through an optimizer): part of its state."""
    return unique(
        [
            v
            for r in scope.records()
            for v in [*r.manual.written.values(), *(c for c, _ in r.manual.counters.values())]
        ]
    )


def local_ok(scope: _CallScope) -> Any:
    """This thread's (replica's) verdict so far: all gates ok and all losses finite. For in-replica use."""
    record = scope.record()
    flags = [gate.ok for gate in record.gates]
    if not record.gates:
        flags.append(tf.reduce_all(finite_flags(record.losses)))
    return tf.reduce_all(tf.stack(flags))


def _all(flags: list[Any]) -> Any:
    """AND of boolean tensors, without ops for the common single-tensor case."""
    unique = list({id(f): f for f in flags}.values())
    if not unique:
        return tf.constant(True)
    return unique[0] if len(unique) == 1 else tf.reduce_all(tf.stack(unique), axis=0)


def _scalar_loss(value: Any) -> Any:
    value = dense(value)
    if value.shape.rank != 0:
        value = tf.reduce_mean(value)
    return value if value.dtype == tf.float32 else tf.cast(value, tf.float32)


class _BranchGate(Gate):
    """A gate traced inside a branch of the step (``if micro_step % 4 == 0: optimizer.apply_gradients(...)``, a
    tf.cond under autograph): its flags are tensors of the branch's graph, out of reach of the call's. The branch
    writes them to variables (made once, outside the trace), which `combine` reads in the call's graph after the
    branch and sets back to their resting values (ok, nothing applied) for the steps that do not take it; without
    this such an update was refused in silence (0/0 of an empty accumulation: no stop, no bundle)."""

    # optimizer -> (its n-th update in a step -> the variables): tf.function makes variables on its first trace
    # only, and a step is traced again (another batch shape, guard_step's second trace with copies)
    _held: weakref.WeakKeyDictionary[Any, dict[int, dict[str, Any]]] = weakref.WeakKeyDictionary()
    # The flags a branch exports, each with its value on a call that does not take the branch (ok, nothing applied,
    # nothing measured).
    _RESTING: dict[str, Any] = {
        "ok": True,
        "loss_ok": True,
        "grads_ok": True,
        "weights_ok": True,
        "applied": False,
        "local_ok": True,
        "grad_norm": NOT_MEASURED,
        "weight_norm": NOT_MEASURED,
        "update_norm": NOT_MEASURED,
        "rate_ok": True,
        "learning_rate": NOT_MEASURED,
    }

    @classmethod
    def export(cls, gate: Gate, optimizer: Any, index: int) -> _BranchGate | None:
        """`gate`'s flags written to variables from inside its branch; None where that cannot be done (replicas,
        copies kept for a later update to take back, a flag of unknown shape): the gate stays in its branch."""
        if tf.distribute.has_strategy() or gate.backup:
            return None
        flags = {name: (getattr(gate, name), rest) for name, rest in cls._RESTING.items()}
        try:
            made = cls._held.setdefault(optimizer, {}).get(index, {})
        except TypeError:  # an optimizer no weak reference can point at
            return None
        held: dict[str, Any] = {}
        for name, (value, rest) in flags.items():
            if value is None:
                held[name] = None
                continue
            value = tf.convert_to_tensor(value)
            if not value.shape.is_fully_defined():
                return None
            variable = made.get(name)
            if variable is None:
                try:
                    with tf.init_scope():
                        variable = tf.Variable(
                            tf.fill(value.shape, tf.constant(rest, value.dtype)),
                            trainable=False,
                            name=f"nanlens_{name}",
                        )
                except ValueError:  # a tf.function past its first call makes no variable: the gate stays put
                    return None
            elif variable.shape != value.shape or variable.dtype != value.dtype:
                return None
            held[name] = variable
        cls._held[optimizer][index] = {n: v for n, v in held.items() if v is not None}
        for name, variable in held.items():
            if variable is not None:
                _write_flag(variable, flags[name][0])
        return cls(**{**gate.__dict__, **held})

    def read(self) -> Gate:
        """In the call's graph, after the branch: a gate of the values the branch wrote (or the resting ones), the
        variables set back to rest for the next call."""
        values = {n: getattr(self, n) for n in self._RESTING if getattr(self, n) is not None}
        read = {n: tf.identity(v.read_value()) for n, v in values.items()}
        with tf.control_dependencies(list(read.values())):
            for name, variable in values.items():
                rest = self._RESTING[name]
                _write_flag(variable, tf.fill(variable.shape, tf.constant(rest, variable.dtype)))
        return Gate(**{**self.__dict__, **read})


def _write_flag(variable: Any, value: Any) -> None:
    """The op itself, not ``variable.assign``: the step's writes are watched (`gate_manual.watching_writes`), and
    the guard's own flags are no state of the program's to hold back or to keep in a bundle."""
    tf.raw_ops.AssignVariableOp(resource=variable.handle, value=tf.cast(value, variable.dtype))


def guard_variable_ids() -> set[int]:
    """ids of the variables the guard itself made in steps (`_BranchGate`'s flags): no state of the program's."""
    return {
        id(v) for by_index in _BranchGate._held.values() for held in by_index.values() for v in held.values()
    }


def combine(scope: _CallScope) -> tuple[Verdict, GateMeta]:
    """One verdict from the records of every replica; call after the guarded call returned (same graph).

    Under a merge-call strategy every replica's record holds the same gate tensors (decided once in
    cross-replica context); they are taken once. Without a strategy there is one record: no extra ops."""
    # An update inside a branch of the step (``if step % 4 == 0: optimizer.apply_gradients(...)``, a tf.cond under
    # autograph) gates itself there, but its verdict lives in the branch's graph, out of reach here: such a step is
    # judged on its losses and the gradients its tape took, as a step that applies nothing is.
    in_branch = any(isinstance(g, _BranchGate) for r in scope.records() for g in r.gates)
    records = [
        replace(r, gates=[g.read() if isinstance(g, _BranchGate) else g for g in r.gates])
        for r in scope.records()
    ]
    records = [r if _same_graph([g.ok for g in r.gates]) else replace(r, gates=[]) for r in records]
    meta = GateMeta()
    gate_counts = {len(r.gates) for r in records}
    if len(gate_counts) > 1:
        raise GuardError("replicas applied a different number of optimizer updates in one step")
    n_gates = gate_counts.pop() if gate_counts else 0
    oks, loss_oks, grads, weights, applied, local_oks = [], [], [], [], [], []
    rate_oks = []
    for index in range(n_gates):
        gates = [r.gates[index] for r in records]
        rate_oks += [
            g.rate_ok for g in gates[:1] if g.rate_ok is not None
        ]  # one variable, seen by every replica
        oks.append(_all([g.ok for g in gates]))
        loss_oks.append(_all([g.loss_ok for g in gates]))
        applied.append(_all([g.applied for g in gates]))
        grads.append(_all([g.grads_ok for g in gates]))
        weights.append(_all([g.weights_ok for g in gates]))
        local_oks.append(_all([g.local_ok for g in gates]))
        meta.grad_names += gates[0].grad_names
        meta.weight_names += gates[0].weight_names
    all_losses = [loss for r in records for loss in r.losses]
    if not n_gates:
        loss_oks.append(tf.reduce_all(finite_flags(all_losses)))
    manual = None
    if not n_gates and scope.manual_names is not None and records:
        # A step that updates by hand (one record: several replicas were refused when the writes were traced).
        manual = gate_manual.manual_verdict(
            records[0].manual, scope.config.check_weights, scope.config.history, scope.manual_names
        )
        if manual.grad_names or manual.weight_names or records[0].manual.write_ok is not None:
            grads.append(manual.grads_ok)
            weights.append(manual.weights_ok)
            applied.append(manual.applied)
            meta.grad_names += manual.grad_names
            meta.weight_names += manual.weight_names
        else:
            manual = None
    unapplied = None
    if (not n_gates or in_branch) and manual is None and len(records) == 1 and records[0].manual.gradients:
        # A guard_step call that took gradients and applied none (a micro-step of gradient accumulation by hand),
        # or applied them only in a branch some calls do not take: its gradients are checked all the same; its
        # writes were held back when they were not finite.
        unapplied = finite_flags([g for _, g in records[0].manual.gradients])
        grads.append(unapplied)
        meta.grad_names += [name for name, _ in records[0].manual.gradients]
    meta.gated = n_gates > 0 or manual is not None
    meta.checked = (
        (["loss"] if all_losses else [])
        + (["gradients"] if meta.grad_names else [])
        + (["weights"] if meta.weight_names else [])
    )
    if not _same_graph(oks + loss_oks + applied + grads + weights + all_losses):
        raise GuardError(
            "the optimizer update ran inside a nested tf.function; remove @tf.function from the inner step "
            "(the guarded function is compiled already)"
        )
    forward_ok = None
    if len(records) == 1 and records[0].forward_saved and scope.config.check_weights:
        # The moving statistics the step's forward pass wrote, as they are now: a finite loss and finite gradients
        # can come with an Inf moving variance (a feature in units of 1e20), which validation and predict then read.
        # Read again though `gate_update` read them before its update: a step may run the model again after it
        # (a second forward pass with training=True), and that write is only seen here.
        saved = list(records[0].forward_saved.values())
        written = [v for v, _ in saved]
        forward_flags = forward_state_flags(saved)
        weights.append(forward_flags)
        meta.forward_names = [variable_path(v) for v in written]
        meta.written_after_update = [
            variable_path(v) for v in written if id(v) in records[0].written_after_update
        ]
        meta.weight_names += meta.forward_names
        forward_ok = tf.reduce_all(forward_flags)
    loss_ok = _all(loss_oks)
    ok = _all(oks) if n_gates else loss_ok  # a gate's ok already includes its losses
    if manual is not None:
        local_oks.append(tf.logical_and(loss_ok, tf.reduce_all(manual.grads_ok)))
        ok = tf.logical_and(local_oks[-1], tf.reduce_all(manual.weights_ok))
    if unapplied is not None:
        ok = tf.logical_and(ok, tf.reduce_all(unapplied))
        local_oks.append(ok)
    if forward_ok is not None:
        ok = tf.logical_and(ok, forward_ok)
        local_oks.append(ok)
    if len(records) == 1 and records[0].manual.counters:
        # A failing step is taken back whole: the counters it advanced too (a re-run of it then takes the branch
        # its count decided, ``if micro_step % 4 == 0``, as training did).
        _restore_unless(ok, list(records[0].manual.counters.values()))
    if len(records) == 1 and records[0].manual.others_saved:
        # A failing step leaves the step's own accumulators as they were before it: a write's gate holds back a
        # non-finite value, but not a later branch's reset after the update that failed (gradient accumulation in
        # a train_step: the bundle kept zeros for the 7 micro-steps' sums, s41e p9).
        _restore_unless(ok, list(records[0].manual.others_saved.values()))
    if len(records) == 1 and records[0].forward_saved:
        # A failing step leaves the model's moving statistics as they were: a NaN batch's forward pass wrote NaN
        # into BatchNormalization's, which skip mode's next steps, validation and predict would all read.
        _restore_unless(ok, list(records[0].forward_saved.values()))
    after_update = len(records) == 1 and bool(records[0].written_after_update)
    if (n_gates > 1 or after_update) and len(records) == 1 and any(g.backup for g in records[0].gates):
        # Several updates in one step (a GAN's two optimizers): when any of them fails, the step is not applied
        # at all, so the updates that did go through are taken back. Last first: each copy holds what its update
        # started from, and one optimizer applied several times (a WGAN critic's extra steps) has several copies
        # of the same variables; undone in order, the later copy (after the first update) would be left. So is an
        # update the step's own write after it failed (s42e p3): the bundle then holds the state before the step.
        for gate in reversed(records[0].gates):
            undo_if_step_failed(gate, ok)
        applied = [tf.logical_and(ok, _all(applied))]
    firsts = [_scalar_loss(r.losses[0]) for r in records if r.losses]
    if not firsts:
        loss = tf.constant(0.0, tf.float32)  # a placeholder: meta.has_loss is False
    else:
        loss = firsts[0] if len(firsts) == 1 else tf.add_n(firsts)
    verdict = Verdict(
        ok=ok,
        loss_ok=loss_ok,
        grads_ok=grads[0] if len(grads) == 1 else tf.concat(grads, axis=0) if grads else ones(0),
        weights_ok=weights[0] if len(weights) == 1 else tf.concat(weights, axis=0) if weights else ones(0),
        applied=_all(applied) if applied else tf.constant(False),
        loss=loss,
        local_ok=_all(local_oks) if n_gates or manual is not None or unapplied is not None else loss_ok,
        metrics=_metrics(records, manual) if scope.config.history else None,
        rate_ok=_all(rate_oks) if rate_oks else None,
    )
    return verdict, meta


def _restore_unless(ok: Any, saved: list[tuple[Any, Any]]) -> None:
    def restore() -> Any:
        for variable, value in saved:
            variable.assign(value)
        return tf.constant(False)

    rare_cond(ok, lambda: tf.constant(True), restore)


def _across_gates(norms: list[Any]) -> Any:
    """One norm from each gate's (several optimizers); -1.0 when there is none or one was not measured."""
    if not norms:
        return tf.constant(NOT_MEASURED)
    return norms[0] if len(norms) == 1 else combine_norms(tf.stack(norms))


def _metrics(records: list[_Record], manual: gate_manual.ManualVerdict | None = None) -> Any:
    """The step's history vector (history.METRICS order), float32 [5]."""
    first = records[0].gates if records else []
    if manual is not None:
        grad_norm, weight_norm = manual.grad_norm, manual.weight_norm
        update_norm = manual.update_norm if manual.update_norm is not None else tf.constant(NOT_MEASURED)
    elif len(records) == 1:
        grad_norm = _across_gates([g.grad_norm for g in first])
    else:
        # Several replicas: each saw only its local gradients, not the all-reduced ones that were applied.
        grad_norm = tf.constant(NOT_MEASURED)
    if manual is None:
        # Weights and updates are decided once for all replicas (the first record's are everyone's).
        weight_norm = _across_gates([g.weight_norm for g in first])
        update_norm = _across_gates([g.update_norm for g in first])
    maxima = [m for r in records for m in r.output_max]
    max_abs_output = (
        tf.constant(NOT_MEASURED)
        if not maxima
        else (maxima[0] if len(maxima) == 1 else tf.reduce_max(tf.stack(maxima)))
    )
    # The first optimizer's constant rate (a GAN's generator's, the first update): the rate a divergence names.
    rates = [g.learning_rate for g in first[:1] if g.learning_rate is not None]
    learning_rate = rates[0] if rates and manual is None else tf.constant(NOT_MEASURED)
    return tf.stack([grad_norm, weight_norm, update_norm, max_abs_output, learning_rate])


def report(
    verdict: Verdict, meta: GateMeta, trainable_variables: list[Any], loss_seen_bad: bool = False
) -> NonFiniteReport:
    """The failing step's NonFiniteReport from its verdict (read on failure only)."""
    grads_ok, weights_ok = verdict.grads_ok.numpy(), verdict.weights_ok.numpy()
    failed = [name for name, ok in zip(meta.weight_names, weights_ok, strict=True) if not ok]
    forward = set(meta.forward_names)
    after_update = set(meta.written_after_update)
    result = NonFiniteReport(
        loss=not bool(verdict.loss_ok) or loss_seen_bad,
        # A name once: a step that applies the same optimizer several times (a GAN's critic steps) repeats them.
        gradients=list(
            dict.fromkeys(name for name, ok in zip(meta.grad_names, grads_ok, strict=True) if not ok)
        ),
        weights=[name for name in failed if name not in forward],
        update_applied=bool(verdict.applied),
        checked=list(meta.checked),
        forward_state=[name for name in failed if name in forward and name not in after_update],
        written_after_update=[name for name in failed if name in after_update],
        learning_rate=verdict.rate_ok is not None and not bool(verdict.rate_ok),
    )
    if result.gradients and verdict.metrics is not None:
        result.gradients_too_large = too_large_to_square(float(verdict.metrics.numpy()[0]))
    if (
        not result.update_applied
        and not result.weights
        and not result.forward_state
        and not result.written_after_update
    ):
        # Nothing was applied, so the variables are as the step found them: were they broken already?
        broken = non_finite_variables(trainable_variables)
        if broken:
            result.weights, result.weights_before_step = broken, True
    return result
