"""Streaming reader for TFRecord files (the container of every tfdbg2 dump file).

A record is ``u64 length | u32 masked-crc32c(length) | data | u32 masked-crc32c(data)``. The reader walks a
file in large chunks and never holds more than one chunk (plus one record) in memory. It does not verify the
data CRC of every record (that would cost more than decoding); it verifies the length CRC of the first record
(to tell a foreign file from a dump file) and of any record whose length looks wrong, and it stops at the
first truncated or corrupt record, reporting where.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

HEADER_SIZE = 12
FOOTER_SIZE = 4
CHUNK_SIZE = 4 << 20

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

    def __init__(self, path: str, on_bytes: Callable[[int], None] | None = None) -> None:
        self.path = path
        self.on_bytes = on_bytes
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
        try:
            buf = f.read(CHUNK_SIZE)
            base = 0
            pos = 0
            eof = len(buf) < CHUNK_SIZE
            first = True
            while True:
                n = len(buf)
                while pos + HEADER_SIZE <= n:
                    if first:
                        if not header_is_valid(buf, pos):
                            self._stop(
                                base + pos, "not a TFRecord file (first record header checksum mismatch)"
                            )
                            return
                        first = False
                    length = _unpack_u64(buf, pos)[0]
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
                need = CHUNK_SIZE
                if pos + HEADER_SIZE <= n:
                    rest_of_record = HEADER_SIZE + _unpack_u64(buf, pos)[0] + FOOTER_SIZE - (n - pos)
                    if base + n + rest_of_record > self.size:
                        # The length runs past the end of the file: truncated or corrupt; say which.
                        self._stop(base + pos, classify_stop(buf, pos, n - pos, self.size, base + pos))
                        break
                    need = max(need, rest_of_record)
                more = f.read(need)
                if len(more) < need:
                    eof = True
                buf = buf[pos:] + more
                base += pos
                pos = 0
            if self.on_bytes:
                self.on_bytes(pos)
        finally:
            f.close()

    def read_at(self, offset: int) -> bytes | None:
        """The payload of the record at ``offset``, or None if it cannot be read whole."""
        try:
            with open(self.path, "rb") as f:
                f.seek(offset)
                header = f.read(HEADER_SIZE)
                if len(header) < HEADER_SIZE:
                    return None
                length = _unpack_u64(header, 0)[0]
                if offset + HEADER_SIZE + length > self.size:
                    return None
                data = f.read(length)
                return data if len(data) == length else None
        except OSError:
            return None
