"""Unit tests of the quick-fix rewrites (pyadapter.fixes): each pattern on realistic lines, the rest of the line
kept, the epsilon following the dtype, and no fix where the pattern does not apply."""

from __future__ import annotations

import ast

import pytest

from pyadapter.findings import Finding, InputHealth, OpRef, TensorHealth
from pyadapter.fixes import QuickFix, TextEdit, apply_edits, epsilon, fixes_for_line, quick_fixes

HEADER = "import keras\nimport numpy as np\nimport tensorflow as tf\n\n\n"


def fixed_lines(
    body: str,
    line_in_body: int,
    op_type: str,
    dtype: str | None = "float32",
    forward_op: str | None = None,
    backward: bool = False,
) -> list[tuple[QuickFix, str]]:
    """(fix, the fixed line) for every fix offered; every fixed file still parses."""
    source = HEADER + body
    line = HEADER.count("\n") + line_in_body
    out = []
    for fix in fixes_for_line(source, line, op_type, dtype, forward_op, backward):
        fixed = apply_edits(source, fix.edits)
        ast.parse(fixed)
        out.append((fix, fixed.splitlines()[line - 1]))
    return out


def lines_of(body: str, line: int, op_type: str, **kw) -> list[str]:  # type: ignore[no-untyped-def]
    return [text for _, text in fixed_lines(body, line, op_type, **kw)]


def preferred(body: str, line: int, op_type: str, **kw) -> str:  # type: ignore[no-untyped-def]
    fixes = fixed_lines(body, line, op_type, **kw)
    assert fixes and fixes[0][0].preferred and sum(f.preferred for f, _ in fixes) == 1
    return fixes[0][1]


# --- log ----------------------------------------------------------------------------------------------------------

LOG_BODY = "def cross_entropy(y_true, probs):\n    log_probs = tf.math.log(probs)  # BUG: log(0)\n    return log_probs\n"


def test_log_of_probabilities_is_clipped_and_the_rest_of_the_line_is_kept() -> None:
    assert (
        preferred(LOG_BODY, 2, "Log")
        == "    log_probs = tf.math.log(tf.clip_by_value(probs, 1e-7, 1.0))  # BUG: log(0)"
    )
    assert lines_of(LOG_BODY, 2, "Log")[1:] == [
        "    log_probs = tf.math.log(tf.maximum(probs, 1e-7))  # BUG: log(0)",
        "    log_probs = tf.math.log(probs + 1e-7)  # BUG: log(0)",
    ]


def test_log_of_a_non_probability_is_clamped_not_clipped_to_one() -> None:
    body = "def f(counts):\n    return tf.math.log(counts)\n"
    assert preferred(body, 2, "Log") == "    return tf.math.log(tf.maximum(counts, 1e-7))"
    assert not any("clip_by_value" in line for line in lines_of(body, 2, "Log"))


def test_log_argument_of_lower_precedence_is_parenthesized_for_the_epsilon() -> None:
    body = "def f(a, b):\n    return tf.math.log(a if b else 1.0 - a)\n"
    assert "tf.math.log((a if b else 1.0 - a) + 1e-7)" in lines_of(body, 2, "Log")[-1]
    body = "def f(p):\n    return tf.math.log(1.0 - p)\n"
    assert lines_of(body, 2, "Log")[-1] == "    return tf.math.log(1.0 - p + 1e-7)"


def test_log_in_keras_ops_and_numpy_style_spellings_use_their_own_namespace() -> None:
    body = "def f(p):\n    return keras.ops.log(keras.ops.sigmoid(p))\n"
    assert (
        preferred(body, 2, "Log")
        == "    return keras.ops.log(keras.ops.clip(keras.ops.sigmoid(p), 1e-7, 1.0))"
    )
    body = "def f(x):\n    return tf.log(x)\n"
    assert preferred(body, 2, "Log") == "    return tf.log(tf.maximum(x, 1e-7))"


def test_log1p_is_clamped_above_minus_one() -> None:
    body = "def f(x):\n    return tf.math.log1p(x)\n"
    assert preferred(body, 2, "Log1p") == "    return tf.math.log1p(tf.maximum(x, -1.0 + 1e-7))"


# --- epsilon by dtype ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dtype", "clamp", "added"),
    [
        ("float16", 1e-4, 1e-3),
        ("bfloat16", 1e-4, 1e-3),
        ("float32", 1e-7, 1e-7),
        ("float64", 1e-12, 1e-12),
        (None, 1e-7, 1e-7),
    ],
)
def test_epsilon_respects_the_dtype(dtype: str | None, clamp: float, added: float) -> None:
    assert epsilon(dtype) == clamp and epsilon(dtype, additive=True) == added


def test_float16_and_float64_fixes_write_their_epsilon() -> None:
    assert preferred(LOG_BODY, 2, "Log", dtype="float16").endswith(
        "tf.clip_by_value(probs, 1e-4, 1.0))  # BUG: log(0)"
    )
    assert (
        lines_of(LOG_BODY, 2, "Log", dtype="float16")[-1]
        == "    log_probs = tf.math.log(probs + 1e-3)  # BUG: log(0)"
    )
    assert "1e-12" in preferred(LOG_BODY, 2, "Log", dtype="float64")


def test_dtype_comes_from_the_findings_health() -> None:
    source = HEADER + LOG_BODY
    line = HEADER.count("\n") + 2
    finding = Finding(
        file="/x.py",
        line=line,
        role="origin",
        op=OpRef("loss/Log", "Log"),
        health=TensorHealth(dtype="float16", size=4, neg_inf=1),
    )
    assert "1e-4" in apply_edits(source, quick_fixes(source, finding)[0].edits).splitlines()[line - 1]
    finding.health = None
    finding.inputs = [InputHealth("probs:0", TensorHealth(dtype="float64", size=4, zero=1))]
    assert "1e-12" in apply_edits(source, quick_fixes(source, finding)[0].edits).splitlines()[line - 1]
    finding.role = "propagated"
    assert quick_fixes(source, finding) == []


# --- division -------------------------------------------------------------------------------------------------------


def test_division_by_zero_std_uses_divide_no_nan_or_an_epsilon_in_the_denominator() -> None:
    body = "def f(y, mean, std):\n    z = (y - mean) / std  # 0/0\n    return z\n"
    assert lines_of(body, 2, "RealDiv") == [
        "    z = tf.math.divide_no_nan(y - mean, std)  # 0/0",
        "    z = (y - mean) / (std + 1e-7)  # 0/0",
    ]


def test_a_parenthesized_denominator_gets_the_epsilon_inside_its_parentheses() -> None:
    body = "def f(s, n):\n    return tf.reduce_sum(s, axis=0) / (n - 1.0)\n"
    assert lines_of(body, 2, "RealDiv")[-1] == "    return tf.reduce_sum(s, axis=0) / (n - 1.0 + 1e-7)"


def test_tf_divide_call_and_two_divisions_on_a_line_name_each() -> None:
    body = "def f(a, b):\n    return tf.math.divide(a, b)\n"
    assert preferred(body, 2, "RealDiv") == "    return tf.math.divide_no_nan(a, b)"
    body = "def f(a, b, c, d):\n    return a / b + c / d\n"
    fixes = fixed_lines(body, 2, "RealDiv")
    assert len(fixes) == 4 and not any(f.preferred for f, _ in fixes)
    assert fixes[0][0].title.endswith("(in a / b)") and fixes[2][0].title.endswith("(in c / d)")
    assert fixes[1][1] == "    return a / (b + 1e-7) + c / d"


# --- sqrt, rsqrt, pow -----------------------------------------------------------------------------------------------


def test_sqrt_of_a_negative_mean_is_clamped_at_a_positive_epsilon() -> None:
    body = "def rmse(t, p):\n    return tf.sqrt(tf.reduce_mean(t - p))  # not squared\n"
    assert lines_of(body, 2, "Sqrt") == [
        "    return tf.sqrt(tf.maximum(tf.reduce_mean(t - p), 1e-7))  # not squared"
    ]


def test_backward_only_sqrt_nan_clamps_above_zero_and_offers_an_added_epsilon() -> None:
    body = "def f(diff):\n    d = tf.math.sqrt(tf.reduce_sum(tf.square(diff), axis=-1))\n    return d\n"
    fixes = fixed_lines(body, 2, "SqrtGrad", forward_op="loss/Sqrt", backward=True)
    assert [line for _, line in fixes] == [
        "    d = tf.math.sqrt(tf.maximum(tf.reduce_sum(tf.square(diff), axis=-1), 1e-7))",
        "    d = tf.math.sqrt(tf.reduce_sum(tf.square(diff), axis=-1) + 1e-7)",
    ]
    assert "gradient at 0 is inf" in fixes[0][0].title
    assert ", 0.0)" not in fixes[0][1]  # clamping at 0 would keep the inf gradient
    # A gradient op without a family of its own is mapped through its forward op.
    assert lines_of(body, 2, "Mul", forward_op="gradient_tape/loss/Sqrt_1")[0] == fixes[0][1]


def test_rsqrt_and_keras_sqrt_are_clamped() -> None:
    body = "def f(h):\n    return h * tf.math.rsqrt(tf.reduce_sum(tf.square(h)))\n"
    assert (
        preferred(body, 2, "Rsqrt")
        == "    return h * tf.math.rsqrt(tf.maximum(tf.reduce_sum(tf.square(h)), 1e-7))"
    )
    body = "def f(x):\n    return keras.ops.sqrt(x)\n"
    assert preferred(body, 2, "Sqrt") == "    return keras.ops.sqrt(keras.ops.maximum(x, 1e-7))"


def test_fractional_pow_call_and_operator_clamp_the_base_but_integer_powers_are_left_alone() -> None:
    body = "def f(x):\n    return tf.pow(x, 0.75)\n"
    assert preferred(body, 2, "Pow") == "    return tf.pow(tf.maximum(x, 1e-7), 0.75)"
    body = "def f(x):\n    return (x - 1.0) ** 0.5\n"
    assert preferred(body, 2, "Pow") == "    return (tf.maximum(x - 1.0, 1e-7)) ** 0.5"
    assert lines_of("def f(x):\n    return x ** 2\n", 2, "Pow") == []
    assert lines_of("def f(x):\n    return tf.pow(x, 3)\n", 2, "Pow") == []


# --- exp in a hand-written softmax ----------------------------------------------------------------------------------

SOFTMAX = (
    "class NaiveSoftmax(keras.layers.Layer):\n"
    "    def call(self, logits):\n"
    "        exp = tf.exp(logits)  # overflow\n"
    "        return exp / tf.reduce_sum(exp, axis=1, keepdims=True)\n"
)


def test_exp_in_a_hand_written_softmax_subtracts_the_max_or_uses_tf_softmax() -> None:
    fixes = fixed_lines(SOFTMAX, 3, "Exp")
    assert fixes[0][0].preferred
    assert (
        fixes[0][1]
        == "        exp = tf.exp(logits - tf.reduce_max(logits, axis=1, keepdims=True))  # overflow"
    )
    softmax = fixes[1][0]
    assert "tf.nn.softmax" in softmax.title and len(softmax.edits) == 2
    fixed = apply_edits(HEADER + SOFTMAX, softmax.edits).splitlines()
    line = HEADER.count("\n") + 3
    assert fixed[line - 1] == "        exp = tf.nn.softmax(logits, axis=1)  # overflow"
    assert fixed[line] == "        return exp"


def test_exp_outside_a_softmax_gets_no_fix() -> None:
    assert lines_of("def f(rate, t):\n    return tf.exp(-rate * t)\n", 2, "Exp") == []


# --- a NaN hidden in one branch of tf.where -------------------------------------------------------------------------

WHERE = "def f(p):\n    plogp = tf.where(p > 0.0, p * tf.math.log(p), tf.zeros_like(p))  # hidden NaN\n    return plogp\n"


def test_nan_in_the_taken_branch_of_where_gets_the_double_where_first() -> None:
    fixes = fixed_lines(WHERE, 2, "Log")
    assert fixes[0][0].preferred and "second tf.where" in fixes[0][0].title
    assert fixes[0][1] == (
        "    plogp = tf.where(p > 0.0, p * tf.math.log(tf.where(p > 0.0, p, tf.ones_like(p))), "
        "tf.zeros_like(p))  # hidden NaN"
    )
    assert len(fixes) > 1 and not any(f.preferred for f, _ in fixes[1:])  # the plain log fixes follow


def test_nan_in_the_other_branch_and_a_division_in_where() -> None:
    body = "def f(n, s):\n    return tf.where(n == 0, tf.zeros_like(s), s / n)\n"
    assert (
        preferred(body, 2, "RealDiv")
        == "    return tf.where(n == 0, tf.zeros_like(s), s / tf.where(n == 0, tf.ones_like(n), n))"
    )


# --- where nothing applies ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "line", "op_type"),
    [
        ("def f(x):\n    return tf.math.log(x)\n", 1, "Log"),  # the line holds no log
        ("def f(x):\n    return tf.square(x) * 2\n", 2, "Log"),
        ("def f(x):\n    return self.log(x)\n", 2, "Log"),  # not a tensor namespace
        ("def f(x):\n    logging.log(10, x)\n", 2, "Log"),
        ("def f(x):\n    return tf.math.log(x)\n", 2, "MatMul"),  # no pattern for this op
        ("def f(x):\n    return x * 2\n", 2, "RealDiv"),
        ("def f(x):\n    return tf.math.log(\n        x)\n", 2, "Log"),  # spans lines: left alone
        ("def f(x):\n    return tf.math.log(x)\n", 99, "Log"),  # out of range
    ],
)
def test_no_fix_where_the_pattern_does_not_apply(body: str, line: int, op_type: str) -> None:
    assert fixes_for_line(HEADER + body, HEADER.count("\n") + line if line < 99 else line, op_type) == []


def test_a_file_that_does_not_parse_still_gets_a_fix_for_a_line_that_does() -> None:
    source = "import tensorflow as tf\n\ndef f(probs):\n    y = tf.math.log(probs)\n    z = (\n"
    fixes = fixes_for_line(source, 4, "Log")
    assert (
        apply_edits(source, fixes[0].edits).splitlines()[3]
        == "    y = tf.math.log(tf.clip_by_value(probs, 1e-7, 1.0))"
    )


def test_columns_count_characters_not_bytes() -> None:
    source = "import tensorflow as tf\n\ndef f(x):\n    s = 'é'; y = tf.math.log(x)\n"
    fix = fixes_for_line(source, 4, "Log")[0]
    assert fix.edits == [TextEdit(4, 29, 30, "tf.maximum(x, 1e-7)")]
    assert (
        apply_edits(source, fix.edits).splitlines()[3] == "    s = 'é'; y = tf.math.log(tf.maximum(x, 1e-7))"
    )


def test_a_regression_prediction_is_not_clipped_to_one() -> None:
    body = "def msle(y_true, y_pred):\n    return tf.math.log(y_pred + 1.0)\n"
    assert not any("clip_by_value" in line for line in lines_of(body, 2, "Log"))


def test_euclidean_norm_of_a_zero_gradient_is_written_with_an_epsilon_inside_the_sqrt() -> None:
    body = "def penalty(grads):\n    norms = tf.norm(grads, axis=-1)  # zero vector\n    return norms\n"
    assert (
        preferred(body, 2, "SqrtGrad", forward_op="norm/Sqrt", backward=True)
        == "    norms = tf.sqrt(tf.reduce_sum(tf.square(grads), axis=-1) + 1e-7)  # zero vector"
    )
    assert lines_of("def f(g):\n    return tf.norm(g, ord=1)\n", 2, "Sqrt") == []  # not a sqrt inside
