"""Every parser survives every file: a bundle or a dump is data, and no file, however made, gets more than one
line of error out of a reader. Never a traceback, a hang or unbounded memory.

For each reader (JSON documents: manifest.json and findings.json; `.npz` headers and zip directories; the
checkpoint index; the tfdbg2 record framing and its decoders) a table of hand-made bad inputs (nesting 100k
levels deep, 1e400, 5000-digit integers, wrong JSON types, truncated files, lying length and size fields, bad
checksums in every region of real records) asserts the one error type and its reason; then a fixed-seed random
mutation loop (500 mutations each, a few seconds) over a real bundle and a real dump, made by the
project's own code (NanGuard, guard_step, `nanlens run --dump`), asserts that nothing else ever escapes.

Longer run: ``NANLENS_FUZZ_CASES=5000 pytest tests/test_parsers_survive.py -k random``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from pyadapter import safejson
from pyadapter.capture import checkpoint_index, integrity, storage
from pyadapter.capture.bundle_format import BundleError, BundleWriter, parse_manifest
from pyadapter.capture.reader import CaptureBundle
from pyadapter.dump import ScanError, scan_dump, tfrecord, traces
from pyadapter.dump.tfrecord import masked_crc32c
from pyadapter.findings import Findings, FindingsError, load_findings

PROGRAMS = Path(__file__).parent / "programs"
REPO = Path(__file__).parent.parent
FUZZ_CASES = int(os.environ.get("NANLENS_FUZZ_CASES", "500"))
FUZZ_SECONDS = float(
    os.environ.get("NANLENS_FUZZ_SECONDS", "90")
)  # the fixed-seed loops stay well under this
DEEP = "[" * 100_000 + "]" * 100_000
DEEP_OBJECT = '{"a":' * 100_000 + "1" + "}" * 100_000
slow = pytest.mark.slow


def one_line(error: BaseException) -> str:
    message = str(error)
    assert message and "\n" not in message and "Traceback" not in message, message
    return message


# ---- JSON: the one reader under manifest.json, findings.json and a Keras archive's config ------------------------


@pytest.mark.parametrize(
    "text, reason",
    [
        (DEEP, "nested deeper than 100 levels"),
        (DEEP_OBJECT, "nested deeper than 100 levels"),
        ("[" * 101 + "]" * 101, "nested deeper than 100 levels"),
        ('{"step": 1e400}', "number out of range (1e400)"),
        ('{"step": -1e400}', "number out of range (-1e400)"),
        ('{"step": 1' + "0" * 400 + ".5}", "number written with"),
        ('{"step": NaN}', "holds NaN, which is not JSON"),
        ('{"step": -Infinity}', "holds -Infinity, which is not JSON"),
        ('{"step": ' + "9" * 5000 + "}", "integer of 5000 digits"),
        ('{"step": -' + "9" * 41 + "}", "integer of 41 digits"),
        ('{"run": "\\ud800"}', "lone surrogate"),
        ('{"\\udfff": 1}', "lone surrogate"),
        ('{"run": "x"', "not valid JSON (Expecting ',' delimiter"),
        ("", "not valid JSON (Expecting value"),
        (b"\xff\xfe{}", "not UTF-8 text (byte 0)"),
        (b'{"run": "\xc3"}', "not UTF-8 text"),
    ],
    ids=lambda v: repr(v)[:30] if isinstance(v, (str, bytes)) else None,
)
def test_json_that_json_loads_would_choke_on_is_one_line(text, reason):
    with pytest.raises(safejson.JSONError) as raised:
        safejson.loads(text)
    assert reason in one_line(raised.value)


def test_json_within_bounds_is_read_as_json_loads_reads_it():
    text = json.dumps({"a": [1, -2, 3.5, None, True, "é😀"], "b": {"c": [[]]}, "n": 2**127})
    assert safejson.loads(text) == json.loads(text)
    assert safejson.loads("\ufeff" + "[" * 100 + "]" * 100) is not None, (
        "exactly 100 levels, a BOM is skipped"
    )


def test_json_files_are_read_no_further_than_their_limit(tmp_path):
    path = tmp_path / "big.json"
    path.write_text(json.dumps(["x" * 1000] * 100))
    with pytest.raises(safejson.JSONError, match="larger than 50000 bytes"):
        safejson.load_file(path, max_bytes=50_000)


# ---- findings.json --------------------------------------------------------------------------------------------

FINDING = {
    "file": "/p/train.py",
    "line": 3,
    "role": "origin",
    "op": {"name": "Log", "type": "Log"},
    "health": {"nan": 1, "size": 4},
    "inputs": [{"name": "x:0", "health": {"size": 4}}],
    "stack": [{"file": "/p/train.py", "line": 3, "function": "f"}],
    "message": "m",
}
DOCUMENT = {
    "schema": "nanlens.findings/1",
    "source": {"kind": "dump", "path": "/d", "hosts": ["h"]},
    "origin": FINDING,
    "findings": [FINDING],
}


def _with(path: tuple, value):  # type: ignore[no-untyped-def]
    doc = json.loads(json.dumps(DOCUMENT))
    target = doc
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return json.dumps(doc)


@pytest.mark.parametrize(
    "text, reason",
    [
        (DEEP, "nested deeper than 100 levels"),
        (_with(("findings",), "DEEP"), "nested deeper than 100 levels"),
        (_with(("origin", "line"), "1e400").replace('"1e400"', "1e400"), "number out of range"),
        (_with(("origin", "line"), 0).replace(": 0,", ": " + "7" * 5000 + ","), "integer of 5000 digits"),
        (_with(("origin", "line"), "3"), "field 'line' must be int, not str"),
        (_with(("origin", "line"), True), "field 'line' must be int, not bool"),
        (_with(("origin", "op"), ["Log"]), "field 'op' must be dict, not list"),
        (_with(("origin", "op", "name"), 5), "op field 'name' must be str"),
        (_with(("origin", "health"), [1]), "field 'health' must be dict"),
        (_with(("origin", "health", "nan"), "many"), "tensor health field 'nan' must be int"),
        (_with(("origin", "health", "shape"), [2, "x"]), "'shape' must be a list of integers"),
        (_with(("origin", "inputs"), {"a": 1}), "field 'inputs' must be list"),
        (_with(("origin", "inputs", 0), None), "input is not a JSON object"),
        (_with(("origin", "stack", 0), 7), "stack frame is not a JSON object"),
        (_with(("origin", "role"), "culprit"), "unknown finding role 'culprit'"),
        (_with(("origin", "cell"), -1), "cell must be a non-negative integer"),
        (_with(("findings",), {"0": FINDING}), "field 'findings' must be list"),
        (_with(("findings", 0), "x"), "finding is not a JSON object"),
        (_with(("source",), ["dump"]), "field 'source' must be dict"),
        (_with(("source", "kind"), "email"), "neither 'dump' nor 'bundle'"),
        (_with(("source", "hosts"), [1]), "'hosts' must be a list of strings"),
        (_with(("origin",), KeyError), "has no 'origin'"),
        (_with(("schema",), [[]]), "findings schema is 'list'"),
        (json.dumps(DOCUMENT)[:-20], "not valid JSON"),
        (b"\x80" + json.dumps(DOCUMENT).encode(), "not UTF-8 text"),
        ("[]", "findings document is not a JSON object"),
    ],
    ids=range(26),
)
def test_bad_findings_files_are_one_findings_error(tmp_path, text, reason):
    path = tmp_path / "findings.json"
    if isinstance(text, str):
        text = text.replace('"DEEP"', DEEP)
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    with pytest.raises(FindingsError) as raised:
        load_findings(path)
    message = one_line(raised.value)
    assert reason in message and str(path) in message


def test_a_good_findings_document_still_loads(tmp_path):
    path = tmp_path / "findings.json"
    path.write_text(json.dumps(DOCUMENT))
    findings = load_findings(path)
    assert findings.origin is not None and findings.origin.health.nan == 1 and findings.hosts == ["h"]
    assert Findings.from_json(findings.to_json()).to_json() == findings.to_json()


# ---- pull sizes and durable writes (no TensorFlow) --------------------------------------------------------------


def test_pull_sizes_are_parsed_or_refused():
    assert storage.parse_size("64G") == 64 << 30 and storage.parse_size("500M") == 500 << 20
    assert storage.parse_size("1.5GiB") == 3 << 29 and storage.parse_size("1000") == 1000
    for bad in ("", "G", "-1G", "lots", "nanG", "1e400"):
        with pytest.raises(ValueError):
            storage.parse_size(bad)


def test_every_file_and_folder_of_a_bundle_is_fsynced(tmp_path, monkeypatch):
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    tmp_path = Path(os.path.realpath(tmp_path))

    if not os.path.exists("/proc/self/fd"):
        pytest.skip("needs /proc to name the synced files")
    monkeypatch.setattr(os, "fsync", fsync)
    with BundleWriter(tmp_path, "run-step1") as writer:
        writer.write_arrays("batch.npz", {"a000": np.zeros(3)})
        writer.write_arrays("weights.npz", {"w000": np.ones(2)})
        writer.file("checkpoint/ckpt.index").write_bytes(b"index")
        writer.file("checkpoint/ckpt.data-00000-of-00001").write_bytes(b"data")
        writer.file("findings.json").write_text("{}")
        tmp = writer.tmp
        final = writer.commit({"kind": "custom_loop", "step": 1})
    names = [
        "batch.npz",
        "weights.npz",
        "checkpoint/ckpt.index",
        "checkpoint/ckpt.data-00000-of-00001",
        "findings.json",
        "manifest.json",
    ]
    for name in names:
        assert str(tmp / name) in synced, f"{name} was not fsynced before the rename"
    assert str(tmp / "checkpoint") in synced and str(tmp) in synced, "the bundle's folders are fsynced"
    assert synced[-1] == str(tmp_path), "the capture folder is fsynced after the rename"
    assert final.is_dir() and not tmp.exists()


# ---- real files, made by the project's own code -----------------------------------------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.fixture(scope="module")
def real(tmp_path_factory) -> dict[str, Path]:
    """A Keras-fit bundle (NanGuard; model.keras, findings.json), a custom-loop bundle (guard_step; checkpoint,
    findings.json) and a FULL_HEALTH dump (`nanlens run --dump`), made at once by three processes."""
    root = tmp_path_factory.mktemp("real")
    jobs = {
        "fit": [sys.executable, str(PROGRAMS / "replay_keras_layer.py"), str(root / "fit")],
        "loop": [sys.executable, str(PROGRAMS / "replay_custom_loop.py"), str(root / "loop")],
        "dump": [
            sys.executable,
            "-m",
            "pyadapter",
            "run",
            "--dump",
            str(root / "dump"),
            "--",
            "log_softmax.py",
        ],
    }
    started = {
        name: subprocess.Popen(
            command,
            cwd=str(PROGRAMS),
            env=_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name, command in jobs.items()
    }
    out: dict[str, Path] = {}
    for name, process in started.items():
        output, _ = process.communicate(timeout=300)
        if name == "dump":
            out[name] = root / "dump"
            assert process.returncode == 0 and any((root / "dump").iterdir()), output[-2000:]
        else:
            bundles = [p for p in (root / name).iterdir() if (p / "manifest.json").is_file()]
            assert len(bundles) == 1, output[-2000:]
            out[name] = bundles[0]
    assert (out["fit"] / "findings.json").is_file() and (out["loop"] / "checkpoint" / "ckpt.index").is_file()
    return out


@pytest.fixture
def fit(real, tmp_path) -> Path:
    return Path(shutil.copytree(real["fit"], tmp_path / "fit"))


@pytest.fixture
def loop(real, tmp_path) -> Path:
    return Path(shutil.copytree(real["loop"], tmp_path / "loop"))


def rehash(bundle: Path) -> None:
    """What a careful forger does: the manifest's sizes and hashes match the changed files."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    for name in manifest["files"]:
        data = (bundle / name).read_bytes()
        manifest["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    (bundle / "manifest.json").write_text(json.dumps(manifest))


def refused(bundle: Path, reason: str) -> str:
    with pytest.raises(BundleError) as raised:
        CaptureBundle.load(bundle)
    message = one_line(raised.value)
    assert message.startswith(f"{bundle}: ") and reason in message, message
    return message


# ---- manifest.json ----------------------------------------------------------------------------------------------


def _manifest_with(change):  # type: ignore[no-untyped-def]
    def edit(bundle: Path) -> None:
        manifest = json.loads((bundle / "manifest.json").read_text())
        text = change(manifest)
        (bundle / "manifest.json").write_text(text if isinstance(text, str) else json.dumps(manifest))

    return edit


def _set(path: tuple[str, ...], value):  # type: ignore[no-untyped-def]
    def change(manifest):  # type: ignore[no-untyped-def]
        *parents, last = path
        target = manifest
        for key in parents:
            target = target[key]
        target[last] = "__VALUE__" if isinstance(value, str) and value.startswith("raw:") else value
        if isinstance(value, str) and value.startswith("raw:"):
            return json.dumps(manifest).replace('"__VALUE__"', value[4:])
        return None

    return _manifest_with(change)


MANIFEST_CASES = [
    (
        "deep-nesting",
        lambda b: (b / "manifest.json").write_text(DEEP),
        "manifest.json is nested deeper than 100",
    ),
    ("deep-inside", _set(("rng", "note"), f"raw:{DEEP_OBJECT}"), "manifest.json is nested deeper than 100"),
    ("1e400", _set(("step",), "raw:1e400"), "manifest.json holds a number out of range (1e400)"),
    (
        "fit-rows-outside",
        _set(("fit_rows",), {"indices": [3, 900], "array_rows": 10}),
        "manifest field 'fit_rows' has an index that is not a row of the array",
    ),
    ("fit-rows-type", _set(("fit_rows",), [1, 2]), "manifest field 'fit_rows' is not an object"),
    ("huge-int", _set(("step",), "raw:" + "9" * 5000), "manifest.json holds an integer of 5000 digits"),
    ("nan", _set(("epoch",), "raw:NaN"), "manifest.json holds NaN"),
    ("surrogate", _set(("run",), 'raw:"\\udc80"'), "lone surrogate"),
    (
        "not-utf8",
        lambda b: (b / "manifest.json").write_bytes(b"\xc0" + (b / "manifest.json").read_bytes()),
        "manifest.json is not UTF-8 text",
    ),
    (
        "truncated",
        lambda b: (b / "manifest.json").write_bytes((b / "manifest.json").read_bytes()[:300]),
        "manifest.json is not valid JSON",
    ),
    ("empty", lambda b: (b / "manifest.json").write_bytes(b""), "manifest.json is not valid JSON"),
    ("a-list", lambda b: (b / "manifest.json").write_text("[1]"), "manifest.json is not a JSON object"),
    ("format-list", _set(("format",), [DEEP[:10]]), "bundle format 'list' is not supported"),
    ("kind-list", _set(("kind",), ["keras_fit"]), "manifest field 'kind' is missing or has the wrong type"),
    ("step-str", _set(("step",), "3"), "manifest field 'step' is missing or has the wrong type"),
    ("step-bool", _set(("step",), True), "manifest field 'step' is missing or has the wrong type"),
    ("versions-list", _set(("versions",), []), "manifest field 'versions'"),
    ("non-finite-list", _set(("non_finite",), [1]), "manifest field 'non_finite'"),
    ("gradients-int", _set(("non_finite", "gradients"), 0), "manifest non_finite:"),
    ("structure-list", _set(("batch", "structure"), []), "manifest has no batch structure"),
    ("files-list", _set(("files",), ["batch.npz"]), "manifest 'files' is not a mapping"),
    ("file-entry-str", _set(("files", "batch.npz"), "sha"), "manifest entry for batch.npz has no sha256"),
    ("size-huge", _set(("files", "batch.npz", "size"), 2**62), "batch.npz has"),
    ("entry-script-str", _set(("entry_script",), "/bin/sh"), "field 'entry_script' has the wrong type"),
    (
        "argv-ints",
        _set(("entry_script", "argv"), [1, 2]),
        "'entry_script.argv' holds something other than strings",
    ),
    ("cwd-list", _set(("entry_script", "cwd"), ["/"]), "'entry_script.cwd' has the wrong type"),
    ("variables-dict", _set(("weights", "variables"), {"key": "w000"}), "'weights.variables' is not a list"),
    (
        "variable-key-int",
        _set(("weights", "variables"), [{"key": 0, "path": "x"}]),
        "'weights.variables' is not",
    ),
    ("history-ints", _set(("loss_history",), [1, 2]), "'loss_history' holds something other than objects"),
    ("host-list", _set(("host",), ["vm"]), "field 'host' has the wrong type"),
    ("epoch-str", _set(("epoch",), "0"), "field 'epoch' has the wrong type"),
    ("cluster-shards-dict", _set(("cluster",), {"shards": {}}), "'cluster.shards' is not a list"),
    (
        "pickle-listed",
        _set(("files", "evil.pkl"), {"sha256": "0" * 64, "size": 1}),
        "evil.pkl is not a file a bundle",
    ),
    (
        "name-escapes",
        _set(("files", "../x.npz"), {"sha256": "0" * 64, "size": 1}),
        "path '../x.npz' leaves the bundle",
    ),
]


@slow
@pytest.mark.parametrize("edit, reason", [c[1:] for c in MANIFEST_CASES], ids=[c[0] for c in MANIFEST_CASES])
def test_bad_manifests_are_one_bundle_error(fit, edit, reason):
    edit(fit)
    refused(fit, reason)
    data = (fit / "manifest.json").read_bytes()
    try:  # the pull path parses the same bytes (before it checks any file)
        storage._entries(parse_manifest(data))
    except (BundleError, integrity.IntegrityError) as error:
        one_line(error)


@slow
def test_an_oversized_manifest_is_not_read(fit, monkeypatch):
    from pyadapter.capture import bundle_format

    monkeypatch.setattr(bundle_format, "MAX_MANIFEST_BYTES", 1000)
    refused(fit, "manifest.json is implausibly large")


@slow
def test_accessors_of_a_loaded_bundle_give_bundle_errors(loop):
    """Fields the load does not need but readers do: a batch structure that does not fit, a pickle-free npz
    that is damaged after loading."""
    manifest = json.loads((loop / "manifest.json").read_text())
    manifest["batch"]["structure"] = {"type": "namedtuple", "name": "B", "fields": ["class"], "items": [{}]}
    (loop / "manifest.json").write_text(json.dumps(manifest))
    bundle = CaptureBundle.load(loop)
    with pytest.raises(BundleError, match="namedtuple description has invalid names"):
        bundle.batch()
    manifest["batch"]["structure"] = {
        "type": "dict",
        "keys": ["args", "kwargs"],
        "items": [{"type": "list", "items": []}, {"type": "list", "items": []}],
    }
    (loop / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="keyword arguments are not a mapping"):
        CaptureBundle.load(loop).step_arguments()
    for junk in ("\x1b[31mred", "", "a" * 201, 7):  # a step's object argument is a class name, nothing else
        manifest["batch"]["structure"] = {"type": "object", "class": junk}
        (loop / "manifest.json").write_text(json.dumps(manifest))
        with pytest.raises(BundleError, match="object description has no class name"):
            CaptureBundle.load(loop).batch()
    (loop / "batch.npz").write_bytes((loop / "batch.npz").read_bytes()[:-30])  # after the load's checks
    with pytest.raises(BundleError) as raised:
        bundle.batch()
    assert "batch.npz is not a readable .npz" in one_line(raised.value)


# ---- .npz headers and zip directories ---------------------------------------------------------------------------


def npy(header: str, data: bytes = b"") -> bytes:
    """A .npy file (version 1.0) with a header written by hand."""
    raw = header.encode("latin1")
    raw += b" " * (63 - (10 + len(raw)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(raw)) + raw + data


def npz(members: dict[str, bytes], compression: int = zipfile.ZIP_STORED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _batch_member(bundle: Path) -> tuple[str, bytes]:
    with zipfile.ZipFile(bundle / "batch.npz") as archive:
        name = archive.namelist()[0]
        return name, archive.read(name)


def _lie_in_directory(field: str, value: int):  # type: ignore[no-untyped-def]
    """Rewrites one field of the batch.npz's first central directory entry (or of its end record)."""

    def edit(data: bytes) -> bytes:
        out = bytearray(data)
        if field == "cd_size":
            at = out.rfind(b"PK\x05\x06")
            struct.pack_into("<I", out, at + 12, value)
        else:
            at = out.find(b"PK\x01\x02")
            offset = {"compress_size": 20, "file_size": 24, "flags": 8, "method": 10}[field]
            struct.pack_into("<I" if "size" in field else "<H", out, at + offset, value)
        return bytes(out)

    return edit


NPZ_CASES = [
    (
        "huge-shape",
        lambda n, d: npz(
            {n: npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }", d[-16:])}
        ),
        "declares 4000000000000 bytes of data but holds 16",
    ),
    (
        "shape-short",
        lambda n, d: npz({n: npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", d[-16:])}),
        "declares 4 bytes of data but holds 16",
    ),
    (
        "object-dtype",
        lambda n, d: npz({n: npy("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", b"\x80\x04.")}),
        "holds a pickled object array",
    ),
    (
        "header-deep",
        lambda n, d: npz({n: npy("{'descr': " + "(" * 3000 + ")" * 3000 + "}")}),
        "not a valid .npy",
    ),
    (
        "header-huge-int",
        lambda n, d: npz(
            {n: npy("{'descr': '<f4', 'fortran_order': False, 'shape': (" + "9" * 5000 + ",), }")}
        ),
        "not a valid .npy",
    ),
    ("header-garbage", lambda n, d: npz({n: npy("__import__('os')")}), "not a valid .npy"),
    (
        "descr-bad",
        lambda n, d: npz({n: npy("{'descr': 'zz9', 'fortran_order': False, 'shape': (1,), }")}),
        "not a valid .npy",
    ),
    ("npy-truncated", lambda n, d: npz({n: d[:9]}), "not a valid .npy"),
    ("npy-version", lambda n, d: npz({n: b"\x93NUMPY\x09\x00" + d[8:]}), "unsupported .npy version"),
    ("compressed", lambda n, d: npz({n: d}, zipfile.ZIP_DEFLATED), "compressed with method 8 (refused)"),
    ("member-escape", lambda n, d: npz({"../x.npy": d}), "unsafe path: '../x.npy'"),
    ("member-not-npy", lambda n, d: npz({n: d, "run.py": b"print(1)"}), "holds 'run.py', not a .npy array"),
    ("not-a-zip", lambda n, d: d, "batch.npz is not a valid zip archive"),
    ("empty", lambda n, d: b"", "batch.npz is not a valid zip archive"),
    (
        "huge-directory",
        lambda n, d: _lie_in_directory("cd_size", 1 << 30)(npz({n: d})),
        "implausibly large zip directory (1 entries, 1073741824 bytes)",
    ),
    (
        "lying-file-size",
        lambda n, d: _lie_in_directory("file_size", 1 << 31)(npz({n: d})),
        "declares sizes its archive does not hold",
    ),
    (
        "lying-compress-size",
        lambda n, d: _lie_in_directory("compress_size", 1 << 31)(npz({n: d})),
        "declares sizes its archive does not hold",
    ),
    ("encrypted", lambda n, d: _lie_in_directory("flags", 1)(npz({n: d})), "is encrypted"),
    ("method-99", lambda n, d: _lie_in_directory("method", 99)(npz({n: d})), "compressed with method 99"),
]


@slow
@pytest.mark.parametrize("make, reason", [c[1:] for c in NPZ_CASES], ids=[c[0] for c in NPZ_CASES])
def test_bad_npz_files_are_one_bundle_error(fit, make, reason):
    name, data = _batch_member(fit)
    (fit / "batch.npz").write_bytes(make(name, data))
    rehash(fit)
    refused(fit, reason)


def _keras_archive(bundle: Path, change) -> None:  # type: ignore[no-untyped-def]
    with zipfile.ZipFile(bundle / "model.keras") as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    change(members)
    (bundle / "model.keras").write_bytes(npz(members, zipfile.ZIP_DEFLATED))


@slow
@pytest.mark.parametrize(
    "change, reason",
    [
        (
            lambda m: m.update({"config.json": b" " * (65 << 20)}),
            "config.json is implausibly large (68157440 bytes)",
        ),
        (lambda m: m.update({"evil.pkl": b"\x80\x04."}), "holds unexpected member 'evil.pkl'"),
        (lambda m: m.update({"/etc/passwd": b"x"}), "unsafe path: '/etc/passwd'"),
    ],
    ids=["bomb", "pickle", "absolute"],
)
def test_bad_keras_archives_are_one_bundle_error(fit, change, reason):
    _keras_archive(fit, change)
    rehash(fit)
    refused(fit, reason)


@slow
def test_a_keras_member_that_claims_to_expand_a_thousandfold_is_a_zip_bomb(fit):
    _keras_archive(fit, lambda m: None)  # deflated
    (fit / "model.keras").write_bytes(
        _lie_in_directory("file_size", 3_000_000_000)((fit / "model.keras").read_bytes())
    )
    rehash(fit)
    refused(fit, "metadata.json expands to 3000000000 bytes (a zip bomb)")


@slow
def test_a_deeply_nested_keras_config_is_no_dtype_policy(fit):
    _keras_archive(fit, lambda m: m.update({"config.json": DEEP.encode()}))
    rehash(fit)
    assert CaptureBundle.load(fit).saved_dtype_policy_name() is None


# ---- the checkpoint index ---------------------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | 0x80 if value else byte)
        if not value:
            return bytes(out)


def _block(entries: list[tuple[bytes, bytes]]) -> bytes:
    body = b"".join(_varint(0) + _varint(len(k)) + _varint(len(v)) + k + v for k, v in entries)
    return body + struct.pack("<II", 0, 1)


def sstable(entries: list[tuple[bytes, bytes]]) -> bytes:
    """A table as TensorFlow writes a checkpoint index (one data block; TensorFlow restores from it)."""
    out = bytearray()
    handles = []
    for block in (_block(entries), _block([])):
        handles.append((len(out), len(block)))
        out += block + b"\0" + struct.pack("<I", masked_crc32c(block + b"\0"))
    index = _block([(entries[-1][0] + b"\xff", _varint(handles[0][0]) + _varint(handles[0][1]))])
    handles.append((len(out), len(index)))
    out += index + b"\0" + struct.pack("<I", masked_crc32c(index + b"\0"))
    footer = b"".join(_varint(v) for handle in handles[1:] for v in handle)
    return bytes(out + footer + bytes(40 - len(footer)) + struct.pack("<Q", 0xDB4775248B80FB57))


def entry(dtype: int, dims: list[int], offset: int, size: int, shard: int = 0) -> bytes:
    shape = b"".join(
        b"\x12" + _varint(len(d)) + d for d in (b"\x08" + _varint(dim % (1 << 64)) for dim in dims)
    )
    return (
        b"\x08"
        + _varint(dtype)
        + b"\x12"
        + _varint(len(shape))
        + shape
        + b"\x18"
        + _varint(shard)
        + b"\x20"
        + _varint(offset)
        + b"\x28"
        + _varint(size)
    )


KERNEL = b"optimizer/_trainable_variables/0/.ATTRIBUTES/VARIABLE_VALUE"  # [4, 8] float32 in the loop program


def _index_with(change):  # type: ignore[no-untyped-def]
    def edit(bundle: Path) -> None:
        path = bundle / "checkpoint" / "ckpt.index"
        entries = dict(checkpoint_index._Reader(path.read_bytes()).table())
        assert KERNEL in entries, sorted(entries)
        result = change(entries)
        path.write_bytes(result if isinstance(result, bytes) else sstable(sorted(entries.items())))

    return edit


def _set_kernel(value: bytes):  # type: ignore[no-untyped-def]
    return _index_with(lambda entries: entries.__setitem__(KERNEL, value))


def _index_bytes(change):  # type: ignore[no-untyped-def]
    return lambda bundle: (bundle / "checkpoint" / "ckpt.index").write_bytes(
        change((bundle / "checkpoint" / "ckpt.index").read_bytes())
    )


INDEX_CASES = [
    (
        "huge-shape",
        _set_kernel(entry(1, [1 << 20, 1 << 20], 0, 128)),
        "of shape [1048576, 1048576] does not fit",
    ),
    ("size-lies", _set_kernel(entry(1, [4, 8], 0, 132)), "of shape [4, 8] does not fit its 132 bytes"),
    ("offset-outside", _set_kernel(entry(1, [4, 8], 1 << 40, 128)), "lies outside the data files"),
    ("negative-offset", _set_kernel(entry(1, [4, 8], -8 % (1 << 64), 128)), "lies outside the data files"),
    ("negative-dim", _set_kernel(entry(1, [-1, 8], 0, 128)), "has a negative dimension"),
    ("rank-65", _set_kernel(entry(1, [1] * 65, 0, 4)), "more than 64 dimensions"),
    ("strings", _set_kernel(entry(7, [1 << 30], 0, 128)), "does not fit its 128 bytes"),
    ("shard-5", _set_kernel(entry(1, [4, 8], 0, 128, shard=5)), "lies outside the data files"),
    (
        "two-shards",
        _index_with(lambda e: e.__setitem__(b"", b"\x08\x02")),
        "needs checkpoint/ckpt.data-00000-of-00002",
    ),
    ("no-header", _index_with(lambda e: e.__delitem__(b"")), "(no header entry)"),
    ("garbage-entry", _set_kernel(b"\x0a\xff\xff\xff\xff\x0f"), "runs past the end"),
    ("no-magic", _index_bytes(lambda d: d[:-1] + b"\0"), "no table magic number"),
    ("truncated", _index_bytes(lambda d: d[: len(d) // 2]), "not a valid checkpoint index"),
    ("empty", _index_bytes(lambda d: b""), "shorter than a table footer"),
    (
        "handle-outside",
        _index_bytes(lambda d: d[:-48] + _footer((0, 1 << 40), (0, 8))),
        "a block lies outside the file",
    ),
    ("compressed-block", _index_bytes(lambda d: _compress_first_block(d)), "compressed block (type 1)"),
]


def _footer(metaindex: tuple[int, int], index: tuple[int, int]) -> bytes:
    handles = b"".join(_varint(v) for v in (*metaindex, *index))
    return handles + bytes(40 - len(handles)) + struct.pack("<Q", 0xDB4775248B80FB57)


def _compress_first_block(data: bytes) -> bytes:
    """Sets the compression byte of the index block (the footer's second handle)."""
    footer = len(data) - 48
    _, pos = checkpoint_index.wire.read_varint(data, footer)
    _, pos = checkpoint_index.wire.read_varint(data, pos)
    offset, pos = checkpoint_index.wire.read_varint(data, pos)
    size, _ = checkpoint_index.wire.read_varint(data, pos)
    return data[: offset + size] + b"\x01" + data[offset + size + 1 :]


@slow
@pytest.mark.parametrize("edit, reason", [c[1:] for c in INDEX_CASES], ids=[c[0] for c in INDEX_CASES])
def test_bad_checkpoint_indexes_are_one_bundle_error(loop, edit, reason):
    edit(loop)
    rehash(loop)
    message = refused(loop, reason)
    assert "checkpoint/ckpt.index" in message


@slow
def test_a_rewritten_but_honest_index_still_loads(loop):
    _index_with(lambda entries: None)(loop)
    rehash(loop)
    assert CaptureBundle.load(loop).checkpoint_prefix is not None


@slow
def test_the_index_reader_is_linear_on_keys_made_to_be_quadratic(loop):
    """Each entry shares the whole previous key and adds one byte: rebuilding keys by copying would be
    quadratic; the reader stops at its key length limit instead, quickly."""
    header = _varint(0) + _varint(0) + _varint(2) + b"\x08\x01"
    keys = b"".join(_varint(i) + _varint(1) + _varint(0) + b"k" for i in range(200_000))
    block = header + keys + struct.pack("<II", 0, 1)
    index = _block([(b"\xff", _varint(0) + _varint(len(block)))])
    data = block + b"\0\0\0\0\0" + index + b"\0\0\0\0\0" + _footer((0, 0), (len(block) + 5, len(index)))
    (loop / "checkpoint" / "ckpt.index").write_bytes(data)
    rehash(loop)
    started = time.perf_counter()
    refused(loop, "more than 64 MB of keys")
    assert time.perf_counter() - started < 5
    one_long_key = (
        header + _varint(0) + _varint(70_000) + _varint(0) + b"k" * 70_000 + struct.pack("<II", 0, 1)
    )
    index = _block([(b"\xff", _varint(0) + _varint(len(one_long_key)))])
    (loop / "checkpoint" / "ckpt.index").write_bytes(
        one_long_key + b"\0" * 5 + index + b"\0" * 5 + _footer((0, 0), (len(one_long_key) + 5, len(index)))
    )
    rehash(loop)
    refused(loop, "a key longer than 65536 bytes")


# ---- the tfdbg2 reader ------------------------------------------------------------------------------------------


def record_offsets(data: bytes) -> list[int]:
    offsets, pos = [], 0
    while pos + 12 <= len(data):
        offsets.append(pos)
        pos += 16 + struct.unpack_from("<Q", data, pos)[0]
    return offsets


@pytest.fixture
def dump(real, tmp_path) -> Path:
    return Path(shutil.copytree(real["dump"], tmp_path / "dump"))


def only(dump: Path, suffix: str) -> Path:
    (path,) = dump.glob(f"*.{suffix}")
    return path


def scan_survives(dump: Path):  # type: ignore[no-untyped-def]
    """scan_dump gives Findings that survive the JSON round trip the editor makes, or one ScanError line."""
    try:
        findings = scan_dump(dump)
    except ScanError as error:
        one_line(error)
        return None
    text = json.dumps(findings.to_json(), allow_nan=False)
    assert Findings.from_json(safejson.loads(text)).to_json() == json.loads(text)
    for warning in findings.extra["warnings"]:
        assert "\n" not in warning
    return findings


SUFFIXES = ("metadata", "source_files", "stack_frames", "graphs", "execution", "graph_execution_traces")


@slow
@pytest.mark.parametrize("suffix", SUFFIXES)
def test_a_bad_length_checksum_on_any_record_stops_that_file_exactly_there(dump, suffix):
    """Every record's length is verified before it is used (not only the first record's): a damaged length
    anywhere is reported at its own offset with the records before it kept, and nothing after it is read."""
    path = only(dump, suffix)
    original = path.read_bytes()
    offsets = record_offsets(original)
    picks = sorted(set(offsets[:3] + offsets[len(offsets) // 2 : len(offsets) // 2 + 2] + offsets[-3:]))
    for offset in picks:
        for byte in (0, 5, 9):  # the length's low and high bytes, its CRC
            data = bytearray(original)
            data[offset + byte] ^= 0x10
            path.write_bytes(bytes(data))
            records = tfrecord.RecordFile(str(path))
            assert sum(1 for _ in records.records()) == offsets.index(offset)
            assert records.issue is not None and records.issue.offset == offset
            assert records.issue.reason == (tfrecord.NOT_TFRECORD if offset == 0 else tfrecord.CORRUPT_HEADER)
            findings = scan_survives(dump)
            if findings is not None:
                assert any(
                    s["file"] == str(path) and s["offset"] == offset for s in findings.extra["skipped"]
                ), (suffix, offset, findings.extra["skipped"])
    path.write_bytes(original)


@slow
@pytest.mark.parametrize("suffix", SUFFIXES)
def test_flipped_bytes_in_every_region_of_real_records(dump, suffix):
    path = only(dump, suffix)
    original = path.read_bytes()
    offsets = record_offsets(original)
    picks = sorted(set(offsets[:3] + offsets[len(offsets) // 2 : len(offsets) // 2 + 1] + offsets[-3:]))
    for offset in picks:
        length = struct.unpack_from("<Q", original, offset)[0]
        regions = [
            offset + 3,
            offset + 7,
            offset + 8,
            offset + 11,
            offset + 12,
            offset + 12 + length // 2,
            offset + 11 + length,
            offset + 12 + length,
            offset + 15 + length,
        ]
        for at in regions:
            if at >= len(original):
                continue
            for flip in (0x01, 0xFF):
                data = bytearray(original)
                data[at] ^= flip
                path.write_bytes(bytes(data))
                scan_survives(dump)
    path.write_bytes(original)


@slow
@pytest.mark.parametrize("suffix", SUFFIXES)
def test_truncated_at_and_around_every_record(dump, suffix):
    path = only(dump, suffix)
    original = path.read_bytes()
    offsets = record_offsets(original)
    cuts = {0, 1, len(original) - 1}
    for offset in offsets[:6] + offsets[-6:]:
        cuts.update({offset, offset + 5, offset + 12, offset + 13})
    for cut in sorted(c for c in cuts if 0 <= c < len(original)):
        path.write_bytes(original[:cut])
        scan_survives(dump)
    path.write_bytes(original)


def _framed(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", 0)


@slow
@pytest.mark.parametrize(
    "payload",
    [
        b"\x0b" * 100_000,  # 100k nested group starts
        b"\x52\xff\xff\x03"
        + b"\x52\xfa\xff\x03" * 30_000,  # nested length-delimited messages, claiming too much
        b"\x09" + b"\xff" * 8 + b"\x52\x05" + b"\x2a\x03\x22\x01\x7f",  # a trace whose tensor runs short
        b"\xff" * 11,  # a varint longer than 10 bytes
        b"",
    ],
    ids=["groups", "nested", "short-tensor", "long-varint", "empty"],
)
def test_records_that_are_no_debug_event_are_skipped(dump, payload):
    for suffix in ("graphs", "execution", "graph_execution_traces", "stack_frames", "source_files"):
        path = only(dump, suffix)
        original = path.read_bytes()
        offsets = record_offsets(original)
        first = original[: offsets[1] if len(offsets) > 1 else len(original)]
        path.write_bytes(original + _framed(payload) + first)
        findings = scan_survives(dump)
        assert findings is not None and findings.origin is not None, suffix
        path.write_bytes(original)


@slow
@pytest.mark.parametrize("which", ["traces", "records"])
def test_a_lying_length_with_a_valid_checksum_reads_no_more_than_a_chunk(dump, monkeypatch, which):
    """A length whose CRC matches but that does not lead to the next record is refused before anything is
    read for it (checked with 256-byte chunks, so the dump's records span many of them)."""
    chunk = 256
    monkeypatch.setattr(tfrecord, "CHUNK_SIZE", chunk)
    monkeypatch.setattr(traces, "CHUNK_SIZE", chunk)
    monkeypatch.setattr(traces, "BULK_CHUNK_SIZE", chunk)
    reads: list[int] = []

    class Counting(io.FileIO):
        def read(self, size: int = -1) -> bytes:  # type: ignore[override]
            if self.name == str(path):
                reads.append(size)
            return super().read(size)

        def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def, override]
            if self.name == str(path):
                reads.append(len(buffer))
            return super().readinto(buffer)

    def counting_open(path, mode="r", *args, **kwargs):  # type: ignore[no-untyped-def]
        return Counting(path, "r")

    path = only(dump, "graph_execution_traces" if which == "traces" else "graphs")
    original = path.read_bytes()
    offsets = record_offsets(original)
    at = offsets[1] if which == "traces" else offsets[len(offsets) // 2]
    biggest = max(struct.unpack_from("<Q", original, o)[0] for o in offsets) + 16
    lie = struct.pack("<Q", len(original) - at - 64)  # inside the file, nowhere near a record boundary
    assert len(original) - at - 64 > max(chunk, biggest), "the lie must be longer than any real record"
    data = bytearray(original)
    data[at : at + 12] = lie + struct.pack("<I", masked_crc32c(lie))
    path.write_bytes(bytes(data))
    monkeypatch.setattr(tfrecord, "open", counting_open, raising=False)
    monkeypatch.setattr(traces, "open", counting_open, raising=False)
    findings = scan_survives(dump)
    assert findings is not None
    assert any(
        s["offset"] == at and "do not lead to the next record" in s["reason"]
        for s in findings.extra["skipped"]
    ), findings.extra["skipped"]
    assert reads and max(reads) <= max(chunk, biggest), (
        f"read {max(reads)} bytes at once after a lying length"
    )


@slow
def test_a_record_over_the_size_limit_is_refused_before_it_is_read(dump, monkeypatch):
    path = only(dump, "graphs")
    data = path.read_bytes()
    offsets = record_offsets(data)
    lengths = [struct.unpack_from("<Q", data, o)[0] for o in offsets]
    limit = max(lengths) - 1
    assert limit > 2 * 64, "the dump's largest graph record spans several 64-byte chunks"
    monkeypatch.setattr(tfrecord, "MAX_RECORD_BYTES", limit)
    monkeypatch.setattr(tfrecord, "CHUNK_SIZE", 64)
    records = tfrecord.RecordFile(str(path))
    kept = sum(1 for _ in records.records())
    first_big = offsets[lengths.index(limit + 1)]
    assert records.issue is not None and records.issue.offset == first_big
    assert f"more than {limit}" in records.issue.reason and kept == offsets.index(first_big)


@slow
def test_a_dump_of_noise_is_one_scan_error(dump):
    noise = random.Random(5)
    for path in dump.iterdir():
        path.write_bytes(noise.randbytes(4096))
    with pytest.raises(ScanError) as raised:
        scan_dump(dump)
    assert "holds no readable tfdbg2 records (" in one_line(raised.value)
    assert "not a TFRecord file" in str(raised.value)


# ---- fixed-seed random mutations of real files ------------------------------------------------------------------


def _mutate_bytes(data: bytes, rng: random.Random, offsets: list[int]) -> bytes:
    out = bytearray(data)
    if not out:
        return rng.randbytes(rng.randint(1, 40))
    kind = rng.randrange(9)
    usable = [o for o in offsets if o + 12 <= len(out)]
    if kind == 0:  # a bit anywhere
        out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    elif kind == 1 and usable:  # a record header
        out[rng.choice(usable) + rng.randrange(12)] ^= rng.randrange(1, 256)
    elif kind == 2 and usable:  # a lying length with a valid checksum
        length = struct.pack(
            "<Q", rng.choice([0, 1, 7, 1 << 31, 1 << 40, (1 << 64) - 1, rng.randrange(len(out))])
        )
        at = rng.choice(usable)
        out[at : at + 12] = length + struct.pack("<I", masked_crc32c(length))
    elif kind == 3:
        del out[rng.randrange(len(out)) :]
    elif kind == 4:
        at = rng.randrange(len(out))
        out[at:at] = rng.randbytes(rng.randint(1, 30))
    elif kind == 5:
        at = rng.randrange(len(out))
        out[at : at + 64] = bytes(len(out[at : at + 64]))
    elif kind == 6:
        at = rng.randrange(len(out))
        out[at:at] = out[at : at + rng.randint(1, 500)]
    else:
        for _ in range(rng.randint(2, 20)):
            out[rng.randrange(len(out))] = rng.randrange(256)
    return bytes(out)


@slow
def test_random_mutations_of_a_real_dump(real, tmp_path):
    rng = random.Random(1515)
    source = real["dump"]
    originals = {p.name: p.read_bytes() for p in source.iterdir()}
    offsets = {name: record_offsets(data) for name, data in originals.items()}
    names = sorted(originals)
    work = tmp_path / "dump"
    outcomes: dict[str, int] = {}
    slowest = 0.0
    started = time.perf_counter()
    for case in range(FUZZ_CASES):
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        for name, data in originals.items():
            (work / name).write_bytes(data)
        for _ in range(rng.choice((1, 1, 2, 3))):
            name = rng.choice(names)
            (work / name).write_bytes(_mutate_bytes((work / name).read_bytes(), rng, offsets[name]))
        one = time.perf_counter()
        findings = scan_survives(work)
        slowest = max(slowest, time.perf_counter() - one)
        assert slowest < 10, f"case {case} took {slowest:.1f} s"
        kind = "ScanError" if findings is None else ("origin" if findings.origin else "no origin")
        outcomes[kind] = outcomes.get(kind, 0) + 1
    elapsed = time.perf_counter() - started
    print(f"\n{FUZZ_CASES} dump mutations in {elapsed:.1f} s (slowest {slowest:.2f} s): {outcomes}")
    assert elapsed < FUZZ_SECONDS * max(1, FUZZ_CASES / 500)
    assert len(outcomes) >= 2, "the mutations reach more than one outcome"


_WEIRD = [
    "raw:" + DEEP,
    "raw:" + DEEP_OBJECT,
    "raw:1e400",
    "raw:" + "9" * 5000,
    "raw:NaN",
    'raw:"\\ud800"',
    None,
    True,
    0,
    -1,
    2**63,
    1.5,
    "",
    "x" * 10_000,
    [],
    {},
    [1, "a", None],
    "../../etc/passwd",
    [[[[[]]]]],
]


def _mutate_json(text: str, rng: random.Random) -> str:
    document = json.loads(text)
    places: list[tuple] = []

    def walk(value, path):  # type: ignore[no-untyped-def]
        places.append(path)
        if isinstance(value, dict):
            for key, child in list(value.items())[:40]:
                walk(child, (*path, key))
        elif isinstance(value, list):
            for index, child in enumerate(value[:5]):
                walk(child, (*path, index))

    walk(document, ())
    path = rng.choice(places)
    value = rng.choice(_WEIRD)
    if not path:
        return value[4:] if isinstance(value, str) and value.startswith("raw:") else json.dumps(value)
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    if rng.random() < 0.25:
        del parent[path[-1]]
        return json.dumps(document)
    raw = isinstance(value, str) and value.startswith("raw:")
    parent[path[-1]] = "\x00RAW\x00" if raw else value
    out = json.dumps(document)
    return out.replace(json.dumps("\x00RAW\x00"), value[4:]) if raw else out


def _read_everything(bundle: CaptureBundle) -> None:
    """Everything a reader of a loaded bundle does without running its code."""
    for read in (
        bundle.batch,
        bundle.weights,
        lambda: bundle.non_finite,
        lambda: bundle.loss_history,
        lambda: bundle.entry_script,
        lambda: bundle.cluster,
        bundle.saved_dtype_policy_name,
        lambda: bundle.host,
        lambda: bundle.rng,
        lambda: bundle.model_info,
        lambda: (bundle.step, bundle.epoch, bundle.run),
        lambda: bundle.step_arguments() if bundle.kind == "custom_loop" else None,
        lambda: load_findings(bundle.findings_path) if bundle.findings_path else None,
    ):
        try:
            read()
        except (BundleError, FindingsError) as error:
            one_line(error)


@slow
def test_random_mutations_of_real_bundles(real, tmp_path):
    rng = random.Random(1516)
    sources = [real["fit"], real["loop"]]
    outcomes: dict[str, int] = {}
    slowest = 0.0
    started = time.perf_counter()
    work = tmp_path / "bundle"
    for case in range(FUZZ_CASES):
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(rng.choice(sources), work)
        names = sorted(str(p.relative_to(work)) for p in work.rglob("*") if p.is_file())
        target = work / rng.choice(names + ["manifest.json"] * 4 + ["findings.json"] * 2)
        if target.suffix == ".json" and rng.random() < 0.7:
            target.write_text(_mutate_json(target.read_text(), rng), encoding="utf-8", errors="surrogatepass")
        else:
            target.write_bytes(_mutate_bytes(target.read_bytes(), rng, record_offsets(b"")))
        if target.name != "manifest.json" and rng.random() < 0.8:
            rehash(work)  # reach the parsers behind the hashes
        one = time.perf_counter()
        try:
            bundle = CaptureBundle.load(work)
        except BundleError as error:
            one_line(error)
            outcome = "refused"
        else:
            _read_everything(bundle)
            outcome = "loaded"
        try:  # the pull path: the same manifest bytes, then the file list
            storage._entries(parse_manifest((work / "manifest.json").read_bytes()))
        except (BundleError, integrity.IntegrityError) as error:
            one_line(error)
        slowest = max(slowest, time.perf_counter() - one)
        assert slowest < 10, f"case {case} took {slowest:.1f} s"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    elapsed = time.perf_counter() - started
    print(f"\n{FUZZ_CASES} bundle mutations in {elapsed:.1f} s (slowest {slowest:.2f} s): {outcomes}")
    assert elapsed < FUZZ_SECONDS * max(1, FUZZ_CASES / 500)
    assert len(outcomes) == 2, "some mutations load, some are refused"
