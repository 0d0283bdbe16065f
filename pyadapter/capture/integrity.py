"""Hashes and path checks for capture bundles: what makes a bundle safe to open.

A bundle is a directory whose manifest lists every file with its sha256. Reading one must never follow a path
out of the directory (``..``, absolute paths, symlinks) nor accept a file the manifest does not list. Nothing here
imports TensorFlow.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path, PurePosixPath

import numpy as np

CHUNK = 1 << 20


class IntegrityError(ValueError):
    """A bundle file or path that fails a check; the message is one line."""


def sha256_file(path: Path, on_chunk: Callable[[int], None] | None = None) -> str:
    """The file's sha256; `on_chunk(bytes)` after each chunk read (a writer's progress)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            if on_chunk is not None:
                on_chunk(len(chunk))
    return digest.hexdigest()


def check_relative_path(name: str) -> PurePosixPath:
    """A manifest path: relative, POSIX separators, no `..`, no empty or `.` parts, no drive letters."""
    if not isinstance(name, str) or not name:
        raise IntegrityError(f"bad path {name!r} in manifest")
    if "\\" in name or "\x00" in name or name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise IntegrityError(f"path {name!r} is not a relative POSIX path")
    parts = PurePosixPath(name).parts
    if any(part in ("", ".", "..") for part in parts) or name != str(PurePosixPath(*parts)):
        raise IntegrityError(f"path {name!r} leaves the bundle or is not normalized")
    return PurePosixPath(*parts)


def resolve_inside(root: Path, name: str) -> Path:
    """The file `name` inside `root`; refuses symlinks anywhere on the way and anything that resolves outside."""
    relative = check_relative_path(name)
    current = root
    for part in relative.parts:
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            raise IntegrityError(f"{name} is listed in the manifest but missing") from None
        if stat.S_ISLNK(mode):
            raise IntegrityError(f"{name} is a symlink (bundles hold regular files only)")
    if not stat.S_ISREG(os.lstat(current).st_mode):
        raise IntegrityError(f"{name} is not a regular file")
    real_root = os.path.realpath(root)
    real = os.path.realpath(current)
    if os.path.commonpath([real_root, real]) != real_root:
        raise IntegrityError(f"{name} resolves outside the bundle")
    return current


def list_tree(root: Path) -> list[str]:
    """Every file under `root` as a relative POSIX path; a symlink or special file anywhere is an error."""
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            full = Path(dirpath) / name
            mode = os.lstat(full).st_mode
            rel = full.relative_to(root).as_posix()
            if stat.S_ISLNK(mode):
                raise IntegrityError(f"{rel} is a symlink (bundles hold regular files only)")
            if stat.S_ISDIR(mode):
                continue
            if not stat.S_ISREG(mode):
                raise IntegrityError(f"{rel} is not a regular file")
            found.append(rel)
    return sorted(found)


def verify_files(root: Path, listed: dict[str, dict], exempt: frozenset[str]) -> None:
    """Checks that the files on disk are exactly the listed ones (plus `exempt`) with the listed sizes/sha256."""
    if not isinstance(listed, dict):
        raise IntegrityError("manifest 'files' is not a mapping")
    for name in listed:
        check_relative_path(name)
    on_disk = set(list_tree(root)) - set(exempt)
    unlisted = sorted(on_disk - set(listed))
    if unlisted:
        raise IntegrityError(f"{unlisted[0]} is in the bundle but not in its manifest")
    for name, entry in sorted(listed.items()):
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
            raise IntegrityError(f"manifest entry for {name} has no sha256")
        path = resolve_inside(root, name)
        size = entry.get("size")
        if size is not None and os.path.getsize(path) != size:
            raise IntegrityError(f"{name} has {os.path.getsize(path)} bytes, manifest says {size} (changed)")
        if sha256_file(path) != entry["sha256"]:
            raise IntegrityError(f"{name} does not match its sha256 in the manifest (changed)")


# Zip members we accept in the archives of a bundle: a `.npz` holds `.npy` files only; a `.keras` archive holds
# Keras's config/metadata JSON, an HDF5 or npz weights file, and optional assets.
NPZ_MEMBER_SUFFIX = ".npy"
KERAS_MEMBERS = frozenset({"config.json", "metadata.json", "model.weights.h5", "model.weights.npz"})
KERAS_JSON_MEMBERS = frozenset({"config.json", "metadata.json"})
MAX_ZIP_MEMBERS = 100_000
MAX_CENTRAL_DIRECTORY_BYTES = 16 << 20  # zipfile reads it whole and makes an object per entry
MAX_JSON_MEMBER_BYTES = 64 << 20
MAX_DEFLATE_RATIO = 1100  # deflate cannot do better than ~1032:1; more than that is a zip bomb
# Exceptions zipfile raises on a malformed archive (besides BadZipFile): lying offsets and sizes, bad names.
ZIP_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    ValueError,
    EOFError,
    OSError,
    OverflowError,
    NotImplementedError,
    RuntimeError,
    UnicodeDecodeError,
    struct.error,
    zlib.error,
)


def _central_directory(path: Path, size: int) -> tuple[int, int] | None:
    """(entries, central directory bytes) from the archive's end record, or None if there is none (zipfile then
    says why). Read before zipfile parses the directory, so a directory of millions of entries is never built."""
    with open(path, "rb") as handle:
        tail_size = min(size, (1 << 16) + 22)
        handle.seek(size - tail_size)
        tail = handle.read(tail_size)
        at = len(tail) - 22 if tail[-22:-18] == b"PK\x05\x06" else tail.rfind(b"PK\x05\x06")
        if at < 0 or len(tail) - at < 22:
            return None
        entries, cd_size = struct.unpack_from("<HI", tail, at + 10)
        if entries == 0xFFFF or cd_size == 0xFFFFFFFF:  # ZIP64: the real numbers are in the ZIP64 end record
            locator = at - 20
            if locator < 0 or tail[locator : locator + 4] != b"PK\x06\x07":
                return entries, cd_size
            (record,) = struct.unpack_from("<Q", tail, locator + 8)
            if record > size - 56:
                return None
            handle.seek(record)
            zip64 = handle.read(56)
            if len(zip64) < 56 or zip64[:4] != b"PK\x06\x06":
                return None
            entries, cd_size = struct.unpack_from("<QQ", zip64, 32)
    return entries, cd_size


def check_zip_members(path: Path, kind: str) -> list[zipfile.ZipInfo]:
    """The members of a zip archive of the bundle; refuses path escapes, members that do not belong there,
    encrypted or (in a `.npz`) compressed members, sizes the archive cannot hold, zip bombs, and archives whose
    directory alone would take unbounded memory. Opens nothing but the directory."""
    size = os.path.getsize(path)
    directory = _central_directory(path, size)
    if directory is not None and (
        directory[0] > MAX_ZIP_MEMBERS or directory[1] > MAX_CENTRAL_DIRECTORY_BYTES
    ):
        raise IntegrityError(
            f"{path.name} has an implausibly large zip directory ({directory[0]} entries, {directory[1]} bytes)"
        )
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
    except ZIP_ERRORS as error:
        raise IntegrityError(f"{path.name} is not a valid zip archive ({first_line(error)})") from None
    if len(infos) > MAX_ZIP_MEMBERS:
        raise IntegrityError(f"{path.name} has an implausibly large zip directory ({len(infos)} entries)")
    seen: set[str] = set()
    for info in infos:
        name = info.filename
        try:
            check_relative_path(name.rstrip("/") or name)
        except IntegrityError:
            raise IntegrityError(f"{path.name} holds a member with an unsafe path: {name[:200]!r}") from None
        if name in seen:
            raise IntegrityError(f"{path.name} holds {name!r} twice")
        seen.add(name)
        if kind == "npz" and not name.endswith(NPZ_MEMBER_SUFFIX):
            raise IntegrityError(f"{path.name} holds {name!r}, not a .npy array")
        if kind == "keras" and name not in KERAS_MEMBERS and not name.startswith("assets/"):
            raise IntegrityError(f"{path.name} holds unexpected member {name!r}")
        if info.flag_bits & 0x1:
            raise IntegrityError(f"{path.name}/{name} is encrypted")
        stored = info.compress_type == zipfile.ZIP_STORED
        if kind == "npz" and not stored or not stored and info.compress_type != zipfile.ZIP_DEFLATED:
            raise IntegrityError(
                f"{path.name}/{name} is compressed with method {info.compress_type} (refused)"
            )
        if info.header_offset + info.compress_size > size or stored and info.file_size != info.compress_size:
            raise IntegrityError(f"{path.name}/{name} declares sizes its archive does not hold")
        if info.file_size > MAX_DEFLATE_RATIO * info.compress_size + 1024:
            raise IntegrityError(f"{path.name}/{name} expands to {info.file_size} bytes (a zip bomb)")
        if kind == "keras" and name in KERAS_JSON_MEMBERS and info.file_size > MAX_JSON_MEMBER_BYTES:
            raise IntegrityError(f"{path.name}/{name} is implausibly large ({info.file_size} bytes)")
    return infos


def check_npz_headers(path: Path) -> None:
    """Reads only the headers of a `.npz`'s arrays: an object (pickled) dtype anywhere is refused, and so is a
    header whose shape and dtype do not account for exactly the bytes the member holds (numpy allocates what
    the header declares before it reads a byte)."""
    infos = check_zip_members(path, "npz")
    try:
        archive = zipfile.ZipFile(path)
    except ZIP_ERRORS as error:
        raise IntegrityError(f"{path.name} is not a valid zip archive ({first_line(error)})") from None
    with archive:
        for info in infos:
            name = info.filename
            try:
                with archive.open(info) as member:
                    version = np.lib.format.read_magic(member)
                    if version == (1, 0):
                        shape, _, dtype = np.lib.format.read_array_header_1_0(member)
                    elif version == (2, 0):
                        shape, _, dtype = np.lib.format.read_array_header_2_0(member)
                    else:
                        raise ValueError(f"unsupported .npy version {version}")
                    data_start = member.tell()
            except (*ZIP_ERRORS, SyntaxError, TypeError, RecursionError, MemoryError) as error:
                raise IntegrityError(
                    f"{path.name}/{name} is not a valid .npy array ({first_line(error)})"
                ) from None
            if dtype.hasobject:
                raise IntegrityError(f"{path.name}/{name} holds a pickled object array (refused)")
            count = 1
            for dim in shape:
                if not isinstance(dim, int) or dim < 0:
                    raise IntegrityError(f"{path.name}/{name} has an invalid shape")
                count *= dim
            declared = count * dtype.itemsize
            if data_start + declared != info.file_size:
                raise IntegrityError(
                    f"{path.name}/{name} declares {declared} bytes of data but holds {info.file_size - data_start}"
                )


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    first = text.splitlines()[0][:200] if text else ""
    return f"{type(error).__name__}: {first}" if first else type(error).__name__
