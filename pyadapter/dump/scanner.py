"""``scan_dump``: read a tfdbg2 dump directory (one or several writers) into Findings.

Reads each writer's small files whole (graphs, stack frames, source file names), streams the traces and
executions, picks the causal origin across writers and describes it. Never imports TensorFlow. Damaged
input gives a ScanError (nothing usable) or a partial result whose ``extra["warnings"]`` and
``extra["skipped"]`` say what was missing or cut short.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from pyadapter.dump.describe import (
    activation_into_log,
    loss_input_layer,
    mask_into_softmax,
    masking_select,
    negative_variable_read,
    origin_finding,
    propagated_findings,
    relu_into_divisor,
    summed_exp,
    underflowed_16_bit,
    underflowed_exp,
)
from pyadapter.dump.errors import ScanError
from pyadapter.dump.executions import scan_executions
from pyadapter.dump.files import HostFiles, find_host_files
from pyadapter.dump.graphs import load_host_dump
from pyadapter.dump.health import LAYOUTS
from pyadapter.dump.origin import HostScan, choose_origin
from pyadapter.dump.statement import statement_around
from pyadapter.dump.tfrecord import ReadIssue
from pyadapter.dump.traces import detect_trace_mode, scan_traces
from pyadapter.findings import Findings, Frame

Progress = Callable[[int, int], None]

_MISSING_MEANS = {
    "metadata": "run metadata unknown",
    "source_files": "file names of stack frames unknown, so no source lines",
    "stack_frames": "no source lines for any op",
    "graphs": "graph ops unknown: inputs cannot be checked and graph ops have no source lines",
    "execution": "eager ops and tf.function calls unknown",
    "graph_execution_traces": "no graph tensor values: NaN/Inf inside tf.functions cannot be found",
}
_NO_HEALTH_MODES = (
    "NO_TENSOR",
    "SHAPE",
    "FULL_TENSOR",
    "FULL_NUMERICS",
    "REDUCE_INF_NAN_THREE_SLOTS",
    "UNSPECIFIED",
)


class _ProgressCounter:
    def __init__(self, total: int, callback: Progress | None) -> None:
        self.total = max(total, 1)
        self.done = 0
        self.callback = callback

    def add(self, n: int) -> None:
        self.done += n
        if self.callback:
            self.callback(min(self.done, self.total), self.total)

    def finish(self) -> None:
        if self.callback:
            self.callback(self.total, self.total)


def _scan_host(files: HostFiles, progress: _ProgressCounter, warnings: list[str]) -> HostScan:
    dump = load_host_dump(files, progress.add)
    trace_path = files.path("graph_execution_traces")
    exec_path = files.path("execution")
    mode = (
        detect_trace_mode(trace_path, dump.issues)
        if trace_path and files.size("graph_execution_traces")
        else None
    )
    layout = LAYOUTS.get(mode) if mode else None
    host = HostScan(dump=dump, layout=layout, mode=mode)
    if trace_path and files.size("graph_execution_traces"):
        if layout is not None and layout.reports_health:
            host.traces = scan_traces(trace_path, dump, layout, progress.add)
        elif mode is not None:
            warnings.append(
                f"{files.host}: graph traces were recorded in {mode} mode, which carries no NaN/Inf counts; "
                "record with --mode FULL_HEALTH (or CONCISE_HEALTH / CURT_HEALTH)"
            )
    if exec_path and files.size("execution"):
        host.executions = scan_executions(exec_path, LAYOUTS, progress.add)
        if host.mode is None and host.executions.mode:
            host.mode = host.executions.mode
            host.layout = LAYOUTS.get(host.executions.mode)
            if host.executions.mode in _NO_HEALTH_MODES and host.executions.executions_read:
                warnings.append(
                    f"{files.host}: eager executions were recorded in {host.executions.mode} mode, which carries "
                    "no NaN/Inf counts; record with --mode FULL_HEALTH"
                )
    return host


def _issues(host: HostScan) -> list[ReadIssue]:
    issues = list(host.dump.issues)
    if host.traces and host.traces.issue:
        issues.append(host.traces.issue)
    if host.executions and host.executions.issue:
        issues.append(host.executions.issue)
    return issues


def scan_dump(
    path: str | os.PathLike[str], *, progress: Progress | None = None, entry_frame: Frame | None = None
) -> Findings:
    """Scan a tfdbg2 dump directory for the causal origin of NaN/Inf.

    ``progress(done_bytes, total_bytes)`` is called as the files are read. ``entry_frame`` is the user's line
    that started the run (a bundle's ``model.fit`` call), marked for an origin op made wholly inside
    TensorFlow/Keras code when no user line calls it; the library frame that made such an op is then in
    ``extra["origin_created_in"]``. A finding's file is never a TensorFlow, Keras or installed-package file.
    Raises ScanError (one-line message) when the directory holds nothing scannable.
    """
    started = time.perf_counter()
    dump_dir = os.path.abspath(os.fspath(path))
    groups = find_host_files(dump_dir)
    total = sum(g.total_size for g in groups)
    if total == 0:
        raise ScanError(
            f"the dump files in {dump_dir} are all empty (the run was probably killed before its first flush)"
        )
    counter = _ProgressCounter(total, progress)
    warnings: list[str] = []
    hosts: list[HostScan] = []
    for files in groups:
        for suffix in files.missing():
            warnings.append(f"{files.host}: no .{suffix} file ({_MISSING_MEANS[suffix]})")
        hosts.append(_scan_host(files, counter, warnings))
        hosts[-1].entry_frame = entry_frame
    counter.finish()

    issues = [issue for h in hosts for issue in _issues(h)]
    readable = any(
        h.dump.ops
        or h.dump.frames
        or h.dump.source_files
        or h.dump.metadata
        or (h.traces and h.traces.traces_read)
        or (h.executions and h.executions.executions_read)
        for h in hosts
    )
    if not readable:
        reason = issues[0].describe() if issues else "no records"
        raise ScanError(f"{dump_dir} holds no readable tfdbg2 records ({reason})")
    for issue in issues:
        warnings.append(issue.describe())
    for h in hosts:
        if h.traces and h.traces.ops_missing_from_graphs:
            warnings.append(
                f"{h.host}: {h.traces.ops_missing_from_graphs} traced tensors belong to ops missing from the "
                ".graphs file (their inputs and source lines are unknown)"
            )
        if h.traces and h.traces.undecodable:
            warnings.append(
                f"{h.host}: {h.traces.undecodable} trace records could not be decoded and were skipped"
            )
        if h.executions and h.executions.undecodable:
            warnings.append(f"{h.host}: {h.executions.undecodable} execution records could not be decoded")

    candidate = choose_origin(hosts)
    origin = None
    findings = []
    extra: dict[str, object] = {}
    if candidate is not None:
        located = origin_finding(candidate)
        origin = located.finding
        if located.created_in is not None:
            extra["origin_created_in"] = located.created_in.to_json()
        masked = masking_select(candidate)
        if masked is not None:
            extra["masked_by_where"] = masked
        # What the ops up the origin's inputs made (`pyadapter.cause` names them): each only when found.
        for key, look in (
            ("zeros_from_exp", underflowed_exp),
            ("activation_into_log", activation_into_log),
            ("relu_into_divisor", relu_into_divisor),
            ("mask_into_softmax", mask_into_softmax),
            ("zeros_from_16_bit", underflowed_16_bit),
            ("sum_of_exps", summed_exp),
            ("negative_variable_read", negative_variable_read),
        ):
            found = look(candidate)
            if found is not None:
                extra[key] = found
        if origin is None:
            extra["unlocated_origin"] = {
                "op": located.op_description.to_json(),
                "reason": located.reason_unlocated,
            }
            warnings.append(
                f"the origin op {located.op_description.name} ({located.op_description.type or 'unknown type'}) "
                f"has no source location: {located.reason_unlocated}"
            )
        else:
            findings.append(origin)
            fed = loss_input_layer(candidate, origin.file)
            if fed is not None:
                extra["loss_input_layer"] = fed
            code = candidate.host.dump.source_line(origin.file, origin.line)
            if code is not None:
                extra["origin_code"] = code
                source = candidate.host.dump.source_text(origin.file)
                statement = statement_around(source, origin.line) if source is not None else None
                if statement is not None:
                    extra["origin_statement"] = statement
        findings.extend(propagated_findings(hosts, origin, located.op_description.name))

    modes = sorted({h.mode for h in hosts if h.mode})
    extra["warnings"] = warnings
    extra["skipped"] = [i.to_json() for i in issues]
    extra["scan"] = {
        "seconds": round(time.perf_counter() - started, 3),
        "bytes": total,
        "traces_read": sum(h.traces.traces_read for h in hosts if h.traces),
        "executions_read": sum(h.executions.executions_read for h in hosts if h.executions),
        "stopped_after_incident": any(h.traces.stopped_after_window for h in hosts if h.traces),
        "health_recorded": any(h.layout is not None and h.layout.reports_health for h in hosts),
        "tensorflow_version": next(
            (h.dump.metadata.get("tensorflow_version") for h in hosts if h.dump.metadata), None
        ),
    }
    return Findings(
        source_kind="dump",
        source_path=dump_dir,
        origin=origin,
        findings=findings,
        hosts=sorted(dict.fromkeys(h.host for h in hosts)),  # by name: the files' start times vary run to run
        tensor_debug_mode=modes[0] if len(modes) == 1 else (", ".join(modes) or None),
        extra=extra,
    )
