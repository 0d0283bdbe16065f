"""Keep a debugger's breakpoints for the replayed step itself.

Rebuilding a bundle runs the user's code too: loading a functional model calls each layer's ``call`` on
symbolic tensors, and tracing the graph-mode step calls it again. A breakpoint on the origin line would stop
there first, with a SymbolicTensor that has no values. While those phases run, tracing of this thread is
switched off (``debugpy.trace_this_thread(False)``), so the first stop is in the eager replay, with real
tensors. Without debugpy attached this does nothing.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any


def _attached_debugpy() -> Any:
    debugpy = sys.modules.get("debugpy")
    if debugpy is None:
        return None
    try:
        return debugpy if debugpy.is_client_connected() else None
    except Exception:  # an old or partial debugpy: leave tracing alone
        return None


_paused = threading.local()


@contextlib.contextmanager
def breakpoints_paused() -> Iterator[None]:
    """No debugger stops on this thread inside the block (when debugpy is attached). Blocks may nest: tracing
    comes back when the outermost one ends."""
    depth = getattr(_paused, "depth", 0)
    debugpy = _attached_debugpy() if depth == 0 else None
    _paused.depth = depth + 1
    if debugpy is not None:
        debugpy.trace_this_thread(False)
    try:
        yield
    finally:
        _paused.depth = depth
        if debugpy is not None:
            debugpy.trace_this_thread(True)


@contextlib.contextmanager
def breakpoints_resumed() -> Iterator[None]:
    """Inside `breakpoints_paused` blocks: breakpoints stop again on this thread for the inner block (the eager
    replay of a step reached while the user's program was setting itself up). Elsewhere it does nothing."""
    depth = getattr(_paused, "depth", 0)
    debugpy = _attached_debugpy() if depth > 0 else None
    _paused.depth = 0
    if debugpy is not None:
        debugpy.trace_this_thread(True)
    try:
        yield
    finally:
        _paused.depth = depth
        if debugpy is not None:
            debugpy.trace_this_thread(False)
