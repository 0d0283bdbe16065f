"""The Python code that feeds ``fit`` its batches, found by reading (ast) the sources, never by running them.

A Python generator (``model.fit(batches())``, ``tf.data.Dataset.from_generator(batches, ...)``), a
``keras.utils.PyDataset`` / ``Sequence`` subclass (``model.fit(SensorSequence(...))``) or a function run by
``tf.py_function`` / ``tf.numpy_function`` makes its values in Python, where no dump sees: the values enter
TensorFlow through a ``PyFunc`` op (Keras wraps generators and PyDatasets in ``from_generator``), so that op is
the origin a dump finds for a bad record made there. The line to change is in the Python code: where the
generator yields (or ``__getitem__`` / the wrapped function returns) the batch, the last place to filter or repair
a non-finite record before TensorFlow sees it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from pyadapter.cause.change_line import Site
from pyadapter.cause.sources import SourceUnit, called_name, calls, keyword

# The ops that run Python code inside a TensorFlow graph (tf.py_function, tf.numpy_function, from_generator).
PY_FUNC_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})
_WRAPPERS = ("py_function", "numpy_function", "py_func")
_DATASET_METHODS = ("__getitem__",)
_MAX_HOPS = 4  # ``gen = batches(); train = gen; model.fit(train)``: names followed at most this far


@dataclass
class FeedSite(Site):
    """Where Python code hands a batch to TensorFlow: a ``yield`` in a generator function, the ``return`` of a
    PyDataset's ``__getitem__`` or of a function wrapped by ``tf.py_function``."""

    feed: str = "generator"  # "generator" | "PyDataset" | "py_function"
    function: str = ""  # "batches", "SensorSequence.__getitem__"

    def describe(self) -> str:
        """'the generator batches()' / 'SensorSequence.__getitem__' / 'the py_function load_row()'."""
        if self.feed == "PyDataset":
            return f"{self.function} of the PyDataset"
        if self.feed == "py_function":
            return f"the py_function {self.function}()"
        return f"the generator {self.function}()"


@dataclass
class _Defs:
    functions: dict[str, tuple[SourceUnit, ast.FunctionDef | ast.AsyncFunctionDef]]
    classes: dict[str, tuple[SourceUnit, ast.ClassDef]]
    assigned: dict[str, list[tuple[SourceUnit, ast.expr]]]


def _definitions(units: list[SourceUnit]) -> _Defs:
    defs = _Defs({}, {}, {})
    for unit in units:
        for node in ast.walk(unit.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defs.functions.setdefault(node.name, (unit, node))
            elif isinstance(node, ast.ClassDef):
                defs.classes.setdefault(node.name, (unit, node))
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        defs.assigned.setdefault(target.id, []).append((unit, node.value))
    return defs


def _own_nodes(function: ast.AST) -> list[ast.AST]:
    """The nodes of a function's own body, not of functions or classes defined inside it."""
    found: list[ast.AST] = []
    stack = list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        found.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return sorted(
        (n for n in found if hasattr(n, "lineno")), key=lambda n: (n.lineno, getattr(n, "col_offset", 0))
    )


def _yields(function: ast.AST) -> list[ast.expr]:
    return [n for n in _own_nodes(function) if isinstance(n, (ast.Yield, ast.YieldFrom))]


def _returned(function: ast.AST) -> list[ast.expr]:
    return [n.value for n in _own_nodes(function) if isinstance(n, ast.Return) and n.value is not None]


def _generator_site(name: str, defs: _Defs) -> FeedSite | None:
    found = defs.functions.get(name)
    if found is None:
        return None
    unit, function = found
    yields = _yields(function)
    if not yields:
        return None
    # The last yield: a generator that yields a warm-up or a remainder first yields its regular batches last.
    return FeedSite(unit, yields[-1], name, feed="generator", function=name)


def _dataset_site(name: str, defs: _Defs) -> FeedSite | None:
    found = defs.classes.get(name)
    if found is None:
        return None
    unit, cls = found
    for item in cls.body:
        if isinstance(item, ast.FunctionDef) and item.name in _DATASET_METHODS:
            returned = _returned(item)
            if returned:
                return FeedSite(unit, returned[-1], name, feed="PyDataset", function=f"{name}.{item.name}")
    return None


def _callable_generator_site(name: str, defs: _Defs) -> FeedSite | None:
    """An object whose ``__call__`` is a generator (``from_generator(RecordReader("records.txt"))``): its last
    yield. The data cause was marked at the from_generator statement and changed where ``ds`` is batched."""
    found = defs.classes.get(name)
    if found is None:
        return None
    unit, cls = found
    for item in cls.body:
        if isinstance(item, ast.FunctionDef) and item.name == "__call__":
            yields = _yields(item)
            if yields:
                return FeedSite(unit, yields[-1], name, feed="generator", function=f"{name}.__call__")
    return None


def _function_site(name: str, defs: _Defs) -> FeedSite | None:
    found = defs.functions.get(name)
    if found is None:
        return None
    unit, function = found
    returned = _returned(function)
    if not returned:
        return None
    return FeedSite(unit, returned[-1], name, feed="py_function", function=name)


def _factory_site(name: str, defs: _Defs, hops: int) -> FeedSite | None:
    """A factory's generator: ``from_generator(row_generator(files))`` where ``row_generator`` defines ``gen()`` and
    returns it. The data cause was marked at the from_generator statement, the generator never named."""
    found = defs.functions.get(name)
    if found is None:
        return None
    for value in reversed(_returned(found[1])):
        site = _site_of(value, defs, hops + 1) if isinstance(value, (ast.Name, ast.Lambda)) else None
        if site is not None:
            return site
    return None


def _site_of(expr: ast.expr | None, defs: _Defs, hops: int = 0) -> FeedSite | None:
    """The feed an argument of fit / from_generator stands for: a call of a generator function or of a PyDataset
    class, a generator function itself, a lambda returning one, or a name assigned one of those."""
    if expr is None or hops > _MAX_HOPS:
        return None
    if isinstance(expr, ast.Call):
        name = called_name(expr)
        if name is None:
            return None
        return (
            _generator_site(name, defs)
            or _dataset_site(name, defs)
            or _callable_generator_site(name, defs)
            or _factory_site(name, defs, hops)
        )
    if isinstance(expr, ast.Lambda):
        return _site_of(expr.body, defs, hops + 1)
    if isinstance(expr, (ast.Name, ast.Attribute)):
        name = expr.id if isinstance(expr, ast.Name) else expr.attr
        direct = _generator_site(name, defs)
        if direct is not None:
            return direct
        for _, value in defs.assigned.get(name, []):
            site = _site_of(value, defs, hops + 1)
            if site is not None:
                return site
    return None


def feed_site(units: list[SourceUnit], wrapped_functions: bool = False) -> FeedSite | None:
    """The Python code that feeds the training batches: what the first ``fit`` is given, or the generator a
    ``from_generator`` in the user's code runs; None when no batch is made in the user's Python code (arrays,
    tf.data readers). ``wrapped_functions``: also a function run by ``tf.py_function`` / ``numpy_function``
    (only when a PyFunc op is known to have made the values: such a function may feed anything)."""
    defs = _definitions(units)
    for unit in units:
        for call in calls(unit):
            name = called_name(call)
            if name == "fit" and isinstance(call.func, ast.Attribute):
                site = _site_of(call.args[0] if call.args else keyword(call, "x"), defs)
            elif name == "from_generator":
                site = _site_of(call.args[0] if call.args else keyword(call, "generator"), defs)
            elif name in _WRAPPERS and wrapped_functions:
                target = call.args[0] if call.args else keyword(call, "func")
                site = _function_site(target.id, defs) if isinstance(target, ast.Name) else None
            else:
                continue
            if site is not None:
                return site
    return None
