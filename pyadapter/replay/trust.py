"""Which program a replay may run. A bundle is data: it names the program it came from, and that name is never
enough to run it.

A replay (rebuild, re-entry, the input-pipeline re-run) runs the bundle's entry script or notebook only when
- it lies inside the folder the replay runs in (the CLI's current folder; the editor starts it in the workspace
  folder), and
- its code is what was captured: the script's sha256, or a notebook's code cells (saving outputs does not count),
  equal the bundle's record, and
- the bundle carries this user's seal (`pyadapter.capture.seal`): its program, argv, folder and module are what
  the user's own NanGuard recorded on this machine, not a choice made by whoever wrote the manifest;
or when the user named that very file as trusted (``--trust-entry PATH``; the editor asks, naming the file). The
working folder a manifest records is used only inside that folder; its argv is the sealed record's. Everything else is one line that
names the file and the flag, before anything runs.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pyadapter.capture.seal import is_sealed_here, own_key_problem
from pyadapter.replay.errors import ReplayError

TRUST_ENV = "NANLENS_TRUST_ENTRY"  # os.pathsep-separated files the user trusts; children inherit it
_trusted: set[Path] = set()


class UntrustedEntry(ReplayError):
    """The bundle's program may not run without the user's say (outside the folder, changed, or the bundle is not
    sealed here)."""


def add_trust_argument(parser: Any) -> None:
    """``--trust-entry PATH`` (repeatable), for the commands that may replay."""
    parser.add_argument(
        "--trust-entry",
        action="append",
        default=[],
        metavar="PATH",
        help="run this program although it is outside the current folder, changed since the capture, or named by a "
        "bundle your own NanGuard did not seal (a bundle names its program and arguments; only your own sealed, "
        "unchanged code runs without this); repeatable",
    )


def allow(paths: Iterable[str | os.PathLike[str]]) -> None:
    """Trust these files for this process and the children it starts (``--trust-entry``)."""
    for path in paths:
        _trusted.add(Path(path).resolve())
    if _trusted:  # added to what this process was given, never replacing it
        os.environ[TRUST_ENV] = os.pathsep.join(str(p) for p in sorted(trusted_files()))


def trusted_files() -> set[Path]:
    found = set(_trusted)
    for part in os.environ.get(TRUST_ENV, "").split(os.pathsep):
        if part.strip():
            found.add(Path(part.strip()).resolve())
    return found


def _recorded_code_hash(bundle: Any, program: Path) -> tuple[str | None, str | None]:
    """(recorded, current) hash of the program's code."""
    from pyadapter.capture.integrity import sha256_file

    record = bundle.manifest.get("entry_script") or {}
    if program.suffix.lower() == ".ipynb" and isinstance(record.get("code_sha256"), str):
        from pyadapter.capture.notebook import code_sha256

        try:
            return record["code_sha256"], code_sha256(program)
        except ValueError:
            return record["code_sha256"], None
    recorded = record.get("sha256")
    try:
        current = sha256_file(program)
    except OSError:
        current = None
    return (recorded if isinstance(recorded, str) else None), current


def _saved_after_the_run(bundle: Any, program: Path) -> bool:
    """A notebook saved after the capture with exactly the cells its kernel ran (edited, run, then saved): its
    hash is new, its code is what trained."""
    if program.suffix.lower() != ".ipynb":
        return False
    from pyadapter.capture.notebook import saved_cells_were_run

    recorded = (bundle.manifest.get("entry_script") or {}).get("notebook")
    return (
        isinstance(recorded, dict)
        and Path(str(recorded.get("path"))).resolve() == program
        and (saved_cells_were_run(recorded))
    )


def changed_since_capture(bundle: Any, program: Path) -> bool:
    """Whether the program's code is not what trained: its hash is not the bundle's record, and (a notebook) its
    saved cells are not all code the kernel ran."""
    recorded, current = _recorded_code_hash(bundle, program)
    return recorded is not None and current != recorded and not _saved_after_the_run(bundle, program)


def check_entry(bundle: Any, *, root: str | os.PathLike[str] | None = None) -> Path:
    """The bundle's program, resolved, if a replay may run it; raises `UntrustedEntry` (one line) otherwise, and
    ReplayError when the bundle names no program or it is missing."""
    entry = bundle.entry_script
    if entry is None:
        raise ReplayError(f"{bundle.path}: the bundle does not record its program, so it cannot be replayed")
    program = Path(entry).resolve()
    if not program.is_file():
        raise ReplayError(
            f"the bundle's program {program} is missing, so its step can be neither rebuilt nor re-entered: restore "
            "it, or replay on the machine that captured the bundle (findings located at the scene still show)"
        )
    if program in trusted_files():
        return program
    folder = Path(root if root is not None else os.getcwd()).resolve()
    sealed = is_sealed_here(bundle.manifest)
    # An unsealed bundle's refusal shows the arguments it would pass too: the user's yes covers the whole command.
    shown = str(program) if sealed else _command_text(bundle, program)
    if not program.is_relative_to(folder):
        raise UntrustedEntry(
            f"not running {shown}: the bundle names it, but it is outside {folder} (the folder nanlens runs in); "
            f"if it is your code, run nanlens from its folder or add --trust-entry {program}"
        )
    if not sealed:
        # The program, its arguments and folder are the bundle's word, not the user's: a bundle from another
        # machine or user, or one whose manifest was edited, could name any file here with any arguments. Asked
        # before the hash: a forged hash would otherwise make it the "changed since the capture" question, which
        # speaks of the user's own edit and shows no arguments.
        problem = own_key_problem()
        why = (
            f"{problem}, so no bundle's seal counts"
            if problem
            else "it came from another machine or user, was written by an older NaN Lens, or its manifest or "
            "files were edited"
        )
        raise UntrustedEntry(
            f"not running {shown}: {NOT_SEALED} ({why}), so that program and those arguments are the bundle's "
            f"choice; if they are yours, add --trust-entry {program}"
        )
    if changed_since_capture(bundle, program):
        raise UntrustedEntry(
            f"not running {program}: {CHANGED} (sha256 differs from the bundle's record); "
            f"if the change is yours, add --trust-entry {program}"
        )
    return program


# The fixed words of each refusal, by which the server tells them apart (`server.consent.untrusted_of`); the rest of
# a refusal may hold a bundle's own text (its program's path and arguments).
NOT_SEALED = "this bundle does not carry your NanGuard's seal"
OUTSIDE = "the bundle names it, but it is outside"
CHANGED = "its code changed since the capture"


def _command_text(bundle: Any, program: Path) -> str:
    """The program and the arguments a replay would give it, as one printable shell line."""
    argv = (bundle.manifest.get("entry_script") or {}).get("argv")
    arguments = [a for a in argv[1:] if isinstance(a, str)] if isinstance(argv, list) else []
    if program.suffix.lower() == ".ipynb":
        arguments = []  # a notebook's argv is its kernel's (-f connection.json); its cells get none
    text = shlex.join([str(program), *arguments]) if arguments else str(program)
    # Never a control character (a terminal escape) on the user's screen: shown as its escape.
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def safe_cwd(bundle: Any, program: Path, *, root: str | os.PathLike[str] | None = None) -> Path:
    """The working folder the program ran in, when it lies inside the replay's folder (or is the program's own
    folder); else the program's folder."""
    folder = Path(root if root is not None else os.getcwd()).resolve()
    recorded = (bundle.manifest.get("entry_script") or {}).get("cwd")
    if isinstance(recorded, str):
        candidate = Path(recorded).resolve()
        if candidate.is_dir() and (candidate.is_relative_to(folder) or candidate == program.parent):
            return candidate
    return program.parent
