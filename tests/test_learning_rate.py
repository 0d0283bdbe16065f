"""The learning rate a failing step used (`pyadapter.capture.learning_rate`): evaluated from the optimizer while
training, read back from a bundle as data. The end-to-end case (a schedule that is +inf at step 20, under
NanGuard) is tests/test_cause_programs.py::test_a_schedule_that_returns_inf_is_named_with_its_line."""

from __future__ import annotations

import inspect
import math
import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from pyadapter.capture import learning_rate  # noqa: E402


@pytest.mark.parametrize(
    "data",
    [None, "inf", [], {"value": True}, {"value": "Infinity"}, {"value": None}, {"value": {"x": 1}}],
)
def test_a_record_that_is_not_one_reads_as_none(data):
    assert learning_rate.read(data) is None


def test_a_record_keeps_what_is_well_formed_and_drops_the_rest():
    rate = learning_rate.read({"value": "-inf", "schedule": 3, "file": "a.py", "line": True})
    assert rate is not None and rate.value == -math.inf and not rate.finite
    assert (rate.schedule, rate.file, rate.line) == (None, "a.py", None)
    assert learning_rate.read(rate.to_json()) == rate
    assert learning_rate.read({"value": 0.01}).to_json()["value"] == 0.01


def test_a_constant_rate_and_a_schedule_at_the_failing_step():
    keras = pytest.importorskip("keras")
    tf = pytest.importorskip("tensorflow")

    class Halving(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            base = tf.constant(0.5)
            shrink = tf.pow(0.5, tf.cast(step, "float32"))
            ratio = base / (shrink - 0.125)  # zero at step 3
            return ratio

    constant = learning_rate.of_step(keras.optimizers.SGD(0.25), 7)
    assert constant == learning_rate.LearningRate(0.25)
    fine = learning_rate.of_step(keras.optimizers.Adam(Halving()), 1)
    assert fine is not None and fine.finite and fine.schedule == "Halving"
    assert fine.line == _line_of(
        Halving, "ratio = base"
    )  # a finite rate: the line that made what it returned
    broken = learning_rate.of_step(keras.optimizers.Adam(Halving()), 3)
    assert broken is not None and broken.value == math.inf and broken.shown() == "inf"
    assert broken.file == inspect.getsourcefile(Halving)
    assert broken.line == _line_of(Halving, "ratio = base")  # the line whose result was first non-finite
    # A rate given as a plain function of no arguments.
    called = learning_rate.of_step(keras.optimizers.SGD(lambda: float("nan")), 0)
    assert called is not None and math.isnan(called.value) and called.shown() == "nan"


def test_a_schedule_still_rising_at_the_failing_step_is_recorded_with_its_earlier_rates_and_its_line():
    """A warm-up then "inverse-square-root decay" written upside down (``sqrt(step / warmup)``): the record named
    the ``return tf.where(...)`` line and the rate at the failing step alone, so the cause could not tell the rate
    was still rising there."""
    keras = pytest.importorskip("keras")
    tf = pytest.importorskip("tensorflow")

    class WarmupInvSqrt(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            step = tf.cast(step, tf.float32)
            warm = 0.02 * step / 200.0
            decay = 0.02 * tf.sqrt(step / 200.0)
            return tf.where(step < 200.0, warm, decay)

    record = learning_rate.of_step(keras.optimizers.SGD(WarmupInvSqrt()), 16000)
    assert record is not None and record.value == pytest.approx(0.02 * math.sqrt(80), rel=1e-5)
    assert record.line == _line_of(
        WarmupInvSqrt, "decay = 0.02"
    )  # the line that made the rate, not the where
    assert [step for step, _ in record.earlier] == [1000, 2000, 4000, 8000]
    assert record.rising() == record.earlier
    assert learning_rate.read(record.to_json()) == record  # kept in the bundle as data

    # The same schedule written right falls after its warm-up: not rising.
    class Right(WarmupInvSqrt):
        def __call__(self, step):
            step = tf.cast(step, tf.float32)
            return tf.where(step < 200.0, 0.02 * step / 200.0, 0.02 * tf.sqrt(200.0 / step))

    right = learning_rate.of_step(keras.optimizers.SGD(Right()), 16000)
    assert right is not None and len(right.earlier) == 4 and right.rising() == []
    assert learning_rate.read(
        {"value": 0.1, "earlier": [[1, 0.01], ["2", 0.02], [3, "nan"], [4, True]]}
    ).earlier == [(1, 0.01)]

    # A warm-up to a peak reached 8 steps before the failure, cosine decay after it: every sampled step (1/16 to 1/2
    # of the way) was in the warm-up, and "still rising ... a decay written upside down?" was said of a rate that
    # was falling. The step before the failing one says it.
    class WarmupCosine(WarmupInvSqrt):
        def __call__(self, step):
            step = tf.cast(step, tf.float32)
            return tf.where(step < 512.0, 0.18 * step / 512.0, 0.18 * tf.cos((step - 512.0) / 4000.0))

    peaked = learning_rate.of_step(keras.optimizers.SGD(WarmupCosine()), 520)
    assert peaked is not None and len(peaked.earlier) == 4 and peaked.previous is not None
    assert peaked.rising() == [], peaked
    assert learning_rate.read(peaked.to_json()) == peaked


def test_a_warm_restart_before_the_failing_step_is_recorded() -> None:
    """SGDR's restart at step 160 put the rate back from ~1e-5 to 0.1; the run diverged at step 180. The record kept
    the rate at step 180 only, and the cause could not say the run diverged after a restart."""
    keras = pytest.importorskip("keras")
    schedule = keras.optimizers.schedules.CosineDecayRestarts(0.1, first_decay_steps=160)
    record = learning_rate.of_step(keras.optimizers.SGD(schedule), 180)
    assert record is not None and record.restart is not None, record
    step, before, after = record.restart
    assert step == 160 and before < 1e-3 and after == pytest.approx(0.1), record.restart
    assert learning_rate.read(record.to_json()) == record
    # A cosine decay with no restart, and a warm-up, rise by less than x2 a step: none.
    decay = learning_rate.of_step(
        keras.optimizers.SGD(keras.optimizers.schedules.CosineDecay(0.1, 1000)), 180
    )
    assert decay is not None and decay.restart is None
    assert (
        learning_rate.read({"value": 0.1, "restart": [160, 0.1, 0.01]}).restart is None
    )  # a fall is no restart
    # A linear warm-up from 0 doubles its rate from step 1 to step 2: a failure at step 30 is no restart's.
    warmup = keras.optimizers.schedules.CosineDecay(0.0, 1000, warmup_target=0.1, warmup_steps=100)
    early = learning_rate.of_step(keras.optimizers.SGD(warmup), 30)
    assert early is not None and early.restart is None, early.restart


def _line_of(cls, text: str) -> int:
    lines, first = inspect.getsourcelines(cls.__call__)
    return first + next(i for i, line in enumerate(lines) if text in line)


def test_a_search_that_did_not_run_says_why_not_which_rate():
    from pyadapter.capture.window import Trial, WindowSearch

    skipped = WindowSearch(steps=3, start_step=5, captured_learning_rate=None)
    skipped.stopped = "the learning rate is not a variable the window can set: not searched"
    assert skipped.sentence() == skipped.stopped
    tried = WindowSearch(
        steps=3, start_step=5, captured_learning_rate=0.1, trials=[Trial(0.1, False, 7, None)]
    )
    assert tried.sentence() == "no learning rate down to 0.1 kept the 3-step window finite"


def test_a_rate_written_outside_a_constructor_is_read_and_nothing_else_is() -> None:
    """`replay --window` reads "the rate your code sets now" from the line the cause names: a config file's key or
    a rate assigned in code; not another name ending in learning_rate, nor a schedule's second argument."""
    from pyadapter.cause.change_line import rate_written_in_text

    assert (
        rate_written_in_text('  "optimizer": {"class_name": "SGD", "config": {"learning_rate": 0.25}},')
        == 0.25
    )
    assert rate_written_in_text("initial_learning_rate: 3e-4") == 3e-4
    assert rate_written_in_text("model.optimizer.learning_rate.assign(0.15)") == 0.15
    assert rate_written_in_text("keras.backend.set_value(model.optimizer.lr, 0.1)") == 0.1
    for other in ("max_learning_rate=0.5", "decay(lr, 0.96)", "if lr == 0.1:", "warmup_lr_steps: 100"):
        assert rate_written_in_text(other) is None, other


def test_a_suggestion_below_half_says_half_diverged():
    from pyadapter.capture.window import Trial, WindowSearch

    search = WindowSearch(
        steps=40,
        start_step=0,
        captured_learning_rate=0.5,
        largest_finite=0.00195,
        smallest_non_finite=0.0039,
        trials=[Trial(0.00195, True), Trial(0.000977, False, None, 2), Trial(0.000488, True)],
        tried_suggestion=0.000488,
    )
    assert search.suggested == 0.000488
    assert search.to_json()["suggested_learning_rate"] == 0.000488
    assert search.sentence().startswith(
        "largest finite over the 40-step window: 0.00195; try 4.88e-4 (9.75e-4 diverged"
    )
    search.tried_suggestion = 0.000975  # half held: nothing more to say
    assert search.sentence() == "largest finite over the 40-step window: 0.00195; try 9.75e-4"


def test_a_short_window_suggests_a_tenth_of_its_largest_finite_rate():
    """Half of a 6-step window's largest finite rate (0.0486 -> 0.0243), followed, blew one fold's first epoch up to a
    loss of 3e19 and left four of five folds predicting the mean (s43c p8); a tenth (0.00486) trained every fold. A
    window shorter than 20 steps shows a rate stays finite that long, not that it trains."""
    from pyadapter.capture.window import Trial, WindowSearch

    search = WindowSearch(
        steps=6,
        start_step=0,
        captured_learning_rate=0.3,
        largest_finite=0.0486,
        smallest_non_finite=0.0972,
        trials=[Trial(0.0972, False, None, 3), Trial(0.0486, True), Trial(0.0243, True)],
        tried_suggestion=0.0243,
    )
    assert search.suggested == pytest.approx(0.00486)
    assert search.sentence() == (
        "largest finite over the 6-step window: 0.0486; try 0.00486 (a tenth of it: finite over 6 steps does not "
        "show it trains)"
    )
    search.steps = 20
    assert search.suggested == 0.0243


def test_a_schedule_inf_at_the_failing_step_is_no_restart_and_its_record_is_json() -> None:
    """A schedule that turns inf at the failing step (rsqrt(step - warmup) at the warm-up's end) is a jump of x inf
    from the step before: taken for a warm restart, the record held inf and no bundle could be written ("Out of
    range float values are not JSON compliant")."""
    import json

    keras = pytest.importorskip("keras")
    tf = pytest.importorskip("tensorflow")

    class WarmupRsqrt(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            step = tf.cast(step, tf.float32)
            return tf.where(step < 20.0, 0.01, tf.math.rsqrt(step - 20.0))

    record = learning_rate.of_step(keras.optimizers.SGD(WarmupRsqrt()), 20)
    assert record is not None and math.isinf(record.value) and record.restart is None, record
    json.dumps(record.to_json(), allow_nan=False)


def test_a_nan_rate_is_placed_at_the_line_that_made_the_nan_not_an_earlier_inf() -> None:
    """The tensorflow.org Transformer tutorial's schedule with ``warmup_steps=0``: ``arg1 = rsqrt(step)`` is inf at
    step 0 by design (``minimum`` drops it), and ``arg2 = step * warmup_steps ** -1.5`` is 0 * inf, NaN: the rate.
    The record named the rsqrt line, where a change (``rsqrt(step + 1)``) still left the rate NaN."""
    keras = pytest.importorskip("keras")
    tf = pytest.importorskip("tensorflow")

    class CustomSchedule(keras.optimizers.schedules.LearningRateSchedule):
        def __init__(self, d_model, warmup_steps=4000):
            self.d_model = tf.cast(d_model, tf.float32)
            self.warmup_steps = tf.cast(warmup_steps, tf.float32)

        def __call__(self, step):
            step = tf.cast(step, dtype=tf.float32)
            arg1 = tf.math.rsqrt(step)
            arg2 = step * (self.warmup_steps**-1.5)
            return tf.math.rsqrt(self.d_model) * tf.math.minimum(arg1, arg2)

    record = learning_rate.of_step(keras.optimizers.Adam(CustomSchedule(64, warmup_steps=0)), 0)
    assert record is not None and math.isnan(record.value), record
    assert record.line == CustomSchedule.__call__.__code__.co_firstlineno + 3, record
    assert record.code == "arg2 = step * (self.warmup_steps**-1.5)", record
