"""The one error type of replay and locate: something the user can fix, said in one line."""

from __future__ import annotations

import re


class ReplayError(Exception):
    """A bundle that cannot be replayed or located; ``str(exc)`` is one line for the user."""


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Warning)\b.*:")
_KERAS_WRAPPER = re.compile(r"^Exception encountered when calling .*\.$")


def error_text(exc: BaseException) -> str:
    """``Type: message`` of an exception in one line, the reason included when TensorFlow or Keras wrap it.

    A tf.function error starts "in user code:" and a traceback of the user's frames; Keras adds "Exception
    encountered when calling X.call()." before the reason and "Arguments received by ..." after it. The first
    line alone ("AttributeError: in user code:") tells nothing: this takes the error line after the frames and the
    reason after Keras's wrapper ("AttributeError: Exception encountered when calling BagOfWords.call(): 'SymbolicTensor'
    object has no attribute 'row_lengths'")."""
    text = _ANSI.sub("", str(exc)).strip()
    lines = [line.strip() for line in text.splitlines()]
    kind = type(exc).__name__
    if not lines:
        return kind
    if lines[0] != "in user code:":
        first = lines[0]
        if _KERAS_WRAPPER.match(first):
            reason = _reason_after(lines, 1)
            return f"{kind}: {first[:-1]}: {reason}" if reason else f"{kind}: {first}"
        return f"{kind}: {first}"
    for index, line in enumerate(lines):
        if _ERROR_LINE.match(line):
            kind, _, message = line.partition(": ")
            if _KERAS_WRAPPER.match(message):
                reason = _reason_after(lines, index + 1)
                return f"{kind}: {message[:-1]}: {reason}" if reason else f"{kind}: {message}"
            return f"{kind}: {message}"
    return f"{kind}: {lines[-1]}"


def _reason_after(lines: list[str], start: int) -> str:
    """The last line of Keras's message before "Arguments received by": its own reason comes after its hints."""
    reason = ""
    for line in lines[start:]:
        if line.startswith("Arguments received by"):
            break
        if line:
            reason = line
    return reason
