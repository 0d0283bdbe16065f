"""Run a rebuilt step once, in graph or eager mode, and judge it: are the loss, gradients and new weights finite?

Both modes run the same Python step function. Graph mode traces it into one ``tf.function`` with
``jit_compile=False`` (dumps have no XLA kernel for their debug ops); eager mode calls it inside
``pyadapter.eager.eager()``, where the user's own ``tf.function``s, Keras ``call``s and tf.data functions run
line by line, so a debugger's breakpoints there are hit. Before every run the step's variables (weights,
optimizer slots and iteration counter) and the random state are put back to the captured values.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf

from pyadapter.capture import gate_manual
from pyadapter.capture.gate import is_loss_scale_optimizer
from pyadapter.capture.gate_checks import half_squares32
from pyadapter.capture.gate_update import squares_gradients
from pyadapter.capture.snapshot import variable_path
from pyadapter.replay import stateful_random
from pyadapter.replay.errors import ReplayError, error_text
from pyadapter.replay.verdict import Mode, StepVerdict


@dataclass
class StepProgram:
    """A captured step, rebuilt and ready to run."""

    step: Callable[..., Any]  # a plain Python function (a tf.function's python_function, unwrapped)
    args: tuple[Any, ...]  # the captured batch, as the step takes it
    kwargs: dict[str, Any] = field(default_factory=dict)
    state: list[tf.Variable] = field(default_factory=list)  # put back before each run
    trainable: list[tf.Variable] = field(default_factory=list)  # judged after each run
    optimizers: list[Any] = field(default_factory=list)  # whose gradients are observed
    # The models' own state the forward pass writes (BatchNormalization's moving statistics), judged after each run:
    # a step that made a moving variance +Inf, with a finite loss, gradients and weights, "stayed finite".
    forward_state: list[tf.Variable] = field(default_factory=list)
    before_run: Callable[[], None] | None = None  # restores random state, resets metrics
    description: str = ""
    # A guarded step that training ran as plain Python (no tf.function): it may hand its tensors to NumPy (an
    # episode played in the step), which a graph cannot; a graph run that fails is then no verdict on the NaN.
    plain_python: bool = False
    _snapshot: list[np.ndarray] | None = None

    def snapshot(self) -> None:
        """Remember the captured values (call once, right after the rebuild)."""
        self._snapshot = [v.numpy() for v in self.state]

    def restore(self) -> None:
        if self._snapshot is None:
            self.snapshot()
        assert self._snapshot is not None
        for variable, value in zip(self.state, self._snapshot, strict=True):
            variable.assign(value)
        if self.before_run is not None:
            self.before_run()


def variable_name(variable: Any) -> str:
    """As the capture names it (Keras's path, or a bare tf.Variable's name without ':0')."""
    return variable_path(variable)


class _GradientRecorder:
    """Sees the gradients the step hands to its optimizers, by wrapping ``apply`` (Keras 3: apply_gradients
    calls apply) on the optimizer instances for the duration of one run or trace."""

    def __init__(self, optimizers: list[Any]) -> None:
        self.optimizers = optimizers
        self.seen: list[tuple[str, Any]] = []
        # ids of the seen gradients whose optimizer squares them (Adam, RMSprop; not SGD, nor a hand-written
        # update): only those are judged on whether their squares fit float32, as NanGuard's gate judges them.
        self.squared: set[int] = set()
        # The graph the step is traced in (None: eager), and the flags of gradients applied inside a branch of it
        # (``if micro_step % 4 == 0: optimizer.apply_gradients(...)``), which that graph cannot read: each branch
        # writes its gradients' flags to a variable of its own, read after the branch.
        self.outer: Any = None
        self.branch: list[tuple[str, Any]] = []
        self.sparse = False  # an IndexedSlices gradient (an Embedding's) went to an optimizer
        self.dense = False  # hand them to it dense (`run_step`'s second run)

    def _in_branch(self) -> bool:
        return (
            self.outer is not None
            and not tf.executing_eagerly()
            and tf.compat.v1.get_default_graph() is not self.outer
        )

    def _export(self, name: str, grad: Any, squared: bool) -> None:
        """A gradient applied in a branch: its flags as `finite_flags` words them, kept in a variable of
        `_BRANCH_FLAGS` (made before the trace: a tf.function makes variables on its first call only)."""
        values = grad.values if isinstance(grad, tf.IndexedSlices) else grad
        if not isinstance(values, tf.Tensor) or not values.dtype.is_floating:
            return
        if len(self.branch) >= len(_BRANCH_FLAGS):
            return  # more than were made: not read, as before
        held = _BRANCH_FLAGS[len(self.branch)]
        tf.raw_ops.AssignVariableOp(resource=held.handle, value=_gradient_flag(values, squared))
        self.branch.append((name, held))

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        patched = []
        for optimizer in self.optimizers:
            if type(optimizer).__name__.startswith("LossScaleOptimizer"):  # Keras 3; tf_keras: ...V3
                continue  # non-finite scaled gradients are its normal business: it skips them and lowers the scale
            original = getattr(optimizer, "apply", None)
            if original is None and _watch_apply_gradients(optimizer, self.seen, self.squared):
                patched.append(
                    (optimizer, "apply_gradients")
                )  # tf_keras: no apply, the update is apply_gradients
                continue
            if original is None or "apply" in vars(optimizer):
                continue

            def apply(
                grads: Any,
                trainable_variables: Any = None,
                *rest: Any,
                _original=original,
                _optimizer=optimizer,
                **kw: Any,
            ) -> Any:
                variables = trainable_variables
                if variables is None:
                    variables = getattr(_optimizer, "_trainable_variables", None) or [None] * len(list(grads))
                squares = squares_gradients(_optimizer)
                for grad, var in zip(list(grads), list(variables), strict=False):
                    if grad is None:
                        continue
                    name = variable_name(var) if var is not None else "?"
                    if self._in_branch():
                        self._export(name, grad, squares)
                        continue
                    self.seen.append((name, grad))
                    if squares:
                        self.squared.add(id(grad))
                grads = list(grads)
                self.sparse = self.sparse or any(isinstance(g, tf.IndexedSlices) for g in grads)
                if self.dense:
                    grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
                return _original(grads, trainable_variables, *rest, **kw)

            optimizer.apply = apply
            patched.append((optimizer, "apply"))
        try:
            yield
        finally:
            for optimizer, name in patched:
                if name == "apply":
                    del optimizer.apply
                else:
                    optimizer.__dict__.pop(name, None)

    def finite_flags(self) -> list[tuple[str, Any]]:
        """(variable name, scalar bool tensor [finite, squares fit float32]) for each gradient of the current graph
        (or eager): the second is False for finite values past ~1.8e19 that an optimizer squares, as NanGuard's gate
        judges them."""
        flags = []
        graph = tf.compat.v1.get_default_graph() if not tf.executing_eagerly() else None
        for name, grad in self.seen:
            values = grad.values if isinstance(grad, tf.IndexedSlices) else grad
            if not isinstance(values, tf.Tensor) or not values.dtype.is_floating:
                continue
            if graph is not None and getattr(values, "graph", None) is not graph:
                continue  # made inside a nested tf.function: cannot be read from here
            flags.append((name, _gradient_flag(values, id(grad) in self.squared)))
        flags += [(name, tf.identity(held.read_value())) for name, held in self.branch]
        return flags


# Variables the graph replay's branches write their gradients' flags to (`_GradientRecorder._export`).
_BRANCH_FLAGS: list[Any] = []


def _make_branch_flags(count: int) -> None:
    """At least `count` flag variables, each reset to [True, True] (outside any trace)."""
    while len(_BRANCH_FLAGS) < count:
        _BRANCH_FLAGS.append(tf.Variable([True, True], trainable=False, name="nanlens_replay_flag"))
    for held in _BRANCH_FLAGS:
        held.assign([True, True])


def _gradient_flag(values: Any, squared: bool) -> Any:
    """bool [2]: finite, and (for an optimizer that squares it) its squares fit float32, as the gate reads it
    (float64 kept, float16 cast to float32)."""
    finite = tf.reduce_all(tf.math.is_finite(values))
    if squared:
        return tf.stack([finite, tf.math.is_finite(half_squares32(values))])
    return tf.stack([finite, tf.constant(True)])


def _watch_apply_gradients(optimizer: Any, seen: list[tuple[str, Any]], squared: set[int]) -> bool:
    """tf_keras optimizers: record the (gradient, variable) pairs ``apply_gradients`` is given; whether patched."""
    original = getattr(optimizer, "apply_gradients", None)
    if original is None or "apply_gradients" in vars(optimizer):
        return False

    def apply_gradients(grads_and_vars: Any, *rest: Any, **kw: Any) -> Any:
        pairs = list(grads_and_vars)
        seen.extend((variable_name(var), grad) for grad, var in pairs if grad is not None)
        if squares_gradients(optimizer):
            squared.update(id(grad) for grad, _ in pairs if grad is not None)
        return original(pairs, *rest, **kw)

    optimizer.__dict__["apply_gradients"] = apply_gradients  # bypasses attribute tracking, as gate.hooks does
    return True


def _tape_watched(
    losses: list[Any], gradients: list[tuple[str, Any]]
) -> contextlib.AbstractContextManager[Any]:
    """What the step's tapes differentiate (its losses) and what they return (its gradients): the gradients a
    step is judged on when no optimizer update of it can be read (`run_step`)."""
    from pyadapter.capture.tape_targets import recording

    def record_gradients(sources: Any, result: Any) -> None:
        flat = tf.nest.flatten(sources)
        for index, grad in enumerate(tf.nest.flatten(result)):
            if grad is not None:
                source = flat[index] if index < len(flat) else None
                gradients.append((variable_name(source) if source is not None else f"gradient {index}", grad))

    return recording(losses.append, record_gradients)


def _writes_after_update(
    recorder: _GradientRecorder, state: list[Any], written: set[int]
) -> contextlib.AbstractContextManager[Any]:
    """Adds to `written` the ids of the `state` variables the step writes after it handed gradients to an optimizer
    (a center loss's ``self.centers.assign_sub(...)`` after apply_gradients, s42e p3): the step's own write, not
    the forward pass's. Without such state, nothing is watched."""
    if not state:
        return contextlib.nullcontext()
    watched = gate_manual.ids(state)

    def decide(variable: Any, kind: str, value: Any) -> None:
        if id(variable) in watched and (recorder.seen or recorder.branch):
            written.add(id(variable))

    return gate_manual.watching_writes(decide)


def step_losses(outputs: Any) -> list[Any]:
    """The step's losses: ``[outputs["loss"]]`` for Keras logs, else every float scalar it returned (a GAN's
    ``{"d_loss": ..., "g_loss": ...}``: its generator's loss may be the one that is not finite)."""
    if isinstance(outputs, dict) and "loss" in outputs:
        return [outputs["loss"]]
    losses = []
    for value in tf.nest.flatten(outputs):
        if isinstance(value, (tf.Tensor, tf.Variable, np.ndarray, float)):
            tensor = tf.convert_to_tensor(value)
            if tensor.dtype.is_floating and tensor.shape.rank == 0:
                losses.append(tensor)
    return losses


def _shown_loss(values: list[Any]) -> float | None:
    """The loss a verdict shows: the first that is not finite, else the first."""
    losses = [loss for loss in (_as_float(v) for v in values) if loss is not None]
    return next((loss for loss in losses if not math.isfinite(loss)), losses[0] if losses else None)


def _as_float(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return float(np.asarray(value).astype(np.float64))
    except (TypeError, ValueError):
        return None


def run_step(
    program: StepProgram,
    mode: Mode,
    *,
    restore: bool = True,
    around: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
    draw: int = 0,
) -> StepVerdict:
    """Run the captured step once in `mode`, from the captured state, and judge what it produced.

    `restore=False` skips putting the captured state back (the caller just did). `around` wraps only the step
    itself (e.g. a tfdbg dump), not the restore before it nor the checks after it, so a dump holds the step alone.
    `draw` > 0: another draw of the step's unseeded random ops in graph mode (a retry), also under a global seed.

    Keras's sparse updates (Adagrad's, RMSprop's) of an Embedding's IndexedSlices gradients raise on non-finite
    values (an index out of range in their union of indices), an update training never applied: the step is then
    run again from the captured state with those gradients dense, which says what the step makes (the dense update
    differs from the sparse one only where an id repeats in the batch; not under a dump: see below).
    """
    recorder = _GradientRecorder(program.optimizers)
    # Under a dump (`around`) no second run: one traced and dumped again in the same process crashed TensorFlow (a
    # segmentation fault at the scene). The optimizers whose sparse update raises get dense gradients at once.
    recorder.dense = around is not None and any(
        type(o).__name__ in _SPARSE_UPDATE_RAISES
        or type(getattr(o, "inner_optimizer", None)).__name__ in _SPARSE_UPDATE_RAISES
        for o in program.optimizers
    )
    verdict = _run_step(program, mode, recorder, restore, around, draw)
    if recorder.dense and recorder.sparse:
        verdict.applied_dense = True
    elif verdict.error is not None and recorder.sparse and not verdict.reproduced and around is None:
        recorder.dense = True
        retried = _run_step(program, mode, recorder, True, around, draw)
        if retried.error is None:
            retried.applied_dense = True
            return retried
    return verdict


# Keras 3 optimizers whose update of IndexedSlices gradients (``ops.divide`` of two of them) raises on non-finite
# values: "indices[97] = 188 is not in [0, 129)" (Adam's and SGD's do not).
_SPARSE_UPDATE_RAISES = frozenset({"Adagrad", "RMSprop"})


def _run_step(
    program: StepProgram,
    mode: Mode,
    recorder: _GradientRecorder,
    restore: bool,
    around: Callable[[], contextlib.AbstractContextManager[Any]] | None,
    draw: int,
) -> StepVerdict:

    def step_and_flags(*args: Any, **kwargs: Any) -> tuple[tuple[Any, list[Any], list[Any]], list[str]]:
        recorder.seen.clear()
        recorder.squared.clear()
        recorder.branch.clear()
        recorder.outer = None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()
        differentiated: list[Any] = []
        taped: list[tuple[str, Any]] = []
        with (
            recorder.watching(),
            _tape_watched(differentiated, taped),
            _writes_after_update(recorder, program.forward_state, written_after_update),
        ):
            outputs = program.step(*args, **kwargs)
        flags = recorder.finite_flags()
        losses = step_losses(outputs)
        if isinstance(outputs, dict) and "loss" not in outputs and differentiated:
            # A train_step that returns its metrics' results ({"total_loss": tracker.result(), ...}): those are
            # running means over the epoch; the loss its tape differentiated is this step's (a beta-VAE's
            # -5.01e18, not its KL tracker's -2.5e18).
            losses = [*differentiated, *losses]
        if not flags:
            # No update of the step can be read here (it updates by hand, takes gradients it applies later, as a
            # micro-step of gradient accumulation does, or applies them in a branch): its tapes' losses and
            # gradients are what the guard judged it on (`pyadapter.capture.gate_manual`, `gate.combine`).
            recorder.seen[:] = taped
            flags = recorder.finite_flags()
            losses += differentiated
            differentiated = []
        return (losses, differentiated, [flag for _, flag in flags]), [name for name, _ in flags]

    if restore:
        program.restore()
    finite_before = [bool(np.isfinite(v.numpy()).all()) for v in program.forward_state]
    written_after_update: set[int] = set()  # ids of forward_state the step wrote after its update
    wrap = around if around is not None else contextlib.nullcontext
    started = time.perf_counter()
    error: str | None = None
    stateful: list[str] = []
    loss_values: list[Any] = []
    tape_losses: list[Any] = []
    grad_flags: list[Any] = []
    grad_names: list[str] = []
    try:
        if mode == "graph":
            _make_branch_flags(len(program.trainable) * max(1, len(program.optimizers)))
            names_box: list[list[str]] = []
            graph_box: list[Any] = []

            def traced(*args: Any, **kwargs: Any) -> Any:
                graph = tf.compat.v1.get_default_graph()
                if draw and graph.seed is not None:
                    # Under tf.random.set_seed every fresh trace seeds its random ops alike, so a retry would draw
                    # what the first re-run drew; the traced graph's own seed (its inner functions inherit it) is
                    # changed, nothing global.
                    graph.seed = graph.seed + 7919 * draw
                values, names = step_and_flags(*args, **kwargs)
                names_box[:] = [names]
                # Read after the trace, not in it: AutoGraph converts what the traced function calls, and the
                # notebook lookup that names a cell's line failed converted ("NameError: name 'chunk'").
                graph_box[:] = [tf.compat.v1.get_default_graph()]
                return values

            # The graph is named after the step (e.g. "train_step"), as the dump and the findings show it.
            traced.__name__ = getattr(program.step, "__name__", "replayed_step")
            function = tf.function(traced, jit_compile=False, autograph=True)
            with wrap(), _quiet_tensorflow_log():
                loss_values, tape_losses, grad_flags = function(*program.args, **program.kwargs)
            grad_names = names_box[0] if names_box else []
            stateful = stateful_random.found_in_graph(graph_box[0]) if graph_box else []
        else:
            from pyadapter.eager import eager

            with eager(), _quiet_tensorflow_log(), wrap(), stateful_random.found_in_eager(stateful):
                (loss_values, tape_losses, grad_flags), grad_names = step_and_flags(
                    *program.args, **program.kwargs
                )
    except tf.errors.InvalidArgumentError as exc:  # a check_numerics in the user's code fired
        error = _one_line(exc.message if hasattr(exc, "message") else str(exc))
    except (
        Exception
    ) as exc:  # the step cannot run at all (shapes, a changed script...): one line for the user
        raise ReplayError(f"the captured step failed in {mode} mode: {error_text(exc)}") from exc
    seconds = time.perf_counter() - started

    verdict = StepVerdict(mode=mode, error=error, seconds=seconds, stateful_random=stateful)
    loss = _shown_loss(list(loss_values))
    verdict.loss = loss
    verdict.loss_finite = None if loss is None else math.isfinite(loss)
    if error is None:
        flags = [np.asarray(flag) for flag in grad_flags]
        if flags:
            verdict.non_finite_gradients = [
                name for name, ok in zip(grad_names, flags, strict=True) if not ok[0]
            ]
            verdict.too_large_gradients = [
                name for name, ok in zip(grad_names, flags, strict=True) if ok[0] and not ok[1]
            ]
            verdict.gradients_finite = not verdict.non_finite_gradients
        taped = _shown_loss(list(tape_losses))
        scaled = any(is_loss_scale_optimizer(o) for o in program.optimizers)  # a scaled loss's Inf is its own
        if (
            len(loss_values) > 1
            and verdict.loss_finite is False
            and taped is not None
            and math.isfinite(taped)
            and not scaled
        ):
            # A step that returns its loss beside other scalars (``return loss, global_norm`` of a clip whose norm
            # overflowed): the inf shown was the norm's; the loss it differentiated was finite.
            verdict.loss, verdict.loss_finite = taped, True
        if (
            verdict.non_finite_gradients
            and verdict.loss_finite
            and taped is not None
            and not math.isfinite(taped)
            and not scaled
        ):
            # The step returned a loss that is not the one it differentiated (a Distiller's train_step returns its
            # metrics, Keras's untouched loss tracker says 0): the loss its gradients came from is the one to show.
            verdict.loss, verdict.loss_finite = taped, False
    verdict.non_finite_weights = [
        variable_name(v) for v in program.trainable if not bool(np.isfinite(v.numpy()).all())
    ]
    verdict.weights_finite = not verdict.non_finite_weights if program.trainable else None
    verdict.non_finite_state = [
        variable_name(v)
        for v, was_finite in zip(program.forward_state, finite_before, strict=True)
        if was_finite
        and not bool(np.isfinite(v.numpy()).all())  # a running maximum that starts at -inf is not
    ]
    verdict.written_after_update = [
        variable_name(v)
        for v in program.forward_state
        if variable_name(v) in verdict.non_finite_state and gate_manual.ids([v]) & written_after_update
    ]
    return verdict


@contextlib.contextmanager
def _quiet_tensorflow_log() -> Iterator[None]:
    """TensorFlow's warnings about how a replay runs, not about the user's program, kept out of the user's output
    (the cell a notebook's scene locate ran in): each graph replay traces a new function on purpose (the step, as it
    is now), and after five TensorFlow warns "5 out of the last 5 calls to <function run_step.<locals>.traced>
    triggered tf.function retracing"; an eager replay runs ``keras.metrics.AUC(multi_label=True)``'s
    ``vectorized_map`` with functions eager, and each call warns "It looks like tf.function behavior was
    disabled, perhaps using tf.config.run_functions_eagerly"."""
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel(max(level, logging.ERROR))
    try:
        yield
    finally:
        logger.setLevel(level)


def _one_line(text: str) -> str:
    """The message's first line that says something: a graph's "Graph execution error:" alone said nothing, the
    op's own words ("indices[97] = 188 is not in [0, 129)") come later, after "Detected at node" and its trace."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    if lines[0].rstrip(":") == "Graph execution error":
        # The op's message is the line above its node's "[[{{node ...}}]]".
        marked = next((n for n, line in enumerate(lines) if n > 1 and line.startswith("[[")), None)
        return f"{lines[0]} {lines[marked - 1]}" if marked is not None else lines[0]
    return lines[0]
