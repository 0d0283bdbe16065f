"""Reading a dump the way the scanner does, keeping what it reads (ops, the incident window, executions).

``scan_dump`` returns Findings only; the pictures need the tables behind them. This reads each writer with the
scanner's own public pieces (``load_host_dump``, ``scan_traces``, ``scan_executions``) and picks the origin with
``choose_origin``, so the picture's origin is the findings' origin.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pyadapter.dump.errors import ScanError
from pyadapter.dump.executions import scan_executions
from pyadapter.dump.files import HostFiles, find_host_files
from pyadapter.dump.graphs import load_host_dump
from pyadapter.dump.health import LAYOUTS
from pyadapter.dump.origin import Candidate, HostScan, choose_origin
from pyadapter.dump.traces import detect_trace_mode, scan_traces


@dataclass
class DumpTables:
    dump_dir: str
    hosts: list[HostScan]
    origin: Candidate | None


def _read_host(files: HostFiles) -> HostScan:
    dump = load_host_dump(files)
    trace_path = files.path("graph_execution_traces")
    exec_path = files.path("execution")
    has_traces = bool(trace_path and files.size("graph_execution_traces"))
    mode = detect_trace_mode(trace_path) if has_traces and trace_path else None
    layout = LAYOUTS.get(mode) if mode else None
    host = HostScan(dump=dump, layout=layout, mode=mode)
    if has_traces and trace_path and layout is not None and layout.reports_health:
        host.traces = scan_traces(trace_path, dump, layout)
    if exec_path and files.size("execution"):
        host.executions = scan_executions(exec_path, LAYOUTS)
        if host.mode is None and host.executions.mode:
            host.mode = host.executions.mode
            host.layout = LAYOUTS.get(host.executions.mode)
    return host


def read_dump_tables(path: str | os.PathLike[str]) -> DumpTables:
    """Every writer of a dump directory plus the causal origin candidate; ScanError when nothing is there."""
    dump_dir = os.path.abspath(os.fspath(path))
    groups = find_host_files(dump_dir)
    if sum(g.total_size for g in groups) == 0:
        raise ScanError(f"the dump files in {dump_dir} are all empty")
    hosts = [_read_host(files) for files in groups]
    return DumpTables(dump_dir, hosts, choose_origin(hosts))
