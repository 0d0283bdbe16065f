"""A replay re-runs the user's program, and its set-up's Python file calls go to a scratch copy
(`pyadapter.replay.scratch_files`): what training left in the program's folder is the same after the replay, and the
program still reads back what it wrote. The whole chain (a real script replayed by `nanlens`) is in
tests/test_training_shapes.py::test_a_replay_changes_no_file_the_training_run_wrote."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

from pyadapter.replay.scratch_files import ScratchFiles


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A training run's folder: a log, saved arrays, a TensorBoard run."""
    folder = tmp_path / "project"
    (folder / "logs" / "run1").mkdir(parents=True)
    (folder / "logs" / "run1" / "events.out").write_bytes(b"\x00event")
    (folder / "train.log").write_text("0 1.5\n1 0.9\n")
    np.save(folder / "features.npy", np.arange(6.0))
    monkeypatch.chdir(folder)
    return folder


def test_writes_go_to_a_copy_the_program_reads_back(project):
    before = _tree(project)
    files = ScratchFiles([project])
    with files.active():
        with open("train.log", "w") as log:  # a script's set-up: a new log for this run
            log.write("replayed\n")
        with open("train.log") as log:
            assert log.read() == "replayed\n"
        np.save("features.npy", np.ones(3))
        assert np.load("features.npy").tolist() == [1.0, 1.0, 1.0]
        Path("settings.json").write_text(json.dumps({"lr": 5.0}))  # a new file: pathlib goes through io.open
        assert json.loads(Path("settings.json").read_text()) == {"lr": 5.0}
    assert _tree(project) == before  # the new settings.json is gone with the scratch folder
    assert files.kept == ["train.log", "features.npy"]
    assert files.note() == "; 2 existing files it writes or deletes left untouched (train.log, ...)"


def test_an_append_starts_from_the_file_training_left(project):
    files = ScratchFiles([project])
    with files.active():
        with open(project / "train.log", "a") as log:
            log.write("2 0.7\n")
        assert (project / "train.log").read_text() == "0 1.5\n1 0.9\n2 0.7\n"
    assert (project / "train.log").read_text() == "0 1.5\n1 0.9\n"


def test_a_deleted_folder_stays_and_can_be_made_again(project):
    before = _tree(project)
    files = ScratchFiles([project])
    with files.active():
        shutil.rmtree("logs", ignore_errors=True)  # clear the last run's TensorBoard logs
        with pytest.raises(FileNotFoundError):
            open("logs/run1/events.out", "rb")
        os.makedirs("logs/run1")  # exist_ok=False: it must not fail on the folder still on disk
        os.remove("train.log")
        with pytest.raises(FileNotFoundError):
            open("train.log")
        with pytest.raises(FileNotFoundError):
            os.remove("train.log")  # removed once already: Python's error, as without the replay
        with pytest.raises(FileNotFoundError):
            shutil.rmtree("no-such-folder")
    assert _tree(project) == before
    assert files.kept == ["logs", "train.log"]


def test_a_folder_made_for_the_replay_is_gone_after_it(project):
    """A BackupAndRestore callback makes its backup folder (``os.makedirs``) and writes into it; its files went to
    the scratch copy, but the folder itself stayed, empty, in the program's folder after ``nanlens locate``."""
    files = ScratchFiles([project])
    with files.active():
        os.makedirs("backup/chief", exist_ok=True)
        with open("backup/chief/training_metadata.json", "w") as handle:
            handle.write("{}")
        assert os.path.isdir("backup/chief")
        os.makedirs("logs/run2")  # beside a folder training made: only the new one goes
    assert not (project / "backup").exists()
    assert sorted(p.name for p in (project / "logs").iterdir()) == ["run1"]


def test_files_elsewhere_and_nan_lens_own_writes_are_real(project, tmp_path):
    elsewhere = tmp_path / "elsewhere.txt"
    files = ScratchFiles([project], own=[project / ".nanlens"])
    with files.active():
        elsewhere.write_text("written")
        (project / ".nanlens").mkdir()
        (project / ".nanlens" / "cell0.py").write_text("x = 1\n")  # a notebook's cell files, for AutoGraph
        with tempfile.NamedTemporaryFile("w", dir=tmp_path, delete=True) as handle:  # removes itself
            handle.write("x")
            name = handle.name
        with files.paused():  # the replay's own findings
            (project / "findings.json").write_text("{}")
    assert elsewhere.read_text() == "written"
    assert not os.path.exists(name)
    assert (project / "findings.json").read_text() == "{}"
    assert (project / ".nanlens" / "cell0.py").read_text() == "x = 1\n"
    assert files.kept == [] and files.note() == ""


def test_the_patches_are_gone_after_the_block(project):
    real = open, os.remove, shutil.rmtree, os.makedirs
    files = ScratchFiles([project])
    with pytest.raises(RuntimeError), files.active():
        raise RuntimeError("the program failed in its set-up")
    assert (open, os.remove, shutil.rmtree, os.makedirs) == real
    with open("train.log", "w") as log:  # after the replay, a write is a write again
        log.write("new run\n")
    assert (project / "train.log").read_text() == "new run\n"
