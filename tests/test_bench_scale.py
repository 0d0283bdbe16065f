"""Smoke test of bench/scale.py --quick: it finishes, prints every table and writes its pictures.

No timing is asserted (CI machines are too noisy): only that the run completes and reports what it measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parent.parent / "bench" / "scale.py"
PROGRAM = SCRIPT.parent / "programs" / "scale_train.py"
ORIGIN_LINE = next(i for i, line in enumerate(PROGRAM.read_text().splitlines(), 1) if "# ORIGIN" in line)


@pytest.mark.timeout(900)
def test_scale_quick_prints_its_tables_and_writes_pictures(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--quick",
            "--out",
            str(tmp_path / "scale.json"),
            "--pictures",
            str(tmp_path / "pictures"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=880,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    for heading in (
        "== guard overhead",
        "== anchors at the smallest size",
        "== capture and locate",
        "== exponents",
    ):
        assert heading in out, out[-3000:]
    assert "error" not in out.split("== guard overhead", 1)[1], out[-3000:]

    data = json.loads((tmp_path / "scale.json").read_text())
    sizes = [row for family in data["overhead"].values() for row in family["sizes"]]
    assert {row["family"] for row in sizes} == {"mlp", "convnet", "transformer"}
    assert {a["kind"] for a in data["anchors"]} == {"check_numerics", "dump"}
    assert data["capture"] and all(c["bundle_bytes"] > 0 for c in data["capture"])
    assert all(c["scene_origin"]["line"] == ORIGIN_LINE for c in data["capture"]), data["capture"]
    assert any(c.get("replay_origin") == f"scale_train.py:{ORIGIN_LINE}" for c in data["capture"])
    pictures = sorted((tmp_path / "pictures").glob("scale_*.png"))
    assert {p.name for p in pictures} >= {"scale_guard.png", "scale_capture.png", "scale_bundle_size.png"}
    assert all(p.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") for p in pictures)


def test_overhead_rounds_of_several_processes_are_pooled():
    """The full run splits each family's rounds over child processes (two processes measuring the same model can sit
    2% apart); the table's ratio is the median over all their rounds, and each process's own median is kept."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("scale_bench", SCRIPT)
    scale = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scale)

    def part(ratios, copy_every):
        steps = copy_every  # a round is whole copy intervals, as each process's guard chose them
        size = {
            "family": "mlp",
            "width": 64,
            "params": 1000,
            "steps": steps,
            "copy_every": copy_every,
            "ratio": sorted(ratios)[len(ratios) // 2],
            "round_ratios": ratios,
            "round_wall_ratios": ratios,
            "round_plain_s": [0.1 * steps] * len(ratios),
            "round_nanguard_s": [0.1 * steps * r for r in ratios],
        }
        return {"sizes": [size]}

    assert scale.merge_overhead([part([1.0], 16), {"error": "killed"}]) == {"error": "killed"}
    merged = scale.merge_overhead([part([1.00, 1.01, 1.02], 16), part([1.04, 1.05, 1.06], 32)])
    (row,) = merged["sizes"]
    assert row["rounds"] == 6 and row["processes"] == 2
    assert row["ratio"] == pytest.approx(1.03)  # the median of all six rounds, not of one process
    assert row["process_ratios"] == [1.01, 1.05]
    assert row["plain_s_per_step"] == pytest.approx(0.1)
    assert row["copy_every"] == 24
    assert not any(key.startswith("round_") for key in row)


@pytest.mark.timeout(600)
def test_embedding_overhead_prints_its_arms_and_the_anchor():
    """Smoke test of bench/embedding_overhead.py on a small table: it finishes, the guarded arms stayed finite (the
    bench raises otherwise), and it prints a ratio for every arm and the check_numerics anchor."""
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT.parent / "embedding_overhead.py"),
            "--vocabulary=20000",
            "--rounds=2",
            "--steps=8",
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        timeout=580,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = dict(line.split() for line in done.stdout.splitlines()[2:])
    assert set(rows) == {"nanguard", "nanguard-w0", "check_numerics"}, done.stdout
    assert all(float(ratio) > 0 for ratio in rows.values()), done.stdout
