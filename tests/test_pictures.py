"""The picture model (op graph around the origin, health timeline) and `nanlens report`, on real dumps.

The dumps are the ones tests/programs makes under `nanlens run` (shared with test_scan_programs): a Log of a
softmax with zeros in a tf.function, a backward-only NaN (SqrtGrad), and plain eager ops.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from programs.harness import PROGRAMS, marker_line, nanlens, program_dumps

from pyadapter.dump import scan_dump
from pyadapter.findings import TensorHealth
from pyadapter.pictures import SCHEMA, build_picture_model, bundle_loss_history
from pyadapter.pictures.model import health_class, health_summary, is_partial
from pyadapter.pictures.neighborhood import _forward_by_tape_scope


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory):
    return program_dumps(tmp_path_factory.getbasetemp() / "program-dumps")


def by_type(model: dict, op_type: str) -> dict:
    found = [n for n in model["nodes"] if n["type"] == op_type]
    assert found, f"no {op_type} node among {[n['type'] for n in model['nodes']]}"
    return found[0]


def edge_between(model: dict, source: dict, target: dict, kind: str = "data") -> dict | None:
    return next(
        (e for e in model["edges"] if e["source"] == source["id"] and e["target"] == target["id"] and e["kind"] == kind),
        None,
    )


# --- pure parts ------------------------------------------------------------------------------------------------------


def test_health_classes_and_summaries() -> None:
    partly = TensorHealth(size=640, neg_inf=3, zero=24, pos=613)
    assert (health_class(partly), is_partial(partly)) == ("neg_inf", True)
    assert health_summary(partly) == "3 -inf of 640 (partly)"
    all_nan = TensorHealth(size=4, nan=4)
    assert (health_class(all_nan), is_partial(all_nan), health_summary(all_nan)) == ("nan", False, "4 NaN of 4")
    assert health_class(TensorHealth(size=4, nan=1, pos_inf=1)) == "mixed"
    finite = TensorHealth(size=640, zero=3)
    assert (health_class(finite), health_summary(finite)) == ("finite", "finite, 3 zeros of 640")
    assert (health_class(None), health_summary(None)) == ("unknown", "not traced")


def test_gradient_ops_are_linked_to_forward_ops_only_by_exact_tape_scope() -> None:
    shown = {"loss/mul", "loss/Log", "gradient_tape/loss/mul/Mul"}
    assert _forward_by_tape_scope("gradient_tape/loss/mul/Mul", shown) == "loss/mul"
    assert _forward_by_tape_scope("gradient_tape/loss/mul/Mul", {"loss/Log"}) is None
    assert _forward_by_tape_scope("loss/mul", shown) is None


def test_bundle_loss_history_reads_the_manifest(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps({
        "format": "nanlens.bundle/1", "step": 2,
        "loss_history": [{"step": 0, "loss": 6.7, "logged_loss": 6.7}, {"step": 2, "loss": None}, "junk"],
    }))
    rows, step = bundle_loss_history(tmp_path)
    assert step == 2
    assert rows == [{"step": 0, "loss": 6.7, "logged_loss": 6.7}, {"step": 2, "loss": None, "logged_loss": None}]
    assert bundle_loss_history(tmp_path / "missing") == (None, None)


# --- real dumps ------------------------------------------------------------------------------------------------------

slow = pytest.mark.slow


@slow
def test_graph_origin_with_its_input_and_consumers(dumps) -> None:
    dump = dumps["log_softmax.py"].dump
    findings = scan_dump(dump)
    model = build_picture_model(dump, findings=findings).to_json()
    assert model["schema"] == SCHEMA
    json.dumps(model, allow_nan=False)  # plain JSON, as the editor and the report need it

    origin = by_type(model, "Log")
    assert origin["role"] == "origin" and origin["distance"] == 0
    assert origin["health_class"] == "neg_inf" and origin["partial"] is True
    assert origin["health"]["neg_inf"] == 2 and origin["health"]["size"] == 3
    assert (origin["file"], origin["line"]) == marker_line("log_softmax.py")
    assert [n for n in model["nodes"] if n["role"] == "origin"] == [origin]

    # Its input: the softmax output, finite but holding the two zeros the log turned into -inf.
    softmax = by_type(model, "Softmax")
    assert softmax["role"] == "input" and softmax["distance"] == -1
    assert softmax["health_class"] == "finite" and softmax["health"]["zero"] == 2
    assert edge_between(model, softmax, origin)["tensor"] == f"{softmax['name']}:0"
    # Further back, what fed the softmax; forward, what consumed the -inf and carried it.
    assert any(n["distance"] == -2 for n in model["nodes"])
    consumers = [n for n in model["nodes"] if n["role"] == "consumer"]
    assert consumers and all(n["distance"] > 0 for n in consumers)
    first = [n for n in consumers if edge_between(model, origin, n)]
    assert first and any(n["health_class"] != "finite" for n in first)
    assert all(e["health_class"] == "neg_inf" for e in model["edges"] if e["source"] == origin["id"])

    # One execution (one call of the tf.function): the timeline walks its traces; the origin is where they turn.
    timeline = model["timeline"]
    assert timeline["unit"] == "trace" and timeline["traces"] == len(timeline["points"])
    assert timeline["origin_x"] == timeline["first_nonfinite_x"] == findings.origin.op.trace_index
    before = [p for p in timeline["points"] if p["x"] < timeline["origin_x"]]
    assert before and all(p["cumulative"] == 0 for p in before)
    at_origin = next(p for p in timeline["points"] if p["x"] == timeline["origin_x"])
    assert at_origin["non_finite"] == 1 and "Log" in at_origin["label"]
    assert model["loss_history"] is None and model["origin"]["op"]["type"] == "Log"


@slow
def test_gradient_origin_is_linked_to_its_forward_op(dumps) -> None:
    dump = dumps["backward_sqrt.py"].dump
    findings = scan_dump(dump)
    model = build_picture_model(dump, findings=findings).to_json()
    origin = next(n for n in model["nodes"] if n["role"] == "origin")
    assert origin["type"] == "SqrtGrad" and origin["gradient"] is True
    forward = next(n for n in model["nodes"] if n["name"] == findings.origin.op.forward_op)
    assert forward["type"] == "Sqrt" and forward["health_class"] == "finite"
    assert edge_between(model, forward, origin, kind="gradient") is not None
    # The forward op's line is the one the user fixes; a click on it opens that line.
    assert (forward["file"], forward["line"]) == marker_line("backward_sqrt.py")


@slow
def test_eager_origin_with_producer_and_consumers(dumps) -> None:
    dump = dumps["eager_program.py"].dump
    model = build_picture_model(dump, findings=scan_dump(dump)).to_json()
    origin = next(n for n in model["nodes"] if n["role"] == "origin")
    assert origin["type"] == "RealDiv" and origin["health_class"] == "pos_inf"
    zeros = by_type(model, "Mul")  # values * 0.0: finite, all zeros
    assert zeros["role"] == "input" and zeros["health"]["zero"] == 3
    assert edge_between(model, zeros, origin) is not None
    consumers = [n for n in model["nodes"] if n["role"] == "consumer"]
    assert consumers and all(edge_between(model, origin, n) or n["distance"] > 1 for n in consumers)
    # Eager ops are executions: the timeline counts non-finite outputs execution by execution.
    timeline = model["timeline"]
    assert timeline["unit"] == "execution"
    assert timeline["origin_x"] == timeline["first_nonfinite_x"]
    assert all(p["non_finite"] == 0 for p in timeline["points"] if p["x"] < timeline["origin_x"])


@slow
def test_report_of_a_dump_is_one_offline_page(dumps, tmp_path: Path) -> None:
    dump = dumps["log_softmax.py"].dump
    out = tmp_path / "report.html"
    proc = nanlens("report", str(dump), "--html", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {out}" in proc.stdout and "origin Log" in proc.stdout
    page = out.read_text(encoding="utf-8")
    # Nothing is loaded from anywhere: no src/href attributes, a CSP that allows no fetching.
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", page)
    assert "default-src 'none'" in page
    data = re.search(r'<script type="application/json" id="nanlens-pictures">(.*?)</script>', page, re.S)
    assert data is not None
    model = json.loads(data.group(1))
    assert model["schema"] == SCHEMA and by_type(model, "Log")["role"] == "origin"
    # The findings are in the page as text too, and the web bundle is inlined whole.
    path, line = marker_line("log_softmax.py")
    assert f"{path}:{line}" in page and "Log produced 2 -inf" in page
    bundle_js = (Path(__file__).parent.parent / "pyadapter" / "report_assets" / "pictures.js").read_text()
    assert bundle_js[:200] in page


def test_report_refuses_what_it_cannot_draw(tmp_path: Path) -> None:
    proc = nanlens("report", str(tmp_path), "--html", str(tmp_path / "x.html"), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("nanlens: error:") and len(proc.stderr.strip().splitlines()) == 1
    assert "neither a capture bundle" in proc.stderr
    proc = nanlens("report", str(tmp_path / "missing"), "--html", str(tmp_path / "x.html"), cwd=tmp_path)
    assert proc.returncode == 2 and "is not a directory" in proc.stderr
    assert not (tmp_path / "x.html").exists()
    assert nanlens("report", "--help", cwd=PROGRAMS).returncode == 0
