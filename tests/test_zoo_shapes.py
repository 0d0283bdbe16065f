"""Zoo programs shaped like users' programs, not like our design: training at module level (a keras-io style
VAE, a subclassed model with constructor arguments, a GAN with two optimizers, a factory ``make_model(hp)``
called from ``run_experiment(hp)`` at the bottom of the file) and a Jupyter notebook.

Each runs as its user would run it (a subprocess; the notebook headless in a real kernel, through the eval's
runner) and NanGuard must locate the origin at the scene: the bundle's ``findings.json`` names the line marked
``# ORIGIN`` (for the notebook: the .ipynb, the marked cell and the line within it). The GAN must not apply the
failing step's NaN update through either of its two optimizers.

The fast tests at the bottom check how `nanlens eval` reads notebook programs and scores a notebook finding.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ZOO = Path(__file__).parent / "zoo"
SCRIPTS = [
    "zoo_module_level_vae",
    "zoo_subclass_constructor_args",
    "zoo_gan_two_optimizers",
    "zoo_factory_hparams",
]
NOTEBOOK = ZOO / "zoo_notebook_log_features.ipynb"
ORIGIN_RE = re.compile(r"#\s*ORIGIN\b")
TIMEOUT = 600


def marked_line(path: Path) -> int:
    """The line marked `# ORIGIN`, read straight from the source (not through the evaluator)."""
    (line,) = [
        n for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if ORIGIN_RE.search(text)
    ]
    return line


def marked_cell(path: Path) -> tuple[int, int]:
    """(cell index among all cells, line in that cell) of the notebook's one `# ORIGIN` comment."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    found = []
    for index, cell in enumerate(cells):
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        for line, text in enumerate(source.splitlines(), 1):
            if cell["cell_type"] == "code" and ORIGIN_RE.search(text):
                found.append((index, line))
    (where,) = found
    return where


def child_env(capture_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "NANLENS_CAPTURE_DIR": str(capture_dir),
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "CUDA_VISIBLE_DEVICES": "",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def only_bundle(capture_dir: Path) -> Path:
    bundles = [p.parent for p in capture_dir.rglob("manifest.json")]
    assert len(bundles) == 1, bundles
    return bundles[0]


def scene_origin(bundle: Path) -> dict:
    manifest = json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))
    assert "findings.json" in manifest["files"], (
        f"no findings.json in {bundle}: {manifest.get('located_at_scene')}"
    )
    origin = json.loads((bundle / "findings.json").read_text(encoding="utf-8"))["origin"]
    assert origin is not None, f"{bundle}: findings.json has no origin"
    return origin


# The focal loss's NaN needs 1 - p == 0 exactly: a softmax that rounds a class far ahead to 1.0. Some CPUs'
# vectorized kernels never do (an AMD EPYC VM gave 0.99999994 at a logit gap of 92), and the program trains finite
# there, as its user's would.
ROUNDS_TO_ONE = (
    "import tensorflow as tf\n"
    "logits = tf.tile(tf.constant([[0.0, 40.0, -5.0]]), [64, 1])\n"
    "print(float(tf.reduce_max(tf.function(tf.nn.softmax)(logits))) == 1.0)\n"
)
NEEDS_SOFTMAX_OF_ONE = {"zoo_subclass_constructor_args"}


def softmax_rounds_to_one() -> bool:
    """Whether this machine's softmax kernel gives exactly 1.0 to a class 40 logits ahead, in a batch of 64."""
    done = subprocess.run(
        [sys.executable, "-c", ROUNDS_TO_ONE],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""},
    )
    return done.stdout.strip().endswith("True")


@pytest.fixture(scope="module", params=SCRIPTS)
def script_run(request, tmp_path_factory):
    if request.param in NEEDS_SOFTMAX_OF_ONE and not softmax_rounds_to_one():
        pytest.skip(
            "this CPU's softmax kernel never rounds to exactly 1.0: the focal loss's NaN cannot happen here"
        )
    program = ZOO / f"{request.param}.py"
    work = tmp_path_factory.mktemp(request.param)
    done = subprocess.run(
        [sys.executable, str(program)],
        cwd=work,
        env=child_env(work / "captures"),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    return program, done, work / "captures"


@pytest.mark.slow
def test_script_is_located_at_its_origin_line_at_the_scene(script_run):
    program, done, capture_dir = script_run
    assert done.returncode == 1, done.stderr[-3000:]  # the zoo's "training went non-finite"
    assert "zoo: training went non-finite" in done.stdout
    origin = scene_origin(only_bundle(capture_dir))
    line = marked_line(program)
    assert (Path(origin["file"]), origin["line"]) == (program.resolve(), line), origin["message"]
    assert "cell" not in origin
    assert re.search(
        rf"NaN Lens: located in [\d.]+ s: {re.escape(str(program.resolve()))}:{line}: ", done.stderr
    )


def nanlens_json(*args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "pyadapter", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert done.returncode in (0, 1), done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.slow
def test_script_is_located_and_replayed_by_reentry(script_run):
    """The same bundle without the scene's answer: re-entering the program finds the same line, and the captured
    step reproduces in graph and eager mode."""
    program, _, capture_dir = script_run
    bundle = only_bundle(capture_dir)
    located = nanlens_json("locate", str(bundle), "--replay")
    assert (Path(located["origin"]["file"]), located["origin"]["line"]) == (
        program.resolve(),
        marked_line(program),
    )
    assert located["bundle"]["route"].startswith("replayed by re-entry")
    replayed = nanlens_json("replay", str(bundle))
    assert replayed["reproduced"] == {"graph": True, "eager": True}, replayed["verdicts"]


@pytest.fixture(scope="module")
def notebook_run(tmp_path_factory):
    pytest.importorskip("nbclient")
    pytest.importorskip("nbformat")
    pytest.importorskip("ipykernel")
    from pyadapter.evaluate.notebook import run_argv

    work = tmp_path_factory.mktemp("notebook")
    done = subprocess.run(
        run_argv(NOTEBOOK),
        cwd=work,
        env=child_env(work / "captures"),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    return done, work / "captures"


@pytest.mark.slow
def test_notebook_is_located_at_its_origin_cell_and_line_at_the_scene(notebook_run):
    done, capture_dir = notebook_run
    assert done.returncode == 1, done.stderr[-3000:]  # every cell ran, one printed "training went non-finite"
    bundle = only_bundle(capture_dir)
    assert bundle.name.startswith(f"{NOTEBOOK.stem}-")
    origin = scene_origin(bundle)
    cell, line = marked_cell(NOTEBOOK)
    assert (Path(origin["file"]), origin.get("cell"), origin["line"]) == (NOTEBOOK.resolve(), cell, line), (
        origin
    )
    assert origin["op"]["type"] == "Log"
    # Printed counting from 1, with the line counted in the cell (it read "zoo_nb.ipynb:5 (cell 4)": line 5 of the file?)
    assert f"{NOTEBOOK.resolve()} cell {cell + 1}, line {line}: Log" in done.stderr


@pytest.mark.slow
def test_notebook_is_located_and_replayed_by_reentry(notebook_run):
    _, capture_dir = notebook_run
    bundle = only_bundle(capture_dir)
    located = nanlens_json("locate", str(bundle), "--replay")
    cell, line = marked_cell(NOTEBOOK)
    origin = located["origin"]
    assert (Path(origin["file"]), origin.get("cell"), origin["line"]) == (NOTEBOOK.resolve(), cell, line), (
        origin
    )
    assert located["bundle"]["route"].startswith(f"replayed by re-entry: ran the notebook {NOTEBOOK.name}")
    replayed = nanlens_json("replay", str(bundle))
    assert replayed["reproduced"] == {"graph": True, "eager": True}, replayed["verdicts"]


@pytest.mark.slow
def test_nanlens_eval_scores_the_notebook_by_cell_and_line(tmp_path):
    """`nanlens eval` end to end on the notebook: run in a kernel, located, replayed, check_numerics in a kernel."""
    pytest.importorskip("nbclient")
    done = subprocess.run(
        [sys.executable, "-m", "pyadapter", "eval", str(ZOO), "--only", NOTEBOOK.stem, "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(done.stdout)
    (row,) = document["rows"]
    cell, line = marked_cell(NOTEBOOK)
    assert row["error"] is None and row["method"] == "capture"
    for key in ("expected", "found"):
        assert (Path(row[key]["path"]), row[key]["cell"], row[key]["line"]) == (
            NOTEBOOK.resolve(),
            cell,
            line,
        ), row
    assert row["exact_line"] is True and document["exact_line"] == 1
    assert (
        row["op"] == "Log" and row["check_numerics"]["op"] == "Log" and row["check_numerics"]["agree"] is True
    )
    assert f"exact Log at {NOTEBOOK.name} cell {cell + 1}, line {line}" in done.stderr


# ---- the GAN's two optimizers ---------------------------------------------------------------------------------

# Runs the GAN program unchanged, with a callback added to its fit that keeps every variable's value at the
# start of each step; afterwards compares the failing step's start with the end of training and with the bundle.
GAN_PROBE = r"""
import json, os, sys
import numpy as np
import keras

program, out = sys.argv[1], sys.argv[2]

def variables(gan):
    return {
        "model": list(gan.weights),
        "d_optimizer": list(gan.d_optimizer.variables),
        "g_optimizer": list(gan.g_optimizer.variables),
    }

class StepStart(keras.callbacks.Callback):
    values = None
    def on_train_batch_begin(self, batch, logs=None):
        self.values = {group: {v.path: v.numpy().copy() for v in vs} for group, vs in variables(self.model).items()}

start = StepStart()
fit = keras.Model.fit
def fit_keeping_step_starts(self, *args, callbacks=None, **kwargs):
    return fit(self, *args, callbacks=[start, *(callbacks or [])], **kwargs)
keras.Model.fit = fit_keeping_step_starts

sys.argv = [program]
sys.path.insert(0, os.path.dirname(program))
namespace = {"__name__": "__main__", "__file__": program}
code = None
try:
    exec(compile(open(program, encoding="utf-8").read(), program, "exec"), namespace)
except SystemExit as exit:
    code = exit.code
gan = namespace["gan"]
end = {group: {v.path: v.numpy() for v in vs} for group, vs in variables(gan).items()}
changed = {group: sorted(p for p in end[group] if not np.array_equal(end[group][p], start.values[group][p]))
           for group in end}
bundles = [os.path.join(root) for root, _, files in os.walk(os.environ["NANLENS_CAPTURE_DIR"]) if "manifest.json" in files]
manifest = json.load(open(os.path.join(bundles[0], "manifest.json")))
saved = np.load(os.path.join(bundles[0], "weights.npz"))
saved = {v["path"]: saved[v["key"]] for v in manifest["weights"]["variables"]}
at_start = {p: value for group in start.values.values() for p, value in group.items()}
bundle_differs = sorted(p for p in saved if p in at_start and not np.array_equal(saved[p], at_start[p]))
json.dump({
    "exit": code,
    "step": manifest["step"],
    "non_finite_gradients": manifest["non_finite"]["gradients"],
    "changed": changed,
    "bundle_differs": bundle_differs,
    "bundles": len(bundles),
    "finite": all(bool(np.all(np.isfinite(v))) for group in end.values() for v in group.values()),
    "discriminator_paths": sorted(v.path for v in gan.discriminator.weights),
    "generator_paths": sorted(v.path for v in gan.generator.weights),
}, open(out, "w"))
"""


@pytest.fixture(scope="module")
def gan_probe(tmp_path_factory):
    work = tmp_path_factory.mktemp("gan_probe")
    out = work / "probe.json"
    program = ZOO / "zoo_gan_two_optimizers.py"
    done = subprocess.run(
        [sys.executable, "-c", GAN_PROBE, str(program), str(out)],
        cwd=work,
        env=child_env(work / "captures"),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0 and out.is_file(), done.stderr[-3000:]
    return json.loads(out.read_text(encoding="utf-8"))


@pytest.mark.slow
def test_gan_guard_applies_no_nan_update_through_either_optimizer(gan_probe):
    probe = gan_probe
    assert probe["exit"] == 1 and probe["bundles"] == 1
    # The bug is in the discriminator's loss: its gradients are the non-finite ones.
    assert probe["non_finite_gradients"]
    assert set(probe["non_finite_gradients"]) <= set(probe["discriminator_paths"])
    # Nothing of the discriminator or its optimizer moved in the failing step, and every value stayed finite.
    assert not set(probe["changed"]["model"]) & set(probe["discriminator_paths"]), probe["changed"]
    assert probe["changed"]["d_optimizer"] == [], probe["changed"]
    assert probe["finite"]


@pytest.mark.slow
def test_gan_failing_step_is_not_half_applied_and_the_bundle_holds_the_state_before_it(gan_probe):
    # When the discriminator's update is blocked, the generator's finite update of the same step is taken back:
    # the step is applied whole or not at all, and the bundle holds the state before it.
    probe = gan_probe
    assert probe["changed"] == {"model": [], "d_optimizer": [], "g_optimizer": []}
    assert probe["bundle_differs"] == []


# ---- how `nanlens eval` reads and scores notebooks (no TensorFlow) ---------------------------------------------


def test_eval_discovers_the_notebook_and_its_marked_cell():
    from pyadapter.evaluate.corpus import discover

    programs = {p.name: p for p in discover(ZOO)}
    for name in SCRIPTS:
        program = programs[name]
        assert program.problem is None and program.method == "capture"
        assert (program.origin.file, program.origin.line, program.origin.cell) == (
            (ZOO / f"{name}.py").resolve(),
            marked_line(ZOO / f"{name}.py"),
            None,
        )
    notebook = programs[NOTEBOOK.stem]
    assert notebook.is_notebook and notebook.problem is None and notebook.method == "capture"
    cell, line = marked_cell(NOTEBOOK)
    assert (notebook.origin.file, notebook.origin.cell, notebook.origin.line) == (
        NOTEBOOK.resolve(),
        cell,
        line,
    )
    assert notebook.title.startswith("a Jupyter notebook")
    assert [p.name for p in discover(ZOO, ["*.ipynb"])] == [NOTEBOOK.stem]
    assert [p.name for p in discover(ZOO, ["notebook_log"])] == [NOTEBOOK.stem]


def _notebook(path: Path, cells: list[tuple[str, str]]) -> Path:
    path.write_text(
        json.dumps(
            {
                "nbformat": 4,
                "nbformat_minor": 5,
                "metadata": {},
                "cells": [
                    {
                        "cell_type": kind,
                        "metadata": {},
                        "source": source,
                        **({"outputs": [], "execution_count": None} if kind == "code" else {}),
                    }
                    for kind, source in cells
                ],
            }
        ),
        encoding="utf-8",
    )
    return path


def test_notebook_markers_need_a_guard_and_exactly_one_code_cell_comment(tmp_path):
    from pyadapter.evaluate.corpus import discover

    _notebook(
        tmp_path / "zoo_nb_ok.ipynb",
        [
            ("markdown", "# Title\nZoo: a notebook. The ORIGIN word in markdown is no marker.\n# ORIGIN"),
            ("code", "%env TF_CPP_MIN_LOG_LEVEL=2\nfrom pyadapter import NanGuard"),
            ("code", "x = 1\ny = x / 0  # ORIGIN: here\nNanGuard('c')"),
        ],
    )
    _notebook(
        tmp_path / "zoo_nb_two.ipynb",
        [
            ("code", "a = 1  # ORIGIN\nNanGuard('c')"),
            ("code", "b = 2  # ORIGIN"),
        ],
    )
    _notebook(tmp_path / "zoo_nb_unguarded.ipynb", [("code", "a = 1  # ORIGIN")])
    programs = {p.name: p for p in discover(tmp_path)}
    ok = programs["zoo_nb_ok"]
    assert ok.problem is None and (ok.origin.cell, ok.origin.line, ok.origin.note) == (2, 2, "here")
    assert ok.title == "a notebook. The ORIGIN word in markdown is no marker"
    assert (
        "2 # ORIGIN markers" in programs["zoo_nb_two"].problem
        and "zoo_nb_two.ipynb cell 2, line 1)" in programs["zoo_nb_two"].problem  # the second cell, index 1
    )
    assert "must train with NanGuard" in programs["zoo_nb_unguarded"].problem


def test_a_notebook_finding_is_exact_only_in_the_marked_cell(tmp_path):
    from pyadapter.evaluate.corpus import Marker, Program
    from pyadapter.evaluate.runner import Outcome
    from pyadapter.evaluate.scoring import score

    path = (tmp_path / "zoo_nb.ipynb").resolve()
    program = Program("zoo_nb", path, "capture", Marker(path, 5, "", cell=3))

    def row_for(cell: int | None, line: int = 5):
        origin = {"file": str(path), "line": line, "role": "origin", "op": {"type": "Log", "name": "Log"}}
        if cell is not None:
            origin["cell"] = cell
        return score(Outcome(program, findings={"schema": "nanlens.findings/1", "origin": origin}))

    exact = row_for(3)
    assert exact.exact_line and exact.found.show(tmp_path) == "zoo_nb.ipynb cell 4, line 5"
    assert exact.to_json(tmp_path)["found"]["cell"] == 3 and exact.to_json(tmp_path)["expected"]["cell"] == 3
    assert not row_for(4).exact_line  # the same line number in another cell
    assert not row_for(None).exact_line  # a kernel file's line, not mapped to a cell
    assert not row_for(3, line=6).exact_line
