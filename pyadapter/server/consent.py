"""Whose say runs a bundle's program: the language server locates no bundle unasked.

A bundle is data. Showing it (findings located at the scene, a cached locate) runs nothing. Locating a bundle
without findings replays its step, which runs the program the bundle names, so the server does that only
- when the user asked (the Locate lens, the Captures view, a command: ``nanlens.server.locateBundle``), or
- automatically when the setting ``nanlens.locate.automatic`` is on AND the bundle is the user's own: sealed by
  the user's NanGuard on this machine (`pyadapter.capture.seal`; a hostname in the manifest proves nothing) and
  not pulled from elsewhere.
A foreign bundle (pulled, unsealed, or sealed by another key) waits for a click whatever the setting, and its
program runs only after the user said yes to it, named with its arguments. Every replay child starts in the workspace folder, where ``nanlens locate/replay`` refuse a program
outside that folder, changed since the capture, or named by an unsealed bundle in one line ``... --trust-entry PATH``; the server recognises
that line (``untrusted_of``) and hands the question to the editor, which asks the user, naming the file, and
runs it again with ``--trust-entry PATH`` on yes.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pyadapter.capture.seal import is_sealed_here
from pyadapter.capture.storage import PULLED_SUFFIX, mark_pulled, pulled_marker  # noqa: F401 - re-exported
from pyadapter.replay.trust import CHANGED, NOT_SEALED, OUTSIDE

log = logging.getLogger("nanlens.server.consent")

Reason = Literal["outside", "changed", "untrusted"]

# `nanlens: error: not running /abs/train.py: ... add --trust-entry /abs/train.py` (the CLI), or the same line
# without the prefix (the locate worker). The path runs to the end of the line: paths may hold spaces.
_FLAG = "--trust-entry "
_ERROR_PREFIX = "nanlens: error: "


@dataclass(frozen=True)
class Untrusted:
    """A replay refused to run the bundle's program until the user says so."""

    file: str
    reason: Reason
    message: str  # the refusal, one line

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "reason": self.reason, "message": self.message}


def untrusted_of(message: str | None) -> Untrusted | None:
    """The refusal in a replay's error line (the flag ``--trust-entry PATH`` is its mark), else None."""
    if not message:
        return None
    for line in reversed(message.strip().splitlines()):
        line = line.strip().removeprefix(_ERROR_PREFIX)
        flag = line.rfind(_FLAG)
        if flag < 0 or not line[flag + len(_FLAG) :].strip():
            continue
        # The last flag, and the refusal's fixed words: a bundle's own path and arguments come before them (an
        # argv holding "--trust-entry /x" or "outside" chose the file or the question).
        file = line[flag + len(_FLAG) :].strip().strip("'\"")
        reason: Reason = (
            "untrusted"
            if NOT_SEALED in line
            else "outside"
            if OUTSIDE in line
            else "changed"
            if CHANGED in line
            else "untrusted"
        )
        return Untrusted(file, reason, line)
    return None


def entry_of(manifest: dict[str, Any] | None) -> str | None:
    """The program a bundle names (its entry script or notebook), as recorded; None when it names none."""
    entry = manifest.get("entry_script") if isinstance(manifest, dict) else None
    path = entry.get("path") if isinstance(entry, dict) else None
    return path if isinstance(path, str) and path.strip() else None


def this_host() -> str:
    return socket.gethostname()


def foreign_reason(bundle: str, manifest: dict[str, Any] | None, pulled: bool = False) -> str | None:
    """Why a bundle is not the user's own capture on this machine (a short phrase for the editor), or None."""
    if pulled or os.path.exists(pulled_marker(bundle)):
        return "pulled"
    host = manifest.get("host") if isinstance(manifest, dict) else None
    hostname = host.get("hostname") if isinstance(host, dict) else None
    if isinstance(hostname, str) and hostname.strip() and hostname != this_host():
        return f"captured on {hostname}"  # even sealed (a home folder shared by several machines)
    # The hostname proves nothing (anyone can write one); the seal does.
    return None if is_sealed_here(manifest) else "not sealed by your NanGuard here"


class _ManifestView:
    """What ``pyadapter.replay.trust.check_entry`` reads of a bundle, from its manifest alone (loading the whole
    bundle would hash every array: the check needs the program's hash, not the bundle's)."""

    def __init__(self, path: str, manifest: dict[str, Any]) -> None:
        self.path = Path(path)
        self.manifest = manifest
        entry = entry_of(manifest)
        self.entry_script = Path(entry) if entry is not None else None


def check_entry(
    bundle: str, manifest: dict[str, Any] | None, root: str | None, trusted: set[str]
) -> dict[str, Any]:
    """Would a replay of this bundle, started in ``root`` with ``--trust-entry`` for ``trusted``, run its program?
    Reads files only (hashes the program); runs nothing. Answers ``{"entry", "trusted": bool | None,
    "untrusted": {...} | None, "error": str | None}``; ``trusted`` None: cannot tell (the replay will say)."""
    entry = entry_of(manifest)
    answer: dict[str, Any] = {"entry": entry, "trusted": None, "untrusted": None, "error": None}
    if manifest is None:
        answer["error"] = f"{bundle} is not a capture bundle (no manifest.json with format nanlens.bundle/1)"
        return answer
    try:
        from pyadapter.replay.errors import ReplayError
        from pyadapter.replay.trust import check_entry as replay_check_entry
    except ImportError:
        return answer  # an install without the check: the replay itself decides
    if entry is not None and _resolved(entry) in {_resolved(t) for t in trusted}:
        answer["trusted"] = True
        return answer
    try:
        replay_check_entry(_ManifestView(bundle, manifest), root=root)
    except ReplayError as exc:
        text = str(exc).strip().splitlines()
        line = text[0] if text else type(exc).__name__
        untrusted = untrusted_of(line)
        if untrusted is not None:
            answer["trusted"], answer["untrusted"] = False, untrusted.to_json()
        else:
            answer["error"] = line
        return answer
    except Exception:  # the check is advice; a failure in it must not block a replay the CLI would allow
        log.exception("checking the program of %s failed", bundle)
        return answer
    answer["trusted"] = True
    return answer


def refusal_of(
    bundle: str, manifest: dict[str, Any] | None, root: str | None, trusted: set[str]
) -> Untrusted | None:
    """What a replay of this bundle would refuse (its program outside ``root``, changed, or named by an unsealed bundle), found before anything
    runs so the editor can say it while the bundle waits; None when the replay would run it or cannot tell."""
    found = check_entry(bundle, manifest, root, trusted).get("untrusted")
    return Untrusted(found["file"], found["reason"], found["message"]) if found else None


def _resolved(path: str) -> str:
    try:
        return str(Path(path).resolve())
    except (OSError, RuntimeError):
        return os.path.abspath(path)
