"""The capture bundle: one failing training step on disk, written atomically and read back safely.

Layout of ``capture_dir/<run>-step<N>/``::

    manifest.json      format "nanlens.bundle/1", versions, host, step/epoch, what went non-finite, entry script
                       (absolute path + sha256), RNG states, the step history ("loss_history", below), and the
                       sha256 + size of every file
    batch.npz          the step's inputs (x, y, sample weights / the step function's arguments), flat arrays;
                       the nesting (dict/list/tuple) is described in manifest["batch"]["structure"]
    weights.npz        raw values of the model and optimizer variables (names in manifest["weights"]["variables"])
    model.keras        (Keras fit) the compiled model with its optimizer state, before the failing update
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
bundle is ever unpickled. A bundle is written into a hidden temporary directory inside ``capture_dir`` and renamed
into place as the last step, so a crash mid-write never leaves a half bundle under a bundle's name.

Writing: ``pyadapter.capture.writer.write_bundle`` (used by NanGuard and guard_step) assembles the manifest and
files through `BundleWriter` (here), and publishes to URL capture folders through ``storage``.
If ``model.save`` fails (a custom object without ``get_config``), the bundle is still written without
model.keras and says why in ``manifest["model_save_error"]``; weights.npz still holds every value.

Reading (for ``nanlens replay`` / ``nanlens locate``)::

    bundle = CaptureBundle.load(path)            # verifies format, paths and hashes; BundleError otherwise
    module = ...                                 # the user's script, imported by a replay (pyadapter.replay.entry)
    model = bundle.load_model(entry_module=module)   # compiled, optimizer state restored (Keras fit bundles)
    bundle.restore_rng(model)                    # RNG states as they were before the step
    data = tf.nest.map_structure(lambda a: a if a is None else tf.convert_to_tensor(a), bundle.batch())
    model.train_step(data)                       # the step as fit ran it (x, y[, sample_weight])

For custom loops: ``bundle.restore_checkpoint(model=..., optimizer=...)``, ``step = bundle.step_function(module)``,
``args, kwargs = bundle.step_arguments()``, then ``step(*args, **kwargs)``.

Importing this module does not import TensorFlow; the methods that need it import it when called.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from pyadapter import safejson
from pyadapter.capture import checkpoint_index, integrity, rng, sourcerecord, structure
from pyadapter.capture import history as step_history
from pyadapter.capture.verdict import NonFiniteReport

FORMAT = "nanlens.bundle/1"
MANIFEST = "manifest.json"
BATCH_FILE = "batch.npz"
WEIGHTS_FILE = "weights.npz"
MODEL_FILE = "model.keras"
# Dtype policies a model may be saved with that `saved_dtype_policy` sets globally while loading.
_PLAIN_DTYPE_POLICIES = frozenset(
    {"float16", "bfloat16", "float32", "float64", "mixed_float16", "mixed_bfloat16"}
)
CHECKPOINT_DIR = "checkpoint"
CHECKPOINT_PREFIX = "checkpoint/ckpt"
FINDINGS_FILE = (
    "findings.json"  # the origin, located at the scene (in the training process) when the step failed
)
MAX_MANIFEST_BYTES = 64 << 20
PARTIAL_SUFFIX = ".partial"

WINDOW_FILES = ("window/state.npz", "window/batches.npz")  # the guard's window (`pyadapter.capture.window`)

KIND_FIT = "keras_fit"
KIND_LOOP = "custom_loop"


class BundleError(Exception):
    """A capture bundle that cannot be used: tampered, incomplete, unsafe or from an incompatible version.

    The message is one line, fit for ``nanlens: error: ...``.
    """


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


class BundleWriter:
    """Builds a bundle in a temporary directory next to its final place and renames it there on `commit`.

    Use as a context manager: an exception inside the block removes the temporary directory, so no bundle and no
    debris remains. A writer killed outright leaves only a hidden ``.<name>~<host>~<pid>~.partial*`` directory,
    which the next writer on the same host removes.
    """

    def __init__(self, capture_dir: Path | str, name: str) -> None:
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

    def __enter__(self) -> BundleWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None or self.final is None:
            self.abort()

    def file(self, name: str) -> Path:
        """Where to write the bundle file `name` (a relative POSIX path) while the bundle is being built."""
        path = self.tmp / integrity.check_relative_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def write_arrays(self, name: str, arrays: dict[str, np.ndarray]) -> None:
        structure.write_npz(self.file(name), arrays)

    def commit(self, manifest: dict[str, Any]) -> Path:
        """Hashes every file, writes manifest.json and renames the directory into place; returns the bundle path.

        Durable: every file (arrays, model, checkpoint, findings, manifest) and every folder of the bundle is
        fsynced before the rename, and the capture folder after it, so a power cut leaves either the whole
        bundle under its name or only the hidden temporary folder (which the next writer removes)."""
        files = {}
        for name in integrity.list_tree(self.tmp):
            path = self.tmp / name
            files[name] = {"sha256": integrity.sha256_file(path), "size": path.stat().st_size}
            _fsync_file(path)
        manifest = dict(manifest, format=FORMAT, files=files)
        with open(self.tmp / MANIFEST, "w", encoding="utf-8") as handle:
            json.dump(manifest, handle, indent=1, sort_keys=False, allow_nan=False, default=_json_default)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
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


# --------------------------------------------------------------------------------------------------------------
# Reading


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


def _require(manifest: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = manifest.get(key)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        raise BundleError(f"manifest field {key!r} is missing or has the wrong type")
    return value


# Optional manifest fields and the JSON type readers may assume when one is present and not null.
_FIELD_TYPES: dict[str, type] = {
    "nanlens_version": str,
    "created": str,
    "run": str,
    "on_nan": str,
    "state": str,
    "model_save_error": str,
    "epoch": int,
    "batch_index": int,
    "optimizer_iterations": int,
    "host": dict,
    "entry_script": dict,
    "rng": dict,
    "model": dict,
    "weights": dict,
    "checkpoint": dict,
    "step_function": dict,
    "cluster": dict,
    "located_at_scene": dict,
    "loss_history": list,
    sourcerecord.MANIFEST_KEY: dict,
}
_ENTRY_SCRIPT_TYPES: dict[str, type] = {
    "path": str,
    "sha256": str,
    "argv": list,
    "cwd": str,
    "notebook": dict,
}


def _wrong_type(value: Any, kind: type) -> bool:
    return value is not None and (not isinstance(value, kind) or kind is int and isinstance(value, bool))


def _check_field_types(manifest: dict[str, Any]) -> None:
    """BundleError when a field the readers use has the wrong JSON type (a list where an object belongs...)."""
    for key, kind in _FIELD_TYPES.items():
        if _wrong_type(manifest.get(key), kind):
            raise BundleError(f"manifest field {key!r} has the wrong type (expected {kind.__name__})")
    entry = manifest.get("entry_script") or {}
    for key, kind in _ENTRY_SCRIPT_TYPES.items():
        if _wrong_type(entry.get(key), kind):
            raise BundleError(
                f"manifest field 'entry_script.{key}' has the wrong type (expected {kind.__name__})"
            )
    if not all(isinstance(arg, str) for arg in entry.get("argv") or []):
        raise BundleError("manifest field 'entry_script.argv' holds something other than strings")
    variables = (manifest.get("weights") or {}).get("variables")
    if variables is not None and not (
        isinstance(variables, list)
        and all(
            isinstance(v, dict) and isinstance(v.get("key"), str) and isinstance(v.get("path"), str)
            for v in variables
        )
    ):
        raise BundleError("manifest field 'weights.variables' is not a list of {key, path} objects")
    history_problem = step_history.check_rows(manifest.get("loss_history") or [])
    if history_problem is not None:
        raise BundleError(f"manifest field 'loss_history' {history_problem}")
    if _wrong_type((manifest.get("step_function") or {}).get("qualname"), str):
        raise BundleError("manifest field 'step_function.qualname' has the wrong type (expected str)")
    objects = (manifest.get("checkpoint") or {}).get("objects")
    if objects is not None and not (isinstance(objects, list) and all(isinstance(o, str) for o in objects)):
        raise BundleError("manifest field 'checkpoint.objects' is not a list of strings")
    shards = (manifest.get("cluster") or {}).get("shards")
    if shards is not None and not (isinstance(shards, list) and all(isinstance(x, dict) for x in shards)):
        raise BundleError("manifest field 'cluster.shards' is not a list of objects")
    if manifest.get(sourcerecord.MANIFEST_KEY) is not None:
        if (problem := sourcerecord.check(manifest[sourcerecord.MANIFEST_KEY])) is not None:
            raise BundleError(f"manifest field {sourcerecord.MANIFEST_KEY!r} {problem}")


@dataclass(frozen=True)
class CaptureBundle:
    """A verified capture bundle. Create it with `CaptureBundle.load(path)`; never construct it directly."""

    path: Path
    manifest: dict[str, Any]

    # ---- loading and verification ----

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> CaptureBundle:
        """Opens and verifies a bundle: format version, file list, sha256 of every file, safe paths, no symlinks,
        no pickled arrays, Keras archive members. Raises `BundleError` (one-line message) on any problem."""
        root = Path(path)
        try:
            return cls._load(root)
        except BundleError as error:
            raise BundleError(f"{root}: {error}") from None
        except (integrity.IntegrityError, structure.StructureError) as error:
            raise BundleError(f"{root}: {error}") from None
        except OSError as error:
            raise BundleError(f"{root}: cannot read the bundle: {error.strerror or error}") from None

    @classmethod
    def _load(cls, root: Path) -> CaptureBundle:
        if root.is_symlink():
            raise BundleError("the bundle path is a symlink")
        if not root.is_dir():
            raise BundleError("not a directory (a capture bundle is a directory with manifest.json)")
        root = root.absolute()
        if not os.path.lexists(root / MANIFEST):
            raise BundleError("no manifest.json (not a capture bundle)")
        manifest = parse_manifest(read_manifest_bytes(integrity.resolve_inside(root, MANIFEST)))
        kind = _require(manifest, "kind", str)
        if kind not in (KIND_FIT, KIND_LOOP):
            raise BundleError(f"unknown bundle kind {kind!r}")
        _require(manifest, "step", int)
        _require(manifest, "versions", dict)
        _require(manifest, "non_finite", dict)
        batch = _require(manifest, "batch", dict)
        if not isinstance(batch.get("structure"), dict):
            raise BundleError("manifest has no batch structure")
        _check_field_types(manifest)
        files = manifest.get("files")
        if not isinstance(files, dict):
            raise BundleError("manifest 'files' is not a mapping")
        for name in files:
            integrity.check_relative_path(name)
            if not _is_bundle_file(name):
                raise BundleError(
                    f"{name} is not a file a bundle may hold (only .npz arrays, model.keras, checkpoint)"
                )
        integrity.verify_files(root, files, exempt=frozenset({MANIFEST}))
        for name in files:
            if name.endswith(".npz"):
                _check_npz_has_no_objects(root / name)
            elif name.endswith(".keras"):
                integrity.check_zip_members(root / name, "keras")
        if CHECKPOINT_PREFIX + ".index" in files:
            checkpoint_index.check(root, CHECKPOINT_PREFIX, list(files))
        bundle = cls(root, manifest)
        for name in bundle._required_files():
            if name not in files:
                raise BundleError(f"{name} is missing from the bundle")
        try:
            NonFiniteReport.from_json(manifest["non_finite"])
        except (ValueError, TypeError) as error:
            raise BundleError(f"manifest non_finite: {error}") from None
        return bundle

    def _required_files(self) -> list[str]:
        names = [BATCH_FILE]
        if self.kind == KIND_FIT and not self.manifest.get("model_save_error"):
            names.append(MODEL_FILE)
        elif self.kind == KIND_LOOP:
            names.append(CHECKPOINT_PREFIX + ".index")
        return names

    # ---- manifest fields ----

    @property
    def kind(self) -> str:
        """ "keras_fit" (NanGuard in model.fit) or "custom_loop" (guard_step)."""
        return self.manifest["kind"]

    @property
    def run(self) -> str:
        return str(self.manifest.get("run", ""))

    @property
    def step(self) -> int:
        """Global step of the failing update (optimizer iterations before it; skipped steps counted too)."""
        return int(self.manifest["step"])

    @property
    def epoch(self) -> int | None:
        """0-based epoch (Keras fit) or None."""
        return self.manifest.get("epoch")

    @property
    def batch_index(self) -> int | None:
        """0-based index of the batch within its epoch (Keras fit) or the call count of the guarded step."""
        return self.manifest.get("batch_index")

    @property
    def versions(self) -> dict[str, str]:
        """Python, TensorFlow, Keras, NumPy and nanlens versions of the run that wrote the bundle."""
        return dict(self.manifest["versions"])

    @property
    def host(self) -> dict[str, Any]:
        return dict(self.manifest.get("host") or {})

    @property
    def non_finite(self) -> NonFiniteReport:
        """What went non-finite: loss, which gradients, which weights; and whether the update was applied."""
        return NonFiniteReport.from_json(self.manifest["non_finite"])

    @property
    def loss_history(self) -> list[dict[str, Any]]:
        """The guard's history: up to ``history_size`` (256) steps before and including the failing one, oldest
        first, each ``{"step", "loss", "logged_loss", "grad_norm", "weight_norm", "update_ratio",
        "max_abs_output"}`` (numbers or None; see `pyadapter.capture.history` for what each measures).

        None means not measured or not finite; a non-finite value also has ``"<name>_nonfinite": "nan" | "inf" |
        "-inf"``. Bundles from before the history have only step, loss and logged_loss (the rest reads as absent).
        Validated at load: every entry has an integer step and numbers or null.
        """
        return list(self.manifest.get("loss_history") or [])

    @property
    def entry_script(self) -> Path | None:
        """Absolute path of the training program (sys.argv[0] / __main__.__file__) that wrote the bundle."""
        entry = self.manifest.get("entry_script") or {}
        return Path(entry["path"]) if entry.get("path") else None

    @property
    def entry_script_sha256(self) -> str | None:
        return (self.manifest.get("entry_script") or {}).get("sha256")

    def entry_script_changed(self) -> bool:
        """True if the entry script is missing or differs from the one that ran (line numbers may not match)."""
        script = self.entry_script
        if script is None or not script.is_file():
            return True
        return integrity.sha256_file(script) != self.entry_script_sha256

    @property
    def rng(self) -> dict[str, Any]:
        """RNG states: numpy, python `random`, tf global generator, Keras SeedGenerators (by variable path)."""
        return dict(self.manifest.get("rng") or {})

    @property
    def keras_line(self) -> str:
        """ "tf_keras" for a bundle of tf_keras objects (Keras 2, TF_USE_LEGACY_KERAS=1), else "keras" (Keras 3)."""
        return "tf_keras" if self.manifest.get("keras_line") == "tf_keras" else "keras"

    @property
    def model_info(self) -> dict[str, Any]:
        """Model class name/module, jit_compile, run_eagerly, steps_per_execution, strategy, replicas."""
        return dict(self.manifest.get("model") or {})

    # ---- raw paths ----

    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    @property
    def batch_path(self) -> Path:
        return self.path / BATCH_FILE

    @property
    def weights_path(self) -> Path | None:
        return self.path / WEIGHTS_FILE if WEIGHTS_FILE in self.manifest["files"] else None

    @property
    def findings_path(self) -> Path | None:
        """``findings.json``: the origin located at the scene when the step failed, or None."""
        return self.path / FINDINGS_FILE if FINDINGS_FILE in self.manifest["files"] else None

    @property
    def model_path(self) -> Path | None:
        """The `.keras` archive (Keras fit bundles), or None."""
        return self.path / MODEL_FILE if MODEL_FILE in self.manifest["files"] else None

    @property
    def checkpoint_prefix(self) -> Path | None:
        """Prefix for `tf.train.Checkpoint.read` (custom-loop bundles), or None."""
        if CHECKPOINT_PREFIX + ".index" in self.manifest["files"]:
            return self.path / CHECKPOINT_PREFIX
        return None

    # ---- data ----

    def batch(self) -> Any:
        """The failing step's batch as numpy arrays, nested as it was fed.

        Keras fit: the ``data`` passed to ``train_step`` — ``(x, y)`` / ``(x, y, sample_weight)`` or whatever
        structure the dataset yields (dicts, lists and tuples kept). Under a distribution strategy the replicas'
        shards are concatenated back into the global batch. Custom loops: ``{"args": [...], "kwargs": {...}}``
        (see `step_arguments`).
        """
        arrays = self._read_arrays(BATCH_FILE)
        try:
            return structure.rebuild(self.manifest["batch"]["structure"], arrays)
        except structure.StructureError as error:
            raise BundleError(f"{self.path}: {error}") from None

    @property
    def cluster(self) -> dict[str, Any] | None:
        """Multi-worker bundles (MultiWorkerMirroredStrategy): the cluster layout and each worker's shard
        (``{"num_workers", "workers": [{"index", "task", "address"}], "shards": [{"worker", "task", "file", "rows",
        "own_data_non_finite"}], "non_finite_workers": ["worker:1"]}``); None for a single-process run."""
        value = self.manifest.get("cluster")
        return dict(value) if isinstance(value, dict) else None

    def shard_batch(self, worker: int) -> Any:
        """One worker's part of the failing batch, nested like `batch` (multi-worker bundles)."""
        shards = (self.cluster or {}).get("shards") or []
        entry = next((s for s in shards if isinstance(s, dict) and s.get("worker") == worker), None)
        name = entry.get("file") if entry else None
        if not isinstance(name, str) or name not in self.manifest["files"]:
            raise BundleError(f"{self.path}: no shard of worker {worker} in this bundle")
        arrays = self._read_arrays(name)
        try:
            return structure.rebuild(self.manifest["batch"]["structure"], arrays, any_rows=True)
        except structure.StructureError as error:
            raise BundleError(f"{self.path}: {name}: {error}") from None

    def _read_arrays(self, name: str) -> dict[str, np.ndarray]:
        try:
            return structure.read_npz(self.path / name)
        except structure.StructureError as error:
            raise BundleError(f"{self.path}: {error}") from None

    def step_arguments(self) -> tuple[list[Any], dict[str, Any]]:
        """(args, kwargs) of the guarded step call (custom-loop bundles)."""
        data = self.batch()
        if not isinstance(data, dict) or not isinstance(data.get("args"), (list, tuple)):
            raise BundleError(f"{self.path}: not a custom-loop bundle (no step arguments)")
        kwargs = data.get("kwargs", {})
        if not isinstance(kwargs, dict):
            raise BundleError(f"{self.path}: the step's keyword arguments are not a mapping")
        return list(data["args"]), dict(kwargs)

    def weights(self) -> dict[str, np.ndarray]:
        """Raw variable values before the failing update, keyed by variable path ("dense/kernel",
        "adam/dense_kernel_momentum", ...). The optimizer's appear under their own paths."""
        if self.weights_path is None:
            return {}
        arrays = self._read_arrays(WEIGHTS_FILE)
        out = {}
        for entry in (self.manifest.get("weights") or {}).get("variables") or []:
            key, name = entry.get("key"), entry.get("path")
            if key not in arrays:
                raise BundleError(f"{self.path}: weights.npz lacks {key!r} ({name})")
            out[name] = arrays[key]
        return out

    # ---- rebuilding ----

    def load_model(
        self,
        custom_objects: dict[str, Any] | None = None,
        entry_module: ModuleType | None = None,
        compile: bool = True,
    ) -> Any:
        """The compiled Keras model with its optimizer state, as it was before the failing update.

        Loaded with ``safe_mode=True`` (no lambda bytecode). Custom classes must be importable: pass
        `entry_module` (from `import_entry_script`) to offer every class and function defined in it by name,
        and/or `custom_objects`.

        Loaded under the dtype policy the model was saved with (see `saved_dtype_policy`): a ``mixed_float16``
        model comes back ``mixed_float16`` and compiled with the LossScaleOptimizer ``compile`` wrapped around its
        optimizer in training, even in a process whose global policy is still float32.
        """
        if self.model_path is None:
            reason = self.manifest.get("model_save_error")
            why = f": saving it failed with {reason}" if reason else f" (kind {self.kind})"
            raise BundleError(
                f"{self.path}: no model.keras in this bundle{why}; weights.npz has the raw values"
            )
        objects: dict[str, Any] = {}
        if entry_module is not None:
            for name, value in vars(entry_module).items():
                if callable(value) and getattr(value, "__module__", None) == entry_module.__name__:
                    objects[name] = value
        objects.update(custom_objects or {})
        try:
            with self.saved_dtype_policy():
                if self.keras_line == "tf_keras":
                    from pyadapter.capture import legacy_keras

                    return legacy_keras.load_model(self.model_path, objects or None, compile)
                import keras

                return keras.saving.load_model(
                    self.model_path, custom_objects=objects or None, compile=compile, safe_mode=True
                )
        except Exception as error:  # Keras raises many kinds; the caller needs one line
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            raise BundleError(
                f"{self.path}: model.keras could not be loaded: {type(error).__name__}: {first}"
            ) from error

    def saved_dtype_policy_name(self) -> str | None:
        """The Keras dtype policy of the saved model ("mixed_float16", "float32", ...) from model.keras's
        config, or None (no model.keras, no policy in its config, or a quantized/per-layer policy map)."""
        if self.model_path is None:
            return None
        import zipfile

        try:
            with zipfile.ZipFile(self.model_path) as archive:
                info = archive.getinfo("config.json")
                if info.file_size > integrity.MAX_JSON_MEMBER_BYTES:
                    return None
                with archive.open(info) as member:
                    config = safejson.loads(member.read(integrity.MAX_JSON_MEMBER_BYTES + 1))
        except (*integrity.ZIP_ERRORS, KeyError):  # safejson.JSONError is a ValueError
            return None
        inner = config.get("config") if isinstance(config, dict) else None
        dtype = inner.get("dtype") if isinstance(inner, dict) else None
        if isinstance(dtype, dict):
            if dtype.get("class_name") != "DTypePolicy":
                return None
            policy = dtype.get("config")
            dtype = policy.get("name") if isinstance(policy, dict) else None
        return dtype if isinstance(dtype, str) and dtype in _PLAIN_DTYPE_POLICIES else None

    @contextlib.contextmanager
    def saved_dtype_policy(self) -> Iterator[None]:
        """Within this block the global Keras dtype policy is the saved model's (`saved_dtype_policy_name`).

        Keras rebuilds a Sequential or functional model under the global policy, not the one it was saved with,
        and ``compile`` adds a LossScaleOptimizer only for a ``mixed_float16`` model: loaded in a process that has
        not set the policy, a mixed-precision model would come back float32, with its bare optimizer, whose
        variables then do not match the saved ones. Training set the policy globally, so this is the state the
        model was built in."""
        name = self.saved_dtype_policy_name()
        if name is None:
            yield
            return
        import keras

        previous = keras.config.dtype_policy()
        if previous.name == name:
            yield
            return
        keras.config.set_dtype_policy(name)
        try:
            yield
        finally:
            keras.config.set_dtype_policy(previous)

    def restore_checkpoint(self, checkpoint: Any = None, **objects: Any) -> Any:
        """Restores a custom-loop bundle's tf.train.Checkpoint into `checkpoint` or into the `objects` given by
        the names used when guarding (e.g. ``model=..., optimizer=...``). Returns the restore status."""
        prefix = self.checkpoint_prefix
        if prefix is None:
            raise BundleError(f"{self.path}: no checkpoint in this bundle (kind {self.kind})")
        import tensorflow as tf

        if checkpoint is None:
            checkpoint = tf.train.Checkpoint(**objects)
        try:
            return checkpoint.read(str(prefix))
        except Exception as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            raise BundleError(
                f"{self.path}: checkpoint could not be restored: {type(error).__name__}: {first}"
            ) from error

    def step_function(self, module: ModuleType) -> Any:
        """The guarded step function (custom-loop bundles), looked up by qualified name in the imported entry
        module. If it was a tf.function, the undecorated Python function is at ``.python_function``."""
        info = self.manifest.get("step_function") or {}
        target: Any = module
        qualname = info.get("qualname")
        if not qualname:
            raise BundleError(f"{self.path}: no step function recorded")
        for part in qualname.split("."):
            if part == "<locals>" or not hasattr(target, part):
                raise BundleError(
                    f"{self.path}: step function {qualname} is not reachable from {module.__name__}"
                )
            target = getattr(target, part)
        return target

    def restore_rng(self, model: Any = None) -> None:
        """Sets numpy, python `random` and the TF global generator to their captured states, and the Keras
        SeedGenerators of `model` to their states from before the failing step (so dropout masks repeat)."""

        rng.restore(self.rng, model)


_CHECKPOINT_FILE = re.compile(r"checkpoint/ckpt\.(index|data-\d{5}-of-\d{5})")
_SHARD_FILE = re.compile(
    r"shards/worker-\d{1,5}\.npz"
)  # multi-worker bundles: each worker's part of the batch


def _is_bundle_file(name: str) -> bool:
    """The files a bundle may hold; anything else (a pickle, a script, ...) marks a bundle that was tampered."""
    return (
        name in (BATCH_FILE, WEIGHTS_FILE, MODEL_FILE, FINDINGS_FILE, *WINDOW_FILES)
        or _CHECKPOINT_FILE.fullmatch(name) is not None
        or _SHARD_FILE.fullmatch(name) is not None
    )


def _check_npz_has_no_objects(path: Path) -> None:
    """Reads only the headers of a `.npz`'s arrays: an object (pickled) dtype anywhere is refused, and so is a
    header whose shape and dtype do not account for exactly the bytes the member holds (numpy allocates what
    the header declares before it reads a byte)."""
    import zipfile

    infos = integrity.check_zip_members(path, "npz")
    try:
        archive = zipfile.ZipFile(path)
    except integrity.ZIP_ERRORS as error:
        raise BundleError(f"{path.name} is not a valid zip archive ({integrity.first_line(error)})") from None
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
            except (*integrity.ZIP_ERRORS, SyntaxError, TypeError, RecursionError, MemoryError) as error:
                raise BundleError(
                    f"{path.name}/{name} is not a valid .npy array ({integrity.first_line(error)})"
                ) from None
            if dtype.hasobject:
                raise BundleError(f"{path.name}/{name} holds a pickled object array (refused)")
            count = 1
            for dim in shape:
                if not isinstance(dim, int) or dim < 0:
                    raise BundleError(f"{path.name}/{name} has an invalid shape")
                count *= dim
            declared = count * dtype.itemsize
            if data_start + declared != info.file_size:
                raise BundleError(
                    f"{path.name}/{name} declares {declared} bytes of data but holds {info.file_size - data_start}"
                )
