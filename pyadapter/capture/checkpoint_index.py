"""A checkpoint's ``.index`` file read without TensorFlow, to refuse one that would make TensorFlow misbehave.

A custom-loop bundle holds a ``tf.train.Checkpoint`` (``checkpoint/ckpt.index`` and
``checkpoint/ckpt.data-NNNNN-of-MMMMM``). TensorFlow trusts the index: an entry whose shape says 10^12 elements
makes ``Checkpoint.read`` allocate that much before it notices anything, and an offset past the end of a data
file is found only when read. `check` walks the index (an SSTable: footer, index block, data blocks of
prefix-compressed key/value entries) with every length and offset bounded by the file, and checks every entry
against the data files: header first (the number of shards), then per tensor the shard, that offset + size
lies inside that shard, and that the size fits the shape (exactly for fixed-width dtypes; at least one byte per
element for strings and variants), so no entry can ask for more memory than the data files hold.

Block checksums are left to TensorFlow (it verifies them on read) and the file's sha256 to the manifest.
Raises `IntegrityError` with one line. Nothing here imports TensorFlow.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path

from pyadapter.capture.integrity import IntegrityError, resolve_inside
from pyadapter.dump import wire

MAX_INDEX_BYTES = 64 << 20
MAX_ENTRIES = 1_000_000
MAX_KEY_BYTES = 1 << 16
MAX_TOTAL_KEY_BYTES = 64 << 20  # keys are rebuilt entry by entry; this bounds the copying whatever they share
MAX_RANK = 64
_FOOTER_SIZE = 48  # two BlockHandles padded to 20 bytes each, then the 8-byte magic number
_MAGIC = 0xDB4775248B80FB57
_BLOCK_TRAILER = 5  # compression type byte + masked crc32c
_NO_COMPRESSION = 0

# tensorflow/core/framework/types.proto: bytes per element of the fixed-width dtypes.
_DTYPE_SIZES = {
    1: 4,
    2: 8,
    3: 4,
    4: 1,
    5: 2,
    6: 1,
    8: 8,
    9: 8,
    10: 1,
    11: 1,
    12: 1,
    13: 4,
    14: 2,
    15: 2,
    16: 2,
    17: 2,
    18: 16,
    19: 2,
    22: 4,
    23: 8,
    24: 1,
    25: 1,
    26: 1,
    27: 1,
    28: 1,
}


def _fail(name: str, reason: str) -> IntegrityError:
    return IntegrityError(f"{name} is not a valid checkpoint index ({reason})")


def _block_handle(data: bytes, pos: int, end: int, file_size: int) -> tuple[tuple[int, int], int]:
    offset, pos = wire.read_varint(data, pos)
    size, pos = wire.read_varint(data, pos)
    if pos > end:
        raise wire.WireError("block handle runs past its field")
    if offset + size + _BLOCK_TRAILER > file_size:
        raise wire.WireError("a block lies outside the file")
    return (offset, size), pos


class _Reader:
    """Walks an SSTable's entries in order; work is linear in the bytes read and capped in entries."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.entries = 0
        self.key_bytes = 0

    def block(self, handle: tuple[int, int]) -> Iterator[tuple[bytes, bytes]]:
        """The (key, value) pairs of one block (no compression; entries are read in order, so the restart
        points are not needed)."""
        data = self.data
        offset, size = handle
        if data[offset + size] != _NO_COMPRESSION:
            raise wire.WireError(f"compressed block (type {data[offset + size]})")
        if size < 4:
            raise wire.WireError("block shorter than its restart count")
        block = data[offset : offset + size]
        restarts = struct.unpack_from("<I", block, size - 4)[0]
        limit = size - 4 * (restarts + 1)
        if restarts == 0 or limit < 0:
            raise wire.WireError("bad restart array")
        key = bytearray()
        pos = 0
        while pos < limit:
            self.entries += 1
            if self.entries > MAX_ENTRIES:
                raise wire.WireError(f"more than {MAX_ENTRIES} entries")
            shared, pos = wire.read_varint(block, pos)
            unshared, pos = wire.read_varint(block, pos)
            value_size, pos = wire.read_varint(block, pos)
            if shared > len(key) or pos + unshared + value_size > limit:
                raise wire.WireError("entry runs past its block")
            del key[shared:]  # amortized linear: every key byte is added once and removed at most once
            key += block[pos : pos + unshared]
            if len(key) > MAX_KEY_BYTES:
                raise wire.WireError(f"a key longer than {MAX_KEY_BYTES} bytes")
            self.key_bytes += len(key)
            if self.key_bytes > MAX_TOTAL_KEY_BYTES:
                raise wire.WireError(f"more than {MAX_TOTAL_KEY_BYTES >> 20} MB of keys")
            pos += unshared
            yield bytes(key), block[pos : pos + value_size]
            pos += value_size

    def table(self) -> Iterator[tuple[bytes, bytes]]:
        data = self.data
        size = len(data)
        if size < _FOOTER_SIZE:
            raise wire.WireError("shorter than a table footer")
        if struct.unpack_from("<Q", data, size - 8)[0] != _MAGIC:
            raise wire.WireError("no table magic number at its end")
        footer = size - _FOOTER_SIZE
        _, pos = _block_handle(data, footer, size - 8, size)  # the metaindex block: empty in checkpoints
        index, _ = _block_handle(data, pos, size - 8, size)
        for _, value in self.block(index):
            handle, _ = _block_handle(value, 0, len(value), size)
            yield from self.block(handle)


def _header_shards(value: bytes) -> int:
    """BundleHeaderProto.num_shards."""
    shards = 0
    for number, wire_type, a, _ in wire.fields(value):
        if number == 1 and wire_type == wire.VARINT:
            shards = a
    return shards


def _entry(value: bytes) -> tuple[int, list[int], int, int, int, bool]:
    """BundleEntryProto: (dtype, dims, shard_id, offset, size, has slices)."""
    dtype = shard = offset = size = 0
    dims: list[int] = []
    sliced = False
    for number, wire_type, a, b in wire.fields(value):
        if number == 1 and wire_type == wire.VARINT:
            dtype = a
        elif number == 2 and wire_type == wire.LEN:
            for n2, w2, a2, b2 in wire.fields(value, a, b):
                if n2 == 2 and w2 == wire.LEN:  # TensorShapeProto.dim
                    dim = 0
                    for n3, w3, a3, _ in wire.fields(value, a2, b2):
                        if n3 == 1 and w3 == wire.VARINT:
                            dim = a3 - (1 << 64) if a3 >= 1 << 63 else a3
                    dims.append(dim)
                    if len(dims) > MAX_RANK:
                        raise wire.WireError(f"a shape of more than {MAX_RANK} dimensions")
        elif number == 3 and wire_type == wire.VARINT:
            shard = a
        elif number == 4 and wire_type == wire.VARINT:
            offset = a
        elif number == 5 and wire_type == wire.VARINT:
            size = a
        elif number == 7 and wire_type == wire.LEN:
            sliced = True
    return dtype, dims, shard, offset, size, sliced


def check(root: Path, prefix: str, listed: list[str]) -> None:
    """Checks ``<prefix>.index`` inside the bundle `root` against the data files the manifest lists."""
    name = f"{prefix}.index"
    path = resolve_inside(root, name)
    with open(path, "rb") as handle:
        data = handle.read(MAX_INDEX_BYTES + 1)
    if len(data) > MAX_INDEX_BYTES:
        raise _fail(name, f"larger than {MAX_INDEX_BYTES >> 20} MB")
    try:
        entries = _Reader(data).table()
        first = next(entries, None)
        if first is None or first[0] != b"":
            raise wire.WireError("no header entry")
        shards = _header_shards(first[1])
        if not 1 <= shards <= 99999:
            raise wire.WireError(f"{shards} shards")
        sizes = []
        for shard in range(shards):
            data_name = f"{prefix}.data-{shard:05d}-of-{shards:05d}"
            if data_name not in listed:
                raise IntegrityError(f"{name} needs {data_name}, which the bundle does not hold")
            sizes.append(os.path.getsize(resolve_inside(root, data_name)))
        total = sum(sizes)
        for key, value in entries:
            dtype, dims, shard, offset, size, sliced = _entry(value)
            tensor = key[:80].decode("utf-8", "replace")
            if any(d < 0 for d in dims):
                raise wire.WireError(f"tensor {tensor!r} has a negative dimension")
            elements = 1
            for d in dims:
                elements *= d
            if shard >= shards or offset + size > sizes[shard]:
                raise wire.WireError(f"tensor {tensor!r} lies outside the data files")
            width = _DTYPE_SIZES.get(dtype)
            if sliced:
                fits = elements <= 2 * total + 16
            elif width is not None:
                fits = elements * width == size
            else:  # strings, variants, 4-bit types: at least one byte for every two elements
                fits = elements <= 2 * size + 16
            if not fits:
                raise wire.WireError(f"tensor {tensor!r} of shape {dims[:8]} does not fit its {size} bytes")
    except wire.WireError as error:
        raise _fail(name, str(error)) from None
