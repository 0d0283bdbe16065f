"""NaN Lens: find where NaN/Inf starts in TensorFlow 2 training.

The public API lives here only. Importing ``pyadapter`` does not import TensorFlow; the names below that need it
import it when first used.
"""

from __future__ import annotations

__version__ = "0.1.0"

from pyadapter.findings import Finding, Findings, FindingsError, TensorHealth, load_findings  # noqa: E402

__all__ = [
    "__version__",
    "Finding",
    "Findings",
    "FindingsError",
    "TensorHealth",
    "load_findings",
]
