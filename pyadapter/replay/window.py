"""Replaying a divergence's window: the steps from the guard's state copy up to the failing one, in graph mode, no
debugger; whether they stay finite at a given learning rate, and the largest learning rate that keeps them finite.

The same `WindowRun` serves two places:
- the guard at the scene (``NanGuard`` / ``guard_step``, on a failing step): the live model and optimizer, the
  copy the guard kept in memory (`pyadapter.capture.window`); the live state is put back afterwards;
- a replay of a bundle's window (``nanlens replay BUNDLE --window``, "Verify fix" for a divergence): the step
  brought back by `pyadapter.replay.session.with_captured_step` and the window read from the bundle.

A window counts as finite when every step's loss and the weights after it are finite AND no step's loss grew past
`GROWTH_LIMIT` times the window's first: a rate that is merely still finite at the window's end, its loss having
grown a millionfold, would diverge a few steps later. The loss is each step's own (Keras's metrics are reset before
every step, so ``logs["loss"]`` is not a running mean).

A learning rate is set on every optimizer whose rate is a variable (Keras 3 keeps a constant rate in one), as the
same factor of its captured rate; a schedule's rate cannot be changed without retracing, so it is not searched.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf

from pyadapter.capture.keras_lines import optimizer_built, optimizer_variables
from pyadapter.capture.learning_rate import learning_rate_variable
from pyadapter.capture.snapshot import to_tensors, variable_path
from pyadapter.capture.window import Trial, WindowData, WindowSearch
from pyadapter.replay.errors import ReplayError
from pyadapter.replay.step import step_losses

SEARCH_SECONDS = 60.0  # the search stops trying rates after this long (the last finite one found stands)
MAX_HALVINGS = 12  # 1/4096 of the captured rate at the lowest
GROWTH_LIMIT = 100.0  # a window whose loss grows past this factor of its first step's is diverging still
REFINE_TRIALS = 3  # bisections between the largest finite and smallest non-finite rates (log scale)


@dataclass
class WindowVerdict:
    """One replay of the window."""

    learning_rate: float | None
    finite: bool
    steps: int  # steps the window holds
    steps_run: int  # steps run before it went non-finite (all of them when finite)
    first_non_finite_step: int | None = None
    losses: list[float | None] = field(default_factory=list)
    seconds: float = 0.0
    grew_at: int | None = None  # finite, but the loss passed GROWTH_LIMIT x the first step's at this step

    def to_json(self) -> dict[str, Any]:
        return {
            "learning_rate": self.learning_rate,
            "finite": self.finite,
            "steps": self.steps,
            "steps_run": self.steps_run,
            "first_non_finite_step": self.first_non_finite_step,
            "loss_grew_at_step": self.grew_at,
            "losses": [None if v is None or not math.isfinite(v) else v for v in self.losses],
            "seconds": round(self.seconds, 2),
        }

    def sentence(self) -> str:
        from pyadapter.findings_text import format_number

        rate = f" at learning rate {format_number(self.learning_rate)}" if self.learning_rate else ""
        if self.finite:
            return f"the {self.steps}-step window stays finite{rate}"
        if self.grew_at is not None:
            return (
                f"the {self.steps}-step window still diverges{rate}: its loss passed {GROWTH_LIMIT:g}x the first "
                f"step's at step {self.grew_at}"
            )
        return (
            f"the {self.steps}-step window goes non-finite{rate} at step {self.first_non_finite_step} "
            f"({self.steps_run} of {self.steps} steps finite)"
        )


@dataclass
class WindowRun:
    """What replays a window: the step, one call (args, kwargs) per step, the state and the copy to start from."""

    step: Callable[..., Any]
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]]
    start_step: int
    state: list[Any]  # live variables put back before each replay
    values: list[np.ndarray | None]  # their values at the window's start (None: keep the current value)
    trainable: list[Any]
    optimizers: list[Any]
    before_run: Callable[[], None] | None = None  # e.g. fresh metrics
    step_reset: Callable[[], None] | None = (
        None  # before every step: fresh metrics, so the loss is the step's
    )
    _function: Any = None
    _rates: list[tuple[Any, float]] | None = None

    @property
    def steps(self) -> int:
        return len(self.calls)

    def restore(self) -> None:
        if self.before_run is not None:
            self.before_run()
        for variable, value in zip(self.state, self.values, strict=True):
            if value is not None:
                variable.assign(value.astype(np.asarray(variable.numpy()).dtype, copy=False))
        self._restore_rates()

    def _restore_rates(self) -> None:
        """The learning rates as captured: tf_keras keeps an optimizer's rate out of its ``variables``, so the state
        does not hold it, and a search's last trial rate stayed in the live optimizer (the bundle then recorded it
        as the run's rate, and the cause said "diverged at learning rate 0.00149" of a run at 0.005)."""
        for variable, rate in self._rates or []:
            variable.assign(rate)

    def captured_rates(self) -> list[tuple[Any, float]]:
        """(learning-rate variable, its rate at the window's start) for each optimizer, all with a constant rate;
        empty when one of them runs on a schedule: scaling the others would search a rate that did not diverge (an
        autoencoder's scheduled SGD beside a head's constant Adam)."""
        if self._rates is None:
            self.restore()
            found: list[tuple[Any, float]] = []
            # Not an optimizer nothing built: a GAN's bare super().compile() makes model.optimizer (RMSprop at 1e-3)
            # beside its d_ and g_optimizer, and its rate was "the captured rate 0.001" of a run at 0.1.
            built = [o for o in self.optimizers if optimizer_built(o)] or self.optimizers
            for optimizer in built:
                variable = learning_rate_variable(optimizer)
                if variable is None:
                    found = []
                    break
                if all(variable is not seen for seen, _ in found):
                    found.append((variable, float(np.asarray(variable.numpy()))))
            self._rates = found
        return self._rates

    @property
    def captured_learning_rate(self) -> float | None:
        rates = self.captured_rates()
        return rates[0][1] if rates else None

    def _compiled(self) -> Any:
        if self._function is None:
            step, trainable = self.step, self.trainable
            # The optimizers' slots too: gradients too large to square make Adam's second moment +Inf while its
            # update (g / sqrt(v)) is 0 and the weights stay finite; the window "stayed finite" at every rate
            # where the guard and the replay saw the overflow.
            slots = [
                v
                for o in self.optimizers
                for v in optimizer_variables(o)
                if "float" in str(getattr(v, "dtype", "")) and all(v is not w for w in trainable)
            ]

            def one_step(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
                outputs = step(*args, **kwargs)
                losses = step_losses(outputs)  # a GAN's: both of its losses
                flags = [
                    tf.reduce_all(tf.math.is_finite(tf.convert_to_tensor(v))) for v in [*trainable, *slots]
                ]
                flags += [tf.reduce_all(tf.math.is_finite(loss)) for loss in losses]
                finite = tf.reduce_all(tf.stack(flags)) if flags else tf.constant(True)
                loss = tf.cast(tf.reduce_mean(losses[0]), tf.float32) if losses else tf.constant(0.0)
                return loss, finite

            one_step.__name__ = getattr(step, "__name__", "window_step")
            self._function = tf.function(one_step, jit_compile=False, autograph=True)
        return self._function

    def replay(self, learning_rate: float | None = None, *, stop_on_growth: bool = True) -> WindowVerdict:
        """Run the window from its start at `learning_rate` (the primary optimizer's; the others scaled alike;
        None: as captured) and say whether every step stayed finite. Stops at the first non-finite step, and (unless
        `stop_on_growth` is off: re-making the state, where only finite matters) at a loss past `GROWTH_LIMIT`."""
        rates = self.captured_rates()
        self.restore()
        shown = learning_rate
        if learning_rate is not None:
            if not rates:
                raise ReplayError(
                    "the optimizer's learning rate is a schedule (or not a variable), so the window cannot be "
                    "replayed at another rate"
                )
            factor = learning_rate / rates[0][1] if rates[0][1] else 1.0
            for variable, captured in rates:
                variable.assign(captured * factor)
            if factor != 1.0:
                for slot in rate_scaled_slots(self.optimizers):
                    slot.assign(slot * factor)
        elif rates:
            shown = rates[0][1]
        function = self._compiled()
        started = time.perf_counter()
        losses: list[float] = []
        verdict = WindowVerdict(shown, True, self.steps, 0)
        for index, (args, kwargs) in enumerate(self.calls):
            if self.step_reset is not None:
                self.step_reset()
            try:
                loss, finite = function(*args, **kwargs)
            except tf.errors.InvalidArgumentError:  # a check_numerics in the user's step fired
                finite, loss = False, float("nan")
            losses.append(float(np.asarray(loss)))
            if not bool(np.asarray(finite)):
                verdict.finite = False
                verdict.first_non_finite_step = self.start_step + index
                break
            if stop_on_growth and index and abs(losses[-1]) > GROWTH_LIMIT * max(abs(losses[0]), 1e-12):
                verdict.finite = False
                verdict.grew_at = self.start_step + index
                break
            verdict.steps_run = index + 1
        verdict.losses = list(losses)
        verdict.seconds = time.perf_counter() - started
        return verdict

    def schedule_rate(self, step: int) -> tuple[str, float] | None:
        """(the schedule's class, the rate it gives at the run's `step`) for the primary optimizer when its learning
        rate is a schedule the program built (`keras.optimizers.schedules`); None otherwise. The step is counted
        from the window's start as the optimizer counts its iterations."""
        if not self.optimizers:
            return None
        import keras

        optimizer = self.optimizers[0]
        schedule = getattr(optimizer, "_learning_rate", None)
        if not isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
            return None
        self.restore()
        iterations = int(np.asarray(optimizer.iterations.numpy()))
        try:
            value = float(np.asarray(schedule(iterations + step - self.start_step)))
        except Exception:  # noqa: BLE001 - the user's own schedule: without its value the label stays generic
            return None
        return type(schedule).__name__, value

    def rate_changed(self, failing_rate: float | None) -> str | None:
        """Why a replay of the window at one rate is not the run: the rate at its start is not the failing step's
        (a callback raised it as the run trained: an LR range test), or None. The window replays at one rate."""
        start = self.captured_learning_rate
        if (
            start is None
            or failing_rate is None
            or not failing_rate > 0
            or math.isclose(start, failing_rate, rel_tol=0.01)
        ):
            return None
        from pyadapter.findings_text import format_number

        return (
            f"the learning rate changed during the window ({format_number(start)} at its start, step "
            f"{self.start_step}; {format_number(failing_rate)} at the failing step): the program sets it as it "
            "trains, and the window replays at one rate"
        )

    def _not_searchable(self) -> str:
        """Why no rate can be set for the window: which optimizer's rate is a schedule, or that none is a variable
        (a hand-written update's constant, ``w.assign_sub(STEP_SIZE * g)``: "a schedule or not a variable" read
        as if the program had a schedule)."""
        for optimizer in self.optimizers:
            inner = getattr(optimizer, "inner_optimizer", None) or optimizer
            schedule = getattr(inner, "_learning_rate", None)
            if learning_rate_variable(optimizer) is None and callable(schedule):
                kind = type(schedule).__name__
                name = f"a schedule ({kind})" if kind != "function" else "a function"
                return f"the learning rate of {type(inner).__name__} is {name}, which the window replays as written"
        if self.optimizers:
            return "the learning rate is not a variable the window can set"
        return "the step updates its weights itself, with no optimizer whose rate the window can set"

    def search(self, *, seconds: float = SEARCH_SECONDS, failing_rate: float | None = None) -> WindowSearch:
        """The largest learning rate that keeps the window finite: halve the captured rate until the window stays
        finite, then bisect (log scale) between that and the next rate up. Bounded by `seconds`. Not searched
        when the rate changed during the window (`rate_changed`: the step's `failing_rate` differs)."""
        captured = self.captured_learning_rate
        result = WindowSearch(steps=self.steps, start_step=self.start_step, captured_learning_rate=captured)
        if captured is None or not captured > 0:
            result.stopped = f"{self._not_searchable()}: not searched"
            return result
        changed = self.rate_changed(failing_rate)
        if changed is not None:
            result.stopped = f"{changed}: not searched"
            return result
        started = time.perf_counter()
        try:
            return self._search(result, captured, started, seconds)
        finally:
            self._restore_rates()

    def _search(self, result: WindowSearch, captured: float, started: float, seconds: float) -> WindowSearch:
        def trial(rate: float) -> bool:
            verdict = self.replay(rate)
            result.trials.append(Trial(rate, verdict.finite, verdict.first_non_finite_step, verdict.grew_at))
            return verdict.finite

        def out_of_time() -> bool:
            if time.perf_counter() - started > seconds:
                result.stopped = f"stopped after {seconds:.0f} s"
                return True
            return False

        high, low = None, None  # smallest non-finite, largest finite
        rate = captured
        for _ in range(MAX_HALVINGS + 1):
            if trial(rate):
                low = rate
                break
            high = rate
            rate /= 2
            if out_of_time():
                break
        if low is not None and high is not None:
            for _ in range(REFINE_TRIALS):
                if out_of_time():
                    break
                middle = math.sqrt(low * high)
                if trial(middle):
                    low = middle
                else:
                    high = middle
        if low is not None and high is not None:
            # The suggestion is half the largest finite rate: try it. A window whose loss is not monotone in the
            # rate (SGD with momentum on raw features) diverged at the half of a rate that stayed finite, and the
            # check of the suggestion (`replay --window --learning-rate`) failed. Halve on until one holds.
            candidate = low / 2
            for _ in range(MAX_HALVINGS):
                if out_of_time():
                    break
                if trial(candidate):
                    result.tried_suggestion = candidate
                    break
                candidate /= 2
        if high is None and low is not None:
            # Finite at the captured rate itself: the window's replay is not the run (XLA computed it otherwise, a
            # random draw the bundle does not hold), so no rate it finds says anything of the run.
            result.stopped = (
                f"the {self.steps}-step window stays finite at the captured rate {low:.3g}: its replay does not "
                "reproduce the run, so no rate was searched"
            )
            low = None
        result.largest_finite, result.smallest_non_finite = low, high
        result.seconds = time.perf_counter() - started
        return result


def rate_scaled_slots(optimizers: list[Any]) -> list[Any]:
    """The optimizer slots that hold steps already multiplied by the learning rate: SGD's velocity (v = m * v -
    lr * g) and RMSprop's momentum. At the window's start they hold the captured rate's steps: replayed at a rate
    10x lower with them as they were, the first steps still moved as fast as before, and a run that a lower rate
    does fix (raw features under SGD with momentum) read "no rate down to 2.4e-9 kept the window finite". Scaled
    with the rate, the window starts as if the steps before it had been taken at that rate. Adam's moments and
    RMSprop's mean square hold no rate."""
    slots: list[Any] = []
    for optimizer in optimizers:
        optimizer = getattr(optimizer, "inner_optimizer", optimizer)  # a LossScaleOptimizer's own
        kinds = {cls.__name__ for cls in type(optimizer).__mro__}  # a subclass of SGD keeps SGD's slots
        if "SGD" in kinds and getattr(optimizer, "momentum", None):
            slots += list(getattr(optimizer, "momentums", None) or [])
        elif "RMSprop" in kinds and getattr(optimizer, "momentum", None):
            slots += list(getattr(optimizer, "_momentums", None) or [])
    return [slot for slot in slots if slot is not None]


def calls_of(
    batches: list[Any], kind: str, like: tuple[tuple[Any, ...], dict[str, Any]] | None = None
) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    """One (args, kwargs) per window batch: ``train_step(data)`` for Keras fit, the guarded step's own arguments
    (``{"args": [...], "kwargs": {...}}``) for custom loops, where an object argument (a model passed to the step,
    `structure.ObjectArgument`) is the one at the same place in `like`, a call of the step with live objects."""
    from pyadapter.capture.bundle_format import KIND_FIT
    from pyadapter.capture.structure import StructureError, holds_objects, with_objects

    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    for batch in batches:
        if kind == KIND_FIT:
            calls.append(((to_tensors(batch),), {}))
            continue
        if not isinstance(batch, dict) or not isinstance(batch.get("args"), (list, tuple)):
            raise ReplayError("a window batch of a custom-loop bundle holds no step arguments")
        kwargs = batch.get("kwargs") or {}
        call = (tuple(to_tensors(list(batch["args"]))), {k: to_tensors(v) for k, v in kwargs.items()})
        found = holds_objects(call)
        if found is not None:
            if like is None:
                raise ReplayError(
                    f"a window batch takes {found} as an argument, and no call of the step has one"
                )
            try:
                call = with_objects(call, (tuple(like[0]), dict(like[1])))
            except StructureError as exc:
                raise ReplayError(f"a window batch: {exc}") from None
        calls.append(call)
    return calls


def run_of_program(program: Any, window: WindowData, kind: str) -> tuple[WindowRun, list[str]]:
    """A bundle's window over a rebuilt step (`pyadapter.replay.step.StepProgram`): its state takes the window's
    values by variable path (`pyadapter.replay.state.match_captured`); warnings for variables that got none."""
    from pyadapter.replay.state import match_captured

    values_by_index, unmatched, _ = match_captured(window.state_entries, list(program.state))
    # Variables the window has no value for start where the captured step does (its rebuilt values).
    values: list[np.ndarray | None] = [
        values_by_index.get(i, np.asarray(v.numpy())) for i, v in enumerate(program.state)
    ]
    warnings = []
    if unmatched:
        first = variable_path(program.state[unmatched[0]])
        warnings.append(
            f"{len(unmatched)} variables have no value in the window's state copy (first: {first}); they start "
            "from the captured step's values"
        )
    run = WindowRun(
        step=program.step,
        calls=calls_of(window.batches, kind, (tuple(program.args), dict(program.kwargs))),
        start_step=window.start_step,
        state=list(program.state),
        values=values,
        trainable=list(program.trainable),
        optimizers=list(program.optimizers),
        before_run=program.before_run,
        step_reset=getattr(getattr(program.step, "__self__", None), "reset_metrics", None),
    )
    return run, warnings
