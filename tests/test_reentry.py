"""Programs shaped as users write them: a keras-io style VAE trained at module level, a `keras.Model` subclass
with constructor arguments and its own `train_step`, also trained at module level, and a custom loop whose
guarded step is a closure inside a `train()` function called when the script runs (its import trains).

- Locate at the scene: NanGuard writes findings.json into the bundle while training still runs, and
  `nanlens locate BUNDLE` answers from it without running any code.
- Replay by re-entry: `nanlens replay` runs the program again up to its `fit`, loads the captured state into the
  objects it just built, and reproduces the captured step exactly (the loss Keras logged at that step).
- Bad input: a program that is gone, or one that never reaches `fit` in time, is one line, and nothing is lost.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from replay_fixtures import PROGRAMS, captured, nanlens, origin_line, quiet_env

from pyadapter.findings import load_findings

pytestmark = pytest.mark.slow

SHAPES = ["module_level_vae", "subclass_args", "loop_in_function"]


def manifest_of(bundle: Path) -> dict:
    return json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", SHAPES)
def test_origin_located_at_the_scene_and_shown_without_running_code(
    name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    cap = captured(name, tmp_path_factory)
    assert "findings.json" in manifest_of(cap.bundle)["files"], (
        "written into the bundle, hashed like its files"
    )
    findings = load_findings(cap.bundle / "findings.json")
    assert findings.origin is not None
    assert (Path(findings.origin.file), findings.origin.line) == (cap.origin_file, cap.origin_line)
    assert findings.bundle is not None and findings.bundle["origin_from"] == "scene"
    assert manifest_of(cap.bundle)["located_at_scene"]["origin"]["line"] == cap.origin_line

    result = nanlens("locate", str(cap.bundle))
    assert result.returncode == 0, result.stderr
    assert f"origin: {cap.origin_file}:{cap.origin_line}" in result.stdout
    assert "located at the scene" in result.stdout
    assert "replaying with dump" not in result.stderr, "no replay: the bundle already holds the answer"


@pytest.mark.parametrize("name", SHAPES)
def test_replay_by_reentry_reproduces_the_captured_step(
    name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    cap = captured(name, tmp_path_factory)
    result = nanlens("replay", str(cap.bundle), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["route"].startswith("replayed by re-entry: ran the script"), report["route"]
    assert "trains at module level" in report["route"] or "trains when imported" in report["route"]
    assert report["reproduced"] == {"graph": True, "eager": True}
    # The same step, from the same state: the graph replay's loss is the one Keras logged at that step, exactly.
    logged = manifest_of(cap.bundle)["loss_history"][-1]["logged_loss"]
    if logged is not None:  # None: the logged loss itself was NaN/Inf
        assert report["verdicts"]["graph"]["loss"] == logged
    assert not [w for w in report["warnings"] if "variables" in w], report["warnings"]


@pytest.mark.parametrize("name", SHAPES)
def test_locate_by_reentry_names_the_origin(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    cap = captured(name, tmp_path_factory)
    result = nanlens("locate", str(cap.bundle), "--replay", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert (Path(data["origin"]["file"]), data["origin"]["line"]) == (cap.origin_file, cap.origin_line)
    assert data["bundle"]["route"].startswith("replayed by re-entry")
    # The dump reads the source of every frame, runpy's `<frozen runpy>` too: TensorFlow's warning about it
    # is not the user's business.
    assert "Failed to read source code" not in result.stderr


def _capture_copy(tmp_path: Path, script: str) -> tuple[Path, Path]:
    """A copy of a program in its own folder, run once so it leaves its bundle: (the copy, the bundle)."""
    copy = tmp_path / script
    shutil.copy(PROGRAMS / script, copy)
    capture_dir = tmp_path / "captures"
    run = subprocess.run(
        [sys.executable, str(copy), str(capture_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        env=quiet_env(),
        cwd=tmp_path,
    )
    bundles = [p for p in capture_dir.iterdir() if (p / "manifest.json").is_file()]
    assert len(bundles) == 1, run.stderr[-3000:]
    return copy, bundles[0]


def test_program_gone_is_one_line_and_scene_findings_still_show(tmp_path: Path) -> None:
    copy, bundle = _capture_copy(tmp_path, "replay_subclass_args.py")
    copy.unlink()
    result = nanlens("replay", str(bundle), cwd=tmp_path)
    assert result.returncode == 2
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith("nanlens: error:") and str(copy) in message and "re-entered" in message
    assert "Traceback" not in result.stderr
    shown = nanlens("locate", str(bundle), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert f"origin: {copy}:{origin_line(PROGRAMS / 'replay_subclass_args.py')}" in shown.stdout


def test_program_that_never_reaches_fit_is_stopped_and_left_unchanged(tmp_path: Path) -> None:
    copy, bundle = _capture_copy(tmp_path, "replay_subclass_args.py")
    # The user has since added slow set-up work before training (here: waiting forever).
    text = copy.read_text(encoding="utf-8").replace(
        "model.fit(", "import time\ntime.sleep(3600)\nmodel.fit(", 1
    )
    copy.write_text(text, encoding="utf-8")
    before = (copy.stat().st_mtime_ns, copy.read_bytes())
    result = nanlens("replay", str(bundle), "--timeout", "20", "--trust-entry", str(copy), cwd=tmp_path)
    assert result.returncode == 2
    message = result.stderr.strip().splitlines()[-1]
    assert "did not reach fit, train_on_batch or the guarded step within 20 s" in message, result.stderr[
        -2000:
    ]
    assert "no file was changed" in message
    assert (copy.stat().st_mtime_ns, copy.read_bytes()) == before


def _refused_before_fit(tmp_path: Path, before_fit: str) -> str:
    """A captured copy of replay_subclass_args.py with `before_fit` put before its fit, replayed with its edit
    trusted: the error line of a replay that stopped with exit status 2."""
    copy, bundle = _capture_copy(tmp_path, "replay_subclass_args.py")
    text = copy.read_text(encoding="utf-8").replace("model.fit(", before_fit + "model.fit(", 1)
    copy.write_text(text, encoding="utf-8")
    result = nanlens("replay", str(bundle), "--trust-entry", str(copy), cwd=tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    return result.stderr.strip().splitlines()[-1]


def test_a_load_of_what_the_program_saved_says_the_replay_skipped_that_save(tmp_path: Path) -> None:
    """A program that saves between phases and loads it back: the replay writes none of its saves, so the load reads
    the file training left. With that file gone (a bundle copied to another machine) the error was the program's
    own "File not found" at the load, as if the script were broken; it says the replay skipped the save before."""
    message = _refused_before_fit(
        tmp_path, 'model.save("phase1.keras")\nkeras.models.load_model("phase1.keras")\n'
    )
    assert "failed before its first training step" in message, message
    assert "the replay skipped the program's save" in message and "phase1.keras" in message, message
    assert not (tmp_path / "phase1.keras").exists()


def test_an_environment_variable_the_program_reads_and_nanlens_lacks_is_named(tmp_path: Path) -> None:
    """``run.sh`` exports DATA_DIR and starts the program, which reads ``os.environ["DATA_DIR"]``; nanlens started
    without it said only "KeyError: 'DATA_DIR' (at train.py:18)". It says the program reads that variable and
    to set it as training had it (the bundle keeps no environment: values may be secrets)."""
    message = _refused_before_fit(tmp_path, 'import os\ndata_dir = os.environ["NANLENS_TEST_DATA_DIR"]\n')
    assert "KeyError: 'NANLENS_TEST_DATA_DIR'" in message, message
    assert (
        "reads the environment variable NANLENS_TEST_DATA_DIR" in message
        and "set it as training had" in message
    )


def test_a_program_outside_the_folder_does_not_run_on_the_bundles_say(tmp_path: Path) -> None:
    """A bundle names the program it came from; a replay runs it only inside the folder it runs in (or when the
    user names it with --trust-entry)."""
    copy, bundle = _capture_copy(tmp_path, "replay_subclass_args.py")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    refused = nanlens("replay", str(bundle), cwd=elsewhere)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        f"nanlens: error: not running {copy}: the bundle names it, but it is outside {elsewhere} (the folder "
        f"nanlens runs in); if it is your code, run nanlens from its folder or add --trust-entry {copy}"
    )
    trusted = nanlens("replay", str(bundle), "--eager", "--trust-entry", str(copy), cwd=elsewhere)
    assert trusted.returncode == 0, trusted.stderr[-2000:]
