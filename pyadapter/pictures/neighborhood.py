"""The origin's neighbourhood: its inputs a few hops back and its consumers a few hops forward, with health.

Graph origins (a tf.function's traces): the ops come from the ``.graphs`` records (GraphOpCreation
``input_names`` "op:slot" in the origin's graph), the health of each op's output from the trace of the same
graph execution ("round") as the origin's, re-read from its record. Pass-through ops (Identity, function calls)
are shown as they are in the graph; tfdbg does not trace them, so they are "not traced".

Eager origins (executions, no graph): inputs are the executions that produced the origin's input tensors, and
consumers are the executions read after it that took its outputs.

A gradient op is linked to the forward op it differentiates (``gradients.forward_op_for``): always for the origin
(the forward op is added to the picture), and between other gradient and forward ops the picture already shows.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field

from pyadapter.dump.describe import trace_health
from pyadapter.dump.events import parse_event
from pyadapter.dump.executions import ExecEntry, read_execution
from pyadapter.dump.frames import innermost_user_frame, is_pseudo_or_nanlens_file
from pyadapter.dump.gradients import forward_op_for, is_gradient_op
from pyadapter.dump.graphs import HostDump, OpInfo
from pyadapter.dump.origin import Candidate, HostScan
from pyadapter.dump.tfrecord import RecordFile
from pyadapter.findings import Frame, TensorHealth
from pyadapter.pictures.model import PictureEdge, PictureNode

DEFAULT_HOPS_BACK = 3
DEFAULT_HOPS_FORWARD = 2
MAX_NODES = 60
MAX_FAN = 8  # inputs or consumers followed per op; the rest are counted in the notes
EAGER_FORWARD_READ = 5000  # executions read after an eager origin to find its consumers


@dataclass
class Neighborhood:
    nodes: list[PictureNode] = field(default_factory=list)
    edges: list[PictureEdge] = field(default_factory=list)
    graph_name: str | None = None
    truncated: bool = False
    notes: list[str] = field(default_factory=list)


# When an op has no user frame, the line a click opens is the most telling library frame: the innermost one
# outside TensorFlow and Keras's backend/ops plumbing (usually the Keras layer or activation that made the op,
# e.g. keras/src/layers/core/dense.py in Dense.call), else the innermost one outside TensorFlow (e.g. the
# trainer's tape.gradient call for a gradient op), else the innermost one outside tfdbg's own callback.
_LIBRARY_RE = re.compile(r"[/\\](site-packages|dist-packages)[/\\]")
_TENSORFLOW_RE = re.compile(r"[/\\](site-packages|dist-packages)[/\\]tensorflow[/\\]")
_KERAS_PLUMBING_RE = re.compile(r"[/\\](keras|tf_keras)[/\\]src[/\\](backend|ops)[/\\]")
_TFDBG_RE = re.compile(r"[/\\]tensorflow[/\\]python[/\\](debug|framework[/\\]op_)")


def _location(dump: HostDump, frame_ids: tuple[str, ...]) -> tuple[Frame | None, bool]:
    """(the line a click opens, whether it is the user's code)."""
    stack = dump.stack(frame_ids)
    mark = innermost_user_frame(stack)
    if mark is not None:
        return mark, True
    library = [f for f in stack if _LIBRARY_RE.search(f.file)]
    tiers = (
        [f for f in library if not _TENSORFLOW_RE.search(f.file) and not _KERAS_PLUMBING_RE.search(f.file)],
        [f for f in library if not _TENSORFLOW_RE.search(f.file)],
        [f for f in library if not _TFDBG_RE.search(f.file)],
        [f for f in stack if not is_pseudo_or_nanlens_file(f.file) and not _TFDBG_RE.search(f.file)],
    )
    for frames in tiers:
        if frames:
            return frames[-1], False
    return None, False


def _split_input(name: str) -> tuple[str, int] | None:
    """'op:slot' -> (op, slot); control inputs ('^op') -> None."""
    if name.startswith("^"):
        return None
    op, _, slot = name.rpartition(":")
    if not op or not slot.isdigit():
        return name, 0
    return op, int(slot)


def _forward_by_tape_scope(name: str, shown: set[str]) -> str | None:
    """A shown op named by a gradient op's tape scope: 'gradient_tape/loss/mul/Mul' -> 'loss/mul'.

    Only exact names count (no guessing from inputs), so a link drawn between two shown ops is always right.
    """
    marker = "gradient_tape/"
    at = name.rfind(marker)
    if at < 0:
        return None
    scope = name[at + len(marker) :]
    while "/" in scope:
        scope = scope.rsplit("/", 1)[0]
        if scope in shown:
            return scope
    return None


class _GraphPicture:
    def __init__(self, host: HostScan, origin_op: OpInfo, origin_slot: int, rnd: int) -> None:
        self.host = host
        self.dump = host.dump
        self.graph_id = origin_op.graph_id
        self.round = rnd
        self.origin_op = origin_op
        self.origin_slot = origin_slot
        self.ops = {name: op for (g, name), op in self.dump.ops.items() if g == self.graph_id}
        self.consumers: dict[str, list[OpInfo]] = {}
        for op in self.ops.values():
            for name in op.inputs:
                split = _split_input(name)
                if split is not None:
                    self.consumers.setdefault(split[0], []).append(op)
        self.health_cache: dict[tuple[str, int], TensorHealth | None] = {}

    def output_health(self, op: OpInfo, slot: int) -> TensorHealth | None:
        key = (op.name, slot)
        if key not in self.health_cache:
            health = None
            if slot < len(op.output_tensor_ids):
                entry = self.host.window_index().get((op.output_tensor_ids[slot], self.round))
                if entry is not None:
                    health = trace_health(self.host, entry)[0]
            self.health_cache[key] = health
        return self.health_cache[key]

    def shown_slot(self, op: OpInfo) -> int:
        """The output whose health the node shows: the origin's slot, else the first non-finite, else 0."""
        if op is self.origin_op:
            return self.origin_slot
        for slot in range(len(op.output_tensor_ids)):
            health = self.output_health(op, slot)
            if health is not None and not health.is_finite:
                return slot
        return 0

    def build(self, hops_back: int, hops_forward: int) -> Neighborhood:
        result = Neighborhood()
        info = self.dump.graphs.get(self.graph_id)
        result.graph_name = (info.name or None) if info else None
        distance: dict[str, int] = {self.origin_op.name: 0}
        order: list[str] = [self.origin_op.name]
        skipped = 0

        def add(name: str, d: int) -> bool:
            nonlocal skipped
            if name in distance:
                return False
            if len(order) >= MAX_NODES:
                skipped += 1
                return False
            distance[name] = d
            order.append(name)
            return True

        # Backward: producers of the inputs, breadth first.
        queue: deque[str] = deque([self.origin_op.name])
        while queue:
            name = queue.popleft()
            d = distance[name]
            if d <= -hops_back:
                continue
            producers = []
            for input_name in self.ops[name].inputs:
                split = _split_input(input_name)
                if split is not None and split[0] in self.ops and split[0] not in producers:
                    producers.append(split[0])
            skipped += max(0, len(producers) - MAX_FAN)
            for producer in producers[:MAX_FAN]:
                if add(producer, d - 1):
                    queue.append(producer)
        # Forward: consumers of the outputs.
        queue = deque([self.origin_op.name])
        while queue:
            name = queue.popleft()
            d = distance[name]
            if d < 0 or d >= hops_forward:
                continue
            consumers = [c.name for c in self.consumers.get(name, [])]
            consumers = list(dict.fromkeys(consumers))
            skipped += max(0, len(consumers) - MAX_FAN)
            for consumer in consumers[:MAX_FAN]:
                if add(consumer, d + 1):
                    queue.append(consumer)
        # A gradient origin: the forward op it differentiates (the line the user fixes).
        forward_links: list[tuple[str, str]] = []
        if is_gradient_op(self.origin_op):
            forward = forward_op_for(self.dump, self.origin_op)
            if forward is not None and forward.graph_id == self.graph_id:
                if forward.name not in distance:
                    distance[forward.name] = 0
                    order.append(forward.name)
                forward_links.append((forward.name, self.origin_op.name))
        shown = set(order)
        for name in order:
            if name == self.origin_op.name or not is_gradient_op(self.ops[name]):
                continue
            forward_name = _forward_by_tape_scope(name, shown)
            if forward_name is not None and not is_gradient_op(self.ops[forward_name]):
                forward_links.append((forward_name, name))

        ids = {name: f"n{i}" for i, name in enumerate(order)}
        forward_names = {f for f, g in forward_links if g == self.origin_op.name}
        for name in order:
            op = self.ops[name]
            slot = self.shown_slot(op)
            health = self.output_health(op, slot)
            d = distance[name]
            if name == self.origin_op.name:
                role = "origin"
            elif name in forward_names and d == 0:
                role = "forward"
            else:
                role = "input" if d < 0 else "consumer"
            mark, mine = _location(self.dump, op.frame_ids)
            result.nodes.append(
                PictureNode(
                    id=ids[name],
                    name=op.name,
                    type=op.type or "unknown",
                    role=role,  # type: ignore[arg-type]
                    distance=d,
                    health=health,
                    slot=slot,
                    traced=health is not None,
                    graph=result.graph_name,
                    file=mark.file if mark else None,
                    line=mark.line if mark else None,
                    function=mark.function if mark and mark.function else None,
                    user_code=mine,
                    gradient=is_gradient_op(op),
                )
            )
        # Every data edge between shown ops (not only the ones walked), so the picture is the real subgraph.
        for name in order:
            for input_name in self.ops[name].inputs:
                split = _split_input(input_name)
                if split is None or split[0] not in ids:
                    continue
                producer, slot = split
                result.edges.append(
                    PictureEdge(
                        source=ids[producer],
                        target=ids[name],
                        tensor=f"{producer}:{slot}",
                        health=self.output_health(self.ops[producer], slot),
                    )
                )
        for forward_name, gradient_name in forward_links:
            result.edges.append(
                PictureEdge(source=ids[forward_name], target=ids[gradient_name], tensor="", kind="gradient")
            )
        if skipped:
            result.truncated = True
            result.notes.append(f"{skipped} more inputs/consumers are not shown (at most {MAX_FAN} per op)")
        return result


def graph_neighborhood(
    host: HostScan,
    candidate: Candidate,
    hops_back: int = DEFAULT_HOPS_BACK,
    hops_forward: int = DEFAULT_HOPS_FORWARD,
) -> Neighborhood:
    entry = candidate.trace
    assert entry is not None
    resolved = host.dump.tensors.get(entry.tensor_id)
    if resolved is None:
        result = Neighborhood()
        result.notes.append("the origin's op is missing from the .graphs file, so its inputs are unknown")
        return result
    op, slot = resolved
    return _GraphPicture(host, op, slot, entry.round).build(hops_back, hops_forward)


def _eager_node(host: HostScan, entry: ExecEntry, role: str, distance: int) -> PictureNode:
    bad = [(i, h) for i, h in enumerate(entry.healths) if h is not None and not h.is_finite]
    slot, health = bad[0] if bad else (0, entry.healths[0] if entry.healths else None)
    mark, mine = _location(host.dump, entry.frame_ids)
    return PictureNode(
        id=f"e{entry.index}",
        name=f"{entry.op_type} #{entry.index}",
        type=entry.op_type,
        role=role,  # type: ignore[arg-type]
        distance=distance,
        health=health,
        slot=slot,
        traced=health is not None,
        file=mark.file if mark else None,
        line=mark.line if mark else None,
        function=mark.function if mark and mark.function else None,
        user_code=mine,
    )


def eager_neighborhood(
    host: HostScan,
    candidate: Candidate,
    hops_back: int = DEFAULT_HOPS_BACK,
    hops_forward: int = DEFAULT_HOPS_FORWARD,
) -> Neighborhood:
    """Executions that fed the eager origin and executions that consumed its outputs."""
    origin = candidate.execution
    scan = host.executions
    assert origin is not None
    result = Neighborhood()
    if origin.is_function_call:
        result.notes.append(
            "the origin is a tf.function call whose graph traces are missing: its inside is unknown"
        )
    nodes: dict[int, PictureNode] = {origin.index: _eager_node(host, origin, "origin", 0)}
    entries: dict[int, ExecEntry] = {origin.index: origin}
    edges: list[tuple[int, int, str, TensorHealth | None]] = []
    if scan is not None:
        frontier = [origin]
        for d in range(1, hops_back + 1):
            next_frontier = []
            for consumer in frontier:
                for tensor_id in consumer.input_ids[:MAX_FAN]:
                    produced = scan.producers.get(tensor_id)
                    if produced is None:
                        continue
                    index, offset, slot = produced
                    producer = entries.get(index) or read_execution(scan.path, offset, host.layout, index)
                    if producer is None:
                        continue
                    health = producer.healths[slot] if slot < len(producer.healths) else None
                    edges.append((index, consumer.index, f"{producer.op_type}:{slot}", health))
                    if index not in nodes and len(nodes) < MAX_NODES:
                        entries[index] = producer
                        nodes[index] = _eager_node(host, producer, "input", -d)
                        next_frontier.append(producer)
            frontier = next_frontier
        # Consumers: read on from the origin; an execution taking a known output joins one hop further out.
        known: dict[int, tuple[int, int, int]] = {
            t: (origin.index, s, 0) for s, t in enumerate(origin.output_ids)
        }  # tensor id -> (producer index, slot, distance)
        if hops_forward > 0:
            records = RecordFile(scan.path)
            seen = 0
            for offset, data in records.records():
                if offset <= origin.offset:
                    continue
                seen += 1
                if seen > EAGER_FORWARD_READ or len(nodes) >= MAX_NODES:
                    break
                event = parse_event(data)
                if event is None or not event.HasField("execution"):
                    continue
                hits = [known[t] for t in event.execution.input_tensor_ids if t in known]
                hits = [h for h in hits if h[2] < hops_forward]
                if not hits:
                    continue
                index = origin.index + seen
                entry = read_execution(scan.path, offset, host.layout, index)
                if entry is None:
                    continue
                d = min(h[2] for h in hits) + 1
                entries[index] = entry
                nodes[index] = _eager_node(host, entry, "consumer", d)
                for producer_index, slot, _ in hits:
                    producer = entries[producer_index]
                    health = producer.healths[slot] if slot < len(producer.healths) else None
                    edges.append((producer_index, index, f"{producer.op_type}:{slot}", health))
                for s, t in enumerate(entry.output_ids):
                    known[t] = (index, s, d)
    result.nodes = sorted(nodes.values(), key=lambda n: (n.distance, n.id))
    seen_edges: set[tuple[int, int, str]] = set()
    for source, target, tensor, health in edges:
        if source in nodes and target in nodes and (source, target, tensor) not in seen_edges:
            seen_edges.add((source, target, tensor))
            result.edges.append(PictureEdge(f"e{source}", f"e{target}", tensor, health=health))
    return result


def neighborhood(
    host: HostScan,
    candidate: Candidate,
    hops_back: int = DEFAULT_HOPS_BACK,
    hops_forward: int = DEFAULT_HOPS_FORWARD,
) -> Neighborhood:
    if candidate.trace is not None:
        return graph_neighborhood(host, candidate, hops_back, hops_forward)
    return eager_neighborhood(host, candidate, hops_back, hops_forward)
