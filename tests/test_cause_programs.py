"""End to end, per cause: a real Keras program trains under NanGuard until it goes non-finite, then
``nanlens locate BUNDLE --json`` (as a user runs it, in the program's folder) must name the cause and the line to
change (the line marked ``# CHANGE`` / ``# ORIGIN`` in the program):

- divergence: tests/programs/cause_divergence.py (SGD, momentum 0.9, unscaled features) -> the optimizer line;
- data: tests/programs/cause_bad_row.py (an empty CSV field read by np.genfromtxt) -> the reading line, the index
  in the array passed to fit and the line of readings.csv;
- precision: tests/programs/mixed_precision_fit.py (float16 exp overflow in a custom layer) -> the exp line in that layer (its
  construction line named as the other way), float16's range in the evidence;
- op: tests/zoo/zoo_log_of_zero.py (log of a probability that underflows to 0) stays ``op`` at the log line;
- fast divergence: tests/programs/loop_divergence.py at ten times its learning rate and
  tests/programs/fit_fast_divergence.py (SGD at 1.0) blow up in 1-3 steps with a MatMul overflow -> divergence.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
PROGRAMS = HERE / "programs"


def marked_line(program: Path, marker: str) -> int:
    """The line whose comment is the marker (not the docstring naming it in ``double backquotes``)."""
    return next(
        i
        for i, line in enumerate(program.read_text().splitlines(), 1)
        if f"# {marker}" in line and "``" not in line
    )


def train_and_locate(tmp_path: Path, program: Path, *args: str, env: dict[str, str] | None = None) -> dict:
    """Copy the program into a fresh folder, run it there (its bundle goes to ./captures), locate the bundle."""
    local = tmp_path / program.name
    shutil.copy(program, local)
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", NANLENS_CAPTURE_DIR="captures", **(env or {}))
    done = subprocess.run(
        [sys.executable, str(local), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=environment,
        timeout=600,
    )
    captures = tmp_path / "captures"
    bundles = [p for p in captures.iterdir() if (p / "manifest.json").is_file()] if captures.is_dir() else []
    assert len(bundles) == 1, f"exit {done.returncode}\n" + done.stdout[-2000:] + done.stderr[-3000:]
    return locate_json(bundles[0], tmp_path, environment)


def assert_trains(tmp_path: Path, program: Path, *args: str) -> None:
    """The copied program, run again as the advice says (other arguments, an edited config), trains to its end
    with no stop of NanGuard's."""
    done = subprocess.run(
        [sys.executable, str(tmp_path / program.name), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        timeout=600,
    )
    assert done.returncode == 0 and "NanGuard: step" not in done.stderr, done.stderr[-3000:]


def nanlens_json(cwd: Path, environment: dict[str, str], *args: str) -> dict:
    """``nanlens ARGS --json``'s answer, as the user runs it in the program's folder."""
    done = subprocess.run(
        [sys.executable, "-m", "pyadapter", *args, "--json"],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=environment,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def locate_json(bundle: Path, cwd: Path, environment: dict[str, str], *args: str) -> dict:
    """``nanlens locate BUNDLE ARGS --json``, as the user runs it in the program's folder."""
    findings = nanlens_json(cwd, environment, "locate", str(bundle), *args)
    assert findings["schema"] == "nanlens.findings/1"
    return findings


def test_divergence_points_at_the_optimizer_line(tmp_path: Path) -> None:
    program = PROGRAMS / "cause_divergence.py"
    findings = train_and_locate(tmp_path, program, "captures")
    cause = findings["cause"]
    assert cause["kind"] == "divergence", cause
    assert cause["change"]["file"] == str(tmp_path / program.name)
    assert cause["change"]["line"] == marked_line(program, "CHANGE")
    evidence = cause["evidence"]
    # The guard's window search (NanGuard's default window=16) replaces the blind tenth with half the largest
    # learning rate that kept the window finite, below the captured 7e-5.
    assert "learning rate 7e-5 (SGD, momentum 0.9): largest finite over the" in cause["change"]["what"]
    assert (
        0
        < evidence["window"]["suggested_learning_rate"]
        < evidence["window"]["largest_finite_learning_rate"]
        < 7e-5
    )
    assert (
        evidence["learning_rate"] == 7e-5 and evidence["momentum"] == 0.9 and evidence["optimizer"] == "SGD"
    )
    assert evidence["rate_per_step"] > 2 and evidence["steps"] >= 3 and evidence["factor"] > 1e3
    assert f"x{evidence['rate_per_step']:.3g} per step for {evidence['steps']} steps" in cause["summary"]
    assert findings["origin"]["op"]["type"] in ("MatMul", "Square", "AddV2", "Mul", "BiasAdd", "Sub")


def test_a_bad_numpy_row_is_data_with_its_index_and_csv_line(tmp_path: Path) -> None:
    rows = np.random.default_rng(0).normal(size=(400, 6)).round(4)
    lines = [",".join(str(v) for v in row) for row in rows]
    fields = lines[170].split(",")
    fields[3] = ""
    lines[170] = ",".join(fields)
    (tmp_path / "readings.csv").write_text("\n".join(lines) + "\n")
    program = PROGRAMS / "cause_bad_row.py"
    cause = train_and_locate(tmp_path, program, "captures")["cause"]
    assert cause["kind"] == "data", cause
    assert cause["change"]["line"] == marked_line(program, "CHANGE")
    where = cause["provenance"]
    assert where["element"] == "x[10, 3] = nan" and where["batch_index"] == 5
    assert where["index"] == 170 and where["shuffled"] is False and "note" not in where  # fit(shuffle=False)
    assert where["file"] == str(tmp_path / "readings.csv") and where["line"] == 171 and where["row"] == 170
    assert "index 170 of the array passed to fit" in cause["summary"]


def test_a_float16_overflow_is_precision_at_the_layer(tmp_path: Path) -> None:
    program = PROGRAMS / "mixed_precision_fit.py"
    cause = train_and_locate(tmp_path, program, "captures", str(tmp_path / "recorded.npz"))["cause"]
    assert cause["kind"] == "precision", cause
    assert cause["evidence"]["dtype"] == "float16" and cause["evidence"]["dtype_max"] == 65504.0
    assert cause["evidence"]["dtype_policy"] == "mixed_float16"
    assert cause["evidence"]["layer"]["class"] == "AttentionPooling"
    lines = program.read_text().splitlines()
    layer_line = next(i for i, line in enumerate(lines, 1) if line.strip() == "AttentionPooling(),")
    exp_line = next(i for i, line in enumerate(lines, 1) if "tf.exp(" in line)
    # The exp is in the user's own layer: that line is theirs to change; building the layer in float32 is the
    # other way, named with its line.
    assert cause["change"]["line"] == exp_line, cause["change"]
    assert f'dtype="float32" (line {layer_line})' in cause["change"]["what"]


def test_log_of_zero_stays_an_op(tmp_path: Path) -> None:
    program = HERE / "zoo" / "zoo_log_of_zero.py"
    cause = train_and_locate(tmp_path, program)["cause"]
    assert cause["kind"] == "op", cause
    assert cause["change"]["line"] == marked_line(program, "ORIGIN")
    assert cause["evidence"]["op"] == "Log"


def test_a_custom_loop_at_ten_times_the_rate_is_a_divergence_not_an_op(tmp_path: Path) -> None:
    """loop_divergence.py as a user would run it with its learning rate raised from 3e-4 to 3e-3: the loss goes
    from 290 to ~1e33 in three steps and a MatMul on huge-but-finite values makes NaN (+inf and -inf products
    summed). That is the divergence, with the optimizer line to change and the guard's window search run."""
    source = (PROGRAMS / "loop_divergence.py").read_text()
    assert source.count("learning_rate=3e-4") == 1
    edited = tmp_path / "edited" / "loop_divergence.py"
    edited.parent.mkdir()
    edited.write_text(source.replace("learning_rate=3e-4", "learning_rate=3e-3"))
    findings = train_and_locate(tmp_path, edited, "captures")
    cause = findings["cause"]
    assert cause["kind"] == "divergence", cause
    assert cause["change"]["line"] == marked_line(edited, "CHANGE")
    assert cause["evidence"]["learning_rate"] == 3e-3 and cause["evidence"]["factor"] > 1e6
    assert "the run diverged at learning rate 0.003" in cause["summary"]
    window = cause["evidence"]["window"]  # searched because the scene's cause was a divergence
    assert 0 < window["suggested_learning_rate"] < window["largest_finite_learning_rate"] < 3e-3
    assert findings["origin"]["op"]["type"] in ("MatMul", "Square", "AddV2", "Mul", "BiasAdd", "Sub")


def test_fit_that_blows_up_in_one_step_is_a_divergence(tmp_path: Path) -> None:
    """SGD(learning_rate=1.0) on unscaled regression data: one update takes the loss from ~1e8 to ~1e35 and the
    next step's MatMul overflows; one step is no trend, but the jump is the evidence of a divergence."""
    program = PROGRAMS / "fit_fast_divergence.py"
    findings = train_and_locate(tmp_path, program, "captures")
    cause = findings["cause"]
    assert cause["kind"] == "divergence", cause
    assert cause["change"]["file"] == str(tmp_path / program.name)
    assert cause["change"]["line"] == marked_line(program, "CHANGE")
    evidence = cause["evidence"]
    assert evidence["learning_rate"] == 1.0 and evidence["factor"] >= 1e3
    assert (
        "the run diverged at learning rate 1 on unscaled features (x[:, " in cause["summary"]
        and "overflowed float32" in cause["summary"]
    )
    # A rate 100x SGD's default is the first thing to change, on any inputs; the scale is named after it.
    assert "learning rate 1 (SGD): " in cause["change"]["what"]
    assert cause["change"]["what"].endswith("; and scale the features and targets"), cause["change"]
    assert findings["origin"]["op"]["type"] in ("MatMul", "Square", "AddV2", "Mul", "BiasAdd", "Sub")


def test_a_schedule_that_returns_inf_is_named_with_its_line(tmp_path: Path) -> None:
    """A warm-up + inverse-square-root schedule written so that it is +inf at the step the warm-up ends (step 20):
    the weights go non-finite from finite gradients there. The cause is the rate, named with the schedule and the
    line in it that made the inf (not its return line, not the optimizer's construction)."""
    program = PROGRAMS / "cause_schedule_inf.py"
    findings = train_and_locate(tmp_path, program, "captures")
    cause = findings["cause"]
    assert cause["kind"] == "op", cause
    assert cause["evidence"] == {"learning_rate": "inf", "schedule": "WarmupInverseSqrt", "step": 20}, cause
    assert cause["summary"].startswith(
        "the learning rate was inf at step 20: the schedule WarmupInverseSqrt"
    ), cause
    assert cause["change"]["file"] == str(tmp_path / program.name)
    assert cause["change"]["line"] == marked_line(program, "CHANGE")
    # The update at the infinite rate is refused (the guard computes the schedule's rate in the step), so the
    # bundle's replay starts from finite weights and finds the op that made the rate: the rsqrt on the marked line
    # (before, weights that "came with the data" at the fit line).
    origin = findings["origin"]
    assert origin["op"]["type"] == "Rsqrt" and origin["line"] == marked_line(program, "CHANGE"), origin


def test_a_linear_decay_that_goes_past_zero_is_named_as_a_negative_rate(tmp_path: Path) -> None:
    """``peak * (1 - step / decay_steps)`` with decay_steps shorter than the run and no floor: from step 30 the rate
    is negative and each update climbs the loss until the MSE overflows at step 65. It was "divergence: the loss grew
    x2.8 per step ... change the optimizer's line: lower the rate, or clip the gradients", and a 10x lower peak was
    NaN again. The cause is the negative rate, at the schedule's line; decaying over the whole run trains."""
    program = PROGRAMS / "cause_linear_decay_past_zero.py"
    findings = train_and_locate(tmp_path, program)
    cause = findings["cause"]
    assert cause["kind"] == "divergence", cause
    assert cause["summary"].startswith("the learning rate was negative, "), cause
    assert "the schedule LinearDecay returned it" in cause["summary"], cause
    assert (cause["change"]["file"], cause["change"]["line"]) == (
        str(tmp_path / program.name),
        marked_line(program, "CHANGE"),
    ), cause
    # The advice followed: decay over as many steps as training runs (40 epochs of 8 batches).
    assert_trains(tmp_path, program, "--decay_steps", "320")


def test_an_optimizer_epsilon_of_0_in_a_config_file_is_the_line_to_change(tmp_path: Path) -> None:
    """Adam built by a factory from ``--config configs/exp.json``, whose ``"epsilon": 0`` makes 0 / 0 in the update
    for the embedding rows no batch used. It was "the RealDiv op divided by 37184 zeros in its divisor
    adam/Add_1:0 ... tf.math.divide_no_nan(a, b)" at the fit line: a division inside Keras. The cause names the
    optimizer's epsilon, at the config's line; 1e-7 there trains."""
    program = PROGRAMS / "cause_config_factory.py"
    config = tmp_path / "configs" / "exp.json"
    config.parent.mkdir()
    optimizer = {"name": "Adam", "learning_rate": 0.001, "epsilon": 0}
    settings = {"seed": 3, "task": "text", "vocab": 200, "optimizer": optimizer}
    config.write_text(json.dumps(settings, indent=2))
    findings = train_and_locate(tmp_path, program, "--config", "configs/exp.json")
    cause = findings["cause"]
    assert cause["summary"].startswith("the Adam update divided by 0 in "), cause
    assert "its epsilon is 0" in cause["summary"], cause
    (line,) = [n for n, text in enumerate(config.read_text().splitlines(), 1) if '"epsilon"' in text]
    assert (cause["change"]["file"], cause["change"]["line"]) == (str(config), line), cause
    settings["optimizer"]["epsilon"] = 1e-7
    config.write_text(json.dumps(settings, indent=2))
    assert_trains(tmp_path, program, "--config", "configs/exp.json")


def test_a_zero_target_in_a_percentage_error_is_valid_data_and_the_loss_is_changed(tmp_path: Path) -> None:
    """A hand-written MAPE divides by y_true, and a closed day's sales are 0. The cause was "data: ... y[8] = 0 (the
    other 31 rows: 64 to 116) ...: correct it or leave it out", while a sale of 0 is right and the loss is
    undefined there; the loss's division is the change."""
    program = PROGRAMS / "cause_mape_zero_target.py"
    findings = train_and_locate(tmp_path, program)
    cause = findings["cause"]
    assert cause["kind"] != "data", cause
    assert "correct it or leave it out" not in cause["change"]["what"], cause
    assert cause["change"]["what"].startswith("the relative error: it is undefined for a target of 0"), cause
    assert cause["change"]["line"] == marked_line(program, "CHANGE"), cause


def test_a_rate_typo_in_a_config_file_a_factory_reads_is_the_line_to_change(tmp_path: Path) -> None:
    """A config-driven trainer with ``"learning_rate": 50.0`` for SGD (meant 0.5): the optimizer is built by
    ``getattr(keras.optimizers, name)(**cfg)``, a line that names no optimizer, and the divergence had no line to
    change and never said the rate. The run's ``--config`` file's line is the change."""
    program = PROGRAMS / "cause_config_factory.py"
    config = tmp_path / "configs" / "sgd.json"
    config.parent.mkdir()
    settings = {"seed": 3, "task": "regression", "optimizer": {"name": "SGD", "learning_rate": 50.0}}
    config.write_text(json.dumps(settings, indent=2))
    findings = train_and_locate(tmp_path, program, "--config", "configs/sgd.json")
    cause = findings["cause"]
    assert cause["kind"] == "divergence", cause
    assert "at learning rate 50" in cause["summary"], cause
    (line,) = [n for n, text in enumerate(config.read_text().splitlines(), 1) if '"learning_rate"' in text]
    assert (cause["change"]["file"], cause["change"]["line"]) == (str(config), line), cause


def test_an_inf_rate_a_callback_set_is_held_back_and_named_with_the_callback(tmp_path: Path) -> None:
    """A LearningRateScheduler whose function is inf at the first epoch after its warm-up (step 20). The update went
    through and was taken back by re-running the window from its copy, at the copy's rate: the bundle held a finite
    rate and weights training never had, and every locate and replay said the step stayed finite ("no origin",
    cause unknown). The guard now judges a constant rate before the update: not applied, the bundle's state is the
    step's own, and the cause names the callback that set the rate."""
    program = PROGRAMS / "cause_rate_callback_inf.py"
    findings = train_and_locate(tmp_path, program)
    bundle = Path(findings["source"]["path"])
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["step"] == 20 and manifest["non_finite"]["learning_rate"] is True, manifest["non_finite"]
    assert not manifest["non_finite"]["update_applied"] and not manifest["non_finite"]["update_taken_back"]
    cause = findings["cause"]
    assert cause["kind"] == "op", cause
    line = marked_line(program, "CHANGE")
    assert cause["summary"].startswith(
        f"the learning rate was inf at step 20: LearningRateScheduler(lr_at) at {program.name}:{line} set it"
    ), cause
    assert (cause["change"]["file"], cause["change"]["line"]) == (str(tmp_path / program.name), line)
    replayed = nanlens_json(tmp_path, dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), "replay", str(bundle))
    assert replayed["reproduced"] == {"graph": True, "eager": True}


def test_a_bad_row_of_a_dataframe_passed_to_fit_is_named_by_its_position_and_column(tmp_path: Path) -> None:
    """fit(df[features], df[target]): Keras slices the DataFrame into a tf.data pipeline itself, and the bad row was
    "row 298 of the arrays the dataset was sliced from (Dataset.from_tensor_slices)", a call the user never wrote,
    with no word of the DataFrame or its column. It is the row's position in the DataFrame and the column's name."""
    pytest.importorskip("pandas")
    rows = ["size,staff,marketing,orders,revenue"]
    no_orders = {37, 211}
    for i in range(256):
        orders = 0 if i in no_orders else 5 + i % 23
        rows.append(f"{1 + i % 9},{2 + i % 5},{0.5 + (i % 11) / 10:.2f},{orders},{10 + i % 17}")
    (tmp_path / "stores.csv").write_text("\n".join(rows) + "\n")
    findings = train_and_locate(tmp_path, PROGRAMS / "cause_dataframe_ratio.py")
    cause = findings["cause"]
    assert cause["kind"] == "data", cause
    where = cause["provenance"]
    assert where["of"] == "dataframe" and where["column"] == "spend_per_order", where
    assert where["index"] in no_orders and where["shuffled"] is False, where
    assert (
        f"row {where['index']} of the DataFrame passed to fit (by position, column 'spend_per_order')"
        in (cause["summary"])
    ), cause["summary"]
    assert "from_tensor_slices" not in cause["summary"]
    # The file holds a finite record: the column the program computes from it is where the inf is made.
    program = PROGRAMS / "cause_dataframe_ratio.py"
    assert cause["change"]["line"] == marked_line(program, "CHANGE"), cause["change"]
    assert cause["change"]["what"].startswith("the computation of column 'spend_per_order'"), cause["change"]


def test_a_pydatasets_bad_batch_is_said_in_the_epochs_order_not_as_its_index(tmp_path: Path) -> None:
    """fit shuffles a PyDataset's batches each epoch: the bad batch was named "(batch 12, row 17)", and a user who
    looked at dataset[12] found nothing (it was dataset[28]). The number is said to be the epoch's order."""
    program = PROGRAMS / "cause_pydataset_log.py"
    findings = train_and_locate(tmp_path, program)
    cause = findings["cause"]
    assert cause["kind"] == "data", cause
    # NumPy warned at the log ("invalid value encountered in log"): that line, not where __getitem__ returns it.
    assert cause["change"]["line"] == marked_line(program, "CHANGE:"), cause["change"]
    assert (
        "of the epoch's order: fit shuffles a PyDataset's batches, so it is not __getitem__("
        in (cause["summary"])
    ), cause["summary"]


def test_a_loss_that_takes_the_log_of_a_zero_target_names_the_record(tmp_path: Path) -> None:
    """cause_log_target.py: a module-level regression script whose own loss takes log(y_true), with one price of
    0. The origin's input is the step's argument, which a dump does not record: the cause names the batch's y, the
    row and its index in the arrays passed to fit (shuffle=False: the same index as in the user's array)."""
    program = PROGRAMS / "cause_log_target.py"
    findings = train_and_locate(tmp_path, program)
    assert findings["origin"]["op"]["type"] == "Log"
    assert findings["origin"]["line"] == marked_line(program, "ORIGIN")
    cause = findings["cause"]
    assert cause["kind"] == "op", cause
    assert cause["evidence"]["batch_array"] == "y" and cause["evidence"]["element"] == "y[13, 0] = 0"
    assert (
        "y holds 1 zero for it: y[13, 0] = 0, index 77 of the array passed to fit (batch 2, row 13)"
        in (cause["summary"])
    )
    assert cause["change"]["line"] == marked_line(program, "ORIGIN")


def test_a_record_in_shuffled_numpy_arrays_is_named_by_its_own_index(tmp_path: Path) -> None:
    """cause_shuffled_record.py: fit's defaults (shuffle=True) and a validation split. The cause counted the record
    "index 91 of the array passed to fit (in the shuffled order)", which names nothing in the user's data; it is
    now found by its values in the arrays fit trained on, at the scene: index 413, as in the user's y."""
    program = PROGRAMS / "cause_shuffled_record.py"
    findings = train_and_locate(tmp_path, program)
    cause = findings["cause"]
    assert cause["kind"] == "data" and cause["evidence"]["element"].endswith(" = -1"), cause
    assert "index 413 of the array passed to fit" in cause["summary"], cause["summary"]
    assert "shuffled" not in cause["summary"], cause["summary"]
    # From the bundle alone, the same index (the manifest holds the rows' indices).
    (bundle,) = [p for p in (tmp_path / "captures").iterdir() if (p / "manifest.json").is_file()]
    again = locate_json(bundle, tmp_path, dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert "index 413 of the array passed to fit" in again["cause"]["summary"], again["cause"]


def test_a_record_marked_minus_one_is_named_by_its_row(tmp_path: Path) -> None:
    """cause_missing_price.py: a log-scale loss, log(1 + y), and one price of -1 (an export's "unknown"). The Log
    reads y + 1, which the dump records only as counts (1 zero), so neither the dump nor the batch arrays alone
    name the record. At the scene the step ran once more with the Log's values kept: NaN/Inf in row 17 only, and
    that row's y is negative where no other row's is."""
    program = PROGRAMS / "cause_missing_price.py"
    findings = train_and_locate(tmp_path, program)
    assert findings["origin"]["op"]["type"] == "Log"
    assert findings["origin"]["line"] == marked_line(program, "ORIGIN")
    cause = findings["cause"]
    assert cause["kind"] == "data", cause
    assert cause["evidence"]["element"] == "y[17, 0] = -1"
    assert "in row 17 of the batch (batch 10) only" in cause["summary"]
    assert "index 337 of the array passed to fit" in cause["summary"]  # shuffle=False: the user's own index
    assert cause["change"]["line"] == marked_line(program, "ORIGIN")
    # From the bundle alone (a replay in a worker process), the same record.
    (bundle,) = [p for p in (tmp_path / "captures").iterdir() if (p / "manifest.json").is_file()]
    again = locate_json(bundle, tmp_path, dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), "--replay")
    assert again["bundle"]["origin_from"] == "replay"
    assert again["cause"]["kind"] == "data" and again["cause"]["evidence"]["element"] == "y[17, 0] = -1"


def test_a_glitch_inside_an_rnn_loop_is_named_by_its_record(tmp_path: Path) -> None:
    """cause_rnn_glitch.py: the origin Log runs in the RNN's while loop, once per time step, and only its later
    runs hold NaN: the row is read from the first run that does, and the record's negative reading is named."""
    program = PROGRAMS / "cause_rnn_glitch.py"
    findings = train_and_locate(tmp_path, program)
    assert findings["origin"]["line"] == marked_line(program, "ORIGIN")
    cause = findings["cause"]
    assert cause["kind"] == "data", cause
    assert cause["evidence"]["element"] == "x[4, 5, 0] = -3"
    assert "index 100 of the array passed to fit" in cause["summary"]


def test_a_softmax_over_a_fully_masked_row_is_the_origin_and_the_empty_record_the_cause(
    tmp_path: Path,
) -> None:
    """cause_empty_sequence.py: the -inf a user writes as a mask is a constant, not an op going wrong; the origin
    was that Const ("Const produced 1 -inf", cause "a Const op overflowed"). The Softmax that turns a row of -inf
    into NaN is the origin now, and its one bad row is the empty sequence, 0 throughout where no other row is.

    The cause was `data` ("correct the record"), though an empty sequence is valid input: it names the -inf mask
    constant's line as the one to change (a large finite negative), and the empty record beside it."""
    program = PROGRAMS / "cause_empty_sequence.py"
    findings = train_and_locate(tmp_path, program)
    assert findings["origin"]["op"]["type"] == "Softmax", findings["origin"]
    assert findings["origin"]["line"] == marked_line(program, "ORIGIN")
    cause = findings["cause"]
    assert cause["kind"] == "op", cause
    assert (
        "(x[11] is 0 throughout, all padding, index 203 of the array passed to fit: every position masked)"
        in cause["summary"]
    ), cause["summary"]
    assert cause["change"]["line"] == marked_line(program, "ORIGIN") - 1, cause[
        "change"
    ]  # tf.where(..., -np.inf)
    assert cause["change"]["what"].startswith("the mask value: a large finite number instead of -inf")


def test_a_where_that_skips_a_zero_count_is_the_gradient_trap_not_a_bad_record(tmp_path: Path) -> None:
    """``tf.where(y > 0, y * log(y / mu), 0.0)``: the loss is finite, the gradients NaN. The cause said "data: ...
    y[4, 0] = 0 (the other 63 rows: 1 to 29) ... correct it or leave it out", for a zero count the where is written
    to handle. It names the where's other branch and a safe form now."""
    program = PROGRAMS / "cause_where_gradient.py"
    findings = train_and_locate(tmp_path, program)
    assert findings["bundle"]["verdicts"]["graph"]["loss_finite"] is True, findings["bundle"]["verdicts"]
    assert findings["origin"]["op"]["type"] == "Log", findings["origin"]
    cause = findings["cause"]
    assert cause["kind"] == "op", cause
    line = marked_line(program, "CHANGE")
    assert cause["summary"].startswith(
        f"the loss was finite: the tf.where at line {line} discarded the 1 -inf"
    ), cause["summary"]
    assert "0 * inf = NaN" in cause["summary"] and "correct it" not in cause["summary"], cause["summary"]
    assert cause["change"]["line"] == line and "tf.math.xlogy" in cause["change"]["what"], cause["change"]


def test_a_log_of_a_density_whose_exps_underflowed_names_log_space_not_a_clamp(tmp_path: Path) -> None:
    """A mixture density network's loss ``log(sum(pi * exp(-0.5 * z**2) / sigma))``: far from every component each
    exp is 0 in float32 and the log is -inf. The cause said "keep it in the domain (tf.math.log(tf.maximum(x,
    1e-7)))", a clamp that leaves those rows without a gradient; it names the exp that underflowed and log space."""
    program = PROGRAMS / "cause_mixture_density.py"
    findings = train_and_locate(tmp_path, program)
    assert findings["origin"]["op"]["type"] == "Log" and findings["origin"]["line"] == marked_line(
        program, "CHANGE"
    )
    cause = findings["cause"]
    assert cause["kind"] == "op", cause
    exp_line = marked_line(program, "EXP")
    assert f"from the exp at line {exp_line}, which underflowed to 0 in float32" in cause["summary"], cause[
        "summary"
    ]
    assert cause["change"]["line"] == marked_line(program, "CHANGE"), cause["change"]
    assert "tf.reduce_logsumexp" in cause["change"]["what"] and "maximum" not in cause["change"]["what"], (
        cause["change"]
    )


def test_an_op_keras_made_in_a_layer_is_marked_at_the_layer_not_the_fit_call(tmp_path: Path) -> None:
    """``Dense(1, activation="exponential")`` overflows: the Exp has no frame of the user's file but the fit call,
    and the gutter mark sat on ``model.fit(...)``. The op's name says its layer (``sequential/dense/Exp``), and the
    file builds one Dense with that activation: that line is marked, at the scene and by ``locate --replay``."""
    program = PROGRAMS / "cause_exponential_link.py"
    findings = train_and_locate(tmp_path, program)
    layer = marked_line(program, "LAYER")
    for located in (
        findings,
        locate_json(next((tmp_path / "captures").iterdir()), tmp_path, dict(os.environ), "--replay"),
    ):
        origin = located["origin"]
        assert (origin["line"], origin["op"]["type"]) == (layer, "Exp"), origin
        assert "so the line marked is the line that builds its Dense layer" in origin["message"], origin[
            "message"
        ]
        assert located["cause"]["change"]["line"] == marked_line(program, "CHANGE"), located["cause"]


def test_a_log_before_an_lstm_is_the_origin_not_the_lstms_tensor_list(tmp_path: Path) -> None:
    """The LSTM's ``TensorListGetItem`` came first in the dump with an input of unknown health, and was named the
    origin ("a TensorListGetItem op overflowed ...") at the LSTM line; a TensorList only hands back what was put in."""
    program = PROGRAMS / "cause_log_before_lstm.py"
    for located in (train_and_locate(tmp_path, program),):
        origin = located["origin"]
        assert (origin["line"], origin["op"]["type"]) == (marked_line(program, "ORIGIN"), "Log"), origin
        assert located["cause"]["kind"] == "op" and "x[4, 0, 0] = 0" in located["cause"]["summary"], located[
            "cause"
        ]


def test_a_log_of_a_raw_weight_gone_negative_names_the_weight(tmp_path: Path) -> None:
    """A layer's learned noise scale ``alpha`` is a raw weight under ``add_loss(-log(alpha))``; an Adam step carries
    one unit below 0. The cause said "the Log op got 1 negative value in its input
    sequential_1/learned_gaussian_noise_1/Cast/ReadVariableOp:0", a name the user never wrote, and nothing of the
    weights the guard kept from before the failing step holding it too."""
    program = PROGRAMS / "cause_raw_scale_weight.py"
    findings = train_and_locate(tmp_path, program)
    cause = findings["cause"]
    assert cause["kind"] == "op", cause
    assert "from the weight sequential/learned_gaussian_noise/alpha (smallest -" in cause["summary"], cause
    assert "ReadVariableOp" not in cause["summary"], cause["summary"]
    assert cause["change"]["line"] == marked_line(program, "ORIGIN"), cause["change"]
    assert cause["change"]["what"].startswith("the weight alpha: keep it positive by construction"), cause[
        "change"
    ]


def test_a_log_of_a_variable_the_step_moves_itself_names_that_variable(tmp_path: Path) -> None:
    """A custom loop's noise scale ``sigma = tf.Variable(1.0)``, stepped by hand with assign_sub, went below 0: the
    cause named a Dense bias of the same size and sign ("from the weight sequential/dense_2/bias ... the
    optimizer's finite updates carried the weight there"), and a user would have softplus'ed that bias (s40b p9)."""
    program = PROGRAMS / "cause_stepped_variable_log.py"
    findings = train_and_locate(tmp_path, program)
    cause = findings["cause"]
    assert cause["kind"] == "op", cause
    assert "from the variable sigma (smallest -" in cause["summary"], cause["summary"]
    assert "the step's finite updates carried the variable there" in cause["summary"], cause["summary"]
    assert cause["change"]["line"] == marked_line(program, "ORIGIN"), cause["change"]
    assert cause["change"]["what"].startswith("the variable sigma: keep it positive by construction"), cause


def test_a_log_of_a_slice_of_a_learned_sigma_names_the_weight(tmp_path: Path) -> None:
    """Kendall et al.'s uncertainty weighting with one learned sigma per task, read as ``ops.log(sigma[0])``: the
    Log's input is a strided slice, and the cause said "keep it positive (an exp or softplus output), or clip it"
    without the weight; the clip, followed, pinned the loss at log(1e-7) with sigma at -1.2 (s40f p3)."""
    program = PROGRAMS / "cause_sliced_weight_log.py"
    findings = train_and_locate(tmp_path, program)
    cause = findings["cause"]
    assert cause["kind"] == "op", cause
    assert "from the weight custom_multi_loss_layer/sigma1 (smallest -" in cause["summary"], cause["summary"]
    assert cause["change"]["line"] == marked_line(program, "ORIGIN"), cause["change"]
    assert cause["change"]["what"].startswith("the weight sigma1: keep it positive by construction"), cause


def test_a_division_by_a_determinant_of_a_relu_head_names_the_relu(tmp_path: Path) -> None:
    """A covariance head's Cholesky diagonal from ``Dense(2, activation="relu")``: its 2x2 inverse divides by a det
    of 0 wherever the ReLU is. The change was "+ 1e-7 on the divisor", which, followed, moved the NaN to the log of
    the same det (s38b covnll). The ReLU head's construction is the change: softplus is never 0."""
    program = PROGRAMS / "cause_relu_cholesky_det.py"
    findings = train_and_locate(tmp_path, program)
    assert findings["origin"]["op"]["type"] == "RealDiv", findings["origin"]
    assert findings["origin"]["line"] == marked_line(program, "DIVIDE"), findings["origin"]
    cause = findings["cause"]
    relu = marked_line(program, "RELU")
    assert f"the divisor is made of a ReLU's output at line {relu}" in cause["summary"], cause["summary"]
    assert cause["change"]["line"] == relu, cause["change"]
    assert "tf.nn.softplus(x) + 1e-6" in cause["change"]["what"], cause["change"]
