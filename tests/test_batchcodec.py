"""Batch leaves that are not one plain array (ragged and sparse tensors, strings ending in NUL bytes) go into a
bundle's batch.npz without pickle and come back as the same tensors; damaged descriptions are one-line errors.
And the Python code feeding fit (a generator, a PyDataset) is found in the sources for a data cause.

Real TensorFlow tensors; no program is run (the programs are in test_data_shapes.py)."""

from __future__ import annotations

import ast
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from pyadapter.capture import batchcodec, structure  # noqa: E402
from pyadapter.capture.snapshot import to_tensors  # noqa: E402
from pyadapter.cause.python_feed import feed_site  # noqa: E402
from pyadapter.cause.sources import SourceUnit  # noqa: E402
from pyadapter.replay.batchhealth import batch_problem  # noqa: E402


def round_trip(batch, tmp_path, any_rows: bool = False):
    """describe -> .npz on disk + JSON -> read back, as a bundle stores and reads a batch."""
    arrays: dict[str, np.ndarray] = {}
    described = json.loads(json.dumps(structure.describe(batch, arrays)))
    assert all(array.dtype != object for array in arrays.values())
    structure.write_npz(tmp_path / "batch.npz", arrays)
    read = structure.read_npz(tmp_path / "batch.npz")
    return described, structure.rebuild(described, read, any_rows=any_rows)


def test_a_ragged_batch_comes_back_ragged_with_its_empty_row(tmp_path):
    ids = tf.ragged.constant([[3, 1, 4], [], [1, 5, 9, 2, 6]], dtype=tf.int64)
    nested = tf.ragged.constant([[[1.0, 2.0], [3.0]], [[np.nan]]], dtype=tf.float32)
    batch = (
        {"ids": batchcodec.from_tf(ids), "nested": batchcodec.from_tf(nested)},
        np.array([0.5, 1.0, 2.0]),
    )
    described, back = round_trip(batch, tmp_path)
    assert described["items"][0]["items"][0]["type"] == "ragged"
    tensors = to_tensors(back)
    assert isinstance(tensors[0]["ids"], tf.RaggedTensor)
    assert tensors[0]["ids"].to_list() == [[3, 1, 4], [], [1, 5, 9, 2, 6]]
    assert tensors[0]["ids"].row_lengths().numpy().tolist() == [3, 0, 5]
    assert tensors[0]["nested"].ragged_rank == 2
    np.testing.assert_array_equal(tensors[0]["nested"].flat_values.numpy(), [1.0, 2.0, 3.0, np.nan])
    # The NaN inside a ragged leaf is seen by the batch check, by its place among the leaf's values.
    problem = batch_problem(back)
    assert problem is not None and problem.examples == ["x['nested'].values[3] = nan"]


def test_a_sparse_batch_comes_back_sparse(tmp_path):
    counts = tf.sparse.reorder(
        tf.SparseTensor([[0, 7], [2, 1], [2, 999]], tf.constant([2.0, 1.0, 3.0]), dense_shape=[3, 1000])
    )
    _, back = round_trip((batchcodec.from_tf(counts), np.zeros((3, 1), "float32")), tmp_path)
    x = to_tensors(back)[0]
    assert isinstance(x, tf.SparseTensor)
    np.testing.assert_array_equal(tf.sparse.to_dense(x).numpy(), tf.sparse.to_dense(counts).numpy())
    assert x.dense_shape.numpy().tolist() == [3, 1000]


def test_strings_ending_in_nul_bytes_come_back_exactly(tmp_path):
    """A serialized tf.train.Example whose last feature is 0.0 ends in NUL bytes; a fixed-width S array drops them
    and the proto no longer parses."""
    example = tf.train.Example(
        features=tf.train.Features(
            feature={"x": tf.train.Feature(float_list=tf.train.FloatList(value=[0.0]))}
        )
    ).SerializeToString()
    assert example.endswith(b"\x00")
    fed = tf.constant(
        [example, example]
    ).numpy()  # what NanGuard reads from the batch: an object array of bytes
    described, back = round_trip((fed,), tmp_path)
    assert described["items"][0]["type"] == "strings"
    assert back[0].tolist() == [example, example]
    parsed = tf.io.parse_example(to_tensors(back)[0], {"x": tf.io.FixedLenFeature([1], tf.float32)})
    assert parsed["x"].numpy().tolist() == [[0.0], [0.0]]


def test_plain_text_stays_a_fixed_width_array_as_older_bundles_have_it(tmp_path):
    text = tf.constant([["great movie"], ["¡muy buena!"]]).numpy()
    described, back = round_trip((text,), tmp_path)
    assert described["items"][0] == {"type": "array", "key": "a000", "dtype": "|S12", "shape": [2, 1]}
    assert to_tensors(back)[0].numpy().tolist() == text.tolist()


def test_multi_worker_shards_of_a_strings_leaf_keep_their_own_row_count(tmp_path):
    leaf = np.array([b"a\x00", b"bc", b"d\x00"], dtype=object)
    arrays: dict[str, np.ndarray] = {}
    described = structure.describe((leaf,), arrays)
    shard: dict[str, np.ndarray] = {}
    structure.describe((leaf[:1],), shard)
    (back,) = structure.rebuild(described, shard, any_rows=True)
    assert back.tolist() == [b"a\x00"]


def _damaged(description: dict, arrays: dict, change) -> str:
    change(description, arrays)
    with pytest.raises(structure.StructureError) as caught:
        structure.rebuild(description, arrays)
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    "splits, expected",
    [
        ([0, 2, 9], "row splits (level 0) do not fit its values"),  # past the 3 values
        ([1, 2, 3], "row splits (level 0) do not fit its values"),  # not starting at 0
        ([0, 3, 2], "row splits (level 0) do not fit its values"),  # decreasing
        ([[0, 3]], "not 1-D int32/int64"),
        ([0.0, 3.0], "not 1-D int32/int64"),
        ([], "row splits (level 0) do not fit its values"),
    ],
)
def test_a_damaged_ragged_description_is_one_line(splits, expected):
    arrays: dict[str, np.ndarray] = {}
    described = structure.describe(batchcodec.from_tf(tf.ragged.constant([[1, 2], [3]])), arrays)
    damaged = np.array(splits, dtype=np.float64 if splits and isinstance(splits[0], float) else np.int64)
    (part,) = described["row_splits"]
    arrays[part["key"]] = damaged
    part.update(shape=list(damaged.shape), dtype=damaged.dtype.str)  # the description agrees with the array
    assert expected in _damaged(described, arrays, lambda d, a: None)


def test_a_ragged_description_without_row_splits_is_one_line():
    arrays: dict[str, np.ndarray] = {}
    described = structure.describe(batchcodec.from_tf(tf.ragged.constant([[1, 2], [3]])), arrays)
    assert "no row splits" in _damaged(described, arrays, lambda d, a: d.update(row_splits=[]))


def test_a_sparse_index_outside_its_shape_is_refused():
    arrays: dict[str, np.ndarray] = {}
    described = structure.describe(batchcodec.from_tf(tf.SparseTensor([[0, 1]], [1.0], [2, 4])), arrays)
    arrays[described["indices"]["key"]] = np.array([[0, 4]], dtype=np.int64)
    assert "outside its dense shape" in _damaged(described, arrays, lambda d, a: None)


def test_strings_offsets_past_their_data_are_refused():
    arrays: dict[str, np.ndarray] = {}
    described = structure.describe(np.array([b"a\x00", b"b"], dtype=object), arrays)
    arrays[described["ends"]["key"]] = np.array([2, 9], dtype=np.int64)
    assert "offsets" in _damaged(described, arrays, lambda d, a: None)


def test_any_damage_to_a_composite_description_is_a_structure_error_or_a_valid_leaf():
    """A bundle is untrusted data: random changes to the description or the arrays of ragged, sparse and string
    leaves give a one-line StructureError (or, when still consistent, a leaf), never another exception."""
    import random

    rng = random.Random(14)
    batch = {
        "ids": batchcodec.from_tf(tf.ragged.constant([[[1, 2], [3]], [[4]], []], dtype=tf.int64)),
        "counts": batchcodec.from_tf(tf.SparseTensor([[0, 1], [2, 3]], [1.0, 2.0], [3, 4])),
        "records": np.array([b"a\x00", b"", b"bc"], dtype=object),
    }
    arrays: dict[str, np.ndarray] = {}
    clean = json.dumps(structure.describe(batch, arrays))
    junk = [None, [], {}, -1, 0, 2**70, 1.5, True, "ragged", "array", [3], [-1], {"type": "array"}]
    for _ in range(400):
        description = json.loads(clean)
        changed = {k: v.copy() for k, v in arrays.items()}
        nodes = [description]
        places = []
        while nodes:
            node = nodes.pop()
            for key in list(node) if isinstance(node, dict) else range(len(node)):
                places.append((node, key))
                if isinstance(node[key], (dict, list)):
                    nodes.append(node[key])
        if rng.random() < 0.6:
            node, key = rng.choice(places)
            node[key] = rng.choice(junk)
        else:
            key = rng.choice(sorted(changed))
            changed[key] = rng.choice(
                [changed[key][::-1].copy(), changed[key][:1].copy(), changed[key] * 7, changed[key] - 5]
            )
        try:
            structure.rebuild(description, changed)
        except structure.StructureError as error:
            assert "\n" not in str(error)


# ---- the Python code that feeds fit ---------------------------------------------------------------------------


def unit(text: str) -> SourceUnit:
    return SourceUnit("/work/train.py", None, text, ast.parse(text))


GENERATOR = """
import numpy as np
def batches(size=32):
    rng = np.random.default_rng(0)
    while True:
        x = rng.normal(size=(size, 4))
        yield x, x.sum(axis=1)
train = batches()
model.fit(train, steps_per_epoch=10, validation_data=(xv, yv))
"""

PYDATASET = """
import keras
class Scans(keras.utils.PyDataset):
    def __len__(self):
        return 10
    def __getitem__(self, index):
        if index < 0:
            return None, None
        x = load(index)
        return x / x.std(), labels[index]
model.fit(Scans(workers=2), epochs=3)
"""

FROM_GENERATOR = """
import tensorflow as tf
def rows():
    for line in open("data.txt"):
        yield float(line)
ds = tf.data.Dataset.from_generator(rows, output_signature=tf.TensorSpec((), tf.float32)).batch(8)
model.fit(ds.map(lambda x: (x, x)))
"""

ARRAYS = """
import numpy as np
x = np.genfromtxt("data.csv", delimiter=",")
def helper():
    yield 1
model.fit(x[:, :3], x[:, 3])
"""


def test_the_generator_passed_to_fit_is_found_at_its_yield():
    site = feed_site([unit(GENERATOR)])
    assert site is not None and (site.feed, site.function, site.line) == ("generator", "batches", 7)
    assert site.describe() == "the generator batches()"


def test_the_pydataset_passed_to_fit_is_found_at_its_getitem_return():
    site = feed_site([unit(PYDATASET)])
    assert site is not None and (site.feed, site.function, site.line) == (
        "PyDataset",
        "Scans.__getitem__",
        10,
    )


def test_a_from_generator_generator_is_found():
    site = feed_site([unit(FROM_GENERATOR)])
    assert site is not None and (site.function, site.line) == ("rows", 5)


FACTORY = """
import csv
import tensorflow as tf
def row_generator(files):
    def gen():
        for path in files:
            with open(path) as handle:
                for row in csv.DictReader(handle):
                    yield [float(row[k]) for k in FEATURES], float(row["y"])
    return gen
ds = tf.data.Dataset.from_generator(row_generator(train_files), output_signature=SIGNATURE).batch(32)
model.fit(ds, epochs=3)
"""


def test_a_generator_a_factory_returns_is_found_at_its_yield():
    """``from_generator(row_generator(files))``, the factory defining ``gen()`` and returning it: the data cause was
    marked at the from_generator statement and the generator was never named."""
    site = feed_site([unit(FACTORY)])
    assert site is not None and (site.feed, site.function, site.line) == ("generator", "gen", 9), site


CALLABLE_READER = """
import numpy as np
import tensorflow as tf
class RecordReader:
    def __init__(self, path):
        self.path = path
    def __call__(self):
        with open(self.path) as f:
            for line in f:
                yield np.float32(line.split()[0]), np.float32(line.split()[1])
ds = tf.data.Dataset.from_generator(RecordReader("records.txt"), output_signature=SIGNATURE)
model.fit(ds.batch(50), epochs=2)
"""


def test_a_generator_an_object_s_call_is_found_at_its_yield():
    """``from_generator(RecordReader("records.txt"))``, a class whose ``__call__`` yields: the data cause was marked at
    the from_generator statement and changed where ``ds`` is batched, the reader never named."""
    site = feed_site([unit(CALLABLE_READER)])
    assert site is not None and (site.feed, site.function, site.line) == (
        "generator",
        "RecordReader.__call__",
        10,
    )


def test_arrays_passed_to_fit_have_no_python_feed():
    assert feed_site([unit(ARRAYS)]) is None


# ---- a step that cannot run says why in one line ----------------------------------------------------------------


def test_a_keras_error_inside_a_tf_function_is_one_line_with_its_reason():
    """What a replay says when the captured step cannot run (here: the batch a ragged model gets is dense): the
    reason, not TensorFlow's "in user code:" header."""
    import keras

    from pyadapter.replay.errors import error_text

    class MeanOfTokens(keras.layers.Layer):
        def call(self, ids):
            return tf.cast(ids.row_lengths(), "float32")

    layer = MeanOfTokens()
    with pytest.raises(Exception) as caught:
        tf.function(layer)(tf.constant([[1, 2], [3, 0]]))
    assert str(caught.value).strip().splitlines()[0] == "in user code:"
    line = error_text(caught.value)
    assert "\n" not in line
    assert line.startswith("AttributeError: Exception encountered when calling MeanOfTokens.call(): ")
    assert line.endswith("object has no attribute 'row_lengths'")


def test_one_long_document_among_short_ones_is_not_padded_to_its_length(tmp_path):
    long = b"word " * (14 << 20)  # 70 MB
    fed = np.array([long, b"short", b"", b"also short"], dtype=object)
    described, back = round_trip((fed,), tmp_path)
    assert described["items"][0]["type"] == "strings"
    assert (tmp_path / "batch.npz").stat().st_size < len(long) + (1 << 20)  # not 4 x 70 MB, padded
    assert back[0].tolist() == fed.tolist()
