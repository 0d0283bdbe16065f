"""Where a failing batch's rows sit in the NumPy arrays passed to ``fit``.

``fit`` shuffles NumPy inputs by default, so row r of batch k is not index ``k * batch_size + r`` of the user's
array, and a bad record named by that index was in "the shuffled order": the user still had to hunt for it. At a
failing step the guard runs inside ``fit`` (its train function is called from fit's loop), and fit's own frame
still holds the arrays it trains on (after a ``validation_split``, the training part: the user's first rows, at
their own indices). Each batch row is found there by its bytes (`rows_in`: one pass over the array, on failure
only; NaN rows match too). The bundle records the indices (``manifest["fit_rows"]``), and the data cause then says
"index 413 of the array passed to fit".

Nothing here runs a bundle's code: the manifest entry is a list of numbers, checked by `check`.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from pyadapter.capture import records

MANIFEST_KEY = "fit_rows"
# ``"of"``: the arrays the rows were found in. Absent: those passed to fit. SLICES: those a tf.data pipeline passed
# to fit was made from (`datasource.sliced_rows_entry`); with ``"held": true`` when those arrays hold the batch's
# first NaN/Inf row as the batch has it (no pipeline op made it).
SLICES = "from_tensor_slices"
FRAME = (
    "dataframe"  # a pandas DataFrame (or Series) passed to fit, its rows by position; "columns" names them
)
MAX_ROWS = 65536  # batch rows recorded at most
MAX_COLUMNS = 4096  # column names recorded at most


def _is_frame(value: Any) -> bool:
    """A pandas DataFrame or Series (told by its type's module: pandas is never imported here)."""
    return type(value).__module__.split(".")[0] == "pandas" and callable(getattr(value, "to_numpy", None))


def frame_columns(value: Any) -> list[str] | None:
    """The column names of a DataFrame passed to fit (a Series: its name), or None for anything else."""
    if not _is_frame(value):
        return None
    columns = getattr(value, "columns", None)
    names = list(columns)[:MAX_COLUMNS] if columns is not None else [getattr(value, "name", None)]
    return [str(name) for name in names]


def first_array(value: Any) -> np.ndarray | None:
    """The first NumPy array of x or y as fit was given it (an array, an eager tensor or a pandas DataFrame, or a
    list/tuple/dict of them)."""
    if isinstance(value, np.ndarray):
        return value
    if _is_frame(value):  # fit(df[features], df[target]): Keras trains on its values, row by row
        array = np.asarray(value.to_numpy())
        return array if array.ndim > 0 and array.dtype.kind != "O" else None
    if type(value).__name__ == "EagerTensor":  # fit(tf.constant(x), ...): its values, copied on failure only
        array = np.asarray(value.numpy())
        return array if array.ndim > 0 else None
    if isinstance(value, dict):  # by sorted key: Keras hands the batch's dicts over sorted
        value = [value[key] for key in sorted(value, key=str)]
    if isinstance(value, (list, tuple)):
        for item in value:
            found = first_array(item)
            if found is not None:
                return found
    return None


def array_leaves(value: Any) -> list[np.ndarray | None]:
    """Each input of x as fit was given it, in the order `first_array` walks them (a dict's by sorted key), as an
    array or None: ``fit({"num": X, "cat": C}, y)`` has two."""
    if isinstance(value, dict):
        value = [value[key] for key in sorted(value, key=str)]
    if isinstance(value, (list, tuple)) and not _is_frame(value):
        return [leaf for item in value for leaf in array_leaves(item)]
    return [first_array(value)]


def _fit_locals(model: Any) -> dict[str, Any] | None:
    """The local variables of the ``fit`` call of `model` on the stack, or None."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "fit" and frame.f_locals.get("self") is model:
            return frame.f_locals
        frame = frame.f_back  # type: ignore[assignment]
    return None


def fit_inputs(model: Any) -> tuple[np.ndarray, np.ndarray | None, list[str] | None, Any] | None:
    """(first array of x, first array of y, x's column names when it is a DataFrame, x as given) of the ``fit``
    call of `model` on the stack, or None (no fit frame, or fit was given a dataset or generator)."""
    found = _fit_locals(model)
    if found is None:
        return None
    given = found.get("x")
    x = first_array(given)
    y = first_array(found.get("y"))
    return (x, y, frame_columns(given), given) if x is not None else None


def _row_bytes(array: np.ndarray) -> np.ndarray:
    """One opaque (void) item per row, equal exactly when the rows' bytes are: NaN rows match themselves."""
    rows = np.ascontiguousarray(array).reshape(len(array), -1)
    return rows.view(np.dtype((np.void, rows.dtype.itemsize * max(rows.shape[1], 1)))).ravel()


def _text_rows(array: np.ndarray) -> list[tuple[bytes | str, ...]] | None:
    """Each row of an object array of texts as a tuple of its texts; None when it holds anything else."""
    rows = array.reshape(len(array), -1)
    keys = [tuple(row.tolist()) for row in rows]
    if not all(isinstance(text, (bytes, str)) for key in keys for text in key):
        return None
    return keys


def rows_in(
    batch_x: np.ndarray, array: np.ndarray, batch_y: Any = None, array_y: Any = None
) -> list[int | None]:
    """For each row of `batch_x`, its index in `array` (None when not found, or found more than once and `y` does
    not tell the copies apart)."""
    return [
        found[0] if len(found) == 1 else None for found in _places_of_rows(batch_x, array, batch_y, array_y)
    ]


def _as_batch_dtype(array: Any, batch: Any) -> Any:
    if (
        isinstance(array, np.ndarray)
        and isinstance(batch, np.ndarray)
        and array.dtype != batch.dtype
        and array.dtype.kind == "f"
        and batch.dtype.kind == "f"
    ):
        with np.errstate(over="ignore"):
            return array.astype(batch.dtype)
    return array


def _places_of_rows(
    batch_x: np.ndarray, array: np.ndarray, batch_y: Any = None, array_y: Any = None
) -> list[list[int]]:
    """For each row of `batch_x`, every index of `array` holding it (where `y` is given, with its label too)."""
    # Keras casts float64 arrays (np.genfromtxt's, pandas') to its float32: compare in the batch's dtype (the
    # failure path only: one cast copy of the array).
    array = _as_batch_dtype(array, batch_x)
    array_y = _as_batch_dtype(array_y, batch_y)
    if (
        array.dtype != batch_x.dtype
        or array.shape[1:] != batch_x.shape[1:]
        or batch_x.ndim == 0
        or array.ndim == 0
    ):
        return [[] for _ in range(len(batch_x) if batch_x.ndim else 0)]
    places: dict[Any, list[int]] = {}
    if batch_x.dtype.kind == "O":
        # Texts (a tf.string batch reads as an object array of bytes): rows compared by value, not by the
        # objects' addresses that their bytes are.
        keys = _text_rows(batch_x)
        have_keys = _text_rows(array)
        if keys is None or have_keys is None:
            return [[] for _ in range(len(batch_x))]
        wanted_set = set(keys)
        for index, key in enumerate(have_keys):
            if key in wanted_set:
                places.setdefault(key, []).append(index)
        wanted: Any = keys
    else:
        wanted = _row_bytes(batch_x)
        have = _row_bytes(array)
        hits = np.flatnonzero(np.isin(have, wanted))
        for hit in hits:
            places.setdefault(bytes(have[hit]), []).append(int(hit))
    use_y = (
        isinstance(batch_y, np.ndarray)
        and isinstance(array_y, np.ndarray)
        and batch_y.ndim > 0
        and len(batch_y) == len(batch_x)
        and len(array_y) == len(array)
    )
    out: list[list[int]] = []
    for row, key in enumerate(wanted):
        found = places.get(key if isinstance(key, tuple) else bytes(key), [])
        if len(found) > 1 and use_y:
            assert isinstance(batch_y, np.ndarray) and isinstance(array_y, np.ndarray)
            label = batch_y[row].tobytes()
            found = [i for i in found if array_y[i].tobytes() == label]
        out.append(found)
    return out


def _placed(places: list[list[int]]) -> int:
    """How many rows of a batch one index places."""
    return sum(1 for found in places if len(found) == 1)


# Rows held more than once (two empty reviews) are named by all their indices, up to this many.
MAX_COPIES = 5


def manifest_entry(batch: Any, model: Any) -> dict[str, Any]:
    """``{"fit_rows": {"indices": [...], "array_rows": N}}`` for a failing fit batch fed from NumPy arrays, else
    ``{}``; never raises (the capture matters more)."""
    try:
        inputs = fit_inputs(model)
        if isinstance(batch, np.ndarray):
            batch = (batch,)  # fit(X) with no targets (a density model's): the batch is x alone
        if inputs is None or not isinstance(batch, (list, tuple)) or not batch:
            return {}
        array, array_y, columns, given = inputs
        batch_x = first_array(batch[0])
        batch_y = first_array(batch[1]) if len(batch) > 1 else None
        if batch_x is None or len(batch_x) > MAX_ROWS:
            return {}
        places = _places_of_rows(batch_x, array, batch_y, array_y)
        # Several inputs (``fit({"num": X, "cat": C}, y)``): the first by key may repeat its rows (a category
        # column) and place none; the input that tells the most rows apart places the batch.
        pairs = list(zip(array_leaves(batch[0]), array_leaves(given), strict=False))[1:]
        for batch_leaf, array_leaf in pairs:
            if batch_leaf is None or array_leaf is None or len(array_leaf) != len(array):
                continue
            other = _places_of_rows(batch_leaf, array_leaf, batch_y, array_y)
            if _placed(other) > _placed(places):
                places = other
    except Exception:  # noqa: BLE001 - an addition to the bundle; never lose a capture for it
        return {}
    indices = [found[0] if len(found) == 1 else None for found in places]
    copies = {str(row): found for row, found in enumerate(places) if 1 < len(found) <= MAX_COPIES}
    if not any(i is not None for i in indices) and not copies:
        return {}
    entry: dict[str, Any] = {"indices": indices, "array_rows": len(array)}
    if copies:
        entry["copies"] = copies
    if columns is not None:
        entry.update({"of": FRAME, "columns": columns})
    return {MANIFEST_KEY: entry}


def check(entry: Any) -> str | None:
    """What is wrong with a manifest's ``fit_rows`` entry (a bundle is untrusted data), or None."""
    if not isinstance(entry, dict):
        return "is not an object"
    indices, rows = entry.get("indices"), entry.get("array_rows")
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
        return "has no whole 'array_rows'"
    if not isinstance(indices, list) or len(indices) > MAX_ROWS:
        return "has no list of 'indices'"
    if entry.get("of") not in (None, SLICES, FRAME):
        return "names arrays of an unknown kind"
    if entry.get("held") is not None and not isinstance(entry.get("held"), bool):
        return "has a 'held' that is not true or false"
    columns = entry.get("columns")
    if columns is not None and (
        not isinstance(columns, list)
        or len(columns) > MAX_COLUMNS
        or not all(isinstance(c, str) and len(c) <= 200 for c in columns)
    ):
        return "has column names that are not a list of short texts"
    for index in indices:
        if index is not None and not _row_of(index, rows):
            return "has an index that is not a row of the array"
    copies = entry.get("copies", {})
    if not isinstance(copies, dict) or len(copies) > len(indices):
        return "has no object of 'copies'"
    for row, found in copies.items():
        if not isinstance(row, str) or not row.isdigit() or int(row) >= len(indices):
            return "has copies of a row that is not in the batch"
        if (
            not isinstance(found, list)
            or not 1 < len(found) <= MAX_COPIES
            or not all(_row_of(i, rows) for i in found)
        ):
            return "has copies that are not rows of the array"
    return None


def _row_of(index: Any, rows: int) -> bool:
    return isinstance(index, int) and not isinstance(index, bool) and 0 <= index < rows


def copies_of_row(entry: Any, row: int, of: str | None = None) -> list[int]:
    """The indices of batch row `row` in the arrays when that row is held there more than once (two empty reviews),
    or [] (no entry, a bad one, one of other arrays, or one index)."""
    if entry is None or check(entry) is not None or entry.get("of") != of:
        return []
    return list(entry.get("copies", {}).get(str(row), []))


def index_of_row(entry: Any, row: int, of: str | None = None) -> int | None:
    """The recorded index of batch row `row` in the arrays `of` names (None: fit's own), or None (no entry, a bad
    one, one of other arrays, or not found)."""
    if entry is None or check(entry) is not None or entry.get("of") != of:
        return None
    indices = entry["indices"]
    return indices[row] if 0 <= row < len(indices) else None


def validation_arrays(model: Any) -> tuple[Any, Any] | None:
    """(x, y) of the validation data of the ``fit`` call of `model` on the stack (given as ``validation_data`` or
    split off by ``validation_split``: fit unpacks both into ``val_x``/``val_y``), or None."""
    found = _fit_locals(model)
    if found is None or "val_x" not in found:
        return None
    return found.get("val_x"), found.get("val_y")


def non_finite_places(x: Any, y: Any, limit: int = 4) -> list[str] | None:
    """Where arrays of validation data hold NaN/Inf: ``"x['numeric'] column 4 ('hood_te'): 37 of 600 rows (first:
    row 12)"``, at most `limit`; [] when every array is finite; None when the data is not arrays (a dataset or a
    generator, not read here: reading it would run the user's pipeline again)."""
    said: list[str] = []
    found_any = False
    for label, given, _ in records.leaves((x, y)):
        array = first_array(given) if given is not None else None
        if array is None:
            if given is not None and label.startswith("x"):
                return None
            continue
        columns = frame_columns(given)
        found_any = True
        if array.dtype.kind not in "fc" or array.ndim == 0 or not len(array):
            continue
        bad = ~np.isfinite(array.reshape(len(array), -1))
        if not bad.any():
            continue
        rows = bad.any(axis=1)
        first = int(np.flatnonzero(rows)[0])
        where = f"{label}"
        if array.ndim == 2:
            cols = [int(c) for c in np.flatnonzero(bad.any(axis=0))]
            named = [f"{c} ({columns[c]!r})" if columns and c < len(columns) else str(c) for c in cols[:4]]
            where += (
                f" column{'s' if len(cols) > 1 else ''} {', '.join(named)}{', ...' if len(cols) > 4 else ''}"
            )
        said.append(f"{where}: {int(rows.sum())} of {len(array)} rows (first: row {first})")
        if len(said) >= limit:
            break
    return said if found_any else None
