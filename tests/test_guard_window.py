"""The guard's window (issue 16), end to end with real TensorFlow/Keras: a diverging program trains under NanGuard
(default ``window=16``) until it goes non-finite; the bundle must hold the window (the state copy and the batches
since), the guard must have found the largest learning rate that keeps the window finite (the captured rate
failing), its stop message must print the cause, and "Verify fix" (``nanlens replay BUNDLE --window``, the
server's worker) must replay the window finite after the quick fix and non-finite at the captured rate.

The zoo's divergence programs (``# CAUSE: divergence``) must all get a window and a finite learning rate.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from pyadapter.capture.window import read_window
from pyadapter.cause import Cause
from pyadapter.fixes import apply_edits, cause_fixes
from pyadapter.server.verify import run_replay, window_verdict_of

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "tests" / "programs"
ZOO = ROOT / "tests" / "zoo"


def environment() -> dict[str, str]:
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", NANLENS_CAPTURE_DIR="captures")


def train(folder: Path, program: Path, *args: str) -> tuple[Path, Path, str]:
    """Copy the program into `folder`, run it there as a user would; (its copy, the one bundle, stderr)."""
    folder.mkdir(parents=True, exist_ok=True)
    local = folder / program.name
    shutil.copy(program, local)
    done = subprocess.run(
        [sys.executable, str(local), *args],
        cwd=folder,
        capture_output=True,
        text=True,
        env=environment(),
        timeout=600,
    )
    captures = folder / "captures"
    bundles = [p for p in captures.iterdir() if (p / "manifest.json").is_file()] if captures.is_dir() else []
    assert len(bundles) == 1, done.stdout[-2000:] + done.stderr[-3000:]
    return local, bundles[0], done.stderr


def manifest(bundle: Path) -> dict:
    return json.loads((bundle / "manifest.json").read_text())


def nanlens(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pyadapter", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=environment(),
        timeout=600,
    )


@pytest.fixture(scope="module")
def diverged(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    folder = tmp_path_factory.mktemp("divergence")
    program, bundle, stderr = train(folder, PROGRAMS / "cause_divergence.py", "captures")
    return SimpleNamespace(folder=folder, program=program, bundle=bundle, stderr=stderr)


@pytest.mark.slow
def test_the_bundle_holds_the_window_and_the_guard_found_a_finite_learning_rate(
    diverged: SimpleNamespace,
) -> None:
    window = manifest(diverged.bundle)["window"]
    assert window["size"] == 16
    assert window["end_step"] == manifest(diverged.bundle)["step"]
    assert window["steps"] == window["end_step"] - window["start_step"] + 1 >= 2
    assert (diverged.bundle / "window" / "state.npz").is_file()
    assert (diverged.bundle / "window" / "batches.npz").is_file()
    search = window["search"]
    captured = search["captured_learning_rate"]
    assert captured == pytest.approx(7e-5)
    first = search["trials"][0]
    # The window replayed at the captured rate diverges again: non-finite, or its loss past 100x its first step's.
    assert first["learning_rate"] == pytest.approx(captured) and not first["finite"]
    stopped = first["first_non_finite_step"] or first["loss_grew_at_step"]
    assert window["start_step"] < stopped <= window["end_step"]
    assert 0 < search["largest_finite_learning_rate"] < captured
    # A window of 16 steps (the default) shows a rate stays finite that long: a tenth of its largest is suggested.
    assert search["suggested_learning_rate"] == pytest.approx(search["largest_finite_learning_rate"] / 10)
    assert any(t["finite"] for t in search["trials"])
    # Read back through the bundle reader: the state by variable path, one batch per step.
    from pyadapter.capture.bundle import CaptureBundle

    data = read_window(CaptureBundle.load(diverged.bundle))
    assert data is not None and data.steps == window["steps"]
    assert any(path.endswith("learning_rate") for path in data.state)
    x, y = data.batches[-1]
    assert x.shape == (32, 6) and y.shape == (32, 1)


@pytest.mark.slow
def test_the_stop_message_prints_the_cause(diverged: SimpleNamespace) -> None:
    lines = [line for line in diverged.stderr.splitlines() if line.startswith("NanGuard: cause: ")]
    assert len(lines) == 1, diverged.stderr[-3000:]
    assert "divergence: the run diverged at learning rate 7e-5" in lines[0]
    assert "cause_divergence.py:30" in lines[0] and "largest finite over the" in lines[0]


@pytest.mark.slow
def test_the_quick_fix_proposes_the_searched_rate_and_verify_replays_the_window_finite(
    diverged: SimpleNamespace,
) -> None:
    located = nanlens("locate", str(diverged.bundle), "--json", cwd=diverged.folder)
    assert located.returncode == 0, located.stderr[-3000:]
    cause = Cause.from_json(json.loads(located.stdout)["cause"])
    assert cause is not None and cause.kind == "divergence"
    suggested = cause.evidence["window"]["suggested_learning_rate"]
    assert "largest finite over the" in cause.change.what
    source = diverged.program.read_text()
    fixes = cause_fixes(source, cause)
    assert fixes and fixes[0].preferred and "largest finite over the" in fixes[0].title, [
        f.title for f in fixes
    ]
    fixed = apply_edits(source, fixes[0].edits)
    assert "learning_rate=7e-5" not in fixed
    diverged.program.write_text(fixed)
    try:
        run = run_replay(
            str(diverged.bundle), cwd=str(diverged.folder), trust=[str(diverged.program)], window=True
        )
    finally:
        diverged.program.write_text(source)
    answer = window_verdict_of(run)
    assert answer["verified"], answer["message"]
    report = answer["window"]
    assert report["learning_rate"] == pytest.approx(suggested, rel=0.02)
    assert (
        report["learning_rate_from"].startswith("source ")
        and "cause_divergence.py:30" in report["learning_rate_from"]
    )
    assert report["verdict"]["steps_run"] == report["window"]["steps"]
    # The same window at the captured rate still goes non-finite: the fix, not the replay, made it finite.
    assert report["captured"]["finite"] is False
    # It goes non-finite at a step, or its loss passes the limit first (before, the latter read "non-finite at step
    # None").
    captured = report["captured"]
    said = (
        f"went non-finite at step {captured['first_non_finite_step']})"
        if captured["first_non_finite_step"] is not None
        else f"its loss passed 100x the first step's at step {captured['loss_grew_at_step']})"
    )
    assert "stays finite" in answer["message"] and said in answer["message"], answer["message"]


@pytest.mark.slow
def test_a_rate_that_is_still_too_high_is_not_verified(diverged: SimpleNamespace) -> None:
    done = nanlens(
        "replay", str(diverged.bundle), "--window", "--learning-rate", "1e-4", "--json", cwd=diverged.folder
    )
    assert done.returncode == 0, done.stderr[-3000:]  # 0: the NaN came back
    report = json.loads(done.stdout)
    assert report["finite"] is False and report["learning_rate_from"] == "option"
    stopped = report["verdict"]["first_non_finite_step"] or report["verdict"]["loss_grew_at_step"]
    assert report["window"]["start_step"] < stopped <= report["window"]["end_step"]
    assert "window" in report["message"] and (
        "non-finite" in report["message"] or "diverges" in report["message"]
    )


@pytest.mark.slow
def test_window_options_without_window_are_refused_in_one_line(diverged: SimpleNamespace) -> None:
    done = nanlens("replay", str(diverged.bundle), "--learning-rate", "1e-4", cwd=diverged.folder)
    assert done.returncode == 2
    assert (
        done.stderr.strip().splitlines()[-1]
        == "nanlens: error: --learning-rate and --find-learning-rate go with --window"
    )


@pytest.mark.slow
def test_copies_that_cost_more_than_the_steps_are_spaced_out_and_the_window_still_holds_the_steps(
    tmp_path: Path,
) -> None:
    # A large embedding table (64 MB) trained by plain SGD: each step updates only the rows its batch looks up, so
    # steps are cheap while a copy of the state is not; copies 16 steps apart would be a large share of this run's
    # time. The guard times them and spaces them out, to 4 x 16 steps at least (further where steps take under
    # SPACING_SECONDS / 64: a machine whose steps took 40 ms here stopped at 64, one whose took milliseconds went
    # past it). Its first copies (train begin, then 16 and 32 steps in, until two are timed) are the window at
    # step 150.
    _, bundle, _ = train(tmp_path, PROGRAMS / "sparse_embedding_bad_label.py", "captures")
    window = manifest(bundle)["window"]
    assert window["size"] == 16 and window["copy_every"] >= 64, window
    assert window["end_step"] == manifest(bundle)["step"] == 150
    # The older copy is at least 16 steps back and every batch since is in the bundle.
    assert 16 < window["steps"] <= 151 and window["steps"] == window["end_step"] - window["start_step"] + 1
    from pyadapter.capture.bundle import CaptureBundle

    data = read_window(CaptureBundle.load(bundle))
    assert data is not None and data.steps == window["steps"]
    assert any("embedding" in path for path in data.state)
    assert np.isnan(data.batches[-1][1]).any()  # the failing batch, bad label included


@pytest.mark.slow
def test_a_frozen_pretrained_table_is_not_copied_and_the_window_still_holds_it(tmp_path: Path) -> None:
    # A 64 MB pretrained embedding frozen under a small head: the window copies the head and its optimizer state
    # (kilobytes), not the table, so it holds no 2 x 64 MB; the bundle's window state still has the table, read
    # from the variable when the bundle was written (it cannot have changed).
    _, bundle, _ = train(tmp_path, PROGRAMS / "frozen_embedding_bad_label.py", "captures")
    window = manifest(bundle)["window"]
    assert window["end_step"] == manifest(bundle)["step"] == 150
    assert window["memory_bytes"] < 8 << 20, window  # two copies of the table alone would be 128 MB
    from pyadapter.capture.bundle import CaptureBundle

    loaded = CaptureBundle.load(bundle)
    data = read_window(loaded)
    assert data is not None and data.steps == window["steps"] == window["end_step"] - window["start_step"] + 1
    (path,) = [path for path in data.state if "embedding" in path]
    assert data.state[path].shape == (1_000_000, 16)
    np.testing.assert_array_equal(data.state[path], loaded.weights()[path])  # frozen: as at the failing step


def test_a_bundle_without_a_window_reads_as_none() -> None:
    # Bundles from before the window (or window=0) have no "window" entry: replay as before.
    assert read_window(SimpleNamespace(manifest={"files": {}}, path=Path("."))) is None


ZOO_DIVERGENCE = sorted(p for p in ZOO.glob("zoo_*.py") if "# CAUSE: divergence" in p.read_text())


@pytest.fixture(scope="module")
def zoo_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    root = tmp_path_factory.mktemp("zoo-window")

    def one(program: Path) -> tuple[str, tuple[Path, str]]:
        _, bundle, stderr = train(root / program.stem, program)
        return program.stem, (bundle, stderr)

    with ThreadPoolExecutor(2) as pool:  # two cores
        return dict(pool.map(one, ZOO_DIVERGENCE))


@pytest.mark.slow
@pytest.mark.parametrize("program", [p.stem for p in ZOO_DIVERGENCE])
def test_zoo_divergence_gets_a_window_and_a_finite_learning_rate(
    zoo_runs: dict[str, tuple[Path, str]], program: str
) -> None:
    assert len(ZOO_DIVERGENCE) >= 3
    bundle, stderr = zoo_runs[program]
    window = manifest(bundle).get("window")
    assert window is not None, stderr[-3000:]
    search = window["search"]
    assert not search["trials"][0]["finite"], search  # the captured rate fails over the window
    assert 0 < search["largest_finite_learning_rate"] < search["captured_learning_rate"], search
    assert "NanGuard: cause: divergence" in stderr


@pytest.mark.slow
def test_a_custom_loop_keeps_a_window_too_and_its_verify_replays_it(tmp_path: Path) -> None:
    program, bundle, stderr = train(tmp_path, PROGRAMS / "loop_divergence.py", "captures")
    assert "NanGuard: cause: divergence" in stderr, stderr[-3000:]
    window = manifest(bundle)["window"]
    search = window["search"]
    assert window["steps"] == window["end_step"] - window["start_step"] + 1 >= 2
    assert not search["trials"][0]["finite"]
    suggested = search["suggested_learning_rate"]
    assert 0 < suggested < search["captured_learning_rate"] == pytest.approx(3e-4)
    # The program trains at module level: the window is replayed by re-entry, at the rate the guard proposed.
    done = nanlens(
        "replay", str(bundle), "--window", "--learning-rate", str(suggested), "--json", cwd=tmp_path
    )
    assert done.returncode == 1, done.stderr[-3000:]  # 1: the window stayed finite
    report = json.loads(done.stdout)
    assert report["finite"] is True and report["captured"]["finite"] is False
    assert "re-entry" in report["route"]


def test_the_quick_fix_proposes_half_the_largest_finite_rate_and_a_tenth_without_a_window() -> None:
    from pyadapter.cause import Change
    from pyadapter.fixes.cause import learning_rate_on_line

    source = "import keras\n\noptimizer = keras.optimizers.SGD(learning_rate=0.02, momentum=0.9)\n"
    change = Change("train.py", 3, "the learning rate", target="optimizer")
    window = {"steps": 40, "largest_finite_learning_rate": 3.1e-3, "suggested_learning_rate": 1.55e-3}
    searched = cause_fixes(source, Cause("divergence", "diverged", {"window": window}, change))
    assert (
        searched[0].title
        == "lower the learning rate to 0.00155 (largest finite over the 40-step window: 0.0031)"
    )
    # A 16-step window (the default), from a bundle written before the tenth: a tenth of its largest.
    short = {"steps": 16, "largest_finite_learning_rate": 3.1e-3, "suggested_learning_rate": 1.55e-3}
    title = cause_fixes(source, Cause("divergence", "diverged", {"window": short}, change))[0].title
    assert title == "lower the learning rate to 3.1e-4 (largest finite over the 16-step window: 0.0031)", (
        title
    )
    fixed = apply_edits(source, searched[0].edits)
    assert "SGD(learning_rate=0.00155, momentum=0.9)" in fixed
    # What "Verify fix" replays the window at: the rate the edited line sets now.
    assert learning_rate_on_line(fixed, 3) == pytest.approx(1.55e-3)
    blind = cause_fixes(source, Cause("divergence", "diverged", {}, change))
    assert blind[0].title == "lower the learning rate to 0.002 (a tenth of 0.02)"


def test_a_state_too_large_for_two_copies_turns_the_window_off_and_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The copies live where the variables do (a GPU's memory): past the budget the window is off, said once, and
    training goes on without it; within the budget the same state is copied."""
    import tensorflow as tf

    from pyadapter.capture.window import MAX_BYTES_ENV, WindowKeeper

    state = [tf.Variable(tf.zeros([1000])), tf.Variable(tf.zeros([24]))]  # 4096 bytes
    monkeypatch.setenv(MAX_BYTES_ENV, str(2 * 4096 - 1))
    keeper = WindowKeeper(4, lambda: state)
    keeper.start(0)
    for step in range(10):
        keeper.after_step(step, ())
    assert not keeper.enabled and keeper.window_for(10) is None
    said = capsys.readouterr().err
    assert said.count("window off") == 1, said
    assert "two copies of the training state would take 8 KB (more than 8 KB)" in said
    assert MAX_BYTES_ENV in said and "window=0" in said

    monkeypatch.setenv(MAX_BYTES_ENV, str(2 * 4096))
    fits = WindowKeeper(4, lambda: state)
    fits.start(0)
    for step in range(5):
        fits.after_step(step, ())
    assert fits.enabled and fits.window_for(5) is not None
    assert "window off" not in capsys.readouterr().err


def test_frozen_weights_are_not_copied_and_a_window_is_dropped_when_one_changed_anyway() -> None:
    """Frozen weights (a pretrained table under a trained head) are read from the variable when the window is
    written, not copied every N steps; that is right only while they do not change, so the keeper checks: one that
    changed anyway (a custom layer assigning to its own frozen weight) leaves the window out with one line saying
    why, and is copied from the next window on."""
    import tensorflow as tf

    from pyadapter.capture.window import WindowError, WindowKeeper

    table = tf.Variable(tf.random.normal([500, 8]), name="table")  # frozen
    head = tf.Variable(tf.zeros([8]), name="head")
    keeper = WindowKeeper(4, lambda: [table, head], frozen=lambda: [table])
    keeper.start(0)
    for step in range(6):
        head.assign_add(tf.ones([8]))
        keeper.after_step(step, ())
    found = keeper.window_for(6)
    assert found is not None
    copy, _ = found
    assert keeper.memory_bytes() == 2 * 8 * 4  # two copies of the head only
    values = keeper.state_values(copy)
    np.testing.assert_array_equal(values[0], table.numpy())  # the frozen table, as it is (and was)
    assert values[1][0] == copy.step  # the head as the copy's step found it

    table.assign_add(tf.ones([500, 8]) * 1e-3)  # "frozen", and yet changed
    with pytest.raises(WindowError, match="frozen weights changed during training \\(table"):
        keeper.window_for(6)
    keeper.start(6)  # the next window copies the table too
    for step in range(6, 12):
        keeper.after_step(step, ())
    assert keeper.window_for(12) is not None
    assert keeper.memory_bytes() == 2 * (500 * 8 + 8) * 4


def empty_window(optimizers: list) -> Any:
    """A window of no steps over `optimizers`: what its learning-rate logic sees, with nothing to run."""
    from pyadapter.replay.window import WindowRun

    return WindowRun(
        step=lambda: None, calls=[], start_step=0, state=[], values=[], trainable=[], optimizers=optimizers
    )


def test_two_optimizers_one_on_a_schedule_are_not_searched_by_the_other_s_rate() -> None:
    """An autoencoder's SGD on a CosineDecay warm-up beside a head's constant Adam: the window search scaled the
    Adam rate (the only variable one) and said "no learning rate down to 2.44e-7 kept the window finite", a search
    of the optimizer that did not diverge. With a schedule among the optimizers there is no rate to scale."""
    import keras

    scheduled = keras.optimizers.SGD(
        keras.optimizers.schedules.CosineDecay(0.0, 100, warmup_target=5.0, warmup_steps=60)
    )
    constant = keras.optimizers.Adam(1e-3)
    run = empty_window([scheduled, constant])
    assert run.captured_rates() == [] and run.captured_learning_rate is None
    assert run.search().stopped == (
        "the learning rate of SGD is a schedule (CosineDecay), which the window replays as written: not searched"
    )
    assert empty_window([]).search().stopped == (
        "the step updates its weights itself, with no optimizer whose rate the window can set: not searched"
    )
    both = empty_window([keras.optimizers.SGD(0.02), constant])
    assert [rate for _, rate in both.captured_rates()] == pytest.approx([0.02, 1e-3])


def test_a_window_finite_at_the_captured_rate_searches_nothing() -> None:
    """The window's replay stayed finite at the rate the run failed at (an XLA step replayed without XLA, a random
    draw the bundle does not hold): the search said "largest finite over the 163-step window: 0.005; try 0.0025",
    the captured rate itself, which the cause then advised. It says the replay does not reproduce the run."""
    import keras

    from pyadapter.cause import CauseContext

    run = empty_window([keras.optimizers.Adam(5e-3)])
    search = run.search()
    assert search.largest_finite is None and search.suggested is None
    assert search.sentence().startswith(
        "the 0-step window stays finite at the captured rate 0.005: its replay does"
    )
    assert [t.finite for t in search.trials] == [True]
    # Nor is it read as "no rate kept the window finite" by the cause.
    from pyadapter.cause.classify import _window_suggestion

    assert _window_suggestion(CauseContext(window_search=search.to_json())) is None


def test_the_slots_that_hold_rate_sized_steps_are_scaled_with_the_rate() -> None:
    """SGD's velocity and RMSprop's momentum hold steps already multiplied by the rate: a window replayed at a rate
    100x lower kept the captured velocity, moved as fast as before, and the search said no rate kept it finite.
    Those slots scale with the rate; Adam's moments and RMSprop's mean square hold no rate and do not."""
    import keras
    import tensorflow as tf

    from pyadapter.replay.window import rate_scaled_slots

    def built(optimizer: Any) -> Any:
        weight = tf.Variable(tf.ones([3]))
        optimizer.apply_gradients([(tf.ones([3]), weight)])
        return optimizer

    sgd = built(keras.optimizers.SGD(0.1, momentum=0.9))
    assert [s.path for s in rate_scaled_slots([sgd])] == [s.path for s in sgd.momentums]
    assert np.allclose(rate_scaled_slots([sgd])[0].numpy(), -0.1)  # v = -lr * g after one step
    rmsprop = built(keras.optimizers.RMSprop(0.1, momentum=0.5))
    assert len(rate_scaled_slots([rmsprop])) == 1
    scaled = keras.mixed_precision.LossScaleOptimizer(built(keras.optimizers.SGD(0.1, momentum=0.9)))
    assert len(rate_scaled_slots([scaled])) == 1
    for plain in (keras.optimizers.SGD(0.1), keras.optimizers.RMSprop(0.1), keras.optimizers.Adam(0.1)):
        assert rate_scaled_slots([built(plain)]) == []


def test_a_window_judges_the_optimizer_state_the_guard_judges(tmp_path: Path) -> None:
    """A counter in raw units (1e10) under Adam: the first step's gradients are too large to square, so Adam's
    second moment goes +Inf while its update (m / sqrt(v)) is 0 and the loss and weights stay finite. The guard
    stopped and the replays said "overflow reproduced", but `replay --window` said "the 1-step window stays finite
    at learning rate 0.001" (its steps were judged by the weights and the loss alone), so any rate tried would have
    "fixed" it. (A relu LSTM on a raw Unix-seconds column did the same at its first step.)"""
    work = tmp_path / "work"
    work.mkdir()
    program = work / "counters.py"
    program.write_text(
        "import numpy as np, keras\n"
        "from pyadapter import NanGuard\n"
        "keras.utils.set_random_seed(0)\n"
        "rng = np.random.default_rng(0)\n"
        "x = (1e10 * (1.0 + rng.random(size=(256, 3)))).astype('float32')  # a counter in raw units\n"
        "y = np.zeros((256, 1), 'float32')\n"
        "model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])\n"
        "model.compile(keras.optimizers.Adam(1e-3), 'mse')\n"
        "model.fit(x, y, batch_size=32, epochs=1, verbose=0, callbacks=[NanGuard('captures', locate=False)])\n"
    )
    done = subprocess.run(
        [sys.executable, str(program)],
        cwd=work,
        capture_output=True,
        text=True,
        env=environment(),
        timeout=600,
    )
    (bundle,) = [p for p in (work / "captures").iterdir() if p.is_dir()]
    recorded = manifest(bundle)
    assert recorded["step"] == 0 and recorded["non_finite"]["gradients_too_large"] is True, done.stderr[
        -3000:
    ]
    window = nanlens("replay", str(bundle), "--window", cwd=work)
    assert "stays finite" not in window.stdout, window.stdout + window.stderr[-2000:]
    assert "the 1-step window goes non-finite at learning rate 0.001" in window.stdout, window.stdout
