"""While a program runs again for a replay, the files it writes or deletes stay as training left them.

A replay by re-entry runs the user's program up to the captured step. Its set-up writes files as it did in
training: ``log = open("train.log", "w")`` empties the run's log, ``np.save`` overwrites arrays, ``shutil.rmtree
("logs")`` deletes the TensorBoard runs before making the folder again. A replay must lose nothing, so inside
`ScratchFiles.active` the program's writes go to a scratch copy instead: a file opened for writing is created in a
scratch folder (an existing file opened to append or update is copied there first), later reads of that path by the
program read the copy, and a deleted file or folder is only marked deleted (reads of it fail as they would). Only paths in the program's folder and the folder it runs in are kept this way.

What it covers is Python's own file calls (``open``/``io.open``, and so ``np.save``, ``json.dump``, ``csv``,
``pathlib``; ``os.remove``/``os.unlink``, ``shutil.rmtree``, ``os.makedirs``/``os.mkdir`` of a folder marked
deleted). TensorFlow's C++ writers (``tf.io.write_file``, ``tf.io.gfile``) are not; the replay's model and
checkpoint saves are skipped by `pyadapter.replay.reentry` instead. NaN Lens's own writes (the replay's dump, its
findings) are made while the patches are paused (`ScratchFiles.paused`).
"""

from __future__ import annotations

import builtins
import contextlib
import io
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_WRITING = set("wax+")


def _writes(mode: Any) -> bool:
    return isinstance(mode, str) and bool(_WRITING & set(mode))


def _absolute(path: Any) -> str | None:
    """The absolute path of a path-like argument, or None for a file descriptor or anything else."""
    if isinstance(path, int) or not isinstance(path, (str, bytes, os.PathLike)):
        return None
    return os.path.abspath(os.fsdecode(os.fspath(path)))


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


class ScratchFiles:
    """The program's writes, kept in a scratch folder for the length of one replay (see the module docstring)."""

    def __init__(self, folders: list[str | Path], own: list[str | Path] | None = None) -> None:
        # Only paths in these folders are kept (the program's own and the one it runs in): a temporary file the
        # program makes elsewhere (``tempfile``, which removes its files itself) is its own business.
        self.folders = sorted({os.path.abspath(f) for f in folders})
        # NaN Lens's own folders in them (a notebook's cell files, written while the program runs): written as is.
        self.own = sorted({os.path.abspath(f) for f in own or []})
        self.copies: dict[str, str] = {}  # path the program wrote -> its scratch copy
        self.deleted: set[str] = set()  # files and folders the program deleted (still on disk)
        # Existing files and folders (training's) that the program wrote or deleted, as the route shows them.
        self.kept: list[str] = []
        self.made: list[str] = []  # folders the program made that did not exist (removed when left empty)
        self._folder: str | None = None
        self._paused = 0
        self._cwd = os.getcwd()

    # ---- bookkeeping --------------------------------------------------------------------------------------------

    def _kept_path(self, path: Any) -> str | None:
        """The absolute path of `path` when this object keeps it (not paused, in one of `folders`, not in one of
        `own`), else None."""
        if self._paused:
            return None
        absolute = _absolute(path)
        if absolute is None or not any(_within(absolute, folder) for folder in self.folders):
            return None
        if any(_within(absolute, folder) for folder in self.own):
            return None
        return absolute

    def _shown(self, path: str) -> str:
        try:
            relative = os.path.relpath(path, self._cwd)
        except ValueError:
            return path
        return path if relative.startswith("..") else relative

    def _keep(self, path: str) -> None:
        shown = self._shown(path)
        if shown not in self.kept:
            self.kept.append(shown)

    def _is_deleted(self, path: str) -> bool:
        return any(_within(path, gone) for gone in self.deleted)

    def _copy_for(self, path: str) -> str:
        if self._folder is None:
            self._folder = tempfile.mkdtemp(prefix="nanlens-replay-writes-")
        copy = self.copies.get(path)
        if copy is None:
            copy = os.path.join(self._folder, f"{len(self.copies)}-{os.path.basename(path) or 'file'}")
            self.copies[path] = copy
        return copy

    def _exists(self, path: str) -> bool:
        return not self._is_deleted(path) and os.path.lexists(path)

    # ---- the calls that stand in for Python's --------------------------------------------------------------------

    def open(self, original: Any, file: Any, mode: Any = "r", *args: Any, **kwargs: Any) -> Any:
        path = self._kept_path(file)
        if path is None:
            return original(file, mode, *args, **kwargs)
        if _writes(mode):
            existed = path not in self.copies and self._exists(path)
            if existed:
                self._keep(path)
            copy = self._copy_for(path)
            if existed and ("a" in mode or "+" in mode) and os.path.isfile(path):
                with self.paused():  # appending or updating starts from training's file
                    shutil.copyfile(path, copy)
            self.deleted = {gone for gone in self.deleted if gone != path}
            return original(copy, mode, *args, **kwargs)
        if path in self.copies:
            return original(self.copies[path], mode, *args, **kwargs)
        if self._is_deleted(path):
            raise FileNotFoundError(2, "No such file or directory", os.fsdecode(os.fspath(file)))
        return original(file, mode, *args, **kwargs)

    def remove(self, original: Any, path: Any, *args: Any, **kwargs: Any) -> None:
        target = None if args or kwargs else self._kept_path(path)  # dir_fd=: not the program's own call
        if target is None:
            original(path, *args, **kwargs)
            return
        copy = self.copies.pop(target, None)
        if copy is not None:
            if os.path.lexists(copy):
                original(copy)
        elif self._is_deleted(target):
            raise FileNotFoundError(2, "No such file or directory", os.fsdecode(os.fspath(path)))
        elif not os.path.lexists(target) or os.path.isdir(target):
            original(path)  # raises what Python raises for a missing file or a folder
        else:
            self._keep(target)
        self.deleted.add(target)

    def rmtree(self, original: Any, path: Any, *args: Any, **kwargs: Any) -> None:
        target = self._kept_path(path)
        if target is None:
            original(path, *args, **kwargs)
            return
        ignore_errors = bool(args[0]) if args else bool(kwargs.get("ignore_errors", False))
        if self._is_deleted(target):
            if ignore_errors:
                return
            raise FileNotFoundError(2, "No such file or directory", os.fsdecode(os.fspath(path)))
        if not os.path.lexists(target) or not os.path.isdir(target):
            if ignore_errors:
                return
            original(path, *args, **kwargs)  # raises FileNotFoundError / NotADirectoryError as Python does
            return
        for written in [p for p in self.copies if _within(p, target)]:
            self.copies.pop(written)
        self._keep(target)
        self.deleted.add(target)

    def makedirs(self, original: Any, name: Any, *args: Any, **kwargs: Any) -> None:
        target = self._kept_path(name)
        if target is not None and self._is_deleted(target) and os.path.isdir(target):
            # The folder the program deleted is still on disk: making it again is the program's intent.
            self.deleted = {gone for gone in self.deleted if not _within(target, gone)}
            return
        missing = []
        if target is not None:
            folder = target
            while folder and not os.path.exists(folder):
                missing.append(folder)
                folder = os.path.dirname(folder)
        original(name, *args, **kwargs)
        # Made for the replay only (a BackupAndRestore's backup folder, whose files go to the scratch copy): removed
        # at the end if still empty, so the folder is as training left it.
        self.made += [path for path in missing if os.path.isdir(path)]

    # ---- installing them ---------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def active(self) -> Iterator[ScratchFiles]:
        """Python's file calls go through this object until the block ends; the scratch folder is removed then."""
        self._cwd = os.getcwd()
        real_open, real_remove, real_unlink = builtins.open, os.remove, os.unlink
        real_rmtree, real_makedirs, real_mkdir = shutil.rmtree, os.makedirs, os.mkdir

        def open_(file: Any, mode: Any = "r", *args: Any, **kwargs: Any) -> Any:
            return self.open(real_open, file, mode, *args, **kwargs)

        def remove(path: Any, *args: Any, **kwargs: Any) -> None:
            self.remove(real_remove, path, *args, **kwargs)

        def unlink(path: Any, *args: Any, **kwargs: Any) -> None:
            self.remove(real_unlink, path, *args, **kwargs)

        def rmtree(path: Any, *args: Any, **kwargs: Any) -> None:
            self.rmtree(real_rmtree, path, *args, **kwargs)

        def makedirs(name: Any, *args: Any, **kwargs: Any) -> None:
            self.makedirs(real_makedirs, name, *args, **kwargs)

        def mkdir(path: Any, *args: Any, **kwargs: Any) -> None:
            self.makedirs(real_mkdir, path, *args, **kwargs)

        patches = [
            (builtins, "open", open_),
            (io, "open", open_),
            (os, "remove", remove),
            (os, "unlink", unlink),
            (shutil, "rmtree", rmtree),
            (os, "makedirs", makedirs),
            (os, "mkdir", mkdir),
        ]
        saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
        for owner, name, replacement in patches:
            setattr(owner, name, replacement)
        try:
            yield self
        finally:
            for owner, name, original in reversed(saved):
                setattr(owner, name, original)
            if self._folder is not None:
                shutil.rmtree(self._folder, ignore_errors=True)
            for made in sorted(set(self.made), key=len, reverse=True):  # the deepest first
                with contextlib.suppress(OSError):
                    os.rmdir(made)  # only an empty one

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """NaN Lens's own work inside the program (the replay, its dump and findings) writes where it means to."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    def note(self) -> str:
        """'; 2 existing files it writes or deletes left untouched (train.log, ...)' for the route, or ''."""
        if not self.kept:
            return ""
        count = len(self.kept)
        more = ", ..." if count > 1 else ""
        return (
            f"; {count} existing file{'s' if count != 1 else ''} it writes or deletes left untouched "
            f"({self.kept[0][:60]}{more})"
        )
