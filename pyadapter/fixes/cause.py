"""Fixes that match a cause, on the line the cause says to change (pure text rewrites, no TensorFlow):

- divergence: lower the learning rate to a tenth (the number written on the optimizer / schedule line), add
  ``clipnorm=1.0`` to the optimizer call, or for ``compile(optimizer="adam")`` build the optimizer with a tenth of
  Keras's default rate;
- data: drop the rows holding NaN/Inf where a NumPy table is read (``x = x[np.isfinite(x).all(axis=1)]``), replace
  them (``np.nan_to_num``), ``.dropna()`` a pandas frame, or ``ds.filter(...)`` a ``tf.data`` CSV dataset;
- precision: keep the layer in float32 (``dtype="float32"`` on its construction).

Each is offered only when the line's own text has the shape it rewrites (a one-line call, an assignment to one
name, the imports it needs); otherwise nothing is offered.
"""

from __future__ import annotations

import ast

from pyadapter.capture.learning_rate import rate_to_try
from pyadapter.cause import change_line
from pyadapter.cause.model import Cause, format_number, positive_numbers
from pyadapter.fixes.model import QuickFix, TextEdit
from pyadapter.fixes.source import LineSource, dotted_name, last_name, read_line

# The optimizers whose learning rate a fix rewrites: the classifier's list, less the wrapper that holds none itself.
OPTIMIZERS = tuple(name for name in change_line.OPTIMIZERS if name != "LossScaleOptimizer")
SCHEDULES = change_line.SCHEDULES
CLIP_KEYWORDS = ("clipnorm", "global_clipnorm", "clipvalue")


def _keyword(node: ast.Call, name: str) -> ast.keyword | None:
    return next((k for k in node.keywords if k.arg == name), None)


def _number(node: ast.AST | None) -> float | None:
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float))
        and not isinstance(node.value, bool)
    ):
        return float(node.value)
    return None


def _calls_on_line(src: LineSource, names: tuple[str, ...]) -> list[ast.Call]:
    """Calls of those names that start on the line (they may go on over the next lines), left to right."""
    root = src.tree
    if root is None:
        found = [n for n in src.nodes if isinstance(n, ast.Call)]
    else:
        found = [n for n in ast.walk(root) if isinstance(n, ast.Call) and n.lineno == src.line]
    return sorted((n for n in found if last_name(n) in names), key=lambda n: n.col_offset)


def _insert_keyword(src: LineSource, call: ast.Call, text: str) -> TextEdit | None:
    """``text`` (``clipnorm=1.0``) added as the call's last argument, when the call ends on this line."""
    span = src.span(call)
    if span is None:
        return None
    inside = src.text[span[0] : span[1]]
    close = span[1] - 1
    if not inside.endswith(")"):
        return None
    body = inside[inside.index("(") + 1 : -1].rstrip() if "(" in inside else ""
    separator = "" if not body else (" " if body.endswith(",") else ", ")
    return TextEdit(src.line, close, close, separator + text)


def _searched_rate(cause: Cause) -> tuple[float, str] | None:
    """(the rate to write, why) from the guard's search over its window (``cause.evidence["window"]``): half the
    largest rate that kept the window finite, a tenth of it for a short window (`rate_to_try`)."""
    window = cause.evidence.get("window")
    if not isinstance(window, dict):
        return None
    largest, suggested, steps = (
        window.get("largest_finite_learning_rate"),
        window.get("suggested_learning_rate"),
        window.get("steps"),
    )
    numbers = positive_numbers(largest, suggested, steps)
    if numbers is None:
        return None
    largest_rate, suggested_rate, window_steps = numbers
    return (
        rate_to_try(largest_rate, suggested_rate, int(window_steps)),
        f"largest finite over the {int(window_steps)}-step window: {format_number(largest_rate)}",
    )


def learning_rate_on_line(source: str, line: int) -> float | None:
    """The learning rate written on 1-based `line` of `source` (an optimizer's or a schedule's), or None."""
    src = read_line(source, line)
    if src is not None:
        for call in _calls_on_line(src, OPTIMIZERS + SCHEDULES):
            name = last_name(call) or ""
            key = "initial_learning_rate" if name in SCHEDULES else "learning_rate"
            node = _keyword(call, key) or _keyword(call, "lr")
            rate = _number(node.value if node is not None else (call.args[0] if call.args else None))
            if rate is not None and rate > 0:
                return rate
    # No constructor: a config file's line (config.json's "learning_rate": 0.25) or a rate assigned in code
    # (model.optimizer.learning_rate.assign(0.15)).
    lines = source.splitlines()
    return change_line.rate_written_in_text(lines[line - 1]) if 0 < line <= len(lines) else None


def _no_rate_helped(cause: Cause) -> bool:
    """The guard's search tried lower rates and none kept its window finite: lowering the rate is no fix (unless
    the rate is far above its optimizer's usual one, which the window, started after its first updates, did not
    try from the start)."""
    window = cause.evidence.get("window")
    return (
        isinstance(window, dict)
        and window.get("lowest_learning_rate_tried") is not None
        and _usual_rate(cause) is None
    )


def _usual_rate(cause: Cause) -> tuple[float, str] | None:
    """(the optimizer's usual rate, why) when the cause says the rate is far above it."""
    usual = positive_numbers(cause.evidence.get("usual_learning_rate"))
    return (usual[0], "the optimizer's usual rate") if usual is not None else None


def divergence_fixes(src: LineSource, cause: Cause) -> list[QuickFix]:
    if _no_rate_helped(cause):
        return []
    fixes: list[QuickFix] = []
    searched = _searched_rate(cause) or _usual_rate(cause)
    for call in _calls_on_line(src, OPTIMIZERS + SCHEDULES):
        name = last_name(call) or ""
        key = "initial_learning_rate" if name in SCHEDULES else "learning_rate"
        node = _keyword(call, key) or _keyword(call, "lr")
        value_node = node.value if node is not None else (call.args[0] if call.args else None)
        rate = _number(value_node)
        span = src.span(value_node) if value_node is not None else None
        if rate is not None and span is not None and rate > 0:
            lower = format_number(rate / 10)
            why = f"a tenth of {format_number(rate)}"
            if searched is not None and searched[0] < rate:
                lower, why = format_number(searched[0]), searched[1]
            fixes.append(
                QuickFix(
                    f"lower the learning rate to {lower} ({why})",
                    [TextEdit(src.line, span[0], span[1], lower)],
                    preferred=True,
                )
            )
        if name in OPTIMIZERS and not any(_keyword(call, k) for k in CLIP_KEYWORDS):
            edit = _insert_keyword(src, call, "clipnorm=1.0")
            if edit is not None:
                fixes.append(QuickFix("clip the gradients: add clipnorm=1.0 to the optimizer", [edit]))
        if fixes:
            return fixes
    for value_node in (
        _rate_assignments_on_line(src) + _dict_rates_on_line(src) + _rate_constant_on_line(src, cause)
    ):
        rate = _number(value_node)
        span = src.span(value_node)
        if rate is not None and span is not None and rate > 0:
            lower, why = format_number(rate / 10), f"a tenth of {format_number(rate)}"
            if searched is not None and searched[0] < rate:
                lower, why = format_number(searched[0]), searched[1]
            return [
                QuickFix(
                    f"lower the learning rate to {lower} ({why})",
                    [TextEdit(src.line, span[0], span[1], lower)],
                    preferred=True,
                )
            ]
    for call in _calls_on_line(src, ("compile",)):
        node = _keyword(call, "optimizer")
        if node is None or not isinstance(node.value, ast.Constant) or not isinstance(node.value.value, str):
            continue
        lowered = node.value.value.lower()
        cls = next((o for o in OPTIMIZERS if o.lower() == lowered), None)
        prefix = _keras_prefix(src)
        span = src.span(node.value)
        if cls is None or prefix is None or span is None:
            continue
        default = change_line.DEFAULT_LEARNING_RATES.get(lowered, 0.001)
        lower, why = format_number(default / 10), "a tenth of its default"
        if searched is not None and searched[0] < default:
            lower, why = format_number(searched[0]), searched[1]
        fixes.append(
            QuickFix(
                f"build {cls} with learning rate {lower} ({why})",
                [TextEdit(src.line, span[0], span[1], f"{prefix}.optimizers.{cls}(learning_rate={lower})")],
                preferred=True,
            )
        )
    return fixes


def _rate_assignments_on_line(src: LineSource) -> list[ast.expr]:
    """The values the line sets a built optimizer's rate to (`change_line.rate_assignment`)."""
    nodes = (
        src.nodes
        if src.tree is None
        else [n for n in ast.walk(src.tree) if getattr(n, "lineno", None) == src.line]
    )
    found = [change_line.rate_assignment(node) for node in nodes]
    return [assignment[1] for assignment in found if assignment is not None]


def _rate_constant_on_line(src: LineSource, cause: Cause) -> list[ast.expr]:
    """The number of a ``LR = 1.5`` on the line when it is the rate the cause names (its change moved there from
    ``SGD(learning_rate=LR)``, `change_line.rate_constant_site`)."""
    rate = cause.evidence.get("learning_rate")
    if not isinstance(rate, (int, float)) or isinstance(rate, bool):
        return []
    nodes = (
        src.nodes
        if src.tree is None
        else [n for n in ast.walk(src.tree) if getattr(n, "lineno", None) == src.line]
    )
    return [
        node.value
        for node in nodes
        if isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and change_line.same_rate(_number(node.value), float(rate))
    ]


def _dict_rates_on_line(src: LineSource) -> list[ast.expr]:
    """The values written on the line under a rate key of a dict literal (``"main": {"lr": 1e-1, ...}``)."""
    nodes = src.nodes if src.tree is None else list(ast.walk(src.tree))
    return [
        value
        for node in nodes
        if isinstance(node, ast.Dict)
        for key, value in zip(node.keys, node.values, strict=True)
        if isinstance(key, ast.Constant)
        and key.value in change_line.RATE_KEYS
        and getattr(value, "lineno", None) == src.line
    ]


def _keras_prefix(src: LineSource) -> str | None:
    """How the file spells the keras module: ``keras`` or ``tf.keras`` (None when neither is imported)."""
    for prefix, namespace in src.aliases.items():
        if namespace.kind == "keras" and prefix.endswith(".ops"):
            return prefix[: -len(".ops")]
    tf = next((p for p, n in src.aliases.items() if n.kind == "tf"), None)
    return f"{tf}.keras" if tf else None


def _assigned_name(src: LineSource, call: ast.Call) -> str | None:
    """``name`` when the line is ``name = <call>`` (the call being the whole value)."""
    tree = src.tree
    if tree is None:
        return None
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and node.value is call
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.lineno == node.end_lineno == src.line
        ):
            return node.targets[0].id
    return None


def data_fixes(src: LineSource, cause: Cause) -> list[QuickFix]:
    fixes: list[QuickFix] = []
    indent = src.text[: len(src.text) - len(src.text.lstrip())]
    numpy = next((p for p, n in src.aliases.items() if n.kind == "numpy"), None)
    tf = next((p for p, n in src.aliases.items() if n.kind == "tf"), None)
    end = len(src.text)
    for call in _calls_on_line(src, ("genfromtxt", "loadtxt", "read_csv", "make_csv_dataset", "CsvDataset")):
        name = last_name(call)
        span = src.span(call)
        target = _assigned_name(src, call)
        if name in ("genfromtxt", "loadtxt") and numpy is not None and span is not None:
            if target is not None:
                fixes.append(
                    QuickFix(
                        "drop the rows holding NaN/Inf where the data is read",
                        [
                            TextEdit(
                                src.line,
                                end,
                                end,
                                f"\n{indent}{target} = {target}[{numpy}.isfinite({target})"
                                f".all(axis=1)]  # NaN Lens: drop rows holding NaN/Inf",
                            )
                        ],
                        preferred=True,
                    )
                )
            fixes.append(
                QuickFix(
                    f"replace NaN with 0 and Inf with the largest float ({numpy}.nan_to_num)",
                    [
                        TextEdit(src.line, span[0], span[0], f"{numpy}.nan_to_num("),
                        TextEdit(src.line, span[1], span[1], ")"),
                    ],
                )
            )
        elif name == "read_csv" and span is not None and (dotted_name(call.func) or "").count(".") == 1:
            fixes.append(
                QuickFix(
                    "drop the rows with missing values (.dropna())",
                    [TextEdit(src.line, span[1], span[1], ".dropna()")],
                    preferred=True,
                )
            )
        elif name in ("make_csv_dataset", "CsvDataset") and tf is not None and target is not None:
            check = (
                f"lambda *element: {tf}.reduce_all([{tf}.reduce_all({tf}.math.is_finite({tf}.cast(t, "
                f"{tf}.float32))) for t in {tf}.nest.flatten(element)])"
            )
            fixes.append(
                QuickFix(
                    "skip records holding NaN/Inf (ds.filter)",
                    [
                        TextEdit(
                            src.line,
                            end,
                            end,
                            f"\n{indent}{target} = {target}.filter({check})"
                            "  # NaN Lens: skip non-finite records",
                        )
                    ],
                    preferred=True,
                )
            )
    return fixes


def precision_fixes(src: LineSource, cause: Cause) -> list[QuickFix]:
    layer = (
        (cause.evidence.get("layer") or {}).get("class")
        if isinstance(cause.evidence.get("layer"), dict)
        else None
    )
    if not isinstance(layer, str):
        return []
    for call in _calls_on_line(src, (layer,)):
        dtype = _keyword(call, "dtype")
        if dtype is not None:
            span = src.span(dtype.value)
            if span is None or src.text[span[0] : span[1]] in ('"float32"', "'float32'"):
                continue
            return [
                QuickFix(
                    f"keep the {layer} layer in float32",
                    [TextEdit(src.line, span[0], span[1], '"float32"')],
                    preferred=True,
                )
            ]
        edit = _insert_keyword(src, call, 'dtype="float32"')
        if edit is not None:
            return [QuickFix(f'keep the {layer} layer in float32 (dtype="float32")', [edit], preferred=True)]
    return []


def cause_fixes(source: str, cause: Cause) -> list[QuickFix]:
    """The fixes for a cause on its change line of ``source`` (the file or cell holding that line)."""
    if cause.change is None:
        return []
    src = read_line(source, cause.change.line)
    if src is None:
        return []
    makers = {"divergence": divergence_fixes, "data": data_fixes, "precision": precision_fixes}
    maker = makers.get(cause.kind)
    fixes = maker(src, cause) if maker is not None else []
    return sorted(fixes, key=lambda f: not f.preferred)
