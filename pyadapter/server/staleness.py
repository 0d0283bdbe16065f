"""Is a finding still about the code in the editor? A file whose text changed since the dump is stale.

Each source gets a snapshot: one hash per user file its findings point at, of the text *as it was when the
findings were made*. The best witness is the dump itself (tfdbg2 stores every source file's lines); otherwise
the text on disk when the findings were computed, unless the file was modified after the source was written
(then the findings predate the edit and are stale from the start). A finding is stale when the file's current
text (the editor's unsaved buffer when open, else the disk) hashes differently.

A notebook (``.ipynb``) is hashed by its cells' sources only: running cells and saving changes its outputs,
execution counts and metadata, not its code (``content_hash``); for the same reason a notebook saved after the
source was written is hashed as it is rather than taken as changed.
"""

from __future__ import annotations

import glob
import hashlib
import io
import json
import logging
import os
import struct
from collections.abc import Iterable, Mapping

from pyadapter.regularfile import open_regular
from pyadapter.server.notebooks import cell_sources, is_notebook_path

log = logging.getLogger("nanlens.server.staleness")

# A snapshot value that never matches a text hash: "this file changed after the source was written".
CHANGED_AFTER_SOURCE = "changed-after-source"
MISSING = "missing"


def text_hash(text: str) -> str:
    """Hash of a file's lines, blind to line-ending style and a trailing newline (dumps store bare lines)."""
    return hashlib.sha256("\n".join(text.splitlines()).encode("utf-8", "surrogatepass")).hexdigest()


def content_hash(path: str, text: str) -> str:
    """``text_hash``, except for a notebook: the hash of its cells' sources (in order), blind to the rest."""
    if is_notebook_path(path) and (sources := cell_sources(text)) is not None:
        return text_hash(json.dumps(["\n".join(source.splitlines()) for source in sources]))
    return text_hash(text)


def lines_hash(lines: Iterable[str]) -> str:
    return text_hash("\n".join(line.rstrip("\r\n") for line in lines))


def read_text(path: str) -> str | None:
    """The text of a file a finding names (any path a findings.json chose), or None; a FIFO is None at once."""
    try:
        with io.TextIOWrapper(open_regular(path), encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def snapshot_files(
    files: Iterable[str],
    source_time: float,
    recorded: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """One hash per file of its text when the findings were made.

    ``recorded``: hashes known from the source itself (dump source text or a cache's snapshot) win.
    ``source_time``: when the source's content was written (epoch seconds); a file modified later than that,
    with no recorded text, is marked changed-after-source.
    """
    snapshot: dict[str, str] = {}
    for path in files:
        if recorded and path in recorded:
            snapshot[path] = recorded[path]
            continue
        try:
            mtime = os.stat(path).st_mtime
        except OSError:
            snapshot[path] = MISSING
            continue
        text = read_text(path)
        if text is None:
            snapshot[path] = MISSING
        elif mtime > source_time + 1.0 and not is_notebook_path(
            path
        ):  # 1 s of slack: coarse file system clocks
            # (A notebook is saved after its cells ran as a matter of course, with new outputs: its code is
            # compared, from the text read now.)
            snapshot[path] = CHANGED_AFTER_SOURCE
        else:
            snapshot[path] = content_hash(path, text)
    return snapshot


def is_stale(snapshot_hash: str | None, current_text: str | None, path: str = "") -> bool:
    """Stale when the file is unreadable now, changed after the source, or hashes differently."""
    if snapshot_hash is None:
        return False  # nothing recorded: nothing to say
    if current_text is None or snapshot_hash in (CHANGED_AFTER_SOURCE, MISSING):
        return True
    return content_hash(path, current_text) != snapshot_hash


# --- the dump's own copy of the source text -------------------------------------------------------------------
# tfdbg2 `.source_files` is a TFRecord file of DebugEvent{source_file=4: SourceFile{file_path=1, host_name=2,
# lines=3 (repeated)}}. Reading just that needs no TensorFlow and no protobuf classes: a few lines of wire format.


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes):
    """(field number, wire type, value) of a protobuf message; length-delimited values as bytes."""
    pos, end = 0, len(buf)
    value: int | bytes
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos : pos + 8], pos + 8
        elif wire == 2:
            length, pos = _varint(buf, pos)
            value, pos = buf[pos : pos + length], pos + length
        elif wire == 5:
            value, pos = buf[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield number, wire, value


def _tfrecords(path: str):
    with open(path, "rb") as fh:
        while True:
            header = fh.read(12)
            if len(header) < 12:
                return
            (length,) = struct.unpack("<Q", header[:8])
            data = fh.read(length)
            if len(data) < length:
                return  # a record still being written
            fh.read(4)
            yield data


def dump_source_hashes(dump_dir: str, wanted: Iterable[str]) -> dict[str, str]:
    """Hashes of the wanted files' text as recorded in the dump's ``*.source_files`` (first host that has it)."""
    wanted = set(wanted)
    found: dict[str, str] = {}
    for path in sorted(glob.glob(os.path.join(glob.escape(dump_dir), "tfdbg_events.*.source_files"))):
        try:
            for record in _tfrecords(path):
                for number, wire, value in _fields(record):
                    if number != 4 or wire != 2:
                        continue
                    file_path, lines = None, []
                    for f_number, f_wire, f_value in _fields(value):
                        if f_number == 1 and f_wire == 2:
                            file_path = f_value.decode("utf-8", "replace")
                        elif f_number == 3 and f_wire == 2:
                            lines.append(f_value.decode("utf-8", "replace"))
                    if file_path in wanted and file_path not in found:
                        found[file_path] = lines_hash(lines)
        except (OSError, ValueError, IndexError, struct.error) as exc:
            log.debug("cannot read source text from %s: %s", path, exc)
        if len(found) == len(wanted):
            break
    return found
