"""State a custom training step keeps in variables of its own, named as the program names them.

Gradient accumulation by hand keeps its accumulators and its micro-step counter in module-level variables
(``accum_grads = [tf.Variable(...) ...]``, ``micro_step = tf.Variable(0)``) that no model or optimizer lists, and
the step's branch ``if micro_step % 4 == 0:`` reads them: a replay that starts them from the program's initial
values does not take the branch training took, and stays finite. The guard saw the step write them
(`gate.written_by_hand`); a bundle keeps their values under the program's own names for them, its module's
global names (``micro_step``, ``accum_grads[2]``), which a re-entry of the same program finds again in its
globals. Nothing here is run from a bundle: a name is only looked up, never evaluated.

A step also reads variables it does not write and no model holds: a softmax temperature the loop anneals with
``temperature.assign(schedule(step))`` before each call. A replay that starts it from the program's first value
runs another step than training's, and stays finite. The bundle keeps those too, by the same names; and besides
module globals, a name may be one of the step's closure (a step defined inside the experiment function) or, for a
trainer's method, one of its object's attributes (``self.temperature``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

# The bundle's weights group of these variables (beside "model", "optimizer", "module").
GROUP = "step"

_NAME = re.compile(r"^((?:self\.)?[A-Za-z_][A-Za-z0-9_]*)(\.weights)?(?:\[(\d{1,6})\])?$")


def _backing(variable: Any) -> Any:
    value = getattr(variable, "value", None)
    return value if value is not None and hasattr(value, "assign") and value is not variable else variable


def namespace_of(function: Any) -> Mapping[str, Any]:
    """The names a step function (or a method of it) reads its variables by: its module's globals, its closure's
    free variables (which Python reads before the globals), and a bound method's object's attributes as
    ``self.<name>``; {} when it has none."""
    inner = getattr(function, "__func__", function)
    names: dict[str, Any] = dict(getattr(inner, "__globals__", None) or {})
    code, closure = getattr(inner, "__code__", None), getattr(inner, "__closure__", None)
    if code is not None and closure:
        for name, cell in zip(code.co_freevars, closure, strict=False):
            try:
                names[name] = cell.cell_contents
            except ValueError:  # a cell not yet filled
                continue
    owner = getattr(function, "__self__", None)
    attributes = getattr(owner, "__dict__", None) if owner is not None else None
    if isinstance(attributes, dict):
        names.update({f"self.{key}": value for key, value in attributes.items() if not key.startswith("__")})
    return names


def global_names(namespace: Mapping[str, Any], variables: Iterable[Any]) -> dict[int, str]:
    """``{id(variable): name}`` for each of `variables` a module-level name of `namespace` holds, itself or as an
    item of a list or tuple (``accum_grads[2]``); variables held by no such name are left out."""
    wanted = {id(_backing(v)): v for v in variables}
    names: dict[int, str] = {}
    for key, value in list(namespace.items()):
        if key.startswith("__"):
            continue
        items = [(key, value)]
        if isinstance(value, list | tuple) and len(value) <= 100_000:
            items += [(f"{key}[{i}]", item) for i, item in enumerate(value)]
        elif _is_layer(value):
            # A network the step reads and the guard was not given: a GAN's generator in the discriminator's step
            # (``G(z)`` inside ``train_d``, guarded with ``model=D``), by its place in the program's model.
            items += [(f"{key}.weights[{i}]", item) for i, item in enumerate(value.weights)]
        for name, item in items:
            if not hasattr(item, "assign"):
                continue
            found = wanted.get(id(_backing(item)))
            if found is not None and id(found) not in names:
                names[id(found)] = name
    return names


def _is_layer(value: Any) -> bool:
    """A Keras layer or model: a class of keras's (or a subclass of one) with a weights list. Keras is not
    imported here."""
    keras_class = any(c.__module__.split(".")[0] in ("keras", "tf_keras") for c in type(value).__mro__)
    return keras_class and isinstance(getattr(value, "weights", None), list)


def named(function: Any, variables: Iterable[Any]) -> list[tuple[Any, str]]:
    """(variable, the program's name for it) of those of `variables` a name `function` reads holds
    (`namespace_of`, `global_names`), in their order; variables no such name holds are left out."""
    candidates = list(variables)
    names = global_names(namespace_of(function), candidates)
    return [(v, names[id(v)]) for v in candidates if id(v) in names]


def find(namespace: Mapping[str, Any], name: str) -> Any:
    """The variable `name` (``micro_step``, ``accum_grads[2]``, ``G.weights[3]``) names in `namespace`, or None.
    Only a name, an index and a Keras model's ``weights`` list are looked up: nothing of the name is evaluated."""
    match = _NAME.match(name)
    if match is None:
        return None
    value: Any = namespace.get(match.group(1))
    if match.group(2) is not None:
        value = value.weights if _is_layer(value) else None
    if match.group(3) is not None:
        index = int(match.group(3))
        value = value[index] if isinstance(value, list | tuple) and index < len(value) else None
    return value if hasattr(value, "assign") else None


def assign(
    namespace: Mapping[str, Any], entries: Iterable[tuple[str, np.ndarray]]
) -> tuple[list[Any], list[str]]:
    """Set each named variable of `namespace` from the bundle's `entries`; returns the variables set (a replay puts
    them back before each of its runs, as the model's) and one warning line for those that could not be set (a name
    the program no longer has, another shape), else []."""
    missed: list[str] = []
    found: list[Any] = []
    for name, value in entries:
        variable = find(namespace, name)
        if variable is None or tuple(variable.shape) != tuple(np.shape(value)):
            missed.append(name)
            continue
        found.append(variable)
        variable.assign(
            np.asarray(value).astype(getattr(variable.dtype, "as_numpy_dtype", variable.dtype), copy=False)
        )
    if not missed:
        return found, []
    return found, [
        f"the step's own state {', '.join(missed[:3])}{' and more' if len(missed) > 3 else ''} was not set from "
        "the bundle (the program has no such variable now, or of another shape): it starts from the program's value"
    ]
