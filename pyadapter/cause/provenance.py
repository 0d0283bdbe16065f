"""Where the bad element of a captured batch came from: its place in the batch, its index in the array passed to
``fit`` (NumPy inputs), and the file and record holding it: for a ``tf.data`` pipeline reading files, from the
bundle's ``data_source`` (the files recorded at capture, `pyadapter.capture.datasource`), else, when the reading
line names a CSV file as a string literal, that file.

Reads the batch (numpy arrays, no TensorFlow) and data files only inside the folders it is given (the folder NaN
Lens runs in: a bundle is data and must not make it read elsewhere); runs nothing. A record is named only when
its values single it out (`pyadapter.capture.records`).
"""

from __future__ import annotations

import ast
import csv
import math
import os
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from pyadapter.capture import fit_arrays, records
from pyadapter.capture.records import BadElement, first_bad_element, leaves  # noqa: F401 - re-exported
from pyadapter.capture.sourcerecord import DataSource, RecordPlace
from pyadapter.cause.change_line import Site, is_tfdata
from pyadapter.cause.python_feed import FeedSite

DATA_SUFFIXES = (".csv", ".tsv", ".txt", ".data")


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
    dataset: bool = False,
) -> dict[str, Any]:
    """The index of the bad row in the array passed to ``fit`` (NumPy inputs): batch_index * batch_size + row.
    ``dataset``: fit was given a tf.data pipeline built in memory; the index is then the pipeline's element."""
    size = batch_size or element.rows
    out: dict[str, Any] = {
        "source": "dataset" if dataset else "array",
        "element": element.describe(),
        "batch_row": element.row,
        "batch_index": batch_index,
        "epoch": epoch,
        "batch_size": size,
    }
    if batch_index is None or shuffled is None:
        return out  # no fit call in the user's code (a custom loop): no array of fit's to count in
    out["index"] = batch_index * size + element.row
    out["shuffled"] = shuffled
    if dataset and shuffled:
        out["note"] = (
            "the pipeline shuffles (.shuffle), so this is the element's place in this epoch's order, not in your "
            "data; find the record by its values"
        )
    elif shuffled is not False:
        out["note"] = (
            "fit shuffles (shuffle=True is its default), so this is the index in the epoch's shuffled "
            "order, not in your array; pass shuffle=False to reproduce it, or find the row by its values"
        )
    return out


# keras.utils.timeseries_dataset_from_array's parameters, in order.
_SERIES_PARAMETERS = (
    "data",
    "targets",
    "sequence_length",
    "sequence_stride",
    "sampling_rate",
    "batch_size",
    "shuffle",
    "seed",
    "start_index",
)


def _series_row(site: Site, element: BadElement, window: int) -> dict[str, Any]:
    """For a dataset of windows (``timeseries_dataset_from_array`` unshuffled), the row of the series array the bad
    value is: the window's first row (``start_index + window * sequence_stride``) plus its time step times
    ``sampling_rate``. "Element 1459" was the window, whose row 1459 holds nothing wrong. {} when the call's
    numbers are not written in the code (a literal, or a module-level name given one)."""
    node = site.node
    target = element.leaf.startswith(
        "y"
    )  # the window's target: ``targets[i]`` goes with the window starting at i
    if not isinstance(node, ast.Call) or (len(element.index) < 2 and not target):
        return {}
    if getattr(node.func, "attr", getattr(node.func, "id", None)) != "timeseries_dataset_from_array":
        return {}
    given = dict(zip(_SERIES_PARAMETERS, node.args, strict=False))
    given.update({k.arg: k.value for k in node.keywords if k.arg})
    constants = {
        target.id: statement.value
        for statement in site.unit.tree.body
        if isinstance(statement, ast.Assign)
        for target in statement.targets
        if isinstance(target, ast.Name)
    }

    def value(name: str, default: Any) -> Any:
        expr = given.get(name)
        if expr is None:
            return default
        if isinstance(expr, ast.Name):
            expr = constants.get(expr.id)
        return expr.value if isinstance(expr, ast.Constant) else None

    stride, rate, start = value("sequence_stride", 1), value("sampling_rate", 1), value("start_index", None)
    if value("shuffle", False) is not False or not all(type(n) is int for n in (stride, rate)):
        return {}
    if start is not None and type(start) is not int:
        return {}
    first = (start or 0) + window * stride
    if target:
        return {"target_row": first, "window": window}
    time_step = element.index[1]
    return {"series_row": first + time_step * rate, "window": window, "time_step": time_step}


def _frame_column(fit_rows: Any, element: BadElement) -> str | None:
    """The DataFrame column of a bad value of ``x`` (``x[17, 3]`` is the fourth column), from the names the guard
    recorded (`fit_arrays.frame_columns`), or None."""
    columns = fit_rows.get("columns") if isinstance(fit_rows, dict) else None
    if element.leaf != "x" or len(element.index) != 2 or not isinstance(columns, list):
        return None
    column = element.index[1]
    return str(columns[column]) if 0 <= column < len(columns) else None


def _literal_paths(site: Site) -> list[str]:
    """Data file names the reading call writes as strings, or gives by a name assigned one string in the same code
    (``path = "houses.csv"`` and ``np.genfromtxt(path, ...)``, a notebook's habit)."""
    names = {node.id for node in ast.walk(site.node) if isinstance(node, ast.Name)}
    assigned = [
        node.value
        for node in ast.walk(site.unit.tree)
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id in names for t in node.targets)
    ]
    return [
        node.value
        for tree in [site.node, *assigned]
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.lower().endswith(DATA_SUFFIXES)
    ]


def _resolve(path: str, site: Site, cwd: str | None, folders: list[str]) -> str | None:
    candidates = (
        [path]
        if os.path.isabs(path)
        else [os.path.join(folder, path) for folder in (cwd, os.path.dirname(site.file)) if folder]
    )
    for candidate in candidates:
        if records.readable_inside(candidate, folders) is not None:
            return os.path.abspath(candidate)
    return None


def _text_files_read(site: Site, cwd: str | None, folders: list[str]) -> Iterator[tuple[str, str]]:
    """(path, delimiter) of each data file the reading line names that is found inside `folders`."""
    for literal in _literal_paths(site):
        path = _resolve(literal, site, cwd, folders)
        if path is not None:
            yield path, "\t" if path.endswith(".tsv") else ","


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


def csv_row(
    site: Site, batch: Any, element: BadElement, cwd: str | None, folders: list[str]
) -> dict[str, Any] | None:
    """``{"file", "row", "line"}`` of the one line of the CSV file named on the reading line whose values are the
    bad batch row (row counted from 0 among the data rows, as an array read from the file counts them; line from 1 in the file), or None when not exactly one."""
    ordered, named = _row_values(batch, element)
    if not ordered and not named:
        return None
    for path, delimiter in _text_files_read(site, cwd, folders):
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


def read_file_holds_missing(
    site: Site, cwd: str | None, folders: list[str], seconds: float = 10.0
) -> bool | None:
    """Whether the CSV file named on the reading line holds a field pandas reads as NaN (empty, ``nan``, ``NA``,
    ``inf``...): False when it was read to its end and holds none, None when no such file is found, or it was
    not read to its end in `seconds`. A NaN in what fit got then came from the program's own arithmetic."""
    deadline = time.monotonic() + seconds
    for path, delimiter in _text_files_read(site, cwd, folders):
        if not path.lower().endswith((".csv", ".tsv", ".txt")):
            continue
        try:
            with open(path, encoding="utf-8", errors="replace", newline="") as handle:
                for number, fields in enumerate(csv.reader(handle, delimiter=delimiter)):
                    if number == 0 and any(_as_float(f) is None for f in fields):
                        continue  # a header (pandas writes its index's name as an empty field)
                    if any(f.strip().lower() in records.NA_TEXTS for f in fields):
                        return True
                    if number % 4096 == 0 and time.monotonic() > deadline:
                        return None
        except OSError:
            continue
        return False
    return None


def read_file_columns(
    site: Site, cwd: str | None, folders: list[str], seconds: float = 10.0
) -> tuple[str, dict[str, list[float | None]]] | None:
    """(its path, its columns): the CSV file named on the reading line, by its header: each column's fields as numbers (NaN for a field
    pandas reads as missing, None for text), to see what the program's own pandas arithmetic makes of them (a
    ratio of two columns that are both 0 on some rows: 0 / 0). None when no such file with a header is found, or
    it was not read to its end in `seconds`."""
    deadline = time.monotonic() + seconds
    for path, delimiter in _text_files_read(site, cwd, folders):
        if not path.lower().endswith((".csv", ".tsv", ".txt")):
            continue
        try:
            with open(path, encoding="utf-8", errors="replace", newline="") as handle:
                reader = csv.reader(handle, delimiter=delimiter)
                header = [f.strip() for f in next(reader, [])]
                if not header or all(_as_float(f) is not None for f in header):
                    continue  # no header: no column names to go by
                columns: dict[str, list[float | None]] = {name: [] for name in header}
                for number, fields in enumerate(reader):
                    for name, field in zip(header, fields, strict=False):
                        value = math.nan if field.strip().lower() in records.NA_TEXTS else _as_float(field)
                        columns[name].append(value)
                    if number % 4096 == 0 and time.monotonic() > deadline:
                        return None
        except OSError:
            continue
        return path, columns
    return None


def csv_column_count(
    site: Site, column: str, value: float, cwd: str | None, folders: list[str], seconds: float = 10.0
) -> tuple[int, str] | None:
    """(how many rows, the file's name) of the CSV file named on the reading line whose field `column` (by its
    header) is `value`: a fare of 0 held by 12 passengers is a valid value, not a bad record. None when no such file
    or column is found, or it was not read to its end in `seconds`."""
    deadline = time.monotonic() + seconds
    for path, delimiter in _text_files_read(site, cwd, folders):
        if not path.lower().endswith((".csv", ".tsv", ".txt")):
            continue
        count = 0
        try:
            with open(path, encoding="utf-8", errors="replace", newline="") as handle:
                reader = csv.reader(handle, delimiter=delimiter)
                header = [f.strip() for f in next(reader, [])]
                if column not in header:
                    continue
                at = header.index(column)
                for number, fields in enumerate(reader):
                    if at < len(fields) and _close(value, _as_float(fields[at])):
                        count += 1
                    if number % 4096 == 0 and time.monotonic() > deadline:
                        return None
        except OSError:
            continue
        return count, os.path.basename(path)
    return None


def _place_text(place: RecordPlace) -> str:
    """'turbine.csv line 517: field 'rotor_rpm' is 'nan'' / 'listings.tfrecord record 390: feature ... is inf'."""
    name = os.path.basename(place.file)
    where = f"{name} line {place.line}" if place.line is not None else f"{name} record {place.record}"
    if place.field is None:
        return where
    if place.kind == "tfrecord":
        return f"{where}: feature {place.field!r} is {place.field_text}"
    shown = "empty" if place.field_text == "" else repr(place.field_text)
    return f"{where}: field {place.field!r} is {shown}"


def file_provenance(
    source: DataSource, batch: Any, element: BadElement, folders: list[str]
) -> tuple[dict[str, Any], list[str]]:
    """The record holding the bad row, from the recorded files: searched now by its values in a file inside
    ``folders`` (the answer links to it: ``openable``), else the record found when captured, else the position
    the pipeline's order gives; with notes saying what could not be done."""
    notes: list[str] = []
    row = records.batch_row(batch, element.row, element.rows)
    prefer = source.position.record if source.position is not None else None
    place: RecordPlace | None = None
    openable = False
    clean: list[str] = []  # files searched to their end with no non-finite record: one note for them all
    for file in source.files:
        path = records.readable_inside(file.path, folders)
        if path is None:
            unread = (
                "it no longer exists"
                if not os.path.lexists(file.path)
                else f"it is not a regular file inside {', '.join(folders)}"
            )
            notes.append(f"{os.path.basename(file.path)} is not read: {unread}")
            continue
        place, why = records.find_record(file, path, row, prefer=prefer, found_by="values in the file")
        if place is not None:
            openable = True
            break
        if why == records.NO_NON_FINITE_RECORD:
            clean.append(os.path.basename(file.path))
        elif why:
            notes.append(why)
    if clean and place is None:
        # Three shards read the same words three times, naming none (s40d p5).
        notes.append(
            f"no record of {clean[0]} holds a non-finite value"
            if len(clean) == 1
            else f"no record of {', '.join(clean[:-1])} or {clean[-1]} holds a non-finite value"
        )
    if place is None:
        place = source.found or source.position
        if place is not None and place.found_by == "values when captured":
            notes.append("found by its values when the batch was captured")
    out: dict[str, Any] = {"files": [f.path for f in source.files], "order": source.order}
    if source.note:
        notes.insert(0, source.note)
    if place is not None:
        out.update(place.to_json())
        out["openable"] = openable
        out["sentence"] = _place_text(place)
        if place.kind == "csv":
            out["row"] = place.record  # the data row (0-based), as an array read from the file counts them
    return out, notes


def data_provenance(
    batch: Any,
    site: Site | None,
    *,
    batch_index: int | None,
    epoch: int | None,
    batch_size: int | None,
    shuffled: bool | None,
    cwd: str | None,
    data_source: DataSource | None = None,
    folders: list[str] | None = None,
    element: BadElement | None = None,
    dataset: bool = False,
    fit_rows: dict[str, Any] | None = None,
    made_by: Site | None = None,
) -> dict[str, Any] | None:
    """Everything known about where the first bad element came from, or None when the batch is all finite.
    ``folders``: where data files may be read (default: the current directory). ``element``: a finite value an op
    read outside its domain instead (`pyadapter.cause.domain`); its place in the batch and the array passed to
    fit only, as data files are searched for records holding a non-finite field. ``dataset``: fit was given a tf.data
    pipeline (`change_line.fit_reads_a_dataset`). ``fit_rows``: the batch rows' indices in the arrays passed to fit,
    found by their values at the scene (`pyadapter.capture.fit_arrays`). ``made_by``: where the code makes what fit
    is given, when no reading call is the site (a ``timeseries_dataset_from_array`` call: `_series_row`)."""
    search_files = element is None
    # The guard found the batch's rows in the arrays a tf.data pipeline was sliced from: fit was given that
    # pipeline, whatever the source text suggests (``fit(make_dataset(x, y))``), and fit's shuffle= is not used.
    dataset = dataset or (isinstance(fit_rows, dict) and fit_rows.get("of") == fit_arrays.SLICES)
    element = element or first_bad_element(batch)
    if element is None:
        return None
    folders = folders if folders is not None else [os.getcwd()]
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
    elif data_source is not None or (site is not None and is_tfdata(site)):
        out = {
            "source": "tf.data",
            "element": element.describe(),
            "batch_row": element.row,
            "batch_index": batch_index,
            "epoch": epoch,
        }
        if site is not None:
            out["reader"] = site.name
    else:
        out = array_provenance(element, batch_index, epoch, batch_size, shuffled, dataset)
        if (site or made_by) is not None and out.get("index") is not None:
            out.update(_series_row(site or made_by, element, out["index"]))  # type: ignore[arg-type]
        framed = isinstance(fit_rows, dict) and fit_rows.get("of") == fit_arrays.FRAME
        of = fit_arrays.SLICES if dataset else fit_arrays.FRAME if framed else None
        index = fit_arrays.index_of_row(fit_rows, element.row, of)
        copies = fit_arrays.copies_of_row(fit_rows, element.row, of) if index is None else []
        if index is not None or copies:
            # Found by its values in the arrays fit trained on (or the pipeline was sliced from): the index in the
            # user's own arrays, shuffled or not; a row held there more than once, every index of it.
            out.update(index=index if index is not None else copies[0], shuffled=False, found_by="values")
            if copies:
                out["copies"] = copies
            if of is not None:
                out["of"] = of
            column = _frame_column(fit_rows, element) if framed else None
            if column is not None:
                out["column"] = column
            out.pop("note", None)
    if not search_files:
        return out
    if data_source is not None and data_source.files:
        found, notes = file_provenance(data_source, batch, element, folders)
        out.update(found)
        if notes:
            out["note"] = "; ".join(notes)
        if out.get("file"):
            return out
    if site is not None:
        found_row = csv_row(site, batch, element, cwd, folders)
        if found_row is not None:
            out.update(found_row)
    return out
