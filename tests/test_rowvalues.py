"""The origin op's rows are read from one eager run of the step, and from a traced graph run only when the eager run
cannot show them (the graph run re-traces the whole step under a dump: seconds at the sizes users train)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import numpy as np
import pytest
import tensorflow as tf

from pyadapter.findings import Finding, InputHealth, OpRef, TensorHealth
from pyadapter.replay.rowvalues import first_huge, origin_rows


def step(x: tf.Tensor) -> tf.Tensor:
    scaled = x * 2.0
    return tf.reduce_sum(tf.math.log(scaled), axis=1)


LOG_LINE = step.__code__.co_firstlineno + 2  # the line of `tf.math.log` in `step`, which the origin names


def batch_with_a_zero_row() -> np.ndarray:
    x = np.random.default_rng(0).uniform(1.0, 2.0, size=(8, 4)).astype("float32")
    x[5] = 0.0  # row 5 only: log(0) = -inf in its 4 values
    return x


def log_origin(line: int = LOG_LINE) -> Finding:
    return Finding(
        file=__file__,
        line=line,
        role="origin",
        op=OpRef(name="Log", type="Log", graph="step"),
        health=TensorHealth(dtype="float32", rank=2, size=32, neg_inf=4),
    )


def runner(
    x: np.ndarray, modes: list[str]
) -> Callable[[str, Callable[[], AbstractContextManager[None]]], None]:
    """`run_values` as the scene and the dumped replay give it: the step once, eagerly or traced, wrapped."""

    def run_values(mode: str, around: Callable[[], AbstractContextManager[None]]) -> None:
        modes.append(mode)
        with around():
            if mode == "eager":
                step(tf.constant(x))
            else:
                tf.function(step)(tf.constant(x))

    return run_values


def test_the_rows_come_from_one_eager_run_when_it_shows_the_origin() -> None:
    x, modes = batch_with_a_zero_row(), []
    rows = origin_rows(log_origin(), (x, None), runner(x, modes))
    assert rows is not None and rows.rows == [5]
    assert modes == ["eager"]  # no traced run of the step


@pytest.mark.parametrize("eager_first", [False, True])
def test_the_graph_run_names_them_when_the_eager_run_cannot(eager_first: bool) -> None:
    """Unseeded random draws (eager_first=False), or no eager op at the origin's line: the traced run, by op name."""
    x, modes = batch_with_a_zero_row(), []
    origin = log_origin(LOG_LINE if not eager_first else LOG_LINE - 1)  # a line the eager Log was not made at
    rows = origin_rows(origin, (x, None), runner(x, modes), eager_first=eager_first)
    assert rows is not None and rows.rows == [5]
    assert modes == (["eager", "graph"] if eager_first else ["graph"])


def test_a_run_that_drew_other_numbers_names_no_rows() -> None:
    """A step that draws unseeded random numbers (a DCGAN's noise) gets the traced run, which draws again: when its
    op holds other NaN/Inf counts than the dumped run's, its rows are another run's ("2 zeros ... in rows 5, 28, 51
    and 58"), and none are named."""
    x, modes = batch_with_a_zero_row(), []
    other = x.copy()
    other[2] = 0.0  # this run's draw made a second bad row: 8 -inf where the dump saw 4
    assert origin_rows(log_origin(), (x, None), runner(other, modes), eager_first=False) is None
    assert modes == ["graph"]


def test_a_failing_run_names_no_rows_and_raises_nothing() -> None:
    x = batch_with_a_zero_row()

    def failing(mode: str, around: Callable[[], AbstractContextManager[None]]) -> None:
        raise RuntimeError("the step cannot run")

    assert origin_rows(log_origin(), (x, None), failing) is None


def gaussian_nll(x: tf.Tensor) -> tf.Tensor:
    log_var = x * 40.0
    precision = tf.exp(-log_var)
    return tf.reduce_sum(precision * tf.square(x))


EXP_LINE = gaussian_nll.__code__.co_firstlineno + 2  # `tf.exp(-log_var)`: exp(40) = 2.4e17


def test_an_overflow_in_the_optimizer_names_where_the_values_first_grew_huge() -> None:
    """Adam's Square of a gradient too large to square is marked at apply_gradients (or fit), which says nothing of
    where the values grew: one eager run names the first op whose values passed 1e15, at its line."""
    x = np.array([[-1.0, 0.5]], dtype="float32")
    modes: list[str] = []

    def run_values(mode: str, around: Callable[[], AbstractContextManager[None]]) -> None:
        modes.append(mode)
        with around():
            gaussian_nll(tf.constant(x))

    square = Finding(
        file=__file__,
        line=1,
        role="origin",
        op=OpRef(name="adam/Square", type="Square", graph="train_step"),
        health=TensorHealth(dtype="float32", rank=2, size=2, pos_inf=1, pos=1),
        inputs=[InputHealth("adam/IdentityN:0", TensorHealth(dtype="float32", rank=2, size=2, pos=2))],
    )
    found = first_huge(square, run_values)
    assert found is not None and (found.op, found.line, found.file) == ("Exp", EXP_LINE, __file__), found
    assert 1e17 < found.largest < 1e18 and found.function == "gaussian_nll"
    assert modes == ["eager"]
    # The user's own op that overflowed is its own answer: no run for it.
    assert first_huge(log_origin(), run_values) is None and modes == ["eager"]
