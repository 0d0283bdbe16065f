"""The guard's step history: a run whose learning rate is too high shows its divergence in the bundle.

Real Keras training that diverges (plain SGD on unscaled features) until the loss overflows; the bundle's
``loss_history`` must show the growth, with numbers that agree with what the user can compute from the model.
"""

from __future__ import annotations

import math
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from pyadapter import CaptureBundle, NanGuard, NonFiniteStepError, guard_step  # noqa: E402

pytestmark = pytest.mark.slow

LEARNING_RATE = 1e-4
BATCH = 64
KEYS = {
    "step",
    "loss",
    "logged_loss",
    "grad_norm",
    "weight_norm",
    "update_ratio",
    "max_abs_output",
    "learning_rate",
}


def house_prices(batches: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """Features in raw units (0-100, never standardized): too much for SGD at 1e-4, which diverges in ~30 steps."""
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 100, (BATCH * batches, 8)).astype("float32")
    y = (x @ rng.normal(size=(8, 1))).astype("float32")
    return x, y


def regression_model() -> keras.Model:
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])  # a linear regression


def finite_tail(history: list[dict], count: int) -> list[dict]:
    """The last `count` rows before the loss first overflowed."""
    first_bad = next(i for i, row in enumerate(history) if row["loss"] is None)
    assert history[first_bad]["loss_nonfinite"] == "inf", history[first_bad]
    rows = history[max(0, first_bad - count) : first_bad]
    assert len(rows) == count, rows
    return rows


def assert_growth(history: list[dict], failing_step: int) -> None:
    steps = [row["step"] for row in history]
    assert steps == list(range(steps[0], failing_step + 1)), "consecutive steps, ending at the failing one"
    assert all(KEYS <= set(row) for row in history)
    tail = finite_tail(history, 8)
    losses = [row["loss"] for row in tail]
    norms = [row["grad_norm"] for row in tail]
    assert all(b > 2 * a for a, b in zip(losses, losses[1:], strict=False)), (
        f"loss grows geometrically: {losses}"
    )
    assert all(b > a for a, b in zip(norms, norms[1:], strict=False)), f"gradient norm grows: {norms}"
    assert all(row["weight_norm"] > 0 and row["update_ratio"] > 0 for row in tail)


def assert_sgd_update_ratio(history: list[dict]) -> None:
    """Plain SGD moves the weights by lr * gradient: ratio * ||w before|| must equal lr * ||g|| (both measured)."""
    for before, row in zip(history, history[1:], strict=False):
        if row["update_ratio"] is None or before["weight_norm"] is None or row["grad_norm"] is None:
            continue
        update = row["update_ratio"] * before["weight_norm"]
        assert update == pytest.approx(LEARNING_RATE * row["grad_norm"], rel=1e-3), row


def weights_norm(model: keras.Model) -> float:
    return math.sqrt(
        sum(float(np.sum(np.square(w.numpy().astype("float64")))) for w in model.trainable_weights)
    )


def test_fit_history_shows_the_divergence(tmp_path):
    keras.utils.set_random_seed(0)
    x, y = house_prices()
    model = regression_model()
    model.compile(keras.optimizers.SGD(learning_rate=LEARNING_RATE), "mse")
    guard = NanGuard(tmp_path, verbose=False, locate=False)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[guard])

    assert guard.last_bundle is not None, "the run diverged until the loss overflowed"
    bundle = CaptureBundle.load(guard.last_bundle)
    history = bundle.loss_history
    assert history[0]["step"] == 0, "the default window (256) holds the whole short run"
    assert_growth(history, bundle.step)
    assert history[-1]["loss"] is None and history[-1]["loss_nonfinite"] == "inf", (
        "fit stops at the first Inf loss"
    )
    assert history[-1]["grad_norm"] > history[-2]["grad_norm"], "its gradients were still finite (and larger)"
    assert_sgd_update_ratio(history)
    assert history[0]["update_ratio"] is None, "no weights before the window: no ratio"
    assert [row["learning_rate"] for row in history] == [pytest.approx(LEARNING_RATE)] * len(history), (
        "its rate"
    )
    assert history[-1]["update_ratio"] is None, "the failing step's update was not applied"
    # The failing step left the weights as they were: the last weight norm is the model's, as numpy computes it.
    assert history[-1]["weight_norm"] == pytest.approx(weights_norm(model), rel=1e-5)
    # max |y_pred| of the failing step: what the model predicts for the captured batch.
    features = bundle.batch()[0]
    predicted = np.max(np.abs(model(features).numpy().astype("float64")))
    assert history[-1]["max_abs_output"] == pytest.approx(predicted, rel=1e-5)
    assert history[-2]["logged_loss"] is not None and history[-2]["logged_loss"] < history[-2]["loss"], (
        "Keras logs the running mean, which lags the growing loss"
    )


def test_history_size_limits_the_window_and_zero_adds_no_ops(tmp_path):
    x, y = house_prices()
    windows = {}
    for size in (5, 0):
        keras.utils.set_random_seed(0)
        model = regression_model()
        model.compile(keras.optimizers.SGD(learning_rate=LEARNING_RATE), "mse")
        guard = NanGuard(tmp_path / str(size), verbose=False, locate=False, history_size=size)
        model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[guard])
        assert guard.last_bundle is not None
        windows[size] = CaptureBundle.load(guard.last_bundle)
        op_types = set()
        for function in model.__dict__["_nanlens_guarded_train_functions"].values():
            for concrete in function._one_step._list_all_concrete_functions():
                graph = concrete.graph.as_graph_def()
                op_types |= {node.op for node in graph.node}
                op_types |= {node.op for f in graph.library.function for node in f.node_def}
        assert ("L2Loss" in op_types) == (size > 0), f"history_size={size}: {sorted(op_types)}"
    assert [row["step"] for row in windows[5].loss_history] == list(
        range(windows[5].step - 4, windows[5].step + 1)
    )
    assert windows[0].loss_history == [] and windows[0].step == windows[5].step, "same run, same failing step"


def test_custom_loop_history_shows_the_divergence(tmp_path):
    keras.utils.set_random_seed(0)
    x, y = house_prices()
    model = regression_model()
    optimizer = keras.optimizers.SGD(learning_rate=LEARNING_RATE)
    loss_fn = keras.losses.MeanSquaredError()
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)

    @guard_step(model=model, optimizer=optimizer, capture_dir=tmp_path, verbose=False, locate=False)
    @tf.function
    def train_step(bx, by):
        with tf.GradientTape() as tape:
            loss = loss_fn(by, model(bx, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    with pytest.raises(NonFiniteStepError):
        for bx, by in dataset:
            train_step(bx, by)

    bundle = CaptureBundle.load(train_step.last_bundle)
    history = bundle.loss_history
    assert_growth(history, bundle.step)
    # The loop's loss does not go through model.compute_loss, but it is what the step differentiates, so it is
    # checked before the update: the step is stopped on its infinite loss while the gradients are still finite
    # (no step trains on an infinite loss until the gradients overflow too).
    last = history[-1]
    assert last["loss_nonfinite"] == "inf" and last["grad_norm"] is not None and last["grad_norm"] > 1e10
    assert all(row["loss"] is not None for row in history[:-1])
    assert bundle.non_finite.loss and bundle.non_finite.gradients == []
    assert_sgd_update_ratio(history)
    assert all(row["logged_loss"] is None for row in history), "a custom loop logs nothing"
    # The step computes its loss without model.compute_loss: y_pred is not seen, so not measured (no marker).
    assert all(row["max_abs_output"] is None and "max_abs_output_nonfinite" not in row for row in history)


@pytest.mark.parametrize("mode", ["eager", "graph", "xla"])
def test_the_largest_output_is_nan_inf_or_its_size_as_the_predictions_are(mode):
    """max |y_pred| in the history: a NaN anywhere reads NaN (XLA's reduce_max alone would drop it), an Inf reads
    Inf, a dict of outputs reads the largest of them, and float16 is measured in float32."""
    from pyadapter.capture.gate_checks import max_abs

    measure = {
        "eager": max_abs,
        "graph": tf.function(max_abs),
        "xla": tf.function(max_abs, jit_compile=True),
    }[mode]
    cases = [
        (np.array([[1.0, np.nan, -7.0]], "float32"), math.nan),
        (np.array([[np.nan, np.inf]], "float32"), math.nan),
        (np.array([[1.0, -np.inf, 2.0]], "float32"), math.inf),
        (np.array([[3.0, -9.5], [2.0, 0.5]], "float32"), 9.5),
        (np.array([[60000.0, -65504.0]], "float16"), 65504.0),
    ]
    for array, expected in cases:
        value = float(measure(tf.constant(array)))
        assert math.isnan(value) if math.isnan(expected) else value == expected, (array, value)
    both = {"a": tf.constant([[1.0, -4.0]]), "b": tf.constant([[2.5]])}
    assert float(measure(both)) == 4.0
    assert float(measure({"a": tf.constant([[1.0]]), "b": tf.constant([[np.nan]])})) != 1.0


@pytest.mark.parametrize("compiled", [False, True])
def test_the_norms_keep_the_finite_verdict_of_the_plain_sums(compiled):
    """The gate's checks reduce to sums of squares when the history is on. Squares of |x| > 1.8e19 overflow where
    the old plain sums did not: the verdict must not change, and the norm must still be right."""
    from pyadapter.capture.gate import finite_flags, finite_flags_and_norm

    cases = {
        "huge but finite": [np.array([1e20, -3e20], "float32"), np.array([1.0, 2.0], "float32")],
        "ordinary": [
            np.array([3.0, 4.0], "float32"),
            np.array([[12.0]], "float64"),
            np.array([1e3, 1e3], "float16"),
        ],
        "inf": [np.array([np.inf, 1.0], "float32"), np.array([1e20], "float32")],
        "nan": [np.array([np.nan], "float32"), np.array([2.0], "float32")],
        "sum overflows": [np.array([3e38, 3e38], "float32")],  # the plain sum is Inf: "not finite", as before
    }
    check = tf.function(finite_flags_and_norm) if compiled else finite_flags_and_norm
    for name, arrays in cases.items():
        values = [tf.constant(a) for a in arrays]
        flags, norm = check(values)
        assert flags.numpy().tolist() == finite_flags(values).numpy().tolist(), name
        expected = math.sqrt(sum(float(np.sum(np.square(a.astype("float64")))) for a in arrays))
        if name == "nan":
            assert math.isnan(float(norm)), name
        elif expected > np.finfo("float32").max:  # Inf, or a norm beyond float32 (the "sum overflows" case)
            assert float(norm) == math.inf, name
        else:
            assert float(norm) == pytest.approx(expected, rel=1e-6), name


@pytest.mark.parametrize(
    "shape",
    # (256, 512) and (768, 3072): fewer rows than sample blocks, where blocks spaced by a divisor of the row would
    # all start in the same few columns; (1024, 1024): a spacing near a multiple of the row would do the same.
    [(64, 64), (1024, 1024), (300, 200), (8, 768, 96), (70001,), (256, 512), (768, 3072), (3, 3, 64, 128)],
)
def test_large_updates_are_measured_on_a_sample_to_a_few_percent(shape):
    """The history's update norm reads a sample (blocks of a cache line spread over the tensor) of an update of more
    than UPDATE_SAMPLE values (a full pass was 1.8% of a 47M-parameter step). Units differ: a quarter of the columns
    dead (zero update), a few 5x larger, as a layer's units do. The sample must still give the norm to a few
    percent, for assign_add/assign_sub (the update) and for assign (new value minus old), and exactly below the
    sample size."""
    from pyadapter.capture.gate_checks import UPDATE_SAMPLE, sampled_half_squares32

    rng = np.random.default_rng(7)
    scale = rng.uniform(0.5, 2.0, size=shape[-1])
    scale[rng.permutation(shape[-1])[: shape[-1] // 4]] = 0.0
    scale[rng.permutation(shape[-1])[:3]] = 5.0
    update = (rng.normal(size=shape) * scale).astype("float32")
    old = rng.normal(size=shape).astype("float32")
    exact = 0.5 * float(np.sum(np.square(update.astype("float64"))))
    tolerance = 1e-5 if update.size <= UPDATE_SAMPLE else 0.05
    measured = tf.function(sampled_half_squares32)(tf.constant(update))
    assert float(measured) == pytest.approx(exact, rel=tolerance)
    variable = tf.Variable(old)
    new = old + update
    exact_assign = 0.5 * float(np.sum(np.square(new.astype("float64") - old.astype("float64"))))
    measured_assign = tf.function(lambda: sampled_half_squares32(tf.constant(new), variable))()
    assert float(measured_assign) == pytest.approx(exact_assign, rel=tolerance)


@pytest.mark.parametrize("shape", [(1024, 1024), (256, 512), (768, 3072), (3, 3, 64, 128), (4800, 40)])
def test_a_sampled_update_sees_every_unit(shape):
    """An update that moves one unit only (one column: the others' gradients are zero, as for dead ReLU units) is
    still measured: the sample reads every column, not a few bands of them (a spacing that divides the row, or sits
    just above a multiple of it, would)."""
    from pyadapter.capture.gate_checks import sampled_half_squares32

    rng = np.random.default_rng(3)
    row = shape[-1]
    measure = tf.function(sampled_half_squares32)
    for column in sorted({0, 1, row // 3, row // 2 + 1, row - 1}):
        update = np.zeros(shape, "float32")
        update[..., column] = rng.normal(size=shape[:-1])
        exact = 0.5 * float(np.sum(np.square(update.astype("float64"))))
        measured = float(measure(tf.constant(update)))
        # A unit outside the sample reads 0. Inside, its few samples (16384 / row of them, 5 for a 3072-wide row)
        # give its norm to within a factor of a few, not percent: the bound says "seen", not "accurate".
        assert exact / 10 < measured < exact * 10, (column, measured, exact)


@pytest.mark.parametrize("compiled", [False, True])
def test_gradients_too_large_to_square_fail_with_their_finite_norm(compiled):
    """A gradient of 1e20 is finite, but Adam's second moment (g * g) of it is +Inf, and every later update NaN.
    The gate's gradient check (``squares_must_fit``) fails such a tensor and keeps its exact, finite norm, which
    is how the report tells "too large" from NaN/Inf; weights (no ``squares_must_fit``) keep the plain verdict."""
    from pyadapter.capture.gate_checks import finite_flags_and_norm, too_large_to_square

    def gradients(values):
        return finite_flags_and_norm(values, squares_must_fit=True)

    check = tf.function(gradients) if compiled else gradients
    flags, norm = check([tf.constant([1e20, -3e20], tf.float32), tf.constant([1.0, 2.0], tf.float32)])
    assert flags.numpy().tolist() == [False, True]
    assert float(norm) == pytest.approx(math.sqrt(1e40 + 9e40), rel=1e-6)
    assert too_large_to_square(float(norm))
    flags, norm = check([tf.constant([np.nan, 1e20], tf.float32), tf.constant([1.0], tf.float32)])
    assert flags.numpy().tolist() == [False, True] and not too_large_to_square(float(norm))
    flags, norm = check([tf.constant([3.0, 4.0], tf.float32)])
    assert flags.numpy().tolist() == [True] and float(norm) == pytest.approx(5.0)
    flags, _ = finite_flags_and_norm([tf.constant([1e20], tf.float32)])
    assert flags.numpy().tolist() == [True]
