"""The picture model: what the op graph and the health timeline draw, as plain records with their JSON.

One JSON document (``nanlens.pictures/1``) feeds both the VS Code webviews and the `nanlens report` page, so
the web side parses nothing about dumps: it lays out ``nodes``/``edges`` and plots ``timeline`` and
``loss_history`` as given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pyadapter.findings import TensorHealth

SCHEMA = "nanlens.pictures/1"

# How a node's tensor is colored: by the kind of non-finite value it holds.
HealthClass = Literal["finite", "nan", "neg_inf", "pos_inf", "mixed", "unknown"]
NodeRole = Literal["origin", "input", "consumer", "forward"]
EdgeKind = Literal["data", "gradient"]
TimelineUnit = Literal["execution", "trace"]


def health_class(health: TensorHealth | None) -> HealthClass:
    """finite / nan / neg_inf / pos_inf, "mixed" when several kinds occur, "unknown" without a health."""
    if health is None:
        return "unknown"
    kinds = [k for k, n in (("nan", health.nan), ("neg_inf", health.neg_inf), ("pos_inf", health.pos_inf)) if n]
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
            "notes": list(self.notes),
        }
