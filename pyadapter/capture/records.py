"""Find the record of a data file that holds a batch row: a CSV/text line or a TFRecord ``tf.train.Example``.

The row is found by its values, so it is found whatever the pipeline did to the order (shuffle, interleave): the
candidates are the records holding a non-finite value (a ``nan``/``inf``/empty/NA field, a non-finite float
feature), told apart by how many of the batch row's finite values they hold. No TensorFlow, nothing run: CSV is
read with ``csv``, TFRecord with NaN Lens's own record reader and a hand decoder of the Example wire format.

Which files may be read is the caller's decision, with ``readable_inside``: a path from a bundle is read only when
it is a regular file inside the folder NaN Lens runs in (a bundle is data; it must not make us read elsewhere).
The training process itself (`pyadapter.capture.datasource`) searches the files its own pipeline reads.
"""

from __future__ import annotations

import csv
import math
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pyadapter.capture.sourcerecord import TEXT_LIMIT, RecordPlace, SourceFile

MAX_FILE_BYTES = 256 << 20
SEARCH_SECONDS = 30.0  # a file that takes longer is reported as not searched to its end
NA_TEXTS = frozenset(
    {"", "nan", "-nan", "na", "n/a", "null", "none", "inf", "+inf", "-inf", "infinity", "-infinity"}
)


def readable_inside(path: str, folders: Sequence[str]) -> str | None:
    """The real path of ``path`` when it is a regular file of at most MAX_FILE_BYTES inside one of ``folders``
    (symlinks resolved on both sides), else None."""
    try:
        real = os.path.realpath(path)
        if not os.path.isfile(real) or os.path.getsize(real) > MAX_FILE_BYTES:
            return None
    except OSError:
        return None
    for folder in folders:
        root = os.path.realpath(folder)
        if os.path.commonpath([real, root]) == root:
            return real
    return None


@dataclass
class RowValues:
    """One batch row's values: every finite number of every array in it, and the scalars of named columns."""

    values: list[float] = field(default_factory=list)
    named: dict[str, float] = field(default_factory=dict)
    # Where each array of the row holds NaN/Inf: (its size, the positions in it). A record whose feature list has
    # its non-finite values at the same positions is the row's, even when the pipeline scaled the finite ones.
    gaps: list[tuple[int, tuple[int, ...]]] = field(default_factory=list)

    def empty(self) -> bool:
        return not self.values and not self.named


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


@dataclass
class BadElement:
    """A value of the batch that made NaN/Inf: which array (``x``, ``x['age']``), row and full index. The first
    non-finite value (`first_bad_element`), or a finite one an op read outside its domain (log of a 0 target)."""

    leaf: str
    row: int
    index: tuple[int, ...]
    value: float
    rows: int  # rows in the batch (its leading dimension)

    def describe(self) -> str:
        position = ", ".join(str(i) for i in self.index)
        return f"{self.leaf}[{position}] = {_value_text(self.value)}"


def _value_text(value: float) -> str:
    if math.isfinite(value):
        return f"{value:g}"
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


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


def batch_row(batch: Any, row: int, rows: int) -> RowValues:
    """The values of row ``row`` of every array of the batch whose leading dimension is the batch's (x, y, ...)."""
    out = RowValues()
    for _, value, column in leaves(batch):
        if not isinstance(value, np.ndarray) or value.ndim == 0 or value.shape[0] != rows:
            continue
        if not np.issubdtype(value.dtype, np.number):
            continue
        flat = np.asarray(value[row], dtype=np.float64).ravel()
        if column is not None and flat.size == 1:
            out.named[column] = float(flat[0])
        out.values += [float(v) for v in flat[:256] if math.isfinite(v)]
        gaps = tuple(int(i) for i in np.flatnonzero(~np.isfinite(flat)))
        if gaps:
            out.gaps.append((int(flat.size), gaps))
    return out


def close(a: float, b: float) -> bool:
    """Equal as a float32 batch value and a decimal text (or float32 feature) of the file."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= 1e-5 * max(1.0, abs(a), abs(b))


def _field_value(text: str, na_value: str | None) -> float | None:
    """A CSV field as the reader sees it: a number, NaN for an empty/NA field, None for other text."""
    stripped = text.strip()
    if stripped == "" or (na_value is not None and stripped == na_value):
        return math.nan
    try:
        return float(stripped)
    except ValueError:
        return math.nan if stripped.lower() in NA_TEXTS else None


@dataclass
class _Candidate:
    record: int
    line: int | None
    field: str
    field_text: str | None
    text: str | None
    score: int


# A record whose non-finite values sit where the row's do outweighs any count of matching values.
GAPS_MATCH = 1_000_000


def _gaps_match(row: RowValues, values: list[float | None]) -> bool:
    """Whether `values` (a record's feature list, or a CSV line's fields) has its non-finite values at the very
    positions, and of the same count of values, as one of the row's arrays."""
    gaps = tuple(i for i, v in enumerate(values) if v is not None and not math.isfinite(v))
    return bool(gaps) and (len(values), gaps) in row.gaps


def _score(row: RowValues, numbers: list[float], by_name: dict[str, list[float]]) -> int:
    """How many of the row's values the record holds (named columns only in their own column)."""
    score = 0
    for name, value in row.named.items():
        if math.isfinite(value) and any(close(value, v) for v in by_name.get(name, ())):
            score += 1
    for value in row.values:
        if any(close(value, v) for v in numbers):
            score += 1
    return score


# Why no record was picked: the file was read to its end and holds none with a non-finite field.
NO_NON_FINITE_RECORD = "no record of the file holds a non-finite value"


def _pick(candidates: list[_Candidate], prefer: int | None) -> tuple[_Candidate | None, str | None]:
    if not candidates:
        return None, NO_NON_FINITE_RECORD
    if prefer is not None:
        for candidate in candidates:
            if candidate.record == prefer:
                return candidate, None
    if len(candidates) == 1:
        return candidates[0], None
    best = max(c.score for c in candidates)
    top = [c for c in candidates if c.score == best]
    if best > 0 and len(top) == 1:
        return top[0], None
    return (
        None,
        f"{len(candidates)} records hold non-finite values and the batch row's values do not tell them apart",
    )


def _csv_candidates(source: SourceFile, path: str, row: RowValues, deadline: float) -> Iterator[_Candidate]:
    delimiter = source.delimiter or ("\t" if path.endswith(".tsv") else ",")
    with open(path, encoding="utf-8", errors="replace", newline="") as handle:
        reader = csv.reader(handle, delimiter=delimiter)
        header: list[str] | None = None
        record = -1
        for fields in reader:
            line = reader.line_num
            values = [_field_value(f, source.na_value) for f in fields]
            if line == 1 and (source.header or (source.header is None and any(v is None for v in values))):
                header = [h.strip() for h in fields]
                continue
            # TextLineDataset yields every line (a header too, which the user skips): its record is the line's.
            record = line - 1 if source.kind == "text" else record + 1
            if time.monotonic() > deadline:
                raise TimeoutError
            bad = next((i for i, v in enumerate(values) if v is not None and not math.isfinite(v)), None)
            if bad is None:
                continue
            numbers = [v for v in values if v is not None and math.isfinite(v)]
            by_name = {
                name: [v]
                for name, v in zip(header or [], values, strict=False)
                if v is not None and math.isfinite(v)
            }
            name = header[bad] if header is not None and bad < len(header) else f"column {bad + 1}"
            text = delimiter.join(fields)
            yield _Candidate(
                record,
                line,
                name,
                fields[bad].strip(),
                text[:TEXT_LIMIT],
                _score(row, numbers, by_name) + (GAPS_MATCH if _gaps_match(row, values) else 0),
            )


# tf.train.Example: Example.features(1) -> Features.feature(1): map entries {key(1), value(2): Feature}; Feature:
# bytes_list(1) | float_list(2) | int64_list(3), each with repeated value(1), packed or not.
def _example_features(data: bytes) -> dict[str, list[float]]:
    from pyadapter.dump import wire

    out: dict[str, list[float]] = {}
    for number, kind, a, b in wire.fields(data):
        if number != 1 or kind != wire.LEN:
            continue
        for entry_number, entry_kind, ea, eb in wire.fields(data, a, b):
            if entry_number != 1 or entry_kind != wire.LEN:
                continue
            key, values = "", []
            for f_number, f_kind, fa, fb in wire.fields(data, ea, eb):
                if f_number == 1 and f_kind == wire.LEN:
                    key = wire.text(data, fa, fb)
                elif f_number == 2 and f_kind == wire.LEN:
                    values = _feature_values(data, fa, fb)
            if key:
                out[key] = values
    return out


def _feature_values(data: bytes, start: int, end: int) -> list[float]:
    from pyadapter.dump import wire

    values: list[float] = []
    for number, kind, a, b in wire.fields(data, start, end):
        if number not in (2, 3) or kind != wire.LEN:
            continue  # bytes_list: nothing numeric to match
        for v_number, v_kind, va, vb in wire.fields(data, a, b):
            if v_number != 1:
                continue
            if number == 2 and v_kind == wire.LEN:  # packed floats
                values += list(np.frombuffer(data[va:vb], dtype="<f4").astype(np.float64))
            elif number == 2 and v_kind == wire.FIXED32:
                values.append(float(np.frombuffer(data[va:vb], dtype="<f4")[0]))
            elif number == 3 and v_kind == wire.LEN:
                values += [float(v) for v in wire.packed_varints(data, va, vb)]
            elif number == 3 and v_kind == wire.VARINT:
                values.append(float(va if va < 1 << 63 else va - (1 << 64)))
    return values


def _tfrecord_candidates(path: str, row: RowValues, deadline: float) -> Iterator[_Candidate]:
    from pyadapter.dump import wire
    from pyadapter.dump.tfrecord import RecordFile

    for record, (_, data) in enumerate(RecordFile(path).records()):
        if time.monotonic() > deadline:
            raise TimeoutError
        try:
            features = _example_features(data)
        except wire.WireError:
            continue  # not an Example (raw bytes the pipeline decodes itself): nothing to match
        bad = next(
            (
                (key, i, v)
                for key, values in features.items()
                for i, v in enumerate(values)
                if not math.isfinite(v)
            ),
            None,
        )
        if bad is None:
            continue
        key, index, value = bad
        numbers = [v for values in features.values() for v in values if math.isfinite(v)]
        by_name = {k: v for k, v in features.items()}
        name = key if len(features[key]) == 1 else f"{key}[{index}]"
        text = "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
        score = _score(row, numbers, by_name)
        if any(_gaps_match(row, list(values)) for values in features.values()):
            score += GAPS_MATCH
        yield _Candidate(record, None, name, text, None, score)


def find_record(
    source: SourceFile,
    path: str,
    row: RowValues,
    *,
    prefer: int | None = None,
    found_by: str,
    seconds: float = SEARCH_SECONDS,
) -> tuple[RecordPlace | None, str | None]:
    """The record of ``path`` (already checked readable) holding the batch row, or (None, why not); a search
    longer than ``seconds`` gives up."""
    if source.compression:
        return None, f"{os.path.basename(path)} is {source.compression}-compressed: not searched"
    deadline = time.monotonic() + seconds
    try:
        if source.kind == "tfrecord":
            candidates = list(_tfrecord_candidates(path, row, deadline))
        else:
            candidates = list(_csv_candidates(source, path, row, deadline))
    except TimeoutError:
        return None, f"{os.path.basename(path)} was not searched to its end (over {seconds:.0f} s)"
    except (OSError, csv.Error, UnicodeError) as exc:
        return None, f"{os.path.basename(path)} could not be read: {exc}"
    chosen, why = _pick(candidates, prefer)
    if chosen is None:
        return None, why
    return (
        RecordPlace(
            file=path,
            kind=source.kind,
            record=chosen.record,
            line=chosen.line,
            field=chosen.field,
            field_text=chosen.field_text,
            text=chosen.text,
            found_by=found_by,
        ),
        None,
    )
