"""The health timeline: for the dump's executions in order, how many tensors were non-finite.

The ``.execution`` file lists eager ops and tf.function calls in order; a function call's record is written
when the call returns, after the graph traces of its ops. So a graph trace belongs to the first execution
written at or after the trace's wall time. Eager ops carry their own outputs' health.

With a single execution (a bundle's replayed step) the timeline is drawn along the traces of that execution
instead: how many non-finite tensors exist so far, trace after trace, which shows where they begin inside the
step. Long runs are binned to at most ``MAX_POINTS`` points.

One streaming pass over each file, classifying traces by their raw health bytes as ``dump/traces.py`` does;
nothing is kept per trace but two numbers.
"""

from __future__ import annotations

import bisect
import struct
from array import array
from dataclasses import dataclass, field

from pyadapter.dump.events import MODE_NAMES, parse_event, tensor_values
from pyadapter.dump.health import LAYOUTS, HealthLayout
from pyadapter.dump.origin import Candidate, HostScan
from pyadapter.dump.tfrecord import RecordFile
from pyadapter.pictures.model import Timeline, TimelinePoint

MAX_POINTS = 1500
_unpack_double = struct.Struct("<d").unpack_from


@dataclass
class _Execution:
    index: int
    wall_time: float
    op_type: str
    is_function: bool
    tensors: int = 0
    non_finite: int = 0


@dataclass
class _Traces:
    count: int = 0
    # Per trace, in file order: wall time and whether it was non-finite (compact: only what the chart needs).
    wall_times: list[float] = field(default_factory=list)
    bad: bytearray = field(default_factory=bytearray)
    tensor_ids: array = field(default_factory=lambda: array("d"))  # -1 where unknown


def _read_executions(host: HostScan) -> list[_Execution]:
    path = host.executions.path if host.executions else host.dump.files.path("execution")
    out: list[_Execution] = []
    if not path:
        return out
    for index, (_, data) in enumerate(RecordFile(path).records()):
        event = parse_event(data)
        if event is None or not event.HasField("execution"):
            continue
        ex = event.execution
        item = _Execution(index, event.wall_time, ex.op_type, bool(ex.graph_id))
        if not item.is_function:
            layout = LAYOUTS.get(MODE_NAMES.get(ex.tensor_debug_mode, ""))
            if layout is not None and layout.reports_health:
                for proto in ex.tensor_protos:
                    values = tensor_values(proto)
                    if values:
                        item.tensors += 1
                        item.non_finite += 0 if layout.is_finite(values) else 1
        out.append(item)
    return out


def _read_traces(path: str, layout: HealthLayout) -> _Traces:
    out = _Traces()
    marker = layout.marker
    lo, hi = layout.nonfinite_bytes or (0, 0)
    zeros = bytes(hi - lo)
    last_wall = 0.0
    for _, data in RecordFile(path).records():
        wall = _unpack_double(data, 1)[0] if len(data) > 9 and data[0] == 0x09 else last_wall
        last_wall = wall
        p = data.find(marker)
        if p >= 0:
            c = p + len(marker)
            bad = data[c + lo : c + hi] != zeros
            tensor_id = _unpack_double(data, c)[0] if c + 8 <= len(data) else -1.0
        else:
            event = parse_event(data)
            if event is None or not event.HasField("graph_execution_trace"):
                bad, tensor_id = False, -1.0
            else:
                values = tensor_values(event.graph_execution_trace.tensor_proto)
                bad = not layout.is_finite(values)
                tensor_id = values[0] if values else -1.0
        out.count += 1
        out.wall_times.append(wall)
        out.bad.append(1 if bad else 0)
        out.tensor_ids.append(tensor_id)
    return out


def _bin(points: list[TimelinePoint], unit_name: str) -> tuple[list[TimelinePoint], bool]:
    if len(points) <= MAX_POINTS:
        return points, False
    size = -(-len(points) // MAX_POINTS)
    out = []
    for start in range(0, len(points), size):
        chunk = points[start : start + size]
        out.append(
            TimelinePoint(
                x=chunk[0].x,
                end=chunk[-1].end,
                tensors=sum(p.tensors for p in chunk),
                non_finite=sum(p.non_finite for p in chunk),
                cumulative=chunk[-1].cumulative,
                label=f"{unit_name}s {chunk[0].x}-{chunk[-1].end}",
            )
        )
    return out, True


def _segment(members: list[_Execution], last: _Execution) -> TimelinePoint:
    """One point for a function call and the eager ops before it."""
    eager = len(members) - 1
    label = f"#{last.index} {_short_function_name(last.op_type)}" + (
        f" (+{eager} eager ops)" if eager else ""
    )
    return TimelinePoint(
        x=last.index,
        end=last.index,
        tensors=sum(m.tensors for m in members),
        non_finite=sum(m.non_finite for m in members),
        cumulative=0,
        label=label,
    )


def _containing(points: list[TimelinePoint], x: int | None) -> int | None:
    """The x of the (binned) point that covers index x."""
    if x is None:
        return None
    for p in points:
        if p.x <= x <= p.end:
            return p.x
    return None


def _short_function_name(op_type: str) -> str:
    """'__inference_one_step_on_data_1234' -> 'one_step_on_data'."""
    name = op_type
    for prefix in ("__inference_", "__forward_", "__backward_"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
            head, _, tail = name.rpartition("_")
            return head if tail.isdigit() and head else name
    return name


def build_timeline(host: HostScan, origin: Candidate | None) -> Timeline:
    executions = _read_executions(host)
    trace_path = host.traces.path if host.traces else None
    traces = (
        _read_traces(trace_path, host.layout)
        if trace_path and host.layout and host.layout.reports_health
        else None
    )
    origin_trace = origin.trace.index if origin is not None and origin.trace is not None else None
    origin_exec = origin.execution.index if origin is not None and origin.execution is not None else None

    # Assign each trace to the execution that returned after it.
    after_last = _Execution(len(executions), float("inf"), "(after the last recorded execution)", True)
    origin_owner: int | None = origin_exec
    if traces is not None and traces.count and executions:
        ends = [e.wall_time for e in executions]
        for i, (wall, bad) in enumerate(zip(traces.wall_times, traces.bad, strict=True)):
            k = bisect.bisect_left(ends, wall)
            owner = executions[k] if k < len(executions) else after_last
            owner.tensors += 1
            owner.non_finite += bad
            if i == origin_trace:
                origin_owner = owner.index
    if after_last.tensors:
        executions.append(after_last)
    with_health = [e for e in executions if e.tensors]
    trace_count = traces.count if traces is not None else 0

    if len(with_health) >= 2 or (traces is None or not trace_count):
        timeline = Timeline(unit="execution", executions=len(executions), traces=trace_count)
        calls = [e for e in executions if e.is_function and e.tensors]
        points = []
        cumulative = 0
        if len(calls) >= 2:
            # Training steps are function calls; the eager ops run between them (metrics, variable reads) are
            # counted with the call that follows them, so each point is one step.
            owner_of: dict[int, int] = {}
            pending: list[_Execution] = []
            for e in executions:
                pending.append(e)
                if e.is_function and e.tensors:
                    points.append(_segment(pending, e))
                    owner_of.update((p.index, e.index) for p in pending)
                    pending = []
            if pending:
                last = pending[-1]
                points.append(_segment(pending, last))
                owner_of.update((p.index, last.index) for p in pending)
            for point in points:
                cumulative += point.non_finite
                point.cumulative = cumulative
            origin_owner = owner_of.get(origin_owner, origin_owner) if origin_owner is not None else None
            timeline.note = (
                f"one point per tf.function call ({len(calls)}); the {len(executions) - len(calls)} eager ops "
                "between calls are counted with the call after them"
            )
        else:
            for e in executions:
                cumulative += e.non_finite
                label = f"#{e.index} {_short_function_name(e.op_type)}"
                points.append(TimelinePoint(e.index, e.index, e.tensors, e.non_finite, cumulative, label))
        first = next((p.x for p in points if p.non_finite), None)
        points, timeline.binned = _bin(points, "execution")
        timeline.points = points
        timeline.origin_x = _containing(points, origin_owner)
        timeline.first_nonfinite_x = _containing(points, first)
        if not executions:
            timeline.note = "the dump has no executions"
        return timeline

    # One execution (a replayed step): the traces inside it, in the order they were written.
    assert traces is not None
    timeline = Timeline(unit="trace", executions=len(executions), traces=trace_count)
    points = []
    cumulative = 0
    for i, bad in enumerate(traces.bad):
        cumulative += bad
        points.append(TimelinePoint(i, i, 1, bad, cumulative, _trace_name(host, traces.tensor_ids[i])))
    first = next((p.x for p in points if p.non_finite), None)
    points, timeline.binned = _bin(points, "trace")
    timeline.points = points
    timeline.origin_x = _containing(points, origin_trace)
    timeline.first_nonfinite_x = _containing(points, first)
    timeline.note = "one execution: its traced tensors in the order they were written"
    return timeline


def _trace_name(host: HostScan, tensor_id: float) -> str:
    """'compile_loss/cross_entropy/Log:0 (Log)' for a trace's tensor id, '' when unknown."""
    if not 0 <= tensor_id <= 2**53:
        return ""
    resolved = host.dump.tensors.get(int(tensor_id))
    if resolved is None:
        return ""
    op, slot = resolved
    return f"{op.name}:{slot} ({op.type})" if op.type else f"{op.name}:{slot}"
