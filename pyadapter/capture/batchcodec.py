"""Batch leaves that are not one plain array: ragged and sparse tensors, and byte strings that a fixed-width numpy
array cannot hold exactly; each to and from plain numeric arrays, so a bundle stores them without pickle.

A Keras batch may hold a ``tf.RaggedTensor`` (token lists of varying length) or a ``tf.SparseTensor`` (bag-of-words
counts). Densifying them would change the step: ``ids.row_lengths()`` no longer exists, a mean over the padded
rows differs. They are kept as what they are made of:

- ragged: ``{"type": "ragged", "flat_values": A, "row_splits": [A, ...]}`` (outermost split first, as
  ``tf.RaggedTensor.nested_row_splits``);
- sparse: ``{"type": "sparse", "indices": A, "values": A, "dense_shape": A}``;
- strings: ``{"type": "strings", "shape": [...], "data": A, "ends": A}``, the items' bytes concatenated (uint8) and
  each item's end offset (int64). Only for strings that end in a NUL byte (a serialized proto, raw binary
  records): numpy's fixed-width ``S`` arrays drop trailing NULs, so those would come back changed; and for a batch
  whose fixed-width array would be huge (one very long document among short ones). Every other string array stays
  a plain ``S`` array (older readers read it, multi-worker shards concatenate).

where each ``A`` is an ``{"type": "array", ...}`` description of `pyadapter.capture.structure`. Reading validates
every offset and index against the arrays (a bundle is untrusted data) and raises `CodecError` in one line.

Capture turns tensors into `RaggedLeaf` / `SparseLeaf` with `from_tf`; replay turns leaves back into tensors with
`to_tensor`. Importing this module does not import TensorFlow.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

KINDS = frozenset({"ragged", "sparse", "strings"})

# Stores one array and returns its description / reads an array description back (given by `structure`).
Store = Callable[[np.ndarray], dict[str, Any]]
Load = Callable[[Any], np.ndarray]


class CodecError(ValueError):
    """A composite or string leaf whose arrays do not fit together (a damaged or tampered bundle)."""


@dataclass(frozen=True)
class RaggedLeaf:
    """A ``tf.RaggedTensor`` as numpy: its flat values and its row splits, outermost first."""

    flat_values: np.ndarray
    row_splits: tuple[np.ndarray, ...]

    @property
    def values(self) -> np.ndarray:
        return self.flat_values

    @property
    def rows(self) -> int:
        return int(self.row_splits[0].shape[0]) - 1


@dataclass(frozen=True)
class SparseLeaf:
    """A ``tf.SparseTensor`` as numpy: indices ``[nnz, rank]``, values ``[nnz]``, dense shape ``[rank]``."""

    indices: np.ndarray
    values: np.ndarray
    dense_shape: np.ndarray

    @property
    def rows(self) -> int:
        return int(self.dense_shape[0]) if self.dense_shape.size else 0


COMPOSITES = (RaggedLeaf, SparseLeaf)


def is_composite(value: Any) -> bool:
    return isinstance(value, COMPOSITES)


def values_of(leaf: Any) -> Any:
    """The values a leaf holds, as one array: a plain array itself, a ragged or sparse leaf's values."""
    return leaf.values if is_composite(leaf) else leaf


# --------------------------------------------------------------------------------------------------------------
# TensorFlow values <-> leaves


def from_tf(value: Any) -> Any:
    """An eager tensor (ragged, sparse or dense) as a leaf: `RaggedLeaf`, `SparseLeaf` or a numpy array."""
    import tensorflow as tf

    if isinstance(value, tf.RaggedTensor):
        return RaggedLeaf(
            np.asarray(value.flat_values.numpy()),
            tuple(np.asarray(s.numpy()) for s in value.nested_row_splits),
        )
    if isinstance(value, tf.SparseTensor):
        return SparseLeaf(
            np.asarray(value.indices.numpy()),
            np.asarray(value.values.numpy()),
            np.asarray(value.dense_shape.numpy()),
        )
    return np.asarray(value.numpy()) if hasattr(value, "numpy") else np.asarray(value)


def from_tf_parts(parts: list[Any]) -> Any:
    """One leaf from its per-replica parts (the global batch as fed): composites are joined along their rows by
    TensorFlow, plain arrays by numpy. None for no parts (Keras's "no sample weights")."""
    import tensorflow as tf

    if not parts:
        return None
    if len(parts) > 1 and isinstance(parts[0], tf.RaggedTensor):
        return from_tf(tf.concat(parts, axis=0))
    if len(parts) > 1 and isinstance(parts[0], tf.SparseTensor):
        return from_tf(tf.sparse.concat(0, parts))
    leaves = [from_tf(part) for part in parts]
    if len(leaves) == 1 or leaves[0].ndim == 0:
        return leaves[0]
    return np.concatenate(leaves, axis=0)


def _is_data(leaf: Any) -> bool:
    return isinstance(leaf, (np.ndarray, np.generic, RaggedLeaf, SparseLeaf, list, tuple, bytes))


def to_tensor(leaf: Any) -> Any:
    """A leaf as the tensor the step takes (None stays None)."""
    import tensorflow as tf

    if leaf is None or type(leaf) in (bool, int, float, str) or not _is_data(leaf):
        # A plain Python argument of a step function, or an object one (`structure.ObjectArgument`): as it is.
        return leaf
    if isinstance(leaf, RaggedLeaf):
        return tf.RaggedTensor.from_nested_row_splits(
            tf.convert_to_tensor(leaf.flat_values),
            [tf.convert_to_tensor(s) for s in leaf.row_splits],
            validate=False,  # checked when read (`rebuild`)
        )
    if isinstance(leaf, SparseLeaf):
        return tf.SparseTensor(
            tf.convert_to_tensor(leaf.indices, tf.int64),
            tf.convert_to_tensor(leaf.values),
            tf.convert_to_tensor(leaf.dense_shape, tf.int64),
        )
    return tf.convert_to_tensor(leaf)


# --------------------------------------------------------------------------------------------------------------
# Leaves <-> JSON descriptions and flat arrays


# A fixed-width array pads every item to the longest: past this size and this many times the bytes it holds (one
# long document in a batch of short ones), the strings are stored as bytes and offsets instead.
FIXED_WIDTH_LIMIT = 64 << 20
FIXED_WIDTH_WASTE = 2


def needs_strings_encoding(array: np.ndarray) -> bool:
    """True for a byte-string array that a fixed-width ``S`` array would change (an item ends in a NUL byte) or
    blow up (see `FIXED_WIDTH_LIMIT`)."""
    if array.dtype != object:
        return False
    flat = array.reshape(-1)
    if not all(isinstance(item, bytes) for item in flat):
        return False
    if any(item.endswith(b"\x00") for item in flat):
        return True
    lengths = [len(item) for item in flat]
    fixed = max(lengths, default=0) * len(lengths)
    return fixed > FIXED_WIDTH_LIMIT and fixed > FIXED_WIDTH_WASTE * sum(lengths)


def describe(leaf: Any, store: Store) -> dict[str, Any]:
    """The description of a `RaggedLeaf`, `SparseLeaf` or an object array of bytes (see `needs_strings_encoding`);
    its arrays go through `store`."""
    if isinstance(leaf, RaggedLeaf):
        return {
            "type": "ragged",
            "flat_values": store(leaf.flat_values),
            "row_splits": [store(split) for split in leaf.row_splits],
        }
    if isinstance(leaf, SparseLeaf):
        return {
            "type": "sparse",
            "indices": store(leaf.indices),
            "values": store(leaf.values),
            "dense_shape": store(leaf.dense_shape),
        }
    items = [bytes(item) for item in np.asarray(leaf).reshape(-1)]
    data = np.frombuffer(b"".join(items), dtype=np.uint8)
    ends = np.cumsum([len(item) for item in items], dtype=np.int64)
    return {"type": "strings", "shape": list(np.shape(leaf)), "data": store(data), "ends": store(ends)}


def rebuild(description: dict[str, Any], load: Load, any_rows: bool = False) -> Any:
    """The leaf a ``ragged`` / ``sparse`` / ``strings`` description stands for; CodecError (one line) when its
    arrays do not fit together. ``any_rows``: the leaf's row count may differ from the description's."""
    kind = description.get("type")
    if kind == "ragged":
        return _ragged(description, load)
    if kind == "sparse":
        return _sparse(description, load)
    if kind == "strings":
        return _strings(description, load, any_rows)
    raise CodecError(f"unknown leaf type {kind!r:.80}")


def _ragged(description: dict[str, Any], load: Load) -> RaggedLeaf:
    splits_described = description.get("row_splits")
    if not isinstance(splits_described, list) or not splits_described:
        raise CodecError("ragged leaf has no row splits")
    values = load(description.get("flat_values"))
    splits = tuple(load(split) for split in splits_described)
    if values.ndim == 0:
        raise CodecError("ragged leaf has scalar flat values")
    for level, split in enumerate(splits):
        inner = int(splits[level + 1].shape[0]) - 1 if level + 1 < len(splits) else int(values.shape[0])
        if split.ndim != 1 or split.dtype not in (np.int32, np.int64) or split.dtype != splits[0].dtype:
            raise CodecError("ragged leaf's row splits are not 1-D int32/int64 arrays of one dtype")
        if split.shape[0] < 1 or split[0] != 0 or np.any(np.diff(split) < 0) or int(split[-1]) != inner:
            raise CodecError(f"ragged leaf's row splits (level {level}) do not fit its values")
    return RaggedLeaf(values, splits)


def _sparse(description: dict[str, Any], load: Load) -> SparseLeaf:
    indices = load(description.get("indices"))
    values = load(description.get("values"))
    shape = load(description.get("dense_shape"))
    if shape.ndim != 1 or shape.dtype != np.int64 or np.any(shape < 0):
        raise CodecError("sparse leaf's dense shape is not a 1-D int64 array of sizes")
    if indices.dtype != np.int64 or indices.ndim != 2 or indices.shape[1] != shape.shape[0]:
        raise CodecError("sparse leaf's indices are not an int64 [nnz, rank] array")
    if values.ndim != 1 or values.shape[0] != indices.shape[0]:
        raise CodecError("sparse leaf's values do not match its indices")
    if indices.size and (np.any(indices < 0) or np.any(indices >= shape[None, :])):
        raise CodecError("sparse leaf has indices outside its dense shape")
    return SparseLeaf(indices, values, shape)


def _strings(description: dict[str, Any], load: Load, any_rows: bool) -> np.ndarray:
    shape = description.get("shape")
    if not isinstance(shape, list) or not all(
        type(dim) is int and dim >= 0 for dim in shape
    ):  # a bool is no size
        raise CodecError("strings leaf has an invalid shape")
    data, ends = load(description.get("data")), load(description.get("ends"))
    if data.dtype != np.uint8 or data.ndim != 1 or ends.dtype != np.int64 or ends.ndim != 1:
        raise CodecError("strings leaf's data/ends are not 1-D uint8/int64 arrays")
    count = math.prod(shape)  # Python ints: a damaged shape cannot overflow
    if any_rows and shape:
        inner = math.prod(shape[1:])
        if inner == 0 or ends.shape[0] % inner:
            raise CodecError("strings leaf's item count does not fit its shape")
        shape = [ends.shape[0] // inner, *shape[1:]]
    elif ends.shape[0] != count:
        raise CodecError("strings leaf's item count does not fit its shape")
    if ends.size and (ends[0] < 0 or np.any(np.diff(ends) < 0) or int(ends[-1]) != data.shape[0]):
        raise CodecError("strings leaf's offsets do not fit its data")
    if not ends.size and data.size:
        raise CodecError("strings leaf's offsets do not fit its data")
    raw = data.tobytes()
    starts = [0, *ends[:-1].tolist()]
    items = np.empty(len(starts), dtype=object)
    items[:] = [raw[a:b] for a, b in zip(starts, ends.tolist(), strict=True)]
    return items.reshape(shape)
