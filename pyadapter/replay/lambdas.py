"""Keras ``Lambda`` layers holding Python lambdas, rebuilt from the user's source instead of saved bytecode.

Keras saves a lambda as marshalled bytecode and, rightly, refuses to load it in safe mode: bytecode from a file
could do anything. A replay already imports the user's own scripts, so it takes each lambda from there instead:
the ``Lambda(lambda ...)`` expressions of the entry script (then of the user modules it imports), in source order,
compiled with their real file and line numbers (a breakpoint on that line stops in the replay) and evaluated in
their module's namespace. The saved layers get them in the same order. Bytecode from the bundle is never loaded.
"""

from __future__ import annotations

import ast
import contextlib
import json
import types
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

NAME_PREFIX = "nanlens_source_lambda_"


def saved_lambda_count(model_path: Path) -> int:
    """How many Lambda layers of the saved model hold a Python lambda (read from config.json, as JSON)."""
    try:
        with zipfile.ZipFile(model_path) as archive:
            config = json.loads(archive.read("config.json"))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return 0
    count = 0

    def walk(node: Any) -> None:
        nonlocal count
        if isinstance(node, dict):
            if node.get("class_name") == "__lambda__":
                count += 1
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(config)
    return count


def _lambda_nodes(source: str) -> list[ast.Lambda]:
    """The lambdas given as the function of ``Lambda(...)`` / ``layers.Lambda(...)`` calls, in source order."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found: list[ast.Lambda] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        if name != "Lambda":
            continue
        candidates = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "function")]
        found.extend(c for c in candidates if isinstance(c, ast.Lambda))
    return sorted(found, key=lambda n: (n.lineno, n.col_offset))


def source_lambdas(modules: list[types.ModuleType]) -> list[types.FunctionType]:
    """Each module's ``Lambda(lambda ...)`` functions, compiled from its source file in its namespace."""
    functions: list[types.FunctionType] = []
    for module in modules:
        file = getattr(module, "__file__", None)
        if not file:
            continue
        try:
            source = Path(file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for node in _lambda_nodes(source):
            expression = ast.Expression(body=node)
            code = compile(expression, file, "eval")  # the node keeps its line numbers: breakpoints match
            functions.append(eval(code, vars(module)))  # noqa: S307 - the user's own source, as importing it does
    return functions


@contextlib.contextmanager
def lambdas_from_source(model_path: Path, modules: list[types.ModuleType]) -> Iterator[dict[str, Any]]:
    """While loading the model: saved lambdas come from the source. Yields the custom objects to pass to the
    loader (the functions, by generated name); empty when the model has no Python lambdas.

    Keras looks built-in classes up by name before custom objects, so ``Lambda.from_config`` itself is wrapped
    for the duration of the block (and put back after it). Raises ValueError (one line) when the source has
    fewer lambdas than the saved model.
    """
    wanted = saved_lambda_count(model_path)
    if wanted == 0:
        yield {}
        return
    functions = source_lambdas(modules)
    if len(functions) < wanted:
        raise ValueError(
            f"the saved model has {wanted} Lambda layers with Python lambdas but the entry script has "
            f"{len(functions)} `Lambda(lambda ...)` expressions; use named functions in Lambda layers"
        )
    from keras.layers import Lambda

    names = [f"{NAME_PREFIX}{i}" for i in range(len(functions))]
    pending = list(names)
    original = Lambda.__dict__["from_config"]

    def from_config(cls: type, config: dict[str, Any], custom_objects: Any = None, safe_mode: Any = None) -> Any:
        config = dict(config)
        function = config.get("function")
        if isinstance(function, dict) and function.get("class_name") == "__lambda__" and pending:
            config["function"] = pending.pop(0)  # a name the custom objects resolve to the source's function
        return original.__func__(cls, config, custom_objects=custom_objects, safe_mode=safe_mode)

    Lambda.from_config = classmethod(from_config)
    try:
        yield dict(zip(names, functions, strict=True))
    finally:
        Lambda.from_config = original
