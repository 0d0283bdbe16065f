"""Turning an origin candidate (and what spread from it) into Findings: health, inputs, lines, message."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

from pyadapter.dump.executions import ExecEntry, read_execution
from pyadapter.dump.frames import (
    innermost_user_frame,
    is_exec_string,
    is_user_file,
    library_frame,
    made_by_nanlens,
    short_path,
    user_frames,
    written_by_the_user,
)
from pyadapter.dump.gradients import forward_op_for, is_gradient_op
from pyadapter.dump.graphs import OpInfo
from pyadapter.dump.layer_site import layer_site
from pyadapter.dump.messages import bad_counts, origin_message
from pyadapter.dump.origin import WEAK_ORIGIN_TYPES, Candidate, HostScan, input_state, trace_health
from pyadapter.dump.traces import TraceEntry
from pyadapter.findings import Finding, Frame, InputHealth, OpRef, TensorHealth

MAX_PROPAGATED = 20
# A notebook cell's code as a file: the kernel's (``/tmp/ipykernel_23468/3539528791.py``) or a replay's
# (``.nanlens/cells/<notebook>-<hash>/cell5.py``).
_KERNEL_CELL_FILE = re.compile(r"[\\/]ipykernel_\d+[\\/]|[\\/]\.nanlens[\\/]cells[\\/]")


@dataclass
class Place:
    """Where to mark an op: its own innermost user line, or, for an op made wholly inside TensorFlow/Keras code,
    a stand-in user line (``fallback`` says which) with the library frame that made it in ``created_in``."""

    mark: Frame | None
    users: list[Frame]
    created_in: Frame | None = None
    fallback: str | None = None

    def note(self) -> str:
        """The sentence added to a finding's message when the op has no line of its own in the user's code."""
        if self.created_in is None:
            return ""
        where = f"{short_path(self.created_in.file)}:{self.created_in.line}"
        if self.created_in.function:
            where += f" in {self.created_in.function}"
        text = f"; the op was made inside TensorFlow/Keras code ({where}), not on a line of your code"
        if is_exec_string(self.created_in.file):
            # exec(open("helpers.py").read()): the user's code, with no file name to mark.
            within = f" in {self.created_in.function}" if self.created_in.function else ""
            text = (
                f"; the op was made in code run from a string by exec() (its line {self.created_in.line}{within}), "
                "which has no file to mark"
            )
        if self.fallback:
            text += f", so the line marked is {self.fallback}"
        return text


def _location(
    host: HostScan, frame_ids: tuple[str, ...], graph_id: str | None = None, op: OpRef | None = None
) -> Place:
    """`_place`, saying that an op made in exec'd code was made in the user's code (not TensorFlow/Keras's)."""
    place = _place(host, frame_ids, graph_id, op)
    stack = host.dump.stack(frame_ids)
    executed = next((f for f in reversed(stack) if is_exec_string(f.file)), None)
    if executed is None:
        return place
    inner = place.mark is None or stack.index(executed) > max(
        (i for i, f in enumerate(stack) if f == place.mark), default=-1
    )
    if place.created_in is not None or inner:
        # The op's own line is in exec'd code (no file to mark): say so, and that the line marked only ran it.
        place.created_in = executed
        place.fallback = place.fallback or "the line of yours that ran it"
    return place


def _place(
    host: HostScan, frame_ids: tuple[str, ...], graph_id: str | None = None, op: OpRef | None = None
) -> Place:
    """Where to mark an op: never a TensorFlow, Keras, installed-package or NaN Lens file.

    An op with no frame in the user's code (e.g. one made by Keras's own loss while a bundle's step is replayed
    by calling ``train_step`` directly) is marked at the user line of the function call that ran its graph,
    else at ``host.entry_frame`` (a bundle's training call); with neither, ``mark`` is None.
    """
    stack = host.dump.stack(frame_ids)
    users = user_frames(stack)
    mark = innermost_user_frame(stack)
    if mark is not None and _is_training_call(host, mark):
        # Made inside Keras under the user's fit line (a replay by re-entry runs the program's own fit).
        built = _layer_place(host, op, mark, users, library_frame(stack))
        if built is not None:
            return built
    elif mark is not None and op is not None and _top_layer_op(op) and _keras_layer_called_below(stack, mark):
        # Made inside a layer of a Keras model the user's line called: a custom loop's ``logits = model(x,
        # training=True)`` on a functional model's GlobalAveragePooling1D. The line that builds the layer is the one
        # to read and change (its mask handling, its activation), as under fit. Only a layer of the called model
        # itself (``functional_1/global_average_pooling1d_1/truediv``): a subclass's nested layers are named by
        # their classes' counts across the file, which their construction order need not follow.
        built = _layer_place(host, op, mark, users, library_frame(stack), f"line {mark.line} called it")
        if built is not None:
            return built
    if mark is not None or not stack:
        return Place(mark, users)
    created_in = library_frame(stack)
    caller = _calling_user_frame(host, graph_id) if graph_id else None
    if caller is not None:
        return Place(caller, [], created_in, "your call of its tf.function")
    if host.entry_frame is not None:
        built = _layer_place(host, op, host.entry_frame, [], created_in)
        return built or Place(host.entry_frame, [], created_in, "your training call")
    return Place(None, [], created_in)


_TRAINING_CALL = re.compile(r"\.(fit|train_on_batch)\(")


def _is_training_call(host: HostScan, frame: Frame) -> bool:
    text = host.dump.source_line(frame.file, frame.line) or ""
    return bool(_TRAINING_CALL.search(text))


def _layer_place(
    host: HostScan,
    op: OpRef | None,
    training_call: Frame,
    users: list[Frame],
    created_in: Frame | None,
    ran_it: str = "your training call ran it",
) -> Place | None:
    """An op Keras made in a layer under the user's training call (or a call of the model or layer): the line of
    the user's file that builds that layer (`layer_site`), or None when the file does not name it once. A backward
    op is placed at its forward op's line, and that op's name says the layer."""
    if op is None or created_in is None:
        return None
    site = layer_site(op.forward_op or op.name, op.type, training_call.file)
    if site is None:
        return None
    frame = Frame(site.file or training_call.file, site.line, "")
    return Place(frame, users, created_in, f"{site.what} ({ran_it})")


# A Keras layer's (or model's) call: ``Layer.__call__`` in Keras 3, ``base_layer`` in tf_keras.
_KERAS_LAYER_CALL = re.compile(
    r"[/\\](keras[/\\]src[/\\]layers[/\\]layer\.py|tf_keras[/\\].*base_layer\.py)$"
)


def _top_layer_op(op: OpRef) -> bool:
    """Whether the op's name is ``model/layer/op``: made in a layer of the model called, not deeper."""
    return (op.forward_op or op.name).count("/") == 2


def _keras_layer_called_below(stack: list[Frame], mark: Frame) -> bool:
    """Whether the op was made inside a Keras layer that the user's line `mark` called (a frame of the layer call
    machinery below it, and no user frame below that)."""
    try:
        below = stack[stack.index(mark) + 1 :]
    except ValueError:
        return False
    return any(_KERAS_LAYER_CALL.search(f.file) for f in below)


def _calling_user_frame(host: HostScan, graph_id: str) -> Frame | None:
    """The innermost user frame of a recorded eager call of ``graph_id`` (or of a graph enclosing it)."""
    scan = host.executions
    if scan is None:
        return None
    enclosing: list[str] = []
    current: str | None = graph_id
    while current and current not in enclosing and len(enclosing) < 16:
        enclosing.append(current)
        info = host.dump.graphs.get(current)
        current = info.outer_id if info else None
    calls = [e for e in scan.nonfinite if e.is_function_call]
    for gid in enclosing:
        for call in calls:
            if call.graph_id == gid:
                frame = innermost_user_frame(host.dump.stack(call.frame_ids))
                if frame is not None:
                    return frame
    return None


def _graph_name(host: HostScan, graph_id: str) -> str | None:
    info = host.dump.graphs.get(graph_id)
    return (info.name or None) if info else None


def _graph_inputs(host: HostScan, op: OpInfo, rnd: int) -> list[InputHealth]:
    out = []
    for name in op.inputs:
        entry, _bad = input_state(host, op.graph_id, name, rnd)
        health = trace_health(host, entry)[0] if entry is not None else None
        out.append(InputHealth(name=name, health=health))
    return out


def _eager_inputs(host: HostScan, entry: ExecEntry) -> list[InputHealth]:
    scan = host.executions
    out = []
    for tensor_id in entry.input_ids:
        name = f"tensor #{tensor_id}"
        health = None
        if scan is not None and tensor_id in scan.producers:
            _index, offset, slot = scan.producers[tensor_id]
            producer = read_execution(scan.path, offset, host.layout)
            if producer is not None:
                name = f"{producer.op_type}:{slot} (tensor #{tensor_id})"
                if slot < len(producer.healths):
                    health = producer.healths[slot]
        out.append(InputHealth(name=name, health=health))
    return out


@dataclass
class LocatedFinding:
    finding: Finding | None
    op_description: OpRef
    reason_unlocated: str | None = None
    # The TensorFlow/Keras frame that made the op when no line of the user's code did (then the finding, if
    # any, is marked at a stand-in user line).
    created_in: Frame | None = None


def _unlocated_reason(place: Place, frame_ids: tuple[str, ...]) -> str:
    if place.created_in is not None:
        where = f"{short_path(place.created_in.file)}:{place.created_in.line}"
        return f"it was made inside TensorFlow/Keras code ({where}) and no line of your code is on its stack"
    return "its stack frames are missing from the dump" if frame_ids else "the dump has no stack for it"


def graph_finding(
    host: HostScan, entry: TraceEntry, role: str, origin_name: str | None = None
) -> LocatedFinding:
    resolved = host.dump.tensors.get(entry.tensor_id)
    health, device = trace_health(host, entry)
    if resolved is None:
        ref = OpRef(name=f"tensor #{entry.tensor_id}", type="", host=host.host, trace_index=entry.index)
        return LocatedFinding(None, ref, "its op is missing from the .graphs file")
    op, slot = resolved
    ref = OpRef(
        name=op.name,
        type=op.type or "unknown",
        graph=_graph_name(host, op.graph_id),
        host=host.host,
        device=device,
        trace_index=entry.index,
        step=entry.round - 1,
    )
    inputs = _graph_inputs(host, op, entry.round) if role != "propagated" else []
    frame_ids = op.frame_ids
    effective_role = role
    message_op = op.type or op.name
    if role == "origin" and is_gradient_op(op):
        forward = forward_op_for(host.dump, op)
        if forward is not None:
            ref.forward_op = forward.name
            frame_ids = forward.frame_ids
            effective_role = "backward-origin"
            grad_place = _location(host, op.frame_ids)
            grad_mark = grad_place.mark if grad_place.created_in is None else None
            taken = ""
            if grad_mark is not None and grad_mark.cell is not None:
                taken = f", taken at cell {grad_mark.cell + 1}, line {grad_mark.line}"
            elif grad_mark is not None and not _KERNEL_CELL_FILE.search(grad_mark.file):
                # (a notebook cell's file, the kernel's or a replay's, is no name a user knows: left out)
                taken = f", taken at {os.path.basename(grad_mark.file)}:{grad_mark.line}"
            # "the gradient of Sqrt Sqrt" when the op is named after its type: the name once.
            forward_text = forward.name if forward.name == forward.type else f"{forward.type} {forward.name}"
            subject = f"{message_op} (the gradient of {forward_text}{taken})"
            message = origin_message(
                message_op, health, inputs, subject=subject, where=" in the backward pass"
            )
        else:
            message = origin_message(message_op, health, inputs, where=" in the backward pass")
    elif role == "origin" and op.type in WEAK_ORIGIN_TYPES:
        message = (
            f"{message_op} {op.name} brought in data that already held {bad_counts(health)}: no op in the dump "
            "made it, it came with the data"
        )
    elif role == "origin":
        message = origin_message(message_op, health, inputs)
    else:
        message = f"{message_op} carried {bad_counts(health)} downstream of {origin_name}"
    if slot and role == "origin":
        message += f" (output {slot})"
    return _placed_finding(host, frame_ids, op.graph_id, effective_role, ref, health, inputs, message)


def eager_finding(
    host: HostScan, entry: ExecEntry, role: str, origin_name: str | None = None
) -> LocatedFinding:
    bad = [h for h in entry.healths if h is not None and not h.is_finite]
    health = bad[0] if bad else (entry.healths[0] if entry.healths else None)
    ref = OpRef(name=entry.op_type, type=entry.op_type, host=host.host, execution_index=entry.index)
    if entry.is_function_call:
        ref.graph = _graph_name(host, entry.graph_id)
    inputs = _eager_inputs(host, entry) if role == "origin" else []
    if role == "origin":
        message = origin_message(entry.op_type, health, inputs)
        if entry.is_function_call:
            message += " inside the function (its graph traces are missing from the dump)"
    else:
        message = f"{entry.op_type} carried {bad_counts(health)} downstream of {origin_name}"
    return _placed_finding(host, entry.frame_ids, entry.graph_id or None, role, ref, health, inputs, message)


def _placed_finding(
    host: HostScan,
    frame_ids: tuple[str, ...],
    graph_id: str | None,
    role: str,
    ref: OpRef,
    health: TensorHealth | None,
    inputs: list[InputHealth],
    message: str,
) -> LocatedFinding:
    """Put a finding on the line its stack points at, or say why it has no line."""
    place = _location(host, frame_ids, graph_id, ref)
    if place.mark is None:
        return LocatedFinding(None, ref, _unlocated_reason(place, frame_ids), place.created_in)
    finding = Finding(
        file=place.mark.file,
        line=place.mark.line,
        role=role,  # type: ignore[arg-type]
        op=ref,
        health=health,
        inputs=inputs,
        stack=place.users,
        message=message + place.note(),
    )
    return LocatedFinding(finding, ref, created_in=place.created_in)


def origin_finding(candidate: Candidate) -> LocatedFinding:
    if candidate.trace is not None:
        return graph_finding(candidate.host, candidate.trace, "origin")
    assert candidate.execution is not None
    return eager_finding(candidate.host, candidate.execution, "origin")


def propagated_findings(hosts: list[HostScan], origin: Finding | None, origin_name: str) -> list[Finding]:
    """Distinct user lines whose ops carried NaN/Inf downstream of the origin (bounded)."""
    seen: set[tuple[str, int]] = set()
    if origin is not None:
        seen.add((origin.file, origin.line))
    out: list[Finding] = []
    for host in hosts:
        streams: list[tuple[float, str, object]] = []
        if host.traces is not None:
            first_round: dict[str, int] = {}
            for entry in host.traces.window:
                if entry.index >= 0 and entry.nonfinite:
                    first_round.setdefault(entry.graph_id, entry.round)
                    if (
                        entry.round == first_round[entry.graph_id]
                        and _carries(host, entry)
                        and not _bookkeeping(host, entry)
                    ):
                        streams.append((entry.wall_time, "trace", entry))
        if host.executions is not None:
            for ex in host.executions.nonfinite:
                # A tf.function's call (``__inference_train_step_12``) is not a line the NaN spread to: its ops
                # are, and they are the traces above; its call line is the loop's.
                if ex.downstream and not (ex.is_function_call and host.traces is not None):
                    streams.append((ex.wall_time, "exec", ex))
        streams.sort(key=lambda s: s[0])
        tried = 0
        for _, kind, item in streams:
            if len(out) >= MAX_PROPAGATED or tried > 400:
                break
            # Cheap pre-check on the op's own frames before reading its health back.
            frame_ids = _frame_ids_of(host, kind, item)
            stack = host.dump.stack(frame_ids) if frame_ids else []
            mark = innermost_user_frame(stack)
            if mark is None or (mark.file, mark.line) in seen or not is_user_file(mark.file):
                continue
            if made_by_nanlens(stack):
                continue  # a check of the guard or of the replay reading the NaN: not a line of the user's
            tried += 1
            located = (
                graph_finding(host, item, "propagated", origin_name)  # type: ignore[arg-type]
                if kind == "trace"
                else eager_finding(host, item, "propagated", origin_name)  # type: ignore[arg-type]
            )
            f = located.finding
            if f is None or (f.file, f.line) in seen:
                continue
            seen.add((f.file, f.line))
            out.append(f)
    return out


SELECT_TYPES = ("Select", "SelectV2")


def masking_select(candidate: Candidate) -> dict[str, object] | None:
    """The forward ``tf.where`` that discarded what a graph origin made: a Select of the origin's round with a
    finite output and a non-finite input (``tf.where(y > 0, y * log(y), 0.0)`` at y == 0). Its gradient still runs
    through the branch it does not select (0 * inf is NaN), so such a step fails with a finite loss. As
    ``{"op", "file", "line"}`` (the user's line of the select); None when no select masked anything."""
    host, origin = candidate.host, candidate.trace
    if origin is None or host.traces is None:
        return None
    for entry in host.traces.window:
        if (
            entry.index < 0
            or entry.nonfinite
            or entry.round != origin.round
            or entry.graph_id != origin.graph_id
        ):
            continue
        if entry.wall_time < origin.wall_time:
            continue
        resolved = host.dump.tensors.get(entry.tensor_id)
        if resolved is None or resolved[0].type not in SELECT_TYPES or is_gradient_op(resolved[0]):
            continue
        op = resolved[0]
        if not any(input_state(host, op.graph_id, name, entry.round)[1] for name in op.inputs):
            continue
        stack = host.dump.stack(op.frame_ids)
        if not written_by_the_user(stack):
            continue  # a where inside Keras (a metric, a masked loss) is no choice of the user's code
        mark = innermost_user_frame(stack)
        return {"op": op.name, "file": mark.file if mark else None, "line": mark.line if mark else None}
    return None


def _upstream(
    host: HostScan,
    start: OpInfo,
    depth: int,
    slot: int | None = None,
    through: frozenset[str] | None = None,
) -> Iterator[OpInfo]:
    """The ops up `start`'s inputs, nearest first (breadth first, at most `depth` ops back, each once). `slot`: up
    that input of `start` only (a division's divisor); `through`: past ops of those types only (the others are
    yielded, not walked past)."""
    frontier, seen = [start], {start.name}
    for _ in range(depth):
        following = []
        for op in frontier:
            names = op.inputs if slot is None or op is not start else op.inputs[slot : slot + 1]
            for name in names:
                found = host.dump.op_for_input(op.graph_id, name)
                if found is None or found[0].name in seen:
                    continue
                seen.add(found[0].name)
                yield found[0]
                if through is None or found[0].type in through:
                    following.append(found[0])
        frontier = following


def _output_health(host: HostScan, op: OpInfo, rnd: int) -> TensorHealth | None:
    entry = host.window_index().get((op.output_tensor_ids[0], rnd)) if op.output_tensor_ids else None
    return trace_health(host, entry)[0] if entry is not None else None


def _user_line(host: HostScan, op: OpInfo) -> tuple[str | None, int | None]:
    mark = innermost_user_frame(host.dump.stack(op.frame_ids))
    return (mark.file, mark.line) if mark else (None, None)


def _marked_at(host: HostScan, op: OpInfo) -> Frame | None:
    """The user's line an op is marked at, as a finding's is (`_place`): for a layer's op under the training call
    (a functional model's output Dense), the line that builds the layer."""
    return _place(
        host, op.frame_ids, op.graph_id, OpRef(name=op.name, type=op.type or "unknown", host=host.host)
    ).mark


def _origin_op(candidate: Candidate) -> OpInfo | None:
    if candidate.trace is None:
        return None
    resolved = candidate.host.dump.tensors.get(candidate.trace.tensor_id)
    return resolved[0] if resolved is not None else None


def underflowed_exp(candidate: Candidate, depth: int = 6) -> dict[str, object] | None:
    """The ``Exp`` whose zeros reached a graph origin that took zeros in (a log of a mixture's density summed from
    ``exp(-0.5 * z**2)`` terms that all underflowed to 0 in float32): the nearest Exp up the origin's inputs (at most
    `depth` ops back, same round) whose output held zeros. As ``{"op", "file", "line", "zeros"}``; None when none did.
    exp(x) is 0 in float32 below about -103: what the log then takes is no bad value of the data, but the sum
    computed outside log space."""
    origin = _origin_op(candidate)
    if origin is None or candidate.trace is None:
        return None
    quotient: dict[str, object] | None = None
    for producer in _upstream(candidate.host, origin, depth):
        if producer.type != "Exp":
            continue
        health = _output_health(candidate.host, producer, candidate.trace.round)
        if health is not None and health.is_finite and health.zero:
            file, line = _user_line(candidate.host, producer)
            found: dict[str, object] = {"op": producer.name, "file": file, "line": line, "zeros": health.zero}
            taken = _log_input_type(candidate.host, origin)
            if taken is not None:
                found["log_of"] = taken
            return found
        if quotient is None and health is not None and health.is_finite:
            quotient = _softmax_quotient_zeros(candidate, origin, producer)
    return quotient


_PASSING_TYPES = frozenset({"Identity", "Cast", "Reshape", "ExpandDims", "Squeeze", "GatherV2", "Transpose"})


def _log_input_type(host: HostScan, origin: OpInfo) -> str | None:
    """The type of the op whose values the origin takes (past ops that only move or cast them): ``Exp`` for a log
    of an exp itself (a Poisson rate ``exp(out)`` whose log the loss takes), ``Cumsum`` for a Cox model's
    ``log(cumsum(exp(risk)))``, a ``Sum`` for a mixture's density. The fix is the log-space form of that one."""
    op = origin
    for _ in range(6):
        found = host.dump.op_for_input(op.graph_id, op.inputs[0]) if op.inputs else None
        if found is None:
            return None
        op = found[0]
        if op.type not in _PASSING_TYPES:
            return op.type
    return None


def _softmax_quotient_zeros(candidate: Candidate, origin: OpInfo, exp: OpInfo) -> dict[str, object] | None:
    """A log's input made by dividing finite exps (a softmax by hand, ``exp(s / 0.01) / reduce_sum(...)``) whose
    quotient underflowed to 0 though no exp did (9.8e-24 / 3.2e16): as `underflowed_exp`'s record with
    ``"quotient": True``, when the log's own input is that division and holds zeros; else None."""
    found = candidate.host.dump.op_for_input(origin.graph_id, origin.inputs[0]) if origin.inputs else None
    if found is None or found[0].type not in _DIVIDING_TYPES or candidate.trace is None:
        return None
    health = _output_health(candidate.host, found[0], candidate.trace.round)
    if health is None or not health.is_finite or not health.zero:
        return None
    file, line = _user_line(candidate.host, exp)
    return {"op": exp.name, "file": file, "line": line, "zeros": health.zero, "quotient": True}


def _marked_record(host: HostScan, op: OpInfo) -> dict[str, object]:
    """``{"op", "file", "line", "cell"}`` of an op up an origin's inputs, where its finding would be marked."""
    mark = _marked_at(host, op)
    return {
        "op": op.name,
        "file": mark.file if mark is not None else None,
        "line": mark.line if mark is not None else None,
        "cell": mark.cell if mark is not None else None,
    }


def activation_into_log(candidate: Candidate, depth: int = 3) -> dict[str, object] | None:
    """The activation a graph origin ``Log`` takes, through at most `depth` ops: a ``Sigmoid`` (``log(1 -
    sigmoid(x))``: a GAN's hand-written generator loss, whose ``1 - d`` is exactly 0 in float32 once the logit
    passes 17; a focal loss's ``log(p_t)``), a ``Relu`` (a variance head ``relu(raw)``, 0 for every negative
    input) or a ``Softmax`` (a cross-entropy by hand, ``log(reduce_sum(softmax(s * logits) * onehot))``). As ``{"op", "type", "file", "line"}``; None when no such activation is that near. An eager origin
    (``tf.config.run_functions_eagerly(True)``, set to step through a step) is followed through the executions
    that made its inputs."""
    if candidate.execution is not None:
        return _eager_activation_into_log(candidate.host, candidate.execution, depth)
    origin = _origin_op(candidate)
    if origin is None or origin.type != "Log":
        return None
    for producer in _upstream(candidate.host, origin, depth):
        if producer.type in ("Sigmoid", "Relu", "Softmax"):
            return {**_marked_record(candidate.host, producer), "type": producer.type}
    return None


# Ops a ReLU's zero passes through, still a zero in its place, on its way to a divisor: slices, products, powers,
# reshapes, and the sums and differences of such terms (a 2x2 determinant a * d - b * c of a Cholesky factor's
# diagonal). A matmul, a bias or a nonlinearity mixes other values in and ends the walk.
_ZERO_KEEPING_TYPES = _PASSING_TYPES | frozenset(
    {
        "Mul",
        "Square",
        "Pow",
        "Sqrt",
        "Abs",
        "Neg",
        "Sub",
        "AddV2",
        "StridedSlice",
        "Slice",
        "Pack",
        "ConcatV2",
        "Prod",
        "Sum",
        "Mean",
        "MatrixDeterminant",
    }
)
# The input a division op divides by.
# A Pow's base is one too: 0 ** -0.5 is inf (a Tweedie loss's mu ** (1 - rho) on a ReLU's output, s41f p7).
_DIVISOR_SLOT = {"RealDiv": 1, "Div": 1, "FloorDiv": 1, "DivNoNan": 1, "Reciprocal": 0, "Inv": 0, "Pow": 0}


def relu_into_divisor(candidate: Candidate, depth: int = 8) -> dict[str, object] | None:
    """The ``Relu`` whose zeros made a graph origin division's divisor 0, up ops that keep a zero in its place
    (`_ZERO_KEEPING_TYPES`): a covariance's Cholesky diagonal from ``Dense(2, activation="relu")``, whose det
    ``l11**2 * l22**2`` is 0 wherever the head's ReLU is. "+ 1e-7 on the divisor", followed, moved the NaN to the
    log of the same det; the ReLU is what to change. As `activation_into_log`'s record; None when the divisor's
    zeros come from elsewhere (the ReLU's output held no zero in the step, or no ReLU is that near)."""
    origin = _origin_op(candidate)
    slot = _DIVISOR_SLOT.get(origin.type) if origin is not None else None
    if origin is None or slot is None or len(origin.inputs) <= slot or candidate.trace is None:
        return None
    host = candidate.host
    for op in _upstream(host, origin, depth, slot, _ZERO_KEEPING_TYPES):
        if op.type != "Relu":
            continue
        health = _output_health(host, op, candidate.trace.round)
        if health is not None and health.zero:
            return {**_marked_record(host, op), "type": op.type, "zeros": health.zero}
    return None


# Ops a small learned parameter passes through on its way to a log's input (``r = 1 / alpha``, ``mu / (r + mu)``):
# elementwise arithmetic only, so a layer's bias (reached through a BiasAdd) is never taken for it.
_ELEMENTWISE_TYPES = frozenset(
    {
        "AddV2",
        "Add",
        "Sub",
        "Mul",
        "RealDiv",
        "Div",
        "DivNoNan",
        "Reciprocal",
        "Neg",
        "Square",
        "Identity",
        "Cast",
    }
    | {"Reshape", "ExpandDims", "Squeeze", "BroadcastTo", "Maximum", "Minimum"}
)
# A read of more values than this is a layer's weight, not a learned dispersion, scale or variance.
_SMALL_VARIABLE = 64
_NEGATIVE_DOMAIN_TYPES = frozenset({"Log", "Sqrt", "Rsqrt", "Lgamma", "Digamma", "Pow", "Log1p"})


def negative_variable_read(candidate: Candidate, depth: int = 8) -> dict[str, object] | None:
    """The read of a small variable whose values were all negative, up elementwise arithmetic from a graph origin
    that took negatives (a negative binomial's dispersion ``alpha``, read as ``r = 1 / alpha``, carried below 0 by
    SGD: the log of ``mu / (r + mu)`` is NaN). "Keep the log's input positive", followed, kept the variable going
    wrong (s41f p3); the variable is what to change. As ``{"op", "file", "line", "cell", "size", "negatives"}``;
    None when the origin's input held no negative or no such read is that near."""
    origin = _origin_op(candidate)
    if origin is None or origin.type not in _NEGATIVE_DOMAIN_TYPES or candidate.trace is None:
        return None
    host = candidate.host
    took_negatives = False
    for name in origin.inputs:
        entry = input_state(host, origin.graph_id, name, candidate.trace.round)[0]
        health = trace_health(host, entry)[0] if entry is not None else None
        took_negatives = took_negatives or bool(health is not None and health.neg)
    if not took_negatives:
        return None
    for op in _upstream(host, origin, depth, None, _ELEMENTWISE_TYPES):
        if op.type != "ReadVariableOp":
            continue
        health = _output_health(host, op, candidate.trace.round)
        if (
            health is not None
            and health.is_finite
            and health.size is not None
            and 0 < health.size <= _SMALL_VARIABLE
            and health.neg == health.size
        ):
            return {**_marked_record(host, op), "size": health.size, "negatives": health.neg}
    return None


def mask_into_softmax(candidate: Candidate, depth: int = 6) -> dict[str, object] | None:
    """The constant of -inf a graph origin ``Log`` of a softmax's zeros has behind the softmax: a ranking model's
    ``tf.where(mask > 0, scores, -inf)`` on padded documents. The log's words were "take tf.nn.log_softmax", which,
    followed, kept the -inf that the loss multiplies by a 0 target (NaN again, s39b listnet); the mask is the
    change. As ``{"op", "file", "line", "cell"}``; None when no softmax is that near or no such constant is behind
    it."""
    origin = _origin_op(candidate)
    if origin is None or origin.type != "Log" or candidate.trace is None:
        return None
    host = candidate.host
    softmax = next((op for op in _upstream(host, origin, 3) if op.type == "Softmax"), None)
    if softmax is None:
        return None
    for producer in _upstream(host, softmax, depth):
        if producer.type not in ("Const", "HostConst"):
            continue
        health = _output_health(host, producer, candidate.trace.round)
        if health is None or not health.neg_inf:
            continue
        return _marked_record(host, producer)
    return None


def _eager_activation_into_log(host: HostScan, entry: ExecEntry, depth: int) -> dict[str, object] | None:
    """`activation_into_log` for an eager ``Log``: the executions up its inputs, nearest first."""
    scan = host.executions
    if entry.op_type != "Log" or scan is None:
        return None
    frontier = [entry]
    for _ in range(depth):
        following = []
        for current in frontier:
            for tensor_id in current.input_ids:
                if tensor_id not in scan.producers:
                    continue
                producer = read_execution(scan.path, scan.producers[tensor_id][1], host.layout)
                if producer is None:
                    continue
                if producer.op_type in ("Sigmoid", "Relu"):
                    ref = OpRef(name=producer.op_type, type=producer.op_type, host=host.host)
                    mark = _place(host, producer.frame_ids, producer.graph_id or None, ref).mark
                    return {
                        "op": producer.op_type,
                        "type": producer.op_type,
                        "file": mark.file if mark is not None else None,
                        "line": mark.line if mark is not None else None,
                        "cell": mark.cell if mark is not None else None,
                    }
                following.append(producer)
        frontier = following
    return None


# bfloat16 has float32's range: its zeros are float32's too.
SIXTEEN_BIT_DTYPES = frozenset({"float16", "half"})


def underflowed_16_bit(candidate: Candidate, depth: int = 8) -> dict[str, object] | None:
    """The 16-bit op whose zeros reached a graph origin that took zeros in: under ``mixed_float16`` a softmax output
    layer computes in float16, where a small probability is 0 (below 6e-8), and Keras's loss casts it to float32
    before its log. The nearest op up the origin's inputs (at most `depth` back, same round) whose float16 output
    held zeros, as ``{"op", "type", "dtype", "file", "line", "zeros"}``; None when none did."""
    origin = _origin_op(candidate)
    if origin is None or candidate.trace is None:
        return None
    for producer in _upstream(candidate.host, origin, depth):
        health = _output_health(candidate.host, producer, candidate.trace.round)
        dtype = (health.dtype or "").lower() if health is not None else ""
        if health is not None and dtype in SIXTEEN_BIT_DTYPES and health.is_finite and health.zero:
            mark = _marked_at(candidate.host, producer)
            file, line = (mark.file, mark.line) if mark is not None else (None, None)
            return {
                "op": producer.name,
                "type": producer.type,
                "dtype": dtype,
                "file": file,
                "line": line,
                "zeros": health.zero,
            }
    return None


# Ops that add up their inputs' values: a sum of finite exps overflows in them, not in the exp.
SUMMING_TYPES = frozenset(
    {"Sum", "Mean", "AddN", "AddV2", "Add", "Cumsum", "MatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum"}
)
_DIVIDING_TYPES = frozenset({"RealDiv", "Div", "TrueDiv"})


def summed_exp(candidate: Candidate, depth: int = 4) -> dict[str, object] | None:
    """The ``Exp`` whose finite terms a graph origin summed past float32's range (a hand-written softmax's or
    contrastive loss's ``reduce_sum(exp(sim / tau))``: each exp below 3.4e38, their sum above): the nearest Exp up a
    summing origin's inputs whose output was finite. As ``{"op", "file", "line", "divided_at"}``, where
    ``divided_at`` is the user's line of a division feeding the exp (``sim / tau``: a temperature that shrinks
    grows every term as 1/tau) or None. None when the origin sums no finite exp."""
    origin = _origin_op(candidate)
    if (
        origin is None
        or candidate.trace is None
        or origin.type not in SUMMING_TYPES
        or is_gradient_op(origin)
    ):
        return None
    host, rnd = candidate.host, candidate.trace.round
    for producer in _upstream(host, origin, depth):
        if producer.type != "Exp":
            continue
        health = _output_health(host, producer, rnd)
        if health is None or not health.is_finite:
            return None  # the exp overflowed itself: the origin would be the exp, not its sum
        file, line = _user_line(host, producer)
        divided_at = next(
            (_user_line(host, op)[1] for op in _upstream(host, producer, 2) if op.type in _DIVIDING_TYPES),
            None,
        )
        return {"op": producer.name, "file": file, "line": line, "divided_at": divided_at}
    return None


def loss_input_layer(candidate: Candidate, path: str) -> dict[str, object] | None:
    """For an origin that Keras's compiled loss made (``compile_loss/poisson/Log`` taking the log of a prediction a
    linear output layer drove below 0): the layer of the user's file (`path`, the training call's) whose output
    the loss took, the nearest up the origin's inputs that `layer_site` finds. As ``{"loss", "op", "file", "line",
    "what"}``; None for an origin of the user's own code, or when no layer is found (the fit line stays marked).

    A backward origin differentiating such an op (the gradient of ``compile_loss/categorical_crossentropy/Cast``
    cast back to a float16 output layer's dtype) gets the same, with ``"backward": True``, the layer's op and its
    output's dtype, and no line when the layer is not in `path` (a notebook's cell): the op names the layer."""
    origin = _origin_op(candidate)
    backward = origin is not None and is_gradient_op(origin)
    if origin is not None and backward:
        origin = forward_op_for(candidate.host.dump, origin)
    if origin is None or not origin.name.startswith("compile_loss/"):
        return None
    if written_by_the_user(candidate.host.dump.stack(origin.frame_ids)):
        return (
            None  # the user's own Loss subclass (Keras scopes it compile_loss/ too): its line is the change
        )
    scopes = origin.name.split("/")
    loss = scopes[1] if len(scopes) > 2 else ""
    for producer in _upstream(candidate.host, origin, 6):
        if producer.name.startswith(("compile_loss/", "compile_metrics/")) or is_gradient_op(producer):
            continue
        site = layer_site(producer.name, producer.type, path)
        if site is not None and not backward:
            return {
                "loss": loss,
                "op": producer.name,
                "file": site.file or path,
                "line": site.line,
                "what": site.what,
            }
        if backward and "/" in producer.name:
            health = (
                _output_health(candidate.host, producer, candidate.trace.round) if candidate.trace else None
            )
            return {
                "loss": loss,
                "op": producer.name,
                "file": site.file or path if site is not None else None,
                "line": site.line if site is not None else None,
                "what": site.what if site is not None else None,
                "dtype": health.dtype if health is not None else None,
                "backward": True,
            }
    return None


def _carries(host: HostScan, entry: TraceEntry) -> bool:
    """Whether a non-finite trace got its NaN/Inf from an input (or brought it in), i.e. did not make it."""
    resolved = host.dump.tensors.get(entry.tensor_id)
    if resolved is None:
        return False
    op = resolved[0]
    if op.type in WEAK_ORIGIN_TYPES:
        return True
    return any(input_state(host, op.graph_id, i, entry.round)[1] for i in op.inputs)


# Reads of a variable (a metric's running total, read at the train_step's ``return {...}``): the NaN did not spread
# through the user's computation there; listed, they read as noise beside the lines it did pass. (A constant of
# -inf stays: it is how the cause finds the mask a softmax turned into NaN, `pyadapter.cause.classify`.)
_HOLDING_TYPES = frozenset({"ReadVariableOp"})


def _bookkeeping(host: HostScan, entry: TraceEntry) -> bool:
    resolved = host.dump.tensors.get(entry.tensor_id)
    return resolved is not None and resolved[0].type in _HOLDING_TYPES


def _frame_ids_of(host: HostScan, kind: str, item: object) -> tuple[str, ...]:
    if kind == "exec":
        return item.frame_ids  # type: ignore[attr-defined]
    resolved = host.dump.tensors.get(item.tensor_id)  # type: ignore[attr-defined]
    return resolved[0].frame_ids if resolved else ()
