"""NaN Lens: find where NaN/Inf starts in TensorFlow 2 training.

The public API lives here only. Importing ``pyadapter`` does not import TensorFlow; the names below that need it
import it when first used.
"""

from __future__ import annotations

__version__ = "0.2.0"

from typing import TYPE_CHECKING  # noqa: E402

from pyadapter import launch  # noqa: E402, F401  (reads the folder the program started in, before it moves)
from pyadapter import numpy_warnings as _numpy_warnings  # noqa: E402

# NumPy's "divide by zero encountered in log" names the line that made a batch's -inf, before training: recorded
# from here on (the data preparation comes after the imports), for a bundle to carry.
_numpy_warnings.install()
from pyadapter.dump.errors import ScanError  # noqa: E402  (light: no TensorFlow, no protobuf)
from pyadapter.findings import Finding, Findings, FindingsError, TensorHealth, load_findings  # noqa: E402

if TYPE_CHECKING:
    import os
    from collections.abc import Callable

    from pyadapter.eager import EagerMode


def scan_dump(
    path: str | os.PathLike[str], *, progress: Callable[[int, int], None] | None = None
) -> Findings:
    """Scan a tfdbg2 dump directory into Findings (no TensorFlow needed); raises ScanError (one line)."""
    from pyadapter.dump.scanner import scan_dump as _scan_dump

    return _scan_dump(path, progress=progress)


def eager() -> EagerMode:
    """Run tf.functions and tf.data functions eagerly; a context manager that restores the settings on exit."""
    from pyadapter.eager import eager as _eager

    return _eager()


# Capture API (NanGuard for Keras fit, guard_step for custom loops, the bundle reader): imported on first use,
# so `import pyadapter` stays free of TensorFlow. CaptureBundle/BundleError do not need TensorFlow either.
_LAZY_CAPTURE = {
    "NanGuard": "pyadapter.capture.guard",
    "guard_step": "pyadapter.capture.loop",
    "NonFiniteStepError": "pyadapter.capture.loop",
    "CaptureBundle": "pyadapter.capture.reader",
    "BundleError": "pyadapter.capture.bundle_format",
    # Replay API: rerun a bundle's step (graph/eager) and locate its origin line; TensorFlow only when run.
    "replay_bundle": "pyadapter.replay",
    "locate_bundle": "pyadapter.replay",
    "ReplayError": "pyadapter.replay",
}


def __getattr__(name: str) -> object:
    module_name = _LAZY_CAPTURE.get(name)
    if module_name is None:
        raise AttributeError(f"module 'pyadapter' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


__all__ = [
    "__version__",
    "NanGuard",
    "guard_step",
    "NonFiniteStepError",
    "CaptureBundle",
    "BundleError",
    "replay_bundle",
    "locate_bundle",
    "ReplayError",
    "Finding",
    "Findings",
    "FindingsError",
    "TensorHealth",
    "load_findings",
    "ScanError",
    "scan_dump",
    "eager",
]
