"""Sentences about health for hovers: what an op produced and which input explains it."""

from __future__ import annotations

from pyadapter.findings import InputHealth, TensorHealth

# Op types whose non-finite output typically comes from zeros / negatives / large values in an input.
_ZERO_SENSITIVE = frozenset(
    {
        "Log",
        "Reciprocal",
        "Inv",
        "RealDiv",
        "Div",
        "FloorDiv",
        "TruncateDiv",
        "Xlogy",
        "Xdivy",
        "Rsqrt",
        "Pow",
        "Lgamma",
        "Digamma",
        "Polygamma",
        "Atanh",
        "SqrtGrad",
        "RsqrtGrad",
        "ReciprocalGrad",
    }
)
# Ops whose domain ends at 0 (acos and asin take negatives: theirs ends at +-1, which a health count cannot show),
# or below it: log1p's at -1, where its zeros are log1p(0) = 0 and no reason.
_NEGATIVE_SENSITIVE = frozenset({"Sqrt", "Rsqrt", "Log", "Log1p", "Pow", "Lgamma", "Polygamma", "Acosh"})
_OVERFLOW_PRONE = frozenset(
    {
        "Exp",
        "Expm1",
        "Pow",
        "Square",
        "Mul",
        "MatMul",
        "BatchMatMulV2",
        "Cosh",
        "Sinh",
        "Softplus",
        "AddV2",
        "Add",
        "Sum",
        "Prod",
        "Cumprod",
        "Conv2D",
        "Einsum",
    }
)


def bad_counts(health: TensorHealth | None) -> str:
    if health is None:
        return "NaN/Inf"
    parts = [
        f"{n} {label}"
        for n, label in ((health.nan, "NaN"), (health.neg_inf, "-inf"), (health.pos_inf, "+inf"))
        if n
    ]
    text = ", ".join(parts) if parts else "NaN/Inf"
    if health.size is not None and health.size > 1:
        text += f" (of {health.size} values)"
    return text


def _input_reasons(op_type: str, inputs: list[InputHealth]) -> list[str]:
    base_type = op_type
    reasons = []
    for inp in inputs:
        h = inp.health
        if h is None:
            continue
        if not h.is_finite:
            reasons.append(f"input {inp.name} which already holds {bad_counts(h)}")
        elif base_type in _ZERO_SENSITIVE and h.zero:
            reasons.append(f"input {inp.name} which holds {h.zero} zero{'s' if h.zero != 1 else ''}")
        elif base_type in _NEGATIVE_SENSITIVE and h.neg:
            reasons.append(f"input {inp.name} which holds {h.neg} negative value{'s' if h.neg != 1 else ''}")
    return reasons


def origin_message(
    op_type: str,
    health: TensorHealth | None,
    inputs: list[InputHealth],
    *,
    subject: str | None = None,
    where: str = "",
) -> str:
    """One sentence for the hover, e.g. 'Log produced 561 -inf from input Softmax:0 which holds 561 zeros'."""
    produced = f"{subject or op_type} produced {bad_counts(health)}{where}"
    reasons = _input_reasons(op_type, inputs)
    if reasons:
        return f"{produced} from {' and '.join(reasons)}"
    known = [i for i in inputs if i.health is not None]
    if known and len(known) == len(inputs):
        names = ", ".join(i.name for i in inputs)
        hint = " (an overflow: the values grew too large)" if op_type in _OVERFLOW_PRONE else ""
        return f"{produced} from finite input{'s' if len(inputs) > 1 else ''} {names}{hint}"
    return produced
