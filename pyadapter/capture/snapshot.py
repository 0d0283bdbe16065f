"""What a bundle records about the run around the failing step: versions, host, entry script, variables.

Shared by NanGuard (Keras fit) and guard_step (custom loops). TensorFlow/Keras are imported inside functions.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from pyadapter import launch
from pyadapter.capture import batchcodec, integrity, notebook, structure


def versions() -> dict[str, str]:
    import keras
    import tensorflow as tf

    from pyadapter import __version__

    found = {
        "nanlens": __version__,
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "numpy": np.__version__,
    }
    tf_keras = sys.modules.get("tf_keras")  # the Keras 2 line, when the program uses it (never imported here)
    if tf_keras is not None:
        found["tf_keras"] = str(getattr(tf_keras, "__version__", "unknown"))
    return found


def nanlens_version() -> str:
    from pyadapter import __version__

    return __version__


def host_info() -> dict[str, Any]:
    return {"hostname": socket.gethostname(), "platform": platform.platform(), "pid": os.getpid()}


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def entry_script_path() -> Path | None:
    """The training program: ``__main__.__file__`` or ``sys.argv[0]``, absolute; None in a notebook/REPL.

    In a Jupyter kernel those name the kernel's launcher (``ipykernel_launcher.py``), never the user's code, so
    they count only while ``%run script.py`` runs a script there; `entry_script_info` records the notebook."""
    kernel = notebook.in_kernel()
    main = sys.modules.get("__main__")
    candidates = [getattr(main, "__file__", None), sys.argv[0] if sys.argv else None]
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and not (kernel and _is_kernel_launcher(candidate)):
            return Path(candidate).absolute()
    return None


def _is_kernel_launcher(path: str) -> bool:
    """A kernel's own start-up file (``ipykernel_launcher.py``, ``ipykernel/__main__.py``, an installed
    package's launcher), as opposed to a script the user ``%run``s in the kernel."""
    name = os.path.basename(path)
    return (
        "launcher" in name.lower()
        or name == "__main__.py"
        or re.search(r"[/\\](site-packages|dist-packages)[/\\]", path) is not None
    )


def _working_folders() -> dict[str, str]:
    """``cwd``: the folder the program started in (`pyadapter.launch`: its relative paths and argv mean what they
    meant from there, and a re-entry runs it there); ``cwd_at_capture`` too when it moved since (``os.chdir``)."""
    now = os.getcwd()
    started = launch.started_in() or now
    return {"cwd": started, **({"cwd_at_capture": now} if now != started else {})}


def entry_script_info() -> dict[str, Any]:
    """``{"path", "sha256", "argv", "cwd"}`` of the entry script. In a notebook the entry is the ``.ipynb`` and
    ``"notebook"`` holds the cells the kernel executed so far (`NotebookInfo.to_manifest`), so frames in cell code
    can be mapped to cells later."""
    path = entry_script_path()
    info = notebook.current_notebook() if path is None else None
    if info is not None:
        try:
            code = notebook.code_sha256(info.path)
        except ValueError:
            code = None
        return {
            "path": str(info.path),
            "sha256": info.sha256,
            "code_sha256": code,  # what a replay checks: the file's own hash changes with every save of outputs
            "argv": list(sys.argv),
            **_working_folders(),
            "notebook": info.to_manifest(),
        }
    out = {
        "path": str(path) if path else None,
        "sha256": integrity.sha256_file(path) if path else None,
        "argv": list(sys.argv),
        **_working_folders(),
    }
    module = main_module_name(path)
    if module is not None:
        out["module"] = module
    return out


def main_module_name(path: Path | None) -> str | None:
    """``trainer.train`` when the program was run as ``python -m trainer.train`` (the file `path`): a replay must
    run it as that module too, or its relative imports (``from .model import build``) fail."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name, origin = getattr(spec, "name", None), getattr(spec, "origin", None)
    if not isinstance(name, str) or name in ("", "__main__") or path is None or not isinstance(origin, str):
        return None
    try:
        return name if Path(origin).resolve() == Path(path).resolve() else None
    except OSError:
        return None


def default_run_name(timestamp: float | None = None) -> str:
    """``<script>-<YYYYmmdd-HHMMSS>`` at `timestamp` (seconds since the epoch; default now). In a notebook the
    notebook's stem (``notebook`` when the kernel was not told which notebook it runs)."""
    path = entry_script_path()
    if path is not None:
        stem = path.stem
    elif notebook.in_kernel():
        located = notebook.current_notebook_path()
        stem = located[0].stem if located else "notebook"
    else:
        stem = "run"
    stem = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in stem) or "run"
    when = _dt.datetime.now() if timestamp is None else _dt.datetime.fromtimestamp(timestamp)
    return f"{stem}-{when.strftime('%Y%m%d-%H%M%S')}"


def unique(objects: Any) -> list[Any]:
    """`objects` without None and without repeats of the same object (by identity), in order."""
    seen: set[int] = set()
    out = []
    for obj in objects:
        if obj is not None and id(obj) not in seen:
            seen.add(id(obj))
            out.append(obj)
    return out


def variable_path(variable: Any) -> str:
    """The name a user recognizes: Keras ``path`` ("dense_1/kernel") or the TF variable name without ':0'."""
    path = getattr(variable, "path", None)
    if isinstance(path, str) and path:
        return path
    name = getattr(variable, "name", "variable")
    return name[:-2] if name.endswith(":0") else name


def variable_values(
    groups: list[tuple[str, list[Any]]],
    described: list[dict[str, Any]],
    names: dict[int, str] | None = None,
) -> tuple[Iterator[tuple[str, np.ndarray]], int]:
    """weights.npz's arrays, read one variable at a time as the writer asks for them: (a generator of (key w000..,
    value), the bytes they will take). Each value read is described in `described` (key, path, group, shape,
    dtype) as it is yielded; a variable holding objects (strings) is skipped. Never more than one value in memory:
    a bundle of a model of N bytes of state costs about the largest variable, not N, on top of training.
    `names`: paths by id for variables that have none of their own (a tf.Module's, all called "Variable")."""
    chosen: list[tuple[str, Any]] = []
    seen: set[int] = set()
    total = 0
    for group, variables in groups:
        for variable in variables:
            if variable is None or id(variable) in seen:
                continue
            seen.add(id(variable))
            chosen.append((group, variable))
            total += _nbytes(variable)

    def values() -> Iterator[tuple[str, np.ndarray]]:
        for group, variable in chosen:
            value = np.asarray(variable.numpy())
            if value.dtype == object:
                continue
            key = f"w{len(described):03d}"
            described.append(
                {
                    "key": key,
                    "path": (names or {}).get(id(variable)) or variable_path(variable),
                    "group": group,
                    "shape": list(value.shape),
                    "dtype": value.dtype.str,
                }
            )
            yield key, value

    return values(), total


def _nbytes(variable: Any) -> int:
    """A variable's size from its shape and dtype, without reading it (0 when it cannot be told: progress only)."""
    try:
        dtype = getattr(variable, "dtype", None)
        itemsize = getattr(dtype, "size", None) or np.dtype(getattr(dtype, "as_numpy_dtype", dtype)).itemsize
        count = 1
        for dim in variable.shape:
            count *= int(dim)
        return count * int(itemsize)
    except (TypeError, ValueError, AttributeError):
        return 0


def non_finite_variables(variables: list[Any]) -> list[str]:
    """Paths of the float variables that hold a NaN/Inf now (read eagerly; only used on a failing step)."""
    names = []
    for variable in variables:
        value = np.asarray(variable.numpy())
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            names.append(variable_path(variable))
    return names


def to_numpy_structure(value: Any) -> Any:
    """Eager tensors (and distributed values, concatenated over replicas) to numpy, keeping the nesting."""
    import tensorflow as tf

    if value is None:
        return None
    if isinstance(value, dict):
        return {k: to_numpy_structure(v) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(to_numpy_structure(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(to_numpy_structure(v) for v in value)
    if isinstance(value, tf.distribute.DistributedValues):
        parts = [np.asarray(v.numpy()) for v in value.values]
        return np.concatenate(parts, axis=0) if parts and parts[0].ndim else parts[0]
    if isinstance(value, tf.experimental.Optional):
        return None
    if isinstance(value, (tf.RaggedTensor, tf.SparseTensor)):
        return batchcodec.from_tf(value)
    if hasattr(value, "numpy"):
        return np.asarray(value.numpy())
    if type(value) in (bool, int, str) or type(value) is float and np.isfinite(value):
        # A plain Python argument of a step (a learning rate, training=True) stays one: as a float64 array it
        # would come back as a float64 tensor, which a float32 step refuses.
        return value
    array = np.asarray(value)
    if array.dtype == object and not isinstance(value, np.ndarray):
        # An object passed to a step (a tf.Module, a function): not data; the replay takes it from the program.
        return structure.ObjectArgument(type(value).__qualname__)
    return array


def to_tensors(structure: Any) -> Any:
    """numpy leaves -> tensors (None stays None: Keras's 'no sample weights'; ragged and sparse leaves become
    ragged and sparse tensors again; plain Python values stay as they are, as the step was given them)."""
    import tensorflow as tf

    return tf.nest.map_structure(batchcodec.to_tensor, structure)
