"""What a bundle records about the run around the failing step: versions, host, entry script, variables.

Shared by NanGuard (Keras fit) and guard_step (custom loops). TensorFlow/Keras are imported inside functions.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import socket
import sys
from pathlib import Path
from typing import Any

import numpy as np

from pyadapter.capture import integrity


def versions() -> dict[str, str]:
    import keras
    import tensorflow as tf

    from pyadapter import __version__

    return {
        "nanlens": __version__,
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "numpy": np.__version__,
    }


def nanlens_version() -> str:
    from pyadapter import __version__

    return __version__


def host_info() -> dict[str, Any]:
    return {"hostname": socket.gethostname(), "platform": platform.platform(), "pid": os.getpid()}


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def entry_script_path() -> Path | None:
    """The training program: ``__main__.__file__`` or ``sys.argv[0]``, absolute; None in a notebook/REPL."""
    main = sys.modules.get("__main__")
    candidates = [getattr(main, "__file__", None), sys.argv[0] if sys.argv else None]
    for candidate in candidates:
        if candidate and os.path.isfile(candidate):
            return Path(candidate).absolute()
    return None


def entry_script_info() -> dict[str, Any]:
    path = entry_script_path()
    return {
        "path": str(path) if path else None,
        "sha256": integrity.sha256_file(path) if path else None,
        "argv": list(sys.argv),
        "cwd": os.getcwd(),
    }


def default_run_name(timestamp: float | None = None) -> str:
    """``<script>-<YYYYmmdd-HHMMSS>`` at `timestamp` (seconds since the epoch; default now)."""
    path = entry_script_path()
    stem = path.stem if path else "run"
    stem = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in stem) or "run"
    when = _dt.datetime.now() if timestamp is None else _dt.datetime.fromtimestamp(timestamp)
    return f"{stem}-{when.strftime('%Y%m%d-%H%M%S')}"


def variable_path(variable: Any) -> str:
    """The name a user recognizes: Keras ``path`` ("dense_1/kernel") or the TF variable name without ':0'."""
    path = getattr(variable, "path", None)
    if isinstance(path, str) and path:
        return path
    name = getattr(variable, "name", "variable")
    return name[:-2] if name.endswith(":0") else name


def variable_arrays(groups: list[tuple[str, list[Any]]]) -> tuple[dict[str, np.ndarray], list[dict[str, Any]]]:
    """Raw values of variables, for weights.npz: arrays keyed w000.. and their descriptions (path, group)."""
    arrays: dict[str, np.ndarray] = {}
    described: list[dict[str, Any]] = []
    seen: set[int] = set()
    for group, variables in groups:
        for variable in variables:
            if variable is None or id(variable) in seen:
                continue
            seen.add(id(variable))
            value = np.asarray(variable.numpy())
            if value.dtype == object:
                continue
            key = f"w{len(arrays):03d}"
            arrays[key] = value
            described.append(
                {"key": key, "path": variable_path(variable), "group": group, "shape": list(value.shape),
                 "dtype": value.dtype.str}
            )
    return arrays, described


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
    if hasattr(value, "numpy"):
        return np.asarray(value.numpy())
    return np.asarray(value)
