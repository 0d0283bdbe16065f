"""Random draws a re-run of a step cannot repeat: TensorFlow's stateful random ops.

``tf.random.normal`` / ``tf.random.uniform`` / ``tf.nn.dropout`` without a seed (keras.io's WGAN-GP draws its
latent vectors and interpolation weights this way) keep their state inside the op's kernel: nothing can read it or
put it back, so a re-run of the step (at the scene, or a replay from the bundle) draws other numbers than training
did. Keras's own random layers and ``keras.random.*`` draw from a SeedGenerator's state variable instead, which a
bundle captures; so do ``tf.random.stateless_*`` ops, whose seed is an input.

When a re-run stays finite, or only one mode reproduces, and the step has such ops, the honest answer is that the
re-run drew other numbers, not that graph and eager mode compute differently: `found_in_graph` lists them as the
re-run's graph holds them, and `note` says so in one line.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator
from typing import Any

# Legacy stateful random ops (state in the kernel) and tf.random.Generator ops (state in a variable the step
# advances; the bundle does not hold a user's generator).
STATEFUL_RANDOM_OPS = frozenset(
    {
        "RandomStandardNormal",
        "RandomUniform",
        "RandomUniformInt",
        "TruncatedNormal",
        "ParameterizedTruncatedNormal",
        "RandomGamma",
        "RandomPoisson",
        "RandomPoissonV2",
        "RandomShuffle",
        "Multinomial",
        "StatefulStandardNormalV2",
        "StatefulUniform",
        "StatefulUniformFullInt",
        "StatefulUniformInt",
        "StatefulTruncatedNormal",
        "StatefulRandomBinomial",
    }
)


def _user_line(traceback: Any) -> str | None:
    from pyadapter.dump.frames import is_user_file
    from pyadapter.replay.cell_files import shown_place

    for frame in reversed(list(traceback or [])):
        filename = getattr(frame, "filename", None)
        if filename and is_user_file(filename):
            return _kernel_cell_place(filename, frame.lineno) or shown_place(filename, frame.lineno)
    return None


def _kernel_cell_place(file: str, line: int) -> str | None:
    """'beta_vae.ipynb cell 7, line 31' for a line of a cell this Jupyter kernel ran (the scene, in the kernel):
    its file, /tmp/ipykernel_.../3787931277.py, means nothing to the user. None outside a kernel or cell code."""
    from pathlib import Path

    from pyadapter.capture import notebook
    from pyadapter.findings_text import place_text

    if not notebook.in_kernel():
        return None
    found = notebook.cell_location(file, line)
    return place_text(Path(found[0]).name, found[2], found[1]) if found is not None else None


def found_in_graph(graph: Any) -> list[str]:
    """'RandomStandardNormal at wgan_gp.py:73' for each stateful random op of `graph` (a FuncGraph being
    traced), once per op type and line, in creation order."""
    found: list[str] = []
    for op in graph.get_operations():
        if op.type not in STATEFUL_RANDOM_OPS:
            continue
        where = _user_line(getattr(op, "traceback", None))
        text = f"{op.type} at {where}" if where else op.type
        if text not in found:
            found.append(text)
    return found


@contextlib.contextmanager
def found_in_eager(found: list[str]) -> Iterator[None]:
    """While the step runs eagerly: each stateful random op it executes, as `found_in_graph` words it, appended to
    `found` (an op callback that looks only at the op's type; the stack is read for those ops alone)."""
    from tensorflow.python.framework import op_callbacks

    def callback(
        op_type: Any, inputs: Any, attrs: Any, outputs: Any, op_name: Any = None, graph: Any = None
    ) -> Any:
        name = op_type.decode() if isinstance(op_type, bytes) else str(op_type)
        if graph is None and name in STATEFUL_RANDOM_OPS:
            where = _user_line(traceback.extract_stack())
            text = f"{name} at {where}" if where else name
            if text not in found:
                found.append(text)
        return None  # the outputs stay as they are

    op_callbacks.add_op_callback(callback)
    try:
        yield
    finally:
        op_callbacks.remove_op_callback(callback)


def _shown(found: list[str], limit: int = 3) -> str:
    return ", ".join(found[:limit]) + (f" (+{len(found) - limit} more)" if len(found) > limit else "")


def note_reproduced(found: list[str]) -> str:
    """One line for a re-run that reproduced the NaN from other random numbers than training drew: its counts
    are its own."""
    return (
        f"the step draws from TensorFlow's stateful random ops ({_shown(found)}): this re-run drew other numbers "
        "than training did, so its counts of NaN/Inf (even where they start) can differ from training's; "
        "draw them with keras.random.* and a keras.random.SeedGenerator (or tf.random.stateless_*) to make the "
        "step replay exactly"
    )


def note(found: list[str]) -> str:
    """One line: why a re-run of this step may not repeat training's numbers, and the fix."""
    shown = _shown(found)
    return (
        f"the step draws from TensorFlow's stateful random ops ({shown}), whose state no bundle can hold: a "
        "re-run draws other numbers than training did, so whether the NaN comes back is chance; draw them with "
        "keras.random.* and a keras.random.SeedGenerator (or tf.random.stateless_*) to make the step replayable"
    )
