"""Gradient ops and the forward ops they differentiate.

A NaN that first appears in the backward pass is made by an op that ``tape.gradient`` created: its name is
under ``gradient_tape/<forward op's name scope>/`` (TF2 tapes) or ``gradients/<forward op>_grad/`` (TF1
style), or its type ends in ``Grad`` (SqrtGrad, ReluGrad). Its creation stack points at the tape.gradient
call; the line the user must change is the forward op's, recovered here from names and from the forward
tensors the gradient op reads (SqrtGrad reads Sqrt's output; Log's gradient reads Log's input).
"""

from __future__ import annotations

import os
import re

from pyadapter.dump.graphs import HostDump, OpInfo

_GRADIENT_TAPE_RE = re.compile(r"(?:^|/)gradient_tape/")
_GRADIENTS_RE = re.compile(r"(?:^|/)gradients(?:_\d+)?/")


def is_gradient_op(op: OpInfo) -> bool:
    return bool(_GRADIENT_TAPE_RE.search(op.name) or _GRADIENTS_RE.search(op.name)) or op.type.endswith(
        "Grad"
    )


def _forward_by_gradients_scope(dump: HostDump, op: OpInfo) -> OpInfo | None:
    """TF1-style ``gradients/<scope>/<Op>_grad/<GradOp>`` names carry the forward op's name."""
    m = _GRADIENTS_RE.search(op.name)
    if not m:
        return None
    head = op.name[: m.start()] + ("/" if m.start() > 0 else "")
    parts = op.name[m.end() :].split("/")
    for i, part in enumerate(parts):
        if part.endswith("_grad"):
            name = head.lstrip("/") + "/".join(parts[:i] + [part[: -len("_grad")]])
            return dump.ops.get((op.graph_id, name))
    return None


def _forward_tensors(dump: HostDump, op: OpInfo) -> list[tuple[OpInfo, str]]:
    """Forward (non-gradient) tensors the gradient op reads, directly or through other gradient ops."""
    out: list[tuple[OpInfo, str]] = []
    seen: set[str] = set()
    frontier = [op]
    for _ in range(4):
        nxt = []
        for g in frontier:
            for name in g.inputs:
                if name in seen:
                    continue
                seen.add(name)
                resolved = dump.op_for_input(g.graph_id, name)
                if resolved is None:
                    continue
                producer = resolved[0]
                if is_gradient_op(producer):
                    nxt.append(producer)
                elif producer.type not in ("Const",):
                    out.append((producer, name))
        if out:
            break
        frontier = nxt
    return out


def forward_op_for(dump: HostDump, op: OpInfo) -> OpInfo | None:
    """The forward op a gradient op differentiates, or None if it cannot be told."""
    by_name = _forward_by_gradients_scope(dump, op)
    if by_name is not None:
        return by_name
    matches = list(_GRADIENT_TAPE_RE.finditer(op.name))
    # Ops of tape.gradient live under "gradient_tape/<forward op's name scope>/".
    scope = os.path.dirname(op.name[matches[-1].end() :]) if matches else None
    forward = _forward_tensors(dump, op)
    if not forward:
        return None
    tensor_names = {name for _, name in forward}
    grad_base = op.type[: -len("Grad")] if op.type.endswith("Grad") else None
    # 1. The producer of a forward tensor whose type the gradient type names (SqrtGrad -> Sqrt).
    if grad_base:
        for producer, _ in forward:
            if producer.type == grad_base:
                return producer
    # 2. The forward op the tape's scope is named after: "gradient_tape/Pow/Pow" differentiates "Pow", whose
    # own line is the one to change, not the line of the input it reads (``base`` in ``tf.pow(base, gamma)``).
    if scope:
        named = dump.ops.get((op.graph_id, scope))
        if named is not None and not is_gradient_op(named):
            return named
    same_graph = [o for (g, _), o in dump.ops.items() if g == op.graph_id and not is_gradient_op(o)]
    if scope is not None:
        in_scope = [o for o in same_graph if os.path.dirname(o.name) == scope]
        # 3. An op of the mirrored scope that consumes a forward tensor the gradient reads (LogGrad reads x); of
        # several, the one that consumes most of them: atan2(y, x)'s gradient reads both y and x, and the first op
        # reading x alone (an ``x**2`` on the line before) was named (s39e p5).
        consuming = [(len(tensor_names.intersection(c.inputs)), -i, c) for i, c in enumerate(in_scope)]
        best = max(consuming, key=lambda item: item[:2], default=None)
        if best is not None and best[0] > 0:
            return best[2]
        # 4. An op of the mirrored scope that produced one.
        for producer, _ in forward:
            if os.path.dirname(producer.name) == scope:
                return producer
    # 5. Whatever produced the first forward tensor.
    return forward[0][0]
