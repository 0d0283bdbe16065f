"""Where the bad element of a captured batch came from: its place in the batch, its index in the array passed to
``fit`` (NumPy inputs), and, when the reading line names a CSV file, the file and row holding those values.

Reads the batch (numpy arrays, no TensorFlow) and at most one data file named by a string literal on the reading
line; runs nothing. A row is named only when exactly one line of the file matches the batch row's values.
"""

from __future__ import annotations

import ast
import csv
import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from pyadapter.cause.change_line import Site, is_tfdata
from pyadapter.cause.python_feed import FeedSite

MAX_DATA_FILE_BYTES = 256 << 20
DATA_SUFFIXES = (".csv", ".tsv", ".txt", ".data")


@dataclass
class BadElement:
    """The first non-finite value of the batch: which array (``x``, ``x['age']``), row and full index."""

    leaf: str
    row: int
    index: tuple[int, ...]
    value: float
    rows: int  # rows in the batch (its leading dimension)

    def describe(self) -> str:
        position = ", ".join(str(i) for i in self.index)
        return f"{self.leaf}[{position}] = {_fmt(self.value)}"


def _fmt(value: float) -> str:
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def leaves(batch: Any, name: str = "") -> list[tuple[str, Any, str | None]]:
    """(label, array, column name for a dict of feature columns) of a Keras batch ``(x, y[, sample_weight])``."""
    if isinstance(batch, dict):
        return [
            (f"{name}[{k!r}]" if name else str(k), v, str(k))
            for k, v in batch.items()
            if not isinstance(v, (dict, list, tuple))
        ] + [
            leaf
            for k, v in batch.items()
            if isinstance(v, (dict, list, tuple))
            for leaf in leaves(v, f"{name}[{k!r}]" if name else str(k))
        ]
    if isinstance(batch, (list, tuple)):
        labels = ("x", "y", "sample_weight") if not name and len(batch) <= 3 else None
        return [
            leaf for i, v in enumerate(batch) for leaf in leaves(v, labels[i] if labels else f"{name}[{i}]")
        ]
    return [(name or "batch", batch, None)]


def first_bad_element(batch: Any) -> BadElement | None:
    for label, value, _ in leaves(batch):
        if (
            not isinstance(value, np.ndarray)
            or not np.issubdtype(value.dtype, np.floating)
            or value.ndim == 0
        ):
            continue
        bad = np.argwhere(~np.isfinite(value))
        if len(bad):
            index = tuple(int(i) for i in bad[0])
            return BadElement(label, index[0], index, float(value[index]), int(value.shape[0]))
    return None


def _row_values(batch: Any, element: BadElement) -> tuple[list[float], dict[str, float]]:
    """The bad row of the input ``x``: its values in order (a matrix row), or by column name (a feature dict)."""
    ordered: list[float] = []
    named: dict[str, float] = {}
    for label, value, column in leaves(batch):
        if not label.startswith(element.leaf.split("[")[0]) or not isinstance(value, np.ndarray):
            continue
        if value.ndim == 0 or value.shape[0] <= element.row or not np.issubdtype(value.dtype, np.number):
            continue
        row = np.asarray(value[element.row], dtype=np.float64).ravel()
        if column is not None and row.size == 1:
            named[column] = float(row[0])
        else:
            ordered += [float(v) for v in row]
    return ordered, named


def array_provenance(
    element: BadElement,
    batch_index: int | None,
    epoch: int | None,
    batch_size: int | None,
    shuffled: bool | None,
) -> dict[str, Any]:
    """The index of the bad row in the array passed to ``fit`` (NumPy inputs): batch_index * batch_size + row."""
    size = batch_size or element.rows
    out: dict[str, Any] = {
        "source": "array",
        "element": element.describe(),
        "batch_row": element.row,
        "batch_index": batch_index,
        "epoch": epoch,
        "batch_size": size,
    }
    if batch_index is None:
        return out
    out["index"] = batch_index * size + element.row
    out["shuffled"] = shuffled
    if shuffled is not False:
        out["note"] = (
            "fit shuffles (shuffle=True is its default), so this is the index in the epoch's shuffled "
            "order, not in your array; pass shuffle=False to reproduce it, or find the row by its values"
        )
    return out


def _literal_paths(site: Site) -> list[str]:
    return [
        node.value
        for node in ast.walk(site.node)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.lower().endswith(DATA_SUFFIXES)
    ]


def _resolve(path: str, site: Site, cwd: str | None) -> str | None:
    candidates = (
        [path]
        if os.path.isabs(path)
        else [os.path.join(folder, path) for folder in (cwd, os.path.dirname(site.file)) if folder]
    )
    for candidate in candidates:
        if os.path.isfile(candidate) and os.path.getsize(candidate) <= MAX_DATA_FILE_BYTES:
            return os.path.abspath(candidate)
    return None


def _as_float(text: str) -> float | None:
    text = text.strip()
    if text == "":
        return math.nan  # an empty field is what genfromtxt and make_csv_dataset read as NaN
    try:
        return float(text)
    except ValueError:
        return None


def _close(a: float, b: float | None) -> bool:
    if b is None:
        return False
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= 1e-5 * max(1.0, abs(a), abs(b))  # float32 in the batch, decimal text in the file


def _matches(fields: list[float | None], ordered: list[float]) -> bool:
    """The batch row's values appear in the line's fields as a contiguous run (features before a label)."""
    n = len(ordered)
    return any(all(_close(ordered[j], fields[i + j]) for j in range(n)) for i in range(len(fields) - n + 1))


def csv_row(site: Site, batch: Any, element: BadElement, cwd: str | None) -> dict[str, Any] | None:
    """``{"file", "row", "line"}`` of the one line of the CSV file named on the reading line whose values are the
    bad batch row (row counted from 0 among the data rows, as an array read from the file counts them; line from 1 in the file), or None when not exactly one."""
    ordered, named = _row_values(batch, element)
    if not ordered and not named:
        return None
    for literal in _literal_paths(site):
        path = _resolve(literal, site, cwd)
        if path is None:
            continue
        delimiter = "\t" if path.endswith(".tsv") else ","
        try:
            with open(path, encoding="utf-8", errors="replace", newline="") as handle:
                rows = list(csv.reader(handle, delimiter=delimiter))
        except OSError:
            continue
        header: list[str] | None = None
        start = 0
        if rows and any(_as_float(f) is None for f in rows[0]):
            header, start = [h.strip() for h in rows[0]], 1
        hits = []
        for number, fields in enumerate(rows[start:], start=start + 1):
            values = [_as_float(f) for f in fields]
            if named and header is not None:
                ok = all(
                    c in header and header.index(c) < len(values) and _close(v, values[header.index(c)])
                    for c, v in named.items()
                )
            else:
                ok = bool(ordered) and _matches(values, ordered)
            if ok:
                hits.append(number)
        if len(hits) == 1:
            return {"file": path, "line": hits[0], "row": hits[0] - start - 1, "header": header is not None}
    return None


def data_provenance(
    batch: Any,
    site: Site | None,
    *,
    batch_index: int | None,
    epoch: int | None,
    batch_size: int | None,
    shuffled: bool | None,
    cwd: str | None,
) -> dict[str, Any] | None:
    """Everything known about where the first bad element came from, or None when the batch is all finite."""
    element = first_bad_element(batch)
    if element is None:
        return None
    if isinstance(site, FeedSite):
        # Batches made in Python come in the order the code makes them: no index into an array passed to fit.
        out: dict[str, Any] = {
            "source": "python",
            "element": element.describe(),
            "batch_row": element.row,
            "batch_index": batch_index,
            "epoch": epoch,
            "reader": site.describe(),
        }
    elif site is not None and is_tfdata(site):
        out = {
            "source": "tf.data",
            "element": element.describe(),
            "batch_row": element.row,
            "batch_index": batch_index,
            "epoch": epoch,
            "reader": site.name,
        }
    else:
        out = array_provenance(element, batch_index, epoch, batch_size, shuffled)
    if site is not None:
        found = csv_row(site, batch, element, cwd)
        if found is not None:
            out.update(found)
    return out
