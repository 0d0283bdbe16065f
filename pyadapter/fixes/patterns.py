"""The known NaN patterns and their rewrites: log of 0, x / 0, sqrt/pow of a negative or of 0 (backward), exp
overflow in a hand-written softmax, and a NaN hidden in one branch of ``tf.where``.

Each fixer rewrites only the marked expression (an argument, an operand or one call) and leaves the rest of the
line as it was; a line where the pattern does not apply gets no fix.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass

from pyadapter.fixes.model import QuickFix, TextEdit, epsilon, format_epsilon
from pyadapter.fixes.source import LineSource, Namespace, dotted_name, last_name

# Op type (as the finding names it) -> the family of user-level expressions that make it.
OP_FAMILIES = {
    "Log": "log",
    "Log1p": "log1p",
    "Sqrt": "sqrt",
    "SqrtGrad": "sqrt",
    "Rsqrt": "rsqrt",
    "RsqrtGrad": "rsqrt",
    "Pow": "pow",
    "RealDiv": "div",
    "Div": "div",
    "TrueDiv": "div",
    "Exp": "exp",
}
_CALL_NAMES = {
    "log": {"log"},
    "log1p": {"log1p"},
    "sqrt": {"sqrt"},
    "rsqrt": {"rsqrt"},
    "pow": {"pow", "power"},
    "div": {"divide", "truediv", "true_divide", "div", "realdiv"},
    "exp": {"exp"},
}
# Only names that say "probability": clipping at 1.0 would silently change any other quantity.
_PROBABILITY_HINT = re.compile(r"prob|softmax|sigmoid|likelihood|^p$|^p_|_p$", re.IGNORECASE)
# Expressions that need no parentheses as an operand of + or - (calls, names, arithmetic of equal/higher rank).
_ATOMS = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant)
_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.MatMult)


@dataclass
class Site:
    """One expression on the line that makes the finding's op: the node to rewrite and its dangerous operand."""

    node: ast.AST  # the call or binary operation
    operand: ast.AST  # the argument that must be kept away from the bad values (x of log(x), b of a / b)
    namespace: Namespace | None
    other: ast.AST | None = None  # a of a / b; the exponent of pow


def family_of(op_type: str, forward_op: str | None = None) -> str | None:
    """The expression family of an op type; a gradient op without its own family uses its forward op's."""
    family = OP_FAMILIES.get(op_type)
    if family is None and forward_op:
        forward_type = re.sub(r"_\d+$", "", forward_op.rsplit("/", 1)[-1])
        family = OP_FAMILIES.get(forward_type)
    return family


def find_sites(src: LineSource, family: str) -> list[Site]:
    """Every expression of the family on the line, left to right."""
    sites: list[Site] = []
    for node in src.nodes:
        if family == "sqrt" and isinstance(node, ast.Call) and _euclidean_norm(src, node):
            sites.append(Site(node, node.args[0], src.namespace_of(node)))
        elif isinstance(node, ast.Call) and last_name(node) in _CALL_NAMES[family]:
            namespace = src.namespace_of(node)
            if namespace is None or not node.args:
                continue
            if family == "div":
                if len(node.args) >= 2:
                    sites.append(Site(node, node.args[1], namespace, other=node.args[0]))
            elif family == "pow":
                if len(node.args) >= 2 and _fractional(node.args[1]):
                    sites.append(Site(node, node.args[0], namespace, other=node.args[1]))
            else:
                sites.append(Site(node, node.args[0], namespace))
        elif isinstance(node, ast.BinOp):
            if family == "div" and isinstance(node.op, ast.Div):
                sites.append(Site(node, node.right, src.default_namespace(), other=node.left))
            elif family == "pow" and isinstance(node.op, ast.Pow) and _fractional(node.right):
                sites.append(Site(node, node.left, src.default_namespace(), other=node.right))
    sites = [s for s in sites if src.span(s.node) is not None and src.span(s.operand) is not None]
    return sorted(sites, key=lambda s: src.span(s.node) or (0, 0))


def _euclidean_norm(src: LineSource, call: ast.Call) -> bool:
    """tf.norm(x[, axis=..., keepdims=...]): a sqrt inside, whose gradient at a zero vector is NaN."""
    namespace = src.namespace_of(call)
    return (
        namespace is not None
        and namespace.kind == "tf"
        and last_name(call) == "norm"
        and len(call.args) == 1
        and all(k.arg in ("axis", "keepdims") for k in call.keywords)
    )


def _norm_fixes(src: LineSource, site: Site, dtype: str | None, backward: bool) -> list[QuickFix]:
    ns = site.namespace
    assert ns is not None and isinstance(site.node, ast.Call)
    x = src.segment(site.operand)
    keywords = "".join(f", {src.segment(k)}" for k in site.node.keywords)
    eps = format_epsilon(epsilon(dtype, additive=True))
    p = ns.prefix
    rewritten = f"{p}.sqrt({p}.reduce_sum({p}.square({x}){keywords}) + {eps})"
    return [
        QuickFix(
            f"Write the norm as sqrt(sum({_short(x, 20)}²) + {eps}): its gradient at a zero vector is NaN",
            [_replace(src, site.node, rewritten)],
            preferred=True,
        )
    ]


def _fractional(exponent: ast.AST) -> bool:
    """An exponent that can make NaN of a negative base: anything but an integer literal."""
    value = (
        exponent.operand
        if isinstance(exponent, ast.UnaryOp) and isinstance(exponent.op, ast.USub)
        else exponent
    )
    return not (isinstance(value, ast.Constant) and isinstance(value.value, int))


def _plus(text: str, node: ast.AST, addend: str, sign: str = "+") -> str:
    """``text + addend`` with parentheses around text only where precedence needs them."""
    plain = (
        isinstance(node, _ATOMS)
        or (isinstance(node, ast.BinOp) and isinstance(node.op, _ARITHMETIC))
        or isinstance(node, ast.UnaryOp)
        and isinstance(node.op, (ast.USub, ast.UAdd))
    )
    return f"{text if plain else f'({text})'} {sign} {addend}"


def _replace(src: LineSource, node: ast.AST, new_text: str) -> TextEdit:
    span = src.span(node)
    assert span is not None  # sites are filtered to single-line nodes
    return TextEdit(src.line, span[0], span[1], new_text)


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- one fixer per family: (line, site, dtype, backward) -> fixes ------------------------------------------------


def _log_fixes(src: LineSource, site: Site, dtype: str | None, backward: bool) -> list[QuickFix]:
    x = src.segment(site.operand)
    eps = format_epsilon(epsilon(dtype))
    fixes = []
    ns = site.namespace
    assert ns is not None
    if _is_probability(site.operand, x):
        high = "1.0"
        fixes.append(
            QuickFix(
                f"Clip {_short(x)} to [{eps}, {high}] before the log",
                [_replace(src, site.operand, ns.clip(x, eps, high))],
            )
        )
    fixes.append(
        QuickFix(
            f"Clamp {_short(x)} at {eps} before the log: {ns.maximum('…', eps)}",
            [_replace(src, site.operand, ns.maximum(x, eps))],
        )
    )
    add_eps = format_epsilon(epsilon(dtype, additive=True))
    fixes.append(
        QuickFix(
            f"Add {add_eps} inside the log: log({_short(x)} + {add_eps})",
            [_replace(src, site.operand, _plus(x, site.operand, add_eps))],
        )
    )
    fixes[0].preferred = True
    return fixes


def _is_probability(node: ast.AST, text: str) -> bool:
    if isinstance(node, ast.Call) and last_name(node) in ("softmax", "sigmoid", "log_softmax"):
        return last_name(node) != "log_softmax"
    names = [n.id for n in ast.walk(node) if isinstance(n, ast.Name)] + [
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
    ]
    return any(_PROBABILITY_HINT.search(name) for name in names) or bool(
        _PROBABILITY_HINT.search(text.strip())
    )


def _log1p_fixes(src: LineSource, site: Site, dtype: str | None, backward: bool) -> list[QuickFix]:
    x = src.segment(site.operand)
    eps = format_epsilon(epsilon(dtype, additive=True))
    assert site.namespace is not None
    bound = f"-1.0 + {eps}"
    return [
        QuickFix(
            f"Clamp {_short(x)} above -1 before log1p",
            [_replace(src, site.operand, site.namespace.maximum(x, bound))],
            preferred=True,
        )
    ]


def _root_fixes(src: LineSource, site: Site, dtype: str | None, backward: bool) -> list[QuickFix]:
    """sqrt / rsqrt / pow: clamp the base at a positive epsilon (clamping at 0 leaves sqrt's gradient inf)."""
    ns = site.namespace
    if ns is None:
        return []
    x = src.segment(site.operand)
    eps = format_epsilon(epsilon(dtype))
    what = (
        "the base"
        if not isinstance(site.node, ast.Call) or last_name(site.node) in _CALL_NAMES["pow"]
        else "the square root's argument"
    )
    why = " (the gradient at 0 is inf)" if backward else ""
    fixes = [
        QuickFix(
            f"Clamp {what} {_short(x)} at {eps}{why}",
            [_replace(src, site.operand, ns.maximum(x, eps))],
            preferred=True,
        )
    ]
    if backward:
        add_eps = format_epsilon(epsilon(dtype, additive=True))
        fixes.append(
            QuickFix(
                f"Add {add_eps} to {what} {_short(x)}",
                [_replace(src, site.operand, _plus(x, site.operand, add_eps))],
            )
        )
    return fixes


def _div_fixes(src: LineSource, site: Site, dtype: str | None, backward: bool) -> list[QuickFix]:
    assert site.other is not None
    a, b = src.segment(site.other), src.segment(site.operand)
    fixes = []
    if site.namespace is not None and (safe := site.namespace.divide_no_nan(a, b)) is not None:
        fixes.append(
            QuickFix(f"Divide with divide_no_nan: 0 where {_short(b)} is 0", [_replace(src, site.node, safe)])
        )
    eps = format_epsilon(epsilon(dtype, additive=True))
    denominator = _plus(b, site.operand, eps)
    if isinstance(site.node, ast.BinOp) and not _parenthesized(src, site.operand):
        denominator = f"({denominator})"
    fixes.append(
        QuickFix(f"Add {eps} to the denominator {_short(b)}", [_replace(src, site.operand, denominator)])
    )
    fixes[0].preferred = True
    return fixes


def _parenthesized(src: LineSource, node: ast.AST) -> bool:
    """The right operand of a / is written in parentheses already: (n - 1) keeps them, the edit goes inside."""
    span = src.span(node)
    return (
        span is not None
        and span[0] > 0
        and src.text[span[0] - 1] == "("
        and src.text[span[1] : span[1] + 1] == ")"
    )


def _exp_fixes(src: LineSource, site: Site, dtype: str | None, backward: bool) -> list[QuickFix]:
    """exp inside a hand-written softmax (``e = exp(z)`` ... ``e / reduce_sum(e)``): subtract the max, or softmax."""
    softmax = _softmax_division(src, site)
    ns = site.namespace
    if softmax is None or ns is None:
        return []
    division, axis = softmax
    x = src.segment(site.operand)
    shifted = _plus(x, site.operand, ns.reduce_max(x, axis), sign="-")
    fixes = [
        QuickFix(
            f"Subtract the max of {_short(x)} before exp (a stable softmax)",
            [_replace(src, site.operand, shifted)],
            preferred=True,
        )
    ]
    division_line = getattr(division, "lineno", 0)
    built = ns.softmax(x, axis)
    if (
        built is not None
        and getattr(division, "end_lineno", 0) == division_line
        and division_line != src.line
    ):
        assert isinstance(division, ast.BinOp) and isinstance(division.left, ast.Name)
        fixes.append(
            QuickFix(
                f"Use {built.split('(')[0]} instead of the hand-written softmax",
                [
                    _replace(src, site.node, built),
                    _edit_other_line(src, division, division.left.id),
                ],
            )
        )
    return fixes


def _softmax_division(src: LineSource, site: Site) -> tuple[ast.BinOp, str] | None:
    """For ``name = exp(z)`` on the line: the ``name / reduce_sum(name, axis)`` after it, and the axis text."""
    scope = src.enclosing_scope()
    if scope is None:
        return None
    target = None
    for node in ast.walk(scope):
        if (
            isinstance(node, ast.Assign)
            and node.value is site.node
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            target = node.targets[0].id
    if target is None:
        return None
    for node in ast.walk(scope):
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Div)
            and isinstance(node.left, ast.Name)
            and node.left.id == target
            and isinstance(node.right, ast.Call)
            and last_name(node.right) in ("reduce_sum", "sum")
            and node.right.args
            and isinstance(node.right.args[0], ast.Name)
            and node.right.args[0].id == target
        ):
            axis_node = next((k.value for k in node.right.keywords if k.arg == "axis"), None)
            if axis_node is None and len(node.right.args) > 1:
                axis_node = node.right.args[1]
            return node, ast.unparse(axis_node) if axis_node is not None else "-1"
    return None


def _edit_other_line(src: LineSource, node: ast.AST, new_text: str) -> TextEdit:
    """An edit of a single-line node on another line of the parsed file."""
    place = src.place(node)
    assert place is not None
    return TextEdit(place[0], place[1], place[2], new_text)


def _where_fixes(src: LineSource, site: Site, dtype: str | None, backward: bool) -> list[QuickFix]:
    """The site sits in one branch of where(cond, a, b): feed it a safe value where that branch is not taken,
    so neither the hidden branch's forward values nor its gradient (0 * inf = NaN) are non-finite."""
    for node in src.nodes:
        if not (isinstance(node, ast.Call) and last_name(node) == "where" and len(node.args) == 3):
            continue
        ns = src.namespace_of(node)
        if ns is None:
            continue
        cond, taken, other = node.args
        for branch, in_taken in ((taken, True), (other, False)):
            if any(inner is site.operand for inner in ast.walk(branch)):
                x, c = src.segment(site.operand), src.segment(cond)
                if not c:
                    return []
                guarded = ns.where(c, x, ns.ones_like(x)) if in_taken else ns.where(c, ns.ones_like(x), x)
                return [
                    QuickFix(
                        f"Guard {_short(x)} with a second {ns.prefix}.where (no NaN in the hidden branch"
                        " or its gradient)",
                        [_replace(src, site.operand, guarded)],
                        preferred=True,
                    )
                ]
    return []


_FIXERS: dict[str, Callable[[LineSource, Site, str | None, bool], list[QuickFix]]] = {
    "log": _log_fixes,
    "log1p": _log1p_fixes,
    "sqrt": _root_fixes,
    "rsqrt": _root_fixes,
    "pow": _root_fixes,
    "div": _div_fixes,
    "exp": _exp_fixes,
}


def fixes_for(src: LineSource, family: str, dtype: str | None, backward: bool) -> list[QuickFix]:
    """Every fix for every site of the family on the line; a where-guard (when it applies) comes first."""
    sites = find_sites(src, family)
    out: list[QuickFix] = []
    for site in sites:
        if site.namespace is None and family != "div":
            continue
        if isinstance(site.node, ast.Call) and last_name(site.node) == "norm":
            site_fixes = _norm_fixes(src, site, dtype, backward)
        else:
            site_fixes = _FIXERS[family](src, site, dtype, backward)
        if family in ("log", "sqrt", "rsqrt", "pow", "div"):
            guard = _where_fixes(src, site, dtype, backward)
            if guard:
                for fix in site_fixes:
                    fix.preferred = False
                site_fixes = guard + site_fixes
        if len(sites) > 1:
            where = src.segment(site.node)
            for fix in site_fixes:
                fix.title += f" (in {_short(where)})"
                fix.preferred = False
        out.extend(site_fixes)
    return out


__all__ = ["OP_FAMILIES", "Site", "dotted_name", "family_of", "find_sites", "fixes_for"]
