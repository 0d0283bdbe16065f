"""The origin op's whole values, read from one more run of the step, to name the batch rows its NaN/Inf came from.

A FULL_HEALTH dump counts each op's NaN/Inf without saying where they are. When the origin op's output may have the
batch's rows first (its size a multiple of them, some of its values bad and some not), the step runs once more
under a FULL_TENSOR dump of that op type only (tfdbg filters by op type), the origin's own output is read back, and
`pyadapter.cause.rows.rows_of` names the rows. Used by the locate at the scene and by a bundle's dumped replay; an
extra for the cause, so it never fails a locate.

That run is eager when it can be: one step traced again as a graph costs seconds at the sizes users train (5.6 s
of a 1M-parameter Transformer's 21-27 s locate at the scene, bench/scale.py), eagerly it costs about one step. An
eager op has no graph name, so an op callback keeps the first output of the origin's op type whose NaN/-Inf/+Inf
counts are the origin's (the FULL_HEALTH dump's) and whose stack holds the origin's line; where none is, or the step
draws unseeded random numbers (an eager run draws other ones), the graph run names it by name, as before.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from typing import Any

from pyadapter.capture.records import first_bad_element
from pyadapter.cause.rows import BadRows, leading_rows, rows_of
from pyadapter.findings import Finding
from pyadapter.replay.verdict import Mode


def wants_rows(origin: Finding | None, batch: Any) -> bool:
    """Whether the origin's output may be rows first, with bad values in some rows only (and a batch of finite
    values: a batch holding NaN/Inf already is named as such)."""
    health = origin.health if origin is not None else None
    if health is None or not health.rank or not health.size or batch is None:
        return False
    rows = leading_rows(batch)
    # Health has the size, not the shape: a size that is not a multiple of the rows cannot be rows first.
    if rows is None or rows < 2 or health.size % rows or health.non_finite in (0, health.size):
        return False
    return first_bad_element(batch) is None


def op_output(dump_dir: str, op_name: str) -> Any:
    """Output 0 of the graph op `op_name` from a FULL_TENSOR dump this process just wrote (TensorFlow's own reader:
    the dump holds one op type's values, is small, and is ours): its first run that holds NaN/Inf (an op in a
    loop body, an RNN cell's, runs once per time step), else its first."""
    import numpy as np
    from tensorflow.python.debug.lib import debug_events_reader

    first = None
    with debug_events_reader.DebugDataReader(dump_dir) as reader:
        reader.update()
        for trace in reader.graph_execution_traces():
            if trace.op_name != op_name or trace.output_slot != 0:
                continue
            value = reader.graph_execution_trace_to_tensor_value(trace)
            if np.issubdtype(value.dtype, np.floating) and not np.isfinite(value).all():
                return value
            first = value if first is None else first
    return first


class _Kept:
    value: Any = None


@contextlib.contextmanager
def _keeping_origin_output(origin: Finding, kept: _Kept) -> Iterator[None]:
    """While eager ops run in this thread: keep in `kept` the first output 0 of the origin's op type with the
    origin's size and NaN/-Inf/+Inf counts made at the origin's line (an op in a loop, or a layer called several
    times, runs more than once)."""
    import traceback

    import numpy as np
    from tensorflow.python.framework import op_callbacks

    health = origin.health
    assert health is not None  # wants_rows checked it

    def callback(
        op_type: Any, inputs: Any, attrs: Any, outputs: Any, op_name: Any = None, graph: Any = None
    ) -> None:
        if kept.value is not None or graph is not None or not outputs:
            return
        if (op_type.decode() if isinstance(op_type, bytes) else op_type) != origin.op.type:
            return
        value = np.asarray(outputs[0])
        if not np.issubdtype(value.dtype, np.floating) or value.size != health.size:
            return
        if not _same_counts(value, origin):
            return
        if any(
            frame.lineno == origin.line and _same_file(frame.filename, origin.file)
            for frame in traceback.extract_stack()
        ):
            kept.value = value

    op_callbacks.add_op_callback(callback)
    try:
        yield
    finally:
        op_callbacks.remove_op_callback(callback)


def _same_file(traced: str, finding: str) -> bool:
    # A notebook's finding names its .ipynb, the stack the kernel's file for the cell: the line must then do.
    return finding.endswith(".ipynb") or os.path.basename(traced) == os.path.basename(finding)


RunValues = Callable[[Mode, Callable[[], AbstractContextManager[None]]], object]


def origin_rows(
    origin: Finding | None, batch: Any, run_values: RunValues, *, eager_first: bool = True
) -> BadRows | None:
    """`rows_of` the origin's output. ``run_values(mode, around)`` runs the step once more ("eager" or "graph"),
    from the state before it, with ``around()`` wrapping the step alone. Eagerly first unless told not to
    (`eager_first=False`: the step draws unseeded random numbers), then as a graph under a FULL_TENSOR dump of the
    origin's op type if the eager run did not show the op. None when the origin is not such an op, or when the runs
    fail or do not show it."""
    if origin is None or not wants_rows(origin, batch):
        return None
    output = None
    try:
        if eager_first:
            kept = _Kept()
            run_values("eager", lambda: _keeping_origin_output(origin, kept))
            output = kept.value
        if output is None:
            values_dir = tempfile.mkdtemp(prefix="nanlens-origin-values-")
            try:
                run_values("graph", lambda: values_dumping(values_dir, origin.op.type))
                output = op_output(values_dir, origin.op.name)
            finally:
                shutil.rmtree(values_dir, ignore_errors=True)
            if output is not None and not _same_counts(output, origin):
                # Another run than the dumped one (unseeded random draws: a GAN's noise): its rows are not the
                # origin's, and "2 zeros ... in rows 5, 28, 51 and 58" said so.
                output = None
    except Exception:  # noqa: BLE001 - an extra for the cause, not the locate
        return None
    return None if output is None else rows_of(output, batch)


def _same_counts(value: Any, origin: Finding) -> bool:
    """Whether `value` holds the origin's NaN, -Inf and +Inf counts (the FULL_HEALTH dump's)."""
    import numpy as np

    health = origin.health
    if health is None or not np.issubdtype(np.asarray(value).dtype, np.floating):
        return False
    value = np.asarray(value)
    counts = (int(np.isnan(value).sum()), int(np.isneginf(value).sum()), int(np.isposinf(value).sum()))
    return counts == (health.nan, health.neg_inf, health.pos_inf)


def values_dumping(dump_dir: str, op_type: str) -> AbstractContextManager[None]:
    """The dump of a graph run: the whole values (FULL_TENSOR) of the ops of type `op_type`, nothing else."""
    import re

    from pyadapter.dump.recorder import step_dump

    return step_dump(dump_dir, "FULL_TENSOR", op_regex="^" + re.escape(op_type) + "$")


# --- where the values first grew huge, for an overflow inside the optimizer's update -------------------------------

# Values past this are no activation or loss a healthy step makes, and a few products away from float32's 3.4e38
# (Adam squares its gradients: |g| > 1.8e19 overflows).
HUGE = 1e15
_OPTIMIZER_SCOPE = re.compile(
    r"^(?:[a-z_]*optimizer|adam|adamw|nadam|adamax|adagrad|adadelta|adafactor|sgd|rmsprop|ftrl|lion|lamb)"
    r"(?:_\d+)?/"
)


def wants_first_huge(origin: Finding | None) -> bool:
    """Whether the origin is an overflow of finite values inside the optimizer's update (``adam/Square`` of a
    gradient too large to square): its line is the ``apply_gradients`` or ``fit`` call, which says nothing of where
    the values grew."""
    health = origin.health if origin is not None else None
    if origin is None or health is None or not (health.pos_inf or health.neg_inf):
        return False
    if any(i.health is None or not i.health.is_finite for i in origin.inputs):
        return False
    return _OPTIMIZER_SCOPE.match(origin.op.name) is not None


@dataclass
class FirstHuge:
    """The first op of the step (in the order it ran) whose finite output held a value past `HUGE`."""

    op: str  # its type
    file: str
    line: int
    function: str
    largest: float
    cell: int | None = None  # a notebook's: `file` is then the .ipynb and `line` the line in that cell

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if self.cell is None:
            del out["cell"]
        return out


@contextlib.contextmanager
def _watching_for_huge(kept: list[FirstHuge]) -> Iterator[None]:
    """While eager ops run in this thread: append to `kept` the first op whose output 0 held a finite value past
    `HUGE`, at its innermost line of the user's code (the stack is read only for that op)."""
    import traceback

    import numpy as np
    from tensorflow.python.framework import op_callbacks

    from pyadapter.dump.frames import innermost_user_frame
    from pyadapter.findings import Frame

    def callback(
        op_type: Any, inputs: Any, attrs: Any, outputs: Any, op_name: Any = None, graph: Any = None
    ) -> None:
        if kept or graph is not None or not outputs:
            return
        try:
            value = np.asarray(outputs[0])
        except Exception:  # noqa: BLE001 - a resource or variant output: no values to read
            return
        if not np.issubdtype(value.dtype, np.floating) or value.size == 0:
            return
        magnitude = np.abs(value[np.isfinite(value)]) if not np.isfinite(value).all() else np.abs(value)
        largest = float(magnitude.max()) if magnitude.size else 0.0
        if largest < HUGE:
            return
        stack = [Frame(f.filename, f.lineno or 0, f.name) for f in traceback.extract_stack()]
        mark = innermost_user_frame(stack)
        if mark is not None:
            kind = op_type.decode() if isinstance(op_type, bytes) else str(op_type)
            kept.append(FirstHuge(kind, mark.file, mark.line, mark.function, largest))

    op_callbacks.add_op_callback(callback)
    try:
        yield
    finally:
        op_callbacks.remove_op_callback(callback)


def first_huge(origin: Finding | None, run_values: RunValues) -> FirstHuge | None:
    """Where the step's values first passed `HUGE`, from one eager run of it (``run_values`` as for
    `origin_rows`), for an origin `wants_first_huge`; None otherwise, or when the run fails or nothing passed it.
    A notebook's line is given in its cell at the scene; a re-entered notebook's cell files are mapped by the
    locate (`reentry.map_cell_files`)."""
    if not wants_first_huge(origin):
        return None
    kept: list[FirstHuge] = []
    try:
        run_values("eager", lambda: _watching_for_huge(kept))
    except Exception:  # noqa: BLE001 - an extra for the cause, not the locate
        return None
    if not kept:
        return None
    found = kept[0]
    from pyadapter.capture.notebook import cell_location

    where = cell_location(found.file, found.line)  # at the scene: the kernel's file of the cell
    if where is not None:
        found.file, found.cell, found.line = where
    return found
