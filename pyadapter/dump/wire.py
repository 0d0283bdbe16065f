"""Protocol-buffer wire format, just enough to pick fields out of DebugEvent records by hand.

Hand decoding beats building full message objects here because most records are read for two or three
fields and the rest (stack-frame ids, source lines) is skipped without being copied.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5

_unpack_double = struct.Struct("<d").unpack_from


class WireError(ValueError):
    """Bytes that are not a well-formed protocol buffer."""


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Decode a varint at ``pos``; returns (value, position after it)."""
    result = 0
    shift = 0
    while True:
        try:
            b = buf[pos]
        except IndexError:
            raise WireError("varint runs past the end of the record") from None
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise WireError("varint longer than 10 bytes")


def fields(buf: bytes, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int, int, int]]:
    """Yield (field_number, wire_type, a, b) for each field in buf[start:end].

    For VARINT fields ``a`` is the value; for LEN fields ``buf[a:b]`` is the payload; for fixed fields
    ``buf[a:b]`` holds the raw little-endian bytes.
    """
    if end is None:
        end = len(buf)
    pos = start
    while pos < end:
        key, pos = read_varint(buf, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == VARINT:
            value, pos = read_varint(buf, pos)
            yield number, wire_type, value, pos
        elif wire_type == LEN:
            size, pos = read_varint(buf, pos)
            stop = pos + size
            if stop > end:
                raise WireError("length-delimited field runs past the end of its message")
            yield number, wire_type, pos, stop
            pos = stop
        elif wire_type == FIXED64:
            if pos + 8 > end:
                raise WireError("fixed64 field runs past the end of its message")
            yield number, wire_type, pos, pos + 8
            pos += 8
        elif wire_type == FIXED32:
            if pos + 4 > end:
                raise WireError("fixed32 field runs past the end of its message")
            yield number, wire_type, pos, pos + 4
            pos += 4
        else:
            raise WireError(f"unsupported wire type {wire_type}")
        if number == 0:
            raise WireError("field number 0")


def packed_varints(buf: bytes, start: int, end: int) -> list[int]:
    """Decode a packed repeated varint field (signed int64 values come back two's-complement fixed)."""
    out = []
    pos = start
    while pos < end:
        value, pos = read_varint(buf, pos)
        if value >= 1 << 63:
            value -= 1 << 64
        out.append(value)
    return out


def packed_doubles(buf: bytes, start: int, end: int) -> list[float]:
    count = (end - start) // 8
    return list(struct.unpack_from(f"<{count}d", buf, start))


def double_at(buf: bytes, pos: int) -> float:
    return _unpack_double(buf, pos)[0]


def text(buf: bytes, start: int, end: int) -> str:
    return buf[start:end].decode("utf-8", "replace")


__all__ = ["WireError", "fields", "packed_varints", "packed_doubles", "read_varint", "text"]
