"""Whose say a bundle is: the seal NanGuard puts on the manifest, and so on every file the manifest hashes.

A bundle names a program, its argv, working folder, module, notebook cell order, step function and fit call. A
replay runs that program with those arguments, so whoever wrote those fields chooses code to run: a bundle handed
over in a repository or a shared folder could name any file of the workspace with any arguments (``ipython -c ...``
from a virtualenv inside the project, a clean-up script with a path), with a matching sha256, because the manifest
records the hash too. The hash says the file is unchanged, not that the user chose it. Other fields choose code too,
less plainly: ``keras_line`` picks tf_keras's loader, whose "safe mode" imports any module a model.keras names; and
the data a replay loads (model.keras, arrays) is the bundle's word unless the manifest hashing it is the user's.

The seal says the user's NanGuard wrote it: an HMAC-SHA256 of the whole manifest (every field but the seal, the
files' sha256 among them, so every file too) under a key that only this user's NanGuard on this machine holds
(``~/.nanlens/bundle-seal.key``, 32 random bytes made on first use, readable by the user only; ``NANLENS_SEAL_KEY``
names another file). A bundle NanGuard wrote here carries a valid seal; a bundle from another machine, another
user, an older NaN Lens, or with any field or file edited does not, and its program runs only when the user names
it (``--trust-entry``; the editor asks, naming the program and its arguments). The seal is never a reason to
distrust data: findings, arrays and pictures of an unsealed bundle show as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import sys
from pathlib import Path
from typing import Any

SEAL_KEY = "seal"  # the manifest's key holding the seal
# /1 sealed only the fields naming the program, step function and fit call: an edited keras_line or model.keras
# kept the seal. /2 seals the whole manifest; a /1 seal counts as none.
FORMAT = "nanlens.seal/2"
KEY_ENV = "NANLENS_SEAL_KEY"
_KEY_BYTES = 32
_HEX_MAC = re.compile(r"[0-9a-f]{64}")
_said_unsealed = False


def key_path() -> Path | None:
    """The key file; None when there is no home folder to hold it (HOME unset, a uid with no passwd entry)."""
    named = os.environ.get(KEY_ENV, "").strip()
    try:
        return Path(named).expanduser() if named else Path.home() / ".nanlens" / "bundle-seal.key"
    except (RuntimeError, KeyError, OSError):
        return None


def key_problem(path: Path) -> str | None:
    """Why the key file at `path` cannot prove anything, or None: a key another user can read could seal their
    bundles as this user's, and one in a folder another user can write could be swapped for theirs. NanGuard makes
    both the user's alone (0600 in a 0700 folder); a copy, a changed mode or another owner is said, not used."""
    if not hasattr(os, "geteuid"):
        return None  # no POSIX owners and modes to judge (Windows: the profile folder is the user's)
    me = os.geteuid()
    try:
        folder = os.stat(path.parent)
        found = os.lstat(path)
    except OSError:
        return None  # no key yet: nothing to judge
    if not stat.S_ISREG(found.st_mode):
        return f"the seal key {path} is not a regular file"
    if found.st_uid != me:
        return f"the seal key {path} belongs to another user (uid {found.st_uid})"
    if found.st_mode & 0o077:
        return (
            f"the seal key {path} is readable or writable by others (mode {stat.S_IMODE(found.st_mode):04o}; "
            f"chmod 600 it, or delete it for a new key)"
        )
    sticky = bool(folder.st_mode & stat.S_ISVTX)  # /tmp-like: others cannot replace what is ours
    if folder.st_uid not in (me, 0) or (folder.st_mode & 0o022 and not sticky):
        return f"the seal key's folder {path.parent} can be written by another user"
    return None


def own_key_problem() -> str | None:
    """`key_problem` of this user's key file (None when there is none, or no home to hold it)."""
    path = key_path()
    return key_problem(path) if path is not None else None


def _read_key(path: Path) -> bytes | None:
    if key_problem(path) is not None:
        return None
    try:
        # O_NOFOLLOW: the file judged above, not a link swapped in since.
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(descriptor, "rb") as handle:
            key = handle.read(_KEY_BYTES + 1)
    except OSError:
        return None
    return key if len(key) == _KEY_BYTES else None


def _key(create: bool) -> bytes | None:
    """This user's seal key; made (readable by the user only) when `create` and there is none. None when it
    cannot be read or made (a read-only home): bundles are then written unsealed, and replays ask."""
    path = key_path()
    if path is None:
        return None
    key = _read_key(path)
    if key is not None or not create or key_problem(path) is not None:
        return key
    # Written whole under another name, then linked into place: a crash or a second process never sees (and never
    # keeps) a key file shorter than the key. The first link wins; the others read its key.
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fresh = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        descriptor = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return None
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(secrets.token_bytes(_KEY_BYTES))
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(fresh, path)
        except FileExistsError:
            pass  # another process made it first
        except OSError:
            return None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(fresh)
    return _read_key(path)


def _sealed_text(manifest: dict[str, Any]) -> bytes:
    """The manifest without its seal as canonical JSON (sorted keys, no spaces): the same bytes before writing and
    after reading back, as the manifest holds only JSON values."""
    fields = {name: value for name, value in manifest.items() if name != SEAL_KEY}
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")


def _mac(key: bytes, manifest: dict[str, Any]) -> str:
    return hmac.new(key, _sealed_text(manifest), hashlib.sha256).hexdigest()


def sealed(manifest: dict[str, Any]) -> dict[str, Any]:
    """`manifest` (JSON values only) with this user's seal over all of it; unchanged (and unsealed) when there is no
    key and none can be made."""
    key = _key(create=True)
    unsealed = {k: v for k, v in manifest.items() if k != SEAL_KEY}
    if key is None:
        global _said_unsealed
        if not _said_unsealed:  # once per process: a read-only home makes every bundle of the run unsealed
            _said_unsealed = True
            why = own_key_problem() or (
                f"cannot read or make the seal key {key_path() or '~/.nanlens/bundle-seal.key'}"
            )
            print(
                f"NaN Lens: {why}: bundles are written unsealed, and a replay asks before it runs their program "
                "(--trust-entry)",
                file=sys.stderr,
            )
        return unsealed
    return {**unsealed, SEAL_KEY: {"format": FORMAT, "hmac": _mac(key, unsealed)}}


def is_sealed_here(manifest: Any) -> bool:
    """Whether `manifest` carries a valid seal of this user's key: its program, arguments and folder are what
    this user's NanGuard recorded on this machine. Reads the key, never makes one."""
    if not isinstance(manifest, dict):
        return False
    seal = manifest.get(SEAL_KEY)
    if not isinstance(seal, dict) or seal.get("format") != FORMAT or not isinstance(seal.get("hmac"), str):
        return False
    key = _key(create=False)
    if key is None:
        return False
    given = seal["hmac"]
    if not _HEX_MAC.fullmatch(given):
        return False  # compare_digest raises on a str that is not ASCII
    try:
        expected = _mac(key, manifest)
    except (TypeError, ValueError):  # a field that is not JSON (never from a loaded manifest)
        return False
    return hmac.compare_digest(expected.encode("ascii"), given.encode("ascii"))
