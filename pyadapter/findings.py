"""Finding records and their JSON: the one contract between the Python side and the editor.

Mirrors ``shared/findings.schema.json`` (``nanlens.findings/1``). Fields may be added here; none may be
removed or renamed without bumping ``SCHEMA``.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from pyadapter import safejson

SCHEMA = "nanlens.findings/1"
MAX_FINDINGS_BYTES = 64 << 20

Role = Literal["origin", "propagated", "backward-origin"]


class FindingsError(ValueError):
    """A findings document that is not valid ``nanlens.findings/1``."""


_MISSING = object()


def _field(
    data: Any, key: str, kind: type | tuple[type, ...], default: Any = _MISSING, what: str = "finding"
) -> Any:
    """``data[key]`` checked to be of `kind` (bool is not an int; None only as the default); FindingsError."""
    if not isinstance(data, dict):
        raise FindingsError(f"{what} is not a JSON object")
    value = data.get(key, _MISSING)
    if value is _MISSING or value is None and default is not _MISSING:
        if default is _MISSING:
            raise FindingsError(f"{what} has no {key!r}")
        return default
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or isinstance(value, bool) and bool not in kinds:
        names = "/".join(k.__name__ for k in kinds)
        raise FindingsError(f"{what} field {key!r} must be {names}, not {type(value).__name__}")
    return value


def _list(data: Any, key: str, what: str) -> list[Any]:
    return _field(data, key, list, [], what)


@dataclass
class TensorHealth:
    """What a health-mode debug tensor says about one tensor: counts by kind of value."""

    dtype: str | None = None
    rank: int | None = None
    shape: list[int] | None = None
    size: int | None = None
    nan: int = 0
    neg_inf: int = 0
    pos_inf: int = 0
    neg: int | None = None
    zero: int | None = None
    pos: int | None = None

    @property
    def non_finite(self) -> int:
        return self.nan + self.neg_inf + self.pos_inf

    @property
    def is_finite(self) -> bool:
        return self.non_finite == 0

    def describe(self) -> str:
        """Short text for a hover: '561 -inf of 640', 'finite (640 values, 561 zeros)'."""
        parts = []
        for count, label in ((self.nan, "NaN"), (self.neg_inf, "-inf"), (self.pos_inf, "+inf")):
            if count:
                parts.append(f"{count} {label}")
        of = f" of {self.size}" if self.size is not None else ""
        if parts:
            return ", ".join(parts) + of
        extra = f", {self.zero} zero{'s' if self.zero != 1 else ''}" if self.zero else ""
        values = "value" if self.size == 1 else "values"
        return f"finite ({self.size} {values}{extra})" if self.size is not None else "finite"

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TensorHealth:
        what = "tensor health"
        shape = _field(data, "shape", list, None, what)
        if shape is not None and not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
            raise FindingsError("tensor health field 'shape' must be a list of integers")
        return cls(
            dtype=_field(data, "dtype", str, None, what),
            rank=_field(data, "rank", int, None, what),
            shape=shape,
            size=_field(data, "size", int, None, what),
            nan=_field(data, "nan", int, 0, what),
            neg_inf=_field(data, "neg_inf", int, 0, what),
            pos_inf=_field(data, "pos_inf", int, 0, what),
            neg=_field(data, "neg", int, None, what),
            zero=_field(data, "zero", int, None, what),
            pos=_field(data, "pos", int, None, what),
        )


@dataclass
class Frame:
    file: str
    line: int
    function: str = ""
    # Notebook code only: `file` is the .ipynb, `cell` the 0-based index among its cells, `line` 1-based in it.
    cell: int | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if self.cell is None:
            del out["cell"]
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Frame:
        what = "stack frame"
        cell = data.get("cell") if isinstance(data, dict) else None
        return cls(
            file=_field(data, "file", str, what=what),
            line=_field(data, "line", int, what=what),
            function=_field(data, "function", str, "", what),
            cell=cell if isinstance(cell, int) and not isinstance(cell, bool) else None,
        )


_TASK_RE = re.compile(r"/job:([^/]+)/replica:\d+/task:(\d+)")


@dataclass
class OpRef:
    name: str
    type: str
    graph: str | None = None
    host: str | None = None
    device: str | None = None
    execution_index: int | None = None
    trace_index: int | None = None
    step: int | None = None
    forward_op: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @property
    def task(self) -> str | None:
        """The cluster task that ran the op, from its device ("/job:worker/replica:0/task:1/..." -> "worker:1");
        None for a single-process run ("/job:localhost/...")."""
        match = _TASK_RE.search(self.device or "")
        if match is None or match.group(1) == "localhost":
            return None
        return f"{match.group(1)}:{match.group(2)}"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OpRef:
        what = "op"
        return cls(
            name=_field(data, "name", str, what=what),
            type=_field(data, "type", str, what=what),
            graph=_field(data, "graph", str, None, what),
            host=_field(data, "host", str, None, what),
            device=_field(data, "device", str, None, what),
            execution_index=_field(data, "execution_index", int, None, what),
            trace_index=_field(data, "trace_index", int, None, what),
            step=_field(data, "step", int, None, what),
            forward_op=_field(data, "forward_op", str, None, what),
        )


@dataclass
class InputHealth:
    name: str
    health: TensorHealth | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.health is not None:
            out["health"] = self.health.to_json()
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> InputHealth:
        health = _field(data, "health", dict, None, "input")
        return cls(
            name=_field(data, "name", str, what="input"),
            health=TensorHealth.from_json(health) if health else None,
        )


@dataclass
class Finding:
    """One marked line: where an op made (origin) or carried (propagated) non-finite values."""

    file: str
    line: int
    role: Role
    op: OpRef
    health: TensorHealth | None = None
    inputs: list[InputHealth] = field(default_factory=list)
    stack: list[Frame] = field(default_factory=list)
    message: str = ""
    # Notebook code only: `file` is the .ipynb, `cell` the 0-based index among its cells, `line` 1-based in it.
    cell: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "file": self.file,
            "line": self.line,
            "role": self.role,
            "op": self.op.to_json(),
        }
        if self.cell is not None:
            out["cell"] = self.cell
        if self.health is not None:
            out["health"] = self.health.to_json()
        out["inputs"] = [i.to_json() for i in self.inputs]
        out["stack"] = [f.to_json() for f in self.stack]
        out["message"] = self.message
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Finding:
        role = _field(data, "role", str)
        if role not in ("origin", "propagated", "backward-origin"):
            raise FindingsError(f"unknown finding role {role[:80]!r}")
        health = _field(data, "health", dict, None)
        return cls(
            file=_field(data, "file", str),
            line=_field(data, "line", int),
            role=role,
            op=OpRef.from_json(_field(data, "op", dict)),
            health=TensorHealth.from_json(health) if health else None,
            inputs=[InputHealth.from_json(i) for i in _list(data, "inputs", "finding")],
            stack=[Frame.from_json(f) for f in _list(data, "stack", "finding")],
            message=_field(data, "message", str, ""),
            cell=_cell_index(data.get("cell")),
        )


def _cell_index(value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise FindingsError(f"finding cell must be a non-negative integer, got {value!r:.40}")
    return value


@dataclass
class Findings:
    """A whole findings document: where it came from, the origin, and every marked line."""

    source_kind: Literal["dump", "bundle"]
    source_path: str
    origin: Finding | None
    findings: list[Finding] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    tensor_debug_mode: str | None = None
    bundle: dict[str, Any] | None = None
    # Fields outside the schema's required core: what the reader skipped, timings, etc.
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        source: dict[str, Any] = {"kind": self.source_kind, "path": self.source_path, "hosts": self.hosts}
        if self.tensor_debug_mode:
            source["tensor_debug_mode"] = self.tensor_debug_mode
        out: dict[str, Any] = {
            "schema": SCHEMA,
            "source": source,
            "origin": self.origin.to_json() if self.origin else None,
            "findings": [f.to_json() for f in self.findings],
        }
        if self.bundle is not None:
            out["bundle"] = self.bundle
        out.update(self.extra)
        return out

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2)

    @classmethod
    def from_json(cls, data: Any) -> Findings:
        if not isinstance(data, dict):
            raise FindingsError("findings document is not a JSON object")
        schema = data.get("schema")
        if schema != SCHEMA:
            shown = schema if isinstance(schema, (str, int, float, type(None))) else type(schema).__name__
            raise FindingsError(f"findings schema is {shown!r:.80}, expected {SCHEMA!r}")
        what = "findings document"
        source = _field(data, "source", dict, what=what)
        if "origin" not in data:
            raise FindingsError("findings document has no 'origin'")
        origin = _field(data, "origin", dict, None, what)
        findings = [Finding.from_json(f) for f in _field(data, "findings", list, what=what)]
        kind = _field(source, "kind", str, "dump", "findings source")
        if kind not in ("dump", "bundle"):
            raise FindingsError(f"findings source kind {kind[:40]!r} is neither 'dump' nor 'bundle'")
        hosts = _list(source, "hosts", "findings source")
        if not all(isinstance(h, str) for h in hosts):
            raise FindingsError("findings source field 'hosts' must be a list of strings")
        known = {"schema", "source", "origin", "findings", "bundle"}
        return cls(
            source_kind=kind,
            source_path=_field(source, "path", str, "", "findings source"),
            origin=Finding.from_json(origin) if origin else None,
            findings=findings,
            hosts=list(hosts),
            tensor_debug_mode=_field(source, "tensor_debug_mode", str, None, "findings source"),
            bundle=_field(data, "bundle", dict, None, what),
            extra={k: v for k, v in data.items() if k not in known},
        )


def placed_records(extra: dict[str, Any]) -> list[dict[str, Any]]:
    """The records in a findings document's ``extra`` that name a place in the user's code: each value that is an
    object with a str ``"file"`` and an int ``"line"`` (and ``"cell"`` once in a notebook's cell) — the dump scan's
    ops up the origin's inputs (``mask_into_softmax``, ``zeros_from_exp``, ``loss_input_layer``, ...). Whatever maps
    the origin to a notebook's cell maps these too, or a cause's change line names a file the user never sees."""
    return [
        value
        for value in extra.values()
        if isinstance(value, dict)
        and isinstance(value.get("file"), str)
        and isinstance(value.get("line"), int)
        and not isinstance(value.get("line"), bool)
    ]


def move_record(record: dict[str, Any], file: str, cell: int | None, line: int) -> None:
    """Put a `placed_records` record at `file`, `cell`, `line`; a second line it names in the same code (a sum of
    exps' ``divided_at``) moves with it."""
    shift = line - record["line"]
    record["file"], record["cell"], record["line"] = file, cell, line
    divided_at = record.get("divided_at")
    if isinstance(divided_at, int) and not isinstance(divided_at, bool):
        record["divided_at"] = divided_at + shift


def load_findings(path: str | Path, *, follow_symlinks: bool = True) -> Findings:
    """Read a findings.json file; raises FindingsError with a one-line reason on anything malformed or unreadable
    (a FIFO of that name too). ``follow_symlinks=False`` for one inside a bundle, which holds regular files only."""
    p = Path(path)
    try:
        data = safejson.load_file(p, max_bytes=MAX_FINDINGS_BYTES, follow_symlinks=follow_symlinks)
    except OSError as exc:
        raise FindingsError(f"cannot read findings {p}: {exc.strerror or exc}") from None
    except safejson.JSONError as exc:
        raise FindingsError(f"{p} {exc}") from None
    try:
        return Findings.from_json(data)
    except FindingsError as exc:
        raise FindingsError(f"{p}: {exc}") from None
