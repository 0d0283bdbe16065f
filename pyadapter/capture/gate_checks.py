"""The gate's in-graph checks: is a list of tensors finite, and (history on) how large is it, in as few passes
over the tensors as the check allows (`pyadapter.capture.gate` uses them on every guarded step)."""

from __future__ import annotations

import math
from typing import Any

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2

# ---- a branch healthy steps never take -----------------------------------------------------------------------

_IF_OPS = ("If", "StatelessIf")


def rare_cond(pred: Any, true_fn: Any, false_fn: Any) -> Any:
    """``tf.cond(pred, true_fn, false_fn)`` whose branches stay functions: only the branch taken runs.

    Inside a tf.function TensorFlow lowers a cond to Switch/Merge nodes, and the executor then visits every node of
    the branch not taken, with dead inputs, on every step: about 3 microseconds a node on CPU. The gate's rare
    branches (exact per-tensor flags and norms) have ~10 nodes per variable, so a 70-variable Transformer paid
    ~0.2 ms per cond per step for code that runs only on a failing step. Kept as a function (the If op's
    ``_lower_using_switch_merge`` attribute off), the branch costs one function call when taken and nothing else.
    XLA compiles the If op either way."""
    if tf.executing_eagerly():
        return tf.cond(pred, true_fn, false_fn)
    graph = tf.compat.v1.get_default_graph()
    before = len(graph.get_operations())
    out = tf.cond(pred, true_fn, false_fn)
    for op in graph.get_operations()[before:]:
        if op.type in _IF_OPS:
            op._set_attr("_lower_using_switch_merge", attr_value_pb2.AttrValue(b=False))
    return out


# ---- small tensor helpers -----------------------------------------------------------------------------------


def _variable(weight: Any) -> Any:
    """A keras.Variable's tf.Variable (what the optimizer writes and tf.gather reads by rows); anything else as is."""
    inner = getattr(weight, "value", None)
    return inner if inner is not None and not callable(inner) else weight


def dense(value: Any) -> Any:
    if isinstance(value, tf.IndexedSlices):
        return value.values
    if not isinstance(value, tf.Tensor):
        value = _variable(value)
    return tf.convert_to_tensor(value)


def is_float(value: Any) -> bool:
    dtype = getattr(value, "dtype", None)
    try:
        return tf.as_dtype(dtype).is_floating
    except TypeError:
        return False


def _sum32(value: Any) -> Any:
    value = dense(value)
    if value.dtype not in (tf.float32, tf.float64):
        value = tf.cast(value, tf.float32)  # a float16 sum would overflow at 65504
    if value.shape.rank != 0:
        value = tf.reduce_sum(value)
    return value if value.dtype == tf.float32 else tf.cast(value, tf.float32)


def finite_flags(values: list[Any]) -> Any:
    """bool [len(values)]: whether each tensor is free of NaN/Inf (non-float tensors count as finite).

    One reduction per tensor: the float32 sum of a tensor is NaN/Inf exactly when the tensor holds a NaN or an
    Inf, or when its finite values are so large that their sum overflows (about 3e38), which counts as a failure
    too. That is half the work of is_finite + reduce_all, and this runs on every step."""
    if not values:
        return tf.ones([0], tf.bool)
    sums = [_sum32(v) if is_float(v) else tf.constant(0.0) for v in values]
    return tf.math.is_finite(tf.stack(sums))


def forward_state_flags(saved: list[tuple[Any, Any]]) -> Any:
    """bool [len(saved)]: for each (variable, its value before the step's forward pass wrote it), False when the step
    made it non-finite (a moving variance of a batch whose variance overflowed). A variable that held NaN/Inf
    before (a running maximum that starts at -inf) is not the step's doing. Read after the writes (automatic control
    dependencies keep program order)."""
    if not saved:
        return tf.ones([0], tf.bool)
    now = finite_flags([variable.read_value() for variable, _ in saved])
    before = finite_flags([value for _, value in saved])
    return tf.logical_or(now, tf.logical_not(before))


def squares_fit_flags(values: list[Any]) -> Any:
    """bool [len(values)]: `finite_flags`, failing also tensors whose squares overflow float32 (|x| > ~1.8e19),
    as ``finite_flags_and_norm(squares_must_fit=True)`` judges gradients; for a gate without the history. One
    reduction per tensor, as `finite_flags`: a fused L2Loss costs what a sum does."""
    if not values:
        return tf.ones([0], tf.bool)
    return tf.math.is_finite(tf.stack(_each_half_squares(values)))


def _each_half_squares(values: list[Any]) -> list[Any]:
    """`half_squares32` of each tensor (0.0 for a non-float one)."""
    return [half_squares32(v) if is_float(v) else tf.constant(0.0) for v in values]


def ones(n: int) -> Any:
    return tf.ones([n], tf.bool)


# ---- history metrics (GateConfig.history) -------------------------------------------------------------------

NOT_MEASURED = (
    -1.0
)  # history.NOT_MEASURED: finite on purpose (a NaN constant would trip enable_check_numerics)


def half_squares32(value: Any) -> Any:
    """float32 half sum of squares of one tensor: one fused L2Loss kernel (no squared copy), computed in float32
    for float16/bfloat16 (which would overflow at 65504); NaN when the tensor holds a NaN, else Inf when it holds
    an Inf or its squares overflow (|x| > ~1.8e19)."""
    value = dense(value)
    if value.dtype not in (tf.float32, tf.float64):
        value = tf.cast(value, tf.float32)
    half = tf.nn.l2_loss(value)
    return half if half.dtype == tf.float32 else tf.cast(half, tf.float32)


# An update of more values than this is measured on a sample of this many: UPDATE_SAMPLE // UPDATE_BLOCK blocks of
# UPDATE_BLOCK consecutive values (one 64-byte cache line of float32) spread over the tensor (see below).
UPDATE_SAMPLE = 16384
UPDATE_BLOCK = 16
_GOLDEN = 0.6180339887498949


def _block_spacing(count: int, row: int, blocks: int) -> int:
    """The distance between the starts of `blocks` sample blocks in a flat tensor of `count` values whose rows
    (last dimension, one value per unit) are `row` long: at most count // blocks, so that the blocks span the tensor.

    Block i starts at column i * spacing mod row. The spacing is chosen so that spacing / row is a whole number plus
    0.618... (the golden ratio's fraction), or 1 / (k + 0.618...) where a row is longer than the spacing can be:
    the starts then fall evenly over the columns for any number of blocks (a golden-ratio sequence). A spacing that
    is a multiple of the row (a 1024-wide kernel, 1024 values apart) would read the same 16 columns of every row;
    one that divides it (128 in a 512-wide row), 4 groups of 16."""
    most = count // blocks
    if row <= 1 or row == count:
        return most  # one row (a bias): evenly spread over it
    if most >= row:
        fraction = round(row * _GOLDEN)
        spacing = (most - fraction) // row * row + fraction
    else:
        per_row = math.ceil(row / most - _GOLDEN)
        spacing = min(most, round(row / (per_row + _GOLDEN)))
    while spacing > UPDATE_BLOCK and math.gcd(spacing, row) != 1:
        spacing -= 1
    return spacing if spacing >= UPDATE_BLOCK else most


def _blocks(value: Any, spacing: int, blocks: int) -> Any:
    # [blocks * spacing] -> [blocks, spacing] -> the first UPDATE_BLOCK of each: a slice of contiguous runs, which
    # reads one cache line per block (a per-value stride reads a cache line per value, 16x the memory traffic).
    flat = tf.reshape(value, [-1])[: blocks * spacing]
    return tf.reshape(flat, [blocks, spacing])[:, :UPDATE_BLOCK]


def sampled_half_squares32(value: Any, old: Any = None) -> Any:
    """`half_squares32` of an update (``value``, or ``value - old`` when ``old`` is given), estimated for large
    tensors from `UPDATE_SAMPLE` values in blocks of `UPDATE_BLOCK` spread over the tensor and its columns
    (`_block_spacing`), scaled by n / samples.

    The history's update norm is the one number the gate computes from a tensor it does not otherwise read: a full
    pass over every update was about 1.5% of a 5.6M-parameter MLP's CPU step. A strided sample of single values
    then cost a cache line per value: 24 microseconds per large variable whatever its size, about 1% of a 1M
    ConvNet's step and 3% of a 0.4M MLP's. Blocks of a cache line read 16x less. The norm's use is a ratio to the
    weights' norm, read to tell an update as large as the weights from a normal one; the sample gives it to a few
    percent where units differ (tests/test_guard_history.py). A NaN outside the sample is not seen here; the weights
    check after the update sees it."""
    value = dense(value)
    count = value.shape.num_elements()
    if count is None or count <= UPDATE_SAMPLE:
        if old is None:
            return half_squares32(value)
        old = dense(old)
        return half_squares32(tf.cast(value, old.dtype) - old)
    row = int(value.shape[-1]) if value.shape.rank else 1
    blocks = UPDATE_SAMPLE // UPDATE_BLOCK
    spacing = _block_spacing(count, row, blocks)
    sample = _blocks(value, spacing, blocks)
    if old is not None:
        old = dense(old)
        sample = tf.cast(sample, old.dtype) - _blocks(old, spacing, blocks)
    return half_squares32(sample) * (count / (blocks * UPDATE_BLOCK))


def exact_norms(values: list[Any], flags: Any) -> Any:
    """float32 [n]: each tensor's L2 norm, also when its squares overflow float32 (scaled by its max |x|). For the
    rare branch only: two more passes over each tensor. A non-finite tensor's is NaN or Inf, as its values are."""
    norms = []
    for index, value in enumerate(values):
        if not is_float(value):
            norms.append(tf.constant(0.0))
            continue
        plain = tf.sqrt(2.0 * half_squares32(value))
        value = dense(value)
        value = value if value.dtype == tf.float32 else tf.cast(value, tf.float32)
        largest = tf.reduce_max(tf.abs(value))
        # where(): both sides are computed, so the unused side must not divide 0 by 0 (a NaN in the graph).
        scale = tf.where(tf.logical_and(flags[index], largest > 0.0), largest, tf.constant(1.0))
        scaled = scale * tf.sqrt(2.0 * tf.nn.l2_loss(value / scale))
        norms.append(tf.where(tf.math.is_finite(plain) | tf.logical_not(flags[index]), plain, scaled))
    return tf.stack(norms)


def combine_norms(norms: Any) -> Any:
    """float32 L2 norm of a vector of norms without overflowing (NaN/Inf as they are; -1.0 if any is -1.0)."""
    largest = tf.reduce_max(norms)
    scale = tf.where(tf.math.is_finite(largest) & (largest > 0.0), largest, tf.constant(1.0))
    scaled = scale * tf.sqrt(tf.reduce_sum(tf.square(norms / scale)))
    total = tf.where(tf.reduce_all(tf.math.is_finite(norms)), scaled, tf.reduce_sum(norms))
    return tf.where(tf.reduce_min(norms) < 0.0, tf.constant(NOT_MEASURED), total)


# A weight that sparse updates write (``scatter_*``) is read a row at a time here, never whole: such an update puts
# the tf.Variable in copy-on-read mode, where every dense read copies the whole table (64 MB for 1M x 16).


def gather_rows(weight: Any, rows: Any) -> Any:
    """The rows `rows` of a weight (read now: after the update that wrote them)."""
    return tf.gather(_variable(weight), rows)


def sampled_table_half_squares32(weight: Any) -> Any:
    """`half_squares32` of a table that sparse updates write, estimated from about `UPDATE_SAMPLE` values in whole
    rows spread evenly over it (gathered, see above), scaled by n / samples."""
    shape = weight.shape
    count = shape.num_elements()
    if count is None or shape.rank == 0 or not shape[0]:
        return half_squares32(weight)  # not a table of known rows (no sparse update writes one)
    rows = int(shape[0])
    row_size = max(1, count // rows)
    sampled = max(1, min(rows, UPDATE_SAMPLE // row_size))
    indices = tf.range(sampled, dtype=tf.int64) * (rows // sampled)
    return half_squares32(gather_rows(weight, indices)) * (count / (sampled * row_size))


def finite_flags_and_norm(
    values: list[Any], tables: list[Any] | None = None, squares_must_fit: bool = False
) -> tuple[Any, Any]:
    """(`finite_flags(values)`, float32 L2 norm over all of them), with one reduction per tensor on healthy steps.

    ``tables[i]``, when given and not None, is the weight of which ``values[i]`` holds the rows a sparse update just
    wrote: the flag is the rows', the norm the whole table's, estimated from a sample of its rows
    (`sampled_table_half_squares32`: a few thousand values, where an exact norm would read every row).

    The flags are `finite_flags`'s on every input. Healthy steps reduce each tensor to its sum of squares instead
    of its sum: that is non-finite when the tensor holds NaN/Inf, as the sum is, but also when its values are
    finite and merely large (|x| > ~1.8e19), where `finite_flags` says "finite". Conversely, a finite total of
    squares bounds every |x| by ~1.8e19, so every plain sum (of < 1e19 elements) is finite too and every flag is
    True. So: total finite -> all True; otherwise (a failing step, or huge finite values) the flags come from
    `finite_flags` itself and the norms from `_exact_norms`, in a branch that healthy steps never run.

    ``squares_must_fit`` (gradients): a tensor whose squares overflow float32 fails too, though finite. Adam,
    RMSprop, Adagrad and clipnorm square each gradient: one of 1e20 makes their state +Inf, the weights stay finite
    (m / sqrt(Inf) is 0), and every later step is NaN (Inf - Inf in the moment's update) with nothing left to show
    why. Its norm stays the exact, finite one: a finite norm beside a failing flag tells "too large" from NaN/Inf
    (`too_large_to_square`)."""
    if not values:
        return tf.ones([0], tf.bool), tf.constant(0.0, tf.float32)
    tables = tables or [None] * len(values)
    halves = _each_half_squares(values)
    total = tf.reduce_sum(tf.stack(halves))
    norm_total = total
    if any(t is not None for t in tables):
        norm_total = tf.reduce_sum(
            tf.stack(
                [
                    h if t is None else sampled_table_half_squares32(t)
                    for h, t in zip(halves, tables, strict=True)
                ]
            )
        )
    whole = [v if t is None else t for v, t in zip(values, tables, strict=True)]

    def exact() -> tuple[Any, Any]:
        flags = finite_flags(values)
        norm = combine_norms(exact_norms(whole, flags))
        if squares_must_fit:
            flags = tf.logical_and(flags, tf.math.is_finite(tf.stack(halves)))
        return flags, norm

    return rare_cond(
        tf.math.is_finite(total), lambda: (tf.ones([len(values)], tf.bool), tf.sqrt(2.0 * norm_total)), exact
    )


# |x| past this squares to Inf in float32: sqrt(float32 max).
SQUARE_LIMIT = 1.8446743e19


def too_large_to_square(gradient_norm: float) -> bool:
    """Whether a failing step's gradient norm (`finite_flags_and_norm` with ``squares_must_fit``) says its failing
    gradients were finite but too large to square: the norm is finite only when every gradient is."""
    return math.isfinite(gradient_norm) and gradient_norm >= SQUARE_LIMIT


def max_abs(value: Any) -> Any:
    """float32 max |x| over the float leaves of `value` (y_pred may be a dict/list); NaN when any holds NaN (also
    when one holds both +Inf and -Inf); -1.0 when there is none.

    The NaN comes from each leaf's plain sum, picked by a scalar select: XLA's reduce_max drops NaN, and a NaN
    constant would trip enable_check_numerics. An elementwise select over the leaf (where(is_nan(x), x, 0)) cost
    as much as the rest of the history on a 1M-parameter MLP step, and 2.7x this on an [8, 32000] logits tensor."""
    leaves = [dense(v) for v in tf.nest.flatten(value) if v is not None and is_float(v)]
    maxima = []
    for leaf in leaves:
        leaf = leaf if leaf.dtype == tf.float32 else tf.cast(leaf, tf.float32)
        total = tf.reduce_sum(leaf)  # NaN iff the leaf holds NaN (or both infinities)
        maxima.append(tf.where(tf.math.is_nan(total), total, tf.reduce_max(tf.abs(leaf))))
    if not maxima:
        return tf.constant(NOT_MEASURED, tf.float32)
    if len(maxima) == 1:
        return maxima[0]
    stacked = tf.stack(maxima)  # each >= 0 or NaN: their sum is NaN iff one is
    total = tf.reduce_sum(stacked)
    return tf.where(tf.math.is_nan(total), total, tf.reduce_max(stacked))
