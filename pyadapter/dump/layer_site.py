"""The user's line behind an op that Keras made in a layer: the line that builds that layer.

An op made inside a Keras layer of a ``Sequential`` or functional model (``Dense(1, activation="exponential")``'s
Exp) has no frame in the user's code but the training call. Its name says more: Keras names an op by the layers it
was made in (``sequential/rate/Exp``, ``functional/dense_2/Exp``). This module finds, in the user's file, the one
call that built that layer (by its ``name=``, else by its class when a single call of the class, or of the class
with that activation, is there). Nothing found, more than one candidate, or an op of the compiled loss: None (the
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
_AUTO_NAME = re.compile(r"^(?P<base>.*?)(?:_(?P<index>\d+))?$")


def layer_names(scopes: list[str], index: int) -> list[str]:
    """The layer names the op-name scope ``scopes[index]`` may stand for, likelier first. In the step Keras 3
    traces, every scope carries a call count after the layer's name: the model ``count_regressor`` is
    ``count_regressor_1``, its third unnamed Dense (``dense_2``) ``dense_2_1``, a ``Dense(name="head")``
    ``head_1``. The model's scope (the first) tells: when it ends in a count, the layers' do too and the name is
    the scope less one; else the scope is the name. Both are offered, the other second."""
    scope = scopes[index]
    stripped = _AUTO_SUFFIX.sub("", scope)
    if stripped == scope:
        return [scope]
    counted = bool(scopes) and _AUTO_SUFFIX.search(scopes[0]) is not None
    return [stripped, scope] if counted else [scope, stripped]


def auto_name_parts(name: str) -> tuple[str, int]:
    """(class in snake case, index among its instances) of an automatic layer name: ``dense_2`` is the third
    Dense built (``("dense", 2)``), ``dense`` the first (``("dense", 0)``)."""
    match = _AUTO_NAME.match(name)
    assert match is not None  # the pattern matches every string
    return match.group("base"), int(match.group("index") or 0)


@dataclass(frozen=True)
class LayerSite:
    line: int
    what: str  # "the line that builds its Dense layer"


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
    """Where the user's file builds the layer that made the op ``op_name``."""
    try:
        if not path.endswith(".py") or not os.path.isfile(path):
            return None
        calls = _calls(path, os.path.getmtime(path))
    except (OSError, SyntaxError, ValueError):
        return None
    scopes = op_name.split("/")[:-1]
    if scopes and scopes[0] in ("compile_loss", "compile_metrics"):
        # A built-in loss's op (mse's Square overflowing in a divergence) is a symptom at the loss, and the fit
        # line says which fit of a program in phases it was: that stays marked.
        return None
    for index in reversed(range(1, len(scopes))):  # innermost layer first; the first scope is the model
        names = layer_names(scopes, index)
        for name in names:
            named = [(n, line) for n, line, keywords in calls if ("name", name) in keywords]
            if len(named) == 1:
                return LayerSite(named[0][1], f"the line that builds its {named[0][0]} layer")
            if named:
                break
        # An automatic name (``dense_2``) names its class; one call of the class, or of the class with the op's
        # activation, is the layer. (Which of several calls made ``dense_2`` depends on every Dense the process
        # built before: not counted here.)
        kind = auto_name_parts(names[0])[0].replace("_", "").lower()
        of_class = [(n, line, kw) for n, line, kw in calls if n.lower() == kind and n[:1].isupper()]
        if len(of_class) > 1 and op_type in _ACTIVATIONS:
            of_class = [c for c in of_class if ("activation", _ACTIVATIONS[op_type]) in c[2]]
        if len(of_class) == 1:
            return LayerSite(of_class[0][1], f"the line that builds its {of_class[0][0]} layer")
    return None
