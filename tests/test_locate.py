"""`nanlens locate BUNDLE --replay` / `locate_bundle(replay=True)`: replaying a real bundle's step under a
FULL_HEALTH dump names the exact line each program marks with `# ORIGIN` (in the entry script, or in the module
that holds the loss). That is the route for bundles without findings located at the scene (tests/test_scene.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from replay_fixtures import captured, nanlens

from pyadapter.commands.locate import format_report
from pyadapter.findings import Findings
from pyadapter.replay import locate_bundle

pytestmark = pytest.mark.slow


def manifest_of(bundle: Path) -> dict:
    return json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))


def assert_names_origin(findings: Findings, cap) -> None:  # type: ignore[no-untyped-def]
    assert findings.origin is not None, findings.extra.get("warnings")
    assert Path(findings.origin.file) == cap.origin_file
    assert findings.origin.line == cap.origin_line
    assert findings.origin.role == "origin"
    assert findings.origin.health is not None and not findings.origin.health.is_finite
    assert findings.source_kind == "bundle"
    assert Path(findings.source_path) == cap.bundle
    bundle = findings.bundle
    assert bundle is not None
    assert bundle["step"] == manifest_of(cap.bundle)["step"]
    assert Path(bundle["entry_script"]) == cap.script
    assert bundle["reproduced"] == {"graph": True, "eager": True}
    assert set(bundle["verdicts"]) == {"graph", "eager"}
    assert bundle["verdicts"]["graph"]["dumped"] is True


@pytest.mark.parametrize("name", ["keras_layer", "loss_module"])
def test_locate_cli_names_the_origin_line(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    cap = captured(name, tmp_path_factory)
    result = nanlens("locate", str(cap.bundle), "--json", "--replay")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    data = json.loads(result.stdout)  # stdout holds the findings JSON alone
    assert data["schema"] == "nanlens.findings/1"
    assert_names_origin(Findings.from_json(data), cap)
    # Progress phases on stderr, in order.
    phases = [
        line.split(": ", 1)[1] for line in result.stderr.splitlines() if line.startswith("nanlens locate: ")
    ]
    assert phases == ["loading bundle", "replaying with dump", "scanning"]


def test_locate_bundle_in_a_worker_process_with_progress(tmp_path_factory: pytest.TempPathFactory) -> None:
    # The language server's way: the dumped replay runs in a child, so this process never enables dumping.
    cap = captured("custom_loop", tmp_path_factory)
    seen: list[tuple[str, float]] = []
    findings = locate_bundle(
        cap.bundle, progress=lambda phase, fraction: seen.append((phase, fraction)), replay=True
    )
    assert_names_origin(findings, cap)
    phases = list(dict.fromkeys(phase for phase, _ in seen))
    assert phases == ["loading bundle", "replaying with dump", "scanning", "done"]
    fractions = [fraction for _, fraction in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0

    # The human report: origin file:line, the source line itself, the op, its health, the replay verdicts.
    text = format_report(findings)
    source_line = cap.origin_file.read_text(encoding="utf-8").splitlines()[cap.origin_line - 1].strip()
    assert f"origin: {cap.origin_file}:{cap.origin_line}" in text
    assert source_line in text
    assert f"op: {findings.origin.op.name} ({findings.origin.op.type})" in text
    assert f"health: {findings.origin.health.describe()}" in text
    assert "graph (dumped): NaN reproduced" in text and "eager: NaN reproduced" in text


def test_an_origin_only_the_eager_dump_holds_is_taken_from_it(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step whose dumped graph came out finite while training's and the eager run did not (a Cholesky of a matrix
    only just not positive definite): the replay dumps an eager re-run beside the graph's (`dumping.dump_replay`),
    and locate takes the origin from it. Making a graph/eager discrepancy on every machine is not in our hands, so
    the replay here writes a finite graph dump and the real step's dump where the eager re-run's goes."""
    import tensorflow as tf

    from pyadapter.dump.recorder import EAGER_DUMP, step_dump
    from pyadapter.replay import locate as locate_module
    from pyadapter.replay.dumping import dump_replay

    cap = captured("keras_layer", tmp_path_factory)

    def replay_whose_graph_dump_stayed_finite(path, dump_dir, progress):  # type: ignore[no-untyped-def]
        report = dump_replay(path, Path(dump_dir) / EAGER_DUMP)
        with step_dump(dump_dir):
            tf.function(lambda v: tf.math.sqrt(v + 1.0))(tf.constant([3.0]))  # a graph that stays finite
        return report

    monkeypatch.setattr(locate_module, "_run_here", replay_whose_graph_dump_stayed_finite)
    findings = locate_bundle(cap.bundle, replay=True, pictures=False, isolate=False)
    assert findings.origin is not None and (Path(findings.origin.file), findings.origin.line) == (
        cap.origin_file,
        cap.origin_line,
    )
    assert any("located in an eager re-run of the step" in w for w in findings.extra.get("warnings", []))


def test_a_long_phase_of_the_cli_says_it_is_still_running(capsys: pytest.CaptureFixture[str]) -> None:
    """`nanlens locate` on a bundle whose batch held NaN re-runs the program's input pipeline under a dump: 60 to 110
    s on a small model, after one line, "re-running the input pipeline under a dump", which users took for a hang.
    While that phase runs, a line says how long it has run; it stops when the next phase starts."""
    import time

    from pyadapter.commands.locate import _Heartbeat

    heartbeat = _Heartbeat()
    heartbeat.EVERY = 0.05
    heartbeat.start("re-running the input pipeline under a dump")
    time.sleep(0.3)
    heartbeat.stop()
    written = capsys.readouterr().err.splitlines()
    time.sleep(0.2)
    assert len(written) >= 2, written
    assert all(
        line.startswith("nanlens locate: still re-running the input pipeline under a dump (")
        for line in written
    )
    assert capsys.readouterr().err == "", "the heartbeat stopped with its phase"
