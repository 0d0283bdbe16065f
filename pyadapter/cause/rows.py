"""Which rows of the batch an op's NaN/Inf came from, and what is odd about them.

A dump's health counts say how many values of the origin op went NaN/Inf, not where. When the op's output has the
batch's rows as its leading dimension (a per-sample loss, an activation), the scene re-runs the step once more with
that one op's full values recorded (`pyadapter.replay.scene`) and hands them here: the rows holding NaN/Inf are the
records that made it. A value of such a row unlike the same column of every other row (a label of 50 among 0s and
1s, a price of -1 among positive prices) is the likely bad record; a row with no such value is still named, so the user knows which
record to look at. A row of a batch of texts that is empty where no other row is (an empty review) is named the
same way.

NumPy only; runs nothing of the bundle's.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pyadapter.capture.batchcodec import RaggedLeaf
from pyadapter.capture.records import BadElement, leaves

MAX_ROWS = 5  # rows named at most (a bad op on every row is no single record's doing: see rows_of)
# How far outside the other rows' range a value must lie to be called out, as a fraction of that range.
OUTSIDE = 0.5
# Deviations (of the good rows) from their mean a value must also lie to be unlike them. A few dozen rows
# understate a feature's spread, and a batch has many columns to be unlucky in: 6 keeps a normal feature's tails
# (a 4-sigma value in one of 12 columns of 16 rows) while a unit mix-up (x1000), a label of 50 among 0s and 1s
# or a sentinel of 1e9 are tens to millions of deviations out.
SPREADS = 6.0


@dataclass(frozen=True)
class Outlier:
    """A value of a bad row unlike what every other row holds in the same column."""

    element: BadElement
    low: float  # the other rows' smallest and largest value in that column
    high: float
    whole_row: bool = False  # the row is 0 throughout where no other row is (an empty, all-padding sequence)
    empty_text: bool = False  # the row is an empty (or blank) string where no other row is (an empty review)
    good_rows: int | None = None  # how many rows `low` and `high` come from (the rows that are not bad)
    empty_sequence: bool = False  # the row of a ragged batch has no values where no good row is empty

    def record_text(self) -> str:
        """The record in a few words: 'y[2, 0] = 50', 'x[11] (0 throughout)', 'x[17] (an empty string)'."""
        if self.empty_text:
            return f"{self.element.leaf}[{self.element.row}] (an empty string)"
        if self.empty_sequence:
            return f"{self.element.leaf}[{self.element.row}] (an empty sequence)"
        if self.whole_row:
            return f"{self.element.leaf}[{self.element.row}] (0 throughout)"
        return self.element.describe()

    def describe(self) -> str:
        """'y[2, 0] = 50 (the other 31 rows: 0 to 1)'; 'x[11] = 0 throughout (none of the other 31 rows is)';
        "x[17] = '' (an empty string; none of the other 31 rows is)"."""
        others = self.element.rows - 1
        if self.empty_text:
            return f"{self.element.leaf}[{self.element.row}] = '' (an empty string; none of the other {others} rows is)"
        if self.empty_sequence:
            return f"{self.element.leaf}[{self.element.row}] is empty (length 0, where no row without NaN/Inf is)"
        if self.whole_row:
            if self.good_rows is not None and self.good_rows != others:
                none_of = f"none of the {self.good_rows} rows without NaN/Inf is"
            else:
                none_of = f"none of the other {others} rows is"
            return f"{self.element.leaf}[{self.element.row}] = 0 throughout ({none_of})"
        span = f"{_text(self.low)}" if self.low == self.high else f"{_text(self.low)} to {_text(self.high)}"
        if self.good_rows is not None and self.good_rows != others:
            return f"{self.element.describe()} (the {self.good_rows} rows without NaN/Inf: {span})"
        return f"{self.element.describe()} (the other {others} row{'s' if others != 1 else ''}: {span})"


@dataclass(frozen=True)
class BadRows:
    """The batch rows where the origin op's output is NaN/Inf (`rows`, first `MAX_ROWS`; `count` in all) and the
    outlying values found in them."""

    rows: list[int]
    count: int
    batch_rows: int
    outliers: list[Outlier] = field(default_factory=list)

    def rows_text(self) -> str:
        """'row 2', 'rows 2 and 7', 'rows 2, 7, 9 and 2 more'."""
        shown = [str(r) for r in self.rows]
        more = self.count - len(shown)
        if more > 0:
            shown.append(f"{more} more")
        if len(shown) == 1:
            return f"row {shown[0]}"
        return f"rows {', '.join(shown[:-1])} and {shown[-1]}"

    def to_json(self) -> dict[str, Any]:
        return {
            "rows": list(self.rows),
            "count": self.count,
            "batch_rows": self.batch_rows,
            "outliers": [
                {
                    "array": o.element.leaf,
                    "index": list(o.element.index),
                    "value": _json_float(o.element.value),
                    "low": _json_float(o.low),
                    "high": _json_float(o.high),
                    "whole_row": o.whole_row,
                    "empty_text": o.empty_text,
                    **({"empty_sequence": True} if o.empty_sequence else {}),
                    **({"good_rows": o.good_rows} if o.good_rows is not None else {}),
                }
                for o in self.outliers
            ],
        }

    @classmethod
    def from_json(cls, data: Any) -> BadRows | None:
        """The record `to_json` wrote, or None for anything else (a findings file is data: checked, not trusted)."""
        if not isinstance(data, dict):
            return None
        rows, count, batch_rows = data.get("rows"), data.get("count"), data.get("batch_rows")
        if not isinstance(rows, list) or not rows or not all(_is_int(r) for r in rows):
            return None
        if (
            not isinstance(count, int)
            or not _is_int(count)
            or not isinstance(batch_rows, int)
            or batch_rows < 1
        ):
            return None
        outliers = []
        for item in data.get("outliers") or []:
            if not isinstance(item, dict):
                return None
            index, array = item.get("index"), item.get("array")
            if not isinstance(array, str) or not isinstance(index, list) or not index:
                return None
            if not all(_is_int(i) for i in index):
                return None
            numbers: list[float] = []
            for key in ("value", "low", "high"):
                number = item.get(key)
                if isinstance(number, bool) or not isinstance(number, (int, float)):
                    return None
                numbers.append(float(number))
            value, low, high = numbers
            element = BadElement(array, index[0], tuple(index), value, batch_rows)
            outliers.append(
                Outlier(
                    element,
                    low,
                    high,
                    whole_row=item.get("whole_row") is True,
                    empty_text=item.get("empty_text") is True,
                    empty_sequence=item.get("empty_sequence") is True,
                    good_rows=item["good_rows"] if _is_int(item.get("good_rows")) else None,
                )
            )
        return cls(list(rows[:MAX_ROWS]), count, batch_rows, outliers)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _json_float(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _text(value: float) -> str:
    return f"{value:g}"


def leading_rows(batch: Any) -> int | None:
    """The batch's leading dimension: that of its first array with one."""
    for _, value, _ in leaves(batch):
        if isinstance(value, np.ndarray) and value.ndim > 0:
            return int(value.shape[0])
    return None


# More distinct integers than this among the good rows: ids (users, items, tokens), not a few classes.
CATEGORY_VALUES = 20


def _unlike(
    cells: np.ndarray, low: Any, high: Any, center: Any = None, spread: Any = None
) -> dict[str, np.ndarray]:
    """Each rule's verdict on `cells` (one row's values) against the other rows' `low` and `high` per column: further
    than `OUTSIDE` times their range outside it (where every other row holds one value: any other value) and, given
    their `center` and `spread` (mean and standard deviation), more than `SPREADS` deviations from their mean;
    negative where no other row is (a -1 "missing" marker among prices), 0 where no other row is."""
    margin = OUTSIDE * (high - low)
    with np.errstate(invalid="ignore"):
        finite = np.isfinite(cells)
        beyond = (cells < low - margin) | (cells > high + margin)
        if center is not None and spread is not None:
            # A range of 15 rows is narrow: a normal feature's 2.9 beside rows from -1.1 to 0.7 is an ordinary draw
            # (named "bad data" where a saturated sigmoid made the log's 0). Far in deviations too, or it is not.
            beyond &= (spread == 0) | (np.abs(cells - center) > SPREADS * spread)
        return {
            "range": finite & beyond,
            "negative": finite & (cells < 0) & (low >= 0),
            "zero": finite & (cells == 0) & ((low > 0) | (high < 0)),
        }


def _rules_that_single_out(good: np.ndarray) -> set[str]:
    """The rules of `_unlike` that no good row trips against the other good rows (leave one out).

    A rule that good rows trip as well says nothing of the bad ones: across the 784 pixels of an image some pixel of
    any row is 0 where 15 other rows are not, or outside their range, by chance alone (a Siamese pair of identical
    images was named by a pixel). A label of 50 among 0s and 1s, or a -1 among prices, is a value no good row
    holds, so its rule stays."""
    count = good.shape[0]
    if count < 3:
        return set()
    lows = np.partition(good, 1, axis=0)  # [0]: each column's smallest, [1]: the next
    highs = np.partition(good, count - 2, axis=0)  # [-1]: each column's largest, [-2]: the next
    low1, low2, high1, high2 = lows[0], lows[1], highs[-1], highs[-2]
    kept = {"range", "negative", "zero"}
    with np.errstate(invalid="ignore"):
        # The others' mean and deviation, the row's own value left out as from the range: with it in, no row of n
        # can lie more than (n - 1) / sqrt(n) deviations out (3.75 for 16 rows), and the rule was never dropped.
        total, squares = good.sum(axis=0), np.square(good).sum(axis=0)
        others = count - 1
        for row in good:
            low = np.where(row == low1, low2, low1)  # the others' range: the row's own value left out
            high = np.where(row == high1, high2, high1)
            center = (total - row) / others
            spread = np.sqrt(
                np.maximum(squares - np.square(row) - others * np.square(center), 0.0) / max(others - 1, 1)
            )
            for rule, tripped in _unlike(row, low, high, center, spread).items():
                if rule in kept and np.any(tripped):
                    kept.discard(rule)
            if not kept:
                break
    return kept


def _outliers(
    batch: Any, rows: list[int], batch_rows: int, bad_rows: list[int] | None = None
) -> list[Outlier]:
    """Numeric values of `rows` unlike the same column of every row that is not bad (`bad_rows`, all of them;
    default `rows`) by a rule of `_unlike` that the good rows do not trip among themselves
    (`_rules_that_single_out`); and a row of an array that is 0 throughout where no good row is (an empty sequence,
    all padding), named first."""
    found: list[Outlier] = []
    bad = np.zeros(batch_rows, dtype=bool)
    bad[bad_rows if bad_rows is not None else rows] = True
    for label, value, _ in leaves(batch):
        found += _empty_texts(label, value, rows, batch_rows)
        found += _empty_sequences(label, value, rows, bad)
        if (
            not isinstance(value, np.ndarray)
            or value.ndim == 0
            or value.shape[0] != batch_rows
            or not (
                np.issubdtype(value.dtype, np.number) and not np.issubdtype(value.dtype, np.complexfloating)
            )
            or batch_rows < 3
        ):
            continue
        others = value[~bad].astype(np.float64)
        with np.errstate(all="ignore"):
            low = np.nanmin(others, axis=0) if np.isfinite(others).any() else None
            high = np.nanmax(others, axis=0) if low is not None else None
        if low is None or high is None:
            continue
        if value.ndim > 1 and value[0].size > 1:  # a row of one value is the column rule's
            zero_rows = np.asarray(~value.reshape(batch_rows, -1).any(axis=1), dtype=bool)
            for row in rows:
                # Several bad rows may be empty (two all-padding reviews in one batch); no good row may be.
                if zero_rows[row] and not zero_rows[~bad].any():
                    index = (row,) + (0,) * (value.ndim - 1)
                    found.append(
                        Outlier(
                            BadElement(label, row, index, 0.0, batch_rows),
                            0.0,
                            0.0,
                            whole_row=True,
                            good_rows=int((~bad).sum()),
                        )
                    )
        rules = _rules_that_single_out(others) if np.isfinite(others).all() else set()
        if np.issubdtype(value.dtype, np.integer):
            # Integers are ids or categories: an id of 0 is a valid index beside ids 12 to 999 (a user id for an
            # Embedding, named "a value unlike the other rows" where saturated weights made the log's 0); ids of
            # many values say nothing by their range either. A class label of 50 among 0s and 1s still does, and
            # a -1 "missing" marker always.
            rules.discard("zero")
            if len(np.unique(others)) > CATEGORY_VALUES:
                rules.discard("range")
        with np.errstate(all="ignore"):
            center = np.nanmean(others, axis=0)
            spread = np.nanstd(others, axis=0, ddof=1) if others.shape[0] > 1 else None
        # A 0/1 column (one-hot state, flag, binary label) splits rows by category: a 1 where the good rows have
        # 0 is a valid record whose category meets the bug (an exp overflowing on the high-value state), not an
        # unlike value.
        with np.errstate(invalid="ignore"):
            binary = np.all((value == 0) | (value == 1), axis=0)
        whole = {o.element.row for o in found if o.whole_row and o.element.leaf == label}
        for row in (r for r in rows if r not in whole):  # a row named whole needs no cell of it named
            cells = value[row].astype(np.float64)
            verdicts = _unlike(cells, low, high, center, spread)
            outside = np.zeros(np.shape(cells), dtype=bool)
            for rule in rules:
                outside |= verdicts[rule]
            outside &= ~binary
            for position in np.argwhere(np.atleast_1d(outside)):
                column = tuple(int(i) for i in position) if value.ndim > 1 else ()
                index = (row, *column)
                found.append(
                    Outlier(
                        BadElement(label, row, index, float(value[index]), batch_rows),
                        float(np.asarray(low)[column]),
                        float(np.asarray(high)[column]),
                        good_rows=int(others.shape[0]),
                    )
                )
    return found[:MAX_ROWS]


def _empty_sequences(label: str, value: Any, rows: list[int], bad: np.ndarray) -> list[Outlier]:
    """Rows of a ragged batch (token lists of any length) that hold no values where no good row is empty: a mean
    over an empty row is a sum of nothing divided by a length of 0."""
    if not isinstance(value, RaggedLeaf) or value.rows != bad.shape[0] or bad.shape[0] < 3:
        return []
    lengths = np.diff(value.row_splits[0])
    if (lengths[~bad] == 0).any():
        return []
    return [
        Outlier(BadElement(label, row, (row,), 0.0, int(bad.shape[0])), 0.0, 0.0, empty_sequence=True)
        for row in rows
        if lengths[row] == 0
    ]


def _empty_texts(label: str, value: Any, rows: list[int], batch_rows: int) -> list[Outlier]:
    """Rows of a batch of strings (one text per row: raw reviews fed to a TextVectorization) that are empty or
    blank where no other row is: an empty text makes an empty token sequence, and a mean over it is 0 / 0."""
    if (
        not isinstance(value, np.ndarray)
        or value.dtype.kind not in "SUO"
        or value.ndim == 0
        or value.shape[0] != batch_rows
        or batch_rows < 3
    ):
        return []
    flat = value.reshape(batch_rows, -1)
    if flat.shape[1] != 1:
        return []
    # A tf.string tensor read at the scene is an object array of bytes (a bundle stores fixed-width bytes).
    if value.dtype.kind == "O" and not all(isinstance(text, (bytes, str)) for text in flat[:, 0]):
        return []
    blank = np.array([not (text.strip() if isinstance(text, (bytes, str)) else text) for text in flat[:, 0]])
    if blank.sum() != 1:
        return []
    return [
        Outlier(
            BadElement(label, row, (row,) + (0,) * (value.ndim - 1), 0.0, batch_rows),
            0.0,
            0.0,
            empty_text=True,
        )
        for row in rows
        if blank[row]
    ]


# A value at least this many times every other row's largest |value| in its column (and than 1) is a record, not a
# scale: its gradient alone is that much larger than the step's usual one, and can overflow the step's values.
EXTREME_FACTOR = 1e6


def _finite_tables(batch: Any) -> Iterator[tuple[str, np.ndarray, np.ndarray, int]]:
    """(label, array, its rows as a float64 table, rows) of each floating-point leaf of a batch of 4 rows and more
    with the batch's rows first and only finite values (NaN/Inf in the batch is `first_bad_element`'s)."""
    batch_rows = leading_rows(batch)
    if batch_rows is None or batch_rows < 4:
        return
    for label, value, _ in leaves(batch):
        if (
            not isinstance(value, np.ndarray)
            or value.ndim == 0
            or value.shape[0] != batch_rows
            or not np.issubdtype(value.dtype, np.floating)
        ):
            continue
        table = value.reshape(batch_rows, -1).astype(np.float64)
        if np.isfinite(table).all():
            yield label, value, table, batch_rows


def constant_records(batch: Any, rows: list[int]) -> bool:
    """Whether each of `rows` holds one value throughout in some floating-point array of the batch with more than
    one value a row (a flat image patch of 0.25), where not every row does: records a reduction of a difference
    (a mean squared error, a variance) can make exactly 0."""
    if not rows:
        return False
    flat_in: list[set[int]] = []
    for _label, _value, table, _batch_rows in _finite_tables(batch):
        if table.shape[1] < 2:
            continue
        flat = np.ptp(table, axis=1) == 0
        if flat.all():
            continue
        flat_in.append({int(r) for r in np.flatnonzero(flat)})
    return all(any(row in flat for flat in flat_in) for row in rows)


def extreme_record(batch: Any) -> Outlier | None:
    """The one batch value (in a numeric array with the batch's rows first, 4 rows and more) whose magnitude is at
    least `EXTREME_FACTOR` times that of every other row in its column and than 1 (a 1e21 among values of about 1),
    the largest such; None when there is none. For an overflow no op's NaN/Inf can be traced to rows: the values
    were finite, only too large."""
    best: tuple[float, Outlier] | None = None
    for label, value, table, batch_rows in _finite_tables(batch):
        size = np.abs(table)
        top = np.argmax(size, axis=0)
        columns = np.arange(table.shape[1])
        largest = size[top, columns]
        others = size.copy()
        others[top, columns] = -1.0
        runner_up = others.max(axis=0)
        ratio = largest / np.maximum(runner_up, 1.0)
        column = int(np.argmax(ratio))
        if ratio[column] < EXTREME_FACTOR or (best is not None and ratio[column] <= best[0]):
            continue
        row = int(top[column])
        rest = np.delete(table[:, column], row)
        place = [int(i) for i in np.unravel_index(column, value.shape[1:])] if value.ndim > 1 else []
        element = BadElement(label, row, (row, *place), float(table[row, column]), batch_rows)
        best = (
            float(ratio[column]),
            Outlier(element, float(rest.min()), float(rest.max()), good_rows=batch_rows - 1),
        )
    return best[1] if best is not None else None


def rows_of(output: np.ndarray, batch: Any) -> BadRows | None:
    """The rows of `batch` where `output` (the origin op's values, batch rows first) holds NaN/Inf; None when its
    leading dimension is not the batch's, when it has no NaN/Inf, or when more than half the rows have them (no one
    record made them: a weight, a constant, an overflow of the whole model's values or a reduction over the batch
    did; naming 56 of 64 rows, or one value of them, says nothing)."""
    batch_rows = leading_rows(batch)
    if batch_rows is None or output.ndim == 0 or output.shape[0] != batch_rows or batch_rows < 2:
        return None
    if not np.issubdtype(output.dtype, np.floating):
        return None
    bad_rows = ~np.isfinite(output.reshape(batch_rows, -1)).all(axis=1)
    count = int(bad_rows.sum())
    if count == 0 or count > batch_rows // 2:
        return None
    rows = [int(r) for r in np.flatnonzero(bad_rows)]
    return BadRows(rows[:MAX_ROWS], count, batch_rows, _outliers(batch, rows[:MAX_ROWS], batch_rows, rows))


# A value this many times its column's median magnitude (and 1), held by at most a quarter of the batch's rows.
OUTLYING_FACTOR = 30.0


def outlying_record(batch: Any) -> Outlier | None:
    """The batch value furthest out of its column's scale, when at least `OUTLYING_FACTOR` times the column's median
    magnitude (and 1) in at most a quarter of the rows; None otherwise. Weaker than `extreme_record` (a few
    copies of a 300 among standardised values, where no value stands out from the runner-up): used only where the
    history says the weights stood still while the loss jumped, so the batch is what changed."""
    best: tuple[float, Outlier] | None = None
    for label, value, table, batch_rows in _finite_tables(batch):
        size = np.abs(table)
        scale = np.maximum(np.median(size, axis=0), 1.0)
        ratio = size / scale
        far = ratio >= OUTLYING_FACTOR
        for column in np.flatnonzero(far.any(axis=0) & (far.sum(axis=0) <= batch_rows // 4)):
            row = int(np.argmax(ratio[:, column]))
            score = float(ratio[row, column])
            if best is not None and score <= best[0]:
                continue
            rest = table[~far[:, column], column]
            place = [int(i) for i in np.unravel_index(int(column), value.shape[1:])] if value.ndim > 1 else []
            element = BadElement(label, row, (row, *place), float(table[row, column]), batch_rows)
            best = (score, Outlier(element, float(rest.min()), float(rest.max()), good_rows=len(rest)))
    return best[1] if best is not None else None
