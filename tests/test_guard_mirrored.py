"""NanGuard and guard_step under MirroredStrategy (two logical CPUs, in a subprocess): every replica agrees, no
replica applies the failing update, and the bundle holds the global batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

PROGRAMS = Path(__file__).parent / "programs"


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, dict]:
    capture_dir = tmp_path_factory.mktemp("mirrored")
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONPATH=os.pathsep.join([str(PROGRAMS), str(PROGRAMS.parent.parent)]),
    )
    done = subprocess.run(
        [sys.executable, str(PROGRAMS / "guard_mirrored.py"), str(capture_dir), "fit,fit-skip,loop"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {**{line["mode"]: line for line in lines}, "stderr": {"text": done.stderr}}


@pytest.mark.parametrize("mode", ["fit", "fit-skip", "loop"])
def test_replicas_agree_and_hold_back_the_update(results, mode):
    out = results[mode]
    assert out["replicas"] == 2
    assert out["failure_steps"] == [3], "the NaN sits in one replica's shard only; the step still fails"
    assert out["gradients"], "the failing replica's gradients are named"
    assert out["weights_finite"] and out["replicas_agree"]
    assert out["batch_matches"], "the bundle's batch is the global batch, shards concatenated"
    expected_iterations = {"fit": 3, "fit-skip": 5, "loop": 3}[mode]
    assert out["iterations"] == expected_iterations


def test_fit_bundle_reloads_and_skip_keeps_metrics_finite(results):
    assert results["fit"]["reloaded_weights_match"] and results["fit"]["bundle_replicas"] == 2
    assert results["fit-skip"]["losses_finite"]


def test_the_stop_message_says_why_the_origin_is_not_located_at_the_scene(results):
    """Several replicas: the scene does not locate (a dump of one device's step is what `nanlens locate` makes).
    fit said nothing about it, and the user waited for a marked line; guard_step said it."""
    said = results["stderr"]["text"]
    assert "NaN Lens: not located here: the step runs on 2 replicas" in said, said[-3000:]
    assert "NaN Lens: not located here: the step's arguments are per-replica" in said
