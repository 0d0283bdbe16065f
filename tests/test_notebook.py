"""NanGuard in a Jupyter notebook: a real kernel (ipykernel, run headless by nbclient) trains a model with a NaN
bug; the bundle is named after the notebook, records the .ipynb and the executed cells, and frames in cell code
(the kernel's /tmp/ipykernel_<pid>/<hash>.py files) map to (notebook, cell index, line in cell).

Plus unit tests of reading notebooks (magics, malformed files) and of matching executions to cells."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pyadapter import CaptureBundle
from pyadapter.capture import integrity
from pyadapter.capture.notebook import (
    CodeCell,
    ExecutedCell,
    NotebookError,
    NotebookInfo,
    _transform_cell,
    cell_location,
    map_findings_to_notebook,
    notebook_code_cells,
    read_notebook_cells,
    resolve_notebook_path,
)
from pyadapter.findings import Finding, Findings, Frame, InputHealth, OpRef, TensorHealth

KERNEL_NAME = "nanlens-test-python"
STEM = "train_nan"

IMPORTS = """%env TF_CPP_MIN_LOG_LEVEL=2
import json
import numpy as np
import keras
import tensorflow as tf
from pyadapter import NanGuard"""

# Starts with a blank line: IPython drops it before compiling, so compiled line numbers are one less.
BUGGY = """
def naive_loss(y_true, y_pred):
    probs = tf.nn.softmax(y_pred * 1000.0)
    log_probs = tf.math.log(probs)  # ORIGIN: softmax of huge logits underflows to 0, log(0) = -inf
    return -tf.reduce_mean(tf.reduce_sum(y_true * log_probs, axis=-1))"""

FIT = """keras.utils.set_random_seed(1)
x = np.random.default_rng(0).normal(size=(64, 8)).astype("float32")
y = keras.utils.to_categorical(np.arange(64) % 4, 4).astype("float32")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
model.compile(optimizer="sgd", loss=naive_loss)
guard = NanGuard(CAPTURE_DIR)
model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[guard])
print("bundle:", guard.last_bundle)"""

# Records where naive_loss lives (a real code object from the kernel) and a tfdbg2 dump of one call of it.
AFTER = """from pyadapter.dump.recorder import DumpRecorder
with open(LOCATION_FILE, "w") as handle:
    json.dump({"file": naive_loss.__code__.co_filename, "first_line": naive_loss.__code__.co_firstlineno}, handle)
with DumpRecorder(DUMP_DIR):
    tf.function(naive_loss)(tf.constant(y[:4]), model(x[:4]))"""

ORIGIN_LINE = next(
    i for i, line in enumerate(BUGGY.splitlines(), 1) if "# ORIGIN" in line
)  # line in the cell


def _notebook_json(cells: list[tuple[str, str]]) -> dict:
    return {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": KERNEL_NAME, "display_name": "Python", "language": "python"}},
        "cells": [
            {
                "cell_type": kind,
                "id": f"c{i}",
                "metadata": {},
                "source": source,
                **({"outputs": [], "execution_count": None} if kind == "code" else {}),
            }
            for i, (kind, source) in enumerate(cells)
        ],
    }


def _write_kernelspec(jupyter_dir: Path) -> None:
    """A kernelspec that starts this interpreter (the .venv's), found through JUPYTER_PATH only."""
    spec_dir = jupyter_dir / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "NaN Lens test Python",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")


@pytest.fixture(scope="module")
def notebook_run(tmp_path_factory):
    """Writes a notebook under <root>/experiments/ and runs it as Jupyter does: the kernel starts in the
    notebook's folder, with JPY_SESSION_NAME = the notebook's path relative to the server root."""
    base = tmp_path_factory.mktemp("notebook")
    root = base / "root"
    folder = root / "experiments"
    folder.mkdir(parents=True)
    capture_dir, dump_dir, location_file = base / "captures", base / "dump", base / "location.json"
    settings = (
        f"CAPTURE_DIR = {str(capture_dir)!r}\nDUMP_DIR = {str(dump_dir)!r}\n"
        f"LOCATION_FILE = {str(location_file)!r}"
    )
    cells = [
        ("markdown", "# A model with a NaN bug\nThe loss takes the log of a softmax."),
        ("code", IMPORTS),
        ("code", settings),
        ("markdown", "Huge logits make the softmax exactly 0 somewhere."),
        ("code", BUGGY),
        ("code", FIT),
        ("code", AFTER),
    ]
    path = folder / f"{STEM}.ipynb"
    path.write_text(json.dumps(_notebook_json(cells), indent=1), encoding="utf-8")
    nb = _run_notebook(path, base, f"experiments/{STEM}.ipynb")

    bundles = sorted(p for p in capture_dir.iterdir() if p.is_dir())
    assert len(bundles) == 1, [p.name for p in bundles]
    return {
        "path": path,
        "cells": cells,
        "bundle": bundles[0],
        "dump": dump_dir,
        "location": json.loads(location_file.read_text(encoding="utf-8")),
        "outputs": nb.cells,
    }


def _run_notebook(
    path: Path,
    base: Path,
    session_name: str | None,
    edit=None,
    order: list[int] | None = None,
    allow_errors: bool = False,
):
    """Run the notebook at `path` as Jupyter does (a kernel of the test's kernelspec, started in the notebook's
    folder, JPY_SESSION_NAME = `session_name`, unset when None), its Jupyter and IPython state under `base`; the executed notebook.
    `edit(nb)` changes it in the front end first, as a user's unsaved typing does (the file keeps its text).
    `order`: the cells to run, in the order a user clicked them, in place of "Run All"; `allow_errors`: a cell that
    raises does not end the run (a user clicks on)."""
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    jupyter_dir = base / "jupyter"
    _write_kernelspec(jupyter_dir)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JUPYTER_PATH", str(jupyter_dir))
        patch.setenv("JUPYTER_RUNTIME_DIR", str(base / "runtime"))
        patch.setenv("IPYTHONDIR", str(base / "ipython"))
        if session_name is None:  # a front end that tells the kernel nothing (nbclient, older jupyter_server)
            patch.delenv("JPY_SESSION_NAME", raising=False)
        else:
            patch.setenv("JPY_SESSION_NAME", session_name)
        patch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
        patch.setenv("CUDA_VISIBLE_DEVICES", "")
        patch.delenv("IPYKERNEL_CELL_NAME", raising=False)
        nb = nbformat.reads(path.read_text(encoding="utf-8"), as_version=4)
        if edit is not None:
            edit(nb)
        client = nbclient.NotebookClient(
            nb,
            timeout=300,
            kernel_name=KERNEL_NAME,
            resources={"metadata": {"path": str(path.parent)}},
            allow_errors=allow_errors,
        )
        if order is None:
            client.execute()
        else:
            with client.setup_kernel():
                for index in order:
                    client.execute_cell(nb.cells[index], index)
    return nb


def _nanlens(verb: str, bundle: Path, folder: Path, *args: str) -> subprocess.CompletedProcess:
    """``nanlens VERB BUNDLE --json`` run in the notebook's folder, as the editor runs it."""
    return subprocess.run(
        [sys.executable, "-m", "pyadapter", verb, str(bundle), "--json", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=folder,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )


def _buggy_index(run) -> int:
    return next(i for i, (_, source) in enumerate(run["cells"]) if source == BUGGY)


@pytest.mark.slow
def test_bundle_is_named_after_the_notebook_and_records_its_cells(notebook_run):
    from pyadapter import CaptureBundle

    bundle = CaptureBundle.load(notebook_run["bundle"])
    assert bundle.path.name.startswith(f"{STEM}-") and "ipykernel" not in bundle.path.name
    assert bundle.manifest["run"].startswith(f"{STEM}-")
    entry = bundle.manifest["entry_script"]
    nb_path = notebook_run["path"]
    assert entry["path"] == str(nb_path) and bundle.entry_script == nb_path
    assert entry["sha256"] == integrity.sha256_file(nb_path) and not bundle.entry_script_changed()
    assert "ipykernel_launcher" in " ".join(entry["argv"])  # argv as today: the kernel's own command line

    recorded = entry["notebook"]
    assert recorded["path"] == str(nb_path) and recorded["found_by"] == "JPY_SESSION_NAME"
    code_sources = [source for kind, source in notebook_run["cells"] if kind == "code"]
    # Executed so far when the step failed: every code cell up to the fit cell, in execution order.
    assert [c["source"] for c in recorded["cells"]] == code_sources[:4]
    assert [c["execution_count"] for c in recorded["cells"]] == [1, 2, 3, 4]
    files = [c["file"] for c in recorded["cells"]]
    assert all(
        f and os.path.basename(os.path.dirname(f)).startswith("ipykernel_") and f.endswith(".py")
        for f in files
    ), files
    assert len(set(files)) == len(files)
    by_source = {c["source"]: c for c in recorded["cells"]}
    assert "run_line_magic" in by_source[IMPORTS]["code"]  # %env, as the kernel compiled it
    assert by_source[BUGGY]["code"].startswith("def naive_loss")  # leading blank line dropped by IPython
    assert "code" not in by_source[FIT]


@pytest.mark.slow
def test_cell_frames_from_the_kernel_map_to_notebook_cells(notebook_run):
    from pyadapter import CaptureBundle

    bundle = CaptureBundle.load(notebook_run["bundle"])
    info = NotebookInfo.from_manifest(bundle.manifest["entry_script"]["notebook"])
    location = notebook_run["location"]  # naive_loss.__code__ in the kernel
    recorded_buggy = next(c for c in info.cells if c.source == BUGGY)
    assert location["file"] == recorded_buggy.file

    nb = str(notebook_run["path"])
    index = _buggy_index(notebook_run)
    assert index == 4  # markdown cells count
    # co_firstlineno is the `def` line as compiled (line 1); in the cell it is line 2.
    assert info.cell_location(location["file"], location["first_line"]) == (nb, index, 2)
    compiled_origin = location["first_line"] + (ORIGIN_LINE - 2)
    assert cell_location(location["file"], compiled_origin, info) == (nb, index, ORIGIN_LINE)

    # Every recorded cell file maps to its own cell, line 1 for cells without leading blank lines.
    expected = {c: i for i, (kind, c) in enumerate(notebook_run["cells"]) if kind == "code"}
    for cell in info.cells:
        first = 1 + cell.line_offset
        assert info.cell_location(cell.file, 1) == (nb, expected[cell.source], first)
    assert info.cell_location("/elsewhere/train.py", 3) is None


@pytest.mark.slow
def test_origin_in_a_dump_made_in_the_kernel_maps_to_the_buggy_cell(notebook_run):
    """The dump made in the kernel is scanned here, in another process: mapping uses the manifest's sources."""
    from pyadapter import CaptureBundle, scan_dump

    findings = scan_dump(notebook_run["dump"])
    assert findings.origin is not None and findings.origin.op.type == "Log"
    location = notebook_run["location"]
    assert findings.origin.file == location["file"] and findings.origin.cell is None

    info = NotebookInfo.from_manifest(
        CaptureBundle.load(notebook_run["bundle"]).manifest["entry_script"]["notebook"]
    )
    same = map_findings_to_notebook(findings, info)
    assert same is findings
    origin = findings.origin
    nb, index = str(notebook_run["path"]), _buggy_index(notebook_run)
    assert (origin.file, origin.cell, origin.line) == (nb, index, ORIGIN_LINE)
    cell_frames = [f for f in origin.stack if f.cell is not None]
    assert cell_frames and all(f.file == nb for f in cell_frames)
    assert (cell_frames[-1].cell, cell_frames[-1].line) == (index, ORIGIN_LINE)
    assert not any(f.file == location["file"] for f in origin.stack)
    # The JSON the editor reads carries the cell.
    as_json = findings.to_json()["origin"]
    assert as_json["file"] == nb and as_json["cell"] == index and as_json["line"] == ORIGIN_LINE
    assert Findings.from_json(findings.to_json()).origin.cell == index


@pytest.mark.slow
def test_mapping_follows_the_notebook_on_disk(notebook_run, tmp_path):
    """Cells moved: the index follows the source. The buggy cell edited: nothing maps (no stale line)."""
    from pyadapter import CaptureBundle

    recorded = CaptureBundle.load(notebook_run["bundle"]).manifest["entry_script"]["notebook"]
    location = notebook_run["location"]
    cells = [("markdown", "# New title")] + list(notebook_run["cells"])
    moved = tmp_path / "moved.ipynb"
    moved.write_text(json.dumps(_notebook_json(cells)), encoding="utf-8")
    info = NotebookInfo.from_manifest({**recorded, "path": str(moved)})
    assert info.cell_location(location["file"], 1) == (str(moved), _buggy_index(notebook_run) + 1, 2)

    edited = [(k, s.replace("1000.0", "1.0") if s == BUGGY else s) for k, s in notebook_run["cells"]]
    moved.write_text(json.dumps(_notebook_json(edited)), encoding="utf-8")
    assert info.cell_location(location["file"], 1) is None


@pytest.mark.slow
def test_findings_json_located_at_the_scene_points_at_the_buggy_cell(notebook_run):
    """NanGuard locates the origin in the kernel when the step fails and writes findings.json, mapped to cells."""
    from pyadapter import CaptureBundle, load_findings

    bundle = CaptureBundle.load(notebook_run["bundle"])
    findings_file = notebook_run["bundle"] / "findings.json"
    assert "findings.json" in bundle.manifest["files"], sorted(
        p.name for p in notebook_run["bundle"].iterdir()
    )
    findings = load_findings(findings_file)
    origin = findings.origin
    nb, index = str(notebook_run["path"]), _buggy_index(notebook_run)
    assert origin is not None and origin.op.type == "Log"
    assert (origin.file, origin.cell, origin.line) == (nb, index, ORIGIN_LINE)
    cell_files = {
        c.file for c in NotebookInfo.from_manifest(bundle.manifest["entry_script"]["notebook"]).cells
    }
    for finding in [origin, *findings.findings]:
        assert finding.file not in cell_files
        assert not any(frame.file in cell_files for frame in finding.stack)
    assert any(f.file == nb and f.cell == index for f in origin.stack)
    # The stop message's line to change names the cell too ("Change x.ipynb cell 3, line 4").
    said = "\n".join(
        str(out.get("text") or "") for cell in notebook_run["outputs"] for out in cell.get("outputs", [])
    )
    (cause_line,) = [line for line in said.splitlines() if line.startswith("NanGuard: cause:")]
    assert f".ipynb cell {index + 1}, line {ORIGIN_LINE}: " in cause_line, cause_line


# ---- without a kernel -----------------------------------------------------------------------------------------


def test_outside_a_kernel_nothing_changes_and_ipython_is_not_imported():
    code = (
        "import sys\n"
        "from pyadapter.capture import notebook, snapshot\n"
        "assert notebook.current_notebook() is None and not notebook.in_kernel()\n"
        "assert 'IPython' not in sys.modules\n"
        "info = snapshot.entry_script_info()\n"
        "assert 'notebook' not in info and info['path'] is None, info\n"
        "assert snapshot.default_run_name(0).startswith('run-')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_session_name_resolution(tmp_path, monkeypatch):
    nb = tmp_path / "root" / "sub" / "a.ipynb"
    nb.parent.mkdir(parents=True)
    nb.write_text("{}", encoding="utf-8")
    assert resolve_notebook_path(str(nb)) == nb
    assert resolve_notebook_path(nb.as_uri()) == nb
    assert resolve_notebook_path("sub/a.ipynb", cwd=nb.parent) == nb  # relative to the server root
    assert resolve_notebook_path("a.ipynb", cwd=nb.parent) == nb
    monkeypatch.chdir(nb.parent)
    assert resolve_notebook_path("a.ipynb") == nb
    assert resolve_notebook_path("missing.ipynb") is None
    assert resolve_notebook_path("Console 1") is None


MAGICS = """%pip install numpy
import os
files = !ls
!echo hi
if files:
    %time x = 1
    print(os.sep)
os.path?"""


def _write(path: Path, cells: list[tuple[str, str]]) -> Path:
    path.write_text(json.dumps(_notebook_json(cells)), encoding="utf-8")
    return path


def test_code_cells_with_magics_keep_cell_indices_and_line_numbers(tmp_path):
    nb = _write(
        tmp_path / "m.ipynb",
        [
            ("markdown", "# t"),
            ("code", MAGICS),
            ("raw", "x"),
            ("code", "%%time\ny = 2\nprint(y)"),
            ("code", "\n\nz = 3"),
        ],
    )
    cells = notebook_code_cells(nb)
    assert [c.index for c in cells] == [1, 3, 4] and all(isinstance(c, CodeCell) for c in cells)
    first = cells[0]
    assert first.raw == MAGICS
    assert "get_ipython().run_line_magic('pip', 'install numpy')" in first.source
    assert "get_ipython().getoutput('ls')" in first.source and "system('echo hi')" in first.source
    lines = first.source.splitlines()
    assert len(lines) == len(MAGICS.splitlines()) and lines[6] == "    print(os.sep)"
    compile(first.source, "m.py", "exec")
    assert "run_cell_magic('time'" in cells[1].source
    assert cells[2].source.splitlines()[2] == "z = 3"  # leading blank lines kept: same line numbers


def test_code_cells_without_ipython_become_pass(tmp_path):
    plain = _transform_cell(MAGICS, None)
    lines = plain.splitlines()
    assert lines == [
        "pass",
        "import os",
        "pass",
        "pass",
        "if files:",
        "    x = 1",
        "    print(os.sep)",
        "pass",
    ]
    compile(plain, "m.py", "exec")
    assert _transform_cell("%%time\ny = 2\nprint(y)", None).splitlines() == ["pass", "y = 2", "print(y)"]
    assert _transform_cell("%%bash\necho hi\nls", None).splitlines() == ["pass", "pass", "pass"]
    assert _transform_cell("x = 1 % 2\ns = '%d' % x\n", None) == "x = 1 % 2\ns = '%d' % x\n"
    assert _transform_cell("!pip install \\\n   numpy\nx = 1", None).splitlines() == ["pass", "pass", "x = 1"]
    # ``%time history = model.fit(...)`` runs its statement: read as code, so the fit and its data are found (a
    # `pass` lost the column that made the inf); %timeit runs it many times and stays out.
    assert _transform_cell(
        "%time history = model.fit(x, y)\n  %time f()\n%timeit g()", None
    ).splitlines() == [
        "history = model.fit(x, y)",
        "  f()",
        "pass",
    ]


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "not an object"),
        (b'{"nbformat": 4, "metadata": {}}', 'no "cells" list'),
        (b'{"nbformat": 3, "worksheets": []}', "nbformat 3"),
        (b'{"nbformat": 4, "cells": [{"source": "x"}]}', "cell 0"),
        (b'{"nbformat": 4, "cells": [{"cell_type": "code", "source": 3}]}', "cell 0"),
        (b"\xff\xfe\x00bad", "not UTF-8"),
    ],
)
def test_malformed_notebook_is_one_clear_line(tmp_path, content, reason):
    bad = tmp_path / "bad.ipynb"
    bad.write_bytes(content)
    for read in (read_notebook_cells, notebook_code_cells):
        with pytest.raises(NotebookError) as caught:
            read(bad)
        message = str(caught.value)
        assert isinstance(caught.value, ValueError) and "\n" not in message
        assert str(bad) in message and reason in message, message
    with pytest.raises(NotebookError, match="cannot read"):
        read_notebook_cells(tmp_path / "missing.ipynb")


def test_duplicate_cells_follow_execution_order(tmp_path):
    same = "loss = tf.math.log(p)\nprint(loss)"
    nb = _write(
        tmp_path / "d.ipynb",
        [("code", same), ("markdown", "m"), ("code", "p = 0.0"), ("code", same + "\n\n")],
    )
    runs = [
        ExecutedCell(1, same, "/tmp/ipykernel_1/aaa.py"),
        ExecutedCell(2, "p = 0.0", "/tmp/ipykernel_1/bbb.py"),
        ExecutedCell(3, same + "\n", "/tmp/ipykernel_1/aaa.py"),
    ]
    info = NotebookInfo(path=nb, sha256=None, cells=runs)
    # The latest run of that source came after cell 2: it was cell 3 (its trailing blank lines do not count).
    assert info.cell_location("/tmp/ipykernel_1/aaa.py", 1) == (str(nb), 3, 1)
    assert info.cell_location("/tmp/ipykernel_1/bbb.py", 1) == (str(nb), 2, 1)
    assert info.cell_location("/tmp/ipykernel_1/aaa.py", 9) is None  # past the end of the cell
    assert info.cell_location("/tmp/ipykernel_1/ccc.py", 1) is None

    # Run out of order, only the first copy: it maps to cell 0.
    info = NotebookInfo(path=nb, sha256=None, cells=runs[:1])
    assert info.cell_location("/tmp/ipykernel_1/aaa.py", 2) == (str(nb), 0, 2)
    assert NotebookInfo.from_manifest(info.to_manifest()).cell_location("/tmp/ipykernel_1/aaa.py", 2) == (
        str(nb),
        0,
        2,
    )


def test_map_findings_rewrites_origin_findings_and_frames(tmp_path):
    nb = _write(tmp_path / "f.ipynb", [("markdown", "#"), ("code", "\ndef f(p):\n    return tf.math.log(p)")])
    cell_file = "/tmp/ipykernel_7/123.py"
    info = NotebookInfo(
        path=nb,
        sha256=None,
        cells=[
            ExecutedCell(
                1,
                "\ndef f(p):\n    return tf.math.log(p)",
                cell_file,
                code="def f(p):\n    return tf.math.log(p)\n",
            )
        ],
    )
    stack = [
        Frame("/work/train.py", 10, "main"),
        Frame(cell_file, 2, "f"),
        Frame("/site-packages/tf/x.py", 5),
    ]
    origin = Finding(file=cell_file, line=2, role="origin", op=OpRef(name="Log", type="Log"), stack=stack)
    other = Finding(
        file="/work/train.py",
        line=10,
        role="propagated",
        op=OpRef(name="Mul", type="Mul"),
        stack=[Frame(cell_file, 2, "f")],
    )
    doc = Findings(source_kind="dump", source_path="d", origin=origin, findings=[origin, other])
    map_findings_to_notebook(doc, info)
    assert (origin.file, origin.cell, origin.line) == (str(nb), 1, 3)
    assert [(f.file, f.cell, f.line) for f in origin.stack] == [
        ("/work/train.py", None, 10),
        (str(nb), 1, 3),
        ("/site-packages/tf/x.py", None, 5),
    ]
    assert (other.file, other.cell, other.line) == ("/work/train.py", None, 10)
    assert (other.stack[0].cell, other.stack[0].line) == (1, 3)
    # The line shown under the origin comes from the cell (the dump held the kernel's file: `nanlens locate`
    # printed no code for a notebook origin).
    assert doc.extra["origin_code"] == "    return tf.math.log(p)"
    map_findings_to_notebook(doc, info)  # idempotent
    assert (origin.cell, origin.line) == (1, 3)
    assert map_findings_to_notebook(doc, None) is doc


def test_an_origin_in_a_cell_run_but_not_saved_shows_its_code_and_says_why(tmp_path):
    """The user edited a cell and ran it without saving: no cell of the notebook on disk holds that code, so the
    origin stays in the kernel's temp file. It was shown without a line and without a word; now its line comes from
    what the kernel ran, and a warning says to save (a replay runs the saved cells)."""
    nb = _write(tmp_path / "u.ipynb", [("code", "def f(p):\n    return p")])
    cell_file = "/tmp/ipykernel_9/456.py"
    info = NotebookInfo(
        path=nb,
        sha256=None,
        cells=[ExecutedCell(4, "def f(p):\n    return tf.math.log(p)", cell_file)],
    )
    origin = Finding(file=cell_file, line=2, role="origin", op=OpRef(name="Log", type="Log"))
    doc = Findings(source_kind="bundle", source_path="b", origin=origin, findings=[origin])
    map_findings_to_notebook(doc, info)
    assert (origin.file, origin.cell) == (cell_file, None)
    assert doc.extra["origin_code"] == "    return tf.math.log(p)"
    map_findings_to_notebook(doc, info)  # idempotent, as for saved cells
    (warning,) = doc.extra["warnings"]
    assert warning.startswith(
        "the origin is in code the kernel ran (In [4], line 2) that the saved u.ipynb"
    ), warning


LISTNET_LOSS = """def listnet_loss(y_true, y_pred):
    # y_true packs relevance and the padding mask: [..., 0] labels, [..., 1] mask
    labels, mask = y_true[..., 0], y_true[..., 1]
    neg_inf = tf.fill(tf.shape(labels), -np.inf)
    true_p = tf.nn.softmax(tf.where(mask > 0, labels, neg_inf), axis=-1)
    pred_p = tf.nn.softmax(tf.where(mask > 0, y_pred, neg_inf), axis=-1)
    return -tf.reduce_sum(true_p * tf.math.log(pred_p), axis=-1)"""


def _listnet_findings(origin_file: str, origin_cell: int | None, record_file: str) -> Findings:
    """The findings of s42e p5: the log of the masked softmax at line 7 of the loss's cell, and the scan's record of
    the -inf mask constant (line 4) it came through, as the scan writes it: at the file the step ran the cell from."""
    origin = Finding(
        file=origin_file,
        line=7,
        cell=origin_cell,
        role="origin",
        op=OpRef("compile_loss/listnet_loss/Log", "Log"),
        health=TensorHealth(dtype="float32", size=640, neg_inf=260, neg=380),
        inputs=[
            InputHealth(
                "compile_loss/listnet_loss/Softmax_1:0",
                TensorHealth(dtype="float32", size=640, zero=260, pos=380),
            )
        ],
    )
    doc = Findings(source_kind="bundle", source_path="b", origin=origin, findings=[origin])
    doc.extra["origin_code"] = "    return -tf.reduce_sum(true_p * tf.math.log(pred_p), axis=-1)"
    doc.extra["mask_into_softmax"] = {
        "op": "compile_loss/listnet_loss/Fill/value",
        "file": record_file,
        "line": 4,
        "cell": None,
    }
    return doc


def test_the_change_line_of_a_scan_record_names_the_notebook_cell_at_the_scene_from_a_bundle_and_in_a_replay(
    tmp_path,
):
    """A ListNet loss masks padded positions with -inf, then logs the softmax (s42e p5): the origin was 'cell 4,
    line 7' everywhere, but the change, the -inf mask on line 4 the scan records beside the origin
    (``extra["mask_into_softmax"]``), was "Change In [3], line 4" in the stop message, the dead kernel's
    /tmp/ipykernel_16549/2469451064.py:4 from `nanlens locate`, and NaN Lens's .nanlens/cells/.../cell3.py:4 from
    `locate --replay`. Every record of the scan with a place maps to the notebook's cell as the origin does."""
    from pyadapter.capture.notebook import map_saved_since
    from pyadapter.cause import CauseContext, cause_lines, classify
    from pyadapter.replay.cell_files import cell_file
    from pyadapter.replay.reentry import map_cell_files

    nb = _write(
        tmp_path / "listnet_ranking.ipynb",
        [
            ("markdown", "# ListNet"),
            ("code", "import numpy as np\nimport tensorflow as tf"),
            ("code", "LIST_LEN = 20"),
            ("code", LISTNET_LOSS),
            ("code", "ranker.fit(X, y_packed, batch_size=32)"),
        ],
    )
    kernel_file = "/tmp/ipykernel_16549/2469451064.py"
    info = NotebookInfo(
        path=nb,
        sha256=None,
        cells=[
            ExecutedCell(1, "import numpy as np\nimport tensorflow as tf", "/tmp/ipykernel_16549/1.py"),
            ExecutedCell(2, "LIST_LEN = 20", "/tmp/ipykernel_16549/2.py"),
            ExecutedCell(3, LISTNET_LOSS, kernel_file),
        ],
    )
    change = f"  change: {nb} cell 4, line 4: the mask value: a large finite one (-1e9) instead of -inf"
    context = CauseContext(history=[], entry_script=str(nb))

    # At the scene: the kernel maps the findings before writing findings.json (every record with a place, and a
    # second line a record names, a sum of exps' divided_at, moves with it).
    scene = _listnet_findings(kernel_file, None, kernel_file)
    scene.extra["sum_of_exps"] = {"op": "Exp", "file": kernel_file, "line": 6, "divided_at": 5}
    map_findings_to_notebook(scene, info)
    assert scene.extra["mask_into_softmax"] | {"op": ""} == {"op": "", "file": str(nb), "line": 4, "cell": 3}
    assert scene.extra["sum_of_exps"] == {"op": "Exp", "file": str(nb), "line": 6, "cell": 3, "divided_at": 5}
    del scene.extra["sum_of_exps"]
    lines = cause_lines(classify(scene, context), scene)
    assert any(line.startswith(change) for line in lines), lines

    # A bundle made before that (its origin mapped, the record not): mapped from the cells the bundle recorded.
    bundle = _listnet_findings(str(nb), 3, kernel_file)
    map_saved_since(bundle, info.to_manifest())
    assert (bundle.extra["mask_into_softmax"]["file"], bundle.extra["mask_into_softmax"]["cell"]) == (
        str(nb),
        3,
    )
    lines = cause_lines(classify(bundle, context), bundle)
    assert any(line.startswith(change) for line in lines), lines
    assert not any("ipykernel" in line for line in lines), lines

    # A replay by re-entry ran the cell from its copy in .nanlens/cells.
    copy = str(cell_file(nb, 3))
    replayed = _listnet_findings(copy, None, copy)
    map_cell_files(replayed)
    assert (replayed.origin.file, replayed.origin.cell) == (str(nb), 3)
    lines = cause_lines(classify(replayed, context), replayed)
    assert any(line.startswith(change) for line in lines), lines
    assert not any(".nanlens" in line for line in lines), lines


# ---- replay and locate by re-entry: the notebook's code cells run again, in order, up to its fit -------------


@pytest.mark.slow
def test_notebook_bundle_replays_by_reentry(notebook_run):
    result = subprocess.run(
        [sys.executable, "-m", "pyadapter", "replay", str(notebook_run["bundle"]), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=notebook_run["path"].parent,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["route"].startswith(f"replayed by re-entry: ran the notebook {STEM}.ipynb"), report["route"]
    assert report["reproduced"] == {"graph": True, "eager": True}


@pytest.mark.slow
def test_notebook_locate_by_reentry_names_the_cell_and_line(notebook_run):
    result = subprocess.run(
        [sys.executable, "-m", "pyadapter", "locate", str(notebook_run["bundle"]), "--replay", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=notebook_run["path"].parent,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    origin = json.loads(result.stdout)["origin"]
    assert (origin["file"], origin["cell"], origin["line"]) == (
        str(notebook_run["path"]),
        _buggy_index(notebook_run),
        ORIGIN_LINE,
    )


@pytest.mark.slow
def test_replay_eagerly_of_a_notebook_bundle_stops_in_the_cell_with_real_tensors(notebook_run):
    """ "Replay eagerly" on a notebook origin: the editor puts the breakpoint on the cell's file (what the server's
    replay target names, `cellFile`), and debugpy stops there when the re-entered notebook's captured step runs."""
    from dap_client import DapClient, replay_stopped_at

    from pyadapter.replay.reentry import cell_file, write_cell_files

    notebook, index = notebook_run["path"], _buggy_index(notebook_run)
    write_cell_files(notebook)  # as the language server does when it offers the lens
    source = str(cell_file(notebook, index))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    with DapClient([sys.executable, "-m", "debugpy.adapter"], env=env) as dap:
        stopped = replay_stopped_at(
            dap, str(notebook_run["bundle"]), str(notebook.parent), source, ORIGIN_LINE
        )
        assert stopped["body"]["reason"] == "breakpoint"
        thread = stopped["body"]["threadId"]
        top = dap.request("stackTrace", {"threadId": thread, "levels": 3})["body"]["stackFrames"][0]
        assert (top["source"]["path"], top["line"]) == (source, ORIGIN_LINE)
        smallest = dap.request(
            "evaluate", {"expression": "float(probs.numpy().min())", "frameId": top["id"], "context": "repl"}
        )["body"]["result"]
        assert (
            float(smallest) == 0.0
        )  # the softmax of huge logits underflowed: real values, not a graph tensor
        dap.request("continue", {"threadId": thread})
        dap.wait_event("terminated", timeout=120)


SCHEDULE = '''class WarmupInverseSqrt(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up, then inverse-square-root decay: written so that it is +inf the step the warm-up ends."""

    def __call__(self, step):
        step = tf.cast(step, "float32")
        warm = 1e-3 * (step + 1.0) / 20.0
        decay = 1e-3 * tf.math.rsqrt((step - 20.0) / 20.0)
        return tf.where(step < 20.0, warm, decay)'''


@pytest.mark.slow
def test_a_schedule_defined_in_a_cell_is_the_line_to_change_in_that_cell(tmp_path):
    """The rate is +inf at step 20, from a schedule defined in a notebook cell: the kernel ran that cell from a
    file of its own, and the cause's line to change is the decay line in the notebook's cell."""
    capture_dir = tmp_path / "captures"
    fit = (
        "import numpy as np\nfrom pyadapter import NanGuard\n\n"
        "rng = np.random.default_rng(0)\nx = rng.normal(size=(1024, 10)).astype('float32')\n"
        "y = x[:, :1] * 3.0\n"
        "model = keras.Sequential([keras.Input((10,)), keras.layers.Dense(16), keras.layers.Dense(1)])\n"
        "model.compile(keras.optimizers.Adam(WarmupInverseSqrt()), 'mse')\n"
        f"model.fit(x, y, batch_size=32, epochs=2, verbose=0, callbacks=[NanGuard({str(capture_dir)!r})])"
    )
    cells = [("code", "import keras\nimport tensorflow as tf"), ("code", SCHEDULE), ("code", fit)]
    path = tmp_path / "schedule.ipynb"
    path.write_text(json.dumps(_notebook_json(cells), indent=1), encoding="utf-8")
    _run_notebook(path, tmp_path, str(path))
    (bundle,) = [p for p in capture_dir.iterdir() if p.is_dir()]
    located = subprocess.run(
        [sys.executable, "-m", "pyadapter", "locate", str(bundle), "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        timeout=600,
    )
    assert located.returncode == 0, located.stderr[-2000:]
    cause = json.loads(located.stdout)["cause"]
    decay_line = next(i for i, line in enumerate(SCHEDULE.splitlines(), 1) if "decay =" in line)
    assert cause["kind"] == "op" and cause["evidence"]["step"] == 20, cause
    assert cause["change"] == {
        "file": str(path),
        "line": decay_line,
        "cell": 1,
        "what": "WarmupInverseSqrt: it returns inf at step 20; keep the learning rate finite",
        "target": "schedule",
    }, cause
    assert "ipykernel" not in cause["summary"] and f".ipynb cell 2, line {decay_line}" in cause["summary"]


@pytest.mark.slow
def test_a_timed_fit_cell_replays_by_reentry(tmp_path):
    """Colab's habits: ``%matplotlib inline`` first, ``%%time`` on the cell that calls fit, ``!`` shell commands
    (``!pip install``). IPython runs a ``%%time`` cell's code in its shell's user namespace, and the re-entry ran
    the cells in another one: "NameError: name 'model' is not defined". The cells and the shell now share one
    namespace, as in the kernel; and the replay does not run shell commands again. ``%matplotlib inline`` stopped
    every replay: "failed before its first training step: NotImplementedError: Implement enable_gui in a subclass
    (at cell1.py:1)" (a plain shell has no GUI); the replay draws to the Agg backend."""
    folder = tmp_path / "work"
    folder.mkdir()
    capture_dir = tmp_path / "captures"
    cells = [
        ("code", IMPORTS),
        ("code", f"%matplotlib inline\nCAPTURE_DIR = {str(capture_dir)!r}\n!echo ran >> shell_log.txt"),
        ("code", BUGGY),
        ("code", "%%time\n" + FIT),
        ("code", "import matplotlib.pyplot as plt\nplt.plot(x[:, 0])\nplt.show()"),
    ]
    path = folder / "timed.ipynb"
    path.write_text(json.dumps(_notebook_json(cells), indent=1), encoding="utf-8")
    _run_notebook(path, tmp_path, "timed.ipynb")
    (bundle,) = [p for p in capture_dir.iterdir() if p.is_dir()]
    result = _nanlens("replay", bundle, folder)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["route"].startswith("replayed by re-entry: ran the notebook timed.ipynb"), report["route"]
    assert report["reproduced"] == {"graph": True, "eager": True}
    # Shell commands (`!pip install ...` alike) ran when the notebook did; the replay does not run them again.
    assert (folder / "shell_log.txt").read_text().split() == ["ran"]
    assert "1 shell command not run again (!echo ran >> shell_log.txt)" in report["route"], report["route"]


TIMED_FITS = {
    # %%time over statements: IPython compiles the body as "<timed exec>"
    "cell magic": "%%time\nmodel.compile(optimizer=keras.optimizers.Adam(1e-2), loss=poisson_nll)\n{fit}",
    # %%time over one expression: "<timed eval>"
    "one expression": "model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=poisson_nll)\n%%time\n{fit}",
    # %time, the line magic, on the cell's second line
    "line magic": "model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=poisson_nll)\n%time {fit}",
    # %%capture NAME, which runs its body as a cell of its own: a re-entry took no fit for the captured one
    # ("ran 2 fits, none of them the captured one": s39c har)
    "capture": "%%capture train_log\nmodel.compile(optimizer=keras.optimizers.Adam(1e-2), loss=poisson_nll)\n{fit}",
}


@pytest.mark.slow
@pytest.mark.parametrize("timed", list(TIMED_FITS))
def test_a_timed_second_phase_is_the_fit_replayed_and_its_lines_are_the_cells(tmp_path, timed):
    """A warm-up fit with MSE in one cell, then ``%%time`` on the cell that compiles a Poisson loss and fits again.
    The captured fit's line was recorded as IPython's transformed ``get_ipython().run_cell_magic('time', ...)``,
    which the saved cell does not hold, so the re-entry took over the warm-up fit: "stayed finite — loss 2.09".
    And every op of the timed cell was marked on its line 1, the ``%%time`` line. The body's lines are the cell's."""
    folder = tmp_path / "work"
    folder.mkdir()
    capture_dir = tmp_path / "captures"
    data = (
        "rng = np.random.default_rng(3)\nx = rng.normal(size=(512, 5)).astype('float32')\n"
        "y = rng.poisson(np.exp(0.8 * x[:, :1])).astype('float32')\nkeras.utils.set_random_seed(5)\n"
        "model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(16, activation='relu'),\n"
        "                          keras.layers.Dense(1, bias_initializer=keras.initializers.Constant(2.0))])"
    )
    warm_up = "model.compile(optimizer=keras.optimizers.Adam(1e-2), loss='mse')\nmodel.fit(x, y, batch_size=32, epochs=1, verbose=0)"
    loss = (
        "def poisson_nll(y_true, y_pred):\n    return tf.reduce_mean(y_pred - y_true * tf.math.log(y_pred))"
    )
    fit = f"model.fit(x, y, batch_size=32, epochs=20, verbose=0, callbacks=[NanGuard({str(capture_dir)!r})])"
    if timed in ("cell magic", "capture"):
        fit = f"history = {fit}"
    source = TIMED_FITS[timed].format(fit=fit)
    if timed == "one expression":  # a %%time must be the cell's first line: the compile goes in a cell before
        compile_line, source = source.split("\n", 1)
        cells = [("code", IMPORTS), ("code", data), ("code", warm_up), ("code", loss), ("code", compile_line)]
    else:
        cells = [("code", IMPORTS), ("code", data), ("code", warm_up), ("code", loss)]
    cells.append(("code", source))
    path = folder / "phases.ipynb"
    path.write_text(json.dumps(_notebook_json(cells), indent=1), encoding="utf-8")
    _run_notebook(path, tmp_path, "phases.ipynb")
    (bundle,) = [p for p in capture_dir.iterdir() if p.is_dir()]
    fit_call = CaptureBundle.load(bundle).model_info["fit_call"]
    assert fit_call["code"].startswith(fit.split("(")[0]), fit_call
    result = _nanlens("replay", bundle, folder)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["reproduced"] == {"graph": True, "eager": True}, report["verdicts"]
    assert "the fit before it" in report["route"], report["route"]
    located = json.loads(_nanlens("locate", bundle, folder).stdout)
    origin = located["origin"]
    assert (origin["file"], origin["cell"], origin["line"]) == (str(path), 3, 2), origin
    spread = {(f.get("cell"), f["line"]) for f in located["findings"] if f["role"] == "propagated"}
    fit_cell = len(cells) - 1
    assert (fit_cell, 1) not in spread or timed == "line magic", spread  # nothing on the %%time line


@pytest.mark.slow
def test_a_loss_loaded_by_exec_is_said_to_be_the_users_and_the_timed_fit_line_is_shown(tmp_path):
    """A notebook loads its helpers with ``exec(open("helpers.py").read())`` and times its fit cell. The Log was
    said to be "made inside TensorFlow/Keras code (keras/src/losses/losses.py:34 in call)", and the replay showed
    the fit line as the cell file's blank line 2 (the cell file holds the %%time cell as one line). And the
    notebook's own prints came out among the report's lines on stdout."""
    folder = tmp_path / "work"
    folder.mkdir()
    capture_dir = tmp_path / "captures"
    (folder / "helpers.py").write_text(
        "import tensorflow as tf\n\n\ndef poisson_nll(y_true, y_pred):\n"
        "    return tf.reduce_mean(y_pred - y_true * tf.math.log(y_pred))\n"
    )
    data = (
        "rng = np.random.default_rng(3)\nx = rng.normal(size=(256, 5)).astype('float32')\n"
        "y = rng.poisson(np.exp(0.8 * x[:, :1])).astype('float32')\nkeras.utils.set_random_seed(5)\n"
        "model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(16, activation='relu'), keras.layers.Dense(1)])\n"
        "print('training rows', x.shape)"
    )
    timed = (
        "%%time\nmodel.compile(optimizer=keras.optimizers.Adam(1e-2), loss=poisson_nll)\n"
        f"history = model.fit(x, y, batch_size=32, epochs=20, verbose=0, callbacks=[NanGuard({str(capture_dir)!r})])"
    )
    cells = [("code", IMPORTS), ("code", 'exec(open("helpers.py").read())'), ("code", data), ("code", timed)]
    path = folder / "bikes.ipynb"
    path.write_text(json.dumps(_notebook_json(cells), indent=1), encoding="utf-8")
    _run_notebook(path, tmp_path, "bikes.ipynb")
    (bundle,) = [p for p in capture_dir.iterdir() if p.is_dir()]
    for extra in ((), ("--replay",)):
        done = subprocess.run(
            [sys.executable, "-m", "pyadapter", "locate", str(bundle), *extra],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=folder,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        )
        assert done.returncode in (0, 1), done.stderr[-3000:]
        out = done.stdout
        assert f"origin: {path} cell 4, line 3" in out, out  # index 3: the fourth cell
        assert "3 | history = model.fit(x, y" in out, out
        assert "made in code run from a string by exec() (its line 5 in poisson_nll)" in out, out
        assert "inside TensorFlow/Keras code" not in out, out
        if extra:  # the re-entry ran the notebook: its prints go to stderr, stdout is the report alone
            assert "training rows (256, 5)" in done.stderr and "training rows" not in out, out


def test_a_reading_call_in_a_timed_cell_is_the_data_line_to_change(tmp_path):
    """A ``%%time`` cell reads the CSV. For reading, its body was IPython's transform: a string argument of
    ``run_cell_magic``, where no reading call is found, so a data cause named the fit line; it names the
    ``genfromtxt`` line in that cell."""
    from pyadapter.cause.change_line import reading_site
    from pyadapter.cause.sources import user_sources
    from pyadapter.findings import Findings

    nb = _write(
        tmp_path / "t.ipynb",
        [
            ("code", "import numpy as np\n%load_ext autoreload"),
            ("markdown", "Read the data"),
            (
                "code",
                "%%time\nraw = np.genfromtxt('houses.csv', delimiter=',', skip_header=1)\nx = raw[:, :3]",
            ),
            ("code", "!ls\nmodel.fit(x, y)"),
        ],
    )
    units = user_sources(Findings("bundle", "b", None, []), str(nb))
    site = reading_site(units, None, None, None)
    assert site is not None and (site.file, site.cell, site.line, site.name) == (str(nb), 2, 2, "genfromtxt")


@pytest.mark.slow
def test_a_notebook_whose_batch_holds_nan_is_re_run_as_a_notebook(tmp_path):
    """The batch holds a NaN the data had (a missing field read as NaN), and `nanlens locate --rerun-pipeline`
    re-runs the input pipeline under a dump. It ran the .ipynb as a Python script ("NameError: name 'null' is not
    defined"); it runs the notebook's cells in order, stops at the failing step and names the cells. Unasked, it
    does not re-run: the array given to fit holds the NaN, and no pipeline op made it."""
    folder = tmp_path / "work"
    folder.mkdir()
    capture_dir = tmp_path / "captures"
    data = (
        "rng = np.random.default_rng(0)\nx = rng.normal(size=(64, 8)).astype('float32')\nx[37, 2] = np.nan\n"
        "y = x[:, :1] * 0.0 + 1.0"
    )
    fit = (
        "model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])\nmodel.compile('sgd', 'mse')\n"
        f"model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0, callbacks=[NanGuard({str(capture_dir)!r})])"
    )
    cells = [("code", IMPORTS), ("code", data), ("code", fit)]
    path = folder / "missing.ipynb"
    path.write_text(json.dumps(_notebook_json(cells), indent=1), encoding="utf-8")
    _run_notebook(path, tmp_path, "missing.ipynb")
    (bundle,) = [p for p in capture_dir.iterdir() if p.is_dir()]
    quick = json.loads(_nanlens("locate", bundle, folder).stdout)
    assert "rerun" not in quick and quick["cause"]["kind"] == "data", quick.get("rerun")
    assert "index 37 of the array passed to fit holds it" in quick["origin"]["message"], quick["origin"]
    result = _nanlens("locate", bundle, folder, "--rerun-pipeline")
    assert result.returncode in (0, 1), result.stderr[-3000:]
    report = json.loads(result.stdout)
    rerun = report["rerun"]
    assert rerun["error"] is None and rerun["stopped_at_step"] == 2, rerun
    assert report["cause"]["kind"] == "data", report["cause"]
    assert not any("null" in w for w in report.get("warnings", [])), report.get("warnings")


@pytest.mark.slow
def _regression_cells(capture_dir: Path) -> tuple[str, str]:
    """A data cell whose row 37 holds a NaN and a fit cell guarded into `capture_dir`."""
    data = "rng = np.random.default_rng(0)\nx = rng.normal(size=(64, 8)).astype('float32')\nx[37, 2] = np.nan\ny = x[:, :1]"
    fit = (
        "model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])\nmodel.compile('sgd', 'mse')\n"
        f"model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0, callbacks=[NanGuard({str(capture_dir)!r})])"
    )
    return data, fit


def test_a_kernel_told_nothing_finds_its_notebook_by_the_cells_it_ran(tmp_path):
    """A kernel started by nbclient or an older jupyter_server has neither JPY_SESSION_NAME nor
    __vsc_ipynb_file__. The bundle was named "notebook-...", recorded no program, and `nanlens locate` said "the
    bundle does not record its program, so it cannot be replayed". The notebook in the kernel's folder that holds
    the cells it ran is its notebook: the bundle is named after it and locate names the cell."""
    folder = tmp_path / "work"
    folder.mkdir()
    capture_dir = tmp_path / "captures"
    data, fit = _regression_cells(capture_dir)
    cells = [("markdown", "# Regression"), ("code", IMPORTS), ("code", data), ("code", fit)]
    path = folder / "regression.ipynb"
    path.write_text(json.dumps(_notebook_json(cells), indent=1), encoding="utf-8")
    # Another notebook in the folder, holding the same imports: not the one that ran.
    _write(folder / "scratch.ipynb", [("code", IMPORTS), ("code", "print(1)")])
    _run_notebook(path, tmp_path, None)
    (bundle,) = [p for p in capture_dir.iterdir() if p.is_dir()]
    assert bundle.name.startswith("regression-"), bundle.name
    recorded = json.loads((bundle / "manifest.json").read_text())["entry_script"]["notebook"]
    assert recorded["path"] == str(path) and recorded["found_by"] == "cells in the kernel's folder", recorded
    result = _nanlens("locate", bundle, folder, "--rerun-pipeline")
    assert result.returncode in (0, 1), result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["cause"]["kind"] == "data", report["cause"]
    assert report["rerun"]["error"] is None, report["rerun"]


def test_a_kernel_moved_by_cd_still_finds_the_notebook_it_started_beside(tmp_path):
    """Colab and Kaggle notebooks begin with ``%cd`` into a data folder: the kernel's folder was no longer its
    notebook's, so the bundle was "notebook-...", the origin a /tmp/ipykernel_.../<hash>.py file, and a replay
    "cannot be replayed". IPython's directory history holds the folder it started in. A copy of the notebook
    beside it, saved earlier, is not the one taken."""
    folder = tmp_path / "work"
    (folder / "outputs").mkdir(parents=True)
    capture_dir = tmp_path / "captures"
    data, fit = _regression_cells(capture_dir)
    cells = [("code", "%cd outputs"), ("code", IMPORTS), ("code", data), ("code", fit)]
    path = folder / "regression.ipynb"
    path.write_text(json.dumps(_notebook_json(cells), indent=1), encoding="utf-8")
    copy = folder / "Copy of regression.ipynb"
    copy.write_bytes(path.read_bytes())
    os.utime(copy, (1_600_000_000, 1_600_000_000))
    _run_notebook(path, tmp_path, None)
    (bundle,) = [p for p in capture_dir.iterdir() if p.is_dir()]
    assert bundle.name.startswith("regression-"), bundle.name
    recorded = json.loads((bundle / "manifest.json").read_text())["entry_script"]["notebook"]
    assert recorded["path"] == str(path), recorded


def test_a_kernel_without_its_notebook_file_names_the_cell_as_jupyter_does(tmp_path):
    """Colab keeps the notebook off the kernel's disk: no notebook can be found, and the stop message named the
    kernel's own file of the cell ("/tmp/ipykernel_7434/44116014.py:4: Sqrt"), which exists nowhere the user
    looks. It names the run cell as Jupyter's tracebacks do ("In [3], line 2") and says why no cell is marked."""
    folder = tmp_path / "work"
    folder.mkdir()
    capture_dir = tmp_path / "captures"
    loss = "def log_loss(y_true, y_pred):\n    return keras.ops.mean(keras.ops.log(y_pred))"
    fit = (
        "x = np.ones((64, 4), dtype='float32')\n"
        "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, activation='relu', "
        "kernel_initializer='zeros')])\nmodel.compile('sgd', log_loss)\n"
        f"model.fit(x, x[:, :1], batch_size=16, epochs=1, verbose=0, callbacks=[NanGuard({str(capture_dir)!r})])"
    )
    path = folder / "colab.ipynb"
    path.write_text(
        json.dumps(_notebook_json([("code", IMPORTS), ("code", loss), ("code", fit)]), indent=1),
        encoding="utf-8",
    )
    ran = _run_notebook(path, tmp_path, None, edit=lambda nb: path.unlink())
    said = "".join(o.get("text", "") for o in ran.cells[2].outputs if o.get("output_type") == "stream")
    assert "NaN Lens: located in" in said, said[-3000:]
    assert "In [2], line 2 (the kernel was not told its notebook" in said, said[-3000:]
    assert "ipykernel_" not in said.split("NaN Lens: located in", 1)[1].splitlines()[0]


def test_the_notebook_holding_the_cells_is_found_only_when_it_is_the_one(tmp_path):
    from pyadapter.capture.notebook import notebook_holding_cells

    ran = ["import numpy as np", "x = np.ones(3)\n", "model.fit(x)"]
    _write(
        tmp_path / "a.ipynb",
        [("code", "import numpy as np"), ("code", "\nx = np.ones(3)"), ("code", "model.fit(x)")],
    )
    _write(tmp_path / "b.ipynb", [("code", "import numpy as np"), ("code", "print(2)")])
    assert notebook_holding_cells(tmp_path, ran) == tmp_path / "a.ipynb"
    # Two notebooks holding as many of the cells, each with code of its own: neither is named.
    _write(
        tmp_path / "c.ipynb",
        [("code", "import numpy as np"), ("code", "x = np.ones(3)"), ("code", "model.fit(x)"), ("code", "x")],
    )
    assert notebook_holding_cells(tmp_path, ran) is None
    # A copy with the same code ("Copy of a.ipynb", as a download from Colab leaves it): the one saved last.
    (tmp_path / "c.ipynb").unlink()
    copy = tmp_path / "Copy of a.ipynb"
    copy.write_bytes((tmp_path / "a.ipynb").read_bytes())
    os.utime(tmp_path / "a.ipynb", (1_700_000_000, 1_700_000_000))
    assert notebook_holding_cells(tmp_path, ran) == copy
    os.utime(copy, (1_600_000_000, 1_600_000_000))
    assert notebook_holding_cells(tmp_path, ran) == tmp_path / "a.ipynb"
    # One holding fewer than half of the cells the kernel ran is not its notebook.
    other = tmp_path / "other"
    other.mkdir()
    _write(other / "d.ipynb", [("code", "import numpy as np")])
    assert notebook_holding_cells(other, ran) is None
    assert notebook_holding_cells(other, []) is None


def test_a_replay_of_a_notebook_run_but_not_saved_says_it_ran_the_saved_cells(tmp_path):
    """The re-entry runs the saved cells; when the kernel ran other code (an edit not saved), the step may stay
    finite, and the route said nothing of why."""
    from types import SimpleNamespace

    from pyadapter.replay.reentry import _unsaved_note

    nb = _write(tmp_path / "u.ipynb", [("code", "x = 1"), ("code", "model.fit(x)")])
    ran = [
        ExecutedCell(1, "x = 1", "/tmp/k/1.py"),
        ExecutedCell(2, "x = 2", "/tmp/k/2.py"),
        ExecutedCell(3, "model.fit(x)", "/tmp/k/3.py"),
    ]
    info = NotebookInfo(path=nb, sha256=None, cells=ran)
    bundle = SimpleNamespace(manifest={"entry_script": {"notebook": info.to_manifest()}})
    note = _unsaved_note(bundle, nb)
    assert note.startswith(
        "; the kernel ran code the saved u.ipynb does not hold (In [2]): the replay ran"
    ), note
    # Cells run out of order leave state no saved notebook rebuilds (s42c nb7): no "capture again" promised.
    assert "from the captured state" in note and "capture again" not in note, note
    info.cells = [ran[0], ran[2]]
    bundle.manifest["entry_script"]["notebook"] = info.to_manifest()
    assert _unsaved_note(bundle, nb) == ""


def test_a_notebook_edited_after_the_capture_is_not_called_unsaved(tmp_path):
    """A user captured a divergence, then changed the rate in a cell and saved (a fix) and replayed it: the route
    said "the kernel ran code the saved notebook does not hold (In [5]) ... save the notebook and capture again", as
    if they had forgotten to save. A notebook whose code changed since the capture says the replay ran the edit."""
    from types import SimpleNamespace

    from pyadapter.capture.notebook import code_sha256
    from pyadapter.replay.reentry import _unsaved_note

    nb = _write(
        tmp_path / "h.ipynb", [("code", "x = 1"), ("code", "lr.assign(0.3)"), ("code", "model.fit(x)")]
    )
    ran = [
        ExecutedCell(1, "x = 1", "/tmp/k/1.py"),
        ExecutedCell(2, "lr.assign(0.3)", "/tmp/k/2.py"),
        ExecutedCell(3, "model.fit(x)", "/tmp/k/3.py"),
    ]
    info = NotebookInfo(path=nb, sha256=None, cells=ran)
    manifest = {"entry_script": {"notebook": info.to_manifest(), "code_sha256": code_sha256(nb)}}
    bundle = SimpleNamespace(manifest=manifest)
    assert _unsaved_note(bundle, nb) == ""
    _write(nb, [("code", "x = 1"), ("code", "lr.assign(0.05)  # fixed"), ("code", "model.fit(x)")])
    note = _unsaved_note(bundle, nb)
    # The step runs from the captured optimizer and its rate: a replay after "lr.assign(0.05)  # fixed" reproduced
    # at 0.3, and the words ("In [2] ran as the capture recorded them") did not say why.
    assert note == (
        "; h.ipynb was edited since the capture (the kernel had run In [2] as they were then): the replay ran the "
        "saved cells, with the edit, and then the step from the captured state (weights, optimizer, learning "
        "rate), which an edit of those does not change"
    ), note


def test_a_cell_rewritten_run_again_and_saved_is_not_unsaved_code(tmp_path):
    """A user trains with Keras's loss, rewrites the loss cell by hand (a weighted log loss, nothing like the old
    text), runs it and the fit cell, and the notebook is saved after the capture: every replay said "churn.ipynb was
    edited since the capture (In [4] ran as the capture recorded them)", In [4] being the old loss cell that the
    saved one, run as In [6], had replaced. A later saved run that binds every name an old cell bound replaces it;
    a cell that did more than bind names (a fit, an assign) is not replaced so."""
    from types import SimpleNamespace

    from pyadapter.replay.reentry import _unsaved_note

    loss_old = "def churn_loss(y_true, y_pred):\n    return keras.losses.binary_crossentropy(y_true, y_pred)"
    loss_new = (
        "def churn_loss(y_true, y_pred):\n    # churners cost 5x more\n    pos = 5.0 * y_true * tf.math.log(y_pred)\n"
        "    neg = (1.0 - y_true) * tf.math.log(1.0 - y_pred)\n    return -tf.reduce_mean(pos + neg)"
    )
    document = _notebook_json([("code", "x = 1"), ("code", loss_new), ("code", "model.fit(x)")])
    for cell, count in zip(document["cells"], (1, 4, 5), strict=True):
        cell["execution_count"] = count
    nb = tmp_path / "churn.ipynb"
    nb.write_text(json.dumps(document), encoding="utf-8")
    ran = [
        ExecutedCell(1, "x = 1", "/tmp/k/1.py"),
        ExecutedCell(2, loss_old, "/tmp/k/2.py"),
        ExecutedCell(3, "model.fit(x)", "/tmp/k/3.py"),
        ExecutedCell(4, loss_new, "/tmp/k/4.py"),
        ExecutedCell(5, "model.fit(x)", "/tmp/k/3.py"),
    ]
    info = NotebookInfo(path=nb, sha256=None, cells=ran)
    bundle = SimpleNamespace(
        manifest={"entry_script": {"notebook": info.to_manifest(), "code_sha256": "0" * 64}}
    )
    assert _unsaved_note(bundle, nb) == ""
    # The rewrite run but not saved: the old cell is on disk, the kernel's definition is not.
    _write(nb, [("code", "x = 1"), ("code", loss_old), ("code", "model.fit(x)")])
    assert "In [4]" in _unsaved_note(bundle, nb)
    # An old cell that did more than define names is not replaced by a later one that defines them.
    nb.write_text(json.dumps(document), encoding="utf-8")
    info.cells = [
        *ran[:1],
        ExecutedCell(2, "def churn_loss(a, b):\n    return a\nmodel.fit(x)", "/k/2.py"),
        *ran[2:],
    ]
    bundle.manifest["entry_script"]["notebook"] = info.to_manifest()
    assert "In [2]" in _unsaved_note(bundle, nb)


def test_an_edited_cell_run_again_and_saved_is_not_unsaved_code(tmp_path):
    """A user runs the notebook, changes the rate in the compile cell, runs it and the fit cell again, saves: every
    replay said "the kernel ran code the saved notebook does not hold (In [2])", the old version of the cell, which
    the saved version (run as In [4]) replaced. Saving again could not clear it."""
    from types import SimpleNamespace

    from pyadapter.replay.reentry import _unsaved_note

    compile_old = "model.compile(keras.optimizers.SGD(learning_rate=0.01), 'mse')"
    compile_new = "model.compile(keras.optimizers.SGD(learning_rate=3.0), 'mse')  # raised"
    document = _notebook_json([("code", "x = 1"), ("code", compile_new), ("code", "model.fit(x)")])
    for cell, count in zip(document["cells"], (1, 4, 5), strict=True):
        cell["execution_count"] = count
    nb = tmp_path / "r.ipynb"
    nb.write_text(json.dumps(document), encoding="utf-8")
    ran = [
        ExecutedCell(1, "x = 1", "/tmp/k/1.py"),
        ExecutedCell(2, compile_old, "/tmp/k/2.py"),
        ExecutedCell(3, "model.fit(x)", "/tmp/k/3.py"),
        ExecutedCell(4, compile_new, "/tmp/k/4.py"),
        ExecutedCell(5, "model.fit(x)", "/tmp/k/3.py"),
    ]
    info = NotebookInfo(path=nb, sha256=None, cells=ran)
    bundle = SimpleNamespace(manifest={"entry_script": {"notebook": info.to_manifest()}})
    assert _unsaved_note(bundle, nb) == ""
    # Run again after the save, without saving: that version is unsaved code.
    info.cells = [
        *ran,
        ExecutedCell(6, "model.compile(keras.optimizers.SGD(learning_rate=9.0), 'mse')", "/k/6.py"),
    ]
    bundle.manifest["entry_script"]["notebook"] = info.to_manifest()
    assert "(In [6])" in _unsaved_note(bundle, nb)

    # A longer cell (a grid of rates, about 300 characters), its rate list edited: difflib's automatic junk
    # heuristic matched it to its old version at 0.30, and the note came back after the save.
    grid = (
        "results = {}\nfor lr in [{rates}]:\n    model = build_model(lr, units={units})\n    hist = model.fit(x_train, "
        'y_train, epochs=3, batch_size=32, verbose=0, callbacks=[NanGuard("captures")])\n    results[lr] = '
        'hist.history["loss"][-1]\n    print(f"lr={lr:g}: final loss {results[lr]:.4f}")'
    )
    old = grid.replace("{rates}", "1e-3, 1e-2, 1e-1, 1.0").replace("{units}", "32")
    new = grid.replace("{rates}", "0.3, 1.0, 3.0").replace("{units}", "64")
    document = _notebook_json([("code", "x = 1"), ("code", new)])
    for cell, count in zip(document["cells"], (1, 3), strict=True):
        cell["execution_count"] = count
    nb.write_text(json.dumps(document), encoding="utf-8")
    info.cells = [
        ExecutedCell(1, "x = 1", "/k/1.py"),
        ExecutedCell(2, old, "/k/2.py"),
        ExecutedCell(3, new, "/k/3.py"),
    ]
    bundle.manifest["entry_script"]["notebook"] = info.to_manifest()
    assert _unsaved_note(bundle, nb) == ""


@pytest.mark.slow
def test_a_notebook_step_with_python_control_flow_replays_in_graph_mode(tmp_path):
    """A custom loop's ``@tf.function`` step with a Python ``if`` on a tensor (clip only large gradients) is
    converted by AutoGraph, which reads the step's source: in a replay, the cell files re-entry writes under
    ``.nanlens/cells``. When the replay's writes first went to a scratch copy (`pyadapter.replay.scratch_files`),
    those files were not on disk and the graph replay failed with "OperatorNotAllowedInGraphError: Using a symbolic
    tf.Tensor as a Python bool". NaN Lens's own folder is written as is.

    The step adds input noise with an unseeded ``tf.random.normal``: the scene's note of it named the kernel's file
    of the cell ("RandomStandardNormal at 3787931277.py:31"); it names the notebook's cell."""
    folder = tmp_path / "work"
    folder.mkdir()
    capture_dir = tmp_path / "captures"
    step = """keras.utils.set_random_seed(1)
x = np.random.default_rng(0).normal(size=(64, 8)).astype("float32")
y = keras.utils.to_categorical(np.arange(64) % 4, 4).astype("float32")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
optimizer = keras.optimizers.SGD(0.1)

@guard_step(capture_dir=CAPTURE_DIR, model=model, optimizer=optimizer)
@tf.function
def train_step(xb, yb):
    xb = xb + tf.random.normal(tf.shape(xb), stddev=0.01)  # input noise
    with tf.GradientTape() as tape:
        loss = naive_loss(yb, model(xb))
    grads = tape.gradient(loss, model.trainable_variables)
    if tf.linalg.global_norm(grads) > 10.0:  # AutoGraph makes this a tf.cond
        grads = [g / 10.0 for g in grads]
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss"""
    loop = """try:
    for start in range(0, 64, 16):
        train_step(x[start : start + 16], y[start : start + 16])
except NonFiniteStepError as error:
    print("bundle:", error.failure.bundle)"""
    cells = [
        ("code", IMPORTS + "\nfrom pyadapter import NonFiniteStepError, guard_step"),
        ("code", f"CAPTURE_DIR = {str(capture_dir)!r}"),
        ("code", BUGGY),
        ("code", step),
        ("code", loop),
    ]
    path = folder / "branching.ipynb"
    path.write_text(json.dumps(_notebook_json(cells), indent=1), encoding="utf-8")
    _run_notebook(path, tmp_path, "branching.ipynb")
    (bundle,) = [p for p in capture_dir.iterdir() if p.is_dir()]
    warnings = json.loads((bundle / "findings.json").read_text(encoding="utf-8"))["warnings"]
    assert any("RandomStandardNormal at branching.ipynb cell 4, line 10" in w for w in warnings), warnings
    result = _nanlens("replay", bundle, folder)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["route"].startswith("replayed by re-entry: ran the notebook branching.ipynb"), report[
        "route"
    ]
    assert report["reproduced"] == {"graph": True, "eager": True}, report["verdicts"]
    assert list((folder / ".nanlens" / "cells").glob("branching-*/cell3.py")), "the cell files are on disk"


@pytest.mark.slow
def test_a_fit_in_a_function_called_from_later_cells_replays_the_call_that_diverged(tmp_path):
    """A notebook defines ``def train(lr, epochs, units)`` (build, compile, fit) in one cell and calls it from three
    later cells, the last at a rate far too high. Each call was counted the first fit of its cell's run in training
    but the first, second and third of the fit line's cell in the re-entry: the replay failed ("ran 3 fits, none of
    them the captured one"), or, where the calls built the same model, took over the first call. The cell whose run
    began the fit is recorded and matched."""
    folder = tmp_path / "work"
    folder.mkdir()
    capture_dir = tmp_path / "captures"
    define = """keras.utils.set_random_seed(1)
rng = np.random.default_rng(0)
x = rng.normal(size=(256, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1))).astype("float32")

def train(lr, epochs, units=32):
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(units, activation="relu"), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(learning_rate=lr), "mse")
    history = model.fit(x, y, batch_size=32, epochs=epochs, verbose=0, callbacks=[NanGuard(CAPTURE_DIR)])
    return model, history"""
    cells = [
        ("code", IMPORTS),
        ("code", f"CAPTURE_DIR = {str(capture_dir)!r}"),
        ("code", define),
        ("code", "small = train(1e-3, 2, units=16)"),
        ("code", "wide = train(1e-3, 2, units=64)"),
        ("code", "fast = train(5.0, 3, units=64)"),
    ]
    path = folder / "sweep_calls.ipynb"
    path.write_text(json.dumps(_notebook_json(cells), indent=1), encoding="utf-8")
    _run_notebook(path, tmp_path, "sweep_calls.ipynb")
    (bundle,) = [p for p in capture_dir.iterdir() if p.is_dir()]
    fit_call = json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))["model"]["fit_call"]
    assert (fit_call["cell"], fit_call["run_cell"], fit_call["ordinal"]) == (2, 5, 0), fit_call
    result = _nanlens("replay", bundle, folder)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert "the 2 fits before it (earlier calls of the same line) ran one step each" in report["route"], (
        report["route"]
    )
    assert report["reproduced"] == {"graph": True, "eager": True}, report["verdicts"]


@pytest.mark.slow
def test_a_sweep_cell_replays_the_fit_that_diverged(tmp_path):
    """A learning-rate sweep in one cell, ``for lr in [1e-3, 1e-2, 5.0]: ... model.fit(...)``: the third fit
    diverges. The bundle's fit was matched by its cell alone, so the replay took over the first fit of the sweep
    (lr=1e-3) and still said "NaN reproduced" from the captured weights. Fits are counted per run of their cell now:
    the first two run one step each and the third is replayed; the cause's line is the sweep's list."""
    folder = tmp_path / "work"
    folder.mkdir()
    capture_dir = tmp_path / "captures"
    sweep = """keras.utils.set_random_seed(1)
rng = np.random.default_rng(0)
x = rng.normal(size=(256, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1))).astype("float32")
histories = {}
for lr in [1e-3, 1e-2, 5.0]:
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(lr), "mse")
    histories[lr] = model.fit(x, y, batch_size=32, epochs=3, verbose=0, callbacks=[NanGuard(CAPTURE_DIR)])"""
    cells = [("code", IMPORTS), ("code", f"CAPTURE_DIR = {str(capture_dir)!r}"), ("code", sweep)]
    path = folder / "sweep.ipynb"
    path.write_text(json.dumps(_notebook_json(cells), indent=1), encoding="utf-8")
    _run_notebook(path, tmp_path, "sweep.ipynb")
    (bundle,) = [p for p in capture_dir.iterdir() if p.is_dir()]
    result = _nanlens("replay", bundle, folder)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert "the 2 fits before it (earlier calls of the same line) ran one step each" in report["route"], (
        report["route"]
    )
    assert report["reproduced"] == {"graph": True, "eager": True}, report["verdicts"]
    located = json.loads(_nanlens("locate", bundle, folder).stdout)
    change = located["cause"]["change"]
    assert (located["cause"]["kind"], change["cell"], change["line"]) == ("divergence", 2, 6), located[
        "cause"
    ]


@pytest.mark.slow
def test_a_cell_edited_run_and_then_saved_is_marked_and_replays(tmp_path):
    """The user edits a cell in the browser, runs all before the autosave, then saves. The bundle's origin was left
    in the kernel's temp file with "save the notebook to see it marked" after the save too, and the replay refused
    the saved notebook ("its code changed since the capture"), though it holds exactly the code that ran. Both
    follow the notebook as saved now."""
    import nbformat

    folder = tmp_path / "work"
    folder.mkdir()
    capture_dir = tmp_path / "captures"
    data = "rng = np.random.default_rng(0)\nx = rng.normal(size=(64, 4)).astype('float32')\ny = np.ones((64, 1), 'float32')"
    model = (
        "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])\n"
        "model.compile('sgd', loss=lambda t, p: tf.reduce_mean(tf.math.log(p - t)))"
    )
    fit = f"model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[NanGuard({str(capture_dir)!r})])"
    cells = [("code", IMPORTS), ("code", data), ("code", model), ("code", fit)]
    path = folder / "edited.ipynb"
    path.write_text(json.dumps(_notebook_json(cells), indent=1), encoding="utf-8")

    def typed_but_not_saved(nb) -> None:
        nb.cells[2].source = "# the loss, by hand\n" + nb.cells[2].source

    nb = _run_notebook(path, tmp_path, "edited.ipynb", edit=typed_but_not_saved)
    (bundle,) = [p for p in capture_dir.iterdir() if p.is_dir()]
    scene = json.loads((bundle / "findings.json").read_text(encoding="utf-8"))
    assert scene["origin"].get("cell") is None, scene["origin"]  # not saved yet: the kernel's file
    # The stop message named it by that file (/tmp/ipykernel_.../....py:3, and "Change 318904372.py:3"); it names
    # the cell the kernel ran now.
    said = "".join(out.get("text", "") for out in nb.cells[3].outputs if out.get("name") == "stderr")
    assert "In [3], line 3 (edited and run, not in the saved edited.ipynb): Log" in said, said
    assert "Change In [3], line 3: the Log's input" in said, said
    # Before the save, `nanlens locate` printed the kernel's /tmp/ipykernel_.../....py:3 as the origin and the line
    # to change (VS Code does not autosave notebooks): it names the run, as the stop message did.
    text = subprocess.run(
        [sys.executable, "-m", "pyadapter", "locate", str(bundle)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=folder,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    ).stdout
    assert "origin: In [3], line 3 (edited and run, not in the saved edited.ipynb)" in text, text
    assert "  change: In [3], line 3 (edited and run, not in the saved edited.ipynb): " in text, text
    assert "ipykernel" not in text, text
    nbformat.write(nb, str(path))  # the user saves

    located = _nanlens("locate", bundle, folder)
    assert located.returncode in (0, 1), located.stderr[-3000:]
    report = json.loads(located.stdout)
    assert (report["origin"]["file"], report["origin"]["cell"], report["origin"]["line"]) == (str(path), 2, 3)
    assert not any("save the notebook" in w for w in report.get("warnings", [])), report.get("warnings")
    replayed = _nanlens("replay", bundle, folder)
    assert replayed.returncode == 0, replayed.stderr[-3000:]
    assert json.loads(replayed.stdout)["reproduced"] == {"graph": True, "eager": True}


# A sweep of learning rates as notebooks run one: data, then a fit cell that reads LEARNING_RATE from a config cell.
RATE_SWEEP_DATA = "rng = np.random.default_rng(0)\nx = rng.normal(size=(64, 4)).astype('float32')\ny = x.sum(1, keepdims=True)"


def _rate_sweep_fit(capture_dir: Path) -> str:
    return (
        "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(1)])\n"
        "model.compile(keras.optimizers.SGD(learning_rate=LEARNING_RATE), 'mse')\n"
        f"model.fit(x, y * 1e3, batch_size=16, epochs=3, verbose=0, callbacks=[NanGuard({str(capture_dir)!r})])"
    )


def _replay_of_a_run_in_order(
    tmp_path: Path, path: Path, cells: list[tuple[str, str]], order: list[int], allow_errors: bool = False
) -> dict:
    """The ``nanlens replay --json`` report of the one bundle under <tmp_path>/captures, after `cells` saved as
    `path` ran in the order a user clicked them (`order`); the replay must have run."""
    path.write_text(json.dumps(_notebook_json(cells), indent=1), encoding="utf-8")
    _run_notebook(path, tmp_path, path.name, order=order, allow_errors=allow_errors)
    (bundle,) = [p for p in (tmp_path / "captures").iterdir() if p.is_dir()]
    replayed = _nanlens("replay", bundle, path.parent)
    assert replayed.returncode == 0, replayed.stderr[-3000:]
    return json.loads(replayed.stdout)


def test_a_notebook_run_out_of_order_replays_in_the_order_its_kernel_ran(tmp_path):
    """A config cell at the bottom, run before the training cell above it (as users do): the replay ran the saved
    cells top to bottom and failed with "NameError: name 'LEARNING_RATE' is not defined (at cell2.py:2)". The
    bundle records the kernel's executions: the saved cells run in that order."""
    folder = tmp_path / "work"
    folder.mkdir()
    capture_dir = tmp_path / "captures"
    data, train = RATE_SWEEP_DATA, _rate_sweep_fit(capture_dir)
    cells = [("code", IMPORTS), ("code", data), ("code", train), ("code", "LEARNING_RATE = 5.0")]
    report = _replay_of_a_run_in_order(tmp_path, folder / "sweep.ipynb", cells, [0, 1, 3, 2])
    assert report["reproduced"] == {"graph": True, "eager": True}, report["verdicts"]
    assert "(its cells in the order the kernel ran them)" in report["route"], report["route"]


def test_a_fit_cell_run_again_after_the_plot_cell_below_it_replays(tmp_path):
    """Fit, plot the history in the cell below, run the fit cell again (training goes on, and a warm-up that
    multiplies the optimizer's rate compounds into a divergence). The replay ran each cell once, at its last run:
    the plot cell before the fit, which failed with "NameError: name 'history' is not defined". A cell the kernel
    ran again runs again; the fit cell's first run raised NameError too (run before the data cell), and the kernel
    went on, so the replay does."""
    folder = tmp_path / "work"
    folder.mkdir()
    capture_dir = tmp_path / "captures"
    data = (
        "rng = np.random.default_rng(0)\nx = rng.normal(size=(512, 4)).astype('float32')\ny = x.sum(1, keepdims=True)\n"
        "keras.utils.set_random_seed(0)\n"
        "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(1)])\n"
        "model.compile(keras.optimizers.SGD(0.01), 'mse')"
    )
    train = (
        "warmup = keras.callbacks.LearningRateScheduler(lambda epoch, lr: lr * 4.0)\n"
        f"history = model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[warmup, NanGuard({str(capture_dir)!r})])"
    )
    plot = "print('final loss', history.history['loss'][-1])"
    cells = [("code", IMPORTS), ("code", data), ("code", train), ("code", plot)]
    report = _replay_of_a_run_in_order(
        tmp_path, folder / "continue.ipynb", cells, [0, 2, 1, 2, 3, 2], allow_errors=True
    )
    assert report["reproduced"] == {"graph": True, "eager": True}, report["verdicts"]
    assert "(its cells in the order the kernel ran them)" in report["route"], report["route"]


def test_a_cell_that_reads_the_value_the_cell_before_showed_replays(tmp_path):
    """A cell that ends in an expression (``x.shape, y.shape``) shows its value, which the kernel keeps in ``_``,
    ``_3`` and ``Out[3]``; the next cell reads it (``shapes = _``). The replay exec'd each cell, kept no value,
    and failed: "NameError: name '_' is not defined". A last line ending in ";" shows nothing and keeps nothing."""
    folder = tmp_path / "work"
    folder.mkdir()
    capture_dir = tmp_path / "captures"
    shown = "x.shape, y.shape"
    hidden = "float(x.mean());"
    reads = "shapes = _\nassert Out[3] == _3 == shapes and In[3] == 'x.shape, y.shape'\nLEARNING_RATE = 5.0 if shapes[0][1] == 4 else 0.01"
    cells = [
        ("code", IMPORTS),
        ("code", RATE_SWEEP_DATA),
        ("code", shown),
        ("code", hidden),
        ("code", reads),
        ("code", _rate_sweep_fit(capture_dir)),
    ]
    report = _replay_of_a_run_in_order(tmp_path, folder / "shapes.ipynb", cells, list(range(len(cells))))
    assert report["reproduced"] == {"graph": True, "eager": True}, report["verdicts"]


def _bundle_of(tmp_path: Path, folder: Path, name: str, cells: list[tuple[str, str]]) -> tuple[Path, Path]:
    """(the notebook, the one bundle it wrote to <tmp_path>/captures) after "Run All" of `cells` as `name`."""
    path = folder / name
    path.write_text(json.dumps(_notebook_json(cells), indent=1), encoding="utf-8")
    _run_notebook(path, tmp_path, name)
    (bundle,) = [p for p in (tmp_path / "captures").iterdir() if p.is_dir()]
    return path, bundle


@pytest.mark.parametrize("timed", [False, True])
def test_a_log_numpy_warned_at_in_a_cell_is_the_line_to_change(tmp_path, timed):
    """A cell takes np.log of a column with a 0, a later cell standardizes it, fit gets -inf. NumPy warned "divide by
    zero encountered in log" at the log's line, and the bundle kept it, at the kernel's file of the cell: the line
    to change was the standardizing division (the last assignment with a "/"), NumPy's word unused. Under a
    ``%%time`` magic the warning comes from "<timed exec>", and was put on the magic's line 1."""
    folder = tmp_path / "work"
    folder.mkdir()
    capture_dir = tmp_path / "captures"
    features = (
        "rng = np.random.default_rng(0)\n"
        "sqft = rng.uniform(50.0, 300.0, size=(256, 1))\n"
        "sqft[100] = 0.0  # a listing without its area\n"
        "log_sqft = np.log(sqft)\n"
        "price = rng.normal(size=(256, 1)).astype('float32')"
    )
    if timed:
        features = "%%time\n" + features
    scaled = "MU, SD = 5.0, 0.5\nX = ((log_sqft - MU) / SD).astype('float32')"
    train = (
        "model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(8), keras.layers.Dense(1)])\n"
        "model.compile(keras.optimizers.Adam(1e-3), 'mse')\n"
        f"model.fit(X, price, batch_size=32, epochs=1, shuffle=False, verbose=0, callbacks=[NanGuard({str(capture_dir)!r})])"
    )
    cells = [
        ("code", IMPORTS),
        ("markdown", "Features"),
        ("code", features),
        ("code", scaled),
        ("code", train),
    ]
    path, bundle = _bundle_of(tmp_path, folder, "listings.ipynb", cells)
    located = _nanlens("locate", bundle, folder)
    assert located.returncode in (0, 1), located.stderr[-3000:]
    cause = json.loads(located.stdout)["cause"]
    assert cause["kind"] == "data", cause
    line = 5 if timed else 4
    assert (
        f'NumPy warned "divide by zero encountered in log" at listings.ipynb cell 3, line {line}'
        in cause["summary"]
    ), cause["summary"]
    assert (cause["change"]["file"], cause["change"].get("cell"), cause["change"]["line"]) == (
        str(path),
        2,
        line,
    ), cause


def _rmsle_fit_cell(capture_dir: Path) -> str:
    """A cell that imports ``rmsle`` from the model_lib.py a cell above writes and fits on it (its log goes NaN)."""
    return (
        "from model_lib import rmsle\n"
        "rng = np.random.default_rng(0)\n"
        "x = rng.normal(size=(64, 4)).astype('float32')\n"
        "y = rng.uniform(0.0, 5.0, size=(64, 1)).astype('float32')\n"
        "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, bias_initializer=keras.initializers.Constant(-3.0))])\n"
        "model.compile(keras.optimizers.SGD(1e-3), rmsle)\n"
        f"model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[NanGuard({str(capture_dir)!r})])"
    )


_RMSLE_MODULE = (
    "import tensorflow as tf\n"
    "\n"
    "\n"
    "def rmsle(y_true, y_pred):\n"
    "    return tf.sqrt(tf.reduce_mean(tf.square(tf.math.log((y_pred + 1.0) / (y_true + 1.0)))))\n"
)


@pytest.mark.parametrize(
    "library, line, words",
    [
        ("%%writefile model_lib.py\n" + _RMSLE_MODULE, 6, "this cell writes model_lib.py with %%writefile"),
        (
            'open("model_lib.py", "w").write(\'\'\'' + _RMSLE_MODULE + "''')",
            5,
            "this cell writes model_lib.py",
        ),
    ],
    ids=["writefile", "open-write"],
)
def test_a_change_in_a_module_a_cell_writes_is_made_in_that_cell(tmp_path, library, line, words):
    """A cell writes model_lib.py (``%%writefile model_lib.py``, or Python's ``open("model_lib.py",
    "w").write(\'\'\'...\'\'\')``) and the next cell imports its loss. The line to change was model_lib.py's:
    fixed there, the next "Run All" wrote the file over again. It is the cell's line that holds the same code."""
    folder = tmp_path / "work"
    folder.mkdir()
    cells = [("code", IMPORTS), ("code", library), ("code", _rmsle_fit_cell(tmp_path / "captures"))]
    path, bundle = _bundle_of(tmp_path, folder, "sales.ipynb", cells)
    located = _nanlens("locate", bundle, folder)
    assert located.returncode in (0, 1), located.stderr[-3000:]
    change = json.loads(located.stdout)["cause"]["change"]
    assert (change["file"], change.get("cell"), change["line"]) == (str(path), 1, line), change
    assert words in change["what"], change


@pytest.mark.slow
def test_a_loss_autoreload_recompiled_after_a_second_writefile_is_marked_at_its_line_and_that_cell(tmp_path):
    """``%autoreload 2`` and a ``%%writefile losses.py`` cell written again below with a new ``rmsle`` (the first
    trained on log prices, the second on prices). IPython 9's autoreload recompiles the edited function alone
    (``ast.unparse`` of it, under the module's file name), so its lines counted from its ``def``: the origin was
    losses.py:2, a blank line, and the change "cell 2, line 3". The change was also always made in the first cell
    that writes the file, whose line is the old code; the second cell wrote what ran."""
    folder = tmp_path / "work"
    folder.mkdir()
    capture_dir = tmp_path / "captures"
    first = (
        "%%writefile losses.py\n"
        "import tensorflow as tf\n"
        "\n"
        "\n"
        "def rmsle(y_true, y_pred):\n"
        "    # the model predicts log1p(price)\n"
        "    return tf.sqrt(tf.reduce_mean(tf.square(y_pred - tf.math.log(y_true + 1.0))))\n"
    )
    second = (
        "%%writefile losses.py\n"
        "import tensorflow as tf\n"
        "\n"
        "\n"
        "def rmsle(y_true, y_pred):\n"
        "    # the model predicts the price itself\n"
        "    return tf.sqrt(tf.reduce_mean(tf.square(\n"
        "        tf.math.log(y_pred + 1.0) - tf.math.log(y_true + 1.0))))\n"
    )
    data = (
        "import losses\n"
        "rng = np.random.default_rng(0)\n"
        "x = rng.normal(size=(64, 4)).astype('float32')\n"
        "y = rng.uniform(1.0, 5.0, size=(64, 1)).astype('float32')"
    )
    fit = (
        "model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, bias_initializer=keras.initializers."
        "Constant({bias}))])\n"
        "model.compile(keras.optimizers.SGD(1e-3), losses.rmsle)\n"
        f"model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[NanGuard({str(capture_dir)!r})])"
    )
    cells = [
        ("code", IMPORTS + "\n%load_ext autoreload\n%autoreload 2"),
        ("code", first),
        ("code", data),
        ("code", fit.replace("{bias}", "1.0")),
        ("code", second),
        ("code", fit.replace("{bias}", "-3.0")),
    ]
    path, bundle = _bundle_of(tmp_path, folder, "prices.ipynb", cells)
    located = _nanlens("locate", bundle, folder)  # the findings made at the scene
    assert located.returncode in (0, 1), located.stderr[-3000:]
    found = json.loads(located.stdout)
    origin, change = found["origin"], found["cause"]["change"]
    # The Log is on the second line of the wrapped return (the file's line 7), the statement's first line is 6.
    assert (origin["file"], origin["line"]) == (str(folder / "losses.py"), 6), origin
    assert (change["file"], change.get("cell"), change["line"]) == (str(path), 4, 7), change


def test_a_notebook_with_a_fit_cell_pasted_again_below_an_edited_config_replays_the_second_fit(tmp_path):
    """A fit cell pasted again, word for word, below a config cell that raises the rate (how users try a second
    setting): the second fit diverged. Both replays failed with "the notebook ran 1 fit, none of them the captured
    one": the two cells of one text were taken for one, run once, in the first one's place."""
    folder = tmp_path / "work"
    folder.mkdir()
    capture_dir = tmp_path / "captures"
    data, train = RATE_SWEEP_DATA, _rate_sweep_fit(capture_dir)
    cells = [
        ("code", IMPORTS),
        ("code", data),
        ("code", "LEARNING_RATE = 1e-6"),
        ("code", train),
        ("markdown", "A larger rate:"),
        ("code", "LEARNING_RATE = 5.0"),
        ("code", train),
    ]
    path, bundle = _bundle_of(tmp_path, folder, "rates.ipynb", cells)
    replayed = _nanlens("replay", bundle, folder)
    assert replayed.returncode == 0, replayed.stderr[-3000:]
    report = json.loads(replayed.stdout)
    assert report["reproduced"] == {"graph": True, "eager": True}, report["verdicts"]


def test_a_second_fit_on_reloaded_data_is_the_origin_and_its_data_the_change(tmp_path):
    """A notebook fits a baseline, rewrites its data module (``%%writefile``: a new column, spend / visits, inf for
    customers with 0 visits, which pandas divides without a warning), reloads it and fits again with the same line
    in a ``%%time`` cell: the origin of the bad data was the first fit's line, which trained fine, and the line to
    change the first ``X, y = ...``, before the reload. The bundle records which fit failed (its cell)."""
    folder = tmp_path / "work"
    folder.mkdir()
    path = folder / "spend.ipynb"
    shutil.copy(Path(__file__).parent / "programs" / "shapes" / "fit_twice_reloaded_module.ipynb", path)
    _run_notebook(path, tmp_path, path.name)
    (bundle,) = [p for p in (folder / "captures").iterdir() if p.is_dir()]
    done = _nanlens("locate", bundle, folder)
    assert done.returncode == 0, done.stderr[-3000:]
    located = json.loads(done.stdout)
    origin, cause = located["origin"], located["cause"]
    assert (origin["file"], origin["cell"], origin["line"]) == (str(path), 9, 3), origin
    assert cause["kind"] == "data", cause
    assert (cause["change"]["cell"], cause["change"]["line"]) == (8, 3), cause["change"]
