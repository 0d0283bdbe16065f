"""Findings in words: `nanlens scan`, `nanlens locate`, the HTML report and the editor's hovers say one finding
the same way, because all of them take their sentences from pyadapter/findings_text.py. No TensorFlow here."""

from __future__ import annotations

import html

from pyadapter import findings_text as text
from pyadapter.cause.model import Cause, Change
from pyadapter.commands.locate import format_report as locate_report
from pyadapter.commands.scan import format_report as scan_report
from pyadapter.findings import Finding, Findings, Frame, InputHealth, OpRef, TensorHealth
from pyadapter.pictures.html import _findings_html
from pyadapter.replay.verdict import StepVerdict

CAUSE = Cause(
    "divergence",
    "the loss grew x3.1 per step for 5 steps before it overflowed",
    change=Change("/w/train.py", 7, "learning rate 0.05 (SGD): try 0.005"),
    provenance={"note": "the CSV file changed since the run"},
)


def findings(kind: str, backward: bool = False) -> Findings:
    origin = Finding(
        file="/w/train.py",
        line=12,
        role="backward-origin" if backward else "origin",
        op=OpRef(name="grad/SqrtGrad", type="SqrtGrad", graph="train_fn", host="h1", forward_op="Sqrt"),
        health=TensorHealth(dtype="float32", shape=[4], size=4, nan=3, zero=0, pos=1),
        inputs=[InputHealth("x:0", TensorHealth(dtype="float32", size=4, zero=1, pos=3))],
        stack=[Frame("/w/train.py", 12, "loss_fn")],
        message="SqrtGrad produced 3 NaN",
    )
    spread = Finding(
        file="/w/train.py",
        line=13,
        role="propagated",
        op=OpRef(name="m/Mul", type="Mul"),
        health=origin.health,
    )
    out = Findings(
        source_kind=kind,  # type: ignore[arg-type]
        source_path="/w/src",
        origin=origin,
        findings=[origin, spread],
        hosts=["h1"],
        bundle={
            "step": 4,
            "verdicts": {"graph": StepVerdict("graph", loss=float("nan"), loss_finite=False).to_json()},
        }
        if kind == "bundle"
        else None,
    )
    out.extra["origin_code"] = "    y = tf.sqrt(x)\n"
    out.extra["cause"] = CAUSE.to_json()
    return out


def test_an_origin_in_a_frame_without_a_function_name_says_no_function() -> None:
    """A tf.data map function's frame has no name in the dump: the place read "train.py:25 in "."""
    doc = findings("bundle")
    assert doc.origin is not None
    doc.origin.stack[-1].function = ""
    assert "origin: /w/train.py:12" in locate_report(doc).splitlines()


def test_a_line_the_origin_spread_to_in_a_notebook_names_its_cell() -> None:
    doc = findings("bundle")
    doc.findings[1].file, doc.findings[1].cell, doc.findings[1].line = "/w/a.ipynb", 4, 2
    report = locate_report(doc).splitlines()
    # findings.json counts cells from 0; the text counts them as a person does (the fifth cell is cell 5).
    assert "  /w/a.ipynb cell 5, line 2  m/Mul (Mul): 3 NaN of 4" in report, report


def test_scan_and_locate_print_the_origin_block_alike() -> None:
    scan, locate = scan_report(findings("dump")).splitlines(), locate_report(findings("bundle")).splitlines()
    block = [
        "origin: /w/train.py:12 in loss_fn",
        "     12 |     y = tf.sqrt(x)",
        "  health: 3 NaN of 4",
        "  input x:0: finite (4 values, 1 zero)",
        "  SqrtGrad produced 3 NaN",
        "spread to 1 more line:",
    ]
    for report in (scan, locate):
        assert [line for line in report if line in block] == block, report
    # A dump says which machine ran the op; a bundle's replay ran here, so its host would say nothing.
    assert "  op: grad/SqrtGrad (SqrtGrad, gradient of Sqrt) in graph train_fn on host h1" in scan
    assert "  op: grad/SqrtGrad (SqrtGrad, gradient of Sqrt) in graph train_fn" in locate
    for report in (scan, locate):
        assert "cause: divergence — the loss grew x3.1 per step for 5 steps before it overflowed" in report
        assert "  change: /w/train.py:7: learning rate 0.05 (SGD): try 0.005" in report
        assert "  note: the CSV file changed since the run" in report


def test_the_report_page_says_what_the_cli_says() -> None:
    page = html.unescape(_findings_html(findings("bundle", backward=True)))
    assert "Origin (backward pass):</strong> <code>/w/train.py:12 in loss_fn</code>" in page
    assert "grad/SqrtGrad (SqrtGrad, gradient of Sqrt)" in page
    assert "<dd>3 NaN of 4</dd>" in page
    assert "Spread to 1 more line" in page
    verdict = StepVerdict("graph", loss=float("nan"), loss_finite=False).describe()
    assert verdict == "graph: NaN reproduced — loss nan" and f"<li>{verdict}</li>" in page
    assert "  graph: NaN reproduced — loss nan" in locate_report(findings("bundle")).splitlines()


def test_a_verdict_reads_the_same_from_its_record_and_its_json() -> None:
    verdicts = [
        StepVerdict("eager", loss=0.25, loss_finite=True, gradients_finite=True, weights_finite=True),
        StepVerdict("graph", error="InvalidArgumentError: Tensor had NaN values", dumped=True),
        StepVerdict(
            "graph", non_finite_gradients=["a", "b"], non_finite_weights=["c"], gradients_finite=False
        ),
        # A GAN's generator loss of -log(0): an Inf, with gradients the replay does not judge; no NaN to speak of.
        StepVerdict("eager", loss=float("inf"), loss_finite=False),
        # An Inf loss whose gradients went NaN: the head names the Inf the user reads, the count says the rest.
        StepVerdict(
            "graph", loss=float("inf"), loss_finite=False, non_finite_gradients=["k"], gradients_finite=False
        ),
    ]
    said = [text.verdict_sentence(v.to_json()) for v in verdicts]
    assert said == [v.describe() for v in verdicts]
    assert said == [
        "eager: stayed finite — loss 0.25, gradients finite, weights finite after the update",
        "graph (dumped): NaN reproduced — InvalidArgumentError: Tensor had NaN values",
        "graph: NaN reproduced — 2 gradients non-finite, 1 weight non-finite after the update",
        "eager: Inf reproduced — loss inf",
        "graph: Inf reproduced — loss inf, 1 gradient non-finite",
    ]


def test_no_origin_says_why() -> None:
    empty = Findings(source_kind="dump", source_path="/w/d", origin=None)
    assert text.origin_lines(empty, none="no NaN or Inf found") == ["no NaN or Inf found"]
    empty.extra["unlocated_origin"] = {"op": {"name": "Log_1", "type": "Log"}, "reason": "no frame is yours"}
    assert scan_report(empty).splitlines()[1] == "NaN/Inf starts at op Log_1 (Log), but no frame is yours"
    assert "NaN/Inf starts at op Log_1 (Log), but no frame is yours." in _findings_html(empty)


def test_the_editor_words_a_finding_and_a_cause_as_the_cli_does() -> None:
    from pyadapter.server import render

    origin = findings("dump").origin
    assert origin is not None
    assert render.finding_message(origin) == text.finding_message(origin) == "SqrtGrad produced 3 NaN"
    origin.message = ""
    assert text.finding_message(origin) == "SqrtGrad produced 3 NaN of 4"
    assert text.health_detail(origin.health) == "3 NaN of 4 (float32, shape [4])"
    assert render.change_message(CAUSE).endswith(CAUSE.summary)
    assert text.cause_lines(None) == []


def test_a_warning_said_twice_in_two_cases_is_printed_once() -> None:
    """The scene's and the replay's note on stateful random draws differ only in their first letter and a full
    stop: `locate` printed both."""
    from pyadapter.findings import Findings
    from pyadapter.findings_text import warning_lines

    findings = Findings("bundle", "b", None, [])
    findings.extra["warnings"] = [
        "the step draws from TensorFlow's stateful random ops",
        "The step draws from TensorFlow's stateful random ops.",
        "another one",
    ]
    assert warning_lines(findings) == [
        "warnings:",
        "  the step draws from TensorFlow's stateful random ops",
        "  another one",
    ]


def test_a_value_a_generator_returned_is_said_as_the_pipelines_python_code_not_a_pyfunc() -> None:
    """A PyDataset's __getitem__ returned NaN (Keras runs it through Dataset.from_generator): the origin read
    "op: PyFunc (PyFunc) in graph Dataset_from_generator_generator_next_fn" and "input args_0:0: unknown"."""
    doc = findings("bundle")
    assert doc.origin is not None
    doc.origin.op = OpRef(name="PyFunc", type="PyFunc", graph="Dataset_from_generator_generator_next_fn")
    doc.origin.inputs = [InputHealth("args_0:0", None)]
    shown = text.origin_lines(doc, none="")
    assert (
        "  op: none: Python code the input pipeline calls returned it (a generator, or a PyDataset's "
        in "\n".join(shown)
    )
    assert not any("args_0" in line or "Dataset_from_generator" in line for line in shown), shown


def test_a_statement_over_several_lines_is_shown_numbered_around_the_recorded_line() -> None:
    doc = findings("bundle")
    doc.extra["origin_code"] = "        axis=raxis)"
    doc.extra["origin_statement"] = {
        "before": ["    return tf.reduce_sum(", "        tf.exp(-v),"],
        "after": [],
    }
    assert text.origin_code_lines(doc) == [
        (10, "    return tf.reduce_sum("),
        (11, "        tf.exp(-v),"),
        (12, "        axis=raxis)"),
    ]
    assert '<span class="nl-lineno">10</span>' in _findings_html(doc)
