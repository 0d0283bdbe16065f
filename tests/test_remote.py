"""Bundles on tf.io.gfile filesystems: publish a real NanGuard bundle to ram:// and `nanlens pull` it back.

ram:// is TensorFlow's in-memory filesystem; it lives inside one process, so everything here runs in-process
(`pyadapter.cli.main`, not a subprocess).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import uuid
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

sys.path.insert(0, str(Path(__file__).parent / "programs"))
import guard_models as gm  # noqa: E402

from pyadapter import CaptureBundle, NanGuard  # noqa: E402
from pyadapter.capture import storage  # noqa: E402
from pyadapter.capture.bundle_format import BundleError  # noqa: E402
from pyadapter.cli import main  # noqa: E402

pytestmark = pytest.mark.slow
gfile = tf.io.gfile
PICKLE = b"cos\nsystem\n(S'echo pwned'\ntR."  # a pickle that would run a shell command if unpickled


@pytest.fixture(scope="module")
def original(tmp_path_factory) -> Path:
    """A real bundle: a Dense model in Keras fit whose second batch holds a NaN input."""
    keras.utils.set_random_seed(7)
    x, y = gm.data(batches=3, bad_batch=1)
    model = gm.sequential()
    model.compile(keras.optimizers.Adam(0.01), "mse")
    guard = NanGuard(tmp_path_factory.mktemp("captures"), run_name="remote")
    model.fit(x, y, batch_size=gm.BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[guard])
    assert guard.last_bundle is not None and guard.last_bundle.name == "remote-step1"
    return guard.last_bundle


def fresh_url() -> str:
    # ram:// is one namespace for the whole process: every test publishes under its own folder.
    return f"ram://nanlens-tests/{uuid.uuid4().hex}/remote-step1"


def rewrite(url: str, data: bytes) -> None:
    gfile.remove(url)  # ram:// appends when a file is opened with "wb", so remove it first
    with gfile.GFile(url, "wb") as handle:
        handle.write(data)


def read(url: str) -> bytes:
    with gfile.GFile(url, "rb") as handle:
        return handle.read()


def entries(directory: Path) -> list[str]:
    """Everything in `directory`, hidden temporary folders included."""
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def pull(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["pull", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_publish_then_pull_gives_back_the_same_bundle(original, tmp_path, capsys):
    url = storage.publish_bundle(original, fresh_url())
    assert url.startswith("ram://") and url.endswith("/remote-step1")
    listed = json.loads((original / "manifest.json").read_text())["files"]
    # Top-level names: the guard's window files sit in a `window/` folder.
    assert sorted(name.rstrip("/") for name in gfile.listdir(url)) == sorted(
        {name.split("/")[0] for name in [*listed, "manifest.json"]}
    )

    target = tmp_path / "captures"
    code, out, err = pull(capsys, url, str(target))
    assert code == 0, err
    pulled = target / "remote-step1"
    assert entries(target) == ["remote-step1", "remote-step1.pulled"], (
        "one bundle (marked pulled), no temporary folder left"
    )
    assert f"nanlens locate {pulled}" in out and str(pulled) in out.splitlines()[0]

    bundle = CaptureBundle.load(pulled)
    before = CaptureBundle.load(original)
    bx, by = bundle.batch()
    ox, oy = before.batch()
    assert np.isnan(bx).any(), "the captured batch is the one with the NaN"
    assert np.array_equal(bx, ox, equal_nan=True) and np.array_equal(by, oy)
    assert bundle.manifest == before.manifest
    assert (pulled / "model.keras").read_bytes() == (original / "model.keras").read_bytes()


def test_names_already_taken_get_a_number_on_both_sides(original, tmp_path, capsys):
    url = fresh_url()
    assert storage.publish_bundle(original, url) == url
    assert storage.publish_bundle(original, url + "/") == url + "-1", "a second publish must not overwrite"
    target = tmp_path / "captures"
    for expected in ("remote-step1", "remote-step1-1"):
        code, out, err = pull(capsys, url, str(target))
        assert code == 0, err
        assert f"nanlens locate {target / expected}" in out
    assert entries(target) == [
        "remote-step1",
        "remote-step1-1",
        "remote-step1-1.pulled",
        "remote-step1.pulled",
    ]


def test_progress_reports_every_byte(original, tmp_path):
    url = storage.publish_bundle(original, fresh_url())
    calls: list[tuple[int, int]] = []
    path = storage.fetch_bundle(
        url, tmp_path, progress=lambda done, total: calls.append((done, total)), verify=CaptureBundle.load
    )
    size = sum(e["size"] for e in CaptureBundle.load(path).manifest["files"].values())
    assert calls[0] == (0, size) and calls[-1] == (size, size)
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda data: data[:100] + bytes([data[100] ^ 0xFF]) + data[101:], "does not match its sha256"),
        (lambda data: data + b"\0" * 10, "larger than its manifest says"),
        (lambda data: data[:-10], "manifest says"),
    ],
    ids=["flipped-byte", "grown", "truncated"],
)
def test_a_file_changed_after_publishing_is_refused_and_nothing_is_kept(
    original, tmp_path, capsys, change, message
):
    url = storage.publish_bundle(original, fresh_url())
    batch_url = f"{url}/batch.npz"
    rewrite(batch_url, change(read(batch_url)))

    target = tmp_path / "captures"
    code, out, err = pull(capsys, url, str(target))
    assert code == 2
    assert err.startswith("nanlens: error: ") and err.count("\n") == 1, err
    assert "batch.npz" in err and message in err
    assert entries(target) == [], "no bundle and no half-pulled temporary folder"
    assert out == ""


def test_files_the_manifest_does_not_list_are_not_copied(original, tmp_path, capsys):
    url = storage.publish_bundle(original, fresh_url())
    with gfile.GFile(f"{url}/evil.pkl", "wb") as handle:
        handle.write(PICKLE)
    gfile.makedirs(f"{url}/checkpoint")
    with gfile.GFile(f"{url}/checkpoint/extra.bin", "wb") as handle:
        handle.write(b"x")

    code, _, err = pull(capsys, url, str(tmp_path))
    assert code == 0, err
    pulled = tmp_path / "remote-step1"
    assert not (pulled / "evil.pkl").exists() and not (pulled / "checkpoint").exists()
    pulled_files = sorted(str(p.relative_to(pulled)) for p in pulled.rglob("*") if p.is_file())
    assert pulled_files == sorted([*CaptureBundle.load(original).manifest["files"], "manifest.json"])


def _edit_manifest(url: str, edit) -> None:  # type: ignore[no-untyped-def]
    manifest = json.loads(read(f"{url}/manifest.json"))
    rewrite(f"{url}/manifest.json", edit(manifest))


def _list_parent_file(manifest: dict) -> bytes:
    manifest["files"]["../x"] = dict(manifest["files"]["batch.npz"])
    return json.dumps(manifest).encode()


def _list_missing_file(manifest: dict) -> bytes:
    manifest["files"]["shards/worker-7.npz"] = {"size": 3, "sha256": "0" * 64}  # a name a bundle may hold
    return json.dumps(manifest).encode()


def _list_matching_pickle(manifest: dict) -> bytes:
    # The pickle is there and matches its hash: its name alone refuses the bundle, before any byte is copied.
    manifest["files"]["evil.pkl"] = {"size": len(PICKLE), "sha256": hashlib.sha256(PICKLE).hexdigest()}
    return json.dumps(manifest).encode()


@pytest.mark.parametrize(
    "edit, message",
    [
        (_list_parent_file, "'../x' leaves the bundle"),
        (lambda m: b"{not json", "manifest.json is not valid JSON"),
        (
            lambda m: json.dumps(dict(m, format="nanlens.bundle/99")).encode(),
            "'nanlens.bundle/99' is not supported",
        ),
        (_list_missing_file, "shards/worker-7.npz is listed in the manifest but missing"),
        (_list_matching_pickle, "evil.pkl is not a file a bundle may hold"),
    ],
    ids=["parent-path", "bad-json", "other-format", "missing-file", "listed-pickle"],
)
def test_a_bad_remote_manifest_is_refused_and_nothing_lands(original, tmp_path, capsys, edit, message):
    url = storage.publish_bundle(original, fresh_url())
    with gfile.GFile(f"{url}/evil.pkl", "wb") as handle:
        handle.write(PICKLE)
    _edit_manifest(url, edit)
    target = tmp_path / "a" / "captures"
    code, _, err = pull(capsys, url, str(target))
    assert code == 2
    assert err.startswith("nanlens: error: ") and err.count("\n") == 1, err
    assert message in err
    assert entries(target) == []
    assert entries(tmp_path / "a") in ([], ["captures"]), "nothing written next to DIR (no ../x)"


def test_a_bundle_over_the_size_limit_is_refused_before_any_byte_is_copied(original, tmp_path, capsys):
    url = storage.publish_bundle(original, fresh_url())
    total = sum(e["size"] for e in CaptureBundle.load(original).manifest["files"].values())
    target = tmp_path / "captures"
    code, _, err = pull(capsys, url, str(target), "--max-size", "1K")
    assert code == 2 and err.count("\n") == 1, err
    assert (
        f"the bundle is {total / 1024:.1f} KB, more than the 1.0 KB a pull copies (raise it with --max-size)"
        in err
    )
    assert entries(target) == [], "refused before the destination is even created"
    with pytest.raises(SystemExit) as raised:  # argparse refuses the value itself
        pull(capsys, url, str(target), "--max-size", "lots")
    assert raised.value.code == 2 and "not a size: 'lots'" in capsys.readouterr().err
    code, _, err = pull(capsys, url, str(target), "--max-size", "1M")
    assert code == 0, err


def test_names_and_sizes_are_checked_before_any_byte_is_copied(original, tmp_path, monkeypatch):
    url = storage.publish_bundle(original, fresh_url())
    with gfile.GFile(f"{url}/evil.pkl", "wb") as handle:
        handle.write(PICKLE)
    _edit_manifest(url, _list_matching_pickle)
    calls: list[tuple[int, int]] = []
    with pytest.raises(BundleError, match="evil.pkl is not a file a bundle may hold"):
        storage.fetch_bundle(
            url,
            tmp_path / "a",
            progress=lambda done, total: calls.append((done, total)),
            verify=CaptureBundle.load,
        )
    assert calls == [] and not (tmp_path / "a").exists(), "nothing was copied, not even the allowed files"

    url = storage.publish_bundle(original, fresh_url())
    monkeypatch.setattr(storage, "_free_bytes", lambda parent: 1000)
    with pytest.raises(BundleError, match=r"the bundle is .* KB, .* has 1000 bytes free"):
        storage.fetch_bundle(
            url,
            tmp_path / "b",
            progress=lambda done, total: calls.append((done, total)),
            verify=CaptureBundle.load,
        )
    assert calls == [] and not (tmp_path / "b").exists()


def test_a_url_without_a_bundle_is_one_line(tmp_path, capsys):
    url = f"ram://nanlens-tests/{uuid.uuid4().hex}/nothing-here"
    code, _, err = pull(capsys, url, str(tmp_path / "captures"))
    assert code == 2
    assert err == f"nanlens: error: no bundle at {url} (no manifest.json)\n"
    assert entries(tmp_path / "captures") == []


def test_pull_from_a_plain_local_folder(original, tmp_path, capsys):
    target = tmp_path / "captures"
    code, out, err = pull(capsys, str(original) + "/", str(target))
    assert code == 0, err
    bundle = CaptureBundle.load(target / "remote-step1")
    assert np.array_equal(bundle.batch()[0], CaptureBundle.load(original).batch()[0], equal_nan=True)
    assert f"nanlens locate {target / 'remote-step1'}" in out


def test_pull_default_dir_is_the_folder_the_editor_watches(original, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = storage.publish_bundle(original, fresh_url())
    code, out, err = pull(capsys, url)
    assert code == 0, err
    assert CaptureBundle.load(tmp_path / ".nanlens" / "captures" / "remote-step1").step == 1
    assert "nanlens locate .nanlens/captures/remote-step1" in out
    # Marked as pulled beside it (never inside: its files are hashed): the editor never replays it by itself.
    assert (tmp_path / ".nanlens" / "captures" / "remote-step1.pulled").is_file()


def test_publish_refuses_a_folder_that_is_not_a_bundle(tmp_path):
    (tmp_path / "batch.npz").write_bytes(b"x")
    with pytest.raises(BundleError, match="no manifest.json"):
        storage.publish_bundle(tmp_path, fresh_url())


def test_urls_and_local_paths():
    assert storage.is_remote("gs://bucket/x") and storage.is_remote("ram://x") and storage.is_remote("s3://b")
    assert not storage.is_remote("file:///tmp/x") and not storage.is_remote(Path("gs://x"))
    assert not storage.is_remote("/tmp/x") and not storage.is_remote("C://Users")
    assert storage.join("gs://bucket/runs/", "/a/", "b") == "gs://bucket/runs/a/b"
    assert storage.join("ram://", "x") == "ram://x"
    assert storage.join("file:///tmp/", "x") == "file:///tmp/x"


def test_nanguard_captures_into_ram_and_the_pulled_bundle_verifies(tmp_path, capsys):
    """The whole cluster story in one process: NanGuard writes to a URL capture folder, `nanlens pull` brings
    the bundle home, and it verifies and holds the failing batch."""
    keras.utils.set_random_seed(7)
    x, y = gm.data(batches=3, bad_batch=1)
    model = gm.sequential()
    model.compile(keras.optimizers.Adam(0.01), "mse")
    captures = f"ram://nanlens-tests/{uuid.uuid4().hex}/captures"
    guard = NanGuard(captures, run_name="cluster")
    model.fit(x, y, batch_size=gm.BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[guard])
    capsys.readouterr()
    [failure] = guard.failures
    assert failure.bundle == f"{captures}/cluster-step1" and failure.bundle_error is None
    assert f"nanlens pull {failure.bundle}" in failure.message()
    assert gfile.exists(f"{failure.bundle}/manifest.json")
    assert not [name for name in gfile.listdir(captures) if name.startswith(".")]  # no temporary leftovers
    code, out, err = pull(capsys, failure.bundle, str(tmp_path / "home"))
    assert code == 0, err
    bundle = CaptureBundle.load(tmp_path / "home" / "cluster-step1")
    assert bundle.step == 1
    batch_x, _ = bundle.batch()
    np.testing.assert_array_equal(batch_x, x[gm.BATCH : 2 * gm.BATCH])
    assert f"nanlens locate {tmp_path / 'home' / 'cluster-step1'}" in out


def test_locate_takes_a_bundle_url_and_pulls_it_home_first(original, tmp_path, capsys, monkeypatch):
    url = storage.publish_bundle(original, fresh_url())
    monkeypatch.chdir(tmp_path)
    # --isolate: the dumped replay runs in a child process (it only needs the pulled, local copy). The bundle was
    # captured inside pytest, so the program it names is pytest's own entry point, outside this folder: trusted
    # by name, as a user would with their own script.
    entry = json.loads((original / "manifest.json").read_text())["entry_script"]["path"]
    # Under pytest-xdist a worker runs as `python -c ...`: no entry script to trust (the replay rebuilds the model).
    trust = ["--trust-entry", entry] if entry is not None else []
    code = main(["locate", url, "--isolate", "--no-rerun-pipeline", "--json", *trust])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "nanlens locate: pulled ram://" in err
    local = tmp_path / ".nanlens" / "captures" / "remote-step1"
    assert (local / "manifest.json").is_file()
    findings = json.loads(out)
    assert findings["source"]["path"] == str(local)
    assert findings["bundle"]["step"] == 1
