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
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import tensorflow as tf

from pyadapter.capture import keras_lines, tape_targets
from pyadapter.capture.snapshot import non_finite_variables, unique, variable_path
from pyadapter.capture.verdict import NonFiniteReport


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
    # float32 [4] (history.METRICS: gradient norm, weight norm, update norm, max |y_pred|; -1.0 where not
    # measured) with GateConfig(history=True); else None.
    metrics: Any = None


@dataclass
class GateMeta:
    """Static facts of the most recent trace, to name what a failing verdict points at."""

    grad_names: list[str] = field(default_factory=list)
    weight_names: list[str] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)
    gated: bool = False  # an optimizer update was found and gated

    @property
    def has_loss(self) -> bool:
        """Whether the step recorded a loss (else Verdict.loss is a 0.0 placeholder, not a loss)."""
        return "loss" in self.checked


@dataclass
class _Gate:
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


@dataclass
class _Record:
    losses: list[Any] = field(default_factory=list)
    gates: list[_Gate] = field(default_factory=list)
    output_max: list[Any] = field(default_factory=list)  # max |y_pred| per compute_loss call (history on)


class _CallScope:
    """The records of one guarded call being traced, one per thread (MirroredStrategy traces each replica in its
    own thread)."""

    def __init__(self, config: GateConfig, several_optimizers: bool = False) -> None:
        self.config = config
        self.several_optimizers = several_optimizers
        self._records: dict[int, _Record] = {}
        self._lock = threading.Lock()

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


# ---- small tensor helpers -----------------------------------------------------------------------------------


def _dense(value: Any) -> Any:
    if isinstance(value, tf.IndexedSlices):
        return value.values
    inner = getattr(value, "value", None)  # keras.Variable -> tf.Variable
    if inner is not None and not isinstance(value, tf.Tensor) and not callable(inner):
        value = inner
    return tf.convert_to_tensor(value)


def _is_float(value: Any) -> bool:
    dtype = getattr(value, "dtype", None)
    try:
        return tf.as_dtype(dtype).is_floating
    except TypeError:
        return False


def _sum32(value: Any) -> Any:
    value = _dense(value)
    if value.dtype not in (tf.float32, tf.float64):
        value = tf.cast(value, tf.float32)  # a float16 sum would overflow at 65504
    if value.shape.rank != 0:
        value = tf.reduce_sum(value)
    return value if value.dtype == tf.float32 else tf.cast(value, tf.float32)


def finite_flags(values: list[Any]) -> Any:
    """bool [len(values)]: whether each tensor is free of NaN/Inf (non-float tensors count as finite).

    One reduction per tensor: the float32 sum of a tensor is NaN/Inf exactly when the tensor holds a NaN or an
    Inf, or when its finite values are so large that their sum overflows (about 3e38), which counts as a failure
    too. That is half the work of is_finite + reduce_all, and this runs on every step."""
    if not values:
        return tf.ones([0], tf.bool)
    sums = [_sum32(v) if _is_float(v) else tf.constant(0.0) for v in values]
    return tf.math.is_finite(tf.stack(sums))


def _ones(n: int) -> Any:
    return tf.ones([n], tf.bool)


# ---- history metrics (GateConfig.history) -------------------------------------------------------------------

_NOT_MEASURED = (
    -1.0
)  # history.NOT_MEASURED: finite on purpose (a NaN constant would trip enable_check_numerics)


def _half_squares32(value: Any) -> Any:
    """float32 half sum of squares of one tensor: one fused L2Loss kernel (no squared copy), computed in float32
    for float16/bfloat16 (which would overflow at 65504); NaN when the tensor holds a NaN, else Inf when it holds
    an Inf or its squares overflow (|x| > ~1.8e19)."""
    value = _dense(value)
    if value.dtype not in (tf.float32, tf.float64):
        value = tf.cast(value, tf.float32)
    half = tf.nn.l2_loss(value)
    return half if half.dtype == tf.float32 else tf.cast(half, tf.float32)


def _exact_norms(values: list[Any], flags: Any) -> Any:
    """float32 [n]: each tensor's L2 norm, also when its squares overflow float32 (scaled by its max |x|). For the
    rare branch only: two more passes over each tensor. A non-finite tensor's is NaN or Inf, as its values are."""
    norms = []
    for index, value in enumerate(values):
        if not _is_float(value):
            norms.append(tf.constant(0.0))
            continue
        plain = tf.sqrt(2.0 * _half_squares32(value))
        value = _dense(value)
        value = value if value.dtype == tf.float32 else tf.cast(value, tf.float32)
        largest = tf.reduce_max(tf.abs(value))
        # where(): both sides are computed, so the unused side must not divide 0 by 0 (a NaN in the graph).
        scale = tf.where(tf.logical_and(flags[index], largest > 0.0), largest, tf.constant(1.0))
        scaled = scale * tf.sqrt(2.0 * tf.nn.l2_loss(value / scale))
        norms.append(tf.where(tf.math.is_finite(plain) | tf.logical_not(flags[index]), plain, scaled))
    return tf.stack(norms)


def combine_norms(norms: Any) -> Any:
    """float32 L2 norm of a vector of norms without overflowing (NaN/Inf as they are; -1.0 if any is -1.0)."""
    largest = tf.reduce_max(norms)
    scale = tf.where(tf.math.is_finite(largest) & (largest > 0.0), largest, tf.constant(1.0))
    scaled = scale * tf.sqrt(tf.reduce_sum(tf.square(norms / scale)))
    total = tf.where(tf.reduce_all(tf.math.is_finite(norms)), scaled, tf.reduce_sum(norms))
    return tf.where(tf.reduce_min(norms) < 0.0, tf.constant(_NOT_MEASURED), total)


def finite_flags_and_norm(values: list[Any]) -> tuple[Any, Any]:
    """(`finite_flags(values)`, float32 L2 norm over all of them), with one reduction per tensor on healthy steps.

    The flags are `finite_flags`'s on every input. Healthy steps reduce each tensor to its sum of squares instead
    of its sum: that is non-finite when the tensor holds NaN/Inf, as the sum is, but also when its values are
    finite and merely large (|x| > ~1.8e19), where `finite_flags` says "finite". Conversely, a finite total of
    squares bounds every |x| by ~1.8e19, so every plain sum (of < 1e19 elements) is finite too and every flag is
    True. So: total finite -> all True; otherwise (a failing step, or huge finite values) the flags come from
    `finite_flags` itself and the norms from `_exact_norms`, in a branch that healthy steps never run."""
    if not values:
        return tf.ones([0], tf.bool), tf.constant(0.0, tf.float32)
    halves = tf.stack([_half_squares32(v) if _is_float(v) else tf.constant(0.0) for v in values])
    total = tf.reduce_sum(halves)

    def exact() -> tuple[Any, Any]:
        flags = finite_flags(values)
        return flags, combine_norms(_exact_norms(values, flags))

    return tf.cond(
        tf.math.is_finite(total), lambda: (tf.ones([len(values)], tf.bool), tf.sqrt(2.0 * total)), exact
    )


def _max_abs(value: Any) -> Any:
    """float32 max |x| over the float leaves of `value` (y_pred may be a dict/list); NaN when any holds NaN (XLA's
    reduce_max drops NaN, so it is added back from the data: no NaN constant); -1.0 when there is none."""
    leaves = [_dense(v) for v in tf.nest.flatten(value) if v is not None and _is_float(v)]
    maxima = []
    for leaf in leaves:
        leaf = leaf if leaf.dtype == tf.float32 else tf.cast(leaf, tf.float32)
        nan_sum = tf.reduce_sum(tf.where(tf.math.is_nan(leaf), leaf, tf.zeros_like(leaf)))  # NaN iff any NaN
        maxima.append(tf.reduce_max(tf.abs(leaf)) + nan_sum)
    if not maxima:
        return tf.constant(_NOT_MEASURED, tf.float32)
    return maxima[0] if len(maxima) == 1 else tf.reduce_max(tf.stack(maxima))


class _UpdateSink(threading.local):
    """While a gated update runs (history on): the checked weights, and the sums of squares of what the
    optimizer writes into them. Thread-local: MirroredStrategy traces each replica in its own thread."""

    def __init__(self) -> None:
        self.targets: dict[int, Any] | None = None
        self.squares: list[Any] = []  # half sums of squares (L2Loss) of each update
        self.graph: Any = None  # where the update is applied; an update made in a nested one (a
        # LossScaleOptimizer applies inside its own tf.cond) cannot be returned from it: then not measured
        self.complete = True


_update_sink = _UpdateSink()


@contextlib.contextmanager
def _watching_updates(weights: list[Any]) -> Iterator[_UpdateSink]:
    targets: dict[int, Any] = {}
    for weight in weights:
        targets[id(weight)] = weight
        inner = getattr(
            weight, "value", None
        )  # Keras's TF optimizer updates the keras.Variable's tf.Variable
        if inner is not None and not callable(inner):
            targets[id(inner)] = weight
    sink = _update_sink
    previous = (sink.targets, sink.squares, sink.graph, sink.complete)
    sink.targets, sink.squares, sink.graph, sink.complete = targets, [], _current_graph(), True
    try:
        yield sink
    finally:
        sink.targets, sink.squares, sink.graph, sink.complete = previous


def _current_graph() -> Any:
    return None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()


def _watched_assign(original: Any, kind: str) -> Any:
    """optimizer.assign / assign_add / assign_sub that also records the squared size of a checked weight's update.
    ``assign_add``/``assign_sub`` get the update itself (SGD, Adam, RMSprop...); ``assign`` gets the new value, so
    the update is new - old, read before the write (ordered by automatic control dependencies)."""

    def wrapper(variable: Any, value: Any) -> Any:
        targets = _update_sink.targets
        if targets is not None and id(variable) in targets and _current_graph() is not _update_sink.graph:
            _update_sink.complete = False
        elif targets is not None and id(variable) in targets:
            update = _dense(value)
            if kind == "assign":
                update = tf.cast(update, _dense(variable).dtype) - _dense(variable)
            _update_sink.squares.append(_half_squares32(update))
        return original(variable, value)

    return wrapper


# ---- hooks --------------------------------------------------------------------------------------------------


def _recording(original: Any, takes_loss_argument: bool) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        scope = _active
        if scope is not None:
            loss = (args[0] if args else kwargs.get("loss")) if takes_loss_argument else result
            if loss is not None and _is_float(loss):
                scope.record().losses.append(loss)
            if scope.config.history and not takes_loss_argument:
                # compute_loss(x, y, y_pred, sample_weight, training): the history's max |y_pred|
                y_pred = args[2] if len(args) > 2 else kwargs.get("y_pred")
                if y_pred is not None:
                    scope.record().output_max.append(_max_abs(y_pred))
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
                # As BaseOptimizer.apply does, outside the cond so the variables are created once.
                import keras

                with keras.name_scope(optimizer.name, caller=optimizer):
                    optimizer.build(variables)
                optimizer.built = True
        record = scope.record()
        gate = _gate(
            optimizer,
            original_apply,
            grads,
            trainable_variables,
            variables,
            list(record.losses),
            scope.config,
            check_grads=not loss_scaling,
            keep_backup=scope.several_optimizers,
        )
        record.gates.append(gate)
        return None

    return apply


class _TfKerasVariables:
    """What the gate reads of an optimizer for its backups: its variables now (as a list, for either tf_keras
    optimizer kind)."""

    def __init__(self, optimizer: Any) -> None:
        self._optimizer = optimizer

    @property
    def variables(self) -> list[Any]:
        return keras_lines.optimizer_variables(self._optimizer)


def _gated_apply_gradients(optimizer: Any, original: Any) -> Any:
    loss_scaling = keras_lines.is_loss_scale_optimizer(optimizer)

    def apply_gradients(grads_and_vars: Any, *args: Any, **kwargs: Any) -> Any:
        scope = _active
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
        gated = _gate(
            _TfKerasVariables(optimizer),
            apply,
            grads,
            variables,
            variables,
            list(record.losses),
            scope.config,
            check_grads=not loss_scaling,
            keep_backup=scope.several_optimizers,
        )
        record.gates.append(gated)
        return optimizer.iterations

    return apply_gradients


def _patch_tf_keras_optimizer(optimizer: Any, patch: Any) -> None:
    """The gate's hooks on a tf_keras optimizer (it updates through ``apply_gradients(grads_and_vars)`` and scales
    losses with ``get_scaled_loss``), through `hooks`'s ``patch(obj, name, make)``."""
    patch(optimizer, "apply_gradients", lambda original: _gated_apply_gradients(optimizer, original))
    patch(optimizer, "get_scaled_loss", lambda original: _recording(original, takes_loss_argument=True))


@contextlib.contextmanager
def hooks(optimizers: list[Any], models: list[Any], config: GateConfig) -> Iterator[_CallScope]:
    """Installs the recording and gating hooks on `optimizers` and `models` while a guarded step is traced (or
    run eagerly); yields the scope that collects what the step recorded."""
    global _active
    if _active is not None:
        raise GuardError("a guarded step is already being traced (nested NanGuard / guard_step)")
    scope = _CallScope(config, several_optimizers=len(unique(optimizers)) > 1)
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
            _patch_tf_keras_optimizer(optimizer, patch)
            continue
        patch(optimizer, "apply", lambda original, o=optimizer: _gated_apply(o, original))
        patch(optimizer, "scale_loss", lambda original: _recording(original, takes_loss_argument=True))
    for model in unique(models):
        patch(model, "compute_loss", lambda original: _recording(original, takes_loss_argument=False))
    if config.history:
        # A LossScaleOptimizer's inner optimizer is the one that writes the weights.
        writers = unique(
            [w for o in optimizers for w in (o, getattr(o, "inner_optimizer", None)) if w is not None]
        )
        for writer in writers:
            for kind in ("assign", "assign_add", "assign_sub"):
                patch(writer, kind, lambda original, k=kind: _watched_assign(original, k))
    # A scalar the step differentiates is a loss too (see tape_targets); not under loss scaling, where the
    # differentiated loss is the scaled one and overflowing it is the LossScaleOptimizer's business.
    targets = (
        contextlib.nullcontext()
        if any(is_loss_scale_optimizer(o) for o in optimizers)
        else tape_targets.recording(record_loss)
    )
    _active = scope
    try:
        with targets:
            yield scope
    finally:
        _active = None
        for obj, name, previous in reversed(patched):
            if previous is missing:
                obj.__dict__.pop(name, None)
            else:
                obj.__dict__[name] = previous


def train_step_keeping_metrics(train_step: Any, data: Any, metric_variables: list[Any]) -> Any:
    """``train_step(data)`` inside a guarded step; when the gate rejects the step, the metric variables are put back
    as they were (skip mode: a skipped batch leaves no trace in the epoch's metrics). Without metric variables it is
    just the call."""
    saved = [(v, tf.identity(_dense(v))) for v in metric_variables]
    logs = train_step(data)
    scope = _active
    if saved and scope is not None:

        def restore() -> Any:
            for variable, value in saved:
                variable.assign(value)
            return tf.constant(False)

        tf.cond(local_ok(scope), lambda: tf.constant(True), restore)
    return logs


def record_loss(loss: Any) -> Any:
    """Adds `loss` to the checks of the guarded step being traced (no-op elsewhere); returns `loss`.

    For custom steps that compute their loss without ``model.compute_loss`` / ``optimizer.scale_loss``: call it
    before ``optimizer.apply`` so a non-finite loss blocks the update even when the gradients are finite.
    """
    scope = _active
    if scope is not None and loss is not None and _is_float(loss):
        scope.record().losses.append(loss)
    return loss


# ---- the gate -----------------------------------------------------------------------------------------------


def _gate(
    optimizer: Any,
    original_apply: Any,
    grads: list[Any],
    variables_arg: Any,
    variables: list[Any],
    losses: list[Any],
    config: GateConfig,
    check_grads: bool,
    keep_backup: bool = False,
) -> _Gate:
    present = [i for i, g in enumerate(grads) if g is not None]
    grad_names = [variable_path(variables[i]) for i in present] if check_grads else []
    checked_weights = (
        [variables[i] for i in present if _is_float(variables[i])] if config.check_weights else []
    )
    weight_names = [variable_path(v) for v in checked_weights]
    history = config.history
    replica_context = tf.distribute.get_replica_context()
    several_replicas = (
        tf.distribute.has_strategy()
        and replica_context is not None
        and replica_context.num_replicas_in_sync > 1
    )

    def weights_norm() -> Any:  # history: the checked weights as they are (a skipped update leaves them)
        if not checked_weights:
            return tf.constant(_NOT_MEASURED)
        return combine_norms(_exact_norms(checked_weights, finite_flags(checked_weights)))

    def apply_and_check(do_apply: Any) -> tuple[Any, ...]:
        backup = []
        if config.protect_weights:
            state = [v for v in list(variables) + list(optimizer.variables) if v is not None]
            backup = [(v, tf.identity(_dense(v))) for v in state]
        update_norm = tf.constant(_NOT_MEASURED)
        if history and not several_replicas:
            # Each replica writes its own copy of the weights: the updates would be counted once per replica.
            with _watching_updates(checked_weights) as sink:
                do_apply()
                update_halves, complete = list(sink.squares), sink.complete
            if update_halves and complete:
                # Squares that overflow float32 read as Inf here; history.rows tells that from a non-finite update
                # by the weights after it (finite weights: the update was finite too).
                update_norm = tf.sqrt(2.0 * tf.add_n(update_halves))
        else:
            do_apply()
        if history:
            weight_flags, weight_norm = finite_flags_and_norm(checked_weights)
            weight_norm = weight_norm if checked_weights else tf.constant(_NOT_MEASURED)
        else:
            weight_flags = finite_flags(checked_weights)
        weights_ok = tf.reduce_all(weight_flags)
        if config.protect_weights:

            def undo() -> Any:
                for v, old in backup:
                    v.assign(old)
                return tf.constant(False)

            applied = tf.cond(weights_ok, lambda: tf.constant(True), undo)
        else:
            applied = tf.constant(True)
        if history:
            return weight_flags, applied, weight_norm, update_norm
        return weight_flags, applied

    def skip() -> tuple[Any, ...]:
        if history:
            return _ones(len(checked_weights)), tf.constant(False), weights_norm(), tf.constant(_NOT_MEASURED)
        return _ones(len(checked_weights)), tf.constant(False)

    def decide(ok: Any, do_apply: Any) -> tuple[Any, ...]:
        return tf.cond(ok, lambda: apply_and_check(do_apply), skip)

    grad_norm = None
    if history and check_grads:
        grad_flags, grad_norm = finite_flags_and_norm([grads[i] for i in present])
    else:
        grad_flags = finite_flags([grads[i] for i in present]) if check_grads else _ones(0)
    if history and grad_norm is None:
        grad_norm = tf.constant(_NOT_MEASURED)  # a LossScaleOptimizer's gradients are scaled: not the model's
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
    backup: list[tuple[Any, Any]] = []
    if keep_backup and not (in_sync and replica_context.num_replicas_in_sync > 1):
        # Read before the update (automatic control dependencies keep program order): one copy of what this
        # optimizer changes, for models that train several optimizers in one step.
        state = [v for v in list(variables) + list(optimizer.variables) if v is not None]
        backup = [(v, tf.identity(_dense(v))) for v in unique(state)]
    needs_merge = in_sync and not tf.__internal__.distribute.strategy_supports_no_merge_call()
    if needs_merge:

        def merge_fn(distribution: Any, ok: Any, grads: Any) -> tuple[Any, Any]:
            agreed_ok = distribution.experimental_local_results(ok)[0]  # the same on every replica

            def do_apply() -> None:  # `grads` is per replica here: each replica applies its own
                distribution.extended.call_for_each_replica(original_apply, args=(grads, variables_arg))

            return decide(agreed_ok, do_apply)

        outcome = replica_context.merge_call(merge_fn, args=(ok, grads))
    else:
        outcome = decide(ok, lambda: original_apply(grads, variables_arg))
    weight_flags, applied = outcome[0], outcome[1]
    all_ok = tf.logical_and(ok, tf.reduce_all(weight_flags))
    return _Gate(
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
    )


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
    value = _dense(value)
    if value.shape.rank != 0:
        value = tf.reduce_mean(value)
    return value if value.dtype == tf.float32 else tf.cast(value, tf.float32)


def combine(scope: _CallScope) -> tuple[Verdict, GateMeta]:
    """One verdict from the records of every replica; call after the guarded call returned (same graph).

    Under a merge-call strategy every replica's record holds the same gate tensors (decided once in
    cross-replica context); they are taken once. Without a strategy there is one record: no extra ops."""
    records = scope.records()
    meta = GateMeta()
    gate_counts = {len(r.gates) for r in records}
    if len(gate_counts) > 1:
        raise GuardError("replicas applied a different number of optimizer updates in one step")
    n_gates = gate_counts.pop() if gate_counts else 0
    oks, loss_oks, grads, weights, applied, local_oks = [], [], [], [], [], []
    for index in range(n_gates):
        gates = [r.gates[index] for r in records]
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
    meta.gated = n_gates > 0
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
    loss_ok = _all(loss_oks)
    ok = _all(oks) if n_gates else loss_ok  # a gate's ok already includes its losses
    if n_gates > 1 and len(records) == 1 and any(g.backup for g in records[0].gates):
        # Several updates in one step (a GAN's two optimizers): when any of them fails, the step is not applied
        # at all, so the updates that did go through are taken back.
        for gate in records[0].gates:
            _undo_if_step_failed(gate, ok)
        applied = [tf.logical_and(ok, _all(applied))]
    firsts = [_scalar_loss(r.losses[0]) for r in records if r.losses]
    if not firsts:
        loss = tf.constant(0.0, tf.float32)  # a placeholder: meta.has_loss is False
    else:
        loss = firsts[0] if len(firsts) == 1 else tf.add_n(firsts)
    verdict = Verdict(
        ok=ok,
        loss_ok=loss_ok,
        grads_ok=grads[0] if len(grads) == 1 else tf.concat(grads, axis=0) if grads else _ones(0),
        weights_ok=weights[0] if len(weights) == 1 else tf.concat(weights, axis=0) if weights else _ones(0),
        applied=_all(applied) if applied else tf.constant(False),
        loss=loss,
        local_ok=_all(local_oks) if n_gates else loss_ok,
        metrics=_metrics(records) if scope.config.history else None,
    )
    return verdict, meta


def _across_gates(norms: list[Any]) -> Any:
    """One norm from each gate's (several optimizers); -1.0 when there is none or one was not measured."""
    if not norms:
        return tf.constant(_NOT_MEASURED)
    return norms[0] if len(norms) == 1 else combine_norms(tf.stack(norms))


def _metrics(records: list[_Record]) -> Any:
    """The step's history vector (history.METRICS order), float32 [4]."""
    first = records[0].gates if records else []
    if len(records) == 1:
        grad_norm = _across_gates([g.grad_norm for g in first])
    else:
        # Several replicas: each saw only its local gradients, not the all-reduced ones that were applied.
        grad_norm = tf.constant(_NOT_MEASURED)
    # Weights and updates are decided once for all replicas (the first record's are everyone's).
    weight_norm = _across_gates([g.weight_norm for g in first])
    update_norm = _across_gates([g.update_norm for g in first])
    maxima = [m for r in records for m in r.output_max]
    max_abs_output = (
        tf.constant(_NOT_MEASURED)
        if not maxima
        else (maxima[0] if len(maxima) == 1 else tf.reduce_max(tf.stack(maxima)))
    )
    return tf.stack([grad_norm, weight_norm, update_norm, max_abs_output])


def _undo_if_step_failed(gate: _Gate, step_ok: Any) -> None:
    def undo() -> Any:
        for variable, value in gate.backup:
            variable.assign(value)
        return tf.constant(True)

    tf.cond(tf.logical_and(tf.logical_not(step_ok), gate.applied), undo, lambda: tf.constant(False))


def report(
    verdict: Verdict, meta: GateMeta, trainable_variables: list[Any], loss_seen_bad: bool = False
) -> NonFiniteReport:
    """The failing step's NonFiniteReport from its verdict (read on failure only)."""
    grads_ok, weights_ok = verdict.grads_ok.numpy(), verdict.weights_ok.numpy()
    result = NonFiniteReport(
        loss=not bool(verdict.loss_ok) or loss_seen_bad,
        # A name once: a step that applies the same optimizer several times (a GAN's critic steps) repeats them.
        gradients=list(
            dict.fromkeys(name for name, ok in zip(meta.grad_names, grads_ok, strict=True) if not ok)
        ),
        weights=[name for name, ok in zip(meta.weight_names, weights_ok, strict=True) if not ok],
        update_applied=bool(verdict.applied),
        checked=list(meta.checked),
    )
    if not result.update_applied and not result.weights:
        # Nothing was applied, so the variables are as the step found them: were they broken already?
        broken = non_finite_variables(trainable_variables)
        if broken:
            result.weights, result.weights_before_step = broken, True
    return result
