"""The whole statement around an origin's line.

TensorFlow records one line per op, and for a statement written over several lines that is often not the line
holding the op's call: autograph's conversion of ``return tf.reduce_sum(\\n  x * tf.exp(-logvar),\\n  axis=1)``
records its last line, ``axis=1)``, and the code shown under "origin" would not hold the ``tf.exp`` it names. The
lines of the statement before and after the recorded one are kept beside it (``findings.extra["origin_statement"]``,
relative to the line, so a notebook cell's renumbering leaves them right) and shown with it.
"""

from __future__ import annotations

import ast
from typing import Any

# A statement longer than this is shown as its recorded line alone (a whole model literal would bury it).
MAX_STATEMENT_LINES = 8


def statement_around(source: str, line: int) -> dict[str, Any] | None:
    """``{"before": [...], "after": [...]}``: the other lines of the simple statement of `source` that holds line
    `line` (1-based), when it spans several; None when it is one line, too long, or the source does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    best: tuple[int, int] | None = None
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt) or hasattr(node, "body"):
            continue  # compound statements (def, if, for, with...) hold whole blocks
        first, last = node.lineno, node.end_lineno or node.lineno
        if first <= line <= last and (best is None or last - first < best[1] - best[0]):
            best = (first, last)
    if best is None or best[0] == best[1] or best[1] - best[0] + 1 > MAX_STATEMENT_LINES:
        return None
    lines = source.splitlines()
    return {"before": lines[best[0] - 1 : line - 1], "after": lines[line : best[1]]}
