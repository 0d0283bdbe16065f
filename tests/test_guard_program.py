"""A real Keras program with a NaN bug (tests/programs/guard_nan_program.py): NanGuard stops it at the bad step
with finite weights, and the bundle reloads to the identical batch and weights."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pyadapter import CaptureBundle
from pyadapter.replay.restore import load_model

pytestmark = pytest.mark.slow

PROGRAM = Path(__file__).parent / "programs" / "guard_nan_program.py"


def test_program_stops_at_the_bad_step_and_its_bundle_reloads(tmp_path):
    capture_dir, out = tmp_path / "captures", tmp_path / "after_fit.npz"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(
        [sys.executable, str(PROGRAM), str(capture_dir), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "NanGuard: step 5 (epoch 0, batch 5; counting from 0): non-finite loss" in done.stderr
    assert "training stopped" in done.stderr and "nanlens locate" in done.stderr

    with np.load(out) as saved:
        after_fit = [saved[f"arr_{i}"] for i in range(4)]
        assert int(saved["iterations"]) == 5, "five good updates, the sixth held back, no more steps"
    assert all(np.isfinite(w).all() for w in after_fit)

    (bundle_dir,) = [p for p in capture_dir.iterdir()]
    bundle = CaptureBundle.load(bundle_dir)
    assert bundle_dir.name.endswith("-step5") and bundle.step == 5 and bundle.epoch == 0
    assert bundle.non_finite.loss and not bundle.non_finite.update_applied
    assert bundle.entry_script == PROGRAM.absolute() and not bundle.entry_script_changed()
    assert [h["step"] for h in bundle.loss_history] == list(range(6))

    from pyadapter.replay.entry import import_entry_script

    module = import_entry_script(bundle.entry_script, bundle.entry_script_sha256).module
    x, y = module.make_data()
    bad = slice(module.BAD_BATCH * module.BATCH, (module.BAD_BATCH + 1) * module.BATCH)
    bx, by = bundle.batch()
    assert np.array_equal(bx, x[bad]) and np.array_equal(by, y[bad])

    model = load_model(bundle, entry_module=module)
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), after_fit, strict=True))
    assert int(model.optimizer.iterations.numpy()) == 5
    raw = bundle.weights()
    assert np.array_equal(raw["sequential/dense/kernel"], after_fit[0])
