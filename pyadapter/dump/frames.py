"""Choosing the user's frames from an op's creation stack.

The line to mark is the innermost frame in the user's own code: not TensorFlow, not Keras, not any installed
package (site-packages / dist-packages), not the standard library, not NaN Lens itself, and not a pseudo-file
such as ``<frozen runpy>`` or ``<stdin>``. (TensorFlow's own guess counts Keras as user code.)
"""

from __future__ import annotations

import linecache
import os
import re
import site
import sys
import sysconfig
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import Any

from pyadapter.findings import Frame

_PACKAGE_DIR_RE = re.compile(r"[/\\](site-packages|dist-packages)[/\\]")
# Some interpreter's standard library, also when the dump was recorded on another machine.
_STDLIB_RE = re.compile(r"[/\\]lib[/\\]python\d+(\.\d+)?t?[/\\]")


def _norm(path: str) -> str:
    return os.path.normcase(os.path.abspath(path)) if path else path


@lru_cache(maxsize=1)
def _excluded_roots() -> tuple[str, ...]:
    roots: set[str] = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        value = sysconfig.get_paths().get(key)
        if value:
            roots.add(value)
    try:
        roots.update(site.getsitepackages())
    except AttributeError:  # pragma: no cover - some embedded interpreters lack it
        pass
    user_site = getattr(site, "USER_SITE", None)
    if user_site:
        roots.add(user_site)
    if sys.prefix != sys.base_prefix:
        roots.add(sys.prefix)  # a virtualenv holds installed packages only
    roots.add(_nanlens_dir())
    return tuple(sorted({_norm(r).rstrip(os.sep) + os.sep for r in roots}))


def _nanlens_dir() -> str:
    return _norm(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep


def is_pseudo_or_nanlens_file(path: str) -> bool:
    """``<frozen runpy>``, ``<stdin>`` and the like, or a file of NaN Lens itself: never worth marking."""
    return not path or os.path.basename(path).startswith("<") or _norm(path).startswith(_nanlens_dir())


@lru_cache(maxsize=4096)
def is_user_file(path: str) -> bool:
    """Whether a frame in ``path`` is the user's code."""
    if not path:
        return False
    base = os.path.basename(path)
    if base.startswith("<") or "<frozen" in path or path.startswith("<"):
        return False
    if _PACKAGE_DIR_RE.search(path) or _STDLIB_RE.search(path):
        return False
    norm = _norm(path)
    return not any(norm.startswith(root) for root in _excluded_roots())


# IPython's ``%%time`` / ``%time`` compile the timed code under these names ("<timed eval>" when it is one expression,
# as ``model.fit(x, y)`` is); a ``%%time`` cell itself is one line, the magic call.
TIMED_BODIES = ("<timed exec>", "<timed eval>")


def is_timed_body(path: str) -> bool:
    # TensorFlow records the name joined to the working folder ("/work/<timed exec>").
    return os.path.basename(path) in TIMED_BODIES


def is_exec_string(path: str) -> bool:
    """Code compiled from a string: ``exec(open("helpers.py").read())`` (TensorFlow records "<string>" joined to the
    working folder)."""
    return os.path.basename(path) == "<string>"


def timed_line(outer_line: int, body_line: int, cell_magic: bool) -> int:
    """The cell's line of a timed body's line: a ``%%time`` cell's body starts on the cell's line 2 (its line 1 is
    the magic), a ``%time`` line magic's code is on the magic's own line."""
    return outer_line + body_line if cell_magic else outer_line + body_line - 1


def timed_bodies_in_cells(
    stack: list[Frame], line_text: Callable[[str, int], str | None] | None = None
) -> list[Frame]:
    """`stack` (outermost first) with each frame of timed code (``%%time`` or ``%time``: ``<timed exec>`` or
    ``<timed eval>``, line k) made the line of the cell it is, in the cell whose magic call is the nearest user frame
    outside it. Without this every op of a timed cell was marked on its ``%%time`` line, and the line its body ran
    was lost. `line_text(file, line)` tells a line magic (``run_line_magic``) from a cell magic; unknown: a cell's."""
    if not any(is_timed_body(frame.file) for frame in stack):
        return stack
    out = list(stack)
    for index, frame in enumerate(out):
        if not is_timed_body(frame.file):
            continue
        outer = next((f for f in reversed(out[:index]) if is_user_file(f.file)), None)
        if outer is not None:
            text = line_text(outer.file, outer.line) if line_text is not None else None
            cell_magic = not (text and "run_line_magic(" in text)
            line = timed_line(outer.line, frame.line, cell_magic)
            out[index] = Frame(file=outer.file, line=line, function=frame.function)
    return out


def user_frames(frames: Iterable[Frame]) -> list[Frame]:
    """The user frames of a stack, keeping its order (outermost first)."""
    return [f for f in frames if is_user_file(f.file)]


def innermost_user_frame(frames: Sequence[Frame]) -> Frame | None:
    for frame in reversed(frames):
        if is_user_file(frame.file):
            return frame
    return None


# Frames of the machinery that builds every op (op wrappers, dispatch, tracing, the debugger's own callback)
# or of Keras's backend plumbing: naming them says nothing about which library code made the op.
_PLUMBING_RE = re.compile(
    r"[/\\](tensorflow[/\\]python[/\\](debug|framework|util|eager|autograph|ops|platform)"
    r"|keras[/\\]src[/\\](ops|backend|utils))[/\\]"
)


def library_frame(frames: Sequence[Frame]) -> Frame | None:
    """For an op made without any frame in the user's code: the innermost library frame worth naming.

    That is the innermost frame outside TensorFlow's op-building plumbing and Keras's backend (e.g. Keras's
    ``losses.py`` in ``mean_squared_error``, or ``layers/core/dense.py``); failing that, the innermost frame
    that is not NaN Lens, a pseudo-file, or the debugger's own callback. For a message, never a line to mark.
    """
    candidates = [f for f in frames if not is_pseudo_or_nanlens_file(f.file)]
    for frame in reversed(candidates):
        if not _PLUMBING_RE.search(frame.file):
            return frame
    for frame in reversed(candidates):
        if not re.search(r"[/\\]tensorflow[/\\]python[/\\](debug|framework)[/\\]", frame.file):
            return frame
    return candidates[-1] if candidates else None


# TensorFlow's op wrappers and op building, which every op's stack ends in. Not its ``eager`` folder: the ops
# ``tape.gradient`` makes are backprop's, also when NaN Lens's wrapper of ``gradient`` called it.
_OP_BUILDING_RE = re.compile(
    r"[/\\]tensorflow[/\\]python[/\\](debug|framework|util|autograph|ops|platform)[/\\]"
)


def made_by_nanlens(frames: Sequence[Frame]) -> bool:
    """Whether NaN Lens's own code made the op: its innermost frame outside TensorFlow's op building is a NaN Lens
    file (the guard's or a replay's finite checks, which read the step's NaN too), not code NaN Lens called."""
    for frame in reversed(frames):
        if frame.file and not _OP_BUILDING_RE.search(frame.file):
            return _norm(frame.file).startswith(_nanlens_dir())
    return False


def written_by_the_user(frames: Sequence[Frame]) -> bool:
    """Whether the user's code called the op itself (``tf.where`` or ``keras.ops.where`` on a line of theirs): the
    innermost frame outside TensorFlow's op building and Keras's ops and backend is a user file, not a Keras layer
    or loss that the user's line ran."""
    for frame in reversed(frames):
        if frame.file and not _PLUMBING_RE.search(frame.file):
            return is_user_file(frame.file)
    return False


def short_path(path: str) -> str:
    """An installed package's file from its package folder on (``keras/src/losses/losses.py``); else as is."""
    match = _PACKAGE_DIR_RE.search(path)
    if match:
        return path[match.end() :].replace("\\", "/")
    return path


def _library(path: str) -> bool:
    """Whether a frame's file is not the user's (a library, or NaN Lens itself)."""
    return not is_user_file(path) or "/pyadapter/" in path.replace("\\", "/")


def innermost_user_call(frame: Any, max_code: int = 400) -> tuple[str, int, str, str] | None:
    """(file, line, text, function) of the innermost frame of the user's code from `frame` outwards. A line of timed
    code (``%%time`` or ``%time``, compiled as ``<timed exec>`` / ``<timed eval>``) is that line of the cell: the
    cell's own frame is the magic's call, which every fit of a timed cell was taken for."""
    body_line: int | None = None  # the line in the timed code
    body: str | None = None
    cell_magic = True
    while frame is not None:
        path = frame.f_code.co_filename
        if is_timed_body(path) and body_line is None:
            body_line = frame.f_lineno
        elif body_line is not None and body is None and frame.f_code.co_name == "time":
            # IPython's `time` magic holds the timed code: the cell's body (%%time), or its line (%time).
            cell = frame.f_locals.get("cell")
            cell_magic = isinstance(cell, str)
            body = cell if cell_magic else str(frame.f_locals.get("line") or "")
        elif not _library(path):
            if body_line is not None:
                lines = (body or "").splitlines()
                text = lines[body_line - 1] if 0 < body_line <= len(lines) else ""
                line = timed_line(frame.f_lineno, body_line, cell_magic)
                return path, line, text.strip()[:max_code], frame.f_code.co_name
            text = linecache.getline(path, frame.f_lineno).strip()[:max_code]
            return path, frame.f_lineno, text, frame.f_code.co_name
        frame = frame.f_back
    return None
