"""The static part of one writer's dump: source files, stack frames, graphs and their ops.

These files are small next to the traces (thousands of records), so they are read whole into compact
tables: ops by (graph id, name), tensor ids to (op, output slot), frame ids to (file, line, function).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from pyadapter.dump import wire
from pyadapter.dump.autograph_lines import AutographLines
from pyadapter.dump.events import parse_event
from pyadapter.dump.files import HostFiles
from pyadapter.dump.frames import timed_bodies_in_cells
from pyadapter.dump.reloaded_lines import ReloadedLines
from pyadapter.dump.tfrecord import SCAN_CHUNK_SIZE, ReadIssue, RecordFile
from pyadapter.findings import Frame

# A source file read from disk for its whole text (the statement around an origin): at most this much.
MAX_SOURCE_BYTES = 4 << 20


@dataclass
class OpInfo:
    """One op as created in a graph (GraphOpCreation)."""

    graph_id: str
    name: str
    type: str
    inputs: tuple[str, ...] = ()
    output_tensor_ids: tuple[int, ...] = ()
    frame_ids: tuple[str, ...] = ()
    graph_name: str = ""

    def output_name(self, slot: int) -> str:
        return f"{self.name}:{slot}"


@dataclass
class GraphInfo:
    graph_id: str
    name: str = ""
    outer_id: str = ""


@dataclass
class SourceFileRef:
    path: str
    host: str
    offset: int


@dataclass
class HostDump:
    """What one writer recorded about its program (everything but the executions and traces)."""

    files: HostFiles
    metadata: dict[str, str] = field(default_factory=dict)
    source_files: list[SourceFileRef] = field(default_factory=list)
    frames: dict[str, tuple[int, int, str]] = field(default_factory=dict)
    ops: dict[tuple[str, str], OpInfo] = field(default_factory=dict)
    tensors: dict[int, tuple[OpInfo, int]] = field(default_factory=dict)
    graphs: dict[str, GraphInfo] = field(default_factory=dict)
    issues: list[ReadIssue] = field(default_factory=list)
    missing_frames: int = 0
    _autograph: AutographLines | None = field(default=None, repr=False, compare=False)
    _reloaded: ReloadedLines | None = field(default=None, repr=False, compare=False)

    @property
    def host(self) -> str:
        return self.files.host

    def op_for_input(self, graph_id: str, input_name: str) -> tuple[OpInfo, int] | None:
        """Resolve a GraphOpCreation input name 'op:slot' inside ``graph_id``."""
        name, _, slot = input_name.rpartition(":")
        if not name or not slot.isdigit():
            name, slot = input_name, "0"
        op = self.ops.get((graph_id, name))
        return (op, int(slot)) if op else None

    def stack(self, frame_ids: tuple[str, ...]) -> list[Frame]:
        """Frames for stack frame ids (outermost first); ids whose frame or file is unknown are dropped."""
        out = []
        for fid in frame_ids:
            entry = self.frames.get(fid)
            if entry is None:
                continue
            file_index, line, func = entry
            if 0 <= file_index < len(self.source_files):
                out.append(Frame(file=self.source_files[file_index].path, line=line, function=func))
        if self._autograph is None:
            self._autograph = AutographLines(self.source_text)
        if self._reloaded is None:
            self._reloaded = ReloadedLines(self.source_text)
        return timed_bodies_in_cells(self._reloaded.correct(self._autograph.correct(out)), self.source_line)

    def stack_is_complete(self, frame_ids: tuple[str, ...]) -> bool:
        for fid in frame_ids:
            entry = self.frames.get(fid)
            if entry is None or not 0 <= entry[0] < len(self.source_files):
                return False
        return True

    def _source_record(self, path: str) -> bytes | None:
        """The dump's record of source file `path` (its lines), or None."""
        source_path = self.files.path("source_files")
        ref = next((r for r in self.source_files if r.path == path), None)
        if ref is None or source_path is None:
            return None
        return RecordFile(source_path).read_at(ref.offset)

    def source_text(self, path: str) -> str | None:
        """The whole text of a source file, from the dump's copy or else from disk (up to a source file's size)."""
        data = self._source_record(path)
        lines = _lines_of_source_record(data) if data is not None else None
        if lines is not None:
            return "\n".join(line.rstrip("\n") for line in lines)
        try:
            if os.path.isfile(path) and os.path.getsize(path) <= MAX_SOURCE_BYTES:
                with open(path, encoding="utf-8", errors="replace") as f:
                    return f.read()
        except OSError:
            pass
        return None

    def source_line(self, path: str, line: int) -> str | None:
        """Line ``line`` (1-based) of a source file, from the dump's copy or else from disk."""
        data = self._source_record(path)
        text = _line_from_source_record(data, line) if data is not None else None
        if text is not None:
            return text
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                for number, text in enumerate(f, start=1):
                    if number == line:
                        return text.rstrip("\n")
        except OSError:
            pass
        return None


def _lines_of_source_record(data: bytes) -> list[str] | None:
    try:
        for number, wire_type, a, b in wire.fields(data):
            if number == 4 and wire_type == wire.LEN:
                return [
                    wire.text(data, a2, b2)
                    for n2, w2, a2, b2 in wire.fields(data, a, b)
                    if n2 == 3 and w2 == wire.LEN
                ]
    except wire.WireError:
        return None
    return None


def _line_from_source_record(data: bytes, line: int) -> str | None:
    try:
        for number, wire_type, a, b in wire.fields(data):
            if number == 4 and wire_type == wire.LEN:
                seen = 0
                for n2, w2, a2, b2 in wire.fields(data, a, b):
                    if n2 == 3 and w2 == wire.LEN:
                        seen += 1
                        if seen == line:
                            return wire.text(data, a2, b2).rstrip("\n")
    except wire.WireError:
        return None
    return None


def _source_file_header(data: bytes) -> tuple[str, str] | None:
    """(file_path, host_name) of a SourceFile event, reading no further than those two fields; ``data`` may be
    only the start of the record. None when they are not in ``data``."""
    pos, n = 0, len(data)
    while pos < n:
        key, pos = wire.read_varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == wire.VARINT:
            _value, pos = wire.read_varint(data, pos)
        elif wire_type == wire.FIXED64:
            pos += 8
        elif wire_type == wire.FIXED32:
            pos += 4
        elif wire_type == wire.LEN:
            size, pos = wire.read_varint(data, pos)
            if number == 4:
                return _path_and_host(data, pos, min(pos + size, n))
            pos += size
        else:
            raise wire.WireError(f"unsupported wire type {wire_type}")
    return None


def _path_and_host(data: bytes, pos: int, end: int) -> tuple[str, str] | None:
    path = host = ""
    while pos < end:
        key, pos = wire.read_varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if number >= 3:  # the source lines follow
            return path, host
        if wire_type == wire.VARINT:  # not a string: not a path or host (skipped, as the parser would)
            _value, pos = wire.read_varint(data, pos)
            continue
        if wire_type != wire.LEN:
            raise wire.WireError(f"unsupported wire type {wire_type} in a SourceFile")
        size, pos = wire.read_varint(data, pos)
        if pos + size > end:
            return None
        if number == 1:
            path = wire.text(data, pos, pos + size)
        elif number == 2:
            host = wire.text(data, pos, pos + size)
        pos += size
    return path, host


# A source file's name and host come first in its record; the rest (the file's text) is not read.
_SOURCE_HEAD_BYTES = 4096


def load_host_dump(files: HostFiles, on_bytes: Callable[[int], None] | None = None) -> HostDump:
    """Read metadata, source file names, stack frames and graphs of one writer."""
    dump = HostDump(files=files)
    bad_records = 0

    def open_file(suffix: str) -> RecordFile | None:
        path = files.path(suffix)
        return RecordFile(path, on_bytes, SCAN_CHUNK_SIZE) if path else None

    rf = open_file("metadata")
    if rf:
        for _, data in rf.records():
            event = parse_event(data)
            if event is not None and event.HasField("debug_metadata"):
                md = event.debug_metadata
                dump.metadata = {
                    "tensorflow_version": md.tensorflow_version,
                    "file_version": md.file_version,
                    "tfdbg_run_id": md.tfdbg_run_id,
                }
        _note(dump, rf)

    rf = open_file("source_files")
    if rf:
        for offset, head, length in rf.heads(_SOURCE_HEAD_BYTES):
            try:
                header = _source_file_header(head)
                if header is None and length > len(head):  # a very long path: read the whole record
                    whole = rf.read_at(offset)
                    header = _source_file_header(whole) if whole is not None else None
            except wire.WireError:
                header = None
            if header is None:
                bad_records += 1
                header = ("", "")
            dump.source_files.append(
                SourceFileRef(os.path.normpath(header[0]) if header[0] else "", header[1], offset)
            )
        _note(dump, rf)

    rf = open_file("stack_frames")
    if rf:
        for _, data in rf.records():
            event = parse_event(data)
            if event is None or not event.HasField("stack_frame_with_id"):
                bad_records += 1
                continue
            sf = event.stack_frame_with_id
            flc = sf.file_line_col
            dump.frames[sf.id] = (flc.file_index, flc.line, flc.func)
        _note(dump, rf)

    rf = open_file("graphs")
    if rf:
        interned: dict[str, str] = {}
        for _, data in rf.records():
            event = parse_event(data)
            if event is None:
                bad_records += 1
                continue
            if event.HasField("graph_op_creation"):
                goc = event.graph_op_creation
                frame_ids = list(goc.code_location.stack_frame_ids)
                op = OpInfo(
                    graph_id=goc.graph_id,
                    name=goc.op_name,
                    type=goc.op_type,
                    inputs=tuple(goc.input_names),
                    output_tensor_ids=tuple(goc.output_tensor_ids),
                    frame_ids=tuple(map(interned.setdefault, frame_ids, frame_ids)),
                    graph_name=goc.graph_name,
                )
                dump.ops[(op.graph_id, op.name)] = op
                for slot, tensor_id in enumerate(op.output_tensor_ids):
                    dump.tensors[tensor_id] = (op, slot)
                if op.graph_id not in dump.graphs:
                    dump.graphs[op.graph_id] = GraphInfo(op.graph_id, goc.graph_name)
            elif event.HasField("debugged_graph"):
                dg = event.debugged_graph
                info = dump.graphs.setdefault(dg.graph_id, GraphInfo(dg.graph_id))
                info.name = dg.graph_name or info.name
                info.outer_id = dg.outer_context_id
        _note(dump, rf)
    if bad_records:
        dump.issues.append(
            ReadIssue(files.prefix, 0, f"{bad_records} records that are not DebugEvents were skipped")
        )
    return dump


def _note(dump: HostDump, rf: RecordFile) -> None:
    if rf.issue is not None:
        dump.issues.append(rf.issue)
