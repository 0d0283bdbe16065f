"""Reading tfdbg2 dumps: records, health layouts, causal origin, source mapping.

Public API: ``scan_dump(path, *, progress=None) -> Findings`` and ``ScanError``. Importing this package does
not import TensorFlow (nor the protobuf runtime until ``scan_dump`` is first called). Recording a dump that
survives a killed run: ``pyadapter.dump.recorder.DumpRecorder`` (imports TensorFlow when started).

Modules, in reading order: files (which files), tfrecord (records), events (DebugEvent subset), health
(debug-tensor layouts), graphs (ops, frames, sources), traces (the streaming hot loop), executions (eager),
origin (causal choice), gradients (backward -> forward op), frames (user lines), messages, describe
(Findings), scanner (all of it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyadapter.dump.errors import ScanError

if TYPE_CHECKING:
    from pyadapter.dump.scanner import scan_dump

__all__ = ["ScanError", "scan_dump"]


def __getattr__(name: str) -> Any:
    if name == "scan_dump":
        from pyadapter.dump.scanner import scan_dump

        return scan_dump
    raise AttributeError(f"module 'pyadapter.dump' has no attribute {name!r}")
