"""Durable writes: a writer killed (SIGKILL) at any moment leaves either a complete bundle that passes every check
of `CaptureBundle.load`, or nothing the product shows: the language server's folder lister
(`pyadapter.server.sources.discover`) never lists a half-written bundle, and the next writer removes the debris.

The bundle written is a real one: NanGuard captures a real Keras MLP (Adam, its slots) in this process; a writer
process (tests/programs/bundle_writer_loop.py) then writes copies of its files through the product's
`BundleWriter`, again and again, and is killed at a random moment, 50 times in a row. That writer does not import
TensorFlow (it writes the bytes TensorFlow produced), so each of the 50 starts costs a fraction of a second.
"""

from __future__ import annotations

import os
import random
import select
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402

from pyadapter.capture.bundle_format import is_partial  # noqa: E402
from pyadapter.capture.reader import CaptureBundle  # noqa: E402
from pyadapter.server.sources import discover  # noqa: E402

PROGRAMS = Path(__file__).parent / "programs"
REPO = Path(__file__).parent.parent
KILLS = 50


@pytest.fixture(scope="module")
def source_bundle(tmp_path_factory) -> Path:
    """A real NanGuard bundle of an MLP big enough (~2.5 MB of weights and slots) that a write takes a while."""
    keras = pytest.importorskip("keras")
    sys.path.insert(0, str(PROGRAMS))
    import guard_models as gm

    from pyadapter import NanGuard

    keras.utils.set_random_seed(5)
    x, y = gm.data(batches=3, bad_batch=1)
    model = keras.Sequential(
        [
            keras.Input((gm.FEATURES,)),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(384, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile(keras.optimizers.Adam(1e-3), "mse")
    guard = NanGuard(tmp_path_factory.mktemp("source"), verbose=False, locate=False)
    model.fit(x, y, batch_size=gm.BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[guard])
    assert guard.last_bundle is not None
    return Path(guard.last_bundle)


class Writers:
    """tests/programs/bundle_writer_loop.py: forks writers of copies of `source` into `capture_dir` on demand."""

    def __init__(self, source: Path, capture_dir: Path, phases: Path) -> None:
        env = dict(
            os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        )
        self.phases = phases
        phases.mkdir()
        self.proc = subprocess.Popen(
            [sys.executable, str(PROGRAMS / "bundle_writer_loop.py"), str(source), str(capture_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self._answer() == "ready"
        self.count = 0

    def _answer(self) -> str:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 60)
        return self.proc.stdout.readline().strip() if ready else ""

    def _ask(self, line: str) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def start(self, once: bool = False) -> tuple[int, Path]:
        self.count += 1
        phase_file = self.phases / str(self.count)
        answer = self._ask(f"{'once' if once else 'write'} {phase_file}")
        assert answer.startswith("pid "), answer
        return int(answer.split()[1]), phase_file

    def wait(self, pid: int) -> int:
        answer = self._ask(f"wait {pid}")
        assert answer.startswith("exit "), answer
        return int(answer.split()[1])

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)


def _last_phase(phase_file: Path) -> str:
    lines = phase_file.read_text().split() if phase_file.exists() else []
    return lines[-2] if len(lines) >= 2 else "forked"


def _check_folder(capture_dir: Path) -> tuple[int, int]:
    """What a user could see in the folder: every bundle the lister lists passes every check; everything else is a
    writer's hidden partial folder. Returns (complete bundles, partial folders)."""
    listed = {Path(ref.path).name for ref in discover([str(capture_dir)]) if ref.kind == "bundle"}
    assert all(ref.kind == "bundle" for ref in discover([str(capture_dir)]))
    partials = 0
    for entry in capture_dir.iterdir():
        if entry.name in listed:
            CaptureBundle.load(entry)  # a BundleError here is a half bundle the editor would show
        else:
            assert is_partial(entry.name), f"{entry.name} is neither a verified bundle nor a writer's partial"
            partials += 1
    return len(listed), partials


@pytest.mark.slow
def test_a_writer_killed_at_random_leaves_a_whole_bundle_or_nothing_shown(source_bundle, tmp_path):
    capture_dir = tmp_path / "captures"
    writers = Writers(source_bundle, capture_dir, tmp_path / "phases")
    rng = random.Random(1234)
    phases: Counter[str] = Counter()
    left_partial = 0
    started = time.monotonic()
    try:
        # How long one write takes here, so the kills spread over whole writes (and the gaps between them).
        t0 = time.monotonic()
        pid, _ = writers.start(once=True)
        assert writers.wait(pid) == 0
        cycle = max(time.monotonic() - t0, 0.02)
        for kill in range(KILLS):
            pid, phase_file = writers.start()
            time.sleep(rng.uniform(0, 2.5 * cycle))
            os.kill(pid, signal.SIGKILL)
            assert writers.wait(pid) == -signal.SIGKILL, "the writer must die by the kill, not by an error"
            phases[_last_phase(phase_file)] += 1
            complete, partials = _check_folder(capture_dir)
            left_partial += partials > 0
            # Each writer removes, on its first write, the partial folder the killed one before it left.
            assert partials <= 2, (
                f"kill {kill}: {partials} partial folders pile up (stale partials not removed)"
            )
        # One writer that finishes: it removes what the killed ones left, and its bundle is complete.
        pid, _ = writers.start(once=True)
        assert writers.wait(pid) == 0
    finally:
        writers.close()
    complete, partials = _check_folder(capture_dir)
    assert partials == 0, "the next writer must remove the partial folders of killed writers"
    assert complete >= 1
    print(
        f"\n{KILLS} kills in {time.monotonic() - started:.1f} s (one write {cycle * 1000:.0f} ms); phase each kill "
        f"landed in: {dict(phases)}; {left_partial} kills left a partial folder; {complete} complete bundles"
    )
    assert left_partial > 0, "no kill landed mid-write: the test did not test anything"


def test_the_lister_skips_a_partial_folder_that_already_holds_its_manifest(tmp_path, monkeypatch):
    """The narrowest window: killed after manifest.json is written, before the rename (too short for random kills
    to hit reliably). The folder then holds what looks like a whole bundle, but it is a writer's partial: the
    lister must not show it."""
    import numpy as np

    from pyadapter.capture.bundle_format import BundleWriter

    def killed(*args: object) -> None:
        raise KeyboardInterrupt  # the process ends here, as if killed just before the rename

    writer = BundleWriter(tmp_path, "run-step1")
    writer.write_arrays("batch.npz", {"a000": np.zeros(3)})
    monkeypatch.setattr(os, "rename", killed)
    with pytest.raises(KeyboardInterrupt):
        writer.commit({"kind": "keras_fit", "step": 1})
    monkeypatch.undo()
    assert (writer.tmp / "manifest.json").is_file() and is_partial(writer.tmp.name)
    assert discover([str(tmp_path)]) == []


@pytest.mark.slow
def test_a_run_killed_while_locating_at_the_scene_keeps_its_whole_bundle(tmp_path):
    """A guarded step failed and NanGuard began to locate its origin at the scene; the run was killed then (its
    job's time limit, during a 200-step rollout's slow locate, s42d p8). The bundle was written only after the
    locate, so nothing was left: no captures/ folder, nothing for `nanlens locate`. The bundle is written (and
    sealed) first now, its path said before the locate starts, and a replay of it finds the origin."""
    program = tmp_path / "loop_module_level.py"  # the user's own program, in their folder
    shutil.copy(PROGRAMS / "shapes" / program.name, program)
    origin_line = next(n for n, t in enumerate(program.read_text().splitlines(), 1) if "# ORIGIN" in t)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1"}
    run = subprocess.Popen(
        [sys.executable, str(program)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    said: list[str] = []
    try:
        assert run.stderr is not None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            ready, _, _ = select.select([run.stderr], [], [], deadline - time.monotonic())
            line = run.stderr.readline() if ready else ""
            if not line:
                break
            said.append(line)
            if line.startswith("NaN Lens: locating the origin of step 5 here"):
                os.kill(run.pid, signal.SIGKILL)  # while the step is re-run under the dump
                break
    finally:
        run.kill()
        code = run.wait(timeout=60)
    assert code == -signal.SIGKILL, "".join(said)[-3000:]
    assert not any(line.startswith("NaN Lens: located in") for line in said), "the kill came after the locate"
    (bundle,) = [p.parent for p in (tmp_path / "captures").glob("*/manifest.json")]
    assert f"NaN Lens: capture bundle: {bundle} (locating the origin here now; " in "".join(said)
    captured = CaptureBundle.load(bundle)  # whole: every file hashed, none missing
    assert captured.step == 5 and "findings.json" not in captured.manifest["files"]
    from pyadapter.capture.seal import is_sealed_here

    assert is_sealed_here(captured.manifest), "a replay would ask before running the user's own program"
    located = subprocess.run(
        [sys.executable, "-m", "pyadapter", "locate", str(bundle)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert located.returncode == 0, located.stderr[-3000:]
    assert f"{program.resolve()}:{origin_line}" in located.stdout, located.stdout[-3000:]
