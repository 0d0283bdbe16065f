"""`nanlens replay BUNDLE`: real bundles captured by NanGuard / guard_step reproduce their NaN in graph and eager
mode; bad bundles and missing or changed entry scripts give one clear line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from replay_fixtures import REPLAY_PROGRAMS, Captured, captured, nanlens

from pyadapter.capture.seal import sealed

pytestmark = pytest.mark.slow


def manifest_of(bundle: Path) -> dict:
    return json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))


def copy_bundle(source: Path, target: Path, **entry_script: object) -> Path:
    """A copy of a bundle; `entry_script` fields replace the manifest's (the manifest itself is not hashed), sealed
    as this user's NanGuard would have sealed them (the tests here are about the program, not who chose it)."""
    shutil.copytree(source, target)
    manifest = manifest_of(target)
    manifest["entry_script"] = dict(manifest["entry_script"], **entry_script)
    (target / "manifest.json").write_text(json.dumps(sealed(manifest)), encoding="utf-8")
    return target


@pytest.mark.parametrize("name", list(REPLAY_PROGRAMS))
def test_replay_reproduces_the_nan_in_graph_and_eager_mode(
    name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    cap: Captured = captured(name, tmp_path_factory)
    result = nanlens("replay", str(cap.bundle), "--json")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    report = json.loads(result.stdout)  # stdout holds the JSON alone
    assert report["reproduced"] == {"graph": True, "eager": True}
    # No graph-only / eager-only finding for these programs; where graph mode shows fewer non-finite values (a
    # fused MatMul+ReLU turns NaN into 0 on CPU: custom_loop, subclass_args), the report says why, else nothing.
    counts = {
        mode: (v["loss_finite"] is False) + len(v["non_finite_gradients"]) + len(v["non_finite_weights"])
        for mode, v in report["verdicts"].items()
    }
    if counts["graph"] < counts["eager"]:
        assert report["note"].startswith(
            "Both modes reproduce it, graph mode with fewer non-finite values"
        ), report
    else:
        assert report["note"] is None, report["note"]
    assert report["step"] == manifest_of(cap.bundle)["step"]
    assert report["non_finite_inputs"] == []  # the NaN is made by the step, not fed to it
    assert Path(report["entry_script"]) == cap.script
    for mode in ("graph", "eager"):
        verdict = report["verdicts"][mode]
        assert verdict["mode"] == mode and verdict["error"] is None
        # The captured step's gradients go non-finite in every program; the update then poisons the weights.
        assert verdict["gradients_finite"] is False and verdict["non_finite_gradients"]
        assert verdict["weights_finite"] is False
    if name in ("keras_layer", "custom_loop", "loss_module"):  # training under __main__, a loadable model
        assert report["route"].startswith("rebuilt from the bundle"), report["route"]
    else:  # no get_config, or training at module level: the program is re-entered
        assert report["route"].startswith("replayed by re-entry"), report["route"]
    if name == "subclassed":
        assert "the bundle alone could not rebuild the step" in report["route"]
        # The route is the bundle's: its path is not said again inside the reason (it was, twice).
        assert Path(report["bundle"]).name not in report["route"], report["route"]
    # Phases on stderr, while stdout stays clean.
    assert "loading bundle" in result.stderr and "replaying in eager mode" in result.stderr


def test_replay_one_mode_human_report_and_changed_entry_script_warning(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    cap = captured("custom_loop", tmp_path_factory)
    # The script as it is now differs from the one that ran: the replay goes on and names the changed file.
    script = tmp_path / "code" / cap.script.name
    script.parent.mkdir()
    script.write_text(
        cap.script.read_text(encoding="utf-8") + "\n# edited after the capture\n", encoding="utf-8"
    )
    bundle = copy_bundle(cap.bundle, tmp_path / "bundle", path=str(script))
    # Changed code does not run on a bundle's say: one line naming the file and the flag.
    refused = nanlens("replay", str(bundle), "--eager", cwd=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        f"nanlens: error: not running {script}: its code changed since the capture (sha256 differs from the "
        f"bundle's record); if the change is yours, add --trust-entry {script}"
    )
    result = nanlens("replay", str(bundle), "--eager", "--trust-entry", str(script), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    out = result.stdout
    assert f"step {manifest_of(bundle)['step']}" in out
    assert "eager: NaN reproduced" in out
    assert "graph:" not in out  # --eager runs one mode only
    assert f"entry script {script} changed since capture" in out


def test_a_handed_over_bundle_naming_a_workspace_tool_and_its_arguments_runs_nothing(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A bundle handed over (a repository, a shared folder) whose manifest names a script of the workspace with its
    true sha256 and arguments of the writer's choice (a clean-up tool and a folder to delete). The old check
    (inside the folder, unchanged) passed it and `nanlens locate` re-entered it with those arguments: the folder
    was gone. A manifest not sealed by this user's NanGuard chooses no program: one line names the command it
    asked for, before anything runs; the user's --trust-entry runs it."""
    import hashlib

    cap = captured("keras_layer", tmp_path_factory)
    victim = tmp_path / "precious"
    victim.mkdir()
    (victim / "data.csv").write_text("1,2\n")
    tool = tmp_path / "tools" / "clean_outputs.py"
    tool.parent.mkdir()
    tool.write_text("import shutil, sys\n\nif __name__ == '__main__':\n    shutil.rmtree(sys.argv[1])\n")
    bundle = tmp_path / "captures" / "handed"
    shutil.copytree(cap.bundle, bundle)
    (bundle / "findings.json").unlink(missing_ok=True)  # nothing located at the scene: locate would replay
    manifest = manifest_of(bundle)
    manifest["files"].pop("findings.json", None)
    manifest["entry_script"] = dict(
        manifest["entry_script"],
        path=str(tool),
        sha256=hashlib.sha256(tool.read_bytes()).hexdigest(),
        argv=["clean_outputs.py", str(victim)],
        cwd=str(tmp_path),
    )
    (bundle / "manifest.json").write_text(
        json.dumps(manifest), encoding="utf-8"
    )  # not sealed: not the user's
    for verb, extra in (("locate", ()), ("replay", ("--eager",))):
        refused = nanlens(verb, str(bundle), *extra, cwd=tmp_path)
        assert refused.returncode == 2, refused.stderr[-2000:]
        assert refused.stderr.strip().splitlines()[-1] == (
            f"nanlens: error: not running {tool} {victim}: this bundle does not carry your NanGuard's "
            "seal (it came from another machine or user, was written by an older NaN Lens, or its manifest or "
            "files were edited), so that program and those arguments are the bundle's choice; if they are "
            f"yours, add --trust-entry {tool}"
        )
        assert (victim / "data.csv").is_file(), f"{verb} ran the tool the bundle named"


def test_the_replay_runs_the_manifest_it_checked_not_one_swapped_in_after(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The program check read one load of the bundle and the rebuild loaded the manifest again: one written into
    the folder between the two (a shared captures folder) chose the arguments the program was imported with."""
    from pyadapter.replay import session, trust

    cap = captured("keras_layer", tmp_path_factory)
    bundle = tmp_path / "captures" / "own"
    shutil.copytree(cap.bundle, bundle)
    checked_argv = manifest_of(bundle)["entry_script"]["argv"]
    real_check = trust.check_entry

    def check_then_swap(loaded: object, **kwargs: object) -> Path:
        program = real_check(loaded, **kwargs)
        forged = manifest_of(bundle)
        forged["entry_script"]["argv"] = [checked_argv[0], "--delete-everything"]
        (bundle / "manifest.json").write_text(json.dumps(forged), encoding="utf-8")
        return program

    monkeypatch.setattr(trust, "check_entry", check_then_swap)
    monkeypatch.chdir(cap.script.parent)
    argv, route = session.with_captured_step(
        bundle, lambda rebuilt: rebuilt.bundle.manifest["entry_script"]["argv"]
    )
    assert route.startswith("rebuilt from the bundle"), route
    assert argv == checked_argv


def test_missing_entry_script_is_one_line_error(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    cap = captured("keras_layer", tmp_path_factory)
    gone = tmp_path / "moved-away" / "train.py"
    bundle = copy_bundle(cap.bundle, tmp_path / "bundle", path=str(gone))
    # `locate` without --replay would answer from the findings located at the scene (tests/test_reentry.py).
    for verb, extra in (("replay", ()), ("locate", ("--replay",))):
        result = nanlens(verb, str(bundle), *extra)
        assert result.returncode == 2, result
        # Besides progress lines, one line: the error (and no TensorFlow start-up: it fails before that).
        lines = [
            line for line in result.stderr.strip().splitlines() if not line.startswith(f"nanlens {verb}: ")
        ]
        assert len(lines) == 1 and lines[0].startswith("nanlens: error: "), result.stderr
        assert str(gone) in lines[0] and "missing" in lines[0]


def test_tampered_bundle_is_rejected_with_one_line(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    cap = captured("keras_layer", tmp_path_factory)
    bundle = tmp_path / "bundle"
    shutil.copytree(cap.bundle, bundle)
    batch = bundle / "batch.npz"
    data = bytearray(batch.read_bytes())
    data[-40] ^= 0xFF  # one flipped byte
    batch.write_bytes(bytes(data))
    result = nanlens("replay", str(bundle), "--json")
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nanlens: error: "), result.stderr
    assert "batch.npz" in lines[0]


def test_not_a_bundle_is_one_line_error(tmp_path: Path) -> None:
    result = nanlens("replay", str(tmp_path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nanlens: error: "), result.stderr
