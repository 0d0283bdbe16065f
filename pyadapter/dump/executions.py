"""Eager executions (``.execution``): ops run eagerly and tf.function calls, in execution order.

Eager ops run one at a time, so file order is causal order: the origin is the first execution with a
non-finite output whose inputs (by ``input_tensor_ids``) were all finite. A tf.function call whose outputs
are non-finite is not an origin (the op that made the NaN is inside its graph, see ``traces.py``), but its
outputs are remembered as non-finite so that eager ops consuming them are not taken for origins either.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pyadapter.dump.events import MODE_NAMES, parse_event, parse_execution_health, tensor_values
from pyadapter.dump.health import HealthLayout
from pyadapter.dump.producers import Producers
from pyadapter.dump.tfrecord import SCAN_CHUNK_SIZE, ReadIssue, RecordFile
from pyadapter.findings import TensorHealth

# Keep reading this many executions after the origin, for propagated findings.
TAIL_EXECUTIONS = 2000
# Bound on remembered producers of eager tensors (ids only grow, so old ones are dropped first).
MAX_PRODUCERS = 200_000
MAX_NONFINITE_KEPT = 5000


@dataclass
class ExecEntry:
    index: int
    offset: int
    wall_time: float
    op_type: str
    graph_id: str
    input_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    healths: list[TensorHealth | None]
    frame_ids: tuple[str, ...]
    # True when an input was already non-finite (or it is a function call): NaN carried, not made, here.
    downstream: bool = False

    @property
    def is_function_call(self) -> bool:
        return bool(self.graph_id)


@dataclass
class ExecutionScan:
    path: str
    mode: str | None = None
    executions_read: int = 0
    origin: ExecEntry | None = None
    first_nonfinite_function: ExecEntry | None = None
    nonfinite: list[ExecEntry] = field(default_factory=list)
    # eager tensor id -> (execution index, record offset, output slot)
    producers: Producers = field(default_factory=Producers)
    issue: ReadIssue | None = None
    undecodable: int = 0


def _entry(index: int, offset: int, event, layout: HealthLayout | None) -> ExecEntry:
    ex = event.execution
    healths: list[TensorHealth | None] = []
    for proto in ex.tensor_protos:
        values = tensor_values(proto)
        healths.append(layout.health(values) if layout and values else None)
    return ExecEntry(
        index=index,
        offset=offset,
        wall_time=event.wall_time,
        op_type=ex.op_type,
        graph_id=ex.graph_id,
        input_ids=tuple(ex.input_tensor_ids),
        output_ids=tuple(ex.output_tensor_ids),
        healths=healths,
        frame_ids=tuple(ex.code_location.stack_frame_ids),
    )


def read_execution(path: str, offset: int, layout: HealthLayout | None, index: int = -1) -> ExecEntry | None:
    data = RecordFile(path).read_at(offset)
    event = parse_event(data) if data is not None else None
    if event is None or not event.HasField("execution"):
        return None
    return _entry(index, offset, event, layout)


def scan_executions(
    path: str, layouts: dict[str, HealthLayout], on_bytes: Callable[[int], None] | None = None
) -> ExecutionScan:
    result = ExecutionScan(path=path)
    records = RecordFile(path, on_bytes, SCAN_CHUNK_SIZE)
    nonfinite_ids: set[int] = set()
    producers = result.producers
    tail = -1
    index = -1
    for offset, data in records.records():
        index += 1
        quick = parse_execution_health(data)
        if quick is None or not quick.HasField("execution"):
            result.undecodable += 1
            continue
        ex = quick.execution
        mode = MODE_NAMES.get(ex.tensor_debug_mode, "UNSPECIFIED")
        if result.mode is None:
            result.mode = mode
        layout = layouts.get(mode)
        outputs = ex.output_tensor_ids
        bad_slots: list[int] = []
        if layout is not None and layout.nonfinite_bytes is not None:
            lo, hi = layout.nonfinite_bytes
            for slot, proto in enumerate(ex.tensor_protos):
                content = proto.tensor_content
                if len(content) >= hi and content.count(0, lo, hi) == hi - lo:
                    continue  # all-zero non-finite counters: finite, nothing to decode
                values = tensor_values(proto)
                if values and not layout.is_finite(values):
                    bad_slots.append(slot)
        if bad_slots:
            event = parse_event(data)
            if event is None or not event.HasField("execution"):
                result.undecodable += 1
                continue
            ex = event.execution
            if len(ex.tensor_protos) != len(outputs):
                bad_slots = list(range(len(outputs)))  # cannot align protos to outputs: mark all
            inputs_bad = any(i in nonfinite_ids for i in ex.input_tensor_ids)
            for slot in bad_slots:
                if slot < len(outputs):
                    nonfinite_ids.add(outputs[slot])
            entry = _entry(index, offset, event, layout)
            entry.downstream = inputs_bad or entry.is_function_call
            if len(result.nonfinite) < MAX_NONFINITE_KEPT:
                result.nonfinite.append(entry)
            if not inputs_bad and result.origin is None:
                if entry.is_function_call:
                    if result.first_nonfinite_function is None:
                        result.first_nonfinite_function = entry
                        tail = TAIL_EXECUTIONS if tail < 0 else tail
                else:
                    result.origin = entry
                    tail = TAIL_EXECUTIONS
        producers.set_outputs(outputs, index, offset)
        if len(producers) > MAX_PRODUCERS:
            producers.drop_older_half()
        if tail >= 0:
            tail -= 1
            if tail == 0:
                break
    result.executions_read = index + 1
    result.issue = records.issue
    return result
