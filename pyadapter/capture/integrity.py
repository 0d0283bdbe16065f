"""Hashes and path checks for capture bundles: what makes a bundle safe to open.

A bundle is a directory whose manifest lists every file with its sha256. Reading one must never follow a path
out of the directory (``..``, absolute paths, symlinks) nor accept a file the manifest does not list. Nothing here
imports TensorFlow.
"""

from __future__ import annotations

import hashlib
import os
import stat
import zipfile
from pathlib import Path, PurePosixPath

CHUNK = 1 << 20


class IntegrityError(ValueError):
    """A bundle file or path that fails a check; the message is one line."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
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


def check_zip_members(path: Path, kind: str) -> list[str]:
    """Names inside a zip archive of the bundle; refuses path escapes and members that do not belong there."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except zipfile.BadZipFile:
        raise IntegrityError(f"{path.name} is not a valid zip archive") from None
    for name in names:
        try:
            check_relative_path(name.rstrip("/") or name)
        except IntegrityError:
            raise IntegrityError(f"{path.name} holds a member with an unsafe path: {name!r}") from None
        if kind == "npz" and not name.endswith(NPZ_MEMBER_SUFFIX):
            raise IntegrityError(f"{path.name} holds {name!r}, not a .npy array")
        if kind == "keras" and name not in KERAS_MEMBERS and not name.startswith("assets/"):
            raise IntegrityError(f"{path.name} holds unexpected member {name!r}")
    return names
