"""Capture bundles on disk: written atomically, read back safely; anything tampered is one clear BundleError."""

from __future__ import annotations

import collections
import hashlib
import json
import os
import shutil
import socket
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from pyadapter import BundleError, CaptureBundle  # noqa: E402
from pyadapter.capture import structure  # noqa: E402
from pyadapter.capture.bundle_format import BundleWriter  # noqa: E402

PROGRAMS = Path(__file__).parent / "programs"


# ---- structures and the writer: no TensorFlow --------------------------------------------------------------


def test_import_pyadapter_and_the_bundle_reader_without_tensorflow():
    import subprocess

    code = (
        "import sys, pyadapter\n"
        "from pyadapter import CaptureBundle, BundleError\n"
        "assert 'NanGuard' in pyadapter.__all__ and 'guard_step' in pyadapter.__all__\n"
        "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules, 'TensorFlow was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_nested_batch_round_trip_without_pickle(tmp_path):
    Pair = collections.namedtuple("Pair", ["left", "right"])
    batch = (
        {"image": np.arange(6, dtype="float32").reshape(2, 3), "ids": np.array([b"a", b"bc"], dtype=object)},
        [np.array([1, 2]), None, Pair(np.float64(1.5), np.array([[True]]))],
        {"training": True, "scale": 0.5, "name": "x"},
    )
    arrays: dict = {}
    described = structure.describe(batch, arrays)
    structure.write_npz(tmp_path / "b.npz", arrays)
    back = structure.rebuild(json.loads(json.dumps(described)), structure.read_npz(tmp_path / "b.npz"))
    assert isinstance(back, tuple) and list(back[0]) == ["image", "ids"]
    assert np.array_equal(back[0]["image"], batch[0]["image"])
    assert back[0]["ids"].tolist() == [b"a", b"bc"], "strings are stored as fixed-width bytes, not pickled"
    assert back[1][1] is None and type(back[1][2]).__name__ == "Pair" and back[1][2].left == 1.5
    assert back[2] == {"training": True, "scale": 0.5, "name": "x"}


def test_object_arrays_are_refused():
    with pytest.raises(structure.StructureError, match="pickle"):
        structure.describe({"x": np.array([{"a": 1}], dtype=object)}, {})


def test_exception_mid_write_leaves_no_bundle(tmp_path):
    with pytest.raises(RuntimeError, match="injected"):
        with BundleWriter(tmp_path, "run-step3") as writer:
            writer.write_arrays("batch.npz", {"a000": np.zeros(3)})
            raise RuntimeError("injected crash while writing")
    assert list(tmp_path.iterdir()) == []


def test_partial_dirs_of_dead_writers_are_cleaned(tmp_path):
    dead = tmp_path / f".run-step1~{socket.gethostname()}~999999999~abc.partial"
    alive = tmp_path / f".run-step2~{socket.gethostname()}~{os.getpid()}~abc.partial"
    for partial in (dead, alive):
        partial.mkdir()
        (partial / "batch.npz").write_bytes(b"half")
    with BundleWriter(tmp_path, "run-step3") as writer:
        writer.write_arrays("batch.npz", {"a000": np.zeros(3)})
        final = writer.commit({"kind": "keras_fit", "step": 3})
    assert not dead.exists(), "a killed writer's debris is removed"
    assert alive.exists(), "a live writer's directory is left alone"
    assert (
        final.name == "run-step3"
        and json.loads((final / "manifest.json").read_text())["format"] == "nanlens.bundle/1"
    )


# ---- a real bundle and its tampered copies ------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_bundle(tmp_path_factory) -> Path:
    """A bundle written by NanGuard from a tiny fit with a NaN in batch 2."""
    keras = pytest.importorskip("keras")
    sys.path.insert(0, str(PROGRAMS))
    import guard_models as gm

    from pyadapter import NanGuard

    keras.utils.set_random_seed(40)
    x, y = gm.data(batches=4, bad_batch=2)
    model = gm.sequential()
    model.compile(keras.optimizers.SGD(0.01), "mse")
    guard = NanGuard(tmp_path_factory.mktemp("captures"), run_name="real", verbose=False)
    model.fit(x, y, batch_size=gm.BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[guard])
    assert guard.last_bundle is not None
    return guard.last_bundle


@pytest.fixture
def copy(real_bundle, tmp_path) -> Path:
    target = tmp_path / real_bundle.name
    shutil.copytree(real_bundle, target, symlinks=True)
    return target


def rehash(bundle: Path) -> None:
    """What a careful tamperer does: make the manifest's hashes match the changed files."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    for name in list(manifest["files"]):
        path = bundle / name
        if path.is_file():
            data = path.read_bytes()
            manifest["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    (bundle / "manifest.json").write_text(json.dumps(manifest))


def edit_manifest(bundle: Path, change) -> None:
    manifest = json.loads((bundle / "manifest.json").read_text())
    change(manifest)
    (bundle / "manifest.json").write_text(json.dumps(manifest))


def rejected(bundle: Path, match: str) -> str:
    with pytest.raises(BundleError, match=match) as raised:
        CaptureBundle.load(bundle)
    message = str(raised.value)
    assert "\n" not in message and str(bundle) in message
    return message


slow = pytest.mark.slow


@slow
def test_clean_copy_loads(copy):
    bundle = CaptureBundle.load(copy)
    assert bundle.kind == "keras_fit" and bundle.step == 2 and bundle.model_path.name == "model.keras"
    assert sorted(bundle.manifest["files"]) == [
        "batch.npz",
        "model.keras",
        "weights.npz",
        "window/batches.npz",
        "window/state.npz",
    ]


@slow
def test_findings_added_after_the_bundle_keep_it_whole_and_sealed(copy, monkeypatch):
    """The bundle is written before the locate at the scene (a run killed during it kept nothing, s42d p8); the
    findings are added afterwards, listed, hashed and sealed again. A death before the renames leaves the bundle
    as it was, whole and sealed."""
    from pyadapter.capture.bundle_format import add_to_bundle
    from pyadapter.capture.seal import is_sealed_here

    add_to_bundle(copy, {"findings.json": b'{"origin": null}'}, {"located_at_scene": {"seconds": 1.5}})
    bundle = CaptureBundle.load(copy)
    assert (
        bundle.manifest["located_at_scene"] == {"seconds": 1.5}
        and "findings.json" in bundle.manifest["files"]
    )
    assert is_sealed_here(bundle.manifest)
    before = (copy / "manifest.json").read_bytes()

    def killed(*args: object) -> None:
        raise KeyboardInterrupt  # the process ends here, as if killed before its first rename

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        add_to_bundle(copy, {"findings.json": b'{"origin": 1}'}, {"located_at_scene": {"seconds": 9}})
    monkeypatch.undo()
    assert (copy / "manifest.json").read_bytes() == before
    assert is_sealed_here(CaptureBundle.load(copy).manifest)


@slow
def test_history_rows_tell_nan_from_missing(real_bundle):
    """A NaN input row at step 2: that step's loss is null with the marker "nan"; the healthy steps have numbers."""
    history = CaptureBundle.load(real_bundle).loss_history
    assert [row["step"] for row in history] == [0, 1, 2]
    for row in history[:2]:
        assert all(
            isinstance(row[key], float) and row[key] > 0
            for key in ("loss", "logged_loss", "grad_norm", "weight_norm", "max_abs_output")
        )
    assert history[0]["update_ratio"] is None and 0 < history[1]["update_ratio"] < 1
    failing = history[2]
    assert failing["loss"] is None and failing["loss_nonfinite"] == "nan"
    assert failing["grad_norm"] is None and failing["grad_norm_nonfinite"] == "nan"
    assert failing["max_abs_output"] is None and failing["max_abs_output_nonfinite"] == "nan"
    assert failing["weight_norm"] == history[1]["weight_norm"] or failing["weight_norm"] == pytest.approx(
        history[1]["weight_norm"], rel=1e-6
    ), "the update was not applied: the weights are the previous step's"
    assert failing["update_ratio"] is None and "update_ratio_nonfinite" not in failing, (
        "not applied: not measured"
    )


@slow
@pytest.mark.parametrize(
    "row, reason",
    [
        ({"step": 1, "grad_norm": "1e3"}, "'loss_history' entry 0 field 'grad_norm' is not a number or null"),
        (
            {"step": 1, "update_ratio": [0.1]},
            "'loss_history' entry 0 field 'update_ratio' is not a number or null",
        ),
        ({"step": 1, "loss": True}, "'loss_history' entry 0 field 'loss' is not a number or null"),
        (
            {"step": 1, "loss": None, "loss_nonfinite": "huge"},
            "'loss_nonfinite' is not one of nan, inf, -inf",
        ),
        ({"step": 1, "weight_norm_nonfinite": 1}, "'weight_norm_nonfinite' is not one of nan, inf, -inf"),
        ({"step": "1", "loss": 0.5}, "'loss_history' entry 0 has no integer 'step'"),
        ({"loss": 0.5}, "'loss_history' entry 0 has no integer 'step'"),
    ],
)
def test_tampered_history_is_one_bundle_error(copy, row, reason):
    edit_manifest(copy, lambda manifest: manifest["loss_history"].__setitem__(0, row))
    rejected(copy, reason)


@slow
@pytest.mark.parametrize("name", ["batch.npz", "model.keras", "weights.npz"])
def test_changed_bytes_are_rejected(copy, name):
    path = copy / name
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    rejected(copy, f"{name} does not match its sha256")


@slow
def test_appended_bytes_are_rejected_by_size(copy):
    (copy / "batch.npz").write_bytes((copy / "batch.npz").read_bytes() + b"\0")
    rejected(copy, "batch.npz has .* bytes")


@slow
@pytest.mark.parametrize(
    "escape, reason",
    [
        ("../outside.npz", "leaves the bundle or is not normalized"),
        ("/etc/passwd", "is not a relative POSIX path"),
        ("checkpoint/../../x", "leaves the bundle or is not normalized"),
        ("a\\..\\b", "is not a relative POSIX path"),
    ],
)
def test_paths_out_of_the_bundle_are_rejected(copy, escape, reason):
    edit_manifest(copy, lambda m: m["files"].update({escape: {"sha256": "0" * 64, "size": 1}}))
    # The whole message: the bundle's own path (a temporary folder) would match almost any fragment.
    assert rejected(copy, ".") == f"{copy}: path {escape!r} {reason}"


@slow
def test_symlinks_are_rejected_even_with_matching_content(copy, tmp_path):
    outside = tmp_path / "outside.npz"
    shutil.move(copy / "weights.npz", outside)
    os.symlink(outside, copy / "weights.npz")
    rejected(copy, "weights.npz is a symlink")


@slow
def test_unlisted_files_are_rejected(copy):
    (copy / "notes.txt").write_text("hello")
    rejected(copy, "notes.txt is in the bundle but not in its manifest")


@slow
def test_a_pickle_added_and_listed_is_rejected(copy):
    (copy / "state.pkl").write_bytes(b"\x80\x04\x95cos\nsystem\n.")
    edit_manifest(copy, lambda m: m["files"].update({"state.pkl": {}}))
    rehash(copy)
    rejected(copy, "state.pkl is not a file a bundle may hold")


@slow
def test_a_pickled_array_in_the_batch_is_rejected(copy):
    with open(copy / "batch.npz", "wb") as handle:
        np.savez(handle, a000=np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    rehash(copy)
    rejected(copy, "pickled object array")


@slow
def test_a_pickle_inside_the_keras_archive_is_rejected(copy):
    import zipfile

    with zipfile.ZipFile(copy / "model.keras", "a") as archive:
        archive.writestr("evil.pkl", b"\x80\x04.")
    rehash(copy)
    rejected(copy, "unexpected member 'evil.pkl'")


@slow
def test_incompatible_format_is_rejected(copy):
    edit_manifest(copy, lambda m: m.update(format="nanlens.bundle/2"))
    rejected(copy, r"format 'nanlens.bundle/2' is not supported \(this nanlens reads nanlens.bundle/1\)")


@slow
def test_missing_or_broken_manifest_and_missing_files(copy, tmp_path):
    (copy / "weights.npz").unlink()
    rejected(copy, "weights.npz is listed in the manifest but missing")
    (copy / "manifest.json").write_text("{not json")
    rejected(copy, "manifest.json is not valid JSON")
    (copy / "manifest.json").unlink()
    rejected(copy, "no manifest.json")
    with pytest.raises(BundleError, match="not a directory"):
        CaptureBundle.load(tmp_path / "nowhere")


@slow
def test_load_model_uses_safe_mode(tmp_path):
    """A Lambda layer's bytecode is never executed when loading a bundle's model."""
    keras = pytest.importorskip("keras")
    sys.path.insert(0, str(PROGRAMS))
    import guard_models as gm

    from pyadapter import NanGuard
    from pyadapter.replay.restore import load_model

    keras.utils.set_random_seed(41)
    x, y = gm.data(batches=3, bad_batch=1)
    model = keras.Sequential(
        [keras.Input((gm.FEATURES,)), keras.layers.Lambda(lambda t: t * 2.0), keras.layers.Dense(1)]
    )
    model.compile(keras.optimizers.SGD(0.01), "mse")
    guard = NanGuard(tmp_path, verbose=False)
    model.fit(x, y, batch_size=gm.BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[guard])
    bundle = CaptureBundle.load(guard.last_bundle)
    with pytest.raises(BundleError, match="could not be loaded.*safe_mode") as raised:
        load_model(bundle)
    assert "\n" not in str(raised.value)


# ---- weights once, streamed, with progress --------------------------------------------------------------------


def test_weights_are_written_one_array_at_a_time(tmp_path):
    """A generator of 16 arrays of 8 MB goes to disk holding about one of them in memory, not all 128 MB."""
    import tracemalloc

    size = 1 << 20  # float64: 8 MB each

    def arrays():
        for index in range(16):
            yield f"w{index:03d}", np.full(size, float(index))

    tracemalloc.start()
    try:
        with BundleWriter(tmp_path, "big-step1") as writer:
            writer.write_arrays("weights.npz", arrays(), total=16 * 8 * size)
            _, peak = tracemalloc.get_traced_memory()
            writer.abort()
    finally:
        tracemalloc.stop()
    assert peak < 3 * 8 * size, f"peak {peak / 1e6:.0f} MB: the arrays were held together"


def test_a_write_over_a_second_shows_progress_and_its_peak_memory(tmp_path, monkeypatch):
    """The progress line and the last line with size, time and peak RSS; a quick write stays silent."""
    import io

    from pyadapter.capture import progress as progress_module

    quiet = io.StringIO()
    with BundleWriter(tmp_path, "quick-step1", progress_module.WriteProgress(stream=quiet)) as writer:
        writer.write_arrays("batch.npz", {"a000": np.zeros(3)})
        writer.commit({"kind": "keras_fit", "step": 1})
    assert quiet.getvalue() == ""

    monkeypatch.setattr(progress_module, "QUIET_SECONDS", 0.0)  # as if the write were slow
    monkeypatch.setattr(progress_module, "EVERY_SECONDS", 0.0)
    shown = io.StringIO()
    progress = progress_module.WriteProgress(stream=shown)
    with BundleWriter(tmp_path, "slow-step1", progress) as writer:
        writer.write_arrays(
            "weights.npz", ((f"w{i:03d}", np.zeros(1 << 18)) for i in range(4)), total=4 << 21
        )
        final = writer.commit({"kind": "keras_fit", "step": 1})
    progress.finish(final)
    lines = shown.getvalue().splitlines()
    assert "NanGuard: writing the capture bundle: weights.npz 100% of 8.0 MB" in "\n".join(lines)
    assert any(line.startswith("NanGuard: writing the capture bundle: checking") for line in lines)
    assert lines[-1].startswith("NanGuard: writing the capture bundle: done, 8.0 MB in ")
    assert "process peak RSS" in lines[-1] and lines[-1].endswith(str(final))


@slow
def test_the_weights_are_stored_once_and_older_bundles_still_load(real_bundle, tmp_path):
    """model.keras holds the architecture and compile settings only; the values are in weights.npz once. A bundle
    written before (model.keras with Keras's model.weights.h5 inside) still loads, to the same model."""
    import zipfile

    import keras

    from pyadapter.capture.bundle_format import MANIFEST
    from pyadapter.replay.restore import load_model

    bundle = CaptureBundle.load(real_bundle)
    with zipfile.ZipFile(bundle.model_path) as archive:
        assert sorted(archive.namelist()) == ["config.json", "metadata.json"]
    assert bundle.model_path.stat().st_size < 20_000, "model.keras holds no values"
    model = load_model(bundle)  # (tests/test_guard.py compares its values with the trained model's)
    assert model.optimizer is not None and int(model.optimizer.iterations.numpy()) == bundle.step

    # The same step as an older nanlens wrote it: Keras's whole archive beside weights.npz.
    with BundleWriter(tmp_path, "old-step2") as writer:
        for name in bundle.manifest["files"]:
            if name != "model.keras":
                writer.file(name).write_bytes((bundle.path / name).read_bytes())
        model.save(writer.file("model.keras"))
        old = CaptureBundle.load(writer.commit({k: v for k, v in bundle.manifest.items() if k != "files"}))
    with zipfile.ZipFile(old.model_path) as archive:
        assert "model.weights.h5" in archive.namelist()
    assert (old.path / MANIFEST).is_file()
    again = load_model(old)
    assert [v.numpy().tolist() for v in again.weights] == [v.numpy().tolist() for v in model.weights]
    assert [v.numpy().tolist() for v in again.optimizer.variables] == [
        v.numpy().tolist() for v in model.optimizer.variables
    ]
    assert keras.ops.convert_to_numpy(again.optimizer.iterations) == bundle.step
