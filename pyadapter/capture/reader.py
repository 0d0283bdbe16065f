"""Reading a capture bundle: `CaptureBundle.load` opens one and verifies everything before any use.

The format (file names, the manifest's layout) is ``bundle_format``; the checks of hashes, paths, zip members and
npz headers are ``integrity``. Reading never runs code from the bundle and never imports TensorFlow: rebuilding
Keras/TensorFlow objects (the model from model.keras, a checkpoint, the step function, RNG states) is
``pyadapter.replay.restore``::

    bundle = CaptureBundle.load(path)            # verifies format, paths and hashes; BundleError otherwise
    data = bundle.batch()                        # the failing step's batch, nested as it was fed
    weights = bundle.weights()                   # variable path -> value before the failing update
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pyadapter.capture import checkpoint_index, fit_arrays, integrity, model_archive, sourcerecord, structure
from pyadapter.capture import history as step_history
from pyadapter.capture.bundle_format import (
    BATCH_FILE,
    CHECKPOINT_PREFIX,
    FINDINGS_FILE,
    KIND_FIT,
    KIND_LOOP,
    MANIFEST,
    MODEL_FILE,
    NOT_HELD_KEY,
    WEIGHTS_FILE,
    BundleError,
    is_bundle_file,
    not_held_warning,
    parse_manifest,
    read_manifest_bytes,
)
from pyadapter.capture.step_state import GROUP as STEP_STATE_GROUP
from pyadapter.capture.verdict import NonFiniteReport

_PLAIN_DTYPE_POLICIES = frozenset(
    {"float16", "bfloat16", "float32", "float64", "mixed_float16", "mixed_bfloat16"}
)


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
    "cwd_at_capture": str,  # the program's folder when the step failed, when it moved there (os.chdir)
    "notebook": dict,
    "module": str,  # run as `python -m module`; checked against the path before use (`replay.entry.package_root`)
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
    if manifest.get(sourcerecord.MANIFEST_KEY) is not None:
        if (problem := sourcerecord.check(manifest[sourcerecord.MANIFEST_KEY])) is not None:
            raise BundleError(f"manifest field {sourcerecord.MANIFEST_KEY!r} {problem}")
    if manifest.get(fit_arrays.MANIFEST_KEY) is not None:
        if (problem := fit_arrays.check(manifest[fit_arrays.MANIFEST_KEY])) is not None:
            raise BundleError(f"manifest field {fit_arrays.MANIFEST_KEY!r} {problem}")
    if _wrong_type((manifest.get("step_function") or {}).get("qualname"), str):
        raise BundleError("manifest field 'step_function.qualname' has the wrong type (expected str)")
    objects = (manifest.get("checkpoint") or {}).get("objects")
    if objects is not None and not (isinstance(objects, list) and all(isinstance(o, str) for o in objects)):
        raise BundleError("manifest field 'checkpoint.objects' is not a list of strings")
    trains = (manifest.get("checkpoint") or {}).get("trains")
    if trains is not None and not (
        isinstance(trains, dict)
        and all(
            isinstance(paths, list) and all(isinstance(p, str) for p in paths) for paths in trains.values()
        )
    ):
        raise BundleError("manifest field 'checkpoint.trains' is not an object of lists of strings")
    shards = (manifest.get("cluster") or {}).get("shards")
    if shards is not None and not (isinstance(shards, list) and all(isinstance(x, dict) for x in shards)):
        raise BundleError("manifest field 'cluster.shards' is not a list of objects")


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
            if not is_bundle_file(name):
                raise BundleError(
                    f"{name} is not a file a bundle may hold (only .npz arrays, model.keras, checkpoint)"
                )
        integrity.verify_files(root, files, exempt=frozenset({MANIFEST}))
        for name in files:
            if name.endswith(".npz"):
                integrity.check_npz_headers(root / name)
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

    @property
    def variables_not_held(self) -> tuple[int, list[str]]:
        """(how many, the first names) of the variables the guarded step read that the bundle does not hold (read
        as data: a count and strings only)."""
        entry = self.manifest.get(NOT_HELD_KEY)
        if not isinstance(entry, dict):
            return 0, []
        names = [n for n in entry.get("names") or [] if isinstance(n, str)][:20]
        count = entry.get("count")
        return (
            max(count, len(names)) if isinstance(count, int) and not isinstance(count, bool) else len(names)
        ), names

    def not_held_warning(self) -> str | None:
        """The replay's warning for `variables_not_held`, or None."""
        return not_held_warning(*self.variables_not_held)

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

    def _read_arrays(self, name: str, keys: set[str] | None = None) -> dict[str, np.ndarray]:
        try:
            return structure.read_npz(self.path / name, keys=keys)
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
        "adam/dense_kernel_momentum", ...). The optimizer's appear under their own paths. A path captured twice
        (two optimizers of one name) keeps its last value here; `weight_entries` has both."""
        return dict(self.weight_entries())

    def weight_entries(self) -> list[tuple[str, np.ndarray]]:
        """(variable path, raw value) of every captured variable, in capture order (the model's, then each
        optimizer's in turn): what a replay assigns (`pyadapter.replay.state.assign_captured_state`)."""
        return self._entries(lambda group: group != STEP_STATE_GROUP)

    def step_state_entries(self) -> list[tuple[str, np.ndarray]]:
        """(the program's name, value) of what a custom step keeps in variables of its own (``micro_step``,
        ``accum_grads[2]``; `pyadapter.capture.step_state`): not in `weight_entries`, which match models' and
        optimizers' variables by path."""
        return self._entries(lambda group: group == STEP_STATE_GROUP)

    def step_state_scalars(self) -> dict[str, float]:
        """The single numbers of the step's own state (a temperature the loop sets before each step, a micro-step
        counter), by the program's names, read alone: ``{"temperature": 0.0}``."""
        listed = (self.manifest.get("weights") or {}).get("variables") or []
        single = {
            str(e.get("path"))
            for e in listed
            if isinstance(e, dict)
            and e.get("group") == STEP_STATE_GROUP
            and isinstance(e.get("shape"), list)
            and all(isinstance(n, int) for n in e["shape"])
            and int(np.prod(e["shape"])) == 1
        }
        if not single:
            return {}
        entries = self._entries(lambda group: group == STEP_STATE_GROUP, lambda path: path in single)
        return {name: float(value.reshape(-1)[0]) for name, value in entries if value.dtype.kind in "fiu"}

    def weights_with_paths(self, wanted: Callable[[str], bool]) -> dict[str, np.ndarray]:
        """The captured variables whose path `wanted` accepts, read alone (a model's few statistics, not its
        weights): ``{path: value}``."""
        return dict(self._entries(lambda group: group != STEP_STATE_GROUP, wanted))

    def step_state_with_paths(self, wanted: Callable[[str], bool]) -> dict[str, np.ndarray]:
        """The step's own variables (`step_state_entries`) whose name `wanted` accepts, read alone."""
        return dict(self._entries(lambda group: group == STEP_STATE_GROUP, wanted))

    def _entries(
        self, wanted: Callable[[Any], bool], path_wanted: Callable[[str], bool] | None = None
    ) -> list[tuple[str, np.ndarray]]:
        if self.weights_path is None:
            return []
        listed = (self.manifest.get("weights") or {}).get("variables") or []
        chosen = [
            e
            for e in listed
            if wanted(e.get("group")) and (path_wanted is None or path_wanted(str(e.get("path"))))
        ]
        if path_wanted is not None and not chosen:
            return []
        # All of it when all is asked for (every array checked, as always); a few statistics alone otherwise.
        keys = None if path_wanted is None else {str(e.get("key")) for e in chosen}
        arrays = self._read_arrays(WEIGHTS_FILE, keys=keys)
        out = []
        for entry in chosen:
            key, name = entry.get("key"), entry.get("path")
            if key not in arrays:
                raise BundleError(f"{self.path}: weights.npz lacks {key!r} ({name})")
            out.append((name, arrays[key]))
        return out

    # ---- rebuilding ----

    def saved_config(self) -> dict[str, Any] | None:
        """model.keras's config.json (read as bounded JSON, nothing built from it), or None: no model.keras, or
        a config that cannot be read."""
        if self.model_path is None:
            return None
        try:
            return model_archive.read_config(self.model_path)
        except (ValueError, OSError):
            return None

    def saved_dtype_policy_name(self) -> str | None:
        """The Keras dtype policy of the saved model ("mixed_float16", "float32", ...) from model.keras's
        config, or None (no model.keras, no policy in its config, or a quantized/per-layer policy map)."""
        config = self.saved_config()
        inner = config.get("config") if isinstance(config, dict) else None
        dtype = inner.get("dtype") if isinstance(inner, dict) else None
        if isinstance(dtype, dict):
            if dtype.get("class_name") != "DTypePolicy":
                return None
            policy = dtype.get("config")
            dtype = policy.get("name") if isinstance(policy, dict) else None
        return dtype if isinstance(dtype, str) and dtype in _PLAIN_DTYPE_POLICIES else None
