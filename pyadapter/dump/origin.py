"""The causal origin: which op first made NaN/Inf out of finite inputs, and what it spread to.

Graph traces: within the incident window (see ``traces.py``) a non-finite trace is a candidate when none of
its op's inputs (GraphOpCreation.input_names "op:slot", resolved in the same graph and the same round) was
non-finite. Inputs that were not traced that round count as finite, except that pass-through ops
(Identity, control flow, function calls), which tfdbg never instruments, are looked through. The earliest
candidate in file order wins; ops that only hand data in (placeholders, iterator reads, variable reads) are
taken only when nothing else qualifies.

One exception to "untraced counts as finite": a function's argument (a Placeholder in a tf.function's graph,
e.g. Keras's ``data`` or ``args_0``) is never traced, because its value comes from the caller. An op fed by such
an argument is not taken as the origin when data brought in earlier (a placeholder or iterator read, e.g. in a
tf.data function) was already non-finite: the NaN most likely arrived through the argument, so that earlier
input is the origin. Without such evidence the op stays a candidate (most origins have argument inputs).

Eager executions are in causal order already (``executions.py``). Between graph and eager candidates, and
between hosts (several writers' files in one directory, e.g. every worker of a MultiWorkerMirroredStrategy
run dumping to shared storage), the earlier wall time wins; collective ops count as "bringing values in", so a
NaN that reached a worker through an all-reduce never outranks the op on the worker that made it.

A gradient origin is described at its forward op's line (see ``gradients.py`` and ``describe.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyadapter.dump.events import parse_event, tensor_values
from pyadapter.dump.executions import ExecEntry, ExecutionScan
from pyadapter.dump.frames import made_by_nanlens
from pyadapter.dump.graphs import HostDump
from pyadapter.dump.health import HealthLayout
from pyadapter.dump.tfrecord import RecordFile
from pyadapter.dump.traces import TraceEntry, TraceScan
from pyadapter.findings import Frame, TensorHealth

# Ops that only bring values in from elsewhere: a NaN there was made before (or outside) this graph.
WEAK_ORIGIN_TYPES = frozenset(
    {
        # A constant that holds NaN/Inf was written so on purpose: a -inf mask before a softmax, an inf "best so
        # far". What goes wrong is an op that later turns it into NaN (`_nan_from_infinities`).
        "Const",
        "HostConst",
        "Placeholder",
        "PlaceholderWithDefault",
        "_Arg",
        "ReadVariableOp",
        "_Recv",
        "Recv",
        "_HostRecv",
        # Collectives bring values from the other workers: a NaN coming out of an all-reduce was made on some
        # host before it (multi-worker dumps), so the op that made it there is the origin, not this one.
        "CollectiveReduce",
        "CollectiveReduceV2",
        "CollectiveReduceV3",
        "CollectiveGather",
        "CollectiveGatherV2",
        "CollectiveBcastRecv",
        "CollectiveBcastRecvV2",
        "CollectiveAllToAllV2",
        "CollectiveAllToAllV3",
        "NcclAllReduce",
        "_NcclReduceRecv",
        "_NcclBroadcastRecv",
    }
)

# A TensorList or TensorArray (an RNN's while loop over the time steps) hands back values put into it: its input
# is a variant tfdbg records no health for, and its traces can come before those of the op that made the values.
# Weak origins, but no sign that bad data came in (unlike an iterator's or an argument's).
LIST_READ_TYPES = frozenset(
    {
        "TensorListGetItem",
        "TensorListStack",
        "TensorListGather",
        "TensorListConcatV2",
        "TensorListPopBack",
        "TensorArrayReadV3",
        "TensorArrayGatherV3",
        "TensorArrayConcatV3",
    }
)
# An input pipeline's iterator hands the step its batch: one under tf.distribute reads a replica's shard of it.
ITERATOR_READ_TYPES = frozenset(
    {
        "IteratorGetNext",
        "IteratorGetNextSync",
        "IteratorGetNextAsOptional",
        "OptionalGetValue",
        "MultiDeviceIteratorGetNextFromShard",
    }
)
WEAK_ORIGIN_TYPES = WEAK_ORIGIN_TYPES | LIST_READ_TYPES | ITERATOR_READ_TYPES

# Ops tfdbg does not instrument (op_callbacks_common.OP_CALLBACK_SKIP_OPS) or that pass values through.
PASS_THROUGH_TYPES = frozenset(
    {
        "Identity",
        "IdentityN",
        "Snapshot",
        "Enter",
        "Exit",
        "Merge",
        "Switch",
        "NextIteration",
        "LoopCond",
        "If",
        "StatelessIf",
        "Case",
        "StatelessCase",
        "While",
        "StatelessWhile",
        "PartitionedCall",
        "StatefulPartitionedCall",
        "RemoteCall",
    }
)

# A function's arguments: their values come from the caller, so tfdbg has no trace of them inside the function.
ARGUMENT_TYPES = frozenset({"Placeholder", "_Arg"})


@dataclass
class HostScan:
    """Everything read from one writer's files."""

    dump: HostDump
    layout: HealthLayout | None
    mode: str | None
    traces: TraceScan | None = None
    executions: ExecutionScan | None = None
    # The user's line that started the run (e.g. a bundle's model.fit call), marked when an op has no frame in
    # the user's code at all; None when unknown (see describe.py).
    entry_frame: Frame | None = None
    _by_key: dict[tuple[int, int], TraceEntry] | None = field(default=None, repr=False)

    @property
    def host(self) -> str:
        return self.dump.host

    def window_index(self) -> dict[tuple[int, int], TraceEntry]:
        if self._by_key is None:
            window = self.traces.window if self.traces else []
            self._by_key = {(e.tensor_id, e.round): e for e in window}
        return self._by_key


@dataclass
class Candidate:
    host: HostScan
    weak: bool
    wall_time: float
    trace: TraceEntry | None = None
    execution: ExecEntry | None = None

    def sort_key(self) -> tuple[bool, float]:
        return (self.weak, self.wall_time)


def input_state(
    host: HostScan, graph_id: str, name: str, rnd: int, depth: int = 0
) -> tuple[TraceEntry | None, bool]:
    """(the input's trace this round if any, whether it was non-finite)."""
    resolved = host.dump.op_for_input(graph_id, name)
    if resolved is None:
        return None, False
    op, slot = resolved
    if slot < len(op.output_tensor_ids):
        entry = host.window_index().get((op.output_tensor_ids[slot], rnd))
        if entry is not None:
            return entry, entry.nonfinite
    if depth < 8 and op.type in PASS_THROUGH_TYPES:
        return None, any(input_state(host, graph_id, i, rnd, depth + 1)[1] for i in op.inputs)
    return None, False


def unrecorded_argument(host: HostScan, graph_id: str, name: str, rnd: int, depth: int = 0) -> bool:
    """Whether an input is (through pass-through ops) a function argument with no trace this round: its
    health is unknown, not finite."""
    resolved = host.dump.op_for_input(graph_id, name)
    if resolved is None:
        return False
    op, slot = resolved
    if slot < len(op.output_tensor_ids) and host.window_index().get((op.output_tensor_ids[slot], rnd)):
        return False
    if op.type in ARGUMENT_TYPES:
        return True
    if depth < 8 and op.type in PASS_THROUGH_TYPES:
        return any(unrecorded_argument(host, graph_id, i, rnd, depth + 1) for i in op.inputs)
    return False


def trace_health(host: HostScan, entry: TraceEntry) -> tuple[TensorHealth | None, str | None]:
    """(health, device name) of one kept trace, re-read from its record."""
    if host.traces is None or host.layout is None:
        return None, None
    data = RecordFile(host.traces.path).read_at(entry.offset)
    event = parse_event(data) if data is not None else None
    if event is None or not event.HasField("graph_execution_trace"):
        return None, None
    trace = event.graph_execution_trace
    return host.layout.health(tensor_values(trace.tensor_proto)), trace.device_name or None


def _op_type(host: HostScan, entry: TraceEntry | None) -> str | None:
    resolved = host.dump.tensors.get(entry.tensor_id) if entry is not None else None
    return resolved[0].type if resolved is not None else None


def _holds_nan(host: HostScan, entry: TraceEntry | None) -> bool:
    """Whether a traced tensor holds NaN (True when its health cannot be read: not known to be NaN-free)."""
    health = trace_health(host, entry)[0] if entry is not None else None
    return health is None or health.nan > 0


def _nan_from_infinities(host: HostScan, after: Candidate) -> Candidate | None:
    """The first op, from `after` on, whose output holds NaN while no input of it does (only infinities came in:
    a softmax over a row that is -inf throughout takes exp(-inf - -inf)). Asked when the only non-finite values
    that came in were constants: such an op is what went wrong with them."""
    if host.traces is None:
        return None
    for entry in host.traces.window:
        if entry.index < 0 or not entry.nonfinite or entry.wall_time < after.wall_time:
            continue
        resolved = host.dump.tensors.get(entry.tensor_id)
        if resolved is None or resolved[0].type in WEAK_ORIGIN_TYPES:
            continue
        op = resolved[0]
        health, _ = trace_health(host, entry)
        if health is None or not health.nan:
            continue
        inputs = [input_state(host, op.graph_id, name, entry.round) for name in op.inputs]
        if any(bad and trace is None for trace, bad in inputs):
            continue  # a non-finite input seen only through pass-through ops: its NaN count is not known
        if any(_holds_nan(host, trace) for trace, bad in inputs if bad):
            continue
        return Candidate(host, False, entry.wall_time, trace=entry)
    return None


def _captured_non_finite(host: HostScan, op: Any) -> bool:
    """Whether an op of a nested graph (a tf.cond branch) reads a tensor it captured from its outer graph that was
    non-finite there: Keras's ``gradient_accumulation_steps`` adds each gradient to its accumulator in a cond
    branch, whose trace can come before the step's own ops in the file, and whose input is only a placeholder
    named after the outer tensor (``adam/cond/add/gradient_tape/.../MatMul:0``). It brings the NaN in."""
    info = host.dump.graphs.get(op.graph_id)
    if info is None or not info.outer_id:
        return False
    bad = {e.tensor_id for e in host.traces.window if e.nonfinite} if host.traces is not None else set()
    for name in op.inputs:
        resolved = host.dump.op_for_input(op.graph_id, name)
        if resolved is None or resolved[0].type not in ARGUMENT_TYPES:
            continue
        captured = resolved[0].name
        for (graph_id, outer_name), outer in host.dump.ops.items():
            if (
                graph_id == info.outer_id
                and captured.endswith("/" + outer_name)
                and bad.intersection(outer.output_tensor_ids)
            ):
                return True
    return False


def graph_candidate(host: HostScan) -> Candidate | None:
    if host.traces is None or not host.traces.window:
        return None
    weak: Candidate | None = None
    came_in: Candidate | None = None  # the first weak origin that brings data in (not a TensorList read)
    constant: Candidate | None = None  # the first constant holding NaN/Inf (a -inf mask)
    for entry in host.traces.window:
        if entry.index < 0 or not entry.nonfinite:
            continue
        resolved = host.dump.tensors.get(entry.tensor_id)
        if resolved is not None:
            op = resolved[0]
            if any(input_state(host, op.graph_id, i, entry.round)[1] for i in op.inputs):
                continue
            if op.frame_ids and made_by_nanlens(host.dump.stack(op.frame_ids)):
                # The guard's own check (an L2Loss of a gradient too large to square, in the step's tf.cond of a
                # gradient accumulation): it reads the step's values; it made nothing of the user's.
                continue
            is_weak = op.type in WEAK_ORIGIN_TYPES or _captured_non_finite(host, op)
            if (
                not is_weak
                and came_in is not None
                and came_in.wall_time <= entry.wall_time
                and any(unrecorded_argument(host, op.graph_id, i, entry.round) for i in op.inputs)
            ):
                continue  # non-finite data came in earlier: the NaN most likely arrived through the argument
        else:
            is_weak = False
        candidate = Candidate(host, is_weak, entry.wall_time, trace=entry)
        if not is_weak:
            return candidate
        if weak is None:
            weak = candidate
        if came_in is None and resolved is not None and resolved[0].type not in LIST_READ_TYPES:
            came_in = candidate
        if constant is None and resolved is not None and resolved[0].type in ("Const", "HostConst"):
            constant = candidate
    if weak is not None and _op_type(host, weak.trace) in ("Const", "HostConst"):
        return _nan_from_infinities(host, weak) or weak
    if weak is not None and constant is not None and _op_type(host, weak.trace) in LIST_READ_TYPES:
        # A decoder's while loop reads back what an earlier iteration made (a softmax over a -inf mask), and its
        # read's trace can come before the mask constant's: the op that turned that -inf into NaN is the origin.
        return _nan_from_infinities(host, constant) or weak
    return weak


def eager_candidate(host: HostScan) -> Candidate | None:
    scan = host.executions
    if scan is None:
        return None
    first = scan.origin
    if first is not None and made_by_nanlens(host.dump.stack(first.frame_ids)):
        # The guard's own check of the step's values (an L2Loss of a gradient too large to square): the first op
        # after it that made NaN/Inf of its own, if the scan read one.
        first = next(
            (
                e
                for e in scan.nonfinite
                if e is not scan.origin
                and not e.downstream
                and not e.is_function_call
                and not made_by_nanlens(host.dump.stack(e.frame_ids))
            ),
            None,
        )
    if first is not None:
        return Candidate(host, first.op_type in WEAK_ORIGIN_TYPES, first.wall_time, execution=first)
    if scan.first_nonfinite_function is not None:
        # A function call whose graph traces are missing: the best we can say is "inside this call".
        fn = scan.first_nonfinite_function
        return Candidate(host, True, fn.wall_time + 1e9, execution=fn)
    return None


def choose_origin(hosts: list[HostScan]) -> Candidate | None:
    candidates = [c for h in hosts for c in (graph_candidate(h), eager_candidate(h)) if c is not None]
    return min(candidates, key=Candidate.sort_key) if candidates else None
