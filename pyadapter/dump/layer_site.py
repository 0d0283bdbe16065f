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
from typing import Any

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


def auto_name(base: str, index: int) -> str:
    """The automatic layer name of `auto_name_parts`'s (base, index): ``dense`` for 0, ``dense_2`` for 2."""
    return base if not index else f"{base}_{index}"


# ---- how many layers one call builds -------------------------------------------------------------------------

_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


class _CallGraph:
    """Who calls whom in the code, by name: each node's parent, the functions of each name, and each function's
    call sites (`sites`)."""

    def __init__(self, trees: list[ast.Module]) -> None:
        self.parents: dict[int, ast.AST] = {}
        self.functions: dict[str, list[ast.AST]] = {}
        self.callers: dict[str, list[ast.Call]] = {}  # function name -> its calls ``name(...)``
        self.method_callers: dict[str, list[ast.Call]] = {}  # method name -> its calls ``obj.name(...)``
        self.every_call: list[ast.Call] = []
        self.tree_of: dict[int, int] = {}  # call -> the number of its tree
        for number, tree in enumerate(trees):
            for node in ast.walk(tree):
                for child in ast.iter_child_nodes(node):
                    self.parents[id(child)] = node
                if isinstance(node, _FUNCTIONS):
                    self.functions.setdefault(node.name, []).append(node)
                elif isinstance(node, ast.Call):
                    self.every_call.append(node)
                    self.tree_of[id(node)] = number
                    if isinstance(node.func, ast.Name):
                        self.callers.setdefault(node.func.id, []).append(node)
                    elif isinstance(node.func, ast.Attribute):
                        self.method_callers.setdefault(node.func.attr, []).append(node)

    def sites(self, function: ast.AST) -> list[ast.Call]:
        """The calls that run `function`: ``name(...)`` of a function, ``obj.name(...)`` of a method, and the
        class's own calls (``GAN(latent_dim=64)``) of an ``__init__`` (its ``super().__init__()`` runs another
        class's). None told when two functions share the name."""
        name = getattr(function, "name", "")
        owner = self.parents.get(id(function))
        if isinstance(owner, ast.ClassDef) and name == "__init__":
            return self.callers.get(owner.name, [])
        if len(self.functions.get(name, [])) != 1:
            return []
        return (self.method_callers if isinstance(owner, ast.ClassDef) else self.callers).get(name, [])


def times_run(trees: list[ast.Module]) -> dict[int, int | None]:
    """How many times each call of the code runs when the code runs once top to bottom, by ``id`` of the call
    node: 1; ``n`` inside a loop or comprehension over a sequence written in the code (``for units in [64, 32]``,
    ``range(3)``, a module-level ``UNITS = (64, 32)``); for a call in a function the code calls by name (`_CallGraph.sites`),
    the sum over its calls (a function it never calls counts once); None when it cannot be told (a loop over a
    computed sequence, a ``while``, a condition in a comprehension, recursion). A layer built in a loop is several
    layers: Keras numbers each (``dense``, ``dense_1``, ...)."""
    graph = _CallGraph(trees)
    parents = graph.parents
    literals: dict[str, ast.expr | None] = {}
    for tree in trees:
        for statement in tree.body:
            if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                target = statement.targets[0]
                if isinstance(target, ast.Name):
                    # Assigned twice: not a constant to count by.
                    literals[target.id] = None if target.id in literals else statement.value

    def length(iterable: ast.expr) -> int | None:
        if isinstance(iterable, ast.Name):
            value = literals.get(iterable.id)
            return length(value) if value is not None and not isinstance(value, ast.Name) else None
        if isinstance(iterable, (ast.List, ast.Tuple, ast.Set)):
            return None if any(isinstance(e, ast.Starred) for e in iterable.elts) else len(iterable.elts)
        if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name):
            args = iterable.args
            if iterable.func.id == "range" and 1 <= len(args) <= 3 and not iterable.keywords:
                numbers = [a.value for a in args if isinstance(a, ast.Constant) and type(a.value) is int]
                return len(range(*numbers)) if len(numbers) == len(args) else None
            if iterable.func.id in ("enumerate", "reversed") and len(args) >= 1:
                return length(args[0])
            if iterable.func.id == "zip" and args:
                lengths = [length(a) for a in args]
                return None if None in lengths else min(n for n in lengths if n is not None)
        return None

    counted: dict[int, int | None] = {}
    in_progress: set[int] = set()

    def runs(node: ast.AST) -> int | None:
        """How many times `node` runs: the product of the loops around it, times its function's runs."""
        key = id(node)
        if key in counted:
            return counted[key]
        if key in in_progress:
            return None  # recursion
        in_progress.add(key)
        total: int | None = 1
        child, parent = node, parents.get(key)
        while parent is not None and total is not None:
            factor: int | None = 1
            if isinstance(parent, (ast.For, ast.AsyncFor)) and child in parent.body:
                factor = length(parent.iter)
            elif isinstance(parent, ast.While) and child in parent.body:
                factor = None
            elif isinstance(parent, _COMPREHENSIONS) and child is not None and child not in parent.generators:
                factor = 1
                for generator in parent.generators:
                    n = None if generator.ifs else length(generator.iter)
                    factor = None if n is None or factor is None else factor * n
            elif isinstance(parent, _FUNCTIONS):
                calls_of = graph.sites(parent)
                if calls_of:
                    counts = [runs(c) for c in calls_of]
                    factor = None if None in counts else sum(n for n in counts if n is not None)
                total = None if factor is None else total * factor
                break  # its calls' own loops are counted in `runs(call)`
            total = None if factor is None else total * factor
            child, parent = parent, parents.get(id(parent))
        in_progress.discard(key)
        counted[key] = total
        return total

    return {id(call): runs(call) for call in graph.every_call}


def run_order(trees: list[ast.Module]) -> dict[int, tuple[int, ...]]:
    """A key to sort the code's calls by the order they run in when the code runs top to bottom, by ``id`` of the
    call node. A call in a function the code calls by name (a method it calls on an object, a class's ``__init__``
    where the class is called) runs where that function is first called, not where it is written: a GAN that
    writes ``build_generator`` first and calls ``self.discriminator = self.build_discriminator()`` first builds the
    discriminator's Dense layers first, and Keras numbers them first (``dense``, ``dense_1``). A call in a function
    the code does not call keeps its place in the source."""
    graph = _CallGraph(trees)
    keys: dict[int, tuple[int, ...]] = {}
    in_progress: set[int] = set()

    def key(call: ast.Call) -> tuple[int, ...]:
        found = keys.get(id(call))
        if found is not None:
            return found
        own = (call.lineno, call.col_offset)
        function = graph.parents.get(id(call))
        while function is not None and not isinstance(function, _FUNCTIONS):
            function = graph.parents.get(id(function))
        result: tuple[int, ...] = (graph.tree_of.get(id(call), 0), *own)
        if function is not None:
            in_progress.add(id(call))
            sites = [key(site) for site in graph.sites(function) if id(site) not in in_progress]
            in_progress.discard(id(call))
            if sites:
                result = (*min(sites), *own)
        keys[id(call)] = result
        return result

    return {id(call): key(call) for call in graph.every_call}


def nth_built(candidates: list[Any], times: dict[int, int | None], index: int) -> Any:
    """Of the calls that build a class's unnamed layers, in the order they run (`run_order`), the one that built
    its `index`-th (0-based: ``dense_2`` is index 2), counting each call as often as it runs (`times_run`). None
    when a call before it runs an unknown number of times (unless it is the last: the rest are its own), or when the
    code builds fewer (others were built elsewhere)."""
    built = 0
    for position, call in enumerate(candidates):
        count = times.get(id(call), 1)
        if count is None:
            return call if position == len(candidates) - 1 else None
        built += count
        if index < built:
            return call
    return None


@dataclass(frozen=True)
class LayerSite:
    line: int
    what: str  # "the line that builds its Dense layer"
    file: str = ""  # the file the line is in


@dataclass(frozen=True)
class _Call:
    name: str  # the called name: ``Dense`` for ``layers.Dense(...)``
    line: int
    # Every keyword, with its value when a string is written (``name="rate"``, ``activation="exponential"``), else
    # "" (``activation=act``: given, but by a name).
    keywords: tuple[tuple[str, str], ...]
    times: int | None  # `times_run`
    owner: str = (
        ""  # what the name is called on: ``ops`` for ``ops.log(x)``, ``tf.math`` for ``tf.math.log(x)``
    )


@lru_cache(maxsize=32)
def _calls(path: str, mtime_key: float) -> tuple[_Call, ...]:
    """Every call in the file with a plain name, in the order they run (`run_order`)."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        tree = ast.parse(handle.read())
    times = times_run([tree])
    order = run_order([tree])
    out = []
    for node in sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call)), key=lambda n: order[id(n)]):
        func = node.func
        name = (
            func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        )
        if name is None:
            continue
        keywords = tuple(
            (
                k.arg,
                k.value.value if isinstance(k.value, ast.Constant) and isinstance(k.value.value, str) else "",
            )
            for k in node.keywords
            if k.arg
        )
        owner = ast.unparse(func.value) if isinstance(func, ast.Attribute) else ""
        out.append(_Call(name, node.lineno, keywords, times.get(id(node), 1), owner))
    # ``(inputs - ops.mean(inputs)) / ops.std(inputs)`` between a functional model's layers: the operator is a
    # Keras operation of no layer (``functional_1/truediv``), as ``ops.divide`` is; only next to a keras.ops call,
    # which is what makes the operands Keras tensors (TensorFlow's functions refuse them in Keras 3).
    for binop in ast.walk(tree):
        if isinstance(binop, ast.BinOp) and isinstance(binop.op, ast.Div) and _applies_keras_ops(binop):
            out.append(_Call("/", binop.lineno, (), times.get(id(binop), 1), "ops"))
    return tuple(out)


def _applies_keras_ops(node: ast.AST) -> bool:
    return any(
        isinstance(c, ast.Call)
        and isinstance(c.func, ast.Attribute)
        and re.fullmatch(r"(?:keras\.)?ops", ast.unparse(c.func.value)) is not None
        for c in ast.walk(node)
    )


def layer_site(op_name: str, op_type: str, path: str) -> LayerSite | None:
    """Where the user's code builds the layer that made the op ``op_name``: the training call's file, else a module
    beside it that the file imports (a research repo's ``models.py`` beside its ``train.py``)."""
    scopes = op_name.split("/")[:-1]
    if scopes and scopes[0] in ("compile_loss", "compile_metrics"):
        # A built-in loss's op (mse's Square overflowing in a divergence) is a symptom at the loss, and the fit
        # line says which fit of a program in phases it was: that stays marked.
        return None
    for file in [path, *_local_modules(path)]:
        try:
            if not file.endswith(".py") or not os.path.isfile(file):
                continue
            calls = _calls(file, os.path.getmtime(file))
        except (OSError, SyntaxError, ValueError):
            continue
        found = _site_in(calls, scopes, op_type)
        if found is not None:
            return LayerSite(found[0].line, found[1], file)
    return None


def _site_in(calls: tuple[_Call, ...], scopes: list[str], op_type: str) -> tuple[_Call, str] | None:
    """(the call, what it is) in one file's calls, or None."""
    for index in reversed(range(1, len(scopes))):  # innermost layer first; the first scope is the model
        names = layer_names(scopes, index)
        for name in names:
            named = [c for c in calls if ("name", name) in c.keywords]
            if len(named) == 1:
                return named[0], _builds(named[0])
            if named:
                break
        found = _by_class(calls, names[0], op_type)
        if found is not None:
            return found, _builds(found)
    if len(scopes) == 1:
        # No layer around the op, only the model: an op a functional model applies to its tensors itself
        # (``h = ops.log(inputs)`` between layers, a Keras operation of no layer).
        applied = _op_call(calls, op_type)
        if applied is not None:
            applies = "division (/)" if applied.name == "/" else f"{applied.owner}.{applied.name}"
            return applied, f"the line that applies its {applies}"
    return None


def _local_modules(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return []
    return sibling_modules(tree, os.path.dirname(path))


def sibling_modules(tree: ast.AST, folder: str) -> list[str]:
    """The .py files of the user's project that the code imports (``import nets``, ``from models.nets import
    build``, ``from .model import Net``), in the order it names them: a script's own modules beside it, or one
    folder up (``scripts/train.py`` that puts the repository root on sys.path and imports ``lib.models``; a
    package's ``train.py`` run with ``python -m pkg.train`` importing ``pkg.model``)."""
    candidates: list[str] = []
    parent = os.path.dirname(folder.rstrip(os.sep)) or folder
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
            roots = [folder, parent]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names, roots = [node.module], [folder, parent]
        elif isinstance(node, ast.ImportFrom) and node.level:
            base = folder
            for _ in range(node.level - 1):
                base = os.path.dirname(base.rstrip(os.sep)) or base
            # ``from .model import Net``: the module; ``from . import model``: each name a module of the package.
            names = [node.module] if node.module else [alias.name for alias in node.names]
            roots = [base]
        else:
            continue
        for name in names:
            for root in roots:
                path = os.path.join(root, *name.split(".")) + ".py"
                if os.path.isfile(path):
                    candidates.append(path)
                    break
    return list(dict.fromkeys(candidates))


# Op type -> the functions of keras.ops / tf.math that make it.
_OP_FUNCTIONS = {
    "Log": ("log",),
    "Log1p": ("log1p",),
    "Exp": ("exp",),
    "Sqrt": ("sqrt",),
    "Rsqrt": ("rsqrt",),
    "RealDiv": ("divide", "true_divide", "truediv", "/"),
    "Div": ("divide", "true_divide", "truediv", "/"),
    "Pow": ("power", "pow"),
    "Reciprocal": ("reciprocal",),
    "Acos": ("arccos", "acos"),
    "Asin": ("arcsin", "asin"),
    "Atanh": ("arctanh", "atanh"),
    "Tan": ("tan",),
    "Lgamma": ("lgamma",),
    "Digamma": ("digamma",),
    "Softplus": ("softplus",),
    "Xlogy": ("xlogy",),
}
# What those functions are called on: keras.ops (``ops``, ``keras.ops``), TensorFlow (``tf``, ``tf.math``).
_OP_OWNERS = re.compile(r"^(?:(?:keras\.)?ops|tf|tf\.math|tf\.nn)$")


def _op_call(calls: tuple[_Call, ...], op_type: str) -> _Call | None:
    """The one call in the file of a keras.ops / tf.math function that makes ops of `op_type`, else None. (Of two,
    TensorFlow's numbering, ``Log`` and ``Log_1``, follows the order the model applies them, not the source's: two
    inputs each logged were named the other way round.)"""
    names = _OP_FUNCTIONS.get(op_type, ())
    found = [c for c in calls if c.name in names and _OP_OWNERS.match(c.owner)]
    return found[0] if len(found) == 1 else None


def _builds(call: _Call) -> str:
    return f"the line that builds its {call.name} layer"


def _by_class(calls: tuple[_Call, ...], auto_name: str, op_type: str) -> _Call | None:
    """The call that built the layer of automatic name `auto_name` (``dense_2``: the third unnamed Dense): the one
    call of its class; else the one with the op's activation written in; else the call that built the class's
    layer of that number, counting a call in a loop once per turn (`nth_built`), when it may compute the op; else
    the one call whose activation is given by a name (``activation=act`` in a loop over settings)."""
    base, number = auto_name_parts(auto_name)
    kind = base.replace("_", "").lower()
    of_class = [c for c in calls if c.name.lower() == kind and c.name[:1].isupper()]
    if len(of_class) <= 1:
        return of_class[0] if of_class else None
    activation = _ACTIVATIONS.get(op_type)
    written = [c for c in of_class if activation is not None and ("activation", activation) in c.keywords]
    if len(written) == 1:
        return written[0]
    by_name = [c for c in of_class if activation is not None and ("activation", "") in c.keywords]
    unnamed = [c for c in of_class if not any(key == "name" for key, _ in c.keywords)]
    times = {id(c): c.times for c in unnamed}
    numbered = nth_built(unnamed, times, number)
    if numbered is not None and (activation is None or numbered in written or numbered in by_name):
        return numbered
    if activation is not None and len(written) + len(by_name) == 1:
        return (written + by_name)[0]
    return None
