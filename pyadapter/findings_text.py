"""Findings in words: the one place that says an origin, a tensor's health, a replay verdict and a cause as text.

The CLI reports (``nanlens scan`` / ``nanlens locate``), the HTML report (``pictures/html.py``) and the language
server's hovers and diagnostics (``server/render.py``) lay these pieces out as plain lines, HTML or Markdown; none
of them words a finding itself, so a sentence changed here changes everywhere. Pure functions of the findings
records and their JSON: no TensorFlow, no I/O, and no import above ``findings`` (the cause is read duck-typed, its
type named for the checker only), so every room may use it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pyadapter.findings import Finding, Findings, InputHealth, OpRef, TensorHealth

if TYPE_CHECKING:
    from pyadapter.cause.model import Cause, Change


# --- a tensor's health ------------------------------------------------------------------------------------------


def health_text(health: TensorHealth | None) -> str:
    """'3 -inf of 640', or 'unknown' when the dump did not record it."""
    return health.describe() if health is not None else "unknown"


def health_detail(health: TensorHealth | None) -> str:
    """The health with its dtype and shape, as a hover shows it: '3 -inf of 640 (float32, shape [64, 10])'."""
    if health is None:
        return "not recorded"
    text = health.describe()
    details = [d for d in (health.dtype, f"shape {health.shape}" if health.shape is not None else None) if d]
    return f"{text} ({', '.join(details)})" if details else text


def shown_inputs(finding: Finding) -> list[InputHealth]:
    """The op's inputs worth listing: those with a recorded health. A FULL_HEALTH dump records float tensors only,
    so a reduction's axis or a reshape's shape is "unknown" beside every Sum and Reshape, which says nothing; when
    no input was recorded, all are listed (that they were not recorded is then the news)."""
    recorded = [i for i in finding.inputs if i.health is not None]
    return recorded or list(finding.inputs)


# --- the origin and the lines it spread to ----------------------------------------------------------------------


def origin_label(origin: Finding) -> str:
    """'origin' or 'origin (backward pass)': where the first non-finite values were made."""
    return "origin (backward pass)" if origin.role == "backward-origin" else "origin"


def cell_label(cell: int) -> str:
    """'cell 3' for the cell at 0-based index 2: findings.json counts cells from 0 (the editor's index), a person
    counts them from 1 (VS Code's and Jupyter's cell N of M)."""
    return f"cell {cell + 1}"


def place_text(file: str, line: int, cell: int | None) -> str:
    """'train.py:12', or for notebook code 'a.ipynb cell 3, line 3' (`cell_label`, the line counted in the cell):
    not 'a.ipynb:3', which a terminal or an editor link opens at line 3 of the notebook's JSON."""
    if cell is not None:
        return f"{file} {cell_label(cell)}, line {line}"
    return f"{file}:{line}"


def kernel_place(findings: Findings | None, file: str, line: int, cell: int | None = None) -> str | None:
    """'In [6], line 6 (edited and run, not in the saved churn.ipynb)' for a line of a cell the kernel ran that the
    saved notebook does not hold (`capture.notebook` records its file as ``extra["kernel_cells"]``): the kernel's
    file of it, /tmp/ipykernel_.../....py, means nothing to the user. None elsewhere."""
    cells = findings.extra.get("kernel_cells") if findings is not None and cell is None else None
    known = cells.get(file) if isinstance(cells, dict) else None
    if not isinstance(known, dict) or not isinstance(known.get("run"), str):
        return None
    offset = known["offset"] if isinstance(known.get("offset"), int) else 0
    saved = known.get("notebook")
    where = f" (edited and run, not in the saved {saved})" if isinstance(saved, str) else ""
    return f"{known['run']}, line {line + offset}{where}"


def shown_place(findings: Findings | None, file: str, line: int, cell: int | None) -> str:
    """`kernel_place`, else `place_text` with the path shortened."""
    return kernel_place(findings, file, line, cell) or place_text(short_path(file), line, cell)


def origin_place(origin: Finding, findings: Findings | None = None) -> str:
    """The origin's place plus its function when the innermost frame is that line: 'train.py:12 in loss_fn'."""
    last = origin.stack[-1] if origin.stack else None
    func = f" in {last.function}" if last is not None and last.line == origin.line and last.function else ""
    place = kernel_place(findings, origin.file, origin.line, origin.cell)
    return (place or place_text(origin.file, origin.line, origin.cell)) + func


def op_text(op: OpRef) -> str:
    """'model/dense/Log (Log)', and for a gradient op 'gradients/SqrtGrad (SqrtGrad, gradient of Sqrt)'."""
    forward = f", gradient of {op.forward_op}" if op.forward_op else ""
    return f"{op.name} ({op.type}{forward})"


def finding_message(finding: Finding) -> str:
    """The finding's own sentence, or one built from its op and health when the engine gave none."""
    if finding.message:
        return finding.message
    verb = "carried" if finding.role == "propagated" else "produced"
    health = finding.health.describe() if finding.health else "non-finite values"
    where = " in the backward pass" if finding.role == "backward-origin" else ""
    return f"{finding.op.type} {verb} {health}{where}"


def unlocated_text(findings: Findings) -> str | None:
    """'NaN/Inf starts at op X (Log), but <reason>' when the origin op is known but not its line; else None."""
    unlocated = findings.extra.get("unlocated_origin")
    if not isinstance(unlocated, dict) or not isinstance(unlocated.get("op"), dict):
        return None
    op = unlocated["op"]
    return (
        f"NaN/Inf starts at op {op.get('name', '?')} ({op.get('type') or 'unknown type'}), "
        f"but {unlocated.get('reason', '')}"
    )


def spread_of(findings: Findings) -> list[Finding]:
    """The lines the non-finite values reached after the origin."""
    return [f for f in findings.findings if f is not findings.origin and f.role == "propagated"]


def spread_title(count: int) -> str:
    return f"spread to {count} more line{'s' if count != 1 else ''}"


def short_path(path: str) -> str:
    """A path relative to the current folder when it lies inside it (shorter on a terminal), else as it is."""
    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return path
    return path if rel.startswith("..") else rel


# The map function Keras's fit puts over the arrays it is given (its data adapter's ``grab_batch``).
KERAS_ARRAY_MAP = "grab_batch"
# Said by a cause whose bad value a weight held before the failing step (a raw scale an update carried below 0), and
# read by NanGuard's last line: a NaN validation loss after the stop is then those weights' own.
WEIGHTS_HELD_IT = "the weights from before the failing step hold it too"
# The ops tf.data runs Python code through (``Dataset.from_generator``, ``tf.py_function``).
_PYTHON_CALL_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})


def origin_code_lines(findings: Findings) -> list[tuple[int, str]]:
    """(line number, code) of the origin's line, with the rest of its statement when it spans several lines
    (``extra["origin_statement"]``, `pyadapter.dump.statement`); [] when no code is known."""
    origin = findings.origin
    code = findings.extra.get("origin_code")
    if origin is None or not isinstance(code, str):
        return []
    statement = findings.extra.get("origin_statement")
    before: list[str] = []
    after: list[str] = []
    if isinstance(statement, dict):
        before = [t for t in statement.get("before", []) if isinstance(t, str)]
        after = [t for t in statement.get("after", []) if isinstance(t, str)]
    texts = [*before, code, *after]
    first = origin.line - len(before)
    return [(first + i, text.rstrip()) for i, text in enumerate(texts) if first + i > 0]


def origin_lines(findings: Findings, *, none: str) -> list[str]:
    """The origin as the CLI prints it (``nanlens scan`` and ``nanlens locate``): place, code, op, health, inputs,
    message and the lines it spread to; ``none`` is the sentence when there is no NaN/Inf to report."""
    origin = findings.origin
    if origin is None:
        return [unlocated_text(findings) or none]
    lines = [f"{origin_label(origin)}: {origin_place(origin, findings)}"]
    lines.extend(f"  {number:>5} | {text}" for number, text in origin_code_lines(findings))
    op = origin.op
    graph = f" in graph {op.graph}" if op.graph else ""
    # A bundle's findings come from one run of its step (a replay, or at the scene): the host adds nothing there;
    # a dump may hold several hosts, so its op says which ran it.
    host = (
        f" on host {op.host}" + (f" ({op.task})" if op.task else "")
        if op.host and findings.source_kind == "dump"
        else ""
    )
    shown_op = f"{op_text(op)}{graph}{host}"
    if op.type == "Placeholder" and (op.graph or "").startswith("Dataset_map_"):
        # "args_1 (Placeholder) in graph Dataset_map_grab_batch" is tfdbg's naming of a map function's argument.
        function = (op.graph or "").removeprefix("Dataset_map_")
        shown_op = f"{op_text(op)} (an argument of the tf.data map function {function}){host}"
        if function == KERAS_ARRAY_MAP:
            # Keras's own map over the arrays fit was given: the user wrote no tf.data and no map function.
            shown_op = f"none: the arrays given to fit held it (as Keras's input pipeline took them){host}"
    python_call = op.type in _PYTHON_CALL_OPS and (op.graph or "").startswith("Dataset_from_generator")
    if python_call:
        # "PyFunc (PyFunc) in graph Dataset_from_generator_generator_next_fn": tf.data's wrapper of the user's
        # generator, or of a PyDataset's __getitem__ (Keras feeds a PyDataset through from_generator).
        shown_op = (
            f"none: Python code the input pipeline calls returned it (a generator, or a PyDataset's __getitem__; "
            f"tf.data runs it as {op.type}){host}"
        )
    if (findings.bundle or {}).get("not_replayed"):
        shown_op = "none: the captured batch held it (its step was not replayed)"
    lines.append(f"  op: {shown_op}")
    lines.append(f"  health: {health_text(origin.health)}")
    if not python_call:  # a generator's only input is tf.data's handle of it, never recorded
        lines.extend(f"  input {inp.name}: {health_text(inp.health)}" for inp in shown_inputs(origin))
    if origin.message:
        lines.append(f"  {origin.message}")
    spread = spread_of(findings)
    if spread:
        lines.append(f"{spread_title(len(spread))}:")
        lines.extend(
            f"  {shown_place(findings, f.file, f.line, f.cell)}  {f.op.name} ({f.op.type}): {health_text(f.health)}"
            for f in spread
        )
    return lines


def warning_lines(findings: Findings) -> list[str]:
    warnings = findings.extra.get("warnings")
    if not isinstance(warnings, list) or not warnings:
        return []
    # Once each: the scene's and a replay's note on the same thing differ only in their first letter ("The step
    # draws ..." and "the step draws ..."), and were printed twice.
    shown: dict[str, str] = {}
    for warning in warnings:
        text = str(warning)
        shown.setdefault(text[:1].lower() + text[1:].rstrip("."), text)
    return ["warnings:", *(f"  {w}" for w in shown.values())]


# --- a replay's verdict (``findings.bundle["verdicts"]``, replay/verdict.py StepVerdict.to_json) -------------------


def _number(value: Any) -> str:
    number = float(value)  # JSON writes non-finite losses as "nan", "inf", "-inf": float() reads them
    if math.isnan(number):
        return "nan"
    if math.isinf(number):
        return "inf" if number > 0 else "-inf"
    return f"{number:.6g}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _is_infinity(value: Any) -> bool:
    try:
        return value is not None and math.isinf(float(value))
    except (TypeError, ValueError):
        return False


def verdict_sentence(verdict: Mapping[str, Any]) -> str:
    """One line for a person: 'graph: NaN reproduced — loss nan, 3 gradients and 4 weights non-finite'."""
    label = f"{verdict['mode']} (dumped)" if verdict.get("dumped") else str(verdict["mode"])
    reproduced = bool(verdict.get("reproduced"))
    error = verdict.get("error")
    if error is not None:
        kind = "NaN reproduced" if reproduced else "step failed"
        return f"{label}: {kind} — {error}"
    parts = []
    if verdict.get("loss") is not None:
        parts.append(f"loss {_number(verdict['loss'])}")
    gradients, weights = verdict.get("non_finite_gradients") or [], verdict.get("non_finite_weights") or []
    large = verdict.get("too_large_gradients") or []
    if gradients:
        parts.append(f"{_count(len(gradients), 'gradient')} non-finite")
    elif large:
        parts.append(
            f"{_count(len(large), 'gradient')} finite but too large to square in float32 (|g| > 1.8e19)"
        )
    elif verdict.get("gradients_finite"):
        parts.append("gradients finite")
    if weights:
        parts.append(f"{_count(len(weights), 'weight')} non-finite after the update")
    elif verdict.get("weights_finite"):
        parts.append("weights finite after the update")
    state = verdict.get("non_finite_state") or []
    after_update = verdict.get("written_after_update") or []
    forward = [s for s in state if s not in after_update]
    if forward:
        # The moving statistics the forward pass wrote (a batch whose variance overflowed float32).
        parts.append(f"non-finite values the forward pass wrote to {', '.join(str(s) for s in forward[:3])}")
    if after_update:
        # The step's own write after its update (a center loss's centers, s42e p3), as the stop names it.
        written = ", ".join(str(s) for s in after_update[:3])
        parts.append(f"non-finite values the step's own write after its update put in {written}")
    if verdict.get("applied_dense"):
        # Keras's sparse update of an Embedding's gradients raised on their NaN; run again with them dense.
        parts.append("sparse gradients applied dense (Keras's sparse update raises on non-finite values)")
    head = "stayed finite"
    if reproduced:
        if large and not gradients and verdict.get("loss_finite"):
            head = "overflow reproduced"
        elif _is_infinity(verdict.get("loss")):
            # The loss the user reads first is Inf: "NaN reproduced — loss inf" named a NaN the loss did not hold
            # (its gradients are usually NaN, and are counted as non-finite beside it).
            head = "Inf reproduced"
        elif state and not gradients and not weights and verdict.get("loss_finite") is not False:
            head = "non-finite state reproduced"
        else:
            head = "NaN reproduced"
    return f"{label}: {head} — " + ", ".join(parts) if parts else f"{label}: {head}"


# --- the cause (``findings.extra["cause"]``, cause/model.py) --------------------------------------------------------


def cause_headline(cause: Cause) -> str:
    """'divergence — the loss grew x3.1 per step ...': the cause's kind and its sentence."""
    return f"{cause.kind} — {cause.summary}"


def change_place(change: Change) -> str:
    return place_text(change.file, change.line, change.cell)


def change_message(cause: Cause) -> str:
    """'change here: learning rate 0.05 (SGD): try 0.005 — divergence sentence', said on the line to change."""
    what = cause.change.what if cause.change is not None else ""
    return f"change here: {what} — {cause.summary}"


def provenance_note(cause: Cause) -> str | None:
    """The note the data's provenance adds (e.g. why its file could not be read), if any."""
    note = (cause.provenance or {}).get("note")
    return str(note) if note else None


def index_text(where: dict[str, Any] | None) -> str | None:
    """'index 77 of the array passed to fit' / 'element 300 of the dataset passed to fit', when a cause's
    provenance has an index (`pyadapter.cause.provenance.array_provenance`)."""
    if not where or where.get("index") is None:
        return None
    copies = where.get("copies")
    index = (
        " or ".join(str(i) for i in copies) + " (the same values)"
        if isinstance(copies, list) and len(copies) > 1
        else str(where["index"])
    )
    if isinstance(where.get("series_row"), int):
        return (
            f"row {where['series_row']} of the array given to timeseries_dataset_from_array (time step "
            f"{where.get('time_step')} of window {index})"
        )
    if isinstance(where.get("target_row"), int):
        return (
            f"row {where['target_row']} of the targets given to timeseries_dataset_from_array (the target of "
            f"window {index})"
        )
    if where.get("of") == "from_tensor_slices":
        return f"row {index} of the arrays the dataset was sliced from (Dataset.from_tensor_slices)"
    if where.get("of") == "dataframe":
        column = where.get("column")
        named = f", column {column!r}" if isinstance(column, str) and column else ""
        return f"row {index} of the DataFrame passed to fit (by position{named})"
    fed = "element {} of the dataset" if where.get("source") == "dataset" else "index {} of the array"
    return fed.format(index) + " passed to fit"


def cause_lines(cause: Cause | None, findings: Findings | None = None) -> list[str]:
    """``cause: divergence — <summary>`` and ``change: file:line (cell N): what``; [] without a cause. `findings`:
    theirs, for the places of cells the kernel ran that the saved notebook does not hold (`kernel_place`)."""
    if cause is None:
        return []
    lines = [f"cause: {cause_headline(cause)}"]
    if cause.change is not None:
        change = cause.change
        place = kernel_place(findings, change.file, change.line, change.cell) or change_place(change)
        lines.append(f"  change: {place}: {change.what}")
    note = provenance_note(cause)
    if note:
        lines.append(f"  note: {note}")
    return lines


def format_number(value: float) -> str:
    """How a person writes a learning rate: 0.005, 0.05; 7e-06 -> 7e-6, 0.0001 -> 1e-4 (the cause's sentence and
    the fix that rewrites the number spell it the same)."""
    if value >= 1e-3:
        return f"{value:.3g}"
    mantissa, _, exponent = f"{value:.2e}".partition("e")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"
