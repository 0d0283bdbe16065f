"""Locating NaN/Inf that the captured step did not make: a NaN made in a tf.data map function (found by re-running
the script under a dump), ops made inside Keras (marked at the line that builds their layer, or at the fit line;
never in a library file), and guard_step staying quiet under tf.debugging.enable_check_numerics."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyadapter.replay import locate_bundle

pytestmark = pytest.mark.slow

ZOO = Path(__file__).parent / "zoo"


def quiet_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env.update(extra)
    return env


def run_python(cwd: Path, *args: str, timeout: float = 300, **env: str) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in `cwd`, TensorFlow quiet, output captured."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=quiet_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def marked_line(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if text in line)


def test_a_nan_made_in_a_dataset_map_function_is_found_by_a_rerun(tmp_path: Path) -> None:
    script = ZOO / "zoo_tfdata_map_log.py"
    captures = tmp_path / "captures"
    done = run_python(tmp_path, str(script), NANLENS_CAPTURE_DIR=str(captures))
    assert done.returncode == 1, done.stderr[-2000:]
    (bundle,) = [p.parent for p in captures.glob("*/manifest.json")]

    # Without the re-run: the step's first op on the bad batch, the first Dense's MatMul, which has no line of the
    # user's code: marked on the line that builds that layer (the first of the two Dense built on it), and the
    # batch named as the culprit.
    seen: list[str] = []
    quick = locate_bundle(bundle, rerun_pipeline=False, pictures=False, progress=lambda p, f: seen.append(p))
    assert quick.origin is not None
    assert Path(quick.origin.file) == script and quick.origin.line == marked_line(
        script, "keras.layers.Dense(16"
    )
    assert "the captured batch already holds 1 NaN/Inf value (x[" in quick.origin.message
    assert f"nanlens run --dump -- {script}" in quick.origin.message
    assert quick.bundle is not None and quick.bundle["origin_from"] == "captured batch"
    assert "re-running the input pipeline under a dump" not in seen
    for finding in quick.findings:
        assert "site-packages" not in finding.file

    # With it (automatic: the captured step is small): the log inside the map function.
    seen.clear()
    findings = locate_bundle(bundle, pictures=False, progress=lambda p, f: seen.append(p))
    origin = findings.origin
    assert origin is not None, findings.extra.get("warnings")
    assert Path(origin.file) == script and origin.line == marked_line(script, "# ORIGIN")
    assert origin.op.type == "Log" and origin.role == "origin"
    assert "the captured batch already holds 1 NaN/Inf value" in origin.message
    assert findings.bundle is not None and findings.bundle["origin_from"] == "input pipeline re-run"
    assert findings.bundle["non_finite_batch"]["total"] == 1
    assert findings.extra["rerun"]["stopped_at_step"] == findings.bundle["step"]
    assert "re-running the input pipeline under a dump" in seen
    assert len(list(captures.glob("*/manifest.json"))) == 1, "the re-run writes no second bundle"


def test_a_bad_batch_is_named_from_the_bundle_when_its_step_cannot_be_replayed(tmp_path: Path) -> None:
    """A program run by a shell script that exports its data folder reads ``os.environ[...]``; ``nanlens locate``
    started without that variable cannot re-enter the program. The bundle alone knows the batch held -inf at
    x[row, 2]: that answer stood behind the re-entry error ("nanlens: error: ... KeyError"). Now the origin is the
    fit line, the data named, and the error a warning; with the program gone too, the cause still names it."""
    script = tmp_path / "train.py"
    source = (ZOO / "zoo_tfdata_map_log.py").read_text(encoding="utf-8")
    script.write_text(
        source.replace("import os\n", 'import os\n\nDATA_DIR = os.environ["NANLENS_TEST_DATA_DIR"]\n', 1),
        encoding="utf-8",
    )
    captures = tmp_path / "captures"
    done = run_python(
        tmp_path, str(script), NANLENS_CAPTURE_DIR=str(captures), NANLENS_TEST_DATA_DIR=str(tmp_path)
    )
    assert done.returncode == 1, done.stderr[-2000:]
    (bundle,) = [p.parent for p in captures.glob("*/manifest.json")]

    def locate() -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in quiet_env().items() if k != "NANLENS_TEST_DATA_DIR"}
        return subprocess.run(
            [sys.executable, "-m", "pyadapter", "locate", "--no-rerun-pipeline", str(bundle)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    result = locate()
    assert result.returncode == 0, result.stderr[-2000:]
    fit_line = marked_line(script, ".fit(")
    assert f"origin: {script}:{fit_line}" in result.stdout, result.stdout
    assert "the captured batch already holds 1 NaN/Inf value (x[" in result.stdout
    assert "cause: data" in result.stdout and "-inf" in result.stdout
    assert "not replayed" in result.stdout
    assert "KeyError: 'NANLENS_TEST_DATA_DIR'" in result.stdout, "why it was not replayed, as a warning"

    script.unlink()  # the bundle copied to another machine
    result = locate()
    assert result.returncode == 0, result.stderr[-2000:]
    assert "cause: data" in result.stdout and "-inf" in result.stdout, result.stdout
    assert "is missing" in result.stdout


NO_LOSS_STEP = """
import keras, numpy as np, tensorflow as tf
from pyadapter import guard_step
tf.debugging.enable_check_numerics()
model = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(1)])
optimizer = keras.optimizers.SGD(0.01)

@guard_step(model=model, optimizer=optimizer, capture_dir="captures")
@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))  # not through compute_loss: the guard records no loss
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

x, y = np.ones((4, 3), "float32"), np.zeros((4, 1), "float32")
for _ in range(2):
    train_step(x, y)
print("steps ran")
"""


def test_guard_step_without_a_recorded_loss_is_quiet_under_check_numerics(tmp_path: Path) -> None:
    script = tmp_path / "no_loss_step.py"  # autograph needs the step's source in a file
    script.write_text(NO_LOSS_STEP, encoding="utf-8")
    done = run_python(tmp_path, str(script))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "steps ran" in done.stdout
    assert not (tmp_path / "captures").exists()


def test_the_pipeline_re_run_maps_one_element_at_a_time_in_the_same_order() -> None:
    """Under ``map(..., num_parallel_calls=AUTOTUNE)`` the dump interleaves the traces of several elements' map
    functions, and the scan matched an op with another element's inputs: a NaN the data held was named as made by
    the map's first op in 5 runs of 6. The re-run makes maps and interleaves sequential; the elements come in the
    order training had. The function may come by keyword (``map(map_func=get_spectrogram, ...)``, as the
    simple_audio tutorial writes it): the re-run raised "missing 1 required positional argument: 'func'"."""
    import numpy as np
    import tensorflow as tf

    from pyadapter.replay.rerun import sequential_pipelines

    def pipeline() -> tf.data.Dataset:
        rows = tf.data.Dataset.range(40).map(lambda i: i * 2, num_parallel_calls=tf.data.AUTOTUNE)
        rows = rows.map(map_func=lambda i: i + 1, num_parallel_calls=tf.data.AUTOTUNE)
        return rows.interleave(
            lambda i: tf.data.Dataset.from_tensors(i).repeat(2), cycle_length=4, num_parallel_calls=4
        ).batch(8)

    def ops(dataset: tf.data.Dataset) -> set[str]:
        graph = tf.compat.v1.GraphDef()
        graph.ParseFromString(dataset._as_serialized_graph().numpy())
        return {node.op for node in graph.node}

    parallel = pipeline()
    with sequential_pipelines():
        sequential = pipeline()
    assert {"ParallelMapDatasetV2", "ParallelInterleaveDatasetV4"} <= ops(parallel)
    assert not any(op.startswith("Parallel") for op in ops(sequential)), ops(sequential)
    assert [b.numpy().tolist() for b in sequential] == [b.numpy().tolist() for b in parallel]
    assert "ParallelMapDatasetV2" in ops(pipeline()), "put back after"
    assert np.asarray(next(iter(pipeline()))).shape == (8,)


def test_the_pipeline_re_run_leaves_the_programs_files_as_training_left_them(tmp_path: Path) -> None:
    """`nanlens locate` runs the script again up to the failing step when the batch held the NaN already. The
    script's own writes went to disk: its CSVLogger reopened history.csv and left it empty, and
    `open("run_log.txt", "w")` wrote a new log over training's. They are kept from training's files now."""
    script = tmp_path / "pipeline_log_with_logs.py"
    script.write_text((Path(__file__).parent / "programs" / script.name).read_text(encoding="utf-8"))
    done = run_python(tmp_path, str(script))
    (bundle,) = [p.parent for p in (tmp_path / "captures").glob("*/manifest.json")]
    before = {name: (tmp_path / name).read_bytes() for name in ("history.csv", "run_log.txt")}
    assert before["history.csv"].startswith(b"epoch,loss"), (done.stderr[-2000:], before)
    located = run_python(tmp_path, "-m", "pyadapter", "locate", str(bundle), "--json", timeout=600)
    assert located.returncode == 0, located.stderr[-3000:]
    assert f'"line": {marked_line(script, "# ORIGIN")}' in located.stdout.replace("\n", " ").replace(
        "  ", " "
    )
    after = {name: (tmp_path / name).read_bytes() for name in before}
    assert after == before, "the re-run changed the program's own files"


BAD_ROW = """\
import keras
import numpy as np

from pyadapter import NanGuard

rng = np.random.default_rng(0)
x = rng.normal(size=(256, 4)).astype("float32")
y = (x @ np.array([1.0, 2.0, -1.0, 0.5], "float32"))[:, None]
x[5, 1] = np.nan  # a blank field read as NaN
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
model.fit(x, y, batch_size=32, shuffle=False, epochs=2, callbacks=[NanGuard("captures")])
"""


def test_a_rerun_of_a_program_changed_since_the_capture_does_not_lend_its_failure_to_the_bundle(
    tmp_path: Path,
) -> None:
    """A notebook user fixed the blank field and, in the same edit, made the run diverge; `nanlens locate OLD_BUNDLE
    --trust-entry` re-ran the changed program, which failed at step 4, and the bundle (step 0, a NaN in its batch)
    was given that run's origin, "(the data came in another order: fit's or the pipeline's shuffle ...)". The
    changed program's failure at another step is not the bundle's: the captured batch stays the answer."""
    script = tmp_path / "train.py"
    script.write_text(BAD_ROW, encoding="utf-8")
    done = run_python(tmp_path, str(script))
    # fit stops on the NaN and the script ends normally
    assert "NanGuard: capture bundle:" in done.stderr, done.stderr[-2000:]
    (bundle,) = [p.parent for p in (tmp_path / "captures").glob("*/manifest.json")]
    script.write_text(
        BAD_ROW.replace("x[5, 1] = np.nan  # a blank field read as NaN", "y = y * 1e4").replace(
            "SGD(0.01)", "SGD(0.5)"
        ),
        encoding="utf-8",
    )
    located = run_python(
        tmp_path,
        "-m",
        "pyadapter",
        "locate",
        str(bundle),
        "--replay",
        "--json",
        "--rerun-pipeline",  # the array given to fit holds the NaN: unasked, no re-run
        "--trust-entry",
        str(script),
        timeout=600,
    )
    assert located.returncode in (0, 1), located.stderr[-3000:]
    import json

    findings = json.loads(located.stdout)
    rerun = findings["rerun"]
    assert rerun["stopped_at_step"] not in (None, 0), rerun  # the changed program fails later, on its own
    warnings = findings["warnings"]
    assert any(
        "the program changed since the capture: that failure is the changed program's" in w for w in warnings
    )
    assert not any("the data came in another order" in w for w in warnings), warnings
    assert findings["bundle"]["origin_from"] == "captured batch", findings["bundle"]
    assert findings["cause"]["kind"] == "data", findings["cause"]
