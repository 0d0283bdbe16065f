"""The data shapes users feed to fit, each in a program written as users write them (tests/programs/data_*.py)
with a real NaN bug: raw strings through TextVectorization (with class_weight), dicts of named inputs and outputs
with loss weights, (x, y, sample_weight) triples, ragged and sparse tensors, a Python generator with
validation_data, a keras.utils.PyDataset.

For each: NanGuard stops the run and writes a bundle that loads (no pickle), the origin located at the scene names
the `# ORIGIN` line, `nanlens locate BUNDLE` answers from it, and `nanlens replay BUNDLE` reproduces the step in
graph and eager mode. Ragged and sparse batches stay ragged and sparse (densified, the step cannot even run:
``ids.row_lengths()``). A generator's bad record is not made by any op: its cause is ``data`` and the line to
change is where the generator yields it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from replay_fixtures import PROGRAMS, nanlens, origin_line, quiet_env

from pyadapter.capture.batchcodec import RaggedLeaf, SparseLeaf
from pyadapter.capture.bundle import CaptureBundle
from pyadapter.findings import load_findings

pytestmark = pytest.mark.slow

LOCATED_AT_SCENE = [
    "data_text_strings",
    "data_dict_multi_io",
    "data_sample_weight",
    "data_ragged",
    "data_sparse",
    "data_pydataset",
]
ALL = [*LOCATED_AT_SCENE, "data_generator_records"]
TIMEOUT = 600

_started: dict[str, tuple[subprocess.Popen[str], Path]] = {}
_bundles: dict[str, Path] = {}


def bundle_of(name: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one bundle `name`'s program wrote; all programs are started together on first use."""
    if name in _bundles:
        return _bundles[name]
    if not _started:
        root = tmp_path_factory.mktemp("data-shapes")
        for program in ALL:
            _started[program] = (
                subprocess.Popen(
                    [sys.executable, str(PROGRAMS / f"{program}.py"), str(root / program)],
                    cwd=root,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    env=quiet_env(),
                ),
                root / program,
            )
    process, capture_dir = _started[name]
    try:
        output, _ = process.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    assert "Traceback" not in output, output[-3000:]
    bundles = [p.parent for p in capture_dir.glob("*/manifest.json")]
    assert len(bundles) == 1, f"{name}: expected one bundle, output:\n{output[-3000:]}"
    _bundles[name] = bundles[0]
    return bundles[0]


def program(name: str) -> Path:
    return PROGRAMS / f"{name}.py"


@pytest.mark.parametrize("name", LOCATED_AT_SCENE)
def test_the_origin_is_located_at_the_scene_and_shown_from_the_bundle(name, tmp_path_factory):
    bundle = bundle_of(name, tmp_path_factory)
    CaptureBundle.load(bundle).batch()  # the batch reads back (verified, no pickle)
    findings = load_findings(bundle / "findings.json")
    assert findings.origin is not None
    assert (Path(findings.origin.file), findings.origin.line) == (program(name), origin_line(program(name)))

    shown = nanlens("locate", str(bundle))
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert f"origin: {program(name)}:{origin_line(program(name))}" in shown.stdout
    assert "located at the scene" in shown.stdout


# The other three reproduce through `nanlens locate --replay` / the generator's locate (below), which replays the
# step in graph and eager mode too: each program is replayed once.
@pytest.mark.parametrize(
    "name", ["data_text_strings", "data_dict_multi_io", "data_sample_weight", "data_pydataset"]
)
def test_replay_reproduces_the_step_in_graph_and_eager_mode(name, tmp_path_factory):
    bundle = bundle_of(name, tmp_path_factory)
    done = nanlens("replay", str(bundle), "--json", timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["reproduced"] == {"graph": True, "eager": True}, report["verdicts"]


@pytest.mark.parametrize("name", ["data_ragged", "data_sparse"])
def test_ragged_and_sparse_batches_stay_ragged_and_sparse(name, tmp_path_factory):
    """The batch as fed, not densified: a ragged batch keeps its empty document (row length 0), a sparse one its
    shape; a locate from the bundle (re-entering the program) feeds them back and finds the same line."""
    bundle = bundle_of(name, tmp_path_factory)
    x, _ = CaptureBundle.load(bundle).batch()
    if name == "data_ragged":
        assert isinstance(x, RaggedLeaf)
        lengths = [int(b) - int(a) for a, b in zip(x.row_splits[0][:-1], x.row_splits[0][1:], strict=True)]
        assert 0 in lengths and len(lengths) == 32
    else:
        assert isinstance(x, SparseLeaf) and x.dense_shape.tolist() == [32, 1000]
    done = nanlens("locate", str(bundle), "--replay", "--json", timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout)
    origin = found["origin"]
    assert (Path(origin["file"]), origin["line"]) == (program(name), origin_line(program(name)))
    assert found["bundle"]["route"].startswith("replayed by re-entry")
    assert found["bundle"]["reproduced"] == {"graph": True, "eager": True}


def test_a_bad_record_from_a_generator_is_data_at_the_line_that_yields_it(tmp_path_factory):
    name = "data_generator_records"
    bundle = bundle_of(name, tmp_path_factory)
    manifest = json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))
    assert "deferred" in manifest["located_at_scene"], "the batch held the NaN: the step only carried it"

    done = nanlens("locate", str(bundle), "--json", timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout)
    cause = found["cause"]
    assert cause["kind"] == "data", cause
    assert (Path(cause["change"]["file"]), cause["change"]["line"]) == (
        program(name),
        origin_line(program(name)),
    )
    assert "the generator read_batches()" in cause["summary"]
    # The origin is marked where the generator yields the record too: it was the PyFunc op's own line (fit's, or
    # a `from_generator(...)` statement), a third line beside the generator's and the one to change.
    origin = found["origin"]
    assert (Path(origin["file"]), origin["line"]) == (program(name), origin_line(program(name))), origin
    assert origin["op"]["type"] in ("PyFunc", "PyFuncStateless", "EagerPyFunc"), origin["op"]
    assert cause["provenance"]["source"] == "python"
    assert "index" not in cause["provenance"], "no index into an array passed to fit: there is none"
    assert found["bundle"]["reproduced"] == {"graph": True, "eager": True}
