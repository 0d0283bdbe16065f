"""The capture bundle's format: names, the manifest's outer shape, and the atomic writer.

Layout of ``capture_dir/<run>-step<N>/``::

    manifest.json      format "nanlens.bundle/1", versions, host, step/epoch, what went non-finite, entry script
                       (absolute path + sha256), RNG states, the step history ("loss_history", below), and the
                       sha256 + size of every file
    batch.npz          the step's inputs (x, y, sample weights / the step function's arguments), flat arrays;
                       the nesting (dict/list/tuple) is described in manifest["batch"]["structure"]
    weights.npz        raw values of the model and optimizer variables before the failing update (names in
                       manifest["weights"]["variables"]), written one variable at a time
    model.keras        (Keras fit) the model's architecture and compile settings: a Keras archive of config.json
                       and metadata.json, whose values are weights.npz's (`model_archive`); bundles of nanlens 0.2.0
                       and earlier, tf_keras models and models with assets hold Keras's whole archive (values in it)
    checkpoint/        (custom loops) a tf.train.Checkpoint of what is trained, before the failing update

``manifest["loss_history"]`` holds the guard's last ``history_size`` steps up to the failing one, oldest first::

    {"step": 11, "loss": 5.1e17, "logged_loss": 2.3e17, "grad_norm": 3.0e19, "weight_norm": 8.1e9,
     "update_ratio": 1.9, "max_abs_output": 7.2e8}
    {"step": 12, "loss": null, "loss_nonfinite": "inf", "logged_loss": null, "logged_loss_nonfinite": "inf",
     "grad_norm": null, "grad_norm_nonfinite": "inf", "weight_norm": 8.1e9, "update_ratio": null,
     "max_abs_output": 1.3e19}

Each number is null when not measured or not finite, and a non-finite one also has ``<name>_nonfinite`` =
"nan" | "inf" | "-inf". What each measures: `pyadapter.capture.history`.

Every array file is read with ``allow_pickle=False`` and the Keras archive with ``safe_mode=True``; nothing in a
bundle is ever unpickled. A bundle is written into a hidden temporary directory inside ``capture_dir`` (named
``.<name>~<host>~<pid>~<random>.partial``) and renamed into place as the last step, so a crash mid-write never
leaves a half bundle under a bundle's name; the next writer on the host removes such leftovers.

The rooms around this module: ``writer`` assembles a bundle's manifest and files (NanGuard, guard_step) and
``storage`` publishes it to URL folders; ``reader`` (`CaptureBundle`) opens one and verifies it (with
``integrity``); rebuilding TensorFlow/Keras objects from it is ``pyadapter.replay.restore``. This module imports
none of them and no TensorFlow.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pyadapter import safejson
from pyadapter.capture import integrity, structure
from pyadapter.capture.progress import WriteProgress
from pyadapter.capture.seal import SEAL_KEY
from pyadapter.capture.seal import sealed as seal_manifest

FORMAT = "nanlens.bundle/1"
MANIFEST = "manifest.json"
BATCH_FILE = "batch.npz"
WEIGHTS_FILE = "weights.npz"
MODEL_FILE = "model.keras"
# Dtype policies a model may be saved with that `saved_dtype_policy` sets globally while loading.
CHECKPOINT_DIR = "checkpoint"
CHECKPOINT_PREFIX = "checkpoint/ckpt"
FINDINGS_FILE = (
    "findings.json"  # the origin, located at the scene (in the training process) when the step failed
)
MAX_MANIFEST_BYTES = 64 << 20
PARTIAL_SUFFIX = ".partial"

KIND_FIT = "keras_fit"
KIND_LOOP = "custom_loop"


class BundleError(Exception):
    """A capture bundle that cannot be used: tampered, incomplete, unsafe or from an incompatible version.

    The message is one line, fit for ``nanlens: error: ...``.
    """


_CHECKPOINT_FILE = re.compile(r"checkpoint/ckpt\.(index|data-\d{5}-of-\d{5})")
_SHARD_FILE = re.compile(
    r"shards/worker-\d{1,5}\.npz"
)  # multi-worker bundles: each worker's part of the batch


WINDOW_FILES = ("window/state.npz", "window/batches.npz")  # the guard's window (`pyadapter.capture.window`)


def is_bundle_file(name: str) -> bool:
    """The files a bundle may hold; anything else (a pickle, a script, ...) marks a bundle that was tampered."""
    return (
        name in (BATCH_FILE, WEIGHTS_FILE, MODEL_FILE, FINDINGS_FILE, *WINDOW_FILES)
        or _CHECKPOINT_FILE.fullmatch(name) is not None
        or _SHARD_FILE.fullmatch(name) is not None
    )


def is_partial(name: str) -> bool:
    """True for the name of a bundle still being written (or left by a killed writer): never a bundle to show."""
    return name.startswith(".") and PARTIAL_SUFFIX in name


def read_manifest_bytes(path: Path) -> bytes:
    """manifest.json's bytes, never more than `MAX_MANIFEST_BYTES` read (BundleError if larger; OSError)."""
    with open(path, "rb") as handle:
        data = handle.read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        raise BundleError("manifest.json is implausibly large")
    return data


def parse_manifest(data: bytes) -> dict[str, Any]:
    """manifest.json bytes -> a dict of the supported format, or BundleError (one line) for anything else:
    bad UTF-8 or JSON, nesting deeper than `safejson.MAX_DEPTH`, numbers out of range, another format."""
    try:
        manifest = safejson.loads(data)
    except safejson.JSONError as error:
        raise BundleError(f"manifest.json {error}") from None
    if not isinstance(manifest, dict):
        raise BundleError("manifest.json is not a JSON object")
    found = manifest.get("format")
    if found != FORMAT:
        shown = found if isinstance(found, (str, int, float, type(None))) else type(found).__name__
        raise BundleError(f"bundle format {shown!r:.80} is not supported (this nanlens reads {FORMAT})")
    return manifest


# --------------------------------------------------------------------------------------------------------------
# Writing


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale_partials(capture_dir: Path) -> None:
    """Removes temporary directories left by writers on this host that were killed mid-write."""
    host = socket.gethostname()
    for entry in capture_dir.glob(f".*{PARTIAL_SUFFIX}*"):
        fields = entry.name.rsplit("~", 3)  # .<name>~<host>~<pid>~<random>.partial; <name> may hold '~'
        if len(fields) < 4 or fields[1] != host or not fields[2].isdigit():
            continue
        if not _pid_alive(int(fields[2])) and entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)


@dataclass(frozen=True)
class ArraysFile:
    """An extra `.npz` of a bundle, to be written one array at a time (`BundleWriter.write_extra`): `arrays` is an
    iterable (a generator) of (key, array) pairs made as they are written, `total` their bytes, so a large file
    (the window's copy of the training state) is never all in memory at once."""

    arrays: Iterable[tuple[str, np.ndarray]]
    total: int


# An extra file of a bundle: its bytes, or arrays to stream into an `.npz`.
ExtraFile = bytes | ArraysFile


class BundleWriter:
    """Builds a bundle in a temporary directory next to its final place and renames it there on `commit`.

    Use as a context manager: an exception inside the block removes the temporary directory, so no bundle and no
    debris remains. A writer killed outright leaves only a hidden ``.<name>~<host>~<pid>~.partial*`` directory,
    which the next writer on the same host removes.
    """

    def __init__(self, capture_dir: Path | str, name: str, progress: WriteProgress | None = None) -> None:
        self.capture_dir = Path(capture_dir).absolute()
        self.capture_dir.mkdir(parents=True, exist_ok=True)
        clean_stale_partials(self.capture_dir)
        self.name = name
        self.tmp = Path(
            tempfile.mkdtemp(
                prefix=f".{name}~{socket.gethostname()}~{os.getpid()}~",
                suffix=PARTIAL_SUFFIX,
                dir=self.capture_dir,
            )
        )
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(self.tmp, 0o777 & ~umask)  # mkdtemp makes it 0700; a bundle is an ordinary directory
        self.final: Path | None = None
        self.progress = progress

    def __enter__(self) -> BundleWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None or self.final is None:
            self.abort()

    def file(self, name: str) -> Path:
        """Where to write the bundle file `name` (a relative POSIX path) while the bundle is being built."""
        path = self.tmp / integrity.check_relative_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        if self.progress is not None:
            self.progress.stage(name, 0)
        return path

    def write_arrays(
        self,
        name: str,
        arrays: Mapping[str, np.ndarray] | Iterable[tuple[str, np.ndarray]],
        total: int | None = None,
    ) -> None:
        """Writes an `.npz`, one array at a time: `arrays` may be a generator of (key, array) pairs (then `total`,
        their bytes, sizes the progress), so a bundle's weights are never all in memory at once."""
        if total is None and isinstance(arrays, Mapping):
            total = sum(int(array.nbytes) for array in arrays.values())
        path = self.file(name)
        progress = self.progress
        if progress is not None:
            progress.stage(name, total or 0)
        structure.write_npz(path, arrays, progress.advance if progress is not None else None)

    def write_extra(self, name: str, content: ExtraFile) -> None:
        """Writes one extra file: bytes as they are, an `ArraysFile` streamed by `write_arrays`."""
        if isinstance(content, ArraysFile):
            self.write_arrays(name, content.arrays, content.total)
        else:
            self.file(name).write_bytes(content)

    def commit(self, manifest: dict[str, Any], seal: bool = False) -> Path:
        """Hashes every file, writes manifest.json and renames the directory into place; returns the bundle path.
        `seal`: NanGuard's own capture, sealed as this user's (`pyadapter.capture.seal`). A pulled copy is not sealed
        again: it keeps the seal it came with, which holds only under the key that made it.

        Durable: every file (arrays, model, checkpoint, findings, manifest) and every folder of the bundle is
        fsynced before the rename, and the capture folder after it, so a power cut leaves either the whole
        bundle under its name or only the hidden temporary folder (which the next writer removes)."""
        names = integrity.list_tree(self.tmp)
        progress = self.progress
        if progress is not None:
            progress.stage("checking", sum((self.tmp / name).stat().st_size for name in names))
        files = {}
        on_chunk = None if progress is None else (lambda n: progress.advance(n, written=False))
        for name in names:
            path = self.tmp / name
            hashed = integrity.sha256_file(path, on_chunk)
            files[name] = {"sha256": hashed, "size": path.stat().st_size}
            _fsync_file(path)
        _write_manifest(self.tmp / MANIFEST, dict(manifest, format=FORMAT, files=files), seal)
        for folder in sorted({(self.tmp / name).parent for name in files} | {self.tmp}, reverse=True):
            _fsync_dir(folder)
        for attempt in range(1000):
            target = self.capture_dir / (self.name if attempt == 0 else f"{self.name}-{attempt}")
            if target.exists():
                continue
            try:
                os.rename(self.tmp, target)
            except OSError:
                if target.exists():
                    continue
                raise
            _fsync_dir(self.capture_dir)  # the rename itself
            self.final = target
            return target
        raise BundleError(f"no free bundle name for {self.name} in {self.capture_dir}")

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def add_to_bundle(
    root: Path, files: Mapping[str, bytes], entries: Mapping[str, Any], seal: bool = True
) -> None:
    """Adds `files` and manifest `entries` to a committed local bundle: what the locate at the scene finds after the
    bundle is written (a run killed while locating kept no bundle at all, s42d p8). Everything is staged in a
    hidden partial folder next to the bundle (the next writer removes it if this process dies), each file renamed
    into the bundle, then the new manifest (hashes of every file, sealed again) renamed over the old one last. A
    death before the renames leaves the bundle as it was; the renames are consecutive and take microseconds."""
    manifest = parse_manifest(read_manifest_bytes(root / MANIFEST))
    listed = dict(manifest.get("files") or {})
    staged = Path(
        tempfile.mkdtemp(
            prefix=f".{root.name}~{socket.gethostname()}~{os.getpid()}~",
            suffix=PARTIAL_SUFFIX,
            dir=root.parent,
        )
    )
    try:
        for name, content in files.items():
            path = staged / integrity.check_relative_path(name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            _fsync_file(path)
            listed[name] = {"sha256": integrity.sha256_file(path), "size": path.stat().st_size}
        fields = {name: value for name, value in manifest.items() if name != SEAL_KEY}
        _write_manifest(staged / MANIFEST, {**fields, **entries, "format": FORMAT, "files": listed}, seal)
        for name in files:
            target = root / integrity.check_relative_path(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staged / name, target)
            _fsync_dir(target.parent)
        os.replace(staged / MANIFEST, root / MANIFEST)
        _fsync_dir(root)
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def _write_manifest(path: Path, manifest: dict[str, Any], seal: bool) -> None:
    """manifest.json at `path`, flushed to the disk; `seal`: sealed as this user's (`pyadapter.capture.seal`)."""
    text = json.dumps(manifest, indent=1, sort_keys=False, allow_nan=False, default=_json_default)
    if seal:
        # Sealed as read back (JSON values only: numpy scalars and tuples as a reader will see them).
        text = json.dumps(seal_manifest(json.loads(text)), indent=1, sort_keys=False, allow_nan=False)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())


def _fsync_file(path: Path) -> None:
    """Flushes a file written by anyone (np.savez, model.save, tf.train.Checkpoint) to the disk."""
    with open(
        path, "r+b" if os.name == "nt" else "rb"
    ) as handle:  # Windows flushes only handles open to write
        os.fsync(handle.fileno())


def _fsync_dir(path: Path) -> None:
    """Makes a folder's entries (new files, a rename into it) durable; a no-op where folders cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # Windows cannot open a directory; NTFS journals its metadata
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems (network, FUSE) refuse fsync on a directory
    finally:
        os.close(fd)


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


# Variables the guarded step reads that the bundle does not hold (``GuardedStep.variables_not_held``): a DQN's
# target network given to guard_step neither as ``model=`` nor in ``checkpoint=``.
NOT_HELD_KEY = "variables_not_held"


def not_held_warning(count: int, names: list[str]) -> str | None:
    """The stop message's and every replay's words for `NOT_HELD_KEY`, or None when nothing is missing."""
    if not count:
        return None
    shown = ", ".join(names[:3]) + (f" and {count - len(names[:3])} more" if count > len(names[:3]) else "")
    return (
        f"the step reads {count} variable{'s' if count != 1 else ''} the bundle does not hold ({shown}): a "
        "replay gives them the values the program gives them, not training's, so it may not reproduce the "
        "failure; guard them too, e.g. guard_step(checkpoint=tf.train.Checkpoint(model=..., optimizer=..., "
        "target=<the network the step reads>))"
    )
