"""Which program a replay may run (pyadapter.replay.trust): a bundle names its program, and that name alone is
never enough. These run without TensorFlow, on a stand-in for a loaded bundle (only its manifest and paths are
read); the real CLI refusals are in tests/test_reentry.py and tests/test_replay.py."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pyadapter.capture.seal import KEY_ENV, sealed
from pyadapter.replay import trust
from pyadapter.replay.errors import ReplayError


@dataclass
class Bundle:  # what check_entry reads of a CaptureBundle
    path: Path
    entry_script: Path | None
    manifest: dict = field(default_factory=dict)


def bundle_for(program: Path, tmp_path: Path, seal: bool = True, **record: object) -> Bundle:
    """A bundle naming `program`, as this user's NanGuard writes it (sealed), or as anyone else could."""
    sha = hashlib.sha256(program.read_bytes()).hexdigest()
    manifest = {"entry_script": {"path": str(program), "sha256": sha, **record}}
    return Bundle(tmp_path / "bundle", program, sealed(manifest) if seal else manifest)


@pytest.fixture(autouse=True)
def no_trust(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(trust.TRUST_ENV, raising=False)
    monkeypatch.setattr(trust, "_trusted", set())
    monkeypatch.setenv(KEY_ENV, str(tmp_path / "keys" / "seal.key"))  # this test's user


def test_own_unchanged_program_inside_the_folder_runs(tmp_path: Path) -> None:
    program = tmp_path / "train.py"
    program.write_text("print('train')\n")
    assert trust.check_entry(bundle_for(program, tmp_path), root=tmp_path) == program.resolve()


def test_program_outside_the_folder_is_refused_until_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = (
        tmp_path / "elsewhere" / "server.py"
    )  # e.g. a crafted bundle naming a file outside the workspace
    outside.parent.mkdir()
    outside.write_text("print('serve the home folder')\n")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    bundle = bundle_for(outside, tmp_path)
    with pytest.raises(trust.UntrustedEntry) as refused:
        trust.check_entry(bundle, root=workspace)
    assert str(refused.value) == (
        f"not running {outside}: the bundle names it, but it is outside {workspace} (the folder nanlens runs in); "
        f"if it is your code, run nanlens from its folder or add --trust-entry {outside}"
    )
    trust.allow([outside])
    assert trust.check_entry(bundle, root=workspace) == outside.resolve()


def test_changed_program_is_refused_and_a_symlink_does_not_get_around_the_folder(tmp_path: Path) -> None:
    program = tmp_path / "train.py"
    program.write_text("print('train')\n")
    bundle = bundle_for(program, tmp_path)
    program.write_text("print('changed')\n")
    with pytest.raises(trust.UntrustedEntry, match="its code changed since the capture"):
        trust.check_entry(bundle, root=tmp_path)

    real = tmp_path / "outside" / "x.py"
    real.parent.mkdir()
    real.write_text("pass\n")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    link = workspace / "x.py"
    link.symlink_to(real)
    with pytest.raises(trust.UntrustedEntry, match="outside"):
        trust.check_entry(bundle_for(link, tmp_path), root=workspace)


def test_a_notebook_is_judged_by_its_code_cells_not_its_saved_outputs(tmp_path: Path) -> None:
    from pyadapter.capture.notebook import code_sha256

    notebook = tmp_path / "nb.ipynb"

    def save(code: str, outputs: list) -> None:
        notebook.write_text(
            json.dumps(
                {
                    "nbformat": 4,
                    "nbformat_minor": 5,
                    "metadata": {},
                    "cells": [
                        {"cell_type": "markdown", "metadata": {}, "source": "# title"},
                        {
                            "cell_type": "code",
                            "metadata": {},
                            "source": code,
                            "outputs": outputs,
                            "execution_count": None,
                        },
                    ],
                }
            )
        )

    save("x = 1", [])
    bundle = bundle_for(notebook, tmp_path, code_sha256=code_sha256(notebook))
    save("x = 1", [{"output_type": "stream", "name": "stdout", "text": "ran\n"}])  # saved after a run
    assert trust.check_entry(bundle, root=tmp_path) == notebook.resolve()
    save("x = 2", [])
    with pytest.raises(trust.UntrustedEntry, match="changed since the capture"):
        trust.check_entry(bundle, root=tmp_path)


def test_trust_given_to_a_parent_reaches_children_and_is_never_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inherited, added = tmp_path / "a.py", tmp_path / "b.py"
    monkeypatch.setenv(trust.TRUST_ENV, str(inherited))
    trust.allow([])  # a command line without --trust-entry
    assert trust.trusted_files() == {inherited.resolve()}
    trust.allow([added])
    assert {Path(p) for p in os.environ[trust.TRUST_ENV].split(os.pathsep)} == {
        inherited.resolve(),
        added.resolve(),
    }


def test_missing_program_or_none_recorded_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ReplayError, match="is missing, so its step can be neither rebuilt nor re-entered"):
        trust.check_entry(Bundle(tmp_path, tmp_path / "gone.py"), root=tmp_path)
    with pytest.raises(ReplayError, match="does not record its program"):
        trust.check_entry(Bundle(tmp_path, None), root=tmp_path)


def test_recorded_working_folder_is_used_only_inside_the_folder(tmp_path: Path) -> None:
    program = tmp_path / "proj" / "train.py"
    program.parent.mkdir()
    program.write_text("pass\n")
    inside = bundle_for(program, tmp_path, cwd=str(program.parent))
    assert trust.safe_cwd(inside, program, root=tmp_path / "proj") == program.parent
    outside = bundle_for(program, tmp_path, cwd="/")
    assert trust.safe_cwd(outside, program, root=tmp_path / "proj") == program.parent


def test_a_bundle_not_sealed_here_does_not_choose_the_program_or_its_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bundle handed over (a repository, a shared folder) named a file of the workspace with its true sha256 and
    arguments of its choice: IPython's ``__main__.py`` in the project's virtualenv with ``-c <code>``, or a clean-up
    script with a path to delete. Both ran on a plain ``nanlens locate``. Only a bundle sealed by this user's own
    NanGuard, or a program the user named, runs; the refusal shows the command the bundle asked for."""
    tool = tmp_path / "tools" / "clean_outputs.py"
    tool.parent.mkdir()
    tool.write_text("import shutil, sys\nshutil.rmtree(sys.argv[1])\n")
    handed = bundle_for(tool, tmp_path, seal=False, argv=["clean_outputs.py", "/home/me/data\x1b[2K"])
    with pytest.raises(trust.UntrustedEntry) as refused:
        trust.check_entry(handed, root=tmp_path)
    message = str(refused.value)
    assert message.startswith(f"not running {tool} '/home/me/data\\x1b[2K': this bundle does not carry your")
    assert message.endswith(f"add --trust-entry {tool}") and "\x1b" not in message
    # The server reads the same line as "cannot tell it is your code" and asks, naming the file.
    from pyadapter.server.consent import untrusted_of

    asked = untrusted_of(message)
    assert asked is not None and asked.file == str(tool) and asked.reason == "untrusted"
    # Sealed by this user's NanGuard, then edited to pass other arguments: the seal no longer holds.
    own = bundle_for(tool, tmp_path, argv=["clean_outputs.py", "build"])
    assert trust.check_entry(own, root=tmp_path) == tool.resolve()
    own.manifest["entry_script"]["argv"] = ["clean_outputs.py", "/"]
    with pytest.raises(trust.UntrustedEntry, match="does not carry your NanGuard's seal"):
        trust.check_entry(own, root=tmp_path)
    # Another user's (or machine's) key: not this user's seal.
    other = bundle_for(tool, tmp_path, argv=["clean_outputs.py", "build"])
    monkeypatch.setenv(KEY_ENV, str(tmp_path / "other-user" / "seal.key"))
    with pytest.raises(trust.UntrustedEntry, match="does not carry your NanGuard's seal"):
        trust.check_entry(other, root=tmp_path)
    trust.allow([tool])  # the user named it: --trust-entry, or yes in the editor
    assert trust.check_entry(handed, root=tmp_path) == tool.resolve()


def test_the_seal_covers_the_whole_manifest_and_so_every_file() -> None:
    """A re-entry takes over the fit the bundle names and calls the step function it names; `keras_line` picks
    tf_keras's loader, which imports any module a model.keras names; and the files' hashes say which model.keras and
    arrays a replay loads. The first seal covered only the program, step function and fit call: a user's own sealed
    bundle with `keras_line` added and model.keras replaced (hashes recomputed) kept its seal, and its replay ran the
    archive's code with no question. Every field is sealed now, and a seal of the first format counts as none."""
    from pyadapter.capture import seal
    from pyadapter.capture.seal import is_sealed_here

    own = sealed(
        {
            "entry_script": {"path": "/w/train.py"},
            "step_function": {"qualname": "train_step"},
            "model": {"fit_call": {"code": "model.fit(x, y)", "ordinal": 0}, "optimizer": "SGD"},
            "files": {"model.keras": {"sha256": "a" * 64, "size": 10}},
        }
    )
    assert is_sealed_here(own)
    for edited in (
        {**own, "step_function": {"qualname": "delete_checkpoints"}},
        {**own, "model": {**own["model"], "fit_call": {"code": "model.fit(x, y)", "ordinal": 3}}},
        {**own, "model": {**own["model"], "optimizer": "Adam"}},
        {**own, "keras_line": "tf_keras"},
        {**own, "files": {"model.keras": {"sha256": "b" * 64, "size": 10}}},
    ):
        assert not is_sealed_here(edited), edited
    first_format = {**own, "seal": {**own["seal"], "format": "nanlens.seal/1"}}
    assert seal.FORMAT != "nanlens.seal/1" and not is_sealed_here(first_format)


def test_the_seal_key_is_the_users_alone(tmp_path: Path) -> None:
    sealed({"entry_script": None})
    key = tmp_path / "keys" / "seal.key"
    assert key.stat().st_size == 32 and key.stat().st_mode & 0o777 == 0o600
    assert key.parent.stat().st_mode & 0o077 == 0


def test_a_seal_key_others_can_read_or_swap_proves_nothing_and_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A key another user can read lets them seal their bundles as this user's; a key in a folder they can write
    can be swapped for theirs. Before, any readable 32-byte file sealed and proved: its mode and folder were never
    looked at."""
    from pyadapter.capture import seal

    program = tmp_path / "train.py"
    program.write_text("print('train')\n")
    own = bundle_for(program, tmp_path)
    assert trust.check_entry(own, root=tmp_path) == program.resolve()
    key = tmp_path / "keys" / "seal.key"
    monkeypatch.setattr(seal, "_said_unsealed", False)
    for spoil, undo, said in (
        (lambda: key.chmod(0o644), lambda: key.chmod(0o600), "readable or writable by others (mode 0644"),
        (lambda: key.parent.chmod(0o777), lambda: key.parent.chmod(0o700), "can be written by another user"),
    ):
        spoil()
        with pytest.raises(trust.UntrustedEntry) as refused:
            trust.check_entry(own, root=tmp_path)
        assert said in str(refused.value) and "so no bundle's seal counts" in str(refused.value), (
            refused.value
        )
        assert seal.SEAL_KEY not in sealed({"entry_script": {"path": str(program)}})
        assert key.read_bytes() and key.stat().st_size == 32, "the user's key is kept, never replaced"
        undo()
        assert trust.check_entry(own, root=tmp_path) == program.resolve()
        monkeypatch.setattr(seal, "_said_unsealed", False)
    err = capsys.readouterr().err
    assert "readable or writable by others" in err and "bundles are written unsealed" in err, err
    # A link in the key's place is not followed.
    real = tmp_path / "keys" / "real.key"
    key.rename(real)
    key.symlink_to(real)
    assert not seal.is_sealed_here(own.manifest)
    assert "not a regular file" in (seal.own_key_problem() or "")


def test_a_home_without_a_seal_key_writes_unsealed_bundles_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pyadapter.capture import seal

    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the key's folder would go")
    monkeypatch.setenv(KEY_ENV, str(blocked / "seal.key"))
    monkeypatch.setattr(seal, "_said_unsealed", False)
    manifest = sealed({"entry_script": {"path": "/w/train.py"}})
    assert seal.SEAL_KEY not in manifest and not seal.is_sealed_here(manifest)
    sealed({"entry_script": {"path": "/w/train.py"}})
    said = capsys.readouterr().err
    assert said.count("cannot read or make the seal key") == 1, said


def test_a_forged_hash_or_crafted_arguments_cannot_choose_the_question(tmp_path: Path) -> None:
    """An unsealed bundle naming the user's own train.py with a wrong sha256 got the "changed since the capture"
    question ("if the change is yours"), which shows no arguments; and arguments holding "outside" or
    "--trust-entry /x y" chose the question's wording and the file it named."""
    from pyadapter.server.consent import untrusted_of

    program = tmp_path / "train.py"
    program.write_text("print('train')\n")
    forged = bundle_for(
        program, tmp_path, seal=False, argv=["train.py", "--mode", "outside", "--trust-entry", "/x y"]
    )
    forged.manifest["entry_script"]["sha256"] = "0" * 64
    with pytest.raises(trust.UntrustedEntry) as refused:
        trust.check_entry(forged, root=tmp_path)
    message = str(refused.value)
    assert (
        "does not carry your NanGuard's seal" in message and "--mode outside --trust-entry '/x y'" in message
    )
    asked = untrusted_of(f"nanlens: error: {message}")
    assert asked is not None and (asked.file, asked.reason) == (str(program), "untrusted"), asked


def test_a_crafted_seal_or_no_home_folder_never_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyadapter.capture import seal

    own = sealed({"entry_script": {"path": "/w/train.py"}})
    assert seal.is_sealed_here(own)
    assert not seal.is_sealed_here({**own, "seal": {"format": seal.FORMAT, "hmac": "é" * 64}})
    assert not seal.is_sealed_here(
        {**own, "seal": {"format": seal.FORMAT, "hmac": own["seal"]["hmac"].upper()}}
    )
    # HOME unset and a uid with no passwd entry: Path.home() raises. Captures go on, unsealed.
    monkeypatch.delenv(KEY_ENV)

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    monkeypatch.setattr(seal, "_said_unsealed", True)
    assert seal.key_path() is None
    assert seal.SEAL_KEY not in sealed({"entry_script": {"path": "/w/train.py"}})
    assert not seal.is_sealed_here(own)


def test_a_step_function_name_reaching_outside_the_program_is_not_called(tmp_path: Path) -> None:
    """A custom loop's replay calls the step function the bundle names, looked up from the program's module. The
    name is the bundle's word: `train.os.remove` (or `train.tf.io.write_file`) is reachable from a program that
    imports os (tensorflow), and the replay would have called it with the captured batch. Only a function of the
    program's own code is a step."""
    import importlib.util

    from pyadapter.capture.bundle_format import BundleError
    from pyadapter.replay.restore import step_function

    program = tmp_path / "train_loop.py"
    program.write_text(
        "import functools\nimport os\n\n\ndef train_step(x):\n    return x\n\n\n"
        "class Trainer:\n    @functools.wraps(train_step)\n    def step(self, x):\n        return x\n"
    )
    spec = importlib.util.spec_from_file_location("train_loop", program)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def named(qualname: str) -> Bundle:
        return Bundle(tmp_path / "bundle", program, {"step_function": {"qualname": qualname}})

    # (A function of the program's own that it does not guard is refused too: tests/test_replay_units.py.)
    for foreign in ("os.remove", "os.path.join", "functools.reduce", "Trainer.__init__"):
        with pytest.raises(
            BundleError, match=f"step function {foreign} is not a function of the program's own"
        ):
            step_function(named(foreign), module)
