"""Which kind of failure a capture is, from its findings and what the bundle holds: ``op`` (a wrong op on finite
inputs), ``divergence`` (values grew step after step until an op overflowed), ``data`` (the batch held NaN/Inf
before any op), ``precision`` (a float16 overflow float32 would not have) or ``unknown``; with evidence in
numbers and the line to change (``change_line``). Pure reading: the bundle is data, the sources are parsed."""

from __future__ import annotations

import ast
import dataclasses
import itertools
import math
import os
import re
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pyadapter.capture.learning_rate import SHORT_WINDOW, LearningRate, rate_to_try
from pyadapter.capture.records import BadElement
from pyadapter.cause import change_line, domain, provenance, python_feed, scale, trend
from pyadapter.cause.model import Cause, Change, format_number, positive_numbers
from pyadapter.cause.ops import (
    ACCUMULATING_OPS,
    DECODE_OPS,
    DIVISION_OPS,
    DOMAIN_OPS,
    DTYPE_MAX,
    FLOAT16_TINY,
    FLOAT32_MAX,
    VARIABLE_READS,
    dtype_of,
    is_overflow,
)
from pyadapter.cause.rows import BadRows, Outlier, constant_records, extreme_record, outlying_record
from pyadapter.cause.sources import (
    SourceUnit,
    called_name,
    keyword,
    parameters_of,
    source_line,
    user_sources,
)
from pyadapter.dump.frames import is_user_file
from pyadapter.dump.layer_site import auto_name, auto_name_parts, layer_names
from pyadapter.dump.origin import ARGUMENT_TYPES
from pyadapter.findings import Finding, Findings, InputHealth
from pyadapter.findings_text import WEIGHTS_HELD_IT, index_text, place_text
from pyadapter.numpy_warnings import NumpyWarning


@dataclass
class CauseContext:
    """What the bundle says beyond the findings (all optional: older bundles, dumps)."""

    history: list[dict[str, Any]] = field(default_factory=list)
    model_info: dict[str, Any] = field(default_factory=dict)
    dtype_policy: str | None = None
    batch: Any = None
    step: int | None = None
    epoch: int | None = None
    batch_index: int | None = None
    entry_script: str | None = None
    cwd: str | None = None
    data_source: Any = None  # the bundle's `pyadapter.capture.sourcerecord.DataSource`, if it recorded one
    folders: list[str] | None = None  # where data files may be read (None: the current directory)
    # The guard's learning-rate search over its window (``manifest["window"]["search"]``), when it ran.
    window_search: dict[str, Any] | None = None
    # The learning rate the failing step's update used (``manifest["learning_rate"]``), when recorded.
    learning_rate: LearningRate | None = None
    # guard_step: the guarded function (``manifest["step_function"]``: module, qualname, file), whose parameters
    # name the batch's ``args[i]``.
    step_function: dict[str, Any] | None = None
    # Keras fit on NumPy arrays: each batch row's index in them, found at the scene (``manifest["fit_rows"]``).
    fit_rows: dict[str, Any] | None = None
    # The training run's command line (``manifest["entry_script"]["argv"]``): a rate given as ``--lr=2``.
    argv: list[str] = field(default_factory=list)
    # Every layer class of the saved model (model.keras's config), or None without one (a custom loop).
    layer_classes: set[str] | None = None
    # A notebook's executed cell sources, in order (``manifest["entry_script"]["notebook"]["cells"]``): the code
    # its kernel ran, which unsaved edits make differ from the saved cells.
    ran_cells: list[str] = field(default_factory=list)
    # The lines NumPy warned at before the step ("divide by zero encountered in log"), ``manifest["numpy_warnings"]``.
    numpy_warnings: list[NumpyWarning] = field(default_factory=list)
    # The guard found the trainable weights non-finite when the step began (``manifest["non_finite"]``): something
    # between two checked updates wrote them (a callback's ``set_weights``).
    weights_before_step: bool = False
    # Normalization layers' statistics with a variance of 0 in some feature (`scale.ZeroVariance`).
    zero_variances: list[scale.ZeroVariance] = field(default_factory=list)
    # The captured weight a log/sqrt origin read out of its domain (`DomainWeight`), when one is it.
    domain_weight: DomainWeight | None = None
    # The learned weight an Exp origin overflowed on (`ExponentWeight`), when one is it.
    exponent_weight: ExponentWeight | None = None
    # The single numbers a custom step reads or keeps in variables of its own, by the program's names for them
    # (``{"temperature": 0.0}``: a value the loop assigns before each step; `CaptureBundle.step_state_scalars`).
    step_state: dict[str, float] = field(default_factory=dict)
    # (step, batch) of the steps just before the failing one (the guard's window), oldest first: an outlier there
    # made the update that blew up the failing step.
    recent_batches: list[tuple[int, Any]] = field(default_factory=list)
    # Frozen weights of the guarded model that changed between its steps (another optimizer trains them: a GAN's
    # discriminator on its own train_on_batch), as the guard's window found them.
    frozen_changed: list[str] = field(default_factory=list)


@dataclass
class DomainWeight:
    """A weight of the captured model that a log or sqrt read with values outside its domain (a learned scale or
    variance kept as a raw weight, which an optimizer's finite update carried below 0): its path and smallest
    value."""

    path: str
    smallest: float
    # False for a custom loop's own variable that its step updates by hand (``sigma.assign_sub(...)``).
    by_optimizer: bool = True
    # The line that reads it, when the origin took it through arithmetic (``r = 1 / alpha``), not read whole.
    read_line: int | None = None


@dataclass
class ExponentWeight:
    """A small weight of the captured state (a learned log-variance, log-scale or temperature: ``exp(-log_var)``)
    that an Exp origin took, carried so far from 0 that its exp overflowed: its path and the value of largest
    size."""

    path: str
    value: float


# A learned log-scale this far from 0 gives exp() of 5e8 or 2e-9: no initial value, but training's doing.
EXPONENT_WEIGHT_SIZE = 20.0

# How a graph names the value of a variable it reads (``sequential_1/noise_1/Cast/ReadVariableOp:0``).
READ_VARIABLE = "ReadVariableOp"
WEIGHT_DOMAIN_OPS = frozenset({"Log", "Sqrt", "Rsqrt"})  # ops `DomainWeight` is looked for

# Evidence of a `data` cause whose batch Python code made (`python_feed.FeedSite`): where it handed the values to
# TensorFlow, {"file", "line", "cell"?}.
FED_AT = "fed_at"


def _fmt(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value:.3g}"


def _site_place(site: change_line.Site) -> str:
    """'train.py:12', or in a notebook 'wear.ipynb cell 6, line 29', as the change line says it."""
    return place_text(os.path.basename(site.file), site.line, site.cell)


def _change(site: change_line.Site, what: str, target: str) -> Change:
    return Change(
        file=os.path.abspath(site.file) if not site.file.startswith("<") else site.file,
        line=site.line,
        what=what,
        cell=site.cell,
        target=target,
    )


def _origin_change(findings: Findings, what: str, target: str) -> Change | None:
    origin = findings.origin
    if origin is None:
        return None
    return Change(file=origin.file, line=origin.line, what=what, cell=origin.cell, target=target)


def classify(findings: Findings, context: CauseContext | None = None) -> Cause:
    """The cause of a capture (see the module docstring). Never raises for what a bundle or the sources hold."""
    # The user's code, read and parsed once for the classification and the refinements of an op's cause below.
    read = context or CauseContext()
    units = user_sources(findings, read.entry_script, read.ran_cells)
    origin = findings.origin
    rerun = _finite_rerun(findings)
    if origin is not None and rerun is not None:
        return _made_and_masked_in_a_finite_rerun(origin, rerun)
    cause = _classify(findings, context, units)
    if cause.kind == "op" and origin is not None and context is not None:
        cause = (
            _divisor_the_program_sets(findings, origin, context, cause, units)
            or _constant_divisor_of_zero(findings, origin, context, cause, units)
            or _divisor_parsed_with_a_default_of_zero(findings, origin, cause, units)
            or _spread_of_zero(findings, origin, cause, units)
            or _gaps_filled_with_zero(findings, origin, cause, units)
            or _csv_field_read_as_zero(origin, cause, units)
            or _relative_error_of_a_csv_zero(cause, units)
            or _added_epsilon_of_zero(findings, origin, context, cause, units)
            or _frozen_part_trained_elsewhere(findings, context, cause, units)
            or _schedule_divided_by_zero(origin, context, cause, units)
            or _optimizer_epsilon_zero(findings, origin, context, cause, units)
            or _norm_of_a_zero_kernel(origin, cause, units)
            or _zeros_from_16_bit(findings, origin, cause)
            or _jitter_already_added(origin, cause, units)
            or _saturated_by_unscaled_features(context, origin, cause, units)
            or _at_the_relu(findings, cause, units)
            or _at_the_mask(findings, cause)
            or _traced_number_numpy_made(origin, context, cause)
            or _normalized_zero_vector(origin, cause, units)
            or _product_of_a_mask_constant(findings, origin, cause)
            or _loss_config_without_from_logits(cause, units)
            or _layer_epsilon_zero(origin, cause, units)
            or _keras_normalization_epsilon_zero(origin, cause, units)
            or _captured_non_finite(findings, origin, cause, units, context.numpy_warnings)
            or _keras_loss_of_an_unbounded_output(findings, origin, cause, units)
            or _overflow_after_updates_at_a_rate_far_too_high(origin, context, cause, units)
            or _divisor_of_several_divisions(findings, origin, cause, units)
            or _overflow_in_a_loss_of_unscaled_targets(origin, context, cause, units)
            or cause
        )
    if cause.kind == "precision" and context is not None:
        cause = _sixteen_bit_overflow_at_a_rate_far_too_high(context, cause, units) or cause
    if cause.kind == "divergence" and context is not None:
        # A divergence read from this model's history at its own rate, while the frozen part another optimizer
        # trains moved under it.
        cause = _frozen_part_trained_elsewhere(findings, context, cause, units) or cause
    if cause.kind in ("op", "divergence") and origin is not None and context is not None:
        cause = _unstable_integration(origin, context, cause, units) or cause
    if (
        cause.kind == "op"
        and origin is not None
        and _zero_into_domain_op(origin)
        and _wholly_zero_input(origin)
        and context is not None
        and _batch_rows(context.batch) == 1
    ):
        # 2049 rows in batches of 64: the epoch's last batch holds one row, and a variance (or a norm, a std) over
        # the batch axis is 0 for it; "the Log got 16 zeros" does not say so.
        blank = _constant_leaf(context.batch)
        if blank is not None:
            # A CycleGAN's batch of one image by design, a blank frame: the instance norm's variance over its
            # pixels is 0 whatever the batch size; "an epoch's last, partial batch" was false.
            cause.summary += (
                f"; the batch's one record is constant ({blank}): a variance or std over it (an instance or "
                "layer normalization's) is 0, valid input the op must handle"
            )
        elif _step_arguments(context.batch) is not None:
            # guard_step's arguments need not come from a dataset: a one-step episode's returns, one sequence.
            cause.summary += (
                "; the step's arguments hold one row: a variance or std over them is 0 for one row (a dataset's "
                "last, partial batch: drop_remainder=True avoids it; an episode or sequence of one step: guard "
                "the division)"
            )
        else:
            cause.summary += (
                "; the failing batch holds one row: a variance or std over the batch is 0 for one row (an epoch's "
                "last, partial batch: a batch size that divides the data, or drop_remainder=True, avoids it)"
            )
        cause.evidence["batch_rows"] = 1
    # A spread of 0 the division used (`_spread_of_zero`) already says how the whole array went bad.
    whole = (
        _wholly_non_finite(context.batch)
        if cause.kind == "data" and context is not None and "spread" not in cause.evidence
        else None
    )
    if whole is not None:
        # x[0, 0, 0] = nan "row 0" sent the user after one record, where every value was NaN: the array went bad
        # as a whole before training (a mean or std over data holding one NaN, a normalization of all of it).
        name, size = whole
        how = (
            # The NumPy warning the summary quotes is how (``w / w.sum()`` of weights that are all 0): "which
            # NumPy takes without a warning" right after it read as a contradiction.
            "at the line NumPy warned at"
            if "NumPy warned" in cause.summary
            else "a mean or std of data that holds a NaN, which NumPy takes without a warning"
        )
        cause.summary += (
            f"; every value of {name} in the batch is NaN/Inf ({size} of {size}): more than a bad record, the "
            f"array may have gone bad as a whole before training ({how})"
        )
        cause.evidence["wholly_non_finite"] = name
    huge = (findings.bundle or {}).get("first_huge")
    if isinstance(huge, dict) and (words := _first_huge_words(findings, huge)) is not None:
        # An overflow inside the optimizer's update is marked at apply_gradients / fit: where values grew is not.
        cause.summary += words
        cause.evidence["first_huge"] = huge
    return cause


def _wholly_zero_input(origin: Finding) -> bool:
    """Whether an input of the origin is 0 throughout: a variance or std over one row is 0 in every feature. A
    style transfer's one image (a batch of one by design) whose flat regions made some zeros is not that."""
    return any(
        i.health is not None and i.health.size is not None and i.health.zero == i.health.size
        for i in origin.inputs
    )


def _step_arguments(batch: Any) -> tuple[Any, ...] | None:
    """A custom-loop bundle's batch (``{"args": [...], "kwargs": {...}}``, guard_step's call): its positional
    arguments; None for a fit batch."""
    if isinstance(batch, dict) and isinstance(batch.get("args"), (tuple, list)):
        return tuple(batch["args"])
    return None


def _wholly_non_finite(batch: Any) -> tuple[str, int] | None:
    """(name, size) of a float array of the batch whose every value (more than one) is NaN/Inf, else None."""
    import numpy as np

    for name, array, _ in provenance.leaves(batch):
        if (
            isinstance(array, np.ndarray)
            and array.size > 1
            and np.issubdtype(array.dtype, np.floating)
            and not np.isfinite(array).any()
        ):
            return name, int(array.size)
    return None


def _constant_leaf(batch: Any) -> str | None:
    """'x = 0 throughout' for a float array of frames or images (3 dimensions or more: a feature row's variance
    over a batch of one is 0 anyway) holding more than one value, all the same (a blank image); None when none
    is."""
    import numpy as np

    for name, array, _ in provenance.leaves(batch):
        if (
            isinstance(array, np.ndarray)
            and array.dtype.kind == "f"
            and array.ndim >= 3
            and array.size > 1
            and np.isfinite(array).all()
            and (array == array.flat[0]).all()
        ):
            return f"{name} = {array.flat[0]:g} throughout"
    return None


def _batch_rows(batch: Any) -> int | None:
    """The rows of a batch (a Keras ``(x, y)`` or a dict of arrays): the first dimension all its arrays share."""
    import numpy as np

    rows = {
        int(a.shape[0]) for _, a, _ in provenance.leaves(batch) if isinstance(a, np.ndarray) and a.ndim >= 1
    }
    return rows.pop() if len(rows) == 1 else None


def _first_huge_words(findings: Findings, huge: dict[str, Any]) -> str | None:
    """'; the step's values first passed 1e15 in an Exp at line 30 (up to 1.3e+24)' (`rowvalues.first_huge`)."""
    line, op, largest = huge.get("line"), huge.get("op"), huge.get("largest")
    if not isinstance(line, int) or not isinstance(op, str) or not isinstance(largest, (int, float)):
        return None
    file, cell = huge.get("file"), huge.get("cell")
    origin = findings.origin
    if isinstance(cell, int):
        where = f"cell {cell + 1}, line {line}"
    elif (
        origin is not None
        and isinstance(file, str)
        and os.path.basename(file) != os.path.basename(origin.file)
    ):
        where = f"{os.path.basename(file)}:{line}"
    else:
        where = f"line {line}"
    return f"; the step's values first passed 1e15 in {_article(op)} {op} at {where} (up to {largest:.3g})"


CTC_OPS = ("CTCLoss", "CTCLossV2", "CTCLossV2Grad")


def _zero_variance(
    findings: Findings, units: list[SourceUnit], origin: Finding, unscaled: scale.UnscaledFeature
) -> Cause:
    """A Normalization layer adapted on data where a feature never changed (variance 0): it divides that feature by
    max(sqrt(0), 1e-7), and a batch where the feature does change becomes 1e7 times larger there. The line to change
    is the ``adapt`` call (what it was given), else the origin."""
    summary = (
        f"the {unscaled.layer} layer divides feature {unscaled.feature} by 1e-7: it was adapted on data "
        f"where that feature never changed (variance 0, mean {_fmt(unscaled.mean)}), and this batch holds "
        f"{_fmt(unscaled.value)} there ({unscaled.rows} row{'s' if unscaled.rows != 1 else ''}), scaled to "
        f"{_fmt(unscaled.scaled)}; {_article(origin.op.type)} {origin.op.type} overflowed from there, at any "
        "learning rate"
    )
    what = (
        "adapt the Normalization layer on data where every feature varies (all of the training data, not its first "
        "rows), or leave the constant feature out"
    )
    site = next(
        (
            change_line.Site(unit, call, "adapt")
            for unit in units
            for call in change_line.calls(unit)
            if change_line.called_name(call) == "adapt"
        ),
        None,
    )
    change = _change(site, what, "reading") if site is not None else _origin_change(findings, what, "op")
    evidence = {
        "op": origin.op.type,
        "op_name": origin.op.name,
        "overflow": True,
        "unscaled": unscaled.to_json(),
    }
    return Cause("data", summary, evidence, change)


# Losses whose targets must lie in [0, 1]: with a target t above 1, -t log p - (1 - t) log(1 - p) has no lower
# bound (it falls to -inf as p goes to 1), so training drives it there.
_BINARY_CROSS_ENTROPIES = frozenset(
    {
        "binary_crossentropy",
        "BinaryCrossentropy",
        "binary_focal_crossentropy",
        "BinaryFocalCrossentropy",
        "sigmoid_cross_entropy_with_logits",
    }
)


def _cross_entropy_targets_out_of_range(
    findings: Findings, context: CauseContext, units: list[SourceUnit], origin: Finding, fell: trend.Fall
) -> Cause | None:
    """A binary cross-entropy whose targets leave [0, 1] (a VAE on images of 0..255, keras.io's ``/ 255`` left
    out): the loss falls without bound and a layer overflows far from the loss. It was "often a sign slip in a KL
    term ... check its signs" at the Sampling layer's exp; the targets' range is what to change. None when the
    code calls no such loss or the targets are in range."""
    import numpy as np

    site = next(
        (
            change_line.Site(unit, call, name)
            for unit in units
            for call in change_line.calls(unit)
            if (name := change_line.called_name(call) or "") in _BINARY_CROSS_ENTROPIES
        ),
        None,
    )
    batch = context.batch
    # The targets: a fit batch's y; a batch of one array is its own target (an autoencoder's train_step).
    targets = batch[1] if isinstance(batch, tuple) and len(batch) > 1 else batch
    if (
        site is None
        or not isinstance(targets, np.ndarray)
        or targets.dtype.kind not in "fiu"
        or not targets.size
    ):
        return None
    values = targets[np.isfinite(targets)] if targets.dtype.kind == "f" else targets
    if not values.size or (values.min() >= 0 and values.max() <= 1):
        return None
    summary = (
        f"the loss fell without bound ({_fmt(fell.start_value)} at step {fell.start_step} to "
        f"{_fmt(fell.end_value)} at step {fell.end_step}) until {_article(origin.op.type)} {origin.op.type} "
        f"overflowed: the {site.name} takes targets in [0, 1], and this batch's run from {_fmt(float(values.min()))} "
        f"to {_fmt(float(values.max()))}; with a target above 1 it has no lower bound, and training drives it to -inf"
    )
    what = (
        f"the targets of the {site.name}: scale them to [0, 1] where the data is made (images / 255.0), or use a "
        "loss meant for their range (a mean squared error)"
    )
    evidence = {
        "op": origin.op.type,
        "op_name": origin.op.name,
        "overflow": True,
        "history": fell.to_json(),
        "targets_range": [float(values.min()), float(values.max())],
    }
    return Cause("data", summary, evidence, _change(site, what, "op"))


# The graphs of Keras's train step (`pyadapter.capture.train_function`): an op of these ran after the batch was made.
_STEP_GRAPHS = frozenset(
    {"one_step_on_data", "one_step_on_iterator", "multi_step_on_iterator", "train_function"}
)


def _unstable_integration(
    origin: Finding, context: CauseContext, cause: Cause, units: list[SourceUnit]
) -> Cause | None:
    """An overflow in the first steps inside a loop of explicit Euler updates (``u = u + DT * (D * laplacian(u))``
    unrolled 50 times in a model's call): the values grow by a factor every iteration of one forward pass when the
    time step is too large for the system. It was "unscaled inputs or initial weights" (a smaller initial guess,
    followed, trained a wrong answer) or a learning-rate search (the forward pass at step 0 depends on no rate).
    None otherwise."""
    overflow = origin.health is not None and bool(origin.health.pos_inf or origin.health.neg_inf)
    finite_steps = sum(1 for h in context.history if h.get("loss") is not None)
    if not (overflow or "overflow" in cause.summary) or finite_steps >= trend.MIN_STEPS:
        return None
    places = [(origin.file, origin.cell, origin.line)] + [(f.file, f.cell, f.line) for f in origin.stack]
    site = change_line.explicit_euler_site(units, places)
    if site is None:
        return None
    summary = (
        f"values overflowed at the run's first steps inside a loop of explicit Euler updates ({_site_place(site)}): "
        "unrolled in one forward pass, each iteration multiplies the values when the time step is too large for "
        "the system (for diffusion, D * dt / dx**2 above 1/2), so no learning rate or scale of the inputs is the "
        f"cause; {_article(origin.op.type)} {origin.op.type} in the loop overflowed first"
    )
    what = (
        "the integration step: take more, smaller steps (a smaller dt, more steps), or a stable integrator (an "
        "implicit or adaptive one); a lower learning rate or smaller initial values only move where it fails, or "
        "train a wrong answer"
    )
    evidence = {**cause.evidence, "explicit_euler": {"file": site.file, "line": site.line}}
    return Cause("op", summary, evidence, _change(site, what, "op"))


def _loss_config_without_from_logits(cause: Cause, units: list[SourceUnit]) -> Cause | None:
    """A log of logits where a loss class of the user's takes ``from_logits`` in ``__init__`` and its
    ``get_config`` leaves it out: a model reloaded with ``keras.saving.load_model`` rebuilds the loss from its config,
    with from_logits at its default, False, and the loss takes the log of logits. None otherwise."""
    if cause.change is None or not cause.change.what.startswith("the log of logits"):
        return None
    if not change_line.constructed_names(units, frozenset({"load_model"})):
        return None  # no reload: the loss was built as the code says, and the logits' form is the change
    for unit in units:
        for node in ast.walk(unit.tree):
            if not isinstance(node, ast.ClassDef):
                continue
            methods = {m.name: m for m in node.body if isinstance(m, ast.FunctionDef)}
            init, config = methods.get("__init__"), methods.get("get_config")
            if init is None or config is None:
                continue
            takes = any(a.arg == "from_logits" for a in [*init.args.args, *init.args.kwonlyargs])
            if not takes or "from_logits" in (ast.get_source_segment(unit.text, config) or ""):
                continue
            site = change_line.Site(
                unit, ast.Name(id="get_config", lineno=config.lineno, col_offset=0), node.name
            )
            summary = (
                f"{cause.summary}; {node.name}.get_config leaves out from_logits, so a model reloaded with "
                "keras.saving.load_model rebuilds the loss with from_logits=False and takes the log of the logits"
            )
            what = (
                f"{node.name}.get_config: save from_logits too (config.update(from_logits=self.from_logits)), so the "
                "reloaded loss reads logits as the trained one did"
            )
            return Cause(cause.kind, summary, cause.evidence, _change(site, what, "op"))
    return None


def _made_in_the_step(origin: Finding) -> bool:
    """Whether the origin is an op of the training step (its backward pass, or Keras's step function), not of the
    input pipeline."""
    return origin.role == "backward-origin" or (origin.op.graph or "") in _STEP_GRAPHS


def _unbounded_loss(findings: Findings, origin: Finding, fell: trend.Fall) -> Cause:
    """A loss that fell below 0 without bound until a value overflowed: the line to change is where the step's
    values first grew huge (the term the optimizer drives to -inf), else the origin."""
    huge = (findings.bundle or {}).get("first_huge")
    summary = (
        f"the loss fell without bound ({_fmt(fell.start_value)} at step {fell.start_step} to "
        f"{_fmt(fell.end_value)} at step {fell.end_step}) until {_article(origin.op.type)} {origin.op.type} "
        "overflowed: a term of the loss has no lower bound, and the optimizer drives it to -inf (often a sign slip, "
        "as + exp(log_var) for - exp(log_var) in a KL term); a lower learning rate only delays it"
    )
    what = "the loss term that can fall without bound: check its signs and that it is bounded below"
    change = _origin_change(findings, what, "op")
    if isinstance(huge, dict) and isinstance(huge.get("line"), int) and isinstance(huge.get("file"), str):
        change = Change(
            file=huge["file"],
            line=huge["line"],
            what=what,
            cell=huge.get("cell") if isinstance(huge.get("cell"), int) else None,
            target="op",
        )
    evidence = {"op": origin.op.type, "op_name": origin.op.name, "overflow": True, "history": fell.to_json()}
    return Cause("op", summary, evidence, change)


def _classify(findings: Findings, context: CauseContext | None, units: list[SourceUnit]) -> Cause:
    known = context is not None  # a bundle's context; a dump has no history
    context = context or CauseContext()
    origin = findings.origin
    section = findings.bundle or {}
    bad_batch = section.get("non_finite_batch") or (
        {"element": e.describe()} if (e := provenance.first_bad_element(context.batch)) is not None else None
    )
    if bad_batch and section.get("origin_from") != "input pipeline re-run":
        return _data(findings, context, units)
    if bad_batch and (weighted := _class_weighted(findings, context, units)) is not None:
        # Keras made the batch's sample weights from class_weight, after the pipeline: whatever op a pipeline
        # re-run found first (an AddN of the weighted loss's gradient), the class weights are what to change.
        return weighted
    if bad_batch and origin is not None and _made_in_the_step(origin):
        # The pipeline's re-run found no op of the pipeline that made the batch's NaN (a "nan" field a CSV reader
        # parsed), and named the first op of the step that made one from finite inputs (the gradient of a max
        # over a NaN row, 0 / 0): downstream of the batch, never its cause. The data is.
        return _data(findings, context, units)
    if origin is not None and origin.op.type in DECODE_OPS:  # the values were in the records it decoded
        return _data(findings, context, units)
    if origin is not None and origin.op.type in ARGUMENT_TYPES and not origin.inputs:
        # A function's argument brought the NaN/Inf in and no op of the dump made it (a NaN in the arrays passed
        # to fit, under `nanlens run --dump`): the data. It was "op: a Placeholder made NaN/Inf from finite inputs",
        # or for an Inf "unknown: a divergence or a wrong op".
        return _data(findings, context, units)
    if origin is not None and origin.op.type in python_feed.PY_FUNC_OPS:
        if _in_the_step(origin):
            # A py_function the model runs (``tf.py_function(log_transform, [x], ...)`` in a layer's call) made
            # NaN/Inf of a finite batch: an op of the step, written in Python; it hands nothing to fit.
            return _python_function_in_step(findings, units, origin)
        # Python code (a generator, a PyDataset, a py_function) made the values; no op of the graph did.
        return _data(findings, context, units)
    rate = context.learning_rate
    if rate is not None and not rate.finite:
        # Finite data, and an update at a non-finite rate: whatever the replayed step found first (the weights that
        # update wrote, read back), the rate made it.
        return _rate_not_finite(context, units, rate)
    if rate is not None and rate.value < 0:
        # Finite data and a negative rate: each update moved the weights up the gradient, whatever op overflowed.
        return _rate_negative(context, units, rate)
    if origin is None:
        verdicts = (findings.bundle or {}).get("verdicts")
        graph = verdicts.get("graph") if isinstance(verdicts, dict) else None
        drawn = graph.get("stateful_random") if isinstance(graph, dict) else None
        if isinstance(drawn, list) and drawn and all(isinstance(d, str) for d in drawn):
            # The re-runs drew other numbers than training (a GAN's unseeded noise): chance, not a finite step.
            summary = (
                f"the step's re-runs stayed finite: it draws unseeded random numbers ({', '.join(drawn[:2])}), "
                "and training's draws are not in the bundle; `nanlens locate --replay` draws again, and "
                "keras.random.* with a SeedGenerator (or tf.random.stateless_*) makes the step replay as it ran"
            )
            evidence: dict[str, Any] = {"origin": None, "stateful_random": drawn[:5]}
            fell = trend.fall(context.history) if known else None
            if fell is not None:
                # An energy-based model's Langevin sampler climbing the energy: 250 steps of the loss falling to
                # -1e18 were in the bundle, and "unknown" said nothing of them.
                summary += (
                    f"; the steps before it show the loss falling without bound ({_fmt(fell.start_value)} at step "
                    f"{fell.start_step} to {_fmt(fell.end_value)} at step {fell.end_step}): a term of the loss has "
                    "no lower bound, and the optimizer drives it to -inf (often a sign slip)"
                )
                evidence["history"] = fell.to_json()
            return Cause("unknown", summary, evidence)
        large = _too_large_gradients(findings)
        if large:
            return _gradients_too_large_to_square(context, units, large)
        return Cause(
            "unknown",
            "no op made NaN/Inf when the step was located, so the cause is not known",
            {"origin": None},
        )
    if origin.op.type == "Const" and origin.health is not None and not origin.health.is_finite:
        return _non_finite_constant(findings, units, origin)
    if known and _copies_an_unrecorded_input(origin):
        # A tf.gather of a schedule made with np.log(0) (s43a p8, improved DDPM's posterior log-variance): the gather
        # only copied the -inf of a tensor the step captured, whose health the dump does not record; it was "a
        # GatherV2 op overflowed on finite inputs ... keep its values in range".
        return _captured_value_copied(findings, context, units, origin)
    clipped = _clip_rounded_away(findings, context, units, origin)
    if clipped is not None:
        # Before the 16-bit rules: "compute this in float32" at the log, followed, cast after the float16 clip.
        return clipped
    dtype = (dtype_of(origin) or "").lower()
    if known and dtype in SIGNIFICANT_BITS and _subtracted_zeros(origin):
        return _cancellation(findings, context, origin, dtype)
    if known and dtype in SIXTEEN_BIT and _zeros_that_make_it(origin):
        return _underflow(findings, context, units, origin, dtype)
    if dtype in SIXTEEN_BIT and _sixteen_bit_range_exceeded(origin):
        # The backward pass of a log at a float16 sigmoid of 3e-6 (no zero: its reciprocal is 3e5, past 65504):
        # the value exists in float32, not in float16.
        return _sixteen_bit_overflow(findings, context, units, origin, dtype, known)
    if known and dtype in SIGNIFICANT_BITS and _negative_into_root_or_log(origin):
        squares = change_line.squares_difference_site(units, origin.file, origin.line, origin.cell)
        if squares is not None:
            return _squares_cancelled(context, origin, dtype, squares)
    if known and dtype == "float32" and _negative_into_root_or_log(origin):
        squares = change_line.squares_difference_site(units, origin.file, origin.line, origin.cell)
        if squares is not None:
            # Readings near 1000 hPa that vary by 0.01: float32's 24 bits lose that variance too.
            return _squares_cancelled(context, origin, dtype, squares)
    if _negative_into_root_or_log(origin) and (
        expanded := change_line.expanded_distance_site(units, origin.file, origin.line, origin.cell)
    ):
        return _expanded_distance(origin, expanded)
    if _zero_into_domain_op(origin) and (
        strict := change_line.strict_self_comparison_site(units, origin.file, origin.line, origin.cell)
    ):
        return _empty_strict_set(origin, strict)
    # A variable read's only input is the resource handle (no health of its own).
    reads_weights = origin.op.type in VARIABLE_READS and all(i.health is None for i in origin.inputs)
    at_start = _non_finite_at_start(context.history, context.step) if known else None
    if (
        known
        and reads_weights
        and (at_start is not None or context.weights_before_step)
        and (warned := _weights_warning(context.numpy_warnings, units)) is not None
    ):
        # NumPy warned at a line of the program before the step, and the weights were non-finite before any update
        # of the step wrote them: that line made them (an output bias of np.log(pos / neg) with no positives, s41c
        # p2; a weight-averaging callback's division by a count of 0, s41e p5), not a divergence or an earlier fit.
        return _weights_made_where_numpy_warned(origin, warned, at_start)
    if known and reads_weights and at_start is not None:
        # A custom loop's too (its bundle records no optimizer): no update of this run wrote them.
        return _started_from_bad_weights(units, origin, at_start)
    if known and reads_weights and context.model_info.get("optimizer"):
        return _update_blew_up(context, units, origin)
    masked = findings.extra.get("masked_by_where")
    # An op of the input pipeline (a box encoder's log of a padded box's width 0) made the batch's values: the
    # loss's tf.where that masks them is no trap of that op's, whose line has no tf.where to change.
    made_in_the_pipeline = bool(bad_batch) and section.get("origin_from") == "input pipeline re-run"
    if (
        isinstance(masked, dict)
        and not made_in_the_pipeline
        and not origin.op.forward_op
        and _graph_loss_finite(findings) is not False
    ):
        # Before the batch and row rules: the record (a zero count) is valid, the where is meant to skip it.
        return _where_trap(findings, origin, masked)
    read = domain.batch_input(origin, context.batch) or domain.shifted_batch_input(
        origin, context.batch, _added_constants(str(findings.extra.get("origin_code") or ""))
    )
    if (
        read is not None
    ):  # before the overflow checks: a division by an unrecorded zero looks like an overflow
        return _batch_out_of_domain(findings, context, units, origin, read)
    rows = BadRows.from_json((findings.bundle or {}).get("bad_rows"))
    if rows is not None and rows.count > rows.batch_rows // 2:
        rows = None  # no one record's doing (`rows.rows_of`); a bundle located before that rule recorded them
    if rows is not None:
        # A guard_step's records by the step's own names: "y_out[41]", not "args[2][41]".
        named = [
            dataclasses.replace(o, element=_named_by_step_parameters(o.element, units, context.step_function))
            for o in rows.outliers
        ]
        rows = dataclasses.replace(rows, outliers=named)
    mask = _mask_constant(findings, origin)
    if mask is not None:
        # A -inf written to mask positions, on a row with every position masked: the constant is what to change,
        # though the row (an all-padding sequence) is valid input.
        return _masked_row(findings, context, units, origin, mask, rows)
    overflow = is_overflow(origin)
    if (
        rows is not None
        and not _empty_records_only(rows)  # padding, an empty text: the masked mean's own words
        and _reduction_of_zero_into_domain_op(origin)
        and constant_records(context.batch, rows.rows)
    ):
        # A division by (or a log of) a per-record mean squared error that a flat record makes exactly 0 (a PSNR
        # loss's ``1 / mse`` of flat patches the model reproduces exactly at the start, s43e p5): rows 4, 8 and 14
        # were all flat, and "leave the record x[8] = 0.25 out" left the other two. Before the record rules.
        return _flat_records_reduced_to_zero(findings, origin, rows)
    if overflow and made_in_the_pipeline and dtype not in SIXTEEN_BIT:
        # An exp in a Dataset.map function overflowed on the records themselves (s43b p8: a recency weight
        # exp(-age * ln 2 / half_life) of timestamps in milliseconds among seconds, ages of -2e7 days): no weight,
        # rate or update was involved. "Unscaled inputs or initial weights ... bound its input" was followed with a
        # clip at +-20, and the bad rows trained at weight e^20.
        return _overflow_in_the_input_pipeline(findings, units, origin)
    frames = [(f.file, f.line, f.cell) for f in reversed(origin.stack)]
    if overflow and known and (steps := change_line.input_gradient_steps(units, frames)) is not None:
        # A short-run Langevin sampler at STEP_SIZE = 10 (s43a p4, an image recipe's setting on an energy of
        # curvature 1): each step multiplied the samples by -9, and the energy's square overflowed. It was "a Sum op
        # overflowed ... unscaled inputs or initial weights ... keep its values in range" at the energy's line.
        return _input_gradient_steps_diverged(findings, origin, steps)
    if (
        rows is not None
        and rows.outliers
        # The unlike records must account for the bad rows: one odd value among eight bad rows (a -3.5 in a
        # standard normal column) explains none of the other seven. All of them: `rows.rows` names five at most.
        and 2 * len({o.element.row for o in rows.outliers}) >= rows.count
        # An overflow on an ordinary row too (an exp of returns in basis points at step 0: row 11 and the crash
        # day's row 199): the scale of every row is the cause, and leaving the crash day out, followed, overflowed
        # at step 0 again (s40e p7).
        and not (overflow and len({o.element.row for o in rows.outliers}) < rows.count)
        and not (
            overflow and dtype in SIXTEEN_BIT
        )  # rows past 65504 are the ones that overflowed: no record's
        and not _made_by_a_gradient_of_the_users(origin, units)
        # A log of a sigmoid that saturated to 0 on a large value (a dollar amount of 4924 among amounts up to 527):
        # the record is real, the log of the sigmoid is what to compute from the logits (log_sigmoid).
        and not _log_of_a_sigmoid(findings, origin)
        # sqrt's slope at 0 is infinite whatever the record: a pair of identical images, a zero gradient.
        and _sqrt_differentiated_at_zero(origin) is None
        and _fractional_power_differentiated_at_zero(origin) is None
        # An empty record (all padding, an empty text) divided by its own count of 0 is valid input to a masked
        # mean: the division is what to change (as the same 0 / 0 in a graph's isolated node is).
        and not (_empty_records_only(rows) and _division_words(origin))
        # So is a log of a reduction that an empty record makes 0 (a PSNR loss's ``log(mse)`` of a black patch the
        # model reproduces exactly): the record is right, the loss is undefined there.
        and not (_empty_records_only(rows) and _log_of_a_reduction_of_zero(origin))
        # And a normalization's rsqrt of the variance of a constant record (a dropped sensor frame of zeros, a blank
        # image): the record is valid input, the layer needs an epsilon (as LayerNormalization has).
        and not (_empty_records_only(rows) and _rsqrt_of_a_variance(origin))
        # A node with no edges (a row of zeros in the adjacency) in a degree normalization, D^-1/2: the node is
        # valid; "correct the record or leave it out" would change the graph and every index (s39d p2).
        and not (_empty_records_only(rows) and _inverse_root_of_a_degree(origin))
        # A target of 0 divided by in a relative error (MAPE's ``/ y_true``: a day the store was closed) is valid
        # data: the loss is undefined there, the record is right. A feature unlike the rest on those rows (the
        # holiday flag of the closed days) goes with the zero target, and correcting it changes nothing.
        and not (
            (all(o.element.value == 0 for o in rows.outliers) or _divisor_holds_zeros(origin))
            and _division_words(origin)
            and _RELATIVE_ERROR.search(str(findings.extra.get("origin_code") or ""))
        )
    ):
        return _row_outlier(findings, context, units, origin, rows)
    if overflow and dtype in SIXTEEN_BIT:
        return _sixteen_bit_overflow(findings, context, units, origin, dtype, known)
    growth = trend.growth(context.history)
    if overflow and known and (record := extreme_record(context.batch)) is not None:
        # One value a million times the rest: that record's gradient made the step's values overflow (Adam's
        # second moment, a squared error) at any learning rate; the loss "grew" only at the step that read it.
        return _extreme_record(findings, context, units, origin, record)
    if overflow and known and (unscaled := scale.unscaled_feature(context.zero_variances, context.batch)):
        # A feature constant where the Normalization layer was adapted: it divides that feature by 1e-7.
        return _zero_variance(findings, units, origin, unscaled)
    if overflow and known and (penalties := change_line.large_regularizers(units)):
        # A weight penalty of 1e30 (meant: 1e-3) overflows the loss, or drives the weights up, whatever the rate.
        return _large_regularizer(origin, penalties, growth)
    # A loss that jumped while the weights stood still (a one-batch blow-up: a record far out of the others' scale
    # through an exponential layer) is no divergence, whatever the "growth" from the lowest loss before it says: the
    # rate was no cause (the window found none that kept it finite), the batch and the op are.
    steady = known and trend.weights_steady(context.history)
    if overflow and steady and (record := outlying_record(context.batch)) is not None:
        return _extreme_record(findings, context, units, origin, record)
    if overflow and known and (fell := trend.fall(context.history)) is not None:
        # The loss went to -1e18 "improving" at every step: no rate made it, a term without a lower bound did.
        return _cross_entropy_targets_out_of_range(findings, context, units, origin, fell) or _unbounded_loss(
            findings, origin, fell
        )
    if overflow and known and not steady and (earlier := _extreme_record_before(context)) is not None:
        # A target of 1e12 in the step before: its update drove the weights far out, and the failing step, on a
        # clean batch, overflowed. "Divergence at the rate" (no rate kept the window finite) hid the record.
        return _extreme_record_earlier(findings, context, units, origin, *earlier)
    if overflow and growth is not None and not steady:
        return _divergence(context, units, origin, growth)
    if overflow and known and not steady and (fast := _fast(context)) is not None:
        # Blew up in 1-3 steps, too fast for a trend: a jump of finite values the last updates made, or an
        # update larger than the weights, is a divergence; an overflow on steady values stays a wrong op.
        return _divergence(context, units, origin, *fast)
    if overflow and not known:
        summary = (
            f"{origin.op.type} overflowed on finite inputs: a divergence (values growing step "
            "after step) or a wrong op; a dump holds no loss history to tell"
        )
        what = f"the {origin.op.type} op, or the learning rate"
        if (summed := _summed_exp_words(findings, origin, "")) is not None:
            # The sum of exps is worth naming either way: log space is the fix unless the logits diverged.
            summary = f"{summed[0]}; or a divergence (values growing step after step): a dump holds no loss history to tell"
            what = summed[1]
        return Cause(
            "unknown",
            summary,
            {"op": origin.op.type, "op_name": origin.op.name, "overflow": True},
            _origin_change(findings, what, "op"),
        )
    start = _fit_start(context)
    first_steps = context.step is not None and context.step - start < trend.MIN_STEPS
    if (
        overflow
        and known
        and first_steps
        and _blown_up_at_start(context.history, context.step, start, bool(_unscaled_inputs(context, units)))
        is not None
    ):
        # The fit began from weights an earlier run blew up (restored by BackupAndRestore, loaded from a file, left
        # by an earlier fit): neither the inputs nor this fit's rate made them; `_divergence` names where they came
        # from, and what the guard's search of rates found.
        return _divergence(context, units, origin, None)
    if overflow and known and first_steps and (raw := _unscaled_inputs(context, units)):
        if origin.op.type == "Exp" and context.step == start:
            # The first step's forward pass, before any update: no rate made it (a learning-rate search of 13
            # replays answered "no rate kept it finite"); the exp of logits of raw pixels did.
            return _exp_of_unscaled_inputs(findings, origin, raw, units)
        # Values this large from the first steps, on inputs in the hundreds: the usual step overshoots at once.
        return _divergence(context, units, origin, None)
    if (
        not overflow
        and known
        and not steady
        and (
            ending := _underflow_of_a_divergence(findings, origin) or _saturated_input_of_a_divergence(origin)
        )
    ):
        # A Poisson rate exp(out) whose log the loss takes: the updates drove `out` to -1e10, the exp underflowed
        # to 0 and the log made -inf. The log-space words alone ("use the exponent itself"), followed, met the same
        # divergence one step later at the exp's overflow.
        diverged = (growth, None) if growth is not None else _fast(context)
        if diverged is not None:
            return _divergence(context, units, origin, *diverged, ending=ending)
    if not overflow and (cause := _unnormalised_probabilities(findings, units, origin, rows)) is not None:
        return cause
    if not overflow and (cause := _mask_product_beyond_16_bit(findings, units, origin)) is not None:
        return cause
    large = _too_large_gradients(findings)
    if large and _OPTIMIZER_SCOPE.search(origin.op.name) and _overflowed_on_finite_inputs(origin):
        # The optimizer's own square of a gradient too large for it (Adam's second moment, ``cond/adam/Square``),
        # reached now that a re-run starts from the accumulators training had: the gradients are the cause, and
        # "keep the Square op's values in range" named no line of the user's. After the data, divergence and
        # weight-decay causes, which name what made them that large.
        return _gradients_too_large_to_square(context, units, large)
    rose = trend.rise(context.history) if overflow and known else None
    return _op(
        findings,
        origin,
        growth,
        overflow,
        rows,
        first_steps,
        rose,
        None if context.step is None else context.step - start,
        context.domain_weight,
        context.exponent_weight,
        units,
    )


def _unnormalised_probabilities(
    findings: Findings, units: list[SourceUnit], origin: Finding, rows: BadRows | None
) -> Cause | None:
    """A Keras cross-entropy given probabilities (``from_logits=False``) divides each output row by its sum: a model
    whose last layer is no softmax (a relu Dense) gives a row of zeros, and 0 / 0. The division is Keras's: the
    generic "use divide_no_nan" at the fit line could not be done; the model's last layer is what to change."""
    name = origin.op.name
    if (
        not name.startswith("compile_loss/")
        or "crossentropy" not in name
        or origin.op.type not in DIVISION_OPS
        or len(origin.inputs) != 2
    ):
        return None
    output, total = origin.inputs
    if total.health is None or not total.health.is_finite or not total.health.zero:
        return None
    loss = name.split("/")[1] if name.count("/") >= 2 else "the cross-entropy"
    layer = output.name.rsplit(":", 1)[0]
    site = change_line.layer_site(units, layer)
    zeros = total.health.zero
    rows_text = f"{zeros} row{'s' if zeros != 1 else ''}"
    summary = (
        f"the model's output is not a probability distribution: {rows_text} of it ({output.name}) "
        f"{'sum' if zeros != 1 else 'sums'} to 0, and the loss {loss} (from_logits=False) divides each row by its "
        "sum: 0 / 0 is NaN"
    )
    if rows is not None:
        summary += f" ({rows.rows_text()} of the batch)"
    what = 'end the model with activation="softmax" (or keep its last layer linear and give the loss from_logits=True)'
    evidence: dict[str, Any] = {
        "op": origin.op.type,
        "op_name": name,
        "output": output.name,
        "zero_sums": zeros,
    }
    change = (
        _change(site, f"the {site.name} layer: {what}", "model")
        if site is not None
        else _origin_change(findings, what, "op")
    )
    return Cause("op", summary, evidence, change)


def _input_gradient_steps_diverged(
    findings: Findings, origin: Finding, steps: change_line.InputGradientSteps
) -> Cause:
    """An overflow on values a loop of the program's own made by moving a tensor along its gradient (a Langevin
    sampler, an attack, an optimized image): the loop's step size, not the model's inputs or weights."""
    size = f"{steps.step_size} = {format_number(steps.value)}" if steps.value is not None else steps.step_size
    summary = (
        f"the {origin.op.type} op overflowed on values the program's own loop made: {steps.function}() moves "
        f"{steps.moved} along its gradient ({steps.moved} = {ast.unparse(steps.update.node)}, line "
        f"{steps.update.line}) with step size {size}, and the steps grew {steps.moved} until it overflowed (a "
        "gradient step past 2 / the curvature overshoots, and each step multiplies the error)"
    )
    what = (
        f"the step size of the gradient steps on {steps.moved}: make it smaller (samplers and attacks on inputs "
        f"of unit scale use 0.001-0.1), or clip {steps.moved} to the data's range after each step "
        f"(tf.clip_by_value({steps.moved}, lo, hi))"
    )
    evidence = {
        "op": origin.op.type,
        "op_name": origin.op.name,
        "moved": steps.moved,
        "step_size": steps.step_size,
        "step_size_value": steps.value,
        "function": steps.function,
    }
    site = steps.written or steps.update
    return Cause("divergence", summary, evidence, _change(site, what, "op"))


def _overflow_in_the_input_pipeline(findings: Findings, units: list[SourceUnit], origin: Finding) -> Cause:
    """An op of a tf.data function (``Dataset.map``) overflowed on finite values: the records that reach it hold
    values far outside what its formula was written for (a column in other units, a sentinel), found by re-running
    the pipeline under a dump. The batch's bad values and the columns the function reads are named."""
    graph = origin.op.graph or ""
    function = re.sub(r"^Dataset_(?:map|filter|flat_map|interleave)_", "", graph)
    function = re.sub(r"_\d+$", "", function)
    read = change_line.columns_read_up_to(units, origin.file, origin.line, origin.cell)
    reads = f" (it reads {', '.join(repr(c) for c in read[:3])})" if read else ""
    examples = ((findings.bundle or {}).get("non_finite_batch") or {}).get("examples") or []
    held = f"; the batch holds {', '.join(str(e) for e in examples[:3])}" if examples else ""
    summary = (
        f"the {origin.op.type} op of the input pipeline's function {function}{reads} overflowed on finite values "
        "of the records themselves: no weight, rate or update is involved, so some records reach it with values far "
        "outside what its formula expects (a column in other units, such as milliseconds among seconds or cents "
        f"among dollars, a sentinel like -1 or 9999, a date in the future){held}"
    )
    what = (
        f"the records that make the {origin.op.type}'s input that large: find them (print the rows whose result is "
        "not finite) and convert them to the units of the others, or drop them where the data is read "
        "(dataset.filter); a clip of the input keeps them in training at the clip's extreme value"
    )
    evidence = {"op": origin.op.type, "op_name": origin.op.name, "graph": graph, "columns_read": read[:5]}
    return Cause("data", summary, evidence, _origin_change(findings, what, "op"))


def _first_steps_words(step: int | None) -> str:
    """An overflow at the run's first steps: nothing before it to show a growth. At step 0 the weights are the
    initial ones; after one update they are not (a VAE at a rate of 1.0 had its weights moved by their own size in
    that update, and "initial weights" sent the user to the wrong place)."""
    if not step:
        return (
            "at the run's first steps (none before it to show a growth: values this large from the start point at "
            "unscaled inputs or initial weights)"
        )
    updates = "one update" if step == 1 else f"{step} updates"
    return (
        f"at step {step}, after {updates} (too few to show a growth: values this large so early point at unscaled "
        "inputs, or at a learning rate that moved the weights too far in the first updates)"
    )


def _before_words(rose: trend.Trend | None) -> str:
    """What the steps before an overflow showed, when no divergence's growth: nothing, or a slower rise."""
    if rose is None:
        # Said of what the guard records only (logits divided by an annealed temperature grew x17 unseen), and of
        # what `trend.rise` looks at: a weight norm rising x3 over 22 steps of early training is no growth of note,
        # but "no growth in the weights" read as false beside the bundle's history.
        return (
            f"with no rise over the steps before in the loss or gradient norm the guard records (none x{trend.RISE_FACTOR:.0f} or "
            "more)"
        )
    label = SERIES_WORDS.get(rose.series, rose.series)
    return (
        f"after the {label} rose x{rose.factor:.3g} over {rose.steps} steps ({_fmt(rose.start_value)} at step "
        f"{rose.start_step} to {_fmt(rose.end_value)} at step {rose.end_step}; slower than a divergence's growth)"
    )


def _empty_strict_set(origin: Finding, strict: change_line.Site) -> Cause:
    """A log (or a division) of a sum over a mask that compares a vector with itself strictly: the row of the
    batch's largest value has no member, so its sum is 0. A Cox partial likelihood's risk set written
    ``time[None, :] > time[:, None]`` (meant ``>=``, which holds the row itself): "clamp the log", followed, trained
    on a wrong likelihood (each last event got risk + 16.1, s41f p1)."""
    compare = ast.unparse(strict.node)
    name = strict.name
    zeros = sum((i.health.zero or 0) for i in origin.inputs if i.health is not None and i.health.is_finite)
    summary = (
        f"the {origin.op.type} op got {zeros} zero{'s' if zeros != 1 else ''}: the mask {compare} (line "
        f"{strict.line}) compares {name} with itself strictly, so it leaves each row out of its own set, and the "
        f"row with the batch's {'largest' if _greater_first(strict.node) else 'smallest'} {name} has an empty set, "
        "whose sum is 0"
    )
    # A risk set over survival times is the usual one; other sets get no words about Cox.
    cox = re.search(r"time|dur|surv|^t$", name, re.IGNORECASE) is not None
    what = (
        f"the comparison: {_non_strict(compare)}, so that each row is in its own set"
        + (" (a Cox risk set is {j: t_j >= t_i}, the row itself included)" if cox else "")
        + f"; a clamp of the {origin.op.type.lower()} keeps it finite and trains on a wrong loss"
    )
    evidence = {"op": origin.op.type, "op_name": origin.op.name, "comparison": compare, "zeros": zeros}
    return Cause("op", summary, evidence, _change(strict, what, "op"))


def _greater_first(node: ast.expr) -> bool:
    """Whether a strict comparison of a vector's row view with its column view, summed along a row, is empty at the
    largest value rather than the smallest: ``t[None, :] > t[:, None]`` is t_j > t_i, empty for the largest t_i."""
    if isinstance(node, ast.Compare):
        greater, first = isinstance(node.ops[0], ast.Gt), node.left
    elif isinstance(node, ast.Call) and node.args:
        greater, first = change_line.called_name(node) == "greater", node.args[0]
    else:
        return True
    view = change_line.broadcast_axis(first)
    row_first = view is not None and view[1] == 0
    return greater == row_first


def _non_strict(compare: str) -> str:
    """``a > b`` as ``a >= b`` (``tf.greater`` as ``tf.greater_equal``)."""
    for strict, wide in (
        (" > ", " >= "),
        (" < ", " <= "),
        ("greater(", "greater_equal("),
        ("less(", "less_equal("),
    ):
        if strict in compare:
            return compare.replace(strict, wide, 1)
    return compare


def _zero_into_domain_op(origin: Finding) -> bool:
    """A log/rsqrt/division that got zeros: in float16 those zeros are often finite values that underflowed."""
    op = origin.op.type
    return (op in DOMAIN_OPS or op in DIVISION_OPS) and any(
        i.health is not None and i.health.is_finite and (i.health.zero or 0) > 0 for i in origin.inputs
    )


# Significant bits of the 16-bit floats: below 1 their values lie 2**-bits apart, so two values closer than that
# relative distance are one value, and their difference is exactly 0.
SIGNIFICANT_BITS = {"bfloat16": 8, "float16": 11, "half": 11}
SIXTEEN_BIT = ("float16", "half")  # 16-bit floats of a small range (bfloat16 has float32's)
_SUBTRACTION = re.compile(r"(?:^|/)(?:sub|Sub|subtract)(?:_\d+)?:\d+$")


def _zeros_that_make_it(origin: Finding) -> list[InputHealth]:
    """The finite inputs of a log/rsqrt/division whose zeros make its NaN/Inf: a division's divisor only (its
    numerator's zeros make 0, or 0 / 0 with the divisor's: LayerNorm's ``(x - mean) / tf.sqrt(var)`` of a constant
    row has zeros on both sides, and the divisor's are the cause)."""
    if origin.op.type not in DOMAIN_OPS and origin.op.type not in DIVISION_OPS:
        return []
    candidates = (
        origin.inputs[1:] if origin.op.type in DIVISION_OPS and len(origin.inputs) > 1 else origin.inputs
    )
    return [i for i in candidates if i.health is not None and i.health.is_finite and (i.health.zero or 0) > 0]


def _subtracted_zeros(origin: Finding) -> list[str]:
    """The origin's inputs whose zeros make its NaN/Inf and were made by a subtraction (TensorFlow names them
    ``sub``, ``sub_1``, ``Sub``...): ``1 - p`` that rounded to 0."""
    return [i.name for i in _zeros_that_make_it(origin) if _SUBTRACTION.search(i.name)]


def _cancellation(findings: Findings, context: CauseContext, origin: Finding, dtype: str) -> Cause:
    """A log/rsqrt/division got zeros that a subtraction made in a 16-bit float: the operands were closer than the
    dtype can tell apart (a sigmoid's 0.997 and 1 in bfloat16), so they are one value and their difference 0.
    float32 keeps them apart."""
    bits = SIGNIFICANT_BITS[dtype]
    spacing = 2.0**-bits
    inputs = _subtracted_zeros(origin)
    zeros = sum((i.health.zero or 0) for i in origin.inputs if i.name in inputs and i.health is not None)
    policy, evidence = _sixteen_bit_evidence(
        context, origin, dtype, zeros, significant_bits=bits, subtraction=inputs[0].rsplit(":", 1)[0]
    )
    half = spacing / 2  # round to nearest: values this close to 1 are 1
    summary = (
        f"{origin.op.type} got {zeros} zero{'s' if zeros != 1 else ''} from a subtraction in {dtype}, which keeps "
        f"{bits} significant bits: values within {half:.2g} of 1 (a sigmoid's {1 - half / 2:.4g}) round to 1, so 1 "
        f"minus them is exactly 0{f' under the {policy} policy' if policy else ''}; float32 would keep them apart"
    )
    what = f"compute this in float32 (cast before subtracting), or keep it at least {spacing:.2g} away from 1"
    return Cause("precision", summary, evidence, _origin_change(findings, what, "op"))


def _negative_into_root_or_log(origin: Finding) -> bool:
    """A sqrt, rsqrt or log that got negatives (a value that cannot be negative, a variance, came out so)."""
    return origin.op.type in ("Sqrt", "Rsqrt", "Log") and any(
        i.health is not None and i.health.is_finite and (i.health.neg or 0) > 0 for i in origin.inputs
    )


def _expanded_distance(origin: Finding, site: change_line.Site) -> Cause:
    """A squared distance written ``||x||^2 - 2x.c + ||c||^2`` (an RBF layer, k-means, a prototype network): it
    cancels when x is near c, and rounding leaves it a little below 0, which the sqrt/log after it turns into NaN.
    It was "the sqrt's input: make it positive by construction where the model learns it (tf.nn.softplus(x) +
    1e-6)", and softplus(0) is 0.69: no distance."""
    negatives = sum((i.health.neg or 0) for i in origin.inputs if i.health is not None)
    place = _site_place(site)
    summary = (
        f"the {origin.op.type} op got {negatives} negative value{'s' if negatives != 1 else ''} from a squared "
        f"distance written expanded ({place}): ||x||^2 - 2x.c + ||c||^2 cancels where x is at (or near) c, and "
        "rounding leaves it a little below 0"
    )
    what = _in_the_code_s_own_api(
        origin,
        "clamp the squared distance at 0 before the "
        f"{origin.op.type.lower()} (tf.maximum(d2, 0.0), plus 1e-12 under a sqrt whose gradient is taken), or "
        "compute it from the difference, tf.reduce_sum(tf.square(x[:, None] - c), axis=-1), never negative",
    )
    evidence = {"op": origin.op.type, "op_name": origin.op.name, "negatives_in": negatives, "line": site.line}
    return Cause("op", summary, evidence, _change(site, what, "op"))


def _squares_cancelled(context: CauseContext, origin: Finding, dtype: str, site: change_line.Site) -> Cause:
    """A variance by the one-pass formula, mean(x²) - mean(x)², in a 16-bit float: the two squares are close and
    large, the dtype keeps few bits of them, so their difference loses the variance and can come out negative,
    which the sqrt/rsqrt/log after it turns into NaN. float32 (or mean((x - mean)²), never negative) keeps it."""
    bits = SIGNIFICANT_BITS.get(dtype, 24)
    negatives = sum((i.health.neg or 0) for i in origin.inputs if i.health is not None)
    policy, evidence = _sixteen_bit_evidence(
        context, origin, dtype, 0, significant_bits=bits, negatives_in=negatives, subtraction_line=site.line
    )
    evidence.pop("zeros_in", None)
    place = _site_place(site)
    summary = (
        f"{origin.op.type} got {negatives} negative value{'s' if negatives != 1 else ''} from a difference of squares "
        f"({place}) computed in {dtype}, which keeps {bits} significant bits: two close, large squares "
        f"(mean(x²) and mean(x)² of values far from 0) lose the small variance between them, which comes out "
        f"negative{f' under the {policy} policy' if policy else ''}; "
        + (
            "float32 keeps it"
            if dtype != "float32"
            else "values large beside their spread lose it in float32 too"
        )
    )
    what = (
        "compute the variance as mean(square(x - mean)), which is never negative, or compute it in float32 "
        "(tf.cast(x, 'float32') before squaring)"
        if dtype != "float32"
        else "compute the variance as mean(square(x - mean)) (keras.ops.var, tf.math.reduce_variance), which is "
        "never negative"
    )
    return Cause("precision", summary, evidence, _change(site, what, "op"))


def _sixteen_bit_evidence(
    context: CauseContext, origin: Finding, dtype: str, zeros: int, **more: Any
) -> tuple[str | None, dict[str, Any]]:
    """(the dtype policy, the evidence) of a precision cause where an op got zeros a 16-bit float made."""
    policy = context.dtype_policy or (
        "mixed_float16" if context.model_info.get("loss_scale_optimizer") else None
    )
    evidence: dict[str, Any] = {
        "dtype": dtype,
        **more,
        "op": origin.op.type,
        "op_name": origin.op.name,
        "zeros_in": zeros,
        "dtype_policy": policy,
        "output": origin.health.describe() if origin.health else None,
    }
    return policy, evidence


def _underflow(
    findings: Findings, context: CauseContext, units: list[SourceUnit], origin: Finding, dtype: str
) -> Cause:
    zeros = sum((i.health.zero or 0) for i in _zeros_that_make_it(origin) if i.health is not None)
    policy, evidence = _sixteen_bit_evidence(context, origin, dtype, zeros, dtype_tiny=FLOAT16_TINY)
    std = _std_without_epsilon(findings, origin)
    if std is not None:
        return _std_of_zero_in_sixteen_bits(findings, origin, dtype, zeros, std, policy, evidence)
    summary = (
        f"{origin.op.type} got {zeros} zero{'s' if zeros != 1 else ''} in {dtype}, where values below "
        f"{FLOAT16_TINY:.3g} (an epsilon of 1e-8 too) round to 0"
        f"{f' under the {policy} policy' if policy else ''}"
    )
    raw = _features_in_raw_units(context, units, evidence)
    if raw is not None:
        # Pixels of 0-255 into a softmax: logits 100 apart make probabilities of 0 in float32 too (most of the
        # zeros stayed with the softmax in float32); float16 is not what made them.
        words, change = raw
        summary += (
            f"{words}: values that large saturate (a softmax of logits far apart is 0 in float32 too), so float32 "
            "alone would not end it"
        )
        return Cause("precision", summary, evidence, change)
    logged = [i.name for i in _zeros_that_make_it(origin) if _LOG_OUTPUT.search(i.name)]
    one_plus = (
        change_line.log_of_one_plus_site(units, origin.file, origin.line, origin.cell) if logged else None
    )
    if one_plus is not None:
        # A Bayes-by-backprop sigma as a softplus written by hand, log(1 + exp(rho)) with rho near -7 (s43d p3): in
        # float16 1 + exp(rho) is 1, and the log 0. "Or use an epsilon float16 can hold (>= 1e-4)", followed, left
        # the loss scale at 0; the softplus in float32 is the change.
        bits = SIGNIFICANT_BITS.get(dtype, 11)
        summary += (
            f": the zeros are the log {logged[0]} of 1 + {one_plus.name} ({_site_place(one_plus)}): in {dtype} "
            f"({bits} significant bits) 1 + x is exactly 1 for x below {2.0**-bits:.2g}, so its log is 0"
        )
        softplus = "exp(" in one_plus.name
        what = (
            (
                'compute it in float32: tf.nn.softplus(tf.cast(..., "float32")) of the exp\'s argument'
                if softplus
                else f'compute it in float32: tf.math.log1p(tf.cast({one_plus.name}, "float32"))'
            )
            + ", and keep what divides by it (or takes its log) in float32; an epsilon added after it does not bring the lost values back"
        )
        return Cause("precision", summary, evidence, _change(one_plus, what, "op"))
    summary += "; float32 would keep them apart from 0"
    what = f"compute this in float32, or use an epsilon {dtype} can hold (>= 1e-4)"
    return Cause("precision", summary, evidence, _origin_change(findings, what, "op"))


_LOG_OUTPUT = re.compile(r"(?:^|/)Log(?:_\d+)?:0$")


# A standard deviation's output by its op's name (``layer_norm/Sqrt:0``), and a variance's (``moments/variance``).
_SQRT_OUTPUT = re.compile(r"(?:^|/)Sqrt(?:_\d+)?:0$")


def _std_without_epsilon(findings: Findings, origin: Finding) -> str | None:
    """The name of the standard deviation of zeros a line without an added epsilon divides by (LayerNorm written
    ``(x - mean) / tf.sqrt(var)``) or takes the rsqrt of (``tf.math.rsqrt(variance)``); None otherwise."""
    if _added_constants(str(findings.extra.get("origin_code") or "")):
        return None  # its epsilon underflowed (1e-8 is 0 in float16): `_underflow`'s own words
    if origin.op.type in DIVISION_OPS and len(origin.inputs) == 2:
        divisor = origin.inputs[1]
        return (
            divisor.name
            if _SQRT_OUTPUT.search(divisor.name) and divisor in _zeros_that_make_it(origin)
            else None
        )
    if origin.op.type == "Rsqrt":
        variances = [i.name for i in _zeros_that_make_it(origin) if _VARIANCE_OUTPUT.search(i.name)]
        return variances[0] if variances else None
    return None


def _std_of_zero_in_sixteen_bits(
    findings: Findings,
    origin: Finding,
    dtype: str,
    zeros: int,
    std: str,
    policy: str | None,
    evidence: dict[str, Any],
) -> Cause:
    """A normalization without an epsilon (a ViT's hand-written LayerNorm under mixed_float16) divided by a standard
    deviation of 0. It was "compute this in float32", which did not end it: Keras casts the layer's input to
    float16 first, where a row of near-equal values (a flat image patch) is one value, so its variance is exactly
    0 in float32 too. The epsilon is the change."""
    bits = SIGNIFICANT_BITS.get(dtype, 11)
    summary = (
        f"{origin.op.type} got {zeros} zero{'s' if zeros != 1 else ''} in a "
        f"{'variance' if origin.op.type == 'Rsqrt' else 'standard deviation'} ({std}) in "
        f"{dtype}{f' under the {policy} policy' if policy else ''}, and the line adds no epsilon: a row whose "
        f"values {dtype} cannot tell apart ({bits} significant bits: a flat image patch, a constant feature) has a "
        f"variance of exactly 0, and a variance below {FLOAT16_TINY:.3g} rounds to 0"
    )
    what = (
        f"add an epsilon {dtype} can hold inside the square root, tf.sqrt(var + 1e-3) or tf.math.rsqrt(var + 1e-3) "
        "(keras.layers.LayerNormalization's default epsilon); computing in float32 alone does not end it once the "
        f"input is {dtype}"
    )
    evidence = {**evidence, "standard_deviation": std, "epsilon": None}
    return Cause("precision", summary, evidence, _origin_change(findings, what, "op"))


def _rate_not_finite(context: CauseContext, units: list[SourceUnit], rate: LearningRate) -> Cause:
    """The step's learning rate was Inf or NaN: a schedule returned it (change the schedule), or a constant rate
    was set to it (change the optimizer's line)."""
    at_step = f" at step {context.step}" if context.step is not None else ""
    evidence: dict[str, Any] = {
        "learning_rate": rate.shown(),
        "schedule": rate.schedule,
        "step": context.step,
    }
    change = None
    if rate.schedule is not None:
        name = rate.schedule if not rate.schedule.startswith("<") else "the learning-rate function"
        shown = f"the schedule {name}" if name == rate.schedule else name
        what = f"{name}: it returns {rate.shown()}{at_step}; keep the learning rate finite"
        change, own_line = _schedule_change(units, rate, what)
        where = (
            f" at {place_text(os.path.basename(change.file), change.line, change.cell)}"
            if change is not None and own_line
            else ""
        )
        summary = (
            f"the learning rate was {rate.shown()}{at_step}: {shown} returned it{where}, so "
            "finite gradients made a non-finite update"
        )
    elif (setter := change_line.computed_rate_setter(units)) is not None:
        # A constant rate the program sets as it trains (a LearningRateScheduler's function): that line made it, not
        # the optimizer's construction (whose number is the rate it started from).
        where = place_text(os.path.basename(setter.file), setter.line, setter.cell)
        summary = (
            f"the learning rate was {rate.shown()}{at_step}: {setter.name} at {where} set it, so finite gradients "
            "made a non-finite update"
        )
        change = _change(
            setter,
            f"{setter.name}: it set {rate.shown()}{at_step}; keep the learning rate finite",
            setter.target or "schedule",
        )
        warned = _warning_in_the_function_of(context, units, setter, rate)
        if warned is not None:
            # A poly-decay callback's ``base * np.power(1 - step / total_steps, 0.9)`` past total_steps: NumPy said
            # where the NaN was made, a line above the assign that was named.
            place = _warned_place(warned)
            summary += f'; NumPy warned "{warned.message}" at {place}, where the rate was computed'
            hint = (
                " (a power of a negative base: a polynomial decay's 1 - step / total_steps past its end, when "
                "total_steps is fewer than the steps fit runs; count them as fit does, or clamp the base at 0)"
                if warned.message.endswith(" in power")
                else ""
            )
            change = _warned_change(
                warned,
                f"the rate computed here: NumPy made {rate.shown()} ({warned.message}){hint}; keep it finite",
                setter.target or "schedule",
            )
            evidence["numpy_warning"] = warned.to_json()
    else:
        summary = (
            f"the learning rate was {rate.shown()}{at_step}, so finite gradients made a non-finite update"
        )
        recorded = [str(name) for name in [context.model_info.get("optimizer")] if name]
        site = change_line.optimizer_site(units, recorded)
        if site is not None:
            change = _change(site, f"the learning rate of {site.name}: set a finite one", "optimizer")
    return Cause("op", summary, evidence, change)


def _warning_in_the_function_of(
    context: CauseContext, units: list[SourceUnit], site: change_line.Site, rate: LearningRate
) -> NumpyWarning | None:
    """The first NumPy warning that makes the rate's kind of value (NaN, or Inf) at a line of the function that
    holds `site` (the callback method that assigns the rate), or None."""
    kind = "nan" if math.isnan(rate.value) else "inf"
    for unit in _units_holding(units, site):
        inner = _innermost_function_of(unit, site.line)
        if inner is None:
            return None
        for warning in context.numpy_warnings:
            if (
                warning.makes == kind
                and warning.cell == site.cell
                and os.path.abspath(warning.file) == os.path.abspath(site.file)
                and inner.lineno <= warning.line <= (inner.end_lineno or inner.lineno)
            ):
                return warning
    return None


# An op of a Keras optimizer's update (``cond/adam/Square``, ``adam/Sqrt_3``), by the optimizer's name scope.
_OPTIMIZER_SCOPE = re.compile(
    r"(?:^|/)(?:adam|adamw|adamax|nadam|rmsprop|adagrad|adadelta|adafactor|lion|ftrl|lamb|sgd)(?:_\d+)?/",
    re.IGNORECASE,
)


def _too_large_gradients(findings: Findings) -> list[str]:
    """The gradients the graph re-run found finite but too large to square (|g| > 1.8e19), by name; [] when none."""
    verdicts = (findings.bundle or {}).get("verdicts")
    graph = verdicts.get("graph") if isinstance(verdicts, dict) else None
    large = graph.get("too_large_gradients") if isinstance(graph, dict) else None
    if isinstance(large, list) and all(isinstance(n, str) for n in large):
        return large
    return []


def _overflowed_on_finite_inputs(origin: Finding) -> bool:
    return (
        origin.health is not None
        and bool(origin.health.pos_inf or origin.health.neg_inf)
        and all(i.health is None or i.health.is_finite for i in origin.inputs)
    )


def _gradients_too_large_to_square(context: CauseContext, units: list[SourceUnit], large: list[str]) -> Cause:
    """No op of the step made NaN/Inf, but gradients are finite and too large to square in float32 (|g| > 1.8e19):
    Adam's or RMSprop's second moment would be +Inf (the guard's gate refused the update). The scene named the
    guard's own check of them, an L2Loss in the step's tf.cond, as "the op that overflowed"."""
    shown = ", ".join(large[:3]) + (f" and {len(large) - 3} more" if len(large) > 3 else "")
    unscaled = _unscaled_inputs(context, units)
    summary = (
        f"the step's gradients of {shown} are finite but too large to square in float32 (|g| > 1.8e19): an "
        "optimizer that keeps their squares (Adam, RMSprop) would make them +Inf; gradients this large "
        + (
            "come from unscaled " + _unscaled_text(unscaled)
            if unscaled
            else "point at unscaled inputs or targets, or weights already grown huge"
        )
    )
    evidence: dict[str, Any] = {"too_large_gradients": large[:20]}
    change = _unscaled_change(units, unscaled, None) if unscaled else None
    if unscaled:
        evidence["unscaled_inputs"] = [item.to_json() for item in unscaled]
    return Cause("divergence", summary, evidence, change)


def _rate_negative(context: CauseContext, units: list[SourceUnit], rate: LearningRate) -> Cause:
    """The step's learning rate was negative: a linear decay over fewer steps than training runs (``peak * (1 -
    step / decay_steps)`` with no floor) goes past 0, and from there every update climbs the loss until a value
    overflows. "Lower the rate, or clip the gradients" (the divergence's words) did not help: a lower peak only
    climbs slower."""
    at_step = f" at step {context.step}" if context.step is not None else ""
    was = next(((s, r) for s, r in reversed(rate.earlier) if r > 0), None)
    since = f" (it was {format_number(was[1])} at step {was[0]})" if was is not None else ""
    evidence: dict[str, Any] = {"learning_rate": rate.value, "schedule": rate.schedule, "step": context.step}
    if rate.schedule is not None:
        name = rate.schedule if not rate.schedule.startswith("<") else "the learning-rate function"
        what = (
            f"{name}: it returns {format_number(rate.value)}{at_step}; keep the rate at or above 0 (a floor, "
            "tf.maximum(rate, 0.0)), or decay over as many steps as training runs"
        )
        change, own_line = _schedule_change(units, rate, what)
        where = (
            f" at {place_text(os.path.basename(change.file), change.line, change.cell)}"
            if change is not None and own_line
            else ""
        )
        source = f"{'the schedule ' if name == rate.schedule else ''}{name} returned it{where}"
    else:
        source = "the optimizer was given it"
        recorded = [str(name) for name in [context.model_info.get("optimizer")] if name]
        site = change_line.optimizer_site(units, recorded)
        change = (
            _change(site, f"the learning rate of {site.name}: a positive one", "optimizer")
            if site is not None
            else None
        )
    summary = (
        f"the learning rate was negative, {format_number(rate.value)}{at_step}{since}: {source}, and a negative "
        "rate moves the weights up the gradient, so the loss grows until a value overflows; a lower rate only "
        "delays it"
    )
    return Cause("divergence", summary, evidence, change)


def _schedule_change(units: list[SourceUnit], rate: LearningRate, what: str) -> tuple[Change | None, bool]:
    """(where to change a schedule that returned a non-finite rate, whether that is the recorded line): the recorded
    line in the user's code (a notebook cell's code ran from a file the kernel made: the cell is found by the line's
    text); for a schedule of a library (Keras's `InverseTimeDecay` given a negative rate), the user's call that
    built it."""
    if rate.line is not None and rate.code:
        for unit in units:
            if unit.cell is not None and unit.line(rate.line).strip() == rate.code:
                return Change(unit.file, rate.line, what, cell=unit.cell, target="schedule"), True
    if rate.file and rate.line and os.path.isfile(rate.file) and is_user_file(rate.file):
        return Change(os.path.abspath(rate.file), rate.line, what, target="schedule"), True
    site = change_line.construction_site(units, rate.schedule) if rate.schedule else None
    return (_change(site, what, "schedule") if site is not None else None), False


def _growing_decay(units: list[SourceUnit]) -> tuple[change_line.Site, str, float] | None:
    """(the site, "decay_rate", its value) of a decay schedule written to grow: an ``ExponentialDecay`` whose
    ``decay_rate`` is above 1, an ``InverseTimeDecay`` whose ``decay_rate`` is below 0; the number's own line.
    None when no schedule's call writes one."""
    for unit in units:
        for call in change_line.calls(unit):
            name = change_line.called_name(call)
            if name not in ("ExponentialDecay", "InverseTimeDecay"):
                continue
            given = change_line.keyword(call, "decay_rate") or (call.args[2] if len(call.args) > 2 else None)
            number = change_line.number(given)
            if number is None or not (
                (name == "ExponentialDecay" and number > 1) or (name == "InverseTimeDecay" and number < 0)
            ):
                continue
            assert given is not None
            return change_line.Site(unit, given, name), "decay_rate", number
    return None


def _own_schedule_change(
    context: CauseContext, units: list[SourceUnit], searched: tuple[dict[str, Any], str] | None
) -> Change | None:
    """For a divergence at a rate a schedule of the user's own code returned (a ``LearningRateSchedule`` subclass,
    its ``__call__`` line recorded in the bundle): that line, with the rate it gave and a lower one. None for a
    constant rate or a library's schedule (their line is the optimizer's or the schedule's construction)."""
    rate = context.learning_rate
    if (
        rate is None
        or rate.schedule is None
        or rate.schedule.startswith("<")
        or not rate.finite
        or rate.value <= 0
    ):
        return None
    at_step = f" at step {context.step}" if context.step is not None else ""
    advice = searched[1] if searched else f"try {format_number(rate.value / 10)}"
    what = (
        f"the learning rate {rate.schedule} returns, {format_number(rate.value)}{at_step}: lower or cap it "
        f"({advice}), or clip the gradients"
    )
    rising = rate.rising()
    if rising:
        # A decay written upside down (``sqrt(step / warmup)``) or a warm-up with no end: the rate the run died
        # at is where the schedule was going, and a lower start only puts the failure off.
        shown = ", ".join(f"{format_number(r)} at step {s}" for s, r in rising)
        what = (
            f"the learning rate {rate.schedule} returns was still rising, {format_number(rate.value)}{at_step} "
            f"({shown}): a schedule whose rate keeps growing (a decay written upside down?); make it fall after "
            f"its warm-up, or cap it ({advice}), or clip the gradients"
        )
    change, own_line = _schedule_change(units, rate, what)
    peak = change_line.schedule_peak_site(units, rate.schedule, rate.value) if not rising else None
    if own_line and peak is not None:
        # A warm-up to a peak 100x too high (``BASE_LR = 1e1`` for 1e-1): the schedule's own lines are right; the
        # peak given where it is built is what to change.
        site, keyword, value = peak
        what = (
            f"the peak {keyword}={format_number(value)} given to {rate.schedule}: it returned "
            f"{format_number(rate.value)}{at_step}; lower the peak ({advice}), or clip the gradients"
        )
        return _change(site, what, "schedule")
    return change if own_line else None


def _rate_in_a_named_config(
    context: CauseContext, searched: tuple[dict[str, Any], str] | None
) -> tuple[Change, float] | None:
    """(the change, the rate) at the one line of the config files the run names on its command line (``--config
    configs/exp2.json``) that sets the constant rate the failing step used; None otherwise."""
    used = context.learning_rate
    if used is None or not used.finite or used.schedule is not None or not used.value > 0:
        return None
    lines = change_line.rate_lines_in(change_line.config_files([], context.argv, context.cwd), used.value)
    if len(lines) != 1:
        return None
    path, line = lines[0]
    advice = searched[1] if searched else f"try {format_number(used.value / 10)}"
    what = f"learning rate {format_number(used.value)}: {advice}, or clip the gradients"
    return Change(file=path, line=line, what=what, target="config"), used.value


def _config_change(context: CauseContext, site: change_line.Site, rate: float, what: str) -> Change | None:
    """The one line of a config file beside the program (or beside the optimizer's file) that sets `rate`."""
    folders = list(
        dict.fromkeys(os.path.dirname(os.path.abspath(f)) for f in (context.entry_script, site.file) if f)
    )
    lines = change_line.config_rate_lines(folders, rate)
    if len(lines) != 1:
        return None  # none, or several files or keys with that rate: the optimizer's line stays
    path, line = lines[0]
    place = _site_place(site)
    return Change(file=path, line=line, what=f"{what} (read by {place})", target="config")


def _attribute_default_change(
    units: list[SourceUnit], site: change_line.Site, rate: float, what: str, edited_too: bool = True
) -> Change | None:
    """The class attribute default the optimizer's line reads its rate from (`change_line.attribute_default_site`:
    ``SGD(cfg.learning_rate)`` and a dataclass ``learning_rate: float = 1e-4``), as the change; None without one."""
    default = change_line.attribute_default_site(units, site, rate, edited_too=edited_too)
    if default is None:
        return None
    place = _site_place(site)
    return _change(default, f"{what} (read by {place} as {default.name})", "config")


def _site_target(site: change_line.Site) -> str:
    if site.target:
        return site.target
    if site.name in change_line.SCHEDULES:
        return "schedule"
    return "compile" if site.name.lower() == site.name else "optimizer"


def _rate_site(
    context: CauseContext, units: list[SourceUnit], recorded: list[str]
) -> change_line.Site | None:
    """Where the learning rate is set: the recorded optimizer's construction, or for a step that updates by hand
    (no optimizer recorded) where its rate is given."""
    if not any(recorded) and (context.step_function or {}).get("updates_by_hand"):
        return change_line.hand_update_site(units) or change_line.optimizer_site(units, [])
    used = context.learning_rate
    constant = used.value if used is not None and used.finite and used.schedule is None else None
    return change_line.optimizer_site(units, [name for name in recorded if name], constant)


def _update_blew_up(context: CauseContext, units: list[SourceUnit], origin: Finding) -> Cause:
    """The step read weights that were non-finite already: an earlier update wrote them (finite gradients, an
    update too large), which is the optimizer's doing, so the line to change is its construction. (When no update
    of this fit ran before, `classify` has said they came in so: `_started_from_bad_weights`.)"""
    growth = trend.growth(context.history)
    if growth is not None:
        return _divergence(context, units, origin, growth)
    if (fast := _fast(context)) is not None:
        return _divergence(context, units, origin, *fast)
    recorded = [
        str(context.model_info.get("optimizer") or ""),
        *[str(name) for name in context.model_info.get("optimizers") or []],
    ]
    site = _rate_site(context, units, recorded)
    evidence: dict[str, Any] = {
        "op": origin.op.type,
        "op_name": origin.op.name,
        "optimizer": context.model_info.get("optimizer"),
        "weights_non_finite": True,
        "output": origin.health.describe() if origin.health else None,
    }
    rate_text, change = "", None
    if site is not None:
        evidence["learning_rate"] = site.learning_rate
        evidence["optimizer_line"] = {"file": site.file, "line": site.line, "call": site.name}
        if site.cell is not None:
            evidence["optimizer_line"]["cell"] = site.cell
        if site.learning_rate is not None:
            rate_text = f" at learning rate {format_number(site.learning_rate)}"
            what = (
                f"learning rate {format_number(site.learning_rate)} ({site.name}): try "
                f"{format_number(site.learning_rate / 10)}, or clip the gradients"
            )
        else:
            what = f"the learning rate of {site.name}: lower it, or clip the gradients"
        change = _change(site, what, _site_target(site))
    summary = (
        f"the run diverged{rate_text}: an update made the weights non-finite (the step read them through "
        f"{origin.op.type}), too fast for the history to show a trend"
    )
    return Cause("divergence", summary, evidence, change)


def _article(word: str) -> str:
    """ "an" before an op name read with a vowel sound (an Exp, an AddV2), else "a" (a MatMul, a Log)."""
    return "an" if word[:1].upper() in "AEIOU" else "a"


def _op(
    findings: Findings,
    origin: Finding,
    growth: trend.Trend | None,
    overflow: bool,
    rows: BadRows | None = None,
    first_steps: bool = False,
    rose: trend.Trend | None = None,
    first_step: int | None = None,
    weight: DomainWeight | None = None,
    exponent: ExponentWeight | None = None,
    units: list[SourceUnit] | None = None,
) -> Cause:
    inputs = ", ".join(f"{i.name}: {i.health.describe()}" for i in origin.inputs if i.health is not None)
    evidence: dict[str, Any] = {
        "op": origin.op.type,
        "op_name": origin.op.name,
        "overflow": overflow,
        "output": origin.health.describe() if origin.health else None,
        "inputs": inputs,
    }
    shown = growth or rose
    if shown is not None:
        evidence["history"] = shown.to_json()
    what = (
        f"the {origin.op.type} op: keep its inputs in its domain" if not overflow else _keep_in_range(origin)
    )
    article = _article(origin.op.type)
    summary = (
        f"{article} {origin.op.type} op made NaN/Inf from finite inputs ({inputs or 'inputs not recorded'})"
    )
    if any(i.health is not None and not i.health.is_finite for i in origin.inputs):
        # Infinities came in (a -inf mask constant) and this op turned them into NaN (a softmax over -inf only).
        summary = (
            f"{article} {origin.op.type} op made NaN from inputs that held infinities but no NaN ({inputs})"
        )
    if overflow:
        before = _first_steps_words(first_step) if first_steps else _before_words(rose)
        summary = f"{article} {origin.op.type} op overflowed on finite inputs {before}"
        if origin.op.type == "Exp":
            # A hand-written softmax or log-sum-exp (logits / temperature): no growth needed, exp(89) is Inf.
            summary = f"an Exp op overflowed float32 (exp(x) is Inf for x > 88.7) on finite inputs {before}"
            what = (
                "the exp: bound its input (tf.clip_by_value, or a tanh), or, in a softmax or a log-sum-exp, "
                "compute it stably (tf.nn.softmax, tf.reduce_logsumexp or a loss with from_logits=True subtract "
                "the largest value first)"
            )
            code = str(findings.extra.get("origin_code") or "")
            temperature = _temperature_of_exp(origin, code)
            if _LOG_SUM_EXP.search(code.replace(" ", "")):
                # ``tf.math.log(tf.reduce_sum(tf.exp(logits), axis=-1))`` on the origin's line: say its one fix.
                what = (
                    "a log-sum-exp written out: tf.reduce_logsumexp(x, axis=...) computes log(sum(exp(x))) "
                    "without the overflow (it subtracts the largest value first)"
                )
            elif _LOG_ONE_PLUS_EXP.search(code.replace(" ", "")):
                # A soft-margin triplet loss's ``log(1 + exp(d))``: a clip or a tanh, followed, changes the loss and
                # stops the hardest triplets' gradient; softplus is the same function computed stably.
                what = (
                    "log(1 + exp(x)) written out: tf.nn.softplus(x) (keras.ops.softplus) is the same function, "
                    "computed without the overflow; a clip or a tanh of x changes the loss"
                )
            elif (scaled := change_line.exp_of_a_large_variable(units or [])) is not None:
                # CLIP's learned scale kept as 1 / 0.07 and read as tf.exp(logit_scale): every logit is multiplied by
                # 1.6e6. "Compute the softmax stably", followed, trained nothing at that scale (s41b p6).
                summary = (
                    f"an Exp op overflowed float32 (exp(x) is Inf for x > 88.7) on finite inputs {before}; the code "
                    f"reads {scaled.name} through an exp, and it starts at {scaled.value:.4g} "
                    f"({_site_place(scaled.site)}): exp({scaled.value:.4g}) = {math.exp(scaled.value):.3g} scales "
                    "what it multiplies"
                )
                what = (
                    f"the start of {scaled.name}: it is read as exp({scaled.name}), so keep its log here "
                    f"(tf.Variable(np.log({ast.unparse(scaled.site.node)})), as CLIP does), and clip the exp (CLIP caps "
                    "it at 100)"
                )
                return Cause("op", summary, evidence, _change(scaled.site, what, "op"))
            elif temperature is not None:
                # NT-Xent at a temperature of 0.005: L2-normalized embeddings (similarities at most 1) were told
                # "unscaled inputs or initial weights"; the temperature makes the exp's input large.
                name = temperature
                similarity = re.search(r"sim|cos|matmul|@|\bdot\b|embed", code, re.IGNORECASE) is not None
                summary = (
                    f"an Exp op overflowed float32 (exp(x) is Inf for x > 88.7): its input is divided by {name}, and "
                    + (
                        "a similarity of 1 (normalized embeddings) over a temperature below 1/88.7 = 0.0113 passes it"
                        if similarity
                        # A classifier's tempered softmax (logits / 0.02, s39c har): no similarity, no SimCLR.
                        else "logits over a temperature that small pass it (logits of 2 over 0.02 are 100)"
                    )
                )
                what = (
                    f"the exp of {'similarities' if similarity else 'logits'} / {name}: compute the softmax stably "
                    "(tf.nn.softmax_cross_entropy_with_logits, or tf.reduce_logsumexp, subtract the largest value "
                    f"first), and check the value of {name} "
                    + (
                        "(SimCLR's temperature is 0.1 to 0.5)"
                        if similarity
                        else "(a temperature that small makes the softmax nearly one-hot)"
                    )
                )
            elif exponent is not None:
                evidence["exponent_weight"] = {"path": exponent.path, "value": exponent.value}
                summary, what = _exponent_weight_words(exponent, first_step)
        elif origin.op.type == "MatrixDeterminant":
            # A product of n eigenvalues: a 64 x 64 matrix whose eigenvalues average 4 has det 4**64 = 3e38, past
            # float32, with every weight of moderate size (a flow's log|det W|).
            summary = (
                "a MatrixDeterminant op overflowed float32: det is the product of the matrix's eigenvalues, past "
                f"3.4e38 for a large matrix with moderate weights {before}"
            )
            what = (
                "the determinant: where its log is wanted (a flow's log|det|), tf.linalg.slogdet(W) gives the log "
                "of |det| without forming det (or a triangular / LU parametrisation whose log-det is a sum of logs)"
            )
        elif (
            summed := _summed_exp_words(
                findings,
                origin,
                # A sum of exps overflows at any weights once its terms are many or large (a CRF's forward pass over
                # a long sentence): no guess at unscaled inputs or a rate, only when.
                (f"at step {first_step}" if first_step else "at the run's first step")
                if first_steps
                else before,
            )
        ) is not None:
            summary, what = summed
    if (
        overflow
        and first_steps
        and not first_step
        and (huge := _model_output_huge_at_start(origin, units or []))
    ):
        return huge
    if not overflow and (not_a_cosine := _acos_of_no_cosine(origin, units or [])) is not None:
        return not_a_cosine
    if not overflow and (uncounted := _sampled_label_never_counted(origin, units or [])) is not None:
        return uncounted
    if not overflow and weight is not None and weight.read_line is not None:
        gone = _variable_gone_negative(findings, origin, weight, units or [])
        if gone is not None:
            return gone
    words = None if overflow else _out_of_domain_words(origin, weight, findings)
    if words is None:
        words = _matrix_words(origin)
    if words is None and not overflow:
        words = _zero_times_infinity_words(origin)
    if words is None and not overflow:
        words = _empty_mean_words(origin)
    if words is not None and origin.op.type == "Log":
        words = (
            _x_log_x_words(findings, origin, words)
            or _underflowed_exp_words(findings, origin)
            or _log_of_an_activation_words(findings, origin, words)
            or words
        )
    elif words is not None and origin.op.type in DIVISION_OPS:
        words = (
            _divisor_of_underflowed_exps(findings, origin)
            or _divisor_of_a_relu_words(findings, words)
            or words
        )
    elif words is not None and origin.op.type == "Pow" and "to a negative power" in words[0]:
        # A ReLU's zeros raised to a negative power (a Tweedie mean on a ReLU output layer): the graph words (self-
        # loops, Kipf's tf.where) fit no such model, and the tf.where they offered is a gradient trap there.
        words = _divisor_of_a_relu_words(findings, words, "base") or words
    if words is not None:
        summary, what = words
        if origin.op.type in DIVISION_OPS:
            what = _division_on_its_line(str(findings.extra.get("origin_code") or ""), what)
            summary = _divisor_as_written(findings, origin, summary)
            what = _masked_pooling_of_nothing(origin) or what
    if (zeros := _sqrt_differentiated_at_zero(origin)) is not None:
        # The forward value is a harmless 0; only its gradient is not, which the generic words do not say.
        evidence["zeros_in"] = zeros
        summary = (
            f"the step differentiated sqrt at 0 ({zeros} zero{'s' if zeros != 1 else ''} in its value): "
            "sqrt(0) is 0, but its slope there is infinite, so the backward pass made NaN/Inf"
        )
        what = "the sqrt: add a small epsilon inside it (tf.sqrt(x + 1e-12)), so the step never takes it at 0"
        if _ONE_MINUS_IN_A_SQRT.search(_origin_source_line(origin).replace(" ", "")):
            # ArcFace's sin = sqrt(1 - cos ** 2): a cosine rounds to 1.0 (slope infinite) or to 1.0000001 (NaN), and
            # ``1.0 - x + 1e-12`` in the compiled step folds to ``1.0 - x`` (1.0 + 1e-12 is 1.0 in float32), so the
            # epsilon, followed, changed nothing there. A floor survives both.
            what = (
                "the sqrt of 1 - x: floor it, tf.sqrt(tf.maximum(1.0 - x, 1e-7)) (or clip the cosine to [-1 + 1e-7, "
                "1 - 1e-7] before): the compiled step can fold an epsilon added to 1 - x into the 1 (1.0 + 1e-12 "
                "is 1.0 in float32), and x can round past 1"
            )
        elif _line_calls_a_norm(origin):
            # tf.norm / keras.ops.norm take no epsilon: the sqrt is inside them, so the fix writes the norm out.
            what = (
                "the norm: it has no epsilon to add, so write it out with one inside the sqrt, "
                "tf.sqrt(tf.reduce_sum(tf.square(x), axis=-1) + 1e-12), so the step never takes it at 0"
            )
    elif (zeros := _atan2_differentiated_at_the_origin(origin)) is not None:
        # atan2's gradient is x / (x**2 + y**2): 0 / 0 at (0, 0), a phase of a zero-padded or silent bin.
        evidence["zeros_in"] = zeros
        summary = (
            f"the step differentiated atan2(y, x) at (0, 0) ({zeros} point{'s' if zeros != 1 else ''}: a phase of "
            "a zero-padded or silent bin, a direction of a zero vector): atan2's slope there is 0 / 0, so the "
            "backward pass made NaN while the loss stayed finite"
        )
        what = (
            "the atan2's inputs: keep them off (0, 0) before it, tf.math.atan2(y, x + 1e-7), or leave those points "
            "out of the inputs (x = tf.where(magnitude > 0, x, 1.0)); a tf.where on the atan2's result still "
            "passes the NaN gradient"
        )
    elif (zeros := _fractional_power_differentiated_at_zero(origin)) is not None:
        # pow(x, 0.5) (a focal loss's (1 - p) ** gamma with gamma < 1): the same slope as sqrt's at 0.
        evidence["zeros_in"] = zeros
        summary = (
            f"the step differentiated a power x ** p with p < 1 at x = 0 ({zeros} zero{'s' if zeros != 1 else ''} "
            "in its base): the power is 0 there, but its slope p * x ** (p - 1) is infinite, so the backward pass "
            "made NaN/Inf"
        )
        what = "the power: keep its base above 0 (tf.pow(tf.maximum(x, 1e-7), p)), so the step never takes it at 0"
    if origin.op.type in CTC_OPS and origin.health is not None and (origin.health.pos_inf or 0) > 0:
        # CTC's +inf is no overflow: the label has no alignment in the frames the model gives it.
        summary = (
            f"{origin.op.type} is +inf for a label no alignment fits: a label needs at least as many logit frames "
            "as its length plus its repeated neighbours (a blank between each pair), and the model gives fewer"
        )
        what = (
            "the labels or the frames: leave out labels longer than the frames allow (or downsample the time axis "
            "less), or mask such rows' loss (tf.where(tf.math.is_finite(loss), loss, 0.0))"
        )
    what = _in_the_code_s_own_api(origin, what)
    if rows is not None:
        # No value of those rows stands out, but the user can look at the records themselves.
        evidence["bad_rows"] = rows.to_json()
        summary += f", in {rows.rows_text()} of the batch only"
        variance = _rsqrt_of_a_variance(origin)
        if _empty_records_only(rows) and (_division_words(origin) or variance):
            records = ", ".join(o.record_text() for o in rows.outliers)
            handles = "the normalization" if variance else "the division"
            summary += f" ({records}: empty records, valid input {handles} must handle)"
            if "where the data is read" not in what:
                what += "; or leave empty records out where the data is read"
    fed = _loss_input_layer_words(findings, origin, overflow)
    if fed is not None:
        evidence["loss_input_layer"] = findings.extra["loss_input_layer"]
        summary += fed[0]
        return Cause("op", summary, evidence, fed[1])
    return Cause("op", summary, evidence, _origin_change(findings, what, "op"))


def _keep_in_range(origin: Finding) -> str:
    """The change for an overflow no more is known of: what `_op` says when no rule names the values' source."""
    return f"the {origin.op.type} op: keep its values in range"


# Names a loss gives the regression targets it reads (``y``, ``yb``, ``y_true``, ``targets``, ``batch_labels``).
_TARGETS_NAME = re.compile(
    r"^(?:y|yb|ys|y_?(?:true|batch|b|train|tr|obs|target|targets|label|labels)|(?:batch|true|train)_?y"
    r"|targets?|labels?|\w+_(?:true|targets?|labels?))$"
)
# A function whose name says it computes a loss: ``nig_nll``, ``gaussian_nll``, ``neg_log_likelihood``, ``elbo``.
_LOSS_FUNCTION_NAME = re.compile(r"loss|nll|likelihood|elbo", re.IGNORECASE)


def _targets_names(units: list[SourceUnit], batch_name: str) -> set[str]:
    """The names the user's code gives the targets: `batch_name` (the batch part found unscaled), names like
    `_TARGETS_NAME`, and the second name a step unpacks from its batch (``x, y = data``, ``inputs, prices = batch``,
    ``keras.utils.unpack_x_y_sample_weight(data)``)."""
    names = {batch_name}
    for unit in units:
        for node in ast.walk(unit.tree):
            if isinstance(node, ast.Name) and _TARGETS_NAME.match(node.id):
                names.add(node.id)
            if not isinstance(node, ast.Assign) or len(node.targets) != 1:
                continue
            target, value = node.targets[0], node.value
            unpacks_a_batch = isinstance(value, ast.Name) or (
                isinstance(value, ast.Call) and called_name(value) == "unpack_x_y_sample_weight"
            )
            if (
                unpacks_a_batch
                and isinstance(target, (ast.Tuple, ast.List))
                and len(target.elts) >= 2
                and isinstance(target.elts[1], ast.Name)
            ):
                names.add(target.elts[1].id)
    return names


def _reads_any(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


def _loss_taking_the_targets(units: list[SourceUnit], origin: Finding, batch_name: str) -> str | None:
    """How to name the user's loss that holds the origin's line when that loss takes the targets: "the loss
    nig_nll" (a function of the user's that compile is given, or that is called with the targets into a loss, or
    whose name says it is one), "the loss" (a loss assigned on the origin's line from the targets); None when the
    origin is not in a loss of the user's that takes them. Keras's own losses are left out: their float32 values
    of targets in raw units stay in range (an MSE of 3e5 is 1e11), so an overflow there is the outputs'."""
    names = _targets_names(units, batch_name)
    for unit in _units_holding(units, origin):
        holding = [
            node
            for node in ast.walk(unit.tree)
            if isinstance(node, ast.stmt)
            and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and node.lineno <= origin.line <= (node.end_lineno or node.lineno)
        ]
        statement = min(holding, key=lambda n: (n.end_lineno or n.lineno) - n.lineno) if holding else None
        if (
            isinstance(statement, (ast.Assign, ast.AugAssign, ast.AnnAssign))
            and any(_LOSS_FUNCTION_NAME.search(name) for name in change_line.assigned_names(statement))
            and _reads_any(statement, names)
        ):
            return "the loss"
        function = _innermost_function_of(unit, origin.line)
        if function is None:
            continue
        named_a_loss = _LOSS_FUNCTION_NAME.search(function.name) is not None
        for other in units:
            for node in ast.walk(other.tree):
                if isinstance(node, ast.Call) and called_name(node) == "compile":
                    given = keyword(node, "loss")
                    if isinstance(given, (ast.Name, ast.Attribute)) and ast.unparse(given).split(".")[-1] == (
                        function.name
                    ):
                        return f"the loss {function.name}"  # compile gives it y_true first
                if not isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Expr)):
                    continue
                # A call into a loss: of a function named as one (``return nig_nll(...)``), or assigned to a loss
                # (``loss = tf.reduce_mean(nig_nll(y, gamma, nu, alpha, beta) + ...)``), given the targets.
                into_a_loss = named_a_loss or (
                    isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                    and any(_LOSS_FUNCTION_NAME.search(name) for name in change_line.assigned_names(node))
                )
                if (
                    into_a_loss
                    and node.value is not None
                    and any(
                        isinstance(call, ast.Call)
                        and called_name(call) == function.name
                        and any(_reads_any(a, names) for a in [*call.args, *(k.value for k in call.keywords)])
                        for call in ast.walk(node.value)
                    )
                ):
                    return f"the loss {function.name}"
    return None


def _overflow_in_a_loss_of_unscaled_targets(
    origin: Finding, context: CauseContext, cause: Cause, units: list[SourceUnit]
) -> Cause | None:
    """An overflow, named by no other rule, in a loss that takes regression targets in raw units (house prices of
    3e5 in dollars into an evidential regression's Normal-Inverse-Gamma NLL, s43d p7): errors that large drive the
    parameters the model predicts for them to extremes (its nu toward 0, where ``pi / nu``'s gradient overflowed at
    step 35). "Keep its values in range" at the division, followed as ``pi / (nu + 1e-6)``, still went NaN by epoch
    3; standardizing y trained (loss 0.47 to 0.16). The line is where the targets are made or fed. None otherwise."""
    if (
        not cause.evidence.get("overflow")
        or cause.change is None
        or cause.change.what != _keep_in_range(origin)
    ):
        return None
    targets = next(
        (u for u in _unscaled_inputs(context, units) if u.role == "targets" and u.first_to_change), None
    )
    if targets is None:
        return None
    loss = _loss_taking_the_targets(units, origin, targets.name)
    if loss is None:
        return None
    site = change_line.fit_array_site(units, "y")
    if site is not None and change_line.targets_predicted_by_the_model(site):
        return (
            None  # a Q-learning target bootstrapped from the model: the rewards' scale and a target network
        )
    rows = BadRows.from_json(cause.evidence.get("bad_rows"))
    rows_text = rows.rows_text() if rows is not None else None
    # Every row's error is of the targets' size: the rows that overflowed first are no records to look at.
    head = cause.summary.replace(f", in {rows_text} of the batch only", "") if rows_text else cause.summary
    summary = (
        f"the targets are in raw units ({targets.describe()}) and {loss} takes them: errors of that size push "
        f"its terms, and the values the model predicts for them, to extremes; {head}; an epsilon or a clip at "
        "the op leaves the targets' scale as it is"
    )
    undo = (
        "and undo it on the predictions (prediction * std + mean; a predicted standard deviation times std, a "
        "variance times std**2)"
    )
    if site is not None:
        name = site.name
        what = (
            f"scale the targets ({targets.describe()}): standardize {name} before fit, {name} = ({name} - "
            f"{name}.mean()) / {name}.std() (keep the mean and std), {undo}"
        )
        change = _change(site, what, "data")
    elif (feed := change_line.loop_feed_site(units, context.step_function)) is not None:
        what = (
            f"scale the targets ({targets.describe()}): standardize them, (targets - mean) / std with the training "
            f"targets' mean and std, before {feed.name} is made from them, {undo}"
        )
        change = _change(feed, what, "data")
    else:
        what = (
            f"scale the targets ({targets.describe()}): standardize them where they are made, (targets - mean) / "
            f"std with the training targets' mean and std, {undo}"
        )
        change = dataclasses.replace(cause.change, what=what, target="data")
    evidence = {**cause.evidence, "unscaled_inputs": [targets.to_json()], "loss_of_targets": loss}
    return Cause("data", summary, evidence, change)


def _model_output_huge_at_start(origin: Finding, units: list[SourceUnit]) -> Cause | None:
    """An overflow in Keras's compiled loss at the run's first step, before any update, with no unscaled input to
    blame: the model's own forward pass made values past float32's range. A neural ODE's RK4 rollout of 40 steps at a
    step the stiff dynamics cannot take (rate * dt = 4) grew 5x a step to 1e28 (s42d p3); "the Square op: keep its
    values in range", at the fit line, named nothing to change. The model's ``call`` is the place."""
    if not origin.op.name.startswith("compile_loss/"):
        return None
    classes = [
        (unit, node)
        for unit in units
        for node in ast.walk(unit.tree)
        if isinstance(node, ast.ClassDef)
        and any(ast.unparse(base).split(".")[-1] == "Model" for base in node.bases)
        and any(isinstance(f, ast.FunctionDef) and f.name == "call" for f in node.body)
    ]
    if len(classes) != 1:
        return None
    unit, model = classes[0]
    call = next(f for f in model.body if isinstance(f, ast.FunctionDef) and f.name == "call")
    looped = any(isinstance(n, (ast.For, ast.While)) for n in ast.walk(model))
    # A def has no expression node: a marker at its line stands for it.
    site = change_line.Site(unit, ast.Name(id="call", lineno=call.lineno, col_offset=0), f"{model.name}.call")
    summary = (
        f"{_article(origin.op.type)} {origin.op.type} op of the loss overflowed at the run's first step, before any "
        f"update: the output of {model.name} is already past float32's range there, so its own call() "
        f"({_site_place(site)}) makes values that large from the batch"
        + (", in a loop of steps (a rollout, an ODE solver)" if looped else "")
    )
    what = f"{model.name}.call(): what it computes grows past float32 before any training" + (
        "; in a rollout or a hand-written ODE solver, a step too large for the dynamics makes each step "
        "multiply the state (an explicit solver needs rate * dt small: a smaller dt, more substeps, or fewer "
        "steps)"
        if looped
        else "; bound the values it makes (a tanh or clip of a state that can grow, a scaled exp)"
    )
    evidence = {"op": origin.op.type, "op_name": origin.op.name, "model": model.name, "looped": looped}
    return Cause("op", summary, evidence, _change(site, what, "model"))


# TensorFlow's sampled losses take log(expected count) of the true labels and the samples inside their own scope.
_SAMPLED_LOSS_SCOPE = re.compile(r"(?:^|/)(?:sampled_softmax_loss|nce_loss|compute_sampled_logits)(?:_\d+)?/")


def _sampled_label_never_counted(origin: Finding, units: list[SourceUnit]) -> Cause | None:
    """A Log inside tf.nn.sampled_softmax_loss (or nce_loss) of a 0: a true label's expected count, from a
    fixed_unigram_candidate_sampler given counts that hold 0 for it (counts taken over part of the corpus, s42b p6).
    "Keep the Log's input in the domain" named a log inside TensorFlow that no line of the user's takes; the counts
    given to the sampler are the change."""
    if origin.op.type != "Log" or not _SAMPLED_LOSS_SCOPE.search(origin.op.name):
        return None
    zeros = sum((i.health.zero or 0) for i in origin.inputs if i.health is not None and i.health.is_finite)
    site = change_line.sampler_counts_site(units)
    if not zeros or site is None:
        return None
    summary = (
        f"the Log inside TensorFlow's sampled loss took {zeros} expected count{'s' if zeros != 1 else ''} of 0: it "
        f"subtracts log(expected count) from each true label's logit, and the counts given to the sampler "
        f"({site.name}, {_site_place(site)}) hold 0 for a label the batch has; log(0) is -inf"
    )
    what = (
        f"the sampler's counts ({site.name}): every class a label can be needs a count above 0; count the whole "
        f"corpus, or add 1 to every count ([c + 1 for c in counts])"
    )
    evidence = {"op": origin.op.type, "op_name": origin.op.name, "zeros": zeros, "counts": site.name}
    return Cause("data", summary, evidence, _change(site, what, "data"))


# Past this share of an acos's values, no float32 rounding of unit vectors' cosines put them outside [-1, 1].
_ROUNDING_SHARE = 0.01


def _acos_of_no_cosine(origin: Finding, units: list[SourceUnit]) -> Cause | None:
    """An acos (asin) NaN at many values: float32 rounding of a cosine of unit vectors puts a few just past +-1,
    not 46% (an ArcFace head that normalizes its class weights and not the embedding, s42e p1). "Clip it inside
    (-1, 1)", followed, trained with the margin frozen on every clipped logit: the product's unnormalized side is
    the change."""
    if origin.op.type not in ("Acos", "Asin") or origin.health is None or not origin.health.size:
        return None
    nan = origin.health.nan or 0
    if nan <= 2 or nan < _ROUNDING_SHARE * origin.health.size:
        return None
    name = origin.op.type.lower()
    share = nan / origin.health.size
    summary = (
        f"the {origin.op.type} op made NaN at {nan} of {origin.health.size} values ({share:.0%}): {name} is NaN "
        "past +-1, and float32 rounding of a cosine of unit vectors puts a few values just outside, not this many: "
        "its input is no cosine"
    )
    what = (
        f"the {name}'s input: normalize both vectors before their product (tf.nn.l2_normalize(x, axis=-1)), so "
        "that it is a cosine; a clip inside (-1, 1) only guards against rounding, and here it would freeze the "
        "clipped values (no gradient through the clip)"
    )
    evidence: dict[str, Any] = {"op": origin.op.type, "op_name": origin.op.name, "nan": nan}
    product = change_line.cosine_product(units, origin.file, origin.line, origin.cell)
    if product is None or not product.unnormalized:
        change = Change(file=origin.file, line=origin.line, what=what, cell=origin.cell, target="op")
        return Cause("op", summary, evidence, change)
    sides = " and ".join(product.unnormalized)
    done = f" ({', '.join(product.normalized)} is normalized)" if product.normalized else ""
    summary += f": the product {ast.unparse(product.site.node)} (line {product.site.line}) takes {sides} unnormalized{done}"
    what = (
        f"the product's {sides}: normalize {'it' if len(product.unnormalized) == 1 else 'them'} before it "
        f"(tf.nn.l2_normalize({product.unnormalized[0]}, axis=-1)), so that the product is a cosine in [-1, "
        "1]; a clip inside (-1, 1) only guards against rounding, and here it would freeze the clipped values"
    )
    evidence["product"] = ast.unparse(product.site.node)
    return Cause("op", summary, evidence, _change(product.site, what, "op"))


def _variable_gone_negative(
    findings: Findings, origin: Finding, weight: DomainWeight, units: list[SourceUnit]
) -> Cause | None:
    """A log (lgamma, sqrt, pow) whose negatives came from a learned variable that started positive and a finite
    update carried below 0, through arithmetic (a negative binomial's ``alpha = tf.Variable(0.5)`` read as
    ``r = 1 / alpha``, at -0.0012 after 453 SGD steps). "Keep the log's input positive", followed, trained a
    dispersion of 135 against a true 0.02 (s41f p3): the variable is what to change, where it is made."""
    read_code = ""
    if origin.file and weight.read_line is not None:
        lines = _lines_of(origin.file, origin.cell)
        if 0 < weight.read_line <= len(lines):
            read_code = lines[weight.read_line - 1]
    made = change_line.positive_variable_start(units, weight.path, read_code)
    measured = [i for i in origin.inputs if i.health is not None and i.health.neg]
    if made is None or not measured or measured[0].health is None:
        return None
    negative = measured[0].health.neg or 0
    name = made.name
    start = ast.unparse(made.site.node)
    who = "the optimizer" if weight.by_optimizer else "the step"
    summary = (
        f"the {origin.op.type} op got {negative} negative value{'s' if negative != 1 else ''} in its input "
        f"{measured[0].name}, from the variable {name} ({weight.path}, line {weight.read_line} reads it): it started "
        f"at {start} and is {_fmt(weight.smallest)} now; {who}'s finite updates carried it below 0, where the "
        "quantity it stands for (a dispersion, a scale, a variance) has no meaning"
    )
    what = (
        f"the variable {name}: keep it positive by construction: learn its log (log_{name} = "
        f"tf.Variable(np.log({start})), and {name} = tf.exp(log_{name}) where the step reads it), or read "
        f"tf.nn.softplus of a raw variable; clipping the {origin.op.type}'s input keeps the step finite while "
        f"{name} stays negative"
    )
    evidence = {
        "op": origin.op.type,
        "op_name": origin.op.name,
        "variable": weight.path,
        "value": weight.smallest,
        "start": made.start,
        "read_line": weight.read_line,
    }
    return Cause("op", summary, evidence, _change(made.site, what, "op"))


def _exponent_weight_words(exponent: ExponentWeight, steps: int | None) -> tuple[str, str]:
    """(summary, what) for an exp that overflowed on a learned weight training carried there (`ExponentWeight`).
    Kendall's uncertainty weighting ``exp(-log_var) * task_loss + log_var`` with a task whose loss was 0 in every
    batch (no labels, masked out) ran log_var down 0.01 a step for 8873 steps: "bound the exp's input" hid that the
    loss had no minimum in that weight."""
    name = exponent.path.rsplit("/", 1)[-1]
    over = f" over {steps} steps" if steps else ""
    summary = (
        f"an Exp op overflowed float32 (exp(x) is Inf for x > 88.7) on the learned weight {exponent.path}, which "
        f"training carried to {exponent.value:.4g}{over}: the loss kept pushing it one way, so a term of the loss "
        "has no minimum in it"
    )
    what = (
        f"the loss term that pushes {name} without end: in exp(-s) * L + s, s runs to -inf wherever L is 0 (a task "
        f"or head with no labels in its batches, masked out of L but not out of + s): leave such a term out; or "
        f"bound {name} where it is read (tf.clip_by_value({name}, -10.0, 10.0))"
    )
    return summary, what


def _loss_input_layer_words(findings: Findings, origin: Finding, overflow: bool) -> tuple[str, Change] | None:
    """(words added to the summary, the change) for a log or sqrt of Keras's compiled loss that took a prediction
    outside its domain (``loss="poisson"`` on a linear output gone negative): the fix is the output layer the scan
    found (`describe.loss_input_layer`), not a clamp at the fit line, where the loss is no code of the user's."""
    found = findings.extra.get("loss_input_layer")
    if (
        overflow
        or not isinstance(found, dict)
        or found.get("backward")
        or origin.op.type not in DOMAIN_OPS
        or origin.cell is not None
        # A log in a tf.data map made the targets -inf (a zero-width box's log encoding): the loss read no
        # prediction out of its domain, and "make the output positive" was followed at an output layer (s40a p1).
        or not _in_the_step(origin)
    ):
        return (
            None  # (a notebook's layer is found in the kernel's file of its cell, which is not the notebook)
        )
    line, file = found.get("line"), found.get("file")
    if not isinstance(line, int) or not isinstance(file, str):
        return None
    loss = str(found.get("loss") or "compiled")
    probabilities = "crossentropy" in loss or "hinge" in loss
    words = f"; the {loss} loss took it from the model's output layer (line {line}: {found.get('what')})"
    what = (
        f"the output layer the {loss} loss reads: give it a softmax or sigmoid activation, or compile the loss "
        "with from_logits=True"
        if probabilities
        else f'the output layer the {loss} loss reads: make its output positive (activation="exponential" '
        'or "softplus"); a linear output goes below 0'
    )
    return words, Change(file=os.path.abspath(file), line=line, what=what, cell=None, target="layer")


# The fixes' TensorFlow calls and their keras.ops names, for a line written with keras.ops (a backend-agnostic
# Keras 3 layer): "tf.math.divide_no_nan" there is a second API to import and mix in.
_KERAS_OPS_NAMES = (
    ("tf.math.divide_no_nan(", "keras.ops.divide_no_nan("),
    ("tf.math.log(", "keras.ops.log("),
    ("tf.math.rsqrt(", "keras.ops.rsqrt("),
    ("tf.maximum(", "keras.ops.maximum("),
    ("tf.sqrt(", "keras.ops.sqrt("),
    ("tf.nn.softplus(", "keras.ops.softplus("),
    ("tf.exp(", "keras.ops.exp("),
    ("tf.reduce_sum(", "keras.ops.sum("),
    ("tf.square(", "keras.ops.square("),
    ("tf.nn.softmax(", "keras.ops.softmax("),
    ("tf.nn.log_softmax(", "keras.ops.log_softmax("),
    ("tf.math.log_sigmoid(", "keras.ops.log_sigmoid("),
)


def _origin_unit_lines(origin: Finding) -> list[str]:
    """The lines of the origin's .py file or notebook cell ([] for a file not on disk)."""
    return _lines_of(origin.file, origin.cell)


def _lines_of(file: str, cell: int | None) -> list[str]:
    """The lines of a .py file, or of a notebook's cell (`cell` counted from 0); [] for a file not on disk."""
    if cell is not None and file.endswith(".ipynb"):
        from pyadapter.capture.notebook_file import NotebookError, read_notebook_cells

        try:
            cells = [c.source for c in read_notebook_cells(file) if c.index == cell]
        except NotebookError:
            return []
        return [line + "\n" for line in cells[0].splitlines()] if cells else []
    if cell is not None or not file.endswith(".py"):
        return []
    import linecache

    linecache.checkcache(file)  # a long-lived server: the file may have changed since it was read
    return linecache.getlines(file)


def _origin_source_line(origin: Finding) -> str:
    """The text of the origin's line in its .py file or its notebook cell ("" for a file not on disk)."""
    lines = _origin_unit_lines(origin)
    return lines[origin.line - 1] if 0 < origin.line <= len(lines) else ""


def _temperature_of_exp(origin: Finding, code: str) -> str | None:
    """The temperature the origin's exp divides by: on its line (``tf.exp(sim / TEMPERATURE)``), or on the line a
    few above that assigns the exp's argument (``similarity = z @ z.T / TEMPERATURE`` then ``tf.exp(similarity)``)."""
    found = _EXP_OVER_A_TEMPERATURE.search(code)
    if found is not None:
        return found.group(1)
    argument = re.search(r"\bexp\(\s*([A-Za-z_]\w*)\s*\)", code)
    if argument is None:
        return None
    assigned = re.compile(rf"^\s*{argument.group(1)}\s*=(?!=)(.*)$")
    before = _origin_unit_lines(origin)[max(0, origin.line - 16) : max(0, origin.line - 1)]
    for line in reversed(before):
        if (match := assigned.match(line)) is not None:
            divided = _DIVIDED_BY_A_TEMPERATURE.search(match.group(1))
            return divided.group(1) if divided is not None else None
    return None


def _line_calls_a_norm(origin: Finding) -> bool:
    """Whether the origin's line calls a norm (``tf.norm``, ``tf.linalg.norm``, ``keras.ops.norm``): a sqrt the
    user did not write, with no epsilon argument."""
    return re.search(r"\bnorm\(", _origin_source_line(origin)) is not None


def _in_the_code_s_own_api(origin: Finding, what: str) -> str:
    """`what` with its TensorFlow calls named as keras.ops calls when the origin's line uses keras.ops and no tf."""
    line = _origin_source_line(origin)
    if "ops." not in line or "tf." in line:
        return what
    for tensorflow_name, keras_name in _KERAS_OPS_NAMES:
        what = what.replace(tensorflow_name, keras_name)
    return what


# What each op makes of a value outside its domain, and a way to keep its input inside.
_DOMAIN_WORDS = {
    "Log": ("log", "tf.math.log(tf.maximum(x, 1e-7))"),
    # A floor above 0: sqrt's slope at 0 is infinite, so a clamp at 0.0 made the next NaN (a learned variance's
    # sqrt, then the log of that 0 standard deviation).
    "Sqrt": ("sqrt", "tf.sqrt(tf.maximum(x, 1e-12))"),
    "Rsqrt": ("rsqrt", "tf.math.rsqrt(tf.maximum(x, 1e-12))"),
}


# Linear algebra on a finite matrix the op cannot take: what it needs, and the usual way to give it that.
_MATRIX_WORDS = {
    "Cholesky": (
        "is not positive definite in float32 (a kernel or covariance matrix whose smallest eigenvalue reached "
        "0: repeated inputs, a noise or variance term that shrank to 0)",
        "add a small jitter to its diagonal (K + 1e-6 * tf.eye(n)), or keep its noise term bounded below",
    ),
    "MatrixInverse": (
        "is singular in float32 (a row or column that depends on the others)",
        "add a small jitter to its diagonal, or solve with tf.linalg.lstsq / tf.linalg.pinv",
    ),
    "MatrixSolve": (
        "is singular in float32 (a row or column that depends on the others)",
        "add a small jitter to its diagonal, or solve with tf.linalg.lstsq",
    ),
}


def _underflow_of_a_divergence(findings: Findings, origin: Finding) -> str | None:
    """How a divergence ended in a log of zeros an exp made by underflowing (the scan's ``zeros_from_exp``), for
    `_divergence`'s summary; None when the scan found no such exp."""
    found = findings.extra.get("zeros_from_exp")
    if not isinstance(found, dict) or found.get("quotient") or origin.op.type != "Log":
        return None
    line = found.get("line")
    at = f" at line {line}" if isinstance(line, int) else ""
    return f"until the exp{at} underflowed to 0 in float32 and the Log op took its log (-inf)"


# A saturating activation's output, by its op's name in the input's (``bayesian_dense/Softplus:0``).
_SATURATING_OUTPUT = re.compile(r"(?:^|/)(Softplus|Sigmoid|Exp)(?:_\d+)?:0\b")


def _saturated_input_of_a_divergence(origin: Finding) -> str | None:
    """How a divergence ended in a division by (or a log of) zeros a softplus, sigmoid or exp made by saturating
    (a Bayes-by-backprop ``sigma = softplus(rho)`` that updates drove to rho = -1e9, then ``prior / sigma``), for
    `_divergence`'s summary; None for other ops or inputs. Taken only with a growth or a jump in the history:
    "divide_no_nan" of it, followed, met the same divergence a step later."""
    division = origin.op.type in DIVISION_OPS
    if not division and origin.op.type != "Log":
        return None
    for value in origin.inputs[1:] if division else origin.inputs:
        found = _SATURATING_OUTPUT.search(value.name)
        if found is not None and value.health is not None and value.health.is_finite and value.health.zero:
            done = "divided by it" if division else "took its log (-inf)"
            return f"until the {found.group(1).lower()} {value.name} saturated to 0 in float32 and the {origin.op.type} op {done}"
    return None


def _underflowed_exp_words(findings: Findings, origin: Finding) -> tuple[str, str] | None:
    """(summary, what to change) for a log whose zeros an exp made by underflowing (`describe.underflowed_exp`): a
    mixture's density ``sum(pi * exp(-0.5 * z**2))`` that is 0 in float32 far from every component. Clamping the
    log's input (the domain words) silences it and leaves those rows without a gradient; log space does not."""
    found = findings.extra.get("zeros_from_exp")
    zeros = sum(i.health.zero or 0 for i in origin.inputs if i.health is not None)
    if not isinstance(found, dict) or not zeros:
        return None
    line = found.get("line")
    at = f" at line {line}" if isinstance(line, int) else ""
    if "ReduceLogSumExp/" in origin.op.name:
        # The code takes a log-sum-exp already, which subtracts the row's largest value first: no exp of its can
        # underflow a whole row but one whose every value is -inf (a multiple-instance bag with no tiles, all masked
        # with -inf), and "compute it in log space" was advice the line had followed.
        rows = f"{zeros} row{'s' if zeros != 1 else ''}"
        summary = (
            f"the log-sum-exp got {rows} whose every value is -inf (exp(-inf) is 0, log(0) is -inf): a row with every "
            "position masked, as a bag or a sequence with no valid element is"
        )
        what = (
            "the rows with nothing unmasked: leave empty ones out where the data is made, or give masked positions a "
            "large finite value (-1e9) instead of -inf (and a count of at least 1 where the code divides or takes "
            "a log of one, ops.maximum(n, 1))"
        )
        return summary, what
    summary = (
        f"the Log op got {zeros} zero{'s' if zeros != 1 else ''} from the exp{at}, which underflowed to 0 in float32 "
        "(exp(x) is 0 below about -103): log(0) is -inf, a probability taken out of log space"
    )
    if found.get("quotient"):
        # exp(s / 0.01) / reduce_sum(exp(...)): each exp finite, their quotient below float32's smallest (1e-38).
        summary = (
            f"the Log op got {zeros} zero{'s' if zeros != 1 else ''} from a quotient of the exps{at} (a softmax "
            "written by hand): a small exp divided by a huge sum underflowed to 0 in float32 (below about 1e-38), "
            "though no exp did: log(0) is -inf, a probability taken out of log space"
        )
    what = (
        "the log of a sum of exps: compute it in log space, tf.reduce_logsumexp(log_weights + log_terms) (or "
        "tf.nn.log_softmax), not tf.math.log(tf.reduce_sum(tf.exp(...)))"
    )
    # The log-space form of what lies between the exp and the log: a sum's (above) is a wrong objective for a
    # running sum (a Cox model's risk sets, followed, trained a softmax over the whole batch) and no fix for a log
    # of the exp itself.
    if found.get("log_of") == "Cumsum":
        what = (
            "the log of a running sum of exps: compute it in log space, tf.math.cumulative_logsumexp(x) (the "
            "log of tf.cumsum(tf.exp(x)), with the same axis and reverse), not tf.math.log(tf.cumsum(tf.exp(x)))"
        )
    elif found.get("log_of") == "Exp":
        what = (
            "the log of an exp: use the exponent itself (log(exp(x)) is x: y * log_rate, not "
            "y * tf.math.log(tf.exp(log_rate))), and keep tf.exp for where the value itself is needed"
        )
    if any(_DIVIDED.search(i.name) for i in origin.inputs):
        # log(e / sum(e)): a softmax written by hand, whose log has a stable form of its own.
        what = (
            "the log of a softmax written by hand: take tf.nn.log_softmax(logits) (z - tf.reduce_logsumexp(z)), or "
            "a Keras loss with from_logits=True, not tf.math.log(exp(z) / tf.reduce_sum(exp(z)))"
        )
    return summary, what


_SATURATING_DOMAIN_OPS = frozenset({"Lgamma", "Digamma"})


def _saturated_by_unscaled_features(
    context: CauseContext, origin: Finding, cause: Cause, units: list[SourceUnit]
) -> Cause | None:
    """An lgamma or digamma of exact zeros on a batch of unscaled features (dollar amounts of 1e4 to 1e5): a
    softplus, sigmoid or exp output is exactly 0 in float32 for pre-activations that large, so "keep it above 0
    (tf.nn.softplus(x) + 1e-6)", followed, trained nothing (val_loss stuck); the features' scale is the change,
    the op's own words the other way out. Only for a model with no normalizing layer. None otherwise."""
    zeros = any(i.health is not None and i.health.is_finite and i.health.zero for i in origin.inputs)
    # A log of a softmax or sigmoid output that is exactly 0 (a classifier on raw counts in the hundreds, at step 0).
    # Or of an exp link's output (``Dense(1, activation="exponential")`` into a Poisson deviance's log): exp of
    # raw claims data below -103 is 0; "use the exponent itself", followed, removed the NaN and the model sat at a
    # loss of 1.4e13 on the same unscaled features.
    saturated_log = origin.op.type == "Log" and any(
        _ACTIVATION_OUTPUT["softmax"].search(i.name)
        or _ACTIVATION_OUTPUT["sigmoid"].search(i.name)
        or _EXP_OUTPUT.search(i.name)
        for i in origin.inputs
    )
    if (
        (origin.op.type not in _SATURATING_DOMAIN_OPS and not saturated_log)
        or not zeros
        or cause.change is None
    ):
        return None
    unscaled = [u for u in _unscaled_inputs(context, units) if u.role == "features"]
    if not unscaled:
        return None
    change = _unscaled_change(units, unscaled, None)
    if change is None:
        # A keras.Model subclass takes no keras.Input: the features are scaled where the array fit gets is made.
        site = change_line.fit_array_site(units, "x")
        if site is None:
            return None
        change = _change(
            site,
            f"scale the features ({unscaled[0].describe()}): standardize x before fit, or give the model a "
            "keras.layers.Normalization adapted to it (norm.adapt(x)) as its first layer",
            "data",
        )
    summary = (
        f"{cause.summary}; the batch's features are unscaled ({unscaled[0].describe()}): pre-activations that large "
        "make a softplus, sigmoid, softmax or exp output exactly 0 in float32"
    )
    evidence = {**cause.evidence, "unscaled_inputs": [u.to_json() for u in unscaled]}
    late = context.step is not None and context.step - _fit_start(context) >= trend.MIN_STEPS
    if saturated_log and late:
        # A log of a softmax that saturated after hundreds of steps (digits of 0-16, RMS 12): training made the
        # logits large, and the log's stable form is the fix; the features' scale comes second.
        what = f"{cause.change.what}; and scale the features ({unscaled[0].describe()})"
        return Cause(cause.kind, summary, evidence, dataclasses.replace(cause.change, what=what))
    what = f"{change.what}; or {cause.change.what}"
    return Cause(cause.kind, summary, evidence, dataclasses.replace(change, what=what))


# The rsqrt of a Keras normalization layer (``.../layer_normalization_1/Rsqrt``, ``.../batchnorm/Rsqrt``), by the
# layer's class.
_KERAS_NORMALIZATION_RSQRT = re.compile(
    r"(?:^|/)(batch_normalization|layer_normalization|group_normalization)(?:_\d+)?/(?:batchnorm/)?Rsqrt$"
)
_NORMALIZATION_CLASSES = {
    "batch_normalization": "BatchNormalization",
    "layer_normalization": "LayerNormalization",
    "group_normalization": "GroupNormalization",
}


def _keras_normalization_epsilon_zero(origin: Finding, cause: Cause, units: list[SourceUnit]) -> Cause | None:
    """The rsqrt of a Keras normalization layer got zeros: it takes rsqrt(variance + epsilon), so its epsilon is 0
    (a variance is never negative), whatever the code's name for it (``epsilon=ln_eps`` from an argparse default,
    ``epsilon=cfg["bn_epsilon"]``). It was "the Rsqrt's input: keep it in the domain (tf.math.rsqrt(tf.maximum(x,
    1e-12)))" at the fit line, with no rsqrt of the user's to change, where a layer built in a loop was not
    located. The line is the layer's construction given that epsilon. None otherwise."""
    found = _KERAS_NORMALIZATION_RSQRT.search(origin.op.name)
    zeros = any(i.health is not None and (i.health.zero or 0) > 0 for i in origin.inputs)
    if found is None or not zeros or cause.change is None:
        return None
    class_name = _NORMALIZATION_CLASSES[found.group(1)]
    sites = change_line.epsilon_given_sites(units, class_name)
    if not sites:
        return None
    # The one at the origin's line where the layer was located there, else the first one written.
    site, written = next(
        ((s, w) for s, w in sites if (s.file, s.cell, s.line) == (origin.file, origin.cell, origin.line)),
        sites[0],
    )
    summary = (
        f"{cause.summary}; the {class_name} layer takes rsqrt(variance + epsilon), so its epsilon (epsilon={written} "
        "here) is 0: a variance of 0 (a feature constant over the batch, zero-padded steps, a batch of one row) is "
        "then a division by 0"
    )
    default = "1e-6" if class_name == "LayerNormalization" else "1e-3"
    what = f"the epsilon of {class_name}: a positive one (Keras's default, {default}), not 0"
    if written != "0" and not written.replace(".", "").isdigit():
        what += f"; {written} is 0 where it is set"
    return Cause(cause.kind, summary, {**cause.evidence, "layer_epsilon": 0}, _change(site, what, "op"))


def _layer_epsilon_zero(origin: Finding, cause: Cause, units: list[SourceUnit]) -> Cause | None:
    """An rsqrt (or a division) of zeros marked at a layer's construction that sets ``epsilon=0``
    (``BatchNormalization(epsilon=0.0)``): the layer divides by sqrt(variance + epsilon), and a batch of one row,
    or a feature constant over the batch, has variance 0. It was "the Rsqrt's input: keep it in the domain
    (tf.math.rsqrt(tf.maximum(x, 1e-12)))" on a line with no rsqrt. None otherwise."""
    if origin.op.type not in ("Rsqrt", "Sqrt", *DIVISION_OPS) or cause.change is None:
        return None
    site = change_line.zero_epsilon_site(units)
    if (
        site is None
        or site.line != origin.line
        or site.cell != origin.cell
        or os.path.abspath(site.file) != os.path.abspath(origin.file)
    ):
        return None
    summary = (
        f"{cause.summary}; {site.name} at this line is given epsilon=0: it divides by sqrt(variance + epsilon), and "
        "a variance of 0 (a batch of one row, a feature constant over the batch) is then a division by 0"
    )
    what = f"the epsilon of {site.name}: a positive one (Keras's default, 1e-3), not 0"
    return Cause(cause.kind, summary, {**cause.evidence, "layer_epsilon": 0}, _change(site, what, "op"))


# Ops that make no NaN of finite inputs (an overflow is +-inf, not NaN).
_NAN_FREE_OPS = frozenset(
    {"Sub", "Add", "AddV2", "SquaredDifference", "BiasAdd", "Maximum", "Minimum", "Neg"}
)


def _captured_non_finite(
    findings: Findings,
    origin: Finding,
    cause: Cause,
    units: list[SourceUnit],
    warnings: list[NumpyWarning] | None = None,
) -> Cause | None:
    """A subtraction (or an add) whose output is NaN while every input the dump recorded is finite: its other input,
    unrecorded, held the NaN: a value captured into the step (a target Gram matrix computed once before training,
    ``gram / hwc`` of an empty region). It read "a Sub op made NaN/Inf from finite inputs ...: keep its inputs in
    its domain", false and meaningless for a subtraction. None otherwise."""
    health = origin.health
    nan_free = origin.op.type in _NAN_FREE_OPS
    if health is None or not health.nan or not (nan_free or origin.op.type in ACCUMULATING_OPS):
        return None
    recorded = [i for i in origin.inputs if i.health is not None]
    unrecorded = [i for i in origin.inputs if i.health is None]
    if not unrecorded or any(not (i.health and i.health.is_finite) for i in recorded):
        return None
    if not nan_free and health.nan != health.size:
        # A product's sums make NaN of finite inputs too (+inf and -inf products): only all-NaN says the captured
        # operand held it (a graph's normalized adjacency D^-1/2 A D^-1/2 with an isolated node, made in __init__).
        return None
    names = ", ".join(i.name for i in unrecorded)
    written = _operand_as_written(findings, origin, unrecorded[0]) if len(unrecorded) == 1 else None
    named = f"{written} ({names})" if written is not None else names
    summary = (
        f"{_article(origin.op.type)} {origin.op.type} op made NaN of finite inputs the dump recorded: its other "
        f"input {named}, a value captured into the step (a tensor computed before training and closed over by the "
        "step, a target or a constant), held the NaN; it was non-finite already where it was computed"
    )
    what = (
        "the value the step captures on this line: make it finite where it is computed, before training (a "
        "division by 0 there, a statistic of an empty selection)"
    )
    evidence = {**cause.evidence, "captured_input": names}
    # One warned line, or one that made an inf and only NaN of it after (np.power's inf, then "invalid value in
    # dot" of inf * 0).
    if warnings and all(w.message.startswith("invalid value") for w in warnings[1:]):
        # NumPy warned making it before training (a GCN's D^-1/2 of an isolated node, ``np.power(rowsum, -0.5)``,
        # s39d p1): that line makes the value; the one that hands it to TensorFlow (``tf.constant(adj)``) copies it.
        warned = warnings[0]
        place = _warned_place(warned)
        summary += f'; NumPy warned "{warned.message}" at {place} before training'
        change = _warned_change(warned, _numpy_fix(warned), "reading")
        return Cause("data", summary, {**evidence, "numpy_warning": warned.to_json()}, change)
    site = change_line.attribute_or_name_site(units, written) if written is not None else None
    if site is not None:
        what = (
            f"{written}, computed here before training: make it finite (a division by 0 here, a power of 0 to a "
            "negative exponent, a statistic of an empty selection); the step only reads it"
        )
        return Cause("data", summary, evidence, _change(site, what, "reading"))
    return Cause("data", summary, evidence, _origin_change(findings, what, "reading"))


# Keras losses that take the log of the prediction (their scope under compile_loss/): what they need of it, and the
# names a program gives them to compile.
_LOG_OF_PREDICTION_LOSSES = {
    "poisson": ("y_pred > 0 (a rate)", ("poisson", "Poisson")),
    "mean_squared_logarithmic_error": (
        "y_pred > -1",
        ("msle", "mean_squared_logarithmic_error", "MeanSquaredLogarithmicError"),
    ),
}


def _keras_loss_of_an_unbounded_output(
    findings: Findings, origin: Finding, cause: Cause, units: list[SourceUnit]
) -> Cause | None:
    """A Log inside a Keras loss given to compile (``loss="poisson"``: ``y_pred - y_true * log(y_pred + eps)``) got
    predictions outside what the loss needs: the model's output layer has no activation that keeps it there (a
    linear ``Dense(1)``). The words were "keep it positive ... or clip it (tf.math.log(tf.maximum(x, 1e-7)))" at
    the fit line, of a log inside Keras. None otherwise."""
    parts = origin.op.name.split("/")
    if origin.op.type != "Log" or len(parts) < 3 or parts[0] != "compile_loss":
        return None
    known = _LOG_OF_PREDICTION_LOSSES.get(parts[1])
    seen = origin.inputs[0].health if origin.inputs else None
    if known is None or seen is None or not ((seen.neg or 0) or (seen.zero or 0)):
        return None
    needs, names = known
    count = (seen.neg or 0) + (seen.zero or 0)
    summary = (
        f"Keras's {parts[1]} loss, given to compile, takes the log of the model's output, and {count} "
        f"prediction{'s' if count != 1 else ''} of the batch {'were' if count != 1 else 'was'} out of its domain: "
        f"the {parts[1]} loss needs {needs}, and the model's output layer has no activation that keeps it there"
    )
    what = (
        f'the model\'s output: give its last layer activation="softplus" (or "exponential") for the {parts[1]} '
        "loss, or predict log-rates and use a loss that takes them"
    )
    site = change_line.loss_argument_site(units, names)
    returned = _subclass_output(units, site) if site is not None else None
    if returned is not None:
        # A keras.Model subclass has no "last layer" to give an activation: its call's returned value is the
        # output (keras.io's RecommenderNet returns ``ops.nn.sigmoid(x)``, here a linear dot product, s39b).
        summary = summary.replace(
            "the model's output layer has no activation that keeps it there",
            f"the model's call returns a value that nothing keeps there (line {returned.line})",
        )
        what = (
            f"the model's output, returned at line {returned.line}: wrap it in keras.ops.softplus(...) (or "
            f"keras.ops.exp of a log-rate) for the {parts[1]} loss, or predict log-rates and use a loss that takes "
            "them"
        )
        return Cause("op", summary, {**cause.evidence, "keras_loss": parts[1]}, _change(returned, what, "op"))
    change = _change(site, what, "compile") if site is not None else _origin_change(findings, what, "op")
    return Cause("op", summary, {**cause.evidence, "keras_loss": parts[1]}, change)


def _subclass_output(units: list[SourceUnit], compile_site: change_line.Site) -> change_line.Site | None:
    """The value the ``call`` of the model compiled at `compile_site` returns (``model.compile(...)`` with
    ``model = RecommenderNet(...)``, a class of the user's with one ``return`` in its ``call``), or None."""
    node = compile_site.node
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    receiver = node.func.value
    if not isinstance(receiver, ast.Name):
        return None
    made = [
        n.value
        for unit in units
        for n in ast.walk(unit.tree)
        if isinstance(n, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == receiver.id for t in n.targets)
        and isinstance(n.value, ast.Call)
    ]
    classes = {change_line.called_name(call) for call in made}
    if len(classes) != 1:
        return None
    (name,) = classes
    for unit in units:
        for cls in ast.walk(unit.tree):
            if not (isinstance(cls, ast.ClassDef) and cls.name == name):
                continue
            call = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "call"), None)
            returns = (
                [r for r in ast.walk(call) if isinstance(r, ast.Return) and r.value is not None]
                if call
                else []
            )
            if len(returns) == 1 and returns[0].value is not None:
                return change_line.Site(unit, returns[0].value, f"{name}.call's output", target="op")
    return None


def _operand_as_written(findings: Findings, origin: Finding, operand: Any) -> str | None:
    """The argument of the origin line's one call that a graph input named ``.../a:0`` (its first) or ``.../b:0``
    (its second) is, as written (``a_hat`` of ``tf.matmul(a_hat, support)``); None when the line does not say."""
    position = {"a": 0, "x": 0, "b": 1, "y": 1}.get(operand.name.rsplit("/", 1)[-1].split(":")[0])
    code = textwrap.dedent(str(findings.extra.get("origin_code") or "")).strip()
    if position is None:
        return None
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return None
    found = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and len(n.args) > position]
    if len(found) != 1:
        return None
    argument = found[0].args[position]
    return ast.unparse(argument) if isinstance(argument, (ast.Name, ast.Attribute)) else None


def _at_the_relu(findings: Findings, cause: Cause, units: list[SourceUnit]) -> Cause | None:
    """The change of a log of a ReLU's zeros (`_log_of_an_activation_words`) on the ReLU's own line (a variance head
    ``var = tf.nn.relu(raw)`` the line above ``log(var)``), when the scan placed it in the user's code. A layer's
    ReLU (``Dense(1, activation="relu")``) that the scan placed at no line of theirs (in a notebook, the kernel's
    file of the fit cell, line 1) is changed where the layer is built."""
    found = findings.extra.get("activation_into_log") or findings.extra.get("relu_into_divisor")
    change = cause.change
    if not isinstance(found, dict) or found.get("type") != "Relu" or change is None:
        return None
    file, line, cell = found.get("file"), found.get("line"), found.get("cell")
    if (
        not change.what.startswith("the ReLU that makes it")
        or not isinstance(file, str)
        or not isinstance(line, int)
    ):
        return None
    cell = cell if isinstance(cell, int) else None
    unit = next(
        (u for u in units if u.cell == cell and os.path.abspath(u.file) == os.path.abspath(file)), None
    )
    # A notebook's layer ReLU is placed at the fit cell's line (its cell, now that the scan's records are mapped to
    # cells as the origin is, s42e p5): a cell line that holds no ReLU is the call that ran the layer, not the ReLU.
    op, site = found.get("op"), None
    if unit is None or (cell is not None and "relu" not in unit.line(line).lower()):
        site = change_line.layer_site(units, op) if isinstance(op, str) and "/" in op else None
        if site is None and unit is None:
            return None
    if site is not None:
        at = f"{'' if site.cell is None else f'cell {site.cell + 1}, '}line {site.line}"
        summary = cause.summary.replace(
            f"a ReLU's output at line {line}", f"a ReLU's output ({site.name} at {at})"
        )
        return dataclasses.replace(cause, summary=summary, change=_change(site, change.what, "layer"))
    moved = Change(file=file, line=line, what=change.what, cell=cell, target="op")
    return dataclasses.replace(cause, change=moved)


def _jitter_already_added(origin: Finding, cause: Cause, units: list[SourceUnit]) -> Cause | None:
    """A Cholesky of a matrix that the origin's line or the three before it already add an identity to (``K +
    (noise + jitter) * tf.eye(n)``): "add a small jitter to its diagonal (K + 1e-6 * tf.eye(n))" asked for what is
    there. That line is the change: a jitter large enough for float32, a noise bounded below. None otherwise."""
    if origin.op.type != "Cholesky" or "not positive definite" not in cause.summary:
        return None
    unit = next(
        _units_holding(units, origin), None
    )  # a notebook's cell too (a GP emulator's exact likelihood)
    if unit is None:
        return None
    # The code, not a comment (``# FIX: Kzz + 1e-6 * tf.eye(M)`` was read as a jitter the code adds).
    near = [
        n
        for n in range(max(1, origin.line - 3), origin.line + 1)
        if re.search(r"\beye\(", unit.line(n).split("#", 1)[0])
    ]
    if not near:
        return None
    summary = cause.summary + "; the diagonal term the code adds (a jitter, a noise) was too small for it"
    what = (
        "the diagonal term added before the Cholesky: a larger jitter for float32 (1e-4 times the kernel's scale), "
        "and a noise term bounded below (tf.nn.softplus(raw) + 1e-4, not an unbounded exp), so the matrix keeps "
        "its smallest eigenvalue above float32's error"
    )
    change = Change(file=origin.file, line=near[-1], what=what, cell=origin.cell, target="op")
    return dataclasses.replace(cause, summary=summary, change=change)


def _power_words(origin: Finding) -> tuple[str, str] | None:
    """(summary, what to change) for a Pow of finite inputs that made NaN/Inf: zeros raised to a negative power
    (a GCN's degree normalisation ``tf.pow(deg, -0.5)`` with isolated nodes: 0 ** -0.5 is inf) or negatives to a
    fractional one (NaN). It read "a Pow op made NaN/Inf from finite inputs ... keep its inputs in its domain"."""
    recorded_base, exponent = (
        origin.inputs[0].health,
        (origin.inputs[1].health if len(origin.inputs) > 1 else None),
    )
    if (
        recorded_base is None
        or not recorded_base.is_finite
        or (exponent is not None and not exponent.is_finite)
    ):
        return None
    base = recorded_base
    if exponent is None:
        # The exponent's health not recorded (tf.image.adjust_gamma in a tf.data map: a control_dependency the dump
        # left out): negatives in the base and NaN out can only be a negative base to a fractional power, since a
        # positive base gives a finite one.
        made_nan = origin.health is not None and bool(origin.health.nan)
        if not base.neg or not made_nan:
            return None
    if base.zero and exponent is not None and exponent.neg:
        zeros = f"{base.zero} zero{'s' if base.zero != 1 else ''}"
        summary = (
            f"the Pow op raised {zeros} to a negative power: 0 ** -p is inf (and inf * 0 NaN after it), as in a "
            "degree normalisation D^-1/2 of a graph with isolated nodes, or an inverse of a count that can be 0"
        )
        what = (
            "the base: keep it away from 0 (add self-loops so no degree is 0, or tf.maximum(deg, 1.0)), or set "
            "the infinite results to 0 (tf.where(deg > 0, tf.pow(deg, -0.5), 0.0), as Kipf's GCN does)"
        )
        return summary, what
    if base.neg:
        negatives = f"{base.neg} negative value{'s' if base.neg != 1 else ''}"
        summary = f"the Pow op raised {negatives} to a power: a negative base to a fractional power is NaN"
        if "adjust_gamma" in origin.op.name:
            # tf.image.adjust_gamma is gain * x ** gamma for an image in [0, 1]: one mapped to [-1, 1] (x / 127.5 - 1)
            # before it has negative pixels. The augmentation's order is what to change.
            summary += "; tf.image.adjust_gamma computes x ** gamma and expects an image in [0, 1]"
            what = (
                "the order of the augmentation: adjust the gamma while the image is in [0, 1] (before a mapping to "
                "[-1, 1] such as x / 127.5 - 1, or a standardization), or give it (x + 1) / 2 and map back after"
            )
            return summary, what
        # A clamp at 0.0, followed (a GeM pooling's mean ** (1 / p)), met the next NaN: a fractional power's slope
        # is infinite at 0, so the backward pass of the clamped 0 is inf.
        what = (
            "the base: keep it positive (tf.maximum(x, 1e-6), or a softplus where it is learned), here or where the "
            "value is made (GeM pooling clamps its input before the first power); a clamp at 0.0 leaves a "
            "fractional power's infinite slope at 0"
        )
        return summary, what
    return None


# ``p * tf.math.log(p / q)``, ``p * log(p)``, ``p * (log(p) - log_q)`` (The Annotated Transformer's smoothed KL):
# a name times the log of an expression that starts with it.
_LOG_CALL = r"(?:tf\.math\.|tf\.|keras\.ops\.|ops\.|K\.|np\.)?log"
_X_LOG_X = re.compile(rf"\b([A-Za-z_][\w.]*)\s*\*\s*\(?\s*{_LOG_CALL}\(\s*\1\b")


def _x_log_x_words(findings: Findings, origin: Finding, words: tuple[str, str]) -> tuple[str, str] | None:
    """A KL divergence or an entropy written out, ``p * log(p / q)`` of a distribution with zero entries (a
    rating histogram, a teacher's softmax that underflowed): 0 * log(0) counts as 0 there, but computed it is
    0 * -inf = NaN; the clamp the log's words gave biases the sum, xlogy is the form that means it. None when the
    origin's line holds no such product."""
    zero = any(i.health is not None and (i.health.zero or 0) > 0 for i in origin.inputs)
    texts = _xlogy_texts(findings)
    if not zero or texts is None:
        return None
    return words[0] + texts[0], texts[1]


def _xlogy_texts(findings: Findings) -> tuple[str, str] | None:
    """(what to add to the summary, what to change) for a line multiplying a log by its own argument
    (`_X_LOG_X`); None when the origin's line holds no such product."""
    code = str(findings.extra.get("origin_code") or "")
    found = _X_LOG_X.search(code)
    if found is None:
        return None
    p = found.group(1)
    summary = (
        f"; the line multiplies the log by {p}, which is 0 there too: {p} * log({p} ...) counts as 0 "
        f"where {p} is 0 in an entropy or a KL divergence, but computed it is 0 * -inf = NaN"
    )
    # ``p * (log(p) - log_q)``: the difference's second term is the user's own, so the example uses it.
    difference = re.search(
        rf"\b{re.escape(p)}\s*\*\s*\(\s*{_LOG_CALL}\(\s*{re.escape(p)}\s*\)\s*-\s*([\w.]+)\s*\)", code
    )
    example = (
        f"tf.math.xlogy({p}, {p}) - {p} * {difference.group(1)} for {p} * (log({p}) - {difference.group(1)})"
        if difference is not None
        else f"tf.math.xlogy({p}, {p} / q) for {p} * log({p} / q)"
    )
    what = (
        f"the product: tf.math.xlogy({p}, ...) is x * log(y) with 0 where x is 0 (and a gradient of 0 there), "
        f"e.g. {example}; or keras.losses.KLDivergence, which clips"
    )
    return summary, what


def _log_of_an_activation_words(
    findings: Findings, origin: Finding, words: tuple[str, str]
) -> tuple[str, str] | None:
    """The log words for a Log whose input an activation made a few ops before (`describe.activation_into_log`): a
    GAN's ``log(1 - d_fake)``, whose input is named "sub:0", got "keep it in the domain (tf.math.log(tf.maximum(x,
    1e-7)))", and clamped there the generator's gradient is 0: it stops learning; the log of a sigmoid has a
    stable form from the logits. A ReLU variance head's log, clamped, moved the NaN to the division by the same
    variance on the line: softplus is never 0."""
    found = findings.extra.get("activation_into_log")
    if not isinstance(found, dict):
        return None
    if any(i.health is not None and (i.health.neg or 0) > 0 for i in origin.inputs):
        # A ReLU or a sigmoid makes no negative value: a linear layer between them and the log did (a Poisson
        # rate head ``Dense(1)`` after a ReLU hidden layer, whose ReLU was named, one line above the bug).
        return None
    summary, _ = words
    if found.get("type") == "Relu":
        line = found.get("line")
        at = f" at line {line}" if isinstance(line, int) else ""
        summary += f"; its input is a ReLU's output{at}, exactly 0 for every negative input"
        what = (
            "the ReLU that makes it: a quantity that must stay positive (a variance, a scale, a rate) needs "
            "tf.nn.softplus(x) + 1e-6, which is never 0; a clamp of the log keeps it finite, and the same 0 then "
            "divides or is learned from nowhere"
        )
        return summary, what
    if found.get("type") == "Softmax":
        if isinstance(findings.extra.get("mask_into_softmax"), dict) or any(
            _ACTIVATION_OUTPUT["softmax"].search(i.name) for i in origin.inputs
        ):
            return None  # the softmax's own words: its -inf mask, or the log of the softmax itself
        # CosFace's cross-entropy by hand, log(reduce_sum(softmax(64 * logits) * onehot)): a mislabeled row's target
        # probability underflowed to 0. The clamp, followed, left those rows with no gradient (a loss stuck at 15,
        # s42e p2); the cross-entropy from the logits has none of it.
        line = found.get("line")
        at = f" (line {line})" if isinstance(line, int) else ""
        summary += (
            f"; its input is made of a softmax{at}: a probability is exactly 0 in float32 where its logit lies more "
            "than about 100 below the row's largest (scaled logits, a wrong or hard label)"
        )
        what = (
            "the log of a softmax's probability: take the cross-entropy from the logits "
            "(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits), or tf.nn.log_softmax(logits) picked "
            "by the one-hot); a clamp at 1e-7 keeps it finite but its gradient is 0 there, so those rows stop "
            "learning"
        )
        return summary, what
    summary += (
        "; its input is made of a sigmoid: sigmoid(x) is exactly 0 in float32 below x of about -88, and 1 - "
        "sigmoid(x) once x passes about 17"
    )
    what = (
        "the log of a sigmoid: compute it from the logits, tf.math.log_sigmoid(-x) for log(1 - sigmoid(x)) "
        "(tf.math.log_sigmoid(x) for log(sigmoid(x))), or a Keras loss with from_logits=True on a model that "
        "outputs logits; a clamp at 1e-7 keeps it finite but its gradient is 0 there"
    )
    return summary, what


def _divisor_of_a_relu_words(
    findings: Findings, words: tuple[str, str], role: str = "divisor"
) -> tuple[str, str] | None:
    """The division words for a divisor a ReLU's zeros made (`describe.relu_into_divisor`): a covariance's Cholesky
    diagonal from ``Dense(2, activation="relu")``, whose determinant is 0 wherever the ReLU is. "+ 1e-7 on the
    divisor", followed, moved the NaN to the log of the same determinant (s38b covnll); the ReLU is the change
    (`_at_the_relu` puts it on the ReLU's line)."""
    found = findings.extra.get("relu_into_divisor")
    if not isinstance(found, dict):
        return None
    line = found.get("line")
    at = f" at line {line}" if isinstance(line, int) else ""
    said = words[0].split(", as in a degree normalisation")[0] if role == "base" else words[0]
    summary = f"{said}; the {role} is made of a ReLU's output{at}, exactly 0 for every negative input"
    if role == "base":
        what = (
            "the ReLU that makes it: a mean that must stay positive (a Tweedie or Poisson mean, a scale) needs an exp "
            "(a log link: a linear output and tf.exp of it) or tf.nn.softplus(x) + 1e-6, which are never 0; a floor "
            "on the base keeps this power finite, and the power's slope at the floor is still huge"
        )
        return summary, what
    what = (
        "the ReLU that makes it: a quantity that must stay positive (a variance, a scale, a Cholesky factor's "
        "diagonal) needs tf.nn.softplus(x) + 1e-6, which is never 0; an epsilon on the divisor keeps this division "
        "finite, and the same 0 then reaches the next use of it (the log of a determinant, a scale's log)"
    )
    return summary, what


def _divisor_of_underflowed_exps(findings: Findings, origin: Finding) -> tuple[str, str] | None:
    """(summary, what to change) for a division whose divisor's zeros an exp made by underflowing
    (`describe.underflowed_exp`): a Sinkhorn loss's ``K = exp(-C / eps)`` with eps small for the costs, then
    ``u = a / (K @ v)``. divide_no_nan or an epsilon in the divisor (the division's words) keeps it finite and drops
    the far points out of the transport plan; log space keeps them."""
    found = findings.extra.get("zeros_from_exp")
    divisor = origin.inputs[1].health if len(origin.inputs) == 2 else None
    if not isinstance(found, dict) or divisor is None or not divisor.zero:
        return None
    line = found.get("line")
    at = f" at line {line}" if isinstance(line, int) else ""
    zeros = f"{divisor.zero} zero{'s' if divisor.zero != 1 else ''}"
    written = _written_divisor(findings)
    if written is not None and re.search(r"\b(?:reduce_)?sum\(", written[1]):
        # ``exp / ops.sum(exp, axis=-1)``: a softmax written by hand on logits far below 0 (unscaled attention
        # scores), which the Sinkhorn words ("make eps larger") did not fit.
        summary = (
            f"the {origin.op.type} op divided by {zeros} that the exp{at} made by underflowing to 0 in float32 "
            f"(exp(x) is 0 below about -103): a softmax written by hand, {written[1]} of logits far below 0, is "
            "0 / 0 where every exp of a row underflowed"
        )
        what = _in_the_code_s_own_api(
            origin,
            "the softmax: subtract each row's max before the exp (exp(x - max(x)), which the library's softmax "
            "does: tf.nn.softmax(x)), or take tf.nn.log_softmax(x) where a log follows; scores that large also ask for "
            "their scale (1 / sqrt(d) in attention) and scaled inputs",
        )
        return summary, what
    summary = (
        f"the {origin.op.type} op divided by {zeros} that the exp{at} made by underflowing to 0 in float32 (exp(x) "
        "is 0 below about -103): a kernel exp(-cost / eps) with eps small for the costs (Sinkhorn), a density far "
        "from every component"
    )
    what = (
        "the exp and the division after it: compute them in log space (log u = log a - tf.reduce_logsumexp(-C / "
        "eps + log v, axis=...), a log-domain Sinkhorn), or make eps larger than the costs' scale; an epsilon in "
        "the divisor keeps it finite but drops those terms out"
    )
    return summary, what


_DIVIDED = re.compile(r"(?:^|/)(?:truediv|div|RealDiv|divide)(?:_\d+)?:\d+$")


# log(reduce_sum(exp(...))) on one line, spaces removed: ``tf.math.log(tf.reduce_sum(tf.exp(z), axis=-1))``.
_LOG_SUM_EXP = re.compile(r"\blog\((?:\w+\.)*reduce_sum\((?:\w+\.)*exp\(")
# ``tf.sqrt(1.0 - tf.square(cosine))`` (spaces removed): the sqrt of one minus a quantity that reaches 1.
_ONE_MINUS_IN_A_SQRT = re.compile(r"sqrt\(1(?:\.0*)?-")
# ``tf.math.log(1.0 + tf.exp(d))``, ``log1p(exp(d))`` (spaces removed).
_LOG_ONE_PLUS_EXP = re.compile(r"\blog\(1(?:\.0*)?\+(?:\w+\.)*exp\(|\blog1p\((?:\w+\.)*exp\(")
# A division by a temperature (``/ TEMPERATURE``, ``/ self.tau``), and an exp of one: ``tf.exp(sim / TEMPERATURE)``.
_TEMPERATURE = r"/\s*((?:self\.)?(?:temperature|temp|tau|TEMPERATURE|TEMP|TAU|T))\b"
_DIVIDED_BY_A_TEMPERATURE = re.compile(_TEMPERATURE)
_EXP_OVER_A_TEMPERATURE = re.compile(r"\bexp\([^()]*(?:\([^()]*\)[^()]*)*" + _TEMPERATURE)


_REDUCTIONS = frozenset({"Sum", "Mean", "Cumsum"})  # sums over an axis: log space is their stable form


def _summed_exp_words(findings: Findings, origin: Finding, before: str) -> tuple[str, str] | None:
    """(summary, what to change) for a sum that overflowed adding finite exps (`describe.summed_exp`): a
    contrastive loss's ``reduce_sum(exp(sim / tau))`` as tau anneals. "keep its values in range" named neither the
    exp nor log space, and the division that grew the exp's input is what changed over the steps."""
    found = findings.extra.get("sum_of_exps")
    if not isinstance(found, dict):
        return None
    line, divided_at = found.get("line"), found.get("divided_at")
    at = f" at line {line}" if isinstance(line, int) else ""
    summary = (
        f"{_article(origin.op.type)} {origin.op.type} op overflowed float32 adding up the finite terms of the "
        f"exp{at}{' ' + before if before else ''}: a sum of exps taken outside log space passes 3.4e38 once the "
        "exp's inputs near 88"
    )
    if isinstance(divided_at, int):
        summary += (
            f"; the exp's input is divided at line {divided_at}, so a divisor that shrinks (a temperature or "
            "scale) grows every term"
        )
    what = (
        "the sum of exps: compute it in log space, tf.reduce_logsumexp(x, axis=...) for log(sum(exp(x))), or "
        "subtract each row's max before the exp (tf.nn.softmax and a loss with from_logits=True do this)"
    )
    if origin.op.type not in _REDUCTIONS:
        # An add of a recurrence (``c = f * c + i * tanh(z)`` with ``i = exp(i_)``, an exponential gate): no sum
        # to take in log space.
        what = (
            f"the exp{at}: bound its input (tf.clip_by_value, or a tanh), or keep a running maximum of it and "
            "subtract that before the exp (as exponential gating does), so that the terms it adds stay in range"
        )
    return summary, what


def _matrix_words(origin: Finding) -> tuple[str, str] | None:
    """(summary, what to change) for a Cholesky / inverse / solve that made NaN/Inf from a finite matrix; None
    for other ops. "keep its inputs in its domain" named no domain."""
    words = _MATRIX_WORDS.get(origin.op.type)
    if words is None or any(i.health is not None and not i.health.is_finite for i in origin.inputs):
        return None
    needs, fix = words
    summary = f"{_article(origin.op.type)} {origin.op.type} op made NaN/Inf from a finite matrix that {needs}"
    return summary, f"the matrix given to the {origin.op.type}: {fix}"


def _out_of_domain_words(
    origin: Finding, weight: DomainWeight | None = None, findings: Findings | None = None
) -> tuple[str, str] | None:
    """(summary, what to change) for a log/sqrt/rsqrt whose input held negatives (NaN) or, for log and rsqrt,
    zeros (-inf / +inf): the generic "made NaN/Inf from finite inputs, keep its inputs in its domain" named
    neither the values nor a way out. None for other ops or inputs. With `weight`, the input is that weight read
    (``.../ReadVariableOp:0``, a name the user never wrote): named by its path."""
    if origin.op.type in ("RealDiv", "Div", "TrueDiv") and len(origin.inputs) == 2:
        return _division_words(origin)
    if origin.op.type == "Pow" and len(origin.inputs) in (1, 2):
        return _power_words(origin)
    special = _special_domain_words(origin)
    if special is not None:
        return special
    words = _DOMAIN_WORDS.get(origin.op.type)
    measured = [i for i in origin.inputs if i.health is not None and i.health.is_finite]
    if words is None or len(measured) != 1 or measured[0].health is None:
        return None
    name, fix = words
    value = measured[0]
    health = value.health
    assert health is not None
    if (health.dtype or "").lower() in SIXTEEN_BIT:
        # 1e-12 and 1e-7 are 0 in float16 (its smallest value is 6e-8, its smallest normal 6e-5): a clamp there
        # is no clamp. 1e-4 it holds.
        fix = re.sub(r"1e-(?:12|7)\b", "1e-4", fix)
    negative, zero = health.neg or 0, health.zero or 0
    in_pipeline = (origin.op.graph or "").startswith("Dataset_")
    if negative:
        found = f"{negative} negative value{'s' if negative != 1 else ''}"
        result = f"{name} of a negative number is NaN"
    elif zero and name != "sqrt":
        found = f"{zero} zero{'s' if zero != 1 else ''}"
        result = f"{name}(0) is {'-inf' if name == 'log' else 'inf'}"
    else:
        return None
    summary = f"the {origin.op.type} op got {found} in its input {value.name}: {result}"
    if weight is not None and (READ_VARIABLE in value.name or "strided_slice" in value.name):
        kind = "weight" if weight.by_optimizer else "variable"
        summary = (
            f"the {origin.op.type} op got {found} from the {kind} {weight.path} (smallest {_fmt(weight.smallest)}): "
            f"{result}; {'the optimizer' if weight.by_optimizer else 'the step'}'s finite updates carried the "
            f"{kind} there, and {WEIGHTS_HELD_IT}"
        )
        what = (
            f"the {kind} {weight.path.rsplit('/', 1)[-1]}: keep it {'positive' if name != 'sqrt' else 'non-negative'} "
            "by construction (learn an unconstrained weight and read tf.nn.softplus(w) or tf.exp(w) where it is "
            f"used), or clip it where it is read ({fix})"
        )
        return summary, what
    mask = findings.extra.get("mask_into_softmax") if findings is not None else None
    if name == "log" and _ACTIVATION_OUTPUT["softmax"].search(value.name) and isinstance(mask, dict):
        # Padded positions masked with -inf before the softmax: log_softmax, followed, kept the -inf, which the loss
        # multiplied by a 0 target (s39b listnet). A finite mask value is the change, where it is written.
        line = mask.get("line")
        summary += (
            f"; the softmax is 0 where a mask of -inf{f' (line {line})' if isinstance(line, int) else ''} set the "
            "scores, and a log_softmax keeps that -inf, which a 0 target then multiplies (0 * -inf is NaN)"
        )
        what = (
            "the mask value: a large finite one (-1e9) instead of -inf, so masked positions get a probability of "
            "about 0 and a finite log; then take tf.nn.log_softmax of the scores (or keep masked positions out of "
            "the loss's product: tf.where(mask, y * log_p, 0.0))"
        )
    elif name == "log" and _ACTIVATION_OUTPUT["softmax"].search(value.name):
        # The clamp, followed, kept it finite and left a classifier stuck (accuracy 0.19 for 3 epochs): its
        # gradient is 0 where the softmax is 0. The softmax comes off the layer for the logits to be there.
        what = (
            "the log of a softmax: take tf.nn.log_softmax of the logits (or a Keras loss with from_logits=True), "
            "with the softmax taken off the layer that makes them; a clamp "
            f"({fix}) keeps it finite, but its gradient is 0 where the softmax is 0, so those rows stop learning"
        )
    elif (
        name == "log"
        and negative
        and _LINEAR_DENSE_OUTPUT.search(value.name)
        and _CROSS_ENTROPY_HINT.search(origin.op.name + " " + _origin_source_line(origin))
    ):
        # A Dense layer without an activation makes logits of any sign: a loss that takes their log expected
        # probabilities (a custom loss whose from_logits a reloaded model lost, a sigmoid left off the layer).
        summary += (
            "; its input is a Dense layer's output with no activation: logits, of any sign, not probabilities"
        )
        what = (
            "the log of logits: give the loss the logits' form (from_logits=True, or tf.math.log_sigmoid(x) for "
            "log(sigmoid(x)) and tf.math.log_sigmoid(-x) for log(1 - sigmoid(x))), or put the activation on the "
            "layer (sigmoid, softmax); a clamp keeps it finite and trains on a wrong loss"
        )
    elif name == "log" and re.search(r"(?:^|/)relu(?:_\d+)?:\d+\b", value.name.lower()):
        # log(relu(raw)) of a variance head (an eager step names the input, with no scan upstream): softplus.
        what = (
            "the ReLU that makes it: a quantity that must stay positive (a variance, a scale, a rate) needs "
            "tf.nn.softplus(x) + 1e-6, which is never 0; a clamp of the log keeps it finite, and the same 0 then "
            "divides or is learned from nowhere"
        )
    elif name == "log" and _ACTIVATION_OUTPUT["sigmoid"].search(value.name):
        # log(sigmoid(x)) underflows to log(0) for x < -88 (a BPR loss, a hand-written binary cross-entropy).
        what = (
            "the log of a sigmoid: take tf.math.log_sigmoid of the logits (log(1 - sigmoid(x)) is "
            f"tf.math.log_sigmoid(-x)), or a Keras loss with from_logits=True; or keep it above 0 ({fix})"
        )
    elif (
        name == "log"
        and zero
        and not negative
        and re.search(r"(?:^|/)MatrixDeterminant(?:_\d+)?:\d+$", value.name)
    ):
        # A GP's log(det(K)) of a kernel matrix growing near singular (s42d p5): det is a product of eigenvalues that
        # underflowed to 0 in float32, with no orientation in sight; the flow's words fit it badly.
        summary += (
            "; the determinant is 0 in float32: a product of the matrix's eigenvalues, it underflows when the matrix "
            "is near singular or many eigenvalues are below 1 (a kernel or covariance matrix)"
        )
        what = (
            "the log of the determinant: for a symmetric positive-definite matrix (a kernel, a covariance), "
            "2 * tf.reduce_sum(tf.math.log(tf.linalg.diag_part(tf.linalg.cholesky(K)))) with a jitter on its "
            "diagonal (K + 1e-6 * I), or tf.linalg.slogdet(K)[1]; a clamp of det gives a constant with no gradient"
        )
    elif name == "log" and re.search(r"(?:^|/)MatrixDeterminant(?:_\d+)?:\d+$", value.name):
        # A flow's log-det-Jacobian, log(det(W)): an orthogonal or QR init gives det -1 as often as +1, and a
        # clamp gives a constant log-likelihood with no gradient. The log of |det| is what the density needs.
        summary += (
            "; a determinant is negative whenever the matrix flips orientation (an orthogonal or QR "
            "initialisation gives det -1 as often as +1), and 0 when it is singular"
        )
        what = (
            "the log of the determinant: tf.linalg.slogdet(W)[1] is log|det W|, computed stably and what a "
            "change of variables needs (or an LU parameterisation, as Glow's, with log|det| the sum of "
            "log|diagonal|); a clamp of det gives a constant log-likelihood with no gradient"
        )
    elif name == "log" and negative:
        what = (
            f"the {origin.op.type}'s input: keep it positive (an exp or softplus output), or clip it ({fix})"
        )
    elif name == "sqrt" and negative:
        # A learned variance or scale head (a Dense output): the clamp trains without NaN, but below 0 it passes no
        # gradient, and the head stopped learning at its mean target (a helper's two-headed model, session 23).
        what = (
            f"the {origin.op.type}'s input: make it positive by construction where the model learns it "
            f"(tf.nn.softplus(x) + 1e-6: a clamp at 0 passes no gradient below it, and a head stops learning "
            f"there), or clamp it ({fix})"
        )
    elif name == "rsqrt" and zero and _rsqrt_of_a_variance(origin):
        # A hand-written layer or group normalization: a constant input (a blank frame, a ReLU group all 0) has
        # variance 0, which is valid; the norm layers add their epsilon inside.
        what = (
            "the rsqrt of a variance: add an epsilon inside it, tf.math.rsqrt(variance + 1e-5), as "
            "LayerNormalization and BatchNormalization do (a constant input has variance 0)"
        )
    elif name == "rsqrt" and zero and _inverse_root_of_a_degree(origin):
        # A clamp at 1e-12, followed, weighed each isolated node 1e6 and trained to accuracy 0.15 (s39d p3).
        what = (
            "the degree's inverse square root: a node with no edges has degree 0, and its normalization is 0 there, "
            "tf.where(degree > 0, tf.math.rsqrt(degree), 0.0), or add self-loops (A + I) so that no degree is 0; "
            "a clamp at 1e-12 weighs those nodes 1e6"
        )
    elif name == "log" and zero and _SPECTRUM.search(_origin_source_line(origin)):
        # A log-mel or log-magnitude of silence (a clip written all zeros, zero padding): the table words ("a
        # price, a count ... tf.math.log1p(x)") were read as such, and log1p compresses nothing below 1 (s39e p2).
        what = (
            "the log of a spectrogram: silence (an all-zero clip, zero padding) has magnitude 0 there; add a small "
            "offset, tf.math.log(x + 1e-6), as log-mel features are made (log1p(x) is about x for the small values "
            "of a power spectrum, so it compresses nothing)"
        )
    elif name == "log" and zero and in_pipeline and _BOX_SIZE.search(_origin_source_line(origin)):
        # A box's log-encoded width or height (SSD, RetinaNet, YOLO targets): a box of width 0 is a bad label,
        # not a value to log1p, and a clamp at 1e-7 trains toward a target of -16 (s40a p1).
        what = (
            f"the {origin.op.type} of a box's width or height: a box of width or height 0 (a degenerate box, a "
            "point annotation) has no log encoding; drop such boxes where the labels are read (keep w > 0 and "
            "h > 0), or clip the size to at least one pixel before the log"
        )
    elif name == "log" and zero and in_pipeline:
        # A log of a quantity read in the input pipeline (a price, a count: 0 is a valid value there): the clamp
        # turns free items into outliers of -16.1; log1p is how such a target is usually logged.
        what = (
            f"the {origin.op.type}'s input, a value read in the input pipeline: where 0 is a valid value (a "
            f"price, a count, a duration), tf.math.log1p(x) (log(1 + x), 0 at 0), or keep it in the domain ({fix}); "
            "where it is not (a size or a length never measured), drop such records where the data is read "
            "(dataset.filter)"
        )
    else:
        what = f"the {origin.op.type}'s input: keep it in the domain ({fix})"
    return summary, what


# Ops whose domain ends at a point the health counts cannot see (log1p at -1, lgamma at 0 and the negative
# integers) or whose gradient is infinite at its domain's edge (acos and asin at +-1): (summary, what to change).
_EDGE_WORDS = {
    "Log1p": (
        "log1p(x) is -inf at x = -1 and NaN below it (log1p(-p) with p reaching 1: a sigmoid or softmax "
        "probability that saturated)",
        "the Log1p's input: keep 1 + x above 0 (clip the probability: tf.math.log1p(-tf.minimum(p, 1 - 1e-7))), "
        "or compute it from the logits (tf.math.log_sigmoid(-logits) is log(1 - sigmoid(logits)))",
    ),
    "Lgamma": (
        "lgamma(x) is inf at 0 and at the negative integers (a concentration or shape parameter that reached 0: "
        "a Dense output without a positive activation, or a softplus of a large negative input, 0 in float32)",
        "the Lgamma's input: keep it above 0 (tf.nn.softplus(x) + 1e-6 for a concentration, a rate or a shape)",
    ),
    "Digamma": (
        "digamma(x) is infinite at 0 and at the negative integers (a concentration parameter that reached 0)",
        "the Digamma's input: keep it above 0 (tf.nn.softplus(x) + 1e-6)",
    ),
}
_EDGE_GRADIENTS = {
    "Acos": "acos",
    "Asin": "asin",
}


def _special_domain_words(origin: Finding) -> tuple[str, str] | None:
    """Words for `_EDGE_WORDS` ops given zeros or negatives, and for the gradient of acos/asin at +-1 (its
    Reciprocal of sqrt(1 - x^2) = 0): there, the forward value is finite and only the slope is not."""
    forward = (origin.op.forward_op or "").rsplit("/", 1)[-1].split("_")[0]
    inputs = [i for i in origin.inputs if i.health is not None and i.health.is_finite]
    if (
        origin.op.forward_op
        and forward in _EDGE_GRADIENTS
        and any(i.health and i.health.zero for i in inputs)
    ):
        name = _EDGE_GRADIENTS[forward]
        summary = (
            f"the step differentiated {name} at +-1 ({name} of a cosine or a similarity that reached exactly 1 "
            f"or -1): {name}(x) is finite there, but its slope 1/sqrt(1 - x^2) is infinite, so the backward pass "
            "made Inf/NaN"
        )
        what = (
            f"the {name}'s input: clip it inside (-1, 1) first (tf.{name}(tf.clip_by_value(x, -1 + 1e-7, "
            "1 - 1e-7))), as ArcFace-style margins do"
        )
        return summary, what
    inverse = {"Acos": "acos", "Asin": "asin"}.get(origin.op.type)
    if inverse is not None and origin.health is not None and origin.health.nan and inputs:
        name = inverse
        # acos of finite values is NaN only past +-1: a cosine of normalized vectors that float32 rounding put at
        # 1.0000001 (an ArcFace head without a clip). Its negatives, which the op message counted, are in range.
        summary = (
            f"the {origin.op.type} op got values past +-1 ({name} of a cosine or a similarity that float32 rounding "
            f"put just outside [-1, 1]): {name} of them is NaN"
        )
        what = (
            f"the {name}'s input: clip it inside (-1, 1) first (tf.{name}(tf.clip_by_value(x, -1 + 1e-7, "
            "1 - 1e-7))), as ArcFace-style margins do"
        )
        return summary, what
    below = [i for i in inputs if i.health is not None and (i.health.neg or i.health.zero)]
    if origin.op.type == "Polygamma" and below:
        # digamma's gradient (polygamma(1, x), the trigamma) is NaN for x <= 0 in TensorFlow, where digamma itself
        # stays finite between its poles: an evidential or Dirichlet loss's digamma of a concentration alpha =
        # logits + 1 that a linear output took below 0 fails in the backward pass only.
        value = below[-1]
        assert value.health is not None
        count = (value.health.neg or 0) + (value.health.zero or 0)
        taken = (
            "differentiated digamma" if (origin.op.forward_op or "").endswith("Digamma") else "took polygamma"
        )
        summary = (
            f"the step {taken} at {count} value{'s' if count != 1 else ''} at or below 0 (its input {value.name}): "
            "polygamma(1, x), digamma's slope, is NaN or infinite there (a Dirichlet concentration or a Gamma shape "
            "that went below 0: alpha = logits + 1 of a linear output)"
        )
        what = (
            "the digamma's input: keep it above 0 where it is made (evidential and Dirichlet models take "
            "alpha = tf.nn.softplus(logits) + 1, or tf.nn.relu(logits) + 1, not logits + 1)"
        )
        return summary, what
    words = _EDGE_WORDS.get(origin.op.type)
    if words is None or not below:
        return None
    line = _origin_source_line(origin)
    if (
        origin.op.type in ("Log1p", "Log")
        and any(i.health and i.health.neg for i in below)
        and _SIGNED_LOG.search(line.replace(" ", ""))
    ):
        # mu-law / signed log compression, ``sign(x) * log1p(mu * x) / log1p(mu)`` without the abs: the sign on
        # the line says the input is signed by design, and a clamp at 0 (the output words) encodes every negative
        # sample as 0 and trains on (s39e p4).
        summary = (
            f"the {origin.op.type} op got negative values: the line takes the sign of its input apart "
            "(tf.sign(x) * ...), a signed compression (mu-law, a symmetric log), whose log is of the magnitude |x|; "
            "here it is of x itself"
        )
        what = (
            "the log's argument: the magnitude, tf.sign(x) * tf.math.log1p(mu * tf.abs(x)) / tf.math.log1p(mu) "
            "(mu-law); a clamp at 0 keeps it finite and encodes every negative value as 0"
        )
        return summary, what
    if origin.op.type == "Log1p" and not _LOG1P_OF_A_COMPLEMENT.search(line):
        # log1p of a regression output (an RMSLE loss's log1p(y_pred) on a linear head), no probability: the
        # saturated-sigmoid story and its clip of p were of no use there.
        words = _LOG1P_OF_AN_OUTPUT
    return f"the {origin.op.type} op got its input at or past its domain's edge: {words[0]}", words[1]


# A sign taken apart on the log's line: ``tf.sign(x) * tf.math.log1p(mu * x)``, ``np.sign``, ``ops.sign``.
_SIGNED_LOG = re.compile(r"\bsign\([^)]*\)\*(?:tf\.|ops\.|keras\.ops\.)?(?:math\.)?log(?:1p)?\(")


# ``log1p(-p)``, ``log1p(1 - p)``: the log of a probability's complement, where p reaching 1 is the story.
_LOG1P_OF_A_COMPLEMENT = re.compile(r"log1p\(\s*(?:-|1\s*-)")
_LOG1P_OF_AN_OUTPUT = (
    "log1p(x) is -inf at x = -1 and NaN below it (a value that can go below -1: a linear output, a difference)",
    'the Log1p\'s input: keep it above -1 where it is made (a non-negative output: activation="softplus" or '
    '"relu" on the layer that makes it), or clamp it (tf.math.log1p(tf.maximum(x, 0.0)) for a prediction '
    "of a non-negative target, as an RMSLE loss takes)",
)


def _zero_times_infinity_words(origin: Finding) -> tuple[str, str] | None:
    """(summary, what to change) for a product of an infinity and zeros (``logits += (1 - mask) * -inf``: NaN
    wherever the mask keeps a position, 0 * -inf). None for other ops or inputs."""
    # A Mul only: nearly every matmul has zeros in an operand, and its NaN may be +inf + -inf.
    if origin.op.type != "Mul" or len(origin.inputs) != 2:
        return None
    if origin.health is None or not origin.health.nan:
        return None
    healths = [i.health for i in origin.inputs]
    if any(h is not None and h.nan for h in healths):
        return None
    infinite = [i for i in origin.inputs if i.health and (i.health.neg_inf or i.health.pos_inf)]
    zeros = [i for i in origin.inputs if i.health and i.health.is_finite and i.health.zero]
    unrecorded = [i for i in origin.inputs if i.health is None]
    if len(infinite) != 1 or len(zeros) + len(unrecorded) != 1:
        return None
    inf_health = infinite[0].health
    assert inf_health is not None
    sign = "-inf" if inf_health.neg_inf else "+inf"
    if zeros:
        held = f"which holds {zeros[0].health.zero if zeros[0].health else 0} zeros"
        other = zeros[0].name
    else:
        # The other factor's health was not recorded (the batch's labels, read as an argument): only 0 * inf is NaN
        # of an infinity, so it was 0 at each NaN (a listwise loss's y_true of 0 at the padded slots).
        held = "0 there: only 0 times an infinity is NaN"
        other = unrecorded[0].name
    summary = f"the {origin.op.type} op multiplied {infinite[0].name} (which holds {sign}) by {other} ({held}): 0 * {sign} is NaN"
    what = (
        f"the {sign} factor: a large finite number instead ({'-' if sign == '-inf' else ''}1e9 for a mask value), or "
        "tf.where(mask, x, -1e9) instead of multiplying a mask by an infinity"
    )
    return summary, what


# The graph's name of a Python number an op took at trace time, either operand: ``pos_weight * y`` ("mul/x:0").
_TRACED_OPERAND = re.compile(r"/[xy](?:_\d+)?:0$")


def _at_the_mask(findings: Findings, cause: Cause) -> Cause | None:
    """The change of a log of a softmax masked with -inf (`_out_of_domain_words`) on the mask's line, where the scan
    placed the mask constant (`describe.mask_into_softmax`); None otherwise."""
    mask = findings.extra.get("mask_into_softmax")
    change = cause.change
    if (
        not isinstance(mask, dict)
        or change is None
        or not change.what.startswith("the mask value: a large finite")
    ):
        return None
    file, line, cell = mask.get("file"), mask.get("line"), mask.get("cell")
    if not isinstance(file, str) or not isinstance(line, int):
        return None
    moved = Change(
        file=file, line=line, what=change.what, cell=cell if isinstance(cell, int) else None, target="op"
    )
    return dataclasses.replace(cause, change=moved)


def _traced_number_numpy_made(origin: Finding, context: CauseContext, cause: Cause) -> Cause | None:
    """An op given a Python number that was inf or NaN when the step was traced (a constant of the graph), which
    NumPy warned making before training: a class weight ``(y == 0).sum() / (y == 1).sum()`` of a slice with no
    positives, inf, given to a loss factory (s39c fraud). The product's words said "a large finite number instead
    (1e9 for a mask value)", a mask that was not there; the warned line makes the number. None otherwise."""
    traced = [
        i
        for i in origin.inputs
        if _TRACED_OPERAND.search(i.name)
        and i.health is not None
        and i.health.size == 1
        and not i.health.is_finite
    ]
    if len(traced) != 1 or traced[0].health is None:
        return None
    kind = "nan" if traced[0].health.nan else "inf"
    warned = [w for w in context.numpy_warnings if w.makes == kind]
    if len(warned) != 1:
        return None
    warning = warned[0]
    code = _warned_line(warning).strip()
    target = re.match(r"^([A-Za-z_][\w.]*)\s*=[^=]", code)
    name = target.group(1) if target else "the number"
    place = _warned_place(warning)
    value = "NaN" if kind == "nan" else "inf"
    summary = (
        f"the {origin.op.type} op took {traced[0].name}, a Python number that was {value} when the step was traced "
        f'(a constant of the graph, not data): NumPy warned "{warning.message}" at {place}'
        + (f" ({code[:80]})" if code else "")
        + f", which made it; {cause.summary}"
    )
    what = (
        f"the value of {name}: it is {value} here ({warning.message}: a count of 0, such as a class with no "
        "samples in this data); guard the division (max(count, 1)) or keep a finite value, not a clamp where it "
        "is used"
    )
    change = _warned_change(warning, what, "config")
    return Cause(cause.kind, summary, {**cause.evidence, "numpy_warning": warning.to_json()}, change)


def _product_of_a_mask_constant(findings: Findings, origin: Finding, cause: Cause) -> Cause | None:
    """0 * -inf in a product whose infinity a mask constant of the step wrote, through ops that keep it (a listwise
    loss's ``y_true * log_softmax(logits)`` where the model masked padded candidates with ``float("-inf")``): the
    change was the product's line, "-1e9 for a mask value", and the mask was elsewhere. The constant's line is the
    change when the step holds exactly one infinite constant. None otherwise."""
    if _zero_times_infinity_words(origin) is None:
        return None
    constants = [
        f
        for f in findings.findings
        if f.op.type in ("Const", "HostConst")
        and f.health is not None
        and (f.health.neg_inf or f.health.pos_inf)
    ]
    if len(constants) != 1 or (constants[0].file, constants[0].line) == (origin.file, origin.line):
        return None
    mask = constants[0]
    place = place_text(os.path.basename(mask.file), mask.line, mask.cell)
    summary = (
        f"{cause.summary}; the infinity is the mask value written at {place}, kept by the ops after it (a log_softmax "
        "of -inf is -inf), and a 0 at a masked position multiplies it"
    )
    what = (
        "the mask value: a large finite one (-1e9) instead of -inf, so a masked position's log-probability is finite "
        "and 0 times it is 0; or keep the masked positions out of the product (tf.where(mask, y * log_p, 0.0))"
    )
    change = Change(file=mask.file, line=mask.line, what=what, cell=mask.cell, target="op")
    return Cause(cause.kind, summary, {**cause.evidence, "mask_constant": mask.op.name}, change)


def _mask_product_beyond_16_bit(findings: Findings, units: list[SourceUnit], origin: Finding) -> Cause | None:
    """``scores + (1.0 - mask) * -1e9`` under mixed_float16: the line writes a finite mask value that float16 holds
    as -inf (max 65504), and 0 * -inf is NaN where the mask keeps a position. The product's words alone
    (`_zero_times_infinity_words`) advised "-1e9 instead of -inf", the number already on the line."""
    if _zero_times_infinity_words(origin) is None:
        return None
    infinite = next(i for i in origin.inputs if i.health and (i.health.neg_inf or i.health.pos_inf))
    dtype = ((infinite.health.dtype if infinite.health else None) or "").lower()
    if dtype not in SIXTEEN_BIT:
        return None
    limit = DTYPE_MAX[dtype]
    written = _written_beyond(units, origin, limit)
    if written is None:
        return None
    sign = "-inf" if infinite.health is not None and infinite.health.neg_inf else "+inf"
    summary = (
        f"the mask value {written} is {sign} in {dtype}, whose largest value is {limit:g}, and the "
        f"{origin.op.type} op multiplied it by the mask's zeros: 0 * {sign} is NaN wherever the mask keeps a "
        "position; in float32 the same line is finite"
    )
    minus = "-" if sign == "-inf" else ""
    what = (
        f"the mask value: one {dtype} can hold ({minus}1e4, or the dtype's lowest / 2), and tf.where(mask, scores, "
        f"{minus}1e4) rather than multiplying the mask by it, or compute the scores in float32"
    )
    evidence = {"op": origin.op.type, "op_name": origin.op.name, "dtype": dtype, "written": written}
    return Cause(
        "precision", summary, evidence, _origin_change(findings, _in_the_code_s_own_api(origin, what), "op")
    )


_OVERLAP_RATIO = re.compile(r"dice|iou|jaccard|intersection|overlap", re.IGNORECASE)


# A division by the truth on the line: a relative (percentage) error, ``(y_true - y_pred) / y_true``.
_RELATIVE_ERROR = re.compile(
    r"/\s*\(?\s*(?:(?:tf|keras\.ops|ops|np|K)\.(?:math\.)?abs\(\s*)?(?:y_true|targets?|labels?|y)\b"
)


def _origin_statement(findings: Findings) -> tuple[ast.Module, str] | None:
    """The origin's whole statement (its line, with the lines before and after it that the scan recorded), parsed,
    and its dedented text; None when it does not parse."""
    code = str(findings.extra.get("origin_code") or "").strip()
    statement = findings.extra.get("origin_statement")
    if isinstance(statement, dict):
        code = "\n".join([*statement.get("before", []), code, *statement.get("after", [])])
    text = textwrap.dedent(code).strip()
    try:
        return ast.parse(text), text
    except (SyntaxError, ValueError):
        return None


def _divisor_as_written(findings: Findings, origin: Finding, summary: str) -> str:
    """`summary` with the divisor named as the line writes it beside its graph name ("in its divisor
    tf.reduce_sum(w) (Sum_1:0)"), when the origin's line holds exactly one division; else as it was."""
    parsed = _origin_statement(findings)
    if parsed is None:
        return summary
    divisions = [n for n in ast.walk(parsed[0]) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div)]
    if len(divisions) != 1 or len(origin.inputs) != 2:
        return summary
    written = ast.unparse(divisions[0].right)
    name = origin.inputs[1].name
    if len(written) > 60 or f"in its divisor {name}" not in summary:
        return summary
    return summary.replace(f"in its divisor {name}", f"in its divisor {written} ({name})", 1)


def _division_on_its_line(code: str, what: str) -> str:
    """The division's change, for what else its line does: an overlap score (Dice, IoU) is smoothed on both sides,
    as an empty mask predicted empty is a perfect score (divide_no_nan or an epsilon below scored it 0); a sqrt of
    the quotient then takes 0, whose slope is infinite (a weighted RMSE over a batch of zero weights)."""
    if _OVERLAP_RATIO.search(code):
        what = (
            "the overlap ratio: add one smoothing term to both sides, (intersection + 1) / (union + 1) (Dice: "
            "(2 * intersection + 1) / (sum_pred + sum_true + 1)), so an empty mask predicted empty scores 1, not 0 "
            f"or NaN; or {what.removeprefix('the division: ')}"
        )
    if _RELATIVE_ERROR.search(code):
        what = (
            # A 0 may be real (a day without sales) or code a missing value (an unsold listing's price, s39c
            # house): the clamp, followed on the latter, trained to a loss of 1e6 dominated by those rows.
            "the relative error: it is undefined for a target of 0 (where 0 is a real value, a day without sales or "
            "a count of 0; where it stands for a missing one, an unsold listing's price, leave those rows out where "
            "the data is read): divide by tf.maximum(tf.abs(y_true), epsilon) as keras.losses.MeanAbsolutePercentageError does, or "
            f"use a symmetric (sMAPE) or absolute error; or {what.removeprefix('the division: ')}"
        )
    if _RANK_DISCOUNT.search(code.replace(" ", "")):
        # LambdaRank's |delta NDCG| with argsort's 0-based ranks: log2(1 + 0) is 0 at the top; divide_no_nan,
        # followed, gave the top document a discount of 0 (s39b lambdarank).
        what = (
            "the discount: DCG's 1 / log2(1 + position) counts positions from 1, and ranks from argsort count from "
            "0, so the top rank's log is 0: use log2(2.0 + rank) for 0-based ranks (divide_no_nan gives the top "
            "document a discount of 0, an epsilon one of 1e7)"
        )
    if _KL_OF_A_QUOTIENT.search(code):
        # keras.io's Distiller by hand on raw pixels: both softmaxes saturate to exact 0s, and a floor on the
        # divisor, followed, moved the NaN to the log's 0 * -inf on the same line (s40f p1).
        return (
            "the KL divergence: p * log(p / q) is 0 * log(0), NaN, wherever p is 0, which no guard of the division "
            "mends; compute it from the logits, tf.reduce_sum(p * (tf.nn.log_softmax(t_logits / T) - "
            "tf.nn.log_softmax(s_logits / T)), axis=-1), or use keras.losses.KLDivergence() (which clips both "
            "sides), as keras.io's Distiller does"
        )
    if re.search(r"sqrt\((?!\s*[\d.]+\s*\))", code):
        # Not a constant's (``mean / std * np.sqrt(252.0)``, an annualized Sharpe ratio, s40e p2).
        what += "; the sqrt on this line then takes 0, whose slope is infinite: an epsilon inside it too"
    return what


# A box's size in a log encoding's line (tw = log(box[2] / anchor_w), log(gt_w / w_a), log(height)).
_BOX_SIZE = re.compile(r"\b(?:b?box(?:es)?|anchors?|anchor_[wh]|width|height|gt_[wh])\b", re.I)
# A KL divergence written as ``p * log(p / q)`` (a distiller's soft targets against the student's).
_KL_OF_A_QUOTIENT = re.compile(r"\b(\w+)\s*\*\s*(?:[\w.]+\.)?log\(\s*\1\s*/\s*\w+")
# A spectrum's names on a log's line: ``tf.math.log(mel)``, ``log(tf.abs(stft))``, ``log_mel = ...``.
_SPECTRUM = re.compile(
    r"mel|spectrogram|spectrum|stft|\bspec\b|\bspecs\b|magnitude|\bmag\b|\bpower_spec", re.I
)
# A DCG discount's log of 1 + a 0-based rank: ``1.0 / (tf.math.log(1.0 + ranks) / tf.math.log(2.0))``.
_RANK_DISCOUNT = re.compile(
    r"log(?:2)?\(1(?:\.0*)?\+(?:tf\.cast\()?\w*(?:rank|pos|position)\w*|log1p\(\w*rank\w*\)"
)


# Keras's pooling layers that average over the steps a mask keeps (their op scope, snake case).
_MASKED_AVERAGES = re.compile(r"(^|/)(global_average_pooling[123]d)(_\d+)*/")


def _masked_pooling_of_nothing(origin: Finding) -> str | None:
    """The change for a division inside Keras's ``GlobalAveragePooling1D`` (its masked mean divides by the count of
    unmasked steps, 0 for an empty sequence): "tf.math.divide_no_nan" is no change a user can make in a Keras
    layer. None for any other division."""
    found = _MASKED_AVERAGES.search(origin.op.name)
    if found is None:
        return None
    layer = "GlobalAveragePooling" + found.group(2)[-2:].upper()
    return (
        f"the {layer} layer: it averages over the steps the mask keeps (Embedding(mask_zero=True)), and a sequence "
        "with none (empty, or all padding) is 0 / 0: leave empty sequences out where the data is read "
        "(ds.filter(lambda x, y: tf.size(x) > 0)), or give them one token (an [UNK] id that is not 0)"
    )


def _division_words(origin: Finding) -> tuple[str, str] | None:
    """(summary, what to change) for a division whose finite divisor held zeros (a masked mean's count of 0 on an
    empty text, a std of 0, a dice loss's empty union): x / 0 is inf, 0 / 0 NaN. None otherwise."""
    if origin.op.type not in DIVISION_OPS or len(origin.inputs) != 2:
        return None
    numerator, divisor = origin.inputs
    health = divisor.health
    if health is None or not health.is_finite or not health.zero:
        return None
    zeros = f"{health.zero} zero{'s' if health.zero != 1 else ''}"
    both = numerator.health is not None and numerator.health.is_finite and (numerator.health.zero or 0) > 0
    result = "0 / 0 is NaN" if both else "x / 0 is inf (0 / 0 NaN)"
    summary = f"the {origin.op.type} op divided by {zeros} in its divisor {divisor.name}: {result}"
    epsilon = "1e-4" if (health.dtype or "").lower() in SIXTEEN_BIT else "1e-7"
    line = _origin_source_line(origin)
    corrected = _BIAS_CORRECTION.search(line or "")
    if corrected is not None:
        # Adam's bias correction written by hand, with the step counter read before it is counted: at t = 0,
        # 1 - beta ** 0 is 0. An epsilon on it divides the first moment by 1e-7 (s41e p2).
        what = (
            f"the bias correction {corrected.group(0)}: it is 0 at the first step, t = 0; count the step first "
            f"(t.assign_add(1) before it, or {corrected.group(1) or corrected.group(2)} ** (t + 1))"
        )
        return summary, what
    count = _count_divisor(line)
    if count is not None:
        # A mean over what a batch may lack (positives, labelled rows, valid tokens): a floor of 1e-7, followed,
        # multiplied every such batch's loss by 1e7 (AUC 0.75 -> 0.63, s40c nb9); a count is at least 1.
        shown = count if len(count) <= 50 else "count"
        what = (
            f"the division by a count: tf.maximum({shown}, 1.0), so that an empty one divides a sum of 0, or "
            "tf.math.divide_no_nan(a, b); an epsilon (+ 1e-7) would multiply such a batch's value by 1e7"
        )
        return summary, what
    what = (
        f"the division: tf.math.divide_no_nan(a, b) where 0 is the right answer for an empty divisor, or keep the "
        f"divisor away from 0 (a / tf.maximum(b, {epsilon}), or + {epsilon})"
    )
    return summary, what


# Adam's bias correction by hand: ``1 - beta1 ** t``, ``1. - tf.pow(beta2, step)``.
_BIAS_CORRECTION = re.compile(
    r"1\.?0?\s*-\s*(?:tf\.(?:math\.)?pow\(\s*((?:self\.)?(?:beta\w*|b[12]))\s*,\s*\w+(?:\.\w+)*\s*\)"
    r"|((?:self\.)?(?:beta\w*|b[12]))\s*\*\*\s*\w+(?:\.\w+)*)"
)


# A divisor that counts (``n_pos``, ``num_valid``, ``tf.reduce_sum(mask)``, ``count_nonzero``, RetinaNet's
# ``normalizer``): what it may lack in a batch makes it 0, and its smallest other value is 1.
_COUNT_DIVISOR = re.compile(
    r"\b(?:n_\w+|num_\w+|num|(?:\w+_)?counts?|count_\w+|cnt|normali[sz]er|n_?pos\w*|\w*positives?|labell?ed|\w*_mask"
    r"|mask)\b"
    r"|count_nonzero|reduce_sum\([^)]*\bmask",
    re.I,
)


def _count_divisor(code: str) -> str | None:
    """The divisor, as written, of the one division on the line when `_COUNT_DIVISOR` names it a count."""
    try:
        tree = ast.parse(textwrap.dedent(code).strip())
    except (SyntaxError, ValueError):
        return None
    divisors = [n.right for n in ast.walk(tree) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div)]
    if len(divisors) != 1:
        return None
    written = ast.unparse(divisors[0])
    return written if _COUNT_DIVISOR.search(written) else None


def _divisor_the_program_sets(
    findings: Findings, origin: Finding, context: CauseContext, cause: Cause, units: list[SourceUnit]
) -> Cause | None:
    """A division by a variable the program assigns outside the step and the step only reads: a softmax temperature
    the loop anneals with ``temperature.assign(schedule(step))``, 0 once a schedule without a floor gets there. The
    divisor's name in the graph is a variable read ("truediv/ReadVariableOp:0"), and the generic words said to keep
    "the divisor" away from 0 at the division; the bundle's step state says which variable is 0, and the line that
    sets it is the one to change. None for any other division."""
    if origin.op.type not in DIVISION_OPS or len(origin.inputs) != 2:
        return None
    divisor = origin.inputs[1]
    health = divisor.health
    if READ_VARIABLE not in divisor.name or health is None or health.size != 1 or health.zero != 1:
        return None
    zero = [name for name, value in context.step_state.items() if value == 0]
    if len(zero) != 1:
        return None
    name = zero[0]
    site = change_line.assign_site(units, name)
    if site is not None and _in_the_function_of(units, origin, site):
        # The step sets it itself (a token count it accumulates and resets, ``accum_tokens.assign(0.0)``): no
        # schedule outside, and the division is what to guard.
        return None
    at_step = f" at step {context.step}" if context.step is not None else ""
    summary = (
        f"the {origin.op.type} op divided by {name}, a variable the program sets outside the step, which is 0"
        f"{at_step}: x / 0 is inf (0 / 0 NaN)"
    )
    what = f"the value given to {name}: keep it away from 0 (a floor, max(value, 0.1), for a schedule that reaches 0)"
    evidence = {**cause.evidence, "divisor_variable": name}
    change = _change(site, what, "op") if site is not None else _origin_change(findings, what, "op")
    return Cause("op", summary, evidence, change)


def _divisor_of_several_divisions(
    findings: Findings, origin: Finding, cause: Cause, units: list[SourceUnit]
) -> Cause | None:
    """A divisor that several divisions of one function share (RetinaNet's ``normalizer``, the count of positive
    anchors, divides the class loss and the box loss): the division's words at the origin's line, followed, moved
    the NaN to the next division by it (s40a p3). The line that makes the divisor is the one to change, where one
    floor keeps every division finite. None for a divisor divided by once, or not named by one assignment."""
    import ast

    if _division_words(origin) is None:
        return None
    found = _written_divisor(findings)
    if found is None or not isinstance(found[0], ast.Name):
        return None
    name = found[0].id
    for unit in _units_holding(units, origin):
        function = _innermost_function_of(unit, origin.line)
        if function is None:
            continue
        lines = sorted(
            {
                node.lineno
                for node in ast.walk(function)
                if isinstance(node, ast.BinOp)
                and isinstance(node.op, ast.Div)
                and isinstance(node.right, ast.Name)
                and node.right.id == name
            }
        )
        made = [
            node
            for node in ast.walk(function)
            if isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
        ]
        others = [line for line in lines if line != origin.line]
        if not others or len(made) != 1 or made[0].lineno >= origin.line:
            return None
        assignment = made[0]
        shown = " and ".join(str(line) for line in others)
        summary = (
            f"{cause.summary}; {name} divides at line{'s' if len(others) > 1 else ''} {shown} too, so a guard of "
            f"this division alone moves the NaN there"
        )
        what = (
            f"{name}, where it is made: {name} = tf.maximum({ast.unparse(assignment.value)}, 1.0) for a count "
            f"(of positives, of valid entries: an empty one then divides a sum of 0), or + 1e-7 for a scale; one "
            "floor there keeps every division by it finite"
        )
        site = change_line.Site(unit, assignment.value, name)
        return Cause("op", summary, {**cause.evidence, "shared_divisor": name}, _change(site, what, "op"))
    return None


def _divisor_parsed_with_a_default_of_zero(
    findings: Findings, origin: Finding, cause: Cause, units: list[SourceUnit]
) -> Cause | None:
    """A division by a feature a tf.train.Example parse gave its ``default_value=0.0`` (``ex["rooms"]`` of records
    that lack "rooms"): the 0 is no value of the data but the default standing in for a missing one, and the
    division's floor, followed, made that feature sqft x 1e7 for a quarter of the data (s40d p2). The default's
    line is the change. None for any other division."""
    import ast

    if origin.op.type not in DIVISION_OPS or len(origin.inputs) != 2 or "Parse" not in origin.inputs[1].name:
        return None
    found = _written_divisor(findings)
    if found is None or not isinstance(found[0], ast.Subscript):
        return None
    key = found[0].slice
    if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
        return None
    for unit in units:
        for node in ast.walk(unit.tree):
            if not isinstance(node, ast.Dict):
                continue
            for k, v in zip(node.keys, node.values, strict=True):
                if not (isinstance(k, ast.Constant) and k.value == key.value and isinstance(v, ast.Call)):
                    continue
                default = change_line.keyword(v, "default_value")
                if not (isinstance(default, ast.Constant) and default.value == 0):
                    continue
                site = change_line.Site(unit, v, "default_value")
                summary = (
                    f"{cause.summary}; {found[1]} is the parsed feature {key.value!r}, whose default_value=0 "
                    f"({_site_place(site)}) stands in for records that lack it: no value of the data, and a floor or "
                    "divide_no_nan on the division would give those records a made-up feature"
                )
                what = (
                    f"the default of {key.value!r}: records without it are missing a value, not worth 0; give no "
                    "default (a record without it then fails to parse, naming itself), or a sentinel (-1.0) that "
                    f"a dataset.filter drops before the division, or impute a typical value"
                )
                return Cause(
                    "data",
                    summary,
                    {**cause.evidence, "parse_default": key.value},
                    _change(site, what, "input"),
                )
    return None


# The graph's name of a Python number a division took at trace time (``x / cfg["nu"]``: "truediv/y:0").
_TRACED_NUMBER = re.compile(r"/y(?:_\d+)?:0$")


def _written_divisor(findings: Findings) -> tuple[ast.expr, str] | None:
    """The divisor of the origin's statement and its text as written, when its divisions share one (``a / self.t``
    and ``b / self.t`` of a distillation loss); None otherwise."""
    parsed = _origin_statement(findings)
    if parsed is None:
        return None
    tree, text = parsed
    divisors = {
        ast.unparse(n.right): n.right
        for n in ast.walk(tree)
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div)
    }
    if len(divisors) != 1:
        return None
    (written,) = divisors.values()
    return written, ast.get_source_segment(text, written) or ast.unparse(written)


def _constant_divisor_of_zero(
    findings: Findings, origin: Finding, context: CauseContext, cause: Cause, units: list[SourceUnit]
) -> Cause | None:
    """A division by a Python number that was 0 when the step was traced: a config's ``"nu": 0.0`` in a PINN's
    residual, a distiller's ``temperature=0``. The graph holds it as a constant ("truediv/y:0"), and the division's
    words (divide_no_nan, or a / tf.maximum(b, 1e-7)) made the loss finite and the model wrong (a PINN's residual
    times 1e7; a distillation term times T**2 = 0), or crashed (tf.maximum of an int and 1e-7). The line that sets
    the value is the one to change. None for any other division."""
    if origin.op.type not in DIVISION_OPS or len(origin.inputs) != 2:
        return None
    divisor = origin.inputs[1]
    health = divisor.health
    if not _TRACED_NUMBER.search(divisor.name) or health is None or health.size != 1 or health.zero != 1:
        return None
    found = _written_divisor(findings)
    written = found[0] if found is not None else None
    key = _name_of_a_setting(written) if written is not None else None
    shown = found[1] if found is not None else divisor.name
    summary = (
        f"the {origin.op.type} op divided by {shown}, a number that was 0 when the step was traced (a constant in "
        "the graph, not data): x / 0 is inf, 0 / 0 NaN; the formula needs it nonzero"
    )
    what = (
        f"the value of {key or shown}: give it the nonzero value the formula needs (an epsilon or divide_no_nan at "
        "the division keeps the loss finite and trains a wrong objective)"
    )
    change = _where_set_to_zero(context, units, key, what) if key is not None else None
    evidence = {**cause.evidence, "constant_divisor": key or shown}
    flag = _zero_flag(context.argv, key) if key is not None and change is None else None
    if flag is not None:
        # ``python distill.py --temperature 0``: argparse gave it; no line of the code sets it to 0.
        evidence["flag"] = flag
        summary += f"; the command line gave it: {flag}"
        what = (
            f"the value of {key}: the command line gives it 0 ({flag}); run with the nonzero value the formula "
            "needs, and let the argument refuse 0 (an epsilon or divide_no_nan at the division keeps the loss "
            "finite and trains a wrong objective)"
        )
        defined = _flag_definition(units, flag.split("=", 1)[0].split(" ", 1)[0])
        if defined is not None:
            change = _change(defined, what, "config")
    return Cause("op", summary, evidence, change or _origin_change(findings, what, "op"))


# Calls that compute a spread over rows: 0 for a feature the rows do not vary in.
_SPREAD_CALLS = frozenset({"reduce_std", "std", "nanstd", "reduce_variance", "variance", "var", "nanvar"})
# A dataset or an array cut to its first row: ``ds.batch(1)``, ``ds.take(1)``, ``x[:1]``.
_ONE_ROW = re.compile(r"\.(?:batch|take)\(\s*1\s*\)|\[\s*(?:0\s*)?:\s*1\s*[\],]")


def _assigned(units: list[SourceUnit], name: str) -> tuple[SourceUnit, ast.Assign] | None:
    """The one statement of the user's code that assigns `name` (alone, or in a tuple: ``sample_x, _ = ...``)."""
    found = [
        (unit, node)
        for unit in units
        for node in ast.walk(unit.tree)
        if isinstance(node, ast.Assign)
        and any(
            isinstance(t, ast.Name) and t.id == name
            for target in node.targets
            for t in (target.elts if isinstance(target, ast.Tuple) else [target])
        )
    ]
    return found[0] if len(found) == 1 else None


def _spread_of_zero(
    findings: Findings, origin: Finding, cause: Cause, units: list[SourceUnit]
) -> Cause | None:
    """A division by a standard deviation (a variance) the program computed before training and the graph holds
    as a constant (``feature_std = tf.math.reduce_std(sample_x, axis=0)`` of a "sample" of one row): its zeros are
    features the rows it was computed from do not vary in. It was "divide_no_nan, or + 1e-7", which zeroes those
    features or multiplies them by 1e7 and trains on that; the statistic's line (or the one row's) is the change.
    None for any other division."""
    if origin.op.type not in DIVISION_OPS or len(origin.inputs) != 2:
        return None
    health = origin.inputs[1].health
    if (
        not _TRACED_NUMBER.search(origin.inputs[1].name)
        or health is None
        or (health.size or 0) < 2
        or not health.zero
    ):
        return None
    found = _written_divisor(findings)
    if found is None or not isinstance(found[0], ast.Name):
        return None
    name = found[0].id
    assigned = _assigned(units, name)
    if assigned is None or not isinstance(assigned[1].value, ast.Call):
        return None
    unit, statement = assigned
    call = statement.value
    assert isinstance(call, ast.Call)
    if called_name(call) not in _SPREAD_CALLS or not call.args:
        return None
    site = change_line.Site(unit, call, name)
    rows = f"{health.zero} of its {health.size} values are 0"
    summary = (
        f"the {origin.op.type} op divided by {name}, a spread the program computed before training "
        f"({_site_place(site)}: {ast.unparse(call)}), held in the graph as a constant: {rows}, features the rows "
        "it was computed from do not vary in; x / 0 is inf and 0 / 0 NaN"
    )
    what = (
        f"{name}: compute it from the training rows it stands for, and floor the spread of a feature that is truly "
        "constant (tf.maximum(std, 1e-6)) or drop that feature; divide_no_nan or an epsilon at the division zeroes "
        "those features or multiplies them by 1e7, and trains on that"
    )
    data = call.args[0]
    source = _assigned(units, data.id) if isinstance(data, ast.Name) else None
    if source is not None and _ONE_ROW.search(ast.unparse(source[1].value)):
        # ``sample_x, _ = next(iter(raw_train.batch(1)))``: the spread of one row is 0 for every feature.
        assert isinstance(data, ast.Name)
        site = change_line.Site(source[0], source[1].value, data.id)
        summary += f"; {data.id} holds one row ({_site_place(site)}), and the spread of one row is 0"
        what = (
            f"{data.id}: it holds one row, and a spread over one row is 0 for every feature; take the statistics "
            f"over the training set (or a sample of thousands of rows); divide_no_nan or an epsilon at the division "
            "zeroes the features or multiplies them by 1e7, and trains on that"
        )
    evidence = {**cause.evidence, "spread": name, "zeros_in_spread": health.zero, "spread_size": health.size}
    return Cause("data", summary, evidence, _change(site, what, "data"))


def _zero_flag(argv: list[str], key: str) -> str | None:
    """``--temperature 0`` (or ``--temperature=0.0``, ``--temperature-value``'s dashes for underscores) in the run's
    command line when it gives `key` the value 0."""
    return _flag_giving(
        argv,
        lambda name: name.startswith("-") and name.lstrip("-").replace("-", "_") == key,
        lambda given: given == 0.0,
    )


def _flag_definition(units: list[SourceUnit], name: str) -> change_line.Site | None:
    """The line that defines the command-line flag `name` (``parser.add_argument("--temperature", ...)``)."""
    for unit in units:
        for node in ast.walk(unit.tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("add_argument", "DEFINE_float", "DEFINE_integer")
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value in (name, name.lstrip("-"))
            ):
                return change_line.Site(unit, node, node.func.attr)
    return None


def _where_set_to_zero(context: CauseContext, units: list[SourceUnit], key: str, what: str) -> Change | None:
    """The change at the line that sets `key` to 0: the user's code (a config dict, a keyword, an assignment), else
    a config file beside the entry script or named on its command line; None when neither does."""
    site = change_line.zero_setting_site(units, key)
    if site is not None:
        return _change(site, what, "config")
    folders = [os.path.dirname(os.path.abspath(context.entry_script))] if context.entry_script else []
    lines = change_line.zero_setting_lines(change_line.config_files(folders, context.argv, context.cwd), key)
    return Change(file=lines[0][0], line=lines[0][1], what=what, target="config") if lines else None


_EPSILON_NAME = re.compile(r"^(?:eps|epsilon|smooth|smoothing)(?:_\w+)?$", re.IGNORECASE)


def _added_epsilon_of_zero(
    findings: Findings, origin: Finding, context: CauseContext, cause: Cause, units: list[SourceUnit]
) -> Cause | None:
    """A log (an rsqrt, a division) of zeros on a line that adds an epsilon the program names (``tf.math.log(1 -
    p + cfg.eps)``) which one configuration sets to 0 (``replace(BASE, eps=0.0)`` in a sweep): an epsilon added
    leaves no 0 unless it is 0. The words were "log_sigmoid, or a clamp at 1e-7", of a line that has its clamp;
    the line that sets it to 0 is the change. None otherwise."""
    if not _zero_into_domain_op(origin):
        return None
    parsed = _origin_statement(findings)
    if parsed is None:
        return None
    keys = {
        key
        for node in ast.walk(parsed[0])
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)
        for side in (node.left, node.right)
        if (key := _name_of_a_setting(side)) is not None and _EPSILON_NAME.match(key)
    }
    if len(keys) != 1:
        return None
    (key,) = keys
    what = f"the value of {key}: a positive epsilon (1e-7), not 0; with 0 added, the {origin.op.type} takes 0"
    change = _where_set_to_zero(context, units, key, what)
    if change is None:
        return None
    summary = (
        f"{cause.summary}; the line adds {key}, and {key} is 0 where the program sets it (line {change.line})"
    )
    return Cause(cause.kind, summary, {**cause.evidence, "epsilon_zero": key}, change)


def _name_of_a_setting(node: ast.expr) -> str | None:
    """``eps`` of ``eps``, ``cfg.eps``, ``self.eps`` or ``config["eps"]``; None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Constant)
        and isinstance(node.slice.value, str)
    ):
        return node.slice.value
    return None


def _gaps_filled_with_zero(
    findings: Findings, origin: Finding, cause: Cause, units: list[SourceUnit]
) -> Cause | None:
    """A log or a division of zeros the data brought (the input pipeline's ``log(w[1:] / w[:-1])`` of prices, a
    loss's log of a target) in a program that fills its missing values with 0 (``df.fillna(0)``): a missing price or
    count is no 0, and the op's own words (a clamp, log1p) called the 0 valid; the clamp, followed, still failed on
    the ratio's +inf of a 0 below it. The fill is the line to change. None otherwise."""
    if not _zero_into_domain_op(origin):
        return None
    from_data = (findings.bundle or {}).get("origin_from") == "input pipeline re-run" or (
        "batch_array" in cause.evidence
    )
    site = change_line.zero_fill_site(units) if from_data else None
    if site is None:
        return None
    written = ast.unparse(site.node)
    summary = (
        f"{cause.summary}; the program fills missing values with 0 (line {site.line}: {written}), and a missing "
        f"value (a price, a count on a day with no record) made 0 is one the {origin.op.type} cannot take"
    )
    what = (
        "the fill: give missing values one the data can hold (df.ffill() carries the last valid value forward, "
        "as for prices), or drop those records (dropna()); 0 makes a log -inf and a ratio inf"
    )
    evidence = {**cause.evidence, "zero_fill": written}
    return Cause("data", summary, evidence, _change(site, what, "array"), provenance=cause.provenance)


_CSV_READERS = ("make_csv_dataset", "CsvDataset")


def _one_csv_reader(units: list[SourceUnit]) -> tuple[SourceUnit, ast.Call] | None:
    """(its unit, the call) of the program's one tf.data CSV reader; None for none or several."""
    readers = [
        (u, n) for u in units for n in change_line.calls(u) if change_line.called_name(n) in _CSV_READERS
    ]
    return readers[0] if len(readers) == 1 else None


def _csv_field_read_as_zero(origin: Finding, cause: Cause, units: list[SourceUnit]) -> Cause | None:
    """A log or a division of zeros in the input pipeline of a program that reads its CSV with
    ``tf.data.experimental.make_csv_dataset`` without ``column_defaults``: an empty numeric field is read as 0 (the
    default it infers), so a missing fare arrives as a fare of 0. The words called 0 valid there and log1p hid the
    missing value. The reader's call is the change. None otherwise."""
    if not _zero_into_domain_op(origin) or not (origin.op.graph or "").startswith("Dataset_"):
        return None
    reader = _one_csv_reader(units)
    if reader is None or change_line.keyword(reader[1], "column_defaults") is not None:
        return None
    unit, node = reader
    name = change_line.called_name(node)
    summary = (
        f"{cause.summary}; {name} reads an empty numeric field as 0 (the default it infers for the column), so a "
        "missing value arrives as a 0 here"
    )
    what = (
        f"the 0s {name} hands on: where they are empty fields (missing values), fill or drop those records in the "
        "CSV, or give the column a default that marks them (column_defaults=[..., float('nan'), ...]) and filter "
        "them in the pipeline (ds.filter); where 0 is a real value, take tf.math.log1p(x) instead"
    )
    site = change_line.Site(unit, node, name or "make_csv_dataset")
    return Cause(
        "data", summary, {**cause.evidence, "csv_default_zero": name}, _change(site, what, "reading")
    )


def _zero_default_reader(units: list[SourceUnit]) -> change_line.Site | None:
    """The program's one CSV reader that fills an empty numeric field with 0: ``make_csv_dataset`` without
    ``column_defaults``, or a ``CsvDataset`` / ``make_csv_dataset`` whose defaults (written there, or a list a name
    was given) hold a 0. None otherwise."""
    reader = _one_csv_reader(units)
    if reader is None:
        return None
    unit, node = reader
    name = change_line.called_name(node) or "CsvDataset"
    defaults = change_line.keyword(node, "record_defaults") or change_line.keyword(node, "column_defaults")
    if defaults is None and name == "CsvDataset" and len(node.args) > 1:
        defaults = node.args[1]
    if defaults is None:
        return change_line.Site(unit, node, name) if name == "make_csv_dataset" else None
    if isinstance(defaults, ast.Name):
        assigned = _assigned(units, defaults.id)
        defaults = assigned[1].value if assigned is not None else None
    zero = isinstance(defaults, (ast.List, ast.Tuple)) and any(
        isinstance(e, ast.Constant) and e.value == 0 and not isinstance(e.value, bool) for e in defaults.elts
    )
    return change_line.Site(unit, node, name) if zero else None


def _relative_error_of_a_csv_zero(cause: Cause, units: list[SourceUnit]) -> Cause | None:
    """A relative error's division by a target of 0 in a program whose CSV reader fills an empty field with 0
    (``CsvDataset(..., record_defaults=[0.0] * 5)``): the words called a target of 0 valid data, and their
    epsilon, followed, trained a loss dominated by that one record (2370 per epoch). The reader is named beside
    them. None otherwise."""
    change = cause.change
    if change is None or not change.what.startswith("the relative error:"):
        return None
    site = _zero_default_reader(units)
    if site is None:
        return None
    place = _site_place(site)
    # The relative error's own words after "...is undefined for a target of 0 (...): ".
    rest = change.what.split("): ", 1)[1] if "): " in change.what else change.what
    summary = (
        f"{cause.summary}; {site.name} ({place}) fills an empty field with 0, its default, so a target of 0 may "
        "be a missing value, not a real one"
    )
    what = (
        f"the 0 targets: where they are empty CSV fields ({site.name} at {place} reads them as its default 0), give "
        "the column a default that marks them (float('nan')) and filter those records (ds.filter); where 0 is a "
        f"real target (a day without sales), {rest}"
    )
    evidence = {**cause.evidence, "csv_default_zero": site.name}
    return Cause(
        cause.kind, summary, evidence, dataclasses.replace(change, what=what), provenance=cause.provenance
    )


def _zeros_from_16_bit(findings: Findings, origin: Finding, cause: Cause) -> Cause | None:
    """A float32 log (or division) of zeros that a 16-bit op upstream made (`describe.underflowed_16_bit`): under
    ``mixed_float16`` a softmax output layer computes in float16, where a probability below 6e-8 is 0, and Keras's
    loss casts it to float32 only then. The log's own words said to clamp its input at 1e-7, which hides it; the
    mixed-precision guide's fix is the output layer in float32. None otherwise."""
    found = findings.extra.get("zeros_from_16_bit")
    if origin.op.type not in ("Log", *DIVISION_OPS) or not isinstance(found, dict):
        return None
    own = ((origin.health.dtype if origin.health else None) or "").lower()
    if own in SIXTEEN_BIT:
        return None  # a 16-bit origin's own range: the precision words of the op itself
    dtype, kind, line, file = found.get("dtype"), found.get("type"), found.get("line"), found.get("file")
    if not isinstance(dtype, str) or not isinstance(kind, str):
        return None
    zeros = sum(i.health.zero or 0 for i in origin.inputs if i.health is not None)
    at = f" at line {line}" if isinstance(line, int) else ""
    summary = (
        f"the {origin.op.type} op got {zeros} zero{'s' if zeros != 1 else ''} from the {kind}{at}, which ran in "
        f"{dtype} and underflowed to 0 there ({dtype}'s smallest positive value is 6e-8): a value float32 holds, "
        "cast to float32 only after it was 0"
    )
    what = (
        'the layer: give it dtype="float32" (the mixed-precision guide keeps the output layer and its softmax in '
        "float32), or compute the loss from logits (from_logits=True)"
    )
    evidence = {**cause.evidence, "zeros_from_16_bit": found}
    if (
        origin.op.type in DIVISION_OPS
        and _OVERLAP_RATIO.search(str(findings.extra.get("origin_code") or ""))
        and cause.change is not None
    ):
        # A Dice or IoU ratio with no smoothing term is 0/0 for an empty mask predicted empty at any precision once
        # the predictions reach 0; float16 only got there first. The layer in float32 alone trained stuck (a U-Net
        # under mixed_float16): the smoothing term is the fix, the float16 layer what made it come sooner.
        summary = (
            f"{cause.summary}; the {kind}{at} ran in {dtype}, where its outputs underflowed to 0 sooner than "
            "float32's would"
        )
        also = f'; and the {kind}{at} may keep float32 (dtype="float32" on that layer, as the mixed-precision guide does)'
        return Cause(
            "op", summary, evidence, dataclasses.replace(cause.change, what=cause.change.what + also)
        )
    if isinstance(file, str) and isinstance(line, int):
        cell = found.get("cell")
        change: Change | None = Change(
            file=file, line=line, what=what, cell=cell if isinstance(cell, int) else None, target="op"
        )
    else:
        change = _origin_change(findings, what, "op")
    return Cause("precision", summary, evidence, change)


# Keras optimizers that divide by sqrt(v) + epsilon (or by a sum of squares + epsilon).
_EPSILON_OPTIMIZERS = frozenset(
    {"adam", "adamw", "nadam", "adamax", "amsgrad", "rmsprop", "adagrad", "adadelta", "adafactor", "lamb"}
)


# Keras's learning-rate schedules that divide (op ``adam/InverseTimeDecay/truediv_1``).
_DIVIDING_SCHEDULES = frozenset(
    {"InverseTimeDecay", "ExponentialDecay", "PolynomialDecay", "CosineDecay", "CosineDecayRestarts"}
)


def _schedule_divided_by_zero(
    origin: Finding, context: CauseContext, cause: Cause, units: list[SourceUnit]
) -> Cause | None:
    """A division by 0 inside a Keras learning-rate schedule (``InverseTimeDecay(..., decay_rate=-1)``: a "warm-up"
    whose denominator 1 + decay_rate * step / decay_steps reaches 0 at step 20). Read as the optimizer's update, it
    was named "Adam's epsilon is 0", with the default epsilon set (s41c p10). None for any other division."""
    if origin.op.type not in DIVISION_OPS or len(origin.inputs) != 2:
        return None
    divisor = origin.inputs[1].health
    if divisor is None or not divisor.is_finite or not divisor.zero:
        return None
    schedule = next((part for part in origin.op.name.split("/")[1:-1] if part in _DIVIDING_SCHEDULES), None)
    if schedule is None:
        return None
    site = change_line.construction_site(units, schedule)
    growing = _growing_decay(units)
    rate = None
    if growing is not None and growing[0].name == schedule == "InverseTimeDecay":
        site, rate = growing[0], growing[2]  # the number's own line
    step = f" at step {context.step}" if context.step is not None else ""
    if rate is not None:
        why = (
            f"its denominator 1 + decay_rate * step / decay_steps reached 0 with decay_rate={rate:g}: the rate it "
            "makes is infinite there, and negative past it"
        )
        what = (
            f"{schedule}'s decay_rate={rate:g}: a decay_rate above 0 (the rate falls); for a rate that "
            "rises first, a warm-up (CosineDecay's warmup_target and warmup_steps)"
        )
    else:
        why = (
            "a division by 0 in the schedule's formula (a decay_steps of 0, or a decay_rate that cancels it)"
        )
        what = f"{schedule}'s arguments: decay_steps above 0 and a decay_rate that decays"
    summary = f"the learning-rate schedule {schedule} divided by 0{step}: {why}"
    evidence = {**cause.evidence, "schedule": schedule}
    change = _change(site, what, "schedule") if site is not None else cause.change
    return Cause("op", summary, evidence, change)


def _optimizer_epsilon_zero(
    findings: Findings, origin: Finding, context: CauseContext, cause: Cause, units: list[SourceUnit]
) -> Cause | None:
    """A division inside an Adam-family update (op ``adam/truediv_1``) by a divisor holding zeros: that divisor is
    sqrt(v) + epsilon, 0 only when epsilon is 0 and a weight's gradient has been 0 at every step so far (an embedding
    row no batch used yet, a dead unit). The generic words said to use divide_no_nan at the fit line, a division
    inside Keras. The line to change sets the epsilon: a config file's (the run's ``--config`` file first), else
    the optimizer's construction. None for any other division."""
    if origin.op.type not in DIVISION_OPS or len(origin.inputs) != 2:
        return None
    divisor = origin.inputs[1].health
    if divisor is None or not divisor.is_finite or not divisor.zero:
        return None
    scope = re.sub(r"_\d+$", "", origin.op.name.split("/", 1)[0]).lower()
    recorded = _recorded_optimizers(context)
    if scope not in _EPSILON_OPTIMIZERS or scope not in {name.lower() for name in recorded}:
        return None
    if _divides(findings):
        # The user's own division run in the optimizer's scope: Keras applies a kernel_constraint (a unit-norm
        # ``w / norm``) inside the update, so the op is named adam/truediv, and the line is the constraint's.
        return None
    name = next(n for n in recorded if n.lower() == scope)
    zeros = f"{divisor.zero} value{'s' if divisor.zero != 1 else ''}"
    summary = (
        f"the {name} update divided by 0 in {zeros}: its epsilon is 0, and {name} divides by sqrt(v) + epsilon, "
        "which is 0 for a weight whose gradient has been 0 at every step so far (an embedding row no batch has "
        "used, a unit that never fired)"
    )
    what = f"the epsilon of {name}: a small positive one (Keras's default, 1e-7)"
    folders = [os.path.dirname(os.path.abspath(context.entry_script))] if context.entry_script else []
    lines = change_line.zero_epsilon_lines(change_line.config_files(folders, context.argv, context.cwd))
    site = (
        change_line.zero_epsilon_site(units)
        or change_line.zero_epsilon_entry(units)
        or change_line.optimizer_site(units, recorded)
    )
    if lines:
        path, line = lines[0]
        change: Change | None = Change(file=path, line=line, what=what, target="config")
    else:
        change = (
            _change(site, what, "optimizer") if site is not None else _origin_change(findings, what, "op")
        )
    evidence = {**cause.evidence, "optimizer_epsilon": 0}
    return Cause("op", summary, evidence, change)


def _unscaled_text(unscaled: list[scale.UnscaledInput]) -> str:
    """'features (x from 0 to 255, RMS 61.4) and targets (...)': the unscaled inputs as a cause names them."""
    return " and ".join(f"{u.role} ({u.describe()})" for u in unscaled)


# An exp used as a link (a rate's activation), and the signs of an exp that is normalized (a softmax by hand).
_EXP_LINK = re.compile(r"[\"']exponential[\"']|\bexp\(")
# A log-variance or log-scale read through its exp (``tf.exp(-log_var)``, ``exp(0.5 * logvar)``).
_EXP_OF_A_LOG_VARIANCE = re.compile(
    r"\bexp\(\s*-?\s*(?:[\d.]+\s*\*\s*)?\w*log_?(?:var|variance|sigma|std|scale)", re.I
)
_EXP_NORMALIZED = re.compile(r"softmax|reduce_sum|logsumexp|\bsum\(|/|segment_sum|cumsum")


def _normalized_after(origin: Finding, code: str) -> str | None:
    """The line of the next few after the exp's that normalizes its result by a sum (``alpha = e /
    tf.gather(tf.math.unsorted_segment_sum(e, ...))``, ``tf.math.log(tf.cumsum(exp_s))``): a softmax or a
    log-sum-exp written out over lines, not an exp link. None when none does."""
    assigned = re.match(r"^\s*([A-Za-z_]\w*)\s*=", code)
    if assigned is None:
        return None
    name = re.compile(rf"\b{re.escape(assigned.group(1))}\b")
    lines = _origin_unit_lines(origin)[origin.line : origin.line + 6]
    for line in lines:
        if name.search(line) and re.search(r"segment_sum|cumsum|reduce_sum|\bsum\(|/", line):
            return line
    return None


def _exp_of_unscaled_inputs(
    findings: Findings, origin: Finding, unscaled: list[scale.UnscaledInput], units: list[SourceUnit]
) -> Cause:
    """An Exp that overflowed in the fit's first step, before any update, on inputs in raw units (a softmax written
    by hand on MNIST pixels of 0-255): the fresh weights' logits of those inputs are in the hundreds. It was called
    a divergence, with a learning-rate search and the compile line; the exp's stable form and the inputs' scale
    are the change."""
    code = str(findings.extra.get("origin_code") or "")
    after = _normalized_after(origin, code)
    link = bool(_EXP_LINK.search(code)) and not _EXP_NORMALIZED.search(code) and after is None
    # Keras's own exp (``Dense(1, activation="exponential")``): the origin is the fit line, whose code has no exp;
    # the layer is the place (s43d nb_poisson: "a softmax ... computed stably" of a Poisson log link).
    layer = _exponential_activation_layer(units) if not _EXP_LINK.search(code) else None
    link = link or layer is not None
    # A rate of counts (a Poisson or negative-binomial likelihood) has a bias to start at log(mean target); an exp
    # of a flow's learned log-scale (``x * tf.exp(s) + t``, s43a p1) has none, and is bounded instead.
    counts = (
        layer is not None or "exponential" in code or any(_COUNT_LIKELIHOOD.search(u.text) for u in units)
    )
    # An exp link's input is made of the features only; its targets in raw counts are what the likelihood wants.
    shown = [u for u in unscaled if u.role == "features"] if link else []
    summary = (
        "an Exp op overflowed float32 (exp(x) is Inf for x > 88.7) in the first step, before any update, on "
        f"unscaled {_unscaled_text(shown or unscaled)}: the fresh weights' outputs of inputs that large pass 88.7; "
        "no learning rate made them"
    )
    if link and _EXP_OF_A_LOG_VARIANCE.search(code):
        # A Gaussian NLL's exp(-log_var) on returns in basis points (s40e p7): no count likelihood; the words of one
        # ("the targets stay as they are (a count likelihood needs the counts) ... log(mean target)") misled.
        what = (
            "the features into the log-variance head: scale them (a keras.layers.Normalization layer adapted to "
            "them, first in the model), so the head's output starts near 0; a head that must stay in range can be "
            "bounded where it is read (tf.clip_by_value(log_var, -10.0, 10.0))"
        )
    elif link and not counts:
        what = (
            "the features into the exp: scale them (a keras.layers.Normalization layer adapted to them, first in "
            "the model), so the exp's input starts near 0; a learned log-scale read through an exp (a flow's "
            "coupling, x * exp(s) + t) is usually bounded as well (s = tf.tanh(s), times a learned factor)"
        )
    elif link:
        # An exp link (a Poisson or negative-binomial rate, Dense(1, activation="exponential")): no softmax to make
        # stable, and count targets must stay counts for the likelihood; the features' scale is the change.
        what = (
            "the features into the exp link: scale them (a keras.layers.Normalization layer adapted to them, first "
            "in the model), so the rate's input starts near 0; the targets stay as they are (a count likelihood "
            "needs the counts), and a bias initialised to log(mean target) starts the rate at the data's mean"
        )
    else:
        stable = "tf.nn.softmax(x), tf.nn.log_softmax(x), or a loss with from_logits=True"
        written = f"{code} {after or ''}"
        if "segment" in written:
            # A softmax over each node's neighbours by hand (a GAT's exp, then unsorted_segment_sum): s39d p7.
            stable = "per segment: e - tf.gather(tf.math.unsorted_segment_max(e, ids, n), ids) before the exp"
        elif "cumsum" in written:
            # ListMLE's log(cumsum(exp(s))): s39b listmle.
            stable = "tf.math.cumulative_logsumexp(s) for log(cumsum(exp(s)))"
        what = (
            f"the exp: a softmax or a log-sum-exp computed stably subtracts the largest value first ({stable}); "
            f"and scale the {' and '.join(u.role for u in unscaled)} (pixels / 255, or a "
            "keras.layers.Normalization layer)"
        )
    what = _in_the_code_s_own_api(origin, what)
    evidence = {
        "op": origin.op.type,
        "op_name": origin.op.name,
        "overflow": True,
        "before_any_update": True,
        "unscaled_inputs": [u.to_json() for u in unscaled],
    }
    if layer is not None:
        return Cause(
            "data", summary, evidence, _change(layer, f"the {layer.name} layer's exp: {what}", "model")
        )
    return Cause("data", summary, evidence, _origin_change(findings, what, "op"))


# Words of a count likelihood in the program (a Poisson or negative-binomial rate).
_COUNT_LIKELIHOOD = re.compile(r"poisson|binomial|\bcounts?\b|\brates?\b", re.IGNORECASE)
# An activation that is an exp, as Keras layers are given one.
_EXP_ACTIVATIONS = frozenset(
    {"'exponential'", "tf.exp", "tf.math.exp", "keras.activations.exponential", "keras.ops.exp"}
)


def _exponential_activation_layer(units: list[SourceUnit]) -> change_line.Site | None:
    """The one layer of the user's code built with an exp activation (``Dense(1, activation="exponential")``)."""
    found = [
        change_line.Site(unit, node, called_name(node) or "output")
        for unit in units
        for node in change_line.calls(unit)
        if (given := keyword(node, "activation")) is not None
        and ast.unparse(given).replace('"', "'") in _EXP_ACTIVATIONS
    ]
    return found[-1] if len(found) == 1 else None


def _recorded_optimizers(context: CauseContext) -> list[str]:
    """The class names of the optimizers the bundle records (``optimizers``, else the one ``optimizer``)."""
    info = context.model_info
    return [str(n) for n in info.get("optimizers") or [info.get("optimizer")] if n]


def _finite_rerun(findings: Findings) -> dict[str, Any] | None:
    """The verdict of the dumped re-run the origin was found in, when that re-run stayed finite (loss, gradients and
    updated weights) though training's step did not; None otherwise."""
    graph = ((findings.bundle or {}).get("verdicts") or {}).get("graph")
    if not isinstance(graph, dict) or not graph.get("dumped") or graph.get("reproduced") is not False:
        return None
    finite = all(graph.get(key) is True for key in ("loss_finite", "gradients_finite", "weights_finite"))
    return graph if finite and graph.get("error") is None else None


def _made_and_masked_in_a_finite_rerun(origin: Finding, rerun: dict[str, Any]) -> Cause:
    """The re-run of the step stayed finite, and its dump still held an op that made NaN/Inf which nothing downstream
    kept (a GeM pooling's pow gradient at 0, multiplied by 0): that op was reported as the origin, with a cause and a
    line to change, beside "stayed finite". A notebook that edited its model's module (``%%writefile`` with
    autoreload) after fit traced its train function: training ran the old code, the re-run the new. The cause is
    not known here, and the words say why."""
    loss = rerun.get("loss")
    shown = f"loss {loss:.6g}, " if isinstance(loss, (int, float)) else ""
    place = place_text(os.path.basename(origin.file), origin.line, origin.cell)
    summary = (
        f"the step's re-run stayed finite ({shown}gradients and updated weights finite), so the failure training met "
        f"did not happen again, and its cause is not known here; the {origin.op.type} op at {place} made NaN/Inf "
        "that nothing downstream kept, which is not what failed. A re-run runs the code as it is now: a model or "
        "module edited since training (a notebook's %%writefile or autoreload) is not what training ran, as fit "
        "keeps the train function it traced before the edit; build and compile the model again and run it"
    )
    evidence = {"origin": origin.op.name, "rerun": {"loss": loss, "reproduced": False}, "masked": True}
    return Cause("unknown", summary, evidence)


def _frozen_part_trained_elsewhere(
    findings: Findings, context: CauseContext, cause: Cause, units: list[SourceUnit]
) -> Cause | None:
    """An older GAN script's combined model (a generator under a frozen discriminator) whose loss (or largest
    activation) jumped x1e10 in a step while the weights it trains stood still, and whose frozen discriminator
    changed between its steps: the discriminator's own train_on_batch, at a rate far too high, diverged. The words
    were the overflowing op's, "with no rise over the steps before", beside a history that jumped; or, with one
    step before the failure, a divergence at this model's own rate, whose tenth changed nothing. The other
    optimizer is the change."""
    names = context.frozen_changed
    if not names or not _own_weights_still(context.history):
        return None
    jump = trend.loss_jump(context.history)
    if jump is not None:
        start_step, start, end_step, end = jump
        series = "loss"
    else:
        fast = trend.fast_growth(context.history)
        if fast is None:
            return None
        series = SERIES_WORDS.get(fast.series, fast.series)
        start_step, start, end_step, end = fast.start_step, fast.start_value, fast.end_step, fast.end_value
    norms = [v for _, v in trend.finite_points(context.history, "weight_norm")]
    shown = ", ".join(names[:3]) + (" ..." if len(names) > 3 else "")
    summary = (
        f"the {series} jumped x{end / start:.3g} ({_fmt(start)} at step {start_step} to {_fmt(end)} at step "
        f"{end_step}) while the weights this model trains stood still (norm {_fmt(norms[-1] if norms else None)}); "
        f"its frozen part ({shown}) changed between its steps: another optimizer trains it (a GAN's discriminator "
        "on its own train_on_batch), and that training diverged, not this model's"
    )
    recorded = _recorded_optimizers(context)
    used = context.learning_rate.value if context.learning_rate is not None else None
    site = change_line.other_optimizer_site(units, recorded, used)
    what = (
        f"the learning rate of the optimizer that trains {names[0].split('/')[0]}: its training diverged and "
        "carried the frozen part here with it; lower it (x10 or more)"
    )
    evidence = {
        **cause.evidence,
        "frozen_changed": names,
        "loss_jump": {
            "series": series,
            "start_step": start_step,
            "start": start,
            "end_step": end_step,
            "end": end,
        },
    }
    change = _change(site, what, "optimizer") if site is not None else _origin_change(findings, what, "op")
    return Cause("divergence", summary, evidence, change)


# A model's weights whose norm moved less than this fraction over the steps recorded before its failure stood still.
STILL_NORM = 0.01


def _own_weights_still(history: list[dict[str, Any]]) -> bool:
    """Whether the weights the guarded model trains stood still before its failure (`trend.weights_steady`), or,
    where too few updates were recorded for it (a failure at the second step), whether their norm stayed within
    `STILL_NORM` of itself over two recorded steps or more."""
    if trend.weights_steady(history):
        return True
    norms = [v for _, v in trend.finite_points(history, "weight_norm")]
    return len(norms) >= 2 and min(norms) > 0 and max(norms) / min(norms) <= 1 + STILL_NORM


def _zero_kernel_initializer(units: list[SourceUnit]) -> change_line.Site | None:
    """The one place the user's code gives a kernel the initializer "zeros" (``kernel_initializer="zeros"``, a
    config's ``"kernel_init": "zeros"``, ``keras.initializers.Zeros()``); biases are zeros by design and not
    counted. None for none or several."""
    found: list[change_line.Site] = []
    # On a layer given a kernel_constraint too: the one a norm divides.
    constrained: list[change_line.Site] = []
    for unit in units:
        for node in ast.walk(unit.tree):
            pairs: list[tuple[str, ast.expr]] = []
            if isinstance(node, ast.Call):
                pairs = [(k.arg or "", k.value) for k in node.keywords]
                constraint = any("constraint" in (k.arg or "") for k in node.keywords)
            elif isinstance(node, ast.Dict):
                constraint = False
                pairs = [
                    (str(k.value), v)
                    for k, v in zip(node.keys, node.values, strict=True)
                    if isinstance(k, ast.Constant) and isinstance(k.value, str)
                ]
            for name, value in pairs:
                if not re.search(r"kernel|weight", name, re.IGNORECASE):
                    continue
                zeros = any(
                    (isinstance(n, ast.Constant) and n.value == "zeros")
                    or (isinstance(n, ast.Call) and called_name(n) == "Zeros")
                    for n in ast.walk(value)
                )
                if zeros:
                    found.append(change_line.Site(unit, value, name, target="initializer"))
                    if constraint:
                        constrained.append(found[-1])
    if len(found) == 1:
        return found[0]
    return constrained[0] if len(constrained) == 1 else None


# A norm's output by its op's name: ``tf.norm`` (``norm/Squeeze:0``), or the Sqrt of a sum of squares.
_NORM_OUTPUT = re.compile(r"(?:^|/)(?:norm|Sqrt)(?:_\d+)?(?:/|:)", re.IGNORECASE)


def _norm_of_a_zero_kernel(origin: Finding, cause: Cause, units: list[SourceUnit]) -> Cause | None:
    """A division of a wholly zero numerator by a divisor with zeros (a unit-norm constraint's ``w / norm(w)``,
    spectral normalization's ``v / tf.norm(v)``) in a program that initializes a kernel to zeros: the norm of a zero
    kernel is 0. The division's words (divide_no_nan, an epsilon) end the NaN and leave that layer at zero for good,
    which learns nothing; the initializer is the change. None otherwise."""
    if origin.op.type not in DIVISION_OPS or len(origin.inputs) != 2:
        return None
    top, bottom = origin.inputs[0].health, origin.inputs[1].health
    if top is None or bottom is None or not top.size or top.zero != top.size or not bottom.zero:
        return None
    if not _NORM_OUTPUT.search(origin.inputs[1].name):
        return None  # a masked mean of an all-padding batch divides zeros by a count of 0: no kernel's norm
    site = _zero_kernel_initializer(units)
    if site is None:
        return None
    summary = (
        f"{cause.summary}; the numerator is 0 everywhere ({top.zero} of {top.size}): a kernel initialized to zeros "
        f"({_site_place(site)}) has a norm of 0, and an epsilon at the division would keep that layer at zero, "
        "learning nothing"
    )
    what = (
        f"the initializer of {site.name}: a nonzero one (glorot_uniform, Keras's default for kernels); a zero "
        "kernel's norm is 0, and divide_no_nan or an epsilon at the division leaves the layer at zero"
    )
    evidence = {**cause.evidence, "zero_kernel_initializer": site.line}
    return Cause(
        cause.kind, summary, evidence, _change(site, what, "initializer"), provenance=cause.provenance
    )


def _divides(findings: Findings) -> bool:
    """Whether the origin's statement, as the user wrote it, divides (``w / norms``, ``ops.divide(w, norms)``)."""
    parsed = _origin_statement(findings)
    return parsed is not None and _has_division(parsed[0])


def _has_division(tree: ast.AST) -> bool:
    """Whether code divides (``a / b``, ``np.divide``): what makes a NaN of finite values, 0 / 0."""
    return any(
        (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div))
        or (isinstance(node, ast.Call) and called_name(node) in _DIVIDING_CALLS)
        for node in ast.walk(tree)
    )


_DIVIDING_CALLS = frozenset({"divide", "truediv", "div", "divide_no_nan", "div_no_nan", "reciprocal"})


def _made_by_a_gradient_of_the_users(origin: Finding, units: list[SourceUnit]) -> bool:
    """Whether the op was made while the user's ``tape.gradient`` (or ``tf.gradients``) call ran, in the user's own
    code: a ``@tf.custom_gradient``'s gradient function. An all-zero row that makes its formula 0 / 0 is a valid
    input (padding, a filled-in record); the formula is what to change, not the record."""
    for frame in origin.stack[:-1]:
        for unit in units:
            if unit.cell != frame.cell or os.path.abspath(unit.file) != os.path.abspath(frame.file):
                continue
            text = unit.line(frame.line)
            if ".gradient(" in text or "tf.gradients(" in text:
                return True
    return False


# Ops that copy or rearrange their first input's values and compute none: they cannot overflow.
_COPYING_OPS = frozenset(
    {
        "GatherV2",
        "Gather",
        "GatherNd",
        "StridedSlice",
        "Slice",
        "Reshape",
        "Tile",
        "Transpose",
        "ExpandDims",
        "Squeeze",
        "BroadcastTo",
        "Reverse",
        "ReverseV2",
    }
)


def _copies_an_unrecorded_input(origin: Finding) -> bool:
    """Whether the op only copies values (a gather, a slice) and its values' input has no recorded health (a tensor
    the function captured from outside: a constant schedule), so the NaN/Inf it "made" was in that input."""
    if origin.op.type not in _COPYING_OPS or origin.health is None or origin.health.is_finite:
        return False
    if not origin.inputs or origin.inputs[0].health is not None:
        return False
    return all(i.health is None or i.health.is_finite for i in origin.inputs[1:])


def _captured_value_copied(
    findings: Findings, context: CauseContext, units: list[SourceUnit], origin: Finding
) -> Cause:
    """A gather or slice copied NaN/Inf from a tensor the step captured (made before training): where NumPy warned
    making it, that line; else the captured value, at the op's line."""
    health = origin.health.describe() if origin.health else "NaN/Inf"
    source = origin.inputs[0].name.rsplit(":", 1)[0]
    summary = (
        f"the {origin.op.type} op only copies values: it took {health} from {source}, a tensor the step captured "
        "from outside (made before training: a schedule, a table, a constant), which held them already"
    )
    evidence: dict[str, Any] = {"op": origin.op.type, "op_name": origin.op.name, "copied_from": source}
    infinite = origin.health is not None and not origin.health.nan
    warnings = [
        w
        for w in _warnings_that_make(context.numpy_warnings, units)
        if (w.makes == "inf") == infinite or not infinite
    ]
    if warnings:
        warned = warnings[-1]
        where = place_text(os.path.basename(warned.file), warned.line, warned.cell)
        summary += f'; NumPy warned "{warned.message}" at {where}, where the program computed it'
        what = (
            f"NumPy made {warned.makes} here ({warned.message}), and the step reads it: make every entry finite "
            "where it is computed (a log of an entry that is 0, like a schedule's first variance: replace that "
            "entry by the next one, or np.log(np.maximum(x, 1e-20)))"
        )
        evidence["numpy_warning"] = warned.to_json()
        change = Change(
            file=os.path.abspath(warned.file), line=warned.line, what=what, target="op", cell=warned.cell
        )
        return Cause("data", summary, evidence, change)
    what = "the tensor this line reads from: make it finite where it is computed, before training"
    return Cause("data", summary, evidence, _origin_change(findings, what, "reading"))


def _non_finite_constant(findings: Findings, units: list[SourceUnit], origin: Finding) -> Cause:
    """The step's NaN/Inf came in with a constant of its graph: a value made before training and fixed into the
    step. Keras 3's ``Normalization`` does that with the mean and variance ``adapt()`` computed: adapted on data with
    a missing value (NaN), every row it normalises is NaN though the batch is clean. The ``adapt`` call is the line
    to change; another constant is named as such."""
    health = origin.health.describe() if origin.health else "NaN/Inf"
    evidence: dict[str, Any] = {"op": origin.op.type, "op_name": origin.op.name, "output": health}
    # The layer's automatic name, its call count in the train step taken off ("normalization_3_1" is the fourth
    # Normalization: with one suffix stripped it read "normalization_3" and matched nothing).
    segments = origin.op.name.split("/")[:-1]
    names = [layer_names(segments, i)[0] for i in range(len(segments))]
    layer = next((auto_name_parts(n) for n in names if auto_name_parts(n)[0] == "normalization"), None)
    adapt = change_line.adapt_site(units, layer[1]) if layer is not None else None
    infinite = origin.health is not None and not origin.health.nan and origin.health.non_finite > 0
    if adapt is not None and layer is not None and infinite:
        # Statistics of +inf, not NaN: adapt() read an infinity, which no missing value makes; a division by a 0
        # does (a ratio feature computed in the pipeline's map function, ``total_rooms / households``).
        division = change_line.mapped_division_site(units)
        made = (
            f"; {division.name}, which the pipeline maps, divides at {_site_place(division)}, and a 0 divisor "
            "makes inf"
            if division is not None
            else ""
        )
        summary = (
            f"the mean or variance of the Normalization layer {auto_name(*layer)} holds Inf ({health}): adapt() "
            f"read infinite values ({_site_place(adapt)}), and the layer fixed what it computed into the step, so "
            f"every row it normalises is NaN though the batch is finite{made}"
        )
        what = (
            "the data adapt() reads: its infinite values first (a division by 0: tf.math.divide_no_nan, or leave "
            "out the records whose divisor is 0); the layer keeps what adapt computes"
        )
        site = division if division is not None else adapt
        return Cause("data", summary, evidence, _change(site, what, "reading"))
    if adapt is not None and layer is not None:
        summary = (
            f"the mean or variance of the Normalization layer {auto_name(*layer)} holds NaN/Inf ({health}): adapt() "
            "read data with missing "
            f"values (NaN), and the layer fixed what it computed into the step, so every row it normalises is NaN "
            f"though the batch is finite ({_site_place(adapt)})"
        )
        what = "the data adapt() reads: fill or drop its missing values first (the layer keeps what adapt computes)"
        read = change_line.reading_site(units, None, None, None)
        if read is not None and not _drops_or_fills(units):
            # No line drops or fills them (the Auto MPG tutorial without its dropna): fit reads them too, and
            # dropping them in adapt's argument only, followed, met them at step 5 (s41c p1b). Where the data is
            # read, both get them dropped.
            summary += "; no line of the program drops or fills them, so fit's batches hold them too"
            what = (
                "the data read here: drop or fill its missing values right after reading (a DataFrame's .dropna(), "
                "or .fillna()), so that adapt() and fit both get them dropped; dropping them in adapt's argument "
                "alone leaves them in fit's batches"
            )
            return Cause("data", summary, evidence, _change(read, what, "reading"))
        return Cause("data", summary, evidence, _change(adapt, what, "reading"))
    summary = (
        f"a constant fixed into the step holds {health} ({origin.op.name}): a value made before training (a "
        "layer's state computed from data, a tensor captured from outside the step) was non-finite already"
    )
    what = "the value the step captures: make it finite where it is computed, before training"
    return Cause("data", summary, evidence, _origin_change(findings, what, "reading"))


# Code that drops or fills missing values (pandas, NumPy, scikit-learn).
_FILLS_OR_DROPS = re.compile(
    r"\b(?:dropna|fillna|isnan|isna|isnull|notna|notnull|nan_to_num|interpolate|SimpleImputer)\b"
)


def _drops_or_fills(units: list[SourceUnit]) -> bool:
    """Whether a statement of the program drops or fills missing values (``df = df.dropna()``, ``df.dropna(
    inplace=True)``, ``x = x[~np.isnan(x).any(axis=1)]``); a line that only looks (``df.isna().sum()``) does not."""
    for unit in units:
        for node in ast.walk(unit.tree):
            if isinstance(node, ast.Expr):
                inplace = isinstance(node.value, ast.Call) and called_name(node.value) in ("dropna", "fillna")
                if not inplace:
                    continue
            elif not isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return)):
                continue
            if _FILLS_OR_DROPS.search(ast.unparse(node)):
                return True
    return False


def _mask_constant(findings: Findings, origin: Finding) -> Finding | None:
    """The constant holding -inf/+inf that the origin turned into NaN (``tf.where(mask, scores, float("-inf"))``
    before a softmax): the origin's inputs hold infinities and no NaN, its output NaN, and a constant of the step
    holds an infinity, in the scope of the op that made the origin's input (``.../SelectV2/e`` for
    ``.../SelectV2:0``) or else of the origin. None otherwise."""
    health = origin.health
    if health is None or not health.nan:
        return None
    measured = [i for i in origin.inputs if i.health is not None]
    infinite_inputs = [i for i in measured if i.health and (i.health.neg_inf or i.health.pos_inf)]
    if not infinite_inputs or any(i.health and i.health.nan for i in measured):
        return None
    constants = [
        f
        for f in findings.findings
        if f.op.type == "Const" and f.health is not None and (f.health.neg_inf or f.health.pos_inf)
    ]
    scopes = [i.name.rsplit(":", 1)[0] + "/" for i in infinite_inputs] + [
        origin.op.name.rsplit("/", 1)[0] + "/"
    ]
    for scope in scopes:
        for constant in constants:
            if constant.op.name.startswith(scope):
                return constant
    return None


def _masked_row(
    findings: Findings,
    context: CauseContext,
    units: list[SourceUnit],
    origin: Finding,
    mask: Finding,
    rows: BadRows | None,
) -> Cause:
    """A mask's -inf became NaN in the origin: on a row where every position is masked, a softmax over -inf only
    is exp(-inf) / sum(exp(-inf)) = 0 / 0 (and a hand-written one's x - max(x) is -inf - -inf)."""
    op = origin.op.type
    sign = "-inf" if mask.health is not None and mask.health.neg_inf else "+inf"
    whole = next((o for o in rows.outliers if o.whole_row or o.empty_text), None) if rows else None
    where = ""
    came: dict[str, Any] | None = None
    if rows is not None:
        where = f" in {rows.rows_text()} of the batch"
        if whole is not None:
            record = f"{whole.element.leaf}[{whole.element.row}]"
            what_it_is = "an empty string" if whole.empty_text else "0 throughout, all padding"
            came, _, _ = _element_provenance(findings, context, units, whole.element)
            where += f" ({record} is {what_it_is}{_array_index_text(came)}: every position masked)"
    place = place_text(os.path.basename(mask.file), mask.line, mask.cell)
    summary = (
        f"the {op} op turned the {sign} of a mask constant ({place}) into NaN{where}: where every position of a row "
        f"is masked, a softmax over {sign} only is 0 / 0"
    )
    evidence: dict[str, Any] = {
        "op": op,
        "op_name": origin.op.name,
        "mask_constant": mask.op.name,
        "output": origin.health.describe() if origin.health else None,
    }
    if rows is not None:
        evidence["bad_rows"] = rows.to_json()
    minus = "-" if sign == "-inf" else ""
    dtype = (mask.health.dtype if mask.health is not None else None) or ""
    written = (
        _written_beyond(units, mask, DTYPE_MAX.get(dtype.lower())) if dtype.lower() in SIXTEEN_BIT else None
    )
    if dtype.lower() in SIXTEEN_BIT:
        # -1e9 is the usual finite mask value, and float16 (max 65504) holds it as -inf: the same line is finite
        # in float32. A value it can hold, or the scores in float32, keeps a fully masked row's weights even.
        evidence.update(dtype=dtype, written=written)
        limit = DTYPE_MAX[dtype.lower()]
        what = (
            f"the mask value: one {dtype} can hold ({minus}1e4, or the dtype's lowest / 2), or compute the scores "
            f"and the {op} in float32, so a row with every position masked gets even weights instead of NaN"
            + ("; or leave such records out where the data is read" if whole is not None else "")
        )
        if written is not None:
            summary = (
                f"the mask value {written} ({place}) is {sign} in {dtype}, whose largest value is {limit:g}, and the "
                f"{op} op turned it into NaN{where}: where every position of a row is masked, a softmax over "
                f"{sign} only is 0 / 0; in float32 the same line gives even weights"
            )
            change = Change(file=mask.file, line=mask.line, what=what, cell=mask.cell, target="op")
            return Cause("precision", summary, evidence, change, provenance=came)
    else:
        what = (
            f"the mask value: a large finite number instead of {sign} ({minus}1e9, or the dtype's lowest / 2), so a "
            "row with every position masked gets even weights instead of NaN"
            + ("; or leave such records out where the data is read" if whole is not None else "")
        )
    change = Change(file=mask.file, line=mask.line, what=what, cell=mask.cell, target="op")
    return Cause("op", summary, evidence, change, provenance=came)


_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?")


def _written_beyond(units: list[SourceUnit], finding: Finding, limit: float | None) -> str | None:
    """A number written on the finding's line whose magnitude the dtype cannot hold (``-1e9`` in float16)."""
    if limit is None:
        return None
    for unit in units:
        if os.path.abspath(unit.file) == os.path.abspath(finding.file) and unit.cell == finding.cell:
            for text in _NUMBER.findall(unit.line(finding.line)):
                try:
                    value = float(text)
                except ValueError:
                    continue
                if math.isfinite(value) and abs(value) > limit:
                    return text
    return None


def _empty_records_only(rows: BadRows) -> bool:
    return bool(rows.outliers) and all(o.whole_row or o.empty_text or o.empty_sequence for o in rows.outliers)


def _batch_place(context: CauseContext, batch_index: int | None, row: int | None = None) -> str:
    """' (batch 4, row 48)' of a fit's batch; ' (step 4's batch, row 48)' of a guarded step's arguments, where no
    batch is numbered but the step (a SAC loop's update 4 read as "batch 4", s42a p4); '' without an index."""
    if batch_index is None:
        return ""
    where = f"step {batch_index}'s batch" if context.step_function else f"batch {batch_index}"
    return f" ({where}{'' if row is None else f', row {row}'})"


def _row_outlier(
    findings: Findings, context: CauseContext, units: list[SourceUnit], origin: Finding, rows: BadRows
) -> Cause:
    """The origin op made NaN/Inf in some rows of the batch only, and one of those rows holds a value unlike what
    the other rows hold (a label of 50 among 0s and 1s, a price of -1): that record, where it came from, and the
    op's line."""
    outlier = rows.outliers[0]  # named by the step's parameters already (`classify`)
    where, batch_index, read_at = _element_provenance(findings, context, units, outlier.element)
    if read_at is None:
        # No reading call (arrays a notebook makes from a frame): where fit's array is made, ``y = df["count"]...``.
        read_at = change_line.fit_array_site(units, outlier.element.leaf)
    op = origin.op.type
    evidence = _read_evidence(origin, context, outlier.element, bad_rows=rows.to_json())
    at = _batch_place(context, batch_index)
    record = "that record" if rows.count == 1 else f"row {outlier.element.row}"
    whole = outlier.whole_row or outlier.empty_text or outlier.empty_sequence
    unlike = "is unlike the other rows" if whole else "holds a value unlike the other rows'"
    summary = (
        f"the {op} op made NaN/Inf in {rows.rows_text()} of the batch{at} only, and {record} {unlike}: "
        f"{outlier.describe()}{_array_index_text(where)}"
    )
    # The change is the op's line (the marked one); the record's own place is named in the words, where the data
    # is read: "where the data is read" beside a layer's line read as if the layer read it.
    read_place = f" ({_site_place(read_at)})" if read_at is not None else ""
    valid = _valid_zero_of_a_logged_column(context, origin, outlier, read_at)
    if valid is not None:
        column, count, file = valid
        summary = (
            f"the {op} op took {column} = 0 in {rows.rows_text()} of the batch{at}: log(0) is -inf; 0 is a valid "
            f"{column} in the data ({count} rows of {file} hold it) and the batch's other rows are positive "
            f"({_fmt(outlier.low)} to {_fmt(outlier.high)}), so it is no bad record"
        )
        what = (
            f"the log of {column}: take tf.math.log1p(x) (log(1 + x), 0 at 0), as a non-negative amount with zeros "
            f"is logged; leaving the {count} records out loses valid data, and a clamp at 1e-7 makes them outliers "
            "of -16"
        )
        return Cause("op", summary, evidence, _origin_change(findings, what, "op"), provenance=where)
    other_way = f"keep the {op} op's input in its domain for such values"
    if op in CTC_OPS:
        # A label longer than the logit frames allow has no alignment: no input of the loss is "out of domain".
        summary += (
            "; CTC's loss is +inf for a label no alignment fits: a label needs at least as many logit frames as its "
            "length plus its repeated neighbours"
        )
        other_way = (
            "give the model more logit frames (downsample the time axis less), or mask such rows' loss"
        )
    what = (
        f"the record {outlier.record_text()}: correct it or leave it out where the data is read{read_place}; or "
        f"{other_way}"
    )
    return Cause("data", summary, evidence, _origin_change(findings, what, "op"), provenance=where)


def _valid_zero_of_a_logged_column(
    context: CauseContext, origin: Finding, outlier: Outlier, read_at: change_line.Site | None
) -> tuple[str, int, str] | None:
    """(column, rows, file) when a log took a 0 of a CSV column that more than one record holds, where the batch's
    other rows are positive: a Titanic fare of 0 (12 passengers). "Correct the record or leave it out", the data
    words, dropped valid passengers; log1p is how such a column is logged (s41c p5)."""
    if origin.op.type != "Log" or outlier.element.value != 0 or outlier.low <= 0 or read_at is None:
        return None
    named = re.search(r"\[['\"]([^'\"]+)['\"]\]$", outlier.element.leaf)
    if named is None:
        return None
    column = named.group(1)
    counted = provenance.csv_column_count(read_at, column, 0.0, context.cwd, context.folders or [os.getcwd()])
    if counted is None or counted[0] < 2:
        return None
    return column, *counted


def _large_regularizer(
    origin: Finding, penalties: list[tuple[change_line.Site, float]], growth: trend.Trend | None
) -> Cause:
    """An overflow in a model whose code sets a weight penalty of 1 or more (`change_line.large_regularizers`)."""
    site, factor = penalties[0]
    where = _site_place(site)
    more = f" (and {len(penalties) - 1} more)" if len(penalties) > 1 else ""
    grew = ""
    if growth is not None:
        series = SERIES_WORDS.get(growth.series, growth.series)
        grew = f"the {series} grew x{growth.rate:.3g} per step for {growth.steps} steps and "
    # A penalty written by hand in add_loss is named by its factor's name (``LAMBDA = 1e3``).
    keras_call = site.name in change_line.REGULARIZERS
    shown = f"{site.name}({factor:g})" if keras_call else f"{site.name} = {factor:g}"
    summary = (
        f"{grew}{origin.op.type} overflowed float32 in a model whose weight penalty is {shown} "
        f"at {where}{more}: the penalty, {factor:g} times the weights' squares or magnitudes, outweighs the "
        "data's loss, and its gradient can push the weights past zero each step; usual factors are 1e-5 to 1e-2"
    )
    exponent = round(math.log10(factor))
    typo = f" (a typo for {10.0**-exponent:g}?)" if 1 <= exponent <= 6 and factor == 10.0**exponent else ""
    named = f"the {site.name} factor" if keras_call else f"the weight penalty's factor {site.name} ="
    what = f"{named} {factor:g}: a usual one is 1e-5 to 1e-2{typo}"
    evidence = {
        "op": origin.op.type,
        "op_name": origin.op.name,
        "overflow": True,
        "regularizers": [
            {"file": s.file, "line": s.line, "cell": s.cell, "call": s.name, "factor": f}
            for s, f in penalties
        ],
    }
    return Cause("op", summary, evidence, _change(site, what, "regularizer"))


SERIES_WORDS = {
    "loss": "loss",
    "logged_loss": "logged loss",
    "grad_norm": "gradient norm",
    "update_ratio": "update/weight ratio",
    "max_abs_output": "largest activation",
    "weight_norm": "weight norm",
}


def _extreme_record(
    findings: Findings, context: CauseContext, units: list[SourceUnit], origin: Finding, record: Outlier
) -> Cause:
    """An overflow on a batch with one value a million times every other row's (`rows.extreme_record`): the
    record, where it came from, and the line that reads the data (not the learning rate: no rate keeps a gradient
    1e20 times the usual one finite)."""
    record = dataclasses.replace(
        record, element=_named_by_step_parameters(record.element, units, context.step_function)
    )
    where, batch_index, site = _element_provenance(findings, context, units, record.element)
    at = _batch_place(context, batch_index)
    jump = trend.fast_growth(context.history)
    grew = ""
    if jump is not None:
        steps = f"{jump.steps} step{'s' if jump.steps != 1 else ''}"
        grew = f"the {SERIES_WORDS.get(jump.series, jump.series)} jumped x{jump.factor:.3g} in {steps} and "
    summary = (
        f"{grew}{origin.op.type} overflowed float32 on a batch{at} with one value far outside the rest: "
        f"{record.describe()}{_array_index_text(where)}; its gradient alone is that much larger than a usual one, "
        "so no learning rate keeps the step finite"
    )
    what = f"the record {record.record_text()}: correct it or leave it out where the data is read"
    evidence = _read_evidence(origin, context, record.element, overflow=True)
    change = _record_change(findings, context, units, record.element, site, what)
    return Cause("data", summary, evidence, change, provenance=where)


def _record_change(
    findings: Findings,
    context: CauseContext,
    units: list[SourceUnit],
    element: BadElement,
    site: change_line.Site | None,
    what: str,
) -> Change | None:
    """The change `what` for a record: at the reading call `site`, else (arrays made by the program's own
    arithmetic, no reading call) where the array fit is given is made."""
    made = _fit_array_site(context, units, element) if site is None else None
    change = _change(made, what, "array") if made is not None else _reading_change(findings, site)
    return dataclasses.replace(change, what=what) if change is not None else None


_MEAN_OPS = frozenset({"Mean"})


def _empty_mean_words(origin: Finding) -> tuple[str, str] | None:
    """(summary, what to change) for a mean of an empty tensor (its input recorded with 0 values): 0 / 0. Under a
    tf.distribute strategy, the last global batch split over the replicas leaves one with no rows, and
    ``tf.reduce_mean(per_example_loss)`` there is NaN. It was "a Mean op made NaN/Inf from finite inputs ...: keep
    its inputs in its domain", for an input that held nothing. None for any other op or input."""
    if origin.op.type not in _MEAN_OPS or not origin.inputs:
        return None
    values = origin.inputs[0].health
    if values is None or values.size != 0:
        return None
    summary = (
        f"the Mean op averaged an empty tensor ({origin.inputs[0].name}: 0 values): the mean of nothing is 0 / 0, "
        "NaN. A batch with no rows: under a tf.distribute strategy, a replica's share of a last global batch "
        "smaller than the replicas"
    )
    what = (
        "the mean of the per-example losses: tf.nn.compute_average_loss(per_example_loss, "
        "global_batch_size=GLOBAL_BATCH_SIZE) under a strategy (it divides by the global batch, so an empty share "
        "adds 0), or batch(..., drop_remainder=True) so no batch is short"
    )
    return summary, what


# The output of a softmax or sigmoid op, by the tensor's name: ``sequential/dense/Softmax:0``, ``Sigmoid_1:0``; not
# a name that only holds the word (``sampled_softmax_loss/StopGradient_1:0``, the sampler's expected counts, was
# told "the log of a softmax: take tf.nn.log_softmax").
_ACTIVATION_OUTPUT = {
    name: re.compile(rf"(?:^|/){name}(?:_\d+)?:\d+$", re.IGNORECASE) for name in ("softmax", "sigmoid")
}

# A Dense layer's last op when it has no activation: its bias add (``.../dense_2_1/Add:0``, ``.../dense/BiasAdd:0``).
_LINEAR_DENSE_OUTPUT = re.compile(r"(?:^|/)dense(?:_\d+)*/(?:Add|BiasAdd):\d+$")
# A cross-entropy's log (by the loss's scope, ``compile_loss/weighted_bce/Log``, or its line): of a Dense layer's
# linear output, logits. A rate or variance head's log (a Poisson NLL) wants a positive activation instead.
_CROSS_ENTROPY_HINT = re.compile(
    r"crossentropy|cross_entropy|bce|logit|log\(\s*1(?:\.0*)?\s*-", re.IGNORECASE
)
_EXP_OUTPUT = re.compile(r"(?:^|/)Exp(?:_\d+)?:\d+$")

# A rate this many times the optimizer's Keras default moves the weights by their own size in an update or two.
FAR_TOO_HIGH = 100.0


def _overflow_after_updates_at_a_rate_far_too_high(
    origin: Finding, context: CauseContext, cause: Cause, units: list[SourceUnit]
) -> Cause | None:
    """An op that overflowed within the first updates (too few for a growth to show) at a learning rate 100x or
    more the optimizer's default: the rate is the line to change, the op's bound the other way out. A VAE at
    ``Adam(learning_rate=1.0)`` was told "the exp: bound its input (tf.clip_by_value)": followed at both exps, the
    model stayed finite and learned nothing; the rate alone at 1e-3 trained. None otherwise."""
    if not cause.evidence.get("overflow") or cause.change is None or context.step is None:
        return None
    updates = context.step - _fit_start(context)
    # A fit called again after a stop (keras.io's ``for epoch: model.fit(epochs=1)`` loop): it begins where the
    # optimizer's count is, from the weights the stop kept, so its first step counts that count's updates.
    again = updates < 1 and 1 <= context.step <= 3
    if again:
        updates = context.step
    accumulated = context.model_info.get("gradient_accumulation_steps")
    if isinstance(accumulated, int) and not isinstance(accumulated, bool) and accumulated > 1:
        # Adam(gradient_accumulation_steps=4): steps 0-3 are one update, applied at step 3.
        updates //= accumulated
    optimizer = str(context.model_info.get("optimizer") or "")
    far = _rate_far_too_high(context, optimizer)
    if not 1 <= updates <= 3 or far is None:
        return None
    rate, default = far
    site = _rate_site(context, units, [optimizer])
    if site is None:
        return None
    times = rate / default
    bad_rows = BadRows.from_json(cause.evidence.get("bad_rows"))
    rows_text = bad_rows.rows_text() if bad_rows is not None else None
    # The rows an overflow of weights moved too far reached first are no records to look at (an LSTM at
    # RMSprop(0.3): "in rows 1, 19, 23, ... of the batch only" read as bad data).
    head = cause.summary.replace(f", in {rows_text} of the batch only", "") if rows_text else cause.summary
    if again:
        op = str(cause.evidence.get("op") or "an op")
        head = (
            f"{_article(op)} {op} op overflowed on finite inputs at this fit's first step, from weights that "
            f"{updates} update{'s' if updates != 1 else ''} of an earlier fit had moved (the optimizer's step "
            f"{context.step}: this fit began from the weights that fit left)"
        )
    summary = (
        f"{head}; the learning rate {format_number(rate)} is {times:.0f}x {optimizer}'s usual "
        f"{format_number(default)}: its first updates moved the weights by about their own size"
    )
    what = (
        f"learning rate {format_number(rate)} ({optimizer}): {times:.0f}x its usual "
        f"{format_number(default)}; try {format_number(default)}; or {cause.change.what}"
    )
    evidence = {**cause.evidence, "learning_rate": rate, "usual_learning_rate": default}
    return Cause(cause.kind, summary, evidence, _change(site, what, _site_target(site)))


def _rate_far_too_high(context: CauseContext, optimizer: str) -> tuple[float, float] | None:
    """(the constant rate the failing step used, `optimizer`'s usual rate) when the first is `FAR_TOO_HIGH` times
    the second or more; None for a schedule's rate, a non-finite one, or an optimizer with no usual rate known."""
    used = context.learning_rate
    default = change_line.DEFAULT_LEARNING_RATES.get(optimizer.lower())
    if used is None or not used.finite or used.schedule is not None or default is None:
        return None
    return (used.value, default) if used.value >= FAR_TOO_HIGH * default else None


def _sixteen_bit_overflow_at_a_rate_far_too_high(
    context: CauseContext, cause: Cause, units: list[SourceUnit]
) -> Cause | None:
    """A float16 overflow under ``mixed_float16`` at a learning rate 100x or more its optimizer's usual, after
    updates that grew the weights (x2 or more over the steps the guard recorded): the rate is the change. Keras's
    image classifier at ``Adam(3e-1)`` was told "keep this layer in float32", which moved the overflow to the next
    cast; the LossScaleOptimizer records no gradient norm, so no growth showed. None otherwise."""
    name = str(context.model_info.get("inner_optimizer") or context.model_info.get("optimizer") or "")
    far = _rate_far_too_high(context, name)
    if far is None:
        return None
    rate, default = far
    norms = [norm for _, norm in trend.finite_points(context.history, "weight_norm") if norm > 0]
    if len(norms) < 2 or norms[-1] < 2 * norms[0]:
        return None
    updates = sum(1 for a, b in itertools.pairwise(norms) if a != b)
    site = _rate_site(context, units, [name])
    if site is None:
        return None
    times = rate / default
    op, dtype, limit = cause.evidence.get("op"), cause.evidence.get("dtype"), cause.evidence.get("dtype_max")
    ending = f"{op} overflowed {dtype}" + (f" (max {limit:g})" if isinstance(limit, (int, float)) else "")
    summary = (
        f"the learning rate {format_number(rate)} is {times:.0f}x {name}'s usual {format_number(default)}: "
        f"{updates} update{'s' if updates != 1 else ''} grew the weights x{norms[-1] / norms[0]:.3g} (norm "
        f"{norms[0]:.3g} to {norms[-1]:.3g}) until {ending}"
    )
    what = (
        f"learning rate {format_number(rate)} ({name}): {times:.0f}x its usual {format_number(default)}; try "
        f"{format_number(default)} (float32 for the layer only moves the overflow to the next float16 op)"
    )
    evidence = {
        **cause.evidence,
        "learning_rate": rate,
        "usual_learning_rate": default,
        "weight_norm": {"from": norms[0], "to": norms[-1], "updates": updates},
    }
    return Cause("divergence", summary, evidence, _change(site, what, _site_target(site)))


def _log_of_a_sigmoid(findings: Findings, origin: Finding) -> bool:
    """Whether the origin is a Log of zeros a sigmoid made a few ops before (`describe.activation_into_log`)."""
    found = findings.extra.get("activation_into_log")
    return origin.op.type == "Log" and isinstance(found, dict) and found.get("type") == "Sigmoid"


def _divisor_holds_zeros(origin: Finding) -> bool:
    """Whether a division's divisor (its second input) held zeros, as the dump recorded it."""
    divisor = origin.inputs[1].health if len(origin.inputs) > 1 else None
    return divisor is not None and bool(divisor.zero)


def _extreme_record_before(context: CauseContext) -> tuple[int, Outlier] | None:
    """(step, record) of a value a million times its batch's others (`rows.extreme_record`) in one of the batches
    just before the failing step, the latest such; None when none holds one."""
    for step, batch in reversed(context.recent_batches):
        record = extreme_record(batch)
        if record is not None:
            return step, record
    return None


def _extreme_record_earlier(
    findings: Findings,
    context: CauseContext,
    units: list[SourceUnit],
    origin: Finding,
    step: int,
    record: Outlier,
) -> Cause:
    """An overflow on a clean batch after a batch with one value far outside the rest: that record's update drove
    the weights out (`_extreme_record_before`). The record and where the array that holds it is made."""
    record = dataclasses.replace(
        record, element=_named_by_step_parameters(record.element, units, context.step_function)
    )
    failing = f"step {context.step}'s" if context.step is not None else "the failing step's"
    summary = (
        f"the batch of step {step}, before the failing one, held one value far outside the rest: "
        f"{record.describe()}; its gradient alone is that much larger than a usual one, so that step's update "
        f"drove the weights far out and {failing} {origin.op.type} overflowed float32: no learning rate keeps such "
        "a step finite"
    )
    what = f"the record {record.record_text()} (in the batch of step {step}): correct it or leave it out where the data is read"
    # The line that reads or yields the data, as for a record of the failing batch (`_element_provenance`; the
    # array index is the failing batch's only): without it, the overflowing layer's line was named.
    site = change_line.reading_site(units, None, None, None)
    site = python_feed.feed_site(units, wrapped_functions=False) or site
    change = _record_change(findings, context, units, record.element, site, what)
    evidence = {**_read_evidence(origin, context, record.element, overflow=True), "record_step": step}
    return Cause("data", summary, evidence, change)


def _sqrt_differentiated_at_zero(origin: Finding) -> int | None:
    """How many zeros the Sqrt's value held where its gradient (SqrtGrad: dy * 0.5 / y, reading y) made NaN/Inf;
    None for any other op. A std or a norm of values that do not vary (a constant feature, a zero gradient) is
    the usual way there."""
    if origin.op.type != "SqrtGrad" or not origin.inputs:
        return None
    # SqrtGrad(y, dy): only y is the Sqrt's value; the zeros of the gradient coming in (dy) were counted too (a
    # triplet loss's 28 zero distances read "244 zeros in its value").
    value = origin.inputs[0].health
    if value is None or not value.is_finite:
        return None
    return value.zero or None


def _atan2_differentiated_at_the_origin(origin: Finding) -> int | None:
    """How many zeros the divisor of atan2's gradient (x**2 + y**2) held where it made NaN; None for any other op."""
    if (origin.op.forward_op or "").rsplit("/", 1)[-1].split("_")[0] != "Atan2" or len(origin.inputs) != 2:
        return None
    if origin.op.type not in DIVISION_OPS:
        return None
    divisor = origin.inputs[1].health
    return (divisor.zero or None) if divisor is not None and divisor.is_finite else None


def _in_the_step(origin: Finding) -> bool:
    """Whether an op ran in the training step's graph (or one it calls), not in a tf.data pipeline's function
    (``Dataset_map_...``) or an unknown place."""
    graph = origin.op.graph or ""
    return bool(graph) and not graph.startswith("Dataset_")


def _python_function_in_step(findings: Findings, units: list[SourceUnit], origin: Finding) -> Cause:
    """A py_function inside the step made NaN/Inf from a finite batch: the Python function it runs is the line to
    change (its own line, as for data made in Python), worded as an op of the step."""
    site = python_feed.feed_site(units, wrapped_functions=True)
    named = site.describe() if isinstance(site, python_feed.FeedSite) else f"the {origin.op.type} op"
    where = f" ({_site_place(site)})" if site is not None else ""
    summary = (
        f"{named}{where}, run inside the training step, made NaN/Inf from a finite batch: its Python code computed "
        "the non-finite values (a log or a division of a zero, an overflow)"
    )
    what = f"{named}: keep the values its Python code computes finite (an epsilon, a clip)"
    evidence = {"op": origin.op.type, "op_name": origin.op.name, "graph": origin.op.graph}
    change = _change(site, what, "op") if site is not None else _origin_change(findings, what, "op")
    return Cause("op", summary, evidence, change)


def _graph_loss_finite(findings: Findings) -> bool | None:
    """Whether the replayed graph step's loss was finite (None when not replayed: a dump of a whole run)."""
    verdict = ((findings.bundle or {}).get("verdicts") or {}).get("graph") or {}
    value = verdict.get("loss_finite")
    return value if isinstance(value, bool) else None


# A safe way to write each op the where guards, without the where's NaN gradient.
_WHERE_SAFE_FORMS = {
    "Log": "or tf.math.xlogy(y, x) for y * log(x)",
    "RealDiv": "or tf.math.divide_no_nan(a, b)",
    "Div": "or tf.math.divide_no_nan(a, b)",
}


_REDUCTION_OUTPUT = re.compile(r"(?:^|/)(?:Mean|Sum|Prod|Max|Min)(?:_\d+)?:0$")


_VARIANCE_OUTPUT = re.compile(r"(?:^|/)(?:Mean|Sum)(?:_\d+)?:0$|(?:^|/)moments/|variance", re.IGNORECASE)


def _rsqrt_of_a_variance(origin: Finding) -> bool:
    """An Rsqrt whose input, a variance (``tf.nn.moments``, a mean of squares), holds zeros."""
    return origin.op.type == "Rsqrt" and any(
        _VARIANCE_OUTPUT.search(i.name) and i.health is not None and (i.health.zero or 0) > 0
        for i in origin.inputs
    )


# A graph's degree (or a count) named on the line: ``deg_inv_sqrt = tf.math.rsqrt(degree)``, ``rowsum``.
_DEGREE_NAME = re.compile(r"\b(?:deg|degs|degree|degrees|in_deg|out_deg|rowsum|row_sum|node_degree)\b|\bdeg_")


def _inverse_root_of_a_degree(origin: Finding) -> bool:
    """An inverse square root of zeros on a line that names a degree: a GCN's ``rsqrt(degree)`` or ``pow(deg,
    -0.5)`` of a node with no edges, valid data for which the normalization is undefined."""
    zero_base = (
        bool(origin.inputs) and origin.inputs[0].health is not None and bool(origin.inputs[0].health.zero)
    )
    if origin.op.type == "Pow":
        exponent = origin.inputs[1].health if len(origin.inputs) > 1 else None
        return zero_base and exponent is not None and bool(exponent.neg)
    return origin.op.type == "Rsqrt" and zero_base and bool(_DEGREE_NAME.search(_origin_source_line(origin)))


def _log_of_a_reduction_of_zero(origin: Finding) -> bool:
    """A Log whose input, a reduction's output (a mean squared error), holds zeros."""
    return origin.op.type == "Log" and any(
        _REDUCTION_OUTPUT.search(i.name) and i.health is not None and (i.health.zero or 0) > 0
        for i in origin.inputs
    )


def _flat_records_reduced_to_zero(findings: Findings, origin: Finding, rows: BadRows) -> Cause:
    """A log of, or a division by, a per-record reduction that is exactly 0 on the batch's flat records (one value
    throughout): a PSNR loss's ``log(1 / mse)`` of flat patches the model reproduces exactly. The records are valid;
    the formula is undefined at 0. ``divide_no_nan`` gives 0 there, whose log is -inf again."""
    reduced = next((i.name for i in origin.inputs[::-1] if _REDUCTION_OUTPUT.search(i.name)), "its input")
    zeros = sum(
        (i.health.zero or 0)
        for i in origin.inputs
        if i.health is not None and _REDUCTION_OUTPUT.search(i.name)
    )
    summary = (
        f"the {origin.op.type} op got {zeros} zero{'s' if zeros != 1 else ''} from the per-record reduction "
        f"{reduced}, in {rows.rows_text()} of the batch, each a record with one value throughout (a flat patch, a "
        "blank frame): an error or a variance of such a record is exactly 0 (a model that reproduces it exactly), "
        f"where {'its log' if origin.op.type == 'Log' else 'a division by it'} is not finite; the records are valid"
    )
    what = (
        f"the {'log' if origin.op.type == 'Log' else 'division'}: keep the reduction away from 0 "
        "(tf.maximum(mse, 1e-10), or mse + 1e-10); tf.math.divide_no_nan gives 0 there, and a log of it is -inf"
    )
    evidence = {"op": origin.op.type, "op_name": origin.op.name, "reduction": reduced, "rows": rows.to_json()}
    return Cause("op", summary, evidence, _origin_change(findings, what, "op"))


def _reduction_of_zero_into_domain_op(origin: Finding) -> bool:
    """A Log, or a division by an input, that a reduction's output holding zeros feeds (``log(mse)``, ``1 / mse``)."""
    if origin.op.type == "Log":
        return _log_of_a_reduction_of_zero(origin)
    if origin.op.type not in DIVISION_OPS or len(origin.inputs) < 2:
        return False
    # A mean (of a squared error, of a deviation); a sum is a count's (a masked mean's), which has its own words.
    divisor = origin.inputs[1]
    return bool(re.search(r"(?:^|/)Mean(?:_\d+)?:0$", divisor.name)) and _divisor_holds_zeros(origin)


def _where_trap(findings: Findings, origin: Finding, masked: dict[str, Any]) -> Cause:
    """The forward pass made NaN/Inf where a ``tf.where`` then chose the other branch, so the loss is finite; the
    backward pass still runs through the branch not chosen and multiplies its zero gradient by the op's infinite
    slope: 0 * inf is NaN. The record that took that branch is valid (the where is meant for it)."""
    health = origin.health
    counts = [
        f"{n} {label}"
        for n, label in (
            (health.nan if health else 0, "NaN"),
            (health.neg_inf if health else 0, "-inf"),
            (health.pos_inf if health else 0, "+inf"),
        )
        if n
    ]
    made = " and ".join(counts) or "NaN/Inf"
    rows = BadRows.from_json((findings.bundle or {}).get("bad_rows"))
    at = f" in {rows.rows_text()} of the batch" if rows is not None else ""
    where = masked.get("line")
    place = f" at line {where}" if isinstance(where, int) else ""
    summary = (
        f"the loss was finite: the tf.where{place} discarded the {made} that {_article(origin.op.type)} "
        f"{origin.op.type} op made{at}, in the branch it does not select, but the gradient still runs through "
        "that branch, where a zero gradient times the op's infinite slope is 0 * inf = NaN"
    )
    safe = _WHERE_SAFE_FORMS.get(origin.op.type)
    what = (
        f"the {origin.op.type} inside the tf.where: give it a safe input where the condition is false, "
        "tf.where(c, f(tf.where(c, x, 1.0)), 0.0)" + (f", {safe}" if safe else "")
    )
    evidence = {
        "op": origin.op.type,
        "op_name": origin.op.name,
        "output": health.describe() if health is not None else None,
        "masked_by": masked,
    }
    return Cause("op", summary, evidence, _origin_change(findings, what, "op"))


def _fractional_power_differentiated_at_zero(origin: Finding) -> int | None:
    """How many zeros the base held where the gradient of ``pow(x, p)`` (a Pow op computing x ** (p - 1) in the
    backward pass) made NaN/Inf with a negative exponent p - 1; None for any other op."""
    if origin.op.type != "Pow" or not origin.op.forward_op or len(origin.inputs) != 2:
        return None
    base, exponent = (i.health for i in origin.inputs)
    if base is None or exponent is None or not base.is_finite or not exponent.neg:
        return None
    return base.zero or None


def _fast(context: CauseContext) -> tuple[trend.Trend | None, tuple[int, float] | None] | None:
    """(jump, large update) of a fast divergence (``trend.fast_growth``, ``trend.large_update``), None without
    either."""
    jump, update = trend.fast_growth(context.history), trend.large_update(context.history)
    return (jump, update) if jump is not None or update is not None else None


# A line that assigns the loss: ``loss = tf.reduce_mean(tf.square(y - y_pred))``, ``total_loss = ...``.
_LOSS_ASSIGNMENT = re.compile(r"^\s*\w*loss\w*\s*=[^=]")


def _in_float32_words(origin: Finding, dtype: str) -> str:
    """ "Compute this in float32" as it can be done in a layer under mixed precision: the cast result goes back to
    `dtype` (cast up alone, the next op mixed float32 and float16 and the model did not build); an exp of scores
    is a softmax's, which subtracting the max keeps in range in any dtype."""
    words = (
        f'compute this in float32 (tf.cast its input to "float32", and the result back to {dtype} before it meets '
        f"the layer's other {dtype} values)"
    )
    if origin.op.type == "Exp":
        words += (
            "; an exp of scores normalized by their sum is a softmax: tf.nn.softmax (or x - tf.reduce_max(x, axis, "
            "keepdims=True) before the exp) keeps it in range;"
        )
    return words


def _sixteen_bit_overflow(
    findings: Findings,
    context: CauseContext,
    units: list[SourceUnit],
    origin: Finding,
    dtype: str,
    known: bool,
) -> Cause:
    """A 16-bit overflow: `precision`, unless the history shows a divergence's growth or the weights' norm rising x10
    or more (`trend.weights_rose`). Then the updates drove the values up until float16 met them first: float32 would
    only put it off (a fine-tuning rate 10x too high under mixed_float16 diverged to 8e33 without it), and "keep the
    layer in float32" sent the user away from the rate."""
    past = _targets_past_the_range(context, units, dtype)
    if past is not None and not _LOSS_ASSIGNMENT.search(_origin_source_line(origin)):
        # Sale prices of 1e5 into a float16 Dense(1): the weights' norm rose x10 as the model learned to reach
        # them, read as a divergence; its rate, followed, met the same Inf 7 epochs later, and the output layer
        # in float32 alone trained at the same rate (s40c nb7).
        cause = _precision(findings, context, units, origin, dtype)
        limit = DTYPE_MAX.get(dtype, 65504.0)
        cause.summary += (
            f"; the targets ({past.describe()}) are past {dtype}'s max {limit:g}: a {dtype} output cannot reach "
            "them, and its weights grow as it tries (no divergence of the rate)"
        )
        cause.evidence["targets_past_range"] = past.to_json()
        if cause.change is not None:
            exponent = round(math.log10(max(c.rms for c in past.columns)))
            cause.change.what += f"; or scale the targets ({past.name} / 1e{exponent}) into {dtype}'s range"
        return cause
    rose = (trend.growth(context.history) or trend.weights_rose(context.history)) if known else None
    if rose is not None:
        return _divergence(context, units, origin, rose)
    # A fast divergence in its last steps (an update larger than the weights, SGD at 0.08 with momentum on float16
    # layers): the weights' median rise over the run was under x3, and "keep the layer in float32", followed, met
    # the same divergence 30 steps later in float32.
    update = trend.large_update(context.history) if known else None
    if update is not None:
        return _divergence(context, units, origin, trend.fast_growth(context.history), update)
    cause = _precision(findings, context, units, origin, dtype)
    squared = _targets_past_the_range(context, units, dtype, squared=True)
    if squared is not None and cause.change is not None:
        # Loads of 100-300 kW in a Gaussian NLL computed in float16: "compute this in float32" at the mean,
        # followed, moved the overflow to (y - mu) ** 2 (300 ** 2 > 65504, s41d p7). The loss as a whole in float32,
        # or targets of unit scale, keep it in range.
        largest = max(max(abs(c.low), abs(c.high)) for c in squared.columns)
        cause.summary += (
            f"; the targets ({squared.describe()}) are in raw units: their squares reach {largest**2:.3g}, and a "
            f"squared error of them passes {dtype}'s max {DTYPE_MAX.get(dtype, 65504.0):g} as soon as a prediction "
            "is off by their size"
        )
        exponent = round(math.log10(max(c.rms for c in squared.columns)))
        cause.change.what += (
            f"; the whole loss in float32 (cast the model's outputs and the targets to float32 where the loss "
            f"starts, not to the outputs' {dtype}), or scale the targets ({squared.name} / 1e{exponent})"
        )
        cause.evidence["targets_squared_past_range"] = squared.to_json()
    return cause


def _divergence(
    context: CauseContext,
    units: list[SourceUnit],
    origin: Finding,
    growth: trend.Trend | None,
    update: tuple[int, float] | None = None,
    ending: str | None = None,
) -> Cause:
    """A divergence: ``growth`` is the history's geometric trend, or (a fast divergence) the jump of the last
    steps and/or ``update``, an update larger than the weights. ``ending``: how it ended when no op overflowed
    (an exp that underflowed to 0 under a log)."""
    recorded = [
        str(context.model_info.get("optimizer") or ""),
        *[str(name) for name in context.model_info.get("optimizers") or []],
    ]
    site = _rate_site(context, units, recorded)
    start = _fit_start(context)
    evidence: dict[str, Any] = {
        "op": origin.op.type,
        "op_name": origin.op.name,
        "output": origin.health.describe() if origin.health else None,
        "optimizer": context.model_info.get("optimizer"),
    }
    fast = update is not None or (growth is not None and not growth.is_growth)
    texts = []
    if growth is not None:
        label = SERIES_WORDS.get(growth.series, growth.series)
        shown = growth.to_json()
        evidence.update(
            trend=shown,
            series=growth.series,
            rate_per_step=shown["rate_per_step"],
            steps=growth.steps,
            start_step=growth.start_step,
            factor=shown["factor"],
        )
        span = (
            f"({_fmt(growth.start_value)} at step {growth.start_step} to {_fmt(growth.end_value)} at step "
            f"{growth.end_step})"
        )
        if fast and growth.steps > trend.FAST_STEPS:
            # Longer than any jump `trend.fast_growth` finds: a rise over the run (`trend.weights_rose`).
            texts.append(f"the {label} rose x{growth.factor:.3g} over {growth.steps} steps {span}")
        elif fast:
            plural = "s" if growth.steps != 1 else ""
            texts.append(f"the {label} jumped x{growth.factor:.3g} in {growth.steps} step{plural} {span}")
        else:
            texts.append(f"the {label} grew x{growth.rate:.3g} per step for {growth.steps} steps {span}")
    if update is not None:
        evidence["update_ratio"] = {"step": update[0], "ratio": float(f"{update[1]:.4g}")}
        texts.append(f"the update at step {update[0]} was {update[1]:.3g} times the weights' norm")
    if fast:
        evidence["fast"] = True  # too few steps for a trend: the jump and the update size are the evidence
    # The first step's forward and backward pass overflowed: no update, at any rate, came before them (an
    # overflow in the update itself, a variable read of weights it made non-finite, is the rate's).
    before_any_update = not texts and (context.step or 0) == 0 and origin.op.type not in VARIABLE_READS
    if not texts:
        steps = (context.step or 0) - start + 1
        run = "the run's" if not start else "this fit's"  # a later fit of a loop of fits counts its own steps
        texts.append(
            f"values overflowed at {run} first step"
            if steps == 1
            else f"values overflowed within {run} first {steps} steps"
        )
    trend_text = " and ".join(texts)
    unscaled = _unscaled_inputs(context, units)
    change = None
    scheduled = None  # the rate a schedule gave the failing step, said with the schedule and the step
    used_rate = context.learning_rate
    if (
        site is not None
        and site.name in change_line.SCHEDULES
        and used_rate is not None
        and used_rate.schedule is not None
        and used_rate.finite
        and not change_line.same_rate(site.learning_rate, used_rate.value)
    ):
        # CosineDecay(1e-4, ..., warmup_target=50.0) diverged at 49.8: its initial rate is not what ran.
        site = dataclasses.replace(site, learning_rate=None, literal=False)
    if site is not None and site.learning_rate is None:
        # The line names no number (``SGD(FLAGS.learning_rate)``): the rate the failing step used, and the
        # command-line flag that gave it, when the bundle recorded them.
        used = context.learning_rate
        if used is not None and used.finite and used.schedule is not None and used.value > 0:
            at_step = f" at step {context.step}" if context.step is not None else ""
            scheduled = f"{format_number(used.value)} (from {used.schedule}{at_step})"
            evidence["scheduled_learning_rate"] = used.value
            piece = change_line.number_written_in(site, used.value)
            if piece is not None:  # the piece of PiecewiseConstantDecay(values=[...]) in effect: its own line
                site = dataclasses.replace(site, node=piece)
        if used is not None and used.finite and used.schedule is None and used.value > 0:
            flag = _rate_flag(context.argv, used.value)
            given = f", given as {flag} on the command line" if flag else ""
            swept = change_line.swept_value(site, used.value)
            site = dataclasses.replace(
                site, learning_rate=used.value, name=f"{site.name}{given}", node=swept or site.node
            )
            if flag:
                evidence["flag"] = flag
    searched = _window_suggestion(context)
    if site is not None:
        rate = site.learning_rate
        evidence["learning_rate"] = rate
        evidence["optimizer_line"] = {"file": site.file, "line": site.line, "call": site.name}
        if site.cell is not None:
            evidence["optimizer_line"]["cell"] = site.cell
        if site.momentum is not None:
            evidence["momentum"] = site.momentum
        clipped = change_line.optimizer_clips(units, recorded)
        # Clipping is no advice where the optimizer clips already (its norm still let the rate blow up).
        clip = f" (the gradients are clipped already: {clipped})" if clipped else ", or clip the gradients"
        if clipped:
            evidence["clipped"] = clipped
        if rate is not None:
            momentum = f", momentum {site.momentum:g}" if site.momentum is not None else ""
            advice = searched[1] if searched else f"try {format_number(rate / 10)}"
            usual = _usual_rate_after_a_failed_search(context, searched, recorded[0], rate)
            if usual is not None:
                advice, evidence["usual_learning_rate"] = usual
            what = f"learning rate {format_number(rate)} ({site.name}{momentum}): {advice}{clip}"
        elif searched:
            what = f"the learning rate of {site.name}: {searched[1]}{clip}"
        elif scheduled is not None and context.learning_rate is not None:
            value = context.learning_rate.value
            at_step = f" at step {context.step}" if context.step is not None else ""
            what = (
                f"the learning rate {format_number(value)} that {site.name} gives{at_step}: lower it (try "
                f"{format_number(value / 10)}){clip}"
            )
            rising = context.learning_rate.rising()
            growing = _growing_decay(units) if rising else None
            if rising:
                # ExponentialDecay(1e-3, 50, decay_rate=1.5): "try 0.00311" of a rate that grows x1.5 every 50 steps
                # only put the divergence off (step 424 to 694); the decay's own number is the change.
                rates_shown = ", ".join(f"{format_number(r)} at step {s}" for s, r in rising)
                what = (
                    f"{site.name} was still raising the rate, {format_number(value)}{at_step} ({rates_shown}): a decay "
                    "that grows; a lower start only puts the divergence off"
                )
                if growing is not None:
                    site, _, number = growing
                    how = (
                        "multiplies the rate by decay_rate every decay_steps: keep decay_rate below 1"
                        if number > 1
                        else "divides the rate by 1 + decay_rate * t: keep decay_rate above 0"
                    )
                    what += f": decay_rate={format_number(number)} makes it grow ({site.name} {how}){clip}"
                else:
                    what += f"; make it fall, or cap it{clip}"
            outlier = change_line.schedule_outlier(units, value) if not rising else None
            if outlier is not None:
                # PiecewiseConstantDecay(boundaries, [0.05, 5e3, 5e-4]): "try 500" still diverged; the piece is a
                # typo, a factor of 1e5 above the others, and the line to change is the list's.
                site = outlier.site
                evidence["schedule_outlier"] = {"written": outlier.written, "times": outlier.times}
                meant = f" ({outlier.meant}?)" if outlier.meant else ""
                what = (
                    f"{outlier.written} among the schedule's values {outlier.values} is "
                    f"{format_number(outlier.times)} times the largest of the others: a typo{meant}; "
                    f"{context.learning_rate.schedule or 'the schedule'} gives it{at_step}"
                )
        else:
            what = f"the learning rate of {site.name}: lower it{clip}"
        if site.literal and rate is not None and isinstance(site.node, ast.Call):
            # AdamW(\n    learning_rate=3.0,\n    weight_decay=1e-4, ...): the number's own line, not the call's first.
            written = change_line.number_written_in(site, rate)
            if written is not None and written.lineno != site.line:
                site = dataclasses.replace(site, node=written)
        elif rate is not None and (constant := change_line.rate_constant_site(site, rate)) is not None:
            # ``LR = 1.5`` above ``SGD(learning_rate=LR, momentum=0.9)``: the number is changed where it is written.
            site = constant
        change = _change(site, what, _site_target(site))
        if not site.literal and rate is not None and change_line.reads_config(site):
            # The line reads the rate from somewhere (optimizers.get(config["optimizer"]), SGD(cfg.lr)): a config
            # file beside the program that sets that very rate is where the user changes it.
            change = _config_change(context, site, rate, what) or change
        if not site.literal and rate is not None and change.target != "config":
            # SGD(cfg.optim.learning_rate), SGD(training_args.learning_rate): a settings class's default, however
            # the instance is named or nested. A default edited since counts only when no command-line flag gave
            # the rate (then the default is not what ran).
            change = (
                _attribute_default_change(units, site, rate, what, edited_too="flag" not in evidence)
                or change
            )
    elif (named := _rate_in_a_named_config(context, searched)) is not None:
        # No optimizer line of the program's (``getattr(keras.optimizers, cfg["name"])(**cfg)``): the config file
        # the run was given that sets the rate that ran.
        change, evidence["learning_rate"] = named
    own_schedule = _own_schedule_change(context, units, searched)
    if own_schedule is not None:
        # A schedule the user wrote (a warm-up with no cap grows without end): its line is the rate's.
        change = own_schedule
    blown_up = _blown_up_at_start(
        context.history, context.step, start, bool(_unscaled_inputs(context, units))
    )
    if blown_up is not None:
        # The state fit started from, not this fit's rate: lowering it cannot help (the search says so too).
        evidence["weights_at_start"] = {"step": blown_up[0], "weight_norm": blown_up[1]}
        loaded = change_line.weights_load_site(units)
        model_site = change_line.model_site(units)
        rebuild = (
            f"build the model again before this fit: its weights were already huge when the guard first saw it "
            f"(weight norm {blown_up[1]:.3g} at step {blown_up[0]}), left so by an earlier fit or loop of the same "
            "model (a notebook cell run again without the cell that makes the model)"
        )
        if loaded is not None:
            # The program gave the model those weights (load_weights of a diverged run's file, a backup resumed).
            change = _weights_load_change(
                loaded, f"already huge (weight norm {blown_up[1]:.3g} at step {blown_up[0]})"
            )
        elif model_site is not None:
            change = _change(model_site, rebuild, "model")
        elif change is not None:
            change = dataclasses.replace(change, what=f"{rebuild}; then {change.what}")
    if unscaled and blown_up is None:
        evidence["unscaled_inputs"] = [item.to_json() for item in unscaled]
        rate = site.learning_rate if site is not None else None
        if rate is None and context.learning_rate is not None and context.learning_rate.finite:
            rate = context.learning_rate.value
        left_out = any(u.role == "features" for u in unscaled) and _unused_normalizer(units) is not None
        if left_out or (
            scale.usual_rate(context.model_info.get("optimizer"), rate)
            and (any(u.first_to_change for u in unscaled) or _search_found_only_tiny_rates(searched, rate))
        ):
            # A normalizer made and adapted but left out of the model (``# normalizer,``) is the change at any rate.
            # A default rate that diverges at once: the inputs' scale is what is off, not the rate.
            # A custom loop's model (a subclass called on the batch) has no Input line: the features are scaled
            # where its loop's batches come from. At the first step no update ran: a rate is no way out.
            feed = change_line.loop_feed_site(units, context.step_function)
            change = _unscaled_change(units, unscaled, None if before_any_update else change, feed) or change
        elif (
            change is not None
            and any(u.role == "targets" and u.first_to_change for u in unscaled)
            # Within 10x of the optimizer's default: a rate 100x it (SGD at 1.0) is the first thing to change.
            and scale.usual_rate(context.model_info.get("optimizer"), None if rate is None else rate / 10)
        ):
            # Regression targets in raw units make every gradient that many times larger: scaled, the rate that
            # ran trained (s39f p12: 0.05 diverged on loads of ~500; a tenth of it, followed first, still blew up
            # to 1e18, while y / 1000 trained at 0.05). The scale comes first, the rate after it.
            roles = " and ".join(item.role for item in unscaled)
            change = dataclasses.replace(
                change,
                what=f"scale the {roles} first (the loss's gradients grow with the targets' scale, so a rate tuned "
                f"for unit-scale targets is too high for them); if it still diverges, the {change.what}",
            )
        elif change is not None:
            roles = " and ".join(item.role for item in unscaled)
            change = dataclasses.replace(change, what=f"{change.what}; and scale the {roles}")
    if origin.op.type == "Exp" and change is not None and blown_up is None:
        # An exponential activation (a rate head, a variance) has no bound: at a lower rate the same growth reaches
        # exp's 88.7 a few steps later (a count model at the suggested rate went NaN one step past the window).
        change = dataclasses.replace(
            change,
            what=f"{change.what}; and bound the exp (softplus in place of an exponential activation, or a clip of "
            "its input): a lower rate alone may only delay its overflow",
        )
    rate_text = (
        f" at learning rate {format_number(site.learning_rate)}"
        if site is not None and site.learning_rate
        else f" at learning rate {scheduled}"
        if scheduled is not None
        else f" at learning rate {format_number(evidence['learning_rate'])}"
        if site is None and evidence.get("learning_rate")  # read from a config file the run named
        else ""
    )
    dtype = (dtype_of(origin) or "").lower()
    limit = DTYPE_MAX.get(dtype) if dtype in SIXTEEN_BIT else None
    ending = ending or (
        "until an update made the weights non-finite"
        if origin.op.type in VARIABLE_READS
        # Under mixed_float16 the weights' growth met float16's range first: said so, not float32's.
        else f"until {origin.op.type} overflowed {dtype} (max {limit:g}; float32 would only have put it off)"
        if limit is not None
        else f"until {origin.op.type} overflowed float32 (max {FLOAT32_MAX:.3g})"
    )
    scale_text = " on unscaled " + _unscaled_text(unscaled) if unscaled else ""
    restart = context.learning_rate.restart if context.learning_rate is not None else None
    restart_text = ""
    if restart is not None and blown_up is None and not before_any_update:
        # SGDR's warm restart put the rate back up (1e-5 to 0.1 in one step) and the run diverged soon after: the
        # first cycle trained at that peak from weights less sharp, so the restart's peak is what to lower.
        step, low, high = restart
        evidence["restart"] = {"step": step, "from": low, "to": high}
        restart_text = (
            f", {(context.step or step) - step} steps after the schedule jumped back up from {format_number(low)} "
            f"to {format_number(high)} at step {step} (a warm restart)"
        )
        if change is not None:
            change = dataclasses.replace(
                change,
                what=f"{change.what}; or lower the restarts' peak (m_mul below 1 in CosineDecayRestarts, or a "
                "lower peak for the later cycles): the run diverged after a restart",
            )
    # The number the code writes (the site was given the rate that ran when the program changed it as it trained).
    code_site = (
        change_line.optimizer_site(units, [name for name in recorded if name]) if site is not None else None
    )
    code_rate = code_site.learning_rate if code_site is not None and code_site.literal else None
    rose = _rate_rose(context, growth, code_rate) if blown_up is None and restart is None else None
    if rose is not None:
        # A schedule that raises the rate without end (a decay's lost minus sign, LearningRateScheduler's
        # ``lr * 1.5`` per epoch): "try 0.0166" gave a number where the schedule's shape is the bug.
        evidence["rate_rose"] = {"from": rose.start_rate, "step": rose.start_step, "to": rose.raised_to}
        times = f"x{rose.raised_to / rose.start_rate:.3g}"
        began = "" if rose.start_step is None else f" at step {rose.start_step}"
        restart_text += (
            f", after the program raised the rate {times} {rose.since} "
            f"({format_number(rose.start_rate)}{began} to {format_number(rose.raised_to)})"
        )
        over = (
            "over the run"
            if rose.start_step is None
            else f"over the last {(context.step or rose.start_step) - rose.start_step} steps"
        )
        if change is not None:
            change = dataclasses.replace(
                change,
                what=f"the schedule that sets it: it raised the rate {times} {over}; keep it from rising (a decay's sign, a "
                f"factor per epoch above 1) or cap it {rose.cap_text()}"
                + (f"; and scale the {' and '.join(item.role for item in unscaled)}" if unscaled else ""),
            )
        peak = change_line.number_given(units, _is_peak_name, rose.start_rate, "schedule")
        if peak is not None and peak[2] >= rose.raised_to:
            # A schedule meant to rise (a cyclical rate, a warm-up) toward a peak the code gives (``CyclicLR(
            # max_lr=6e-1)``, meant 6e-3): "keep it from rising" turned the cycle into a constant (s41e p6). The run
            # diverged on the way to the peak: the peak is what to lower.
            peak_site, peak_name, peak_value = peak
            peak_text = ast.get_source_segment(peak_site.unit.text, peak_site.node) or f"{peak_value:g}"
            what = (
                f"the schedule's peak {peak_name}={peak_text}: the run diverged at {format_number(rose.raised_to)} on "
                f"its way there; lower the peak (below {format_number(rose.raised_to / 10)}, a tenth of that rate, "
                "or where a learning-rate range test finds the loss still falling)"
            )
            change = _change(peak_site, what, "schedule")
        elif (raised := change_line.peak_raised_site(units, _PEAK_NAMES)) is not None:
            # SGDR written as a callback that multiplies its peak at each restart (``self.max_lr *=
            # self.mult_factor``, meant to shrink it): the first cycle's peak trained, a later one diverged. "Keep it
            # from rising" would remove the cosine cycles themselves (s41e p8).
            line_text = raised.unit.line(raised.line).split("#", 1)[0].strip()
            what = (
                f"the line that raises the schedule's peak ({line_text}): each restart starts from a higher peak, "
                "and the run diverged after one; keep the peak (a factor of 1) or shrink it (a factor below 1)"
            )
            change = _change(raised, what, "schedule")
    summary = f"the run diverged{rate_text}{scale_text}{restart_text}: {trend_text}, {ending}"
    if before_any_update:
        summary = (
            f"values overflowed at the first step{scale_text}, with no step before it to diverge over: "
            f"{ending.removeprefix('until ')}"
        )
    if blown_up is not None:
        summary = (
            f"the weights were already huge when this fit began (weight norm {blown_up[1]:.3g} at step "
            f"{blown_up[0]}), and {trend_text}, {ending}"
        )
    # Only where the rate is the change: unscaled inputs and a schedule's restart or rise are their own causes.
    rate_is_the_change = (
        blown_up is None and not before_any_update and not unscaled and restart is None and rose is None
    )
    reversal = change_line.gradient_reversal(units) if rate_is_the_change else None
    if reversal is not None:
        # A gradient reversal (DANN's) of strength 10: the feature extractor climbs the domain head's loss with 10
        # times its gradient, and the two grow each other step after step. The rate it was named, followed, still
        # spiked the loss to 141; the strength at 1 trained at the same rate (s40b p2).
        evidence["gradient_reversal"] = {
            "file": reversal.strength.file,
            "line": reversal.strength.line,
            "cell": reversal.strength.cell,
            "name": reversal.name,
            "strength": reversal.value,
        }
        summary += (
            f"; the model reverses a gradient ({_site_place(reversal.reversal)}) at strength {reversal.name}="
            f"{reversal.value:g}: the features climb the adversary's loss with {reversal.value:g} times its gradient, "
            "and the two players' values grow each other"
        )
        instead = _rate_as_the_slower_way(change)
        what = (
            f"the gradient reversal's strength {reversal.name}={reversal.value:g}: 1 or less, ramped up from 0 "
            f"(DANN's 2 / (1 + exp(-10 * progress)) - 1){instead}"
        )
        change = _change(reversal.strength, what, "reversal")
    multiplied = change_line.growing_factor_site(units) if rate_is_the_change and reversal is None else None
    if multiplied is not None and multiplied.name.rsplit(".", 1)[-1] in context.step_state:
        # A penalty method's ``mu.assign(mu * beta)`` each iteration, uncapped (s42d p2): the loss weighs a term by
        # mu, 1.1 ** 74 = 1.2e3 times its start when the run diverged; the rate it named, followed, moved the NaN
        # from step 74 to 103. The growth is the change.
        value = context.step_state[multiplied.name.rsplit(".", 1)[-1]]
        evidence["growing_factor"] = {
            "line": multiplied.site.line,
            "name": multiplied.name,
            "factor": multiplied.factor,
        }
        summary += (
            f"; the program multiplies {multiplied.name} by {multiplied.factor:g} each time {_site_place(multiplied.site)} "
            f"runs, with no cap: it was {_fmt(value)} at the failing step, and the step's loss grows with it"
        )
        instead = _rate_as_the_slower_way(change)
        what = (
            f"the growth of {multiplied.name}: cap it ({multiplied.name}.assign(tf.minimum({multiplied.name} * "
            f"{multiplied.factor:g}, limit)), with a limit the step still trains at), or grow it more slowly; a "
            f"lower rate only moves the step where {multiplied.name} is too large{instead}"
        )
        change = _change(multiplied.site, what, "schedule")
        if searched:
            evidence["window"] = searched[0]
        return Cause("divergence", summary, evidence, change)
    weighted = change_line.large_loss_weight(units) if rate_is_the_change and reversal is None else None
    if weighted is not None:
        # ``loss_weights={"hours": 1e6}`` on a two-output model: that head's gradients are a million times the
        # other's; "no rate kept the window finite ... or clip the gradients", followed, trained the other head to
        # chance (s42f p2). The weight is the change.
        evidence["loss_weight"] = {
            "line": weighted.site.line,
            "output": weighted.output,
            "value": weighted.value,
        }
        summary += (
            f"; compile weighs the loss of {weighted.output!r} by {weighted.value:g} "
            f"({_site_place(weighted.site)}): its gradients are that many times larger, past what the rate is tuned "
            "for"
        )
        instead = _rate_as_the_slower_way(change)
        what = (
            f"the loss weight of {weighted.output!r}: {weighted.value:g} makes that output's gradients "
            f"{weighted.value:g} times larger; weigh the losses to a similar size (scale that output's targets "
            f"instead, or a weight near 1){instead}"
        )
        change = _change(weighted.site, what, "loss")
    decay = (
        change_line.hand_weight_decay(units)
        if rate_is_the_change and reversal is None and weighted is None
        else None
    )
    if decay is not None:
        # A decoupled weight decay by hand with its factor typed 5e3 (meant 5e-4): each step multiplies the weights
        # by 1 - lr * wd = -4. The rate it was named, followed, made lr * wd just below 1 and the model learned
        # nothing (accuracy at chance, s41e p7): the factor is the change, not the rate.
        ran: float | None = site.learning_rate if site is not None else None
        if ran is None and context.learning_rate is not None and context.learning_rate.finite:
            ran = context.learning_rate.value
        times = (
            f": each step multiplies the weights by 1 - lr * {decay.name} = {1 - ran * decay.value:.3g} at the "
            f"rate {format_number(ran)}"
            if ran
            else ""
        )
        evidence["hand_weight_decay"] = {"line": decay.factor.line, "name": decay.name, "factor": decay.value}
        summary += (
            f"; the step decays the weights by hand ({_site_place(decay.write)}) with {decay.name}="
            f"{decay.value:g}{times}{', so they change sign and grow each step' if ran and ran * decay.value > 2 else ''}"
        )
        factor_text = ast.get_source_segment(decay.factor.unit.text, decay.factor.node) or f"{decay.value:g}"
        exponent = math.floor(math.log10(decay.value))
        mantissa = decay.value / 10.0**exponent
        typo = f" (a typo for {mantissa:g}e-{exponent}?)" if 1 <= exponent <= 6 else ""
        what = f"{decay.name}={factor_text}: a usual weight decay is 1e-5 to 1e-1{typo}"
        change = _change(decay.factor, what, "regularizer")
    if searched:
        evidence["window"] = searched[0]  # the sentence is in change.what, next to the rate it replaces
    return Cause("divergence", summary, evidence, change)


@dataclass(frozen=True)
class RateRise:
    """The program raised its learning rate before a divergence: from `start_rate` at `start_step` to `raised_to`
    at the failing step; `since` says over which steps (the divergence's, or the guard's window)."""

    start_rate: float
    start_step: int | None  # None: the rate the code writes, before any step
    raised_to: float
    since: str
    # The lowest rate known to have trained before the rise: the history's lowest (step, rate), or the rate the
    # code writes (step None) when lower. The rate when the growth began was already too high (a warm-up callback's
    # x3 per epoch capped there collapsed the model; a fit cell run again had blown up at a rate x36000 lower).
    lowest: tuple[int | None, float] | None = None

    def cap_text(self) -> str:
        if self.lowest is None:
            return "below the rates that trained"
        step, rate = self.lowest
        where = (
            "the rate your code sets"
            if step is None
            else f"the rate at step {step}, the lowest the guard recorded"
        )
        return f"at or below {format_number(rate)}, {where}"


def _rate_rose(
    context: CauseContext, growth: trend.Trend | None, written: float | None = None
) -> RateRise | None:
    """The rise of the learning rate the program set as it trained (x1.5 or more up to the failing step), read from
    the history's rates at the step the growth began (else, or when the rate held still over the growth, its oldest
    rate: a hand schedule's lost minus sign raised it x1.16 over the window and x3.6 over the history), or from the
    rate at the window's start (bundles without rates in their history); None when the rate did not rise so.
    `written`: the rate the code writes, the cap when it is below every rate recorded."""
    used = context.learning_rate
    if used is None or not used.finite or not used.value > 0:
        return None
    rates = [
        (row["step"], float(row["learning_rate"]))
        for row in context.history
        if isinstance(row.get("step"), int)
        and isinstance(row.get("learning_rate"), (int, float))
        and not isinstance(row.get("learning_rate"), bool)
        and math.isfinite(row["learning_rate"])
        and row["learning_rate"] > 0
    ]
    rise: RateRise | None = None
    if rates:
        began = growth.start_step if growth is not None else None
        at_growth = [(s, r) for s, r in rates if began is not None and s == began]
        if at_growth and used.value < 1.5 * at_growth[0][1]:
            at_growth = []  # a LearningRateScheduler raises it per epoch: it held still over a short growth
        step, rate = (at_growth or rates)[0]
        since = (
            "since the growth began" if at_growth else f"over the last {len(rates)} steps the guard recorded"
        )
        lowest: tuple[int | None, float] = min(rates, key=lambda item: item[1])
        if written is not None and 0 < written < lowest[1]:
            lowest = (None, written)
        rise = RateRise(rate, step, used.value, since, lowest=lowest)
    else:
        search = context.window_search or {}
        start_rate, start_step = search.get("captured_learning_rate"), search.get("start_step")
        if (
            isinstance(start_rate, (int, float))
            and not isinstance(start_rate, bool)
            and isinstance(start_step, int)
            and not isinstance(start_step, bool)
            and math.isfinite(start_rate)
            and start_rate > 0
        ):
            low = (None, written) if written is not None and 0 < written < start_rate else None
            rise = RateRise(float(start_rate), start_step, used.value, "over the guard's window", lowest=low)
    rising = len(rates) > 1 and rates[-1][1] > 1.05 * rates[0][1]
    if (
        (rise is None or rise.raised_to < 1.5 * rise.start_rate)
        and rising
        and written is not None
        and 0 < written
        and used.value >= 1.5 * written
        and used.schedule is None
    ):
        # A rate the program raised slowly (LearningRateScheduler's ``lr * exp(0.1)`` per epoch over 40 epochs, a
        # warm-up without end): x1.3 over the history, x45 over the run; the code's own number tells the rise.
        # (Rising over the history: a rate set once after compile, ``model.optimizer.learning_rate = 0.5``, is no
        # rise of the program's, but a rate of its own.)
        rise = RateRise(
            written, None, used.value, "over the run, from the rate your code sets", lowest=(None, written)
        )
    return rise if rise is not None and rise.raised_to >= 1.5 * rise.start_rate else None


def _targets_past_the_range(
    context: CauseContext, units: list[SourceUnit], dtype: str, squared: bool = False
) -> scale.UnscaledInput | None:
    """The captured batch's regression targets when their largest value passes a 16-bit dtype's range (float16's
    65504): a model whose output is in that dtype cannot produce them whatever its rate. With `squared`, the raw-unit
    targets whose square reaches a quarter of that range: an error twice a target's size, squared, overflows there
    (a prediction of -50 for a load of 250). None otherwise."""
    limit = DTYPE_MAX.get(dtype, 65504.0)
    for found in _unscaled_inputs(context, units):
        largest = max(max(abs(c.low), abs(c.high)) for c in found.columns)
        if found.role == "targets" and (largest**2 > limit / 4 if squared else largest > limit):
            return found
    return None


def _unscaled_inputs(context: CauseContext, units: list[SourceUnit]) -> list[scale.UnscaledInput]:
    """Features or targets of the captured fit batch in raw units (features: into a model with no normalizing
    layer in its saved config or constructed in the user's code)."""
    if context.batch is None:
        return []
    classes = set(context.layer_classes or ()) | change_line.constructed_names(
        units, scale.NORMALIZING_LAYERS
    )
    arguments = _step_arguments(context.batch)
    if arguments is not None:
        trained = (context.step_function or {}).get("variable_arguments") or []
        if any(position in (0, 1) for position in trained):
            return []  # the step optimizes what it is given (style transfer's image): no (features, labels)
        # guard_step's (features, labels, ...): its first two arguments, if arrays, as a fit batch's x and y, by the
        # step's own parameter names where its definition is found.
        step = context.step_function or {}
        parameters = parameters_of(units, step.get("qualname"), step.get("file")) or []
        named = [
            (parameters[i] if i < len(parameters) else f"args[{i}]", argument)
            for i, argument in enumerate(arguments)
        ]
        # The step's arrays, past the objects it is also given (``train(model, x, y, learning_rate)``: x was read
        # as the targets, "unscaled targets (x from 529 ...)", s40b p7).
        arrays = [
            (name, argument)
            for name, argument in named
            if any(isinstance(leaf, np.ndarray) for _, leaf, _ in provenance.leaves(argument))
        ][:2]
        if len(arrays) < 2:
            return []
        names = (arrays[0][0], arrays[1][0])
        return scale.unscaled_inputs((arrays[0][1], arrays[1][1]), classes, names)
    return scale.unscaled_inputs(context.batch, classes)


# A window search whose largest finite rate is this far below the usual rate that ran: the inputs' scale is what
# is off (pixels 0..255 under SGD 0.01 kept finite only at 3.45e-6, and 1.73e-6, followed, diverged at step 15).
TINY_RATE_FACTOR = 1e-3


def _search_found_only_tiny_rates(searched: tuple[dict[str, Any], str] | None, rate: float | None) -> bool:
    """Whether the guard's window search kept the window finite only at rates `TINY_RATE_FACTOR` times the rate
    that ran, or below."""
    largest = searched[0].get("largest_finite_learning_rate") if searched else None
    return (
        isinstance(largest, (int, float))
        and isinstance(rate, (int, float))
        and rate > 0
        and largest <= TINY_RATE_FACTOR * rate
    )


def _unused_normalizer(units: list[SourceUnit]) -> tuple[change_line.Site, change_line.Site | None] | None:
    """(where a normalizing layer is made, where its use is commented out or None) for the one layer the code makes
    and adapts but never puts in a model."""
    unused = change_line.unused_layer_uses(units, scale.NORMALIZING_LAYERS)
    if len(unused) != 1:
        return None
    layer = unused[0]
    commented = None
    if layer.commented is not None and layer.commented_unit is not None:
        # A comment has no node: a marker at its line stands for it.
        marker = ast.Constant(value=None, lineno=layer.commented, col_offset=0)
        commented = change_line.Site(layer.commented_unit, marker, layer.name)
    return layer.site, commented


def _rate_as_the_slower_way(change: Change | None) -> str:
    """' (or, slower to train: <the rate's change>)': the rate kept as the other way out when another change comes
    first (unscaled inputs, a reversal's strength, a growing factor, a loss weight); '' without one."""
    return f" (or, slower to train: {change.what})" if change is not None else ""


def _eight_bit_pixels(item: scale.UnscaledInput) -> bool:
    """Whether the unscaled input is whole images of 8-bit pixels (0..255) that no one divided by 255."""
    return all(c.column is None and 0 <= c.low and 128 < c.high <= 255 for c in item.columns)


def _unscaled_change(
    units: list[SourceUnit],
    unscaled: list[scale.UnscaledInput],
    rate_change: Change | None,
    feed: change_line.Site | None = None,
    mixed: bool = False,
) -> Change | None:
    """The change for a divergence on unscaled inputs: features get a Normalization layer where the model takes
    its inputs (else where `feed`, a custom loop's batches, are made), targets a scale where fit gets them; the
    rate's change stays as the other way out."""
    instead = _rate_as_the_slower_way(rate_change)
    parts = []
    site = None
    target = None
    for item in unscaled:
        if item.role == "features" and (unused := _unused_normalizer(units)) is not None:
            # The Basic regression tutorial with ``# normalizer,`` commented out of the model: the layer is made and
            # adapted, and "add keras.layers.Normalization()" named none of that.
            made, commented = unused
            site = site or commented or made
            where = "commented out of the model here" if commented is not None else "never put in the model"
            parts.append(
                f"scale the features ({item.describe()}): put {made.name} back in the model as its first layer (it "
                f"is made and adapted at {_site_place(made)}, and {where})"
            )
            continue
        if item.role == "features" and (subclass := change_line.subclass_input(units, item.name, feed)):
            # A keras.Model subclass has no first layer: its call hands the inputs to its parts (s43b p5: the
            # first Sequential was the deep tower, and a Normalization there, followed, left the SGD-trained wide
            # Dense on raw timestamps: loss nan). Scaled where the array is made, every part reads it scaled.
            site = site or subclass.site
            target = "array" if subclass.made else "input"
            parts.append(_subclass_input_words(units, item, subclass, mixed))
            continue
        if item.role == "features":
            # The Input that takes this part of the batch (a dict input's key names it), else the first one.
            functional = change_line.functional_input(units, item.name)
            site = (
                site
                or (functional.site if functional else None)
                or change_line.model_input_site(units)
                or feed
            )
            # Under a mixed policy the layer computes in float16 (a timestamp of 1.7e9 is inf there before it is
            # scaled): keras.layers.Normalization(dtype="float32"), followed, trained.
            normalization = 'Normalization(dtype="float32")' if mixed else "Normalization()"
            if functional is not None and len(functional.readers) > 1:
                # One Input read by several layers (a wide and a deep part, s43b p5): a Normalization "as the
                # first layer" put before one of them leaves the others on raw values.
                together = ", ".join(functional.readers[:-1]) + f" and {functional.readers[-1]}"
                both, others = (
                    ("both", "the other") if len(functional.readers) == 2 else ("all", "the others")
                )
                pixels = _eight_bit_pixels(item)
                layer = (
                    "Rescaling(1.0 / 255)" if pixels else f"{normalization} adapted to the training features"
                )
                parts.append(
                    f"scale the features ({item.describe()}): apply one keras.layers.{layer} to "
                    f"{functional.site.name}, this Input, and hand its output to every layer that reads the input: "
                    f"{together} {both} read it, and a Normalization before one leaves {others} on raw values; "
                    f"or {'divide' if pixels else 'standardize'} {item.name}{' by 255' if pixels else ''} before fit"
                )
                continue
            if _eight_bit_pixels(item):
                # 8-bit pixels that no one divided by 255 (keras.io puts Rescaling first).
                parts.append(
                    f"scale the features ({item.describe()}: 8-bit pixels): add keras.layers.Rescaling(1.0 / 255) "
                    "as the model's first layer, or divide x by 255 before fit"
                )
                continue
            parts.append(
                f"scale the features ({item.describe()}): add keras.layers.{normalization} adapted to the "
                "training features (norm.adapt(x)) as the model's first layer, or standardize x before fit"
            )
        else:
            site = site or change_line.fit_array_site(units, "y")
            if site is not None and change_line.targets_predicted_by_the_model(site):
                # A DQN's targets, r + gamma * max Q(s'), of the network it trains (s42a p5): they grew with its
                # weights to 1e23; "scale the targets" named the symptom. The rewards' scale and a target network
                # are the usual fixes.
                parts.append(
                    f"the targets ({item.describe()}) are the model's own predictions plus rewards (a Q-learning "
                    "target bootstrapped from the network it trains): as its weights grow, so do they; scale the "
                    "rewards to about unit size (or clip them), and compute the targets with a target network (a "
                    "copy of the model updated every few hundred steps), with a Huber loss"
                )
                continue
            parts.append(
                f"scale the targets ({item.describe()}): divide y by its scale (or standardize it) before fit, "
                "and undo that on the predictions"
            )
    if site is None:
        return None
    what = "; ".join(parts) + f"; the usual learning rates assume values of about unit scale{instead}"
    return _change(site, what, target or ("input" if unscaled[0].role == "features" else "data"))


def _subclass_input_words(
    units: list[SourceUnit], item: scale.UnscaledInput, subclass: change_line.SubclassInput, mixed: bool
) -> str:
    """The change's words for a feature input of a model subclass (`change_line.subclass_input`): scale it where it
    is made (or at the start of ``call``), so every layer that reads it gets it scaled; the layers named."""
    pixels = _eight_bit_pixels(item)
    keyed = _DICT_KEY.match(item.name)
    names = change_line.keyed_columns(units, keyed.group(1)) if keyed is not None else None
    raw = [
        repr(names[c.column])
        for c in item.columns
        if names and c.column is not None and c.column < len(names)
    ]
    columns = f" ({', '.join(raw)} in raw units)" if raw else ""
    readers = subclass.readers
    read = ""
    if len(readers) > 1:
        together = ", ".join(readers[:-1]) + f" and {readers[-1]}"
        both, others = ("both", "the other") if len(readers) == 2 else ("all", "the others")
        read = f": {together} {both} read it, and a Normalization first in one leaves {others} on raw values"
    elif readers:
        read = f" ({readers[0]} reads it)"
    normalization = 'Normalization(dtype="float32")' if mixed else "Normalization()"
    scaling = (
        "divide it by 255" if pixels else "standardize it (minus the training rows' mean, over their std)"
    )
    layer = f"keras.layers.{'Rescaling(1.0 / 255)' if pixels else normalization}"
    adapted = "" if pixels else " adapted to the training values (norm.adapt(...))"
    if subclass.made:
        return (
            f"scale the features ({item.describe()}): {subclass.model} is a model subclass with no first layer "
            f"(its call hands {item.name}{columns} to its parts): {scaling} where it is made, here, so every part "
            f"that reads it gets it scaled{read}; or apply one {layer}{adapted} to {item.name} at the start of "
            f"{subclass.model}.call, before the parts that read it"
        )
    return (
        f"scale the features ({item.describe()}): {subclass.model} is a model subclass with no first layer (its "
        f"call hands {item.name}{columns} to its parts): apply one {layer}{adapted} to {item.name} at the start of "
        f"{subclass.model}.call, before this line, and give every part that reads it the scaled values{read}; or "
        f"{scaling} before fit"
    )


_RATE_FLAG = re.compile(r"^--?[\w.-]*(?:lr|learning[_-]?rate)[\w.-]*$", re.IGNORECASE)


def _rate_flag(argv: list[str], value: float) -> str | None:
    """``--learning_rate=2.0`` (or ``--lr 2``) in the run's command line when it gives `value` (float32 read)."""
    return _flag_giving(
        argv,
        lambda name: _RATE_FLAG.match(name) is not None,
        lambda given: math.isclose(given, value, rel_tol=1e-6),
    )


def _flag_giving(argv: list[str], named: Callable[[str], bool], gives: Callable[[float], bool]) -> str | None:
    """The first ``--name=value`` (or ``--name value``) of the run's command line whose name is `named` and whose
    number `gives` holds for, as written; None when none is."""
    for index, arg in enumerate(argv[1:], 1):
        name, _, text = arg.partition("=")
        if not named(name):
            continue
        if not text and index + 1 < len(argv):
            text = argv[index + 1]
            arg = f"{name} {text}"
        try:
            given = float(text)
        except ValueError:
            continue
        if gives(given):
            return arg
    return None


def _window_suggestion(context: CauseContext) -> tuple[dict[str, Any], str] | None:
    """(evidence, sentence) of the guard's learning-rate search over its window, when it found a finite rate, or
    when it tried rates and none was (`_search_found_none`)."""
    search = context.window_search or {}
    largest, suggested = search.get("largest_finite_learning_rate"), search.get("suggested_learning_rate")
    steps = search.get("steps")
    numbers = positive_numbers(largest, suggested, steps)
    if numbers is None:
        return _search_found_none(search)
    largest_rate, suggested_rate, window_steps = numbers
    # A bundle written before the short window's tenth (`rate_to_try`) holds half of its largest: the same rule.
    suggested_rate = rate_to_try(largest_rate, suggested_rate, int(window_steps))
    evidence = {
        "steps": int(window_steps),
        "start_step": search.get("start_step"),
        "captured_learning_rate": search.get("captured_learning_rate"),
        "largest_finite_learning_rate": largest_rate,
        "smallest_non_finite_learning_rate": search.get("smallest_non_finite_learning_rate"),
        "suggested_learning_rate": suggested_rate,
    }
    sentence = (
        f"largest finite over the {int(window_steps)}-step window: {format_number(largest_rate)}; "
        f"try {format_number(suggested_rate)}"
    )
    start = search.get("start_step")
    if isinstance(start, int) and not isinstance(start, bool) and 0 < start < window_steps:
        # The window could not start at the run's first step (a custom loop's optimizer makes its slots in its
        # first update, so the copy of step 0 is not whole): it starts from weights the first updates moved at the
        # run's own rate. A trainer whose step 0 took its weight norm from 27 to 17000 had 30-50x lower rates
        # suggested than its own 2e-5 that trained from the start.
        sentence += (
            f" (from the state at step {start}, which the run's first updates reached at its own rate: from the "
            "start a higher rate may hold)"
        )
    if window_steps < SHORT_WINDOW:
        # Three users followed "try 6.57e-4" from a 5-step window: finite, and a network that learned nothing
        # (a loss flat at the targets' variance for 27 epochs); the search shows a rate keeps the window finite.
        sentence += (
            f" (a tenth of it: finite over {int(window_steps)} steps, which does not show it trains: check that "
            "the loss falls)"
        )
    return evidence, sentence


def _usual_rate_after_a_failed_search(
    context: CauseContext, searched: tuple[dict[str, Any], str] | None, optimizer: str, rate: float
) -> tuple[str, float] | None:
    """(the advice, the usual rate) for a rate 100x or more its optimizer's usual when the window search kept no
    rate finite from a state the run reached at that rate: the usual rate, from the start. keras.io's RealNVP at
    ``Adam(0.1)`` (a custom ``train_step``: Adam's slots are made in step 0, so the window starts at step 1) was told
    "no rate down to 2.44e-5 kept the 1-step window finite"; its first update had moved the weights too far, and
    1e-3 trained."""
    far = _rate_far_too_high(context, optimizer)
    if searched is None or far is None or not change_line.same_rate(far[0], rate):
        return None
    window = searched[0]
    start = window.get("start_step")
    if (
        window.get("largest_finite_learning_rate") is not None
        or not isinstance(start, int)
        or isinstance(start, bool)
    ):
        return None
    updates = start - _fit_start(context)
    if updates < 1:
        return None  # a window from this fit's first state: no update at the rate came before it
    default = far[1]
    lowest = window.get("lowest_learning_rate_tried")
    tried = f" down to {format_number(lowest)}" if isinstance(lowest, (int, float)) else ""
    advice = (
        f"{rate / default:.0f}x its usual {format_number(default)}; try {format_number(default)} from the start: "
        f"the window began at step {start}, from weights {updates} update{'s' if updates != 1 else ''} at "
        f"{format_number(rate)} had moved, and no rate{tried} kept it finite from there"
    )
    return advice, default


def _search_found_none(search: dict[str, Any]) -> tuple[dict[str, Any], str] | None:
    """A search that tried lower rates and kept no window finite: "try a tenth" would be advice it disproved."""
    trials = [t for t in search.get("trials") or [] if isinstance(t, dict)]
    tried = [rate[0] for t in trials if (rate := positive_numbers(t.get("learning_rate"))) is not None]
    steps = positive_numbers(search.get("steps"))
    if (
        not tried
        or steps is None
        or search.get("largest_finite_learning_rate") is not None
        or any(t.get("finite") is not False for t in trials)  # finite at a rate tried: not "none kept it"
    ):
        return None
    lowest = min(tried)
    evidence = {
        "steps": int(steps[0]),
        "start_step": search.get("start_step"),
        "captured_learning_rate": search.get("captured_learning_rate"),
        "largest_finite_learning_rate": None,
        "lowest_learning_rate_tried": lowest,
    }
    start = search.get("start_step")
    window = f"no rate down to {format_number(lowest)} kept the {int(steps[0])}-step window finite"
    if not isinstance(start, int) or isinstance(start, bool) or start <= 0:
        # From the run's first state: no update at the captured rate came before, so the rate is not the cause.
        return evidence, f"{window}, so a lower rate alone does not fix it"
    # The window starts from weights the run reached at its own rate: a lower rate from the first step may still
    # keep them small (raw features under SGD, where the first update already blew the weights up). Only the
    # window's claim is a fact.
    return evidence, (
        f"{window} from the state at step {start}, which the run reached at its own rate: a lower rate from the "
        "start may still hold (the window cannot tell)"
    )


# A freshly built model's weight norm is in the tens or hundreds; one this large was trained into it before.
_BLOWN_UP_WEIGHT_NORM = 1e8
# A forward pass this large at step 0 came from weights already huge (or from unscaled data, told apart elsewhere).
_BLOWN_UP_OUTPUT = 1e6


def _non_finite_at_start(history: list[dict[str, Any]], step: int | None) -> int | None:
    """The failing step when it is the first the guard saw of this fit (no step before it in the history) and the
    weights were non-finite before it: no update of this fit wrote them."""
    rows = [row for row in history if isinstance(row.get("step"), int)]
    if step is None or not rows or rows[0]["step"] != step or len(rows) > 1:
        return None
    first = rows[0]
    return step if first.get("weight_norm") is None and first.get("weight_norm_nonfinite") else None


def _started_from_bad_weights(units: list[SourceUnit], origin: Finding, step: int) -> Cause:
    """This fit began from weights that were non-finite before its first update (weights huge but finite go the
    way of a divergence, `_blown_up_at_start`): an earlier run left them so, and the program gave them to the model (``load_weights``, ``load_model``, a
    ``BackupAndRestore`` that resumed, a checkpoint's ``restore``) or used the same model object again. The line to
    change is where they came in, else the model's construction."""
    evidence: dict[str, Any] = {
        "op": origin.op.type,
        "op_name": origin.op.name,
        "weights_at_start": {"step": step, "weight_norm": None, "non_finite": True},
    }
    site = change_line.weights_load_site(units)
    written = _weights_written_by_hand(units) if site is None else None
    change: Change | None = None
    if written is not None:
        # LSUV's ``layer.kernel.assign(layer.kernel / std)`` before fit, with a unit dead on the init batch (std 0):
        # "an earlier fit ... a notebook cell run again; build the model again" for a script that fit once (s40b
        # p10). The program's own write is where they went non-finite.
        summary = (
            f"the weights were already non-finite when this fit began (step {step}, before any update of it): the "
            f"program writes them itself at {_site_place(written)} ({ast.unparse(written.node)}), and what it wrote "
            f"was not finite (likely its division by a 0: a unit's std of 0 on the batch it measured); the "
            f"{origin.op.type} op only read them"
        )
        what = (
            "the write of the weights: keep what it writes finite (an epsilon in its division, std + 1e-8, or leave "
            "units whose statistic is 0 as they are)"
        )
        return Cause(
            "op", summary, {**evidence, "weights_written_at": written.line}, _change(written, what, "op")
        )
    if site is not None:
        where = f"; they were given to the model at {_site_place(site)} ({site.name})"
        change = _weights_load_change(site, "non-finite")
    else:
        where = (
            ", left so by an earlier fit or loop of the same model (a notebook cell run again without the cell "
            "that makes the model)"
        )
        model_site = change_line.model_site(units)
        change = (
            _change(
                model_site, "build the model again before this fit: its weights came in blown up", "model"
            )
            if model_site is not None
            else None
        )
    summary = (
        f"the weights were already non-finite when this fit began (step {step}, before any update of it){where}; "
        f"the {origin.op.type} op only read them"
    )
    return Cause("divergence", summary, evidence, change)


# Keyword names of a schedule's peak rate (a cyclical rate's max_lr, a warm-up's target).
_PEAK_NAMES = frozenset(
    {"max_lr", "peak_lr", "lr_max", "max_learning_rate", "maximal_learning_rate", "warmup_target"}
)


def _is_peak_name(name: str) -> bool:
    return name in _PEAK_NAMES


def _sublayers_built(units: list[SourceUnit], class_name: str) -> list[str]:
    """The Keras layers a layer class of the user's builds in its ``__init__`` (``self.wq = layers.Dense(d)``), as
    ``self.wq``: each takes the global dtype policy unless given a dtype."""
    found: list[str] = []
    for unit in units:
        for node in ast.walk(unit.tree):
            if not isinstance(node, ast.ClassDef) or node.name != class_name:
                continue
            for function in node.body:
                if not isinstance(function, ast.FunctionDef) or function.name != "__init__":
                    continue
                for statement in ast.walk(function):
                    if not isinstance(statement, ast.Assign) or not isinstance(statement.value, ast.Call):
                        continue
                    func = statement.value.func
                    path = ast.unparse(func)
                    if not (
                        path.startswith(("layers.", "keras.layers.", "tf.keras.layers.")) or "layers." in path
                    ):
                        continue
                    if change_line.keyword(statement.value, "dtype") is not None:
                        continue
                    found += [ast.unparse(t) for t in statement.targets if isinstance(t, ast.Attribute)]
    return found


def _warnings_that_make(warned: list[NumpyWarning], units: list[SourceUnit]) -> list[NumpyWarning]:
    """The lines NumPy warned at in a file of the program that is still there (a notebook's saved cell, not the
    kernel's file of it), that do more than look at a value (`_only_looks`)."""
    return [
        warning
        for warning in warned
        if os.path.isfile(warning.file)
        and "ipykernel_" not in warning.file
        and not _only_looks(warning, units)
    ]


def _weights_warning(warned: list[NumpyWarning], units: list[SourceUnit]) -> NumpyWarning | None:
    """The last of `_warnings_that_make`: where the program computed what it then gave the weights."""
    found = _warnings_that_make(warned, units)
    return found[-1] if found else None


def _weights_made_where_numpy_warned(origin: Finding, warned: NumpyWarning, at_start: int | None) -> Cause:
    """Weights non-finite before the step, and a NumPy warning at a line of the program before it: the line where
    the program computed what it gave the weights (an initializer's value, a callback's set_weights)."""
    where = place_text(os.path.basename(warned.file), warned.line, warned.cell)
    when = (
        f"when this fit began (step {at_start}, before any update of it)"
        if at_start is not None
        else "when the step began (the last update the guard checked was finite)"
    )
    summary = (
        f'the weights were already non-finite {when}: NumPy warned "{warned.message}" at {where}, where the '
        f"program computed a value it gave them ({'an infinity' if warned.makes == 'inf' else 'a NaN'}); the "
        f"{origin.op.type} op only read them"
    )
    what = (
        f"NumPy made {warned.makes} here ({warned.message}), and the weights were given it: guard the computation "
        "(a log of 0: a count of 0, an empty class; a division by a count of 0: count from 1, or np.maximum(n, 1))"
    )
    change = Change(
        file=os.path.abspath(warned.file),
        line=warned.line,
        what=what,
        target="op",
        cell=warned.cell,
    )
    evidence = {
        "op": origin.op.type,
        "op_name": origin.op.name,
        "weights_non_finite": True,
        "numpy_warning": warned.to_json(),
    }
    return Cause("op", summary, evidence, change)


# A layer's weights a program writes itself (LSUV's ``layer.kernel.assign(layer.kernel / std)``, a hand-made init).
_WEIGHT_ATTRIBUTES = frozenset({"kernel", "bias", "embeddings", "gamma", "beta", "recurrent_kernel"})


def _weights_written_by_hand(units: list[SourceUnit]) -> change_line.Site | None:
    """The one call of the user's code that writes a layer's weights by hand with a computed value
    (``layer.kernel.assign(layer.kernel / std)``, ``w.assign(...)`` of a ``kernel``, ``layer.set_weights([...])``
    of a division); None for none or several."""
    found = []
    for unit in units:
        for node in change_line.calls(unit):
            func = node.func
            if not isinstance(func, ast.Attribute) or not node.args:
                continue
            divides = any(
                isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div) for n in ast.walk(node.args[0])
            )
            if not divides:
                continue
            receiver = func.value
            if func.attr in ("assign", "assign_sub", "assign_add") and (
                isinstance(receiver, ast.Attribute) and receiver.attr in _WEIGHT_ATTRIBUTES
            ):
                found.append(change_line.Site(unit, node, func.attr))
            elif func.attr == "set_weights":
                found.append(change_line.Site(unit, node, func.attr))
    return found[0] if len(found) == 1 else None


def _weights_load_change(site: change_line.Site, state: str) -> Change:
    """The change at the line that gave the model weights an earlier run had blown up (`state`: what they were
    when this fit began): a BackupAndRestore's backup folder, else the file or object the weights came from."""
    what = (
        f"BackupAndRestore resumed from a backup an earlier run wrote as it blew up (its weights {state}): delete "
        "the backup folder so the fit starts anew, and lower that run's learning rate"
        if site.name == "BackupAndRestore"
        else f"{site.name}: the weights it gives the model were {state}, as the run that saved them had left them: "
        "load weights saved before that run diverged, or build the model anew"
    )
    return _change(site, what, "model")


def _fit_start(context: CauseContext) -> int:
    """The step the failing fit began at: a fit's step counts on from the fits before it (a loop of
    ``model.fit(epochs=1)``, a notebook's fit cell run again), its first epoch's batch index from 0; a fit resumed
    from a checkpoint (``initial_epoch=40``) at the step the guard recorded when it began. 0 for a loop."""
    if context.epoch == 0 and context.batch_index is not None and context.step is not None:
        return max(context.step - context.batch_index, 0)
    first = context.model_info.get("first_step")
    if (
        isinstance(first, int)
        and not isinstance(first, bool)
        and context.step is not None
        and 0 <= first <= context.step
    ):
        return first
    return 0


def _blown_up_at_start(
    history: list[dict[str, Any]], failing_step: int | None, start: int = 0, unscaled_inputs: bool = False
) -> tuple[int, float] | None:
    """(`start`, weight norm) when the weights were already huge at the first step of the fit (or loop) that failed: an
    earlier fit of the same model object (a notebook cell run again, a loop of fits) left them so, or the program
    loaded them. A step's weight norm is read after its update: step 0's says the weights before it only when step 0
    failed (its update was not applied); when step 0 passed, its forward pass must have been huge too (a fresh model
    whose first update blew up had small outputs at step 0, and was put down to "an earlier fit"). With
    `unscaled_inputs` (features in the millions), a huge output at step 0 is the inputs', not the weights': a fresh
    model whose first update on them blew up was told to "build the model again"."""
    for row in history:
        norm = row.get("weight_norm")
        if isinstance(norm, (int, float)) and not isinstance(norm, bool):
            step = row.get("step")
            if norm < _BLOWN_UP_WEIGHT_NORM or step != start:
                return None
            output = row.get("max_abs_output")
            huge_output = not unscaled_inputs and (
                not isinstance(output, (int, float)) or output >= _BLOWN_UP_OUTPUT
            )
            return (step, float(norm)) if failing_step == start or huge_output else None
    return None


# Ops that take a log of their input, or its gradient's reciprocal: a clip keeps them off 0 only where its epsilon
# holds.
_LOG_TYPES = frozenset({"Log", "Log1p", "Xlogy", "Reciprocal", "Inv"})
# Graph ops that are no layer's output: the clip, casts and arithmetic of the user's loss between it and the log.
_NOT_A_LAYER_OUTPUT = frozenset(
    {
        "Const",
        "Maximum",
        "Minimum",
        "ClipByValue",
        "Cast",
        "Sub",
        "AddV2",
        "Mul",
        "Identity",
        "Log",
        "Reciprocal",
    }
)
FLOAT16_SMALLEST_NORMAL = float(np.finfo(np.float16).tiny)  # 6.1e-05


def _clip_rounded_away(
    findings: Findings, context: CauseContext, units: list[SourceUnit], origin: Finding
) -> Cause | None:
    """A log (or its gradient, a reciprocal) that went non-finite on a value a clip bounded in a 16-bit float whose
    epsilon the dtype cannot hold: ``tf.clip_by_value(y_pred, 1e-7, 1 - 1e-7)`` on a float16 sigmoid output, where
    1e-7 is below float16's smallest normal 6.1e-5 (its reciprocal, the log's gradient, is 8.4e6, past 65504) and
    1 - 1e-7 rounds to 1.0 (log(1 - p) is log(0)). The words were "compute this in float32" at the log's line; a
    cast there, followed, came after the float16 clip, and the run went NaN again (s43e p8). The value must be
    float32 before the clip: the layer that made it in float16 (dtype="float32"), or the start of the loss
    function. None for another op, a clip whose bounds the dtype holds, or no clip in the code."""
    if origin.op.type not in _LOG_TYPES and origin.op.forward_op not in ("Log", "Log1p", "Xlogy"):
        return None
    if origin.health is None or origin.health.is_finite:
        return None
    clip = change_line.clip_into_log(units, origin.file, origin.line, origin.cell)
    if clip is None:
        return None
    dtype = _dtype_of_the_clip(findings, origin, clip)
    if dtype not in SIGNIFICANT_BITS:
        return None
    lost = _bounds_the_dtype_loses(clip, dtype)
    if not lost:
        return None
    policy = context.dtype_policy or (
        "mixed_float16" if context.model_info.get("loss_scale_optimizer") else None
    )
    layer = _sixteen_bit_layer_into_the_clip(findings, units)
    what_op = (
        f"{origin.op.type} (the gradient of the log at line {origin.line})"
        if origin.op.forward_op
        else f"the {origin.op.type} op at line {origin.line}"
    )
    health = origin.health.describe()
    cast = (
        f"; the cast to float32 at line {clip.cast_after} comes after the clip, when its bounds are already lost"
        if clip.cast_after is not None
        else ""
    )
    made = (
        f"; {clip.argument} is the {dtype} output of the {layer[0].name} layer at line {layer[0].line}"
        if layer
        else ""
    )
    summary = (
        f"{what_op} made {health} in {(dtype_of(origin) or dtype).lower()}"
        f"{f' under the {policy} policy' if policy else ''}: it takes "
        f"{clip.clipped}, clipped at line {clip.site.line} in {dtype}, and the clip does not protect it there: "
        f"{'; '.join(lost)}{cast}{made}"
    )
    at_start = (
        f"at the start of {clip.function} (line {clip.function_start})"
        if clip.function_start
        else "before the clip"
    )
    late = (
        f"; a cast at the log (line {origin.line}) is too late: the clip at line {clip.site.line} has already "
        f"rounded its bounds in {dtype}"
    )
    cast_it = (
        f'tf.cast {clip.argument} (and the targets) to "float32" {at_start}, before the clip at line '
        f"{clip.site.line}"
    )
    evidence: dict[str, Any] = {
        "dtype": dtype,
        "dtype_policy": policy,
        "op": origin.op.type,
        "op_name": origin.op.name,
        "clip": {
            "line": clip.site.line,
            "lower": clip.lower,
            "upper": clip.upper,
            "function": clip.function,
            "cast_after": clip.cast_after,
        },
        "output": health,
    }
    if layer is not None:
        site, op_name = layer
        evidence["layer"] = {"class": site.name, "file": site.file, "line": site.line, "op": op_name}
        what = (
            f'give this {site.name} layer dtype="float32" (the mixed-precision guide keeps the output layer in '
            f"float32): {clip.argument} then reaches the clip at line {clip.site.line} in float32, where its bounds "
            f"hold; or {cast_it}{late}"
        )
        return Cause("precision", summary, evidence, _change(site, what, "layer"))
    what = (
        f'{cast_it}, or give the layer that outputs {clip.argument} dtype="float32" (the mixed-precision guide '
        f"keeps the output layer in float32){late}"
    )
    if clip.function_start is not None:
        change: Change | None = Change(
            file=os.path.abspath(clip.site.file),
            line=clip.function_start,
            what=what,
            cell=clip.site.cell,
            target="op",
        )
    else:
        change = _change(clip.site, what, "op")
    return Cause("precision", summary, evidence, change)


def _dtype_of_the_clip(findings: Findings, origin: Finding, clip: change_line.ClipIntoLog) -> str | None:
    """The dtype the clip ran in: the origin's own when no cast came between them, else the one the scan recorded
    for the clip's op (a cast to float32 after a float16 clip)."""
    own = (dtype_of(origin) or "").lower()
    if clip.cast_after is None:
        return own
    for node in _picture_nodes(findings):
        health = node.get("health")
        if (
            node.get("type") in ("Maximum", "Minimum", "ClipByValue")
            and node.get("line") == clip.site.line
            and isinstance(health, dict)
        ):
            return str(health.get("dtype") or "").lower() or None
    return None


def _picture_nodes(findings: Findings) -> list[dict[str, Any]]:
    """The ops around the origin the scan recorded (the pictures' graph), nearest first."""
    pictures = findings.extra.get("pictures")
    nodes = pictures.get("nodes") if isinstance(pictures, dict) else None
    if not isinstance(nodes, list):
        return []
    found = [n for n in nodes if isinstance(n, dict) and isinstance(n.get("distance"), int)]
    return sorted(found, key=lambda n: abs(n["distance"]))


def _bounds_the_dtype_loses(clip: change_line.ClipIntoLog, dtype: str) -> list[str]:
    """What of the clip's bounds `dtype` cannot hold: a lower bound 0 there, or whose reciprocal (a log's gradient)
    is past its range; an upper bound below 1 that rounds to 1 (1 - p still 0)."""
    lost = []
    lower, upper = clip.lower, clip.upper
    named = (
        f"{clip.lower_text} ({lower:.3g})"
        if lower is not None and not _is_literal(clip.lower_text)
        else clip.lower_text
    )
    if dtype in SIXTEEN_BIT and lower is not None and 0 < lower < FLOAT16_SMALLEST_NORMAL:
        held = float(np.float16(lower))
        if held == 0:
            lost.append(f"{named} is 0 in {dtype} (its smallest value is {FLOAT16_TINY:.2g})")
        elif 1 / held > DTYPE_MAX[dtype]:
            lost.append(
                f"{named} is below {dtype}'s smallest normal value "
                f"{FLOAT16_SMALLEST_NORMAL:.2g}: it becomes {held:.3g}, and the log's gradient there, "
                f"1/{held:.3g} = {1 / held:.2g}, is past {dtype}'s max {DTYPE_MAX[dtype]:g}"
            )
    if upper is not None and upper < 1 and 1 - upper < 2.0 ** -(SIGNIFICANT_BITS[dtype] + 1):
        lost.append(
            f"{clip.upper_text} rounds to 1.0 in {dtype} (its spacing below 1 is "
            f"{2.0 ** -SIGNIFICANT_BITS[dtype]:.2g}), so 1 - {clip.clipped} is still 0 and its log -inf"
        )
    return lost


def _is_literal(text: str | None) -> bool:
    """Whether a bound as written is a number itself (``1e-08``), not a name or arithmetic (``EPS``)."""
    try:
        float(text or "")
    except ValueError:
        return False
    return True


def _sixteen_bit_layer_into_the_clip(
    findings: Findings, units: list[SourceUnit]
) -> tuple[change_line.Site, str] | None:
    """The construction of the layer whose 16-bit output the clip took (a float16 sigmoid Conv2D of a Model
    subclass), from the ops the scan recorded up the origin's inputs, and that op's name; None when none of them is
    a layer of the user's code."""
    for node in _picture_nodes(findings):
        health = node.get("health")
        name = node.get("name")
        if (
            node.get("role") != "input"
            or node.get("gradient")
            or node.get("type") in _NOT_A_LAYER_OUTPUT
            or not isinstance(name, str)
            or "/" not in name
            or not isinstance(health, dict)
            or str(health.get("dtype") or "").lower() not in SIGNIFICANT_BITS
        ):
            continue
        site = change_line.layer_site(units, name)
        if site is not None and site.name[:1].isupper():
            return site, name
    return None


def _sixteen_bit_range_exceeded(origin: Finding) -> bool:
    """An Inf (no NaN) from inputs all recorded finite and free of zeros: in a 16-bit dtype the result was only
    past the dtype's range, also for a log's or a division's gradient (`is_overflow` leaves those out)."""
    health = origin.health
    # A division's numerator may hold zeros (0 / x is 0): a count of 0 in ``count / eps`` under mixed_float16,
    # whose other counts overflowed float16, was "keep its inputs in its domain" (s39b wmf).
    harmless = origin.inputs[0] if origin.op.type in DIVISION_OPS and len(origin.inputs) == 2 else None
    return (
        health is not None
        and health.pos_inf + health.neg_inf > 0
        and health.nan == 0
        and bool(origin.inputs)
        and all(
            i.health is not None and i.health.is_finite and (not i.health.zero or i is harmless)
            for i in origin.inputs
        )
    )


def _precision(
    findings: Findings, context: CauseContext, units: list[SourceUnit], origin: Finding, dtype: str
) -> Cause:
    limit = DTYPE_MAX.get(dtype, 65504.0)
    layer = _layer_of_origin(units, origin)
    policy = context.dtype_policy or (
        "mixed_float16" if context.model_info.get("loss_scale_optimizer") else None
    )
    evidence: dict[str, Any] = {
        "dtype": dtype,
        "dtype_max": limit,
        "float32_max": FLOAT32_MAX,
        "op": origin.op.type,
        "op_name": origin.op.name,
        "output": origin.health.describe() if origin.health else None,
        "dtype_policy": policy,
        "loss_scale_optimizer": context.model_info.get("loss_scale_optimizer"),
    }
    growth = trend.growth(context.history)
    if growth is not None:
        evidence["history"] = growth.to_json()
    if policy is not None and not policy.endswith(dtype):
        policy = None  # the float32 global policy of a model whose layers were given mixed_float16 one by one
    output = _loss_gradient_into_16_bit(findings, units, origin, dtype)
    if output is not None:
        return Cause("precision", output[0], {**evidence, **output[1]}, output[2])
    change = None
    where = ""
    own_layer = _custom_layer_class(units, origin)
    loss_function = _loss_function_of_origin(units, origin) if origin.op.type != "Cast" else None
    if loss_function is not None and not _LOSS_ASSIGNMENT.search(_origin_source_line(origin)):
        # An exp inside the user's loss function (Proxy-Anchor's exp(alpha * (cos + delta)) on a float16 model
        # output): "tf.cast its input to float32, and the result back to float16", followed, overflowed at that
        # cast on the same line, and the log1p after it needs the large value (s42e p8). The loss in float32 whole.
        summary = (
            f"{origin.op.type} overflowed {dtype} (max {limit:g}) on finite inputs in the loss function "
            f"{loss_function}{f' under the {policy} policy' if policy else ''}: it takes the model's {dtype} "
            f"output and computes in {dtype}; float32 (max {FLOAT32_MAX:.3g}) would hold it"
        )
        what = (
            f'compute the loss in float32: tf.cast its inputs to "float32" where {loss_function} starts (the model\'s '
            'output, or give the output layer dtype="float32", as the mixed-precision guide does), and keep the '
            f"whole loss in float32; a value past {dtype}'s range cannot be cast back to it"
        )
        return Cause("precision", summary, {**evidence, "loss": True}, _origin_change(findings, what, "op"))
    if origin.op.type != "Cast" and (
        _LOSS_ASSIGNMENT.search(_origin_source_line(origin))
        # ``per_example = tf.reduce_sum(tf.square(score - target), -1) * w`` then ``loss = ...(per_example)``
        # (s43a p3, a score-matching train_step): "the result back to float16 before it meets the layer's other
        # float16 values", followed, met w in float16 and overflowed again.
        or change_line.feeds_an_assignment(
            units, origin.file, origin.line, origin.cell, lambda n: _LOSS_FUNCTION_NAME.search(n) is not None
        )
    ):
        # A loss written by hand on a float16 output (a train_step's, a custom loop's): the words were the layer's
        # ("... and the result back to float16 before it meets the layer's other float16 values"), and a loss of
        # 3.7e5 cast back overflows again; the mixed-precision guide's fix is the output layer in float32.
        summary = (
            f"{origin.op.type} overflowed {dtype} (max {limit:g}) computing the loss on finite inputs"
            f"{f' under the {policy} policy' if policy else ''}: the model's output is {dtype}, and the loss of "
            f"targets that large passes {dtype}'s range; float32 (max {FLOAT32_MAX:.3g}) would hold it"
        )
        what = (
            'compute the loss in float32: give the model\'s output layer dtype="float32" (as the mixed-precision '
            'guide does), or tf.cast the prediction and the targets to "float32" before the loss; a loss past '
            f"{dtype}'s range cannot be cast back to it"
        )
        return Cause("precision", summary, {**evidence, "loss": True}, _origin_change(findings, what, "op"))
    if origin.op.type == "Cast" and (origin.op.graph or "").startswith("Dataset_"):
        # The input pipeline's cast of raw values (incomes of 9e4) to float16: "compute this in float32", followed,
        # met the same overflow at the model's first float16 layer, which casts its input down again.
        summary = (
            f"the input pipeline cast values past {dtype}'s range (max {limit:g}) to {dtype}"
            f"{f' under the {policy} policy' if policy else ''}: features in raw units; a model in {dtype} casts "
            "them down again at its first layer, so float32 here alone would move the overflow there"
        )
        what = (
            "scale the features before they become "
            f"{dtype}: standardize them in the pipeline, in float32, before the cast; or leave the cast out and "
            'put a keras.layers.Normalization layer (dtype="float32") first in the model'
        )
        return Cause(
            "data", summary, {**evidence, "input_pipeline": True}, _origin_change(findings, what, "input")
        )
    if origin.op.type == "Cast" and own_layer is not None:
        # A value cast down to float16 past its range (a -1e9 attention mask): its input is float32 already, so
        # "cast its input to float32" could not be done; the constant is what to change.
        change = _origin_change(
            findings,
            f"the value cast to {dtype}: keep it in {dtype}'s range (a mask of -1e4, or {dtype}'s own minimum "
            f"tf.{dtype}.min, not -1e9), or do this part in float32",
            "op",
        )
        where = f" in the {own_layer} layer"
    elif layer is not None and own_layer is not None and _is_model_class(units, origin):
        # The user's own keras.Model subclass: building it with dtype="float32" turns mixed precision off for the
        # whole model, which is no fix of one op.
        evidence["layer"] = {"class": layer.name, "file": layer.file, "line": layer.line}
        change = _origin_change(
            findings, f"{_in_float32_words(origin, dtype)} or keep it in {dtype}'s range", "op"
        )
        where = f" in the {layer.name} model"
    elif layer is not None and own_layer is not None:
        # The op is in the user's own layer code: that line is theirs to change (compute it in float32, or keep
        # it in range), and building the layer with dtype="float32" is the other way, named with its line.
        evidence["layer"] = {"class": layer.name, "file": layer.file, "line": layer.line}
        # Its sublayers (q, k, v Dense layers built in __init__) follow the global policy whatever the outer layer's
        # dtype: built with dtype="float32" alone, it overflowed at the same step (s41a p9).
        inner = _sublayers_built(units, layer.name)
        also = (
            f", and give that dtype to the layers it builds ({', '.join(inner[:3])}{', ...' if len(inner) > 3 else ''}"
            ": they follow the global policy otherwise)"
            if inner
            else ""
        )
        change = _origin_change(
            findings,
            f"{_in_float32_words(origin, dtype)} or keep it "
            f'in {dtype}\'s range; or build {layer.name} with dtype="float32" '
            f"({'' if layer.cell is None else f'cell {layer.cell + 1}, '}line {layer.line}){also}",
            "op",
        )
        where = f" in the {layer.name} layer"
    elif (built := _layer_built_on_line(origin)) is not None:
        # ``log_std = layers.Dense(1, name="log_std")(x)`` in a model-building function: under a mixed policy a
        # Keras layer casts its inputs to float16 itself, so "tf.cast its inputs to float32", followed, failed at
        # the same step; the layer's own dtype is the switch.
        change = _origin_change(
            findings,
            f'build this {built} with dtype="float32" (under {policy or "the dtype policy"} a Keras layer casts '
            f"its inputs to {dtype} itself: a tf.cast before it does not keep it in float32)",
            "layer",
        )
        where = f" in the {built} layer at its line"
    elif layer is not None and (helper := _function_of_origin(units, origin)) is not None:
        # The op is in a function of the user's that their layer calls (the transformer tutorial's module-level
        # scaled_dot_product_attention): "keep the layer in float32", followed, left it overflowing, the layer's
        # sublayers keeping the float16 policy. The line is theirs to change.
        evidence["layer"] = {"class": layer.name, "file": layer.file, "line": layer.line}
        change = _origin_change(
            findings,
            f'compute this in float32 (tf.cast its inputs to "float32" in {helper}, and the result back) or keep '
            f"it in {dtype}'s range (scale before the product)",
            "op",
        )
        where = f" in {helper}, called by the {layer.name} layer"
    elif layer is not None and layer.name not in _MODEL_CLASSES:
        evidence["layer"] = {"class": layer.name, "file": layer.file, "line": layer.line}
        change = _change(
            layer,
            f'keep the {layer.name} layer in float32: dtype="float32" (it computes in '
            f"{dtype} under {policy or 'the dtype policy'})",
            "layer",
        )
        where = f" in the {layer.name} layer"
    else:
        change = _origin_change(findings, f"compute this in float32 (it runs in {dtype})", "op")
    summary = (
        f"{origin.op.type}{where} overflowed {dtype} (max {limit:g}) on finite inputs"
        f"{f' under the {policy} policy' if policy else ''}; float32 (max {FLOAT32_MAX:.3g}) would hold it"
    )
    raw = _features_in_raw_units(context, units, evidence, mixed=dtype in ("float16", "bfloat16"))
    cast = _input_cast_beyond_16_bit(context, units, origin, limit) if raw is None else None
    if cast is not None:
        words, change = cast
        summary += words
        return Cause("precision", summary, evidence, change)
    if raw is not None:
        # Features in raw units (pressures of 1000): the products of every layer are that large, so a layer kept in
        # float32 hands its large output to the next one; scaled inputs end it.
        words, change = raw
        summary += f"{words}: every layer's values are that large, and a layer kept in float32 hands them on to the next"
    return Cause("precision", summary, evidence, change)


def _loss_gradient_into_16_bit(
    findings: Findings, units: list[SourceUnit], origin: Finding, dtype: str
) -> tuple[str, dict[str, Any], Change | None] | None:
    """(summary, evidence, change) for a backward Cast of Keras's compiled loss that overflowed a 16-bit dtype: the
    loss casts the model's float16 output up to float32, and its gradient (-y/p of a crossentropy, large for a
    probability near 0) is cast back down to the output layer's float16, past 65504. The output layer computing in
    float16 is the cause (a ``Dense(5, activation="softmax", dtype=policy)`` given ``mixed_float16`` layer by layer;
    the mixed-precision guide keeps the output layer in float32); the fit line, where the loss is, changes nothing.
    None for any other origin."""
    found = findings.extra.get("loss_input_layer")
    if (
        origin.op.type != "Cast"
        or not (origin.op.forward_op or "").startswith("compile_loss/")
        or not isinstance(found, dict)
        or not found.get("backward")
        or not isinstance(found.get("op"), str)
    ):
        return None
    loss = str(found.get("loss") or "compiled")
    site = change_line.layer_site(units, found["op"], dtype)
    evidence: dict[str, Any] = {"loss_input_layer": found}
    what = (
        f'keep the model\'s output layer in float32: dtype="float32" (the mixed-precision guide keeps the output '
        f"layer and its softmax in float32; the {loss} loss then gets float32 predictions and gives float32 gradients)"
    )
    if site is not None:
        evidence["layer"] = {"class": site.name, "file": site.file, "line": site.line}
        named = f"the {site.name} output layer at {'' if site.cell is None else f'cell {site.cell + 1}, '}line {site.line}"
        change: Change | None = _change(site, what, "layer")
    elif isinstance(found.get("file"), str) and isinstance(found.get("line"), int):
        named = f"the output layer at line {found['line']}"
        cell = found.get("cell")
        change = Change(
            file=os.path.abspath(found["file"]),
            line=found["line"],
            what=what,
            cell=cell if isinstance(cell, int) else None,
            target="layer",
        )
    else:
        named = f"the output layer ({found['op'].rsplit('/', 1)[0]})"
        change = _origin_change(findings, what, "op")
    summary = (
        f"the {loss} loss's gradient for the model's output overflowed {dtype} (max {DTYPE_MAX.get(dtype, 65504.0):g}) "
        f"when cast back to {named}, which computes in {dtype}: a predicted probability near 0 makes that gradient "
        f"large (-1/p); float32 (max {FLOAT32_MAX:.3g}) would hold it"
    )
    return summary, evidence, change


_INPUT_NORMALIZERS = frozenset({"BatchNormalization", "Normalization", "LayerNormalization"})
# The cast of a model's input to its compute dtype: ``sequential_1/Cast`` (the model's scope, then the op).
_MODEL_INPUT_CAST = re.compile(r"^[A-Za-z_]\w*/Cast(?:_\d+)?$")


def _input_cast_beyond_16_bit(
    context: CauseContext, units: list[SourceUnit], origin: Finding, limit: float
) -> tuple[str, Change] | None:
    """(what to add to the summary, the change) for the model's own cast of its input to float16 that overflowed:
    raw features past 65504 (incomes of 2e5) into a model whose first layer normalizes them
    (``BatchNormalization()``), which under mixed_float16 casts them to float16 before it computes anything. It was
    "compute this in float32" at the fit line. None for another op, or features within float16's range."""
    if origin.op.type != "Cast" or not _MODEL_INPUT_CAST.match(origin.op.name):
        return None
    arguments = _step_arguments(context.batch)
    batch = arguments if arguments is not None else context.batch
    # The layers are ignored: a normalizing first layer gets its input cast to float16 before it normalizes.
    features = [u for u in scale.unscaled_inputs(batch, None) if u.role == "features"]
    beyond = [c for u in features for c in u.columns if max(abs(c.low), abs(c.high)) > limit]
    if not features or not beyond:
        return None
    # The normalizing layer the model takes its input with, else where the model takes its input. A normalizer
    # deeper in the model (``Dense(256)`` then ``BatchNormalization()``) is no first layer (s43c p5): given float32
    # as told, the cast before the Dense still overflowed.
    built = change_line.first_layer_normalizer(units, _INPUT_NORMALIZERS)
    column = next((c for c in beyond if c.column is not None), None)
    made = (
        change_line.fit_array_site(units, "x", column=column.column)
        if column is not None and column.column is not None and built is None
        else None
    )
    if made is not None and made.column is not None:
        # A column the program computes in raw units (a date as epoch seconds, added after the cell that scaled
        # the others): scaled where it is made, every cast after it holds it; a first layer in float32 only moved
        # the overflow to the next layer's cast.
        words = (
            f"; it is the model's cast of its input to float16, before its first layer computes anything, and "
            f"{made.name} passes {limit:g} there ({features[0].describe()})"
        )
        what = (
            f"scale {made.name} where it is made (subtract a reference and divide by its scale: a date as days or "
            "years since a start date, not epoch seconds), so every float16 layer holds it; a first layer in "
            "float32 only moves the overflow to the next layer's cast"
        )
        return words, _change(made, what, "array")
    site = built or change_line.model_input_site(units)
    if site is None:
        return None
    first = built.name if built else None
    layer = f"its first layer ({first})" if first else "its first layer"
    words = (
        f"; it is the model's cast of its input to float16, before {layer} computes anything, and the features "
        f"pass {limit:g} there ({features[0].describe()})"
    )
    kept = f'{first}(dtype="float32")' if first else 'a first layer with dtype="float32"'
    what = (
        f"the model's input under the mixed policy: give the first layer float32, {kept}, so it takes the raw "
        "features in float32 and hands on scaled values; or scale the features before fit (a log of incomes, or "
        "a division by their scale)"
    )
    return words, _change(site, what, "input")


def _features_in_raw_units(
    context: CauseContext, units: list[SourceUnit], evidence: dict[str, Any], mixed: bool = False
) -> tuple[str, Change] | None:
    """(", but the batch is in raw units (x[:, 0] from 998 to 1e+03 ...)", the change that scales them) when the
    batch's features are in raw units, recorded in `evidence` as "unscaled"; None when they are not, or only its
    targets are (Poisson counts past 65504 reach the loss, not every layer)."""
    # guard_step's arguments: a step called as train_step(x, y) takes them as a fit batch is.
    arguments = _step_arguments(context.batch)
    batch = arguments if arguments is not None else context.batch
    unscaled = _unscaled_inputs(dataclasses.replace(context, batch=batch), units)
    if not any(item.role == "features" for item in unscaled):
        return None
    change = _unscaled_change(units, unscaled, None, mixed=mixed)
    if change is None:
        return None
    evidence["unscaled"] = [item.to_json() for item in unscaled]
    return f", but the batch is in raw units ({'; '.join(item.describe() for item in unscaled)})", change


# Models, not layers: ``keras.Sequential(..., dtype="float32")`` raises TypeError (a user followed "keep the Sequential
# layer in float32" and got "unexpected keyword argument 'dtype'").
_MODEL_CLASSES = frozenset({"Sequential", "Model", "Functional"})
# ``layers.Dense(1, name="log_std")(x)``: a Keras layer built and called on the line.
_LAYER_BUILT_AND_CALLED = re.compile(r"\b(?:layers|keras\.layers|tf\.keras\.layers)\.([A-Z]\w*)\(.*\)\(")


def _layer_built_on_line(origin: Finding) -> str | None:
    """The class of the Keras layer the origin's line builds and calls (``Dense``), or None."""
    found = _LAYER_BUILT_AND_CALLED.search(_origin_source_line(origin))
    return found.group(1) if found is not None and found.group(1) not in _MODEL_CLASSES else None


def _is_model_class(units: list[SourceUnit], origin: Finding) -> bool:
    """Whether the user's class holding the origin's line subclasses a Model (``keras.Model``, ``Model``)."""
    import ast

    node = _class_of_origin(units, origin)
    return node is not None and any(ast.unparse(base).split(".")[-1] == "Model" for base in node.bases)


def _loss_function_of_origin(units: list[SourceUnit], origin: Finding) -> str | None:
    """The name of the innermost function of the user's (a method too) whose body holds the origin's line, when
    that name says it computes a loss (``proxy_anchor_loss``, ``compute_loss``); None otherwise."""
    import ast

    holding = [
        node
        for unit in _units_holding(units, origin)
        for node in ast.walk(unit.tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and node.body[0].lineno <= origin.line <= (node.end_lineno or node.lineno)
    ]
    if not holding:
        return None
    innermost = min(holding, key=lambda n: (n.end_lineno or n.lineno) - n.lineno)
    # Keras's own hook (a Model subclass's compute_loss) is the model's: its words name the model.
    return innermost.name if "loss" in innermost.name.lower() and innermost.name != "compute_loss" else None


def _function_of_origin(units: list[SourceUnit], origin: Finding) -> str | None:
    """The name of the user's module-level function whose body holds the origin's line (not a class's method),
    or None."""
    import ast

    for unit in _units_holding(units, origin):
        for node in unit.tree.body:
            if (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and node.body
                and node.body[0].lineno <= origin.line <= (node.end_lineno or node.lineno)
            ):
                return node.name
    return None


def _in_the_function_of(units: list[SourceUnit], origin: Finding, site: change_line.Site) -> bool:
    """Whether `site` is in the body of the innermost function whose body holds the origin's line (a step nested in
    a ``main()`` whose loop sets the variable is not the loop)."""
    import ast

    if site.unit not in list(_units_holding(units, origin)):
        return False
    holding = [
        node
        for node in ast.walk(site.unit.tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and node.body[0].lineno <= origin.line <= (node.end_lineno or node.lineno)
    ]
    if not holding:
        return False
    innermost = max(holding, key=lambda node: node.lineno)
    return innermost.body[0].lineno <= site.node.lineno <= (innermost.end_lineno or innermost.lineno)


def _innermost_function_of(unit: SourceUnit, line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The innermost function of `unit` whose lines, its ``def`` line to its end, hold `line`; None at module level."""
    holding = [
        node
        for node in ast.walk(unit.tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.lineno <= line <= (node.end_lineno or node.lineno)
    ]
    return max(holding, key=lambda node: node.lineno) if holding else None


def _units_holding(
    units: list[SourceUnit], origin: Finding | NumpyWarning | change_line.Site
) -> Iterator[SourceUnit]:
    """The units of the origin's file and cell (a notebook's cell; a script's one file), or a NumPy warning's or a
    site's."""
    return (
        u for u in units if u.cell == origin.cell and os.path.abspath(u.file) == os.path.abspath(origin.file)
    )


def _custom_layer_class(units: list[SourceUnit], origin: Finding) -> str | None:
    """The name of the user's class whose code holds the origin's line, if any."""
    node = _class_of_origin(units, origin)
    return node.name if node is not None else None


def _normalized_zero_vector(origin: Finding, cause: Cause, units: list[SourceUnit]) -> Cause | None:
    """``v = v / tf.norm(v)`` of a vector that is all zeros, made of a variable of the origin's class that starts
    at zeros: a spectral normalization's power-iteration vector ``self.u = self.add_weight(..., initializer=
    "zeros", trainable=False)``. The division's words ("+ 1e-7"), followed twice, moved the 0 / 0 to the next
    normalization and then to ``w / sigma`` (s39a sngan); the vector's initial value is the change. None
    otherwise."""
    if origin.op.type not in DIVISION_OPS or len(origin.inputs) != 2:
        return None
    numerator, divisor = (i.health for i in origin.inputs)
    if numerator is None or divisor is None or not numerator.is_finite or not divisor.is_finite:
        return None
    if not numerator.size or numerator.zero != numerator.size or not divisor.zero:
        return None
    owner = _class_of_origin(units, origin)
    if owner is None:
        return None
    method = next(
        (
            f
            for f in ast.walk(owner)
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
            and f.lineno <= origin.line <= (f.end_lineno or f.lineno)
        ),
        None,
    )
    if method is None:
        return None
    read = {
        n.attr
        for n in ast.walk(method)
        if isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Name)
        and n.value.id == "self"
        and n.lineno <= origin.line
    }
    zeros: list[tuple[str, ast.Assign]] = []
    for node in ast.walk(owner):
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target = node.targets[0]
        if not (
            isinstance(target, ast.Attribute) and target.attr in read and isinstance(node.value, ast.Call)
        ):
            continue
        initial = change_line.keyword(node.value, "initializer")
        first = node.value.args[0] if node.value.args else None
        if (isinstance(initial, ast.Constant) and initial.value == "zeros") or (
            isinstance(first, ast.Call) and called_name(first) == "zeros"
        ):
            zeros.append((target.attr, node))
    if len(zeros) != 1:
        return None
    name, statement = zeros[0]
    summary = (
        f"the {origin.op.type} op divided a vector that is all zeros ({numerator.zero} of {numerator.size} values) "
        f"by its norm, 0: normalizing a zero vector is 0 / 0; the vector is made of self.{name}, a variable that "
        f"starts at zeros (line {statement.lineno}), so every normalization of it stays 0 / 0"
    )
    what = (
        f'the initial value of self.{name}: start it from a random vector (initializer="random_normal"), as a '
        "power iteration needs; an epsilon at the division keeps it 0, and the next normalization (or the division "
        "by the singular value) divides by 0 again"
    )
    change = Change(file=origin.file, line=statement.lineno, what=what, cell=origin.cell, target="op")
    return Cause(cause.kind, summary, {**cause.evidence, "zero_variable": f"self.{name}"}, change)


def _class_of_origin(units: list[SourceUnit], origin: Finding) -> Any:
    """The ``ast.ClassDef`` of the user's class whose code holds the origin's line, or None."""
    import ast

    for unit in _units_holding(units, origin):
        for node in ast.walk(unit.tree):
            if isinstance(node, ast.ClassDef) and node.lineno <= origin.line <= (
                node.end_lineno or node.lineno
            ):
                return node
    return None


def _layer_of_origin(units: list[SourceUnit], origin: Finding) -> change_line.Site | None:
    """The layer whose code made the op: the class whose method holds the origin's line (a custom layer), else the
    layer named in the op's name (``sequential/dense_1/MatMul``)."""
    import ast

    for unit in units:
        if unit.cell != origin.cell or os.path.abspath(unit.file) != os.path.abspath(origin.file):
            continue
        for node in ast.walk(unit.tree):
            if isinstance(node, ast.ClassDef) and node.lineno <= origin.line <= (
                node.end_lineno or node.lineno
            ):
                for other in units:
                    for call in change_line.calls(other):
                        if change_line.called_name(call) == node.name:
                            return change_line.Site(other, call, node.name)
    return change_line.layer_site(
        units, origin.op.forward_op or origin.op.name, (dtype_of(origin) or "").lower() or None
    )


def _nan_labels_masked_by_a_product(
    findings: Findings, context: CauseContext, units: list[SourceUnit]
) -> Cause | None:
    """Targets that hold NaN on purpose (an assay not measured), which the loss masks with ``tf.math.is_nan``, then
    multiplies in: ``tf.square(y_true - y_pred) * mask`` is NaN * 0 = NaN where a label is missing. It was "the data
    held NaN ... filter or repair non-finite records where the data is read": dropping those rows loses most of the
    data, and filling them trains on fake labels. The product is what to change. None otherwise."""
    bad = provenance.first_bad_element(context.batch)
    if bad is None or not math.isnan(bad.value) or not bad.leaf.startswith("y"):
        return None
    for unit in units:
        for function in ast.walk(unit.tree):
            if not isinstance(function, ast.FunctionDef):
                continue
            tested = [
                node
                for node in ast.walk(function)
                if isinstance(node, ast.Call) and called_name(node) == "is_nan" and node.args
            ]
            if not tested:
                continue
            masks = {
                target.id
                for statement in ast.walk(function)
                if isinstance(statement, ast.Assign) and any(t in ast.walk(statement.value) for t in tested)
                for target in statement.targets
                if isinstance(target, ast.Name)
            }
            products = [
                node
                for node in ast.walk(function)
                if isinstance(node, ast.BinOp)
                and isinstance(node.op, ast.Mult)
                and any(isinstance(side, ast.Name) and side.id in masks for side in (node.left, node.right))
            ]
            if not products:
                continue
            labels = ast.get_source_segment(unit.text, tested[0].args[0]) or "y_true"
            site = change_line.Site(unit, products[0], function.name)
            summary = (
                f"the targets hold NaN on purpose ({bad.describe()}), and {function.name} masks them with "
                f"tf.math.is_nan, but multiplies the mask in at {_site_place(site)}: NaN * 0 is NaN, so a masked "
                "label's NaN still reaches the loss (and its gradient)"
            )
            what = (
                f"the masked product: replace the missing labels before any arithmetic, {labels} = "
                f"tf.where(tf.math.is_nan({labels}), tf.zeros_like({labels}), {labels}), then keep the mask; or "
                "select with tf.where(mask, ..., 0.0) instead of multiplying"
            )
            evidence = {"element": bad.describe(), "masked_by": function.name}
            return Cause("op", summary, evidence, _change(site, what, "op"))
    return None


def _data(findings: Findings, context: CauseContext, units: list[SourceUnit]) -> Cause:
    weighted = _class_weighted(findings, context, units)
    if weighted is not None:
        return weighted
    masked = _nan_labels_masked_by_a_product(findings, context, units)
    if masked is not None:
        return masked
    origin = findings.origin
    site: change_line.Site | None = change_line.reading_site(
        units,
        origin.file if origin else None,
        origin.line if origin else None,
        origin.cell if origin else None,
    )
    on_origin_line = (
        site is not None
        and origin is not None
        and (site.file, site.cell, site.line) == (origin.file, origin.cell, origin.line)
    )
    if not on_origin_line:
        # Batches made in Python (a generator, a PyDataset): the place they leave the user's code is the line to
        # change, before any reading call elsewhere in the program (it may not feed this fit at all).
        made_by_python = origin is not None and origin.op.type in python_feed.PY_FUNC_OPS
        site = python_feed.feed_site(units, wrapped_functions=made_by_python) or site
    if site is None:
        # A custom loop (guard_step): the batches come from what its loop iterates.
        site = change_line.loop_feed_site(units, context.step_function)
    section = findings.bundle or {}
    where, batch_index, epoch = _batch_provenance(findings, context, units, site)
    problem = section.get("non_finite_batch") or {}
    evidence: dict[str, Any] = {
        "non_finite_values": problem.get("total"),
        "arrays": problem.get("leaves"),
        "examples": problem.get("examples"),
        "step": context.step,
        "batch_index": batch_index,
        "epoch": epoch,
    }
    element = (where or {}).get("element") or next(iter(problem.get("examples") or []), "a batch value")
    came = _array_index_text(where)
    if where and where.get("sentence"):  # a file the tf.data pipeline read: what the user opens next, first
        summary = f"the data held NaN/Inf before any op touched it: {where['sentence']} ({element}"
        if where.get("batch_index") is not None:
            summary += f", batch {where['batch_index']}, row {where['batch_row']}"
        summary += ")"
        return Cause("data", summary, evidence, _reading_change(findings, site), provenance=where)
    if isinstance(site, python_feed.FeedSite):
        came += f", made in Python by {site.describe()} ({_site_place(site)})"
        if origin is not None and origin.op.type in python_feed.PY_FUNC_OPS:
            # The PyFunc's own line is where tf.data wraps the generator (``from_generator(...)``, or fit's line):
            # the values were made where it yields them (`attach_cause` marks the origin there).
            code = next(
                (u.line(site.line) for u in units if (u.file, u.cell) == (site.file, site.cell)), ""
            ).strip()
            evidence[FED_AT] = {
                "file": os.path.abspath(site.file),
                "line": site.line,
                "code": code,
                **({"cell": site.cell} if site.cell is not None else {}),
            }
    if where and where.get("file"):
        came += f", line {where['line']} of {os.path.basename(where['file'])} (data row {where['row']})"
    summary = f"the data held NaN/Inf before any op touched it: {element}{came}"
    if where and where.get("batch_index") is not None:
        order = ""
        if (
            isinstance(site, python_feed.FeedSite)
            and site.feed == "PyDataset"
            and change_line.fit_shuffles(units)
        ):
            # fit shuffles a PyDataset's batches each epoch: batch 12 of the epoch was __getitem__(28).
            order = (
                f" of the epoch's order: fit shuffles a PyDataset's batches, so it is not __getitem__"
                f"({where['batch_index']}); pass shuffle=False to fit to call it in order"
            )
        summary += f" (batch {where['batch_index']}{order}, row {where['batch_row']})"
    bad = provenance.first_bad_element(context.batch)
    column = _whole_column(context.batch, bad, units)
    if column is not None:
        summary += f"; {column}"
    change = _reading_change(findings, site)
    if (site is None or column is not None) and bad is not None:
        # Arrays made by the program's own arithmetic (no reading call), or a column NaN in every row, which the
        # arithmetic after the read made ((raw - mean) / std with a std of 0): where the array fit is given is made.
        made = _fit_array_site(context, units, bad)
        computed = made is not None and any(isinstance(n, ast.BinOp) for n in ast.walk(made.node))
        # After a read, only arithmetic makes a column NaN: a plain copy or slice of what was read is not the place.
        if made is not None and (site is None or computed):
            what = (
                f"the computation of {made.name}: it makes a whole column NaN/Inf, by a division by a zero std "
                "or count, a log of 0, or a mean or std over a column with missing values (NaN fields: fill or "
                "drop them first, or np.nanmean / np.nanstd)"
                if column is not None
                else f"filter or repair non-finite values where {made.name} is made"
            )
            change = _change(made, what, "array")
        if column is not None and (change is None or change.target.startswith("reading")):
            # A DataFrame column the program computes with a division (``df["debt_to_income"] = df.debt /
            # df.income``): pandas makes inf of a 0 divisor without a warning, and a statistic over the column (a
            # FeatureSpace's or Normalization's mean) makes it NaN in every row. The read file holds no inf.
            computed_column = _the_one_column_computed_with_infinities(units)
            if computed_column is not None:
                what = (
                    f"the computation of column {computed_column.name!r}: a division by 0 (or a log of 0) makes inf, "
                    "which pandas keeps without a warning, and a statistic over the column (a normalizing layer's "
                    "mean) then makes it NaN in every row; guard the divisor (np.where, an epsilon) or filter the "
                    "records before it"
                )
                change = _change(computed_column, what, "array")
        standardized = _standardization_site(units) if math.isnan(bad.value) else None
        if (
            column is not None
            and standardized is not None
            and change is not None
            and change.target != "config"
        ):
            # A column NaN in every row and a standardization by a std in the code (pandas' ``(df[col] -
            # df[col].mean()) / df[col].std()`` over a constant column: 0 / 0, and pandas warns nothing): it was
            # the dataset call's line, "the computation of train_ds", a line with no division.
            what = (
                "the standardization: a column that never changes (a constant feature) has std 0, and (x - mean) / "
                "0 is NaN in every row; leave constant columns out, or divide by (std + 1e-8)"
            )
            if standardized.name == "range":
                what = (
                    "the min-max scaling: a column that never changes (a constant feature) has max - min = 0, and "
                    "(x - min) / 0 is NaN in every row; leave constant columns out, or divide by the range only "
                    "where it is not 0 (np.where(hi > lo, hi - lo, 1.0))"
                )
            change = _change(standardized, what, "array")
    elif site is not None and bad is not None and math.isinf(bad.value):
        # A reader does not make an infinity of a text field; a log of 0 or a division by 0 where the array fit
        # is given is computed from what was read does (``np.column_stack([..., np.log(data[:, 2])])``).
        made = _fit_array_site(context, units, bad)
        if made is not None and made.column is None and not _makes_infinities(made.node):
            # ``y = train["log_sales"].values.astype("float32")`` only selects the column: the line that computes
            # it (``train["log_sales"] = np.log(train["sales"])`` of a sales of 0) made the inf (s43c p3).
            made = change_line.selected_column_site(units, made) or made
        if made is not None and made.column is not None and not _makes_infinities(made.node):
            # The column fit's array holds is made of another one that made the inf (a target shifted from a
            # pct_change): that one's line.
            earlier = _column_that_made_infinities(units, made.column)
            if earlier is not None:
                made = dataclasses.replace(
                    earlier, name=f"column {earlier.name!r} (which {made.name} is made of)", target="array"
                )
        if (
            made is not None
            and (made.file, made.cell, made.line) != (site.file, site.cell, site.line)
            and _makes_infinities(made.node)
        ):
            summary += (
                f"; {made.name} is computed from what was read with a log or a division, which makes "
                f"{_signed_inf(bad.value)} of a finite value"
            )
            what = (
                f"the computation of {made.name}: a log of 0 or a division by 0 makes {bad.describe()} of a finite "
                "record; guard it (np.log1p, an epsilon) or filter the records before it"
            )
            change = _change(made, what, "array")
        if (
            (change is None or change.target.startswith("reading"))
            and (computed_column := _the_one_column_computed_with_infinities(units)) is not None
            and isinstance(site, change_line.Site)
            and provenance.read_file_holds_missing(site, context.cwd, context.folders or [os.getcwd()])
            is False
        ):
            # The file read holds no non-finite field, so a reader did not make this inf, and the code computes
            # one column with a log or a division (``train["log_sales"] = np.log(train["sales"])`` of a sales of
            # 0) where fit's array could not be followed to it: that line, not "filter non-finite records where
            # the data is read", which filters nothing (s43c p3).
            summary += (
                f"; the file read holds no non-finite field, and column {computed_column.name!r} is computed with "
                f"a log or a division, which makes {_signed_inf(bad.value)} of a finite value"
            )
            what = (
                f"the computation of column {computed_column.name!r}: a log of 0 or a division by 0 makes "
                f"{bad.describe()} of a finite record; guard it (np.log1p, an epsilon) or filter the records "
                "before it"
            )
            change = _change(computed_column, what, "array")
    elif site is not None and bad is not None and math.isnan(bad.value):
        # A NaN in a column the program computes with a division (a leave-one-out target encoding's (s - y) /
        # (n - 1) of a category seen once: 0 / 0), when the file read holds no missing field: the computation made
        # it, and "filter non-finite records where the data is read" filtered nothing (s40c nb3).
        made = _fit_array_site(context, units, bad)
        if made is not None and made.column is None:
            # ``y = train["target"].values`` only selects the column: the line that computes it made the NaN.
            made = change_line.selected_column_site(units, made) or made
        runs = _runs_of_an_in_place_transform(context, made) if made is not None else 0
        if made is not None and runs > 1:
            # ``full['top_share'] = np.log(full['top_share'] / (1 - full['top_share']))`` in a cell the user ran
            # again after a describe() (s43c p6): the second run took the logit of logits, a log of negatives. It
            # was "a 0 / 0 there made the NaN ... guard the divisor", and np.maximum(1 - p, 1), followed, changed
            # nothing.
            place = _site_place(made)
            summary += (
                f"; {made.name} is transformed in place ({place}), and the kernel ran that cell {runs} times: each "
                "run after the first transformed what the run before had made"
            )
            what = (
                f"the in-place transform of {made.name}: the cell ran {runs} times, and each run after the first "
                "transformed its own output again; write the result to a new column computed from the raw one, or "
                "re-run the notebook from the cell that reads the data"
            )
            change = _change(made, what, "array")
        elif (
            made is not None
            and made.column is not None
            and _has_division(made.node)
            and provenance.read_file_holds_missing(site, context.cwd, context.folders or [os.getcwd()])
            is False
        ):
            std = change_line.std_divisor(made.node)
            summary += (
                f"; {made.name} is computed with a division, and the file read holds no missing field: a 0 / 0 "
                "there made the NaN"
                if std is None
                else f"; {made.name} is divided by a std, and the file read holds no missing field: a std of a "
                "group of one record (NaN) or of equal values (0) made the NaN"
            )
            what = (
                f"the computation of {made.name}: a division by a count or sum that is 0 for some records (a "
                "category seen once, an empty group) makes NaN; guard the divisor (np.where, np.maximum(..., 1)) "
                "or fill those records (.fillna with a prior or the overall mean)"
            )
            if std is not None:
                # A per-group std (``groupby(...).transform("std")``) is NaN for a group of one record and 0 for a
                # group whose values are all equal: "a count that is 0" sent the user looking for a count (s43b p1).
                what = (
                    f"the computation of {made.name}: its divisor {std} is a std, NaN for a group of one record "
                    "(pandas' std divides by n - 1) and 0 where a group's values are all equal; fill those before "
                    f"the division ({std}.fillna(1.0).replace(0.0, 1.0)), or divide by ({std} + 1e-8) after "
                    "filling"
                )
            change = _change(made, what, "array")
        joined = (
            _joined_column_site(context, units, bad)
            if change is None or change.target.startswith("reading")
            else None
        )
        if (
            joined is not None
            and provenance.read_file_holds_missing(site, context.cwd, context.folders or [os.getcwd()])
            is False
        ):
            # The CSV read holds no missing field, and the column is made by a left merge with a table that lacks
            # a key (s42f p3: a region missing from the weights table): "filter where the data is read" filtered
            # nothing; the merge made the NaN.
            lacking = joined.other if joined.how != "outer" else "one side"
            summary += (
                f"; the file read holds no missing field: column {joined.column!r} comes from the {joined.how} "
                f"{joined.site.name} at {_site_place(joined.site)}, NaN for a key {lacking} lacks"
            )
            fill = "1.0" if bad.leaf == "sample_weight" else "a default"
            change = _change(joined.site, joined.what(fill), "array")
        if change is None or change.target.startswith("reading"):
            # The CSV read holds no missing field the program leaves unfilled, so "filter where the data is read"
            # filters nothing: pandas made the NaN after the read, silently, with a ratio of two columns both 0 on
            # some records (s43c p1: GarageArea / GarageCars of a house without a garage) or a .map by a mapping
            # learned from other rows (s43c p4: a target encoding's unseen category).
            made_by_pandas = _nan_made_by_pandas(context, units, bad, site)
            if made_by_pandas is not None:
                summary += made_by_pandas[0]
                change = made_by_pandas[1]
    column_name = (where or {}).get("column")
    if column_name is None and bad is not None and (keyed := _DICT_KEY.match(bad.leaf)) is not None:
        # A dataset of a DataFrame's columns by name (tensorflow.org's ``df_to_dataset``: from_tensor_slices((
        # dict(df), labels))): the batch's key is the column, made inf by a division pandas did silently. A key
        # that holds several columns (``{"num": train[num_cols].values}``) names the bad element's (s40d p9).
        names = change_line.keyed_columns(units, keyed.group(1)) if len(bad.index) == 2 else None
        column_name = (
            names[bad.index[1]] if names is not None and bad.index[1] < len(names) else keyed.group(1)
        )
    if isinstance(column_name, str) and bad is not None and not math.isnan(bad.value):
        # fit(df[features]): the DataFrame's column, when the program computes it (``df["log_income"] =
        # np.log(df["median_income"])``), is where a finite record became an infinity; the file it read holds the
        # finite value, so "filter non-finite records where the data is read" filtered nothing.
        made_column = _column_that_made_infinities(units, column_name)
        if made_column is not None:
            made_of = made_column.name
            of = f" (which {column_name!r} is made of)" if made_of != column_name else ""
            what = (
                f"the computation of column {made_of!r}{of}: a log of 0 or a division by 0 makes {bad.describe()} "
                "of a finite record; guard it (np.log1p, an epsilon) or filter the records before it"
            )
            change = _change(made_column, what, "array")
    if bad is not None and math.isnan(bad.value) and (change is None or change.target.startswith("reading")):
        # A time series put on a regular grid: resample(...).mean() (or reindex/asfreq) makes an empty bin NaN,
        # silently; the dataset call that hands the array on was the line named.
        regridded = _the_one_regridding(units)
        if regridded is not None:
            summary += (
                f"; {regridded.name}() at {_site_place(regridded)} makes NaN of a bin or date with no data"
            )
            what = (
                f"the {regridded.name}: a bin or date with no reading is NaN; fill it (.interpolate(), .ffill()) "
                "or drop it (.dropna()) before the values are used"
            )
            change = _change(regridded, what, "array")
    warned = _numpy_warning_for(context.numpy_warnings, bad, units, _fit_code(context))
    if warned is not None:
        # NumPy said where: its warning fired at the line that made a value of this kind before the step, where the
        # program's own arithmetic (a log of 0, a 0 / 0) made the batch's bad value. The line to change, over the
        # call that handed the array on (a dataset call, a PyDataset's return).
        place = _warned_place(warned)
        summary += f'; NumPy warned "{warned.message}" at {place} before the step'
        if warned.makes == "inf" and bad is not None and math.isnan(bad.value):
            summary += " (an Inf it made, which a statistic over the column later turned NaN: inf - inf)"
        evidence["numpy_warning"] = warned.to_json()
        made_inf = _the_one_column_computed_with_infinities(units) if _at_a_statistic(warned) else None
        if made_inf is not None:
            # The statistic only met the inf: pandas made it without a warning where the column is computed
            # (``df["Return"] = df["Close"].pct_change()`` of a price of 0, a ratio of two columns).
            summary += (
                f" (a statistic of a column that held inf: column {made_inf.name!r}, computed at "
                f"{_site_place(made_inf)} with a division, which pandas makes inf of a 0 without a warning)"
            )
            what = (
                f"the computation of column {made_inf.name!r}: a division by 0 (pct_change divides by the value "
                "before: a price of 0) makes inf, and the statistic over the column then NaN; repair the 0 "
                "before it (.replace(0, np.nan).ffill()) or filter the records"
            )
            change = _change(made_inf, what, "array")
        elif (
            change is None
            or (os.path.abspath(change.file), change.line, change.cell)
            != (
                warned.file,
                warned.line,
                warned.cell,
            )
            or (warned.makes == "inf" and _AN_INF_COMPUTED in change.what)
        ):
            # On the line NumPy warned at, its message says which (a log of 0, a log of a price of 0, a division)
            # better than "a log of 0 or a division by 0" found from the code alone.
            change = _warned_change(
                warned,
                f"NumPy made {'NaN' if warned.makes == 'nan' else 'Inf'} here ({warned.message}): {_numpy_fix(warned)}",
                "array",
            )
    return Cause("data", summary, evidence, change, provenance=where)


def _standardization_site(units: list[SourceUnit]) -> change_line.Site | None:
    """The first statement of the user's code that divides by a std it computes (``(df[c] - df[c].mean()) /
    df[c].std()``, ``x / x.std(axis=0)``), or by a name assigned one (``train_std = train_df.std()`` above
    ``train_df = (train_df - train_mean) / train_std``, tensorflow.org's time-series tutorial), or by a range
    (min-max scaling, ``(x - lo) / (hi - lo)``: its Site is named "range"), or None. A divisor with an epsilon added
    (``std + 1e-7``) makes no 0, and a function a later cell (or line) defines again is not the one that ran (a
    notebook's helper redefined from z-score to min-max, s42c nb1)."""

    def calls_named(node: ast.AST, names: tuple[str, ...]) -> bool:
        return any(isinstance(call, ast.Call) and called_name(call) in names for call in ast.walk(node))

    def computes_std(node: ast.AST) -> bool:
        return calls_named(node, ("std", "nanstd"))

    def assigned(test: Callable[[ast.AST], bool]) -> set[str]:
        """Names assigned a value `test` holds for, one by one in a tuple (``lo, hi = x.min(), x.max()``)."""
        pairs = [
            pair
            for unit in units
            for node in ast.walk(unit.tree)
            if isinstance(node, ast.Assign)
            for target in node.targets
            for pair in (
                zip(target.elts, node.value.elts, strict=True)
                if isinstance(target, ast.Tuple)
                and isinstance(node.value, ast.Tuple)
                and len(target.elts) == len(node.value.elts)
                else [(target, node.value)]
            )
        ]
        return {target.id for target, value in pairs if isinstance(target, ast.Name) and test(value)}

    std_names = assigned(computes_std)
    highs = assigned(lambda n: calls_named(n, ("max", "nanmax", "amax")))
    lows = assigned(lambda n: calls_named(n, ("min", "nanmin", "amin")))

    def is_range(node: ast.expr) -> bool:
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub)):
            return False
        high = calls_named(node.left, ("max", "nanmax", "amax")) or (
            isinstance(node.left, ast.Name) and node.left.id in highs
        )
        low = calls_named(node.right, ("min", "nanmin", "amin")) or (
            isinstance(node.right, ast.Name) and node.right.id in lows
        )
        return high and low

    def with_epsilon(node: ast.expr) -> bool:
        return (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Add)
            and any(
                isinstance(side, ast.Constant) and isinstance(side.value, (int, float)) and side.value > 0
                for side in (node.left, node.right)
            )
        )

    superseded = change_line.superseded_functions(units)
    for unit in units:
        for node in ast.walk(unit.tree):
            if not isinstance(node, ast.Assign) or change_line.inside_any(unit, node, superseded):
                continue
            for division in ast.walk(node.value):
                if not (isinstance(division, ast.BinOp) and isinstance(division.op, ast.Div)):
                    continue
                divisor = division.right
                if with_epsilon(divisor):
                    continue
                if computes_std(divisor) or (isinstance(divisor, ast.Name) and divisor.id in std_names):
                    return change_line.Site(unit, node.value, "std")
                if is_range(divisor):
                    return change_line.Site(unit, node.value, "range")
    return None


_DICT_KEY = re.compile(r"^\w+\['([^'\]]+)'\]$")
_STATISTIC_CALL = re.compile(r"\.(?:std|var|mean|sum|describe|cov|corr)\(|np\.(?:std|var|mean|sum|nanstd)\(")


def _at_a_statistic(warned: NumpyWarning) -> bool:
    """Whether NumPy warned "invalid value in subtract" at a statistic (``train_df.std()``): inf - inf of a column
    that held inf already, which an earlier line made without a warning."""
    return warned.message.endswith("in subtract") and bool(
        _STATISTIC_CALL.search(source_line(warned.file, warned.line) or "")
    )


_PRICE_WORDS = re.compile(r"price|close|\bopen\b|adj_?close|quote", re.IGNORECASE)


def _warned_place(warned: NumpyWarning) -> str:
    """'train.py:30' or 'a.ipynb cell 7, line 3': where NumPy warned, as a cause says it."""
    return place_text(os.path.basename(warned.file), warned.line, warned.cell)


def _warned_change(warned: NumpyWarning, what: str, target: str) -> Change:
    """The change at the line NumPy warned at."""
    return Change(
        file=os.path.abspath(warned.file), line=warned.line, what=what, cell=warned.cell, target=target
    )


def _warned_line(warned: NumpyWarning) -> str:
    """The text of the line NumPy warned at: a .py file's line, or a notebook cell's ("" when not found)."""
    lines = _lines_of(warned.file, warned.cell)
    return lines[warned.line - 1] if 0 < warned.line <= len(lines) else ""


def _numpy_fix(warned: NumpyWarning) -> str:
    message = warned.message
    if _at_a_statistic(warned):
        # A std of a column holding inf is inf - inf = NaN: NumPy warned at the statistic, the inf came before it
        # (pandas divides by 0 without a warning: pct_change of a price of 0, a ratio of two columns).
        return (
            "a statistic of values that already held +-inf (inf - inf is NaN); the inf came before this line, "
            "from a step that warns nothing (pandas' pct_change or a division of columns by a 0): find the column "
            "that holds it (np.isinf(df).any()) and repair it there"
        )
    if message.endswith("overflow encountered in cast"):
        # A float64 value past float32's range cast down (a DQN's replay buffer of rewards that reached -2.8e47):
        # np.clip there, followed, left states of 2e23 that overflowed the loss. It was huge before this line.
        return (
            "a value beyond float32's range (|x| > 3.4e38) cast down to float32: it was already that large before "
            "this line; find where it grows (a state or reward that ran away: an episode that does not end, a "
            "product that compounds) rather than clipping it here"
        )
    if "empty slice" in message or "Degrees of freedom" in message:
        return "a mean or std over no rows; skip or fill the empty selections"
    if message.endswith(" in log1p"):
        # The line takes log1p already: "guard it (np.log1p, ...)" was advice it had followed. Its -inf is a
        # log1p(-1): a change of -100% (a return whose price fell to 0), or a -1 that stands for "missing".
        return (
            "log1p(x) is -inf at x = -1 and NaN below it (a change of -100%: a price or count that fell to 0, or a "
            "-1 standing for a missing value); keep x above -1 (np.clip(x, -1 + 1e-6, None)) or filter the "
            "records before it"
        )
    if message.endswith(_LOG_WARNINGS) and message.startswith("invalid value"):
        # NumPy's "invalid value" in a log is a negative input (its NaN; a 0 is "divide by zero", -inf): np.log1p
        # and an epsilon leave log(-5) NaN (a random-walk price that dipped below 0).
        return (
            "a log of negative values (NaN); np.log1p or an epsilon leaves them NaN: clip them (np.clip(x, 1e-6, "
            "None)), filter the records before it, or log a quantity that cannot go below 0"
        )
    if message.endswith(_LOG_WARNINGS) and _PRICE_WORDS.search(_warned_line(warned)):
        # A stock notebook's ``np.log(close)`` with closed days stored as 0: log1p or an epsilon, followed, makes
        # returns of -1000% out of a quote that is missing, not small.
        return (
            "a log of a price of 0 (-inf): a price of 0 is a missing quote (a closed day), not a small value: drop "
            "those rows or fill them from the day before (.replace(0, np.nan).ffill()) before the log; np.log1p or "
            "an epsilon would make huge false returns"
        )
    if message.endswith(_LOG_WARNINGS):
        return "a log of 0 (-inf); guard it (np.log1p, an epsilon, np.clip) or filter the records before it"
    if "divide" in message and message.endswith(" in power"):
        # np.power(rowsum, -0.5) of a node with no edges: the degree normalization of a graph (s39d p1).
        return (
            "a power of 0 to a negative exponent (inf): a degree or count of 0 (an isolated node); set those results "
            "to 0 (d[np.isinf(d)] = 0.0, as Kipf's GCN does) or add self-loops so that no degree is 0"
        )
    if "divide" in message:
        return "a division by 0; add an epsilon or np.where to the divisor, or filter the records before it"
    return "guard the operation (np.clip, np.where) or filter the records before it"


def _fit_code(context: CauseContext) -> str | None:
    """The recorded text of the fit call that failed (``model_info["fit_call"]["code"]``), if any."""
    code = (context.model_info.get("fit_call") or {}).get("code")
    return code if isinstance(code, str) else None


def _numpy_warning_for(
    warned: list[NumpyWarning], bad: BadElement | None, units: list[SourceUnit], fit_code: str | None = None
) -> NumpyWarning | None:
    """The first line NumPy warned at that makes the kind of value the batch holds (an "invalid value" makes NaN, a
    division by zero or an overflow makes Inf; NaN carried through arithmetic warns nothing), in a file of the
    program that is still there: a notebook's saved cell (`pyadapter.cause._warnings_in_notebook`), not the kernel's file of
    it, which is gone when the kernel stops and names nothing the user can open. A line that only looks at the data
    (``df.describe()``, ``print(x.mean())``) made nothing: NumPy warned there computing statistics of a column an
    earlier line had made inf without a warning (pandas divides by 0 silently)."""
    if bad is None:
        return None
    kind = "nan" if math.isnan(bad.value) else "inf"
    found = [warning for warning in _warnings_that_make(warned, units) if warning.makes == kind]
    if kind == "nan" and not found:
        # ``np.log(oldpeak)`` of a 0 warned "divide by zero" (an inf), and no line warned making a NaN: the inf
        # became the batch's NaN past NumPy (a FeatureSpace's normalization of a column holding -inf, inf - inf),
        # and the change was "filter non-finite records where the data is read", of a clean CSV (s42c nb9).
        found = [warning for warning in _warnings_that_make(warned, units) if warning.makes == "inf"]
    if fit_code is not None:
        # A Kaggle notebook's EDA (``corr = np.corrcoef(...)`` of a constant column) warns first, and its result
        # never reaches training; the standardization below it (``X = (X_raw - mean) / std``) made the batch. The
        # warned lines that assign what the fit call reads (through the assignments between) come first.
        feeding = _names_feeding(units, fit_code)
        found.sort(key=lambda warning: not _assigns_any(warning, units, feeding))
    if kind == "nan" and found and _at_a_statistic(found[0]):
        # ``X.std()`` warned "invalid value in subtract": inf - inf of a column an earlier line made inf. When NumPy
        # warned at that line too (``np.log`` of a 0, before the standardization), it is the line to change; the
        # statistic only turned its inf into NaN.
        earlier = [
            w
            for w in warned[: warned.index(found[0])]
            if w.makes == "inf"
            and os.path.isfile(w.file)
            and "ipykernel_" not in w.file
            and not _only_looks(w, units)
        ]
        if earlier:
            return earlier[-1]
    if bad.value == -math.inf:
        # ``np.log(p[1:] / p[:-1])`` of a price of 0 warns twice on its line, "in divide" first: the -inf is the
        # log's (of the 0 the division made), and an epsilon in the divisor, followed, left it.
        logs = [w for w in found if w.message.rstrip().endswith(_LOG_WARNINGS) and w.line == found[0].line]
        if logs:
            return logs[0]
    return found[0] if found else None


_LOG_WARNINGS = ("in log", "in log2", "in log10", "in log1p")


_IDENTIFIER = re.compile(r"\b[A-Za-z_]\w*\b")


def _assigned_names(node: ast.AST) -> set[str]:
    """The names an assignment statement binds or changes (``X``, ``X[idx] = ...``'s ``X``, ``a, b = ...``)."""
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    names: set[str] = set()
    for target in targets:
        for inner in ast.walk(target):
            if isinstance(inner, ast.Name):
                names.add(inner.id)
    return names


def _names_feeding(units: list[SourceUnit], fit_code: str) -> set[str]:
    """The names the fit call reads and, through the program's assignments, every name those are made from
    (``X_train = X[train_idx]``, ``X = (X_raw - mean) / std``): what reaches training."""
    assignments = [
        (targets, {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} - targets)
        for unit in units
        for node in ast.walk(unit.tree)
        if (targets := _assigned_names(node))
    ]
    feeding = set(_IDENTIFIER.findall(fit_code))
    grown = True
    while grown:
        grown = False
        for targets, read in assignments:
            if targets & feeding and not read <= feeding:
                feeding |= read
                grown = True
    return feeding


def _assigns_any(warning: NumpyWarning, units: list[SourceUnit], names: set[str]) -> bool:
    """Whether the statement NumPy warned at assigns one of `names`."""
    for unit in _units_holding(units, warning):
        for node in ast.walk(unit.tree):
            if (
                isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                and node.lineno <= warning.line <= (node.end_lineno or node.lineno)
                and _assigned_names(node) & names
            ):
                return True
    return False


# A statement that shows or summarises data and assigns nothing: ``df.describe()``, ``print(x.std())``.
_LOOKING = re.compile(
    r"^\s*(?:print|display)\(|^\s*[\w.\[\]\"']+\.(?:describe|info|head|tail|mean|std|var|min|max|sum|corr|hist|plot)\(.*\)\s*$"
)


def _only_looks(warning: NumpyWarning, units: list[SourceUnit]) -> bool:
    """Whether the warned line is a statement that only shows or summarises data (`_LOOKING`), in the program's
    sources as the bundle's cause reads them."""
    for unit in units:
        if unit.cell == warning.cell and os.path.abspath(unit.file) == os.path.abspath(warning.file):
            text = unit.line(warning.line)
            return bool(_LOOKING.search(text)) and "=" not in text.split("(", 1)[0]
    return False


# pct_change is a division by the value before (a price of 0 makes the next one inf).
_INFINITY_MAKERS = {
    "log",
    "log2",
    "log10",
    "divide",
    "true_divide",
    "reciprocal",
    "power",
    "float_power",
    "pct_change",
}


def _column_that_made_infinities(units: list[SourceUnit], column: str) -> change_line.Site | None:
    """The assignment of the DataFrame column that computed an infinity with a log or a division (`column`'s own,
    or the column it is made of: ``df["target"] = df["vol_chg"].shift(-1)`` after ``df["vol_chg"] =
    df["volume"].pct_change()`` of a zero volume, s40e p4), as a Site named by that column; None when none does."""
    made_of = column
    for _ in range(4):
        site = change_line.column_assignment_site(units, made_of)
        if site is None:
            return None
        if _makes_infinities(site.node):
            return dataclasses.replace(site, name=made_of)
        read = change_line.columns_read(site.node)
        if len(read) != 1 or read[0] == made_of:
            return None
        made_of = read[0]
    return None


def _makes_infinities(node: ast.AST) -> bool:
    """Whether an expression computes a log, a division or a power (``np.log(col)``, ``a / b``), which make
    infinities of finite values."""
    for child in ast.walk(node):
        if isinstance(child, ast.BinOp) and isinstance(child.op, (ast.Div, ast.FloorDiv, ast.Pow)):
            if isinstance(child.op, (ast.Div, ast.FloorDiv)) and _a_nonzero_number(child.right):
                continue  # ``(d - START).dt.days / 365.0``: a division by a number written there is finite
            return True
        if isinstance(child, ast.Call):
            func = child.func
            name = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else ""
            )
            if name in _INFINITY_MAKERS:
                return True
    return False


# The words of a change to a column or array the code computes with a log or a division, found from the code alone.
_AN_INF_COMPUTED = ": a log of 0 or a division by 0 makes "


def _a_nonzero_number(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float))
        and not isinstance(node.value, bool)
        and node.value != 0
    )


def _signed_inf(value: float) -> str:
    return "-inf" if value < 0 else "+inf"


def _runs_of_an_in_place_transform(context: CauseContext, made: change_line.Site) -> int:
    """How many times the notebook's kernel ran the cell of `made`, when `made` assigns a DataFrame column from
    that same column (``df["c"] = np.log(df["c"])``), a transform a second run applies to its own output; 0 for
    a script, a computation of other columns, or a cell the record does not show."""
    if made.column is None or made.cell is None or made.column not in change_line.columns_read(made.node):
        return 0
    text = made.unit.text.strip()
    return sum(1 for source in context.ran_cells if source.strip() == text)


def _fit_array_site(
    context: CauseContext, units: list[SourceUnit], element: BadElement
) -> change_line.Site | None:
    """Where the array fit was given that holds `element` is made (`change_line.fit_array_site`), if the code
    assigns it."""
    fit_cell = (context.model_info.get("fit_call") or {}).get("cell")
    column = element.index[1] if len(element.index) == 2 else None
    return change_line.fit_array_site(
        units,
        element.leaf,
        column,
        _fit_code(context),
        fit_cell if isinstance(fit_cell, int) and not isinstance(fit_cell, bool) else None,
        _leaf_width(context.batch, element) if column is not None else None,
    )


def _leaf_width(batch: Any, element: BadElement) -> int | None:
    """How many columns the batch's array `element` is in has (a matrix's second dimension), if it is one."""
    for label, value, _ in provenance.leaves(batch):
        if label == element.leaf and isinstance(value, np.ndarray) and value.ndim == 2:
            return int(value.shape[1])
    return None


def _nan_made_by_pandas(
    context: CauseContext, units: list[SourceUnit], bad: BadElement, site: change_line.Site
) -> tuple[str, Change] | None:
    """(the summary's words, the change) for a NaN in fit's array that the program's pandas code made after the
    read, when the CSV read holds no missing field it leaves unfilled: a ``.map`` by a mapping learned from other
    rows (an out-of-fold target encoding: a category those rows never held maps to NaN), or the one ratio of two
    columns of the file whose records hold 0 / 0. None when the file holds a missing field the code does not fill
    (filtering where the data is read is then the change), or neither is shown."""
    folders = context.folders or [os.getcwd()]
    read = provenance.read_file_columns(site, context.cwd, folders)
    if read is None:
        return None
    path, columns = read
    missing = {
        name for name, values in columns.items() if any(v is not None and math.isnan(v) for v in values)
    }
    filled = change_line.filled_columns(units)
    if missing - filled and "*" not in filled:
        return None
    file_name = os.path.basename(path)
    clean = (
        f"{file_name} holds no missing field"
        if not missing
        else f"{file_name}'s missing fields ({', '.join(sorted(missing)[:3])}) are filled by the code"
    )
    made = _fit_array_site(context, units, bad)
    mapped = change_line.unseen_key_map_site(units, made) if made is not None else None
    if mapped is not None:
        function = next(
            (
                f
                for f in ast.walk(mapped.site.unit.tree)
                if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
                and f.lineno <= mapped.site.line <= (f.end_lineno or f.lineno)
            ),
            None,
        )
        names = {
            n.id
            for n in ast.walk(function or mapped.site.unit.tree)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        }
        prior = next((n for n in ("prior", "global_mean", "overall_mean") if n in names), None)
        fill = prior or "the overall target mean of the training rows"
        of = f"{made.name} " if made is not None else ""
        summary = (
            f"; {clean}: {of}is made by the .map({mapped.mapping}) at {_site_place(mapped.site)}, and "
            f"{mapped.mapping} is learned from {mapped.learned_from}: a category {mapped.mapped} holds that those "
            "rows never held (a rare one) maps to NaN, which pandas does without a warning"
        )
        others = ""
        if mapped.others:
            lines = sorted({other.line for other in mapped.others})
            others = (
                f"; the same for the .map({mapped.mapping}) on line{'s' if len(lines) > 1 else ''} "
                f"{', '.join(str(line) for line in lines)}"
            )
        what = (
            f"the .map({mapped.mapping}) of {mapped.mapped}: a category missing from {mapped.learned_from} maps to "
            f"NaN; fill it with the prior after the map, .map({mapped.mapping}).fillna({prior or 'prior'})"
            + ("" if prior else f" with prior = {fill}")
            + others
        )
        return summary, _change(mapped.site, what, "array")
    candidates: dict[str, tuple[change_line.ColumnDivision, int, int]] = {}
    for division in change_line.column_divisions(units):
        tops, bottoms = columns.get(division.numerator), columns.get(division.divisor)
        if tops is None or bottoms is None:
            continue
        both_zero = sum(1 for t, b in zip(tops, bottoms, strict=False) if t == 0 and b == 0)
        zero_divisor = sum(1 for b in bottoms if b == 0)
        if both_zero:
            candidates.setdefault(division.column, (division, both_zero, zero_divisor))
    if len(candidates) != 1:
        return None
    division, both_zero, zero_divisor = next(iter(candidates.values()))
    ratio = f"{division.numerator} / {division.divisor}"
    records = "record" if both_zero == 1 else "records"
    hold = "holds" if both_zero == 1 else "hold"
    summary = (
        f"; {clean}: column {division.column!r} is computed at {_site_place(division.site)} as {ratio}, and "
        f"{both_zero} {records} of {file_name} {hold} 0 in both: 0 / 0 is NaN, which pandas makes without a warning"
    )
    frame, top, bottom = division.frame, division.numerator, division.divisor
    what = (
        f"the computation of column {division.column!r}: {ratio} is 0 / 0 = NaN where {bottom} is 0 ({zero_divisor} "
        f"of {file_name}'s records; pandas warns nothing); guard the divisor: np.where({frame}[{bottom!r}] > 0, "
        f"{frame}[{top!r}] / {frame}[{bottom!r}], 0), or ({frame}[{top!r}] / {frame}[{bottom!r}].replace(0, "
        "np.nan)).fillna(0)"
    )
    return summary, _change(division.site, what, "array")


def _joined_column_site(
    context: CauseContext, units: list[SourceUnit], element: BadElement
) -> change_line.JoinSite | None:
    """The merge, join or ``.map(dict)`` that made the DataFrame column of the array fit was given that holds
    `element` (`change_line.joined_column_site`), if the code shows one."""
    fit_cell = (context.model_info.get("fit_call") or {}).get("cell")
    return change_line.joined_column_site(
        units,
        element.leaf,
        element.index[1] if len(element.index) == 2 else None,
        _fit_code(context),
        fit_cell if isinstance(fit_cell, int) and not isinstance(fit_cell, bool) else None,
    )


_REGRIDDING = ("resample", "reindex", "asfreq")
_FILLING = ("interpolate", "ffill", "bfill", "fillna", "dropna", "pad")


def _the_one_regridding(units: list[SourceUnit]) -> change_line.Site | None:
    """The one pandas regridding call of the user's code (``series.resample("10min").mean()``, ``df.reindex(...)``,
    ``.asfreq(...)``) whose statement fills nothing, when the code fills no NaN anywhere; None otherwise."""
    found = []
    for unit in units:
        for node in change_line.calls(unit):
            name = change_line.called_name(node)
            if name in _FILLING:
                return None  # the program fills NaN somewhere: not this guess
            if name in _REGRIDDING:
                found.append(change_line.Site(unit, node, name))
    return found[0] if len(found) == 1 else None


def _the_one_column_computed_with_infinities(units: list[SourceUnit]) -> change_line.Site | None:
    """The one DataFrame column assignment of the user's code whose value divides or takes a log
    (``df["ratio"] = df.a / df.b``), as a Site named by the column; None for none or several."""
    found = []
    for unit in units:
        for node in ast.walk(unit.tree):
            if not isinstance(node, ast.Assign) or len(node.targets) != 1:
                continue
            target = node.targets[0]
            if (
                isinstance(target, ast.Subscript)
                and isinstance(target.slice, ast.Constant)
                and isinstance(target.slice.value, str)
                and _makes_infinities(node.value)
            ):
                found.append(change_line.Site(unit, node.value, target.slice.value))
    if len(found) > 1:
        # Of several, a pct_change (a division by the data's value before), or those that divide by a column as
        # it is (``df.debt / df.income``), not by one kept off 0 (``/ (raw.income + 1)``, ``/ (df.age - 17)``).
        changes = [site for site in found if _calls(site.node, "pct_change")]
        found = changes or [site for site in found if _divides_by_a_bare_value(site.node)]
    return found[0] if len(found) == 1 else None


def _calls(node: ast.AST, name: str) -> bool:
    return any(isinstance(c, ast.Call) and change_line.called_name(c) == name for c in ast.walk(node))


def _divides_by_a_bare_value(node: ast.AST) -> bool:
    return any(
        isinstance(child, ast.BinOp)
        and isinstance(child.op, ast.Div)
        and isinstance(child.right, (ast.Name, ast.Attribute, ast.Subscript))
        for child in ast.walk(node)
    )


def _whole_column(batch: Any, bad: Any, units: list[SourceUnit]) -> str | None:
    """'column 2 of y is NaN/Inf in every row of the batch: a computed column, not one record' when the bad
    element's column holds no finite value in any row (a target normalised by a zero std); else None. A dict
    input's column is named when the code selects it by name (``{"numeric": df[NUMERIC].values}``)."""
    if bad is None or len(bad.index) not in (2, 3):
        return None
    for label, value, _ in provenance.leaves(batch):
        if (
            label != bad.leaf
            or not isinstance(value, np.ndarray)
            or value.ndim != len(bad.index)
            or value.shape[0] < 2
        ):
            continue
        if value.ndim == 3:
            # Windows of a series (batch, time, feature): a feature NaN at every time step of every window is the
            # series' column, scaled by a std of 0 before the windows were cut (a WindowGenerator's, s41c p4).
            feature = bad.index[2]
            if np.isfinite(value[..., feature]).any():
                continue
            return (
                f"feature {feature} of {bad.leaf} is NaN/Inf at every time step of every window in the batch: a "
                "computed column of the series, not one record (a statistic the column was scaled by is NaN/Inf: "
                "a std of 0 for a column constant over the training split)"
            )
        if not np.isfinite(value[:, bad.index[1]]).any():
            key = _DICT_KEY.match(bad.leaf)
            names = change_line.keyed_columns(units, key.group(1)) if key else None
            # Every column NaN in every row, the bad element's first (two constant features z-scored: both).
            whole = [bad.index[1]] + [
                c for c in range(value.shape[1]) if c != bad.index[1] and not np.isfinite(value[:, c]).any()
            ]
            said = [f"{c} ({names[c]!r})" if names and c < len(names) else str(c) for c in whole[:6]]
            which = (
                f"column {said[0]} of {bad.leaf} is"
                if len(said) == 1
                else f"columns {', '.join(said[:-1])} and {said[-1]} of {bad.leaf} are"
            )
            return (
                f"{which} NaN/Inf in every row of the batch: a computed column, not one record (a statistic the "
                "column was scaled by is NaN/Inf: a std of 0, or a mean over a column one record of which holds "
                "NaN/Inf)"
            )
    return None


def _class_weighted(findings: Findings, context: CauseContext, units: list[SourceUnit]) -> Cause | None:
    """The batch's NaN/Inf is a sample weight Keras made from ``fit(class_weight=...)``: a class weighted inf or NaN
    (``total / (n_classes * count)`` for a class with no samples where the counts were made). The line that makes
    the class weights is the one to change, not a record. None for anything else."""
    element = provenance.first_bad_element(context.batch)
    if element is None or element.leaf != "sample_weight":
        return None
    site = change_line.class_weight_site(units)
    if site is None:
        return None
    label = _class_of_row(context.batch, element.row)
    of_class = f"class {label}" if label is not None else f"the class of row {element.row}"
    value = element.value
    weight = (
        ("NaN" if math.isnan(value) else str(value)) if not math.isfinite(value) else format_number(value)
    )
    summary = (
        f"the class weights given to fit weigh {of_class} {weight}: Keras makes each row's sample weight from "
        f"class_weight, so row {element.row} of the batch ({of_class}) has sample weight {weight} and the loss is "
        f"not finite ({_site_place(site)} makes class_weight)"
    )
    evidence: dict[str, Any] = {
        "element": element.describe(),
        "class": label,
        "weight": str(element.value),
        "step": context.step,
    }
    what = (
        f"class_weight: give every class a finite weight ({of_class} is {weight}: a class with no samples where the "
        "counts are made divides by 0; count the labels fit trains on)"
    )
    code = ast.unparse(site.node)
    if re.search(r"\blog\w*\(", code):
        # ENet's inverse-log weights, 1 / log(count), of a class with one sample: log(1) = 0 (s42f p7). "A class with
        # no samples ... count the labels fit trains on" sent the user to counts that were right.
        what = (
            f"class_weight: give every class a finite weight ({of_class} is {weight}: the weights divide by a log of "
            "the counts, and the log of a count of 1 is 0); keep the log above 0 as ENet's weighting does, "
            "1 / np.log(1.02 + p) of the class's share p, or add 1 to the counts inside the log"
        )
    # The line NumPy warned at that makes a name the weights read (``weight_for_1 = (1 / pos) * (total / 2.0)``
    # above ``class_weight = {0: weight_for_0, 1: weight_for_1}``): the division to change (s41c p3).
    read = {n.id for n in ast.walk(site.node) if isinstance(n, ast.Name)}
    for warning in context.numpy_warnings:
        unit = next(
            (
                u
                for u in units
                if os.path.abspath(u.file) == os.path.abspath(warning.file) and u.cell == warning.cell
            ),
            None,
        )
        statement = change_line.statement_at(unit, warning.line) if unit is not None else None
        if (
            statement is not None
            and unit is not None
            and unit is site.unit
            and statement.lineno <= site.line <= (statement.end_lineno or statement.lineno)
        ):
            # NumPy warned at the line that makes the weights itself (``{k: 1.0 / np.log(freq[k]) ...}``).
            summary += f'; NumPy warned "{warning.message}" there'
            break
        if statement is not None and unit is not None and read & set(change_line.assigned_names(statement)):
            summary += f'; NumPy warned "{warning.message}" at {place_text(os.path.basename(warning.file), warning.line, warning.cell)}'
            made = getattr(statement, "value", None)
            if isinstance(made, ast.expr):
                site = change_line.Site(unit, made, "class_weight", target="class_weight")
            break
    return Cause("data", summary, evidence, _change(site, what, "class_weight"))


def _class_of_row(batch: Any, row: int) -> int | None:
    """The class of row `row` of a batch's ``y``: the label, or the one-hot's largest column."""
    for label, value, _ in provenance.leaves(batch):
        if label != "y" or not isinstance(value, np.ndarray) or value.ndim == 0 or value.shape[0] <= row:
            continue
        target = np.asarray(value[row]).ravel()
        if target.size == 1:
            return int(target[0]) if np.isfinite(target[0]) else None
        return int(np.argmax(target))
    return None


def _batch_provenance(
    findings: Findings,
    context: CauseContext,
    units: list[SourceUnit],
    site: change_line.Site | None,
    element: BadElement | None = None,
) -> tuple[dict[str, Any] | None, int | None, int | None]:
    """(where the batch's bad element came from, the batch index, the epoch): `provenance.data_provenance` with
    what the user's code says of its fit call."""
    section = findings.bundle or {}
    batch_index = context.batch_index if context.batch_index is not None else section.get("batch_index")
    epoch = context.epoch if context.epoch is not None else section.get("epoch")
    # What fit was given at run time (a dataset a helper of the user's returned) when the code's fit call does not
    # show its pipeline: fit's own shuffle= does not apply to a dataset, the pipeline's .shuffle does.
    given = context.model_info.get("fit_input")
    dataset, shuffled = change_line.fit_reads_a_dataset(units), change_line.fit_shuffles(units)
    if not dataset and given in ("dataset", "shuffled dataset"):
        dataset, shuffled = True, given == "shuffled dataset"
    # A guard_step's batches come from the loop's own code, never through a fit call: a ``.fit(`` in the program is
    # the user's (``Trainer.fit``) or another model's, and its shuffle= and batch_size= say nothing of this batch.
    fed = given in ("PyDataset", "generator") or bool(context.step_function)
    if fed:
        shuffled = (
            None  # its own batches in its own order: no index into an array of fit's, no shuffle= of fit's
        )
    bad = element or provenance.first_bad_element(context.batch)
    # A dataset of windows the program assigns (``ds = timeseries_dataset_from_array(...)``): no reading call, but
    # the call that made the dataset tells the series row (`provenance.data_provenance`'s ``made_by``).
    made_by = _fit_array_site(context, units, bad) if site is None and bad is not None else None
    where = provenance.data_provenance(
        context.batch,
        site,
        made_by=made_by,
        batch_index=batch_index,
        epoch=epoch,
        batch_size=change_line.fit_batch_size(units),
        shuffled=shuffled,
        dataset=dataset,
        cwd=context.cwd,
        data_source=context.data_source,
        folders=context.folders,
        element=element,
        fit_rows=context.fit_rows,
    )
    if (
        given in ("PyDataset", "generator")
        and where is not None
        and where.get("source") == "array"
        and where.get("index") is None
    ):
        where["note"] = (
            f"fit was given a {given}, which makes its own batches (in its own order, shuffled if it shuffles): "
            "find the row by its values"
        )
    return where, batch_index, epoch


def _element_provenance(
    findings: Findings, context: CauseContext, units: list[SourceUnit], element: BadElement
) -> tuple[dict[str, Any] | None, int | None, change_line.Site | None]:
    """(where a finite batch value an op choked on came from, the batch index, the site that reads or yields it):
    `_batch_provenance` from the line that reads the data, or the generator / PyDataset that yields it (a
    generator's batches have no array index), or in a custom loop (guard_step) what its loop iterates."""
    site: change_line.Site | None = change_line.reading_site(units, None, None, None)
    site = python_feed.feed_site(units, wrapped_functions=False) or site
    if site is None:
        site = change_line.loop_feed_site(units, context.step_function)
    where, batch_index, _ = _batch_provenance(findings, context, units, site, element)
    return where, batch_index, site


def _read_evidence(
    origin: Finding, context: CauseContext, element: BadElement, **more: Any
) -> dict[str, Any]:
    """The evidence of a cause that names a batch value: the op, its output, the value, the step, and `more`."""
    return {
        "op": origin.op.type,
        "op_name": origin.op.name,
        "output": origin.health.describe() if origin.health else None,
        **more,
        "element": element.describe(),
        "step": context.step,
    }


def _array_index_text(where: dict[str, Any] | None) -> str:
    """', index 196 of the array passed to fit (in the shuffled order)' when the provenance has the index."""
    text = index_text(where)
    if where is None or text is None:
        return ""
    return ", " + text + (" (in the shuffled order)" if where.get("shuffled") is not False else "")


def _batch_out_of_domain(
    findings: Findings,
    context: CauseContext,
    units: list[SourceUnit],
    origin: Finding,
    read: domain.BatchInput,
) -> Cause:
    """An op read a batch array as it came (a loss's ``log(y_true)``, a division by a target) and the array holds
    values outside the op's domain: the values and where they came from, and the op's line to change."""
    # Where the batch came from, as for NaN in the data (`_data`): a generator's batches have no array index.
    read = dataclasses.replace(
        read, element=_named_by_step_parameters(read.element, units, context.step_function)
    )
    where, batch_index, _ = _element_provenance(findings, context, units, read.element)
    leaf, op = read.element.leaf, origin.op.type
    values = read.values_text()
    evidence = _read_evidence(
        origin, context, read.element, batch_array=leaf, batch_values=values, count=read.count
    )
    at = _batch_place(context, batch_index, read.element.row)
    whose = "the step's argument" if context.step_function else "the batch's"
    # A dataset of single tensors names its one array "batch": "read the batch's batch" said it twice.
    subject = f"{whose} {leaf}" if leaf != "batch" else "the batch"
    came = f"plus {read.shift:g}" if read.shift else "as it came"
    summary = (
        f"{_article(op)} {op} op read {subject} {came}, and {leaf} holds {values} for it: "
        f"{read.element.describe()}{_array_index_text(where)}{at}"
    )
    if read.shift:
        # ``log(y_true + 1)`` of targets standardized to mean 0: values below -1 are valid z-scores, and the
        # loss's log (RMSLE) needs the raw, non-negative targets.
        summary += (
            f" ({leaf} + {read.shift:g} is {'0' if not read.negatives else 'negative'} there: values scaled "
            "or centered before a loss that takes their log, which needs them non-negative)"
        )
    what = (
        f"the {op} op reads {leaf} directly: keep its input in the op's domain (an epsilon, a clip), "
        f"or leave out the records where {leaf} holds {read.kinds_text()}"
    )
    if read.bad_rows > read.element.rows // 2 and read.bad_rows < read.count < read.bad_rows * 64:
        # Most records hold a few such values (a depth map's missing pixels, 0): leaving them out leaves out the
        # data, and an epsilon trains the model toward it; the loss's own mask of them is the usual way.
        what = (
            f"the {op} op reads {leaf} directly, and {read.bad_rows} of the batch's {read.element.rows} records hold "
            f"{read.kinds_text()} in it (missing values?): mask them out of the loss (tf.where({leaf} > 0, ..., 0) "
            f"and the mean over the valid ones only), as depth and segmentation losses do with missing values"
        )
    xlogy = _xlogy_texts(findings) if op == "Log" and not read.shift else None
    if xlogy is not None:
        # A KL loss of annotators' vote shares, ``y_true * (log(y_true) - log_q)``: the zeros are valid shares,
        # not missing values to mask, and 0 * log(0) counts as 0 there.
        summary += xlogy[0]
        what = xlogy[1]
    if read.shift:
        what = (
            f"{leaf} as fit gets it: the {op} op reads {leaf} + {read.shift:g}, which needs {leaf} non-negative; "
            f"give the loss {leaf} before it was scaled or centered (scale after the log, or undo it in the loss)"
        )
        made = change_line.fit_array_site(units, leaf) if leaf in ("x", "y") else None
        if made is not None:
            return Cause("data", summary, evidence, _change(made, what, "array"), provenance=where)
    relative = op in DIVISION_OPS and _RELATIVE_ERROR.search(str(findings.extra.get("origin_code") or ""))
    if relative and xlogy is None and not read.shift:
        # RMSPE's ``(y_true - y_pred) / y_true`` with 2% of the targets 0 (s43c p7): "an epsilon" first, followed,
        # made those terms 1e7 times the others and the model predicted 0 everywhere (RMSPE 1.0); a percentage
        # error is undefined at a target of 0, and its metric leaves those records out.
        what = (
            f"the {op} op divides by {leaf}, a percentage error, undefined where {leaf} is 0: leave those records "
            f"out of the loss (tf.boolean_mask, or a weight of 0 where {leaf} == 0, and the mean over the others), "
            f"as the metric does; an epsilon makes their terms huge, and the model learns to predict 0"
        )
    elif op in DIVISION_OPS:
        # A PINN's residual ``u_rr + 2 / r * u_r`` at r = 0: an epsilon keeps it finite and the fit learns nothing
        # (u(0) = 0.015 for 1.0); multiplied through by r, the same equation holds everywhere.
        what += f"; or, in an equation (a physics residual), multiply it through by {leaf} so nothing divides by it"
    return Cause("op", summary, evidence, _origin_change(findings, what, "op"), provenance=where)


def _added_constants(code: str) -> list[float]:
    """The numbers the origin's line adds to something (``log(y_true + 1.0)``: [1.0]), in order, at most four."""
    try:
        tree = ast.parse(textwrap.dedent(code).strip())
    except (SyntaxError, ValueError):
        return []
    found: list[float] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            for side in (node.left, node.right):
                if (
                    isinstance(side, ast.Constant)
                    and isinstance(side.value, (int, float))
                    and not isinstance(side.value, bool)
                    and side.value > 0
                    and float(side.value) not in found
                ):
                    found.append(float(side.value))
    return found[:4]


def _named_by_step_parameters(
    element: BadElement, units: list[SourceUnit], step_function: dict[str, Any] | None
) -> BadElement:
    """A guard_step bundle's ``args[1]`` as the step names it (``targets``), when its definition is found; a keyword
    argument ``kwargs['targets']`` by its keyword."""
    if not step_function:
        return element
    leaf = None
    keyword = re.match(r"kwargs\['(\w+)'\](.*)", element.leaf)
    positional = re.match(r"args\[(\d+)\](.*)", element.leaf)
    if keyword is not None:
        leaf = keyword.group(1) + keyword.group(2)
    elif positional is not None:
        names = parameters_of(units, step_function.get("qualname"), step_function.get("file"))
        index = int(positional.group(1))
        if names is not None and index < len(names):
            leaf = names[index] + positional.group(2)
    return element if leaf is None else dataclasses.replace(element, leaf=leaf)


def _reading_change(findings: Findings, site: change_line.Site | None) -> Change | None:
    if isinstance(site, python_feed.FeedSite):
        what = f"filter or repair non-finite records before {site.describe()} hands them to fit"
        return _change(site, what, "reading")
    if site is not None:
        what = f"filter or repair non-finite records where the data is read ({site.name})"
        return _change(site, what, "reading-tfdata" if change_line.is_tfdata(site) else "reading")
    return _origin_change(findings, "filter or repair non-finite records where the data is read", "reading")
