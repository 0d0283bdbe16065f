"""Nested batches (dicts, lists, tuples of arrays) <-> a JSON structure description plus flat arrays in a `.npz`.

The `.npz` is written and read with ``allow_pickle=False``: object arrays are refused on both sides, so loading a
batch never unpickles anything. String tensors become fixed-width byte arrays (dtype ``S``), which need no pickle;
ragged and sparse tensors, and strings a fixed-width array would change, are kept by `pyadapter.capture.batchcodec`.
Nothing here imports TensorFlow.
"""

from __future__ import annotations

import collections
import math
import re
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from pyadapter.capture import batchcodec


class StructureError(ValueError):
    """A batch that cannot be stored without pickle, or a structure description that does not fit its arrays."""


@dataclass(frozen=True)
class ObjectArgument:
    """A step argument that is an object, not data (tensorflow.org's ``train(model, x, y, learning_rate)`` passes
    its tf.Module): the bundle keeps its class name only, and a replay takes the object from the program
    (`pyadapter.replay.reentry`). Never the object itself: a bundle holds data, not code."""

    type_name: str

    def __str__(self) -> str:
        return f"<{self.type_name} object>"


# A class name as the bundle may state it (what a reader shows; never looked up or imported).
_MAX_TYPE_NAME = 200
_TYPE_NAME = re.compile(r"[A-Za-z_<][A-Za-z0-9_.<>]*")


def with_objects(captured: Any, live: Any) -> Any:
    """`captured` (step arguments read from a bundle) with each `ObjectArgument` replaced by the object at the same
    place in `live` (arguments of the program's own call of the step), which must be of the class named. Raises
    StructureError (one line) where the two differ in nesting or class."""
    if isinstance(captured, ObjectArgument):
        if type(live).__qualname__ != captured.type_name:
            raise StructureError(
                f"the step was captured with {captured} as an argument, but the program passes "
                f"{type(live).__qualname__} there"
            )
        return live
    if isinstance(captured, dict):
        if not isinstance(live, dict) or set(live) != set(captured):
            raise StructureError(
                "the program calls the step with other keyword arguments than the captured call"
            )
        return {key: with_objects(value, live[key]) for key, value in captured.items()}
    if isinstance(captured, (list, tuple)):
        if not isinstance(live, (list, tuple)) or len(live) != len(captured):
            raise StructureError("the program calls the step with other arguments than the captured call")
        items = [with_objects(value, other) for value, other in zip(captured, live, strict=True)]
        if isinstance(captured, tuple) and hasattr(captured, "_fields"):
            return type(captured)(*items)
        return type(captured)(items)
    return captured


def holds_objects(captured: Any) -> ObjectArgument | None:
    """The first `ObjectArgument` in a nested structure, or None."""
    if isinstance(captured, ObjectArgument):
        return captured
    values = (
        captured.values()
        if isinstance(captured, dict)
        else captured
        if isinstance(captured, (list, tuple))
        else []
    )
    for value in values:
        found = holds_objects(value)
        if found is not None:
            return found
    return None


def _as_array(value: Any) -> np.ndarray:
    array = value if isinstance(value, np.ndarray) else np.asarray(value)
    if array.dtype == object:
        # tf.string tensors arrive as object arrays of bytes; store them as fixed-width bytes.
        flat = array.reshape(-1)
        if all(isinstance(item, bytes) for item in flat):
            return np.array(flat.tolist() or [], dtype=bytes).reshape(array.shape)
        raise StructureError("an object array cannot be stored without pickle")
    return array


def describe(structure: Any, arrays: dict[str, np.ndarray], prefix: str = "a") -> dict[str, Any]:
    """The JSON description of `structure`; its leaves are added to `arrays` under keys `a000`, `a001`, ..."""
    if structure is None:
        return {"type": "none"}
    if isinstance(structure, ObjectArgument):
        return {"type": "object", "class": structure.type_name[:_MAX_TYPE_NAME]}
    if type(structure) in (bool, int, str) or type(structure) is float and math.isfinite(structure):
        # Plain Python arguments of a step function (e.g. training=True) stay Python values.
        return {"type": "python", "value": structure}
    if isinstance(structure, dict):
        keys = list(structure)
        if not all(isinstance(key, str) for key in keys):
            raise StructureError("dict keys in a batch must be strings")
        return {"type": "dict", "keys": keys, "items": [describe(structure[k], arrays, prefix) for k in keys]}
    if isinstance(structure, tuple) and hasattr(structure, "_fields"):
        return {
            "type": "namedtuple",
            "name": type(structure).__name__,
            "fields": list(structure._fields),
            "items": [describe(item, arrays, prefix) for item in structure],
        }
    if isinstance(structure, (list, tuple)):
        return {
            "type": "list" if isinstance(structure, list) else "tuple",
            "items": [describe(item, arrays, prefix) for item in structure],
        }
    if batchcodec.is_composite(structure) or (
        isinstance(structure, np.ndarray) and batchcodec.needs_strings_encoding(structure)
    ):
        # Ragged/sparse tensors and NUL-ended strings: kept as plain arrays (`batchcodec`), never densified.
        return batchcodec.describe(structure, lambda array: describe(array, arrays, prefix))
    array = _as_array(structure)
    key = f"{prefix}{len(arrays):03d}"
    arrays[key] = array
    return {"type": "array", "key": key, "dtype": array.dtype.str, "shape": list(array.shape)}


def rebuild(description: dict[str, Any], arrays: dict[str, np.ndarray], any_rows: bool = False) -> Any:
    """The nested structure a description stands for, with the arrays from the `.npz` as leaves.

    ``any_rows``: arrays may differ from the description in their first dimension (a multi-worker batch and its
    per-worker shards share one description)."""
    if not isinstance(description, dict):
        raise StructureError("structure description is not an object")
    kind = description.get("type")
    items = description.get("items", [])
    if not isinstance(items, list):
        raise StructureError("structure description has items that are not a list")
    if kind == "none":
        return None
    if kind == "python":
        value = description.get("value")
        if type(value) not in (bool, int, str, float):
            raise StructureError("python value in a structure description must be bool/int/float/str")
        return value
    if kind == "object":
        name = description.get("class")
        # A qualified class name ("MyModel", "make.<locals>.Net"): it is printed, so nothing else gets through.
        if not isinstance(name, str) or not _TYPE_NAME.fullmatch(name) or len(name) > _MAX_TYPE_NAME:
            raise StructureError("object description has no class name (letters, digits, '_', '.', '<>')")
        return ObjectArgument(name)
    if kind == "array":
        return _rebuild_array(description, arrays, any_rows)
    if isinstance(kind, str) and kind in batchcodec.KINDS:
        try:
            return batchcodec.rebuild(
                description, lambda part: _rebuild_array(part, arrays, any_rows), any_rows
            )
        except batchcodec.CodecError as error:
            raise StructureError(str(error)) from None
    if kind == "dict":
        keys = description.get("keys", [])
        if not isinstance(keys, list) or not all(isinstance(key, str) for key in keys):
            raise StructureError("dict description has keys that are not strings")
        if len(keys) != len(items):
            raise StructureError("dict description has mismatched keys and items")
        return {key: rebuild(item, arrays, any_rows) for key, item in zip(keys, items, strict=True)}
    if kind == "namedtuple":
        fields, name = description.get("fields", []), description.get("name", "Batch")
        if (
            not isinstance(fields, list)
            or not all(isinstance(f, str) for f in fields)
            or not isinstance(name, str)
        ):
            raise StructureError("namedtuple description has invalid names")
        if not name.isidentifier() or not all(f.isidentifier() for f in fields) or len(fields) != len(items):
            raise StructureError("namedtuple description has invalid names")
        try:
            cls = collections.namedtuple(name, fields)  # type: ignore[misc]  # named by the data, at run time
        except ValueError as error:  # keywords, duplicates, leading underscores
            raise StructureError(f"namedtuple description has invalid names ({error})") from None
        return cls(*(rebuild(item, arrays, any_rows) for item in items))
    if kind == "list":
        return [rebuild(item, arrays, any_rows) for item in items]
    if kind == "tuple":
        return tuple(rebuild(item, arrays, any_rows) for item in items)
    raise StructureError(f"unknown structure type {kind!r:.80}")


def _rebuild_array(description: Any, arrays: dict[str, np.ndarray], any_rows: bool) -> np.ndarray:
    if not isinstance(description, dict) or description.get("type") != "array":
        raise StructureError("structure description of an array is not an array")
    key = description.get("key")
    if not isinstance(key, str) or key not in arrays:
        raise StructureError(f"array {key!r:.80} is described but missing from the batch file")
    array = arrays[key]
    shape, described = list(array.shape), description.get("shape", [])
    if not isinstance(described, list):
        raise StructureError(f"array {key!r} has a shape that is not a list")
    if any_rows and shape and described:
        shape, described = shape[1:], described[1:]
    if shape != described or array.dtype.str != description.get("dtype"):
        raise StructureError(f"array {key!r} does not have the described shape/dtype")
    return array


def write_npz(
    target: Path | BinaryIO,
    arrays: Mapping[str, np.ndarray] | Iterable[tuple[str, np.ndarray]],
    on_array: Callable[[int], None] | None = None,
) -> None:
    """Writes arrays to an uncompressed `.npz` (a path or a binary file) without pickle; object arrays are refused.

    Streams: `arrays` may be an iterable of (key, array) pairs made one at a time (a generator reading variables),
    and each is written as its own member before the next is asked for, so only one array is in memory at once.
    `on_array(nbytes)` is called after each. The file is what ``np.savez`` writes."""
    if isinstance(arrays, Mapping):
        for key, array in arrays.items():
            if array.dtype == object:
                raise StructureError(f"array {key!r} is an object array; it cannot be stored without pickle")
        arrays = arrays.items()
    if isinstance(target, Path):
        with open(target, "wb") as handle:
            _write_members(handle, arrays, on_array)
    else:
        _write_members(target, arrays, on_array)


def _write_members(
    handle: BinaryIO, arrays: Iterable[tuple[str, np.ndarray]], on_array: Callable[[int], None] | None
) -> None:
    # As np.savez does (stored members, ZIP64 for large arrays), one member at a time.
    with zipfile.ZipFile(handle, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as archive:
        for key, value in arrays:
            array = np.asanyarray(value)
            if array.dtype == object:
                raise StructureError(f"array {key!r} is an object array; it cannot be stored without pickle")
            with archive.open(f"{key}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, array, allow_pickle=False)
            if on_array is not None:
                on_array(array.nbytes)


def read_npz(
    source: Path | BinaryIO, name: str | None = None, keys: set[str] | None = None
) -> dict[str, np.ndarray]:
    """Reads every array of a `.npz` (a path, or a binary file called `name` in errors), or only those of `keys`,
    with ``allow_pickle=False``; a pickled (object) array is an error."""
    name = name or (source.name if isinstance(source, Path) else "the .npz")
    try:
        with np.load(source, allow_pickle=False) as data:
            return {key: data[key] for key in data.files if keys is None or key in keys}
    except ValueError as error:
        if "pickle" in str(error).lower():
            raise StructureError(f"{name} holds a pickled object array (refused)") from None
        raise StructureError(f"{name} is not a readable .npz: {_first_line(error)}") from None
    except (
        OSError,
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        EOFError,
        RuntimeError,
        NotImplementedError,
        OverflowError,
        MemoryError,
        SyntaxError,
        TypeError,
        struct.error,
        zlib.error,
    ) as error:
        raise StructureError(f"{name} is not a readable .npz: {_first_line(error)}") from None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:200] if text else type(error).__name__
