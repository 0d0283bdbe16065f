"""The picture model: what the op graph and the health timeline draw, as plain records with their JSON.

One JSON document (``nanlens.pictures/1``) feeds both the VS Code webviews and the `nanlens report` page, so
the web side parses nothing about dumps: it lays out ``nodes``/``edges`` and plots ``timeline`` and
``loss_history`` as given, and marks ``cause.trend`` (a divergence's growth window) on the loss chart.
Fields added later (``cause``, a history row's ``grad_norm`` ...) are optional: a reader treats them as absent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pyadapter.findings import TensorHealth

SCHEMA = "nanlens.pictures/1"
# The per-step numbers of a loss-history row the chart may draw (pyadapter/capture/history.py ROW_NUMBERS); each
# a float or null, with "<name>_nonfinite" ("nan" | "inf" | "-inf") when the value was not finite.
HISTORY_NUMBERS = ("loss", "logged_loss", "grad_norm", "weight_norm", "update_ratio", "max_abs_output")
NONFINITE_MARKERS = ("nan", "inf", "-inf")
# What the chart needs of a trend (pyadapter/cause/trend.py Trend.to_json).
TREND_KEYS = (
    "series",
    "start_step",
    "end_step",
    "steps",
    "start_value",
    "end_value",
    "factor",
    "rate_per_step",
)

# How a node's tensor is colored: by the kind of non-finite value it holds.
HealthClass = Literal["finite", "nan", "neg_inf", "pos_inf", "mixed", "unknown"]
NodeRole = Literal["origin", "input", "consumer", "forward"]
EdgeKind = Literal["data", "gradient"]
TimelineUnit = Literal["execution", "trace"]


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _step(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def history_rows(history: Any) -> list[dict[str, Any]]:
    """The rows a loss chart draws from a manifest's ``loss_history`` (or the guard's rows): ``step``, ``loss``
    and ``logged_loss`` always, the other numbers and the non-finite markers when a row has them; junk dropped."""
    rows: list[dict[str, Any]] = []
    for row in history if isinstance(history, list) else []:
        step = _step(row.get("step")) if isinstance(row, dict) else None
        if step is None:
            continue
        out: dict[str, Any] = {"step": step}
        for name in HISTORY_NUMBERS:
            if name in ("loss", "logged_loss") or name in row:
                out[name] = _number(row.get(name))
            marker = row.get(name + "_nonfinite")
            if marker in NONFINITE_MARKERS:
                out[name + "_nonfinite"] = marker
        rows.append(out)
    return rows


def picture_cause(cause: Any) -> dict[str, Any] | None:
    """What the timeline shows of a findings' ``cause``: kind, summary and, for a divergence, the growth window
    (``evidence.trend``); None when there is no cause."""
    if not isinstance(cause, dict) or not isinstance(cause.get("kind"), str):
        return None
    evidence = cause.get("evidence")
    trend = evidence.get("trend") if isinstance(evidence, dict) and cause["kind"] == "divergence" else None
    window = None
    if (
        isinstance(trend, dict)
        and _step(trend.get("start_step")) is not None
        and _step(trend.get("end_step")) is not None
    ):
        window = {key: trend.get(key) for key in TREND_KEYS}
    return {"kind": cause["kind"], "summary": str(cause.get("summary") or ""), "trend": window}


def with_cause(pictures: Any, cause: Any) -> None:
    """Mark a findings' cause (its kind, summary and divergence window) on pictures made before it was known:
    a bundle's pictures are made while the replay's dump exists, its cause after the locate."""
    if isinstance(pictures, dict):
        pictures["cause"] = picture_cause(cause)


def health_class(health: TensorHealth | None) -> HealthClass:
    """finite / nan / neg_inf / pos_inf, "mixed" when several kinds occur, "unknown" without a health."""
    if health is None:
        return "unknown"
    kinds = [
        k for k, n in (("nan", health.nan), ("neg_inf", health.neg_inf), ("pos_inf", health.pos_inf)) if n
    ]
    if not kinds:
        return "finite"
    return kinds[0] if len(kinds) == 1 else "mixed"  # type: ignore[return-value]


def is_partial(health: TensorHealth | None) -> bool:
    """Whether only part of the tensor's values are non-finite (3 of 640), as opposed to all of them."""
    if health is None or health.is_finite or health.size is None:
        return False
    return health.non_finite < health.size


def health_summary(health: TensorHealth | None) -> str:
    """'3 -inf of 640 (partly)', 'finite, 3 zeros of 640', 'not traced'."""
    if health is None:
        return "not traced"
    if health.is_finite:
        if health.size is None:
            return "finite"
        zeros = f", {health.zero} zeros" if health.zero else ""
        return f"finite{zeros} of {health.size}"
    text = health.describe()
    return text + (" (partly)" if is_partial(health) else "")


@dataclass
class PictureNode:
    """One op of the neighbourhood of the origin, with the health of the output the picture follows."""

    id: str
    name: str
    type: str
    role: NodeRole
    distance: int  # hops from the origin: negative = inputs (backward), positive = consumers (forward)
    health: TensorHealth | None = None
    slot: int = 0  # which output's health is shown
    traced: bool = False
    graph: str | None = None
    file: str | None = None
    line: int | None = None
    function: str | None = None
    user_code: bool = False  # file/line is the user's code (else a library's: no user frame in its stack)
    gradient: bool = False  # an op tape.gradient made

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "type": self.type,
            "role": self.role,
            "distance": self.distance,
            "health_class": health_class(self.health),
            "partial": is_partial(self.health),
            "summary": health_summary(self.health),
            "slot": self.slot,
            "traced": self.traced,
            "gradient": self.gradient,
            "user_code": self.user_code,
        }
        if self.health is not None:
            out["health"] = self.health.to_json()
        for key in ("graph", "file", "line", "function"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


@dataclass
class PictureEdge:
    source: str
    target: str
    tensor: str  # "op:slot" for data edges; "" for a gradient link
    kind: EdgeKind = "data"
    health: TensorHealth | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "target": self.target,
            "tensor": self.tensor,
            "kind": self.kind,
            "health_class": health_class(self.health),
        }


@dataclass
class TimelinePoint:
    """One execution (or one run of consecutive traces/executions when there are many)."""

    x: int  # execution index, or trace index in the trace unit
    end: int  # last index this point covers (== x unless binned)
    tensors: int  # tensors with a health record in it
    non_finite: int  # of those, how many held NaN/Inf
    cumulative: int  # non-finite tensors from the start up to and including this point
    label: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "x": self.x,
            "end": self.end,
            "tensors": self.tensors,
            "non_finite": self.non_finite,
            "cumulative": self.cumulative,
            "label": self.label,
        }


@dataclass
class Timeline:
    unit: TimelineUnit
    points: list[TimelinePoint] = field(default_factory=list)
    origin_x: int | None = None
    first_nonfinite_x: int | None = None
    executions: int = 0
    traces: int = 0
    binned: bool = False
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "points": [p.to_json() for p in self.points],
            "origin_x": self.origin_x,
            "first_nonfinite_x": self.first_nonfinite_x,
            "executions": self.executions,
            "traces": self.traces,
            "binned": self.binned,
            "note": self.note,
        }


@dataclass
class PictureModel:
    source_kind: str
    source_path: str
    label: str
    nodes: list[PictureNode] = field(default_factory=list)
    edges: list[PictureEdge] = field(default_factory=list)
    timeline: Timeline | None = None
    loss_history: list[dict[str, Any]] | None = None
    failing_step: int | None = None
    cause: dict[str, Any] | None = None  # picture_cause() of the findings' cause
    origin: dict[str, Any] | None = None  # the origin finding's JSON, for captions
    graph_name: str | None = None
    hops_back: int = 0
    hops_forward: int = 0
    truncated: bool = False
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "source": {"kind": self.source_kind, "path": self.source_path, "label": self.label},
            "origin": self.origin,
            "graph_name": self.graph_name,
            "hops_back": self.hops_back,
            "hops_forward": self.hops_forward,
            "truncated": self.truncated,
            "nodes": [n.to_json() for n in self.nodes],
            "edges": [e.to_json() for e in self.edges],
            "timeline": self.timeline.to_json() if self.timeline is not None else None,
            "loss_history": self.loss_history,
            "failing_step": self.failing_step,
            "cause": self.cause,
            "notes": list(self.notes),
        }
