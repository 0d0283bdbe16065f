"""Streaming reader for TFRecord files (the container of every tfdbg2 dump file).

A record is ``u64 length | u32 masked-crc32c(length) | data | u32 masked-crc32c(data)``. The reader walks a
file in large chunks and never holds more than one chunk (plus one record) in memory. It verifies the length
CRC of every record before it uses the length, so a corrupt length never makes it read (or allocate) anything:
it stops there and reports where. Verifying costs one dict lookup per record: the 12 header bytes of lengths
already verified are kept (`verified_length`), and dump records come in few distinct lengths. A record longer
than one chunk is read only when its length leads to the end of the file or to another valid header, and never
beyond `MAX_RECORD_BYTES`. It does not verify the data CRC (pure Python cannot afford it); the decoders that
read the data bound every field by its record, so a damaged record is skipped or misread, never a crash.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

HEADER_SIZE = 12
FOOTER_SIZE = 4
CHUNK_SIZE = 4 << 20
# What the scanner reads its record files with (executions, graphs: thousands of small records).
SCAN_CHUNK_SIZE = 1 << 20
# No tfdbg2 record in a health mode comes near this; FULL_TENSOR records of huge tensors are cut here.
MAX_RECORD_BYTES = 1 << 30
_MAX_VERIFIED_HEADERS = 1 << 16
NOT_TFRECORD = "not a TFRecord file (first record header checksum mismatch)"
CORRUPT_HEADER = "corrupt record header (length checksum mismatch)"

_unpack_u64 = struct.Struct("<Q").unpack_from
_unpack_u32 = struct.Struct("<I").unpack_from


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC_TABLE = _crc32c_table()


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C; pure Python, so only used on 8-byte length fields."""
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def header_is_valid(buf: bytes, pos: int) -> bool:
    """Whether the 12-byte record header at ``pos`` carries a matching length CRC."""
    return masked_crc32c(buf[pos : pos + 8]) == _unpack_u32(buf, pos + 8)[0]


def verified_length(lengths: dict[bytes, int], buf: bytes, pos: int) -> int:
    """The length in the record header at ``pos`` if its CRC matches, else -1; verified headers are remembered
    in `lengths` (by their 12 bytes), where callers look first: ``lengths.get(buf[pos:pos + 12])``."""
    header = buf[pos : pos + HEADER_SIZE]
    if masked_crc32c(header[:8]) != _unpack_u32(header, 8)[0]:
        return -1
    length = _unpack_u64(header, 0)[0]
    if len(lengths) >= _MAX_VERIFIED_HEADERS:
        lengths.clear()
    lengths[header] = length
    return length


def header_problem(f: BinaryIO, buf: bytes, pos: int, base: int, file_size: int) -> str | None:
    """Before reading more for the (verified) record header at ``buf[pos]`` (file offset ``base + pos``) that
    does not fit the buffer: why its length must not be trusted, or None. A length past the end of the file
    (truncated or corrupt), over `MAX_RECORD_BYTES`, or, for a record longer than a chunk, one that leads
    neither to the end of the file nor to another valid header is refused before any byte is read."""
    length = _unpack_u64(buf, pos)[0]
    at = base + pos
    end = at + HEADER_SIZE + length + FOOTER_SIZE
    if end > file_size:
        return classify_stop(buf, pos, len(buf) - pos, file_size, at)
    if length > MAX_RECORD_BYTES:
        return f"record of {length} bytes (more than {MAX_RECORD_BYTES}: a corrupt length)"
    if length > CHUNK_SIZE and end + HEADER_SIZE <= file_size:
        here = f.tell()
        try:
            f.seek(end)
            following = f.read(HEADER_SIZE)
        finally:
            f.seek(here)
        if len(following) == HEADER_SIZE and not header_is_valid(following, 0):
            return f"corrupt record length ({length} bytes do not lead to the next record)"
    return None


@dataclass
class ReadIssue:
    """Why reading a file stopped early (or could not start)."""

    file: str
    offset: int
    reason: str
    records_read: int = 0

    def describe(self) -> str:
        name = os.path.basename(self.file)
        return f"{name}: {self.reason} at byte {self.offset} (kept {self.records_read} records before it)"

    def to_json(self) -> dict[str, object]:
        return {
            "file": self.file,
            "offset": self.offset,
            "reason": self.reason,
            "records_read": self.records_read,
        }


def classify_stop(buf: bytes, pos: int, avail: int, file_size: int, at: int) -> str:
    """Reason text for a record at file offset ``at`` that cannot be read whole.

    ``buf[pos:pos+avail]`` holds what the file still has from that record on.
    """
    if avail < HEADER_SIZE:
        return f"truncated record header ({avail} of {HEADER_SIZE} bytes)"
    if not header_is_valid(buf, pos):
        return "corrupt record header (length checksum mismatch)"
    length = _unpack_u64(buf, pos)[0]
    need = HEADER_SIZE + length + FOOTER_SIZE
    return f"truncated record ({file_size - at} of {need} bytes written)"


class RecordFile:
    """One TFRecord file, read as a stream of (offset, payload) pairs.

    ``on_bytes(n)`` is called as chunks are consumed (for progress bars). After iteration, ``issue`` says
    why reading stopped early, or is None when the file ended on a record boundary.
    """

    def __init__(
        self, path: str, on_bytes: Callable[[int], None] | None = None, chunk_size: int | None = None
    ) -> None:
        self.path = path
        self.on_bytes = on_bytes
        # A smaller chunk bounds memory; records longer than CHUNK_SIZE still get the same length checks.
        self.chunk_size = min(chunk_size or CHUNK_SIZE, CHUNK_SIZE)
        self.issue: ReadIssue | None = None
        self.records_read = 0
        try:
            self.size = os.path.getsize(path)
        except OSError:
            self.size = 0

    def _stop(self, offset: int, reason: str) -> None:
        self.issue = ReadIssue(self.path, offset, reason, self.records_read)

    def records(self) -> Iterator[tuple[int, bytes]]:
        """Yield (offset, data) for every whole record; stop quietly at the first bad one."""
        try:
            f = open(self.path, "rb")  # noqa: SIM115 - closed in finally
        except OSError as exc:
            self._stop(0, f"cannot open: {exc.strerror or exc}")
            return
        lengths: dict[bytes, int] = {}
        lengths_get = lengths.get
        try:
            self.size = os.fstat(f.fileno()).st_size
            chunk = self.chunk_size
            buf = f.read(chunk)
            base = 0
            pos = 0
            eof = len(buf) < chunk
            while True:
                n = len(buf)
                while pos + HEADER_SIZE <= n:
                    length = lengths_get(buf[pos : pos + HEADER_SIZE])
                    if length is None:
                        length = verified_length(lengths, buf, pos)
                        if length < 0:
                            self._stop(base + pos, NOT_TFRECORD if base + pos == 0 else CORRUPT_HEADER)
                            return
                    end = pos + HEADER_SIZE + length
                    if end + FOOTER_SIZE > n:
                        break
                    yield base + pos, buf[pos + HEADER_SIZE : end]
                    self.records_read += 1
                    pos = end + FOOTER_SIZE
                if eof:
                    if pos < n:
                        self._stop(base + pos, classify_stop(buf, pos, n - pos, self.size, base + pos))
                    break
                if self.on_bytes:
                    self.on_bytes(pos)
                need = chunk  # read from the first unfinished record on (re-read, not kept: one buffer at a time)
                if pos + HEADER_SIZE <= n:
                    problem = header_problem(f, buf, pos, base, self.size)
                    if problem is not None:
                        self._stop(base + pos, problem)
                        break
                    need = max(need, HEADER_SIZE + _unpack_u64(buf, pos)[0] + FOOTER_SIZE)
                base += pos
                pos = 0
                del buf
                f.seek(base)
                buf = f.read(need)
                eof = len(buf) < need
            if self.on_bytes:
                self.on_bytes(pos)
        except OSError as exc:
            self._stop(0, f"cannot read: {exc.strerror or exc}")
        finally:
            f.close()

    def heads(self, limit: int) -> Iterator[tuple[int, bytes, int]]:
        """Yield (offset, the first ``limit`` bytes of the data, the data's length) for every whole record,
        seeking past the rest: for files of few, large records of which only the start is needed (a
        ``.source_files`` record holds a whole source file, its name first). Stops like ``records``: a length
        CRC that does not match, a record running past the end of the file, or one over the size limit."""
        try:
            f = open(self.path, "rb")  # noqa: SIM115 - closed in finally
        except OSError as exc:
            self._stop(0, f"cannot open: {exc.strerror or exc}")
            return
        try:
            self.size = size = os.fstat(f.fileno()).st_size
            offset = 0
            while offset < size:
                f.seek(offset)
                head = f.read(HEADER_SIZE + limit)
                if len(head) < HEADER_SIZE or not header_is_valid(head, 0):
                    if len(head) >= HEADER_SIZE:
                        reason = NOT_TFRECORD if offset == 0 else CORRUPT_HEADER
                    else:
                        reason = classify_stop(head, 0, len(head), size, offset)
                    self._stop(offset, reason)
                    return
                length = _unpack_u64(head, 0)[0]
                end = offset + HEADER_SIZE + length + FOOTER_SIZE
                if end > size:
                    self._stop(offset, classify_stop(head, 0, len(head), size, offset))
                    return
                if length > MAX_RECORD_BYTES:
                    self._stop(
                        offset, f"record of {length} bytes (more than {MAX_RECORD_BYTES}: a corrupt length)"
                    )
                    return
                yield offset, head[HEADER_SIZE : HEADER_SIZE + length], length
                self.records_read += 1
                if self.on_bytes:
                    self.on_bytes(end - offset)
                offset = end
        except OSError as exc:
            self._stop(0, f"cannot read: {exc.strerror or exc}")
        finally:
            f.close()

    def read_at(self, offset: int) -> bytes | None:
        """The payload of the record at ``offset``, or None if it cannot be read whole (or its length CRC does
        not match: the file changed since it was scanned)."""
        try:
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                f.seek(offset)
                header = f.read(HEADER_SIZE)
                if len(header) < HEADER_SIZE or not header_is_valid(header, 0):
                    return None
                length = _unpack_u64(header, 0)[0]
                if offset + HEADER_SIZE + length > size or length > MAX_RECORD_BYTES:
                    return None
                data = f.read(length)
                return data if len(data) == length else None
        except (OSError, ValueError, OverflowError):
            return None
