"""Replaying a capture bundle's failing step: rebuild it, run it in graph or eager mode, judge it, locate it.

Public API (importing this package does not import TensorFlow; ``replay_bundle`` does when called):

- ``replay_bundle(path, modes=("graph", "eager"), *, progress=None) -> ReplayReport``
- ``locate_bundle(path, *, progress=None, isolate=True, dump_dir=None, timeout=900, pictures=True,
  rerun_pipeline=None, rerun_timeout=600) -> Findings`` (re-runs the entry script under a dump when the
  captured batch already holds NaN/Inf; see ``locate.py``)
- ``ReplayError`` (one-line message), ``ReplayReport``, ``StepVerdict``
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyadapter.replay.errors import ReplayError
from pyadapter.replay.verdict import MODES, Mode, ReplayReport, StepVerdict

if TYPE_CHECKING:
    from pyadapter.replay.locate import locate_bundle

__all__ = ["ReplayError", "ReplayReport", "StepVerdict", "locate_bundle", "replay_bundle"]


def __getattr__(name: str) -> Any:
    # locate_bundle brings numpy and the cause classifier: imported on first use, so that importing a light part of
    # this package (`nanlens VERB --help` reads replay.trust) does not load them.
    if name == "locate_bundle":
        from pyadapter.replay.locate import locate_bundle

        return locate_bundle
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def replay_bundle(
    path: str | Path, modes: Sequence[Mode] = MODES, *, progress: Callable[[str, float], None] | None = None
) -> ReplayReport:
    """Rebuild the bundle's step and run it once per mode from the captured state; the verdict of each.

    ``progress(phase, fraction)`` is told "loading bundle", "replaying in graph mode", ... Raises ReplayError
    (one line) for a tampered bundle, a missing or failing entry script, or a step that cannot run.
    """
    from pyadapter.replay.session import replay_bundle as _replay_bundle

    return _replay_bundle(path, modes, progress=progress)
