"""Text bound for a terminal, made harmless: what the CLI prints holds strings a bundle or a dump chose (an op's
name, a message, the program's path), and a terminal obeys the control characters in them. An ESC sequence can
retitle the window, rewrite the lines above ("No NaN found"), set the clipboard (OSC 52) or hide a link (OSC 8);
a CR overwrites the line it ends; bidi overrides show text in another order than it reads.

The CLI passes what it writes through `printable` at the point it writes it (one call per print, not one per
field). JSON output needs nothing: ``json.dumps`` already writes these characters as ``\\u`` escapes.
"""

from __future__ import annotations

import re

# C0 controls except tab and newline (the CLI's own layout), DEL, C1 controls (0x9b is a one-byte CSI on some
# terminals), the Unicode line and paragraph separators, and the bidi embeddings, overrides and isolates.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character but newline and tab written as a visible escape (ESC as ``\\x1b``,
    U+202E as ``\\u202e``); everything else, non-ASCII letters included, as it is."""
    return _UNPRINTABLE.sub(_visible, text)
