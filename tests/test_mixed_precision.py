"""Mixed precision: a ``mixed_float16`` model, whose optimizer ``compile`` wrapped in a LossScaleOptimizer, is
captured and replayed with its whole optimizer state (the loss scale and its counter, the inner optimizer's
iterations and slots), and the replayed step is the training's step bit for bit.

tests/programs/mixed_precision_fit.py trains under NanGuard until a float16 ``exp`` overflows, and records the
model and optimizer values as the last two steps began. It sets the policy inside ``main``, so the replay
process never sets it: the model must come back mixed-precision, with its LossScaleOptimizer, from the bundle.
The zoo program (tests/zoo/zoo_mixed_precision_softmax_overflow.py) sets it at module level.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow

PROGRAM = Path(__file__).parent / "programs" / "mixed_precision_fit.py"
ZOO_PROGRAM = Path(__file__).parent / "zoo" / "zoo_mixed_precision_softmax_overflow.py"
KERAS_SKIP = "Skipping variable loading"


def quiet_env(**extra: str) -> dict[str, str]:
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **extra)


@dataclass(frozen=True)
class Training:
    bundle: Path
    recorded: dict[
        str, dict[str, np.ndarray]
    ]  # "before" / "failing" -> variable path -> value as the step began
    batches: dict[str, tuple[np.ndarray, np.ndarray]]  # "before" / "failing" -> (x, y)


def only_bundle(capture_dir: Path, output: str) -> Path:
    bundles = (
        [p for p in capture_dir.iterdir() if (p / "manifest.json").is_file()] if capture_dir.is_dir() else []
    )
    assert len(bundles) == 1, f"expected one bundle in {capture_dir}, output:\n{output[-3000:]}"
    return bundles[0]


@pytest.fixture(scope="module")
def training(tmp_path_factory: pytest.TempPathFactory) -> Training:
    root = tmp_path_factory.mktemp("mixed-precision")
    out = root / "recorded.npz"
    done = subprocess.run(
        [sys.executable, str(PROGRAM), str(root / "captures"), str(out)],
        capture_output=True,
        text=True,
        env=quiet_env(),
        timeout=300,
        cwd=root,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    with np.load(out) as saved:
        paths = [str(p) for p in saved["paths"]]
        recorded = {
            tag: {p: saved[f"{tag}/{i:03d}"] for i, p in enumerate(paths)} for tag in ("before", "failing")
        }
        batches = {tag: (saved[f"{tag}_x"], saved[f"{tag}_y"]) for tag in ("before", "failing")}
        assert int(saved["failing_batch"]) == int(saved["before_batch"]) + 1
    return Training(only_bundle(root / "captures", done.stderr), recorded, batches)


def nanlens_replay(bundle: Path) -> tuple[dict, str]:
    done = subprocess.run(
        [sys.executable, "-m", "pyadapter", "replay", str(bundle), "--json"],
        capture_output=True,
        text=True,
        env=quiet_env(),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    return json.loads(done.stdout), done.stderr


def test_the_bundle_holds_the_loss_scale_and_the_inner_optimizer_state(training: Training) -> None:
    from pyadapter import CaptureBundle

    bundle = CaptureBundle.load(training.bundle)
    assert bundle.model_info["loss_scale_optimizer"] is True
    assert (
        bundle.model_info["inner_optimizer"] == "Adam"
    )  # whose usual rate a rate far too high is told against
    assert bundle.saved_dtype_policy_name() == "mixed_float16"
    weights = bundle.weights()
    scale = float(weights["loss_scale_optimizer/dynamic_scale"])
    assert scale in {2.0**k for k in range(16)}, "Keras starts at 2**15 and halves on overflowing gradients"
    assert "loss_scale_optimizer/step_counter" in weights
    assert 0 < int(weights["adam/iteration"]) <= bundle.step  # steps the loss scale skipped did not count
    slots = [p for p in weights if p.endswith(("_momentum", "_velocity"))]
    assert len(slots) == 2 * 5, "Adam's two slots for each of the 5 trainable variables"
    # Every captured value is the value the variable held as the failing step began, bit for bit.
    assert set(weights) == set(training.recorded["failing"])
    for path, value in weights.items():
        assert np.array_equal(value, training.recorded["failing"][path]), path
    x, y = bundle.batch()
    assert np.array_equal(x, training.batches["failing"][0]) and np.array_equal(
        y, training.batches["failing"][1]
    )


def test_nanlens_replay_reproduces_the_step_without_skipping_optimizer_state(training: Training) -> None:
    report, stderr = nanlens_replay(training.bundle)
    assert report["reproduced"] == {"graph": True, "eager": True}
    assert KERAS_SKIP not in stderr
    assert report["warnings"] == []
    for verdict in report["verdicts"].values():
        assert verdict["loss_finite"] is False and verdict["error"] is None
        # The LossScaleOptimizer skipped the update itself (non-finite scaled gradients are its business).
        assert verdict["weights_finite"] is True


def test_the_rebuilt_step_is_the_training_step_bit_for_bit(training: Training) -> None:
    import keras

    from pyadapter.capture.reader import CaptureBundle
    from pyadapter.replay.rebuild import rebuild, to_tensors
    from pyadapter.replay.state import assign_captured_state
    from pyadapter.replay.step import run_step

    policy = keras.config.dtype_policy().name
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rebuilt = rebuild(training.bundle)
    assert not [w for w in caught if KERAS_SKIP in str(w.message)]
    assert rebuilt.warnings == []
    assert keras.config.dtype_policy().name == policy, "the saved policy is global only while the model loads"
    program = rebuilt.program
    (optimizer,) = program.optimizers
    assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    model = program.step.__self__
    assert model.dtype_policy.name == "mixed_float16"

    # Every model and optimizer variable (the loss scale, its counter, the inner Adam's iterations and slots)
    # holds its captured value; the loaded optimizer names its slots differently, so compare in capture order.
    captured = CaptureBundle.load(training.bundle).weights()
    assert len(program.state) == len(captured)
    for variable, (path, value) in zip(program.state, captured.items(), strict=True):
        assert np.array_equal(variable.numpy(), value), f"{variable.path} != captured {path}"
    assert float(optimizer.dynamic_scale.numpy()) == float(captured["loss_scale_optimizer/dynamic_scale"])
    assert int(optimizer.step_counter.numpy()) == int(captured["loss_scale_optimizer/step_counter"])
    assert int(optimizer.inner_optimizer.iterations.numpy()) == int(captured["adam/iteration"])

    # The step before the failing one, from the values the training had as it began, on its batch: the loss is
    # the one training computed, and the model and optimizer end exactly where training put them (the captured
    # state), loss scale bookkeeping included.
    assert assign_captured_state(training.recorded["before"], model, [optimizer]) == []
    step = rebuilt.bundle.step
    (computed,) = [h["loss"] for h in rebuilt.bundle.loss_history if h["step"] == step - 1]
    captured_args = program.args
    program.args = (to_tensors(training.batches["before"]),)
    assert program.before_run is not None
    program.before_run()
    verdict = run_step(program, "graph", restore=False)
    assert verdict.loss == computed and verdict.loss_finite
    for variable, (path, value) in zip(program.state, captured.items(), strict=True):
        assert np.array_equal(variable.numpy(), value), f"{path} differs after the replayed step"

    # The failing step itself, from the captured state: NaN loss, and the LossScaleOptimizer skips the update as it
    # did in training (the scale halves, its counter restarts, no weight moves).
    program.args = captured_args
    verdict = run_step(program, "graph")
    assert verdict.loss_finite is False
    assert float(optimizer.dynamic_scale.numpy()) == float(captured["loss_scale_optimizer/dynamic_scale"]) / 2
    assert int(optimizer.step_counter.numpy()) == 0
    for variable, (path, value) in zip(model.variables, captured.items(), strict=False):
        assert np.array_equal(variable.numpy(), value), path


def test_assign_captured_state_fills_objects_a_program_just_built(training: Training) -> None:
    """The captured state goes into a model and optimizer built anew (unbuilt optimizer, other names)."""
    import keras

    from pyadapter.capture.reader import CaptureBundle
    from pyadapter.replay.state import assign_captured_state

    spec = importlib.util.spec_from_file_location("mixed_precision_fit_objects", PROGRAM)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    captured = CaptureBundle.load(training.bundle).weights()
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_float16")
    try:

        def build(units: int) -> keras.Model:
            model = keras.Sequential(
                [
                    keras.Input(shape=(module.TIME_STEPS, module.FEATURES)),
                    keras.layers.Dense(units, activation="relu"),
                    module.AttentionPooling(),
                    keras.layers.Dense(1, dtype="float32"),
                ]
            )
            model.compile(optimizer=keras.optimizers.Adam(0.02), loss="mse")
            return model

        build(16)  # another model first: this process names the next one's variables differently
        model = build(16)
    finally:
        keras.config.set_dtype_policy(previous)
    optimizer = model.optimizer
    assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer) and not optimizer.built
    assert model.variables[0].path != "sequential/dense/kernel"  # matched in order, not by path

    assert assign_captured_state(captured, model, [optimizer]) == []
    assert optimizer.built and optimizer.inner_optimizer.built
    live = [*model.variables, *optimizer.variables]
    assert len(live) == len(captured)
    for variable, (path, value) in zip(live, captured.items(), strict=True):
        assert np.array_equal(variable.numpy(), value), f"{variable.path} != captured {path}"

    # Objects that do not fit the capture keep their values, and the warning says so.
    other = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(2)])
    other.compile(optimizer="sgd", loss="mse")
    kernel = other.layers[0].kernel.numpy()
    (warning,) = assign_captured_state(captured, other, [other.optimizer])
    assert "have no captured value" in warning
    assert np.array_equal(other.layers[0].kernel.numpy(), kernel)


def test_the_zoo_program_trains_at_module_level_and_its_bundle_replays(tmp_path: Path) -> None:
    source = ZOO_PROGRAM.read_text(encoding="utf-8")
    assert 'if __name__ == "__main__"' not in source, (
        "the zoo program trains at module level, as users write it"
    )
    capture_dir = tmp_path / "captures"
    done = subprocess.run(
        [sys.executable, str(ZOO_PROGRAM)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=quiet_env(NANLENS_CAPTURE_DIR=str(capture_dir)),
    )
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-3000:]
    assert "zoo: training went non-finite" in done.stdout
    bundle = only_bundle(capture_dir, done.stderr)

    from pyadapter import CaptureBundle

    weights = CaptureBundle.load(bundle).weights()
    assert {
        "loss_scale_optimizer/dynamic_scale",
        "loss_scale_optimizer/step_counter",
        "adam/iteration",
    } <= set(weights)
    report, stderr = nanlens_replay(bundle)
    assert report["route"].startswith("replayed by re-entry"), report["route"]  # it trains at module level
    assert report["reproduced"] == {"graph": True, "eager": True}
    assert KERAS_SKIP not in stderr
    assert report["warnings"] == []
