"""The origin op's whole values, read from one more run of the step, to name the batch rows its NaN/Inf came from.

A FULL_HEALTH dump counts each op's NaN/Inf without saying where they are. When the origin op's output may have the
batch's rows first (its size a multiple of them, some of its values bad and some not), the step runs once more
under a FULL_TENSOR dump of that op type only (tfdbg filters by op type), the origin's own output is read back, and
`pyadapter.cause.rows.rows_of` names the rows. Used by the locate at the scene and by a bundle's dumped replay; an
extra for the cause, so it never fails a locate.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from pyadapter.capture.records import first_bad_element
from pyadapter.cause.rows import BadRows, leading_rows, rows_of
from pyadapter.findings import Finding


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


def origin_rows(
    origin: Finding | None, batch: Any, run_values: Callable[[str, str], object]
) -> BadRows | None:
    """`rows_of` the origin's output; ``run_values(dump_dir, op_type)`` runs the step in graph mode, from the
    state before it, under a FULL_TENSOR dump of that op type. None when the origin is not such an op, or when the
    run fails or does not show the op."""
    if origin is None or not wants_rows(origin, batch):
        return None
    values_dir = tempfile.mkdtemp(prefix="nanlens-origin-values-")
    try:
        run_values(values_dir, origin.op.type)
        output = op_output(values_dir, origin.op.name)
        return None if output is None else rows_of(output, batch)
    except Exception:  # noqa: BLE001 - an extra for the cause, not the locate
        return None
    finally:
        shutil.rmtree(values_dir, ignore_errors=True)


def values_dumping(dump_dir: str, op_type: str) -> AbstractContextManager[None]:
    """The dump a `run_values` makes: the whole values (FULL_TENSOR) of the ops of type `op_type`, nothing else."""
    import re

    from pyadapter.dump.recorder import step_dump

    return step_dump(dump_dir, "FULL_TENSOR", op_regex="^" + re.escape(op_type) + "$")
