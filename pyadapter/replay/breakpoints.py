"""Will a breakpoint on this line stop with real tensors? A source-only check for the debug flow.

Code inside a ``tf.function`` (and the Keras ``call``/``train_step`` methods and losses that ``fit`` traces, and
functions given to ``tf.data`` transformations) runs as a graph: Python executes it only while tracing, with
symbolic tensors, so a breakpoint there stops once (or never, once traced) and shows no values. Run eagerly
(``nanlens run --eager``, or a replay with ``--eager``) and it stops on every call with real tensors.

``breakpoint_advice(path, line)`` returns one sentence saying so when the line is in such code, else None. It
reads the source with ``ast`` only (no TensorFlow, no import of the user's code), so an editor can call it for
every breakpoint it sets.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

# Methods that Keras runs inside its compiled train/test/predict functions.
KERAS_TRACED_METHODS = frozenset({"call", "train_step", "test_step", "predict_step", "compute_loss"})
# tf.data transformations whose function argument runs as a graph (unless tf.data debug mode is on).
DATASET_METHODS = frozenset({"map", "filter", "flat_map", "interleave", "reduce", "scan"})


@dataclass(frozen=True)
class GraphCode:
    """The innermost function around a line that runs as a graph, and why."""

    function: str
    reason: str  # "tf.function", "keras", "tf.data"
    first_line: int
    last_line: int


def _is_tf_function_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Attribute):
        return target.attr == "function" and _dotted(target.value) in ("tf", "tensorflow")
    return isinstance(target, ast.Name) and target.id in ("tf_function", "function")


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _dataset_function_names(tree: ast.AST) -> set[str]:
    """Names of functions passed to ``ds.map(fn)`` and the like anywhere in the file."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in DATASET_METHODS
        ):
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                if isinstance(arg, ast.Name):
                    names.add(arg.id)
                elif isinstance(arg, ast.Attribute):
                    names.add(arg.attr)
    return names


def graph_code_at(source: str, line: int) -> GraphCode | None:
    """The innermost graph-running function containing `line` (1-based), or None."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    dataset_functions = _dataset_function_names(tree)
    found: GraphCode | None = None

    def visit(node: ast.AST, in_class: bool) -> None:
        nonlocal found
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                end = child.end_lineno or child.lineno
                start = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                if start <= line <= end:
                    reason = None
                    if any(_is_tf_function_decorator(d) for d in child.decorator_list):
                        reason = "tf.function"
                    elif in_class and child.name in KERAS_TRACED_METHODS:
                        reason = "keras"
                    elif child.name in dataset_functions:
                        reason = "tf.data"
                    if reason is not None:
                        found = GraphCode(child.name, reason, child.lineno, end)  # inner ones override
                visit(child, False)
            elif isinstance(child, ast.ClassDef):
                visit(child, True)
            else:
                visit(child, in_class)

    visit(tree, False)
    return found


def breakpoint_advice(path: str | Path, line: int, *, eager: bool = False) -> str | None:
    """One sentence for the user when a breakpoint at `path`:`line` may not stop with values, else None.

    `eager` says the session already runs functions eagerly (a replay with --eager, `nanlens run --eager`).
    """
    if eager:
        return None
    try:
        source = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    code = graph_code_at(source, line)
    if code is None:
        return None
    where = {
        "tf.function": f"inside the tf.function `{code.function}`",
        "keras": f"in `{code.function}`, which Keras compiles into a graph during fit",
        "tf.data": f"in `{code.function}`, which tf.data runs as a graph",
    }[code.reason]
    return (
        f"Line {line} is {where}: it runs as a graph, so a breakpoint there stops only while tracing, with "
        "symbolic tensors (or not at all). Debug with eager execution: `nanlens run --eager -- SCRIPT.py`, or "
        "replay a capture bundle eagerly."
    )
