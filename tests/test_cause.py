"""The cause classifier on hand-built findings and histories (no TensorFlow): each kind with its evidence and line
to change, an older bundle's history (step/loss/logged_loss only), the newer history keys, and the fixes that
match a cause on the change line's own text."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from pyadapter.cause import CauseContext, attach_cause, cause_of, classify
from pyadapter.cause.model import Cause
from pyadapter.cause.trend import fast_growth, growth, large_update
from pyadapter.findings import Finding, Findings, Frame, InputHealth, OpRef, TensorHealth
from pyadapter.fixes import apply_edits, cause_fixes

TRAIN = """\
import keras
import numpy as np
import tensorflow as tf


def load():
    table = np.genfromtxt("readings.csv", delimiter=",", dtype=np.float32)
    return table[:, :3], table[:, 3:]


class Pool(keras.layers.Layer):
    def call(self, x):
        return tf.exp(x)


def main():
    x, y = load()
    model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(4), Pool(), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.05, momentum=0.9), loss="mse")
    probs = model(x)
    loss = tf.math.log(probs)
    model.fit(x, y, batch_size=4, epochs=3, verbose=0)
"""
OPTIMIZER_LINE, READ_LINE, EXP_LINE, LOG_LINE, FIT_LINE, POOL_CALL_LINE = 19, 7, 13, 21, 22, 18


def write_program(tmp_path: Path) -> Path:
    program = tmp_path / "train.py"
    program.write_text(TRAIN)
    return program


def overflow_origin(
    program: Path, dtype: str = "float32", line: int = FIT_LINE, op: str = "MatMul"
) -> Finding:
    return Finding(
        file=str(program),
        line=line,
        role="origin",
        op=OpRef(f"sequential/dense_1/{op}", op),
        health=TensorHealth(dtype=dtype, size=32, pos_inf=6),
        inputs=[InputHealth("sub:0", TensorHealth(dtype=dtype, size=32, pos=32))],
    )


def log_origin(program: Path) -> Finding:
    return Finding(
        file=str(program),
        line=LOG_LINE,
        role="origin",
        op=OpRef("Log", "Log"),
        health=TensorHealth(dtype="float32", size=8, neg_inf=2),
        inputs=[InputHealth("probs:0", TensorHealth(dtype="float32", size=8, zero=2, pos=6))],
    )


def findings_of(origin: Finding | None, **bundle: object) -> Findings:
    return Findings(
        "bundle",
        "/captures/run-step17",
        origin,
        [origin] if origin else [],
        bundle={"step": 17, "epoch": 0, "batch_index": 17, **bundle},
    )


def batch_origin(program: Path, line: int, health: TensorHealth) -> Finding:
    """The step's first op on a batch that already held NaN/Inf (the iterator's output), at `line`."""
    return Finding(
        file=str(program),
        line=line,
        role="origin",
        op=OpRef("IteratorGetNext", "IteratorGetNext"),
        health=health,
    )


def diverging_history(last_step: int = 17) -> list[dict]:
    """An older bundle's history: loss and logged loss only; the loss falls, then grows x10 per step from step 10."""
    history = []
    for step in range(last_step + 1):
        loss = 500.0 / (step + 1) if step <= 10 else 500.0 / 11 * 10.0 ** (step - 10)
        entry = {"step": step, "loss": loss, "logged_loss": loss}
        if step == last_step:
            entry = {"step": step, "loss": None, "logged_loss": None, "loss_nonfinite": "inf"}
        history.append(entry)
    return history


def test_divergence_names_the_growth_and_the_optimizer_line(tmp_path: Path) -> None:
    program = write_program(tmp_path)
    context = CauseContext(
        history=diverging_history(),
        model_info={"optimizer": "SGD", "optimizers": ["SGD"]},
        entry_script=str(program),
    )
    cause = classify(findings_of(overflow_origin(program)), context)
    assert cause.kind == "divergence"
    assert (
        cause.evidence["series"] == "loss"
        and cause.evidence["start_step"] == 10
        and cause.evidence["steps"] == 6
    )
    assert abs(cause.evidence["rate_per_step"] - 10.0) < 0.01
    assert cause.evidence["learning_rate"] == 0.05 and cause.evidence["momentum"] == 0.9
    assert "x10 per step for 6 steps" in cause.summary and "0.05" in cause.summary
    assert cause.change is not None and (cause.change.file, cause.change.line) == (
        str(program),
        OPTIMIZER_LINE,
    )
    assert "learning rate 0.05" in cause.change.what and "0.005" in cause.change.what

    fixes = cause_fixes(TRAIN, cause)
    assert [f.title for f in fixes][:2] == [
        "lower the learning rate to 0.005 (a tenth of 0.05)",
        "clip the gradients: add clipnorm=1.0 to the optimizer",
    ]
    lowered = apply_edits(TRAIN, fixes[0].edits).splitlines()[OPTIMIZER_LINE - 1]
    assert "SGD(learning_rate=0.005, momentum=0.9)" in lowered
    clipped = apply_edits(TRAIN, fixes[1].edits).splitlines()[OPTIMIZER_LINE - 1]
    assert "SGD(learning_rate=0.05, momentum=0.9, clipnorm=1.0)" in clipped


def test_a_rate_from_a_config_dict_is_changed_in_the_dict(tmp_path: Path) -> None:
    """A research trainer reads its stage's rate from a dict of the program (``CONFIGS["main"]["lr"]``) and sets it
    after restoring a checkpoint (``.assign(self.cfg["lr"])``): the change named that assignment, "learning rate
    0.1 (self.optimizer.learning_rate set as it trains)", a line that writes no number and does not change as it
    trains. The dict's entry that writes the rate that ran is the line to change."""
    from pyadapter.capture.learning_rate import LearningRate

    program = tmp_path / "train.py"
    text = TRAIN.replace(
        '    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.05, momentum=0.9), loss="mse")\n',
        '    model.compile(optimizer=keras.optimizers.SGD(momentum=0.9), loss="mse")\n'
        '    model.optimizer.learning_rate.assign(CONFIGS[stage]["lr"])\n',
    ).replace(
        "def load():",
        'CONFIGS = {\n    "warmup": {"lr": 1e-3, "epochs": 2},\n    "main": {"lr": 1e-1, "epochs": 30},\n}\n'
        'stage = "main"\n\n\ndef load():',
    )
    program.write_text(text)
    line = next(n for n, t in enumerate(text.splitlines(), 1) if '"main": {"lr": 1e-1' in t)
    context = CauseContext(
        history=diverging_history(),
        model_info={"optimizer": "SGD", "optimizers": ["SGD"]},
        entry_script=str(program),
        learning_rate=LearningRate(float(np.float32(0.1))),
    )
    cause = classify(findings_of(overflow_origin(program)), context)
    assert cause.kind == "divergence", cause.summary
    assert cause.change is not None and (cause.change.file, cause.change.line) == (str(program), line), (
        cause.change
    )
    assert cause.change.what.startswith('learning rate 0.1 (CONFIGS["main"]["lr"])'), cause.change.what
    lowered = apply_edits(text, cause_fixes(text, cause)[0].edits).splitlines()[line - 1]
    assert '"main": {"lr": 0.01, "epochs": 30}' in lowered, lowered


@pytest.mark.parametrize(
    "argv", [["train.py", "--learning_rate=2.0"], ["train.py", "--lr", "2"], ["train.py"]]
)
def test_a_rate_given_on_the_command_line_is_named_with_its_flag(tmp_path: Path, argv: list[str]) -> None:
    """An absl/argparse script builds ``SGD(FLAGS.learning_rate)``: the line holds no number, and the divergence
    said "the learning rate of SGD". The rate the failing step used (recorded) and the flag that gave it are named."""
    from pyadapter.capture.learning_rate import LearningRate

    program = tmp_path / "train.py"
    program.write_text(TRAIN.replace("SGD(learning_rate=0.05, momentum=0.9)", "SGD(FLAGS.learning_rate)"))
    context = CauseContext(
        history=diverging_history(),
        model_info={"optimizer": "SGD", "optimizers": ["SGD"]},
        entry_script=str(program),
        learning_rate=LearningRate(2.0),
        argv=argv,
    )
    cause = classify(findings_of(overflow_origin(program)), context)
    assert cause.kind == "divergence" and "the run diverged at learning rate 2:" in cause.summary, (
        cause.summary
    )
    assert cause.change is not None and cause.change.line == OPTIMIZER_LINE
    flag = {1: "", 2: " --learning_rate=2.0", 3: " --lr 2"}[len(argv)].strip()
    given = f", given as {flag} on the command line" if flag else ""
    assert cause.change.what.startswith(f"learning rate 2 (SGD{given}): try 0.2"), cause.change.what


@pytest.mark.parametrize("op", ["SoftmaxCrossEntropyWithLogits", "MatMul"])
def test_a_softmax_cross_entropy_that_made_nan_of_diverged_logits_is_the_divergence(
    tmp_path: Path, op: str
) -> None:
    """The word2vec tutorial at SGD(102): the loss grew x15 per step for 30 steps, until the cross-entropy of logits
    near 1e38 made NaN (inf - inf where it subtracts their max), not Inf. A NaN counted as an overflow for sums of
    products only, so the cause was "op: the SoftmaxCrossEntropyWithLogits op: keep its inputs in its domain" at
    the fit line in one run of three, and "divergence" in the others, whose first op to overflow was a Sum."""
    program = write_program(tmp_path)
    context = CauseContext(
        history=diverging_history(),
        model_info={"optimizer": "SGD", "optimizers": ["SGD"]},
        entry_script=str(program),
    )
    origin = overflow_origin(program, op=op)
    origin.health = TensorHealth(dtype="float32", size=32, nan=10, pos=22)
    origin.inputs.append(InputHealth("labels:0", TensorHealth(dtype="float32", size=32, zero=24, pos=8)))
    cause = classify(findings_of(origin), context)
    assert cause.kind == "divergence", cause
    assert f"until {op} overflowed float32" in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == OPTIMIZER_LINE, cause.change


def test_a_rate_the_program_raised_over_the_window_names_the_schedule_s_rise(tmp_path: Path) -> None:
    """``LearningRateScheduler(lambda epoch, lr: lr * 1.5)`` (meant as a warm-up) with ReduceLROnPlateau: the run
    diverged at 0.166, and the change was "learning rate 0.166 (LearningRateScheduler): try 0.0166", a number for a
    lambda that writes none. The guard's window saw the rate rise (its search refused for it): that rise is named."""
    from pyadapter.capture.learning_rate import LearningRate

    program = write_program(tmp_path)
    context = CauseContext(
        history=diverging_history(),
        model_info={"optimizer": "SGD", "optimizers": ["SGD"]},
        entry_script=str(program),
        learning_rate=LearningRate(0.166),
        window_search={
            "steps": 12,
            "start_step": 5,
            "captured_learning_rate": 0.0493,
            "stopped": "the learning rate changed during the window (0.0493 at its start, step 5; 0.166 at the "
            "failing step): the program sets it as it trains, and the window replays at one rate: not searched",
        },
    )
    cause = classify(findings_of(overflow_origin(program)), context)
    assert cause.kind == "divergence", cause
    assert "after the program raised the rate x3.37 over the guard's window (0.0493 at step 5 to 0.166)" in (
        cause.summary
    ), cause.summary
    assert cause.change is not None and cause.change.what.startswith(
        "the schedule that sets it: it raised"
    ), cause.change.what
    # A rate that fell over the window (a decay) is no rise.
    context.learning_rate = LearningRate(0.03)
    assert "raised the rate" not in classify(findings_of(overflow_origin(program)), context).summary


def test_a_divergence_on_8_bit_pixels_that_only_tiny_rates_keep_finite_is_told_to_rescale_them(
    tmp_path: Path,
) -> None:
    """Digits read by image_dataset_from_directory, 0..255, into a Flatten-Dense regressor at SGD 0.01: the cause
    was the rate ("largest finite over the 3-step window: 3.45e-6; try 1.73e-6", which diverged at step 15), with
    "and scale the features" after it. Pixels of RMS 84 are below the RMS that puts scaling first, but a search
    that keeps the window finite only at a thousandth of the usual rate says the inputs are what is off."""
    from pyadapter.capture.learning_rate import LearningRate

    program = write_program(tmp_path)
    # Digits: dark background, strokes near 255 (RMS about 80).
    pixels = np.where(np.random.default_rng(0).random((8, 28, 28, 1)) < 0.1, 255.0, 0.0).astype("float32")
    search = {
        "steps": 3,
        "start_step": 0,
        "captured_learning_rate": 0.01,
        "largest_finite_learning_rate": 3.45e-6,
        "smallest_non_finite_learning_rate": 6.9e-6,
        "suggested_learning_rate": 1.73e-6,
    }
    context = CauseContext(
        history=diverging_history(),
        batch=(pixels, np.zeros((8, 1), np.float32)),
        model_info={"optimizer": "SGD", "optimizers": ["SGD"]},
        entry_script=str(program),
        learning_rate=LearningRate(0.01),
        window_search=search,
    )
    cause = classify(findings_of(overflow_origin(program)), context)
    assert cause.kind == "divergence", cause
    assert cause.change is not None and cause.change.what.startswith("scale the features (x from 0 to 255"), (
        cause.change
    )
    assert "8-bit pixels): add keras.layers.Rescaling(1.0 / 255)" in cause.change.what, cause.change
    # A search that found a rate near the usual one leaves the rate first.
    near = dataclasses.replace(
        context,
        window_search={**search, "largest_finite_learning_rate": 0.004, "suggested_learning_rate": 0.002},
    )
    cause = classify(findings_of(overflow_origin(program)), near)
    assert cause.change is not None and not cause.change.what.startswith("scale the features"), cause.change


@pytest.mark.parametrize(
    ("settings", "read"),
    [
        (  # nested, research-repo style
            "@dataclass\nclass OptimConfig:\n    learning_rate: float = 0.06\n\n\n@dataclass\nclass Experiment:\n"
            "    optim: OptimConfig = field(default_factory=OptimConfig)\n\n\ncfg = Experiment()\n",
            "cfg.optim.learning_rate",
        ),
        (  # an instance named as Hugging Face names its arguments
            "@dataclass\nclass TrainingArguments:\n    learning_rate: float = 0.06\n\n\n"
            "training_args = TrainingArguments()\n",
            "training_args.learning_rate",
        ),
    ],
)
def test_a_settings_default_is_found_however_the_instance_is_named_or_nested(
    tmp_path: Path, settings: str, read: str
) -> None:
    """`SGD(learning_rate=cfg.optim.learning_rate)` and `SGD(learning_rate=training_args.learning_rate)`: only a
    settings object under a known name with the rate one attribute down was followed to its class's default, so
    the optimizer's line (no number) was named and `replay --window` replayed the captured rate after the fix."""
    from pyadapter.capture.learning_rate import LearningRate

    program = tmp_path / "train.py"
    header = "from dataclasses import dataclass, field\n\n\n" + settings
    program.write_text(
        header + TRAIN.replace("SGD(learning_rate=0.05, momentum=0.9)", f"SGD(learning_rate={read})")
    )
    context = CauseContext(
        history=diverging_history(),
        model_info={"optimizer": "SGD", "optimizers": ["SGD"]},
        entry_script=str(program),
        learning_rate=LearningRate(0.06),
    )
    cause = classify(findings_of(overflow_origin(program, line=40)), context)
    assert cause.kind == "divergence", cause.summary
    assert cause.change is not None and cause.change.target == "config", cause.change
    assert program.read_text().splitlines()[cause.change.line - 1].strip() == "learning_rate: float = 0.06"


def test_an_lr_finders_divergence_names_the_line_that_raises_the_rate(tmp_path: Path) -> None:
    """A fastai-style LR finder: on_train_begin sets the starting rate (``= self.start_lr``), on_train_batch_end
    multiplies it each batch. The divergence at 4.31 named the first line (changing the start fixes nothing)."""
    from pyadapter.capture.learning_rate import LearningRate

    program = tmp_path / "train.py"
    finder = (
        "import keras\n\n\n"
        "class LRFinder(keras.callbacks.Callback):\n"
        "    def __init__(self, start_lr=1e-5, factor=1.5):\n"
        "        self.start_lr, self.factor = start_lr, factor\n\n"
        "    def on_train_begin(self, logs=None):\n"
        "        self.model.optimizer.learning_rate = self.start_lr\n\n"
        "    def on_train_batch_end(self, batch, logs=None):\n"
        "        lr = float(self.model.optimizer.learning_rate)\n"
        "        self.model.optimizer.learning_rate = lr * self.factor\n\n\n"
    )
    program.write_text(finder + TRAIN)
    context = CauseContext(
        history=diverging_history(),
        model_info={"optimizer": "SGD", "optimizers": ["SGD"]},
        entry_script=str(program),
        learning_rate=LearningRate(4.31),
    )
    cause = classify(findings_of(overflow_origin(program, line=FIT_LINE + 13)), context)
    assert cause.kind == "divergence" and cause.change is not None, cause.summary
    assert cause.change.line == 13, cause.change


@pytest.mark.parametrize("default", ["1e-4", "3e-6"])
def test_a_rate_read_from_a_settings_dataclass_is_changed_at_its_default(
    tmp_path: Path, default: str
) -> None:
    """A Lightning-style trainer: ``@dataclass class TrainConfig: learning_rate: float = 1e-4`` and
    ``SGD(learning_rate=cfg.learning_rate)``. The change named the optimizer's line, which writes no number, and
    `replay --window` then replayed the captured rate after the user had fixed the default ("still diverges"). The
    default is the line to change, found by the rate that ran, or (edited since: 3e-6) as the only one."""
    from pyadapter.capture.learning_rate import LearningRate
    from pyadapter.cause.change_line import rate_written_in_text

    program = tmp_path / "train.py"
    settings = (
        "from dataclasses import dataclass\n\n\n@dataclass\nclass TrainConfig:\n    epochs: int = 3\n"
        f"    learning_rate: float = {default}\n\n\ncfg = TrainConfig()\n"
    )
    program.write_text(
        settings
        + TRAIN.replace("SGD(learning_rate=0.05, momentum=0.9)", "SGD(learning_rate=cfg.learning_rate)")
    )
    context = CauseContext(
        history=diverging_history(),
        model_info={"optimizer": "SGD", "optimizers": ["SGD"]},
        entry_script=str(program),
        learning_rate=LearningRate(1e-4),
    )
    cause = classify(findings_of(overflow_origin(program, line=FIT_LINE + 10)), context)
    assert cause.kind == "divergence", cause.summary
    assert cause.change is not None and cause.change.line == 7 and cause.change.target == "config", (
        cause.change
    )
    assert "(read by train.py:" in cause.change.what and "as TrainConfig.learning_rate)" in cause.change.what
    assert rate_written_in_text(program.read_text().splitlines()[6]) == float(default)


@pytest.mark.parametrize(
    ("later", "rate_text"),
    [
        ("    model.optimizer.learning_rate = 0.5\n", "(model.optimizer.learning_rate)"),
        ("    model.optimizer.learning_rate.assign(0.5)\n", "(model.optimizer.learning_rate)"),
        ("    keras.backend.set_value(model.optimizer.lr, 0.5)\n", "(model.optimizer.lr)"),
        ("    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.5), loss='mse')\n", "(SGD)"),
    ],
)
def test_a_rate_changed_after_compile_is_the_one_named(tmp_path: Path, later: str, rate_text: str) -> None:
    """A resumed run or a notebook cell sets the rate again before the fit that diverges. The cause named the
    number written in the first SGD(...) (0.05) and its line, while the step ran at 0.5 (recorded): the line that
    set the rate it ran at is the one to change, and its quick fix lowers that number."""
    from pyadapter.capture.learning_rate import LearningRate

    program = tmp_path / "train.py"
    lines = TRAIN.splitlines(keepends=True)
    lines.insert(FIT_LINE - 1, later)  # just before the fit
    source = "".join(lines)
    program.write_text(source)
    context = CauseContext(
        history=diverging_history(),
        model_info={"optimizer": "SGD", "optimizers": ["SGD"]},
        entry_script=str(program),
        learning_rate=LearningRate(float(np.float32(0.5))),
    )
    cause = classify(findings_of(overflow_origin(program, line=FIT_LINE + 1)), context)
    assert cause.kind == "divergence" and "the run diverged at learning rate 0.5:" in cause.summary, (
        cause.summary
    )
    assert cause.change is not None and cause.change.line == FIT_LINE, (cause.change.line, cause.change.what)
    assert cause.change.what.startswith(f"learning rate 0.5 {rate_text}"), cause.change.what
    fixes = cause_fixes(source, cause)
    assert fixes and fixes[0].title == "lower the learning rate to 0.05 (a tenth of 0.5)", [
        f.title for f in fixes
    ]
    assert "0.05" in apply_edits(source, fixes[0].edits).splitlines()[FIT_LINE - 1]

    # The user lowered the number on that line since (0.14 for 0.5, still too high): the line that sets the rate
    # is still the one named, not SGD(...)'s, whose 0.05 the sentence called "learning rate 0.5 (SGD)"; and the
    # window's "rate your code sets now" reads the new number there.
    from pyadapter.fixes.cause import learning_rate_on_line

    edited = source.replace("0.5", "0.14", 1) if "compile" not in later else None
    if edited is not None:
        program.write_text(edited)
        cause = classify(findings_of(overflow_origin(program, line=FIT_LINE + 1)), context)
        assert cause.change is not None and cause.change.line == FIT_LINE, (
            cause.change.line,
            cause.change.what,
        )
        assert cause.change.what.startswith(f"learning rate 0.5 {rate_text}"), cause.change.what
        assert learning_rate_on_line(edited, cause.change.line) == 0.14
        # Edited back to the number SGD(...) starts from (0.05): as near to 0.5 as the construction's, and the later
        # line is still the one that set what ran (the tie went to the construction, and --window read it there).
        program.write_text(source.replace("0.5", "0.05", 1))
        cause = classify(findings_of(overflow_origin(program, line=FIT_LINE + 1)), context)
        assert cause.change is not None and cause.change.line == FIT_LINE, cause.change

    # A rate that no line writes (ReduceLROnPlateau lowered it): the optimizer's line, with the rate that ran.
    program.write_text(TRAIN)
    context.learning_rate = LearningRate(float(np.float32(0.0125)))
    cause = classify(findings_of(overflow_origin(program)), context)
    assert cause.change is not None and cause.change.line == OPTIMIZER_LINE
    assert "at learning rate 0.0125:" in cause.summary and cause.change.what.startswith(
        "learning rate 0.0125 (SGD"
    )


def test_newer_history_keys_are_used_when_present(tmp_path: Path) -> None:
    """The gradient norm grows while the (noisy) loss alone would not say so: the grad norm is the evidence."""
    program = write_program(tmp_path)
    history = [
        {
            "step": s,
            "loss": 3.0 + (s % 2),
            "logged_loss": 3.0,
            "grad_norm": 2.0 * 3.0**s,
            "weight_norm": 1.0,
            "update_ratio": None,
            "max_abs_output": None,
        }
        for s in range(12)
    ]
    history.append(
        {"step": 12, "loss": None, "loss_nonfinite": "nan", "grad_norm": None, "grad_norm_nonfinite": "inf"}
    )
    cause = classify(
        findings_of(overflow_origin(program)),
        CauseContext(history=history, entry_script=str(program), model_info={"optimizer": "SGD"}),
    )
    assert cause.kind == "divergence" and cause.evidence["series"] == "grad_norm"
    assert abs(cause.evidence["rate_per_step"] - 3.0) < 0.01 and cause.evidence["steps"] == 11
    assert "gradient norm grew x3 per step for 11 steps" in cause.summary


def test_a_power_with_a_positive_exponent_that_made_inf_overflowed(tmp_path: Path) -> None:
    """A hand-written RK4 loop (a neural ODE's ``func(y ** 3)``) integrated its state past float32: Pow made +inf,
    its base (the loop's variable) unrecorded, its exponent 3. It said "a Pow op made NaN/Inf from finite inputs
    (while/pow/y:0: finite ...): keep its inputs in its domain"; x ** 3 has no domain to leave, it overflowed. A
    negative base under a fractional exponent (NaN) is still the domain's."""
    program = write_program(tmp_path)
    power = Finding(
        file=str(program),
        line=EXP_LINE,
        role="origin",
        op=OpRef("while/pow", "Pow"),
        health=TensorHealth(dtype="float32", size=40, pos_inf=2, neg=18, pos=20),
        inputs=[InputHealth("while/pow/y:0", TensorHealth(dtype="float32", size=1, pos=1))],
    )
    power.inputs.insert(0, InputHealth("while/Placeholder_1:0", None))
    cause = classify(findings_of(power), CauseContext(entry_script=str(program)))
    assert cause.kind == "op" and cause.evidence["overflow"] is True, cause
    assert "a Pow op overflowed on finite inputs" in cause.summary, cause.summary
    power.health = TensorHealth(dtype="float32", size=40, nan=3, neg=17, pos=20)
    power.inputs[1] = InputHealth("pow/y:0", TensorHealth(dtype="float32", size=1, pos=1))
    assert classify(findings_of(power), CauseContext(entry_script=str(program))).evidence["overflow"] is False


def test_zeros_raised_to_a_negative_power_name_the_isolated_nodes_way_out(tmp_path: Path) -> None:
    """A Kipf GCN's ``tf.pow(deg, -0.5)`` with no self-loops: 17 isolated nodes of degree 0 give +inf. It said "a
    Pow op made NaN/Inf from finite inputs ...: keep its inputs in its domain", naming neither 0 ** -0.5 nor a way
    out."""
    program = write_program(tmp_path)
    power = Finding(
        file=str(program),
        line=EXP_LINE,
        role="origin",
        op=OpRef("gcn/Pow", "Pow"),
        health=TensorHealth(dtype="float32", size=200, pos_inf=17, pos=183),
        inputs=[
            InputHealth("gcn/Reshape:0", TensorHealth(dtype="float32", size=200, zero=17, pos=183)),
            InputHealth("gcn/Pow/y:0", TensorHealth(dtype="float32", size=1, neg=1)),
        ],
    )
    cause = classify(findings_of(power), CauseContext(entry_script=str(program)))
    assert cause.summary.startswith("the Pow op raised 17 zeros to a negative power: 0 ** -p is inf"), (
        cause.summary
    )
    assert cause.change is not None and "add self-loops" in cause.change.what, cause.change


def test_an_overflow_without_growth_stays_an_op(tmp_path: Path) -> None:
    program = write_program(tmp_path)
    flat = [{"step": s, "loss": 1.0 + 0.01 * s, "logged_loss": 1.0} for s in range(20)]
    cause = classify(
        findings_of(overflow_origin(program, line=EXP_LINE, op="Exp")),
        CauseContext(history=flat, entry_script=str(program)),
    )
    assert cause.kind == "op" and cause.evidence["overflow"] is True
    assert cause.change is not None and cause.change.line == EXP_LINE
    # An exp overflows at 88.7, from no growth at all (logits / a temperature of 0.01): the way out is the stable
    # form, not "keep its values in range".
    assert "an Exp op overflowed float32 (exp(x) is Inf for x > 88.7)" in cause.summary, cause.summary
    assert cause.change.what.startswith("the exp: bound its input (tf.clip_by_value, or a tanh)"), (
        cause.change
    )
    assert "tf.reduce_logsumexp" in cause.change.what, cause.change
    # A log-sum-exp written out on the origin's line has one fix, said alone (it read "bound its input (a tanh or
    # a clip, as a flow's scale does), or ...").
    findings = findings_of(overflow_origin(program, line=EXP_LINE, op="Exp"))
    findings.extra["origin_code"] = "lse = tf.math.log(tf.reduce_sum(tf.exp(logits), axis=-1))  # ORIGIN"
    cause = classify(findings, CauseContext(history=flat, entry_script=str(program)))
    assert cause.change is not None and cause.change.what.startswith(
        "a log-sum-exp written out: tf.reduce_logsumexp(x, axis=...) computes log(sum(exp(x)))"
    ), cause.change


def test_a_determinant_that_overflows_while_a_negative_log_likelihood_falls_is_the_op(tmp_path: Path) -> None:
    """A Glow-style linear flow's ``log(abs(det(W)))`` on 64-D data: the loss fell from 58.8 through 0 to -28.8 in
    39 steps (the NLL improving), then det overflowed float32. The trend took the loss's magnitude and said "the loss
    rose x29.8 over 11 steps", and the change "keep its values in range". It is the determinant, whose log
    slogdet gives without forming it."""
    program = write_program(tmp_path)
    falling = [{"step": s, "loss": 58.8 - 2.25 * s} for s in range(39)]
    cause = classify(
        findings_of(overflow_origin(program, line=EXP_LINE, op="MatrixDeterminant")),
        CauseContext(history=falling, entry_script=str(program)),
    )
    assert "rose" not in cause.summary and "grew" not in cause.summary, cause.summary
    assert cause.summary.startswith("a MatrixDeterminant op overflowed float32"), cause.summary
    assert cause.change is not None and "tf.linalg.slogdet" in cause.change.what, cause.change


def test_a_loss_falling_without_bound_is_named_at_the_term_not_at_the_optimizer(tmp_path: Path) -> None:
    """A beta-VAE whose KL term had ``+ tf.exp(z_log_var)`` (a sign slip): its loss fell from 37 to -5e18 over 88
    steps, its weights' norm steady, until Adam's square of a gradient overflowed. The cause said "a Square op
    overflowed ... with no growth over the steps before" at the ``apply_gradients`` line. It is a loss without a
    lower bound, changed where the step's values first grew huge (the Exp of the KL term)."""
    program = write_program(tmp_path)
    history = [
        {
            "step": s,
            "loss": 37.0 - 2.0 * s if s < 20 else -(10.0 ** (s / 4.0)),
            "grad_norm": 10.0 * 1.6**s,
            "weight_norm": 15.4 + 0.01 * s,
        }
        for s in range(75)
    ]
    huge = {"file": str(program), "line": EXP_LINE, "op": "Exp", "largest": 3.07e20}
    origin = overflow_origin(program, line=FIT_LINE, op="Square")
    cause = classify(
        findings_of(origin, first_huge=huge), CauseContext(history=history, entry_script=str(program))
    )
    assert cause.summary.startswith("the loss fell without bound (37 at step 0 to -"), cause.summary
    assert "no growth" not in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == EXP_LINE, cause.change
    # A loss that grew in magnitude while positive is no such fall.
    rising = [{**h, "loss": abs(h["loss"]) + 40.0} for h in history]
    other = classify(
        findings_of(origin, first_huge=huge), CauseContext(history=rising, entry_script=str(program))
    )
    assert not other.summary.startswith("the loss fell without bound"), other.summary


def test_a_vae_whose_binary_cross_entropy_targets_run_to_255_is_told_to_scale_them(tmp_path: Path) -> None:
    """keras.io's VAE with its ``/ 255`` left out: the reconstruction term, ``binary_crossentropy(data,
    reconstruction)`` of targets up to 255, fell to -1e13 until the Sampling layer's exp overflowed. The cause said
    "often a sign slip ... in a KL term; check its signs" at the Sampling line, and the KL term was right."""
    program = tmp_path / "vae.py"
    program.write_text(
        "import keras\nfrom keras import ops\n\n\n"
        "def reconstruction_loss(data, reconstruction):\n"
        "    return ops.mean(ops.sum(keras.losses.binary_crossentropy(data, reconstruction), axis=(1, 2)))\n",
        encoding="utf-8",
    )
    history = [
        {"step": s, "loss": 2.4e4 - 1e4 * s if s < 20 else -(10.0 ** (s / 8.0)), "weight_norm": 40.0}
        for s in range(102)
    ]
    images = np.random.default_rng(0).integers(0, 256, size=(16, 28, 28, 1)).astype("float32")
    origin = overflow_origin(program, line=6, op="Exp")
    context = CauseContext(history=history, entry_script=str(program), batch=images, step=102)
    cause = classify(findings_of(origin, step=102), context)
    assert cause.kind == "data", cause
    assert (
        "the binary_crossentropy takes targets in [0, 1], and this batch's run from 0 to 255" in cause.summary
    ), cause.summary
    assert cause.change is not None and cause.change.line == 6, cause.change
    assert cause.change.what.startswith("the targets of the binary_crossentropy: scale them to [0, 1]")
    # Targets in [0, 1]: the loss's fall has another term to blame.
    cause = classify(findings_of(origin, step=102), dataclasses.replace(context, batch=images / 255.0))
    assert cause.summary.startswith("the loss fell without bound") and "check its signs" in cause.change.what


def test_a_ctc_loss_of_inf_is_a_label_too_long_for_its_frames_not_an_overflow(tmp_path: Path) -> None:
    """A Conv1D + GRU speech model whose 29-phone utterance (2 repeats) needs 31 frames of 30: ``tf.nn.ctc_loss``
    gave +inf, and the cause said "a CTCLoss op overflowed on finite inputs ...: keep its values in range"."""
    program = write_program(tmp_path)
    flat = [{"step": s, "loss": 40.0 - 0.1 * s} for s in range(27)]
    origin = overflow_origin(program, line=LOG_LINE, op="CTCLoss")
    cause = classify(findings_of(origin), CauseContext(history=flat, entry_script=str(program)))
    assert cause.summary.startswith("CTCLoss is +inf for a label no alignment fits"), cause.summary
    assert "overflowed" not in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == LOG_LINE
    assert cause.change.what.startswith("the labels or the frames"), cause.change


def test_a_log_of_one_minus_a_sigmoid_is_told_log_sigmoid_not_a_clamp(tmp_path: Path) -> None:
    """keras.io's DCGAN with a hand-written generator loss ``-log(1 - d_fake)`` on a sigmoid discriminator: the
    Log's input is "sub:0", and the words were "keep it in the domain (tf.math.log(tf.maximum(x, 1e-7)))". Followed,
    g_loss sat at 16.1181 for 6 epochs: clamped, the generator's gradient is 0. The scan saw the Sigmoid two ops up
    the Log; the stable form from the logits is the advice."""
    program = write_program(tmp_path)
    origin = log_origin(program)
    origin.inputs = [InputHealth("sub:0", TensorHealth(dtype="float32", size=64, zero=64))]
    findings = findings_of(origin)
    findings.extra["activation_into_log"] = {"op": "discriminator/dense/Sigmoid", "type": "Sigmoid"}
    cause = classify(findings, CauseContext(history=[], entry_script=str(program)))
    assert "1 - sigmoid(x) once x passes about 17" in cause.summary, cause.summary
    assert cause.change is not None and "tf.math.log_sigmoid(-x)" in cause.change.what, cause.change
    assert not cause.change.what.startswith("the Log's input: keep it in the domain"), cause.change


def test_a_log_of_a_sigmoid_in_the_row_of_a_large_amount_is_told_log_sigmoid(tmp_path: Path) -> None:
    """A fraud model's hand BCE ``log(sigmoid(logits))`` on dollar amounts: one row (an amount of 4924 among up to
    527) saturated the sigmoid, and the cause was "data: the record x[29, 0] = 4924: correct it or leave it out",
    a real transaction. The log of the sigmoid is what to compute from the logits."""
    from pyadapter.cause.rows import rows_of

    program = write_program(tmp_path)
    origin = log_origin(program)
    origin.inputs = [InputHealth("Sigmoid:0", TensorHealth(dtype="float32", size=128, zero=1, pos=127))]
    rng = np.random.default_rng(1)
    amounts = np.column_stack(
        [rng.lognormal(4.0, 0.8, 128), rng.integers(0, 24, 128), rng.uniform(0, 1, 128)]
    )
    amounts = amounts.astype(np.float32)
    amounts[29, 0] = 4924.42
    labels = np.zeros((128, 1), np.float32)
    per_row = np.ones((128, 1), np.float32)
    per_row[29] = -np.inf
    rows = rows_of(per_row, (amounts, labels))
    assert rows is not None and rows.outliers
    findings = findings_of(origin, bad_rows=rows.to_json())
    findings.extra["activation_into_log"] = {"op": "Sigmoid", "type": "Sigmoid"}
    context = CauseContext(history=[], batch=(amounts, labels), entry_script=str(program))
    cause = classify(findings, context)
    assert cause.kind == "op" and "made of a sigmoid" in cause.summary, cause
    assert cause.change is not None and "tf.math.log_sigmoid" in cause.change.what, cause.change


def test_a_log_of_a_relu_variance_head_is_told_softplus_at_the_relu(tmp_path: Path) -> None:
    """A Gaussian NLL ``0.5 * log(var) + (y - mu)**2 / (2 * var)`` with ``var = tf.nn.relu(raw_var)`` on the line
    above: "keep the Log's input in the domain (tf.math.log(tf.maximum(x, 1e-7)))", followed, NaN'd again at the
    division by the same var on the line. The ReLU's line is the change: softplus is never 0."""
    program = write_program(tmp_path)
    origin = log_origin(program)
    origin.inputs = [InputHealth("Relu:0 (tensor #2775)", TensorHealth(dtype="float32", size=128, zero=128))]
    findings = findings_of(origin)
    findings.extra["activation_into_log"] = {"op": "Relu", "type": "Relu", "file": str(program), "line": 3}
    cause = classify(findings, CauseContext(history=[], entry_script=str(program)))
    assert "its input is a ReLU's output at line 3, exactly 0 for every negative input" in cause.summary, (
        cause
    )
    assert cause.change is not None and cause.change.line == 3, cause.change
    assert "tf.nn.softplus(x) + 1e-6" in cause.change.what, cause.change
    # In an eager step (``run_functions_eagerly(True)`` left on) no scan looks upstream: the input's name says it.
    del findings.extra["activation_into_log"]
    cause = classify(findings, CauseContext(history=[], entry_script=str(program)))
    assert cause.change is not None and cause.change.what.startswith("the ReLU that makes it"), cause.change


def test_a_log_of_a_relu_output_layer_in_a_notebook_is_changed_at_the_layer(tmp_path: Path) -> None:
    """A notebook's registered Poisson loss ``log(y_pred)`` of ``Dense(1, activation="relu")``: the scan placed the
    ReLU at the kernel's file of the fit cell, line 1, and the change read "/tmp/ipykernel_23468/3539528791.py:1 ...
    a ReLU's output at line 1". The layer's construction in its cell is the change."""
    notebook = tmp_path / "tickets.ipynb"
    sources = [
        "import keras\nfrom keras import layers",
        'model = keras.Sequential([\n    keras.Input(shape=(10,)),\n    layers.Dense(32, activation="relu"),\n'
        '    layers.Dense(1, activation="relu"),\n])\nmodel.compile(optimizer="adam", loss=PoissonNLL())',
        "history = model.fit(x, y, batch_size=128, epochs=5)",
    ]
    cells = [
        {"cell_type": "code", "source": text, "metadata": {}, "outputs": [], "execution_count": n}
        for n, text in enumerate(sources, 1)
    ]
    notebook.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    origin = dataclasses.replace(log_origin(notebook), line=1, cell=2)
    origin.inputs = [
        InputHealth("sequential_1/dense_1_1/Relu:0", TensorHealth(dtype="float32", size=128, zero=120, pos=8))
    ]
    findings = findings_of(origin)
    findings.extra["activation_into_log"] = {
        "op": "sequential_1/dense_1_1/Relu",
        "type": "Relu",
        "file": "/tmp/ipykernel_23468/3539528791.py",
        "line": 1,
    }
    cause = classify(findings, CauseContext(history=[], entry_script=str(notebook)))
    assert "its input is a ReLU's output (Dense at cell 2, line 4)" in cause.summary, cause.summary
    assert cause.change is not None, cause
    assert (cause.change.file, cause.change.cell, cause.change.line) == (str(notebook), 1, 4), cause.change
    assert cause.change.what.startswith("the ReLU that makes it"), cause.change
    # The scan's records are mapped to cells as the origin is (s42e p5): the ReLU is then at the fit cell's line 1,
    # a line of the user's that holds no ReLU; the layer is still the change.
    findings.extra["activation_into_log"] |= {"file": str(notebook), "cell": 2, "line": 1}
    cause = classify(findings, CauseContext(history=[], entry_script=str(notebook)))
    assert cause.change is not None, cause
    assert (cause.change.file, cause.change.cell, cause.change.line) == (str(notebook), 1, 4), cause.change


def test_a_kl_divergence_written_out_of_a_histogram_with_zeros_is_told_xlogy(tmp_path: Path) -> None:
    """Label-distribution learning's ``tf.reduce_sum(p * tf.math.log(p / q), -1)`` with p a rating histogram that
    holds zeros: "keep it in the domain (tf.math.log(tf.maximum(x, 1e-7)))" named neither the 0 * -inf nor the
    form that means 0 * log(0) = 0. A log not multiplied by its own argument keeps the log's words."""
    program = write_program(tmp_path)
    origin = log_origin(program)
    origin.inputs = [
        InputHealth("compile_loss/kl/truediv:0", TensorHealth(dtype="float32", size=320, zero=112))
    ]
    findings = findings_of(origin)
    findings.extra["origin_code"] = "    return tf.reduce_sum(p * tf.math.log(p / q), axis=-1)"
    cause = classify(findings, CauseContext(history=[], entry_script=str(program)))
    assert "0 * -inf = NaN" in cause.summary, cause.summary
    assert cause.change is not None and "tf.math.xlogy(p, p / q)" in cause.change.what, cause.change
    findings.extra["origin_code"] = "    return tf.reduce_sum(w * tf.math.log(p / q), axis=-1)"
    cause = classify(findings, CauseContext(history=[], entry_script=str(program)))
    assert cause.change is not None and "xlogy" not in cause.change.what, cause.change


def test_a_smoothed_kl_written_as_a_difference_of_logs_is_told_xlogy_with_its_own_term(
    tmp_path: Path,
) -> None:
    """The Annotated Transformer's label smoothing, ``true_dist * (tf.math.log(true_dist) - log_probs)`` with the
    pad column's mass 0: the parenthesis hid the product from the xlogy words, and the clamp was given (a mini
    GPT's KL loss). The example is written with the line's own second term."""
    program = write_program(tmp_path)
    origin = log_origin(program)
    origin.inputs = [InputHealth("compile_loss/mul_2:0", TensorHealth(dtype="float32", size=4096, zero=2048))]
    findings = findings_of(origin)
    findings.extra["origin_code"] = (
        "    kl = tf.reduce_sum(true_dist * (tf.math.log(true_dist) - log_probs), axis=-1)"
    )
    cause = classify(findings, CauseContext(history=[], entry_script=str(program)))
    assert "0 * -inf = NaN" in cause.summary, cause.summary
    assert cause.change is not None, cause
    assert "tf.math.xlogy(true_dist, true_dist) - true_dist * log_probs" in cause.change.what, cause.change


@pytest.mark.parametrize("defaults", [False, True])
def test_a_log_of_a_csv_field_make_csv_dataset_read_as_0_changes_the_reader(
    tmp_path: Path, defaults: bool
) -> None:
    """tensorflow.org's "Load CSV data" with ``log(features["fare"])`` in a map and one fare missing:
    make_csv_dataset reads the empty field as 0, and the words called it "0 in valid records (a price...):
    log1p", which hides a missing value. The reader is the change; given column_defaults, it reads no 0 for
    an empty field, and the log's own words stand."""
    program = tmp_path / "load_csv.py"
    given = ", column_defaults=[0, 0.0, 0.0]" if defaults else ""
    program.write_text(
        "import tensorflow as tf\n"
        f"ds = tf.data.experimental.make_csv_dataset('titanic.csv', batch_size=32, label_name='survived'{given})\n"
        "def preprocess(features, label):\n"
        "    features['fare'] = tf.math.log(features['fare'])\n"
        "    return features, label\n"
        "model.fit(ds.map(preprocess))\n"
    )
    origin = Finding(
        file=str(program),
        line=4,
        role="origin",
        op=OpRef("Log", "Log", graph="Dataset_map_preprocess"),
        health=TensorHealth(dtype="float32", size=32, neg_inf=1, pos=31),
        inputs=[InputHealth("args_5:0", TensorHealth(dtype="float32", size=32, zero=1, pos=31))],
    )
    cause = classify(findings_of(origin), CauseContext(history=[], entry_script=str(program)))
    assert cause.change is not None
    if defaults:
        assert cause.change.line == 4 and "make_csv_dataset" not in cause.summary, cause
        return
    assert "make_csv_dataset reads an empty numeric field as 0" in cause.summary, cause.summary
    assert cause.kind == "data" and cause.change.line == 2, cause.change


@pytest.mark.parametrize(
    "line", ["tw = tf.math.log(box[2] / ANCHOR_W)", "fare = tf.math.log(features['fare'])"]
)
def test_a_log_in_a_dataset_map_is_the_datas_not_the_output_layers(tmp_path: Path, line: str) -> None:
    """An SSD-style target encoding in a tf.data map, ``log(box[2] / ANCHOR_W)``, and one box of width 0: the scan
    found the Huber loss's output layer, and the words said "the huber_loss loss took it from the model's output
    layer ... make its output positive", a layer whose output never was -inf (s40a p1). The log is the pipeline's;
    a box's size of 0 is a bad label (drop it), a fare of 0 may be a valid value (log1p), and both are said."""
    program = tmp_path / "train.py"
    program.write_text(
        "import tensorflow as tf\n"
        "def encode(box):\n"
        f"    {line}\n"
        "    return tw\n"
        "model = tf.keras.Sequential([tf.keras.layers.Dense(4)])\n"
        "model.fit(ds.map(encode))\n"
    )
    origin = Finding(
        file=str(program),
        line=3,
        role="origin",
        op=OpRef("Log", "Log", graph="Dataset_map_encode"),
        health=TensorHealth(dtype="float32", size=1, neg_inf=1),
        inputs=[InputHealth("truediv_2:0", TensorHealth(dtype="float32", size=1, zero=1))],
    )
    findings = findings_of(origin)
    findings.extra["origin_code"] = f"    {line}"
    findings.extra["loss_input_layer"] = {
        "line": 5,
        "file": str(program),
        "loss": "huber_loss",
        "what": "the line that builds its Dense layer",
    }
    cause = classify(findings, CauseContext(history=[], entry_script=str(program)))
    assert "output layer" not in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == 3, cause.change
    if "box" in line:
        assert "a box of width or height 0" in cause.change.what and "log1p" not in cause.change.what
    else:
        assert "tf.math.log1p(x)" in cause.change.what and "dataset.filter" in cause.change.what


@pytest.mark.parametrize("shared", [True, False])
def test_a_divisor_two_divisions_share_is_changed_where_it_is_made(tmp_path: Path, shared: bool) -> None:
    """keras.io's RetinaNet loss divides the class loss and the box loss by one ``normalizer`` (the positive
    anchors' count, 0 for an image without objects): "the division: tf.math.divide_no_nan(a, b)" at the first,
    followed, moved the NaN to the next line (s40a p3). Where the divisor is made is the change; a divisor
    divided by once keeps the division's own words."""
    program = tmp_path / "train.py"
    box = "reduce_sum(box_loss, axis=-1) / normalizer" if shared else "reduce_sum(box_loss, axis=-1)"
    program.write_text(
        "import tensorflow as tf\n"
        "class RetinaNetLoss(tf.keras.losses.Loss):\n"
        "    def call(self, y_true, y_pred):\n"
        "        clf_loss, box_loss, positive_mask = y_pred, y_pred, y_true\n"
        "        normalizer = tf.reduce_sum(positive_mask, axis=-1)\n"
        "        clf_loss = tf.reduce_sum(clf_loss, axis=-1) / normalizer\n"
        f"        box_loss = tf.{box}\n"
        "        return clf_loss + box_loss\n"
    )
    origin = Finding(
        file=str(program),
        line=6,
        role="origin",
        op=OpRef("compile_loss/RetinaNetLoss/truediv", "RealDiv", graph="train_step"),
        health=TensorHealth(dtype="float32", size=16, pos_inf=1, pos=15),
        inputs=[
            InputHealth("compile_loss/RetinaNetLoss/Sum_1:0", TensorHealth(dtype="float32", size=16, pos=16)),
            InputHealth(
                "compile_loss/RetinaNetLoss/Sum:0", TensorHealth(dtype="float32", size=16, zero=1, pos=15)
            ),
        ],
    )
    findings = findings_of(origin)
    findings.extra["origin_code"] = "        clf_loss = tf.reduce_sum(clf_loss, axis=-1) / normalizer"
    cause = classify(findings, CauseContext(history=[], entry_script=str(program)))
    assert cause.kind == "op" and cause.change is not None, cause
    if not shared:
        assert cause.change.line == 6 and "divides at line" not in cause.summary, cause
        return
    assert "normalizer divides at line 7 too" in cause.summary, cause.summary
    assert cause.change.line == 5, cause.change
    assert "normalizer = tf.maximum(tf.reduce_sum(positive_mask, axis=-1), 1.0)" in cause.change.what


def test_an_inf_column_of_features_summed_from_two_lists_is_changed_where_it_is_computed(
    tmp_path: Path,
) -> None:
    """A Kaggle notebook's engineered ratio ``df["GarageToBsmt"] = raw.GarageArea / raw.TotalBsmtSF`` (inf where the
    basement area is 0; pandas does not warn), its columns picked as ``features = num_cols + eng_cols`` after a
    ``df[num_cols] = ...`` standardization. The change was "filter non-finite records where the data is read
    (read_csv)", whose file holds none (s40c nb1): the sum of two lists named no columns, and ``df[num_cols] =``
    was read as an assignment of num_cols."""
    program = tmp_path / "house.py"
    program.write_text(
        "import numpy as np\n"
        "import pandas as pd\n"
        "df = pd.read_csv('train.csv')\n"
        "num_cols = ['LotArea', 'GrLivArea', 'TotalBsmtSF']\n"
        "df[num_cols] = (df[num_cols] - df[num_cols].mean()) / df[num_cols].std()\n"
        "raw = pd.read_csv('train.csv')\n"
        "df['GarageToBsmt'] = raw['GarageArea'] / raw['TotalBsmtSF']\n"
        "eng_cols = ['GarageToBsmt']\n"
        "features = num_cols + eng_cols\n"
        "X = df[features].values.astype('float32')\n"
        "tr, va = idx[:1600], idx[1600:]\n"
        "X_train, X_val = X[tr], X[va]\n"
        "model.fit(X_train, y_train, validation_data=(X_val, y_val))\n"
    )
    x = np.ones((8, 4), np.float32)
    x[6, 3] = np.inf
    context = CauseContext(batch=(x, np.zeros((8, 1), np.float32)), entry_script=str(program))
    cause = classify(
        findings_of(batch_origin(program, 13, TensorHealth(dtype="float32", size=32, pos_inf=1))), context
    )
    assert cause.kind == "data", cause
    assert cause.change is not None and cause.change.line == 7, cause.change
    assert cause.change.what.startswith("the computation of column 'GarageToBsmt' (column 3 of X_train)"), (
        cause
    )


@pytest.mark.parametrize(
    "line, floor",
    [
        ("    return tf.reduce_sum(bce * y_true) / n_pos", "tf.maximum(n_pos, 1.0)"),
        (
            "    loss = tf.reduce_sum(per_example * labelled) / tf.reduce_sum(labelled)",
            "tf.maximum(tf.reduce_sum(",
        ),
        ("    xn = x / scale", None),
    ],
)
def test_a_division_by_a_count_is_floored_at_1_not_at_an_epsilon(
    tmp_path: Path, line: str, floor: str | None
) -> None:
    """A loss normalized by the batch's positives (``/ n_pos``) or labelled rows: "a / tf.maximum(b, 1e-7)",
    followed, kept the loss finite and multiplied every batch without positives by 1e7 (val AUC 0.75 -> 0.63,
    s40c nb9). A count's floor is 1; a scale's keeps the epsilon."""
    program = tmp_path / "train.py"
    program.write_text(f"import tensorflow as tf\ndef loss_fn(y_true, y_pred):\n{line}\n")
    origin = Finding(
        file=str(program),
        line=3,
        role="origin",
        op=OpRef("truediv", "RealDiv", graph="train_step"),
        health=TensorHealth(dtype="float32", size=1, nan=1),
        inputs=[
            InputHealth("Sum:0", TensorHealth(dtype="float32", size=1, zero=1)),
            InputHealth("Sum_1:0", TensorHealth(dtype="float32", size=1, zero=1)),
        ],
    )
    cause = classify(findings_of(origin), CauseContext(history=[], entry_script=str(program)))
    assert cause.change is not None, cause
    if floor is None:
        assert "tf.maximum(b, 1e-7)" in cause.change.what, cause.change
        return
    assert cause.change.what.startswith(f"the division by a count: {floor}"), cause.change.what
    assert "a / tf.maximum(b, 1e-7)" not in cause.change.what


def test_a_kl_divergence_of_a_quotient_is_told_log_softmax_not_a_guard_of_the_division(
    tmp_path: Path,
) -> None:
    """keras.io's Distiller with a hand-written ``p_teacher * tf.math.log(p_teacher / p_student)`` on raw pixels:
    both softmaxes hold exact 0s, and the division's words (divide_no_nan, or a floor on p_student), followed, moved
    the NaN to the same line's 0 * log(0) (s40f p1)."""
    program = write_program(tmp_path)
    origin = Finding(
        file=str(program),
        line=FIT_LINE,
        role="origin",
        op=OpRef("truediv", "RealDiv", graph="train_step"),
        health=TensorHealth(dtype="float32", size=640, nan=495, pos=145),
        inputs=[
            InputHealth("Softmax:0", TensorHealth(dtype="float32", size=640, zero=555, pos=85)),
            InputHealth("Softmax_1:0", TensorHealth(dtype="float32", size=640, zero=495, pos=145)),
        ],
    )
    findings = findings_of(origin)
    findings.extra["origin_code"] = (
        "        kl = tf.reduce_sum(p_teacher * tf.math.log(p_teacher / p_student), axis=1)"
    )
    cause = classify(findings, CauseContext(history=[], entry_script=str(program)))
    assert cause.change is not None and cause.change.what.startswith("the KL divergence: p * log(p / q)"), (
        cause
    )
    assert "tf.nn.log_softmax" in cause.change.what and "divide_no_nan" not in cause.change.what


def test_a_division_by_a_parsed_feature_defaulted_to_0_changes_the_default(tmp_path: Path) -> None:
    """TFRecord shards, one of which lacks "rooms", parsed with ``FixedLenFeature([], tf.float32,
    default_value=0.0)``: ``ex["sqft"] / ex["rooms"]`` is inf for those records, and the division's floor, followed,
    made the feature sqft x 1e7 for a quarter of the data (loss 2.4e12, s40d p2). The default is the change."""
    program = tmp_path / "train.py"
    program.write_text(
        "import tensorflow as tf\n"
        "FEATURES = {\n"
        "    'sqft': tf.io.FixedLenFeature([], tf.float32),\n"
        "    'rooms': tf.io.FixedLenFeature([], tf.float32, default_value=0.0),\n"
        "}\n"
        "def parse(record):\n"
        "    ex = tf.io.parse_single_example(record, FEATURES)\n"
        "    return ex['sqft'] / ex['rooms']\n"
    )
    origin = Finding(
        file=str(program),
        line=8,
        role="origin",
        op=OpRef("truediv", "RealDiv", graph="Dataset_map_parse"),
        health=TensorHealth(dtype="float32", size=1, pos_inf=1),
        inputs=[
            InputHealth(
                "ParseSingleExample/ParseExample/ParseExampleV2:0",
                TensorHealth(dtype="float32", size=1, pos=1),
            ),
            InputHealth(
                "ParseSingleExample/ParseExample/ParseExampleV2:1",
                TensorHealth(dtype="float32", size=1, zero=1),
            ),
        ],
    )
    findings = findings_of(origin)
    findings.extra["origin_code"] = "    return ex['sqft'] / ex['rooms']"
    cause = classify(findings, CauseContext(history=[], entry_script=str(program)))
    assert cause.kind == "data", cause
    assert "the parsed feature 'rooms', whose default_value=0 (train.py:4)" in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == 4, cause.change


def test_a_step_given_its_model_first_names_its_arrays_as_features_and_targets(tmp_path: Path) -> None:
    """tensorflow.org's ``train(model, x, y, learning_rate)`` with square feet in raw units: the step's first two
    arguments, the model and x, were read as features and targets ("on unscaled targets (x from 529 ..."), and the
    features' scale was never named (s40b p7). The arrays are the step's x and y."""
    from pyadapter.capture.structure import ObjectArgument

    program = tmp_path / "train.py"
    program.write_text(
        "import tensorflow as tf\n"
        "from pyadapter import guard_step\n"
        "def train(model, x, y, learning_rate):\n"
        "    with tf.GradientTape() as t:\n"
        "        current_loss = tf.reduce_mean(tf.square(y - model(x)))\n"
        "    return current_loss\n"
        "train = guard_step(train)\n"
    )
    sqft = np.linspace(529, 3420, 100, dtype=np.float32)
    price = np.linspace(105, 544, 100, dtype=np.float32)
    rising = [{"step": s, "loss": 5.7e5 * 72.0**s, "grad_norm": 1e3 * 72.0**s} for s in range(16)]
    context = CauseContext(
        history=rising,
        entry_script=str(program),
        step=16,
        batch={"args": (ObjectArgument("MyModel"), sqft, price), "kwargs": {"learning_rate": 1e-6}},
        step_function={"qualname": "train", "file": str(program)},
    )
    origin = overflow_origin(program, line=5, op="Square")
    cause = classify(findings_of(origin, step=16), context)
    assert "on unscaled features (x from 529 to 3.42e+03" in cause.summary, cause.summary
    assert "unscaled targets (x" not in cause.summary, cause.summary


def test_an_inf_column_of_a_keyed_input_names_the_column_a_pandas_division_made(tmp_path: Path) -> None:
    """``{"num": num, ...}`` after ``num = train[num_cols].values``, its column 2 ``fare / family_size`` with a family
    size of 0 (pandas does not warn): the change was read_csv, whose file holds no inf (s40d p9)."""
    program = tmp_path / "survival.py"
    program.write_text(
        "import pandas as pd\n"
        "import tensorflow as tf\n"
        "train = pd.read_csv('passengers.csv')\n"
        "train['family_size'] = train.sibsp + train.parch\n"
        "train['fare_per_person'] = train.fare / train.family_size\n"
        "num_cols = ['age', 'fare', 'fare_per_person']\n"
        "num = train[num_cols].values.astype('float32')\n"
        "inputs = {'num': num, 'embarked': train.embarked.values}\n"
        "train_ds = tf.data.Dataset.from_tensor_slices((inputs, train.survived.values)).batch(32)\n"
        "model.fit(train_ds, epochs=5)\n"
    )
    num = np.ones((8, 3), np.float32)
    num[3, 2] = np.inf
    batch = ({"num": num, "embarked": np.array([b"S"] * 8)}, np.zeros((8,), np.float32))
    context = CauseContext(batch=batch, entry_script=str(program))
    cause = classify(
        findings_of(batch_origin(program, 10, TensorHealth(dtype="float32", size=24, pos_inf=1))), context
    )
    assert cause.kind == "data", cause
    assert cause.change is not None and cause.change.line == 5, cause.change
    assert cause.change.what.startswith("the computation of column 'fare_per_person'"), cause.change


def test_an_inf_target_shifted_from_a_pct_change_names_the_pct_change(tmp_path: Path) -> None:
    """A forecaster's target ``df["target"] = df["vol_chg"].shift(-1)`` after ``df["vol_chg"] =
    df["volume"].pct_change()``, a halted session's volume of 0 making +inf: the change was read_csv, whose file
    holds no inf (s40e p4). The column the target is made of is computed with the pct_change."""
    program = tmp_path / "forecast.py"
    program.write_text(
        "import pandas as pd\n"
        "df = pd.read_csv('bars.csv')\n"
        "df['vol_chg'] = df['volume'].pct_change()\n"
        "df['target'] = df['vol_chg'].shift(-1)\n"
        "df = df.dropna()\n"
        "X = df[['close']].to_numpy('float32')\n"
        "y = df['target'].to_numpy('float32')[:, None]\n"
        "model.fit(X, y, batch_size=64)\n"
    )
    y = np.zeros((64, 1), np.float32)
    y[50, 0] = np.inf
    context = CauseContext(batch=(np.ones((64, 1), np.float32), y), entry_script=str(program))
    cause = classify(
        findings_of(batch_origin(program, 8, TensorHealth(dtype="float32", size=64, pos_inf=1))), context
    )
    assert cause.kind == "data", cause
    assert cause.change is not None and cause.change.line == 3, cause.change
    assert cause.change.what.startswith("the computation of column 'vol_chg' (which column 'target'"), cause


def test_a_log_of_negatives_a_linear_layer_made_after_a_relu_is_not_the_relus(tmp_path: Path) -> None:
    """A Poisson NLL of a rate head ``Dense(1)`` (no activation) after ``Dense(64, activation="relu")``: the scan
    found the ReLU three ops up the log's input (Add <- MatMul <- Relu) and the change was that hidden layer,
    "exactly 0 for every negative input", of an input that held negatives, which no ReLU makes. Followed, the run
    still went NaN. The log's own words (keep it positive) stand."""
    program = write_program(tmp_path)
    origin = log_origin(program)
    origin.inputs = [InputHealth("dense_2/Add:0", TensorHealth(dtype="float32", size=64, neg=25, pos=39))]
    findings = findings_of(origin)
    findings.extra["activation_into_log"] = {
        "op": "dense_1/Relu",
        "type": "Relu",
        "file": str(program),
        "line": 3,
    }
    cause = classify(findings, CauseContext(history=[], entry_script=str(program)))
    assert "ReLU" not in cause.summary, cause.summary
    assert cause.change is not None and not cause.change.what.startswith("the ReLU that makes it"), (
        cause.change
    )
    assert "keep it positive" in cause.change.what, cause.change


def test_a_log_of_an_underflowed_exp_is_told_its_stable_form(tmp_path: Path) -> None:
    """The log of exps that underflowed to 0: a mixture's ``log(sum(pi * exp(...)))`` is told logsumexp; a softmax
    written by hand, ``log(e / sum(e))`` (a text classifier's own cross-entropy), was told the same
    "tf.reduce_logsumexp(log_weights + log_terms)", which fits no line of it: it is told log_softmax."""
    program = write_program(tmp_path)

    def cause_for(input_name: str) -> str:
        origin = log_origin(program)
        origin.inputs = [InputHealth(input_name, TensorHealth(dtype="float32", size=8, zero=1, pos=7))]
        findings = findings_of(origin)
        findings.extra["zeros_from_exp"] = {"line": EXP_LINE}
        cause = classify(findings, CauseContext(history=[], entry_script=str(program)))
        assert cause.summary.startswith(f"the Log op got 1 zero from the exp at line {EXP_LINE}"), (
            cause.summary
        )
        assert cause.change is not None
        return cause.change.what

    assert cause_for("compile_loss/cce_loss/truediv:0").startswith(
        "the log of a softmax written by hand: take tf.nn.log_softmax(logits)"
    )
    assert cause_for("mdn_loss/Sum:0").startswith("the log of a sum of exps: compute it in log space")


def test_a_log_of_an_underflowed_exp_is_told_the_log_space_form_of_what_lies_between(tmp_path: Path) -> None:
    """A Cox model's ``log(cumsum(exp(risk)))`` was told ``tf.reduce_logsumexp``: followed, it trained a softmax over
    the whole batch, not the risk sets (no error, a wrong objective); it is ``tf.math.cumulative_logsumexp``. A
    Poisson loss's log of the rate ``exp(out)`` itself is told to use the exponent."""
    program = write_program(tmp_path)

    def change_for(log_of: str) -> str:
        origin = log_origin(program)
        origin.inputs = [InputHealth("Cumsum:0", TensorHealth(dtype="float32", size=8, zero=3, pos=5))]
        findings = findings_of(origin)
        findings.extra["zeros_from_exp"] = {"line": EXP_LINE, "zeros": 3, "log_of": log_of}
        cause = classify(findings, CauseContext(history=[], entry_script=str(program)))
        assert cause.kind == "op" and cause.change is not None, cause
        return cause.change.what

    assert "tf.math.cumulative_logsumexp(x)" in change_for("Cumsum")
    assert "reduce_logsumexp" not in change_for("Cumsum")
    assert change_for("Exp").startswith("the log of an exp: use the exponent itself")
    assert change_for("Sum").startswith("the log of a sum of exps: compute it in log space")


def test_a_divergence_that_ends_in_a_log_of_an_underflowed_exp_is_a_divergence(tmp_path: Path) -> None:
    """A Poisson regression on counts of 1e5 at a rate too high: the updates drove the output to -1e10, the rate
    ``exp(out)`` underflowed to 0 and the loss's log of it made -inf. It was "the log of a sum of exps: compute it in
    log space" (no sum in the code), though the history showed an update 1e10 times the weights; followed, the run
    met the same divergence one step later at the exp's overflow. It is a divergence at the rate's line."""
    program = write_program(tmp_path)
    origin = log_origin(program)
    origin.inputs = [InputHealth("Exp:0", TensorHealth(dtype="float32", size=8, zero=8))]
    findings = findings_of(origin)
    findings.extra["zeros_from_exp"] = {"line": EXP_LINE, "zeros": 8, "log_of": "Exp"}
    history = [
        {"step": 0, "loss": 9.6e4, "grad_norm": 2.1e6, "weight_norm": 4.2, "update_ratio": 0.05},
        {"step": 1, "loss": 3.1e9, "grad_norm": 4.4e9, "weight_norm": 2.2e5, "update_ratio": 5.2e4},
        {"step": 2, "loss": 2.0e15, "grad_norm": 7.8e14, "weight_norm": 7.8e10, "update_ratio": 1.1e10},
        {"step": 3, "loss": None, "loss_nonfinite": "inf", "grad_norm": None, "grad_norm_nonfinite": "nan"},
    ]
    cause = classify(findings, CauseContext(history=history, entry_script=str(program)))
    assert cause.kind == "divergence", cause
    assert f"until the exp at line {EXP_LINE} underflowed to 0 in float32 and the Log op took its log" in (
        cause.summary
    ), cause.summary
    assert cause.change is not None and cause.change.line == OPTIMIZER_LINE, cause.change
    # Without the history's growth the same log of an underflowed exp stays the op's own cause.
    assert classify(findings, CauseContext(history=history[:1], entry_script=str(program))).kind == "op"


def test_an_outlier_in_the_batch_before_the_failing_step_is_the_record_not_the_rate(tmp_path: Path) -> None:
    """K-fold cross-validation of sales with one target of 1e12: the fold that first trains on it stops at step 10,
    on a clean batch, after step 9's batch (the one holding 1e12) made an update that drove the weights out. It was
    "divergence at learning rate 0.001 ... no rate down to 2.44e-7 kept the window finite, or clip the gradients";
    the window's batches, which the bundle holds, name the record."""
    program = write_program(tmp_path)
    origin = overflow_origin(program, op="Square")
    history = [
        {"step": s, "loss": 1.1, "grad_norm": 0.9, "weight_norm": 6.0, "update_ratio": 0.01} for s in range(9)
    ]
    history += [
        {"step": 9, "loss": 3.1e22, "grad_norm": 3.1e11, "weight_norm": 6.1, "update_ratio": 0.02},
        {"step": 10, "loss": None, "loss_nonfinite": "inf", "grad_norm": None, "grad_norm_nonfinite": "inf"},
    ]
    rng = np.random.default_rng(0)

    def batch(outlier: bool) -> tuple[np.ndarray, np.ndarray]:
        y = rng.normal(2.0, 1.0, size=32).astype("float32")
        if outlier:
            y[17] = 1e12
        return rng.normal(size=(32, 4)).astype("float32"), y

    context = CauseContext(
        history=history,
        batch=batch(False),
        step=10,
        entry_script=str(program),
        recent_batches=[(7, batch(False)), (8, batch(False)), (9, batch(True))],
    )
    cause = classify(findings_of(origin, step=10), context)
    assert cause.kind == "data", cause
    assert cause.summary.startswith(
        "the batch of step 9, before the failing one, held one value far outside"
    ), cause.summary
    assert "y[17] = 1e+12" in cause.summary, cause.summary
    assert cause.change is not None and "in the batch of step 9" in cause.change.what, cause.change
    # Where the data is read (np.genfromtxt), as for a record of the failing batch: not the overflowing op's line,
    # "where the data is read" said at a Dense layer.
    assert cause.change.line == READ_LINE, cause.change
    # Without the outlier in the batches before, the same overflow is the divergence it was.
    context.recent_batches = [(7, batch(False)), (8, batch(False)), (9, batch(False))]
    assert classify(findings_of(origin, step=10), context).kind == "divergence"


def test_an_overflow_after_one_update_at_a_rate_far_too_high_is_the_rate(tmp_path: Path) -> None:
    """keras.io's VAE compiled with ``Adam(learning_rate=1.0)``: an exp overflowed at step 1, after one update. It
    was "the exp: bound its input (tf.clip_by_value, or a tanh)"; clipped at both exps, the model stayed finite and
    learned nothing, and the rate alone at 1e-3 trained. A rate 1000x Adam's usual is the line to change."""
    from pyadapter.capture.learning_rate import LearningRate

    program = tmp_path / "vae.py"
    program.write_text(TRAIN.replace("SGD(learning_rate=0.05, momentum=0.9)", "Adam(learning_rate=1.0)"))
    origin = overflow_origin(program, op="Exp")
    history = [
        {"step": 0, "loss": 543.2, "grad_norm": 330.8, "weight_norm": 201.1},
        {"step": 1, "loss": None, "loss_nonfinite": "nan", "grad_norm": None, "grad_norm_nonfinite": "nan"},
    ]
    context = CauseContext(
        history=history,
        model_info={"optimizer": "Adam"},
        step=1,
        entry_script=str(program),
        learning_rate=LearningRate(1.0),
    )
    cause = classify(findings_of(origin, step=1), context)
    assert "the learning rate 1 is 1000x Adam's usual 0.001" in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == OPTIMIZER_LINE, cause.change
    assert cause.change.what.startswith("learning rate 1 (Adam): 1000x its usual 0.001; try 0.001"), (
        cause.change
    )
    # The rows the overflow reached first are no records to look at (an LSTM at RMSprop(0.3)).
    from pyadapter.cause.rows import rows_of

    per_row = np.ones((8, 1), np.float32)
    per_row[[1, 5]] = np.inf
    rows = rows_of(per_row, (np.zeros((8, 2), np.float32), np.zeros((8, 1), np.float32)))
    assert rows is not None
    cause = classify(findings_of(origin, step=1, bad_rows=rows.to_json()), context)
    assert "the learning rate 1 is 1000x" in cause.summary and "of the batch only" not in cause.summary, cause
    # At Adam's own rate the same overflow is the exp's.
    context.learning_rate = LearningRate(0.001)
    cause = classify(findings_of(origin, step=1), context)
    assert cause.change is not None and cause.change.what.startswith("the exp"), cause.change


def test_an_exp_overflow_on_an_ordinary_row_too_is_the_features_scale_not_the_outlier_record(
    tmp_path: Path,
) -> None:
    """A Gaussian NLL's ``tf.exp(-log_var)`` on returns in basis points overflowed at step 0 in rows 11 and 199; row
    199 holds the crash day's -1150, and the cause was "the record x[199, 9] = -1150: correct it or leave it out".
    Followed, it overflowed at step 0 again: row 11 is ordinary, and every row's scale is the cause (s40e p7)."""
    from pyadapter.cause.rows import rows_of

    program = write_program(tmp_path)
    rng = np.random.default_rng(0)
    x = rng.normal(0, 60, size=(256, 10)).astype(np.float32)
    x[199, 9] = -1150.0
    per_row = np.ones((256, 1), np.float32)
    per_row[[11, 199]] = np.inf
    batch = (x, np.zeros((256, 1), np.float32))
    rows = rows_of(per_row, batch)
    assert rows is not None and [o.element.row for o in rows.outliers] == [199], rows
    origin = overflow_origin(program, op="Exp")
    context = CauseContext(
        history=[], entry_script=str(program), step=0, batch=batch, model_info={"optimizer": "Adam"}
    )
    findings = findings_of(origin, step=0, bad_rows=rows.to_json())
    findings.extra["origin_code"] = (
        "    return tf.reduce_mean(0.5 * log_var + 0.5 * tf.square(y_true - mu) * tf.exp(-log_var))"
    )
    cause = classify(findings, context)
    assert "x[199, 9] = -1150: correct it" not in str(cause.change), cause
    assert "unscaled features" in cause.summary, cause.summary
    # A Gaussian NLL's log-variance head, not a count likelihood's rate ("a count likelihood needs the counts").
    assert cause.change is not None and "the log-variance head" in cause.change.what, cause.change
    assert "count" not in cause.change.what, cause.change


def test_an_outlier_target_of_a_dict_names_the_line_that_set_it(tmp_path: Path) -> None:
    """A multi-output fit's ``{"price": price, ...}`` targets, six of them the export's -1 sentinel set at
    ``price[...] = -1.0``: the record was named, but "where the data is read" named no line (s40f p2)."""
    from pyadapter.cause.rows import rows_of

    program = tmp_path / "train.py"
    program.write_text(
        "import numpy as np\n"
        "import tensorflow as tf\n"
        "X = rng.normal(size=(6000, 12)).astype('float32')\n"
        "price = np.exp(1.0 + X @ w).astype('float32')\n"
        "price[rng.choice(6000, 6, replace=False)] = -1.0\n"
        "def rmsle(y_true, y_pred):\n"
        "    return tf.sqrt(tf.reduce_mean(tf.square(tf.math.log(y_pred + 1.0) - tf.math.log(y_true + 1.0))))\n"
        "model.fit({'features': X}, {'price': price, 'sold_fast': sold_fast})\n"
    )
    price = np.linspace(1.4, 4.2, 32, dtype=np.float32)
    price[26] = -1.0
    batch = (
        {"features": np.ones((32, 12), np.float32)},
        {"price": price, "sold_fast": np.zeros(32, np.float32)},
    )
    per_row = np.ones((32,), np.float32)
    per_row[26] = -np.inf
    rows = rows_of(per_row, batch)
    assert rows is not None and rows.outliers, rows
    origin = log_origin(program)
    origin.line = 7
    origin.inputs = [InputHealth("add_1:0", TensorHealth(dtype="float32", size=32, zero=1, pos=31))]
    context = CauseContext(history=[], entry_script=str(program), batch=batch)
    cause = classify(findings_of(origin, bad_rows=rows.to_json()), context)
    assert cause.kind == "data", cause
    assert cause.change is not None and "where the data is read (train.py:5)" in cause.change.what, (
        cause.change
    )


def test_a_fit_called_again_after_a_stop_at_step_1_is_the_rate_not_the_initial_weights(
    tmp_path: Path,
) -> None:
    """keras.io's character LSTM calls ``model.fit(epochs=1)`` in a loop: at ``RMSprop(0.1)`` the first fit stopped at
    step 1, and the next fits, each with a new NanGuard, stopped at their first batch with "a Square op overflowed
    ... at the run's first steps ... point at unscaled inputs or initial weights ... keep its values in range" at
    the fit line. The optimizer's count (step 1) says one update of the earlier fit moved those weights: the rate
    100x RMSprop's usual is the change."""
    from pyadapter.capture.learning_rate import LearningRate

    program = tmp_path / "lstm.py"
    program.write_text(TRAIN.replace("SGD(learning_rate=0.05, momentum=0.9)", "RMSprop(learning_rate=0.1)"))
    origin = overflow_origin(program, op="Square")
    history = [{"step": 1, "loss": None, "loss_nonfinite": "inf", "weight_norm": 26.5, "max_abs_output": 1.0}]
    context = CauseContext(
        history=history,
        model_info={"optimizer": "RMSprop", "first_step": 1},
        step=1,
        epoch=0,
        batch_index=0,
        entry_script=str(program),
        learning_rate=LearningRate(0.1),
    )
    cause = classify(findings_of(origin, step=1), context)
    assert (
        "at this fit's first step, from weights that 1 update of an earlier fit had moved" in cause.summary
    ), cause.summary
    assert "initial weights" not in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == OPTIMIZER_LINE, cause.change
    assert cause.change.what.startswith("learning rate 0.1 (RMSprop): 100x its usual 0.001"), cause.change


def test_a_divergence_that_ends_dividing_by_a_saturated_softplus_is_the_divergence(tmp_path: Path) -> None:
    """A Bayes-by-backprop layer's KL ``log(PRIOR / sigma)`` with ``sigma = softplus(rho)``: the loss grew x10 per
    step until the updates drove rho so far below 0 that softplus was 0 in float32, and the cause was "the RealDiv
    op divided by 7 zeros ... tf.math.divide_no_nan", a NaN moved one op on. The growth is the cause."""
    program = write_program(tmp_path)
    origin = Finding(
        file=str(program),
        line=LOG_LINE,
        role="origin",
        op=OpRef("sequential_1/bayesian_dense_1/truediv", "RealDiv"),
        health=TensorHealth(dtype="float32", size=64, pos_inf=7, pos=57),
        inputs=[
            InputHealth(
                "sequential_1/bayesian_dense_1/Const:0", TensorHealth(dtype="float32", size=1, pos=1)
            ),
            InputHealth(
                "sequential_1/bayesian_dense_1/Softplus:0",
                TensorHealth(dtype="float32", size=64, zero=7, pos=57),
            ),
        ],
    )
    context = CauseContext(
        history=diverging_history(),
        model_info={"optimizer": "SGD", "optimizers": ["SGD"]},
        entry_script=str(program),
        step=17,
    )
    cause = classify(findings_of(origin), context)
    assert cause.kind == "divergence", cause
    assert (
        "until the softplus sequential_1/bayesian_dense_1/Softplus:0 saturated to 0 in float32"
        in cause.summary
    )
    assert cause.change is not None and cause.change.line == OPTIMIZER_LINE, cause.change


def test_a_float16_overflow_at_a_rate_far_too_high_is_the_rate_not_float32(tmp_path: Path) -> None:
    """keras.io's image classifier under ``mixed_float16`` at ``Adam(3e-1)``: the LossScaleOptimizer skipped four
    steps of inf gradients, four updates grew the weights x2.5, and a Conv2D overflowed float16. The cause was
    "precision ... keep this layer in float32", which moved the overflow to the next cast; the rate, 300x Adam's
    usual (the bundle names the inner optimizer), is the change."""
    from pyadapter.capture.learning_rate import LearningRate

    program = tmp_path / "classify.py"
    program.write_text(TRAIN.replace("SGD(learning_rate=0.05, momentum=0.9)", "Adam(3e-1)"))
    norms = [90.85, 90.85, 90.85, 90.85, 126.5, 164.1, 198.0, 227.8, 227.8]
    history = [{"step": step, "loss": 1.0, "weight_norm": norm} for step, norm in enumerate(norms)]
    origin = overflow_origin(program, dtype="float16", op="Conv2D")
    context = CauseContext(
        history=history,
        model_info={
            "optimizer": "LossScaleOptimizer",
            "inner_optimizer": "Adam",
            "loss_scale_optimizer": True,
        },
        step=8,
        entry_script=str(program),
        learning_rate=LearningRate(0.3),
        dtype_policy="mixed_float16",
    )
    cause = classify(findings_of(origin, step=8), context)
    assert cause.kind == "divergence", cause
    assert cause.summary.startswith(
        "the learning rate 0.3 is 300x Adam's usual 0.001: 4 updates grew the weights"
    ), cause.summary
    assert cause.summary.endswith("until Conv2D overflowed float16 (max 65504)"), cause.summary
    assert cause.change is not None and cause.change.line == OPTIMIZER_LINE, cause.change
    # At Adam's own rate the float16 overflow stays a precision cause.
    context.learning_rate = LearningRate(0.001)
    assert classify(findings_of(origin, step=8), context).kind == "precision"


def test_a_weight_penalty_written_by_hand_in_add_loss_is_its_factor_not_the_rate(tmp_path: Path) -> None:
    """A Kaggle matrix factorization: ``self.add_loss(LAMBDA * tf.reduce_sum(tf.square(user_vector)))`` with
    ``LAMBDA = 1e3`` (meant 1e-3), under SGD: "divergence ... try 6.82e-4", which kept it finite and untrained.
    ``keras.regularizers.l2(1e3)`` was told its factor; the same factor written by hand is too."""
    program = tmp_path / "mf.py"
    program.write_text(
        "import keras\n"
        "import tensorflow as tf\n"
        "LAMBDA = 1e3\n"
        "class MF(keras.Model):\n"
        "    def call(self, inputs):\n"
        "        u = self.users(inputs[:, 0])\n"
        "        self.add_loss(LAMBDA * tf.reduce_sum(tf.square(u)))\n"
        "        self.add_loss(LAMBDA * tf.reduce_sum(tf.square(self.items(inputs[:, 1]))))\n"
        "        return tf.reduce_sum(u, axis=1)\n"
        "model = MF()\n"
        "model.compile(loss='mse', optimizer=keras.optimizers.SGD(learning_rate=0.01))\n"
        "model.fit(x, y, batch_size=64)\n"
    )
    history = [{"step": s, "loss": 1.19e4 * 14.6**s, "grad_norm": 10.0 * 14.6**s} for s in range(22)]
    history.append({"step": 22, "loss": None, "loss_nonfinite": "inf", "grad_norm": None})
    context = CauseContext(
        history=history, model_info={"optimizer": "SGD"}, step=22, entry_script=str(program)
    )
    cause = classify(findings_of(overflow_origin(program, op="Square", line=7), step=22), context)
    assert "weight penalty is LAMBDA = 1000 at mf.py:3:" in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == 3, cause.change
    assert cause.change.what == (
        "the weight penalty's factor LAMBDA = 1000: a usual one is 1e-5 to 1e-2 (a typo for 0.001?)"
    ), cause.change.what
    # A factor below 1 (the meant 1e-3) is no cause: the divergence stays the rate's.
    program.write_text(program.read_text().replace("LAMBDA = 1e3", "LAMBDA = 1e-3"))
    assert classify(findings_of(overflow_origin(program, op="Square", line=7), step=22), context).kind == (
        "divergence"
    )


def test_a_normalization_adapted_on_a_constant_feature_is_data_at_its_adapt_call(tmp_path: Path) -> None:
    """An LSTM forecaster whose Normalization was adapted on the first 2000 hours, where a maintenance flag is always
    0 (variance 0): the flag's first 1 became 1e7, the loss jumped x1e13 in one step and overflowed. The cause was
    "divergence at learning rate 0.01 ... lower it or clip the gradients", which hides the bug."""
    from pyadapter.cause.scale import ZeroVariance, zero_variances

    program = tmp_path / "train.py"
    program.write_text("norm = keras.layers.Normalization()\nnorm.adapt(x[:2000])\nmodel.fit(x, y)\n")
    stats = {
        "normalization/mean": np.array([0.5, 3.0, 0.0, 1.0], "float32"),
        "normalization/variance": np.array([0.2, 1.5, 0.0, 0.4], "float32"),
        "batch_normalization/moving_variance": np.zeros(4, "float32"),
    }
    assert zero_variances(stats) == [ZeroVariance("normalization", [2], [0.0], 4)]
    x = np.zeros((8, 4), "float32")
    x[3, 2] = 1.0
    history = [{"step": s, "loss": 0.05, "grad_norm": 0.3, "weight_norm": 8.7} for s in range(44)]
    history += [{"step": 44, "loss": 1.4e12, "grad_norm": 1e13, "weight_norm": 1e11}]
    context = CauseContext(
        history=history,
        batch=(x, np.zeros((8, 1), "float32")),
        entry_script=str(program),
        zero_variances=zero_variances(stats),
    )
    cause = classify(findings_of(overflow_origin(program, line=3, op="Square")), context)
    assert cause.kind == "data", cause
    assert cause.summary.startswith("the normalization layer divides feature 2 by 1e-7"), cause.summary
    assert "this batch holds 1 there (1 row), scaled to 1e+07" in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == 2, cause.change
    # The batch holding only the adapted constant there: no such cause.
    x[3, 2] = 0.0
    other = classify(findings_of(overflow_origin(program, line=3, op="Square")), context)
    assert other.kind != "data", other


def test_log_of_zero_is_an_op_even_while_the_loss_grows(tmp_path: Path) -> None:
    program = write_program(tmp_path)
    cause = classify(
        findings_of(log_origin(program)), CauseContext(history=diverging_history(), entry_script=str(program))
    )
    assert cause.kind == "op"
    assert "Log" in cause.summary and "probs:0" in cause.summary
    assert cause.change is not None and cause.change.line == LOG_LINE
    assert cause.evidence["history"]["series"] == "loss"  # the growth is said, but it did not make the NaN


def test_a_bad_batch_row_is_data_with_its_array_index_and_file_row(tmp_path: Path) -> None:
    program = write_program(tmp_path)
    rows = np.round(np.random.default_rng(0).normal(size=(40, 4)), 4)
    lines = [",".join(str(v) for v in row) for row in rows]
    fields = lines[22].split(",")
    fields[1] = ""
    lines[22] = ",".join(fields)
    (tmp_path / "readings.csv").write_text("\n".join(lines) + "\n")
    x = rows[20:24, :3].astype(np.float32)
    x[2, 1] = np.nan  # array row 22 = batch 5, row 2 with batch_size 4
    batch = (x, rows[20:24, 3:].astype(np.float32))
    findings = findings_of(
        None,
        batch_index=5,
        non_finite_batch={"total": 1, "leaves": ["x: 1 NaN of 12"], "examples": ["x[2, 1] = nan"]},
    )
    cause = classify(
        findings,
        CauseContext(
            batch=batch,
            batch_index=5,
            epoch=0,
            entry_script=str(program),
            cwd=str(tmp_path),
            folders=[str(tmp_path)],
        ),
    )
    assert cause.kind == "data"
    assert cause.provenance is not None
    assert cause.provenance["index"] == 22 and cause.provenance["element"] == "x[2, 1] = nan"
    assert cause.provenance["shuffled"] is True and "shuffle" in cause.provenance["note"]  # fit's default
    assert cause.provenance["file"] == str(tmp_path / "readings.csv") and cause.provenance["line"] == 23
    assert (
        "index 22 of the array passed to fit" in cause.summary and "line 23 of readings.csv" in cause.summary
    )
    assert cause.change is not None and cause.change.line == READ_LINE

    titles = [f.title for f in cause_fixes(TRAIN, cause)]
    assert titles[0] == "drop the rows holding NaN/Inf where the data is read"
    fixed = apply_edits(TRAIN, cause_fixes(TRAIN, cause)[0].edits).splitlines()
    assert fixed[READ_LINE].strip().startswith("table = table[np.isfinite(table).all(axis=1)]")


def test_a_float16_overflow_is_precision_on_the_layer(tmp_path: Path) -> None:
    program = write_program(tmp_path)
    origin = overflow_origin(program, dtype="float16", line=EXP_LINE, op="Exp")
    cause = classify(
        findings_of(origin),
        CauseContext(
            dtype_policy="mixed_float16", entry_script=str(program), model_info={"loss_scale_optimizer": True}
        ),
    )
    assert cause.kind == "precision"
    assert cause.evidence["dtype_max"] == 65504.0 and cause.evidence["dtype_policy"] == "mixed_float16"
    assert cause.evidence["layer"]["class"] == "Pool"
    assert "overflowed float16 (max 65504)" in cause.summary
    # The exp is the user's own layer code: that line is theirs to change; the other way names its line.
    assert cause.change is not None and cause.change.line == EXP_LINE
    assert f'build Pool with dtype="float32" (line {POOL_CALL_LINE})' in cause.change.what
    assert cause_fixes(TRAIN, cause) == []  # no one-line rewrite of an op's dtype is offered


def test_a_float16_overflow_in_a_helper_the_layer_calls_is_cast_there(tmp_path: Path) -> None:
    """The transformer tutorial's module-level ``scaled_dot_product_attention(q, k, v)``, called by the user's
    MultiHeadAttention layer under mixed_float16: ``q @ k.T`` overflowed float16. The change was "keep the
    MultiHeadAttention layer in float32: dtype=\"float32\"", which, followed, left it overflowing (the layer's Dense
    sublayers keep the float16 policy). The helper's line is the one to change."""
    program = tmp_path / "forecaster.py"
    program.write_text(
        "import keras\n"
        "import tensorflow as tf\n"
        "\n"
        "def scaled_dot_product_attention(q, k, v):\n"
        "    scores = tf.matmul(q, k, transpose_b=True)\n"
        "    return tf.matmul(tf.nn.softmax(scores / 8.0), v)\n"
        "\n"
        "class MultiHeadAttention(keras.layers.Layer):\n"
        "    def call(self, x):\n"
        "        return scaled_dot_product_attention(x, x, x)\n"
        "\n"
        "model = keras.Sequential([keras.Input((24, 4)), MultiHeadAttention()])\n"
    )
    cause = _mixed_float16_overflow(
        program, 5, OpRef("sequential/multi_head_attention/MatMul", "BatchMatMulV2")
    )
    assert cause.kind == "precision", cause
    assert cause.change is not None and cause.change.line == 5, cause.change
    assert "in scaled_dot_product_attention" in cause.change.what, cause.change


def _mixed_float16_overflow(program: Path, line: int, op: OpRef) -> Cause:
    """The cause of `op` overflowing float16 at `line` of `program`, trained under mixed_float16."""
    origin = overflow_origin(program, dtype="float16", line=line, op=op.type)
    origin.op = op
    return classify(
        findings_of(origin),
        CauseContext(
            dtype_policy="mixed_float16", entry_script=str(program), model_info={"loss_scale_optimizer": True}
        ),
    )


def test_a_float16_overflow_on_inputs_in_raw_units_is_told_to_scale_them_not_to_keep_a_layer_in_float32(
    tmp_path: Path,
) -> None:
    """A mixed-precision custom loop fed weather readings in raw units (pressures of 1000 mbar, temperatures of 283
    K): a Dense MatMul overflowed float16 and the change was "keep the Dense layer in float32"; followed, the next
    layer overflowed at the same step. Scaled inputs end it."""
    program = write_program(tmp_path)
    origin = overflow_origin(program, dtype="float16", line=EXP_LINE, op="Exp")
    rng = np.random.default_rng(0)
    x = np.stack([1000.0 + rng.normal(size=64), 283.0 + rng.normal(size=64)], axis=1).astype("float32")
    y = (283.0 + rng.normal(size=(64, 1))).astype("float32")
    cause = classify(
        findings_of(origin),
        CauseContext(
            dtype_policy="mixed_float16",
            entry_script=str(program),
            model_info={"loss_scale_optimizer": True},
            batch={"args": (x, y), "kwargs": {}},
        ),
    )
    assert cause.kind == "precision", cause
    assert "but the batch is in raw units (x[:, 0] from 998 to 1e+03" in cause.summary, cause.summary
    assert cause.change is not None and "scale the features" in cause.change.what, cause.change
    assert "layer in float32" not in cause.change.what, cause.change
    # Under the mixed policy the Normalization computes in float16 too: a timestamp of 1.7e9 was inf there before
    # it was scaled, and Normalization() as the first layer, followed, failed at the same step.
    assert 'keras.layers.Normalization(dtype="float32") adapted' in cause.change.what, cause.change


def test_a_float16_overflow_at_a_layer_built_in_a_model_function_is_its_dtype_not_a_cast(
    tmp_path: Path,
) -> None:
    """A Gaussian NLL's ``log_std = layers.Dense(1, name="log_std")(x)`` in a ``build_model()`` under mixed_float16:
    its backward pass overflowed float16. The change was "tf.cast its inputs to float32 in build_model", which,
    followed, failed at the same step: a Keras layer casts its inputs to its own compute dtype. The layer's
    dtype="float32" trained."""
    program = tmp_path / "train.py"
    program.write_text(
        "import keras\n"
        "from keras import layers\n"
        "\n"
        "def build_model():\n"
        "    inputs = keras.Input((6,))\n"
        "    x = layers.Dense(64, activation='relu')(inputs)\n"
        "    log_std = layers.Dense(1, name='log_std')(x)\n"
        "    return keras.Model(inputs, log_std)\n"
        "\n"
        "model = build_model()\n"
    )
    cause = _mixed_float16_overflow(program, 7, OpRef("functional/log_std/MatMul", "MatMul"))
    assert cause.kind == "precision", cause
    assert cause.change is not None and cause.change.line == 7, cause.change
    assert cause.change.what.startswith('build this Dense with dtype="float32"'), cause.change
    assert "tf.cast its inputs" not in cause.change.what, cause.change


def test_a_sqrt_of_an_expanded_squared_distance_is_told_to_clamp_not_softplus(tmp_path: Path) -> None:
    """An RBF layer's ``d2 = x2 - 2.0 * ops.matmul(x, ops.transpose(c)) + c2`` cancels to -2e-6 where a batch row is
    a prototype: the sqrt's NaN was told "make it positive by construction where the model learns it
    (keras.ops.softplus(x) + 1e-6)", and softplus(0) is 0.69, no distance."""
    program = tmp_path / "train.py"
    program.write_text(
        "from keras import ops\n"
        "\n"
        "\n"
        "def rbf(x, centers):\n"
        "    x2 = ops.sum(ops.square(x), axis=-1, keepdims=True)\n"
        "    c2 = ops.expand_dims(ops.sum(ops.square(centers), axis=-1), 0)\n"
        "    d2 = x2 - 2.0 * ops.matmul(x, ops.transpose(centers)) + c2\n"
        "    dist = ops.sqrt(d2)\n"
        "    return ops.exp(-dist)\n"
    )
    origin = Finding(
        file=str(program),
        line=8,
        role="origin",
        op=OpRef("rbf/Sqrt", "Sqrt"),
        health=TensorHealth(dtype="float32", size=64, nan=1, pos=63),
        inputs=[InputHealth("rbf/add:0", TensorHealth(dtype="float32", size=64, neg=1, pos=63))],
    )
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert cause.kind == "op", cause.summary
    assert cause.summary.startswith(
        "the Sqrt op got 1 negative value from a squared distance written expanded (train.py:7)"
    ), cause.summary
    assert cause.change is not None and cause.change.line == 7, cause.change
    assert "keras.ops.maximum(d2, 0.0)" in cause.change.what and "softplus" not in cause.change.what, (
        cause.change
    )


# (step, loss, weight norm, update ratio, gradient norm) of a float16 MLP at SGD(0.08, momentum=0.9), as its bundle
# recorded them (3 figures): a slow rise, then an update 21.9 times the weights at step 83.
FAST_FLOAT16_DIVERGENCE = [
    (0, 15.5, 12.4, None, 7.28),
    (1, 13.5, 12.5, 0.0776, 7.24),
    (2, 9.04, 12.8, 0.124, 11.5),
    (3, 1.6, 13.1, 0.0965, 7.51),
    (4, 20.5, 12.6, 0.282, 53.1),
    (5, 10.6, 13.1, 0.255, 6.18),
    (6, 11.1, 14.2, 0.234, 7.01),
    (7, 5.88, 15.7, 0.211, 17.5),
    (8, 9.73, 17.1, 0.188, 27.3),
    (9, 16.0, 18.6, 0.278, 59.5),
    (10, 12.1, 20.8, 0.23, 11.8),
    (11, 13.0, 23.2, 0.19, 9.2),
    (12, 6.2, 25.8, 0.155, 6.01),
    (13, 4.13, 28.2, 0.127, 7.8),
    (14, 3.33, 30.5, 0.106, 10.7),
    (15, 4.63, 32.7, 0.09, 14.4),
    (16, 3.78, 34.7, 0.0804, 18.4),
    (17, 22.9, 36.5, 0.162, 73.9),
    (18, 33.5, 38.9, 0.184, 50.2),
    (19, 14.1, 41.9, 0.157, 6.7),
    (20, 8.53, 45.1, 0.134, 10.4),
    (21, 20.7, 48.3, 0.149, 68.3),
    (22, 13.6, 51.8, 0.127, 19.2),
    (23, 11.8, 55.2, 0.108, 22.8),
    (24, 8.08, 58.6, 0.0925, 18.1),
    (25, 8.65, 61.8, 0.0789, 14.2),
    (26, 5.19, 64.9, 0.0699, 10.7),
    (27, 43.3, 68.0, 0.154, 127.0),
    (28, 14.9, 71.9, 0.132, 14.2),
    (29, 12.3, 76.0, 0.112, 5.04),
    (30, 7.71, 80.3, 0.0957, 5.19),
    (31, 9.92, 84.5, 0.082, 5.45),
    (32, 12.4, 88.6, 0.0727, 23.5),
    (33, 38.2, 92.4, 0.0761, 59.8),
    (34, 12.4, 96.0, 0.0662, 12.0),
    (35, 10.1, 99.6, 0.0582, 10.2),
    (36, 16.9, 103.0, 0.0649, 61.8),
    (37, 54.8, 106.0, 0.109, 133.0),
    (38, 18.4, 110.0, 0.0956, 14.0),
    (39, 12.4, 115.0, 0.0828, 4.99),
    (40, 16.2, 119.0, 0.074, 28.9),
    (41, 9.71, 123.0, 0.0642, 0.908),
    (42, 12.6, 127.0, 0.0558, 2.71),
    (43, 14.5, 131.0, 0.049, 6.2),
    (44, 8.28, 135.0, 0.0427, 5.39),
    (45, 8.59, 138.0, 0.0386, 20.2),
    (46, 15.5, 141.0, 0.0341, 22.3),
    (47, 6.59, 144.0, 0.03, 3.98),
    (48, 19.4, 147.0, 0.0281, 23.5),
    (49, 14.3, 149.0, 0.0248, 1.38),
    (50, 11.9, 151.0, 0.0221, 3.4),
    (51, 14.2, 153.0, 0.0207, 9.63),
    (52, 23.7, 155.0, 0.0302, 57.4),
    (53, 13.7, 157.0, 0.027, 8.22),
    (54, 12.9, 159.0, 0.0241, 7.77),
    (55, 11.8, 160.0, 0.0219, 6.96),
    (56, 15.4, 162.0, 0.0302, 51.3),
    (57, 12.7, 163.0, 0.027, 0.306),
    (58, 12.9, 164.0, 0.0239, 2.02),
    (59, 15.6, 166.0, 0.0212, 3.29),
    (60, 24.0, 167.0, 0.0189, 5.53),
    (61, 20.1, 168.0, 0.0172, 4.35),
    (62, 17.1, 169.0, 0.0156, 1.9),
    (63, 13.1, 170.0, 0.0142, 1.74),
    (64, 10.6, 171.0, 0.0126, 1.09),
    (65, 16.3, 172.0, 0.0111, 4.1),
    (66, 15.3, 172.0, 0.0107, 7.32),
    (67, 5.73, 173.0, 0.0106, 5.6),
    (68, 11.6, 174.0, 0.0183, 39.6),
    (69, 27.4, 175.0, 0.0488, 97.1),
    (70, 82.0, 176.0, 0.0842, 172.0),
    (71, 12.4, 178.0, 0.0752, 0.81),
    (72, 15.1, 181.0, 0.0669, 2.81),
    (73, 11.5, 184.0, 0.0593, 2.41),
    (74, 11.6, 187.0, 0.0524, 4.06),
    (75, 18.4, 190.0, 0.0463, 4.24),
    (76, 15.6, 194.0, 0.041, 1.31),
    (77, 12.4, 197.0, 0.0363, 2.23),
    (78, 7.88, 200.0, 0.0321, 0.0754),
    (79, 65.9, 210.0, 0.284, 707.0),
    (80, 12.0, 232.0, 0.243, 16.6),
    (81, 796.0, 411.0, 1.4, 4030.0),
    (82, 630.0, 684.0, 0.77, 1540.0),
    (83, 149000.0, 15000.0, 21.9, 188000.0),
    (84, 1190.0, 28500.0, 0.899, 68.8),
    (85, 3190.0, 40700.0, 0.426, 541.0),
]


def test_a_float16_overflow_after_the_weights_rose_x40_is_the_rate_not_precision(tmp_path: Path) -> None:
    """Fine-tuning under mixed_float16 at a rate 10x too high (``FT_LR = BASE_LR * 10``): the weights' norm rose
    17.5 -> 767 in 56 steps, then a float16 MatMul overflowed. It said "precision ... float32 would hold it; keep
    the Dense layer in float32", and with that the run diverged 8 steps sooner. The rate is named, at the fine-tuning
    compile whose rate is written as arithmetic on a name; a flat history stays precision."""
    from pyadapter.capture.learning_rate import LearningRate

    program = tmp_path / "train.py"
    text = TRAIN.replace(
        '    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.05, momentum=0.9), loss="mse")\n',
        '    model.compile(optimizer=keras.optimizers.SGD(BASE_LR, momentum=0.9), loss="mse")\n'
        "    FT_LR = BASE_LR * 10\n"
        '    model.compile(optimizer=keras.optimizers.SGD(FT_LR, momentum=0.9), loss="mse")\n',
    ).replace("def load():", "BASE_LR = 0.01\n\n\ndef load():")
    program.write_text(text)
    line = next(n for n, t in enumerate(text.splitlines(), 1) if "SGD(FT_LR" in t)
    rising = [
        {"step": s, "loss": 1.0 + (s % 5), "weight_norm": 17.5 * 44 ** (s / 55), "grad_norm": None}
        for s in range(56)
    ]
    context = CauseContext(
        history=rising,
        dtype_policy="mixed_float16",
        entry_script=str(program),
        model_info={"optimizer": "SGD", "optimizers": ["SGD"], "loss_scale_optimizer": True},
        learning_rate=LearningRate(float(np.float32(0.1))),
        step=56,
    )
    origin = overflow_origin(program, dtype="float16", line=FIT_LINE, op="MatMul")
    cause = classify(findings_of(origin), context)
    assert cause.kind == "divergence", cause.summary
    assert "the weight norm rose x44 over 55 steps (17.5 at step 0 to 770 at step 55)" in cause.summary, cause
    assert cause.summary.endswith(
        "until MatMul overflowed float16 (max 65504; float32 would only have put it off)"
    )
    assert cause.change is not None and cause.change.line == line, cause.change
    assert cause.change.what.startswith("learning rate 0.1 (SGD, momentum 0.9)"), cause.change.what
    steady = [dict(entry, weight_norm=17.5) for entry in rising]
    assert classify(findings_of(origin), dataclasses.replace(context, history=steady)).kind == "precision"
    # Sale prices of 1e5 into a float16 output (s40c nb7): the weights rose as the model learned to reach them;
    # the rate, followed, met the same Inf later, and the output layer in float32 alone trained.
    x = np.ones((32, 4), np.float32)
    prices = np.linspace(1.14e5, 3.06e5, 32, dtype=np.float32)[:, None]
    cause = classify(findings_of(origin), dataclasses.replace(context, batch=(x, prices)))
    assert cause.kind == "precision", cause.summary
    assert "the targets (y from 1.14e+05 to 3.06e+05" in cause.summary, cause.summary
    assert cause.change is not None and "or scale the targets (y / 1e5)" in cause.change.what, cause.change
    # A fast divergence in the last steps (float16 layers at SGD 0.08): the weights' median rose under x3 over the
    # run, but an update was 21.9 times the weights; "keep the layer in float32" met it 30 steps later.
    fast = [
        {"step": s, "loss": loss, "weight_norm": norm, "update_ratio": ratio, "grad_norm": grad}
        for s, loss, norm, ratio, grad in FAST_FLOAT16_DIVERGENCE
    ]
    fast.append({"step": 86, "loss": None, "loss_nonfinite": "inf", "weight_norm": 40700.0})
    cause = classify(findings_of(origin), dataclasses.replace(context, history=fast, step=86))
    assert cause.kind == "divergence", cause.summary
    assert "the update at step 83 was 21.9 times the weights' norm" in cause.summary, cause.summary


def test_a_float16_overflow_in_the_users_model_class_or_cast_is_not_fixed_by_a_dtype_on_it(
    tmp_path: Path,
) -> None:
    """Two mixed-precision programs: an exp in a ``keras.Model`` subclass's own code was told "or build
    SoftmaxClassifier with dtype="float32"" (mixed precision off for the whole model), and named "the ... layer";
    an attention mask of -1e9 cast to float16 in a MultiHeadAttention subclass was told "tf.cast its input to
    float32", which it is already."""
    program = tmp_path / "train.py"
    program.write_text(
        "import keras\nimport tensorflow as tf\n\n\nclass SoftmaxClassifier(keras.Model):\n"
        "    def call(self, x):\n        return tf.exp(x)\n\n\n"
        "class TutorialMHA(keras.layers.MultiHeadAttention):\n    def _masked_softmax(self, scores, mask=None):\n"
        "        return scores + tf.cast(-1e9, scores.dtype)\n\n\n"
        "model = SoftmaxClassifier()\nattention = TutorialMHA(2, 4)\nmodel.fit(x, y)\n"
    )
    context = CauseContext(dtype_policy="mixed_float16", entry_script=str(program))
    exp = classify(findings_of(overflow_origin(program, dtype="float16", line=7, op="Exp")), context)
    assert exp.kind == "precision" and "Exp in the SoftmaxClassifier model overflowed float16" in exp.summary
    assert exp.change is not None and exp.change.line == 7 and "dtype=" not in exp.change.what, exp.change
    cast = classify(findings_of(overflow_origin(program, dtype="float16", line=12, op="Cast")), context)
    assert cast.kind == "precision" and "Cast in the TutorialMHA layer overflowed float16" in cast.summary
    assert cast.change is not None and cast.change.line == 12, cast.change
    assert cast.change.what.startswith("the value cast to float16: keep it in float16's range"), cast.change
    assert "tf.cast its input" not in cast.change.what


def test_a_float16_overflow_in_a_keras_layer_is_precision_at_its_construction(tmp_path: Path) -> None:
    program = tmp_path / "train.py"
    program.write_text(
        "import keras\n"
        "keras.mixed_precision.set_global_policy('mixed_float16')\n"
        "model = keras.Sequential([keras.Input(shape=(8,)), keras.layers.Dense(64, activation='relu'),\n"
        "                          keras.layers.Dense(1, dtype='float32')])\n"
    )
    origin = Finding(
        file=str(program),
        line=4,
        role="origin",
        op=OpRef("sequential/dense/MatMul", "MatMul"),
        health=TensorHealth(dtype="float16", size=64, pos_inf=1, pos=63),
        inputs=[InputHealth("x:0", TensorHealth(dtype="float16", size=8, pos=8))],
    )
    cause = classify(
        findings_of(origin), CauseContext(entry_script=str(program), dtype_policy="mixed_float16")
    )
    assert cause.kind == "precision" and cause.change is not None and cause.change.line == 3
    fixes = cause_fixes(program.read_text(), cause)
    assert len(fixes) == 1
    assert "Dense(64, activation='relu', dtype=\"float32\")" in apply_edits(
        program.read_text(), fixes[0].edits
    )


def test_a_float16_overflow_in_an_unnamed_layer_of_the_train_step_is_its_own_construction(
    tmp_path: Path,
) -> None:
    """In the step Keras 3 traces, automatic names carry a call count too: the second unnamed Dense ("dense_1") is
    "dense_1_1" under "sequential_1", and the first ("dense") is "dense_1". The count was read as the layer's own
    number: "dense_1_1" matched no class, and "dense_1" named the second Dense for the first's op."""
    program = tmp_path / "train.py"
    program.write_text(
        "import keras\n"
        "keras.mixed_precision.set_global_policy('mixed_float16')\n"
        "model = keras.Sequential([\n"
        "    keras.Input(shape=(8,)),\n"
        "    keras.layers.Dense(64, activation='relu'),\n"
        "    keras.layers.Dense(64, activation='relu'),\n"
        "    keras.layers.Dense(1, dtype='float32'),\n"
        "])\n"
    )
    for scope, line in (("dense_1_1", 6), ("dense_1", 5)):
        origin = Finding(
            file=str(program),
            line=8,
            role="origin",
            op=OpRef(f"sequential_1/{scope}/MatMul", "MatMul"),
            health=TensorHealth(dtype="float16", size=64, pos_inf=1, pos=63),
            inputs=[InputHealth("x:0", TensorHealth(dtype="float16", size=8, pos=8))],
        )
        cause = classify(
            findings_of(origin), CauseContext(entry_script=str(program), dtype_policy="mixed_float16")
        )
        assert cause.kind == "precision" and cause.change is not None, cause
        assert cause.change.line == line, (scope, cause.change)


def test_a_float16_overflow_in_a_named_layer_is_its_construction_not_the_sequential(tmp_path: Path) -> None:
    """keras.io's mixed-precision guide names its layers. Keras 3's train step scopes a layer as "head_1" for
    Dense(name="head"): the name matched nothing, and the change fell to the "sequential_1" segment: "keep the
    Sequential layer in float32" at the keras.Sequential([ line."""
    program = tmp_path / "train.py"
    program.write_text(
        "import keras\n"
        "keras.mixed_precision.set_global_policy('mixed_float16')\n"
        "model = keras.Sequential([\n"
        "    keras.Input(shape=(4,)),\n"
        "    keras.layers.Dense(1, name='head'),\n"
        "])\n"
    )
    origin = Finding(
        file=str(program),
        line=6,
        role="origin",
        op=OpRef("sequential_1/head_1/MatMul", "MatMul"),
        health=TensorHealth(dtype="float16", size=64, pos_inf=1, pos=63),
        inputs=[InputHealth("x:0", TensorHealth(dtype="float16", size=8, pos=8))],
    )
    cause = classify(
        findings_of(origin), CauseContext(entry_script=str(program), dtype_policy="mixed_float16")
    )
    assert cause.kind == "precision" and cause.change is not None and cause.change.line == 5, cause.change
    assert "Dense layer in float32" in cause.change.what, cause.change.what


def test_older_bundle_without_the_new_history_keys(tmp_path: Path) -> None:
    """Only step/loss/logged_loss, no model info: divergence is still told, the change line found by the name."""
    program = write_program(tmp_path)
    cause = classify(
        findings_of(overflow_origin(program)),
        CauseContext(history=diverging_history(), entry_script=str(program)),
    )
    assert cause.kind == "divergence" and cause.change is not None and cause.change.line == OPTIMIZER_LINE


def test_no_history_and_no_bundle_cannot_tell_an_overflow(tmp_path: Path) -> None:
    program = write_program(tmp_path)
    findings = findings_of(overflow_origin(program))
    cause = attach_cause(findings)  # a dump: no bundle
    assert cause.kind == "unknown" and "history" in cause.summary
    assert cause_of(findings) == cause  # stored as the findings' top-level "cause"
    assert findings.to_json()["cause"]["kind"] == "unknown"
    assert classify(findings_of(None)).kind == "unknown"


def test_a_step_whose_re_runs_drew_other_random_numbers_says_so_not_just_unknown() -> None:
    """A DCGAN's unseeded noise: every re-run stayed finite; "no op made NaN/Inf when the step was located" read
    as a step that does not fail. The cause says the draws decide and how to draw again."""
    verdicts = {"graph": {"mode": "graph", "stateful_random": ["RandomStandardNormal at train.py:79"]}}
    cause = classify(findings_of(None, verdicts=verdicts))
    assert cause.kind == "unknown"
    assert "draws unseeded random numbers (RandomStandardNormal at train.py:79)" in cause.summary, (
        cause.summary
    )
    assert "nanlens locate --replay" in cause.summary
    # An energy-based model's sampler climbing the energy: the loss fell for 250 steps to -1.4e18 before it.
    falling = [{"step": s, "loss": -1e11 * 1.03**s} for s in range(300)]
    cause = classify(findings_of(None, verdicts=verdicts), CauseContext(history=falling, step=300))
    assert "the steps before it show the loss falling without bound (" in cause.summary, cause.summary
    assert "history" not in classify(findings_of(None, verdicts=verdicts), CauseContext(step=300)).evidence


def test_a_log_of_zeros_in_a_batch_of_one_row_says_the_batch_holds_one_row(tmp_path: Path) -> None:
    """``add_loss(log(reduce_variance(z, axis=0)))`` and 2049 rows in batches of 64: the epoch's last batch holds one
    row, whose variance over the batch is 0. "The Log got 16 zeros" did not say why; the batch's one row is said."""
    import numpy as np

    program = write_program(tmp_path)
    variance = log_origin(program)  # the variance over one row: 0 in every feature
    variance.inputs = [InputHealth("Variance:0", TensorHealth(dtype="float32", size=16, zero=16))]
    one_row = CauseContext(
        entry_script=str(program), batch=(np.ones((1, 20), "float32"), np.ones((1, 1), "float32"))
    )
    cause = classify(findings_of(variance), one_row)
    assert cause.kind == "op" and "the failing batch holds one row" in cause.summary, cause.summary
    full = CauseContext(
        entry_script=str(program), batch=(np.ones((64, 20), "float32"), np.ones((64, 1), "float32"))
    )
    assert "one row" not in classify(findings_of(variance), full).summary
    # A style transfer's one image, some of whose values are 0 (flat regions): one row by design, no variance.
    assert "one row" not in classify(findings_of(log_origin(program)), one_row).summary
    # A custom step's arguments of one row need not be a dataset's last batch (REINFORCE's returns of a one-step
    # episode, normalized by their std): "an epoch's last, partial batch" sent the user looking for a dataset.
    episode = CauseContext(
        entry_script=str(program), batch={"args": (np.ones((1,), "float32"),), "kwargs": {}}
    )
    said = classify(findings_of(variance), episode).summary
    assert "the step's arguments hold one row" in said and "an episode or sequence of one step" in said, said
    assert "epoch's last" not in said, said
    # A CycleGAN's batch of one image by design, and a blank one: its instance norm's variance over the pixels is
    # 0 at any batch size; "an epoch's last, partial batch (drop_remainder=True avoids it)" was false.
    frame = CauseContext(
        entry_script=str(program),
        batch=(np.zeros((1, 8, 8, 3), "float32"), np.ones((1, 8, 8, 3), "float32")),
    )
    said = classify(findings_of(variance), frame).summary
    assert "the batch's one record is constant (x = 0 throughout)" in said, said
    assert "epoch's last" not in said, said


def test_growth_needs_steps_and_a_factor() -> None:
    assert growth([{"step": 0, "loss": 1.0}, {"step": 1, "loss": 1e9}]) is None  # one step: not a trend
    assert growth([{"step": s, "loss": 1.0 + s} for s in range(30)]) is None  # linear, x30 over 29 steps
    assert growth([]) is None


def test_an_entry_script_that_is_not_a_regular_file_is_not_read(tmp_path: Path) -> None:
    """The entry script's path comes from the manifest (data): a FIFO there must not block the classifier (nor
    /dev/zero exhaust memory); the optimizer line is then simply not found."""
    import os
    import threading

    fifo = tmp_path / "train.py"
    os.mkfifo(fifo)
    history = diverging_history()
    result: dict[str, object] = {}

    def run() -> None:
        for script in (str(fifo), "/dev/zero"):
            result[script] = classify(
                findings_of(overflow_origin(tmp_path / "elsewhere.py")),
                CauseContext(history=history, entry_script=script, model_info={"optimizer": "SGD"}),
            )

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive(), "reading the entry script blocked"
    for cause in result.values():
        assert cause.kind == "divergence" and cause.change is None  # type: ignore[attr-defined]


def test_float16_zeros_of_a_softmax_on_raw_pixels_are_told_to_scale_them_not_float32(tmp_path: Path) -> None:
    """A custom loop under mixed_float16 fed pixels of 0-255: the log of its softmax got 554 zeros and the cause
    said "float32 would keep them apart from 0"; with the softmax in float32, 473 of them stayed (logits 100
    apart). Inputs in raw units are told, and the change scales them."""
    program = write_program(tmp_path)
    origin = Finding(
        file=str(program),
        line=LOG_LINE,
        role="origin",
        op=OpRef("Log", "Log"),
        health=TensorHealth(dtype="float16", size=640, neg_inf=554, neg=86),
        inputs=[InputHealth("Softmax:0", TensorHealth(dtype="float16", size=640, zero=554, pos=86))],
    )
    pixels = np.random.default_rng(0).integers(0, 256, size=(64, 784)).astype("float32")
    labels = np.eye(10, dtype="float32")[np.arange(64) % 10]
    context = CauseContext(
        history=diverging_history()[:5],
        dtype_policy="mixed_float16",
        entry_script=str(program),
        batch={"args": (pixels, labels), "kwargs": {}},
    )
    cause = classify(findings_of(origin), context)
    assert cause.kind == "precision" and "but the batch is in raw units" in cause.summary, cause.summary
    assert "float32 would keep them apart" not in cause.summary, cause.summary
    assert cause.change is not None and "scale the features" in cause.change.what, cause.change


BAYES_BY_BACKPROP = """import tensorflow as tf
import keras

class DenseBayes(keras.layers.Layer):
    def kl(self, mu, sigma):
        return tf.reduce_sum(tf.math.log(self.prior_sigma / sigma) + tf.square(mu) - 0.5)

    def call(self, x):
        w_sigma = tf.math.log(1.0 + tf.exp(self.w_rho))     # softplus
        w = self.w_mu + w_sigma * tf.random.normal(tf.shape(self.w_mu), dtype=w_sigma.dtype)
        self.add_loss(self.kl(self.w_mu, w_sigma))
        return tf.matmul(x, w)
"""


def test_float16_zeros_of_a_softplus_written_by_hand_name_the_softplus_in_float32(tmp_path: Path) -> None:
    """A Bayes-by-backprop sigma ``log(1 + exp(rho))`` with rho near -7 under mixed_float16 (s43d p3): 1 + exp(rho)
    is 1 in float16 and its log 0, and the KL divides by it. "Compute this in float32, or use an epsilon float16 can
    hold (>= 1e-4)" at the division: the epsilon, followed, left the loss scale at 0. The softplus's line, in
    float32, is the change."""
    program = tmp_path / "bbb.py"
    program.write_text(BAYES_BY_BACKPROP)
    origin = Finding(
        file=str(program),
        line=6,
        role="origin",
        op=OpRef("bayes_mlp_1/dense_bayes_1/truediv", "RealDiv"),
        health=TensorHealth(dtype="float16", size=32, pos_inf=5, pos=27),
        inputs=[
            InputHealth(
                "bayes_mlp_1/dense_bayes_1/truediv/x:0", TensorHealth(dtype="float16", size=1, pos=1)
            ),
            InputHealth(
                "bayes_mlp_1/dense_bayes_1/Log:0", TensorHealth(dtype="float16", size=32, zero=5, pos=27)
            ),
        ],
    )
    context = CauseContext(
        history=diverging_history()[:5], dtype_policy="mixed_float16", entry_script=str(program)
    )
    cause = classify(findings_of(origin), context)
    assert cause.kind == "precision", cause
    assert "the zeros are the log bayes_mlp_1/dense_bayes_1/Log:0 of 1 + tf.exp(self.w_rho) (bbb.py:9)" in (
        cause.summary
    ), cause.summary
    assert cause.change is not None and cause.change.line == 9, cause.change
    assert cause.change.what.startswith("compute it in float32: tf.nn.softplus"), cause.change.what
    assert "epsilon float16 can hold" not in cause.change.what


def test_float16_zeros_into_rsqrt_are_precision_at_the_op(tmp_path: Path) -> None:
    """An epsilon of 1e-8 is 0 in float16: rsqrt(variance + eps) gets zeros. Not a wrong op: float32 would work."""
    program = write_program(tmp_path)
    origin = Finding(
        file=str(program),
        line=EXP_LINE,
        role="origin",
        op=OpRef("frame_norm/Rsqrt", "Rsqrt"),
        health=TensorHealth(dtype="float16", size=8, pos_inf=2, pos=6),
        inputs=[InputHealth("add:0", TensorHealth(dtype="float16", size=8, zero=2, pos=6))],
    )
    cause = classify(
        findings_of(origin), CauseContext(history=diverging_history()[:5], dtype_policy="mixed_float16")
    )
    assert cause.kind == "precision" and "round to 0" in cause.summary and "mixed_float16" in cause.summary
    assert cause.change is not None and cause.change.line == EXP_LINE
    # The same op in float32 on a real zero is the user's op bug.
    origin32 = Finding(
        file=str(program),
        line=LOG_LINE,
        role="origin",
        op=OpRef("Rsqrt", "Rsqrt"),
        health=TensorHealth(dtype="float32", size=8, pos_inf=2, pos=6),
        inputs=[InputHealth("add:0", TensorHealth(dtype="float32", size=8, zero=2, pos=6))],
    )
    assert classify(findings_of(origin32), CauseContext(history=diverging_history()[:5])).kind == "op"


def layer_norm_division(program: Path, code: str) -> Findings:
    """A hand-written LayerNorm's ``(x - mean) / tf.sqrt(var)`` in float16 on flat patches: zeros on both sides,
    the numerator's made by a subtraction."""
    origin = Finding(
        file=str(program),
        line=EXP_LINE,
        role="origin",
        op=OpRef("vit/layer_norm/truediv", "RealDiv"),
        health=TensorHealth(dtype="float16", size=4096, nan=1500, pos=2596),
        inputs=[
            InputHealth(
                "vit/layer_norm/sub_1:0", TensorHealth(dtype="float16", size=4096, zero=1900, pos=2196)
            ),
            InputHealth("vit/layer_norm/Sqrt:0", TensorHealth(dtype="float16", size=64, zero=20, pos=44)),
        ],
    )
    findings = findings_of(origin)
    findings.extra["origin_code"] = code
    return findings


def test_a_layer_norm_without_epsilon_in_float16_is_told_to_add_one_not_to_use_float32(
    tmp_path: Path,
) -> None:
    """A ViT's LayerNorm without epsilon under mixed_float16 was told the float16 "1 - p" story of its numerator's
    zeros and "compute this in float32", which did not end it: Keras casts the input to float16 first, where a flat
    patch's values are one value. The divisor's zeros are the cause and the epsilon the change."""
    program = write_program(tmp_path)
    context = CauseContext(history=diverging_history()[:5], dtype_policy="mixed_float16")
    cause = classify(layer_norm_division(program, "        x = (x - mean) / tf.sqrt(var)"), context)
    assert cause.kind == "precision", cause
    assert (
        "standard deviation (vit/layer_norm/Sqrt:0)" in cause.summary and "adds no epsilon" in cause.summary
    )
    assert "minus them" not in cause.summary and "1900" not in cause.summary, cause.summary
    assert cause.change is not None and "tf.sqrt(var + 1e-3)" in cause.change.what, cause.change
    # With an epsilon on the line, it is the epsilon that float16 rounded to 0.
    cause = classify(layer_norm_division(program, "        x = (x - mean) / tf.sqrt(var + 1e-8)"), context)
    assert "round to 0" in cause.summary and "adds no epsilon" not in cause.summary, cause.summary
    # A divisor a subtraction made (p / (1 - q)) is still the cancellation in float16.
    findings = layer_norm_division(program, "        r = p / (1.0 - q)")
    assert findings.origin is not None
    findings.origin.inputs.reverse()
    assert "minus them is exactly 0" in classify(findings, context).summary


def one_minus_p_into_log(program: Path, dtype: str, made_by: str = "compile_loss/bce/sub_1:0") -> Finding:
    return Finding(
        file=str(program),
        line=LOG_LINE,
        role="origin",
        op=OpRef("compile_loss/bce/Log_1", "Log"),
        health=TensorHealth(dtype=dtype, size=64, neg_inf=2, neg=62),
        inputs=[InputHealth(made_by, TensorHealth(dtype=dtype, size=64, zero=2, pos=62))],
    )


def test_one_minus_a_probability_that_rounded_to_one_in_bfloat16_is_precision(tmp_path: Path) -> None:
    """mixed_bfloat16 on CPU: log(1 - p) by hand, and bfloat16 (8 significant bits) makes p = 0.999 exactly 1. The
    cause was "a Log op made NaN/Inf from finite inputs"; the zeros came from a subtraction in a 16-bit float, which
    float32 would not have made."""
    program = write_program(tmp_path)
    context = CauseContext(history=diverging_history()[:5], dtype_policy="mixed_bfloat16")
    cause = classify(findings_of(one_minus_p_into_log(program, "bfloat16")), context)
    assert cause.kind == "precision", cause
    assert cause.summary.startswith(
        "Log got 2 zeros from a subtraction in bfloat16, which keeps 8 significant bits"
    )
    assert "within 0.002 of 1" in cause.summary and "mixed_bfloat16" in cause.summary
    assert cause.change is not None and cause.change.line == LOG_LINE and "float32" in cause.change.what
    # float16 keeps 11 bits: the same rounding, closer to 1.
    half = classify(findings_of(one_minus_p_into_log(program, "float16")), context)
    assert half.kind == "precision" and "within 0.00024 of 1" in half.summary, half.summary
    # Zeros not made by a subtraction, or in float32, are not this.
    assert classify(findings_of(one_minus_p_into_log(program, "bfloat16", "probs:0")), context).kind == "op"
    assert classify(findings_of(one_minus_p_into_log(program, "float32")), context).kind == "op"


def test_weights_non_finite_before_the_step_are_a_divergence_at_the_optimizer(tmp_path: Path) -> None:
    """Adam at a huge learning rate writes Inf weights in one update: the next step reads them (ReadVariableOp)."""
    program = write_program(tmp_path)
    origin = weights_read_back(program)
    flat = [{"step": s, "loss": 0.7, "logged_loss": 0.7} for s in range(4)]
    cause = classify(
        findings_of(origin),
        CauseContext(history=flat, entry_script=str(program), model_info={"optimizer": "SGD"}),
    )
    assert cause.kind == "divergence" and "non-finite" in cause.summary and "0.05" in cause.summary
    assert cause.change is not None and cause.change.line == OPTIMIZER_LINE


def test_a_decoding_op_that_outputs_inf_is_data(tmp_path: Path) -> None:
    program = write_program(tmp_path)
    origin = Finding(
        file=str(program),
        line=READ_LINE,
        role="origin",
        op=OpRef("ParseExampleV2", "ParseExampleV2"),
        health=TensorHealth(dtype="float32", size=8, pos_inf=1, pos=7),
        inputs=[InputHealth("serialized:0", TensorHealth(dtype="string", size=1))],
    )
    cause = classify(
        findings_of(origin, origin_from="input pipeline re-run"), CauseContext(entry_script=str(program))
    )
    assert cause.kind == "data" and cause.change is not None and cause.change.line == READ_LINE


def test_a_float16_overflow_in_a_replayed_model_names_the_float16_layer(tmp_path: Path) -> None:
    """A replay builds the model again, so its layers are named one on (``sequential_1/dense_1`` is the first
    Dense); the layer pinned to float32 cannot have made a float16 op, so the float16 one is named."""
    program = tmp_path / "train.py"
    program.write_text(
        "import keras\n"
        "keras.mixed_precision.set_global_policy('mixed_float16')\n"
        "model = keras.Sequential([\n"
        "    keras.Input(shape=(8,)),\n"
        "    keras.layers.Dense(64, activation='relu'),\n"
        "    keras.layers.Dense(1, dtype='float32'),\n"
        "])\n"
    )
    origin = Finding(
        file=str(program),
        line=7,
        role="origin",
        op=OpRef("sequential_1/dense_1/MatMul", "MatMul"),
        health=TensorHealth(dtype="float16", size=64, pos_inf=1, pos=63),
        inputs=[InputHealth("x:0", TensorHealth(dtype="float16", size=8, pos=8))],
    )
    cause = classify(
        findings_of(origin), CauseContext(entry_script=str(program), dtype_policy="mixed_float16")
    )
    assert cause.kind == "precision" and cause.change is not None and cause.change.line == 5


def matmul_nan_origin(program: Path) -> Finding:
    """A MatMul whose finite inputs are so large that +inf and -inf products meet in its sums: all NaN, no Inf."""
    return Finding(
        file=str(program),
        line=FIT_LINE,
        role="origin",
        op=OpRef("sequential/dense_1/MatMul", "MatMul"),
        health=TensorHealth(dtype="float32", size=32, nan=32),
        inputs=[
            InputHealth(
                "sequential/dense/BiasAdd:0", TensorHealth(dtype="float32", size=512, neg=352, pos=160)
            ),
            InputHealth(
                "sequential/dense_1/ReadVariableOp:0", TensorHealth(dtype="float32", size=16, neg=5, pos=11)
            ),
        ],
    )


def fast_history() -> list[dict]:
    """Ten calm steps, then one update that takes the loss from ~2e2 to ~4e35: the run fails at step 11."""
    calm = [
        {"step": s, "loss": 240.0 - s, "grad_norm": 90.0, "weight_norm": 5.0, "update_ratio": 2e-3}
        for s in range(10)
    ]
    jump = {"step": 10, "loss": 4.3e35, "grad_norm": 7e28, "weight_norm": 7e27, "update_ratio": None}
    failed = {
        "step": 11,
        "loss": None,
        "loss_nonfinite": "inf",
        "grad_norm": None,
        "grad_norm_nonfinite": "nan",
    }
    return [*calm, jump, failed]


def test_a_one_step_blow_up_into_a_matmul_overflow_is_a_fast_divergence(tmp_path: Path) -> None:
    """One step is no trend, but a x1e33 jump made by the last update, ending in an overflow, is a divergence: the
    optimizer line is the one to change, and the summary says the jump in numbers."""
    program = write_program(tmp_path)
    context = CauseContext(history=fast_history(), entry_script=str(program), model_info={"optimizer": "SGD"})
    assert growth(context.history) is None
    cause = classify(findings_of(matmul_nan_origin(program)), context)
    assert cause.kind == "divergence", cause.summary
    assert (
        cause.evidence["fast"] is True and cause.evidence["series"] == "loss" and cause.evidence["steps"] == 1
    )
    assert "the loss jumped x1.86e+33 in 1 step (231 at step 9 to 4.3e+35 at step 10)" in cause.summary
    assert "until MatMul overflowed float32" in cause.summary
    assert cause.change is not None and cause.change.line == OPTIMIZER_LINE
    assert "learning rate 0.05" in cause.change.what


def test_a_divergence_into_an_exp_says_to_bound_the_exp_too(tmp_path: Path) -> None:
    """A functional count model's Dense(activation="exponential") overflowed after a jump of the gradient norm: a
    divergence, and the rate the window found kept it finite only for the window (the run went NaN one step later);
    softplus in place of the exponential trained. The change names the rate and the exp."""
    program = write_program(tmp_path)
    context = CauseContext(history=fast_history(), entry_script=str(program), model_info={"optimizer": "SGD"})
    cause = classify(findings_of(overflow_origin(program, op="Exp")), context)
    assert cause.kind == "divergence", cause.summary
    assert cause.change is not None and cause.change.line == OPTIMIZER_LINE
    assert "learning rate 0.05" in cause.change.what and "bound the exp (softplus" in cause.change.what
    matmul = classify(findings_of(matmul_nan_origin(program)), context)
    assert matmul.change is not None and "exp" not in matmul.change.what


def test_an_update_larger_than_the_weights_is_a_fast_divergence(tmp_path: Path) -> None:
    """No series jumped a thousandfold, but the last update was 40 times the weights' norm: a learning rate far too
    high, not a wrong op."""
    program = write_program(tmp_path)
    history = [
        {"step": s, "loss": 3.0, "grad_norm": 2.0, "weight_norm": 1.0, "update_ratio": 1e-3} for s in range(5)
    ]
    history.append({"step": 5, "loss": 30.0, "grad_norm": 20.0, "weight_norm": 40.0, "update_ratio": 40.0})
    history.append({"step": 6, "loss": None, "loss_nonfinite": "inf"})
    cause = classify(
        findings_of(overflow_origin(program)),
        CauseContext(history=history, entry_script=str(program), model_info={"optimizer": "SGD"}),
    )
    assert cause.kind == "divergence", cause.summary
    assert cause.evidence["update_ratio"] == {"step": 5, "ratio": 40.0}
    assert "the update at step 5 was 40 times the weights' norm" in cause.summary


def test_a_matmul_nan_or_an_exp_overflow_on_calm_steps_stays_an_op(tmp_path: Path) -> None:
    """The same overflows after steps whose numbers stayed put: nothing the updates did, so a wrong op; and a log
    of zero after a one-step jump is still the log's (it is not an overflow)."""
    program = write_program(tmp_path)
    calm = [
        {
            "step": s,
            "loss": 2.0 + 0.1 * (s % 3),
            "grad_norm": 5.0,
            "weight_norm": 3.0 + 0.01 * s,
            "update_ratio": 1e-3,
        }
        for s in range(12)
    ]
    calm.append({"step": 12, "loss": None, "loss_nonfinite": "nan"})
    for origin in (matmul_nan_origin(program), overflow_origin(program, line=EXP_LINE, op="Exp")):
        cause = classify(findings_of(origin), CauseContext(history=calm, entry_script=str(program)))
        assert cause.kind == "op" and cause.evidence["overflow"] is True, cause.summary
    cause = classify(
        findings_of(log_origin(program)), CauseContext(history=fast_history(), entry_script=str(program))
    )
    assert cause.kind == "op" and cause.change is not None and cause.change.line == LOG_LINE


def test_a_sum_of_exps_that_overflowed_at_step_1_names_no_unscaled_inputs_or_rate(tmp_path: Path) -> None:
    """A BiLSTM-CRF's forward algorithm written as log(sum(exp(alpha))) overflowed at step 1 on the batch's longest
    sentences: the words added "values this large so early point at unscaled inputs, or at a learning rate that
    moved the weights too far", a red herring: a sum of exps overflows at any weights once its terms are many."""
    program = write_program(tmp_path)
    history = [
        {"step": 0, "loss": 31.0, "grad_norm": 5.0},
        {"step": 1, "loss": None, "loss_nonfinite": "inf"},
    ]
    findings = findings_of(overflow_origin(program, line=LOG_LINE, op="Sum"))
    findings.extra["sum_of_exps"] = {"op": "Exp", "file": str(program), "line": EXP_LINE, "divided_at": None}
    cause = classify(findings, CauseContext(history=history, entry_script=str(program), step=1))
    assert f"adding up the finite terms of the exp at line {EXP_LINE} at step 1" in cause.summary, (
        cause.summary
    )
    assert "unscaled" not in cause.summary and "learning rate" not in cause.summary, cause.summary


def test_a_sum_that_overflowed_adding_finite_exps_on_calm_steps_names_the_exp_and_log_space(
    tmp_path: Path,
) -> None:
    """A contrastive loss's ``reduce_sum(exp(sim / tau))`` as tau anneals: the Sum overflows, each exp finite, and the
    steps before grew nothing the guard records. It said "a Sum op overflowed on finite inputs ... keep its values in
    range"; the exp the scan found upstream (``sum_of_exps``) and log space are named now."""
    program = write_program(tmp_path)
    calm = [
        {"step": s, "loss": 2.0, "grad_norm": 5.0, "weight_norm": 3.0, "update_ratio": 1e-3}
        for s in range(12)
    ]
    calm.append({"step": 12, "loss": None, "loss_nonfinite": "inf"})
    origin = overflow_origin(program, line=LOG_LINE, op="Sum")
    findings = findings_of(origin)
    context = CauseContext(history=calm, entry_script=str(program))
    assert "sum of exps" not in classify(findings, context).summary  # no exp upstream: the generic words
    findings.extra["sum_of_exps"] = {"op": "Exp", "file": str(program), "line": EXP_LINE, "divided_at": None}
    cause = classify(findings, context)
    assert cause.kind == "op", cause.summary
    assert cause.summary.startswith(
        f"a Sum op overflowed float32 adding up the finite terms of the exp at line {EXP_LINE} with no rise"
    ), cause.summary
    assert "divided at" not in cause.summary
    assert (
        cause.change is not None
        and cause.change.line == LOG_LINE
        and "tf.reduce_logsumexp" in cause.change.what
    )
    # An add of a recurrence (an sLSTM cell's ``c = f * c + i * tf.tanh(z)``, ``i = tf.exp(i_)``) is no sum to
    # take in log space: "tf.reduce_logsumexp(x, axis=...)" fitted nothing there.
    added = overflow_origin(program, line=LOG_LINE, op="AddV2")
    findings = findings_of(added)
    findings.extra["sum_of_exps"] = {"op": "Exp", "file": str(program), "line": EXP_LINE, "divided_at": None}
    cause = classify(findings, context)
    assert cause.change is not None and "reduce_logsumexp" not in cause.change.what, cause.change
    assert cause.change.what.startswith(f"the exp at line {EXP_LINE}: bound its input"), cause.change


def test_where_the_values_first_grew_huge_is_said_beside_any_cause(tmp_path: Path) -> None:
    """An overflow inside the optimizer (Adam's Square) is marked at the fit or apply_gradients line; the replay's
    eager run names where the values first passed 1e15 (a VAE's exp(log_var)), in the cell for a notebook."""
    program = write_program(tmp_path)
    huge = {"op": "Exp", "file": str(program), "line": EXP_LINE, "function": "call", "largest": 1.3e24}
    findings = findings_of(overflow_origin(program, op="Square"), first_huge=huge)
    cause = classify(findings, CauseContext(history=fast_history(), entry_script=str(program)))
    assert cause.summary.endswith(
        f"; the step's values first passed 1e15 in an Exp at line {EXP_LINE} (up to 1.3e+24)"
    ), cause.summary
    assert cause.evidence["first_huge"] == huge
    findings = findings_of(overflow_origin(program, op="Square"), first_huge={**huge, "cell": 4})
    assert classify(findings).summary.endswith(f"in an Exp at cell 5, line {EXP_LINE} (up to 1.3e+24)")


def test_a_running_mean_kept_up_by_one_spike_is_no_growth_beside_a_flat_per_step_loss() -> None:
    """Keras's logged loss is the epoch's running mean: one step's 1e16 spike stays in every later mean. It read
    "the logged loss grew x1.95 per step for 58 steps (186 at step 14 to 1.31e+19 at step 72)" of a per-step loss
    that stayed at 30-530 between isolated spikes."""
    history = []
    total = 0.0
    spikes = {
        15: 1.2e3,
        50: 1.08e16,
        72: 3.0e20,
    }  # the bundle's own per-step losses (the last one finite: the
    for s in range(73):  # step failed on gradients too large to square)
        loss = spikes.get(s, 30.0 + 500.0 * ((s * 7) % 5 == 0))
        total += loss
        history.append({"step": s, "loss": loss, "logged_loss": total / (s % 50 + 1)})  # epoch 1 from step 50
    assert growth(history) is None
    # Without a per-step loss (an older bundle) the running mean is all there is, and still read.
    older = [{"step": e["step"], "logged_loss": 2.0 * 3.0 ** e["step"]} for e in history[:12]]
    found = growth(older)
    assert found is not None and found.series == "logged_loss"


def test_a_growth_starts_at_the_last_dip_near_the_low_not_at_a_low_before_the_climb() -> None:
    """A notebook's loop ran at 1e-3 (its loss wandering between 2 and 6), then a cell set the rate to 0.2 and the
    next loop diverged from step 192. It read "the loss grew x12 per step for 34 steps (2.26 at step 185 ...)",
    from a low the climb did not start at."""
    wander = [2.26, 3.55, 4.38, 5.63, 3.28, 5.25, 3.95]  # steps 185-191
    history = [{"step": 185 + i, "loss": v} for i, v in enumerate(wander)]
    history += [{"step": s, "loss": 4.43 * 22.0 ** (s - 192)} for s in range(192, 219)]
    found = growth(history)
    assert found is not None and (found.start_step, found.start_value) == (191, 3.95), found
    # A climb that never came back down keeps its low.
    steady = [{"step": s, "loss": 1.8**s} for s in range(12)]
    assert growth(steady) is not None and growth(steady).start_step == 0


def test_fast_growth_reads_only_the_steps_before_the_failure() -> None:
    # A thousandfold jump long before the failure, then calm steps: not the blow-up that made the NaN.
    early = [
        {"step": 0, "loss": 1e-3},
        {"step": 1, "loss": 5.0},
        *({"step": s, "loss": 5.0} for s in range(2, 12)),
    ]
    assert fast_growth([*early, {"step": 12, "loss": None, "loss_nonfinite": "nan"}]) is None
    # A series that stopped being recorded steps before the failure says nothing about it.
    stale = [
        {"step": 0, "grad_norm": 1.0},
        {"step": 1, "grad_norm": 1e6},
        *({"step": s} for s in range(2, 8)),
    ]
    assert fast_growth(stale) is None
    assert (
        large_update([{"step": 0, "update_ratio": 0.5}, {"step": 1, "loss": None, "loss_nonfinite": "inf"}])
        is None
    )
    assert large_update(
        [{"step": 0, "update_ratio": 3.0}, {"step": 1, "loss": None, "loss_nonfinite": "inf"}]
    ) == (0, 3.0)


SCHEDULE_CELL = """class Warmup(keras.optimizers.schedules.LearningRateSchedule):
    def __call__(self, step):
        step = tf.cast(step, "float32")
        decay = 1e-3 * tf.math.rsqrt((step - 20.0) / 20.0)
        return tf.where(step < 20.0, 1e-3 * step / 20.0, decay)
"""


def weights_read_back(program: Path) -> Finding:
    """What the replay of an applied non-finite update finds first: the broken weights, read."""
    return Finding(
        file=str(program),
        line=FIT_LINE,
        role="origin",
        op=OpRef("sequential/dense/Cast/ReadVariableOp", "ReadVariableOp"),
        health=TensorHealth(dtype="float32", size=12, pos_inf=3, pos=9),
        inputs=[InputHealth("sequential/dense/Cast/ReadVariableOp/resource:0", None)],
    )


def test_a_non_finite_learning_rate_is_the_cause_at_the_line_that_made_it(tmp_path: Path) -> None:
    """The rate recorded for the failing step (`pyadapter.capture.learning_rate`) is inf: the cause is the rate,
    not a divergence, and the line to change is the schedule's: in a .py file as recorded; in a notebook (the cell
    ran from a file the kernel made, gone by now) the cell whose line has the recorded text; for a library's
    schedule, the user's call that built it."""
    from pyadapter.capture.learning_rate import LearningRate

    program = write_program(tmp_path)
    context = CauseContext(entry_script=str(program), model_info={"optimizer": "SGD"}, step=20)
    context.learning_rate = LearningRate(
        math.inf, "Reader", str(program), READ_LINE, TRAIN.splitlines()[6].strip()
    )
    cause = classify(findings_of(weights_read_back(program)), context)
    assert cause.kind == "op", cause
    assert cause.summary.startswith(
        "the learning rate was inf at step 20: the schedule Reader returned it at train.py:7,"
    )
    assert cause.change is not None and (cause.change.file, cause.change.line) == (str(program), READ_LINE)
    assert cause.evidence == {"learning_rate": "inf", "schedule": "Reader", "step": 20}

    notebook = tmp_path / "train.ipynb"
    cells = [
        {
            "cell_type": "code",
            "source": "import keras\nimport tensorflow as tf",
            "metadata": {},
            "outputs": [],
            "execution_count": 1,
        },
        {"cell_type": "code", "source": SCHEDULE_CELL, "metadata": {}, "outputs": [], "execution_count": 2},
    ]
    notebook.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    context = CauseContext(entry_script=str(notebook), step=20)
    decay = SCHEDULE_CELL.splitlines()[3].strip()
    context.learning_rate = LearningRate(math.inf, "Warmup", "/tmp/ipykernel_1/2301.py", 4, decay)
    cause = classify(findings_of(weights_read_back(program)), context)
    assert cause.change is not None, cause
    assert (cause.change.file, cause.change.cell, cause.change.line) == (str(notebook), 1, 4)

    built = tmp_path / "built.py"
    built.write_text("import keras\nrate = keras.optimizers.schedules.InverseTimeDecay(1e-3, 1, -0.5)\n")
    library = "/venv/lib/python3.11/site-packages/keras/src/optimizers/schedules/learning_rate_schedule.py"
    context = CauseContext(entry_script=str(built), step=2)
    context.learning_rate = LearningRate(math.inf, "InverseTimeDecay", library, 560, "return tf.divide(a, b)")
    cause = classify(findings_of(weights_read_back(built)), context)
    assert "learning_rate_schedule.py" not in cause.summary, cause.summary
    assert cause.change is not None and (cause.change.file, cause.change.line) == (str(built), 2)
    assert cause.change.what == "InverseTimeDecay: it returns inf at step 2; keep the learning rate finite"


def unrecorded_input_origin(program: Path, op: str, health: TensorHealth, inputs: int = 1) -> Finding:
    """An origin whose input is a function argument: tfdbg2 records no health for it ("unknown")."""
    known = [InputHealth("sub:0", TensorHealth(dtype="float32", size=health.size, pos=health.size))]
    return Finding(
        file=str(program),
        line=LOG_LINE,
        role="origin",
        op=OpRef(f"compile_loss/{op}", op),
        health=health,
        inputs=(known if inputs == 2 else []) + [InputHealth("args_0_1:0", None)],
    )


def test_an_op_that_read_a_zero_target_names_the_array_and_the_row(tmp_path: Path) -> None:
    """log(y_true) in a hand-written loss: the dump has no health for the step's arguments, so the batch is asked
    which array gives exactly the recorded -inf. It names y, its zero and where that row came from."""
    program = write_program(tmp_path)
    x = np.ones((8, 3), np.float32)
    y = np.linspace(0.5, 2.0, 8, dtype=np.float32).reshape(8, 1)
    y[5, 0] = 0.0
    origin = unrecorded_input_origin(program, "Log", TensorHealth(dtype="float32", size=8, neg_inf=1))
    cause = classify(findings_of(origin), CauseContext(batch=(x, y), batch_index=3, epoch=0))
    assert cause.kind == "op", cause
    assert cause.evidence["batch_array"] == "y" and cause.evidence["element"] == "y[5, 0] = 0"
    assert "a Log op read the batch's y as it came, and y holds 1 zero for it: y[5, 0] = 0" in cause.summary
    # fit(x, y, batch_size=4) shuffles by default: batch 3, row 5 is index 17 of the epoch's order.
    assert "index 17 of the array passed to fit (in the shuffled order) (batch 3, row 5)" in cause.summary
    assert cause.change is not None and cause.change.line == LOG_LINE
    assert "leave out the records where y holds zeros" in cause.change.what


def test_a_division_by_a_dataset_s_one_array_reads_once_and_names_multiplying_through(tmp_path: Path) -> None:
    """A PINN fit on a dataset of collocation points alone (one unnamed array, "batch"), its residual dividing by r
    with r = 0 among them: it read "a RealDiv op read the batch's batch as it came", and an epsilon, followed,
    kept it finite and the fit learned nothing. Multiplying the equation through is named too."""
    program = write_program(tmp_path)
    points = np.linspace(0.5, 2.0, 8, dtype=np.float32).reshape(8, 1)
    points[5, 0] = 0.0
    origin = Finding(
        file=str(program),
        line=LOG_LINE,
        role="origin",
        op=OpRef("truediv", "RealDiv"),
        health=TensorHealth(dtype="float32", size=8, pos_inf=1, pos=7),
        inputs=[
            InputHealth("truediv/x:0", TensorHealth(dtype="float32", size=1, pos=1)),
            InputHealth("args_0:0", None),
        ],
    )
    cause = classify(findings_of(origin), CauseContext(batch=points, batch_index=3, epoch=0))
    assert "read the batch as it came, and batch holds 1 zero" in cause.summary, cause.summary
    assert cause.change is not None and "multiply it through by batch" in cause.change.what, cause.change


def test_a_percentage_error_of_a_zero_target_says_leave_the_record_out_not_an_epsilon(tmp_path: Path) -> None:
    """A hand-written RMSPE ``tf.square((y_true - y_pred) / y_true)`` with 2% of the targets 0 (s43c p7): "keep its
    input in the op's domain (an epsilon, a clip)" came first, and an epsilon, followed, made those terms 1e7 times
    the others: the model predicted 0 (RMSPE 1.0). Leaving the records out of the loss is the change."""
    program = write_program(tmp_path)
    x = np.ones((8, 3), np.float32)
    y = np.linspace(0.5, 2.0, 8, dtype=np.float32).reshape(8, 1)
    y[5, 0] = 0.0
    origin = Finding(
        file=str(program),
        line=LOG_LINE,
        role="origin",
        op=OpRef("truediv", "RealDiv"),
        health=TensorHealth(dtype="float32", size=8, neg_inf=1, pos=7),
        inputs=[
            InputHealth("sub:0", TensorHealth(dtype="float32", size=8, pos=8)),
            InputHealth("args_1:0", None),
        ],
    )
    findings = findings_of(origin)
    findings.extra["origin_code"] = (
        "    return tf.sqrt(tf.reduce_mean(tf.square((y_true - y_pred) / y_true)))"
    )
    cause = classify(findings, CauseContext(batch=(x, y), batch_index=3, epoch=0))
    assert cause.change is not None and cause.change.what.startswith(
        "the RealDiv op divides by y, a percentage error, undefined where y is 0: leave those records out of the loss"
    ), cause.change.what
    assert "an epsilon, a clip" not in cause.change.what


def test_a_zero_somewhere_in_the_batch_is_not_blamed_without_matching_counts(tmp_path: Path) -> None:
    """One-hot labels are mostly zeros: they do not give the one -inf the Log made, so no array is named."""
    program = write_program(tmp_path)
    x = np.ones((8, 3), np.float32)
    y = np.eye(8, dtype=np.float32)[:, :1]  # seven zeros
    origin = unrecorded_input_origin(program, "Log", TensorHealth(dtype="float32", size=8, neg_inf=1))
    cause = classify(findings_of(origin), CauseContext(batch=(x, y)))
    assert "batch_array" not in cause.evidence
    assert cause.summary.startswith("a Log op made NaN/Inf from finite inputs"), cause.summary


def test_a_division_by_a_zero_target_is_the_data_not_an_overflow(tmp_path: Path) -> None:
    """A hand-written MAPE, (y_true - y_pred) / y_true, with one target of 0: the RealDiv's Inf from finite inputs
    would read as an overflow; the batch shows the zero denominator."""
    program = write_program(tmp_path)
    x = np.ones((8, 3), np.float32)
    y = np.full((8, 1), 3.0, np.float32)
    y[2, 0] = 0.0
    origin = unrecorded_input_origin(
        program, "RealDiv", TensorHealth(dtype="float32", size=8, pos_inf=1), inputs=2
    )
    cause = classify(findings_of(origin), CauseContext(history=diverging_history(), batch=(x, y)))
    assert cause.kind == "op", cause
    assert cause.evidence["batch_array"] == "y" and cause.evidence["element"] == "y[2, 0] = 0"


def test_a_relative_error_divided_by_zero_targets_is_not_a_feature_s_record(tmp_path: Path) -> None:
    """A Keras 2 sales model's MAPE, ``K.abs((y_true - y_pred) / y_true)``, with a sales of 0 on holidays: the rows
    that went -inf are the holidays, and the holiday flag (standardized: 5.89 among -0.17) was named the record to
    correct ("the record x[13, 4] = 5.89188: correct it or leave it out"), which changes nothing. The divisor held
    the zeros: the relative error is undefined there."""
    from pyadapter.cause.rows import rows_of

    program = write_program(tmp_path)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(128, 5)).astype("float32")
    holiday = np.zeros(128, bool)
    holiday[[13, 63, 85, 111]] = True
    x[:, 4] = np.where(holiday, 5.89188, -0.169725)
    y = np.where(holiday, 0.0, rng.uniform(50, 500, 128)).astype("float32").reshape(128, 1)
    output = np.where(holiday[:, None], -np.inf, 0.1).astype("float32")
    rows = rows_of(output, (x, y))
    assert rows is not None and rows.outliers and rows.outliers[0].element.leaf == "x", rows
    origin = Finding(
        file=str(program),
        line=LOG_LINE,
        role="origin",
        op=OpRef("mape/truediv", "RealDiv"),
        health=TensorHealth(dtype="float32", size=128, neg_inf=4, pos=124),
        inputs=[
            InputHealth("mape/sub:0", TensorHealth(dtype="float32", size=128, neg=124, neg_inf=0, pos=4)),
            InputHealth("ExpandDims:0", TensorHealth(dtype="float32", size=128, zero=4, pos=124)),
        ],
    )
    findings = findings_of(origin, bad_rows=rows.to_json())
    findings.extra["origin_code"] = "    return K.mean(K.abs((y_true - y_pred) / y_true)) * 100"
    cause = classify(findings, CauseContext(batch=(x, y), entry_script=str(program)))
    assert cause.kind != "data", cause
    assert "x[13, 4]" not in cause.summary and "x[13, 4]" not in (
        cause.change.what if cause.change else ""
    ), cause


@pytest.mark.parametrize("defaults", ["[0.0, 0.0, 0.0]", "[float('nan')] * 3"])
def test_a_relative_error_of_a_target_a_csv_reader_filled_with_0_names_the_reader(
    tmp_path: Path, defaults
) -> None:
    """``CsvDataset("daily_sales.csv", record_defaults)`` with defaults of 0.0 and one empty ``units`` field, into a
    relative error: the words said a target of 0 "is valid data", and their epsilon, followed, trained a loss
    dominated by that one record. The reader that fills an empty field with 0 is named, and marking it comes first;
    a reader whose target's default marks a missing value is not."""
    program = tmp_path / "demand.py"
    program.write_text(
        "import tensorflow as tf\n"
        f"record_defaults = {defaults}\n"
        'ds = tf.data.experimental.CsvDataset("daily_sales.csv", record_defaults, header=True)\n'
        "def relative_error(y_true, y_pred):\n"
        "    return tf.reduce_mean(tf.abs(y_true - y_pred) / y_true)\n",
        encoding="utf-8",
    )
    origin = Finding(
        file=str(program),
        line=5,
        role="origin",
        op=OpRef("compile_loss/relative_error/truediv", "RealDiv"),
        health=TensorHealth(dtype="float32", size=32, pos_inf=1, pos=31),
        inputs=[
            InputHealth("compile_loss/relative_error/Abs:0", TensorHealth(dtype="float32", size=32, pos=32)),
            InputHealth(
                "compile_loss/relative_error/ExpandDims:0",
                TensorHealth(dtype="float32", size=32, zero=1, pos=31),
            ),
        ],
    )
    findings = findings_of(origin)
    findings.extra["origin_code"] = "    return tf.reduce_mean(tf.abs(y_true - y_pred) / y_true)"
    cause = classify(
        findings, CauseContext(entry_script=str(program), argv=[str(program)], cwd=str(tmp_path))
    )
    assert cause.change is not None, cause
    if "nan" in defaults:
        assert "fills an empty field with 0" not in cause.summary, cause.summary
        assert cause.change.what.startswith("the relative error:"), cause.change
        return
    assert "CsvDataset (demand.py:3) fills an empty field with 0, its default" in cause.summary, cause.summary
    assert cause.change.what.startswith("the 0 targets: where they are empty CSV fields"), cause.change
    assert "where 0 is a real target (a day without sales), divide by tf.maximum" in cause.change.what


def test_a_mean_of_an_empty_replica_share_is_told_compute_average_loss(tmp_path: Path) -> None:
    """tensorflow.org's distributed custom loop with ``tf.reduce_mean(per_example_loss)``: the last global batch of
    one example split over two replicas leaves replica 1 none, and its mean is 0 / 0. It was "a Mean op made NaN/Inf
    from finite inputs (...: finite (0 values)): keep its inputs in its domain"."""
    program = write_program(tmp_path)
    origin = Finding(
        file=str(program),
        line=LOG_LINE,
        role="origin",
        op=OpRef("replica_1/Mean", "Mean"),
        health=TensorHealth(dtype="float32", size=1, nan=1),
        inputs=[
            InputHealth(
                "replica_1/sparse_categorical_crossentropy/Sum:0", TensorHealth(dtype="float32", size=0)
            )
        ],
    )
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert cause.kind == "op", cause
    assert "averaged an empty tensor" in cause.summary, cause.summary
    assert cause.change is not None and "tf.nn.compute_average_loss" in cause.change.what, cause.change


DATASET_TRAIN = """\
import keras
import numpy as np
import tensorflow as tf

x = np.load("x.npy")
y = np.load("y.npy")
ds = tf.data.Dataset.from_tensor_slices((x, y))
ds = ds{shuffle}.batch(4)
model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(1)])
model.compile(optimizer="adam", loss="mse")
model.fit(ds, epochs=3)
"""


KERAS_MAKER = "ds = keras.utils.{maker}\nds = ds"


@pytest.mark.parametrize(
    ("shuffle", "shuffled"),
    [
        ("", False),
        (".shuffle(64)", True),
        # Keras's makers of a pipeline were not taken for one: "index 0 of the array passed to fit (in the shuffled
        # order)" with a note about fit's shuffle=, for a timeseries pipeline that does not shuffle at all.
        (KERAS_MAKER.format(maker="timeseries_dataset_from_array(x, y, sequence_length=1)"), False),
        (
            KERAS_MAKER.format(maker="timeseries_dataset_from_array(x, y, sequence_length=1, shuffle=True)"),
            True,
        ),
        (KERAS_MAKER.format(maker="image_dataset_from_directory('images')"), True),
    ],
)
def test_a_dataset_passed_to_fit_is_counted_in_its_own_order(
    tmp_path: Path, shuffle: str, shuffled: bool
) -> None:
    """fit ignores shuffle= for a tf.data pipeline: the bad row is the pipeline's element, in the shuffled order
    only when the pipeline itself shuffles (the note then speaks of the pipeline, not of fit's shuffle=False)."""
    program = tmp_path / "train.py"
    if shuffle.startswith("ds = keras"):
        program.write_text(
            DATASET_TRAIN.replace("ds = ds{shuffle}", shuffle).replace(
                "ds = tf.data.Dataset", "_ = tf.data.Dataset"
            )
        )
    else:
        program.write_text(DATASET_TRAIN.format(shuffle=shuffle))
    x = np.ones((4, 3), np.float32)
    x[1, 2] = np.nan
    y = np.ones((4, 1), np.float32)
    origin = batch_origin(program, 11, TensorHealth(dtype="float32", size=12, nan=1))
    cause = classify(
        findings_of(origin), CauseContext(batch=(x, y), batch_index=5, entry_script=str(program))
    )
    assert cause.kind == "data", cause
    assert "x[1, 2] = nan, element 21 of the dataset passed to fit" in cause.summary, cause.summary
    assert ("(in the shuffled order)" in cause.summary) == shuffled
    note = (cause.provenance or {}).get("note", "")
    assert ("the pipeline shuffles" in note) == shuffled and "shuffle=False" not in note


@pytest.mark.parametrize("given", ["dataset", "shuffled dataset"])
def test_a_dataset_a_helper_makes_is_counted_as_what_fit_was_given(tmp_path: Path, given: str) -> None:
    """``model.fit(make_spec_ds(train_ds))``: reading the code cannot tell that fit got a dataset, and the cause said
    "index 57 of the array passed to fit (in the shuffled order)", with a note to pass shuffle=False, which a dataset
    ignores. The guard records what fit was given (``model_info["fit_input"]``): the element of the dataset, in the
    shuffled order only when the pipeline shuffles."""
    program = tmp_path / "train.py"
    program.write_text(
        DATASET_TRAIN.format(shuffle="")
        .replace("ds = tf.data.Dataset.from_tensor_slices((x, y))", "ds = make_dataset(x, y)")
        .replace("import tensorflow as tf\n", "import tensorflow as tf\nfrom pipelines import make_dataset\n")
    )
    x = np.ones((4, 3), np.float32)
    x[1, 2] = np.nan
    origin = batch_origin(program, 11, TensorHealth(dtype="float32", size=12, nan=1))
    context = CauseContext(
        batch=(x, np.ones((4, 1), np.float32)),
        batch_index=5,
        entry_script=str(program),
        model_info={"fit_input": given},
    )
    cause = classify(findings_of(origin), context)
    assert "x[1, 2] = nan, element 21 of the dataset passed to fit" in cause.summary, cause.summary
    assert ("(in the shuffled order)" in cause.summary) == (given == "shuffled dataset"), cause.summary
    assert "shuffle=False" not in (cause.provenance or {}).get("note", ""), cause.provenance


def test_what_fit_was_given_is_read_from_fits_own_frame() -> None:
    """The guard reads fit's ``x`` while fit runs: a dataset, and whether its pipeline shuffles (from its Python
    objects, not its serialized graph, which would copy the arrays it holds); nothing for arrays."""
    import tensorflow as tf

    from pyadapter.capture import fit_call

    def fit(x: object) -> str | None:  # stands for keras/src/.../trainer.py's fit (the path is faked below)
        return fit_call.fit_input_kind()

    fit.__code__ = fit.__code__.replace(
        co_filename="/venv/site-packages/keras/src/backend/tensorflow/trainer.py"
    )
    rows = tf.data.Dataset.range(8)
    assert fit(rows.map(lambda i: i * 2).batch(2)) == "dataset"
    assert fit(rows.shuffle(8).map(lambda i: i * 2).batch(2).prefetch(1)) == "shuffled dataset"
    assert fit(np.zeros((8, 2))) is None

    import keras

    class Batches(keras.utils.PyDataset):
        def __len__(self) -> int:
            return 2

        def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
            return np.zeros((4, 2)), np.zeros((4, 1))

    def batches() -> object:
        yield np.zeros((4, 2)), np.zeros((4, 1))

    assert fit(Batches()) == "PyDataset"
    assert fit(batches()) == "generator"


PYDATASET_CELLS = [
    "import keras\nimport numpy as np\nimport pandas as pd",
    'data = pd.read_csv("sensors.csv")\ndata.describe()',
    """class SensorSequence(keras.utils.PyDataset):
    def __init__(self, frame, batch_size=4, **kwargs):
        super().__init__(**kwargs)
        self.x = frame[["temp", "pressure", "flow"]].to_numpy(dtype="float32")
        self.y = frame[["yield"]].to_numpy(dtype="float32")

    def __len__(self):
        return len(self.x) // 4

    def __getitem__(self, i):
        return self.x[i * 4:(i + 1) * 4], self.y[i * 4:(i + 1) * 4]

train_seq = SensorSequence(data)""",
    'model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(1)])\nmodel.compile("adam", "mse")',
    "history = model.fit(train_seq, epochs=3)",
]


def test_a_notebooks_pydataset_is_the_feed_when_its_fit_is_on_line_1_like_the_read(tmp_path: Path) -> None:
    """A notebook reads a CSV on line 1 of one cell and fits a PyDataset on line 1 of another: the read was taken
    for "on the origin's line" (cells not compared), so the PyDataset was never looked for, and the cause said
    "index 1593 of the array passed to fit (in the shuffled order)" of an array fit was never given. The
    PyDataset's __getitem__ is where the batch leaves the user's code, as in a script."""
    notebook = tmp_path / "sensors.ipynb"
    cells = [
        {"cell_type": "code", "source": text, "metadata": {}, "outputs": [], "execution_count": n}
        for n, text in enumerate(PYDATASET_CELLS, 1)
    ]
    notebook.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    x = np.ones((4, 3), np.float32)
    x[1, 2] = np.nan
    origin = dataclasses.replace(
        batch_origin(notebook, 1, TensorHealth(dtype="float32", size=12, nan=1)), cell=4
    )
    context = CauseContext(batch=(x, np.ones((4, 1), np.float32)), batch_index=5, entry_script=str(notebook))
    cause = classify(findings_of(origin), context)
    assert cause.kind == "data" and "x[1, 2] = nan" in cause.summary, cause.summary
    assert "SensorSequence.__getitem__ of the PyDataset" in cause.summary, cause.summary
    assert "passed to fit" not in cause.summary, cause.summary
    assert cause.change is not None and (cause.change.cell, cause.change.line) == (2, 11), cause.change


PYDATASET_IMPORTED = """\
import keras
import pandas as pd

from sensors import SensorSequence

data = pd.read_csv("sensors.csv")
model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(1)])
model.compile(optimizer="adam", loss="mse")
model.fit(SensorSequence(data), epochs=3)
"""


def test_a_pydataset_fit_was_given_has_no_index_of_an_array_of_fits(tmp_path: Path) -> None:
    """A PyDataset whose class the code read does not hold (imported from a module not at hand): the cause said
    "index 21 of the array passed to fit (in the shuffled order)" with a note to pass shuffle=False, of an array
    fit was never given. What fit was given (``model_info["fit_input"]``) is said instead, and the row is to be
    found by its values."""
    program = tmp_path / "train.py"
    program.write_text(PYDATASET_IMPORTED)
    x = np.ones((4, 3), np.float32)
    x[1, 2] = np.nan
    origin = batch_origin(program, 9, TensorHealth(dtype="float32", size=12, nan=1))
    context = CauseContext(
        batch=(x, np.ones((4, 1), np.float32)),
        batch_index=5,
        entry_script=str(program),
        model_info={"fit_input": "PyDataset"},
    )
    cause = classify(findings_of(origin), context)
    assert cause.kind == "data" and "x[1, 2] = nan" in cause.summary, cause.summary
    assert "passed to fit" not in cause.summary, cause.summary
    note = (cause.provenance or {}).get("note", "")
    assert "fit was given a PyDataset" in note and "shuffle=False" not in note, cause.provenance


LOG_AFTER_READ = """\
import keras
import numpy as np

data = np.genfromtxt("houses.csv", delimiter=",")
x = np.column_stack([data[:, :2], np.log(data[:, 2])]).astype("float32")
y = data.sum(axis=1, keepdims=True).astype("float32")
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
model.compile("adam", "mse")
model.fit(x, y, batch_size=32, epochs=2, shuffle=False)
"""


def test_an_infinity_a_log_after_the_read_made_names_that_computation(tmp_path: Path) -> None:
    """A lot size of 0 read by genfromtxt, then ``np.log`` of that column where x is made: x holds -inf. The line to
    change was the genfromtxt call ("filter or repair non-finite records where the data is read"), where every
    value is finite; it is the computation of x."""
    program = tmp_path / "train.py"
    program.write_text(LOG_AFTER_READ)
    x = np.ones((32, 3), np.float32)
    x[8, 2] = -np.inf
    origin = batch_origin(program, 10, TensorHealth(dtype="float32", size=96, neg_inf=1))
    context = CauseContext(
        batch=(x, np.ones((32, 1), np.float32)),
        batch_index=6,
        entry_script=str(program),
        model_info={
            "fit_call": {"code": "model.fit(x, y, batch_size=32, epochs=2, shuffle=False)", "ordinal": 0}
        },
    )
    cause = classify(findings_of(origin), context)
    assert cause.kind == "data", cause
    assert "x is computed from what was read with a log or a division" in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == 5, (
        cause.change
    )  # x = np.column_stack([... np.log(...)])
    # A NaN (an empty field genfromtxt read) keeps the reading line.
    x[8, 2] = np.nan
    assert classify(findings_of(origin), context).change.line == 4


LOOP_TRAIN = """\
import tensorflow as tf


@tf.function
def train_step(features, targets):
    pred = model(features)
    return tf.reduce_mean(tf.square(tf.math.log(targets) - tf.math.log(pred)))


for features, targets in dataset:
    train_step(features, targets)
"""


def test_a_custom_loop_step_argument_is_named_as_the_step_names_it(tmp_path: Path) -> None:
    """guard_step's bundle holds the step's arguments as args[0], args[1]: the cause says ``targets``, the step's own
    parameter, and counts no index "of the array passed to fit" (there is no fit)."""
    program = tmp_path / "loop.py"
    program.write_text(LOOP_TRAIN)
    targets = np.full((8, 1), 2.0, np.float32)
    targets[6, 0] = 0.0
    origin = unrecorded_input_origin(program, "Log", TensorHealth(dtype="float32", size=8, neg_inf=1))
    context = CauseContext(
        batch={"args": (np.ones((8, 4), np.float32), targets), "kwargs": {}},
        batch_index=3,
        entry_script=str(program),
        step_function={"module": "__main__", "qualname": "train_step", "file": str(program)},
    )
    cause = classify(findings_of(origin), context)
    assert cause.evidence["batch_array"] == "targets", cause
    assert cause.summary.startswith(
        "a Log op read the step's argument targets as it came, and targets holds 1 zero for it: targets[6, 0] = 0"
    ), cause.summary
    assert "passed to fit" not in cause.summary and "(step 3's batch, row 6)" in cause.summary
    # Passed by keyword (train_step(features, targets=targets)), the bundle holds it under its keyword.
    context.batch = {"args": (np.ones((8, 4), np.float32),), "kwargs": {"targets": targets}}
    assert classify(findings_of(origin), context).evidence["batch_array"] == "targets"


CLASS_WEIGHTED_DATASET = """\
import numpy as np
import tensorflow as tf
import keras

x = np.random.default_rng(0).normal(size=(256, 4)).astype("float32")
y = (x[:, 0] > 0).astype("float32")
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(32)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, activation="sigmoid")])
model.compile(optimizer="adam", loss="binary_crossentropy")
model.fit(ds, epochs=1,
          class_weight={0: 1.0, 1: float("inf")})
"""


def _class_weighted_step(program: Path, line: int) -> tuple[Findings, tuple[np.ndarray, ...]]:
    """A step whose batch's class-1 rows have sample weight inf (Keras made it from class_weight), and the weighted
    loss's gradient AddN at `line` of `program` as the origin a pipeline re-run found: (findings, (x, y, weights))."""
    x = np.ones((32, 4), np.float32)
    y = np.array([1, 0] * 16, np.float32)
    weights = np.where(y == 1, np.inf, 1.0).astype(np.float32)
    origin = Finding(
        file=str(program),
        line=line,
        role="origin",
        op=OpRef("gradient_tape/AddN", "AddN"),
        health=TensorHealth(dtype="float32", size=32, nan=16, pos=16),
        inputs=[InputHealth("Select:0", TensorHealth(dtype="float32", size=32, pos_inf=16, neg=16))],
    )
    findings = findings_of(
        origin,
        non_finite_batch={"total": 16, "leaves": ["sample_weight"]},
        origin_from="input pipeline re-run",
    )
    return findings, (x, y, weights)


def test_a_psnr_of_flat_patches_the_model_reproduces_names_the_zero_mse_not_a_record(tmp_path: Path) -> None:
    """A super-resolution loss ``10 * log(1 / mse)`` whose zero-initialized residual reproduces flat patches (one
    value throughout) exactly at step 0 (s43e p5): the per-image mse is 0 in rows 4, 8 and 14. The cause was "row 8
    holds a value unlike the other rows': x[8, 0, 0, 0] = 0.25 ... leave it out"; dropping such patches left the
    others, and divide_no_nan gives 0, whose log is -inf. A bad row that is not flat keeps the record's words."""
    program = tmp_path / "sr.py"
    program.write_text(
        "import tensorflow as tf\n"
        "def psnr(y_true, y_pred):\n"
        "    mse = tf.reduce_mean(tf.square(y_true - y_pred), axis=[1, 2, 3])\n"
        "    return 10.0 * tf.math.log(1.0 / mse) / tf.math.log(10.0)\n"
    )
    rng = np.random.default_rng(0)
    x = rng.uniform(0.55, 0.65, (16, 8, 8, 1)).astype(np.float32)
    y = rng.uniform(0.45, 0.75, (16, 16, 16, 1)).astype(np.float32)
    for row, value in ((4, 0.5), (8, 0.25), (14, 0.25)):
        x[row], y[row] = value, value
    origin = Finding(
        file=str(program),
        line=4,
        role="origin",
        op=OpRef("truediv", "RealDiv", graph="train_step"),
        health=TensorHealth(dtype="float32", size=16, pos_inf=3, pos=13),
        inputs=[
            InputHealth("truediv/x:0", TensorHealth(dtype="float32", size=1, pos=1)),
            InputHealth("Mean:0", TensorHealth(dtype="float32", size=16, zero=3, pos=13)),
        ],
    )

    def outlier(array: str, index: list[int], value: float) -> dict:
        return {"array": array, "index": index, "value": value, "low": 0.55, "high": 0.65, "good_rows": 13}

    bad_rows = {
        "rows": [4, 8, 14],
        "count": 3,
        "batch_rows": 16,
        "outliers": [
            outlier("x", [8, 0, 0, 0], 0.25),
            outlier("x", [14, 0, 0, 0], 0.25),
            outlier("y", [4, 1, 1, 0], 0.5),
        ],
    }
    findings = findings_of(origin, bad_rows=bad_rows)
    cause = classify(findings, CauseContext(batch=(x, y), entry_script=str(program), step=0))
    assert cause.summary.startswith(
        "the RealDiv op got 3 zeros from the per-record reduction Mean:0, in rows 4, 8 and 14 of the batch, each a "
        "record with one value throughout"
    ), cause.summary
    assert cause.change is not None and cause.change.line == 4, cause.change
    assert cause.change.what.startswith(
        "the division: keep the reduction away from 0 (tf.maximum(mse, 1e-10)"
    ), cause.change.what
    # Row 8 not flat (a record of 0.25 among others' 0.6): the record, as before.
    x[8] = rng.uniform(0.55, 0.65, (8, 8, 1))
    x[8, 0, 0, 0] = 0.25
    y[8] = rng.uniform(0.45, 0.75, (16, 16, 1))
    cause = classify(findings, CauseContext(batch=(x, y), entry_script=str(program), step=0))
    assert "per-record reduction" not in cause.summary, cause.summary


IDDPM_SCHEDULE = """\
import numpy as np
import tensorflow as tf

T = 200
betas = np.linspace(1e-4, 0.05, T)
alphas_cumprod = np.cumprod(1.0 - betas)
alphas_cumprod_prev = np.append(1.0, alphas_cumprod[:-1])
posterior_variance = betas * (1.0 - alphas_cumprod_prev) / (1.0 - alphas_cumprod)
posterior_log_variance = np.log(posterior_variance)
SCHED = {"post_logvar": tf.constant(posterior_log_variance, tf.float32)}

def gather(name, t):
    return tf.gather(SCHED[name], t)[:, None]
"""


def test_a_gather_of_a_schedule_numpy_made_inf_names_the_numpy_line_not_an_overflow(tmp_path: Path) -> None:
    """Improved DDPM's ``np.log(posterior_variance)``, -inf at t = 0, gathered in the step (s43a p8): the dump
    records no health for the captured constant, so the gather looked like an op that made -inf of finite inputs:
    "a GatherV2 op overflowed on finite inputs ... keep its values in range". A gather copies; NumPy warned at the
    line that made it."""
    from pyadapter.numpy_warnings import NumpyWarning

    program = tmp_path / "iddpm.py"
    program.write_text(IDDPM_SCHEDULE)
    origin = Finding(
        file=str(program),
        line=14,
        role="origin",
        op=OpRef("GatherV2_4", "GatherV2", graph="train_step"),
        health=TensorHealth(dtype="float32", size=256, neg_inf=2, neg=254),
        inputs=[
            InputHealth("GatherV2_4/params:0", None),
            InputHealth("stateless_random_uniform:0", None),
            InputHealth("GatherV2_4/axis:0", None),
        ],
    )
    warned = [NumpyWarning(str(program), 10, "divide by zero encountered in log")]
    cause = classify(
        findings_of(origin), CauseContext(entry_script=str(program), step=1, numpy_warnings=warned)
    )
    assert cause.kind == "data", cause
    assert cause.summary.startswith(
        "the GatherV2 op only copies values: it took 2 -inf of 256 from GatherV2_4/params"
    ), cause.summary
    assert 'NumPy warned "divide by zero encountered in log" at iddpm.py:10' in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == 10, cause.change
    assert "overflow" not in cause.summary
    # No warning: the captured tensor, at the gather's line.
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program), step=1))
    assert cause.kind == "data" and cause.change is not None and cause.change.line == 14, cause


RECENCY_WEIGHTS = """\
import numpy as np
import pandas as pd
import tensorflow as tf

clicks = pd.read_csv("clicks.csv")
NOW = pd.Timestamp("2023-10-23").timestamp()

def add_recency_weight(features, label):
    age_days = (NOW - features["ts"]) / 86400.0
    weight = tf.exp(-age_days * np.log(2.0) / 30.0)
    return {"uid": features["uid"]}, label, weight

ds = tf.data.Dataset.from_tensor_slices(({"uid": clicks.uid.values, "ts": clicks.ts.values}, clicks.label.values))
ds = ds.map(add_recency_weight).batch(256)
model.fit(ds, epochs=4)
"""


def test_an_exp_of_a_map_function_that_overflows_on_the_records_names_the_records_not_a_clip(
    tmp_path: Path,
) -> None:
    """A recency weight exp(-age * ln 2 / half_life) in a Dataset.map, where 3% of the timestamps are in
    milliseconds (s43b p8): ages of -2e7 days, and the exp overflowed. The pipeline re-run found the Exp, and the
    cause was "an Exp op overflowed ... unscaled inputs or initial weights ... bound its input (tf.clip_by_value)":
    no weight is involved in a map function, and a clip at +-20, followed, trained the bad rows at weight e^20."""
    program = tmp_path / "recency.py"
    program.write_text(RECENCY_WEIGHTS)
    origin = Finding(
        file=str(program),
        line=10,
        role="origin",
        op=OpRef("Exp", "Exp", graph="Dataset_map_add_recency_weight"),
        health=TensorHealth(dtype="float64", size=1, pos_inf=1),
        inputs=[InputHealth("mul:0", TensorHealth(dtype="float64", size=1, pos=1))],
    )
    findings = findings_of(
        origin,
        non_finite_batch={"total": 2, "examples": ["sample_weight[63] = inf", "sample_weight[78] = inf"]},
        origin_from="input pipeline re-run",
    )
    x, y, weights = np.ones((256, 1), np.float32), np.ones(256, np.float32), np.ones(256, np.float32)
    weights[[63, 78]] = np.inf
    cause = classify(findings, CauseContext(batch=(x, y, weights), entry_script=str(program), step=0))
    assert cause.kind == "data", cause
    assert cause.summary.startswith(
        "the Exp op of the input pipeline's function add_recency_weight (it reads 'ts') overflowed on finite values "
        "of the records themselves"
    ), cause.summary
    assert "the batch holds sample_weight[63] = inf, sample_weight[78] = inf" in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == 10, cause.change
    assert cause.change.what.startswith("the records that make the Exp's input that large"), cause.change.what
    assert "initial weights" not in cause.summary and "clip_by_value" not in cause.change.what
    # The same Exp in the training step (not the pipeline's) keeps the step's words.
    in_step = dataclasses.replace(origin, op=OpRef("Exp", "Exp", graph="__inference_train_function_99"))
    cause = classify(findings_of(in_step), CauseContext(entry_script=str(program), step=0))
    assert "input pipeline" not in cause.summary, cause.summary


def test_a_class_weighted_inf_on_a_dataset_names_the_class_weights_after_a_pipeline_re_run(
    tmp_path: Path,
) -> None:
    """The batch holds an inf sample weight, so `locate` re-ran the input pipeline, whose first non-finite op was
    the weighted loss's gradient AddN in the training step: the cause was "op — an AddN op made NaN from inputs
    that held infinities ... keep its inputs in its domain" at the fit line. Keras made that weight from
    class_weight after the pipeline, as with arrays, where the cause names the class_weight line."""
    program = tmp_path / "cw.py"
    program.write_text(CLASS_WEIGHTED_DATASET)
    findings, (x, y, weights) = _class_weighted_step(program, 10)
    cause = classify(findings, CauseContext(batch=(x, y, weights), entry_script=str(program)))
    assert cause.kind == "data", cause
    assert cause.summary.startswith("the class weights given to fit weigh class 1 inf"), cause.summary
    assert cause.change is not None and cause.change.line == 11, cause.change  # class_weight={0: 1.0, 1: inf}
    # One-hot labels: the row's class, not "y = 1" of a label that is a vector.
    one_hot = np.eye(2, dtype=np.float32)[y.astype(int)]
    cause = classify(findings, CauseContext(batch=(x, one_hot, weights), entry_script=str(program)))
    assert "row 0 of the batch (class 1) has sample weight inf" in cause.summary, cause.summary


def test_a_custom_loop_record_far_outside_the_rest_names_what_the_loop_iterates(tmp_path: Path) -> None:
    """An overflow on a batch with one value a million times the rest, in a guard_step loop: the record is the
    cause, and the line to change is where the batches come from, the loop over the dataset, as for a NaN in the
    data. It named no line to read the data at, since the program passes nothing to fit."""
    program = tmp_path / "loop.py"
    program.write_text(
        LOOP_TRAIN.replace(
            "for features,",
            "dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).batch(8)\nfor features,",
        )
    )
    features = np.linspace(-1.0, 1.0, 32, dtype=np.float32).reshape(8, 4)
    features[5, 2] = 3e21
    origin = Finding(
        file=str(program),
        line=7,
        role="origin",
        op=OpRef("Square", "Square"),
        health=TensorHealth(dtype="float32", size=8, pos_inf=1, pos=7),
        inputs=[InputHealth("sub:0", TensorHealth(dtype="float32", size=8, pos=4, neg=4))],
    )
    context = CauseContext(
        batch={"args": (features, np.ones((8, 1), np.float32)), "kwargs": {}},
        batch_index=3,
        entry_script=str(program),
        step_function={"module": "__main__", "qualname": "train_step", "file": str(program)},
    )
    cause = classify(findings_of(origin), context)
    assert cause.kind == "data" and "features[5, 2] = 3e+21" in cause.summary, cause
    assert "passed to fit" not in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == 10, (
        cause.change
    )  # dataset = ...from_tensor_slices(...)
    assert "features[5, 2] = 3e+21" in cause.change.what, cause.change


def test_a_sqrt_differentiated_at_zero_says_so_and_proposes_an_epsilon(tmp_path: Path) -> None:
    """A minibatch std over a feature that does not vary: sqrt(0) is a finite 0, and SqrtGrad (0.5 / y) is Inf.
    The generic "keep its inputs in its domain" does not tell a user that the forward value was fine."""
    program = write_program(tmp_path)
    origin = Finding(
        file=str(program),
        line=LOG_LINE,
        role="origin",
        op=OpRef("gradient_tape/model/std/SqrtGrad", "SqrtGrad"),
        health=TensorHealth(dtype="float32", size=64, neg_inf=3),
        inputs=[
            InputHealth("model/std/Sqrt:0", TensorHealth(dtype="float32", size=64, zero=3, pos=61)),
            # The gradient coming in has zeros of its own (a triplet loss's unused pairs): not the Sqrt's value.
            InputHealth(
                "gradient_tape/model/truediv:0", TensorHealth(dtype="float32", size=64, zero=20, pos=44)
            ),
        ],
    )
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert cause.kind == "op"
    assert "differentiated sqrt at 0 (3 zeros in its value)" in cause.summary, cause.summary
    assert cause.change is not None and "epsilon" in cause.change.what and cause.change.line == LOG_LINE
    assert "tf.sqrt(x + 1e-12)" in cause.change.what
    # tf.norm on the line (a triplet loss's distance): no epsilon argument to add, so the norm is written out.
    program.write_text(TRAIN.replace("loss = tf.math.log(probs)", "loss = tf.norm(probs, axis=-1)"))
    norm = classify(findings_of(origin), CauseContext(entry_script=str(program))).change
    assert norm is not None and "tf.sqrt(tf.reduce_sum(tf.square(x), axis=-1) + 1e-12)" in norm.what, norm
    # ArcFace's sin = sqrt(1 - cos ** 2): the epsilon added to 1 - x, followed, was folded into the 1 in the
    # compiled step; a floor survives it.
    program.write_text(TRAIN.replace("loss = tf.math.log(probs)", "loss = tf.sqrt(1.0 - tf.square(probs))"))
    sine = classify(findings_of(origin), CauseContext(entry_script=str(program))).change
    assert sine is not None and sine.what.startswith("the sqrt of 1 - x: floor it, tf.sqrt(tf.maximum("), sine
    # A SqrtGrad whose forward value held no zero (an Inf coming in) keeps the generic words.
    origin.inputs[0] = InputHealth("model/std/Sqrt:0", TensorHealth(dtype="float32", size=64, pos=64))
    assert (
        "differentiated" not in classify(findings_of(origin), CauseContext(entry_script=str(program))).summary
    )


def test_a_fractional_power_differentiated_at_zero_names_the_power_not_its_domain(tmp_path: Path) -> None:
    """A focal loss's (1 - p) ** 0.5 at p == 1: the gradient's Pow (x ** -0.5) is Inf. The cause said "a Pow op
    made NaN/Inf from finite inputs ... keep its inputs in its domain", where the forward value was a fine 0."""
    program = write_program(tmp_path)
    origin = Finding(
        file=str(program),
        line=LOG_LINE,
        role="backward-origin",
        op=OpRef(
            "gradient_tape/compile_loss/focal_loss/Pow/Pow", "Pow", forward_op="compile_loss/focal_loss/Pow"
        ),
        health=TensorHealth(dtype="float32", size=64, pos_inf=1, pos=63),
        inputs=[
            InputHealth(
                "compile_loss/focal_loss/sub_2:0", TensorHealth(dtype="float32", size=64, zero=1, pos=63)
            ),
            InputHealth(
                "gradient_tape/compile_loss/focal_loss/Pow/sub:0",
                TensorHealth(dtype="float32", size=1, neg=1),
            ),
        ],
    )
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert cause.kind == "op"
    assert cause.summary.startswith(
        "the step differentiated a power x ** p with p < 1 at x = 0 (1 zero in its base)"
    )
    assert cause.change is not None and cause.change.line == LOG_LINE, cause.change
    assert cause.change.what.startswith("the power: keep its base above 0"), cause.change
    # An exponent >= 1 (x ** 2's gradient is 2 * x ** 1) is not this: the generic words stay.
    origin.inputs[1] = InputHealth("Pow/sub:0", TensorHealth(dtype="float32", size=1, pos=1))
    assert (
        "differentiated" not in classify(findings_of(origin), CauseContext(entry_script=str(program))).summary
    )


def test_a_cholesky_of_a_matrix_no_longer_positive_definite_proposes_a_jitter(tmp_path: Path) -> None:
    """A Gaussian-process loss (deep kernel learning) whose noise term shrinks: Cholesky of a finite kernel matrix
    returns NaN on CPU. The cause said "keep its inputs in its domain", which names no domain."""
    program = write_program(tmp_path)
    origin = Finding(
        file=str(program),
        line=LOG_LINE,
        role="origin",
        op=OpRef("Cholesky", "Cholesky"),
        health=TensorHealth(dtype="float32", size=1024, nan=1024),
        inputs=[InputHealth("add_3:0", TensorHealth(dtype="float32", size=1024, pos=1024))],
    )
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert cause.kind == "op"
    assert cause.summary.startswith(
        "a Cholesky op made NaN/Inf from a finite matrix that is not positive definite"
    )
    assert cause.change is not None and cause.change.line == LOG_LINE
    assert "jitter to its diagonal (K + 1e-6 * tf.eye(n))" in cause.change.what, cause.change


def test_an_lgamma_of_a_softplus_zero_on_raw_dollar_features_is_told_to_scale_them(tmp_path: Path) -> None:
    """Beta regression whose network outputs (alpha, beta) through a softplus Dense, fed raw dollar amounts: the
    softplus of a pre-activation far below 0 is exactly 0 in float32 and lgamma(0) is inf. It said "a Dense output
    without a positive activation" and "keep it above 0 (tf.nn.softplus(x) + 1e-6)", which kept it finite and
    trained nothing (val_loss stuck at 12.5). The features' scale is the change."""
    program = tmp_path / "beta.py"
    program.write_text(
        "import numpy as np\n"
        "import keras\n"
        "X = np.load('loans.npy')\n"
        "y = np.load('shares.npy')\n"
        "model = build_model()\n"
        "model.fit(X, y, batch_size=32)\n"
    )
    rng = np.random.default_rng(0)
    batch = (rng.uniform(1e4, 1e5, size=(32, 3)).astype("float32"), rng.uniform(0.1, 0.9, size=(32, 1)))
    origin = Finding(
        file=str(program),
        line=5,
        role="origin",
        op=OpRef("compile_loss/beta_nll/Lgamma", "Lgamma"),
        health=TensorHealth(dtype="float32", size=32, pos_inf=1, pos=31),
        inputs=[
            InputHealth("compile_loss/beta_nll/add:0", TensorHealth(dtype="float32", size=32, zero=1, pos=31))
        ],
    )
    cause = classify(
        findings_of(origin), CauseContext(entry_script=str(program), batch=batch, layer_classes=set())
    )
    assert "the batch's features are unscaled (x[:, " in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == 3, cause.change
    assert cause.change.what.startswith("scale the features"), cause.change


def test_a_log_of_an_exp_link_that_underflowed_on_raw_features_is_told_to_scale_them(tmp_path: Path) -> None:
    """A Poisson GLM on claims data (densities up to 2.7e4) with ``Dense(1, activation="exponential")`` and a
    hand-written deviance, ``y_pred - y_true * log(y_pred)``: the exp underflowed to 0 for half the rows at step 0.
    The change was "use the exponent itself"; followed, the NaN was gone and the loss sat at 1.4e13. The features'
    scale comes first."""
    program = tmp_path / "glm.py"
    program.write_text(
        "import numpy as np\n"
        "import keras\n"
        "X = np.load('claims.npy')\n"
        "y = np.load('counts.npy')\n"
        "model = build_model()\n"
        "model.fit(X, y, batch_size=64)\n"
    )
    rng = np.random.default_rng(0)
    batch = (rng.uniform(1.0, 2.7e4, size=(64, 3)).astype("float32"), rng.poisson(0.1, size=(64, 1)))
    origin = Finding(
        file=str(program),
        line=5,
        role="origin",
        op=OpRef("compile_loss/poisson_deviance/Log", "Log"),
        health=TensorHealth(dtype="float32", size=64, neg_inf=32, pos=32),
        inputs=[
            InputHealth("sequential_1/dense_1/Exp:0", TensorHealth(dtype="float32", size=64, zero=32, pos=32))
        ],
    )
    findings = findings_of(origin)
    findings.extra["zeros_from_exp"] = {"line": 5, "zeros": 32, "log_of": "Exp"}
    cause = classify(
        findings, CauseContext(entry_script=str(program), batch=batch, layer_classes=set(), step=0)
    )
    assert "the batch's features are unscaled (x[:, " in cause.summary, cause.summary
    assert cause.change is not None and cause.change.what.startswith("scale the features"), cause.change
    assert "use the exponent itself" in cause.change.what, cause.change


def test_a_log_of_a_softmax_zero_on_raw_count_features_is_told_to_scale_them(tmp_path: Path) -> None:
    """Label smoothing by hand, ``-sum(y * log(y_pred))`` on a softmax output, fed raw counts in the hundreds: the
    softmax is exactly 0 at step 0. It said "take tf.nn.log_softmax ... or keep it above 0 (tf.math.log(tf.maximum(x,
    1e-7)))"; the clamp, followed, left the classifier stuck at accuracy 0.19, and scaling the inputs alone removed
    the NaN. The features' scale is named first, log_softmax next."""
    program = tmp_path / "smooth.py"
    program.write_text(
        "import numpy as np\n"
        "import keras\n"
        "X = np.load('counts.npy')\n"
        "y = np.load('labels.npy')\n"
        "model = build_model()\n"
        "model.fit(X, y, batch_size=32)\n"
    )
    rng = np.random.default_rng(0)
    batch = (
        rng.uniform(0, 800, size=(32, 6)).astype("float32"),
        np.eye(5, dtype="float32")[np.arange(32) % 5],
    )
    origin = Finding(
        file=str(program),
        line=5,
        role="origin",
        op=OpRef("compile_loss/loss_fn/Log", "Log"),
        health=TensorHealth(dtype="float32", size=160, neg_inf=96, neg=64),
        inputs=[
            InputHealth(
                "sequential/dense_1/Softmax:0", TensorHealth(dtype="float32", size=160, zero=96, pos=64)
            )
        ],
    )
    cause = classify(
        findings_of(origin), CauseContext(entry_script=str(program), batch=batch, layer_classes=set())
    )
    assert "the batch's features are unscaled (x[:, " in cause.summary, cause.summary
    assert cause.change is not None and cause.change.what.startswith("scale the features"), cause.change
    assert "tf.nn.log_softmax" in cause.change.what and "those rows stop learning" in cause.change.what, (
        cause.change
    )
    # Saturated after 616 steps of training (digits of 0-16 by hand-written cross-entropy): the log's stable form
    # leads, at the log, and the features' scale comes second.
    late = CauseContext(
        entry_script=str(program), batch=batch, layer_classes=set(), step=616, history=diverging_history()[:5]
    )
    cause = classify(findings_of(origin, step=616), late)
    assert cause.change is not None and cause.change.what.startswith("the log of a softmax"), cause.change
    assert "; and scale the features (x[:, " in cause.change.what and cause.change.line == 5, cause.change


def test_an_rsqrt_at_a_batch_norm_given_epsilon_0_is_that_epsilon(tmp_path: Path) -> None:
    """``layers.BatchNormalization(epsilon=0.0)`` after a Dense layer, and an epoch's last batch of one row: the
    variance is 0, rsqrt(0) is inf, and the origin is marked at the layer's construction. The change read "the
    Rsqrt's input: keep it in the domain (tf.math.rsqrt(tf.maximum(x, 1e-12)))", for a line with no rsqrt."""
    program = tmp_path / "bn.py"
    program.write_text(
        "import keras\n"
        "from keras import layers\n"
        "model = keras.Sequential([keras.Input((8,)), layers.Dense(64),\n"
        "    layers.BatchNormalization(epsilon=0.0), layers.Dense(1)])\n"
        "model.fit(x, y, batch_size=32)\n"
    )
    origin = Finding(
        file=str(program),
        line=4,
        role="origin",
        op=OpRef("sequential_1/batch_normalization_1/batchnorm/Rsqrt", "Rsqrt"),
        health=TensorHealth(dtype="float32", size=64, pos_inf=64),
        inputs=[InputHealth("batchnorm/add:0", TensorHealth(dtype="float32", size=64, zero=64))],
    )
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert "BatchNormalization at this line is given epsilon=0" in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == 4, cause.change
    assert cause.change.what.startswith("the epsilon of BatchNormalization"), cause.change


def test_a_cholesky_whose_matrix_already_gets_a_jitter_is_told_to_enlarge_it(tmp_path: Path) -> None:
    """The line above the Cholesky already adds ``(noise + jitter) * tf.eye(n)`` with a jitter of 1e-6 and an
    unbounded exp noise: the advice "add a small jitter to its diagonal (K + 1e-6 * tf.eye(n))" asked for what is
    there. The line that adds it is the change, with a jitter float32 holds and a noise bounded below."""
    program = tmp_path / "gp.py"
    program.write_text(
        "import tensorflow as tf\n"
        "def neg_mll(K, log_noise, jitter=1e-6):\n"
        "    noise = tf.exp(log_noise)\n"
        "    K = K + (noise + jitter) * tf.eye(tf.shape(K)[0])\n"
        "    L = tf.linalg.cholesky(K)\n"
        "    return L\n"
    )
    origin = Finding(
        file=str(program),
        line=5,
        role="origin",
        op=OpRef("Cholesky", "Cholesky"),
        health=TensorHealth(dtype="float32", size=1024, nan=1024),
        inputs=[InputHealth("add_3:0", TensorHealth(dtype="float32", size=1024, pos=1024))],
    )
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert cause.change is not None and cause.change.line == 4, cause.change
    assert "1e-6 * tf.eye(n)" not in cause.change.what, cause.change
    assert "bounded below" in cause.change.what, cause.change
    # A comment naming a jitter is no jitter the code adds (``# FIX: Kzz + 1e-6 * tf.eye(M)``).
    program.write_text(
        "import tensorflow as tf\n"
        "def neg_mll(K):\n"
        "    # FIX: K + 1e-6 * tf.eye(M)\n"
        "    K = 0.5 * (K + tf.transpose(K))\n"
        "    L = tf.linalg.cholesky(K)\n"
        "    return L\n"
    )
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert (
        cause.change is not None and "jitter to its diagonal (K + 1e-6 * tf.eye(n))" in cause.change.what
    ), cause.change


PY_FUNCTION_MODEL = """\
import numpy as np
import tensorflow as tf
import keras


def log_transform(x):
    return np.log(x.numpy()).astype(np.float32)


class PyFeatureModel(keras.Model):
    def call(self, x):
        return self.out(tf.py_function(log_transform, [x], tf.float32))
"""


@pytest.mark.parametrize("graph", ["train_step", "Dataset_map_load_and_transform"])
def test_a_py_function_inside_the_step_is_an_op_of_the_step_not_data(tmp_path: Path, graph: str) -> None:
    """``tf.py_function(log_transform, [x])`` in a model's call: np.log of a 0 reading. The cause said "data — the
    data held NaN/Inf before any op touched it ... filter or repair non-finite records before the py_function
    log_transform() hands them to fit" of a finite batch. In a tf.data map function it is the data's, as before."""
    program = tmp_path / "train.py"
    program.write_text(PY_FUNCTION_MODEL)
    origin = Finding(
        file=str(program),
        line=13,
        role="origin",
        op=OpRef("EagerPyFunc", "EagerPyFunc", graph=graph),
        health=TensorHealth(dtype="float32", size=64, neg_inf=1, pos=63),
    )
    cause = classify(
        findings_of(origin), CauseContext(batch=(np.ones((8, 8), np.float32),), entry_script=str(program))
    )
    if graph == "train_step":
        assert cause.kind == "op", cause
        assert cause.summary.startswith(
            "the py_function log_transform() (train.py:7), run inside the training step"
        )
        assert cause.change is not None and cause.change.line == 7, cause.change
    else:
        assert cause.kind == "data", cause


def test_a_log_of_a_zero_read_in_the_input_pipeline_is_told_log1p(tmp_path: Path) -> None:
    """A sales forecaster's ``tf.math.log(price)`` in its tf.data map, free items at a price of 0: "keep it in the
    domain (tf.math.log(tf.maximum(x, 1e-7)))" makes them outliers of -16.1; log1p is how such a target is logged."""
    program = write_program(tmp_path)
    origin = Finding(
        file=str(program),
        line=LOG_LINE,
        role="origin",
        op=OpRef("Log", "Log", graph="Dataset_map__to_log_target"),
        health=TensorHealth(dtype="float32", size=1, neg_inf=1),
        inputs=[InputHealth("args_1:0", TensorHealth(dtype="float32", size=1, zero=1))],
    )
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert cause.change is not None and "tf.math.log1p(x)" in cause.change.what, cause.change
    # In the training step, the same log of zeros keeps the general words.
    origin.op = OpRef("Log", "Log", graph="train_step")
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert cause.change is not None and "log1p" not in cause.change.what, cause.change


CUSTOM_GRADIENT = """\
import tensorflow as tf


@tf.custom_gradient
def swish(x):
    y = x * tf.sigmoid(x)

    def grad(dy):
        return dy * (y / x + y * (1.0 - tf.sigmoid(x)))

    return y, grad


def train_step(x, model, optimizer):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(swish(model(x)))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
"""


@pytest.mark.parametrize("in_gradient", [True, False])
def test_an_all_zero_row_into_a_custom_gradient_is_the_formulas_fault(
    tmp_path: Path, in_gradient: bool
) -> None:
    """A ``@tf.custom_gradient`` whose gradient divides by x, and a batch with one all-zero row (a record filled
    with zeros, valid data): the cause was `data`, "correct the record where the data is read", while the line
    named was the gradient's formula. An op made while the user's ``tape.gradient`` ran is the formula's: `op`.
    The same row into a forward op stays `data`."""
    from pyadapter.cause.rows import rows_of
    from pyadapter.findings import Frame

    program = tmp_path / "train.py"
    program.write_text(CUSTOM_GRADIENT)
    x = np.arange(1.0, 25.0, dtype=np.float32).reshape(8, 3)
    x[5] = 0.0
    per_row = np.ones((8, 1), dtype=np.float32)
    per_row[5] = np.nan
    rows = rows_of(per_row, (x, np.ones((8, 1), np.float32)))
    assert rows is not None and rows.outliers
    stack = [Frame(str(program), 17, "train_step"), Frame(str(program), 9, "grad")]
    origin = Finding(
        file=str(program),
        line=9,
        role="origin",
        op=OpRef("truediv", "RealDiv"),
        health=TensorHealth(dtype="float32", size=24, nan=3),
        inputs=[InputHealth("mul:0", TensorHealth(dtype="float32", size=24, zero=3, pos=21))],
        stack=stack if in_gradient else [Frame(str(program), 9, "grad")],
    )
    cause = classify(
        findings_of(origin, bad_rows=rows.to_json()), CauseContext(batch=(x, None), entry_script=str(program))
    )
    assert cause.kind == ("op" if in_gradient else "data"), cause.summary
    assert cause.change is not None and cause.change.line == 9
    assert ("where the data is read" in cause.change.what) == (not in_gradient), cause.change.what


@pytest.mark.parametrize("step", [0, 1, 17])
def test_an_overflow_in_the_first_steps_does_not_speak_of_steps_before(tmp_path: Path, step: int) -> None:
    """A MatMul overflow at step 0 read "with no growth over the steps before": there were none. At the first steps
    it says so, and what such values from the start usually mean. At step 1 the weights are not the initial ones
    any more (a VAE at a rate of 1.0 overflowed there, and the words blamed "unscaled inputs or initial weights")."""
    program = write_program(tmp_path)
    flat = [{"step": s, "loss": 1.0, "logged_loss": 1.0} for s in range(step)]
    context = CauseContext(
        history=flat, model_info={"optimizer": "SGD"}, entry_script=str(program), step=step
    )
    cause = classify(findings_of(overflow_origin(program)), context)
    assert cause.kind == "op", cause.summary
    first = "at the run's first steps (none before it to show a growth" in cause.summary
    after_one = "at step 1, after one update (too few to show a growth" in cause.summary
    assert first == (step == 0) and after_one == (step == 1), cause.summary
    assert ("no rise over the steps before in the loss" in cause.summary) == (step == 17), cause.summary
    assert ("initial weights" in cause.summary) == (step == 0), cause.summary


def test_an_overflow_after_a_slow_rise_says_the_rise_not_no_growth(tmp_path: Path) -> None:
    """An Exp overflow after the gradient norm rose x40 over 170 steps read "with no growth over the steps before".
    A rise too slow for a divergence is still said, with its numbers; a flat history reads "no rise" of what the
    guard records and `trend.rise` looks at (it claimed "weights or outputs" too, beside a weight norm that rose x3)."""
    program = write_program(tmp_path)
    rising = [
        {"step": s, "loss": 1.0, "logged_loss": 1.0, "grad_norm": 0.5 * 40 ** (s / 170)} for s in range(171)
    ]
    context = CauseContext(
        history=rising, model_info={"optimizer": "SGD"}, entry_script=str(program), step=171
    )
    cause = classify(findings_of(overflow_origin(program)), context)
    assert cause.kind == "op", cause.summary
    assert "no growth" not in cause.summary, cause.summary
    assert (
        "after the gradient norm rose x40 over 170 steps (0.5 at step 0 to 20 at step 170" in cause.summary
    ), cause.summary
    assert cause.evidence["history"]["series"] == "grad_norm"
    noisy = [dict(entry, grad_norm=0.5 * (1 + (s % 7))) for s, entry in enumerate(rising)]  # up and down: x7
    cause = classify(findings_of(overflow_origin(program)), dataclasses.replace(context, history=noisy))
    assert (
        "with no rise over the steps before in the loss or gradient norm the guard records (none x10 or more)"
        in (cause.summary)
    ), cause.summary


MASKED_ATTENTION = """import tensorflow as tf


def attend(scores, key_mask, values):
    scores = tf.where(key_mask, scores, float("-inf"))
    weights = tf.nn.softmax(scores, axis=-1)
    return tf.matmul(weights, values)
"""


def test_a_mask_of_minus_inf_on_an_all_padding_row_names_the_mask_constant(tmp_path: Path) -> None:
    """A hand-written attention masks padding with -inf; a review that is all padding masks every key, and the
    softmax over -inf only is NaN. The cause was `data` ("x[25] = 0 throughout: correct the record"), though an
    all-padding row is valid input: the -inf constant is the line to change."""
    from pyadapter.cause.rows import rows_of

    program = tmp_path / "attention.py"
    program.write_text(MASKED_ATTENTION)
    tokens = np.arange(1, 8 * 6 + 1, dtype=np.int64).reshape(8, 6)
    tokens[5] = 0  # an empty review: all padding
    per_row = np.ones((8, 4, 6), np.float32)
    per_row[5] = np.nan
    rows = rows_of(per_row, (tokens, np.ones((8, 1), np.float32)))
    assert rows is not None and rows.outliers[0].whole_row
    origin = Finding(
        file=str(program),
        line=6,
        role="origin",
        op=OpRef("attention/Softmax", "Softmax"),
        health=TensorHealth(dtype="float32", size=192, nan=24, zero=40, pos=128),
        inputs=[
            InputHealth("attention/SelectV2:0", TensorHealth(dtype="float32", size=192, neg_inf=64, pos=128))
        ],
    )
    constant = Finding(
        file=str(program),
        line=5,
        role="propagated",
        op=OpRef("attention/SelectV2/e", "Const"),
        health=TensorHealth(dtype="float32", rank=0, size=1, neg_inf=1),
    )
    findings = findings_of(origin, bad_rows=rows.to_json())
    findings.findings.append(constant)
    cause = classify(findings, CauseContext(batch=(tokens, None), entry_script=str(program)))
    assert cause.kind == "op", cause.summary
    assert "the -inf of a mask constant (attention.py:5) into NaN in row 5 of the batch" in cause.summary
    assert "x[5] is 0 throughout, all padding" in cause.summary, cause.summary
    assert cause.change is not None and (cause.change.file, cause.change.line) == (str(program), 5)
    assert cause.change.what.startswith("the mask value: a large finite number instead of -inf (-1e9")
    # The same softmax with a NaN already coming in is no mask's doing.
    origin.inputs.append(InputHealth("attention/other:0", TensorHealth(dtype="float32", size=4, nan=1)))
    assert "mask constant" not in classify(findings, CauseContext(batch=(tokens, None))).summary


def test_sqrt_at_zero_is_the_cause_even_when_a_row_holds_an_odd_value(tmp_path: Path) -> None:
    """keras.io's Siamese network: identical pairs give distance 0 and sqrt's slope there is infinite. A value of
    the bad rows that looks odd beside the others (here a label) made the cause `data`; the epsilon is the fix."""
    from pyadapter.cause.rows import rows_of

    program = write_program(tmp_path)
    labels = np.array([0, 1, 0, 1, 0, 9, 1, 0], np.float32).reshape(-1, 1)
    per_row = np.ones((8, 1), np.float32)
    per_row[5] = np.nan
    rows = rows_of(per_row, (np.zeros((8, 2), np.float32), labels))
    assert rows is not None and rows.outliers
    origin = Finding(
        file=str(program),
        line=3,
        role="origin",
        op=OpRef("gradient_tape/lambda/SqrtGrad", "SqrtGrad"),
        health=TensorHealth(dtype="float32", size=8, neg_inf=1, pos=7),
        inputs=[InputHealth("lambda/Sqrt:0", TensorHealth(dtype="float32", size=8, zero=1, pos=7))],
    )
    cause = classify(findings_of(origin, bad_rows=rows.to_json()), CauseContext(batch=(None, labels)))
    assert cause.kind == "op" and cause.summary.startswith("the step differentiated sqrt at 0"), cause.summary


def test_a_record_unlike_the_others_names_where_fits_array_is_made(tmp_path: Path) -> None:
    """A bike-demand notebook's RMSLE ``log1p(y_true)`` of a -1 "counter offline" count: the record was named,
    "correct it or leave it out where the data is read", with no place (no reading call: the arrays are made from a
    frame). The line that makes fit's y is that place."""
    from pyadapter.cause.rows import rows_of

    program = tmp_path / "bikes.py"
    program.write_text(
        "import keras\nimport numpy as np\n\n"
        "df = load_frame()\n"
        "X = df[FEATURES].to_numpy('float32')\n"
        "y = df['count'].to_numpy('float32')\n"
        "model = keras.Sequential([keras.Input(shape=(5,)), keras.layers.Dense(1, activation='softplus')])\n"
        "model.compile(optimizer='adam', loss=rmsle)\n"
        "model.fit(X, y, batch_size=8)\n"
    )
    labels = np.array([10, 12, 30, 14, 18, -1, 11, 20], np.float32).reshape(-1, 1)
    per_row = np.ones((8, 1), np.float32)
    per_row[5] = -np.inf
    rows = rows_of(per_row, (np.zeros((8, 5), np.float32), labels))
    assert rows is not None and rows.outliers
    origin = Finding(
        file=str(program),
        line=9,
        role="origin",
        op=OpRef("compile_loss/rmsle/Log1p_1", "Log1p"),
        health=TensorHealth(dtype="float32", size=8, neg_inf=1, pos=7),
        inputs=[
            InputHealth(
                "compile_loss/rmsle/ExpandDims:0", TensorHealth(dtype="float32", size=8, neg=1, pos=7)
            )
        ],
    )
    context = CauseContext(batch=(np.zeros((8, 5), np.float32), labels), entry_script=str(program))
    cause = classify(findings_of(origin, bad_rows=rows.to_json()), context)
    assert cause.kind == "data", cause
    assert cause.change is not None and "where the data is read (bikes.py:6)" in cause.change.what, (
        cause.change
    )


def test_a_ctc_loss_inf_of_a_long_label_says_the_frames_not_the_domain(tmp_path: Path) -> None:
    """keras.io's captcha OCR with 12 logit frames: a label of 11 characters (others 4 to 6) has no alignment, CTC is
    +inf. The record was named, with "or keep the CTCLoss op's input in its domain", which means nothing for CTC."""
    from pyadapter.cause.rows import rows_of

    program = write_program(tmp_path)
    lengths = np.array([4, 5, 6, 4, 5, 6, 4, 11], np.int64).reshape(-1, 1)
    per_row = np.ones((8,), np.float32)
    per_row[7] = np.inf
    batch = ({"label_length": lengths}, None)
    rows = rows_of(per_row, batch)
    assert rows is not None and rows.outliers
    origin = Finding(
        file=str(program),
        line=3,
        role="origin",
        op=OpRef("ctc/CTCLoss", "CTCLoss"),
        health=TensorHealth(dtype="float32", size=8, pos_inf=1, pos=7),
        inputs=[
            InputHealth("ctc/transpose:0", TensorHealth(dtype="float32", size=8 * 12 * 11, pos=8 * 12 * 11))
        ],
    )
    cause = classify(findings_of(origin, bad_rows=rows.to_json()), CauseContext(batch=batch))
    assert cause.kind == "data", cause.summary
    assert "a label needs at least as many logit frames" in cause.summary, cause.summary
    assert cause.change is not None and "more logit frames" in cause.change.what, cause.change
    assert "domain" not in cause.change.what, cause.change


TARGETS_BY_ZERO_STD = """import keras
import numpy as np

rng = np.random.default_rng(0)
x = rng.normal(size=(64, 3)).astype("float32")
targets = np.stack([x[:, 0], x[:, 1] * 2, np.full(64, 5.0)], axis=1)
y = (targets - targets.mean(axis=0)) / targets.std(axis=0)
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(3)])
model.compile("adam", "mse")
model.fit(x, y, batch_size=8)
"""

ENGINEERED_FEATURE = """import keras
import numpy as np

area = np.array([50.0, 80.0, 120.0, 65.0] * 4)
rooms = np.array([2.0, 3.0, 0.0, 2.0] * 4)
area_per_room = area / rooms
features = np.stack([area, rooms, area_per_room], axis=1).astype("float32")
prices = area * 3.0
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
model.compile("adam", "mse")
model.fit(features, prices, batch_size=8)
"""


@pytest.mark.parametrize(
    ("source", "leaf", "bad", "line", "words"),
    [
        (
            TARGETS_BY_ZERO_STD,
            "y",
            (slice(None), 2),
            7,
            "the standardization: a column that never changes (a constant feature) has std 0",
        ),
        (
            ENGINEERED_FEATURE,
            "x",
            (2, 2),
            6,
            "filter or repair non-finite values where area_per_room (column 2",
        ),
        (  # standardised after stacking: the stacked column's line, not the standardising one
            ENGINEERED_FEATURE.replace(
                "prices = area * 3.0\n",
                "features = (features - features.mean(axis=0)) / features.std(axis=0)\nprices = area * 3.0\n",
            ),
            "x",
            (2, 2),
            6,
            "filter or repair non-finite values where area_per_room (column 2",
        ),
        (  # a test set read after training feeds nothing: not the line to change
            ENGINEERED_FEATURE + 'test = np.load("test.npy")\nmodel.evaluate(test, test[:, :1])\n',
            "x",
            (2, 2),
            6,
            "filter or repair non-finite values where area_per_room (column 2",
        ),
        (  # a fold of a cross-validation: fit is given rows of the array
            ENGINEERED_FEATURE.replace(
                "model.fit(features, prices,", "model.fit(features[:12], prices[:12],"
            ),
            "x",
            (2, 2),
            6,
            "filter or repair non-finite values where area_per_room (column 2",
        ),
    ],
)
def test_arrays_the_program_computes_name_the_line_that_computes_them(
    tmp_path: Path, source: str, leaf: str, bad: tuple, line: int, words: str
) -> None:
    """No reading call: the arrays are the program's own arithmetic. The change was the fit line with "filter or
    repair non-finite records where the data is read", and for a target normalised by a zero std (a whole column
    NaN) "filter records" would drop every row. The line that makes the array fit is given, or the stacked
    feature's own line, is named; a column NaN/Inf in every row is said to be computed, not a record."""
    program = tmp_path / "train.py"
    program.write_text(source)
    x = np.ones((8, 3), np.float32)
    y = np.ones((8, 3), np.float32)
    (x if leaf == "x" else y)[bad] = np.nan if leaf == "y" else np.inf
    cause = classify(findings_of(None), CauseContext(batch=(x, y), entry_script=str(program)))
    assert cause.kind == "data", cause.summary
    assert cause.change is not None and (cause.change.file, cause.change.line) == (str(program), line), (
        cause.change
    )
    assert cause.change.what.startswith(words), cause.change.what
    whole = (
        f"column 2 of {leaf} is NaN/Inf in every row of the batch: a computed column, not one record (a statistic "
        "the column was scaled by is NaN/Inf"
    )
    assert (whole in cause.summary) == (leaf == "y"), cause.summary


DICT_OF_FRAME_COLUMNS = """import tensorflow as tf
NUMERIC = ["Age", "Income", "EmployeeCount", "StandardHours"]
for col in NUMERIC:
    df[col] = (df[col] - df[col].mean()) / df[col].std()

def to_dataset(frame):
    labels = frame.pop("Attrition")
    feats = {"numeric": frame[NUMERIC].values.astype("float32")}
    for col in ["Dept"]:
        feats[col] = frame[col].values.astype("int32")
    return tf.data.Dataset.from_tensor_slices((feats, labels.values)).batch(8)

model.fit(to_dataset(df), epochs=3)
"""


def test_whole_columns_of_a_dict_input_made_from_a_frame_are_named_by_the_frame_s_columns(
    tmp_path: Path,
) -> None:
    """``{"numeric": df[NUMERIC].values}``: the input's column 2 is NUMERIC[2]. Two constant features z-scored
    were "column 2 of x['numeric'] is NaN/Inf in every row" (s38e p2), and the user counted through the list; both
    columns are said, by the names the code selects them by."""
    program = tmp_path / "train.py"
    program.write_text(DICT_OF_FRAME_COLUMNS)
    numeric = np.ones((8, 4), np.float32)
    numeric[:, 2:] = np.nan
    batch = ({"Dept": np.zeros(8, np.int32), "numeric": numeric}, np.zeros(8, np.float32))
    cause = classify(findings_of(None), CauseContext(batch=batch, entry_script=str(program)))
    assert cause.kind == "data", cause.summary
    assert (
        "columns 2 ('EmployeeCount') and 3 ('StandardHours') of x['numeric'] are NaN/Inf in every row of the batch"
        in cause.summary
    ), cause.summary
    program.write_text(DICT_OF_FRAME_COLUMNS.replace("frame[NUMERIC].values", "frame.values"))
    cause = classify(findings_of(None), CauseContext(batch=batch, entry_script=str(program)))
    assert "columns 2 and 3 of x['numeric'] are NaN/Inf in every row" in cause.summary, cause.summary


@pytest.mark.parametrize(
    ("input_name", "health", "summary", "what"),
    [
        (
            "dense_1/Add:0",
            TensorHealth(dtype="float32", size=32, neg=1, pos=31),
            "the Log op got 1 negative value in its input dense_1/Add:0: log of a negative number is NaN",
            "the Log's input: keep it positive (an exp or softplus output), or clip it",
        ),
        (
            "sequential/dense/Softmax:0",
            TensorHealth(dtype="float32", size=320, zero=10, pos=310),
            "the Log op got 10 zeros in its input sequential/dense/Softmax:0: log(0) is -inf",
            "the log of a softmax: take tf.nn.log_softmax of the logits (or a Keras loss with from_logits=True)",
        ),
        (  # tf.nn.sampled_softmax_loss's log of the sampler's expected counts: no softmax to take off
            "sampled_softmax_loss/StopGradient_1:0",
            TensorHealth(dtype="float32", size=64, zero=28, pos=36),
            "the Log op got 28 zeros in its input sampled_softmax_loss/StopGradient_1:0: log(0) is -inf",
            "the Log's input: keep it in the domain",
        ),
    ],
)
def test_a_log_of_negatives_or_of_a_softmax_zero_says_which_values_and_the_way_out(
    tmp_path: Path, input_name: str, health: TensorHealth, summary: str, what: str
) -> None:
    """A Poisson loss written as y_pred - y * log(y_pred) on a linear output, and -sum(y * log(softmax)) by hand:
    the cause said "a Log op made NaN/Inf from finite inputs" and "keep its inputs in its domain", where the
    values (a negative, zeros) and the usual way out were known."""
    program = write_program(tmp_path)
    origin = Finding(
        file=str(program),
        line=3,
        role="origin",
        op=OpRef("loss/Log", "Log"),
        health=TensorHealth(dtype="float32", size=health.size, nan=health.neg or 0, neg_inf=health.zero or 0),
        inputs=[InputHealth(input_name, health)],
    )
    cause = classify(findings_of(origin), CauseContext())
    assert cause.kind == "op" and cause.summary == summary, cause.summary
    assert cause.change is not None and cause.change.what.startswith(what), cause.change.what


def test_a_sqrt_of_a_learned_head_gone_negative_is_made_positive_by_construction(tmp_path: Path) -> None:
    """A demand model's spread head, ``ops.sqrt(variance)`` of a Dense output that went negative: the advice was
    the clamp ``tf.sqrt(tf.maximum(x, 0.0))``, under which the head trained without NaN and never learned again
    (no gradient below 0: its loss stuck at the mean target's). Softplus keeps it positive and learning."""
    program = write_program(tmp_path)
    health = TensorHealth(dtype="float32", size=32, neg=2, pos=30)
    origin = Finding(
        file=str(program),
        line=3,
        role="origin",
        op=OpRef("demand_model_1/Sqrt", "Sqrt"),
        health=TensorHealth(dtype="float32", size=32, nan=2),
        inputs=[InputHealth("demand_model_1/var_head_1/Add:0", health)],
    )
    cause = classify(findings_of(origin), CauseContext())
    assert cause.kind == "op" and "sqrt of a negative number is NaN" in cause.summary, cause.summary
    assert cause.change is not None and cause.change.what.startswith(
        "the Sqrt's input: make it positive by construction where the model learns it (tf.nn.softplus(x) + 1e-6"
    ), cause.change.what
    # Not at 0.0: sqrt's slope there is infinite, and the log of that 0 (a Gaussian NLL's log(sigma)) was the next
    # NaN at the same step.
    assert cause.change.what.endswith("or clamp it (tf.sqrt(tf.maximum(x, 1e-12)))"), cause.change.what


def test_a_schedule_names_the_rate_it_gave_the_failing_step_and_its_piece(tmp_path: Path) -> None:
    """``PiecewiseConstantDecay(boundaries=[50, 100], values=[0.01, 5.0, 0.001])`` (5.0 typed for 0.005): the run
    diverges after step 50. The cause said "the learning rate of PiecewiseConstantDecay: lower it", though the
    bundle records the rate the failing step used (5.0): it is named, with the piece's own line."""
    from pyadapter.capture.learning_rate import LearningRate

    program = tmp_path / "train.py"
    program.write_text(
        TRAIN.replace(
            '    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.05, momentum=0.9), loss="mse")\n',
            "    rate = keras.optimizers.schedules.PiecewiseConstantDecay(\n"
            "        boundaries=[50, 100], values=[0.01, 5.0, 0.001])\n"
            '    model.compile(optimizer=keras.optimizers.SGD(learning_rate=rate), loss="mse")\n',
        )
    )
    context = CauseContext(
        history=diverging_history(),
        model_info={"optimizer": "SGD", "optimizers": ["SGD"]},
        entry_script=str(program),
        learning_rate=LearningRate(5.0, schedule="PiecewiseConstantDecay"),
        step=17,
    )
    cause = classify(findings_of(overflow_origin(program)), context)
    assert cause.kind == "divergence", cause.summary
    assert "diverged at learning rate 5 (from PiecewiseConstantDecay at step 17)" in cause.summary, (
        cause.summary
    )
    assert cause.change is not None and cause.change.line == OPTIMIZER_LINE + 1, cause.change  # values=[...]
    # Not "lower it (try 0.5)": a piece 500 times the others is a typo, not a rate to tune (a tenth of 5e3 still
    # diverged in a user's run).
    assert cause.change.what == (
        "5.0 among the schedule's values [0.01, 5.0, 0.001] is 500 times the largest of the others: a typo; "
        "PiecewiseConstantDecay gives it at step 17"
    ), cause.change.what
    # The exponent's minus lost (5e3 for 5e-3) is named, from a list the schedule takes by name.
    program.write_text(
        program.read_text()
        .replace("values=[0.01, 5.0, 0.001]", "values=LR_VALUES")
        .replace("import keras\n", "import keras\n\nLR_VALUES = [0.05, 5e3, 5e-4]\n", 1)
    )
    context.learning_rate = LearningRate(5000.0, schedule="PiecewiseConstantDecay")
    cause = classify(findings_of(overflow_origin(program)), context)
    assert cause.change is not None and cause.change.line == 3, cause.change
    assert cause.change.what.startswith(
        "5e3 among the schedule's values [0.05, 5e3, 5e-4] is 1e+05 times the largest of the others: a typo (5e-3?)"
    ), cause.change.what
    # A schedule whose pieces fall by 10x each (a design) keeps "lower it".
    program.write_text(program.read_text().replace("[0.05, 5e3, 5e-4]", "[5e3, 5e2, 5e1]"))
    cause = classify(findings_of(overflow_origin(program)), context)
    assert cause.change is not None and "lower it (try 500)" in cause.change.what, cause.change.what


def test_a_divergence_soon_after_a_warm_restart_says_the_schedule_jumped_back_up(tmp_path: Path) -> None:
    """``CosineDecayRestarts(0.1, first_decay_steps=160)``: the first cycle trained, the restart at step 160 put the
    rate back from 1e-5 to 0.1, and the run diverged by step 180. The cause named the rate and "lower it (try
    0.01)", a tenth of a rate the first cycle had trained at, and nothing of the restart."""
    from pyadapter.capture.learning_rate import LearningRate

    program = tmp_path / "train.py"
    program.write_text(
        TRAIN.replace(
            '    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.05, momentum=0.9), loss="mse")\n',
            "    rate = keras.optimizers.schedules.CosineDecayRestarts(0.1, first_decay_steps=160)\n"
            '    model.compile(optimizer=keras.optimizers.SGD(learning_rate=rate), loss="mse")\n',
        )
    )
    restarted = LearningRate(
        0.099, schedule="CosineDecayRestarts", previous=0.0991, restart=(160, 9.6e-6, 0.1)
    )
    context = CauseContext(
        history=diverging_history(),
        model_info={"optimizer": "SGD", "optimizers": ["SGD"]},
        entry_script=str(program),
        learning_rate=restarted,
        step=180,
    )
    cause = classify(findings_of(overflow_origin(program)), context)
    assert cause.kind == "divergence", cause.summary
    assert cause.summary.startswith(
        "the run diverged at learning rate 0.099 (from CosineDecayRestarts at step 180), 20 steps after the "
        "schedule jumped back up from 9.6e-6 to 0.1 at step 160 (a warm restart): the loss grew"
    ), cause.summary
    assert cause.change is not None and "m_mul below 1" in cause.change.what, cause.change
    # No restart recorded: no such words.
    context.learning_rate = LearningRate(0.099, schedule="CosineDecayRestarts", previous=0.0991)
    assert "warm restart" not in classify(findings_of(overflow_origin(program)), context).summary


def test_a_divergence_under_a_schedule_of_the_users_own_names_its_return_line(tmp_path: Path) -> None:
    """A ``LearningRateSchedule`` subclass whose warm-up never stops growing (``base * step / warmup``): the run
    diverged at 0.161 at step 161, and the line to change was the ``SGD(...)`` call, "lower it (try 0.0161)", which
    only puts the failure off. The bundle records the schedule's ``__call__`` line: that line is named."""
    from pyadapter.capture.learning_rate import LearningRate

    program = tmp_path / "train.py"
    program.write_text(
        TRAIN.replace(
            '    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.05, momentum=0.9), loss="mse")\n',
            "    class LinearWarmup(keras.optimizers.schedules.LearningRateSchedule):\n"
            "        def __call__(self, step):\n"
            "            return 0.1 * tf.cast(step, tf.float32) / 100\n"
            '    model.compile(optimizer=keras.optimizers.SGD(learning_rate=LinearWarmup()), loss="mse")\n',
        )
    )
    line = OPTIMIZER_LINE + 2
    code = program.read_text().splitlines()[line - 1].strip()
    assert code.startswith("return 0.1 * tf.cast(step"), code
    context = CauseContext(
        history=diverging_history(),
        model_info={"optimizer": "SGD", "optimizers": ["SGD"]},
        entry_script=str(program),
        learning_rate=LearningRate(0.161, "LinearWarmup", str(program), line, code),
        step=161,
    )
    cause = classify(findings_of(overflow_origin(program)), context)
    assert cause.kind == "divergence", cause.summary
    assert cause.change is not None and cause.change.line == line, cause.change
    assert cause.change.what.startswith(
        "the learning rate LinearWarmup returns, 0.161 at step 161: lower or cap it (try 0.0161)"
    ), cause.change.what
    # With the earlier rates NanGuard records, the rate was still rising (as a decay written upside down,
    # ``sqrt(step / warmup)``, 9x past its peak, is): said so, not as a rate set too high.
    earlier = [(10, 0.01), (20, 0.02), (40, 0.04), (80, 0.08)]
    context.learning_rate = LearningRate(0.161, "LinearWarmup", str(program), line, code, earlier)
    cause = classify(findings_of(overflow_origin(program)), context)
    assert cause.change is not None and cause.change.line == line, cause.change
    assert cause.change.what.startswith(
        "the learning rate LinearWarmup returns was still rising, 0.161 at step 161 (0.01 at step 10, 0.02 at "
        "step 20, 0.04 at step 40, 0.08 at step 80): a schedule whose rate keeps growing"
    ), cause.change.what
    # One that fell after its peak is a rate set too high, as before.
    context.learning_rate = LearningRate(
        0.161, "LinearWarmup", str(program), line, code, [(10, 0.5), (80, 0.3)]
    )
    cause = classify(findings_of(overflow_origin(program)), context)
    assert cause.change is not None and "was still rising" not in cause.change.what, cause.change.what


def test_a_warmup_target_is_the_rate_named_and_clipping_is_not_advised_twice(tmp_path: Path) -> None:
    """``CosineDecay(1e-4, 1000, warmup_target=50.0, warmup_steps=20)`` with ``AdamW(global_clipnorm=1.0)``: the
    cause said "learning rate 1e-4 (CosineDecay): try 1e-5, or clip the gradients", the initial rate (not what
    ran: 49.8 after the warmup) and clipping the gradients that were clipped already."""
    from pyadapter.capture.learning_rate import LearningRate

    program = tmp_path / "train.py"
    program.write_text(
        TRAIN.replace(
            '    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.05, momentum=0.9), loss="mse")\n',
            "    rate = keras.optimizers.schedules.CosineDecay(1e-4, 1000,\n"
            "        warmup_target=50.0, warmup_steps=20)\n"
            '    model.compile(optimizer=keras.optimizers.AdamW(rate, global_clipnorm=1.0), loss="mse")\n',
        )
    )
    context = CauseContext(
        history=diverging_history(),
        model_info={"optimizer": "AdamW", "optimizers": ["AdamW"]},
        entry_script=str(program),
        learning_rate=LearningRate(49.76, schedule="CosineDecay"),
        step=17,
    )
    cause = classify(findings_of(overflow_origin(program)), context)
    assert "diverged at learning rate 49.8 (from CosineDecay at step 17)" in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == OPTIMIZER_LINE + 1, cause.change  # warmup_target
    assert cause.change.what == (
        "the learning rate 49.8 that CosineDecay gives at step 17: lower it (try 4.98) (the gradients are clipped "
        "already: global_clipnorm=1.0)"
    ), cause.change.what


SWEEP = """import keras
import numpy as np

x = np.ones((64, 3), np.float32)
y = np.ones((64, 1), np.float32)
for lr in [1e-3, 1e-2, 5.0]:
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(lr), "mse")
    model.fit(x, y)
"""


def test_a_sweep_s_diverging_rate_is_changed_where_the_sweep_writes_it(tmp_path: Path) -> None:
    """A notebook's learning-rate sweep, ``for lr in [1e-3, 1e-2, 5.0]:`` around ``SGD(lr)``: the cause named the
    rate (recorded: 5) at the optimizer's line, where no number is written; the sweep's list holds it."""
    from pyadapter.capture.learning_rate import LearningRate

    program = tmp_path / "sweep.py"
    program.write_text(SWEEP)
    context = CauseContext(
        history=diverging_history(),
        model_info={"optimizer": "SGD", "optimizers": ["SGD"]},
        entry_script=str(program),
        learning_rate=LearningRate(5.0),
    )
    cause = classify(findings_of(overflow_origin(program)), context)
    assert cause.kind == "divergence" and "diverged at learning rate 5:" in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == 6, cause.change
    assert cause.change.what.startswith("learning rate 5 (SGD): try 0.5"), cause.change.what


ADAPTED = """import keras
import numpy as np

table = np.genfromtxt("auto.csv", delimiter=",", skip_header=1)
normalizer = keras.layers.Normalization()
normalizer.adapt(table[:, 1:])
table = table[~np.isnan(table).any(axis=1)]
model = keras.Sequential([normalizer, keras.layers.Dense(1)])
model.compile("adam", "mse")
model.fit(table[:, 1:], table[:, :1])
"""


def _normalization_constant_cause(program: Path, model: str, health: TensorHealth) -> Cause:
    """The cause of a Normalization layer's mean (the step's constant ``<model>/normalization_1/Sub/y``) holding
    `health`, at line 10 of `program`, with a finite batch of its width."""
    origin = Finding(
        file=str(program),
        line=10,
        role="origin",
        op=OpRef(f"{model}/normalization_1/Sub/y", "Const"),
        health=health,
    )
    batch = (np.ones((4, health.size or 1)), None)
    return classify(findings_of(origin), CauseContext(entry_script=str(program), batch=batch))


def test_a_normalization_adapted_on_missing_values_names_the_adapt_call(tmp_path: Path) -> None:
    """tensorflow.org's "Basic regression" with the rows holding '?' dropped after ``adapt``: the batch is finite,
    but Keras fixed the NaN mean into the step as a constant. The cause was "a Const op made NaN/Inf from finite
    inputs (inputs not recorded)" at the fit line, though the message above it said the NaN came with the data."""
    program = tmp_path / "train.py"
    program.write_text(ADAPTED)
    cause = _normalization_constant_cause(
        program, "sequential_1", TensorHealth(dtype="float32", rank=2, size=7, nan=1, pos=6)
    )
    assert cause.kind == "data", cause.summary
    assert cause.summary.startswith(
        "the mean or variance of the Normalization layer normalization holds NaN/Inf (1 NaN of 7)"
    ), cause.summary
    assert cause.change is not None and cause.change.line == 6, cause.change


def test_a_normalization_adapted_on_a_ratio_divided_by_0_in_a_map_names_the_division(tmp_path: Path) -> None:
    """California housing through tf.data: ``total_rooms / households`` in the map function, with households 0 in
    four records, and ``normalizer.adapt`` on the mapped dataset: the mean holds +inf. The cause said "adapt() read
    data with missing values (NaN) ... fill or drop its missing values", and there were none; the division in the
    map function made the inf."""
    program = tmp_path / "train.py"
    program.write_text(
        "import keras\n\n\ndef add_features(features, label):\n"
        "    features['rooms_per_household'] = features['total_rooms'] / features['households']\n"
        "    return features, label\n\n\n"
        "train_ds = ds.map(add_features).batch(64)\n"
        "normalizer = keras.layers.Normalization()\n"
        "normalizer.adapt(train_ds.map(lambda x, y: x['numeric']))\n"
        "model.fit(train_ds)\n"
    )
    cause = _normalization_constant_cause(
        program, "functional_1", TensorHealth(dtype="float32", rank=2, size=5, pos_inf=2, pos=3)
    )
    assert cause.kind == "data", cause.summary
    assert "holds Inf (2 +inf of 5): adapt() read infinite values" in cause.summary, cause.summary
    assert "add_features, which the pipeline maps, divides at train.py:5" in cause.summary, cause.summary
    assert "missing values" not in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == 5, cause.change
    assert "tf.math.divide_no_nan" in cause.change.what, cause.change


def test_the_adapt_named_is_the_one_of_the_normalization_that_holds_the_nan(tmp_path: Path) -> None:
    """Two Normalization layers, the second adapted on a column with a NaN. In the train step its constant is under
    "normalization_1_1": one suffix stripped read "normalization_1", which matched nothing (a generic constant
    cause at the fit line); and the last adapt of the file was named whatever layer it belonged to."""
    program = tmp_path / "train.py"
    program.write_text(
        "import keras\n"
        "norm_a = keras.layers.Normalization()\n"
        "norm_b = keras.layers.Normalization()\n"
        "norm_b.adapt(b)\n"
        "norm_a.adapt(a)\n"
        "model.fit(x, y)\n"
    )
    for scope, line, name in (
        ("normalization_1_1", 4, "normalization_1"),
        ("normalization_1", 5, "normalization"),
    ):
        origin = Finding(
            file=str(program),
            line=6,
            role="origin",
            op=OpRef(f"functional_1/{scope}/Sub/y", "Const"),
            health=TensorHealth(dtype="float32", rank=2, size=1, nan=1),
        )
        cause = classify(
            findings_of(origin), CauseContext(entry_script=str(program), batch=(np.ones((4, 2)), None))
        )
        # Which of the layers: a model normalizing each feature with its own layer (keras.io's structured data).
        assert cause.summary.startswith(
            f"the mean or variance of the Normalization layer {name} holds NaN/Inf"
        ), cause.summary
        assert cause.change is not None and cause.change.line == line, (scope, cause.change)


def test_a_search_that_kept_no_rate_finite_is_not_answered_with_a_tenth(tmp_path: Path) -> None:
    """The guard's window search tried rates down to 3.8e-7 and none kept the window finite: "try 0.005" (and the
    quick fix that writes it) would be advice the search disproved; the change says so instead."""
    program = write_program(tmp_path)
    search = {
        "steps": 5,
        "start_step": 12,
        "captured_learning_rate": 0.05,
        "largest_finite_learning_rate": None,
        "suggested_learning_rate": None,
        "trials": [{"learning_rate": 0.05 / 2**k, "finite": False} for k in range(18)],
    }
    context = CauseContext(
        history=diverging_history(),
        model_info={"optimizer": "SGD", "optimizers": ["SGD"]},
        entry_script=str(program),
        window_search=search,
    )
    cause = classify(findings_of(overflow_origin(program)), context)
    assert cause.kind == "divergence" and cause.change is not None
    # Not "a lower rate alone does not fix it": the window starts from weights the run reached at 0.05 (a run on
    # raw features whose first update blew them up trains at 1e-7 from the start).
    assert (
        "no rate down to 3.81e-7 kept the 5-step window finite from the state at step 12, which the run reached at "
        "its own rate: a lower rate from the start may still hold (the window cannot tell)"
        in cause.change.what
    ), cause.change.what
    assert "alone does not fix" not in cause.change.what
    # A window from the run's first state: no update came before it at the captured rate.
    context.window_search = {**search, "start_step": 0}
    first = classify(findings_of(overflow_origin(program)), context)
    assert first.change is not None
    assert "no rate down to 3.81e-7 kept the 5-step window finite, so a lower rate alone does not fix it" in (
        first.change.what
    ), first.change.what
    assert "0.005" not in cause.change.what, cause.change.what
    assert cause.evidence["window"]["lowest_learning_rate_tried"] == pytest.approx(0.05 / 2**17)
    assert [f.title for f in cause_fixes(TRAIN, cause)] == []


def test_a_search_from_after_the_first_update_at_a_rate_far_too_high_names_the_usual_rate(
    tmp_path: Path,
) -> None:
    """keras.io's RealNVP at ``Adam(learning_rate=0.1)``: a custom ``train_step`` makes Adam's slots in step 0, so
    the window starts at step 1, from weights the first update at 0.1 had moved, and no rate down to 2.44e-5 kept
    it finite. "A lower rate from the start may still hold (the window cannot tell)" left the user with nothing to
    try, and no quick fix; 1e-3, Adam's usual rate, trains. A rate 100x the usual is the change, with that rate."""
    from pyadapter.capture.learning_rate import LearningRate

    program = tmp_path / "flow.py"
    program.write_text(TRAIN.replace("SGD(learning_rate=0.05, momentum=0.9)", "Adam(learning_rate=0.1)"))
    history = [
        {"step": 0, "loss": 2.7, "grad_norm": 1.78, "weight_norm": 40.0},
        {"step": 1, "loss": None, "loss_nonfinite": "inf", "grad_norm": 1.01e27, "weight_norm": 41.0},
    ]
    search = {
        "steps": 1,
        "start_step": 1,
        "captured_learning_rate": 0.1,
        "largest_finite_learning_rate": None,
        "suggested_learning_rate": None,
        "trials": [{"learning_rate": 0.1 / 2**k, "finite": False} for k in range(13)],
    }
    context = CauseContext(
        history=history,
        model_info={"optimizer": "Adam", "optimizers": ["Adam"]},
        step=1,
        entry_script=str(program),
        window_search=search,
        learning_rate=LearningRate(0.1),
    )
    cause = classify(findings_of(overflow_origin(program, op="Square"), step=1), context)
    assert cause.kind == "divergence" and cause.change is not None, cause
    assert cause.change.line == OPTIMIZER_LINE, cause.change
    assert cause.change.what.startswith(
        "learning rate 0.1 (Adam): 100x its usual 0.001; try 0.001 from the start: the window began at step 1, "
        "from weights 1 update at 0.1 had moved, and no rate down to 2.44e-5 kept it finite from there"
    ), cause.change.what
    assert "cannot tell" not in cause.change.what, cause.change.what
    fixes = cause_fixes(program.read_text(), cause)
    assert fixes and fixes[0].title.startswith("lower the learning rate to 0.001"), fixes
    # At twice Adam's usual rate the window's answer stands: the rate is not far too high.
    context.learning_rate = LearningRate(0.002)
    program.write_text(TRAIN.replace("SGD(learning_rate=0.05, momentum=0.9)", "Adam(learning_rate=0.002)"))
    near = classify(findings_of(overflow_origin(program, op="Square"), step=1), context)
    assert near.change is not None and "the window cannot tell" in near.change.what, near.change
    assert cause_fixes(program.read_text(), near) == []


@pytest.mark.parametrize("start", [0, 1, 12])
def test_a_found_rate_from_a_window_after_the_first_update_says_so(tmp_path: Path, start: int) -> None:
    """A custom loop whose subclassed model is built in its first step: the window's copy of step 0 is not whole
    (the optimizer makes its slots there), so the window starts at step 1, from weights the first update at the
    run's rate had blown up (norm 27 to 17000). Its "try 7.16e-7" was 30-50x lower than a rate that trained from
    the start, without a word. A window that starts after step 0 but within its own length says so."""
    program = write_program(tmp_path)
    search = {
        "steps": 4,
        "start_step": start,
        "captured_learning_rate": 1e-4,
        "largest_finite_learning_rate": 1.43e-6,
        "suggested_learning_rate": 7.16e-7,
    }
    context = CauseContext(
        history=diverging_history(),
        model_info={"optimizer": "SGD", "optimizers": ["SGD"]},
        entry_script=str(program),
        window_search=search,
    )
    cause = classify(findings_of(overflow_origin(program)), context)
    assert cause.change is not None and "try 1.43e-7" in cause.change.what, cause.change.what
    said = (
        "from the state at step 1, which the run's first updates reached at its own rate" in cause.change.what
    )
    assert said == (start == 1), cause.change.what
    # Users followed a 4-step window's "try" and got a finite network that learned nothing: it says what it shows.
    assert (
        "(a tenth of it: finite over 4 steps, which does not show it trains: check that the loss falls)"
        in cause.change.what
    )
    context.window_search = {**search, "steps": 40}
    longer = classify(findings_of(overflow_origin(program)), context)
    assert longer.change is not None and "does not show it trains" not in longer.change.what, longer.change


def test_one_unlike_value_among_many_bad_rows_is_not_the_record(tmp_path: Path) -> None:
    """log(pred + 1) made NaN in 8 rows at the first step (predictions below -1 after initialisation); one of those
    rows held a -3.5 in a standard normal column, and the cause was "data: the record args[0][33, 1] = -3.53:
    correct it or leave it out" though it explains none of the other seven. It stays the op's doing."""
    from pyadapter.cause.rows import rows_of

    program = write_program(tmp_path)
    x = np.random.default_rng(1).uniform(-1.5, 1.5, size=(48, 2)).astype(np.float32)
    bad = [1, 2, 15, 16, 33, 40, 41, 44]
    x[33, 1] = -3.5
    per_row = np.ones(48, np.float32)
    per_row[bad] = np.nan
    rows = rows_of(per_row, (x, np.zeros((48, 1), np.float32)))
    # A value 4 deviations out in 48 rows is not unlike them at all now (rows.SPREADS); the rule that one unlike
    # value cannot stand for eight bad rows still holds it back on its own (the next test).
    assert rows is not None and rows.outliers == []
    origin = log_origin(program)
    cause = classify(findings_of(origin, bad_rows=rows.to_json()), CauseContext(batch=(x, None)))
    assert cause.kind == "op", cause.summary


def test_unlike_values_in_the_named_rows_must_account_for_every_bad_row(tmp_path: Path) -> None:
    """An LR range test's Square overflowed in 8 of 16 rows; three of the five rows a cause names held a value
    outside the 8 good rows' narrow range (standard normal data), and the cause was "data: the record x[0, 2] =
    -1.62": three of five named rows passed the "half the bad rows" rule, which counted only the five named."""
    from pyadapter.cause.rows import rows_of

    program = write_program(tmp_path)
    x = np.random.default_rng(3).uniform(-0.4, 1.3, size=(16, 3)).astype(np.float32)
    bad = [0, 2, 3, 5, 9, 10, 12, 14]
    x[[0, 2, 3], 2] = [-1.6, 2.5, -1.9]
    per_row = np.ones(16, np.float32)
    per_row[bad] = np.nan
    rows = rows_of(per_row, (x, np.zeros((16, 1), np.float32)))
    assert rows is not None and rows.count == 8 and len(rows.rows) == 5
    assert {o.element.row for o in rows.outliers} <= {0, 2, 3}
    cause = classify(findings_of(log_origin(program), bad_rows=rows.to_json()), CauseContext(batch=(x, None)))
    assert cause.kind == "op", cause.summary


def test_a_dip_before_a_flat_series_and_one_spike_is_no_growth() -> None:
    """A clipped gradient norm sits at its cap (1.0) with one dip to 3e-4 thirty-five steps before the failure; a
    Poisson loss is flat for 140 steps, then one step spikes. Lowest-to-last read both as geometric growth ("the
    gradient norm grew x1.26 per step for 35 steps") and the cause as a divergence. A growth is sustained now: the
    later half of its values sits well above the earlier half. A real divergence still is one."""
    flat = [
        {"step": s, "loss": 5.0 + (s % 5) * 0.3, "grad_norm": 3.2e-4 if s == 159 else 1.0 if s % 3 else 0.5}
        for s in range(195)
    ]
    assert growth(flat) is None
    spike = [{"step": s, "loss": 2.0 + (s % 7) * 0.1, "logged_loss": 2.0 + s * 1e-3} for s in range(52, 192)]
    spike.append({"step": 192, "loss": 1.39e19, "logged_loss": 3.16e17})
    assert growth(spike) is None
    diverging = [{"step": s, "loss": 0.5 * 1.4**s * (1.1 if s % 2 else 0.9)} for s in range(40)]
    found = growth(diverging)
    assert found is not None and found.series == "loss" and 1.3 < found.rate < 1.5


def test_a_division_by_zeros_in_its_divisor_names_them_and_divide_no_nan(tmp_path: Path) -> None:
    """A masked mean pooling by hand, sum / count, on an empty text: count holds 0 and 0 / 0 is NaN. The cause was
    "the RealDiv op: keep its inputs in its domain"; it names the zeros and the two ways out."""
    program = write_program(tmp_path)
    origin = Finding(
        file=str(program),
        line=3,
        role="origin",
        op=OpRef("pooling/truediv", "RealDiv"),
        health=TensorHealth(dtype="float32", size=64, nan=2, pos=62),
        inputs=[
            InputHealth("pooling/Sum:0", TensorHealth(dtype="float32", size=64, zero=2, pos=62)),
            InputHealth("pooling/Sum_1:0", TensorHealth(dtype="float32", size=64, zero=2, pos=62)),
        ],
    )
    cause = classify(findings_of(origin), CauseContext())
    assert cause.kind == "op"
    assert cause.summary == (
        "the RealDiv op divided by 2 zeros in its divisor pooling/Sum_1:0: 0 / 0 is NaN"
    ), cause.summary
    assert cause.change is not None and "tf.math.divide_no_nan(a, b)" in cause.change.what


def division_origin(
    program: Path, line: int, scope: str, *, output: TensorHealth, sums: tuple[TensorHealth, TensorHealth]
) -> Finding:
    """A masked mean's ``sum(x * mask) / sum(mask)`` as the origin: a RealDiv of two sums."""
    return Finding(
        file=str(program),
        line=line,
        role="origin",
        op=OpRef(f"{scope}truediv", "RealDiv"),
        health=output,
        inputs=[InputHealth(f"{scope}Sum:0", sums[0]), InputHealth(f"{scope}Sum_1:0", sums[1])],
    )


def test_a_division_by_exps_that_underflowed_is_told_log_space(tmp_path: Path) -> None:
    """A Sinkhorn loss: ``K = tf.exp(-C / eps)`` with eps 0.01 underflows to 0 for far pairs, and ``u = a / (K @ v)``
    divides by 0. It was "the RealDiv op divided by 1 zero in its divisor ... tf.math.divide_no_nan(a, b)", which
    keeps it finite and drops those points out of the transport plan (loss 0.031 against 0.17). The scan's record
    of the exp that made the zeros (line 28) is named, and log space is the advice."""
    program = write_program(tmp_path)
    origin = division_origin(
        program,
        31,
        "sinkhorn/",
        output=TensorHealth(dtype="float32", size=16, pos_inf=1, pos=15),
        sums=(
            TensorHealth(dtype="float32", size=16, pos=16),
            TensorHealth(dtype="float32", size=16, zero=1, pos=15),
        ),
    )
    findings = findings_of(origin)
    findings.extra["zeros_from_exp"] = {"line": 28, "zeros": 1013}
    cause = classify(findings, CauseContext(history=[], entry_script=str(program)))
    assert cause.summary.startswith(
        "the RealDiv op divided by 1 zero that the exp at line 28 made by underflowing"
    ), cause.summary
    assert cause.change is not None and "log space" in cause.change.what, cause.change
    assert not cause.change.what.startswith("the division: tf.math.divide_no_nan"), cause.change


def test_a_softmax_by_hand_of_exps_that_underflowed_is_told_to_subtract_the_max(tmp_path: Path) -> None:
    """Self-attention with ``e = ops.exp(scores)`` then ``e / ops.sum(e, axis=-1, keepdims=True)`` on unscaled
    scores far below 0: every exp of a row underflows, 0 / 0. The words were the Sinkhorn ones ("a kernel
    exp(-cost / eps) ... make eps larger"), and there is no eps; the softmax's own stable form is the change, in
    the keras.ops the line uses."""
    program = tmp_path / "attention.py"
    program.write_text(
        "from keras import ops\ndef softmax(x):\n    e = ops.exp(x)\n    return e / ops.sum(e, axis=-1, keepdims=True)\n",
        encoding="utf-8",
    )
    origin = division_origin(
        program,
        4,
        "attention/",
        output=TensorHealth(dtype="float32", size=16, nan=16),
        sums=(
            TensorHealth(dtype="float32", size=16, zero=16),
            TensorHealth(dtype="float32", size=4, zero=4),
        ),
    )
    findings = findings_of(origin)
    findings.extra["zeros_from_exp"] = {"line": 3, "zeros": 16}
    findings.extra["origin_code"] = "    return e / ops.sum(e, axis=-1, keepdims=True)"
    cause = classify(findings, CauseContext(history=[], entry_script=str(program)))
    assert (
        "a softmax written by hand, ops.sum(e, axis=-1, keepdims=True) of logits far below 0" in cause.summary
    )
    assert "Sinkhorn" not in cause.summary, cause.summary
    assert cause.change is not None and "keras.ops.softmax(x)" in cause.change.what, cause.change
    assert "eps larger" not in cause.change.what, cause.change


def test_empty_reviews_divided_by_their_count_of_zero_are_the_divisions_fault(tmp_path: Path) -> None:
    """A masked mean pooling (sum(x * mask) / sum(mask)) on a batch with two all-padding reviews: the cause was
    `data`, "the record x[22, 0] = 0: correct it or leave it out", the first token of one of them. An empty
    record is valid input to a masked mean; the division is what to change, as for a graph's isolated node."""
    from pyadapter.cause.rows import rows_of

    program = write_program(tmp_path)
    tokens = np.random.default_rng(0).integers(1, 50, size=(8, 6)).astype(np.float32)
    tokens[:, 4:] = 0.0
    tokens[[2, 3]] = 0.0
    per_row = np.ones((8, 1), dtype=np.float32)
    per_row[[2, 3]] = np.nan
    rows = rows_of(per_row, (tokens, np.ones((8, 1), np.float32)))
    assert rows is not None and rows.outliers
    origin = division_origin(
        program,
        3,
        "masked_mean_pooling/",
        output=TensorHealth(dtype="float32", size=128, nan=32, pos=96),
        sums=(
            TensorHealth(dtype="float32", size=128, zero=32, pos=96),
            TensorHealth(dtype="float32", size=8, zero=2, pos=6),
        ),
    )
    cause = classify(findings_of(origin, bad_rows=rows.to_json()), CauseContext(batch=(tokens, None)))
    assert cause.kind == "op", cause.summary
    assert cause.summary == (
        "the RealDiv op divided by 2 zeros in its divisor masked_mean_pooling/Sum_1:0: 0 / 0 is NaN, in rows 2 "
        "and 3 of the batch only (x[2] (0 throughout), x[3] (0 throughout): empty records, valid input the "
        "division must handle)"
    ), cause.summary
    assert cause.change is not None and cause.change.what.startswith(
        "the division: tf.math.divide_no_nan(a, b)"
    )
    assert cause.change.what.endswith("; or leave empty records out where the data is read")


def test_a_normalizations_rsqrt_of_a_blank_frames_variance_wants_an_epsilon_not_the_record_left_out(
    tmp_path: Path,
) -> None:
    """A hand-written frame normalization ``(x - mean) * tf.math.rsqrt(var)`` under XLA, a dropped sensor frame of
    zeros in the batch: the cause was `data`, "the record x[5] (0 throughout): correct it or leave it out", with
    "keep the Rsqrt op's input in its domain". A constant frame is valid input; the layer needs an epsilon inside
    the rsqrt, as LayerNormalization has."""
    from pyadapter.cause.rows import rows_of

    program = write_program(tmp_path)
    frames = np.random.default_rng(0).normal(size=(8, 16)).astype(np.float32)
    frames[5] = 0.0
    per_row = np.ones((8, 1), dtype=np.float32)
    per_row[5] = np.inf
    rows = rows_of(per_row, (frames, np.ones((8, 1), np.float32)))
    assert rows is not None and rows.outliers
    origin = Finding(
        file=str(program),
        line=3,
        role="origin",
        op=OpRef("sequential/frame_norm/Rsqrt", "Rsqrt"),
        health=TensorHealth(dtype="float32", size=8, pos_inf=1, pos=7),
        inputs=[
            InputHealth(
                "sequential/frame_norm/moments/variance:0",
                TensorHealth(dtype="float32", size=8, zero=1, pos=7),
            )
        ],
    )
    cause = classify(findings_of(origin, bad_rows=rows.to_json()), CauseContext(batch=(frames, None)))
    assert cause.kind == "op", cause.summary
    assert "valid input the normalization must handle" in cause.summary, cause.summary
    assert cause.change is not None and cause.change.what.startswith(
        "the rsqrt of a variance: add an epsilon inside it, tf.math.rsqrt(variance + 1e-5)"
    ), cause.change


def test_a_log_plus_an_epsilon_a_sweep_sets_to_0_is_changed_where_it_is_set(tmp_path: Path) -> None:
    """A research repo's dataclass config swept with ``replace(BASE, eps=0.0)`` and a loss ``tf.math.log(1.0 -
    y_pred + cfg.eps)``: the words were "log_sigmoid, or a clamp at 1e-7" at the loss, a line that has its clamp.
    An added epsilon leaves no 0 unless it is 0: the sweep's entry that sets it is the change. A line that adds
    something else (1.0) is not taken for one."""
    program = tmp_path / "sweep.py"
    program.write_text(
        "from dataclasses import dataclass, replace\n"
        "import tensorflow as tf\n"
        "@dataclass\n"
        "class Config:\n"
        "    eps: float = 1e-7\n"
        "def loss(y_true, y_pred):\n"
        "    return -tf.reduce_mean(tf.math.log(1.0 - y_pred + cfg.eps))\n"
        "BASE = Config()\n"
        "for cfg in [BASE, replace(BASE, eps=0.0)]:\n"
        "    train(cfg)\n"
    )
    origin = Finding(
        file=str(program),
        line=7,
        role="origin",
        op=OpRef("compile_loss/loss/Log", "Log"),
        health=TensorHealth(dtype="float32", size=8, neg_inf=2, neg=6),
        inputs=[
            InputHealth("compile_loss/loss/add_1:0", TensorHealth(dtype="float32", size=8, zero=2, pos=6))
        ],
    )
    findings = findings_of(origin)
    findings.extra["origin_code"] = "    return -tf.reduce_mean(tf.math.log(1.0 - y_pred + cfg.eps))"
    cause = classify(findings, CauseContext(history=[], entry_script=str(program)))
    assert "the line adds eps, and eps is 0 where the program sets it (line 9)" in cause.summary, (
        cause.summary
    )
    assert cause.change is not None and cause.change.line == 9, cause.change
    assert cause.change.what.startswith("the value of eps: a positive epsilon"), cause.change
    findings.extra["origin_code"] = "    return -tf.reduce_mean(tf.math.log(1.0 - y_pred))"
    cause = classify(findings, CauseContext(history=[], entry_script=str(program)))
    assert cause.change is not None and cause.change.line == 7, cause.change


SEQ2SEQ_LOOP = """\
import tensorflow as tf


@tf.function
def train_step(source, decoder_in, decoder_out):
    mask = tf.cast(decoder_out > 0, tf.float32)
    return tf.reduce_sum(decoder_out * mask, axis=1) / tf.reduce_sum(mask, axis=1)
"""


def test_a_custom_loop_s_empty_records_are_named_by_the_step_s_parameters(tmp_path: Path) -> None:
    """A seq2seq loop's masked mean over an all-padding target (guard_step): the records were named "args[0][2],
    args[1][2], args[2][2]", the bundle's positions, where the step calls them source, decoder_in, decoder_out."""
    from pyadapter.cause.rows import rows_of

    program = tmp_path / "loop.py"
    program.write_text(SEQ2SEQ_LOOP)
    sequences = np.random.default_rng(0).integers(1, 50, size=(3, 8, 6)).astype(np.float32)
    sequences[:, 2] = 0.0  # row 2: an empty sentence pair, all padding
    batch = {"args": tuple(sequences), "kwargs": {}}
    per_row = np.ones(8, dtype=np.float32)
    per_row[2] = np.nan
    rows = rows_of(per_row, batch)
    assert rows is not None and rows.outliers
    sums = TensorHealth(dtype="float32", size=8, zero=1, pos=7)
    origin = division_origin(
        program, 7, "", output=TensorHealth(dtype="float32", size=8, nan=1, pos=7), sums=(sums, sums)
    )
    context = CauseContext(
        batch=batch,
        entry_script=str(program),
        step_function={"module": "__main__", "qualname": "train_step", "file": str(program)},
    )
    cause = classify(findings_of(origin, bad_rows=rows.to_json()), context)
    assert cause.kind == "op", cause.summary
    assert (
        "(source[2] (0 throughout), decoder_in[2] (0 throughout), decoder_out[2] (0 throughout): empty"
        in (cause.summary)
    ), cause.summary


def test_an_ordinary_draw_of_a_normal_feature_in_a_small_batch_is_not_bad_data(tmp_path: Path) -> None:
    """A hand-written binary cross-entropy on 16 rows of 12 standard normal features: the sigmoid of the most
    confident negative row saturated to 0 and log made -inf. That row's x[15, 4] = -2.86 lay half a range outside
    the other 15 rows' -1.13 to 0.66 (a narrow range: 15 draws), and the cause was "data: the record x[15, 4] =
    -2.86: correct it". A value is unlike the others only when it is also far in their deviations; a unit
    mix-up still is."""
    from pyadapter.cause.rows import rows_of

    program = write_program(tmp_path)
    x = np.random.default_rng(7).normal(size=(16, 12)).astype(np.float32)
    x[:15, 4] = np.linspace(-1.13, 0.66, 15)
    x[15, 4] = -2.86
    per_row = np.ones(16, np.float32)
    per_row[15] = np.nan
    rows = rows_of(per_row, (x, np.zeros((16, 1), np.float32)))
    assert rows is not None and rows.outliers == [], [o.describe() for o in rows.outliers]
    cause = classify(findings_of(log_origin(program), bad_rows=rows.to_json()), CauseContext(batch=(x, None)))
    assert cause.kind == "op", cause.summary
    x[15, 4] = -2860.0  # the same feature in thousandths: a record unlike the others
    rows = rows_of(per_row, (x, np.zeros((16, 1), np.float32)))
    assert rows is not None and [o.record_text() for o in rows.outliers] == ["x[15, 4] = -2860"]
    cause = classify(findings_of(log_origin(program), bad_rows=rows.to_json()), CauseContext(batch=(x, None)))
    assert cause.kind == "data", cause.summary
    # The change is the op's line; where the data is read is named in its words (it read as if that line read it).
    assert cause.change is not None and "where the data is read (train.py:7)" in cause.change.what, (
        cause.change
    )


def test_a_mask_multiplied_by_minus_inf_is_zero_times_infinity(tmp_path: Path) -> None:
    """``logits += (1 - mask) * -inf``: NaN wherever the mask keeps a position (0 * -inf). The cause was "a Mul op
    made NaN from inputs that held infinities but no NaN ... keep its inputs in its domain"."""
    program = write_program(tmp_path)
    origin = Finding(
        file=str(program),
        line=3,
        role="origin",
        op=OpRef("attention/mul", "Mul"),
        health=TensorHealth(dtype="float32", size=384, nan=242, neg_inf=142),
        inputs=[
            InputHealth("attention/sub:0", TensorHealth(dtype="float32", size=384, zero=242, pos=142)),
            InputHealth("attention/mul/y:0", TensorHealth(dtype="float32", size=1, neg_inf=1)),
        ],
    )
    cause = classify(findings_of(origin), CauseContext())
    assert cause.kind == "op"
    assert cause.summary == (
        "the Mul op multiplied attention/mul/y:0 (which holds -inf) by attention/sub:0 (which holds 242 zeros): "
        "0 * -inf is NaN"
    ), cause.summary
    assert cause.change is not None and cause.change.what.startswith("the -inf factor: a large finite number")


def test_a_finite_mask_value_float16_holds_as_minus_inf_is_precision_not_an_infinity_to_replace(
    tmp_path: Path,
) -> None:
    """``scores + (1.0 - mask) * -1e9`` under mixed_float16 (keras.io attention written by hand): float16 holds -1e9
    as -inf, and 0 * -inf is NaN. The cause said "the -inf factor: a large finite number instead (-1e9 ...)", the
    number already on the line."""
    program = tmp_path / "attention.py"
    program.write_text(
        "import keras\n\ndef attend(scores, mask):\n    return scores + (1.0 - mask) * -1e9\n",
        encoding="utf-8",
    )
    origin = Finding(
        file=str(program),
        line=4,
        role="origin",
        op=OpRef("attention/mul", "Mul"),
        health=TensorHealth(dtype="float16", size=384, nan=242, neg_inf=142),
        inputs=[
            InputHealth("attention/sub:0", TensorHealth(dtype="float16", size=384, zero=242, pos=142)),
            InputHealth("attention/mul/y:0", TensorHealth(dtype="float16", size=1, neg_inf=1)),
        ],
    )
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert cause.kind == "precision", cause
    assert cause.summary.startswith("the mask value -1e9 is -inf in float16, whose largest value is 65504"), (
        cause
    )
    assert cause.change is not None and cause.change.line == 4 and "-1e4" in cause.change.what, cause.change


def test_an_edited_construction_beside_a_later_phase_s_rate_is_the_line_named(tmp_path: Path) -> None:
    """The run diverged at 0.05 in its first phase; since, the user lowered SGD's rate to 0.001, and a second phase
    assigns 1e-5. No line writes 0.05: the line nearest the rate that ran is the construction, not the second
    phase's assignment."""
    from pyadapter.capture.learning_rate import LearningRate

    program = tmp_path / "train.py"
    lines = TRAIN.replace("learning_rate=0.05", "learning_rate=0.001").splitlines(keepends=True)
    lines.insert(FIT_LINE, "    model.optimizer.learning_rate.assign(1e-5)\n")  # after the first fit
    program.write_text("".join(lines))
    context = CauseContext(
        history=diverging_history(),
        model_info={"optimizer": "SGD", "optimizers": ["SGD"]},
        entry_script=str(program),
        learning_rate=LearningRate(float(np.float32(0.05))),
    )
    cause = classify(findings_of(overflow_origin(program)), context)
    assert cause.change is not None and cause.change.line == OPTIMIZER_LINE, (
        cause.change.line,
        cause.change.what,
    )
    assert cause.change.what.startswith("learning rate 0.05 (SGD"), cause.change.what


def test_a_gradient_norm_of_zero_is_no_start_of_a_growth() -> None:
    """A saturated sigmoid's steps have a gradient norm of exactly 0; the growth was measured from one: "the
    gradient norm grew xinf per step for 6 steps (0 at step 25 to 1.06e+09 at step 31)". It starts from the lowest
    value above 0."""
    history = [
        {"step": s, "loss": 1.0, "grad_norm": 0.5 * 10.0 ** (s - 20) if s >= 26 else 0.5} for s in range(32)
    ]
    history[25]["grad_norm"] = 0.0
    found = growth(history)
    assert found is not None and found.series == "grad_norm", found
    assert math.isfinite(found.rate) and found.start_value > 0, found


def test_a_fine_tuning_rate_written_as_arithmetic_names_its_own_line(tmp_path: Path) -> None:
    """tensorflow.org's transfer-learning tutorial: SGD(base_learning_rate) for the head, then
    SGD(base_learning_rate * 1000) to fine-tune (here too high). The second construction's rate was not read, and
    the first (which ran at 0.01) was named "learning rate 10 (SGD)"."""
    from pyadapter.capture.learning_rate import LearningRate

    program = tmp_path / "train.py"
    program.write_text(
        "import keras\n"
        "base_learning_rate = 0.01\n"
        "model.compile(optimizer=keras.optimizers.SGD(learning_rate=base_learning_rate), loss='mse')\n"
        "model.fit(x, y)\n"
        "model.compile(optimizer=keras.optimizers.SGD(learning_rate=base_learning_rate * 1000), loss='mse')\n"
        "model.fit(x, y)\n"
    )
    context = CauseContext(
        history=diverging_history(),
        model_info={"optimizer": "SGD", "optimizers": ["SGD"]},
        entry_script=str(program),
        learning_rate=LearningRate(10.0),
    )
    cause = classify(findings_of(overflow_origin(program, line=6)), context)
    assert cause.change is not None and cause.change.line == 5, (cause.change.line, cause.change.what)
    assert cause.change.what.startswith("learning rate 10 (SGD)"), cause.change.what


def test_a_variance_by_squares_written_over_two_lines_is_precision(tmp_path: Path) -> None:
    """``mean_sq = reduce_mean(square(x))`` on one line and ``var = mean_sq - square(mean)`` on the next, under
    mixed_bfloat16: the cause was "op: sqrt of a negative number ... tf.sqrt(tf.maximum(x, 0.0))", a clamp that
    hides the lost variance. Written on one line it was precision; it is on two."""
    program = tmp_path / "train.py"
    program.write_text(
        "import tensorflow as tf\n"
        "def standardize(x):\n"
        "    mean = tf.reduce_mean(x, axis=-1, keepdims=True)\n"
        "    mean_sq = tf.reduce_mean(tf.square(x), axis=-1, keepdims=True)\n"
        "    var = mean_sq - tf.square(mean)\n"
        "    return (x - mean) / tf.sqrt(var + 1e-5)\n"
    )
    origin = Finding(
        file=str(program),
        line=6,
        role="origin",
        op=OpRef("instance_standardize/Sqrt", "Sqrt"),
        health=TensorHealth(dtype="bfloat16", size=32, nan=15, pos=17),
        inputs=[
            InputHealth("instance_standardize/add:0", TensorHealth(dtype="bfloat16", size=32, neg=15, pos=17))
        ],
    )
    cause = classify(
        findings_of(origin), CauseContext(entry_script=str(program), dtype_policy="mixed_bfloat16")
    )
    assert cause.kind == "precision", cause.summary
    assert cause.change is not None and cause.change.line == 5, cause.change


def test_an_overflow_at_the_first_step_on_raw_inputs_is_not_said_to_diverge(tmp_path: Path) -> None:
    """A raw Unix-seconds column (1.7e9) into a model: its first step's values overflow before any update. The cause
    read "the run diverged at learning rate 0.001 ...: values overflowed at the run's first step" and offered "(or,
    slower to train: learning rate 0.001 (Adam): try 1e-4)": no rate changes step 0."""
    from pyadapter.capture.learning_rate import LearningRate

    program = write_program(tmp_path)
    rng = np.random.default_rng(0)
    x = np.column_stack([rng.normal(size=32), 1.7e9 + 3600.0 * np.arange(32)]).astype("float32")
    y = rng.normal(size=(32, 1)).astype("float32")
    context = CauseContext(
        history=[],
        model_info={"optimizer": "Adam", "optimizers": ["Adam"]},
        entry_script=str(program),
        step=0,
        batch=(x, y),
        learning_rate=LearningRate(1e-3),
    )
    cause = classify(findings_of(overflow_origin(program)), context)
    assert cause.kind == "divergence", cause.summary
    assert cause.summary.startswith("values overflowed at the first step on unscaled features (x[:, 1]"), (
        cause.summary
    )
    assert "with no step before it to diverge over: MatMul overflowed float32" in cause.summary, cause.summary
    assert cause.change is not None and "slower to train" not in cause.change.what, cause.change.what


CLIPPED_LOOP = """\
import tensorflow as tf
from pyadapter import guard_step

x, y = build_features(make_frame())
dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2048, seed=0).batch(128)
model = MLP()
optimizer = tf.keras.optimizers.Adam(1e-3)


@guard_step(model=model, optimizer=optimizer)
@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    grads, norm = tf.clip_by_global_norm(grads, 5.0)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for x, y in dataset:
    train_step(x, y)
"""


def test_an_overflow_at_a_custom_loops_first_step_on_raw_inputs_scales_them_where_the_batches_are_made(
    tmp_path: Path,
) -> None:
    """A custom loop of a subclass model with a raw timestamp feature (1.7e15) whose global-norm clip overflowed
    (L2Loss) at step 0: the change was "learning rate 0.001: try 1e-4, or clip the gradients" (no rate changes step
    0, and the clip was what overflowed), as a model with no Input line had no place named for the scaling. The
    line that makes the loop's batches is it."""
    from pyadapter.capture.learning_rate import LearningRate

    program = tmp_path / "train.py"
    program.write_text(CLIPPED_LOOP)
    rng = np.random.default_rng(0)
    x = np.column_stack([rng.normal(size=32), 1.7e15 + 3.6e12 * np.arange(32)]).astype("float32")
    y = rng.normal(size=(32, 1)).astype("float32")
    context = CauseContext(
        history=[],
        model_info={"optimizer": "Adam", "optimizers": ["Adam"]},
        entry_script=str(program),
        step=0,
        batch=(x, y),
        learning_rate=LearningRate(1e-3),
        step_function={"module": "__main__", "qualname": "train_step", "file": str(program)},
    )
    cause = classify(findings_of(overflow_origin(program, line=17, op="L2Loss")), context)
    assert cause.summary.startswith("values overflowed at the first step on unscaled features"), cause.summary
    assert cause.change is not None and cause.change.line == 5, cause.change
    assert cause.change.what.startswith("scale the features") and "try 1e-4" not in cause.change.what, (
        cause.change
    )


@pytest.mark.parametrize("bad", ["nan", "pos_inf"])
def test_a_dump_whose_nan_came_in_through_an_argument_is_data(tmp_path: Path, bad: str) -> None:
    """`nanlens run --dump` of a fit on arrays holding a NaN (a missing target): no op made it, a function's
    argument (Placeholder) brought it in. `nanlens scan` said "op: a Placeholder op made NaN/Inf from finite inputs
    ... keep its inputs in its domain", and for an Inf "unknown: a divergence or a wrong op ... or the learning
    rate"."""
    program = write_program(tmp_path)
    origin = Finding(
        file=str(program),
        line=FIT_LINE,
        role="origin",
        op=OpRef("args_2", "Placeholder", graph="Dataset_map_grab_batch"),
        health=TensorHealth(dtype="float32", size=128, pos=127, **{bad: 1}),
    )
    cause = classify(findings_of(origin))  # a dump: no bundle, no context
    assert cause.kind == "data", cause.summary


def test_the_log_of_a_sigmoid_that_reached_zero_is_told_log_sigmoid(tmp_path: Path) -> None:
    """A BPR loss, -log(sigmoid(pos - neg)): the sigmoid of a margin below -88 is 0 and log makes -inf. The fix
    given was a clamp, which leaves the misranked rows without a gradient; log_sigmoid keeps it exact."""
    program = write_program(tmp_path)
    origin = Finding(
        file=str(program),
        line=LOG_LINE,
        role="origin",
        op=OpRef("bpr/Log", "Log"),
        health=TensorHealth(dtype="float32", size=256, neg_inf=1, neg=255),
        inputs=[InputHealth("bpr/Sigmoid:0", TensorHealth(dtype="float32", size=256, zero=1, pos=255))],
    )
    cause = classify(findings_of(origin), CauseContext())
    assert cause.change is not None and cause.change.what.startswith(
        "the log of a sigmoid: take tf.math.log_sigmoid"
    )


def test_a_notebooks_data_line_is_found_in_the_cell_that_made_the_array(tmp_path: Path) -> None:
    """A Colab-style notebook: a DataFrame column made in cell 1 (a division by a count that is 0 for some rows),
    the arrays split in cell 2, fit in cell 3. Only the fit's own cell was searched for the array's assignment, and
    the data cause's line was the fit call (the same program as a script named the split)."""
    import ast

    from pyadapter.cause.change_line import fit_array_site
    from pyadapter.cause.sources import SourceUnit

    notebook = str(tmp_path / "store_revenue.ipynb")
    cells = [
        "import numpy as np\nimport pandas as pd\n",
        'df = pd.read_csv("stores.csv")\ndf["spend_per_order"] = df["marketing_k"] / df["orders"]\n',
        'features = ["size", "staff", "marketing_k", "spend_per_order"]\nX = df[features].to_numpy("float32")\n'
        'y = df["revenue"].to_numpy("float32")\nX_train, X_test = X[:500], X[500:]\n'
        "y_train, y_test = y[:500], y[500:]\n",
        "history = model.fit(\n    X_train, y_train, epochs=20, callbacks=[NanGuard()]\n)\n",
    ]
    units = [SourceUnit(notebook, index, text, ast.parse(text)) for index, text in enumerate(cells)]
    site = fit_array_site(units, "x")  # no column known: the split that made the array
    assert site is not None and (site.cell, site.line) == (2, 4), site and (site.cell, site.line)
    assert site.name == "X_train"
    # Column 3 of X_train is df[features]'s fourth name: the line that makes that column (session 24: it was the
    # split, and the column went unnamed once the frame became an array).
    site = fit_array_site(units, "x", column=3)
    assert site is not None and (site.cell, site.line) == (1, 2), site and (site.cell, site.line)
    assert site.name == "column 'spend_per_order' (column 3 of X_train)"
    # A script: the same, in its one file.
    script = "".join(cells)
    unit = SourceUnit(str(tmp_path / "store_revenue.py"), None, script, ast.parse(script))
    site = fit_array_site([unit], "x", column=3)
    assert site is not None and unit.line(site.line).startswith('df["spend_per_order"] =')
    # Reworked in between (robust scaling, a DataFrame's .astype and .to_numpy): still the column.
    reworked = script.replace(
        'X = df[features].to_numpy("float32")\n',
        'X = df[features].astype("float32")\nX = ((X - X.median()) / X.std()).to_numpy()\n',
    )
    unit = SourceUnit(str(tmp_path / "scaled.py"), None, reworked, ast.parse(reworked))
    site = fit_array_site([unit], "x", column=3)
    assert site is not None and unit.line(site.line).startswith('df["spend_per_order"] ='), site


def test_the_array_fit_is_given_is_made_where_it_is_computed_not_where_it_is_converted(
    tmp_path: Path,
) -> None:
    """A Kaggle notebook: ``X = (X - X.mean()) / X.std()`` (a constant column: pandas makes it NaN without a
    warning), then ``X = X.values.astype("float32")``. The last assignment, a conversion, was taken for where X is
    made, and the change was the read_csv line ("filter or repair non-finite records where the data is read"). A
    conversion of the name itself makes no value: the computation before it is the place."""
    import ast

    from pyadapter.cause.change_line import fit_array_site
    from pyadapter.cause.sources import SourceUnit

    script = (
        "import numpy as np\nimport pandas as pd\n"
        'df = pd.get_dummies(pd.read_csv("train.csv"))\n'
        'X = df.drop(columns=["SalePrice"])\n'
        'y = df["SalePrice"].values.astype("float32")\n'
        "X = (X - X.mean()) / X.std()\n"
        'X = X.values.astype("float32")\n'
        "model.fit(X, y, epochs=20)\n"
    )
    for converted in ('X = X.values.astype("float32")', 'X = np.asarray(X, dtype="float32")'):
        text = script.replace('X = X.values.astype("float32")', converted)
        unit = SourceUnit(str(tmp_path / "house_prices.py"), None, text, ast.parse(text))
        site = fit_array_site([unit], "x")
        assert site is not None and unit.line(site.line) == "X = (X - X.mean()) / X.std()", site
    # A conversion of another name is where X is made.
    text = script.replace('X = X.values.astype("float32")', 'X = df.values.astype("float32")')
    unit = SourceUnit(str(tmp_path / "house_prices.py"), None, text, ast.parse(text))
    site = fit_array_site([unit], "x")
    assert site is not None and unit.line(site.line) == 'X = df.values.astype("float32")', site


def test_a_rate_a_flag_gives_a_trainer_is_changed_at_the_flags_default(tmp_path: Path) -> None:
    """An absl research script: ``flags.DEFINE_float("learning_rate", 0.5, ...)`` handed to a ``Trainer`` whose
    ``__init__`` stores ``self.learning_rate = learning_rate`` and builds ``SGD(learning_rate=self.learning_rate)``.
    The store was named "self.learning_rate set as it trains"; the flag's default is the rate that ran. argparse's
    ``default=`` the same; a default of another rate is not taken."""
    import ast

    from pyadapter.cause.change_line import optimizer_site
    from pyadapter.cause.sources import SourceUnit

    script = (
        "from absl import app, flags\n"
        "import keras\n"
        'flags.DEFINE_float("learning_rate", 0.5, "Learning rate for SGD.")\n'
        "class Trainer:\n"
        "    def __init__(self, learning_rate):\n"
        "        self.learning_rate = learning_rate\n"
        "        self.optimizer = keras.optimizers.SGD(learning_rate=self.learning_rate, momentum=0.9)\n"
        "def main(argv):\n"
        "    Trainer(flags.FLAGS.learning_rate).fit()\n"
        "app.run(main)\n"
    )
    unit = SourceUnit(str(tmp_path / "train.py"), None, script, ast.parse(script))
    site = optimizer_site([unit], ["SGD"], used=0.5)
    assert site is not None and site.line == 3, site and (site.line, site.name)
    assert site.name == "the --learning_rate flag's default", site.name
    argparse_script = script.replace(
        'flags.DEFINE_float("learning_rate", 0.5, "Learning rate for SGD.")',
        'parser.add_argument("--lr", type=float, default=0.5)',
    )
    unit = SourceUnit(str(tmp_path / "train.py"), None, argparse_script, ast.parse(argparse_script))
    site = optimizer_site([unit], ["SGD"], used=0.5)
    assert site is not None and site.line == 3 and site.name == "the --lr flag's default", site
    # A rate given on the command line (0.8) is no default: the optimizer's construction, not the store.
    site = optimizer_site([unit], ["SGD"], used=0.8)
    assert site is not None and site.line == 7, site and (site.line, site.name)


def test_where_y_is_made_is_a_name_the_fit_call_sees_not_a_methods_local(tmp_path: Path) -> None:
    """A module-level script with a ``keras.Model`` subclass whose own ``train_step`` unpacks ``x, y = data``,
    defined between the data and the fit: that line was taken for where fit's y is made (the last ``y =`` above
    the call), a local of the method. The module's own assignment is the one fit sees; in a function, its own."""
    import ast

    from pyadapter.cause.change_line import fit_array_site
    from pyadapter.cause.sources import SourceUnit

    script = (
        "import pandas as pd\n"
        "df = pd.read_csv('listings.csv').merge(pd.read_csv('sales.csv'), how='left')\n"
        "x = df[['sqft', 'age']].to_numpy('float32')\n"
        "y = df['price'].to_numpy('float32') / 1e5\n"
        "class RegressionNet(keras.Model):\n"
        "    def train_step(self, data):\n"
        "        x, y = data\n"
        "        return {}\n"
        "def load():\n"
        "    y = None\n"
        "    return y\n"
        "model = RegressionNet()\n"
        "model.fit(x, y, epochs=3)\n"
    )
    unit = SourceUnit(str(tmp_path / "train_subclass.py"), None, script, ast.parse(script))
    site = fit_array_site([unit], "y")
    assert site is not None and site.line == 4, site and unit.line(site.line)
    # Inside a function, the function's own assignment of y, not the module's nor another function's.
    inside = script.replace(
        "model.fit(x, y, epochs=3)\n", "def main():\n    y = load()\n    model.fit(x, y)\n"
    )
    unit = SourceUnit(str(tmp_path / "train_subclass.py"), None, inside, ast.parse(inside))
    site = fit_array_site([unit], "y")
    assert site is not None and unit.line(site.line) == "    y = load()", site and unit.line(site.line)


def test_a_training_cell_run_again_after_the_rate_cell_was_changed_is_the_one_named(tmp_path: Path) -> None:
    """A notebook: ``LEARNING_RATE = 1e-4``, the training cell (``SGD(learning_rate=LEARNING_RATE)``, fit), then
    ``LEARNING_RATE = 1e-2`` and the training cell again, which diverged. The change named the first training cell,
    which trained fine at 1e-4: the name's value was looked up in the optimizer's own cell only."""
    import ast

    from pyadapter.cause.change_line import optimizer_site
    from pyadapter.cause.sources import SourceUnit

    notebook = str(tmp_path / "lr_sweep.ipynb")
    training = (
        "model = build_model()\n"
        "model.compile(optimizer=keras.optimizers.SGD(learning_rate=LEARNING_RATE, momentum=0.9), loss='mse')\n"
        "history = model.fit(x, y, epochs=5, callbacks=[NanGuard()])\n"
    )
    cells = [
        "import keras\n",
        "LEARNING_RATE = 1e-4\n",
        training,
        "LEARNING_RATE = 1e-2  # try higher\n",
        training,
    ]
    units = [SourceUnit(notebook, index, text, ast.parse(text)) for index, text in enumerate(cells)]
    site = optimizer_site(units, ["SGD"], used=0.01)
    assert site is not None and (site.cell, site.line) == (4, 2), site and (site.cell, site.line)
    assert site.learning_rate == 0.01, site
    site = optimizer_site(units, ["SGD"], used=1e-4)
    assert site is not None and (site.cell, site.line) == (2, 2), site and (site.cell, site.line)


def test_a_cross_entropy_over_outputs_that_are_not_probabilities_names_the_last_layer(tmp_path: Path) -> None:
    """CategoricalCrossentropy(from_logits=False) after a Dense(3, activation="relu"): Keras's loss divides each
    output row by its sum, and a row of zeros is 0 / 0. The cause said "use tf.math.divide_no_nan ... change
    train.py:<fit line>", a division inside Keras the user cannot edit. The model's last layer is the change."""
    program = tmp_path / "train.py"
    program.write_text(
        "import keras\n"
        "model = keras.Sequential([\n"
        "    keras.Input(shape=(8,)),\n"
        "    keras.layers.Dense(64, activation='relu'),\n"
        "    keras.layers.Dense(64, activation='relu'),\n"
        "    keras.layers.Dense(3, activation='relu'),\n"
        "])\n"
        "model.compile('adam', keras.losses.CategoricalCrossentropy(from_logits=False))\n"
        "model.fit(x, y)\n"
    )
    origin = Finding(
        file=str(program),
        line=9,
        role="origin",
        op=OpRef("compile_loss/categorical_crossentropy/truediv", "RealDiv"),
        health=TensorHealth(dtype="float32", size=96, nan=3, pos=93),
        inputs=[
            InputHealth(
                "sequential_1/dense_2_1/Relu:0", TensorHealth(dtype="float32", size=96, zero=41, pos=55)
            ),
            InputHealth(
                "compile_loss/categorical_crossentropy/Sum:0",
                TensorHealth(dtype="float32", size=32, zero=1, pos=31),
            ),
        ],
    )
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert cause.kind == "op", cause.summary
    assert cause.summary.startswith("the model's output is not a probability distribution: 1 row of it"), (
        cause.summary
    )
    assert cause.change is not None and cause.change.line == 6, cause.change
    assert 'activation="softmax"' in cause.change.what and "from_logits=True" in cause.change.what
    assert "divide_no_nan" not in cause.change.what


def test_a_fix_for_a_keras_ops_line_is_written_in_keras_ops(tmp_path: Path) -> None:
    """A backend-agnostic Keras 3 layer divides with keras.ops; the fix said "tf.math.divide_no_nan(a, b) ... a /
    tf.maximum(b, 1e-7)", a second API to import and mix in. A line written with keras.ops gets keras.ops names."""
    program = tmp_path / "layer.py"
    program.write_text(
        "from keras import ops\n\n\ndef call(inputs, shift, scale):\n"
        "    return (inputs - shift) / ops.relu(scale)\n"
    )
    origin = Finding(
        file=str(program),
        line=5,
        role="origin",
        op=OpRef("sequential_1/scaled_1/truediv", "RealDiv"),
        health=TensorHealth(dtype="float32", size=32, nan=3, pos=29),
        inputs=[
            InputHealth(
                "sequential_1/scaled_1/sub:0", TensorHealth(dtype="float32", size=32, zero=3, pos=29)
            ),
            InputHealth(
                "sequential_1/scaled_1/Relu:0", TensorHealth(dtype="float32", size=32, zero=3, pos=29)
            ),
        ],
    )
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert cause.change is not None and "keras.ops.divide_no_nan(a, b)" in cause.change.what, (
        cause.change.what
    )
    assert "keras.ops.maximum(b, 1e-7)" in cause.change.what and "tf." not in cause.change.what
    program.write_text(program.read_text().replace("ops.relu(scale)", "tf.nn.relu(scale)"))
    import linecache

    linecache.checkcache(str(program))
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert cause.change is not None and "tf.math.divide_no_nan(a, b)" in cause.change.what


def test_the_reader_that_feeds_training_is_named_not_a_sample_for_statistics() -> None:
    """A TFRecord pipeline reads the file twice: a sample of 64 records for the mean and std, then the pipeline fit
    trains on. A bad record was named exactly, with "change: ...:<the sample's line>", the first reader."""
    import ast

    from pyadapter.cause.change_line import reading_site
    from pyadapter.cause.sources import SourceUnit

    text = (
        "import tensorflow as tf\n"
        "sample = tf.data.TFRecordDataset(path).map(parse_fn).take(64)\n"
        "mean, std = stats(sample)\n"
        "ds = tf.data.TFRecordDataset(path).map(parse_fn).map(normalize).batch(32)\n"
        "model.fit(ds)\n"
    )
    site = reading_site([SourceUnit("/w/train.py", None, text, ast.parse(text))], None, None, None)
    assert site is not None and site.line == 4, site and site.line


def test_a_loss_that_jumps_while_the_weights_stand_still_is_the_batch_not_a_divergence(
    tmp_path: Path,
) -> None:
    """A functional model with an exponential layer and four standardised features, one record of which holds 300:
    on its batch the gradients outgrew float32's squares. The history's lowest loss two steps before made it "the
    run diverged ... grew x1.82e+10 per step for 2 steps ... change the learning rate", though the weight norm had
    not moved (7.37 throughout, updates 0.3% of it) and no rate kept the window finite. Weights that stood still did
    not diverge: the record is named."""
    program = write_program(tmp_path)
    history = [
        {
            "step": s,
            "loss": loss,
            "logged_loss": loss,
            "grad_norm": 5.0,
            "weight_norm": 7.37,
            "update_ratio": 0.003,
        }
        for s, loss in enumerate([4.39, 4.70, 2.34, 4.04])
    ] + [{"step": 4, "loss": 7.8e20, "logged_loss": 1e20, "grad_norm": 1.9e24, "weight_norm": 7.37}]
    x = np.random.default_rng(0).normal(size=(32, 5)).astype("float32")
    x[29, 4] = 300.0
    context = CauseContext(
        history=history, model_info={"optimizer": "Adam"}, entry_script=str(program), step=4, batch=(x, None)
    )
    origin = overflow_origin(program, op="Square")
    cause = classify(findings_of(origin), context)
    assert cause.kind == "data", cause.summary
    assert "x[29, 4] = 300" in cause.summary and "no learning rate keeps the step finite" in cause.summary
    # The same jump with weights that grew is still the rate's.
    grown = [dict(row, weight_norm=7.37 * 3**i, update_ratio=0.5) for i, row in enumerate(history)]
    assert classify(findings_of(origin), dataclasses.replace(context, history=grown)).kind == "divergence"


def test_a_learning_rate_scheduler_given_a_bound_method_is_named_with_it() -> None:
    """A trainer class hands ``LearningRateScheduler`` its own method: the cause said "LearningRateScheduler at
    trainer.py:9 set it", without the function the user has to change."""
    import ast

    from pyadapter.cause.change_line import computed_rate_setter
    from pyadapter.cause.sources import SourceUnit

    text = (
        "import keras\n"
        "class Trainer:\n"
        "    def lr_at(self, epoch, lr):\n"
        "        return self.base / (epoch - 3)\n"
        "    def train(self, model, x, y):\n"
        "        model.fit(x, y, callbacks=[keras.callbacks.LearningRateScheduler(self.lr_at)])\n"
    )
    site = computed_rate_setter([SourceUnit("/w/trainer.py", None, text, ast.parse(text))])
    assert site is not None and (site.line, site.name) == (6, "LearningRateScheduler(self.lr_at)"), site


def test_the_cause_side_counts_a_layer_built_in_a_loop_once_per_turn() -> None:
    """A float16 overflow in ``dense_2`` of a model whose hidden layers come from a loop over two sizes: the third
    Dense call in source order is the head, but dense_2 is the loop's second turn."""
    import ast

    from pyadapter.cause.change_line import layer_site
    from pyadapter.cause.sources import SourceUnit

    text = (
        "import keras\n"
        "inputs = keras.Input(shape=(8,))\n"
        "x = keras.layers.Dense(64)(inputs)\n"
        "for units in [256, 256]:\n"
        "    x = keras.layers.Dense(units, activation='relu')(x)\n"
        "out = keras.layers.Dense(1, dtype='float32')(x)\n"
    )
    units = [SourceUnit("/w/train.py", None, text, ast.parse(text))]
    site = layer_site(units, "functional_1/dense_2_1/MatMul")
    assert site is not None and site.line == 5, site and site.line
    assert getattr(layer_site(units, "functional_1/dense_3_1/MatMul"), "line", None) == 6


def test_a_notebook_cell_edited_and_run_before_saving_is_read_as_it_ran(tmp_path: Path) -> None:
    """Run All (blank incomes are NaN), then `df = df.fillna(df.median())` added to the data cell, which is run again
    with the fit cell before the notebook is saved; the run diverges on the unscaled target. The stop message said
    "Change customers.ipynb:5 (cell 3, ...): scale the targets", line 5 of the saved cell (the X line of the code
    that ran); `y = ...` is line 6 of the cell the kernel ran and the user sees."""
    import json

    from pyadapter.cause.change_line import fit_array_site
    from pyadapter.cause.sources import user_sources
    from pyadapter.findings import Findings

    old = (
        "df = pd.read_csv('customers.csv')\n"
        "X = df[['age', 'income']].to_numpy('float32')\n"
        "y = df['spend'].to_numpy('float32')\n"
    )
    new = (
        "df = pd.read_csv('customers.csv')\n"
        "df = df.fillna(df.median())\n"
        "X = df[['age', 'income']].to_numpy('float32')\n"
        "y = df['spend'].to_numpy('float32')\n"
    )
    fit = "model.fit(X, y, epochs=5, callbacks=[NanGuard()])\n"
    saved = ["import pandas as pd\n", old, fit]
    notebook = tmp_path / "customers.ipynb"
    notebook.write_text(
        json.dumps(
            {
                "nbformat": 4,
                "nbformat_minor": 5,
                "metadata": {},
                "cells": [
                    {"cell_type": "markdown", "metadata": {}, "source": "# Spend"},
                    *(
                        {
                            "cell_type": "code",
                            "metadata": {},
                            "source": text,
                            "outputs": [],
                            "execution_count": None,
                        }
                        for text in saved
                    ),
                ],
            }
        )
    )
    ran = ["import pandas as pd\n", old, fit, new, fit]
    findings = Findings("bundle", str(tmp_path), origin=None, findings=[])
    units = user_sources(findings, str(notebook), ran)
    site = fit_array_site(units, "y")
    assert site is not None and (site.cell, site.line) == (2, 4), site and (site.cell, site.line)
    # Saved after the edit, the file and the kernel agree; unedited runs read the saved cells as they are.
    assert [u.text for u in user_sources(findings, str(notebook), ran[:3])] == saved


RESUMED = """\
import keras
from pyadapter import NanGuard

model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(8), keras.layers.Dense(1)])
model.load_weights("warmup.weights.h5")
model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")
model.fit(x, y, initial_epoch=3, callbacks=[NanGuard()])
"""


# The history row of a step 0 that read NaN weights (its update not applied: the norm is of the weights it read).
NAN_WEIGHTS_AT_STEP_0 = {
    "step": 0,
    "loss": None,
    "loss_nonfinite": "nan",
    "weight_norm": None,
    "weight_norm_nonfinite": "nan",
}


def test_weights_loaded_non_finite_are_named_at_the_load_not_the_rate(tmp_path: Path) -> None:
    """A warm-up run went NaN and saved its weights; the script loads them, compiles a fresh Adam and fits. Step 0
    (no update of this fit yet) read NaN weights, and the cause was "an update made the weights non-finite ... try
    0.005": no update had run. The load is the line."""
    program = tmp_path / "resume.py"
    program.write_text(RESUMED)
    origin = weights_read_back(program)
    first = [NAN_WEIGHTS_AT_STEP_0]
    context = CauseContext(history=first, entry_script=str(program), model_info={"optimizer": "Adam"}, step=0)
    cause = classify(findings_of(origin, step=0), context)
    assert cause.kind == "divergence", cause
    assert cause.summary.startswith(
        "the weights were already non-finite when this fit began (step 0, before any update of it); they were "
        "given to the model at resume.py:5 (load_weights)"
    ), cause.summary
    assert cause.change is not None and cause.change.line == 5 and "try" not in cause.change.what, (
        cause.change
    )
    # A later step of the same fit: an update of it wrote them, the rate is the line (as before).
    later = [{"step": s, "loss": 0.7, "weight_norm": 3.0} for s in range(4)]
    context = CauseContext(history=later, entry_script=str(program), model_info={"optimizer": "Adam"}, step=4)
    assert classify(findings_of(origin, step=4), context).change.line == 6


def test_weights_a_backup_restored_huge_are_named_at_the_backup_not_the_inputs(tmp_path: Path) -> None:
    """BackupAndRestore(delete_checkpoint=False) kept the weights of a run that stopped on a divergence (finite,
    norm 5.9e19); the second run resumed from them and a MatMul overflowed at step 0: "values this large from the
    start point at unscaled inputs or initial weights"."""
    program = tmp_path / "train.py"
    program.write_text(
        RESUMED.replace(
            'model.load_weights("warmup.weights.h5")\n',
            "backup = keras.callbacks.BackupAndRestore('backup')\n",
        ).replace("callbacks=[NanGuard()]", "callbacks=[backup, NanGuard()]")
    )
    history = [{"step": 0, "loss": None, "loss_nonfinite": "inf", "weight_norm": 5.94e19}]
    context = CauseContext(
        history=history, entry_script=str(program), model_info={"optimizer": "Adam"}, step=0
    )
    cause = classify(findings_of(overflow_origin(program), step=0), context)
    assert "the weights were already huge when this fit began (weight norm 5.94e+19" in cause.summary, (
        cause.summary
    )
    assert "unscaled inputs" not in cause.summary
    assert (
        cause.change is not None
        and cause.change.line == 5
        and "delete the backup folder" in cause.change.what
    )


def test_a_later_fit_of_a_loop_of_fits_that_starts_from_blown_up_weights_says_so(tmp_path: Path) -> None:
    """A loop of ``model.fit(epochs=1)`` calls (a notebook's "train a bit, plot, go on"): the third fit diverged and
    stopped; the loop went on, and the next fit failed at its first batch, step 219 of the optimizer's count. Its
    cause read "a Square op overflowed on finite inputs with no rise over the steps before ... keep its values in
    range": only a step 0 counted as the start of a fit, and the weights' norm of 1.35e13 went unread."""
    program = tmp_path / "train.py"
    program.write_text(
        "import keras\nfrom pyadapter import NanGuard\n\n"
        "model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(8), keras.layers.Dense(1)])\n"
        "model.compile(optimizer=keras.optimizers.Adam(0.05), loss='mse')\n"
        "for lr in (1e-3, 1e-2, 1.0, 10.0):\n"
        "    model.optimizer.learning_rate = lr\n"
        "    model.fit(x, y, epochs=1, callbacks=[NanGuard()])\n"
    )
    history = [
        {"step": 219, "loss": None, "loss_nonfinite": "inf", "weight_norm": 1.35e13, "max_abs_output": 3e23}
    ]
    context = CauseContext(
        history=history,
        entry_script=str(program),
        model_info={"optimizer": "Adam"},
        step=219,
        epoch=0,
        batch_index=0,
    )
    cause = classify(findings_of(overflow_origin(program, line=8, op="Square"), step=219), context)
    assert cause.kind == "divergence", cause
    assert cause.summary.startswith(
        "the weights were already huge when this fit began (weight norm 1.35e+13 at step 219), and values "
        "overflowed at this fit's first step"
    ), cause.summary


def test_a_fit_resumed_at_an_initial_epoch_from_blown_up_weights_says_so(tmp_path: Path) -> None:
    """A job resumed from a CheckpointManager with ``fit(initial_epoch=40)``: the checkpoint held weights from mid
    divergence (a callback saved them after the guard's stop), and the resumed fit failed at its first step, epoch
    40, batch 0. Only an epoch 0 told where a fit began, so the cause was "a Square op overflowed on finite inputs
    with no rise over the steps before ... keep its values in range". The guard records the step its fit began."""
    program = tmp_path / "train.py"
    program.write_text(
        "import keras\nfrom pyadapter import NanGuard\n\n"
        "model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(8), keras.layers.Dense(1)])\n"
        "model.compile(optimizer=keras.optimizers.SGD(0.01), loss='mse')\n"
        "initial_epoch = int(ckpt.epoch)\n"
        "model.fit(x, y, initial_epoch=initial_epoch, epochs=initial_epoch + 20, callbacks=[NanGuard()])\n"
    )
    history = [
        {"step": 3984, "loss": None, "loss_nonfinite": "inf", "weight_norm": 7.4e15, "max_abs_output": 3.9e37}
    ]
    context = CauseContext(
        history=history,
        entry_script=str(program),
        model_info={"optimizer": "SGD", "first_step": 3984},
        step=3984,
        epoch=40,
        batch_index=0,
    )
    cause = classify(findings_of(overflow_origin(program, line=7, op="Square"), step=3984), context)
    assert cause.kind == "divergence", cause
    assert cause.summary.startswith("the weights were already huge when this fit began"), cause.summary


GROWING_DECAY = """\
import keras

lr_schedule = keras.optimizers.schedules.ExponentialDecay(
    initial_learning_rate=1e-3,
    decay_steps=50,
    decay_rate=1.5)
model = keras.Sequential([keras.Input(shape=(9,)), keras.layers.Dense(64), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(learning_rate=lr_schedule, momentum=0.9), loss="mse")
model.fit(x, y, epochs=100)
"""


def test_a_rate_given_by_a_constant_is_changed_where_the_constant_is_written(tmp_path: Path) -> None:
    """``LR = 1.5`` above ``SGD(learning_rate=LR, momentum=0.9, nesterov=True)`` (a MobileNet diverging): the change
    was the optimizer's line, where no number is written; it is the constant's, and the quick fix lowers it there."""
    from pyadapter.capture.learning_rate import LearningRate

    program = tmp_path / "train.py"
    text = TRAIN.replace("def main():\n", "LR = 1.5  # a rate far too high\n\n\ndef main():\n").replace(
        "SGD(learning_rate=0.05, momentum=0.9)", "SGD(learning_rate=LR, momentum=0.9)"
    )
    program.write_text(text)
    context = CauseContext(
        history=diverging_history(),
        model_info={"optimizer": "SGD", "optimizers": ["SGD"]},
        entry_script=str(program),
        learning_rate=LearningRate(1.5),
    )
    cause = classify(findings_of(overflow_origin(program, line=25)), context)
    assert cause.kind == "divergence", cause
    assert cause.change is not None and cause.change.line == 16, cause.change
    fixes = cause_fixes(text, cause)
    assert fixes and apply_edits(text, fixes[0].edits).splitlines()[15].startswith("LR = 0.15"), fixes


def test_a_rate_raised_slowly_over_the_run_is_told_from_the_codes_rate(tmp_path: Path) -> None:
    """``LearningRateScheduler`` whose decay lost its minus sign (``lr * exp(0.1)`` per epoch) over 40 epochs of a
    resumed job: x1.3 over the steps the guard recorded, so no rise was seen, and the change was "learning rate
    0.447 (LearningRateScheduler(scheduler)): try 0.0447", a number for a callback that writes none. The code's
    own rate (0.05) tells the rise over the run."""
    from pyadapter.capture.learning_rate import LearningRate

    program = write_program(tmp_path)
    history = diverging_history(40)
    for row in history:
        row["learning_rate"] = 0.35 if row["step"] < 20 else 0.447
    context = CauseContext(
        history=history,
        model_info={"optimizer": "SGD", "optimizers": ["SGD"]},
        entry_script=str(program),
        learning_rate=LearningRate(0.447),
        step=40,
    )
    cause = classify(findings_of(overflow_origin(program), step=40), context)
    assert (
        "raised the rate x8.94 over the run, from the rate your code sets (0.05 to 0.447)" in cause.summary
    ), cause.summary
    assert (
        cause.change is not None and "cap it at or below 0.05, the rate your code sets" in cause.change.what
    )
    assert "try 0.0447" not in cause.change.what, cause.change.what


def test_a_library_decay_that_grows_is_changed_at_its_decay_rate(tmp_path: Path) -> None:
    """``ExponentialDecay(1e-3, decay_steps=50, decay_rate=1.5)`` (meant 0.95): the change was "the learning rate
    0.0311 that ExponentialDecay gives at step 424: lower it (try 0.00311)", and a start 10x lower diverged at step
    694 instead. The rates the bundle keeps rose at every step recorded: the decay's rate is the change."""
    from pyadapter.capture.learning_rate import LearningRate

    program = tmp_path / "train.py"
    program.write_text(GROWING_DECAY)
    rate = LearningRate(
        0.0311,
        schedule="ExponentialDecay",
        earlier=[(26, 0.00123), (53, 0.00154), (106, 0.00236), (212, 0.00558)],
        previous=0.0308,
    )
    context = CauseContext(
        history=diverging_history(40),
        model_info={"optimizer": "SGD", "optimizers": ["SGD"]},
        entry_script=str(program),
        learning_rate=rate,
        step=424,
    )
    cause = classify(findings_of(overflow_origin(program, line=10), step=424), context)
    assert cause.kind == "divergence", cause
    assert cause.change is not None and cause.change.line == 6, cause.change
    assert "ExponentialDecay was still raising the rate" in cause.change.what, cause.change.what
    assert "keep decay_rate below 1" in cause.change.what and "try 0.00311" not in cause.change.what


def test_a_rate_raised_per_epoch_is_capped_at_the_lowest_rate_that_trained(tmp_path: Path) -> None:
    """``LearningRateScheduler(lambda epoch, lr: lr * 1.5)`` and a fit cell run again: the rate rose from the
    code's 0.05 to 3.28, held still over the last, short growth, and the change was "learning rate 3.28: try 0.328"
    (no rise seen: the growth's first rate was the failing one); with a rise seen, "cap it at or below 2.18, its
    rate when the growth began", a rate the model had already blown up at. The cap is the lowest rate known to
    have trained: here the rate the code writes, below every rate the guard recorded."""
    from pyadapter.capture.learning_rate import LearningRate

    program = write_program(tmp_path)
    history = diverging_history(40)
    for row in history:
        row["learning_rate"] = 2.18 if row["step"] < 5 else 3.28
    context = CauseContext(
        history=history,
        model_info={"optimizer": "SGD", "optimizers": ["SGD"]},
        entry_script=str(program),
        learning_rate=LearningRate(3.28),
        step=40,
    )
    cause = classify(findings_of(overflow_origin(program), step=40), context)
    assert cause.kind == "divergence", cause
    assert (
        "after the program raised the rate x1.5 over the last 41 steps the guard recorded" in cause.summary
    ), cause.summary
    assert cause.change is not None and cause.change.what.startswith("the schedule that sets it"), (
        cause.change
    )
    assert "cap it at or below 0.05, the rate your code sets" in cause.change.what, cause.change.what
    assert "try 0.328" not in cause.change.what, cause.change.what


@pytest.mark.parametrize(
    ("op", "forward", "health", "said", "fix"),
    [
        (
            "Reciprocal",
            "functional_1/arcface_1/Acos",
            TensorHealth(dtype="float32", size=128, zero=1, pos=127),
            "the step differentiated acos at +-1",
            "tf.acos(tf.clip_by_value(x, -1 + 1e-7, 1 - 1e-7))",
        ),
        (
            "Lgamma",
            None,
            TensorHealth(dtype="float32", size=64, zero=1, pos=63),
            "lgamma(x) is inf at 0",
            "tf.nn.softplus(x) + 1e-6",
        ),
    ],
)
def test_an_op_past_its_domains_edge_is_named_with_that_edge(
    tmp_path: Path, op: str, forward: str | None, health: TensorHealth, said: str, fix: str
) -> None:
    """ArcFace's unclipped acos (its gradient's Reciprocal at +-1), a Beta likelihood's lgamma of a concentration
    that reached 0, a focal loss's log1p(-p) with p at 1: the cause said "keep its inputs in its domain", which
    names neither the edge nor the fix; the user had no Reciprocal op at all."""
    program = write_program(tmp_path)
    origin = Finding(
        file=str(program),
        line=LOG_LINE,
        role="backward-origin" if forward else "origin",
        op=OpRef(f"model/{op}", op, forward_op=forward),
        health=TensorHealth(dtype="float32", size=health.size, pos_inf=1),
        inputs=[InputHealth("x:0", health)],
    )
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert cause.kind == "op" and said in cause.summary, cause.summary
    assert cause.change is not None and fix in cause.change.what, cause.change


@pytest.mark.parametrize(
    ("code", "fix"),
    [
        # A focal loss's log1p(-p), p at 1: the probability's complement.
        ("loss = -tf.reduce_mean(tf.math.log1p(-p))", "tf.math.log1p(-tf.minimum(p, 1 - 1e-7))"),
        # An RMSLE loss's log1p of a linear head's prediction below -1: no probability there.
        (
            "return tf.sqrt(tf.reduce_mean(tf.square(tf.math.log1p(y_pred) - tf.math.log1p(y_true))))",
            'activation="softplus"',
        ),
    ],
)
def test_a_log1p_past_minus_one_is_told_by_what_it_takes_the_log_of(
    tmp_path: Path, code: str, fix: str
) -> None:
    """A bike-demand notebook's RMSLE on a linear output: log1p(y_pred) of a prediction below -1. The cause told the
    story of a saturated sigmoid ("log1p(-p) with p reaching 1") and to clip the probability; only "keep 1 + x above
    0" applied. A log1p of a probability's complement keeps those words."""
    program = tmp_path / "train.py"
    program.write_text(f"import tensorflow as tf\n\n\ndef loss_fn(y_true, y_pred, p):\n    {code}\n")
    origin = Finding(
        file=str(program),
        line=5,
        role="origin",
        op=OpRef("model/Log1p", "Log1p"),
        health=TensorHealth(dtype="float32", size=64, nan=3, pos=61),
        inputs=[InputHealth("x:0", TensorHealth(dtype="float32", size=64, neg=5, pos=59))],
    )
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert cause.kind == "op" and "log1p(x) is -inf at x = -1" in cause.summary, cause.summary
    assert cause.change is not None and fix in cause.change.what, cause.change
    probability = "sigmoid or softmax probability" in cause.summary
    assert probability == ("log1p(-p)" in code), cause.summary


POLY_DECAY = """\
import keras
import numpy as np


class PolynomialDecay(keras.callbacks.Callback):
    def __init__(self, base_lr, total_steps, power=0.9):
        super().__init__()
        self.base_lr, self.total_steps, self.power, self.step = base_lr, total_steps, power, 0

    def on_train_batch_begin(self, batch, logs=None):
        lr = self.base_lr * np.power(1.0 - self.step / self.total_steps, self.power)
        self.model.optimizer.learning_rate.assign(lr)
        self.step += 1
"""


def test_a_nan_rate_a_callback_computed_where_numpy_warned_is_changed_at_that_line(tmp_path: Path) -> None:
    """A poly-decay callback with total_steps counted at another batch size: past it, the base of np.power is
    negative and the rate NaN (NumPy: "invalid value encountered in power", at the line that computes it). The
    cause named the assign below it, "keep the learning rate finite", and not why it was NaN."""
    from pyadapter.capture.learning_rate import LearningRate
    from pyadapter.numpy_warnings import NumpyWarning

    program = tmp_path / "prog.py"
    program.write_text(POLY_DECAY)
    lines = POLY_DECAY.splitlines()
    computed = next(n for n, text in enumerate(lines, 1) if "np.power" in text)
    context = CauseContext(
        entry_script=str(program),
        step=559,
        learning_rate=LearningRate(math.nan),
        numpy_warnings=[NumpyWarning(str(program), computed, "invalid value encountered in power")],
    )
    cause = classify(findings_of(overflow_origin(program)), context)
    assert 'NumPy warned "invalid value encountered in power" at prog.py:' in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == computed, cause.change
    assert "a polynomial decay's 1 - step / total_steps past its end" in cause.change.what, cause.change
    # Without the warning, the assign is the line.
    cause = classify(findings_of(overflow_origin(program)), dataclasses.replace(context, numpy_warnings=[]))
    assert cause.change is not None and cause.change.line == computed + 1, cause.change


def test_a_window_of_a_time_series_is_named_by_the_series_row() -> None:
    """keras.io's weather forecaster: ``timeseries_dataset_from_array(x_train, y_train, sequence_length=72,
    sampling_rate=step)`` with a sensor gap left NaN at rows 1530-1535 of column 2. The cause said "element 1459 of
    the dataset passed to fit": the window, whose row 1459 is fine. The row is the window's start plus its time
    step times the sampling rate."""
    import ast

    from pyadapter.capture.records import BadElement
    from pyadapter.cause import provenance
    from pyadapter.cause.change_line import Site
    from pyadapter.cause.sources import SourceUnit

    text = (
        "import keras\n"
        "step = 2\n"
        "dataset_train = keras.utils.timeseries_dataset_from_array(\n"
        "    x_train, y_train, sequence_length=36, sampling_rate=step, sequence_stride=3, batch_size=32\n"
        ")\n"
        "model.fit(dataset_train, epochs=2)\n"
    )
    unit = SourceUnit("/w/forecast.py", None, text, ast.parse(text))
    call = next(
        n
        for n in ast.walk(unit.tree)
        if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "timeseries_dataset_from_array"
    )
    batch = {"x": np.zeros((32, 36, 3), np.float32), "y": np.zeros((32, 1), np.float32)}
    batch["x"][19, 11, 2] = np.nan

    def provenance_of(element: BadElement | None = None) -> dict | None:
        return provenance.data_provenance(
            batch,
            None,
            element=element,
            made_by=Site(unit, call, "dataset_train"),
            batch_index=45,
            epoch=0,
            batch_size=None,
            shuffled=False,
            dataset=True,
            cwd=None,
        )

    where = provenance_of()
    assert where is not None and where["index"] == 45 * 32 + 19
    # Window 1459 starts at row 1459 * 3 (the stride); its step 11 is 11 * 2 rows on (the sampling rate).
    assert where["series_row"] == 1459 * 3 + 11 * 2, where
    from pyadapter.findings_text import index_text

    assert index_text(where) == (
        "row 4399 of the array given to timeseries_dataset_from_array (time step 11 of window 1459)"
    )
    # A bad target (a logger's 1e30 sentinel left in the series the targets are cut from): ``y_train[i]`` goes with
    # the window that starts at row i. It said "element 1459 of the dataset passed to fit", of a batched dataset.
    batch["x"][19, 11, 2] = 0.0
    batch["y"][19, 0] = 1e30
    where = provenance_of(BadElement("y", 19, (19, 0), 1e30, 32))  # finite: the value an op read out of range
    assert where is not None and where["target_row"] == 1459 * 3, where
    assert index_text(where) == (
        "row 4377 of the targets given to timeseries_dataset_from_array (the target of window 1459)"
    )


def test_a_fresh_model_whose_first_update_blew_up_is_not_put_down_to_an_earlier_fit(tmp_path: Path) -> None:
    """Targets x1e9 under SGD(0.1): step 0's update made the weights huge (its weight norm is read after the update),
    and the cause said "the weights were already huge when this fit began ... left so by an earlier fit", while
    step 0's forward pass, on the fresh weights, was 1.23 at most."""
    program = write_program(tmp_path)
    history = [
        {"step": 0, "loss": 1e18, "weight_norm": 4.38e8, "max_abs_output": 1.23},
        {"step": 1, "loss": None, "loss_nonfinite": "inf", "weight_norm": 4.38e8, "max_abs_output": 4e17},
    ]
    context = CauseContext(
        history=history, entry_script=str(program), model_info={"optimizer": "SGD"}, step=1
    )
    cause = classify(findings_of(overflow_origin(program), step=1), context)
    assert "already huge" not in cause.summary and "earlier fit" not in cause.summary, cause.summary


def test_a_fresh_model_on_features_in_the_millions_is_not_put_down_to_an_earlier_fit(tmp_path: Path) -> None:
    """A shard of features 1e6 times the others under SGD(0.05): step 0's forward pass on the fresh weights was
    1.1e6 (the inputs'), its update made the weights huge, and step 1 overflowed. The cause said "the weights were
    already huge when this fit began ... build the model again"; the inputs made the output, not the weights."""
    program = write_program(tmp_path)
    history = [
        {"step": 0, "loss": 3e12, "weight_norm": 3.55e10, "max_abs_output": 1.14e6},
        {"step": 1, "loss": None, "loss_nonfinite": "inf", "weight_norm": 3.55e10, "max_abs_output": 5.8e26},
    ]
    rows = np.random.default_rng(0).normal(size=(32, 6)).astype("float32")
    rows[:8] *= 1e6  # the shard in other units
    context = CauseContext(
        history=history,
        entry_script=str(program),
        model_info={"optimizer": "SGD"},
        step=1,
        batch={"args": (rows, np.zeros((32, 1), "float32")), "kwargs": {}},
    )
    cause = classify(findings_of(overflow_origin(program), step=1), context)
    assert "already huge" not in cause.summary and "build the model again" not in str(cause.change), cause
    assert "unscaled features" in cause.summary or "raw units" in cause.summary, cause.summary


def test_a_custom_loop_that_loaded_nan_weights_names_the_load(tmp_path: Path) -> None:
    """guard_step after ``net.load_weights(...)`` of a diverged run: the bundle of a custom loop records no optimizer,
    and the cause read "a ReadVariableOp op made NaN/Inf from finite inputs ... keep its inputs in its domain"."""
    program = tmp_path / "loop.py"
    program.write_text(
        RESUMED.replace('model.compile(optimizer=keras.optimizers.Adam(0.05), loss="mse")\n', "").replace(
            "model.fit(x, y, initial_epoch=3, callbacks=[NanGuard()])\n",
            "for bx, by in data:\n    step(bx, by)\n",
        )
    )
    first = [NAN_WEIGHTS_AT_STEP_0]
    context = CauseContext(history=first, entry_script=str(program), step=0)
    cause = classify(findings_of(weights_read_back(program), step=0), context)
    assert "the weights were already non-finite when this fit began" in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == 5, cause.change


def test_weights_a_script_wrote_non_finite_before_fit_name_the_write(tmp_path: Path) -> None:
    """LSUV's data-dependent init, ``layer.kernel.assign(layer.kernel / std)`` before the one fit of a script, with
    a ReLU unit dead on the init batch (std 0): "left so by an earlier fit or loop of the same model (a notebook
    cell run again ...): build the model again", of a script that fit once (s40b p10). The write is the line."""
    program = tmp_path / "lsuv.py"
    program.write_text(
        "import keras\n"
        "import tensorflow as tf\n"
        "from pyadapter import NanGuard\n"
        "model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(8), keras.layers.Dense(1)])\n"
        "def lsuv_init(model, batch):\n"
        "    for layer in model.layers:\n"
        "        std = tf.math.reduce_std(layer(batch), axis=0)\n"
        "        layer.kernel.assign(layer.kernel / std)\n"
        "lsuv_init(model, x[:256])\n"
        "model.compile(optimizer='adam', loss='mse')\n"
        "model.fit(x, y, callbacks=[NanGuard()])\n"
    )
    context = CauseContext(history=[NAN_WEIGHTS_AT_STEP_0], entry_script=str(program), step=0)
    cause = classify(findings_of(weights_read_back(program), step=0), context)
    assert cause.kind == "op", cause
    assert (
        "the program writes them itself at lsuv.py:8 (layer.kernel.assign(layer.kernel / std))"
        in cause.summary
    )
    assert "notebook" not in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == 8, cause.change


def test_a_diverging_fit_from_huge_loaded_weights_names_the_load(tmp_path: Path) -> None:
    """Fine-tuning from a checkpoint a diverged run saved (weight norm 9.9e13, a forward pass already huge at step
    0), failing later in the fit: the change was "build the model again ... left so by an earlier fit" at the model's
    construction, while the program had loaded them."""
    program = tmp_path / "finetune.py"
    program.write_text(RESUMED)
    history = diverging_history()
    history[0] = {**history[0], "weight_norm": 9.9e13, "max_abs_output": 3e9}
    context = CauseContext(
        history=history, entry_script=str(program), model_info={"optimizer": "Adam"}, step=17
    )
    cause = classify(findings_of(overflow_origin(program)), context)
    assert cause.kind == "divergence", cause
    assert cause.change is not None and cause.change.line == 5, cause.change
    assert cause.change.what.startswith("load_weights: the weights it gives the model were already huge"), (
        cause.change
    )


def test_a_log1p_of_minus_one_numpy_warned_at_is_a_log_not_a_division() -> None:
    """``np.log1p(df["days_on_market"])`` where -1 means unknown: NumPy says "divide by zero encountered in log1p",
    and the advice was "add an epsilon to the divisor" (followed: 3% of the targets became -16, val_loss 11.6). Then
    it was "guard it (np.log1p, an epsilon, np.clip)", on a line that takes log1p already (log returns
    ``np.log1p(np.diff(p) / p[:-1])`` of a price that fell to 0): the -1 is what to keep away from."""
    from pyadapter.cause.classify import _numpy_fix
    from pyadapter.numpy_warnings import NumpyWarning

    advice = _numpy_fix(NumpyWarning("train.py", 45, "divide by zero encountered in log1p"))
    assert advice.startswith("log1p(x) is -inf at x = -1"), advice
    assert "divisor" not in advice and "np.log1p" not in advice, advice
    assert "keep x above -1" in advice and "missing value" in advice, advice
    # A log of 0 still gets the guard that log1p is; a log of negatives (a random-walk price below 0, NumPy's
    # "invalid value") is not helped by it, and was told the same.
    assert "np.log1p" in _numpy_fix(NumpyWarning("train.py", 45, "divide by zero encountered in log"))
    cast = _numpy_fix(NumpyWarning("train.py", 44, "overflow encountered in cast"))
    assert "already that large before this line" in cast and "rather than clipping it here" in cast, cast
    negative = _numpy_fix(NumpyWarning("train.py", 45, "invalid value encountered in log"))
    assert negative.startswith("a log of negative values (NaN); np.log1p or an epsilon leaves them NaN"), (
        negative
    )


def test_a_batch_whose_every_value_is_nan_says_so_not_just_its_first_element(tmp_path: Path) -> None:
    """keras.io's weather forecast normalized with a NumPy mean over a series with a gap of NaN rows: every value
    went NaN, and the cause named "x[0, 0, 0] = nan, row 0", sending the user after one record."""
    program = write_program(tmp_path)
    x = np.full((4, 6, 3), np.nan, np.float32)
    origin = batch_origin(program, FIT_LINE, TensorHealth(dtype="float32", size=72, nan=72))
    cause = classify(
        findings_of(origin, non_finite_batch={"total": 72, "examples": ["x[0, 0, 0] = nan"]}),
        CauseContext(batch=(x, np.zeros((4, 1), np.float32)), entry_script=str(program)),
    )
    assert cause.kind == "data", cause
    assert "every value of x in the batch is NaN/Inf (72 of 72)" in cause.summary, cause.summary
    # A NumPy warning made it (weights normalized by a sum of 0): the words name that line, not "NumPy takes
    # without a warning" right after the warning they quote.
    from pyadapter.numpy_warnings import NumpyWarning

    warned = CauseContext(
        batch=(x, np.zeros((4, 1), np.float32)),
        entry_script=str(program),
        numpy_warnings=[NumpyWarning(str(program), READ_LINE, "invalid value encountered in divide")],
    )
    cause = classify(
        findings_of(origin, non_finite_batch={"total": 72, "examples": ["x[0, 0, 0] = nan"]}), warned
    )
    assert 'NumPy warned "invalid value encountered in divide"' in cause.summary, cause.summary
    assert "without a warning" not in cause.summary and "at the line NumPy warned at" in cause.summary, cause
    x[1:] = 1.0  # one bad record among good ones: no such words
    cause = classify(
        findings_of(origin, non_finite_batch={"total": 18, "examples": ["x[0, 0, 0] = nan"]}),
        CauseContext(batch=(x, np.zeros((4, 1), np.float32)), entry_script=str(program)),
    )
    assert "every value" not in cause.summary, cause.summary


KAGGLE_EDA = """\
import numpy as np
X_raw = np.load("train.npy")
price = np.load("price.npy")
corr = np.corrcoef(np.column_stack([X_raw, price]).T)[-1, :-1]
for c in corr:
    print(f"{c:+.3f}")
mean, std = X_raw.mean(axis=0), X_raw.std(axis=0)
X = (X_raw - mean) / std
X_train, y_train = X[:1200], np.log1p(price[:1200])
history = model.fit(X_train, y_train, epochs=20, callbacks=[NanGuard("captures")])
"""


def test_the_numpy_warning_at_the_line_that_makes_what_fit_reads_comes_before_an_eda_warning(
    tmp_path: Path,
) -> None:
    """A Kaggle notebook's EDA took the correlation of a constant column (NumPy: "invalid value in divide") before
    the standardization that divided it by its std of 0 (the same warning). The first warning was the line to
    change, and the user was sent to the EDA line, whose result never reaches training."""
    from pyadapter.numpy_warnings import NumpyWarning

    program = tmp_path / "train.py"
    program.write_text(KAGGLE_EDA)
    lines = KAGGLE_EDA.splitlines()
    eda, standardize = lines.index(lines[3]) + 1, lines.index("X = (X_raw - mean) / std") + 1
    fit_line = len(lines)
    x = np.ones((4, 7), np.float32)
    x[:, 5] = np.nan
    origin = batch_origin(program, fit_line, TensorHealth(dtype="float32", size=28, nan=4))
    warned = [
        NumpyWarning(str(program), eda, "invalid value encountered in divide"),
        NumpyWarning(str(program), standardize, "invalid value encountered in divide"),
    ]
    context = CauseContext(
        batch=(x, np.zeros((4, 1), np.float32)),
        entry_script=str(program),
        numpy_warnings=warned,
        model_info={"fit_call": {"code": lines[-1]}},
    )
    cause = classify(
        findings_of(origin, non_finite_batch={"total": 4, "examples": ["x[0, 5] = nan"]}), context
    )
    assert cause.kind == "data", cause
    assert cause.change is not None and cause.change.line == standardize, cause.change
    # Without the fit's text the order is NumPy's.
    unknown = dataclasses.replace(context, model_info={})
    cause = classify(
        findings_of(origin, non_finite_batch={"total": 4, "examples": ["x[0, 5] = nan"]}), unknown
    )
    assert cause.change is not None and cause.change.line == eda, cause.change


@pytest.mark.parametrize(
    ("code", "said"),
    [
        ("    dice = 2.0 * intersection / (sum_pred + sum_true)", "(intersection + 1) / (union + 1)"),
        ("    return ops.sqrt(ops.sum(w * sq) / ops.sum(w))", "the sqrt on this line then takes 0"),
        # An annualized Sharpe ratio's sqrt of a constant takes no 0 (s40e p2).
        ("    sharpe = mean / std * np.sqrt(252.0)", None),
    ],
)
def test_a_division_s_change_reads_its_line_an_overlap_score_or_a_sqrt_of_it(
    tmp_path: Path, code: str, said: str | None
) -> None:
    """A Dice loss's 0 / 0 on an empty mask: divide_no_nan or an epsilon scored a correct empty prediction 0 (val
    Dice stuck at 0.6); a weighted RMSE's 0 / 0 on a batch of zero weights: the epsilon below the division left
    sqrt(0), whose gradient is infinite, and the next run failed there."""
    program = write_program(tmp_path)
    origin = Finding(
        file=str(program),
        line=3,
        role="origin",
        op=OpRef("loss/truediv", "RealDiv"),
        health=TensorHealth(dtype="float32", size=1, nan=1),
        inputs=[
            InputHealth("loss/mul:0", TensorHealth(dtype="float32", size=1, zero=1)),
            InputHealth("loss/add:0", TensorHealth(dtype="float32", size=1, zero=1)),
        ],
    )
    findings = findings_of(origin)
    findings.extra["origin_code"] = code
    cause = classify(findings, CauseContext(entry_script=str(program)))
    assert cause.change is not None, cause
    if said is None:
        assert "sqrt" not in cause.change.what, cause.change
        return
    assert said in cause.change.what, cause.change


def test_a_column_divided_by_0_in_a_dataset_of_named_columns_is_the_change_not_the_read(
    tmp_path: Path,
) -> None:
    """tensorflow.org's structured-data tutorial: ``df["FeePerPhoto"] = df["Fee"] / df["PhotoAmt"]`` (a pet with
    no photo: inf, silently) and ``df_to_dataset``, a dataset of the frame's columns by name. The batch's key names
    the column; the change was the read_csv ("filter or repair non-finite records where the data is read"), whose
    file holds no such column."""
    program = tmp_path / "structured_data.py"
    program.write_text(
        "import numpy as np\n"
        "import pandas as pd\n"
        "import tensorflow as tf\n"
        "df = pd.read_csv('petfinder-mini.csv')\n"
        "df['FeePerPhoto'] = df['Fee'] / df['PhotoAmt']\n"
        "def df_to_dataset(dataframe, batch_size=32):\n"
        "    labels = dataframe.pop('target')\n"
        "    ds = tf.data.Dataset.from_tensor_slices((dict(dataframe), labels))\n"
        "    return ds.shuffle(len(dataframe)).batch(batch_size)\n"
        "train_ds = df_to_dataset(df)\n"
        "model.fit(train_ds, epochs=10)\n"
    )
    fee = np.ones((8, 1), np.float32)
    per_photo = np.ones((8, 1), np.float32)
    per_photo[6, 0] = np.inf
    context = CauseContext(
        batch=({"Fee": fee, "FeePerPhoto": per_photo}, np.ones((8, 1), np.float32)), entry_script=str(program)
    )
    cause = classify(
        findings_of(batch_origin(program, 11, TensorHealth(dtype="float32", size=8, pos_inf=1, pos=7))),
        context,
    )
    assert cause.kind == "data", cause
    assert cause.change is not None and cause.change.line == 5, cause.change
    assert cause.change.what.startswith("the computation of column 'FeePerPhoto'"), cause.change


def test_a_column_pandas_divided_by_0_silently_is_the_change_not_describe_or_the_read(tmp_path: Path) -> None:
    """A Kaggle notebook's feature engineering, ``df["debt_to_income"] = df.debt / df.income`` with an income of 0:
    pandas makes inf without a warning, and a normalizing layer's mean over the column makes it NaN in every row.
    The change was the next line NumPy warned at, ``df.describe()`` (its std of the inf column), or without it
    the read_csv, whose file holds no inf. It is the division that assigns the column."""
    program = tmp_path / "loans.py"
    program.write_text(
        "import numpy as np\n"
        "import pandas as pd\n"
        "raw = pd.read_csv('raw.csv')\n"
        "raw['default'] = (raw.debt / (raw.income + 1) > 0.6).astype(int)\n"
        "df = pd.read_csv('train.csv')\n"
        "df['debt_to_income'] = df.debt / df.income\n"
        "df['accounts_per_year'] = df.n_accounts / (df.age - 17)\n"
        "df.describe()\n"
        "x = df.to_numpy('float32')\n"
        "model.fit(x, y)\n"
    )
    from pyadapter.numpy_warnings import NumpyWarning

    x = np.ones((8, 4), np.float32)
    x[:, 2] = np.nan
    warned = [NumpyWarning(str(program), 8, "invalid value encountered in subtract")]
    context = CauseContext(
        batch=(x, np.zeros((8, 1), np.float32)), entry_script=str(program), numpy_warnings=warned
    )
    cause = classify(
        findings_of(batch_origin(program, 10, TensorHealth(dtype="float32", size=32, nan=8))), context
    )
    assert cause.kind == "data", cause
    assert cause.change is not None and cause.change.line == 6, cause.change
    assert cause.change.what.startswith("the computation of column 'debt_to_income'"), cause.change


def test_a_subtraction_of_a_captured_nan_target_names_the_captured_value(tmp_path: Path) -> None:
    """Guided style transfer: the style's target Gram matrices are computed once before training, one of them
    ``gram / hwc`` of an empty region (NaN), and the step subtracts it. The dump records no health for the captured
    value: "a Sub op made NaN/Inf from finite inputs (truediv_3:0: finite ...): keep its inputs in its domain" was
    false and meaningless for a subtraction."""
    program = write_program(tmp_path)
    origin = Finding(
        file=str(program),
        line=LOG_LINE,
        role="origin",
        op=OpRef("sub_3", "Sub"),
        health=TensorHealth(dtype="float32", size=256, nan=256),
        inputs=[
            InputHealth("truediv_3:0", TensorHealth(dtype="float32", size=256, zero=86, pos=170)),
            InputHealth("sub_3/y:0", None),
        ],
    )
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert "its other input sub_3/y:0, a value captured into the step" in cause.summary, cause.summary
    assert "from finite inputs (" not in cause.summary, cause.summary
    assert cause.change is not None and cause.change.what.startswith("the value the step captures"), (
        cause.change
    )


def test_nan_a_resample_left_in_an_empty_bin_is_changed_at_the_resample(tmp_path: Path) -> None:
    """A meter log with a 6-hour outage put on a 10-minute grid with ``resample("10min").mean()``: the outage's bins
    are NaN, silently (pandas' mean and std skip them, so the scaling looks fine), and the change was the
    ``timeseries_dataset_from_array`` call that handed the array on. The resample is named, and filling it."""
    program = tmp_path / "forecast.py"
    program.write_text(
        "import pandas as pd\n"
        "raw = pd.read_csv('meter.csv', index_col=0, parse_dates=True)\n"
        "series = raw['load_kw'].resample('10min').mean()\n"
        "values = ((series - series.mean()) / series.std()).to_numpy('float32')[:, None]\n"
        "train_ds = keras.utils.timeseries_dataset_from_array(values[:-6], values[6:], 24)\n"
        "model.fit(train_ds)\n"
    )
    x = np.ones((8, 24, 1), np.float32)
    x[3, 5, 0] = np.nan
    context = CauseContext(batch=(x, np.zeros((8, 1), np.float32)), entry_script=str(program))
    cause = classify(
        findings_of(batch_origin(program, 6, TensorHealth(dtype="float32", size=192, nan=1))), context
    )
    assert cause.kind == "data", cause
    assert "resample() at forecast.py:3 makes NaN of a bin or date with no data" in cause.summary, (
        cause.summary
    )
    assert cause.change is not None and cause.change.line == 3, cause.change
    # A program that fills its NaN somewhere is not guessed at.
    program.write_text(program.read_text().replace(".mean()\n", ".mean().interpolate()\n", 1))
    filled = classify(
        findings_of(batch_origin(program, 6, TensorHealth(dtype="float32", size=192, nan=1))), context
    )
    assert "resample()" not in filled.summary, filled.summary


def test_a_divisor_is_named_as_the_line_writes_it(tmp_path: Path) -> None:
    """A weighted mean ``tf.reduce_sum(w * l) / tf.reduce_sum(w)`` over a batch whose weights are all 0: the
    divisor was named by its graph tensor, "Sum_1:0", which the user never wrote. The line's own expression is
    named beside it; a line of two divisions keeps the graph name alone."""
    program = write_program(tmp_path)
    sums = (TensorHealth(dtype="float32", size=1, zero=1), TensorHealth(dtype="float32", size=1, zero=1))
    origin = division_origin(program, 3, "", output=TensorHealth(dtype="float32", size=1, nan=1), sums=sums)
    findings = findings_of(origin)
    findings.extra["origin_code"] = "    loss = tf.reduce_sum(w * l) / tf.reduce_sum(w)"
    cause = classify(findings, CauseContext(entry_script=str(program)))
    assert "in its divisor tf.reduce_sum(w) (Sum_1:0): 0 / 0 is NaN" in cause.summary, cause.summary
    findings.extra["origin_code"] = "    loss = tf.reduce_sum(w * l) / tf.reduce_sum(w) / n"
    assert "in its divisor Sum_1:0:" in classify(findings, CauseContext(entry_script=str(program))).summary


def _division_by_a_traced_zero(program: Path, line: int) -> Finding:
    """A RealDiv at `line` whose divisor is a number that was 0 when the step was traced (``truediv/y:0``)."""
    return Finding(
        file=str(program),
        line=line,
        role="origin",
        op=OpRef("truediv", "RealDiv"),
        health=TensorHealth(dtype="float32", size=64, nan=3, pos_inf=61),
        inputs=[
            InputHealth("add:0", TensorHealth(dtype="float32", size=64, zero=3, pos=61)),
            InputHealth("truediv/y:0", TensorHealth(dtype="float32", size=1, zero=1)),
        ],
    )


@pytest.mark.parametrize("where", ["dict", "json", "keyword", "absl", "argparse"])
def test_a_division_by_a_number_a_config_set_to_0_is_changed_where_it_is_set(
    tmp_path: Path, where: str
) -> None:
    """A PINN's residual ``(u_t + u * u_x) / cfg["nu"]`` with ``"nu": 0.0`` in its config (a dict, a JSON file the
    run reads), a distiller's ``temperature=0``: the graph holds the number as a constant ("truediv/y:0"), and the
    words were the division's (divide_no_nan, or a / tf.maximum(b, 1e-7)), which made the loss finite and the
    model wrong, or crashed for an int. The line that sets the value is the one to change."""
    divisor = {
        "dict": 'cfg["nu"]',
        "json": "self.nu",
        "keyword": "self.nu",
        "absl": "FLAGS.nu",
        "argparse": "args.nu",
    }[where]
    setting = {
        "dict": 'cfg = {\n    "nu": 0.0,  # inviscid\n    "steps": 100,\n}\n',
        "json": "import json\ncfg = json.load(open('run.json'))\n",
        "keyword": "def build(nu=0.01):\n    return nu\nmodel = build(nu=0)\n",
        # A research script's flag, handed on through functools.partial or a trainer.
        "absl": 'from absl import flags\nflags.DEFINE_float("nu", 0.0, "viscosity")\nFLAGS = flags.FLAGS\n',
        "argparse": (
            "import argparse\nparser = argparse.ArgumentParser()\n"
            'parser.add_argument("--nu", type=float, default=0.0)\nargs = parser.parse_args()\n'
        ),
    }[where]
    program = tmp_path / "pinn.py"
    program.write_text(setting + f"residual = u_xx - (u_t + u * u_x) / {divisor}\n", encoding="utf-8")
    (tmp_path / "run.json").write_text('{"steps": 100,\n "nu": 0.0}\n', encoding="utf-8")
    division = len(setting.splitlines()) + 1
    origin = _division_by_a_traced_zero(program, division)
    findings = findings_of(origin)
    findings.extra["origin_code"] = f"residual = u_xx - (u_t + u * u_x) / {divisor}"
    cause = classify(
        findings, CauseContext(entry_script=str(program), argv=[str(program)], cwd=str(tmp_path))
    )
    assert cause.summary.startswith(
        f"the RealDiv op divided by {divisor}, a number that was 0 when the step was traced"
    ), cause.summary
    expected = {
        "dict": (program, 2),
        "json": (tmp_path / "run.json", 2),
        "keyword": (program, 3),
        "absl": (program, 2),
        "argparse": (program, 3),
    }[where]
    assert cause.change is not None and (cause.change.file, cause.change.line) == (
        str(expected[0]),
        expected[1],
    )
    assert cause.change.what.startswith("the value of nu: give it the nonzero value"), cause.change.what
    assert "divide_no_nan(a, b)" not in cause.change.what


def test_a_division_by_a_number_the_command_line_set_to_0_names_the_flag(tmp_path: Path) -> None:
    """keras.io's Distiller run as ``python distill.py --temperature 0``: the argument's default is 3, so no line
    of the code sets it to 0, and the change was "the value of temperature: give it the nonzero value" at the
    division. The flag that gave it is named, at the line that defines it."""
    program = tmp_path / "distill.py"
    program.write_text(
        "import argparse\n"
        "parser = argparse.ArgumentParser()\n"
        'parser.add_argument("--temperature", type=float, default=3.0)\n'
        "args = parser.parse_args()\n"
        "soft = teacher_logits / self.temperature\n",
        encoding="utf-8",
    )
    origin = _division_by_a_traced_zero(program, 5)
    findings = findings_of(origin)
    findings.extra["origin_code"] = "soft = teacher_logits / self.temperature"
    context = CauseContext(
        entry_script=str(program), argv=[str(program), "--temperature", "0"], cwd=str(tmp_path)
    )
    cause = classify(findings, context)
    assert cause.summary.endswith("; the command line gave it: --temperature 0"), cause.summary
    assert cause.change is not None and cause.change.line == 3, cause.change
    assert cause.change.what.startswith(
        "the value of temperature: the command line gives it 0 (--temperature 0)"
    )
    # Given as --temperature=3 the flag is not the 0: the words stay the division's constant.
    context.argv = [str(program), "--temperature=3"]
    assert "command line" not in classify(findings, context).summary


@pytest.mark.parametrize("inside", [True, False])
def test_a_divisor_variable_the_step_resets_itself_is_no_schedule(tmp_path: Path, inside: bool) -> None:
    """Gradient accumulation dividing by ``accum_tokens``, a variable the step itself adds to and resets: a window
    of empty micro-batches gave 0/0, and the cause was "a variable the program sets outside the step ... (a floor
    for a schedule that reaches 0)" at the reset. A variable the loop sets (an annealed temperature) keeps it."""
    reset = "    accum_tokens.assign(0.0)\n" if inside else ""
    outside = (
        "" if inside else "for step in range(10):\n    accum_tokens.assign(1.0 - step / 9)\n    apply(g)\n"
    )
    program = tmp_path / "accumulate.py"
    program.write_text(
        "import tensorflow as tf\naccum_tokens = tf.Variable(0.0)\n\n\n@tf.function\ndef apply(grads):\n"
        f"    update = grads / accum_tokens\n{reset}    return update\n\n\n{outside}",
        encoding="utf-8",
    )
    origin = Finding(
        file=str(program),
        line=7,
        role="origin",
        op=OpRef("truediv", "RealDiv"),
        health=TensorHealth(dtype="float32", size=1, nan=1),
        inputs=[
            InputHealth("grads:0", TensorHealth(dtype="float32", size=1, zero=1)),
            InputHealth("truediv/ReadVariableOp:0", TensorHealth(dtype="float32", size=1, zero=1)),
        ],
    )
    findings = findings_of(origin)
    findings.extra["origin_code"] = "    update = grads / accum_tokens"
    context = CauseContext(entry_script=str(program), step_state={"accum_tokens": 0.0})
    cause = classify(findings, context)
    assert ("a variable the program sets outside the step" in cause.summary) is not inside, cause.summary
    assert cause.change is not None and cause.change.line == (7 if inside else 12), cause.change


def test_a_graph_constant_made_nan_before_training_is_changed_where_it_is_computed(tmp_path: Path) -> None:
    """A GCN normalizing its adjacency once in ``__init__`` (``D^-1/2 A D^-1/2`` with an isolated node: inf * 0):
    the step's MatMul reads it as a constant the dump records no values of, and the cause was "a MatMul op made
    NaN/Inf from finite inputs: keep its inputs in its domain". The captured operand is named as written and the
    change is where it is computed."""
    program = tmp_path / "gcn.py"
    program.write_text(
        "import tensorflow as tf\n\n\nclass GCN:\n    def __init__(self, a):\n"
        "        d = tf.pow(tf.reduce_sum(a, 1), -0.5)\n"
        "        self.a_hat = d[:, None] * a * d[None, :]\n\n"
        "    def call(self, x, a_hat):\n        return tf.matmul(a_hat, x)\n",
        encoding="utf-8",
    )
    origin = Finding(
        file=str(program),
        line=10,
        role="origin",
        op=OpRef("gcn/MatMul_1", "MatMul"),
        health=TensorHealth(dtype="float32", size=64, nan=64),
        inputs=[
            InputHealth("gcn/MatMul_1/a:0", None),
            InputHealth("gcn/MatMul:0", TensorHealth(dtype="float32", size=64, pos=30, neg=34)),
        ],
    )
    findings = findings_of(origin)
    findings.extra["origin_code"] = "        return tf.matmul(a_hat, x)"
    cause = classify(findings, CauseContext(entry_script=str(program)))
    assert cause.kind == "data", cause
    assert "its other input a_hat (gcn/MatMul_1/a:0), a value captured into the step" in cause.summary
    assert cause.change is not None and cause.change.line == 7, cause.change
    # Made by NumPy before training (``np.power(rowsum, -0.5)``, then inf * 0 in a dot, s39d p1): NumPy's first
    # warned line makes it, not the line that hands it to TensorFlow.
    from pyadapter.numpy_warnings import NumpyWarning

    warnings = [
        NumpyWarning(str(program), 6, "divide by zero encountered in power"),
        NumpyWarning(str(program), 7, "invalid value encountered in dot"),
    ]
    cause = classify(findings, CauseContext(entry_script=str(program), numpy_warnings=warnings))
    assert cause.change is not None and cause.change.line == 6, cause.change
    assert "d[np.isinf(d)] = 0.0" in cause.change.what, cause.change


@pytest.mark.parametrize("in_the_pipeline", [True, False])
def test_a_log_the_input_pipeline_made_is_no_trap_of_the_loss_s_where(
    tmp_path: Path, in_the_pipeline: bool
) -> None:
    """keras.io's RetinaNet with boxes padded to width 0: its label encoder (a Dataset.map) takes
    ``log(gt_w / anchor_w)`` = -inf, and the loss's tf.where masks those targets. The cause was "the tf.where at line
    268 discarded the -inf a Log op made ... give it a safe input where the condition is false" at the encoder's
    line, which holds no tf.where. An op of the step whose where masks it stays the trap."""
    program = write_program(tmp_path)
    origin = log_origin(program)
    findings = findings_of(origin)
    findings.extra["masked_by_where"] = {"line": FIT_LINE}
    if in_the_pipeline:
        assert findings.bundle is not None
        findings.bundle.update(
            origin_from="input pipeline re-run", non_finite_batch={"element": "y[0, 3] = -inf"}
        )
    cause = classify(findings, CauseContext(entry_script=str(program)))
    assert ("the tf.where" in cause.summary) is not in_the_pipeline, cause.summary


def test_a_batch_that_held_nan_before_the_step_is_data_whatever_op_of_the_step_the_rerun_found(
    tmp_path: Path,
) -> None:
    """A CSV read by ``make_csv_dataset`` with a field written "nan": the pipeline's re-run found no op of its own
    that made the NaN (the parser reads it), and named the first op of the step that made one from finite inputs,
    the gradient of a max over the NaN row (0 / 0). The cause was "op: divided by 2 zeros ... divide_no_nan" at a
    line with no division; the batch held the NaN before any op of the step ran."""
    program = write_program(tmp_path)
    origin = Finding(
        file=str(program),
        line=EXP_LINE,
        role="backward-origin",
        op=OpRef(
            "gradient_tape/compile_loss/batch_hard_triplet/truediv_1",
            "RealDiv",
            graph="one_step_on_data",
            forward_op="compile_loss/batch_hard_triplet/Max",
        ),
        health=TensorHealth(dtype="float32", size=256, nan=32, pos=224),
        inputs=[
            InputHealth("gradient_tape/Cast_1:0", TensorHealth(dtype="float32", size=256, zero=137, pos=119)),
            InputHealth("gradient_tape/Reshape_3:0", TensorHealth(dtype="float32", size=16, zero=2, pos=14)),
        ],
    )
    findings = findings_of(origin)
    assert findings.bundle is not None
    findings.bundle.update(origin_from="input pipeline re-run", non_finite_batch={"element": "x[6, 5] = nan"})
    batch = np.ones((64, 12), np.float32)
    batch[6, 5] = np.nan
    cause = classify(findings, CauseContext(entry_script=str(program), batch=(batch, np.zeros(64))))
    assert cause.kind == "data", cause
    assert "divide_no_nan" not in (cause.change.what if cause.change else ""), cause.change


def test_a_divergence_under_a_warm_up_to_a_peak_too_high_names_the_peak_where_it_is_given(
    tmp_path: Path,
) -> None:
    """keras.io's ``WarmUpCosine(learning_rate_base=BASE_LR, ...)`` with ``BASE_LR = 1e1`` (for 1e-1): the run
    diverged at 9.99 at step 34, and the line to change was the schedule's own ``tf.where`` line, right as written.
    The peak given where the schedule is built is named, with its value."""
    from pyadapter.capture.learning_rate import LearningRate

    program = tmp_path / "train.py"
    program.write_text(
        TRAIN.replace(
            '    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.05, momentum=0.9), loss="mse")\n',
            "    class WarmUp(keras.optimizers.schedules.LearningRateSchedule):\n"
            "        def __init__(self, learning_rate_base, warmup_steps):\n"
            "            self.base, self.warmup_steps = learning_rate_base, warmup_steps\n"
            "        def __call__(self, step):\n"
            "            return self.base * tf.minimum(1.0, tf.cast(step, tf.float32) / self.warmup_steps)\n"
            "    BASE_LR = 1e1\n"
            "    schedule = WarmUp(learning_rate_base=BASE_LR, warmup_steps=30)\n"
            '    model.compile(optimizer=keras.optimizers.SGD(learning_rate=schedule), loss="mse")\n',
        )
    )
    line = OPTIMIZER_LINE + 4
    code = program.read_text().splitlines()[line - 1].strip()
    context = CauseContext(
        history=diverging_history(),
        model_info={"optimizer": "SGD", "optimizers": ["SGD"]},
        entry_script=str(program),
        learning_rate=LearningRate(9.99, "WarmUp", str(program), line, code),
        step=34,
    )
    cause = classify(findings_of(overflow_origin(program)), context)
    assert cause.kind == "divergence", cause.summary
    assert cause.change is not None and cause.change.line == OPTIMIZER_LINE + 6, cause.change
    assert cause.change.what.startswith(
        "the peak learning_rate_base=10 given to WarmUp: it returned 9.99 at step 34; lower the peak (try 0.999)"
    ), cause.change.what


def test_a_log_of_an_error_an_empty_record_makes_0_is_the_loss_s_not_the_record_s(tmp_path: Path) -> None:
    """A super-resolution model trained on PSNR, ``-10 * log(mse) / log(10)``: on an all-black patch it reproduces
    exactly, the mse is 0 and the log -inf. The cause was "data: x[0] = 0 throughout ... correct it or leave it
    out", of a valid patch; the log of a reduction that a record made 0 is the loss's to change."""
    from pyadapter.cause.rows import rows_of

    program = write_program(tmp_path)
    x = np.arange(1.0, 25.0, dtype=np.float32).reshape(8, 3)
    x[0] = 0.0
    per_row = np.ones((8, 1), dtype=np.float32)
    per_row[0] = -np.inf
    rows = rows_of(per_row, (x, x.copy()))
    assert rows is not None and rows.outliers
    origin = Finding(
        file=str(program),
        line=LOG_LINE,
        role="origin",
        op=OpRef("compile_loss/psnr_loss/Log", "Log"),
        health=TensorHealth(dtype="float32", size=8, neg_inf=1, pos=7),
        inputs=[
            InputHealth("compile_loss/psnr_loss/Mean:0", TensorHealth(dtype="float32", size=8, zero=1, pos=7))
        ],
    )
    cause = classify(
        findings_of(origin, bad_rows=rows.to_json()),
        CauseContext(batch=(x, x.copy()), entry_script=str(program)),
    )
    assert cause.kind == "op", cause.summary
    assert cause.change is not None and cause.change.line == LOG_LINE, cause.change
    assert "leave it out" not in cause.change.what, cause.change


@pytest.mark.parametrize("suffix", [".py", ".ipynb"])
def test_a_line_written_with_keras_ops_gets_keras_ops_words_in_a_notebook_too(
    tmp_path: Path, suffix: str
) -> None:
    """keras.io's siamese distance written with ``keras.ops`` only: a script's cause said ``keras.ops.sqrt(x +
    1e-12)``, the same cell in a notebook ``tf.sqrt(x + 1e-12)`` (a notebook line was never read)."""
    code = "d = keras.ops.sqrt(keras.ops.sum(keras.ops.square(a - b), axis=1))"
    path = tmp_path / f"siamese{suffix}"
    cell: int | None = None
    if suffix == ".py":
        path.write_text(f"import keras\n{code}\n", encoding="utf-8")
    else:
        cell = 1
        cells = [("markdown", "# pairs"), ("code", f"import keras\n{code}")]
        notebook = {
            "nbformat": 4,
            "nbformat_minor": 5,
            "metadata": {},
            "cells": [
                {
                    "cell_type": kind,
                    "metadata": {},
                    "source": text,
                    **({"outputs": [], "execution_count": 1} if kind == "code" else {}),
                }
                for kind, text in cells
            ],
        }
        path.write_text(json.dumps(notebook), encoding="utf-8")
    origin = Finding(
        file=str(path),
        line=2,
        cell=cell,
        role="origin",
        op=OpRef("gradient_tape/Sqrt/SqrtGrad", "SqrtGrad"),
        health=TensorHealth(dtype="float32", size=8, nan=1, pos=7),
        inputs=[
            InputHealth("Sqrt:0", TensorHealth(dtype="float32", size=8, zero=1, pos=7)),
            InputHealth("grad:0", TensorHealth(dtype="float32", size=8, pos=8)),
        ],
    )
    cause = classify(findings_of(origin), CauseContext())
    assert cause.change is not None and "keras.ops.sqrt(x + 1e-12)" in cause.change.what, cause.change


def test_a_log_of_targets_plus_one_names_their_scaling_not_the_model(tmp_path: Path) -> None:
    """Kaggle's RMSLE written as a loss, ``log(y_true + 1.0)``, on targets standardized first: a z-score below -1
    made the log NaN, and the change was "keep it positive (an exp or softplus output)", advice for the model's
    output that cannot fix a target. The batch's y plus the line's 1.0 explains it: y is named, and where it is
    made (the standardization) is the change."""
    program = tmp_path / "train.py"
    program.write_text(
        "import numpy as np\nimport tensorflow as tf\nimport keras\n\n\n"
        "def rmsle(y_true, y_pred):\n"
        "    return tf.reduce_mean(tf.square(tf.math.log(y_pred + 1.0) - tf.math.log(y_true + 1.0)))\n\n\n"
        "x = np.random.rand(64, 3).astype('float32')\n"
        "y = np.random.rand(64, 1).astype('float32') * 1e5\n"
        "y = (y - y.mean()) / y.std()\n"
        "model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])\n"
        "model.compile('adam', loss=rmsle)\n"
        "model.fit(x, y, batch_size=8)\n",
        encoding="utf-8",
    )
    y = np.linspace(-1.5, 1.5, 8, dtype=np.float32).reshape(8, 1)
    origin = Finding(
        file=str(program),
        line=7,
        role="origin",
        op=OpRef("compile_loss/rmsle/Log_1", "Log"),
        health=TensorHealth(dtype="float32", size=8, nan=2, pos=6),
        inputs=[
            InputHealth("compile_loss/rmsle/add_1:0", TensorHealth(dtype="float32", size=8, neg=2, pos=6))
        ],
    )
    findings = findings_of(origin)
    findings.extra["origin_code"] = (
        "    return tf.reduce_mean(tf.square(tf.math.log(y_pred + 1.0) - tf.math.log(y_true + 1.0)))"
    )
    x = np.ones((8, 3), np.float32)
    cause = classify(findings, CauseContext(batch=(x, y), entry_script=str(program)))
    assert (
        "read the batch's y plus 1, and y holds 2 negative values for it: y[0, 0] = -1.5" in cause.summary
    ), cause.summary
    assert cause.change is not None and cause.change.line == 12, cause.change
    assert "softplus" not in cause.change.what, cause.change


def test_an_acos_of_a_cosine_rounded_past_1_is_told_so_and_clipped(tmp_path: Path) -> None:
    """An ArcFace head with ``tf.acos(cos_t)`` unclipped: a cosine of normalized vectors rounded to 1.0000001 made
    NaN, and the cause was "an Acos op made NaN/Inf from finite inputs ... which holds 289 negative values: keep its
    inputs in its domain"; negatives are in acos's domain, values past +-1 are not, and the clip is the change."""
    program = write_program(tmp_path)
    origin = Finding(
        file=str(program),
        line=LOG_LINE,
        role="origin",
        op=OpRef("arcface/Acos", "Acos"),
        health=TensorHealth(dtype="float32", size=512, nan=1, pos=511),
        inputs=[InputHealth("arcface/MatMul:0", TensorHealth(dtype="float32", size=512, neg=289, pos=223))],
    )
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert cause.summary.startswith("the Acos op got values past +-1"), cause.summary
    assert (
        cause.change is not None and "tf.acos(tf.clip_by_value(x, -1 + 1e-7, 1 - 1e-7))" in cause.change.what
    )
    from pyadapter.dump.messages import origin_message

    message = origin_message("Acos", origin.health, origin.inputs)
    assert "negative" not in message, message


def test_a_digamma_differentiated_below_0_names_the_concentration_made_from_logits(tmp_path: Path) -> None:
    """An evidential classifier's loss ``digamma(S) - digamma(alpha)`` of ``alpha = logits + 1`` from a linear head:
    S went below 0, digamma stays finite there, and its gradient (Polygamma, the trigamma) made -inf. The cause was
    "a Polygamma op made NaN/Inf from finite inputs ... keep its inputs in its domain", and the op's message named
    no negatives; both say the input went below 0, and the change is where alpha is made positive."""
    program = write_program(tmp_path)
    origin = Finding(
        file=str(program),
        line=LOG_LINE,
        role="backward-origin",
        op=OpRef("gradient_tape/Polygamma", "Polygamma", forward_op="Digamma"),
        health=TensorHealth(dtype="float32", size=64, neg_inf=1, pos=63),
        inputs=[
            InputHealth("gradient_tape/Const_2:0", TensorHealth(dtype="float32", size=1, pos=1)),
            InputHealth("Sum:0", TensorHealth(dtype="float32", size=64, neg=10, pos=54)),
        ],
    )
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert cause.summary.startswith("the step differentiated digamma at 10 values at or below 0"), (
        cause.summary
    )
    assert cause.change is not None and "tf.nn.softplus(logits) + 1" in cause.change.what, cause.change
    from pyadapter.dump.messages import origin_message

    message = origin_message("Polygamma", origin.health, origin.inputs)
    assert "Sum:0 which holds 10 negative values" in message, message
    log1p = origin_message(
        "Log1p",
        TensorHealth(dtype="float32", size=64, neg_inf=1, pos=63),
        [InputHealth("ExpandDims:0", TensorHealth(dtype="float32", size=64, neg=1, zero=2, pos=61))],
    )
    assert "zeros" not in log1p and "1 negative value" in log1p, log1p


def test_a_float16_exp_in_a_hand_softmax_is_told_the_cast_back_and_the_stable_softmax(tmp_path: Path) -> None:
    """An attention-pooling layer's ``e = tf.exp(scores); e / tf.reduce_sum(e)`` under mixed_float16: "compute this
    in float32 (tf.cast its input to "float32")", followed at the line, made the model fail to build (float32 met
    the layer's float16), and the stable softmax, the usual fix, was not named."""
    from pyadapter.findings import Frame

    program = tmp_path / "train.py"
    program.write_text(
        "import tensorflow as tf\nimport keras\n\n\nclass AttentionPooling(keras.layers.Layer):\n"
        "    def call(self, scores):\n        e = tf.exp(scores)\n        return e / tf.reduce_sum(e, axis=1, keepdims=True)\n"
        "\n\nlayer = AttentionPooling()\n",
        encoding="utf-8",
    )
    origin = Finding(
        file=str(program),
        line=7,
        role="origin",
        op=OpRef("functional/attention_pooling/Exp", "Exp"),
        health=TensorHealth(dtype="float16", size=64, pos_inf=3, pos=61),
        inputs=[
            InputHealth(
                "functional/attention_pooling/MatMul:0", TensorHealth(dtype="float16", size=64, pos=64)
            )
        ],
        stack=[Frame(str(program), 7, "call")],
    )
    findings = findings_of(origin)
    findings.extra["origin_code"] = "        e = tf.exp(scores)"
    cause = classify(
        findings, CauseContext(entry_script=str(program), model_info={"dtype_policy": "mixed_float16"})
    )
    assert cause.kind == "precision", cause
    assert cause.change is not None and "and the result back to float16" in cause.change.what, cause.change
    assert "tf.nn.softmax" in cause.change.what, cause.change


def test_a_poisson_loss_on_a_linear_output_names_the_loss_and_the_output_activation(tmp_path: Path) -> None:
    """A notebook's counts model switched to ``loss="poisson"`` on a linear ``Dense(1)``: Keras's loss takes
    log(y_pred + eps) of negative predictions, and the change was "keep it positive ... or clip it
    (tf.math.log(tf.maximum(x, 1e-7)))" at the fit line, of a log inside Keras. The loss and what it needs of the
    output layer are named, where the loss is given."""
    program = tmp_path / "train.py"
    program.write_text(
        "import keras\n\n\ndef build_model(loss='mse'):\n"
        "    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(1)])\n"
        "    model.compile('adam', loss=loss)\n    return model\n\n\n"
        "model = build_model(loss='poisson')\nmodel.fit(x, y)\n",
        encoding="utf-8",
    )
    origin = Finding(
        file=str(program),
        line=11,
        role="origin",
        op=OpRef("compile_loss/poisson/Log", "Log"),
        health=TensorHealth(dtype="float32", size=32, nan=18, pos=14),
        inputs=[
            InputHealth("compile_loss/poisson/add:0", TensorHealth(dtype="float32", size=32, neg=18, pos=14))
        ],
    )
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert cause.summary.startswith(
        "Keras's poisson loss, given to compile, takes the log of the model's output, and 18"
    ), cause.summary
    assert cause.change is not None and cause.change.line == 10, cause.change
    assert 'activation="softplus"' in cause.change.what and "tf.maximum" not in cause.change.what, (
        cause.change
    )


def test_a_poisson_loss_on_a_subclass_s_linear_output_names_its_returned_value(tmp_path: Path) -> None:
    """keras.io's RecommenderNet (a keras.Model subclass) returning a linear dot product plus biases, compiled with
    ``loss="poisson"``: the change was the compile line's "give its last layer activation=softplus", and a
    subclass has no last layer to give one (s39b poisson_mf). The value its call returns is the change."""
    program = tmp_path / "recommender.py"
    program.write_text(
        "import keras\nfrom keras import layers, ops\n\n\nclass RecommenderNet(keras.Model):\n"
        "    def __init__(self, num_users, num_items, size, **kwargs):\n"
        "        super().__init__(**kwargs)\n"
        "        self.user = layers.Embedding(num_users, size)\n        self.item = layers.Embedding(num_items, size)\n\n"
        "    def call(self, inputs):\n"
        "        dot = ops.sum(self.user(inputs['user']) * self.item(inputs['item']), axis=-1)\n"
        "        return dot + 1.0\n\n\n"
        "model = RecommenderNet(100, 200, 8)\nmodel.compile(optimizer='adam', loss='poisson')\nmodel.fit(x, y)\n",
        encoding="utf-8",
    )
    origin = Finding(
        file=str(program),
        line=19,
        role="origin",
        op=OpRef("compile_loss/poisson/Log", "Log"),
        health=TensorHealth(dtype="float32", size=32, nan=1, pos=31),
        inputs=[
            InputHealth("compile_loss/poisson/add:0", TensorHealth(dtype="float32", size=32, neg=1, pos=31))
        ],
    )
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert cause.change is not None and cause.change.line == 13, cause.change
    assert "keras.ops.softplus" in cause.change.what and "last layer" not in cause.change.what, cause.change


def test_a_log_of_depth_maps_with_missing_pixels_in_most_records_is_told_to_mask_them(tmp_path: Path) -> None:
    """keras.io's monocular depth with a scale-invariant log loss, ``log(pred) - log(target)``, on depth maps whose
    missing pixels are 0 in every frame: the change was "leave out the records where y holds zeros", every record.
    A few such values in most records are masked out of the loss."""
    program = write_program(tmp_path)
    y = np.ones((8, 4, 4, 1), np.float32)
    y[:, 0, :2, 0] = 0.0  # two missing pixels in every frame
    origin = Finding(
        file=str(program),
        line=LOG_LINE,
        role="origin",
        op=OpRef("Log_1", "Log"),
        health=TensorHealth(dtype="float32", size=128, neg_inf=16, pos=112),
        inputs=[InputHealth("target:0", None)],
    )
    cause = classify(
        findings_of(origin),
        CauseContext(batch=(np.ones((8, 4, 4, 3), np.float32), y), entry_script=str(program)),
    )
    assert cause.change is not None and "mask them out of the loss" in cause.change.what, cause.change
    assert "8 of the batch's 8 records hold zeros" in cause.change.what, cause.change
    # One record's zero target among finite ones stays the record's.
    y = np.ones((8, 1), np.float32)
    y[3] = 0.0
    origin.health = TensorHealth(dtype="float32", size=8, neg_inf=1, pos=7)
    cause = classify(
        findings_of(origin), CauseContext(batch=(np.ones((8, 3), np.float32), y), entry_script=str(program))
    )
    assert cause.change is not None and "mask them out" not in cause.change.what, cause.change


def test_a_kl_loss_of_vote_shares_with_zeros_read_from_the_batch_is_told_xlogy_not_missing_values(
    tmp_path: Path,
) -> None:
    """A custom KL loss against annotators' vote shares, ``y_true * (log(y_true) - log_q)``: the shares hold exact
    zeros, valid ones. The Log read the batch's y as it came, and the words were "(missing values?): mask them out
    ... and the mean over the valid ones only", which, followed, gives another loss; 0 * log(0) counts as 0."""
    program = write_program(tmp_path)
    shares = np.full((8, 5), 0.25, np.float32)
    shares[:, 4] = 0.0
    origin = Finding(
        file=str(program),
        line=LOG_LINE,
        role="origin",
        op=OpRef("compile_loss/vote_kl/Log", "Log"),
        health=TensorHealth(dtype="float32", size=40, neg_inf=8, pos=32),
        inputs=[InputHealth("args_0_1:0", None)],
    )
    findings = findings_of(origin)
    findings.extra["origin_code"] = "        return ops.sum(y_true * (ops.log(y_true) - log_q), axis=-1)"
    cause = classify(
        findings, CauseContext(batch=(np.ones((8, 3), np.float32), shares), entry_script=str(program))
    )
    assert "0 * -inf = NaN" in cause.summary, cause.summary
    assert cause.change is not None and "mask them out" not in cause.change.what, cause.change
    assert "tf.math.xlogy(y_true, y_true) - y_true * log_q" in cause.change.what, cause.change


@pytest.mark.parametrize(("code", "carried"), [("train_std = train_df.std()", True), ("r = a - b", False)])
def test_a_numpy_subtract_warning_at_a_statistic_says_the_inf_came_before(
    tmp_path: Path, code: str, carried: bool
) -> None:
    """The tensorflow.org time-series tutorial with ``df["Return"] = df["Close"].pct_change()`` on a price of 0
    (inf, silently: pandas warns nothing) and ``train_std = train_df.std()``: NumPy warned "invalid value
    encountered in subtract" inside the std, and the advice was "guard the operation (np.clip, np.where)" at the
    std's line, which changes nothing. A statistic's inf - inf says the inf came before it."""
    from pyadapter.cause.classify import _numpy_fix
    from pyadapter.numpy_warnings import NumpyWarning

    program = tmp_path / "window.py"
    program.write_text(f"import numpy as np\n{code}\n", encoding="utf-8")
    advice = _numpy_fix(NumpyWarning(str(program), 2, "invalid value encountered in subtract"))
    assert ("already held +-inf" in advice) is carried, advice


def test_a_pct_change_of_a_price_of_0_is_the_change_when_numpy_warned_at_a_statistic(tmp_path: Path) -> None:
    """The time-series tutorial's data with ``df["Return"] = df["Close"].pct_change()`` on a price of 0 and
    ``train_std = train_df.std()``: NumPy warned at the std (inf - inf), and the change was the std's line with
    "find the column that holds it". The column pct_change computes is the one; the tutorial's ``Week sin`` column,
    which divides by a constant, is not."""
    from pyadapter.numpy_warnings import NumpyWarning

    program = tmp_path / "window_forecast.py"
    program.write_text(
        "import numpy as np\n"
        "import pandas as pd\n"
        "df = pd.read_csv('prices.csv')\n"
        "df['Week sin'] = np.sin(df['t'] * (2 * np.pi / week))\n"
        "df['Return'] = df['Close'].pct_change()\n"
        "df = df.dropna()\n"
        "train_df = df[:1000]\n"
        "train_std = train_df.std()\n"
        "train_df = (train_df - train_df.mean()) / train_std\n"
        "ds = tf.keras.utils.timeseries_dataset_from_array(train_df.to_numpy(), None, 24)\n"
        "model.fit(ds)\n"
    )
    x = np.ones((8, 4), np.float32)
    x[:, 3] = np.nan
    warned = [NumpyWarning(str(program), 8, "invalid value encountered in subtract")]
    context = CauseContext(batch=(x,), entry_script=str(program), numpy_warnings=warned)
    cause = classify(
        findings_of(batch_origin(program, 11, TensorHealth(dtype="float32", size=32, nan=8))), context
    )
    assert cause.kind == "data", cause
    assert cause.change is not None and cause.change.line == 5, cause.change
    assert cause.change.what.startswith("the computation of column 'Return'"), cause.change
    assert "column 'Return', computed at window_forecast.py:5" in cause.summary, cause.summary


def test_the_line_that_fills_missing_values_with_zero_is_found_in_its_written_forms(tmp_path: Path) -> None:
    """A log or a ratio of a price a ``fillna(0)`` made 0 is changed at the fill: pandas' and NumPy's ways of
    writing it are found, a fill with another value is not, and two fills name neither (which fed the op is not
    known)."""
    import ast

    from pyadapter.cause.change_line import zero_fill_site
    from pyadapter.cause.sources import SourceUnit

    def site_line(code: str) -> str | None:
        text = "import numpy as np\nimport pandas as pd\ndf = pd.read_csv('prices.csv')\n" + code + "\n"
        unit = SourceUnit(str(tmp_path / "prices.py"), None, text, ast.parse(text))
        site = zero_fill_site([unit])
        return None if site is None else unit.line(site.line)

    for code in (
        "df = df.fillna(0)",
        "df['close'] = df['close'].fillna(value=0.0)",
        "df = df.replace(np.nan, 0)",
        "prices = np.nan_to_num(df['close'].values)",
        "prices = np.nan_to_num(df['close'].values, nan=0.0)",
    ):
        assert site_line(code) == code, code
    for code in (
        "df = df.ffill()",
        "df = df.fillna(df.mean())",
        "df = df.fillna(method='ffill')",
        "prices = np.nan_to_num(df['close'].values, nan=1.0)",
        "df = df.fillna(0)\nvolume = df['volume'].fillna(0)",
    ):
        assert site_line(code) is None, code


@pytest.mark.parametrize("sample", ["raw_train.batch(1)", "raw_train.batch(4096)"])
def test_a_division_by_a_spread_computed_before_training_names_the_statistic(
    tmp_path: Path, sample: str
) -> None:
    """A tf.data map's ``(x - feature_mean) / feature_std`` with ``feature_std = tf.math.reduce_std(sample_x)`` of
    a "sample" of one row: every feature's std is 0, the graph holds it as a constant, and the words were "0 / 0
    is NaN ... divide_no_nan, or + 1e-7", which trains on zeroed features or on inputs of 1e7. The statistic (or
    the one row it came from) is the change; a constant feature of many rows is told to floor its spread."""
    program = tmp_path / "train.py"
    program.write_text(
        "import tensorflow as tf\n"
        "raw_train = tf.data.Dataset.from_tensor_slices((x_train, y_train))\n"
        f"sample_x, _ = next(iter({sample}))\n"
        "feature_mean = tf.reduce_mean(sample_x, axis=0)\n"
        "feature_std = tf.math.reduce_std(sample_x, axis=0)\n"
        "def standardize(x, y):\n"
        "    return (x - feature_mean) / feature_std, y\n",
        encoding="utf-8",
    )
    origin = Finding(
        file=str(program),
        line=7,
        role="origin",
        op=OpRef("truediv", "RealDiv", graph="Dataset_map_standardize"),
        health=TensorHealth(dtype="float32", size=12, nan=12),
        inputs=[
            InputHealth("sub:0", TensorHealth(dtype="float32", size=12, zero=12)),
            InputHealth("truediv/y:0", TensorHealth(dtype="float32", size=12, zero=12)),
        ],
    )
    findings = findings_of(origin)
    findings.extra["origin_code"] = "    return (x - feature_mean) / feature_std, y"
    cause = classify(
        findings, CauseContext(entry_script=str(program), argv=[str(program)], cwd=str(tmp_path))
    )
    assert cause.kind == "data", cause
    assert (
        "divided by feature_std, a spread the program computed before training (train.py:5" in cause.summary
    )
    assert (
        "12 of its 12 values are 0" in cause.summary and "may have gone bad as a whole" not in cause.summary
    )
    assert cause.change is not None and "divide_no_nan(a, b)" not in cause.change.what, cause.change
    if sample.endswith("(1)"):
        assert "sample_x holds one row (train.py:3)" in cause.summary, cause.summary
        assert (cause.change.line, cause.change.what.split(":")[0]) == (3, "sample_x"), cause.change
    else:
        assert "holds one row" not in cause.summary, cause.summary
        assert cause.change.line == 5 and "tf.maximum(std, 1e-6)" in cause.change.what, cause.change


def _constraint_division(program: Path, line: int, scope: str) -> Findings:
    """A unit-norm kernel constraint's ``ops.divide(w, norms)`` of a zero kernel, which Keras runs inside the
    optimizer's update (its op is named ``adam/truediv``)."""
    origin = Finding(
        file=str(program),
        line=line,
        role="origin",
        op=OpRef(f"{scope}/truediv", "RealDiv"),
        health=TensorHealth(dtype="float32", size=640, nan=640),
        inputs=[
            InputHealth(f"{scope}/ReadVariableOp:0", TensorHealth(dtype="float32", size=640, zero=640)),
            InputHealth(f"{scope}/Sqrt_12:0", TensorHealth(dtype="float32", size=64, zero=64)),
        ],
    )
    findings = findings_of(origin)
    findings.extra["origin_code"] = "        return ops.divide(w, norms)"
    return findings


@pytest.mark.parametrize("optimizer", ["Adam", "SGD"])
def test_a_unit_norm_constraint_of_a_zero_kernel_is_changed_at_the_initializer(
    tmp_path: Path, optimizer
) -> None:
    """A research config's ``"kernel_init": "zeros"`` and a unit-norm ``kernel_constraint``: the norm of the zero
    kernel is 0. Under Adam the constraint's division (run in the optimizer's scope, ``adam/truediv``) was told
    "its epsilon is 0" (it was Keras's 1e-7, and the advice changed nothing); under both, the division's words
    (divide_no_nan, an epsilon) end the NaN and leave the layer at zero. The zero initializer is the change."""
    program = tmp_path / "wn_mlp.py"
    program.write_text(
        "from keras import ops\n"
        "import keras\n"
        "CONFIG = {\n"
        '    "hidden": 64,\n'
        '    "kernel_init": "zeros",\n'
        "}\n"
        "class ColumnUnitNorm(keras.constraints.Constraint):\n"
        "    def __call__(self, w):\n"
        "        norms = ops.norm(w, axis=0, keepdims=True)\n"
        "        return ops.divide(w, norms)\n"
        "def block():\n"
        '    return keras.layers.Dense(CONFIG["hidden"], kernel_initializer=CONFIG["kernel_init"],\n'
        '                              bias_initializer="zeros", kernel_constraint=ColumnUnitNorm())\n'
        f"model.compile(keras.optimizers.{optimizer}(1e-3), 'mse')\n",
        encoding="utf-8",
    )
    findings = _constraint_division(program, 10, optimizer.lower())
    context = CauseContext(
        entry_script=str(program),
        argv=[str(program)],
        cwd=str(tmp_path),
        model_info={"optimizer": optimizer, "optimizers": [optimizer]},
    )
    cause = classify(findings, context)
    assert "epsilon is 0" not in cause.summary, cause.summary
    assert (
        "the numerator is 0 everywhere (640 of 640): a kernel initialized to zeros (wn_mlp.py:5)"
        in cause.summary
    )
    assert cause.change is not None and (cause.change.line, cause.change.target) == (5, "initializer"), (
        cause.change
    )
    # Zeros divided by a count of 0 (a masked mean of an all-padding batch) are no kernel's norm.
    masked = _constraint_division(program, 10, optimizer.lower())
    assert masked.origin is not None
    masked.origin.inputs[1] = dataclasses.replace(masked.origin.inputs[1], name="masked_mean/Sum_1:0")
    assert "initialized to zeros" not in classify(masked, context).summary
    # Without a zero initializer in the code, the division's own words stay (and still no epsilon story).
    program.write_text(program.read_text().replace('"zeros",\n}', '"glorot_uniform",\n}'), encoding="utf-8")
    cause = classify(findings, context)
    assert "epsilon is 0" not in cause.summary and "initialized to zeros" not in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == 10, cause.change


GAN_SCRIPT = """\
from keras.optimizers import Adam, SGD
class GAN:
    def __init__(self):
        d_optimizer = SGD(learning_rate=5.0, momentum=0.9)
        g_optimizer = Adam(0.0002, 0.5)
        self.discriminator.compile(loss="binary_crossentropy", optimizer=d_optimizer)
        self.discriminator.trainable = False
        self.combined.compile(loss="binary_crossentropy", optimizer=g_optimizer)
    def train(self, steps):
        for step in range(steps):
            d_loss = self.discriminator.train_on_batch(x, y)
            g_loss = self.combined.train_on_batch(noise, valid)
"""


def test_a_gan_whose_discriminator_diverged_under_the_combined_model_names_its_optimizer(
    tmp_path: Path,
) -> None:
    """An older GAN script: the discriminator and the combined model (generator + frozen discriminator) on their own
    train_on_batch, the discriminator's SGD at 5.0. The combined model's loss jumped x3e10 in a step while its own
    weights stood still, and an op of it overflowed: the cause was "a MatMul op overflowed on finite inputs with no
    rise over the steps before", beside that history, and "keep its values in range". The guard's window saw the
    frozen discriminator change between steps: its optimizer is the change."""
    from pyadapter.capture import window
    from pyadapter.capture.learning_rate import LearningRate

    program = tmp_path / "gan.py"
    program.write_text(GAN_SCRIPT, encoding="utf-8")
    paths = ["discriminator/dense/kernel", "discriminator/dense/bias", "discriminator/dense_1/kernel"]
    manifest = window.error_entries(
        window.WindowError(f"{window.FROZEN_CHANGED} (...)", frozen_changed=paths)
    )
    names = window.frozen_changed(manifest)
    assert names == paths
    # A bundle is data: the key in any other shape says nothing.
    assert window.frozen_changed({window.FROZEN_CHANGED_KEY: "discriminator/dense/kernel"}) == []
    assert window.frozen_changed({window.FROZEN_CHANGED_KEY: [{"__class__": "x"}]}) == []
    history = [
        {"step": 0, "loss": 174.4, "grad_norm": 77.2, "weight_norm": 9.0595, "update_ratio": None},
        {"step": 1, "loss": 5.15e12, "grad_norm": 8.2e11, "weight_norm": 9.0594, "update_ratio": 0.00145},
        {"step": 2, "loss": None, "loss_nonfinite": "nan", "weight_norm": 9.0594, "update_ratio": None},
    ]
    context = CauseContext(
        history=history,
        entry_script=str(program),
        model_info={"optimizer": "Adam", "optimizers": ["Adam"]},
        step=2,
        frozen_changed=names,
        learning_rate=LearningRate(0.0002),
    )
    cause = classify(findings_of(overflow_origin(program), step=2), context)
    assert cause.kind == "divergence", cause
    assert cause.summary.startswith("the loss jumped x2.95e+10 (174 at step 0 to 5.15e+12 at step 1)"), cause
    assert "no rise" not in cause.summary and "discriminator/dense/kernel" in cause.summary
    assert cause.change is not None and cause.change.line == 4, cause.change
    # Without the window's word on the frozen part, the jump is not put on another model.
    other = classify(
        findings_of(overflow_origin(program), step=2), dataclasses.replace(context, frozen_changed=[])
    )
    assert "frozen part" not in other.summary, other.summary


def test_an_inf_made_and_masked_in_a_rerun_that_stayed_finite_is_not_the_cause(tmp_path: Path) -> None:
    """A notebook edited its model's module (``%%writefile models.py`` with autoreload) after fit had traced its
    train function: training's step ran the old code and went NaN; the re-run at the scene ran the new code and
    stayed finite, but its dump held a pow's gradient of +inf at 0 that a 0 multiplied away. That was printed as the
    origin with "the step differentiated a power x ** p ... keep its base above 0" beside "stayed finite"."""
    program = write_program(tmp_path)
    origin = Finding(
        file=str(program),
        line=EXP_LINE,
        role="origin",
        op=OpRef("gradient_tape/gem/Pow_1/Pow", "Pow"),
        health=TensorHealth(dtype="float32", size=1024, pos_inf=551, pos=473),
        inputs=[InputHealth("gem/Maximum:0", TensorHealth(dtype="float32", size=1024, zero=551, pos=473))],
    )
    verdict = {
        "mode": "graph",
        "reproduced": False,
        "loss": 1.5244,
        "loss_finite": True,
        "gradients_finite": True,
        "weights_finite": True,
        "error": None,
        "dumped": True,
    }
    findings = findings_of(origin, reproduced={"graph": False}, verdicts={"graph": verdict})
    cause = classify(findings, CauseContext(history=diverging_history()[:5], entry_script=str(program)))
    assert cause.kind == "unknown" and cause.change is None, cause
    assert cause.summary.startswith("the step's re-run stayed finite (loss 1.5244,"), cause.summary
    assert "made NaN/Inf that nothing downstream kept" in cause.summary
    # A re-run that reproduced the failure keeps its origin's cause.
    findings = findings_of(
        origin, reproduced={"graph": True}, verdicts={"graph": {**verdict, "reproduced": True}}
    )
    assert classify(findings, CauseContext(history=diverging_history()[:5])).kind != "unknown"


def test_a_minus_inf_from_a_log_of_a_ratio_takes_the_log_warning_of_its_line(tmp_path: Path) -> None:
    """``np.log(prices[1:] / prices[:-1])`` with a close price of 0 warns twice on its line, "divide by zero
    encountered in divide" first: the batch's -inf was taken for the division's, and "add an epsilon to the
    divisor", followed, left it (the log of the 0 the division made is the -inf)."""
    from pyadapter.capture.records import BadElement
    from pyadapter.cause.classify import _numpy_warning_for
    from pyadapter.cause.sources import user_sources
    from pyadapter.numpy_warnings import NumpyWarning

    program = tmp_path / "forecast.py"
    program.write_text("import numpy as np\nreturns = np.log(prices[1:] / prices[:-1])\n", encoding="utf-8")
    warned = [
        NumpyWarning(str(program), 2, "divide by zero encountered in divide"),
        NumpyWarning(str(program), 2, "divide by zero encountered in log"),
    ]
    units = user_sources(findings_of(None), str(program))
    minus = _numpy_warning_for(warned, BadElement("x", 22, (22, 29, 1), -math.inf, 32), units)
    assert minus is not None and minus.message.endswith("in log"), minus
    plus = _numpy_warning_for(warned, BadElement("x", 23, (23, 29, 1), math.inf, 32), units)
    assert plus is not None and plus.message.endswith("in divide"), plus


def test_a_log_of_zero_that_a_standardization_later_turned_nan_is_the_line_to_change(tmp_path: Path) -> None:
    """A Kaggle house-price script logs skewed columns that hold 0 (``df[col] = np.log(df[col])``: -inf, NumPy
    warned), then standardizes (``X.std(axis=0)``: inf - inf, NaN in every row). The batch's NaN matched the later
    "invalid value in subtract", and the change was the std line, "the inf came before this line, from a step that
    warns nothing", beside the warning NumPy had given at the log."""
    from pyadapter.capture.records import BadElement
    from pyadapter.cause.classify import _numpy_warning_for
    from pyadapter.cause.sources import user_sources
    from pyadapter.numpy_warnings import NumpyWarning

    program = tmp_path / "house.py"
    program.write_text(
        "import numpy as np\nfor col in skewed:\n    df[col] = np.log(df[col])\nX = df.values\n"
        "mean, std = X.mean(axis=0), X.std(axis=0)\nX = (X - mean) / std\n",
        encoding="utf-8",
    )
    warned = [
        NumpyWarning(str(program), 3, "divide by zero encountered in log"),
        NumpyWarning(str(program), 5, "invalid value encountered in subtract"),
    ]
    units = user_sources(findings_of(None), str(program))
    nan = BadElement("x", 0, (0, 2), math.nan, 32)
    chosen = _numpy_warning_for(warned, nan, units)
    assert chosen is not None and (chosen.line, chosen.message) == (3, "divide by zero encountered in log"), (
        chosen
    )
    # With no warning before it, the statistic's own warning stays (and its words say the inf came silently).
    alone = _numpy_warning_for(warned[1:], nan, units)
    assert alone is not None and alone.line == 5, alone


def test_an_exp_that_overflowed_before_any_update_on_raw_pixels_is_the_inputs_not_a_divergence(
    tmp_path: Path,
) -> None:
    """A softmax written by hand (``ops.exp(logits)``) on MNIST pixels of 0-255, overflowing in the fit's first
    step: it was "divergence ... with no step before it to diverge over", a learning-rate search of 13 replays and
    the compile line. No update had run; the exp's stable form and the pixels' scale are the change, at the exp."""
    program = write_program(tmp_path)
    pixels = np.random.default_rng(0).integers(0, 256, size=(128, 64)).astype("float32")
    labels = np.eye(10, dtype="float32")[np.arange(128) % 10]
    context = CauseContext(
        history=[{"step": 0, "loss": None, "loss_nonfinite": "nan", "weight_norm": 3.2}],
        entry_script=str(program),
        model_info={"optimizer": "Adam", "optimizers": ["Adam"]},
        step=0,
        batch={"args": (pixels, labels), "kwargs": {}},
    )
    origin = overflow_origin(program, line=EXP_LINE, op="Exp")
    cause = classify(findings_of(origin, step=0), context)
    assert cause.kind == "data", cause
    assert "in the first step, before any update, on unscaled features (" in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == EXP_LINE, cause.change
    assert "subtracts the largest value first" in cause.change.what and "pixels / 255" in cause.change.what
    # A later step of the same fit ran after updates: not "before any update".
    later = dataclasses.replace(context, step=2, history=[dict(context.history[0], step=s) for s in range(3)])
    assert "before any update" not in classify(findings_of(origin, step=2), later).summary


def test_an_exp_link_on_raw_features_is_told_to_scale_the_features_and_keep_the_counts(
    tmp_path: Path,
) -> None:
    """A negative-binomial regression's rate head, ``Dense(1, activation="exponential")``, on raw features
    (followers in the ten thousands) overflowed in the first step. It was told a softmax's stable form and to
    "scale the features and targets": there is no softmax, and a count likelihood needs its targets as counts."""
    program = write_program(tmp_path)
    rng = np.random.default_rng(0)
    features = np.column_stack([rng.uniform(200, 36000, 64), rng.uniform(0, 1, 64)]).astype("float32")
    counts = rng.integers(16, 2400, size=(64, 1)).astype("float32")
    context = CauseContext(
        history=[{"step": 0, "loss": None, "loss_nonfinite": "nan", "weight_norm": 3.2}],
        entry_script=str(program),
        model_info={"optimizer": "Adam", "optimizers": ["Adam"]},
        step=0,
        batch=(features, counts),
    )
    origin = overflow_origin(program, line=EXP_LINE, op="Exp")
    findings = findings_of(origin, step=0)
    findings.extra["origin_code"] = 'mu = layers.Dense(1, activation="exponential", name="mu")(h)'
    cause = classify(findings, context)
    assert cause.kind == "data", cause
    assert "on unscaled features (x[:, 0] from" in cause.summary and "targets" not in cause.summary, (
        cause.summary
    )
    assert cause.change is not None and cause.change.what.startswith("the features into the exp link"), (
        cause.change
    )
    assert "softmax" not in cause.change.what and "the targets stay as they are" in cause.change.what


LANGEVIN_EBM = """import tensorflow as tf
import keras

LANGEVIN_STEPS = 40
STEP_SIZE = 10.0  # IGEBM settings
NOISE = 0.005


class Energy(keras.Model):
    def call(self, x):
        return tf.squeeze(self.net(x), -1) + 0.5 * tf.reduce_sum(x ** 2, -1)


def langevin(x):
    for _ in range(LANGEVIN_STEPS):
        with tf.GradientTape() as t:
            t.watch(x)
            e = tf.reduce_sum(energy(x))
        g = t.gradient(e, x)
        x = x - STEP_SIZE * g + NOISE * tf.random.normal(tf.shape(x))
    return tf.stop_gradient(x)


@tf.function
def train_step(x_pos):
    x_neg = langevin(tf.random.uniform(tf.shape(x_pos), -1.5, 1.5))
"""


def test_an_overflow_on_samples_a_langevin_loop_made_names_its_step_size(tmp_path: Path) -> None:
    """An energy-based model's short-run Langevin sampler at STEP_SIZE = 10 (s43a p4, an image recipe's setting):
    each step multiplied the samples by about -9 and the energy's square overflowed at step 0. The cause was "a Sum
    op overflowed ... unscaled inputs or initial weights ... keep its values in range" at the energy's line; the
    sampler's step size is the change. An overflow in the energy with no such loop on the stack keeps its words."""
    program = tmp_path / "ebm.py"
    program.write_text(LANGEVIN_EBM)
    origin = Finding(
        file=str(program),
        line=11,
        role="backward-origin",
        op=OpRef(
            "gradient_tape/energy_39/mul_1/Sum", "Sum", graph="train_step", forward_op="energy_39/mul_1"
        ),
        health=TensorHealth(dtype="float32", size=1, pos_inf=1),
        inputs=[
            InputHealth(
                "gradient_tape/energy_39/mul_1/Mul:0", TensorHealth(dtype="float32", size=200, pos=200)
            )
        ],
        stack=[
            Frame(str(program), 26, "train_step"),
            Frame(str(program), 15, "langevin"),
            Frame(str(program), 18, "langevin"),
            Frame(str(program), 11, "call"),
        ],
    )
    context = CauseContext(
        history=[{"step": 0, "loss": None, "loss_nonfinite": "nan", "weight_norm": 3.2}],
        entry_script=str(program),
        step=0,
    )
    cause = classify(findings_of(origin, step=0), context)
    assert cause.kind == "divergence", cause
    assert "langevin() moves x along its gradient" in cause.summary and "STEP_SIZE = 10" in cause.summary, (
        cause.summary
    )
    assert cause.change is not None and cause.change.line == 5, cause.change  # STEP_SIZE = 10.0
    assert cause.change.what.startswith("the step size of the gradient steps on x: make it smaller"), (
        cause.change
    )
    # The energy alone on the stack (no sampler loop): not the step size.
    alone = dataclasses.replace(
        origin, stack=[Frame(str(program), 26, "train_step"), Frame(str(program), 11, "call")]
    )
    cause = classify(findings_of(alone, step=0), context)
    assert "step size" not in cause.summary, cause.summary


POISSON_NOTEBOOK_CELL = """import keras
model = keras.Sequential([
    keras.Input(shape=(4,)),
    keras.layers.Dense(32, activation="relu"),
    keras.layers.Dense(1, activation="exponential"),
])
model.compile(optimizer="adam", loss="poisson")
history = model.fit(X_train, y_train, epochs=20, batch_size=64)
"""

REALNVP_COUPLING = """import tensorflow as tf
import keras

class Coupling(keras.layers.Layer):
    def call(self, x, mask):
        xa = x * mask
        s, t = self.s_net(xa), self.t_net(xa)
        return xa + (1 - mask) * (x * tf.exp(s) + t)

model.fit(data, epochs=12)
"""


def test_an_exp_of_raw_features_names_the_exponential_layer_or_a_flow_s_scale_not_a_count_likelihood(
    tmp_path: Path,
) -> None:
    """Two exps that overflowed at step 0 on raw features. A Poisson regression's ``Dense(1,
    activation="exponential")`` (s43d nb_poisson): the origin is the fit line (Keras's exp), and the change was
    "a softmax or a log-sum-exp computed stably ... from_logits=True" there; the layer is the place, with a count
    likelihood's words. A RealNVP coupling's ``x * tf.exp(s) + t`` on data in millimetres (s43a p1) was told "the
    targets stay as they are (a count likelihood needs the counts) ... log(mean target)": a flow has no targets."""
    rng = np.random.default_rng(0)
    features = np.column_stack([rng.uniform(800, 12000, 64), rng.uniform(0, 1, 64)]).astype("float32")
    counts = rng.integers(1, 40, size=(64, 1)).astype("float32")

    def cause_for(text: str, line: int, code: str, batch: tuple) -> Cause:
        program = tmp_path / "train.py"
        program.write_text(text)
        context = CauseContext(
            history=[{"step": 0, "loss": None, "loss_nonfinite": "nan", "weight_norm": 3.2}],
            entry_script=str(program),
            model_info={"optimizer": "Adam", "optimizers": ["Adam"]},
            step=0,
            batch=batch,
        )
        findings = findings_of(overflow_origin(program, line=line, op="Exp"), step=0)
        findings.extra["origin_code"] = code
        return classify(findings, context)

    cause = cause_for(
        POISSON_NOTEBOOK_CELL,
        8,
        "history = model.fit(X_train, y_train, epochs=20, batch_size=64)",
        (features, counts),
    )
    assert cause.kind == "data", cause
    assert cause.change is not None and cause.change.line == 5, cause.change  # the exponential Dense
    assert "softmax" not in cause.change.what and "the targets stay as they are" in cause.change.what, (
        cause.change
    )
    cause = cause_for(
        REALNVP_COUPLING, 8, "        return xa + (1 - mask) * (x * tf.exp(s) + t)", (features,)
    )
    assert cause.change is not None and cause.change.line == 8, cause.change
    assert cause.change.what.startswith("the features into the exp: scale them"), cause.change.what
    assert "tf.tanh(s)" in cause.change.what and "targets" not in cause.change.what, cause.change.what


def test_a_float16_cast_in_the_input_pipeline_is_told_to_scale_the_features(tmp_path: Path) -> None:
    """A custom loop under mixed_float16 whose tf.data map casts raw incomes (9e4) to float16: the change was
    "compute this in float32 (it runs in float16)", and followed, the model's first float16 layer overflowed the
    same values. The features' scale, before the cast, is the change."""
    program = write_program(tmp_path)
    origin = Finding(
        file=str(program),
        line=EXP_LINE,
        role="origin",
        op=OpRef("Cast", "Cast", graph="Dataset_map_preprocess"),
        health=TensorHealth(dtype="float16", size=4, pos_inf=1, pos=3),
        inputs=[InputHealth("args_0:0", TensorHealth(dtype="float32", size=4, pos=4))],
    )
    context = CauseContext(history=[], entry_script=str(program), dtype_policy="mixed_float16", step=0)
    cause = classify(findings_of(origin, step=0), context)
    assert cause.kind == "data", cause
    assert cause.summary.startswith("the input pipeline cast values past float16's range (max 65504)"), cause
    assert cause.change is not None and cause.change.what.startswith(
        "scale the features before they become"
    ), cause
    assert "compute this in float32" not in cause.change.what


def test_a_negative_base_to_a_fractional_power_is_told_to_keep_it_positive_not_at_0(tmp_path: Path) -> None:
    """GeM pooling ``tf.pow(tf.reduce_mean(tf.pow(x, p)), 1.0 / p)`` of a negative mean: the Pow made NaN, and the
    advice "tf.maximum(x, 0.0)", followed, met the next NaN: the slope of x ** (1/3) at 0 is infinite."""
    program = write_program(tmp_path)
    origin = Finding(
        file=str(program),
        line=EXP_LINE,
        role="origin",
        op=OpRef("gem/Pow_1", "Pow"),
        health=TensorHealth(dtype="float32", size=1024, nan=531, pos=493),
        inputs=[
            InputHealth("gem/Mean:0", TensorHealth(dtype="float32", size=1024, neg=531, pos=493)),
            InputHealth("gem/truediv:0", TensorHealth(dtype="float32", size=1, pos=1)),
        ],
    )
    cause = classify(findings_of(origin), CauseContext(history=[], entry_script=str(program)))
    assert "a negative base to a fractional power is NaN" in cause.summary, cause.summary
    assert cause.change is not None and "tf.maximum(x, 1e-6)" in cause.change.what, cause.change
    assert "tf.maximum(x, 0.0)" not in cause.change.what


def test_adjust_gamma_of_an_image_mapped_to_minus_one_one_is_told_the_augmentations_order(
    tmp_path: Path,
) -> None:
    """A tf.data map that scales images to [-1, 1] and then calls ``tf.image.adjust_gamma``: its Pow made NaN of
    the 1940 negative pixels, the dump recorded only the image input, and the cause read "a Pow op made NaN/Inf
    from finite inputs ... keep its inputs in its domain", hiding the negatives it had just printed."""
    program = write_program(tmp_path)
    origin = Finding(
        file=str(program),
        line=EXP_LINE,
        role="origin",
        op=OpRef("adjust_gamma/pow", "Pow"),
        health=TensorHealth(dtype="float32", size=6912, nan=1940, pos=4972),
        inputs=[
            InputHealth("args_0:0", TensorHealth(dtype="float32", size=6912, neg=1940, pos=4972)),
            InputHealth("adjust_gamma/control_dependency:0"),
        ],
    )
    cause = classify(findings_of(origin), CauseContext(history=[], entry_script=str(program)))
    assert cause.summary.startswith("the Pow op raised 1940 negative values to a power"), cause.summary
    assert "adjust_gamma computes x ** gamma and expects an image in [0, 1]" in cause.summary, cause.summary
    assert cause.change is not None and cause.change.what.startswith("the order of the augmentation"), (
        cause.change
    )
    # A lone input with no negatives tells nothing of the exponent: the generic words stay.
    origin.inputs[0] = InputHealth("args_0:0", TensorHealth(dtype="float32", size=6912, pos=6912))
    cause = classify(findings_of(origin), CauseContext(history=[], entry_script=str(program)))
    assert "negative" not in cause.summary, cause.summary


def test_a_float16_overflow_in_a_loss_written_by_hand_is_told_the_output_layer_in_float32(
    tmp_path: Path,
) -> None:
    """A keras.Model subclass's train_step under mixed_float16, its output layer without dtype="float32", and
    ``loss = tf.reduce_mean(tf.square(y - y_pred))`` on targets near 600: the words were a layer's ("tf.cast its
    input to float32, and the result back to float16 before it meets the layer's other float16 values"), and a
    loss of 3.7e5 cast back overflows again."""
    program = tmp_path / "capacity.py"
    program.write_text(
        "import tensorflow as tf\nimport keras\n"
        "class CapacityModel(keras.Model):\n"
        "    def train_step(self, data):\n"
        "        x, y = data\n"
        "        with tf.GradientTape() as tape:\n"
        "            y_pred = self(x, training=True)\n"
        "            loss = tf.reduce_mean(tf.square(y - y_pred))\n",
        encoding="utf-8",
    )
    origin = overflow_origin(program, dtype="float16", line=8, op="Square")
    context = CauseContext(history=[], entry_script=str(program), dtype_policy="mixed_float16", step=0)
    cause = classify(findings_of(origin, step=0), context)
    assert cause.kind == "precision", cause
    assert "computing the loss" in cause.summary, cause.summary
    assert cause.change is not None and 'output layer dtype="float32"' in cause.change.what, cause.change
    assert "the result back to float16" not in cause.change.what
    # A per-example term the loss is made of, on the line before it (s43a p3, a score-matching train_step's
    # ``per_example = tf.reduce_sum(tf.square(score - target), axis=-1) * w``): casting that back to float16,
    # followed, overflowed again at ``* w``.
    program.write_text(
        "import tensorflow as tf\nimport keras\n"
        "class ScoreNet(keras.Model):\n"
        "    def train_step(self, x):\n"
        "        with tf.GradientTape() as tape:\n"
        "            score = self(x, training=True)\n"
        "            w = tf.cast(sigma ** 2, score.dtype)\n"
        "            per_example = tf.reduce_sum(tf.square(score - target), axis=-1) * w\n"
        "            loss = 0.5 * tf.reduce_mean(tf.cast(per_example, tf.float32))\n",
        encoding="utf-8",
    )
    cause = classify(findings_of(origin, step=0), context)
    assert "computing the loss" in cause.summary, cause.summary
    assert cause.change is not None and "the result back to float16" not in cause.change.what, cause.change
    # A layer's own term that no loss is assigned from keeps the layer's words.
    program.write_text(
        "import tensorflow as tf\nimport keras\n"
        "class Block(keras.layers.Layer):\n"
        "    def call(self, x):\n"
        "        if x is None:\n"
        "            return x\n"
        "        h = self.dense(x)\n"
        "        energy = tf.reduce_sum(tf.square(h), axis=-1)\n"
        "        return energy * self.scale\n",
        encoding="utf-8",
    )
    cause = classify(findings_of(origin, step=0), context)
    assert "computing the loss" not in cause.summary, cause.summary


def test_a_warm_up_that_multiplies_the_rate_it_is_given_is_changed_at_its_return(tmp_path: Path) -> None:
    """``def warmup(epoch, lr): return lr * 2.0 if epoch < 3 else lr`` passed to LearningRateScheduler in a fit cell
    pasted twice: each fit restarts epoch at 0, so the rate compounds. The change was the first of the two
    ``LearningRateScheduler(warmup)`` calls (the pasted cell that did not run); the schedule's own return is it.
    A schedule of the epoch alone keeps the call's line."""
    from pyadapter.cause import change_line
    from pyadapter.cause.sources import user_sources

    program = tmp_path / "train.py"
    program.write_text(
        "import keras\n"
        "def warmup(epoch, lr):\n"
        "    if epoch < 3:\n"
        "        return lr * 2.0\n"
        "    return lr\n"
        "model.fit(x, y, callbacks=[keras.callbacks.LearningRateScheduler(warmup)])\n"
        "model.fit(x, y, callbacks=[keras.callbacks.LearningRateScheduler(warmup)])\n",
        encoding="utf-8",
    )
    site = change_line.computed_rate_setter(user_sources(findings_of(None), str(program)))
    assert site is not None and (site.line, site.name) == (4, "LearningRateScheduler(warmup)"), site
    program.write_text(
        "import keras\n"
        "def step_decay(epoch):\n"
        "    return 0.1 * 0.5 ** epoch\n"
        "model.fit(x, y, callbacks=[keras.callbacks.LearningRateScheduler(step_decay)])\n",
        encoding="utf-8",
    )
    site = change_line.computed_rate_setter(user_sources(findings_of(None), str(program)))
    assert site is not None and site.line == 4, site


def test_the_log_of_a_negative_determinant_is_told_slogdet(tmp_path: Path) -> None:
    """A Glow-style flow's ``tf.math.log(tf.linalg.det(self.W))`` with W initialised by QR (det -1): "keep it
    positive (an exp or softplus output), or clip it" cannot apply to a determinant, and the clamp, followed, gives a
    constant log-likelihood with no gradient. log|det| is what the change of variables needs."""
    program = write_program(tmp_path)
    origin = log_origin(program)
    origin.inputs = [
        InputHealth(
            "tabular_flow_1/invertible_dense_1/MatrixDeterminant:0",
            TensorHealth(dtype="float32", size=1, neg=1),
        )
    ]
    cause = classify(findings_of(origin), CauseContext(history=[], entry_script=str(program)))
    assert "a determinant is negative whenever the matrix flips orientation" in cause.summary, cause.summary
    assert cause.change is not None and cause.change.what.startswith(
        "the log of the determinant: tf.linalg.slogdet"
    ), cause.change


def test_a_keras_normalization_layer_whose_epsilon_a_variable_sets_to_0_is_named_at_its_construction(
    tmp_path: Path,
) -> None:
    """keras.io's time-series transformer with ``LayerNormalization(epsilon=ln_eps)`` in a block built in a loop,
    ``ln_eps`` an argparse option defaulting to 0.0: zero-padded steps have variance 0. The origin was the fit line
    (the loop's layers were not located) and the change "the Rsqrt's input: keep it in the domain
    (tf.math.rsqrt(tf.maximum(x, 1e-12)))", an rsqrt the user never wrote. A Keras norm layer's rsqrt of zeros
    means its epsilon is 0: the layer's construction is the line."""
    program = tmp_path / "train.py"
    program.write_text(
        "import argparse\nimport keras\nfrom keras import layers\n\n\n"
        "def encoder(x, ln_eps):\n"
        "    x = layers.LayerNormalization(epsilon=ln_eps)(x)\n"
        "    return layers.Dense(8)(x)\n\n\n"
        "def main(args):\n"
        "    inputs = keras.Input((16, 4))\n"
        "    x = inputs\n"
        "    for _ in range(args.blocks):\n"
        "        x = encoder(x, args.ln_eps)\n"
        "    model = keras.Model(inputs, x)\n"
        "    model.compile('adam', 'mse')\n"
        "    model.fit(X, y)\n",
        encoding="utf-8",
    )
    origin = Finding(
        file=str(program),
        line=18,
        role="origin",
        op=OpRef("functional_1/layer_normalization_1/Rsqrt", "Rsqrt"),
        health=TensorHealth(dtype="float32", size=1024, pos_inf=345, pos=679),
        inputs=[
            InputHealth(
                "functional_1/layer_normalization_1/add:0",
                TensorHealth(dtype="float32", size=1024, zero=345, pos=679),
            )
        ],
    )
    cause = classify(findings_of(origin), CauseContext(history=[], entry_script=str(program)))
    assert (
        "the LayerNormalization layer takes rsqrt(variance + epsilon), so its epsilon (epsilon=ln_eps here) is 0"
        in (cause.summary)
    ), cause.summary
    assert cause.change is not None and cause.change.line == 7, cause.change
    assert cause.change.what.startswith("the epsilon of LayerNormalization: a positive one"), cause.change
    # A hand-written rsqrt of a variance keeps its own words.
    origin.op = OpRef("encoder/Rsqrt", "Rsqrt")
    cause = classify(findings_of(origin), CauseContext(history=[], entry_script=str(program)))
    assert "LayerNormalization layer takes" not in cause.summary, cause.summary


def test_an_exp_overflow_in_log_one_plus_exp_is_told_softplus(tmp_path: Path) -> None:
    """A soft-margin triplet loss, ``tf.math.log(1.0 + tf.exp(d_pos - d_neg))``: the words were "bound its input
    (tf.clip_by_value, or a tanh)", which runs but changes the loss and stops the hardest triplets' gradient."""
    program = write_program(tmp_path)
    findings = findings_of(overflow_origin(program, line=EXP_LINE, op="Exp"))
    findings.extra["origin_code"] = "    return tf.reduce_mean(tf.math.log(1.0 + tf.exp(d_pos - d_neg)))"
    cause = classify(findings, CauseContext(history=[], entry_script=str(program)))
    assert cause.change is not None and cause.change.what.startswith(
        "log(1 + exp(x)) written out: tf.nn.softplus"
    )


def test_an_exp_of_similarities_over_a_tiny_temperature_names_the_temperature(tmp_path: Path) -> None:
    """A hand-written NT-Xent with ``TEMPERATURE = 0.005`` on L2-normalized embeddings: the exp overflowed, and the
    cause said "values this large from the start point at unscaled inputs or initial weights". The division by the
    temperature, on the line above the exp, is what makes its input large."""
    program = tmp_path / "ntxent.py"
    program.write_text(
        "import tensorflow as tf\nTEMPERATURE = 0.005\n\n\ndef nt_xent_loss(_, z):\n"
        "    z = tf.math.l2_normalize(z, axis=1)\n"
        "    similarity = tf.matmul(z, z, transpose_b=True) / TEMPERATURE\n"
        "    sim_exp = tf.exp(similarity)\n"
        "    return sim_exp\n",
        encoding="utf-8",
    )
    findings = findings_of(overflow_origin(program, line=8, op="Exp"))
    findings.extra["origin_code"] = "    sim_exp = tf.exp(similarity)"
    cause = classify(findings, CauseContext(history=[], entry_script=str(program)))
    assert "its input is divided by TEMPERATURE" in cause.summary, cause.summary
    assert "unscaled inputs" not in cause.summary, cause.summary
    assert cause.change is not None and "check the value of TEMPERATURE" in cause.change.what, cause.change
    assert "SimCLR's temperature" in cause.change.what, cause.change
    # A classifier's tempered softmax (``exp(logits / T)``, s39c har): logits, not similarities of embeddings.
    text = program.read_text()
    program.write_text(
        text.replace(
            "similarity = tf.matmul(z, z, transpose_b=True) / TEMPERATURE", "scaled = z / TEMPERATURE"
        ).replace("sim_exp = tf.exp(similarity)", "exps = tf.exp(scaled)"),
        encoding="utf-8",
    )
    findings.extra["origin_code"] = "    exps = tf.exp(scaled)"
    cause = classify(findings, CauseContext(history=[], entry_script=str(program)))
    assert "logits over a temperature that small" in cause.summary, cause.summary
    assert cause.change is not None and "SimCLR" not in cause.change.what, cause.change
    program.write_text(text, encoding="utf-8")
    findings.extra["origin_code"] = "    sim_exp = tf.exp(similarity)"
    # An exp of an argument made without a temperature keeps the general words.
    program.write_text(program.read_text().replace(" / TEMPERATURE", ""), encoding="utf-8")
    cause = classify(findings, CauseContext(history=[], entry_script=str(program)))
    assert "temperature" not in cause.summary.lower(), cause.summary


def test_an_adam_epsilon_set_to_0_in_a_config_cell_pasted_again_is_changed_in_that_cell(
    tmp_path: Path,
) -> None:
    """A notebook's config cell, ``CONFIG = dict(lr=1e-3, adam_eps=1e-7)``, pasted again below with ``adam_eps=0.0``
    and the compile cell after it: Adam's update divided by 0. The change was the first compile cell's Adam line,
    which ran with 1e-7; edited, the failing cell still failed. The line that sets the epsilon to 0 is the change."""
    notebook = tmp_path / "wine.ipynb"
    sources = [
        "CONFIG = dict(lr=1e-3, adam_eps=1e-7, epochs=3)",
        "opt = keras.optimizers.Adam(learning_rate=CONFIG['lr'], epsilon=CONFIG['adam_eps'])\nmodel.compile(opt, 'mse')",
        "CONFIG = dict(lr=1e-3, adam_eps=0.0, epochs=3)",
        "opt = keras.optimizers.Adam(learning_rate=CONFIG['lr'], epsilon=CONFIG['adam_eps'])\nmodel.compile(opt, 'mse')\n"
        "model.fit(x, y)",
    ]
    cells = [
        {"cell_type": "code", "source": text, "metadata": {}, "outputs": [], "execution_count": n}
        for n, text in enumerate(sources, 1)
    ]
    notebook.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    origin = Finding(
        file=str(notebook),
        line=3,
        cell=3,  # counted from 0, as Finding.cell is
        role="origin",
        op=OpRef("adam/truediv_1", "RealDiv"),
        health=TensorHealth(dtype="float32", size=1280, nan=46, pos=1234),
        inputs=[
            InputHealth("adam/mul_1:0", TensorHealth(dtype="float32", size=1280, zero=46, pos=1234)),
            InputHealth("adam/add_1:0", TensorHealth(dtype="float32", size=1280, zero=46, pos=1234)),
        ],
    )
    context = CauseContext(history=[], entry_script=str(notebook), model_info={"optimizer": "Adam"})
    cause = classify(findings_of(origin), context)
    assert "its epsilon is 0" in cause.summary, cause.summary
    # The third cell (index 2), not the second, whose Adam line ran with 1e-7.
    assert cause.change is not None and (cause.change.cell, cause.change.line) == (2, 1), cause.change


def test_zero_times_a_masks_infinity_through_a_log_softmax_names_the_mask_value(tmp_path: Path) -> None:
    """A listwise ranking loss, ``-sum(y_true * log_softmax(logits))``, where the model masks padded candidates with
    ``float("-inf")`` and y_true is 0 there: the labels' health was not recorded, and the words were "a Mul op made
    NaN from inputs that held infinities but no NaN ... keep its inputs in its domain". Only 0 * -inf is NaN of an
    infinity: the labels were 0 there, and the mask value is the change."""
    program = write_program(tmp_path)
    origin = Finding(
        file=str(program),
        line=LOG_LINE,
        role="origin",
        op=OpRef("compile_loss/listwise_softmax_loss/mul", "Mul"),
        health=TensorHealth(dtype="float32", size=640, nan=213, neg=64, zero=363),
        inputs=[
            InputHealth("args_0_2:0", None),
            InputHealth(
                "compile_loss/listwise_softmax_loss/LogSoftmax:0",
                TensorHealth(dtype="float32", size=640, neg_inf=213, neg=427),
            ),
        ],
    )
    mask = Finding(
        file=str(program),
        line=EXP_LINE,
        role="propagated",
        op=OpRef("functional_1/masked_scores_1/Const", "Const"),
        health=TensorHealth(dtype="float32", size=1, neg_inf=1),
    )
    findings = findings_of(origin)
    findings.findings.append(mask)
    cause = classify(findings, CauseContext(entry_script=str(program)))
    assert "by args_0_2:0 (0 there: only 0 times an infinity is NaN): 0 * -inf is NaN" in cause.summary, cause
    assert "the infinity is the mask value written at train.py:" in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == EXP_LINE, cause.change
    assert cause.change.what.startswith("the mask value: a large finite one (-1e9)"), cause.change


def test_a_log_sum_exp_of_a_row_masked_whole_is_no_underflow(tmp_path: Path) -> None:
    """Multiple-instance learning with log-sum-exp pooling, ``ops.logsumexp(where(mask, r * s, -inf))``, and a bag
    with no tiles: every value of its row is -inf, and the logsumexp's own Log got the 0. The words were "the exp
    underflowed ... compute it in log space, tf.reduce_logsumexp": the line takes it already."""
    program = write_program(tmp_path)
    origin = log_origin(program)
    origin.op = OpRef("functional_1/lse_pooling_1/ReduceLogSumExp/Log", "Log")
    origin.inputs = [
        InputHealth(
            "functional_1/lse_pooling_1/ReduceLogSumExp/Sum:0",
            TensorHealth(dtype="float32", size=16, zero=1, pos=15),
        )
    ]
    findings = findings_of(origin)
    findings.extra["zeros_from_exp"] = {"line": LOG_LINE, "zeros": 1, "log_of": "Sum"}
    cause = classify(findings, CauseContext(entry_script=str(program)))
    assert cause.summary.startswith("the log-sum-exp got 1 row whose every value is -inf"), cause.summary
    assert "underflowed" not in cause.summary, cause.summary
    assert cause.change is not None and "reduce_logsumexp" not in cause.change.what, cause.change
    assert cause.change.what.startswith("the rows with nothing unmasked"), cause.change


def test_labels_missing_on_purpose_that_a_loss_masks_by_a_product_name_the_product(tmp_path: Path) -> None:
    """A multi-task assay model whose missing labels are NaN on purpose, and a masked MSE that builds its mask with
    ``tf.math.is_nan`` and multiplies it in: NaN * 0 is NaN. The cause was "the data held NaN/Inf ... filter or
    repair non-finite records where the data is read": dropping them loses most records, and filling them trains
    on fake labels. The product in the loss is the change."""
    program = tmp_path / "train.py"
    program.write_text(
        "import tensorflow as tf\n\n\ndef masked_mse(y_true, y_pred):\n"
        "    mask = tf.cast(tf.math.logical_not(tf.math.is_nan(y_true)), y_pred.dtype)\n"
        "    sq = tf.square(y_true - y_pred) * mask\n"
        "    return tf.reduce_sum(sq) / tf.maximum(tf.reduce_sum(mask), 1.0)\n\n\n"
        "data = np.loadtxt('assays.csv', delimiter=',')\n"
        "model.compile('adam', loss=masked_mse)\n"
        "model.fit(data[:, :8], data[:, 8:])\n",
        encoding="utf-8",
    )
    y = np.ones((16, 3), np.float32)
    y[0, 2] = np.nan
    origin = batch_origin(program, 12, TensorHealth(dtype="float32", size=48, nan=1, pos=47))
    findings = findings_of(origin, non_finite_batch={"total": 1, "examples": ["y[0, 2] = nan"]})
    cause = classify(
        findings, CauseContext(entry_script=str(program), batch=(np.ones((16, 8), np.float32), y))
    )
    assert cause.summary.startswith(
        "the targets hold NaN on purpose (y[0, 2] = nan), and masked_mse masks"
    ), cause
    assert cause.change is not None and cause.change.line == 6, cause.change
    assert "tf.where(tf.math.is_nan(y_true), tf.zeros_like(y_true), y_true)" in cause.change.what, (
        cause.change
    )
    # A loss that does not look for NaN labels: the data's NaN is the data's.
    program.write_text(program.read_text().replace("tf.math.is_nan(y_true)", "y_true > 0"), encoding="utf-8")
    cause = classify(
        findings, CauseContext(entry_script=str(program), batch=(np.ones((16, 8), np.float32), y))
    )
    assert cause.kind == "data", cause


def test_the_models_cast_of_raw_features_to_float16_before_a_batch_norm_names_the_first_layer(
    tmp_path: Path,
) -> None:
    """Loan data with incomes up to 2.5e5 into ``Sequential([Input, BatchNormalization(), ...])`` under
    mixed_float16: the model casts its input to float16 before the batch norm computes anything, and the cast
    overflowed. The normalizing layer hid the raw features from the scale check, and the change was "compute this
    in float32" at the fit line. BatchNormalization(dtype="float32") trains."""
    program = tmp_path / "train.py"
    program.write_text(
        "import keras\nfrom keras import layers\n\n"
        'keras.mixed_precision.set_global_policy("mixed_float16")\n'
        "model = keras.Sequential([\n"
        "    keras.Input(shape=(3,)),\n"
        "    layers.BatchNormalization(),\n"
        '    layers.Dense(1, activation="sigmoid", dtype="float32"),\n'
        "])\n"
        'model.compile("adam", "binary_crossentropy")\n'
        "model.fit(X, y)\n",
        encoding="utf-8",
    )
    rng = np.random.default_rng(0)
    x = np.stack([rng.uniform(1e4, 2.5e5, 64), rng.uniform(0, 40, 64), rng.uniform(0, 1, 64)], 1).astype(
        "float32"
    )
    origin = overflow_origin(program, dtype="float16", line=11, op="Cast")
    origin.op = OpRef("sequential_1/Cast", "Cast")
    context = CauseContext(
        dtype_policy="mixed_float16",
        entry_script=str(program),
        model_info={"loss_scale_optimizer": True},
        batch=(x, np.zeros((64, 1), np.float32)),
        layer_classes=["InputLayer", "BatchNormalization", "Dense"],
    )
    cause = classify(findings_of(origin), context)
    assert cause.kind == "precision", cause
    assert "it is the model's cast of its input to float16, before its first layer (BatchNormalization)" in (
        cause.summary
    ), cause.summary
    assert cause.change is not None and cause.change.line == 7, cause.change
    assert 'BatchNormalization(dtype="float32")' in cause.change.what, cause.change
    # A functional model whose first layer is a Dense and a BatchNormalization after it (s43c p5), fit on a column
    # the program computes (a date as epoch seconds): BatchNormalization(dtype="float32"), followed, overflowed at
    # the same cast. The column, where it is made, is the change.
    program.write_text(
        "import keras\nfrom keras import layers\nimport pandas as pd\n"
        'df = pd.read_csv("train.csv")\n'
        "df['timestamp'] = pd.to_datetime(df['date']).astype('int64') // 10**9\n"
        "FEATURES = ['price', 'store', 'timestamp']\n"
        "X = df[FEATURES].values.astype('float32')\n"
        "inputs = keras.Input((3,))\n"
        "x = layers.Dense(256, activation='relu')(inputs)\n"
        "x = layers.BatchNormalization()(x)\n"
        "out = layers.Dense(1, dtype='float32')(x)\n"
        "model = keras.Model(inputs, out)\n"
        "model.fit(X, y)\n",
        encoding="utf-8",
    )
    x = np.stack([rng.uniform(0, 1, 64), rng.uniform(0, 1, 64), rng.uniform(1.36e9, 1.48e9, 64)], 1).astype(
        "float32"
    )
    cause = classify(
        findings_of(origin), dataclasses.replace(context, batch=(x, np.zeros((64, 1), np.float32)))
    )
    assert "column 'timestamp' (column 2 of X) passes 65504 there" in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == 5, cause.change
    assert cause.change.what.startswith("scale column 'timestamp' (column 2 of X) where it is made"), (
        cause.change
    )


def test_a_column_nan_in_every_row_after_a_pandas_standardization_names_the_standardization(
    tmp_path: Path,
) -> None:
    """The IBM HR attrition data standardized column by column with pandas, ``(df[col] - df[col].mean()) /
    df[col].std()``, over EmployeeCount (1 for everyone): 0 / 0 with no warning, NaN in every row. The change was
    the line that makes the array fit reads, "the computation of X ... a division by a zero std", a line with no
    division; the standardization is the line."""
    program = tmp_path / "hr.py"
    program.write_text(
        "import pandas as pd\n"
        "df = pd.read_csv('hr.csv')\n"
        "NUMERIC = ['Age', 'MonthlyIncome', 'EmployeeCount']\n"
        "for col in NUMERIC:\n"
        "    df[col] = (df[col] - df[col].mean()) / df[col].std()\n"
        "X = df[NUMERIC].values.astype('float32') * 1.0\n"
        "model.fit(X, df.pop('Attrition').values)\n",
        encoding="utf-8",
    )
    x = np.ones((32, 3), np.float32)
    x[:, 2] = np.nan
    origin = batch_origin(program, 7, TensorHealth(dtype="float32", size=96, nan=32, pos=64))
    findings = findings_of(origin, non_finite_batch={"total": 32, "examples": ["x[0, 2] = nan"]})
    cause = classify(findings, CauseContext(entry_script=str(program), batch=(x, np.zeros(32))))
    assert cause.kind == "data", cause
    assert "column 2 of x is NaN/Inf in every row" in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == 5, cause.change
    assert cause.change.what.startswith("the standardization: a column that never changes"), cause.change


EULER = """import tensorflow as tf
import keras

DT = 0.1 / 50


def laplacian(u):
    return (tf.roll(u, 1, axis=-1) - 2.0 * u + tf.roll(u, -1, axis=-1)) / (1 / 32) ** 2


class HeatModel(keras.Model):
    def call(self, u0):
        u = u0
        for _ in range(50):
            u = u + DT * (tf.exp(self.log_d) * laplacian(u))
        return u
"""


def test_an_overflow_in_a_loop_of_explicit_euler_steps_names_the_time_step(tmp_path: Path) -> None:
    """A heat equation's diffusivity learned through 50 explicit Euler steps unrolled in the model's call, with D *
    dt / dx**2 past 1/2: the top mode grows 7x an iteration and overflows at step 0. The cause said "values this
    large from the start point at unscaled inputs or initial weights" (a smaller initial D, followed, trained a wrong
    answer); a notebook's Lotka-Volterra got a learning-rate search. The time step is the change."""
    program = tmp_path / "heat.py"
    program.write_text(EULER, encoding="utf-8")
    origin = overflow_origin(program, line=8, op="RealDiv")
    origin.stack = [Frame(str(program), 15, "call"), Frame(str(program), 8, "laplacian")]
    cause = classify(findings_of(origin, step=0), CauseContext(history=[], entry_script=str(program), step=0))
    assert "inside a loop of explicit Euler updates (heat.py:15)" in cause.summary, cause.summary
    assert "unscaled inputs" not in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == 15, cause.change
    assert cause.change.what.startswith("the integration step: take more, smaller steps"), cause.change
    # A loop whose update has no time step (a power iteration's v = v + w @ v) is not an integrator.
    program.write_text(EULER.replace("u = u + DT * (", "u = u + 0.5 * ("), encoding="utf-8")
    cause = classify(findings_of(origin, step=0), CauseContext(history=[], entry_script=str(program), step=0))
    assert "Euler" not in cause.summary, cause.summary


RELOADED_LOSS = """import keras
from keras import ops


class WeightedBinaryCrossentropy(keras.losses.Loss):
    def __init__(self, pos_weight=1.0, from_logits=False, name="weighted_bce", **kwargs):
        super().__init__(name=name, **kwargs)
        self.pos_weight, self.from_logits = pos_weight, from_logits

    def call(self, y_true, y_pred):
        log_p = ops.log_sigmoid(y_pred) if self.from_logits else ops.log(y_pred)
        return -ops.mean(y_true * log_p)

    def get_config(self):
        config = super().get_config()
        config.update({"pos_weight": self.pos_weight})
        return config


model = keras.saving.load_model("churn.keras")
model.fit(x, y)
"""


def test_a_log_of_logits_from_a_loss_reloaded_without_from_logits_names_its_get_config(
    tmp_path: Path,
) -> None:
    """A model trained with ``WeightedBinaryCrossentropy(from_logits=True)``, saved, reloaded with
    ``keras.saving.load_model`` and trained on: the loss's get_config leaves out from_logits, so the reloaded loss
    takes ``ops.log`` of the Dense layer's logits. The words were "keep it positive (an exp or softplus output), or
    clip it"; followed, the NaN moved to log(1 - y_pred)."""
    program = tmp_path / "finetune.py"
    program.write_text(RELOADED_LOSS, encoding="utf-8")
    origin = log_origin(program)
    origin.line = 11
    origin.op = OpRef("compile_loss/weighted_bce/Log", "Log")
    origin.inputs = [
        InputHealth("churn_1/dense_2_1/Add:0", TensorHealth(dtype="float32", size=128, neg=82, pos=46))
    ]
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert "its input is a Dense layer's output with no activation: logits" in cause.summary, cause.summary
    assert "WeightedBinaryCrossentropy.get_config leaves out from_logits" in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == 14, cause.change
    # Without a reload, the loss is built as the code says: the logits' form is the change, at the log.
    program.write_text(
        RELOADED_LOSS.replace('keras.saving.load_model("churn.keras")', "build()"), encoding="utf-8"
    )
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert cause.change is not None and cause.change.what.startswith("the log of logits"), cause.change


def test_numpys_log_of_a_zero_price_is_told_to_fill_the_missing_quote_not_log1p(tmp_path: Path) -> None:
    """A stock notebook stores closed days as price 0 and takes ``np.log(close)``: the words were "guard it
    (np.log1p, an epsilon, np.clip) or filter the records", and log1p or an epsilon of a price makes returns of
    -1000%. A price of 0 is a missing quote; a log of 0 elsewhere (an area of 0 square feet) keeps the words."""
    from pyadapter.cause.classify import _numpy_fix
    from pyadapter.numpy_warnings import NumpyWarning

    program = tmp_path / "stocks.py"
    program.write_text("import numpy as np\nlog_close = np.log(df['close'].values)\narea = np.log(sqft)\n")
    price = _numpy_fix(NumpyWarning(str(program), 2, "divide by zero encountered in log"))
    assert price.startswith("a log of a price of 0 (-inf): a price of 0 is a missing quote"), price
    assert ".ffill()" in price, price
    area = _numpy_fix(NumpyWarning(str(program), 3, "divide by zero encountered in log"))
    assert area.startswith("a log of 0 (-inf); guard it (np.log1p"), area


@pytest.mark.parametrize(
    ("line", "signed"),
    [
        ("    return tf.sign(x) * tf.math.log1p(mu * x) / tf.math.log1p(mu)\n", True),
        ("    return tf.math.log1p(y_pred) - tf.math.log1p(y_true)\n", False),
    ],
)
def test_a_mu_law_without_the_magnitude_is_told_abs_not_a_clamp(
    tmp_path: Path, line: str, signed: bool
) -> None:
    """A hand-written mu-law ``sign(x) * log1p(mu * x) / log1p(mu)`` without ``tf.abs``: the advice was a ReLU on
    the layer or ``log1p(tf.maximum(x, 0.0))``, which, followed, trained with every negative sample encoded as 0
    (s39e p4). The sign on the line says the input is signed: the log is of |x|. A log1p of an output keeps the
    output words."""
    program = tmp_path / "mulaw.py"
    program.write_text("import tensorflow as tf\n\n\ndef mu_law_encode(x, mu=255.0):\n" + line)
    origin = Finding(
        file=str(program),
        line=5,
        role="origin",
        op=OpRef("Log1p", "Log1p"),
        health=TensorHealth(dtype="float32", size=64, nan=30, pos=34),
        inputs=[InputHealth("mul:0", TensorHealth(dtype="float32", size=64, neg=32, pos=32))],
    )
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert cause.change is not None and cause.change.line == 5, cause
    assert ("tf.math.log1p(mu * tf.abs(x))" in cause.change.what) == signed, cause.change.what
    assert ("tf.math.log1p(tf.maximum(x, 0.0))" in cause.change.what) == (not signed), cause.change.what


def test_an_infinite_python_number_numpy_warned_making_is_changed_where_it_is_made(tmp_path: Path) -> None:
    """A class weight ``(y == 0).sum() / (y == 1).sum()`` of a slice with no positives is inf, given to a loss
    factory (``weighted_bce(POS_WEIGHT)``) and traced into the step as a constant: ``inf * y_true`` is NaN where
    y_true is 0. The words were "a large finite number instead (1e9 for a mask value)" at the loss (s39c fraud); the
    line NumPy warned at makes the number. Without that warning the product's words stay."""
    from pyadapter.numpy_warnings import NumpyWarning

    program = tmp_path / "train.py"
    program.write_text(
        "import numpy as np\nfrom losses import weighted_bce\n"
        "POS_WEIGHT = (y_recent == 0).sum() / (y_recent == 1).sum()\n"
        "model.compile(optimizer='adam', loss=weighted_bce(POS_WEIGHT))\nmodel.fit(x, y_recent)\n"
    )
    origin = Finding(
        file=str(program),
        line=4,
        role="origin",
        op=OpRef("compile_loss/loss/mul", "Mul"),
        health=TensorHealth(dtype="float32", size=256, nan=250, pos_inf=6),
        inputs=[
            InputHealth("compile_loss/loss/mul/x:0", TensorHealth(dtype="float32", size=1, pos_inf=1)),
            InputHealth(
                "compile_loss/loss/ExpandDims:0", TensorHealth(dtype="float32", size=256, zero=250, pos=6)
            ),
        ],
    )
    warning = NumpyWarning(str(program), 3, "divide by zero encountered in scalar divide")
    context = CauseContext(entry_script=str(program), numpy_warnings=[warning])
    cause = classify(findings_of(origin), context)
    assert cause.change is not None and cause.change.line == 3, cause
    assert cause.change.what.startswith("the value of POS_WEIGHT: it is inf here"), cause.change.what
    assert 'NumPy warned "divide by zero encountered in scalar divide" at train.py:3' in cause.summary, (
        cause.summary
    )
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert cause.change is not None and cause.change.what.startswith("the +inf factor"), cause.change


def test_a_float16_division_past_its_range_is_precision_though_its_numerator_holds_zeros(
    tmp_path: Path,
) -> None:
    """``1 + alpha * log(1 + count / eps)`` under mixed_float16 (counts cast to the prediction's float16): count /
    1e-4 passes 65504 for any count of 7 or more. Half the counts are 0 (no interaction), and the zeros of the
    numerator kept it from precision: "a RealDiv op made NaN/Inf from finite inputs ... keep its inputs in its
    domain" (s39b wmf). A divisor with zeros stays a division by zero."""
    program = write_program(tmp_path)
    origin = Finding(
        file=str(program),
        line=3,
        role="origin",
        op=OpRef("implicit_mf_1/truediv", "RealDiv"),
        health=TensorHealth(dtype="float16", size=1024, pos_inf=377, zero=507, pos=140),
        inputs=[
            InputHealth("Cast:0", TensorHealth(dtype="float16", size=1024, zero=507, pos=517)),
            InputHealth("implicit_mf_1/truediv/y:0", TensorHealth(dtype="float16", size=1, pos=1)),
        ],
    )
    cause = classify(
        findings_of(origin), CauseContext(entry_script=str(program), dtype_policy="mixed_float16")
    )
    assert cause.kind == "precision", cause
    assert "RealDiv" in cause.summary and "overflowed float16 (max 65504)" in cause.summary, cause.summary
    origin.inputs = list(reversed(origin.inputs))  # now the divisor holds the zeros
    cause = classify(
        findings_of(origin), CauseContext(entry_script=str(program), dtype_policy="mixed_float16")
    )
    assert cause.kind != "precision" or "overflowed" not in cause.summary, cause


def test_a_degree_normalization_of_isolated_nodes_is_the_op_and_not_a_clamp(tmp_path: Path) -> None:
    """A GCN's ``rsqrt(degree)`` / ``tf.pow(deg, -0.5)`` of nodes with no edges. The rsqrt's words were "keep it in
    the domain (tf.math.rsqrt(tf.maximum(x, 1e-12)))", which, followed, weighed those nodes 1e6 and trained to
    accuracy 0.15 (s39d p3); the Pow's empty adjacency rows were "the record x[1][310] (0 throughout): correct it
    or leave it out" (s39d p2), a node that is valid data."""
    from pyadapter.cause.rows import rows_of

    program = tmp_path / "gcn.py"
    program.write_text(
        "import tensorflow as tf\n\n\ndef normalize(adjacency, degree):\n"
        "    deg_inv_sqrt = tf.math.rsqrt(degree)\n    return tf.pow(degree, -0.5)\n"
    )
    rsqrt = Finding(
        file=str(program),
        line=5,
        role="origin",
        op=OpRef("gnn/UnsortedSegmentSum/Rsqrt", "Rsqrt"),
        health=TensorHealth(dtype="float32", size=400, pos_inf=61, pos=339),
        inputs=[
            InputHealth("gnn/UnsortedSegmentSum:0", TensorHealth(dtype="float32", size=400, zero=61, pos=339))
        ],
    )
    cause = classify(findings_of(rsqrt), CauseContext(entry_script=str(program)))
    assert (
        cause.change is not None and "tf.where(degree > 0, tf.math.rsqrt(degree), 0.0)" in cause.change.what
    ), cause.change
    adjacency = np.ones((8, 8), np.float32)
    adjacency[3] = 0.0
    features = np.ones((8, 4), np.float32)
    per_row = np.ones((8,), np.float32)
    per_row[3] = np.inf
    batch = ((features, adjacency), np.zeros(8, np.float32))
    rows = rows_of(per_row, batch)
    assert rows is not None and rows.outliers
    power = Finding(
        file=str(program),
        line=6,
        role="origin",
        op=OpRef("gcn/Pow", "Pow"),
        health=TensorHealth(dtype="float32", size=8, pos_inf=1, pos=7),
        inputs=[
            InputHealth("gcn/Sum:0", TensorHealth(dtype="float32", size=8, zero=1, pos=7)),
            InputHealth("gcn/Pow/y:0", TensorHealth(dtype="float32", size=1, neg=1)),
        ],
    )
    context = CauseContext(batch=batch, entry_script=str(program))
    cause = classify(findings_of(power, bad_rows=rows.to_json()), context)
    assert cause.kind == "op", cause
    assert cause.change is not None and "self-loops" in cause.change.what, cause.change


SPECTRAL_NORM = """import tensorflow as tf
from keras import layers


class SNDense(layers.Layer):
    def build(self, input_shape):
        self.kernel = self.add_weight(shape=(input_shape[-1], self.units), initializer="glorot_uniform")
        self.u = self.add_weight(shape=(1, self.units), initializer="zeros", trainable=False, name="sn_u")

    def call(self, inputs):
        v = tf.matmul(self.u, self.kernel, transpose_b=True)
        v = v / tf.norm(v)
        return tf.matmul(inputs, self.kernel)
"""


def test_a_normalized_zero_vector_made_of_a_zero_initialized_variable_names_its_initializer(
    tmp_path: Path,
) -> None:
    """A spectral normalization's power iteration from ``self.u`` initialized to zeros: ``v / tf.norm(v)`` is 0 / 0.
    "+ 1e-7 on the divisor", followed twice, moved the NaN to the next normalization and then to ``w / sigma``
    (s39a sngan). The variable's initializer is the change; a random start is never 0."""
    program = tmp_path / "sn.py"
    program.write_text(SPECTRAL_NORM)
    origin = Finding(
        file=str(program),
        line=12,
        role="origin",
        op=OpRef("sn_dense/truediv", "RealDiv"),
        health=TensorHealth(dtype="float32", size=64, nan=64),
        inputs=[
            InputHealth("sn_dense/MatMul:0", TensorHealth(dtype="float32", size=64, zero=64)),
            InputHealth("sn_dense/norm/Squeeze:0", TensorHealth(dtype="float32", size=1, zero=1)),
        ],
    )
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert cause.change is not None and cause.change.line == 8, cause
    assert cause.change.what.startswith("the initial value of self.u"), cause.change.what
    assert "a vector that is all zeros (64 of 64 values)" in cause.summary, cause.summary
    program.write_text(
        SPECTRAL_NORM.replace('initializer="zeros", trainable', 'initializer="random_normal", trainable')
    )
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert cause.change is not None and cause.change.line == 12, cause


@pytest.mark.parametrize(
    ("line", "op", "inputs", "words", "not_words"),
    [
        (  # LambdaRank's discount with argsort's 0-based ranks (s39b lambdarank)
            "    discounts = 1.0 / (tf.math.log(1.0 + ranks) / tf.math.log(2.0))\n",
            "RealDiv",
            [("truediv/x:0", dict(size=1, pos=1)), ("truediv:0", dict(size=50, zero=5, pos=45))],
            "use log2(2.0 + rank) for 0-based ranks",
            "tf.math.divide_no_nan(a, b) where 0 is the right answer",
        ),
        (  # a log-mel of silent clips in a tf.data map (s39e p2)
            "    log_mel = tf.math.log(mel)\n",
            "Log",
            [("Tensordot:0", dict(size=64, zero=8, pos=56))],
            "tf.math.log(x + 1e-6)",
            "a price, a count",
        ),
    ],
)
def test_a_discount_of_rank_0_and_a_log_of_silence_get_their_domains_words(
    tmp_path: Path, line: str, op: str, inputs: list, words: str, not_words: str
) -> None:
    """Words of the domain the line is in: a DCG discount counts positions from 1 (divide_no_nan, followed, gave
    the top document a discount of 0), and a spectrogram's log needs an offset (log1p, offered first, compresses
    nothing for a power spectrum's small values)."""
    program = tmp_path / "features.py"
    program.write_text("import tensorflow as tf\n\n\ndef features(mel, ranks):\n" + line)
    origin = Finding(
        file=str(program),
        line=5,
        role="origin",
        op=OpRef(op, op, graph="Dataset_map_features" if op == "Log" else "train_step"),
        health=TensorHealth(dtype="float32", size=64, neg_inf=8, pos=56),
        inputs=[InputHealth(name, TensorHealth(dtype="float32", **health)) for name, health in inputs],
    )
    findings = findings_of(origin)
    findings.extra["origin_code"] = line.strip()  # the scan's record of the line, as a dump gives it
    cause = classify(findings, CauseContext(entry_script=str(program)))
    assert cause.change is not None and words in cause.change.what, cause.change
    assert not_words not in cause.change.what, cause.change


@pytest.mark.parametrize(
    ("lines", "words"),
    [
        (  # a GAT's softmax over each node's neighbours by hand (s39d p7)
            ["e = tf.exp(e)", "denom = tf.math.unsorted_segment_sum(e, target, num_nodes)"],
            "tf.math.unsorted_segment_max(e, ids, n)",
        ),
        (  # ListMLE's log(cumsum(exp(s))) (s39b listmle)
            ["cum_exp = tf.math.cumsum(tf.exp(s), axis=-1, reverse=True)", "loss = tf.math.log(cum_exp) - s"],
            "tf.math.cumulative_logsumexp(s)",
        ),
    ],
)
def test_an_exp_normalized_on_the_lines_after_it_is_a_softmax_not_an_exp_link(
    tmp_path: Path, lines: list[str], words: str
) -> None:
    """An exp whose result a later line sums by segment (a GAT's attention) or a cumsum takes (ListMLE) overflowed
    on raw features; the words were a Poisson rate's ("the features into the exp link ... a count likelihood needs
    the counts ... log(mean target)"). They are a softmax's, in the form the code computes."""
    program = tmp_path / "gat.py"
    program.write_text(
        "import tensorflow as tf\n\n\ndef attend(e, s, target, num_nodes):\n    "
        + "\n    ".join(lines)
        + "\n"
    )
    rng = np.random.default_rng(0)
    features = np.column_stack([rng.uniform(200, 36000, 64), rng.uniform(0, 1, 64)]).astype("float32")
    context = CauseContext(
        history=[{"step": 0, "loss": None, "loss_nonfinite": "nan", "weight_norm": 3.2}],
        entry_script=str(program),
        model_info={"optimizer": "Adam", "optimizers": ["Adam"]},
        step=0,
        batch=(features, np.zeros((64, 1), np.float32)),
    )
    origin = overflow_origin(program, line=5, op="Exp")
    findings = findings_of(origin, step=0)
    findings.extra["origin_code"] = lines[0]
    cause = classify(findings, context)
    assert cause.change is not None and words in cause.change.what, cause.change
    assert "exp link" not in cause.change.what and "count likelihood" not in cause.change.what, cause.change


def test_a_divergence_on_raw_targets_at_a_rate_near_the_default_leads_with_the_targets_scale(
    tmp_path: Path,
) -> None:
    """SGD(0.05, momentum 0.9), 5x its default, on MSE of loads of about 500: "try 0.005 ...; and scale the
    targets", whose first part, followed, still blew up to 1e18, while y / 1000 trained at 0.05 (s39f p12). Raw
    targets make every gradient that many times larger: their scale leads; a rate 100x the default still does."""
    program = write_program(tmp_path)
    rng = np.random.default_rng(0)
    batch = (
        rng.normal(size=(32, 3)).astype("float32"),
        rng.uniform(297, 715, size=(32, 1)).astype("float32"),
    )
    context = CauseContext(
        history=diverging_history(),
        model_info={"optimizer": "SGD", "optimizers": ["SGD"]},
        entry_script=str(program),
        batch=batch,
    )
    cause = classify(findings_of(overflow_origin(program)), context)
    assert cause.kind == "divergence", cause
    assert cause.change is not None and cause.change.what.startswith("scale the targets first"), cause.change
    assert "if it still diverges, the learning rate 0.05" in cause.change.what, cause.change
    program.write_text(TRAIN.replace("learning_rate=0.05", "learning_rate=1.0"))
    cause = classify(findings_of(overflow_origin(program)), context)
    assert cause.change is not None and cause.change.what.startswith("learning rate 1 (SGD"), cause.change


_REVERSAL = """
import tensorflow as tf

@tf.custom_gradient
def reverse_gradient(x, hp_lambda):
    def grad(dy):
        return {returned}, None
    return tf.identity(x), grad

class GradientReversal(tf.keras.layers.Layer):
    def __init__(self, hp_lambda=1.0):
        super().__init__()
        self.hp_lambda = hp_lambda

model = Dann(hp_lambda={strength})
"""


@pytest.mark.parametrize(
    ("returned", "strength", "named"),
    [
        ("-hp_lambda * dy", "10.0", True),  # DANN's reversal at 10: named
        ("dy * -hp_lambda", "5", True),
        ("-hp_lambda * dy", "1.0", False),  # the paper's final strength: no cause
        ("tf.clip_by_norm(dy, hp_lambda)", "10.0", False),  # a gradient clip, no reversal
    ],
)
def test_a_gradient_reversal_is_named_by_the_strength_the_code_gives_it(tmp_path, returned, strength, named):
    import ast

    from pyadapter.cause import change_line
    from pyadapter.cause.sources import SourceUnit

    code = _REVERSAL.format(returned=returned, strength=strength)
    unit = SourceUnit(file=str(tmp_path / "train.py"), cell=None, text=code, tree=ast.parse(code))
    found = change_line.gradient_reversal([unit])
    if not named:
        assert found is None, found
        return
    assert found is not None
    assert (found.name, found.value, found.strength.line) == (
        "hp_lambda",
        float(strength),
        code.count("\n", 0, code.index("model =")) + 1,
    )
    assert found.reversal.line == 7


def test_a_normalization_adapted_on_missing_values_no_line_drops_is_changed_where_the_data_is_read(
    tmp_path: Path,
) -> None:
    """The Auto MPG tutorial with its dropna forgotten (s41c p1b): the advice was the adapt line, and dropping the
    NaN rows in adapt's argument alone, followed, met them in fit's batch at step 5. With no line that drops or fills
    missing values, the change is where the data is read; a look at them (``dataset.isna().sum()``) drops nothing."""
    program = tmp_path / "train.py"
    program.write_text(
        ADAPTED.replace("table = table[~np.isnan(table).any(axis=1)]\n", "print(np.isnan(table).sum())\n")
    )
    cause = _normalization_constant_cause(
        program, "sequential_1", TensorHealth(dtype="float32", rank=2, size=7, nan=1, pos=6)
    )
    assert cause.kind == "data", cause.summary
    assert "no line of the program drops or fills them, so fit's batches hold them too" in cause.summary
    assert cause.change is not None and cause.change.line == 4, cause.change
    assert cause.change.what.startswith("the data read here: drop or fill its missing values"), cause.change


def test_a_class_weight_made_of_a_division_numpy_warned_at_is_changed_at_that_division(
    tmp_path: Path,
) -> None:
    """The imbalanced-data tutorial's ``weight_for_1 = (1 / pos) * (total / 2.0)`` with a stale pos of 0 (s41c p3):
    the change named the fit's ``class_weight=`` argument, a line that makes nothing. It is the line NumPy warned at
    that makes a weight the dict reads."""
    from pyadapter.numpy_warnings import NumpyWarning

    program = tmp_path / "cw.py"
    program.write_text(
        "import numpy as np\n"
        "neg, pos = np.bincount(labels)\n"
        "total = neg + pos\n"
        "weight_for_0 = (1 / neg) * (total / 2.0)\n"
        "weight_for_1 = (1 / pos) * (total / 2.0)\n"
        "class_weight = {0: weight_for_0, 1: weight_for_1}\n"
        "model.fit(x, y, class_weight=class_weight)\n"
    )
    findings, (x, y, weights) = _class_weighted_step(program, 7)
    warned = [NumpyWarning(str(program), 5, "divide by zero encountered in scalar divide")]
    context = CauseContext(batch=(x, y, weights), entry_script=str(program), numpy_warnings=warned)
    cause = classify(findings, context)
    assert cause.summary.startswith("the class weights given to fit weigh class 1 inf"), cause.summary
    assert 'NumPy warned "divide by zero encountered in scalar divide" at cw.py:5' in cause.summary, (
        cause.summary
    )
    assert cause.change is not None and cause.change.line == 5, cause.change
    cause = classify(findings, CauseContext(batch=(x, y, weights), entry_script=str(program)))
    assert cause.change is not None and cause.change.line == 6, cause.change  # no warning: the dict's line


def test_a_feature_nan_in_every_window_after_a_std_named_apart_names_the_standardization(
    tmp_path: Path,
) -> None:
    """tensorflow.org's time-series tutorial (s41c p4): ``train_std = train_df.std()`` then ``train_df = (train_df -
    train_mean) / train_std`` over a column constant in the training split, and windows cut from it by a
    WindowGenerator. The batch is (window, time, feature): its NaN feature was not seen as a whole column, and the
    change was "filter or repair non-finite records where the data is read (read_csv)" of a CSV with no NaN."""
    program = tmp_path / "ts.py"
    program.write_text(
        "import pandas as pd\n"
        "df = pd.read_csv('climate.csv')\n"
        "train_df = df[:700]\n"
        "train_mean = train_df.mean()\n"
        "train_std = train_df.std()\n"
        "train_df = (train_df - train_mean) / train_std\n"
        "model.fit(window.train, epochs=2)\n",
        encoding="utf-8",
    )
    x = np.ones((32, 24, 5), np.float32)
    x[..., 4] = np.nan
    origin = batch_origin(
        program, 7, TensorHealth(dtype="float32", size=32 * 24 * 5, nan=32 * 24, pos=32 * 24 * 4)
    )
    findings = findings_of(origin, non_finite_batch={"total": 32 * 24, "examples": ["x[0, 0, 4] = nan"]})
    cause = classify(findings, CauseContext(entry_script=str(program), batch=(x, np.zeros((32, 1, 1)))))
    assert cause.kind == "data", cause
    assert "feature 4 of x is NaN/Inf at every time step of every window" in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == 6, cause.change
    assert cause.change.what.startswith("the standardization: a column that never changes"), cause.change


def test_an_exp_overflow_under_a_variable_read_through_an_exp_names_its_start(tmp_path: Path) -> None:
    """CLIP with its learned scale written ``tf.Variable(1 / 0.07)`` and read as ``tf.exp(logit_scale) * sims``
    (s41b p6): every logit is multiplied by 1.6e6 and the hand softmax's exp overflows. The words were "bound its
    input, or compute the softmax stably", which, followed, trained nothing at that scale; CLIP keeps the log."""
    program = tmp_path / "clip.py"
    program.write_text(
        "import tensorflow as tf\n"
        "logit_scale = tf.Variable(1 / 0.07, dtype=tf.float32)\n"
        "\n"
        "def softmax_xent(logits):\n"
        "    probs = tf.exp(logits) / tf.reduce_sum(tf.exp(logits), axis=1, keepdims=True)\n"
        "    return -tf.reduce_mean(tf.math.log(tf.linalg.diag_part(probs)))\n"
        "\n"
        "logits = tf.exp(logit_scale) * tf.matmul(i, t, transpose_b=True)\n",
        encoding="utf-8",
    )
    findings = findings_of(overflow_origin(program, line=5, op="Exp"))
    findings.extra["origin_code"] = (
        "    probs = tf.exp(logits) / tf.reduce_sum(tf.exp(logits), axis=1, keepdims=True)"
    )
    cause = classify(findings, CauseContext(history=[], entry_script=str(program)))
    assert "the code reads logit_scale through an exp, and it starts at 14.29 (clip.py:2)" in cause.summary, (
        cause
    )
    assert cause.change is not None and cause.change.line == 2, cause.change
    assert "tf.Variable(np.log(1 / 0.07))" in cause.change.what, cause.change
    # Started at its log, it is no cause.
    program.write_text(program.read_text().replace("tf.Variable(1 / 0.07,", "tf.Variable(2.66,"))
    cause = classify(findings, CauseContext(history=[], entry_script=str(program)))
    assert "logit_scale" not in cause.summary, cause.summary


def test_a_float16_overflow_of_a_loss_on_raw_unit_targets_names_the_targets_and_the_whole_loss(
    tmp_path: Path,
) -> None:
    """A Gaussian NLL under mixed_float16 with loads of 80-250 kW as targets (s41d p7): "compute this in float32" at
    the loss's mean, followed, moved the overflow to (y - mu) ** 2 in the same loss. The targets' scale is named, with
    the whole loss in float32 or scaled targets; targets of unit scale leave the words as they were."""
    program = write_program(tmp_path)
    origin = overflow_origin(program, dtype="float16", line=EXP_LINE, op="Exp")
    loads = np.linspace(81.7, 251.0, 64, dtype=np.float32)[:, None]
    features = np.ones((64, 3), np.float32)
    context = CauseContext(
        dtype_policy="mixed_float16",
        entry_script=str(program),
        model_info={"loss_scale_optimizer": True},
        batch=(features, loads),
    )
    cause = classify(findings_of(origin), context)
    assert cause.kind == "precision", cause
    assert "the targets (y from 81.7 to 251" in cause.summary and "are in raw units" in cause.summary, (
        cause.summary
    )
    assert cause.change is not None and "the whole loss in float32" in cause.change.what, cause.change
    assert "or scale the targets (y / 1e2)" in cause.change.what, cause.change
    context.batch = (features, loads / 100.0)
    cause = classify(findings_of(origin), context)
    assert "raw units" not in cause.summary and cause.change is not None, cause.summary
    assert "the whole loss" not in cause.change.what, cause.change


@pytest.mark.parametrize(
    ("mask", "extreme", "wide"),
    [
        ("time[None, :] > time[:, None]", "largest", "time[None, :] >= time[:, None]"),
        ("time[:, None] < time[None, :]", "largest", "time[:, None] <= time[None, :]"),
        ("tf.greater(tf.expand_dims(time, 1), tf.expand_dims(time, 0))", "smallest", "tf.greater_equal("),
    ],
)
def test_a_log_of_a_risk_set_made_with_a_strict_comparison_changes_the_comparison(
    tmp_path: Path, mask: str, extreme: str, wide: str
) -> None:
    """A Cox partial likelihood whose risk set is ``time[None, :] > time[:, None]`` (s41f p1, meant ``>=``): the row
    of the batch's largest time has an empty set, a sum of 0 and a log of -inf. "Clamp the log", followed, trained
    a wrong likelihood (each last event got risk + 16.1); the comparison is the change."""
    program = tmp_path / "train.py"
    program.write_text(
        "import tensorflow as tf\n"
        "\n"
        "\n"
        "def cox_ph_loss(y_true, y_pred):\n"
        "    time = y_true[:, 0]\n"
        "    risk = tf.squeeze(y_pred, -1)\n"
        f"    at_risk = tf.cast({mask}, tf.float32)\n"
        "    log_risk_set = tf.math.log(tf.reduce_sum(at_risk * tf.exp(risk)[None, :], axis=1))\n"
        "    return -tf.reduce_sum((risk - log_risk_set) * y_true[:, 1])\n"
    )
    origin = Finding(
        file=str(program),
        line=8,
        role="origin",
        op=OpRef("compile_loss/cox_ph_loss/Log", "Log"),
        health=TensorHealth(dtype="float32", size=64, neg_inf=1, pos=63),
        inputs=[
            InputHealth(
                "compile_loss/cox_ph_loss/Sum:0", TensorHealth(dtype="float32", size=64, zero=1, pos=63)
            )
        ],
    )
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert cause.kind == "op", cause.summary
    assert "compares time with itself strictly" in cause.summary, cause.summary
    assert f"the row with the batch's {extreme} time has an empty set" in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == 7, cause.change
    assert cause.change.what.startswith(f"the comparison: {wide}"), cause.change.what
    assert "Cox risk set is {j: t_j >= t_i}" in cause.change.what, cause.change.what


def test_a_log_of_a_sum_over_a_mask_that_holds_every_row_is_not_told_of_a_comparison(tmp_path: Path) -> None:
    """``>=`` holds the row itself: a zero sum there is no empty set, and the comparison is no change."""
    program = tmp_path / "train.py"
    program.write_text(
        "import tensorflow as tf\n"
        "\n"
        "\n"
        "def cox_ph_loss(y_true, y_pred):\n"
        "    time = y_true[:, 0]\n"
        "    risk = tf.squeeze(y_pred, -1)\n"
        "    at_risk = tf.cast(time[None, :] >= time[:, None], tf.float32)\n"
        "    log_risk_set = tf.math.log(tf.reduce_sum(at_risk * tf.exp(risk)[None, :], axis=1))\n"
        "    return -tf.reduce_sum((risk - log_risk_set) * y_true[:, 1])\n"
    )
    origin = Finding(
        file=str(program),
        line=8,
        role="origin",
        op=OpRef("compile_loss/cox_ph_loss/Log", "Log"),
        health=TensorHealth(dtype="float32", size=64, neg_inf=1, pos=63),
        inputs=[
            InputHealth(
                "compile_loss/cox_ph_loss/Sum:0", TensorHealth(dtype="float32", size=64, zero=1, pos=63)
            )
        ],
    )
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert "strictly" not in cause.summary and (cause.change is None or cause.change.line == 8), cause


TITANIC_FARES = """import keras
import numpy as np
import pandas as pd
import tensorflow as tf

titanic = pd.read_csv("train.csv")
inputs = {"fare": keras.Input(shape=(1,), name="fare")}
x = keras.layers.Lambda(tf.math.log)(inputs["fare"])
model = keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(x))
model.compile(optimizer="adam", loss="binary_crossentropy")
model.fit({"fare": titanic["fare"].values}, titanic["survived"].values, batch_size=8)
"""


@pytest.mark.parametrize("zeros_in_file", [3, 1])
def test_a_log_of_a_zero_that_the_data_holds_in_several_records_is_log1p_not_a_bad_record(
    tmp_path: Path, zeros_in_file: int
) -> None:
    """TensorFlow's CSV tutorial with ``Lambda(tf.math.log)`` on the Titanic fare (s41c p5): a fare of 0 (12
    passengers) was "the record x['fare'][20] = 0: correct it or leave it out where the data is read". A value that
    several records of the file hold is valid data: log1p is the change. A 0 that one record holds is still that
    record's."""
    from pyadapter.cause.rows import rows_of

    program = tmp_path / "titanic.py"
    program.write_text(TITANIC_FARES)
    fares = [7.25, 71.28, 8.05, 53.1, 0.0, 8.46, 51.86, 21.07, 11.13, 30.07] + [0.0] * (zeros_in_file - 1)
    (tmp_path / "train.csv").write_text(
        "survived,fare\n" + "".join(f"{i % 2},{fare}\n" for i, fare in enumerate(fares)), encoding="utf-8"
    )
    batch_fares = np.array([7.25, 71.28, 8.05, 53.1, 0.0, 8.46, 51.86, 21.07], np.float32).reshape(-1, 1)
    labels = np.array([0, 1, 0, 1, 0, 1, 0, 1], np.float32).reshape(-1, 1)
    per_row = np.ones((8, 1), np.float32)
    per_row[4] = -np.inf
    batch = ({"fare": batch_fares}, labels)
    rows = rows_of(per_row, batch)
    assert rows is not None and rows.outliers
    origin = Finding(
        file=str(program),
        line=8,
        role="origin",
        op=OpRef("functional/lambda/Log", "Log"),
        health=TensorHealth(dtype="float32", size=8, neg_inf=1, pos=7),
        inputs=[InputHealth("data:0", TensorHealth(dtype="float32", size=8, zero=1, pos=7))],
    )
    context = CauseContext(batch=batch, entry_script=str(program), cwd=str(tmp_path), folders=[str(tmp_path)])
    cause = classify(findings_of(origin, bad_rows=rows.to_json()), context)
    assert cause.change is not None and cause.change.line == 8, cause.change
    if zeros_in_file > 1:
        assert cause.kind == "op", cause
        assert (
            f"0 is a valid fare in the data ({zeros_in_file} rows of train.csv hold it)" in cause.summary
        ), cause.summary
        assert cause.change.what.startswith("the log of fare: take tf.math.log1p(x)"), cause.change.what
    else:
        assert cause.kind == "data" and "correct it or leave it out" in cause.change.what, cause


AUTO_MPG_WITHOUT_ITS_NORMALIZER = """import numpy as np
import pandas as pd
import tensorflow as tf
from tensorflow.keras import layers

train_features = pd.read_csv("auto-mpg.csv")
train_labels = train_features.pop("MPG")
normalizer = tf.keras.layers.Normalization(axis=-1)
normalizer.adapt(np.array(train_features))
linear_model = tf.keras.Sequential([
    # normalizer,
    layers.Dense(units=1)
])
linear_model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.01), loss="mean_squared_error")
history = linear_model.fit(train_features, train_labels, epochs=100, verbose=0)
"""


@pytest.mark.parametrize("commented", [True, False])
def test_unscaled_features_with_a_normalizer_adapted_and_left_out_name_that_normalizer(
    tmp_path: Path, commented: bool
) -> None:
    """The Basic regression tutorial with ``# normalizer,`` commented out of the linear model (s41c p7): the layer
    is made and adapted, so the features were not called unscaled, and the rate was named ("no rate down to 2.44e-6
    kept the window finite"). The normalizer left out is the change, at its commented-out line."""
    program = tmp_path / "regression.py"
    text = AUTO_MPG_WITHOUT_ITS_NORMALIZER
    if not commented:
        text = text.replace("    # normalizer,\n", "")
    program.write_text(text)
    rng = np.random.default_rng(0)
    features = np.stack(
        [
            rng.uniform(1600, 5100, 32),
            rng.uniform(68, 455, 32),
            rng.uniform(46, 230, 32),
            rng.uniform(8, 25, 32),
        ],
        axis=1,
    ).astype("float32")
    batch = (features, rng.uniform(9, 46, size=(32,)).astype("float32"))
    origin = Finding(
        file=str(program),
        line=15,
        role="origin",
        op=OpRef("compile_loss/mean_squared_error/Square", "Square"),
        health=TensorHealth(dtype="float32", size=32, pos_inf=32),
        inputs=[
            InputHealth(
                "compile_loss/mean_squared_error/sub:0", TensorHealth(dtype="float32", size=32, neg=32)
            )
        ],
    )
    cause = classify(
        findings_of(origin),
        CauseContext(entry_script=str(program), batch=batch, layer_classes={"Dense"}, step=0),
    )
    assert "unscaled" in cause.summary, cause.summary
    assert cause.change is not None, cause
    if commented:
        assert cause.change.line == 11, cause.change
        assert (
            "put normalizer back in the model as its first layer (it is made and adapted at regression.py:8"
            in (cause.change.what)
        ), cause.change.what
        assert "commented out of the model here" in cause.change.what, cause.change.what
    else:
        assert cause.change.line == 8, cause.change
        assert "never put in the model" in cause.change.what, cause.change.what


ARCFACE_HEAD = """import tensorflow as tf
from keras import layers


class ArcMarginProduct(layers.Layer):
    def call(self, inputs):
        x, y = inputs
        w = tf.nn.l2_normalize(self.W, axis=0)
        cosine = tf.matmul(x, w)
        theta = tf.acos(cosine)
        target = tf.cos(theta + self.m)
        return target * self.s
"""


@pytest.mark.parametrize(("nan", "named"), [(583, True), (1, False)])
def test_an_acos_nan_at_many_values_names_the_product_s_unnormalized_side(
    tmp_path: Path, nan: int, named: bool
) -> None:
    """An ArcFace head that normalizes its class weights and not the embedding (s42e p1): acos was NaN at 583 of
    1280 values, and the cause said float32 rounding put a cosine past 1, "clip it inside (-1, 1)". Followed, the
    clip froze the margin on every clipped logit. That many values are no rounding: the product's unnormalized side
    is the change. One value past 1 is still rounding."""
    program = tmp_path / "train.py"
    program.write_text(ARCFACE_HEAD)
    origin = Finding(
        file=str(program),
        line=10,
        role="origin",
        op=OpRef("functional/arcface/Acos", "Acos"),
        health=TensorHealth(dtype="float32", size=1280, nan=nan, neg=600, pos=1280 - 600 - nan),
        inputs=[
            InputHealth(
                "functional/arcface/MatMul:0", TensorHealth(dtype="float32", size=1280, neg=640, pos=640)
            )
        ],
    )
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert cause.change is not None, cause
    if named:
        assert f"made NaN at {nan} of 1280 values (46%)" in cause.summary, cause.summary
        assert "the product tf.matmul(x, w) (line 9) takes x unnormalized (w is normalized)" in cause.summary
        assert cause.change.line == 9, cause.change
        assert cause.change.what.startswith(
            "the product's x: normalize it before it (tf.nn.l2_normalize(x, axis=-1))"
        )
    else:
        assert "float32 rounding" in cause.summary and cause.change.line == 10, cause
        assert "tf.clip_by_value" in cause.change.what, cause.change


def test_a_log_of_a_probability_picked_from_a_softmax_says_the_cross_entropy_from_the_logits(
    tmp_path: Path,
) -> None:
    """CosFace's cross-entropy by hand, ``log(reduce_sum(softmax(s * logits) * onehot, axis=1))`` (s42e p2): a
    mislabeled row's probability underflowed to 0 at step 434. The input is a Sum, not the softmax, so the words
    were the clamp's, which, followed, left those rows with no gradient (a loss stuck at 15)."""
    program = tmp_path / "cosface.py"
    program.write_text(
        "import tensorflow as tf\n"
        "\n"
        "\n"
        "def cosface_loss(cos, onehot):\n"
        "    probs = tf.nn.softmax(64.0 * (cos - 0.35 * onehot))\n"
        "    p_target = tf.reduce_sum(probs * onehot, axis=1)\n"
        "    return -tf.reduce_mean(tf.math.log(p_target))\n"
    )
    origin = Finding(
        file=str(program),
        line=7,
        role="origin",
        op=OpRef("Log", "Log"),
        health=TensorHealth(dtype="float32", size=32, neg_inf=1, neg=31),
        inputs=[InputHealth("Sum:0", TensorHealth(dtype="float32", size=32, zero=1, pos=31))],
    )
    findings = findings_of(origin)
    findings.extra["activation_into_log"] = {
        "op": "Softmax",
        "type": "Softmax",
        "file": str(program),
        "line": 5,
    }
    cause = classify(findings, CauseContext(entry_script=str(program)))
    assert "its input is made of a softmax (line 5)" in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == 7, cause.change
    assert cause.change.what.startswith(
        "the log of a softmax's probability: take the cross-entropy from the logits"
    )
    assert "tf.nn.sparse_softmax_cross_entropy_with_logits" in cause.change.what, cause.change.what


PROXY_ANCHOR = """import keras
import tensorflow as tf


class ProxyAnchorModel(keras.Model):
    def proxy_anchor_loss(self, cos, y):
        pos_mask = tf.one_hot(y, self.n_classes, dtype=cos.dtype)
        neg_exp = tf.exp(self.alpha * (cos + self.delta))
        return tf.reduce_sum(tf.math.log1p(tf.reduce_sum((1 - pos_mask) * neg_exp, axis=0)))
"""


def test_a_float16_exp_in_the_users_loss_function_says_the_whole_loss_in_float32(tmp_path: Path) -> None:
    """Proxy-Anchor's exp(32 * (cos + 0.1)) under mixed_float16 (s42e p8): "tf.cast its input to float32, and the
    result back to float16", followed, overflowed at that cast on the same line (the log1p after it needs the large
    value), and the softmax words fit no softmax. The loss function takes the float16 output: the loss in float32."""
    program = tmp_path / "proxy_anchor.py"
    program.write_text(PROXY_ANCHOR)
    context = CauseContext(dtype_policy="mixed_float16", entry_script=str(program))
    cause = classify(findings_of(overflow_origin(program, dtype="float16", line=8, op="Exp")), context)
    assert cause.kind == "precision", cause
    assert "in the loss function proxy_anchor_loss under the mixed_float16 policy" in cause.summary, (
        cause.summary
    )
    assert cause.change is not None and cause.change.line == 8, cause.change
    assert cause.change.what.startswith(
        'compute the loss in float32: tf.cast its inputs to "float32" where proxy_anchor_loss starts'
    ), cause.change.what
    assert "softmax" not in cause.change.what and "result back" not in cause.change.what, cause.change.what


def test_a_float16_overflow_of_a_model_fit_on_x_alone_in_raw_units_names_the_features(tmp_path: Path) -> None:
    """A VAE under mixed_float16 fit on sensor readings of about 100 +- 40 with no targets, ``vae.fit(x)`` (s42f
    p10): the batch is x alone, which was not read as features, so the cause said "float32 would hold it" and
    "build Sampling with dtype="float32"", which, followed, overflowed float32 at the same exp."""
    program = tmp_path / "train.py"
    program.write_text(
        "import keras\nfrom keras import layers, ops\n\n\nclass Sampling(layers.Layer):\n"
        "    def call(self, inputs):\n        z_mean, z_log_var = inputs\n"
        "        return z_mean + ops.exp(0.5 * z_log_var)\n\n\n"
        "enc_in = keras.Input((64,))\nvae = build_vae(enc_in)\nvae.fit(x, epochs=5)\n"
    )
    x = (np.random.default_rng(0).normal(size=(64, 64)) * 40 + 100).astype("float32")
    context = CauseContext(
        dtype_policy="mixed_float16", entry_script=str(program), batch=x, layer_classes=set()
    )
    cause = classify(findings_of(overflow_origin(program, dtype="float16", line=8, op="Exp")), context)
    assert cause.kind == "precision", cause
    assert "but the batch is in raw units (x[:, " in cause.summary, cause.summary
    assert cause.change is not None and cause.change.what.startswith("scale the features (x[:, "), (
        cause.change
    )


@pytest.mark.parametrize(
    ("weights", "named"), [('{"priority": 1.0, "hours": 1e6}', True), ("[1.0, 0.5]", False)]
)
def test_a_divergence_under_a_huge_loss_weight_names_the_weight(
    tmp_path: Path, weights: str, named: bool
) -> None:
    """A two-output model compiled with ``loss_weights={"priority": 1.0, "hours": 1e6}`` (s42f p2) diverged at
    every rate the window tried; the cause named the rate ("no rate ... or clip the gradients"), and clipping,
    followed, trained the other head to chance. The weight is the change; weights of usual size are not named."""
    program = tmp_path / "train.py"
    program.write_text(
        TRAIN.replace(
            'loss="mse")',
            f'loss={{"priority": "sparse_categorical_crossentropy", "hours": "mse"}}, loss_weights={weights})',
        )
    )
    assert "loss_weights=" in program.read_text()
    context = CauseContext(
        history=diverging_history(),
        model_info={"optimizer": "SGD", "optimizers": ["SGD"]},
        entry_script=str(program),
    )
    cause = classify(findings_of(overflow_origin(program)), context)
    assert cause.kind == "divergence", cause
    assert cause.change is not None
    if named:
        assert "compile weighs the loss of 'hours' by 1e+06 (train.py:19)" in cause.summary, cause.summary
        assert cause.change.line == OPTIMIZER_LINE, cause.change
        assert cause.change.what.startswith(
            "the loss weight of 'hours': 1e+06 makes that output's gradients"
        ), cause.change.what
    else:
        assert "loss weight" not in cause.change.what and "weighs the loss" not in cause.summary, cause


LOG_SKEWED_HELPER = """import numpy as np
import pandas as pd
import tensorflow as tf


def log_transform(frame, cols):
    frame = frame.copy()
    for c in cols:
        frame[c] = np.log(frame[c])
    return frame


dataframe = pd.read_csv("heart.csv")
train = log_transform(dataframe, ["chol", "oldpeak"])
display(train[["chol", "oldpeak"]].describe())
train_ds = tf.data.Dataset.from_tensor_slices((dict(train), train.pop("target"))).batch(4)
model.fit(train_ds, epochs=5)
"""


def test_a_nan_batch_after_numpy_warned_an_inf_names_the_warned_line(tmp_path: Path) -> None:
    """keras.io's FeatureSpace example with a ``log_transform`` helper, ``np.log(oldpeak)`` of a 0 (s42c nb9): NumPy
    warned "divide by zero in log" (an Inf), and only a look at the data (``.describe()``) warned of a NaN; the
    normalization made the batch's NaN of the -inf. The change was "filter non-finite records where the data is read
    (read_csv)", of a clean CSV: it is the warned log."""
    from pyadapter.numpy_warnings import NumpyWarning

    program = tmp_path / "train.py"
    program.write_text(LOG_SKEWED_HELPER)
    lines = LOG_SKEWED_HELPER.splitlines()
    log_line = lines.index("        frame[c] = np.log(frame[c])") + 1
    looked = lines.index('display(train[["chol", "oldpeak"]].describe())') + 1
    x = np.ones((4, 7), np.float32)
    x[:, 5] = np.nan
    origin = batch_origin(program, len(lines), TensorHealth(dtype="float32", size=28, nan=4))
    context = CauseContext(
        batch=(x, np.zeros((4, 1), np.float32)),
        entry_script=str(program),
        numpy_warnings=[
            NumpyWarning(str(program), log_line, "divide by zero encountered in log"),
            NumpyWarning(str(program), looked, "invalid value encountered in subtract"),
        ],
    )
    cause = classify(
        findings_of(origin, non_finite_batch={"total": 4, "examples": ["x[0, 5] = nan"]}), context
    )
    assert cause.kind == "data", cause
    assert cause.change is not None and cause.change.line == log_line, cause.change
    assert "a statistic over the column later turned NaN" in cause.summary, cause.summary


SAMPLED_SOFTMAX_LM = """import collections
import tensorflow as tf

counter = collections.Counter(corpus[:20_000].tolist())
unigrams = [counter.get(i, 0) for i in range(VOCAB)]


def train_step(x, y):
    sampled = tf.random.fixed_unigram_candidate_sampler(
        true_classes=y, num_true=1, num_sampled=64, unique=True, range_max=VOCAB, unigrams=unigrams
    )
    loss = tf.reduce_mean(
        tf.nn.sampled_softmax_loss(weights=w, biases=b, labels=y, inputs=x, num_sampled=64, num_classes=VOCAB,
                                   sampled_values=sampled)
    )
    return loss
"""


def test_a_log_inside_a_sampled_softmax_of_a_zero_count_names_the_sampler_s_counts(tmp_path: Path) -> None:
    """A language model's sampled softmax with unigram counts taken over the first 20k tokens only (s42b p6): 11
    true labels had a count of 0, and TensorFlow's own log(expected count) inside sampled_softmax_loss was -inf. The
    cause said "keep the Log's input in the domain" at the loss call, where no log of the user's is."""
    program = tmp_path / "train.py"
    program.write_text(SAMPLED_SOFTMAX_LM)
    origin = Finding(
        file=str(program),
        line=12,
        role="origin",
        op=OpRef("sampled_softmax_loss/Log", "Log"),
        health=TensorHealth(dtype="float32", size=640, neg_inf=11, neg=629),
        inputs=[
            InputHealth(
                "sampled_softmax_loss/StopGradient_1:0",
                TensorHealth(dtype="float32", size=640, zero=11, pos=629),
            )
        ],
    )
    cause = classify(findings_of(origin), CauseContext(entry_script=str(program)))
    assert "the counts given to the sampler (unigrams, train.py:5) hold 0" in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == 5, cause.change
    assert "add 1 to every count" in cause.change.what, cause.change.what


def test_a_nan_a_left_merge_makes_in_a_clean_csv_names_the_merge(tmp_path: Path) -> None:
    """pandas reads a clean CSV, then ``df = df.merge(region_w, on="region", how="left")`` with a weights table
    that lacks one region: its rows' ``w`` is NaN, and ``sw = df["w"].values`` is sliced into the dataset fit
    trains on as sample_weight (s42f p3). The change was "train.py:22: filter or repair non-finite records where
    the data is read (read_csv)" of a CSV with no NaN; the merge made it. A ``.map`` by a dict the same; a CSV that
    holds a missing field, or a merge whose right table has no such column, keeps the reading line."""
    (tmp_path / "customers.csv").write_text(
        "region,tenure,monthly,churn\nnorth,3,70.5,1.0\nislands,40,65.0,0.0\nsouth,12,80.1,0.0\n",
        encoding="utf-8",
    )
    program = tmp_path / "train.py"
    text = (
        "import pandas as pd\n"
        "import tensorflow as tf\n"
        'df = pd.read_csv("customers.csv")\n'
        'region_w = pd.DataFrame({"region": ["north", "south"], "w": [1.0, 1.5]})\n'
        'df = df.merge(region_w, on="region", how="left")\n'
        'df["tenure"] = df["tenure"] / 72\n'
        'X = df[["tenure", "monthly"]].values.astype("float32")\n'
        'y = df["churn"].values.astype("float32")\n'
        'sw = df["w"].values.astype("float32")\n'
        "train_ds = tf.data.Dataset.from_tensor_slices((X, y, sw))\n"
        "train_ds = train_ds.shuffle(100, seed=3).batch(32)\n"
        "model.fit(train_ds, epochs=3)\n"
    )
    program.write_text(text, encoding="utf-8")
    x, y, sw = np.ones((32, 2), np.float32), np.zeros(32, np.float32), np.ones(32, np.float32)
    sw[11] = np.nan
    origin = batch_origin(program, 12, TensorHealth(dtype="float32", size=32, nan=1))
    fit_rows = {
        "indices": list(range(150, 182)),
        "array_rows": 8000,
        "of": "from_tensor_slices",
        "held": True,
    }
    findings = findings_of(origin, non_finite_batch={"total": 1, "examples": ["sample_weight[11] = nan"]})

    def cause_for(script: str) -> Cause:
        program.write_text(script, encoding="utf-8")
        context = CauseContext(
            entry_script=str(program),
            batch=(x, y, sw),
            cwd=str(tmp_path),
            folders=[str(tmp_path)],
            fit_rows=fit_rows,
        )
        return classify(findings, context)

    cause = cause_for(text)
    assert cause.kind == "data", cause
    assert "row 161 of the arrays the dataset was sliced from" in cause.summary, cause.summary
    assert (
        "the file read holds no missing field: column 'w' comes from the left merge at train.py:5, NaN for a key "
        "region_w lacks" in cause.summary
    ), cause.summary
    assert cause.change is not None and cause.change.line == 5, cause.change
    assert cause.change.what == (
        "the left merge gives NaN in column 'w' where region_w has no row for a 'region' key: add the missing keys, "
        'or fill after the merge (df["w"] = df["w"].fillna(1.0))'
    ), cause.change
    # A .map of a column by a dict gives NaN for a key the dict lacks.
    mapped = text.replace(
        'region_w = pd.DataFrame({"region": ["north", "south"], "w": [1.0, 1.5]})\n'
        'df = df.merge(region_w, on="region", how="left")\n',
        'weights = {"north": 1.0, "south": 1.5}\ndf["w"] = df["region"].map(weights)\n',
    )
    cause = cause_for(mapped)
    assert cause.change is not None and cause.change.line == 5, cause.change
    assert cause.change.what.startswith("the .map by weights gives NaN for a key weights has no entry for"), (
        cause
    )
    # A merge whose right table holds no "w" did not make it, nor an inner merge, nor one filled after; a CSV with
    # a missing field is still the place to filter.
    for script in (
        text.replace('"w": [1.0, 1.5]', '"r": [1.0, 1.5]'),
        text.replace('how="left"', 'how="inner"'),
        text.replace('how="left")\n', 'how="left")\ndf["w"] = df["w"].fillna(1.0)\n'),
    ):
        cause = cause_for(script)
        assert cause.change is not None and cause.change.line == 3, (script, cause.change)
    (tmp_path / "customers.csv").write_text(
        "region,tenure,monthly,churn\nnorth,3,,1.0\nislands,40,65.0,0.0\n", encoding="utf-8"
    )
    cause = cause_for(text)
    assert cause.change is not None and cause.change.line == 3, cause.change


def test_an_in_place_column_transform_in_a_cell_run_twice_names_the_second_run(tmp_path: Path) -> None:
    """``full['top_share'] = np.log(full['top_share'] / (1 - full['top_share']))`` in a notebook cell the user ran
    again after a describe() (s43c p6): the second run took the logit of logits, a log of negatives. It was "a 0 /
    0 there made the NaN ... guard the divisor"; np.maximum(1 - p, 1), followed, changed nothing. A cell that ran
    once keeps the division's words."""
    (tmp_path / "train.csv").write_text("clicks,top_share,label\n3,0.2,1\n5,0.7,0\n", encoding="utf-8")
    notebook = tmp_path / "ads.ipynb"
    sources = [
        "import numpy as np\nimport pandas as pd",
        "full = pd.read_csv('train.csv')",
        "full['ctr'] = full['clicks'] / 100\nfull['top_share'] = np.log(full['top_share'] / (1 - full['top_share']))",
        "X = full[['ctr', 'top_share']].values.astype('float32')\ny = full['label'].values\n"
        "model.fit(X, y, epochs=3)",
    ]
    cells = [
        {"cell_type": "code", "source": text, "metadata": {}, "outputs": [], "execution_count": n + 1}
        for n, text in enumerate(sources)
    ]
    notebook.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    x, y = np.ones((32, 2), np.float32), np.zeros(32, np.float32)
    x[0, 1] = np.nan
    origin = Finding(
        file=str(notebook),
        line=3,
        cell=3,
        role="origin",
        op=OpRef("IteratorGetNext", "IteratorGetNext"),
        health=TensorHealth(dtype="float32", size=64, nan=1),
    )
    findings = findings_of(origin, non_finite_batch={"total": 1, "examples": ["x[0, 1] = nan"]})

    def cause_for(ran: list[str]) -> Cause:
        context = CauseContext(
            entry_script=str(notebook),
            batch=(x, y),
            cwd=str(tmp_path),
            folders=[str(tmp_path)],
            fit_rows={"indices": list(range(32)), "array_rows": 2},
            ran_cells=ran,
        )
        return classify(findings, context)

    cause = cause_for([sources[0], sources[1], sources[2], sources[2], sources[3]])
    assert "is transformed in place (ads.ipynb cell 3, line 2), and the kernel ran that cell 2 times" in (
        cause.summary
    ), cause.summary
    assert cause.change is not None and (cause.change.cell, cause.change.line) == (2, 2), cause.change
    assert cause.change.what.startswith("the in-place transform of column 'top_share'"), cause.change.what
    cause = cause_for(sources)
    assert "in place" not in cause.summary, cause.summary


def test_a_target_a_per_group_std_divides_names_the_std_not_the_csv_read(tmp_path: Path) -> None:
    """Ratings z-scored per item in pandas (s43b p1): ``df["item_std"] = df.groupby("iid").rating.transform("std")``
    is NaN for an item rated once and 0 for one whose ratings are all equal, and fit gets ``y_train =
    train["target"].values``. The change was "filter or repair non-finite records where the data is read
    (read_csv)" of a CSV with no missing field; dropna() there changed nothing. A column only selected from a frame
    is followed to the line that computes it; a CSV with a missing field keeps the reading line."""
    (tmp_path / "ratings.csv").write_text(
        "user_id,movie_id,rating\n1,10,4.0\n2,10,3.0\n1,11,5.0\n", encoding="utf-8"
    )
    program = tmp_path / "mf.py"
    text = (
        "import pandas as pd\n"
        'df = pd.read_csv("ratings.csv")\n'
        'df["iid"] = df.movie_id.map({m: i for i, m in enumerate(df.movie_id.unique())})\n'
        'df["item_mean"] = df.groupby("iid").rating.transform("mean")\n'
        'df["item_std"] = df.groupby("iid").rating.transform("std")\n'
        'df["target"] = (df.rating - df.item_mean) / df.item_std\n'
        "train = df.iloc[:2]\n"
        'x_train = train[["user_id", "iid"]].values\n'
        'y_train = train["target"].values.astype("float32")\n'
        "model.fit(x_train, y_train, batch_size=256, epochs=5)\n"
    )
    program.write_text(text, encoding="utf-8")
    x, y = np.ones((32, 2), np.float32), np.zeros(32, np.float32)
    y[26] = np.nan
    origin = batch_origin(program, 10, TensorHealth(dtype="float32", size=32, nan=1))
    findings = findings_of(origin, non_finite_batch={"total": 1, "examples": ["y[26] = nan"]})

    def cause_for() -> Cause:
        context = CauseContext(
            entry_script=str(program),
            batch=(x, y),
            cwd=str(tmp_path),
            folders=[str(tmp_path)],
            fit_rows={"indices": list(range(32)), "array_rows": 4704},
        )
        return classify(findings, context)

    cause = cause_for()
    assert cause.kind == "data", cause
    assert "column 'target' is divided by a std, and the file read holds no missing field" in cause.summary, (
        cause.summary
    )
    assert cause.change is not None and cause.change.line == 6, cause.change
    assert cause.change.what.startswith(
        "the computation of column 'target': its divisor df.item_std is a std, NaN for a group of one record"
    ), cause.change.what
    assert "df.item_std.fillna(1.0).replace(0.0, 1.0)" in cause.change.what, cause.change.what
    # A CSV with a missing rating: filtering where it is read is still the change.
    (tmp_path / "ratings.csv").write_text("user_id,movie_id,rating\n1,10,\n2,10,3.0\n", encoding="utf-8")
    cause = cause_for()
    assert cause.change is not None and cause.change.line == 2, cause.change


def test_a_log_target_sliced_by_a_dataset_helper_names_the_log_not_the_csv_read(tmp_path: Path) -> None:
    """A log target of a sales of 0 (s43c p3): ``train["log_sales"] = np.log(train["sales"])``, ``y =
    train["log_sales"].values.astype("float32")`` and ``fit(make_ds(X[tr], y[tr], shuffle=True))`` with ``make_ds``
    slicing its parameters into ``from_tensor_slices((x, y))``; ``warnings.filterwarnings("ignore")`` left NumPy's
    warning unrecorded. The change was "filter or repair non-finite records where the data is read (read_csv)" of a
    CSV of zeros. fit's dataset is followed through the helper to ``y``, and through the column it selects to the
    log; a dataset not followed still names the one column computed with a log when the CSV holds no non-finite
    field; a CSV with one keeps the reading line."""
    (tmp_path / "train.csv").write_text(
        "date,price,sales\n2013-01-01,2.0,3\n2013-01-02,2.5,0\n", encoding="utf-8"
    )
    program = tmp_path / "sales.py"
    helper_fit = (
        "import warnings\n"
        "import numpy as np\n"
        "import pandas as pd\n"
        "import tensorflow as tf\n"
        'warnings.filterwarnings("ignore")\n'
        'train = pd.read_csv("train.csv")\n'
        'train["t"] = train.index / 365.0\n'
        'train["log_sales"] = np.log(train["sales"])\n'
        'X = train[["t", "price"]].values.astype("float32")\n'
        'y = train["log_sales"].values.astype("float32")\n'
        "def make_ds(x, y=None, shuffle=False):\n"
        "    ds = tf.data.Dataset.from_tensor_slices((x, y) if y is not None else x)\n"
        "    if shuffle:\n"
        "        ds = ds.shuffle(4096)\n"
        "    return ds.batch(128)\n"
        "tr = np.arange(len(X)) % 5 != 0\n"
        "model.fit(make_ds(X[tr], y[tr], shuffle=True), epochs=5)\n"
    )
    x, y = np.ones((128, 2), np.float32), np.zeros(128, np.float32)
    y[38] = -np.inf
    origin = batch_origin(program, 17, TensorHealth(dtype="float32", size=128, neg_inf=1))
    findings = findings_of(origin, non_finite_batch={"total": 1, "examples": ["y[38] = -inf"]})

    def cause_for() -> Cause:
        context = CauseContext(
            entry_script=str(program), batch=(x, y), cwd=str(tmp_path), folders=[str(tmp_path)]
        )
        return classify(findings, context)

    program.write_text(helper_fit, encoding="utf-8")
    cause = cause_for()
    assert cause.kind == "data", cause
    assert cause.change is not None and cause.change.line == 8, cause.change
    assert cause.change.what.startswith("the computation of column 'log_sales': a log of 0"), (
        cause.change.what
    )
    assert "np.log1p" in cause.change.what, cause.change.what
    assert "column 'log_sales' is computed from what was read with a log or a division" in cause.summary, (
        cause.summary
    )
    # A dataset built inside a helper from the frame itself (not followed to y): the one column computed with a
    # log, since the CSV holds no non-finite field.
    program.write_text(
        helper_fit.replace(
            "model.fit(make_ds(X[tr], y[tr], shuffle=True), epochs=5)\n",
            "def pipeline(df):\n"
            '    return tf.data.Dataset.from_tensor_slices((df[["t", "price"]].values, df["log_sales"].values))\n'
            "model.fit(pipeline(train).batch(128), epochs=5)\n",
        ),
        encoding="utf-8",
    )
    cause = cause_for()
    assert cause.change is not None and cause.change.line == 8, cause.change
    assert "the file read holds no non-finite field" in cause.summary, cause.summary
    # A CSV holding an inf field: filtering where it is read stays the change.
    (tmp_path / "train.csv").write_text("date,price,sales\n2013-01-01,inf,3\n", encoding="utf-8")
    cause = cause_for()
    assert cause.change is not None and cause.change.line == 6, cause.change


ENET_CLASS_WEIGHTS = """import keras
import numpy as np

freq = np.bincount(y, minlength=6)
class_weight = {k: float(1.0 / np.log(freq[k])) for k in range(6)}
model.fit(x, y, batch_size=64, epochs=5, class_weight=class_weight)
"""


def test_an_inverse_log_class_weight_of_a_class_with_one_sample_says_the_log_not_a_missing_class(
    tmp_path: Path,
) -> None:
    """ENet-style weights ``1 / np.log(freq[k])`` for a class with one sample (s42f p7): log(1) = 0 and the weight
    is inf. The words were "a class with no samples where the counts are made divides by 0; count the labels fit
    trains on", of counts that were right; NumPy's warning on that very line was not said."""
    from pyadapter.numpy_warnings import NumpyWarning

    program = tmp_path / "train.py"
    program.write_text(ENET_CLASS_WEIGHTS)
    findings, (x, y, weights) = _class_weighted_step(program, 6)
    context = CauseContext(
        batch=(x, y, weights),
        entry_script=str(program),
        numpy_warnings=[NumpyWarning(str(program), 5, "divide by zero encountered in scalar divide")],
    )
    cause = classify(findings, context)
    assert cause.kind == "data", cause
    assert 'NumPy warned "divide by zero encountered in scalar divide" there' in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == 5, cause.change
    assert "the log of a count of 1 is 0" in cause.change.what and "1 / np.log(1.02 + p)" in cause.change.what
    assert "count the labels fit trains on" not in cause.change.what, cause.change.what


DQN_AGENT = """import keras
import numpy as np


class DQNAgent:
    def replay(self, batch_size):
        minibatch = random.sample(self.memory, batch_size)
        states = np.array([m[0] for m in minibatch])
        targets = self.model.predict_on_batch(states)
        next_q = self.model.predict_on_batch(np.array([m[3] for m in minibatch]))
        for i, (s, a, r, s2, done) in enumerate(minibatch):
            targets[i, a] = r if done else r + self.gamma * np.amax(next_q[i])
        self.model.fit(states, targets, epochs=1, verbose=0)
"""


def test_a_divergence_on_q_targets_the_model_predicted_names_the_rewards_and_a_target_network(
    tmp_path: Path,
) -> None:
    """keon's DQN agent on rewards in dollars, with no target network (s42a p5): its targets, r + gamma * max Q(s')
    of the network it trains, grew with its weights; the cause named the rate ("a lower rate from the start may
    still hold"), whose advice, followed, moved the NaN from fit 5 to fit 40. Three columns of Q-values were read as
    one-hot labels and never checked for their scale."""
    program = tmp_path / "dqn.py"
    program.write_text(DQN_AGENT)
    rng = np.random.default_rng(0)
    batch = (
        rng.normal(size=(32, 2)).astype("float32"),
        rng.uniform(-2e3, 9e3, size=(32, 3)).astype("float32"),
    )
    context = CauseContext(
        history=diverging_history(),
        model_info={"optimizer": "SGD", "optimizers": ["SGD"]},
        entry_script=str(program),
        batch=batch,
    )
    origin = overflow_origin(program, line=13, op="MatMul")
    cause = classify(findings_of(origin), context)
    assert cause.kind == "divergence", cause
    assert "on unscaled targets (y[:, " in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == 12, cause.change
    assert "are the model's own predictions plus rewards" in cause.change.what, cause.change.what
    assert "target network" in cause.change.what and "scale the rewards" in cause.change.what, (
        cause.change.what
    )


PENALTY_METHOD = """import tensorflow as tf

mu = tf.Variable(1.0, trainable=False, name="mu")
beta = 1.1
optimizer = tf.keras.optimizers.SGD(learning_rate=1e-3)


@tf.function
def train(x, f):
    with tf.GradientTape() as tape:
        loss = loss_pde(x, f) + mu * loss_bc(x)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for it in range(2000):
    train(x_col, f_col)
    mu.assign(mu * beta)
"""


@pytest.mark.parametrize("update", ["mu.assign(mu * beta)", "mu.assign(tf.minimum(mu * beta, 100.0))"])
def test_a_divergence_under_a_weight_the_program_multiplies_each_step_names_that_growth(
    tmp_path: Path, update: str
) -> None:
    """A PINN's penalty method, ``mu.assign(mu * beta)`` with beta = 1.1 each iteration and no cap (s42d p2): the
    boundary term weighed 1.2e3 times its start when the run diverged; the rate it named, followed, moved the NaN
    from step 74 to 103. A capped growth is not named."""
    program = tmp_path / "pinn.py"
    program.write_text(PENALTY_METHOD.replace("mu.assign(mu * beta)", update))
    context = CauseContext(
        history=diverging_history(),
        model_info={"optimizer": "SGD", "optimizers": ["SGD"]},
        entry_script=str(program),
        step_state={"mu": 1160.0},
    )
    cause = classify(findings_of(overflow_origin(program, line=11, op="Square")), context)
    assert cause.kind == "divergence", cause
    assert cause.change is not None
    if "minimum" in update:
        assert "multiplies mu" not in cause.summary, cause.summary
        return
    assert "the program multiplies mu by 1.1 each time pinn.py:19 runs, with no cap: it was 1.16e+03" in (
        cause.summary
    ), cause.summary
    assert cause.change.line == 19 and cause.change.what.startswith("the growth of mu: cap it"), cause.change


SCALE_NUMERIC_REDEFINED = """import pandas as pd


def scale_numeric(frame, cols):
    for c in cols:
        frame[c] = (frame[c] - frame[c].mean()) / (frame[c].std() + 1e-7)
    return frame


def scale_numeric(frame, cols):
    for c in cols:
        lo, hi = frame[c].min(), frame[c].max()
        frame[c] = (frame[c] - lo) / (hi - lo)
    return frame


df = scale_numeric(pd.read_csv("heart.csv"), ["chol", "fbs"])
X = df[["chol", "fbs"]].values.astype("float32") * 1.0
model.fit(X, df.pop("target").values)
"""


def test_a_column_nan_after_a_redefined_min_max_helper_names_the_helper_that_ran(tmp_path: Path) -> None:
    """A notebook's ``scale_numeric`` defined as a z-score with an epsilon, then redefined in a later cell as min-max,
    ``(x - lo) / (hi - lo)``, over a constant column (s42c nb1): the change named the first definition's line, which
    already had an epsilon and was never called. The definition that ran, and its range of 0, are the change."""
    program = tmp_path / "heart.py"
    program.write_text(SCALE_NUMERIC_REDEFINED, encoding="utf-8")
    x = np.ones((32, 2), np.float32)
    x[:, 1] = np.nan
    lines = SCALE_NUMERIC_REDEFINED.splitlines()
    origin = batch_origin(program, len(lines), TensorHealth(dtype="float32", size=64, nan=32, pos=32))
    findings = findings_of(origin, non_finite_batch={"total": 32, "examples": ["x[0, 1] = nan"]})
    cause = classify(findings, CauseContext(entry_script=str(program), batch=(x, np.zeros(32))))
    assert cause.kind == "data", cause
    assert (
        cause.change is not None
        and cause.change.line == lines.index("        frame[c] = (frame[c] - lo) / (hi - lo)") + 1
    )
    assert cause.change.what.startswith("the min-max scaling: a column that never changes"), cause.change.what


def test_the_log_of_a_determinant_that_underflowed_to_zero_is_told_cholesky_not_orientation(
    tmp_path: Path,
) -> None:
    """A GP's ``tf.math.log(tf.linalg.det(K))`` of a kernel matrix growing near singular (s42d p5): det underflowed
    to 0, and the words were a flow's ("a determinant is negative whenever the matrix flips orientation ... an LU
    parameterisation, as Glow's"). A kernel matrix's log-det is 2 * sum(log(diag(cholesky(K)))) with a jitter."""
    program = write_program(tmp_path)
    origin = log_origin(program)
    origin.inputs = [InputHealth("MatrixDeterminant:0", TensorHealth(dtype="float32", size=1, zero=1))]
    cause = classify(findings_of(origin), CauseContext(history=[], entry_script=str(program)))
    assert "the determinant is 0 in float32" in cause.summary, cause.summary
    assert "orientation" not in cause.summary, cause.summary
    assert cause.change is not None and "tf.linalg.cholesky(K)" in cause.change.what, cause.change
    assert "Glow" not in cause.change.what, cause.change


NEURAL_ODE = """import keras
import tensorflow as tf


class NeuralODE(keras.Model):
    def rk4_step(self, y):
        k1 = self.func(y)
        k2 = self.func(y + 0.5 * self.dt * k1)
        return y + self.dt * k2

    def call(self, y0):
        ys, y = [], y0
        for _ in range(self.n_steps):
            y = self.rk4_step(y)
            ys.append(y)
        return tf.stack(ys, axis=1)


model = NeuralODE()
model.compile(optimizer="adam", loss="mse")
model.fit(y0, traj, batch_size=64, epochs=5)
"""


def test_an_overflow_in_the_loss_before_any_update_names_the_model_s_call(tmp_path: Path) -> None:
    """A neural ODE's RK4 rollout at a step the stiff dynamics cannot take (s42d p3): the MSE of outputs near 1e28
    overflowed at step 0, and the change was "the Square op: keep its values in range" at the fit line. No update had
    run: the model's own call() made the values, in a loop of steps."""
    program = tmp_path / "node.py"
    program.write_text(NEURAL_ODE)
    origin = overflow_origin(program, line=21, op="Square")
    origin.op = OpRef("compile_loss/mse/Square", "Square")
    cause = classify(findings_of(origin, step=0), CauseContext(history=[], entry_script=str(program), step=0))
    assert "overflowed at the run's first step, before any update" in cause.summary, cause.summary
    assert "its own call() (node.py:11)" in cause.summary and "a rollout, an ODE solver" in cause.summary
    assert cause.change is not None and cause.change.line == 11, cause.change
    assert "a smaller dt, more substeps, or fewer steps" in cause.change.what, cause.change.what


EVIDENTIAL_REGRESSION = """import math
import keras
import numpy as np
import tensorflow as tf


def nig_nll(y, gamma, nu, alpha, beta):
    two_b_lambda = 2.0 * beta * (1.0 + nu)
    return (0.5 * tf.math.log(math.pi / nu)
            - alpha * tf.math.log(two_b_lambda)
            + (alpha + 0.5) * tf.math.log(nu * tf.square(y - gamma) + two_b_lambda))


class EvidentialRegressor(keras.Model):
    def call(self, x):
        return self.head(self.body(x))

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            gamma, nu, alpha, beta = tf.split(self(x, training=True), 4, axis=-1)
            loss = tf.reduce_mean(nig_nll(y, gamma, nu, alpha, beta))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}


X = np.load("houses.npy")
y = np.load("prices.npy")[:, None]
model = EvidentialRegressor()
model.compile(optimizer=keras.optimizers.Adam(1e-2))
model.fit(X, y, epochs=30, batch_size=100)
"""
EVIDENTIAL_LOSS_LINE, EVIDENTIAL_CALL_LINE, EVIDENTIAL_TARGETS_LINE = 9, 16, 29

EVIDENTIAL_LOOP = """import math
import numpy as np
import tensorflow as tf


def evidential_loss(targets, out):
    gamma, nu, alpha, beta = tf.split(out, 4, axis=-1)
    return tf.reduce_mean(0.5 * tf.math.log(math.pi / nu)
                          + (alpha + 0.5) * tf.math.log(nu * (targets - gamma) ** 2 + beta))


@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = evidential_loss(yb, model(xb))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))


dataset = tf.data.Dataset.from_tensor_slices((np.load("x.npy"), np.load("prices.npy"))).batch(100)
for epoch in range(30):
    for xb, yb in dataset:
        train_step(xb, yb)
"""


def _steady_history(last_step: int = 35) -> list[dict]:
    """A loss that fell and settled, gradients shrinking, weights growing slowly: no rise before the step."""
    history = []
    for step in range(last_step + 1):
        entry: dict = {
            "step": step,
            "loss": max(3300.0, 9000.0 * 0.8**step) + (60.0 if step % 2 else -60.0),
            "grad_norm": max(2.0, 6000.0 * 0.7**step),
            "weight_norm": 8.9 + 0.1 * step,
        }
        entry["logged_loss"] = entry["loss"]
        if step == last_step:
            entry.update(grad_norm=None, grad_norm_nonfinite="nan", weight_norm=8.9 + 0.1 * (step - 1))
        history.append(entry)
    return history


def _gradient_of_a_division(program: Path, line: int) -> Finding:
    """The gradient of ``pi / nu`` (-pi / nu**2) overflowed to -inf in one row, from finite inputs."""
    return Finding(
        file=str(program),
        line=line,
        role="backward-origin",
        op=OpRef("gradient_tape/truediv/RealDiv_2", "RealDiv", forward_op="truediv"),
        health=TensorHealth(dtype="float32", size=100, neg_inf=1, neg=99),
        inputs=[
            InputHealth(
                "gradient_tape/truediv/RealDiv_1:0", TensorHealth(dtype="float32", size=100, neg=100)
            ),
            InputHealth("split:1", TensorHealth(dtype="float32", size=100, pos=100)),
        ],
    )


@pytest.mark.parametrize("targets_scale", [3.5e5, 1.0])
def test_an_overflow_in_a_loss_of_targets_in_raw_units_names_the_targets_and_their_scale(
    tmp_path: Path, targets_scale: float
) -> None:
    """Deep evidential regression (a Normal-Inverse-Gamma NLL in a Model's own train_step) on house prices in raw
    dollars (s43d p7): errors of 3e5 drove the predicted nu toward 0, and the gradient of ``pi / nu`` overflowed at
    step 35. The cause was "a RealDiv op overflowed on finite inputs ... keep its values in range" at the division;
    ``pi / (nu + 1e-6)``, followed, still went NaN, and standardizing y trained (loss 0.47 to 0.16). Targets of unit
    scale keep the op's words."""
    program = tmp_path / "evidential.py"
    program.write_text(EVIDENTIAL_REGRESSION)
    rng = np.random.default_rng(0)
    batch = (
        rng.normal(size=(100, 4)).astype("float32"),
        (targets_scale * rng.uniform(0.05, 2.0, size=(100, 1))).astype("float32"),
    )
    context = CauseContext(
        history=_steady_history(),
        model_info={"optimizer": "Adam", "optimizers": ["Adam"]},
        entry_script=str(program),
        batch=batch,
        step=35,
    )
    origin = _gradient_of_a_division(program, EVIDENTIAL_LOSS_LINE)
    cause = classify(findings_of(origin, step=35), context)
    assert cause.change is not None
    if targets_scale == 1.0:
        assert cause.kind == "op", cause
        assert cause.change.what == "the RealDiv op: keep its values in range", cause.change
        return
    assert cause.kind == "data", cause
    assert cause.summary.startswith("the targets are in raw units (y from "), cause.summary
    assert "and the loss nig_nll takes them" in cause.summary, cause.summary
    assert "a RealDiv op overflowed on finite inputs" in cause.summary, cause.summary
    assert "of the batch only" not in cause.summary, cause.summary
    assert cause.change.line == EVIDENTIAL_TARGETS_LINE, cause.change
    assert cause.change.what.startswith("scale the targets (y from "), cause.change.what
    assert "y = (y - y.mean()) / y.std()" in cause.change.what, cause.change.what
    assert "undo it on the predictions" in cause.change.what, cause.change.what


def test_an_overflow_in_a_custom_loop_s_loss_of_raw_targets_names_where_the_dataset_is_made(
    tmp_path: Path,
) -> None:
    """The same shape in a custom loop (guard_step's arguments, a loss function given ``yb``): the targets' scale,
    and the dataset they are made into, not the division."""
    program = tmp_path / "loop.py"
    program.write_text(EVIDENTIAL_LOOP)
    rng = np.random.default_rng(1)
    batch = {
        "args": [
            rng.normal(size=(100, 4)).astype("float32"),
            rng.uniform(2e4, 7e5, size=(100, 1)).astype("float32"),
        ],
        "kwargs": {},
    }
    context = CauseContext(
        history=_steady_history(),
        model_info={"optimizer": "Adam", "optimizers": ["Adam"]},
        entry_script=str(program),
        batch=batch,
        step=35,
        step_function={"qualname": "train_step", "file": str(program)},
    )
    cause = classify(findings_of(_gradient_of_a_division(program, 8), step=35), context)
    assert cause.kind == "data", cause
    assert cause.summary.startswith("the targets are in raw units (yb from "), cause.summary
    assert "the loss evidential_loss takes them" in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == 20, cause.change
    assert "before dataset is made from them" in cause.change.what, cause.change.what


def test_an_overflow_outside_a_loss_keeps_the_op_s_words_with_raw_targets(tmp_path: Path) -> None:
    """Targets in raw units, but the overflow is in the model's call, which never reads them: the op's words."""
    program = tmp_path / "evidential.py"
    program.write_text(EVIDENTIAL_REGRESSION)
    rng = np.random.default_rng(2)
    batch = (rng.normal(size=(100, 4)).astype("float32"), rng.uniform(2e4, 7e5, (100, 1)).astype("float32"))
    context = CauseContext(
        history=_steady_history(),
        model_info={"optimizer": "Adam", "optimizers": ["Adam"]},
        entry_script=str(program),
        batch=batch,
        step=35,
    )
    cause = classify(findings_of(_gradient_of_a_division(program, EVIDENTIAL_CALL_LINE), step=35), context)
    assert cause.kind == "op", cause
    assert cause.change is not None and cause.change.what == "the RealDiv op: keep its values in range"


WIDE_AND_DEEP = """\
import keras
import pandas as pd
import tensorflow as tf

NUMERIC = ["price_cents", "n_prev_views", "event_ts"]
df = pd.read_csv("events.csv")


def df_to_dataset(frame):
    labels = frame.pop("dwell_seconds")
    feats = {c: frame[c].values for c in ["user_id", "category"]}
    feats["numeric"] = frame[NUMERIC].values.astype("float32")
    return tf.data.Dataset.from_tensor_slices((feats, labels.values)).batch(128)


class WideAndDeep(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hash_user = keras.layers.Hashing(1000)
        self.user_emb = keras.layers.Embedding(1000, 8)
        self.wide_num = keras.layers.Dense(1)
        self.deep = keras.Sequential([keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])
        self.wide_optimizer = keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)

    def wide_part(self, f):
        return self.wide_num(f["numeric"])

    def deep_part(self, f):
        x = tf.concat([self.user_emb(self.hash_user(f["user_id"])), f["numeric"]], axis=-1)
        return self.deep(x)

    def call(self, f):
        return self.wide_part(f) + self.deep_part(f)

    def train_step(self, data):
        f, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(y - self(f, training=True)[:, 0]))
        return {"loss": loss}


model = WideAndDeep()
model.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-3))
model.fit(df_to_dataset(df), epochs=5)
"""
WIDE_AND_DEEP_NUMERIC_LINE, WIDE_AND_DEEP_LOSS_LINE = 12, 39

WIDE_AND_DEEP_ON_AN_ARRAY = """\
import keras
import numpy as np
import tensorflow as tf

table = np.genfromtxt("events.csv", delimiter=",", dtype=np.float32)
x_train = table[:, :3]
y_train = table[:, 3]


class WideAndDeep(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.deep = keras.Sequential([keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])
        self.wide = keras.layers.Dense(1)

    def deep_part(self, inputs):
        return self.deep(inputs)

    def call(self, x):
        return self.wide(x) + self.deep_part(x)


model = WideAndDeep()
model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.01, momentum=0.9), loss="mse")
model.fit(x_train, y_train, epochs=5)
"""


def _wide_and_deep_context(program: Path, keyed: bool) -> CauseContext:
    """The step-1 scene of s43b p5: a timestamp (1.7e9) and a price in cents (1e5) under SGD 0.01, the gradient
    norm x6e16 in one step."""
    from pyadapter.capture.learning_rate import LearningRate

    rng = np.random.default_rng(0)
    numeric = np.column_stack(
        [rng.uniform(3e3, 2.5e5, 128), rng.integers(0, 8, 128), 1.7e9 + rng.uniform(0, 3e6, 128)]
    ).astype("float32")
    dwell = rng.uniform(5, 60, 128).astype("float32")
    features = {
        "user_id": np.array([b"u1"] * 128),
        "category": np.array([b"shoes"] * 128),
        "numeric": numeric,
    }
    history = [
        {"step": 0, "loss": 1.8e18, "grad_norm": 7.46e18, "weight_norm": 4.6e16, "learning_rate": 0.01},
        {"step": 1, "loss": None, "loss_nonfinite": "inf", "grad_norm": 4.31e35, "weight_norm": 4.6e16},
    ]
    return CauseContext(
        history=history,
        model_info={"optimizer": "SGD", "optimizers": ["Adam", "SGD"]},
        entry_script=str(program),
        step=1,
        batch=(features, dwell) if keyed else (numeric, dwell),
        learning_rate=LearningRate(float(np.float32(0.01))),
        layer_classes={"WideAndDeep", "Hashing", "Embedding", "Dense", "Sequential"},
    )


@pytest.mark.parametrize("keyed", [True, False])
def test_unscaled_features_of_a_model_subclass_are_scaled_where_made_for_every_part_that_reads_them(
    tmp_path: Path, keyed: bool
) -> None:
    """A Wide & Deep ``keras.Model`` subclass fed a timestamp (1.7e9) and a price in cents (1e5), read by both its
    wide Dense (SGD, which diverged in 2 steps) and its deep tower (s43b p5). The change was the first
    ``keras.Sequential(...)``, the deep tower: "add keras.layers.Normalization() ... as the model's first layer";
    followed, the wide part still read raw values and trained to NaN. A subclass has no first layer: the array is
    scaled where it is made, and the layers that read it are named."""
    program = tmp_path / "wide_deep.py"
    program.write_text(WIDE_AND_DEEP if keyed else WIDE_AND_DEEP_ON_AN_ARRAY)
    context = _wide_and_deep_context(program, keyed)
    origin = overflow_origin(program, line=WIDE_AND_DEEP_LOSS_LINE if keyed else 20, op="Square")
    cause = classify(findings_of(origin, step=1), context)
    name = "x['numeric']" if keyed else "x"
    assert cause.kind == "divergence", cause.summary
    assert f"on unscaled features ({name}[:, 2] from 1.7e+09" in cause.summary, cause.summary
    assert cause.change is not None, cause
    # Where the array is made: the dict's numeric entry, or the array fit is given; not the deep tower's line.
    assert cause.change.line == (WIDE_AND_DEEP_NUMERIC_LINE if keyed else 6), cause.change
    what = cause.change.what
    assert "as the model's first layer" not in what, what
    assert "WideAndDeep is a model subclass with no first layer" in what, what
    readers = "self.wide_num and self.deep" if keyed else "self.wide and self.deep"
    assert (
        f"{readers} both read it, and a Normalization first in one leaves the other on raw values" in what
    ), what
    assert (
        f"or apply one keras.layers.Normalization() adapted to the training values (norm.adapt(...)) to {name}"
        in (what)
    ), what
    if keyed:
        assert "x['numeric'] ('event_ts', 'price_cents' in raw units)" in what, what


WIDE_AND_DEEP_FUNCTIONAL = """\
import keras
import pandas as pd

NUMERIC = ["price_cents", "n_prev_views", "event_ts"]
df = pd.read_csv("events.csv")
feats = {"user_id": df.user_id.values, "category": df.category.values, "numeric": df[NUMERIC].values}

user_in = keras.Input(shape=(), dtype="string", name="user_id")
category_in = keras.Input(shape=(), dtype="string", name="category")
numeric_in = keras.Input(shape=(3,), name="numeric")
user = keras.layers.Embedding(1000, 8)(keras.layers.Hashing(1000)(user_in))
deep = keras.Sequential([keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)])
wide = keras.layers.Dense(1)(numeric_in)
out = wide + deep(keras.layers.Concatenate()([user, numeric_in]))
model = keras.Model([user_in, category_in, numeric_in], out)
model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.01, momentum=0.9), loss="mse")
model.fit(feats, df.dwell_seconds.values, epochs=5)
"""


def test_unscaled_features_of_a_functional_model_name_their_input_and_every_layer_that_reads_it(
    tmp_path: Path,
) -> None:
    """The functional form of s43b p5: three Inputs, the numeric one (raw timestamps and prices) read by the wide
    Dense and by the deep part. The change was the first Input, the user ids' string input, with "add
    keras.layers.Normalization() ... as the model's first layer". It is the Input the batch's key names, and the
    words say to hand the normalized values to both layers that read it."""
    program = tmp_path / "wide_deep.py"
    program.write_text(WIDE_AND_DEEP_FUNCTIONAL)
    origin = overflow_origin(program, line=17, op="Square")
    cause = classify(findings_of(origin, step=1), _wide_and_deep_context(program, keyed=True))
    assert "on unscaled features (x['numeric'][:, 2] from 1.7e+09" in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == 10, cause.change
    assert (
        "apply one keras.layers.Normalization() adapted to the training features to numeric_in, this Input, and "
        "hand its output to every layer that reads the input: keras.layers.Dense(1) (line 13) and "
        "keras.layers.Concatenate() (line 14) both read it"
    ) in cause.change.what, cause.change.what
    assert "or standardize x['numeric'] before fit" in cause.change.what, cause.change.what


SEGMENTER = """\
import keras
import tensorflow as tf
from keras import layers

keras.mixed_precision.set_global_policy("mixed_float16")
EPS = 1e-7


def bce(y_true, y_pred):
    y_true = tf.cast(y_true, y_pred.dtype)
    y_pred = tf.clip_by_value(y_pred, EPS, 1.0 - EPS)
    return -tf.reduce_mean(y_true * tf.math.log(y_pred) + (1.0 - y_true) * tf.math.log(1.0 - y_pred))


class SegNet(keras.Model):
    def __init__(self, width=16, **kw):
        super().__init__(**kw)
        self.enc = layers.Conv2D(width, 3, padding="same", activation="relu")
        self.out = layers.Conv2D(1, 1, activation="sigmoid")

    def call(self, x):
        return self.out(self.enc(x))

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            p = self(x, training=True)
            loss = bce(y, p)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}
"""
SEGMENTER_BCE_START, SEGMENTER_CLIP, SEGMENTER_LOG, SEGMENTER_OUTPUT_LAYER = 10, 11, 12, 19


def _clipped_log_findings(program: Path, origin: Finding, clip_dtype: str, sigmoid: bool) -> Findings:
    """`origin` with the ops the scan recorded up its inputs: the clip (in `clip_dtype`) and, with `sigmoid`, the
    output layer's float16 Sigmoid that fed it."""
    nodes: list[dict[str, object]] = [
        {
            "id": "n1",
            "name": "clip_by_value",
            "type": "Maximum",
            "role": "input",
            "distance": -1,
            "health": {"dtype": clip_dtype, "size": 64, "pos": 64},
            "file": str(program),
            "line": SEGMENTER_CLIP,
        }
    ]
    if sigmoid:
        nodes.append(
            {
                "id": "n2",
                "name": "seg_net_1/conv2d_1_1/Sigmoid",
                "type": "Sigmoid",
                "role": "input",
                "distance": -3,
                "health": {"dtype": "float16", "size": 64, "pos": 64},
                "file": str(program),
                "line": 22,
            }
        )
    findings = findings_of(origin)
    findings.extra["pictures"] = {"nodes": nodes}
    return findings


def _classify_clipped_float16_log(program: Path) -> Cause:
    """The cause of the log's gradient (a Reciprocal) that overflowed float16 in `program`'s loss, at its log line,
    under mixed_float16 with a LossScaleOptimizer."""
    origin = Finding(
        file=str(program),
        line=SEGMENTER_LOG,
        role="backward-origin",
        op=OpRef("gradient_tape/Reciprocal", "Reciprocal", graph="train_step", forward_op="Log"),
        health=TensorHealth(dtype="float16", size=64, pos_inf=3, pos=61),
        inputs=[InputHealth("clip_by_value:0", TensorHealth(dtype="float16", size=64, pos=64))],
    )
    return classify(
        _clipped_log_findings(program, origin, "float16", sigmoid=True),
        CauseContext(
            dtype_policy="mixed_float16", entry_script=str(program), model_info={"loss_scale_optimizer": True}
        ),
    )


def test_a_float16_log_of_a_clip_whose_epsilon_float16_cannot_hold_names_the_output_layer_not_the_log(
    tmp_path: Path,
) -> None:
    """A segmentation model's hand-written BCE under mixed_float16 (s43e p8): ``tf.clip_by_value(y_pred, 1e-7,
    1 - 1e-7)`` on the float16 sigmoid output, then ``tf.math.log``. In float16 1e-7 is a subnormal whose reciprocal
    (the log's gradient) overflows, and 1 - 1e-7 is 1.0. The change was "compute this in float32" at the log's line;
    a cast there, followed, came after the float16 clip, and the run went NaN again. The output layer in float32
    (or a cast before the clip) is the fix, and the words say why the clip did not protect."""
    program = tmp_path / "segment.py"
    program.write_text(SEGMENTER)
    cause = _classify_clipped_float16_log(program)
    assert cause.kind == "precision", cause
    assert f"clipped at line {SEGMENTER_CLIP} in float16" in cause.summary, cause.summary
    assert "EPS (1e-07) is below float16's smallest normal value 6.1e-05" in cause.summary, cause.summary
    assert "1.0 - EPS rounds to 1.0 in float16" in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == SEGMENTER_OUTPUT_LAYER, cause.change
    assert 'give this Conv2D layer dtype="float32"' in cause.change.what, cause.change
    assert f"at the start of bce (line {SEGMENTER_BCE_START}), before the clip" in cause.change.what, (
        cause.change
    )


def test_a_log_cast_to_float32_after_a_float16_clip_is_told_to_cast_before_the_clip(tmp_path: Path) -> None:
    """The same BCE with "compute this in float32" followed at the log's line: ``y_pred = tf.cast(y_pred,
    tf.float32)`` after the float16 clip. Its 1 - 1e-7 was already 1.0, so log(1 - y_pred) took zeros in float32;
    the words named a ConcatV2 that "underflowed", and the cast's place was not said. The cast goes where the loss
    function starts, before the clip (s43e p8)."""
    program = tmp_path / "segment.py"
    program.write_text(
        SEGMENTER.replace(
            "    y_pred = tf.clip_by_value(y_pred, EPS, 1.0 - EPS)\n",
            "    y_pred = tf.clip_by_value(y_pred, EPS, 1.0 - EPS)\n"
            "    y_true, y_pred = tf.cast(y_true, tf.float32), tf.cast(y_pred, tf.float32)\n",
        )
    )
    origin = Finding(
        file=str(program),
        line=SEGMENTER_LOG + 1,
        role="origin",
        op=OpRef("Log_1", "Log", graph="train_step"),
        health=TensorHealth(dtype="float32", size=64, neg_inf=2, neg=62),
        inputs=[InputHealth("sub_1:0", TensorHealth(dtype="float32", size=64, zero=2, pos=62))],
    )
    cause = classify(
        _clipped_log_findings(program, origin, "float16", sigmoid=False),
        CauseContext(
            dtype_policy="mixed_float16", entry_script=str(program), model_info={"loss_scale_optimizer": True}
        ),
    )
    assert cause.kind == "precision", cause
    assert "made 2 -inf of 64 in float32" in cause.summary, cause.summary
    assert f"the cast to float32 at line {SEGMENTER_CLIP + 1} comes after the clip" in cause.summary, (
        cause.summary
    )
    assert cause.change is not None and cause.change.line == SEGMENTER_BCE_START, cause.change
    assert 'tf.cast y_pred (and the targets) to "float32" at the start of bce' in cause.change.what, (
        cause.change
    )


def test_a_float16_log_of_a_clip_float16_holds_is_not_put_down_to_the_clip(tmp_path: Path) -> None:
    """A clip at 1e-3 holds in float16 (1/1e-3 is far below 65504, 1 - 1e-3 is not 1): the clip is no cause."""
    program = tmp_path / "segment.py"
    program.write_text(SEGMENTER.replace("EPS = 1e-7", "EPS = 1e-3"))
    cause = _classify_clipped_float16_log(program)
    assert "clip does not protect" not in cause.summary, cause.summary


HOUSE_RATIOS = """\
import numpy as np
import pandas as pd
train = pd.read_csv("train.csv")
def add_features(df):
    df = df.copy()
    df["LotFrontage"] = df["LotFrontage"].fillna(df["LotFrontage"].median())
    df["SF_per_room"] = df["GrLivArea"] / df["TotRmsAbvGrd"]
    df["Area_per_car"] = df["GarageArea"] / df["GarageCars"]
    return df
train = add_features(train)
FEATURES = [c for c in train.columns if c not in ("Id", "SalePrice")]
mu, sd = train[FEATURES].mean(), train[FEATURES].std()
X = ((train[FEATURES] - mu) / sd).values.astype("float32")
y = np.log1p(train["SalePrice"].values).astype("float32")
trn_idx = np.arange(3)
model.fit(X[trn_idx], y[trn_idx], batch_size=32, epochs=3)
"""


def test_a_nan_a_ratio_of_two_columns_both_0_makes_names_that_ratio_not_the_read(tmp_path: Path) -> None:
    """A Kaggle helper adds ``df["Area_per_car"] = df["GarageArea"] / df["GarageCars"]``: 0 / 0 is NaN for a house
    without a garage, which pandas makes without a warning, and X takes every column of a list the code builds
    (``FEATURES = [c for c in train.columns ...]``). The change was "filter or repair non-finite records where
    the data is read (read_csv)" of a CSV whose one missing field (LotFrontage) the code fills: dropna() there
    changed nothing (s43c p1). The ratio whose two columns are 0 on the same records of the CSV is the line; a CSV
    that holds a missing field the code leaves keeps the reading line."""
    csv_text = (
        "Id,LotFrontage,GrLivArea,TotRmsAbvGrd,GarageCars,GarageArea,SalePrice\n"
        "0,49.0,1085,3,0,0,63640.0\n1,,3276,10,2,598,194355.0\n2,60.0,1500,6,1,300,120000.0\n"
    )
    (tmp_path / "train.csv").write_text(csv_text, encoding="utf-8")
    program = tmp_path / "train.py"
    program.write_text(HOUSE_RATIOS, encoding="utf-8")
    x = np.ones((32, 7), np.float32)
    x[3, 6] = np.nan
    origin = batch_origin(program, 16, TensorHealth(dtype="float32", size=224, nan=1))
    context = CauseContext(
        entry_script=str(program),
        batch=(x, np.ones(32, np.float32)),
        cwd=str(tmp_path),
        folders=[str(tmp_path)],
    )
    cause = classify(findings_of(origin), context)
    assert cause.kind == "data", cause
    assert (
        "train.csv's missing fields (LotFrontage) are filled by the code: column 'Area_per_car' is computed at "
        "train.py:8 as GarageArea / GarageCars, and 1 record of train.csv holds 0 in both" in cause.summary
    ), cause.summary
    assert cause.change is not None and cause.change.line == 8, cause.change
    assert "np.where(df['GarageCars'] > 0, df['GarageArea'] / df['GarageCars'], 0)" in cause.change.what
    # LotFrontage left unfilled: the CSV's missing field reaches X, and the read is the place.
    program.write_text(HOUSE_RATIOS.replace('    df["LotFrontage"] = df["LotFrontage"].fillna(', "    (0, "))
    cause = classify(findings_of(origin), context)
    assert cause.change is not None and cause.change.line == 3, cause.change
    assert "where the data is read (read_csv)" in cause.change.what, cause.change.what


OOF_TARGET_ENCODING = """\
import numpy as np
import pandas as pd
df = pd.read_csv("train.csv")
def target_encode(trn, val, col, target="target", n_inner=5, alpha=10):
    prior = trn[target].mean()
    trn_te = np.zeros(len(trn))
    inner = np.array_split(np.random.permutation(len(trn)), n_inner)
    for k in range(n_inner):
        i_val = inner[k]
        i_trn = np.concatenate([inner[j] for j in range(n_inner) if j != k])
        st = trn.iloc[i_trn].groupby(col)[target].agg(["sum", "count"])
        enc = (st["sum"] + alpha * prior) / (st["count"] + alpha)
        trn_te[i_val] = trn.iloc[i_val][col].map(enc).values
    st = trn.groupby(col)[target].agg(["sum", "count"])
    enc = (st["sum"] + alpha * prior) / (st["count"] + alpha)
    return trn_te, val[col].map(enc).values
def num_feats(d, ref):
    out = pd.DataFrame(index=d.index)
    out["log_income"] = (np.log(d["income"]) - np.log(ref["income"]).mean()) / np.log(ref["income"]).std()
    out["age"] = (d["age"] - ref["age"].mean()) / ref["age"].std()
    return out
for fold, va_idx in enumerate(np.array_split(np.arange(len(df)), 5)):
    tr = df.drop(index=va_idx).reset_index(drop=True)
    va = df.iloc[va_idx].reset_index(drop=True)
    tr_te, va_te = target_encode(tr, va, "city")
    Xtr = np.column_stack([num_feats(tr, tr).values, tr_te]).astype("float32")
    model.fit(Xtr, tr["target"].values, epochs=20, batch_size=64)
"""


def test_a_nan_an_out_of_fold_target_encodings_map_makes_names_the_map(tmp_path: Path) -> None:
    """A smoothed out-of-fold target encoding maps the held-out rows by per-category means of the other rows,
    ``trn.iloc[i_val][col].map(enc)``, with no ``.fillna(prior)``: a rare category those rows never held maps to
    NaN. The encoding is column 2 of ``np.column_stack([num_feats(tr, tr).values, tr_te])`` (the helper's frame of
    two columns first). The change was "filter or repair non-finite records where the data is read (read_csv)" of
    a CSV with no missing field (s43c p4); it is the map, filled with the prior."""
    (tmp_path / "train.csv").write_text(
        "id,city,income,age,target\n0,c11,46848.0,45,1\n1,c1,26428.0,22,0\n2,c7,31000.0,38,0\n",
        encoding="utf-8",
    )
    program = tmp_path / "train.py"
    program.write_text(OOF_TARGET_ENCODING, encoding="utf-8")
    x = np.ones((64, 3), np.float32)
    x[10, 2] = np.nan
    origin = batch_origin(program, 27, TensorHealth(dtype="float32", size=192, nan=1))
    context = CauseContext(
        entry_script=str(program),
        batch=(x, np.ones(64, np.float32)),
        cwd=str(tmp_path),
        folders=[str(tmp_path)],
    )
    cause = classify(findings_of(origin), context)
    assert cause.kind == "data", cause
    assert "tr_te (column 2 of Xtr) is made by the .map(enc) at train.py:13" in cause.summary, cause.summary
    assert cause.change is not None and cause.change.line == 13, cause.change
    assert ".map(enc).fillna(prior)" in cause.change.what, cause.change.what
    assert "the same for the .map(enc) on line 16" in cause.change.what, cause.change.what
