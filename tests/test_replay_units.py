"""The parts of replay that need no bundle: judging a step, putting the state back, importing entry scripts."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import pytest

from pyadapter.replay.entry import EntryScriptError, custom_objects, import_entry_script, training_at_import
from pyadapter.replay.verdict import ReplayReport, StepVerdict

# ---- verdicts (no TensorFlow) -----------------------------------------------------------------------------------


def test_verdict_json_round_trip_keeps_non_finite_losses() -> None:
    verdict = StepVerdict(
        mode="graph",
        loss=float("nan"),
        loss_finite=False,
        gradients_finite=False,
        non_finite_gradients=["dense/kernel"],
        weights_finite=True,
    )
    data = verdict.to_json()
    assert data["loss"] == "nan" and data["reproduced"] is True
    back = StepVerdict.from_json(data)
    assert back.reproduced and back.non_finite_gradients == ["dense/kernel"]
    assert "NaN reproduced" in back.describe() and "1 gradient non-finite" in back.describe()


def test_report_says_when_only_graph_mode_reproduces() -> None:
    report = ReplayReport(
        bundle="b",
        entry_script="s",
        step=4,
        verdicts={
            "graph": StepVerdict(mode="graph", loss=float("inf"), loss_finite=False),
            "eager": StepVerdict(
                mode="eager", loss=0.5, loss_finite=True, gradients_finite=True, weights_finite=True
            ),
        },
    )
    assert report.reproduced == {"graph": True, "eager": False}
    assert report.note is not None and "only in graph mode" in report.note
    both = ReplayReport(bundle="b", entry_script="s", verdicts={"graph": report.verdicts["graph"]})
    assert both.note is None


def test_report_says_why_graph_mode_shows_fewer_non_finite_values() -> None:
    """A NaN input row: the graph replay said "loss 0.699, 1 gradient non-finite" (as training saw it) and the eager
    one "loss nan, 6 gradients non-finite", with nothing to say why; users read two different failures. The fused
    MatMul+ReLU of the compiled graph turns NaN into 0."""
    graph = StepVerdict(
        mode="graph",
        loss=0.699,
        loss_finite=True,
        gradients_finite=False,
        non_finite_gradients=["dense/kernel"],
    )
    eager = StepVerdict(
        mode="eager",
        loss=float("nan"),
        loss_finite=False,
        gradients_finite=False,
        non_finite_gradients=["dense/kernel", "dense/bias", "dense_1/kernel"],
    )
    report = ReplayReport(bundle="b", entry_script="s", verdicts={"graph": graph, "eager": eager})
    assert report.note is not None and report.note.startswith(
        "Both modes reproduce it, graph mode with fewer"
    )
    assert "fused ReLU turns NaN into 0" in report.note
    same = ReplayReport(bundle="b", entry_script="s", verdicts={"graph": eager, "eager": eager})
    assert same.note is None
    dumped = StepVerdict.from_json({**graph.to_json(), "dumped": True})  # a dump turns fusion off: no claim
    assert ReplayReport(bundle="b", entry_script="s", verdicts={"graph": dumped, "eager": eager}).note is None


# ---- entry scripts (no TensorFlow) ------------------------------------------------------------------------------


def test_training_at_import_is_detected_outside_the_main_block() -> None:
    guarded = "import keras\nmodel = build()\nif __name__ == '__main__':\n    model.fit(x, y)\n"
    assert training_at_import(guarded) is None
    unguarded = "import keras\nmodel = build()\n\nmodel.fit(x, y)\n"
    assert training_at_import(unguarded) == 4
    loop = "for batch in data:\n    train_step(*batch)\n    opt.apply_gradients(zip(g, v))\n"
    assert training_at_import(loop) == 3
    definitions = "def main():\n    model.fit(x, y)\n\nclass T:\n    def go(self):\n        self.fit()\n"
    assert training_at_import(definitions) is None
    # A loop at module level calling a step decorated with guard_step trains at import (it was missed: the program
    # was imported, reached its step, and ran again by re-entry: its set-up twice).
    for decorator in (
        "@guard_step(capture_dir='captures', model=model)",
        "@pyadapter.guard_step",
        "@guard_step",
    ):
        decorated = f"import tensorflow as tf\n\n{decorator}\n@tf.function\ndef step(x):\n    return x\n"
        assert training_at_import(decorated) is None, decorator  # defined, not called
        assert training_at_import(decorated + "\nfor x in data:\n    step(x)\n") == 9, decorator
        assert training_at_import(decorated + "\nif __name__ == '__main__':\n    step(1)\n") is None
    assert training_at_import("@tf.function\ndef step(x):\n    return x\n\nstep(1)\n") is None
    # A step wrapped by name trains where it is called, not where it is wrapped (the route said "its first
    # training call: line 2", the `guard_step(...)` line).
    wrapped = "def train(x):\n    return x\ntrain = guard_step(train, capture_dir='c')\nfor x in data:\n    train(x)\n"
    assert training_at_import(wrapped) == 5
    assert training_at_import("step = guard_step(f)\nif __name__ == '__main__':\n    step(1)\n") is None
    assert training_at_import("guard_step(f)(batch)\n") == 1
    # The first call in the file, not the shallowest: a WGAN-GP's critic step in an inner loop comes first.
    gan = (
        "@guard_step\ndef critic_step(x):\n    pass\n@guard_step\ndef generator_step():\n    pass\n"
        "for it in range(10):\n    for _ in range(5):\n        critic_step(next(data))\n    generator_step()\n"
    )
    assert training_at_import(gan) == 9
    # A call inside a lambda or def nested in an `if` runs nothing at import.
    assert (
        training_at_import("if ok:\n    cb = lambda: model.fit(x)\n    def go():\n        model.fit(x)\n")
        is None
    )


def test_entry_script_imports_as_a_module_without_running_main(tmp_path: Path) -> None:
    helper = tmp_path / "my_losses.py"
    helper.write_text("def odd_loss(y, p):\n    return y - p\n", encoding="utf-8")
    script = tmp_path / "train_entry_demo.py"
    script.write_text(
        "import sys\n"
        "from my_losses import odd_loss\n"
        "ARGV_AT_IMPORT = list(sys.argv)\n"
        "class Head:\n    pass\n"
        "if __name__ == '__main__':\n    raise SystemExit('the __main__ block ran')\n",
        encoding="utf-8",
    )
    try:
        entry = import_entry_script(script)
        module = entry.module
        assert module.__name__ != "__main__"
        assert module.ARGV_AT_IMPORT == [str(script.resolve())]  # not the replay command's argv
        objects = custom_objects(module)
        assert objects["Head"] is module.Head
        assert objects["odd_loss"].__module__ == "my_losses"  # a loss from a sibling module is offered too
        assert entry.warnings == []
    finally:
        sys.modules.pop("train_entry_demo", None)
        sys.modules.pop("my_losses", None)
        if str(tmp_path) in sys.path:
            sys.path.remove(str(tmp_path))


def test_entry_script_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(EntryScriptError, match="missing"):
        import_entry_script(tmp_path / "nowhere.py")
    broken = tmp_path / "broken_entry_demo.py"
    broken.write_text("import definitely_not_a_module_xyz\n", encoding="utf-8")
    with pytest.raises(EntryScriptError) as info:
        import_entry_script(broken)
    message = str(info.value)
    assert "\n" not in message and "ModuleNotFoundError" in message and f"{broken}:1" in message
    trains = tmp_path / "trains_entry_demo.py"
    trains.write_text("model = object()\nmodel.fit(1, 2)\n", encoding="utf-8")
    with pytest.raises(EntryScriptError, match=r"trains when the script is imported"):
        import_entry_script(trains)


# ---- running a step (real TensorFlow, in this process) ----------------------------------------------------------


@pytest.mark.slow
def test_run_step_judges_finite_and_non_finite_batches_from_the_same_state() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf

    from pyadapter.replay.step import StepProgram, run_step

    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.Adam(0.1), loss="mse")
    x = np.ones((4, 3), "float32")
    y = np.zeros((4, 2), "float32")
    model.train_on_batch(x, y)  # optimizer slots exist and hold values, as in a real bundle

    def program(batch_x: np.ndarray) -> StepProgram:
        p = StepProgram(
            step=model.train_step,
            args=((tf.constant(batch_x), tf.constant(y)),),
            state=[*model.variables, *model.optimizer.variables],
            trainable=list(model.trainable_variables),
            optimizers=[model.optimizer],
            before_run=model.reset_metrics,
        )
        p.snapshot()
        return p

    healthy = program(x)
    before = [v.numpy().copy() for v in healthy.state]
    for mode in ("graph", "eager"):
        verdict = run_step(healthy, mode)
        assert not verdict.reproduced, verdict
        assert verdict.loss_finite and verdict.gradients_finite and verdict.weights_finite
    # Both modes start from the same captured state: the same loss each time.
    again = run_step(healthy, "graph")
    assert again.loss == pytest.approx(run_step(healthy, "eager").loss, rel=1e-6)
    healthy.restore()
    assert all(np.array_equal(a, v.numpy()) for a, v in zip(before, healthy.state, strict=True))

    poisoned = x.copy()
    poisoned[1, 2] = np.inf
    sick = program(poisoned)
    for mode in ("graph", "eager"):
        verdict = run_step(sick, mode)
        assert verdict.reproduced and verdict.loss_finite is False
        assert set(verdict.non_finite_gradients) == {v.path for v in model.trainable_variables}


@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
def test_gradients_too_large_to_square_are_said_only_for_an_optimizer_that_squares_them(
    optimizer: str,
) -> None:
    """Features in units of 1e25 under MAE: the gradient is finite, its square is not. Adam squares it (its second
    moment goes +Inf); SGD does not, and NanGuard's gate lets such a gradient through under SGD. A replay of an SGD
    step (and of a hand-written update) said "2 gradients finite but too large to square in float32" anyway."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf

    from pyadapter.replay.step import StepProgram, run_step

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(
        optimizer=keras.optimizers.get({"class_name": optimizer, "config": {"learning_rate": 1e-30}}),
        loss="mae",
    )
    x = np.full((4, 2), 1e25, "float32")
    y = np.zeros((4, 1), "float32")
    program = StepProgram(
        step=model.train_step,
        args=((tf.constant(x), tf.constant(y)),),
        state=[*model.variables],
        trainable=list(model.trainable_variables),
        optimizers=[model.optimizer],
        before_run=model.reset_metrics,
    )
    program.snapshot()
    for mode in ("graph", "eager"):
        verdict = run_step(program, mode)
        assert verdict.gradients_finite, verdict
        expected = [model.layers[0].kernel.path] if optimizer == "Adam" else []
        assert verdict.too_large_gradients == expected, verdict


def test_a_step_that_made_a_moving_variance_inf_is_reproduced_not_finite() -> None:
    """A feature in units of 1e20 into Dense -> BatchNormalization: the guard stops on the +Inf moving variance
    with a finite loss, gradients and weights. Every replay said "stayed finite — loss 7.4e16, gradients finite,
    weights finite after the update", below an origin that named the overflow. The state the forward pass writes
    is judged too."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf

    from pyadapter.capture.gate import forward_state_variables
    from pyadapter.findings_text import verdict_sentence
    from pyadapter.replay.step import StepProgram, run_step

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.BatchNormalization()])
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
    x = np.random.default_rng(0).normal(size=(8, 3)).astype("float32")
    y = np.zeros((8, 4), "float32")
    model.train_on_batch(x, y)
    x[:, 0] *= 1e20
    program = StepProgram(
        step=model.train_step,
        args=((tf.constant(x), tf.constant(y)),),
        state=[*model.variables, *model.optimizer.variables],
        trainable=list(model.trainable_variables),
        optimizers=[model.optimizer],
        forward_state=forward_state_variables([model]),
        before_run=model.reset_metrics,
    )
    program.snapshot()
    for mode in ("graph", "eager"):
        verdict = run_step(program, mode)
        assert verdict.reproduced, verdict
        assert verdict.non_finite_state == [model.layers[1].moving_variance.path], verdict
        assert verdict_sentence(verdict.to_json()).startswith(f"{mode}: non-finite state reproduced"), verdict
        assert StepVerdict.from_json(verdict.to_json()).non_finite_state == verdict.non_finite_state


def test_a_weight_the_step_writes_after_its_update_is_named_as_the_step_s_own_write() -> None:
    """A center loss's train_step writes its non-trainable ``centers`` by hand after apply_gradients, 0/0 for a class
    missing from the batch (s42e p3). Every replay said "non-finite values the forward pass wrote to
    center_model/centers", while the stop names the step's own write: so does the replay now."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf

    from pyadapter.capture.gate import forward_state_variables
    from pyadapter.findings_text import verdict_sentence
    from pyadapter.replay.step import StepProgram, run_step

    class CenterModel(keras.Model):
        def __init__(self) -> None:
            super().__init__(name="center_model")
            self.dense = keras.layers.Dense(2)
            self.centers = self.add_weight(name="centers", shape=(2, 2), initializer="zeros", trainable=False)

        def call(self, x: tf.Tensor) -> tf.Tensor:
            return self.dense(x)

        def train_step(self, data: tuple[tf.Tensor, ...]) -> dict[str, tf.Tensor]:
            x, y = data[:2]  # train_on_batch hands (x, y, None)
            with tf.GradientTape() as tape:
                feat = self(x, training=True)
                loss = tf.reduce_mean(tf.square(feat - tf.gather(self.centers, y)))
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables, strict=True))
            onehot = tf.one_hot(y, 2)
            delta = tf.matmul(onehot, feat, transpose_a=True) / tf.reduce_sum(onehot, axis=0)[:, None]
            self.centers.assign_sub(0.5 * delta)
            return {"loss": loss}

    keras.utils.set_random_seed(0)
    model = CenterModel()
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    x = np.random.default_rng(0).normal(size=(4, 3)).astype("float32")
    model.train_on_batch(x, np.array([0, 1, 0, 1]))
    program = StepProgram(
        step=model.train_step,
        args=((tf.constant(x), tf.constant([0, 0, 0, 0])),),  # no record of class 1: its count is 0
        state=[*model.variables, *model.optimizer.variables],
        trainable=list(model.trainable_variables),
        optimizers=[model.optimizer],
        forward_state=forward_state_variables([model]),
    )
    program.snapshot()
    for mode in ("graph", "eager"):
        verdict = run_step(program, mode)
        assert verdict.written_after_update == [model.centers.path] == verdict.non_finite_state, verdict
        said = verdict_sentence(verdict.to_json())
        assert said.endswith(
            f"non-finite values the step's own write after its update put in {model.centers.path}"
        )
        assert "forward pass" not in said, said


@pytest.mark.slow
def test_a_step_that_returns_two_losses_reproduces_when_the_second_is_not_finite() -> None:
    """A GAN's train_step returns {"d_loss": ..., "g_loss": ...}: the replay judged only the first float it returned,
    so a generator loss of -log(0) = inf read "stayed finite" while training had stopped on it."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from pyadapter.replay.step import StepProgram, run_step

    weight = tf.Variable([0.5, 2.0])

    def gan_like_step(x: tf.Tensor) -> dict[str, tf.Tensor]:
        d_loss = tf.reduce_mean(tf.square(weight * x))
        g_loss = -tf.reduce_mean(tf.math.log(x))  # x holds a 0
        return {"d_loss": d_loss, "g_loss": g_loss}

    program = StepProgram(
        step=gan_like_step, args=(tf.constant([1.0, 0.0]),), state=[weight], trainable=[weight]
    )
    program.snapshot()
    for mode in ("graph", "eager"):
        verdict = run_step(program, mode)
        assert verdict.reproduced and verdict.loss_finite is False and verdict.loss == float("inf"), verdict


@pytest.mark.slow
def test_a_step_that_returns_its_metrics_shows_the_loss_it_differentiated() -> None:
    """keras.io's Distiller returns ``{m.name: m.result() for m in self.metrics}`` and never updates Keras's loss
    tracker: the replay said "NaN reproduced — loss 0" where the guard had stopped on a non-finite loss."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf

    from pyadapter.replay.step import StepProgram, run_step

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    tracker = keras.metrics.Mean(name="loss")  # what fit's logs show, left at 0 by the step

    def train_step(data: tuple[tf.Tensor, tf.Tensor]) -> dict[str, tf.Tensor]:
        x, y = data
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.math.log(y) * model(x))  # y holds a 0
        grads = tape.gradient(loss, model.trainable_variables)
        model.optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return {"loss": tracker.result()}

    y = np.ones((8, 1), np.float32)
    y[3] = 0.0
    model.optimizer.build(model.trainable_variables)
    program = StepProgram(
        step=train_step,
        args=((tf.ones((8, 2)), tf.constant(y)),),
        state=[*model.variables, *model.optimizer.variables],
        trainable=list(model.trainable_variables),
        optimizers=[model.optimizer],
    )
    program.snapshot()
    for mode in ("graph", "eager"):
        verdict = run_step(program, mode)
        assert verdict.reproduced and verdict.non_finite_gradients, verdict
        assert verdict.loss_finite is False and not math.isfinite(verdict.loss), verdict


def test_a_dumped_re_run_with_more_nan_than_training_says_why() -> None:
    """Training's compiled step fused a Conv2D's bias and ReLU (the fused ReLU turns NaN into 0) and saw 1 gradient
    non-finite; the dumped re-run of `locate` runs the ops unfused and saw 6. The two figures stood side by side with
    no word; the note says why, and survives the report's JSON."""
    grads = [f"sequential/layer_{i}/kernel" for i in range(6)]
    dumped = StepVerdict(
        "graph", loss=float("nan"), loss_finite=False, non_finite_gradients=grads, dumped=True
    )
    dumped.gradients_finite = False
    report = ReplayReport("b", "train.py", captured_gradients=1, verdicts={"graph": dumped})
    assert (
        report.note is not None and "more non-finite gradients than training had (6 against 1)" in report.note
    )
    assert ReplayReport.from_json(report.to_json()).note == report.note
    # A step compiled with XLA: its fused kernels are not what a dump runs; "--graph computes as training did" was
    # false there (every replay runs without XLA).
    report.trained_with_xla = True
    assert report.note is not None and "compiled its step with XLA" in report.note
    assert "computes as training did" not in report.note
    assert ReplayReport.from_json(report.to_json()).note == report.note
    report.captured_gradients = 6  # as many as training had: nothing to explain
    assert report.note is None
    report.captured_gradients = None  # gradients not judged at capture (a LossScaleOptimizer's business)
    assert report.note is None


def test_a_re_run_that_reproduced_from_other_random_draws_says_its_counts_are_its_own() -> None:
    """A DCGAN notebook's step draws its noise with an unseeded tf.random.normal: `locate --replay` reproduced the
    -inf from other draws (1 -inf where training's step had 4) and said nothing; the note came only when a mode
    stayed finite."""
    draws = ["RandomStandardNormal at dcgan.ipynb cell 16, line 8"]

    def verdict(mode: str) -> StepVerdict:
        made = StepVerdict(mode, loss=float("inf"), loss_finite=False, non_finite_gradients=["d/kernel"])
        made.gradients_finite = False
        made.stateful_random = list(draws)
        return made

    report = ReplayReport("b", "dcgan.ipynb", verdicts={"graph": verdict("graph"), "eager": verdict("eager")})
    assert report.note is not None and report.note.startswith(
        "The step draws from TensorFlow's stateful random ops"
    )
    assert "its counts of NaN/Inf (even where they start) can differ from training's" in report.note
    assert "whether the NaN comes back is chance" not in report.note
    assert "RandomStandardNormal at dcgan.ipynb cell 16, line 8" in report.note
    # A mode that stayed finite: the chance is the news.
    report.verdicts["graph"] = StepVerdict("graph", loss=64.1, loss_finite=True, gradients_finite=True)
    report.verdicts["graph"].stateful_random = list(draws)
    assert report.note is not None and "whether the NaN comes back is chance" in report.note


def test_an_eager_replay_alone_with_more_nan_than_training_says_why() -> None:
    """`nanlens replay --eager` alone said "loss nan, 6 gradients non-finite" where training had a finite loss and 2
    gradients, with no note (the note came only when both modes ran)."""
    grads = [f"sequential/layer_{i}/kernel" for i in range(6)]
    eager = StepVerdict("eager", loss=float("nan"), loss_finite=False, non_finite_gradients=grads)
    eager.gradients_finite = False
    report = ReplayReport("b", "train.py", captured_gradients=2, verdicts={"eager": eager})
    assert (
        report.note is not None
        and "eager run has more non-finite gradients than training had (6 against 2)" in (report.note)
    )
    report.captured_gradients = 6
    assert report.note is None


def test_only_a_step_the_program_guards_is_called_by_its_recorded_name(tmp_path: Path) -> None:
    """A bundle names its step function by qualified name, looked up from the program's module. Any function of the
    program's own files was accepted: `housekeeping.purge_runs` (a clean-up module the program imports) was called
    with the captured batch. Only a guard_step the program made, or the function one wraps, is a step."""
    from types import SimpleNamespace

    from pyadapter.capture.bundle_format import BundleError
    from pyadapter.replay.restore import step_function

    (tmp_path / "housekeeping.py").write_text("def purge_runs(*args):\n    raise SystemExit('purged')\n")
    program = tmp_path / "train_loop.py"
    program.write_text(
        "import housekeeping\n"
        "import tensorflow as tf\n"
        "from pyadapter import guard_step\n\n"
        "checkpoint = tf.train.Checkpoint(v=tf.Variable(1.0))\n\n\n"
        "def train_step(x):\n    return x\n\n\n"
        "step = guard_step(train_step, checkpoint=checkpoint, capture_dir='captures')\n\n\n"
        "@guard_step(checkpoint=checkpoint, capture_dir='captures')\n"
        "def decorated_step(x):\n    return x\n\n\n"
        "def helper(x):\n    return x\n\n\n"
        "class Trainer:\n    def _train_step(self, x):\n        return x\n"
    )
    import importlib.util
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        spec = importlib.util.spec_from_file_location("train_loop_units", program)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(tmp_path))

    def named(qualname: str) -> SimpleNamespace:
        return SimpleNamespace(path=tmp_path / "bundle", manifest={"step_function": {"qualname": qualname}})

    assert step_function(named("train_step"), module) is module.train_step
    assert step_function(named("decorated_step"), module) is module.decorated_step
    for foreign in ("housekeeping.purge_runs", "helper"):
        with pytest.raises(BundleError, match=f"step function {foreign} is not a step the program guards"):
            step_function(named(foreign), module)
    # A trainer's method (guarded in its __init__): the class alone cannot run it; said so, not "not guarded".
    with pytest.raises(
        BundleError, match="step function Trainer._train_step is a method: its Trainer object"
    ):
        step_function(named("Trainer._train_step"), module)


def test_more_nan_gradients_in_a_replay_of_two_optimizers_is_said_to_be_their_order() -> None:
    """A GAN's discriminator update failed: training held it back and the generator's half stayed finite (6
    gradients); the replay applies both updates, and the generator's reads NaN weights (10). The note said fused
    ReLUs were why (the model had none) and that --graph "computes as training did" (it counted 10 too)."""
    grads = [f"gan/layer_{i}/kernel" for i in range(10)]
    dumped = StepVerdict(
        "graph", loss=float("-inf"), loss_finite=False, non_finite_gradients=grads, dumped=True
    )
    report = ReplayReport("b", "gan.py", captured_gradients=6, optimizers=2, verdicts={"graph": dumped})
    assert report.note is not None and "the step updates 2 optimizers" in report.note, report.note
    assert "fuse" not in report.note and "computes as training did" not in report.note
    assert ReplayReport.from_json(report.to_json()).note == report.note
    eager = StepVerdict("eager", loss=float("-inf"), loss_finite=False, non_finite_gradients=grads)
    alone = ReplayReport("b", "gan.py", captured_gradients=6, optimizers=2, verdicts={"eager": eager})
    assert alone.note is not None and "The eager run has more non-finite gradients" in alone.note
    assert "the step updates 2 optimizers" in alone.note


# ---- breakpoint advice (source only) ----------------------------------------------------------------------------


def test_breakpoint_advice_names_graph_code_and_stays_quiet_elsewhere(tmp_path: Path) -> None:
    from pyadapter.replay.breakpoints import breakpoint_advice, graph_code_at

    source = (
        "import tensorflow as tf\n"  # 1
        "class Head(tf.keras.layers.Layer):\n"  # 2
        "    def call(self, x):\n"  # 3
        "        return tf.math.log(x)\n"  # 4
        "@tf.function(jit_compile=False)\n"  # 5
        "def train_step(x):\n"  # 6
        "    y = x * 2\n"  # 7
        "    return y\n"  # 8
        "def parse(x):\n"  # 9
        "    return x + 1\n"  # 10
        "def plain(x):\n"  # 11
        "    return x - 1\n"  # 12
        "ds = tf.data.Dataset.range(3).map(parse)\n"  # 13
    )
    assert graph_code_at(source, 4).reason == "keras"
    assert graph_code_at(source, 7).function == "train_step"
    assert graph_code_at(source, 10).reason == "tf.data"
    assert graph_code_at(source, 12) is None and graph_code_at(source, 13) is None
    script = tmp_path / "train.py"
    script.write_text(source, encoding="utf-8")
    advice = breakpoint_advice(script, 7)
    assert advice is not None and "tf.function `train_step`" in advice and "--eager" in advice
    assert breakpoint_advice(script, 7, eager=True) is None
    assert breakpoint_advice(script, 12) is None
    assert breakpoint_advice(tmp_path / "missing.py", 1) is None


@pytest.mark.slow
def test_training_call_is_found_in_the_entry_script_without_running_it(tmp_path: Path) -> None:
    from pyadapter.replay.callsite import training_call_frame

    script = tmp_path / "train.py"
    script.write_text(
        "import keras\n"
        "def main(model, x, y):\n"
        "    model.compile(loss='mse')\n"
        "    return model.fit(x, y,\n"
        "                     epochs=2)\n"
        "@guarded\n"
        "def train_step(xb):\n"
        "    return xb\n"
        "if __name__ == '__main__':\n"
        "    for xb in data:\n"
        "        train_step(xb)\n",
        encoding="utf-8",
    )
    fit = training_call_frame(script, "keras_fit")
    assert fit is not None and (fit.line, fit.function) == (4, "main")
    step = training_call_frame(script, "custom_loop", "train_step")
    assert step is not None and (step.line, step.function) == (11, "<module>")
    assert training_call_frame(script, "custom_loop", "other_step") is None
    assert training_call_frame(tmp_path / "missing.py", "keras_fit") is None
    (tmp_path / "broken.py").write_text("def (:\n", encoding="utf-8")
    assert training_call_frame(tmp_path / "broken.py", "keras_fit") is None


def test_a_non_finite_captured_batch_is_described_by_position() -> None:
    import numpy as np

    from pyadapter.replay.batchhealth import batch_problem

    x = np.ones((4, 3), dtype=np.float32)
    y = np.zeros((4, 1), dtype=np.float32)
    assert batch_problem((x, y)) is None
    x[2, 1] = np.nan
    y[3, 0] = -np.inf
    problem = batch_problem((x, y))
    assert problem is not None and problem.total == 2
    assert problem.examples == ["x[2, 1] = nan", "y[3, 0] = -inf"]
    assert problem.leaves == ["x: 1 NaN of 12", "y: 1 -inf of 4"]
    assert (
        problem.describe()
        == "the captured batch already holds 2 NaN/Inf values (x[2, 1] = nan, y[3, 0] = -inf)"
    )
    # A custom loop's step arguments, with an integer leaf that cannot be non-finite.
    many = np.full((10,), np.inf, dtype=np.float64)
    loop = batch_problem({"args": [many, np.arange(3)], "kwargs": {"mask": np.ones(2, dtype=np.float32)}})
    assert loop is not None and loop.total == 10 and len(loop.examples) == 3
    assert loop.describe().endswith("(args[0][0] = inf, args[0][1] = inf, args[0][2] = inf, ...)")


def test_re_entry_takes_over_the_train_on_batch_of_the_bundles_own_model() -> None:
    """A GAN trained with train_on_batch calls the discriminator's before the combined model's: a bundle of the
    combined model must let the discriminator's call through and take over the combined model's. The model's Keras
    name (recorded in the manifest) tells them apart; a bundle from before the name was recorded takes the first."""
    from types import SimpleNamespace

    from pyadapter.replay.reentry import _BundleTakeover

    discriminator, combined = SimpleNamespace(name="discriminator"), SimpleNamespace(name="combined")
    bundle = SimpleNamespace(kind="keras_fit", model_info={"name": "combined"})
    hook = _BundleTakeover(bundle, action=lambda rebuilt: None)
    assert not hook.takes(discriminator) and hook.takes(combined)
    older = _BundleTakeover(SimpleNamespace(kind="keras_fit", model_info={}), action=lambda rebuilt: None)
    assert older.takes(discriminator)
    # A guard_step bundle's step is its guarded function: a train_on_batch before it (a warm-up) goes through.
    loop = _BundleTakeover(SimpleNamespace(kind="custom_loop", model_info={}), action=lambda rebuilt: None)
    assert not loop.takes(discriminator)


def test_a_recorded_module_name_is_followed_only_to_the_recorded_file(tmp_path: Path) -> None:
    """``python -m trainer.train`` is recorded as the module; a bundle's word for it is checked against the file:
    a name that leads elsewhere (another file, ``os``, a path trick) gives no package root."""
    from pyadapter.replay.entry import package_root

    script = tmp_path / "trainer" / "train.py"
    script.parent.mkdir()
    script.write_text("x = 1\n")
    assert package_root(script, "trainer.train") == tmp_path.resolve()
    assert package_root(script, "train") == script.parent.resolve()
    for wrong in ("trainer.model", "os", "..trainer.train", "trainer/train", "import.train", "", None):
        assert package_root(script, wrong) is None, wrong


def test_a_rerun_origin_that_only_carried_the_batch_nan_is_not_taken_for_its_maker() -> None:
    """A NaN already in the data (tf.data from arrays in memory: no op records it) reaches the step as its ``data``
    argument; the re-run's scan may then name the first step op that read it (a Normalization's Sub). A Sub makes
    no NaN of finite values, so the NaN came in: the origin says it was in the data, and the cause is then ``data``.
    A Log in a Dataset.map function that made -inf of a 0 stays the maker."""
    from pyadapter.findings import Finding, Findings, Frame, InputHealth, OpRef, TensorHealth
    from pyadapter.replay.batchhealth import BatchProblem
    from pyadapter.replay.locate import _adopt_rerun_origin

    def adopt(op: str, graph: str, health: TensorHealth, call: Frame | None = None) -> Findings:
        made = Finding(
            "/work/train.py",
            36,
            "origin",
            OpRef(f"model/{op}", op, graph=graph),
            health=health,
            inputs=[
                InputHealth("data:0", None),
                InputHealth("mean:0", TensorHealth(dtype="float32", size=1, pos=1)),
            ],
        )
        findings = Findings("bundle", "/captures/run-step22", None, [], bundle={"step": 22})
        _adopt_rerun_origin(
            findings,
            Findings("dump", "/rerun", made, [made]),
            BatchProblem(1, examples=["x[28, 0] = nan"]),
            call,
        )
        return findings

    carried = adopt("Sub", "one_step_on_data", TensorHealth(dtype="float32", size=32, nan=1, pos=31))
    assert carried.bundle is not None and carried.bundle.get("origin_from") != "input pipeline re-run"
    assert (
        carried.origin is not None
        and "it was in the data before any TensorFlow op touched it" in carried.origin.message
    )
    # Which op of the step first took the value varied from one re-run to the next (the Normalization's Sub at
    # line 36, or the iterator at the fit line): a value carried in is marked where the data entered, the fit.
    fit = Frame("/work/train.py", 60, "<module>")
    at_fit = adopt("Sub", "one_step_on_data", TensorHealth(dtype="float32", size=32, nan=1, pos=31), fit)
    assert at_fit.origin is not None and (at_fit.origin.file, at_fit.origin.line) == ("/work/train.py", 60)
    assert "the first op to take it, Sub model/Sub at train.py:36, got 1 NaN" in at_fit.origin.message
    made = adopt("Log", "Dataset_map_preprocess", TensorHealth(dtype="float32", size=32, neg_inf=1, pos=31))
    assert made.bundle is not None and made.bundle["origin_from"] == "input pipeline re-run"
    # The argument of Keras's own map function (fit given arrays): what it was given, not tfdbg's names. It said
    # "op: args_1 (Placeholder) in graph Dataset_map_grab_batch" and "Placeholder args_1 brought 5 +inf (of 17000
    # values) in here", beside "the captured batch already holds 1".
    from pyadapter.findings_text import origin_lines

    entered = adopt(
        "Placeholder", "Dataset_map_grab_batch", TensorHealth(dtype="float32", size=17000, pos_inf=5)
    )
    assert entered.origin is not None
    said = (
        "(the re-run of the input pipeline under a dump found 5 +inf (of 17000 values) in what its map function "
        "grab_batch was given)"
    )
    assert said in entered.origin.message, entered.origin.message
    text = "\n".join(origin_lines(entered, none=""))
    assert "op: none: the arrays given to fit held it" in text and "in graph Dataset_map" not in text
    assert "Placeholder" not in text
    # A cross-validation loop re-run: the first grab_batch to hold the value was an earlier fold's predict (line
    # 88), and "the arrays given to fit held it" stood beside that line. The captured fit's call is the line.
    predicted = adopt(
        "Placeholder", "Dataset_map_grab_batch", TensorHealth(dtype="float32", size=2500, nan=2), fit
    )
    assert predicted.origin is not None and (predicted.origin.file, predicted.origin.line) == (
        "/work/train.py",
        60,
    )


def test_a_fit_call_is_read_as_data_and_matched_by_text_and_order_or_cell() -> None:
    """The bundle's ``fit_call`` (which fit of the program it came from): anything but a well-formed entry is
    None; a script's fit is matched by its line's text and how many fits that line began before it, a notebook's
    by text and cell (a kernel counts the fits of cells run again, a re-entry runs each cell once)."""
    from pyadapter.capture.fit_call import FitCall, FitCounter

    for bad in (
        None,
        [],
        {"code": ""},
        {"code": "fit()", "ordinal": -1},
        {"code": "fit()", "ordinal": True},
        {"code": "x" * 401, "ordinal": 0},
        {"code": "fit()", "ordinal": 0, "cell": "2"},
    ):
        assert FitCall.from_json(bad) is None, bad
    recorded = FitCall.from_json({"code": "model.fit(x, y)", "ordinal": 3})
    assert recorded is not None
    counter = FitCounter()
    folds = [counter.begin("model.fit(x, y)") for _ in range(5)]
    assert [recorded.same_fit(call) for call in folds if call] == [False, False, False, True, False]
    in_cell = FitCall("model.fit(x, y)", 2, cell=6)  # an older bundle: the cell alone tells
    assert in_cell.same_fit(FitCall("model.fit(x, y)", 1, cell=6))
    assert not in_cell.same_fit(FitCall("model.fit(x, y)", 2, cell=4))
    assert FitCall.from_json(in_cell.to_json()) == in_cell


def test_a_notebook_sweep_s_fits_are_told_apart_within_a_run_of_their_cell() -> None:
    """A cell ``for lr in [1e-3, 1e-2, 5.0]: ... model.fit(...)`` and the third fit diverges: the fit was matched by
    its cell alone, so the replay took over the first fit (lr=1e-3). Fits are counted per run of the cell (the
    kernel's execution count), which a re-entry runs once, so the third fit of the run is the one taken; a cell run
    again in the kernel starts counting again."""
    from pyadapter.capture.fit_call import FitCall, FitCounter

    kernel = FitCounter()
    first_run = [kernel.begin("model.fit(x, y)", cell=5, run=7) for _ in range(3)]
    again = [kernel.begin("model.fit(x, y)", cell=5, run=8) for _ in range(3)]  # the cell run again: In [8]
    recorded = FitCall.from_json(again[2].to_json() if again[2] else None)
    assert recorded is not None and recorded.ordinal == 2 and recorded.per_cell_run, recorded
    assert first_run[2] is not None and first_run[2].ordinal == 2
    reentry = FitCounter()
    sweep = [reentry.begin("model.fit(x, y)", cell=5, run=5) for _ in range(3)]
    assert [recorded.same_fit(call) for call in sweep if call] == [False, False, True]


def test_a_window_report_whose_captured_run_only_grew_says_so() -> None:
    """At the captured rate the window's loss passed the growth limit without going non-finite: the message said
    "it went non-finite at step None"."""
    from pyadapter.replay.window import WindowVerdict
    from pyadapter.replay.window_bundle import BundleWindowReport

    fixed = WindowVerdict(0.05, True, steps=9, steps_run=9)
    grew = WindowVerdict(3.0, False, steps=9, steps_run=9, grew_at=7)
    report = BundleWindowReport("b", 10, 18, 9, 0.05, "option", fixed, captured=grew)
    assert report.message() == (
        "the 9-step window stays finite at learning rate 0.05 (at the captured rate its loss passed 100x the first "
        "step's at step 7)"
    ), report.message()
    blew = WindowVerdict(3.0, False, steps=9, steps_run=4, first_non_finite_step=14)
    assert (
        report.__class__("b", 10, 18, 9, 0.05, "option", fixed, captured=blew)
        .message()
        .endswith("(at the captured rate it went non-finite at step 14)")
    )


def test_a_product_sum_fed_a_batch_that_holds_nan_carried_it_in() -> None:
    """The pipeline re-run's first NaN can be the first layer's MatMul, whose data input (the step's argument) has
    no recorded health: with the captured batch holding NaN, the MatMul carried it; it was named as an op's doing
    ("a MatMul op made NaN/Inf from finite inputs") in some runs and as the data in others."""
    from pyadapter.findings import Finding, InputHealth, OpRef, TensorHealth
    from pyadapter.replay.locate import _carried_in

    matmul = Finding(
        file="train.py",
        line=3,
        role="origin",
        op=OpRef(name="dense/MatMul", type="MatMul", graph="one_step_on_data"),
        health=TensorHealth(dtype="float32", size=8, nan=1),
        inputs=[InputHealth("data:0", None), InputHealth("dense/ReadVariableOp:0", TensorHealth(size=3))],
    )
    from pyadapter.replay.batchhealth import BatchProblem

    holds_nan = BatchProblem(total=1, nan=1, size=24)
    assert _carried_in(matmul, holds_nan)
    matmul.inputs[0] = InputHealth(
        "x:0", TensorHealth(size=24)
    )  # every input recorded finite: an overflow's NaN
    assert not _carried_in(matmul, holds_nan)


def test_the_window_reads_the_rate_a_notebook_cell_sets_now(tmp_path: Path) -> None:
    """`nanlens replay --window` replays at the rate the user's code sets now (the fix being checked); in a notebook
    that line is in a cell, whose text was never read, so a lowered rate in the cell was ignored."""
    import json

    from pyadapter.fixes.cause import learning_rate_on_line
    from pyadapter.replay.window_bundle import _source_text

    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": ["# MPG"]},
        {
            "cell_type": "code",
            "metadata": {},
            "execution_count": 1,
            "outputs": [],
            "source": ["import keras"],
        },
        {
            "cell_type": "code",
            "metadata": {},
            "execution_count": 2,
            "outputs": [],
            "source": [
                "x = 1\n",
                "model.compile(optimizer=keras.optimizers.SGD(learning_rate=1e-6), loss='mse')",
            ],
        },
    ]
    notebook = tmp_path / "mpg.ipynb"
    notebook.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    text = _source_text(str(notebook), 2)
    assert text is not None and learning_rate_on_line(text, 2) == pytest.approx(1e-6)
    assert _source_text(str(notebook), 7) is None


# ---- the input pipeline's re-run (no TensorFlow: the child is not started) ------------------------------------


def test_the_pipeline_re_run_runs_the_program_that_was_checked_not_its_namesake_in_the_recorded_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manifest may record its program relative (``train.py``) and a working folder (``sub``) that holds
    another ``train.py``: the check reads the one in nanlens's folder, so that one must be what the child runs."""
    import hashlib
    from dataclasses import dataclass, field

    from pyadapter.childproc import ChildRun
    from pyadapter.replay import rerun, trust

    @dataclass
    class Bundle:  # what rerun_entry_script reads of a CaptureBundle
        path: Path
        entry_script: Path | None
        manifest: dict = field(default_factory=dict)

    checked = tmp_path / "train.py"
    checked.write_text("print('the program the user keeps')\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "train.py").write_text("print('not checked by anyone')\n")
    record = {
        "path": "train.py",
        "sha256": hashlib.sha256(checked.read_bytes()).hexdigest(),
        "cwd": str(tmp_path / "sub"),
        "argv": ["train.py", "--epochs", "3"],
    }
    from pyadapter.capture.seal import sealed

    bundle = Bundle(tmp_path / "bundle", Path("train.py"), sealed({"entry_script": record}))  # the user's own
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(trust.TRUST_ENV, raising=False)
    monkeypatch.setattr(trust, "_trusted", set())
    started: list[tuple[list[str], str]] = []

    def run_python(args: list[str], cwd: str, **_: object) -> ChildRun:
        started.append((args, cwd))
        return ChildRun(0)

    monkeypatch.setattr(rerun, "run_python", run_python)
    rerun.rerun_entry_script(bundle, str(tmp_path / "dump"))
    [(args, cwd)] = started
    assert cwd == str(tmp_path / "sub")  # the recorded folder, inside the replay's own
    script, script_args = args[4], args[5:]
    assert (Path(cwd) / script).resolve() == checked.resolve()  # what the child opens, from its folder
    assert script_args == ["--epochs", "3"]


def test_the_route_gives_the_rebuilds_reason_without_its_advice_to_restructure() -> None:
    """A Trainer class that builds its model and guards a method: the rebuild fails ("defines no such objects at
    module level; build the model and optimizer at module level so replay can restore them") and the re-entry
    works. The route told the user to restructure a program the replay had just run as it is."""
    from pyadapter.replay.session import _short_reason

    bundle = "/w/captures/train_triplet-step4"
    failure = (
        f"{bundle}: the checkpoint holds model, optimizer, but /w/train_triplet.py defines no such objects at module "
        "level; build the model and optimizer at module level so replay can restore them"
    )
    assert _short_reason(failure, bundle) == (
        "the checkpoint holds model, optimizer, but /w/train_triplet.py defines no such objects at module level"
    )


def test_a_nan_only_the_dumped_graph_missed_is_not_put_down_to_graph_mode() -> None:
    """A Gaussian process's Cholesky of a matrix only just not positive definite: `locate --replay` said "The NaN
    reproduces only in eager mode: graph mode computes it differently", while `replay --graph` reproduced it. The
    dumped replay is the one that differs."""
    dumped = StepVerdict(
        mode="graph", loss=-2.6, loss_finite=True, gradients_finite=True, weights_finite=True
    )
    dumped.dumped = True
    eager = StepVerdict(mode="eager", loss=float("nan"), loss_finite=False)
    report = ReplayReport(bundle="b", entry_script="s", verdicts={"graph": dumped, "eager": eager})
    assert report.note is not None and "not in the dumped graph replay" in report.note, report.note
    assert "nanlens replay --graph" in report.note and "graph mode computes it differently" not in report.note
    dumped.dumped = False  # the plain graph replay stayed finite: then graph mode is what differs
    assert "only in eager mode" in (report.note or "")


def test_a_program_run_again_writes_no_tensorboard_events_through_any_summary_module(tmp_path: Path) -> None:
    """Keras 3's TensorBoard callback writes through ``import tensorflow.summary as summary``, a module of its own
    beside ``tf.summary``. The pipeline re-run of `nanlens locate`, where the program's callbacks run, wrote a second
    run's event files into the training's TensorBoard folder through it."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from pyadapter.replay.reentry import files_kept, scratch_files_for

    logs = tmp_path / "logs"
    with files_kept(scratch_files_for(tmp_path / "train.py", tmp_path), []):
        import tensorflow.summary as summary  # as keras/src/callbacks/tensorboard.py does

        for module in (summary, tf.summary):
            writer = module.create_file_writer(str(logs / module.__name__))
            with writer.as_default():
                tf.summary.scalar("loss", 1.0, step=0)
            writer.flush()
    assert not logs.exists() or not any(p.is_file() for p in logs.rglob("*")), sorted(logs.rglob("*"))
    # Put back afterwards: the user's own process writes again.
    import tensorflow.summary as summary

    writer = summary.create_file_writer(str(logs))
    with writer.as_default():
        tf.summary.scalar("loss", 1.0, step=0)
    writer.flush()
    assert any(p.name.startswith("events.out.tfevents") for p in logs.iterdir())


def test_a_random_draw_in_a_re_entered_notebook_is_named_by_its_cell(tmp_path):
    """A DCGAN notebook's replay said "RandomStandardNormal at cell15.py:8": the file a re-entry runs the notebook's
    16th cell from (under .nanlens/cells/), which the user never sees. It names the notebook's cell."""
    from types import SimpleNamespace

    from pyadapter.replay.reentry import cell_file
    from pyadapter.replay.stateful_random import _user_line

    notebook = tmp_path / "dcgan.ipynb"
    frame = SimpleNamespace(filename=str(cell_file(notebook, 15)), lineno=8)
    assert _user_line([frame]) == "dcgan.ipynb cell 16, line 8"
    script = SimpleNamespace(filename=str(tmp_path / "train.py"), lineno=3)
    assert _user_line([script]) == "train.py:3"


def test_a_step_returning_its_trackers_shows_the_loss_it_differentiated() -> None:
    """A beta-VAE's ``train_step`` returns ``{"total_loss": ..., "kl_loss": ...}``, its trackers' running means: the
    replay showed "loss -2.50488e+18", a tracker's value, where the loss the tape differentiated (and the guard's
    history holds) was -5.01e+18."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf

    from pyadapter.replay.step import StepProgram, run_step

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    tracker = keras.metrics.Mean(name="kl_loss")  # never updated: its result stays 0

    def train_step(data: tf.Tensor) -> dict[str, tf.Tensor]:
        with tf.GradientTape() as tape:
            total_loss = tf.reduce_mean(model(data)) * 0.0 - 7.5
        grads = tape.gradient(total_loss, model.trainable_variables)
        model.optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return {"kl_loss": tracker.result()}

    model.optimizer.build(model.trainable_variables)
    program = StepProgram(
        step=train_step,
        args=(tf.ones((4, 2)),),
        state=[*model.variables, *model.optimizer.variables],
        trainable=list(model.trainable_variables),
        optimizers=[model.optimizer],
    )
    program.snapshot()
    for mode in ("graph", "eager"):
        assert run_step(program, mode).loss == pytest.approx(-7.5), mode


def test_a_re_entered_notebook_that_fails_before_training_names_its_cell_not_its_cell_file(
    tmp_path: Path,
) -> None:
    """A re-entry runs notebook cells from files of its own: its error read "(at cell1.py:1)", a name the user never
    saw, where the notebook's second cell is "cell 2"."""
    from pyadapter.replay.cell_files import cell_file
    from pyadapter.replay.reentry import _where

    notebook = tmp_path / "house_prices.ipynb"
    notebook.write_text("{}", encoding="utf-8")
    target = cell_file(notebook, 1)
    target.parent.mkdir(parents=True)
    target.write_text("x = 1\nraise NotImplementedError('no')\n", encoding="utf-8")
    try:
        exec(compile(target.read_text(), str(target), "exec"), {})  # noqa: S102 - the test's own two lines
    except NotImplementedError as exc:
        assert _where(exc) == " (at house_prices.ipynb cell 2, line 2)"
    script = tmp_path / "train.py"
    try:
        exec(compile("raise ValueError('x')\n", str(script), "exec"), {})  # noqa: S102 - the test's own line
    except ValueError as exc:
        assert _where(exc) == " (at train.py:1)"


# ---- what the re-run of an input pipeline found (no TensorFlow) --------------------------------------------------


def test_an_inf_the_batch_brought_is_carried_not_made_by_the_first_op_that_took_it() -> None:
    """A target of np.log(0) (-inf) fed through from_tensor_slices: the re-run's first op to hold it was the MSE's
    Sub, whose other input (the batch) has no recorded health. It was taken as "made by user code" (an Inf-only
    output was never "carried"), and the cause read "a Sub op overflowed on finite inputs"."""
    from pyadapter.findings import Finding, InputHealth, OpRef, TensorHealth
    from pyadapter.replay.batchhealth import BatchProblem
    from pyadapter.replay.locate import _carried_in

    sub = Finding(
        file="claims.py",
        line=60,
        role="origin",
        op=OpRef(name="compile_loss/mse/sub", type="Sub", graph="one_step_on_data"),
        health=TensorHealth(size=128, neg_inf=2),
        inputs=[InputHealth("sequential_1/dense_2_1/Add:0", TensorHealth(size=128)), InputHealth("args_1:0")],
    )
    with_inf = BatchProblem(total=2, neg_inf=2, size=768)
    assert _carried_in(sub, with_inf)
    # A batch that holds NaN only did not bring an Inf: the Sub's Inf is an overflow of its own.
    assert not _carried_in(sub, BatchProblem(total=2, nan=2, size=768))
    # Nor does an op whose every input's health was recorded carry in what the batch held.
    recorded = Finding(**{**sub.__dict__, "inputs": [InputHealth("a:0", TensorHealth(size=128))]})
    assert not _carried_in(recorded, with_inf)


def test_a_notebook_re_entry_goes_past_a_cell_whose_import_fails_as_the_kernel_did(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tutorial's ``import seaborn as sns`` raised in the kernel, which went on and trained in later cells; the
    replay stopped there: "failed before its first training step: ModuleNotFoundError" (s41c p1). It goes past such
    a cell now, and says so; a caller that lists nothing still gets the error, and a later cell's own error stays
    the error."""
    import json

    from pyadapter.replay.reentry import run_notebook

    def notebook(*sources: str) -> Path:
        cells = [
            {"cell_type": "code", "metadata": {}, "execution_count": n, "outputs": [], "source": [text]}
            for n, text in enumerate(sources, 1)
        ]
        path = tmp_path / "tutorial.ipynb"
        path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
        return path

    monkeypatch.chdir(tmp_path)
    path = notebook("import not_installed_plotting_lib_xyz as sns", "open('ran.txt', 'w').write('yes')")
    went_past: list[str] = []
    run_notebook(path, [], None, went_past)
    assert (tmp_path / "ran.txt").read_text() == "yes"
    assert len(went_past) == 1 and "No module named 'not_installed_plotting_lib_xyz'" in went_past[0], (
        went_past
    )
    with pytest.raises(ImportError):
        run_notebook(path, [], None)
    path = notebook("import not_installed_plotting_lib_xyz as sns", "sns.set()", "x = 1")
    with pytest.raises(NameError):
        run_notebook(path, [], None, [])


def test_gradients_of_variables_with_one_name_are_counted_once_as_training_counts_them() -> None:
    """A GP's three unnamed tf.Variables are "Variable" each (s42d p5): training's report names a gradient once, 1,
    and the dumped re-run's 3 were put down to fused MatMul and ReLU kernels in a program with neither."""
    dumped = StepVerdict(
        "graph", loss=float("nan"), loss_finite=False, non_finite_gradients=["Variable"] * 3, dumped=True
    )
    dumped.gradients_finite = False
    report = ReplayReport("b", "gp.py", captured_gradients=1, verdicts={"graph": dumped})
    assert report.note is None, report.note
    eager = StepVerdict("eager", loss=float("nan"), loss_finite=False, non_finite_gradients=["Variable"] * 3)
    eager.gradients_finite = False
    assert ReplayReport("b", "gp.py", captured_gradients=1, verdicts={"eager": eager}).note is None
