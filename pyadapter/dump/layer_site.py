"""The user's line behind an op that Keras made: the layer it belongs to, or the compiled loss.

An op made inside a Keras layer of a ``Sequential`` or functional model (``Dense(1, activation="exponential")``'s
Exp) or inside a loss given to ``compile`` (``keras.losses.Poisson``'s Log) has no frame in the user's code but the
training call. Its name says more: Keras names an op by the layers it was made in (``sequential/rate/Exp``,
``functional/dense_2/Exp``) or ``compile_loss/...``. This module finds, in the user's file, the one call that built
that layer (by its ``name=``, else by its class when a single call of the class, or of the class with that
activation, is there) or the one ``compile(..., loss=...)``. Nothing found, or more than one candidate: None (the
training call stays marked). Reads the file; never raises.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass
from functools import lru_cache

# The activation an op computes, as a layer's ``activation=`` names it.
_ACTIVATIONS = {
    "Exp": "exponential",
    "Softplus": "softplus",
    "Relu": "relu",
    "Sigmoid": "sigmoid",
    "Tanh": "tanh",
    "Softmax": "softmax",
    "Elu": "elu",
    "Selu": "selu",
    "Log": "log_softmax",
}
_AUTO_SUFFIX = re.compile(r"_\d+$")


@dataclass(frozen=True)
class LayerSite:
    line: int
    what: str  # "the line that builds its Dense layer", "the line that compiles its loss"


@lru_cache(maxsize=32)
def _calls(path: str, mtime_key: float) -> tuple[tuple[str, int, tuple[tuple[str, str], ...]], ...]:
    """(called name, line, keywords) of every call in the file."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        tree = ast.parse(handle.read())
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = (
            func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        )
        if name is None:
            continue
        # Every keyword, with its value when a string is written (``name="rate"``, ``activation="exponential"``).
        keywords = tuple(
            (
                k.arg,
                k.value.value if isinstance(k.value, ast.Constant) and isinstance(k.value.value, str) else "",
            )
            for k in node.keywords
            if k.arg
        )
        out.append((name, node.lineno, keywords))
    return tuple(out)


def layer_site(op_name: str, op_type: str, path: str) -> LayerSite | None:
    """Where the user's file builds the layer (or compiles the loss) that made the op ``op_name``."""
    try:
        if not path.endswith(".py") or not os.path.isfile(path):
            return None
        calls = _calls(path, os.path.getmtime(path))
    except (OSError, SyntaxError, ValueError):
        return None
    scopes = op_name.split("/")[:-1]
    if scopes and scopes[0] == "compile_loss":
        found = [line for name, line, keywords in calls if name == "compile" and _has(keywords, "loss")]
        compiles = [line for name, line, _ in calls if name == "compile"]
        lines = found or compiles
        return LayerSite(lines[0], "the line that compiles its loss") if len(lines) == 1 else None
    for scope in reversed(scopes[1:]):  # innermost layer first; the first scope is the model
        named = [(n, line) for n, line, keywords in calls if ("name", scope) in keywords]
        if len(named) == 1:
            return LayerSite(named[0][1], f"the line that builds its {named[0][0]} layer")
        kind = _AUTO_SUFFIX.sub("", scope).replace("_", "").lower()
        of_class = [(n, line, kw) for n, line, kw in calls if n.lower() == kind and n[:1].isupper()]
        if len(of_class) > 1 and op_type in _ACTIVATIONS:
            of_class = [c for c in of_class if ("activation", _ACTIVATIONS[op_type]) in c[2]]
        if len(of_class) == 1:
            return LayerSite(of_class[0][1], f"the line that builds its {of_class[0][0]} layer")
    return None


def _has(keywords: tuple[tuple[str, str], ...], key: str) -> bool:
    return any(k == key for k, _ in keywords)
