"""Custom loops whose optimizer trains more than the objects the guard was told about, as users write them:

- tests/programs/replay_loop_extra_variables.py: `guard_step(model=encoder, optimizer=...)` at module level, but the
  step also trains a projection head (a second model) and a learned scale (a bare tf.Variable). The loss is finite,
  the gradient NaN (sqrt at 0).
- tests/programs/replay_loop_two_models.py: objects at module level, training under `__main__`, the checkpoint
  names the backbone only, the same optimizer trains a task head too.
- tests/programs/replay_loop_bare_weights.py: no model at all, bare tf.Variables in a list in the checkpoint,
  trained by a Keras optimizer whose first update makes them Inf.
- tests/programs/replay_loop_gan_two_steps.py: a GAN's two guarded steps, the discriminator's guarded with
  ``model=D`` and reading the generator, which it does not train.

Capture records every variable the optimizer updates, and replay sets them: the replayed step is the captured
one (its loss exactly), where it used to run on a head left at its initial weights or fail with Keras's
"Unknown variable". A re-entry locate prints no TensorFlow "Failed to read source code" warning.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from replay_fixtures import PROGRAMS, nanlens, origin_line, quiet_env

pytestmark = pytest.mark.slow

NAMES = (
    "replay_loop_extra_variables.py",
    "replay_loop_two_models.py",
    "replay_loop_bare_weights.py",
    "replay_loop_gan_two_steps.py",
)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("loop-variables")
    runs = {
        name: subprocess.Popen(
            [sys.executable, str(PROGRAMS / name), str(root / name)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=quiet_env(),
            cwd=root,
        )
        for name in NAMES
    }
    found = {}
    for name, run in runs.items():
        output, _ = run.communicate(timeout=300)
        made = [p for p in (root / name).glob("*") if (p / "manifest.json").is_file()]
        assert len(made) == 1, output[-3000:]
        found[name] = made[0]
    return found


def manifest_of(bundle: Path) -> dict:
    return json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))


def replay_json(bundle: Path) -> tuple[dict, str]:
    result = nanlens("replay", str(bundle), "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout), result.stderr


def test_variables_outside_the_guarded_model_are_captured(bundles: dict[str, Path]) -> None:
    paths = [v["path"] for v in manifest_of(bundles[NAMES[0]])["weights"]["variables"]]
    assert {"head/dense_2/kernel", "head/dense_2/bias", "log_scale"} <= set(paths), paths


def test_replay_runs_the_captured_step_with_the_head_and_the_scale_restored(bundles: dict[str, Path]) -> None:
    report, _ = replay_json(bundles[NAMES[0]])
    assert report["reproduced"] == {"graph": True, "eager": True}
    assert report["warnings"] == []
    # The loss is finite at this step (only the gradient is NaN): the same state gives the same loss, exactly.
    captured = manifest_of(bundles[NAMES[0]])["loss_history"][-1]["loss"]
    assert isinstance(captured, float)
    assert report["verdicts"]["graph"]["loss"] == captured
    assert report["verdicts"]["eager"]["loss"] == captured


def test_a_second_model_outside_the_checkpoint_replays_instead_of_unknown_variable(
    bundles: dict[str, Path],
) -> None:
    report, stderr = replay_json(bundles[NAMES[1]])
    assert "Unknown variable" not in stderr
    assert report["reproduced"] == {"graph": True, "eager": True}
    assert report["warnings"] == []
    assert report["route"].startswith("replayed by re-entry"), report["route"]
    assert "a second model or a tf.Variable its optimizer also trains" in report["route"]


@pytest.mark.parametrize("name", NAMES)
def test_locate_by_reentry_names_the_line_and_prints_no_source_warning(
    name: str, bundles: dict[str, Path]
) -> None:
    result = nanlens("locate", str(bundles[name]), "--replay", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    origin = json.loads(result.stdout)["origin"]
    assert (Path(origin["file"]), origin["line"]) == (PROGRAMS / name, origin_line(PROGRAMS / name))
    # TensorFlow's dump reads the source of every frame, `<frozen runpy>` included: no such warning for the user.
    assert "Failed to read source code" not in result.stderr
    assert "WARNING:tensorflow" not in result.stderr


def test_bare_weights_in_a_checkpoint_list_are_taken_back_and_checked_by_the_replay(
    bundles: dict[str, Path],
) -> None:
    """The weights are bare tf.Variables in ``Checkpoint(params=[...])``, no model. The window's copy did not hold
    them (a list in the checkpoint, an optimizer not built yet), so "taking the update back" left them Inf and the
    bundle held Inf weights "before the step"; and the replay did not check them after the update (no model lists
    them), so it said "stayed finite". Now the bundle holds the finite weights the step started from, and the
    replay names the weights its update made non-finite."""
    import numpy as np

    bundle = bundles[NAMES[2]]
    with np.load(bundle / "weights.npz") as weights:
        assert all(np.isfinite(weights[name]).all() for name in weights.files)
    report, _ = replay_json(bundle)
    assert report["reproduced"] == {"graph": True, "eager": True}, report["verdicts"]
    for mode in ("graph", "eager"):
        assert sorted(report["verdicts"][mode]["non_finite_weights"]) == ["w_h", "w_o", "w_x"], report[
            "verdicts"
        ]


def test_a_network_the_step_reads_and_does_not_train_is_held_and_the_replay_reproduces(
    bundles: dict[str, Path],
) -> None:
    """A GAN's discriminator step guarded as the README shows (``model=D, optimizer=d_opt``) reads the generator.
    Its weights were not in the bundle: the replay took the re-run program's fresh ones and "stayed finite" in graph
    and eager, beside a locate that said "reproduced" (s39a gan1d). They are held under the program's name for the
    model (``G.weights[2]``) and set again by the replay."""
    bundle = bundles["replay_loop_gan_two_steps.py"]
    held = [
        v["path"] for v in manifest_of(bundle)["weights"]["variables"] if v["path"].startswith("G.weights[")
    ]
    assert len(held) == 4, manifest_of(bundle)["weights"]["variables"]
    report, _ = replay_json(bundle)
    assert report["reproduced"] == {"graph": True, "eager": True}, report
    assert report["warnings"] == [], report["warnings"]
