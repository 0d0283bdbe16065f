"""NanGuard under MultiWorkerMirroredStrategy: two real worker processes on 127.0.0.1 (TF_CONFIG, free ports).

Worker 1's batch 3 holds a negative feature, so `sqrt` makes NaN on worker 1 only (tests/programs/
multiworker_train.py). What a user checks: nobody hangs, nobody applies the bad update, both workers stop at the
same step with the same finite weights, one bundle holds both workers' shards and the cluster layout, and
`nanlens locate` names the `sqrt` line and worker 1.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "programs"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `tests.cluster`, however pytest is started

import multiworker_train as program  # noqa: E402

from pyadapter import CaptureBundle  # noqa: E402
from pyadapter.replay.restore import load_model  # noqa: E402
from tests.cluster.launch import REPO, WorkerRun, run_cluster  # noqa: E402

PROGRAM = Path(program.__file__).resolve()
ORIGIN_LINE = next(i for i, line in enumerate(PROGRAM.read_text().splitlines(), 1) if "# ORIGIN" in line)


def nanlens(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`python -m pyadapter ARGS` in a clean environment, as a user would run it."""
    env = {"PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2", "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "pyadapter", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
    )


class Cluster:
    def __init__(self, root: Path, runs: list[WorkerRun], results: list[dict]) -> None:
        self.root, self.runs, self.results = root, runs, results

    @property
    def bundle(self) -> Path:
        return Path(self.results[0]["failures"][0]["bundle"])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    root = tmp_path_factory.mktemp("multiworker")
    captures = root / "captures"
    runs = run_cluster(
        [[str(PROGRAM), str(captures), str(root / f"result-{i}.json")] for i in range(2)],
        cwd=root,
        timeout=240,
    )
    for run in runs:
        assert run.returncode == 0, run.tail()
    results = [json.loads((root / f"result-{i}.json").read_text()) for i in range(2)]
    return Cluster(root, runs, results)


def test_a_nan_on_worker_1_stops_both_workers_at_that_step_without_applying_it(cluster: Cluster) -> None:
    first, second = cluster.results
    assert [r["task"] for r in cluster.results] == [0, 1]
    for result in cluster.results:
        # Steps 0-2 were applied; step 3 (the NaN) was not, on either worker.
        assert result["iterations"] == program.BAD_STEP
        assert result["weights_finite"]
        [failure] = result["failures"]
        assert failure["step"] == program.BAD_STEP and failure["action"] == "stopped"
        assert failure["error"] is None
    assert first["weights_sum"] == second["weights_sum"]  # the replicas stayed in sync
    assert first["failures"][0]["bundle"] == second["failures"][0]["bundle"]  # one bundle, named alike
    for run in cluster.runs:
        assert f"NanGuard: capture bundle: {cluster.bundle}" in run.stderr


def test_one_bundle_holds_every_workers_shard_and_the_cluster_layout(cluster: Cluster) -> None:
    bundle = CaptureBundle.load(cluster.bundle)
    layout = bundle.cluster
    assert layout is not None and layout["num_workers"] == 2
    assert [w["task"] for w in layout["workers"]] == ["worker:0", "worker:1"]
    assert layout["non_finite_workers"] == ["worker:1"]
    rows = slice(program.BAD_STEP * program.BATCH, (program.BAD_STEP + 1) * program.BATCH)
    expected = [program.worker_data(worker) for worker in range(2)]
    for worker in range(2):
        x, y = bundle.shard_batch(worker)
        np.testing.assert_array_equal(x, expected[worker][0][rows])
        np.testing.assert_array_equal(y, expected[worker][1][rows])
    x, y = bundle.batch()  # the global batch: the shards in worker order
    np.testing.assert_array_equal(x, np.concatenate([e[0][rows] for e in expected]))
    assert bundle.step == program.BAD_STEP
    assert not any(Path(cluster.bundle.parent).glob(".*"))  # no staging folder or partial bundle left behind
    # The captured weights are those before the step, i.e. what both workers ended with.
    model = load_model(bundle)
    total = sum(float(np.sum(np.asarray(w), dtype=np.float64)) for w in model.trainable_weights)
    assert total == pytest.approx(cluster.results[0]["weights_sum"], rel=1e-6)


def test_locate_names_the_sqrt_line_and_worker_1(cluster: Cluster) -> None:
    done = nanlens("locate", str(cluster.bundle), "--json", "--trust-entry", str(PROGRAM), cwd=cluster.root)
    assert done.returncode == 0, done.stderr[-2000:]
    findings = json.loads(done.stdout)
    origin = findings["origin"]
    assert (Path(origin["file"]).name, origin["line"]) == (PROGRAM.name, ORIGIN_LINE)
    assert origin["op"]["type"] == "Sqrt"
    assert "worker:1's data produced it" in origin["message"]
    workers = {w["task"]: w for w in findings["bundle"]["workers"]}
    assert workers["worker:1"]["reproduced"] and workers["worker:1"]["seen_at_capture"]
    assert not workers["worker:0"]["reproduced"] and not workers["worker:0"]["seen_at_capture"]


def test_in_skip_mode_both_workers_skip_the_bad_step_and_train_on(tmp_path: Path) -> None:
    runs = run_cluster(
        [
            [str(PROGRAM), str(tmp_path / "captures"), str(tmp_path / f"result-{i}.json"), "skip"]
            for i in range(2)
        ],
        cwd=tmp_path,
        timeout=240,
    )
    for run in runs:
        assert run.returncode == 0, run.tail()
    results = [json.loads((tmp_path / f"result-{i}.json").read_text()) for i in range(2)]
    for result in results:
        assert result["iterations"] == program.STEPS - 1  # every step but the bad one was applied
        assert result["weights_finite"]
        [failure] = result["failures"]
        assert (failure["step"], failure["action"], failure["error"]) == (program.BAD_STEP, "skipped", None)
    assert results[0]["weights_sum"] == results[1]["weights_sum"]
    assert CaptureBundle.load(results[1]["failures"][0]["bundle"]).cluster["non_finite_workers"] == [
        "worker:1"
    ]


@pytest.fixture(scope="module")
def merged_dump(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both workers run under `nanlens run --dump`; their files are gathered into one directory.

    The two workers run on this one machine, so their writers carry the same hostname (and could collide in one
    directory within the same second): each dumps to its own folder, and gathering them names each writer's
    files after its worker, as two machines' hostnames would."""
    root = tmp_path_factory.mktemp("multiworker-dump")
    argv = [
        [
            "-m",
            "pyadapter",
            "run",
            "--dump",
            str(root / f"dump-{i}"),
            "--",
            str(PROGRAM),
            str(root / "captures"),
            str(root / f"result-{i}.json"),
        ]
        for i in range(2)
    ]
    runs = run_cluster(argv, cwd=root, timeout=240)
    for run in runs:
        assert run.returncode == 0, run.tail()
    merged = root / "merged"
    merged.mkdir()
    for worker in range(2):
        for path in (root / f"dump-{worker}").iterdir():  # tfdbg_events.<secs>.<hostname>.<suffix>
            stamp = path.name.split(".")[1]
            (merged / f"tfdbg_events.{stamp}.host-{worker}{path.suffix}").write_bytes(path.read_bytes())
    return merged


def test_dumps_from_two_hosts_merge_into_one_causal_order(merged_dump: Path) -> None:
    from pyadapter import scan_dump

    # Worker 0 alone sees the NaN only after it arrived through the cluster (the loss mean after the all-reduce):
    # its own dump cannot name the line. Merged with worker 1's, the causal first op is worker 1's sqrt.
    alone = scan_dump(merged_dump.parent / "dump-0")
    assert alone.origin is None or alone.origin.op.type != "Sqrt"
    findings = scan_dump(merged_dump)
    assert findings.hosts == ["host-0", "host-1"]
    origin = findings.origin
    assert origin is not None
    assert (Path(origin.file).name, origin.line) == (PROGRAM.name, ORIGIN_LINE)
    assert origin.op.type == "Sqrt"
    assert (
        origin.op.host == "host-1" and origin.op.task == "worker:1"
    )  # the finding names the host and worker
    for finding in findings.findings[1:]:  # what it spread to comes after it
        assert finding.role == "propagated"


def test_nanlens_scan_says_which_host_and_worker(merged_dump: Path) -> None:
    done = nanlens("scan", str(merged_dump), timeout=120)
    assert done.returncode == 0, done.stderr
    assert "on host host-1 (worker:1)" in done.stdout


def test_replay_runs_the_union_and_each_workers_shard(cluster: Cluster) -> None:
    done = nanlens("replay", str(cluster.bundle), "--json", "--trust-entry", str(PROGRAM), cwd=cluster.root)
    assert done.returncode == 0, done.stderr[-2000:]  # 0: the NaN reproduced
    report = json.loads(done.stdout)
    assert report["reproduced"] == {"graph": True, "eager": True}
    assert [(w["task"], w["rows"], w["reproduced"]) for w in report["workers"]] == [
        ("worker:0", program.BATCH, False),
        ("worker:1", program.BATCH, True),
    ]
