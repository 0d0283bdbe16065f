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

SCHEMA = "nanlens.findings/1"

Role = Literal["origin", "propagated", "backward-origin"]


class FindingsError(ValueError):
    """A findings document that is not valid ``nanlens.findings/1``."""


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
        extra = f", {self.zero} zeros" if self.zero else ""
        return f"finite ({self.size} values{extra})" if self.size is not None else "finite"

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TensorHealth:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)


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
        cell = data.get("cell")
        return cls(file=str(data["file"]), line=int(data["line"]), function=str(data.get("function", "")),
                   cell=int(cell) if isinstance(cell, int) and not isinstance(cell, bool) else None)


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
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)


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
        health = data.get("health")
        return cls(name=str(data["name"]), health=TensorHealth.from_json(health) if health else None)


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
        out: dict[str, Any] = {"file": self.file, "line": self.line, "role": self.role, "op": self.op.to_json()}
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
        try:
            role = data["role"]
            if role not in ("origin", "propagated", "backward-origin"):
                raise FindingsError(f"unknown finding role {role!r}")
            health = data.get("health")
            return cls(
                file=str(data["file"]),
                line=int(data["line"]),
                role=role,
                op=OpRef.from_json(data["op"]),
                health=TensorHealth.from_json(health) if health else None,
                inputs=[InputHealth.from_json(i) for i in data.get("inputs", [])],
                stack=[Frame.from_json(f) for f in data.get("stack", [])],
                message=str(data.get("message", "")),
                cell=_cell_index(data.get("cell")),
            )
        except (KeyError, TypeError) as exc:
            raise FindingsError(f"finding is missing or has a bad field: {exc}") from None


def _cell_index(value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise FindingsError(f"finding cell must be a non-negative integer, got {value!r}")
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
        if data.get("schema") != SCHEMA:
            raise FindingsError(f"findings schema is {data.get('schema')!r}, expected {SCHEMA!r}")
        try:
            source = data["source"]
            origin = data["origin"]
            findings = [Finding.from_json(f) for f in data["findings"]]
        except (KeyError, TypeError) as exc:
            raise FindingsError(f"findings document is missing {exc}") from None
        known = {"schema", "source", "origin", "findings", "bundle"}
        return cls(
            source_kind=source.get("kind", "dump"),
            source_path=str(source.get("path", "")),
            origin=Finding.from_json(origin) if origin else None,
            findings=findings,
            hosts=list(source.get("hosts", [])),
            tensor_debug_mode=source.get("tensor_debug_mode"),
            bundle=data.get("bundle"),
            extra={k: v for k, v in data.items() if k not in known},
        )


def load_findings(path: str | Path) -> Findings:
    """Read a findings.json file; raises FindingsError with a one-line reason on anything malformed."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise FindingsError(f"cannot read findings {p}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FindingsError(f"{p} is not JSON: {exc.msg} at line {exc.lineno}") from None
    return Findings.from_json(data)
