"""The op families the cause classifier reasons with: ops outside their domain (log of 0), ops that sum products,
divisions, decoders, variable reads; the float dtypes' ranges; and whether an origin is an overflow of finite
values (`is_overflow`)."""

from __future__ import annotations

from pyadapter.findings import Finding

# Ops that make NaN/Inf from finite inputs outside their domain: log(0), sqrt(-1), ... (not an overflow).
DOMAIN_OPS = frozenset(
    {
        "Log",
        "Log1p",
        "Sqrt",
        "Rsqrt",
        "SqrtGrad",
        "RsqrtGrad",
        "Acos",
        "Asin",
        "Atanh",
        "Acosh",
        "Lgamma",
        "Digamma",
        "Xlogy",
        "Xlog1py",
        "Pow",
        "Igamma",
        "Igammac",
        "Betainc",
    }
)
# Ops that sum products of their inputs: once the products pass the dtype's max, +inf and -inf meet in the sum and
# the output is NaN rather than Inf (an overflow all the same; a MatMul of finite inputs has no other way to NaN).
ACCUMULATING_OPS = frozenset(
    {
        "MatMul",
        "BatchMatMul",
        "BatchMatMulV2",
        "BatchMatMulV3",
        "Einsum",
        "Conv1D",
        "Conv2D",
        "Conv3D",
        "DepthwiseConv2dNative",
        "Conv2DBackpropInput",
        "Conv2DBackpropFilter",
        "Conv3DBackpropInputV2",
        "Conv3DBackpropFilterV2",
    }
)
# Ops that shift their inputs by their max (a softmax, its cross-entropy): from finite inputs they make NaN only when
# the values span past float32's range (inf - inf), logits of 1e38 a diverging run made.
SHIFTING_OPS = frozenset(
    {"Softmax", "LogSoftmax", "SoftmaxCrossEntropyWithLogits", "SparseSoftmaxCrossEntropyWithLogits"}
)
DIVISION_OPS = frozenset({"RealDiv", "Div", "TrueDiv", "FloorDiv", "Reciprocal", "Inv", "DivNoNan", "Xdivy"})
# The largest finite value of each half-precision dtype (float32's is 3.4e38).
DTYPE_MAX = {"float16": 65504.0, "half": 65504.0, "bfloat16": 3.3895313892515355e38}
FLOAT32_MAX = 3.4028234663852886e38
# The smallest positive (subnormal) value of float16: smaller magnitudes, an epsilon of 1e-8 included, become 0.
FLOAT16_TINY = 5.960464477539063e-08
# Ops that read a variable: non-finite output with no inputs means the weights were non-finite before the step.
# Ops that turn stored records into tensors: a NaN/Inf they output was in the data they read.
DECODE_OPS = frozenset(
    {
        "ParseExample",
        "ParseExampleV2",
        "ParseSingleExample",
        "ParseSequenceExample",
        "ParseSequenceExampleV2",
        "ParseSingleSequenceExample",
        "DecodeCSV",
        "DecodeRaw",
        "DecodePaddedRaw",
        "ParseTensor",
        "StringToNumber",
        "DecodeNpy",
        "DecodeJSONExample",
    }
)
VARIABLE_READS = frozenset({"ReadVariableOp", "VarHandleOp", "ResourceGather", "VariableV2", "Identity"})


def dtype_of(finding: Finding) -> str | None:
    if finding.health is not None and finding.health.dtype:
        return finding.health.dtype
    return next((i.health.dtype for i in finding.inputs if i.health is not None and i.health.dtype), None)


def _positive_exponent(origin: Finding) -> bool:
    exponent = origin.inputs[1].health if len(origin.inputs) == 2 else None
    return exponent is not None and bool(exponent.size) and exponent.pos == exponent.size


def is_overflow(origin: Finding) -> bool:
    """Inf made from finite inputs by an op that overflows (MatMul, Square, Exp, ...), not one outside its
    domain (log of 0) and not a division by an input holding zeros. NaN counts for ops that sum products
    (MatMul, Conv2D): +inf and -inf products meet in their sums; and for ops that shift by the max (a softmax
    cross-entropy of logits past 1e38: inf - inf)."""
    health = origin.health
    if health is None or health.non_finite == 0:
        return False
    if any(i.health is not None and not i.health.is_finite for i in origin.inputs):
        return False
    if health.pos_inf + health.neg_inf == 0 and not (
        (origin.op.type in ACCUMULATING_OPS or origin.op.type in SHIFTING_OPS)
        and origin.inputs
        and all(i.health is not None and (i.health.size or 0) > 0 for i in origin.inputs)
    ):
        return False
    op = origin.op.type
    if op == "Pow" and health.nan == 0 and _positive_exponent(origin):
        # x ** 3 is Inf only when x is too large: a power with a positive exponent leaves no domain to be outside
        # of (a state integrated past float32 in a hand-written ODE solver's loop, whose base tfdbg records not).
        return True
    if op in DOMAIN_OPS or (origin.op.forward_op or "").rsplit("/", 1)[-1].split("_")[0] in DOMAIN_OPS:
        return False
    if op in DIVISION_OPS and any(i.health is not None and (i.health.zero or 0) > 0 for i in origin.inputs):
        return False
    return True
