"""Why, not just where: the cause of a capture (op, divergence, data, precision, unknown) with its evidence and
the line to change, added to a findings document as its top-level ``cause`` field.

Public API (no TensorFlow; reads the bundle and the user's sources, runs nothing):

- ``attach_cause(findings, bundle_path=None)``: classify and set ``findings.extra["cause"]``; the one call made
  wherever findings for a bundle are made (``locate_bundle``, which also answers with the scene's findings, and the
  language server loading a bundle's own findings.json) and for a dump (``nanlens scan``, no history).
- ``cause_of(findings) -> Cause | None``: the cause a findings document carries.
- ``cause_lines(cause)``: the cause in words for the CLI (``pyadapter.findings_text``, where all findings' words are).
- ``classify(findings, context)``, ``CauseContext``, ``Cause``, ``Change``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pyadapter import numpy_warnings
from pyadapter.capture import fit_arrays, learning_rate, window
from pyadapter.capture.sourcerecord import MANIFEST_KEY as SOURCE_KEY
from pyadapter.capture.sourcerecord import DataSource
from pyadapter.cause import scale
from pyadapter.cause.classify import (
    EXPONENT_WEIGHT_SIZE,
    FED_AT,
    READ_VARIABLE,
    WEIGHT_DOMAIN_OPS,
    CauseContext,
    DomainWeight,
    ExponentWeight,
    classify,
)
from pyadapter.cause.model import FINDINGS_KEY, Cause, Change
from pyadapter.cause.python_feed import PY_FUNC_OPS
from pyadapter.cause.sources import source_line
from pyadapter.findings import Findings
from pyadapter.findings_text import cause_lines

__all__ = [
    "Cause",
    "CauseContext",
    "Change",
    "attach_cause",
    "cause_lines",
    "cause_of",
    "classify",
    "context_of_bundle",
]


def context_of_bundle(bundle: Any) -> CauseContext:
    """What a loaded ``CaptureBundle`` says beyond the findings: history, model, dtype policy, batch, step."""
    from pyadapter.capture.bundle_format import BundleError

    try:
        batch = bundle.batch()
    except (BundleError, OSError, ValueError):
        batch = None
    entry = bundle.manifest.get("entry_script") or {}
    script = bundle.entry_script
    return CauseContext(
        history=bundle.loss_history,
        model_info=bundle.model_info,
        dtype_policy=bundle.saved_dtype_policy_name(),
        batch=batch,
        step=bundle.step,
        epoch=bundle.epoch,
        batch_index=bundle.batch_index,
        entry_script=str(script) if script is not None else None,
        cwd=entry.get("cwd") if isinstance(entry.get("cwd"), str) else None,
        data_source=DataSource.from_json(bundle.manifest.get(SOURCE_KEY)),
        window_search=_window_search(bundle.manifest),
        learning_rate=learning_rate.read(bundle.manifest.get(learning_rate.MANIFEST_KEY)),
        step_function=step if isinstance(step := bundle.manifest.get("step_function"), dict) else None,
        fit_rows=bundle.manifest.get(fit_arrays.MANIFEST_KEY),  # checked when the bundle was loaded
        argv=[str(a) for a in entry.get("argv") or [] if isinstance(a, str)],
        layer_classes=scale.layer_classes(config) if (config := bundle.saved_config()) is not None else None,
        ran_cells=_ran_cells(entry.get("notebook")),
        numpy_warnings=_warnings_in_notebook(
            numpy_warnings.read(bundle.manifest.get(numpy_warnings.MANIFEST_KEY)), entry.get("notebook")
        ),
        zero_variances=_zero_variances(bundle),
        weights_before_step=bool((bundle.manifest.get("non_finite") or {}).get("weights_before_step")),
        step_state=_step_state_scalars(bundle),
        recent_batches=window.recent_batches(bundle),
        frozen_changed=window.frozen_changed(bundle.manifest),
    )


def _step_state_scalars(bundle: Any) -> dict[str, float]:
    """`CaptureBundle.step_state_scalars`, or {} when the bundle's arrays cannot be read."""
    from pyadapter.capture.bundle_format import BundleError

    try:
        return bundle.step_state_scalars()
    except (BundleError, OSError, ValueError, AttributeError):
        return {}


def _zero_variances(bundle: Any) -> list[scale.ZeroVariance]:
    """Normalization layers of the captured model with a constant feature (their statistics read alone)."""
    from pyadapter.capture.bundle_format import BundleError

    try:
        stats = bundle.weights_with_paths(lambda path: path.endswith(("/mean", "/variance")))
    except (BundleError, OSError, ValueError, AttributeError):
        return []
    return scale.zero_variances(stats)


def _domain_weight(findings: Findings, bundle: Any) -> DomainWeight | None:
    """The captured weight a log or sqrt origin read out of its domain: its input is a variable's read
    (``.../ReadVariableOp:0``) with negatives (or zeros, for a log), and exactly one of the model's captured
    weights of that size holds as many. Only those weights are read, and only for such an origin."""
    origin = findings.origin
    if origin is None:
        return None
    upstream = findings.extra.get("negative_variable_read")
    if isinstance(upstream, dict) and not any(_reads_a_weight(i.name) for i in origin.inputs):
        return _negative_variable(bundle, upstream)
    if origin.op.type not in WEIGHT_DOMAIN_OPS:
        return None
    # A weight read whole (``.../ReadVariableOp:0``) or one value of it (``ops.log(sigma[0])``: a strided slice of
    # a learned task scale, named "keep its input positive" without the weight, s40f p3).
    read = [i for i in origin.inputs if _reads_a_weight(i.name) and i.health is not None]
    if len(read) != 1 or read[0].health is None:
        return None
    health = read[0].health
    negative, zero = health.neg or 0, health.zero or 0
    if not negative and not (zero and origin.op.type != "Sqrt"):
        return None
    # A custom loop's own variables (``sigma = tf.Variable(1.0)``, stepped with assign_sub) are the step's: a
    # model's bias of the same size and sign was named in its place (s40b p9).
    from pyadapter.capture.step_state import GROUP as STEP_STATE_GROUP

    groups = {"model", STEP_STATE_GROUP}
    values = _weights_of_size(bundle, health.size, lambda entry, _: entry.get("group") in groups)
    stepped = _step_state_paths(bundle)

    def holds_as_many(value: np.ndarray) -> bool:
        if negative:
            return int(np.sum(value < 0)) == negative
        return int(np.sum(value < 0)) == 0 and int(np.sum(value == 0)) == zero

    found = [
        DomainWeight(path, float(np.min(value)), by_optimizer=path not in stepped)
        for path, value in values.items()
        if value.dtype.kind == "f" and holds_as_many(value)
    ]
    code = str(findings.extra.get("origin_code") or "")
    if READ_VARIABLE not in read[0].name:
        # A slice is of any tensor (``log(preds[:, 0])``): only a weight the line subscripts by its name, or the
        # loop's name for it (``sigma[0]`` of ``sigma0`` and ``sigma1``), is the one read.
        subscripted = set(re.findall(r"(\w+)\s*\[", code))
        found = [w for w in found if any(w.path.rsplit("/", 1)[-1].startswith(n) for n in subscripted)]
    if len(found) > 1:
        # Told apart by the name the origin's line reads (``tf.math.log(sigma)``).
        found = [w for w in found if re.search(rf"\b{re.escape(w.path.rsplit('/', 1)[-1])}\b", code)]
    return found[0] if len(found) == 1 else None


def _negative_variable(bundle: Any, read: dict[str, Any]) -> DomainWeight | None:
    """The captured variable a log's negatives came from, up elementwise arithmetic (`describe.negative_variable_read`:
    a negative binomial's ``r = 1 / alpha``): the one small variable of the model, the step or the optimizer's list
    (not its slots) of the read's size whose values are all negative, with the line that reads it."""
    size, line = read.get("size"), read.get("line")
    if not isinstance(size, int) or not isinstance(line, int):
        return None
    from pyadapter.capture.step_state import GROUP as STEP_STATE_GROUP

    def variable(entry: dict[str, Any], optimizers: tuple[str, ...]) -> bool:
        group, path = entry.get("group"), str(entry.get("path"))
        # A custom loop's ``alpha = tf.Variable(0.5)`` trained by the optimizer is listed with its variables.
        return group in ("model", STEP_STATE_GROUP) or (
            group == "optimizer" and not path.startswith(optimizers)
        )

    values = _weights_of_size(bundle, size, variable)
    stepped = _step_state_paths(bundle)
    found = [
        DomainWeight(path, float(np.min(value)), by_optimizer=path not in stepped, read_line=line)
        for path, value in values.items()
        if value.dtype.kind == "f" and value.size and bool(np.all(value < 0))
    ]
    return found[0] if len(found) == 1 else None


def _reads_a_weight(name: str) -> bool:
    return READ_VARIABLE in name or bool(re.search(r"(?:^|/)strided_slice(?:_\d+)?:0$", name))


def _step_state_paths(bundle: Any) -> set[str]:
    """The paths of the step's own variables the bundle lists (a custom loop's ``sigma``, ``accum_grads[2]``)."""
    from pyadapter.capture.step_state import GROUP as STEP_STATE_GROUP

    listed = (bundle.manifest.get("weights") or {}).get("variables") or []
    return {str(e.get("path")) for e in listed if isinstance(e, dict) and e.get("group") == STEP_STATE_GROUP}


def _weights_of_size(
    bundle: Any, size: int | None, keep: Callable[[dict[str, Any], tuple[str, ...]], bool]
) -> dict[str, np.ndarray]:
    """The captured weights of `size` values that `keep(manifest entry, optimizer prefixes)` keeps, by path, read
    from the bundle (only those); {} when none or the bundle cannot give them. The optimizer prefixes are the names
    its variables live under (``adam/``, from ``adam/iteration``)."""
    listed = [e for e in (bundle.manifest.get("weights") or {}).get("variables") or [] if isinstance(e, dict)]
    optimizers = tuple(
        str(e.get("path")).split("/", 1)[0] + "/" for e in listed if str(e.get("path")).endswith("/iteration")
    )
    sized = {
        str(e.get("path"))
        for e in listed
        if isinstance(e.get("shape"), list)
        and all(isinstance(n, int) for n in e["shape"])
        and math.prod(e["shape"]) == size
        and keep(e, optimizers)
    }
    if not sized:
        return {}
    from pyadapter.capture.bundle_format import BundleError

    stepped = _step_state_paths(bundle)
    try:
        found = dict(bundle.weights_with_paths(lambda path: path in sized - stepped))
        if sized & stepped:
            found.update(bundle.step_state_with_paths(lambda path: path in sized & stepped))
        return found
    except (BundleError, OSError, ValueError, AttributeError):
        return {}


def _exponent_weight(findings: Findings, bundle: Any) -> ExponentWeight | None:
    """The captured weight an Exp origin overflowed on: its input is as small as a learned scalar or a few (a
    log-variance per task), and exactly one captured weight of that size, not an optimizer's slot, is
    `EXPONENT_WEIGHT_SIZE` or more from 0. Only those weights are read, and only for such an origin."""
    origin = findings.origin
    if origin is None or origin.op.type != "Exp" or len(origin.inputs) != 1 or origin.health is None:
        return None
    health = origin.inputs[0].health
    if (
        health is None
        or not health.is_finite
        or not health.size
        or health.size > 16
        or origin.health.is_finite
    ):
        return None
    # Not an optimizer's own variables (``adam/iteration``, ``adam/log_vars_0_velocity``: under its name); a
    # variable the optimizer trains beside the model (``log_vars``, group "optimizer") is one.
    values = _weights_of_size(
        bundle, health.size, lambda entry, optimizers: not str(entry.get("path")).startswith(optimizers)
    )
    found = []
    for path, value in values.items():
        if value.dtype.kind != "f" or not value.size or not np.all(np.isfinite(value)):
            continue
        largest = float(value.flat[int(np.argmax(np.abs(value)))])
        if abs(largest) >= EXPONENT_WEIGHT_SIZE:
            found.append(ExponentWeight(path, largest))
    return found[0] if len(found) == 1 else None


def _ran_cells(recorded: Any) -> list[str]:
    """The executed sources a notebook bundle recorded, in order (checked when the bundle was loaded)."""
    cells = recorded.get("cells") if isinstance(recorded, dict) else None
    if not isinstance(cells, list):
        return []
    return [c["source"] for c in cells if isinstance(c, dict) and isinstance(c.get("source"), str)]


def _warnings_in_notebook(
    warned: list[numpy_warnings.NumpyWarning], notebook: Any
) -> list[numpy_warnings.NumpyWarning]:
    """`warned` with each warning at a notebook cell's kernel file (/tmp/ipykernel_.../....py) placed at its saved
    cell (the .ipynb, the cell, the line in it), from the bundle's record of the cells the kernel ran
    (``manifest["entry_script"]["notebook"]``); a warning whose cell cannot be found stays as it was."""
    if not isinstance(notebook, dict):
        return warned
    from pyadapter.capture.notebook import NotebookError, NotebookInfo

    try:
        info = NotebookInfo.from_manifest(notebook)
    except (NotebookError, TypeError, ValueError):
        return warned
    out = []
    for warning in warned:
        place = info.cell_location(warning.file, warning.line)
        out.append(
            warning
            if place is None
            else numpy_warnings.NumpyWarning(place[0], place[2], warning.message, cell=place[1])
        )
    return out


def _window_search(manifest: dict[str, Any]) -> dict[str, Any] | None:
    window = manifest.get("window")
    search = window.get("search") if isinstance(window, dict) else None
    return search if isinstance(search, dict) else None


def attach_cause(
    findings: Findings, bundle_path: str | Path | None = None, folders: list[str] | None = None
) -> Cause:
    """Classify the capture and store the cause as ``findings.extra["cause"]``; returns it. With a bundle the
    history, model info and batch count; without (a dump) only the findings do. Never raises: a cause that cannot
    be made is ``unknown`` with the reason as its summary. Data files named by the bundle are read only inside
    ``folders`` (default: the current directory, the folder the CLI or the workspace's server runs in). Findings
    located in a notebook's unsaved cell are first marked in that cell when the notebook has been saved since
    (`pyadapter.capture.notebook.map_saved_since`): here, at the one load of the bundle that the CLI, the server and
    the guard's stop message share."""
    context = None
    notebook: Any = None
    if bundle_path is not None:
        from pyadapter.capture.bundle_format import BundleError
        from pyadapter.capture.notebook import map_saved_since
        from pyadapter.capture.reader import CaptureBundle

        try:
            bundle = CaptureBundle.load(bundle_path)
            notebook = (bundle.manifest.get("entry_script") or {}).get("notebook")
            map_saved_since(findings, notebook)
            context = context_of_bundle(bundle)
            context.domain_weight = _domain_weight(findings, bundle)
            context.exponent_weight = _exponent_weight(findings, bundle)
        except (BundleError, OSError, ValueError):
            context = None
    if context is not None:
        context.folders = folders
    try:
        cause = classify(findings, context)
    except Exception as exc:  # noqa: BLE001 - the cause is an addition; never lose the findings for it
        cause = Cause("unknown", f"the cause could not be classified: {type(exc).__name__}: {exc}"[:300])
    cause = _change_in_the_writing_cell(cause, notebook)
    findings.extra[FINDINGS_KEY] = cause.to_json()
    _origin_where_fed(findings, cause)
    if isinstance(findings.extra.get("pictures"), dict):  # made before the cause was known: mark it on them
        from pyadapter.pictures.model import with_cause

        with_cause(findings.extra["pictures"], findings.extra[FINDINGS_KEY])
    return cause


_WRITEFILE = re.compile(r"^%%writefile[ \t]+(?!-a\b)(\S+)[ \t]*$")


def _change_in_the_writing_cell(cause: Cause, notebook: Any) -> Cause:
    """A change in a module a notebook cell writes (``%%writefile model_lib.py`` then ``import model_lib``) is made
    in that cell: a fix made in the file alone is written over the next time the cell runs ("Run All"). Reads the
    saved notebook only (a bundle names it; nothing runs)."""
    change = cause.change
    if change is None or change.cell is not None or not isinstance(notebook, dict):
        return cause
    path = notebook.get("path")
    if not isinstance(path, str) or not path:
        return cause
    from pyadapter.capture.notebook import NotebookError, read_notebook_cells

    try:
        cells = read_notebook_cells(path)
    except NotebookError:
        return cause
    folder = os.path.dirname(os.path.abspath(path))
    writing = []
    for cell in cells:
        first = cell.source.split("\n", 1)[0].strip() if cell.cell_type == "code" else ""
        written = _WRITEFILE.match(first)
        if written is not None and os.path.abspath(
            os.path.join(folder, written.group(1).strip("\"'"))
        ) == os.path.abspath(change.file):
            writing.append((cell, written.group(1).strip("\"'")))
    now = source_line(change.file, change.line)
    if not writing:
        return _change_in_a_cell_that_opens_it(cause, cells, path, change, now)
    # A module written again by a later cell (a v2 of the loss): the cell whose line is the file's line now wrote
    # what ran; else the last one, which "Run All" leaves in the file. The first one named stale code.
    cell, name = next(
        (w for w in reversed(writing) if now is not None and _cell_line(w[0].source, change.line + 1) == now),
        writing[-1],
    )
    what = (
        f"{change.what} (this cell writes {name} with %%writefile: a change made in {name} alone is written "
        "over the next time the cell runs)"
    )
    moved = Change(
        file=os.path.abspath(path), line=change.line + 1, what=what, cell=cell.index, target=change.target
    )
    return dataclasses.replace(cause, change=moved)


def _change_in_a_cell_that_opens_it(
    cause: Cause, cells: Any, notebook: str, change: Change, now: str | None
) -> Cause:
    """`_change_in_the_writing_cell` for a cell that writes the module with Python (``open("losses.py",
    "w").write('''...''')``, ``Path("losses.py").write_text(...)``): the last code cell that names the file in such
    a call and holds the file's changed line (its text, once) is where the change is made."""
    name = os.path.basename(change.file)
    if not now or len(now) < 8:
        return cause  # too short a line to be found as itself
    for cell in reversed(list(cells)):
        if cell.cell_type != "code" or name not in cell.source:
            continue
        if not re.search(
            r"""(?:open\(\s*[rfb]?["'][^"']*""" + re.escape(name) + r"""["']\s*,\s*["'][wa]|write_text\()""",
            cell.source,
        ):
            continue
        lines = [i for i, text in enumerate(cell.source.splitlines(), 1) if text.strip() == now]
        if len(lines) != 1:
            continue
        what = (
            f"{change.what} (this cell writes {name}: a change made in {name} alone is written over the next time "
            "the cell runs)"
        )
        moved = Change(
            file=os.path.abspath(notebook), line=lines[0], what=what, cell=cell.index, target=change.target
        )
        return dataclasses.replace(cause, change=moved)
    return cause


def _cell_line(source: str, line: int) -> str | None:
    lines = source.splitlines()
    return lines[line - 1].strip() if 0 < line <= len(lines) else None


def _origin_where_fed(findings: Findings, cause: Cause) -> None:
    """A bad record a generator (or a PyDataset) made in Python: the origin a dump finds is the PyFunc op tf.data
    runs it by, placed at ``from_generator(...)`` (or the fit line), three lines for one answer beside the cause's
    generator and change lines. The origin is marked where the generator hands the values over (its ``yield``)."""
    fed = cause.evidence.get(FED_AT) if cause.kind == "data" else None
    origin = findings.origin
    if origin is None or not isinstance(fed, dict) or origin.op.type not in PY_FUNC_OPS:
        return
    file, line, cell, code = fed.get("file"), fed.get("line"), fed.get("cell"), fed.get("code")
    if isinstance(file, str) and isinstance(line, int) and (cell is None or isinstance(cell, int)):
        if (origin.file, origin.line, origin.cell) != (file, line, cell):
            origin.file, origin.line, origin.cell = file, line, cell
            # The code shown under the origin is the yield's, not the from_generator statement's.
            findings.extra.pop("origin_statement", None)
            findings.extra["origin_code"] = code if isinstance(code, str) else ""


def cause_of(findings: Findings) -> Cause | None:
    return Cause.from_json(findings.extra.get(FINDINGS_KEY))
