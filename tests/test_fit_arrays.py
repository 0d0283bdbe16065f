"""`pyadapter.capture.fit_arrays`: a failing batch's rows found by their values in the NumPy arrays passed to fit
(fit shuffles them, so the batch position names nothing in the user's data)."""

from __future__ import annotations

import numpy as np

from pyadapter.capture import fit_arrays


def arrays() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 6)).astype("float32")
    y = rng.normal(size=(500, 1)).astype("float32")
    x[123, 2] = np.nan  # a bad record: a NaN row must match itself
    return x, y


def test_each_batch_row_is_found_at_its_index_nan_rows_included() -> None:
    x, y = arrays()
    order = np.random.default_rng(1).permutation(500)[:32]
    order[7] = 123
    assert fit_arrays.rows_in(x[order], x, y[order], y) == [int(i) for i in order]


def test_copies_are_told_apart_by_y_and_rows_not_there_are_none() -> None:
    x, y = arrays()
    x[400] = x[10]  # the same features twice, other labels
    batch_x = np.stack([x[10], x[400], np.full(6, 9.0, "float32")])
    batch_y = np.stack([y[10], y[400], y[0]])
    assert fit_arrays.rows_in(batch_x, x, batch_y, y) == [10, 400, None]
    assert fit_arrays.rows_in(batch_x, x) == [None, None, None], "without labels a copy is not told apart"
    assert fit_arrays.rows_in(batch_x.astype("float64"), x) == [None, None, None], "another dtype is no match"


def fit(self, x=None, y=None):  # noqa: ARG001 - stands for keras's Trainer.fit: the frame the guard is called in
    return fit_arrays.manifest_entry((x[[5, 123]], y[[5, 123]]), self)


def test_the_manifest_entry_comes_from_the_fit_frame_of_the_same_model() -> None:
    x, y = arrays()
    model = object()
    entry = fit(model, x, y)
    assert entry == {"fit_rows": {"indices": [5, 123], "array_rows": 500}}
    assert fit_arrays.check(entry["fit_rows"]) is None
    assert fit_arrays.index_of_row(entry["fit_rows"], 1) == 123
    assert fit_arrays.manifest_entry((x[:2], y[:2]), object()) == {}, "another model's fit is not this one's"


def test_a_tampered_entry_is_refused_and_names_no_index() -> None:
    for junk in (
        [],
        {"indices": [1], "array_rows": -1},
        {"indices": [True], "array_rows": 5},
        {"indices": [7], "array_rows": 5},
        {"indices": "1,2", "array_rows": 5},
        {"indices": [0] * (fit_arrays.MAX_ROWS + 1), "array_rows": 5},
    ):
        assert fit_arrays.check(junk) is not None, junk
        assert fit_arrays.index_of_row(junk, 0) is None


def test_eager_tensors_passed_to_fit_are_searched_as_their_values() -> None:
    import tensorflow as tf

    def fit(self, x=None, y=None):  # noqa: ARG001 - keras's fit frame, given tensors
        return fit_arrays.manifest_entry((x.numpy()[[9, 123]], y.numpy()[[9, 123]]), self)

    x, y = arrays()
    entry = fit(object(), tf.constant(x), tf.constant(y))
    assert entry == {"fit_rows": {"indices": [9, 123], "array_rows": 500}}


def test_a_pipeline_sliced_from_arrays_in_memory_names_rows_of_those_arrays() -> None:
    """keras.io's structured data: ``Dataset.from_tensor_slices((dict(df), labels)).shuffle(...).batch(32)`` with
    a string column; the batch rows are found in the sliced arrays (the shuffle does not matter)."""
    import tensorflow as tf

    from pyadapter.capture import datasource
    from pyadapter.findings_text import index_text

    rng = np.random.default_rng(2)
    columns = {
        "age": rng.uniform(20, 70, (300, 1)).astype("float32"),
        "thal": np.array(["fixed", "normal"] * 150)[:, None],
        "chol": rng.uniform(150, 300, (300, 1)).astype("float32"),
    }
    columns["age"][217, 0] = np.nan
    labels = (rng.uniform(size=300) > 0.5).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((columns, labels)).shuffle(300, seed=4).batch(32)
    for batch in dataset:
        data = tf.nest.map_structure(lambda t: t.numpy(), batch)
        if np.isnan(data[0]["age"]).any():
            break
    row = int(np.flatnonzero(np.isnan(data[0]["age"][:, 0]))[0])
    entry = datasource.sliced_rows_entry(dataset, data)[fit_arrays.MANIFEST_KEY]
    assert fit_arrays.check(entry) is None and entry["of"] == fit_arrays.SLICES
    assert fit_arrays.index_of_row(entry, row, fit_arrays.SLICES) == 217
    assert fit_arrays.index_of_row(entry, row) is None, "not an index of arrays passed to fit"
    assert index_text({"index": 217, "of": fit_arrays.SLICES}) == (
        "row 217 of the arrays the dataset was sliced from (Dataset.from_tensor_slices)"
    )
    # A map that changes the values: its rows are not found (a wrong index is worse than none).
    mapped = tf.data.Dataset.from_tensor_slices((columns, labels)).map(
        lambda x, y: ({**x, "age": x["age"] + 1.0}, y)
    )
    first = tf.nest.map_structure(lambda t: t.numpy(), next(iter(mapped.batch(8))))
    found = datasource.sliced_rows_entry(mapped.batch(8), first).get(fit_arrays.MANIFEST_KEY)
    assert found is None or all(i is None for i in found["indices"]), found


def test_a_nan_the_sliced_arrays_hold_is_marked_held_and_one_a_map_makes_is_not() -> None:
    """``from_tensor_slices((X, y, sw))`` with a sample weight a pandas left merge made NaN (s42f p3): the guard
    found the row in the sliced arrays, but `nanlens locate` re-ran the whole pipeline under a dump (past 600 s) to
    learn that no op of it made the NaN. The entry says the arrays hold the bad value as the batch has it; a map
    that makes the NaN (a log of a weight of 0) is not marked."""
    import tensorflow as tf

    from pyadapter.capture import datasource

    rng = np.random.default_rng(3)
    x = rng.normal(size=(200, 3)).astype("float32")
    y = (rng.uniform(size=200) > 0.5).astype("float32")
    sw = np.ones(200, np.float32)
    sw[156] = np.nan

    def failing_batch(dataset: tf.data.Dataset) -> tuple[np.ndarray, ...]:
        for batch in dataset:
            data = tuple(t.numpy() for t in batch)
            if not np.isfinite(data[2]).all():
                return data
        raise AssertionError("no batch holds the NaN")

    dataset = tf.data.Dataset.from_tensor_slices((x, y, sw)).shuffle(200, seed=3).batch(32)
    data = failing_batch(dataset)
    entry = datasource.sliced_rows_entry(dataset, data)[fit_arrays.MANIFEST_KEY]
    row = int(np.flatnonzero(np.isnan(data[2]))[0])
    assert fit_arrays.index_of_row(entry, row, fit_arrays.SLICES) == 156
    assert entry["held"] is True and fit_arrays.check(entry) is None, entry
    sw[156] = 0.0
    mapped = (
        tf.data.Dataset.from_tensor_slices((x, y, sw))
        .map(lambda a, b, w: (a, b, tf.math.log(w) + 1.0))
        .shuffle(200, seed=3)
        .batch(32)
    )
    entry = datasource.sliced_rows_entry(mapped, failing_batch(mapped))[fit_arrays.MANIFEST_KEY]
    assert "held" not in entry, entry
    assert fit_arrays.check({**entry, "held": "yes"}) == "has a 'held' that is not true or false"


def test_texts_sliced_into_a_pipeline_are_found_by_their_value() -> None:
    """Raw reviews ``from_tensor_slices((texts, labels)).shuffle(...).batch(32)`` into a TextVectorization: a
    tf.string batch reads as an object array of bytes, whose rows were compared by the objects' addresses, so no
    row was found and an empty review was named by its shuffled position only."""
    import tensorflow as tf

    from pyadapter.capture import datasource

    rng = np.random.default_rng(5)
    words = np.array(["good", "bad", "plot", "actor", "boring", "great", "film"])
    texts = np.array([" ".join(rng.choice(words, size=3 + i % 5)) + f" {i}" for i in range(200)])
    texts[137] = ""
    labels = (rng.uniform(size=200) > 0.5).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((texts, labels)).shuffle(200, seed=3).batch(32)
    for batch in dataset:
        data = tf.nest.map_structure(lambda t: t.numpy(), batch)
        if b"" in list(data[0]):
            break
    assert data[0].dtype == object
    row = list(data[0]).index(b"")
    entry = datasource.sliced_rows_entry(dataset, data)[fit_arrays.MANIFEST_KEY]
    assert fit_arrays.check(entry) is None
    assert fit_arrays.index_of_row(entry, row, fit_arrays.SLICES) == 137
    assert all(i is not None for i in entry["indices"])  # every text is unique here: every row is found


def test_a_row_held_twice_is_named_by_both_indices() -> None:
    """Two empty reviews with the same label: the batch row was matched twice and named by its shuffled position
    ("index 185 of the array passed to fit (in the shuffled order)", a normal review). Both indices are named."""
    from pyadapter.cause.provenance import data_provenance
    from pyadapter.findings_text import index_text

    texts = np.array([f"review {i}" for i in range(400)], dtype=object)
    texts[150] = texts[333] = ""
    labels = np.zeros(400, dtype="float32")

    def fit(self, x=None, y=None):  # noqa: ARG001 - stands for keras's Trainer.fit
        return fit_arrays.manifest_entry((x[[3, 150, 7]], y[[3, 150, 7]]), self)

    model = object()
    entry = fit(model, texts, labels)["fit_rows"]
    assert entry["indices"] == [3, None, 7] and entry["copies"] == {"1": [150, 333]}, entry
    assert fit_arrays.check(entry) is None and fit_arrays.copies_of_row(entry, 1) == [150, 333]
    for junk in ({"1": [150]}, {"9": [150, 333]}, {"1": [150, 999]}, {"x": [1, 2]}, []):
        assert fit_arrays.check({**entry, "copies": junk}) is not None, junk
    batch = (texts[[3, 150, 7]].astype(object), labels[[3, 150, 7]])
    batch[1][1] = np.nan  # the label of the empty review's row: the batch's bad element
    where = data_provenance(
        batch, None, batch_index=5, epoch=0, batch_size=32, shuffled=True, cwd=None, fit_rows=entry
    )
    assert where is not None and where["copies"] == [150, 333], where
    assert index_text(where) == "index 150 or 333 (the same values) of the array passed to fit"
