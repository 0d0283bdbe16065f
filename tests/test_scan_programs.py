"""`nanlens scan` on dumps of real TensorFlow programs: the origin is the line marked `# ORIGIN`.

Each program in tests/programs is run once per session under `nanlens run` (real TensorFlow, FULL_HEALTH);
the tests then scan the dumps the way a user would, through `scan_dump` and through the CLI.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from programs.harness import EXPECTED, marker_line, nanlens, program_dumps

from pyadapter.cause import CauseContext, attach_cause, cause_of, classify
from pyadapter.dump import scan_dump
from pyadapter.findings import Findings
from pyadapter.findings_text import origin_lines

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory):
    return program_dumps(tmp_path_factory.getbasetemp() / "program-dumps")


@pytest.mark.parametrize("program", sorted(EXPECTED))
def test_origin_is_the_marked_line(dumps, program: str) -> None:
    run = dumps[program]
    assert run.returncode == 0, run.stderr[-2000:]
    marked_file, expected_type, expected_role = EXPECTED[program]
    expected_path, expected_line = marker_line(marked_file)

    findings = scan_dump(run.dump)

    origin = findings.origin
    assert origin is not None, findings.extra.get("warnings")
    assert (origin.file, origin.line) == (expected_path, expected_line), origin.message
    assert origin.role == expected_role
    assert origin.op.type == expected_type
    assert origin.op.host == findings.hosts[0]
    assert origin.health is not None and not origin.health.is_finite
    assert origin.message.startswith(expected_type) or expected_role == "backward-origin"
    # The user stack ends at the marked line and holds no library or NaN Lens frames.
    assert origin.stack and (origin.stack[-1].file, origin.stack[-1].line) == (expected_path, expected_line)
    for frame in origin.stack:
        assert "site-packages" not in frame.file and "/pyadapter/" not in frame.file
    assert findings.findings[0] is origin
    assert findings.extra["warnings"] == [] and findings.extra["skipped"] == []


def test_backward_origin_names_the_forward_op(dumps) -> None:
    findings = scan_dump(dumps["backward_sqrt.py"].dump)
    origin = findings.origin
    assert origin is not None and origin.role == "backward-origin"
    assert origin.op.forward_op == "Sqrt"
    assert "gradient_tape/" in origin.op.name
    assert "backward pass" in origin.message
    # The forward op is named once: it read "the gradient of Sqrt Sqrt" (its type, then its name, the same word).
    assert "(the gradient of Sqrt" in origin.message and "Sqrt Sqrt" not in origin.message, origin.message
    # The forward op's output was finite (sqrt(0) = 0): the NaN exists only in the backward pass.
    forward_input = next(i for i in origin.inputs if i.name == "Sqrt:0")
    assert (
        forward_input.health is not None and forward_input.health.is_finite and forward_input.health.zero == 1
    )


def test_norm_backward_origin_maps_to_norm_sqrt(dumps) -> None:
    origin = scan_dump(dumps["norm_at_zero.py"].dump).origin
    assert origin is not None and origin.op.forward_op == "norm/Sqrt"


def test_message_names_the_input_that_caused_it(dumps) -> None:
    origin = scan_dump(dumps["log_softmax.py"].dump).origin
    assert origin is not None
    softmax = next(i for i in origin.inputs if i.name == "Softmax:0")
    assert softmax.health is not None and softmax.health.zero == 2
    assert origin.message == "Log produced 2 -inf (of 3 values) from input Softmax:0 which holds 2 zeros"


def test_propagated_lines_are_downstream_and_distinct(dumps) -> None:
    findings = scan_dump(dumps["exp_overflow.py"].dump)
    origin = findings.origin
    assert origin is not None
    propagated = [f for f in findings.findings if f.role == "propagated"]
    assert propagated, "the normalization after exp carries the inf downstream"
    lines = [(f.file, f.line) for f in findings.findings]
    assert len(lines) == len(set(lines))
    path, origin_line = marker_line("exp_overflow.py")
    assert (path, origin_line + 1) in lines  # `return e / tf.reduce_sum(e)`
    for f in propagated:
        assert f.health is not None and not f.health.is_finite and f.op.host
    # The tf.function's call (its line is the caller's, `print(naive_softmax(...))`) is not a line it spread to:
    # its ops are.
    assert not any(f.op.type.startswith("__inference_") for f in propagated), [f.op for f in propagated]


def test_a_sum_of_finite_exps_that_overflowed_is_named_with_its_exp_and_log_space(dumps) -> None:
    """A contrastive loss's ``reduce_sum(exp(sim / tau))`` at a small tau: each exp is finite, their sum is not. The
    cause said "a Sum op overflowed on finite inputs ... keep its values in range", which named neither the exp, the
    division by the temperature, nor log space; and listed the Sum's axis as an input of "unknown" health."""
    findings = scan_dump(dumps["exp_sum_overflow.py"].dump)
    origin = findings.origin
    assert origin is not None and origin.op.type == "Sum"
    source = Path(marker_line("exp_sum_overflow.py")[0]).read_text().splitlines()
    exp_line, divide_line = (
        next(i for i, t in enumerate(source, 1) if t.endswith(m)) for m in ("# EXP", "# DIVIDE")
    )
    assert findings.extra["sum_of_exps"]["line"] == exp_line, findings.extra.get("sum_of_exps")
    assert findings.extra["sum_of_exps"]["divided_at"] == divide_line
    attach_cause(findings)
    cause = cause_of(findings)
    # A dump has no loss history: "unknown" between a wrong op and a divergence, with the sum of exps named.
    assert cause is not None and cause.kind == "unknown", cause
    assert f"adding up the finite terms of the exp at line {exp_line}" in cause.summary, cause.summary
    assert f"divided at line {divide_line}" in cause.summary, cause.summary
    assert cause.change is not None and "tf.reduce_logsumexp" in cause.change.what, cause.change
    # The Sum's reduction axis (an int32 the dump does not record) is no input worth a line of the report.
    report = "\n".join(origin_lines(findings, none=""))
    assert "input Exp:0" in report and "reduction_indices" not in report, report


def test_a_log_of_a_softmax_quotient_that_underflowed_is_told_log_softmax(dumps) -> None:
    """A two-tower model's in-batch softmax by hand at temperature 0.01: no exp underflowed, their quotient did
    (6e-40), and the log of it was told "keep it in the domain (tf.math.log(tf.maximum(x, 1e-7)))"; followed, the
    run went NaN 462 steps later at the exp. It is a softmax taken out of log space."""
    findings = scan_dump(dumps["softmax_quotient_underflow.py"].dump)
    source = Path(marker_line("softmax_quotient_underflow.py")[0]).read_text().splitlines()
    exp_line = next(i for i, t in enumerate(source, 1) if t.endswith("# EXP"))
    found = findings.extra.get("zeros_from_exp")
    assert isinstance(found, dict) and found.get("quotient") and found["line"] == exp_line, found
    attach_cause(findings)
    cause = cause_of(findings)
    assert cause is not None and f"from a quotient of the exps at line {exp_line}" in cause.summary, cause
    assert cause.change is not None and "tf.nn.log_softmax" in cause.change.what, cause.change


def test_a_builtin_loss_taking_a_linear_output_out_of_its_domain_changes_the_output_layer(dumps) -> None:
    """``loss="poisson"`` on a linear output: Keras's own log(y_pred + eps) is NaN for a prediction below 0. The
    origin is the fit line (the loss is Keras's code), and the change said "the Log's input: ... clip it
    (tf.math.log(tf.maximum(x, 1e-7)))" there, a clamp in code the user does not have; it is the output layer."""
    findings = scan_dump(dumps["keras_poisson_linear.py"].dump)
    path, fit_line = marker_line("keras_poisson_linear.py")
    assert findings.origin is not None and findings.origin.line == fit_line
    output_line = next(
        i for i, t in enumerate(Path(path).read_text().splitlines(), 1) if t.endswith("# OUTPUT")
    )
    assert findings.extra["loss_input_layer"]["line"] == output_line, findings.extra.get("loss_input_layer")
    attach_cause(findings)
    cause = cause_of(findings)
    assert cause is not None and cause.kind == "op", cause
    assert f"the poisson loss took it from the model's output layer (line {output_line}" in cause.summary
    assert cause.change is not None and cause.change.line == output_line, cause.change
    assert 'activation="exponential"' in cause.change.what and "tf.maximum" not in cause.change.what
    # A log in the user's own keras.losses.Loss subclass is scoped compile_loss/ too, but it is theirs to change:
    # it was sent to the output layer ("make its output positive") of a softmax.
    own = scan_dump(dumps["keras_loss_subclass_log.py"].dump)
    own_path, own_line = marker_line("keras_loss_subclass_log.py")
    assert own.origin is not None and (own.origin.file, own.origin.line) == (own_path, own_line)
    assert own.origin.op.name.startswith("compile_loss/") and "loss_input_layer" not in own.extra
    attach_cause(own)
    own_cause = cause_of(own)
    assert own_cause is not None and own_cause.change is not None and own_cause.change.line == own_line


def test_keras_jit_compile_is_forced_off_while_recording(dumps) -> None:
    run = dumps["keras_fit.py"]
    assert "jit_compile=True ignored while recording a dump" in run.stderr
    assert "XLA" not in run.stderr.replace("(tfdbg has no XLA kernels)", "")


def test_dataset_map_origin_is_inside_the_map_function(dumps) -> None:
    origin = scan_dump(dumps["dataset_map_nan.py"].dump).origin
    assert origin is not None
    assert origin.op.graph and "featurize" in origin.op.graph
    assert origin.stack[-1].function == "featurize"


def test_eager_program_origin_is_an_execution(dumps) -> None:
    origin = scan_dump(dumps["eager_program.py"].dump).origin
    assert origin is not None
    assert origin.op.execution_index is not None and origin.op.trace_index is None
    assert any(i.health is not None and i.health.zero == 3 for i in origin.inputs)


def test_cli_human_report_shows_file_line_and_source(dumps) -> None:
    run = dumps["zero_std.py"]
    path, line = marker_line("zero_std.py")
    result = nanlens("scan", str(run.dump))
    assert result.returncode == 0, result.stderr
    assert f"origin: {path}:{line}" in result.stdout
    assert "return (x - mean) / std  # ORIGIN" in result.stdout
    assert "RealDiv" in result.stdout and "NaN" in result.stdout
    assert "Traceback" not in result.stderr


def test_cli_json_is_a_findings_document(dumps) -> None:
    run = dumps["sqrt_negative.py"]
    result = nanlens("scan", str(run.dump), "--json", "--no-progress")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    findings = Findings.from_json(data)
    path, line = marker_line("sqrt_negative.py")
    assert findings.origin is not None and (findings.origin.file, findings.origin.line) == (path, line)
    assert data["source"]["kind"] == "dump" and data["source"]["tensor_debug_mode"] == "FULL_HEALTH"
    assert data["warnings"] == [] and data["skipped"] == []
    assert Path(data["source"]["path"]) == run.dump.resolve()


def test_progress_callback_reaches_the_total(dumps) -> None:
    calls: list[tuple[int, int]] = []
    scan_dump(dumps["keras_fit.py"].dump, progress=lambda done, total: calls.append((done, total)))
    assert calls, "progress is reported"
    dones = [d for d, _ in calls]
    assert dones == sorted(dones)
    assert calls[-1][0] == calls[-1][1] > 0


def test_several_hosts_in_one_directory_are_merged(dumps, tmp_path: Path) -> None:
    """Two writers' files in one directory: the earlier NaN wins and every finding names its host."""
    # The harness runs programs in EXPECTED's order, two at a time: log_softmax.py finishes long before
    # eager_program.py starts, so its NaN is the earlier one.
    early, late = dumps["log_softmax.py"], dumps["eager_program.py"]
    for run, host in ((early, "worker-a"), (late, "worker-b")):
        for f in run.dump.iterdir():
            timestamp, suffix = f.name.split(".")[1], f.name.rsplit(".", 1)[1]
            (tmp_path / f"tfdbg_events.{timestamp}.{host}.{suffix}").write_bytes(f.read_bytes())
    findings = scan_dump(tmp_path)
    assert sorted(findings.hosts) == ["worker-a", "worker-b"]
    assert findings.origin is not None and findings.origin.op.host == "worker-a"
    assert (findings.origin.file, findings.origin.line) == marker_line("log_softmax.py")
    assert {f.op.host for f in findings.findings} <= {"worker-a", "worker-b"}


def test_an_op_in_a_statement_of_several_lines_is_shown_with_its_whole_statement(dumps) -> None:
    """TensorFlow records the last line of a statement written over several lines (``axis=raxis)``), not the one
    holding the op: the CLI shows the whole statement, numbered, so the tf.exp it names is on screen."""
    findings = scan_dump(dumps["multiline_statement.py"].dump)
    path, line = marker_line("multiline_statement.py")
    _, exp_line = marker_line("multiline_statement.py", "# EXP")
    shown = origin_lines(findings, none="")
    assert shown[1:4] == [
        f"  {exp_line - 1:>5} |     return tf.reduce_sum(",
        f"  {exp_line:>5} |         -0.5 * ((sample - mean) ** 2.0 * tf.exp(-logvar) + logvar + log2pi),  # EXP",
        f"  {line:>5} |         axis=raxis)  # ORIGIN",
    ], shown


def test_atan2_backward_origin_is_the_atan2_not_the_line_that_reads_one_input(dumps) -> None:
    """atan2(y, x)'s gradient reads y and x; the first op of the step reading x alone (``real**2`` on the line
    before) was named, with "divide_no_nan" on a line that divides nothing (s39e p5). The atan2 reads both, and the
    cause says atan2 at (0, 0)."""
    findings = scan_dump(dumps["backward_atan2.py"].dump)
    origin = findings.origin
    assert origin is not None and origin.op.forward_op == "Atan2", origin
    attach_cause(findings)
    cause = cause_of(findings)
    assert cause is not None and cause.summary.startswith("the step differentiated atan2(y, x) at (0, 0)"), (
        cause.summary
    )
    assert cause.change is not None and "tf.math.atan2(y, x + 1e-7)" in cause.change.what, cause.change


def test_a_log_of_a_softmax_masked_with_minus_inf_names_the_mask(dumps) -> None:
    """The softmax of scores masked with -inf is 0 at the padded positions: "take tf.nn.log_softmax", followed, kept
    the -inf that the loss multiplies by a 0 target (s39b listnet). The mask's constant is found behind the softmax
    and its line is the change."""
    findings = scan_dump(dumps["softmax_masked_log.py"].dump)
    mask_line = next(
        i
        for i, t in enumerate(Path(marker_line("softmax_masked_log.py")[0]).read_text().splitlines(), 1)
        if t.endswith("# MASK")
    )
    assert findings.extra["mask_into_softmax"]["line"] == mask_line, findings.extra.get("mask_into_softmax")
    attach_cause(findings)  # a plain dump's cause: the words; the line moves with a bundle's context
    cause = cause_of(findings)
    assert cause is not None and f"a mask of -inf (line {mask_line})" in cause.summary, cause
    cause = classify(findings, CauseContext(entry_script=marker_line("softmax_masked_log.py")[0]))
    assert cause.change is not None and cause.change.line == mask_line, cause
    assert cause.change.what.startswith("the mask value: a large finite one (-1e9)"), cause.change
