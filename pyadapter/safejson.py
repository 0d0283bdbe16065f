"""JSON from files nobody vouches for (a bundle's manifest.json and findings.json, a Keras archive's config).

`json.loads` as is lets a document choose how the reader fails: nesting deeper than the interpreter's recursion
limit raises RecursionError (not a ValueError), an integer of 5000 digits raises a plain ValueError, ``1e400``
quietly becomes ``inf`` and ``NaN`` is accepted, a lone surrogate (``"\\ud800"``) becomes a str that cannot be
written back out as UTF-8. `loads` and `load_file` turn every one of these into `JSONError` (a ValueError) with a
one-line reason, and bound what comes back: at most `MAX_DEPTH` levels of nesting (so code that walks the
document recursively has stack to spare), integers of at most `MAX_INT_DIGITS` digits, finite floats only.

Callers put the file's name in front of the reason: ``manifest.json is nested deeper than 100 levels``.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from pyadapter.regularfile import open_regular

MAX_DEPTH = 100
MAX_INT_DIGITS = 40  # 2**128 has 39 digits; nothing NaN Lens writes comes near it
DEFAULT_MAX_BYTES = 64 << 20


class JSONError(ValueError):
    """A document that is not acceptable JSON; the message is a one-line reason ("is not valid JSON (...)")."""


def _parse_int(text: str) -> int:
    digits = len(text) - (text[0] == "-")
    if digits > MAX_INT_DIGITS:
        raise JSONError(f"holds an integer of {digits} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _parse_float(text: str) -> float:
    if len(text) > 400:
        raise JSONError(f"holds a number written with {len(text)} characters")
    value = float(text)
    if not math.isfinite(value):
        raise JSONError(f"holds a number out of range ({text[:40]})")
    return value


def _parse_constant(name: str) -> Any:
    raise JSONError(f"holds {name}, which is not JSON")


def _check_text(text: str) -> None:
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise JSONError("holds a string that is not valid Unicode (a lone surrogate)") from None


def check_value(value: Any, max_depth: int = MAX_DEPTH) -> None:
    """Walks a parsed document without recursion: depth, strings, numbers (what `loads` guarantees)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        if isinstance(item, dict):
            if depth > max_depth:
                raise JSONError(f"is nested deeper than {max_depth} levels")
            for key, child in item.items():
                _check_text(key)
                if isinstance(child, (dict, list)):
                    push((child, depth + 1))
                elif isinstance(child, str):
                    _check_text(child)
        elif isinstance(item, list):
            if depth > max_depth:
                raise JSONError(f"is nested deeper than {max_depth} levels")
            for child in item:
                if isinstance(child, (dict, list)):
                    push((child, depth + 1))
                elif isinstance(child, str):
                    _check_text(child)
        elif isinstance(item, str):
            _check_text(item)


def loads(data: bytes | str, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parses one JSON document; JSONError (one line) for anything `json.loads` would choke on or let through
    unbounded. Objects are dicts, arrays lists, numbers int or finite float."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as error:
            raise JSONError(f"is not UTF-8 text (byte {error.start})") from None
    else:
        text = data
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        value = json.loads(
            text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant
        )
    except JSONError:
        raise
    except json.JSONDecodeError as error:
        raise JSONError(
            f"is not valid JSON ({error.msg}, line {error.lineno} column {error.colno})"
        ) from None
    except RecursionError:
        raise JSONError(f"is nested deeper than {max_depth} levels") from None
    except (ValueError, OverflowError, MemoryError) as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise JSONError(f"is not valid JSON ({first[:120]})") from None
    check_value(value, max_depth)
    return value


def load_file(
    path: str | os.PathLike[str],
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_depth: int = MAX_DEPTH,
    follow_symlinks: bool = True,
) -> Any:
    """`loads` of a file of at most `max_bytes` bytes (JSONError if larger; OSError if it cannot be read).

    Never reads more than ``max_bytes + 1`` bytes, whatever the file's size says, and never waits: a FIFO, a
    device or a socket of that name is an OSError (`regularfile.NotRegularFile`), as is a symlink with
    ``follow_symlinks=False``."""
    with open_regular(path, follow_symlinks=follow_symlinks) as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise JSONError(f"is larger than {max_bytes} bytes")
    return loads(data, max_depth=max_depth)
