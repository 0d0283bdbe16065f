"""`pyadapter.cause.rows`: the batch rows an op's NaN/Inf came from, and the value that sets such a row apart."""

from __future__ import annotations

import numpy as np

from pyadapter.cause.rows import BadRows, rows_of


def batch(y: list[float]) -> tuple[np.ndarray, np.ndarray]:
    x = np.arange(len(y) * 2, dtype=np.float32).reshape(len(y), 2)
    return x, np.array(y, dtype=np.float32).reshape(-1, 1)


def loss_values(bad_rows: list[int], rows: int = 8) -> np.ndarray:
    out = np.ones((rows, 1), dtype=np.float32)
    out[bad_rows] = np.nan
    return out


def test_a_label_far_outside_the_others_is_named_with_their_range() -> None:
    found = rows_of(loss_values([2]), batch([0, 1, 50, 1, 0, 0, 1, 1]))
    assert found is not None and found.rows == [2] and found.count == 1
    (outlier,) = found.outliers
    assert outlier.describe() == "y[2, 0] = 50 (the other 7 rows: 0 to 1)"


def test_a_negative_among_positives_and_a_zero_among_positives_are_unlike_the_others() -> None:
    found = rows_of(loss_values([5]), batch([10, 12, 30, 14, 18, -1, 11, 20]))
    assert found is not None and [o.element.describe() for o in found.outliers] == ["y[5, 0] = -1"]
    found = rows_of(loss_values([1]), batch([10, 0, 30, 14, 18, 16, 11, 20]))
    assert found is not None and [o.element.describe() for o in found.outliers] == ["y[1, 0] = 0"]


def test_an_id_of_zero_among_other_ids_is_not_unlike_them_but_a_missing_marker_is() -> None:
    """A recommender's user ids (int32, fed to an Embedding): id 0 beside ids 12 to 999 was "a value unlike the
    other rows'", and the user was sent to fix the record, where saturated weights made the log's 0. An id is a
    category, whatever its value; a -1 among ids is still the "missing" marker it looks like."""
    rng = np.random.default_rng(3)
    users = rng.integers(12, 1000, size=64).astype(np.int32)
    users[40] = 0
    items = rng.integers(0, 500, size=64).astype(np.int32)
    found = rows_of(
        loss_values([40], rows=64), ({"user": users, "item": items}, np.ones((64, 1), np.float32))
    )
    assert found is not None and found.rows == [40] and found.outliers == []
    users[40] = -1
    found = rows_of(
        loss_values([40], rows=64), ({"user": users, "item": items}, np.ones((64, 1), np.float32))
    )
    assert found is not None and [o.element.describe() for o in found.outliers] == ["x['user'][40] = -1"]
    # A few classes as integers: a label of 50 among 0s and 1s is still named by its range.
    labels = np.array([0, 1, 50, 1, 0, 0, 1, 1], dtype=np.int64).reshape(-1, 1)
    found = rows_of(loss_values([2]), (np.zeros((8, 2), np.float32), labels))
    assert found is not None and [o.element.describe() for o in found.outliers] == ["y[2, 0] = 50"]


def test_a_row_with_nothing_unusual_is_still_named_without_an_outlier() -> None:
    found = rows_of(loss_values([3, 6]), batch([0, 1, 0, 1, 0, 1, 1, 0]))
    assert found is not None and found.rows_text() == "rows 3 and 6" and found.outliers == []


def test_no_rows_when_every_row_or_none_is_bad_or_the_shape_is_not_rows_first() -> None:
    y = batch([0, 1, 0, 1, 0, 1, 1, 0])
    assert rows_of(loss_values(list(range(8))), y) is None  # a weight or a reduction, not one record
    assert rows_of(loss_values([]), y) is None
    assert (
        rows_of(np.full((64,), np.nan, dtype=np.float32), y) is None
    )  # features first (a std over the batch)


def test_the_record_survives_json_and_junk_is_refused() -> None:
    found = rows_of(loss_values([2]), batch([0, 1, 50, 1, 0, 0, 1, 1]))
    assert found is not None
    again = BadRows.from_json(found.to_json())
    assert again is not None and again.outliers[0].describe() == found.outliers[0].describe()
    for junk in (
        None,
        [],
        {"rows": "2"},
        {"rows": [2], "count": True, "batch_rows": 8},
        {"rows": [-1]},
        {"rows": [2], "count": 1, "batch_rows": 8, "outliers": [{"array": "y", "index": [], "value": 1}]},
        {
            "rows": [2],
            "count": 1,
            "batch_rows": 8,
            "outliers": [{"array": "y", "index": [2], "value": "x", "low": 0, "high": 1}],
        },
    ):
        assert BadRows.from_json(junk) is None, junk


def test_a_row_that_is_zero_throughout_where_no_other_is_is_named_whole() -> None:
    """An empty sequence (every token padding) among padded ones: no single value is unlike its column (others pad
    with 0 too), but the row as a whole is."""
    tokens = np.ones((6, 4, 2), dtype=np.float32)
    tokens[:, 3:] = 0.0  # every sequence has padding at its end
    tokens[4] = 0.0  # and one is nothing but padding
    found = rows_of(loss_values([4], rows=6), (tokens, np.zeros((6, 1), dtype=np.float32)))
    assert found is not None
    assert [o.describe() for o in found.outliers] == ["x[4] = 0 throughout (none of the other 5 rows is)"]
    assert found.outliers[0].record_text() == "x[4] (0 throughout)"
    again = BadRows.from_json(found.to_json())
    assert again is not None and again.outliers[0].whole_row


def test_two_all_padding_rows_in_one_batch_are_both_named_whole() -> None:
    """Two empty reviews in one batch: the rule wanted the only all-zero row of the batch, so with two it fell to
    the cell rule and named "x[22, 0] = 0", the first token of one of them, as a bad value."""
    tokens = np.ones((8, 5), dtype=np.float32)
    tokens[:, 4:] = 0.0
    tokens[[5, 6]] = 0.0
    found = rows_of(loss_values([5, 6]), (tokens, np.zeros((8, 1), dtype=np.float32)))
    assert found is not None
    assert [o.describe() for o in found.outliers] == [
        "x[5] = 0 throughout (none of the 6 rows without NaN/Inf is)",
        "x[6] = 0 throughout (none of the 6 rows without NaN/Inf is)",
    ]
    assert all(o.whole_row for o in BadRows.from_json(found.to_json()).outliers)


def test_an_empty_text_among_reviews_is_named_and_survives_json() -> None:
    """Raw strings fed to a TextVectorization: an empty review is an empty token sequence, a masked mean over it
    0 / 0. The row is named as an empty string; with two blank rows neither is unlike the others."""
    texts = np.array(
        [b"good plot", b"boring", b"fun fun", b"", b"awful actor", b"fine", b"great movie", b"bad"]
    )
    labels = np.zeros((8, 1), dtype=np.float32)
    found = rows_of(loss_values([3]), (texts, labels))
    assert found is not None and len(found.outliers) == 1
    (outlier,) = found.outliers
    assert outlier.describe() == "x[3] = '' (an empty string; none of the other 7 rows is)"
    assert outlier.record_text() == "x[3] (an empty string)"
    again = BadRows.from_json(found.to_json())
    assert again is not None and again.outliers[0].describe() == outlier.describe()
    # At the scene the batch is read from a tf.string tensor: an object array of bytes. It was not looked at, so
    # the scene said cause `op` where the replay (fixed-width bytes from the bundle) said `data`.
    scene = rows_of(loss_values([3]), (texts.astype(object), labels))
    assert scene is not None and [o.describe() for o in scene.outliers] == [outlier.describe()]
    texts[5] = b"   "
    found = rows_of(loss_values([3]), (texts, labels))
    assert found is not None and found.outliers == []


def test_a_pixel_that_differs_by_chance_is_not_a_bad_record() -> None:
    """keras.io's Siamese network: pairs of an image with itself give distance 0 and sqrt's gradient NaN in rows 2
    and 3. Across 784 pixels, some pixel of any row is 0 where the other 15 rows are not, or outside their range:
    the cause named `x[0][2, 1, 11] = 0` as the bad record. Good rows trip those rules among themselves, so they say
    nothing here; the rows are still named."""
    rng = np.random.default_rng(0)
    images = rng.uniform(0.0, 1.0, size=(16, 28, 28, 1)).astype(np.float32)
    images[rng.uniform(size=images.shape) < 0.02] = 0.0  # dark pixels, anywhere
    images[2, 1, 11, 0] = 0.0
    labels = (np.arange(16) % 2).astype(np.float32).reshape(-1, 1)
    found = rows_of(loss_values([2, 3], rows=16), ((images, images.copy()), labels))
    assert found is not None and found.rows == [2, 3] and found.outliers == [], found


def test_a_label_unlike_every_good_row_is_still_named_beside_wide_inputs() -> None:
    rng = np.random.default_rng(1)
    images = rng.uniform(0.0, 1.0, size=(16, 8, 8)).astype(np.float32)
    labels = (np.arange(16) % 2).astype(np.float32)
    labels[5] = 50.0
    found = rows_of(loss_values([5], rows=16), (images, labels))
    assert found is not None and [o.describe() for o in found.outliers] == [
        "y[5] = 50 (the other 15 rows: 0 to 1)"
    ]


def test_most_rows_bad_is_no_single_record_and_bad_rows_are_not_the_others() -> None:
    """An Exp that overflowed float16 in 56 of 64 rows was named `data`: "x[0, 2, 7] = 36.5 (the other 63 rows:
    -17.8 to 15.6)", measured against the first 5 bad rows left out only. More than half the rows bad is no one
    record's doing; and the other rows are the good ones."""
    rng = np.random.default_rng(2)
    x = (rng.normal(size=(64, 4, 8)) * 10).astype(np.float32)
    assert rows_of(loss_values(list(range(56)), rows=64), (x, np.zeros((64, 1), np.float32))) is None
    y = np.zeros((8, 1), np.float32)
    y[[1, 4]] = [[7.0], [9.0]]  # two bad records, both far from the good rows' 0
    found = rows_of(loss_values([1, 4]), (np.arange(16, dtype=np.float32).reshape(8, 2), y))
    assert found is not None and [o.describe() for o in found.outliers] == [
        "y[1, 0] = 7 (the 6 rows without NaN/Inf: 0)",
        "y[4, 0] = 9 (the 6 rows without NaN/Inf: 0)",
    ]


def test_an_empty_token_list_of_a_ragged_batch_is_the_record() -> None:
    """Bag-of-words over ragged token lists, the mean a sum over the row length: an empty document is 0 / 0. The
    rows were named without saying why ("in rows 8 and 28 of the batch only"); they are the empty sequences."""
    from pyadapter.capture.batchcodec import RaggedLeaf

    lengths = np.array([3, 5, 2, 4, 0, 6, 1, 2, 0, 3])
    splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = RaggedLeaf(np.arange(1, splits[-1] + 1, dtype=np.int64), (splits,))
    labels = (np.arange(10) % 2).astype(np.float32)
    found = rows_of(loss_values([4, 8], rows=10), (tokens, labels))
    assert found is not None and [o.record_text() for o in found.outliers] == [
        "x[4] (an empty sequence)",
        "x[8] (an empty sequence)",
    ]
    again = BadRows.from_json(found.to_json())
    assert again is not None and again.outliers[0].empty_sequence
    # An empty row among the good ones too: empty rows are ordinary here, not the cause.
    lengths[2] = 0
    splits = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = RaggedLeaf(np.arange(1, splits[-1] + 1, dtype=np.int64), (splits,))
    found = rows_of(loss_values([4, 8], rows=10), (tokens, labels))
    assert found is not None and found.outliers == []


def test_a_one_hot_category_the_bad_rows_share_is_not_a_bad_record() -> None:
    """A DQN's next states are one-hot: the rows whose next state is the high-value one overflow an exp. The 1 in
    that column is a valid state, not "a value unlike the other rows'" (which all hold 0 there); a 2 would be."""
    states = np.zeros((8, 4), dtype=np.float32)
    states[np.arange(8), [0, 2, 2, 1, 0, 2, 1, 0]] = 1.0
    found = rows_of(loss_values([1, 2, 5]), (states, np.zeros((8, 1), np.float32)))
    assert found is not None and found.rows == [1, 2, 5] and found.outliers == []
    states[2, 3] = 2.0  # not a one-hot value: named
    found = rows_of(loss_values([2]), (states, np.zeros((8, 1), np.float32)))
    assert found is not None and [o.element.describe() for o in found.outliers] == ["x[2, 3] = 2"]


def test_one_value_a_million_times_the_others_is_the_extreme_record() -> None:
    from pyadapter.cause.rows import extreme_record

    x = np.random.default_rng(0).uniform(0, 5, size=(32, 3)).astype(np.float32)
    x[9, 1] = 9.9e37
    found = extreme_record((x, np.zeros((32, 1), np.float32)))
    assert found is not None and found.element.describe() == "x[9, 1] = 9.9e+37", found
    assert found.good_rows == 31 and 0 <= found.low <= found.high <= 5
    # Raw units (thousands) or a sparse column of zeros with an ordinary value: no record stands out.
    assert extreme_record((x[:, :1] * 0 + np.arange(32, dtype=np.float32)[:, None] * 1e3,)) is None
    sparse = np.zeros((32, 1), np.float32)
    sparse[3] = 5.0
    assert extreme_record((sparse,)) is None


def test_a_pixel_of_sparse_images_is_no_bad_record_under_the_deviation_rule() -> None:
    """The deviation rule took each good row's own value into the others' mean and spread: no row of 16 can then
    lie 6 deviations out, so the leave-one-out check never dropped the range rule, and a pixel of 0.84 among sparse
    images (others 0 to 0.2) was named a bad record again."""
    rng = np.random.default_rng(0)
    images = np.zeros((16, 784), dtype=np.float32)
    for row in range(16):
        images[row, rng.choice(784, 40, replace=False)] = rng.uniform(0, 0.2, 40)
    images[0, 9] = 0.84
    found = rows_of(loss_values([0], rows=16), (images, np.zeros((16, 1), dtype=np.float32)))
    assert found is not None and found.outliers == [], [o.describe() for o in found.outliers]
