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

from pyadapter.cause import attach_cause, trend
from pyadapter.dump import scan_dump
from pyadapter.findings import Findings, TensorHealth
from pyadapter.pictures import SCHEMA, build_picture_model, bundle_loss_history
from pyadapter.pictures.model import PictureModel, health_class, health_summary, is_partial, picture_cause
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
        (
            e
            for e in model["edges"]
            if e["source"] == source["id"] and e["target"] == target["id"] and e["kind"] == kind
        ),
        None,
    )


# --- pure parts ------------------------------------------------------------------------------------------------------


def test_health_classes_and_summaries() -> None:
    partly = TensorHealth(size=640, neg_inf=3, zero=24, pos=613)
    assert (health_class(partly), is_partial(partly)) == ("neg_inf", True)
    assert health_summary(partly) == "3 -inf of 640 (partly)"
    all_nan = TensorHealth(size=4, nan=4)
    assert (health_class(all_nan), is_partial(all_nan), health_summary(all_nan)) == (
        "nan",
        False,
        "4 NaN of 4",
    )
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
    (tmp_path / "manifest.json").write_text(
        json.dumps(
            {
                "format": "nanlens.bundle/1",
                "step": 2,
                "loss_history": [
                    {"step": 0, "loss": 6.7, "logged_loss": 6.7},
                    {"step": 2, "loss": None},
                    "junk",
                ],
            }
        )
    )
    rows, step = bundle_loss_history(tmp_path)
    assert step == 2
    assert rows == [
        {"step": 0, "loss": 6.7, "logged_loss": 6.7},
        {"step": 2, "loss": None, "logged_loss": None},
    ]
    assert bundle_loss_history(tmp_path / "missing") == (None, None)


def _diverging_manifest() -> dict:
    """A bundle's manifest as the guard writes it for a run whose loss grows x10 per step from step 3 until the
    gradient norm overflows at step 8 (pyadapter/capture/history.py rows)."""
    rows = [
        {
            "step": s,
            "loss": 2.0 - 0.1 * s,
            "logged_loss": 2.1,
            "grad_norm": 1.5,
            "weight_norm": 30.0,
            "update_ratio": 0.001,
            "max_abs_output": 4.0,
        }
        for s in range(3)
    ]
    rows += [
        {
            "step": s,
            "loss": 1.7 * 10.0 ** (s - 3),
            "logged_loss": 2.0,
            "grad_norm": 1.5 * 9.0 ** (s - 3),
            "weight_norm": 30.0 + s,
            "update_ratio": 0.01,
            "max_abs_output": 5.0,
        }
        for s in range(3, 8)
    ]
    rows.append(
        {
            "step": 8,
            "loss": None,
            "loss_nonfinite": "inf",
            "logged_loss": None,
            "grad_norm": None,
            "grad_norm_nonfinite": "nan",
            "weight_norm": 38.0,
            "update_ratio": None,
            "max_abs_output": None,
        }
    )
    return {"format": "nanlens.bundle/1", "step": 8, "loss_history": rows}


def test_the_picture_model_carries_the_history_series_and_a_divergence_window(tmp_path: Path) -> None:
    manifest = _diverging_manifest()
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    rows, step = bundle_loss_history(tmp_path)
    assert step == 8 and [r["step"] for r in rows] == list(range(9))
    assert rows[4]["grad_norm"] == pytest.approx(13.5) and rows[4]["weight_norm"] == 34.0
    assert rows[4]["update_ratio"] == 0.01 and rows[4]["max_abs_output"] == 5.0
    # The failing step keeps which kind of non-finite value each series held (the chart marks those steps).
    assert rows[8]["loss"] is None and rows[8]["loss_nonfinite"] == "inf"
    assert rows[8]["grad_norm"] is None and rows[8]["grad_norm_nonfinite"] == "nan"
    assert "logged_loss_nonfinite" not in rows[8]

    # The cause as pyadapter.cause writes it for a divergence: its trend is Trend.to_json of the same history.
    growth = trend.series_trend(manifest["loss_history"], "loss")
    assert growth is not None and growth.is_growth
    cause = {
        "kind": "divergence",
        "summary": "the run diverged: the loss grew x10 per step for 4 steps",
        "evidence": {"series": "loss", "trend": growth.to_json()},
        "change": None,
    }
    model = PictureModel(
        "bundle", str(tmp_path), "b", loss_history=rows, failing_step=step, cause=picture_cause(cause)
    ).to_json()
    model = json.loads(json.dumps(model, allow_nan=False))  # what the webview receives
    assert model["schema"] == SCHEMA
    assert model["cause"]["kind"] == "divergence" and model["cause"]["summary"].startswith("the run diverged")
    window = model["cause"]["trend"]
    assert (window["series"], window["start_step"], window["end_step"], window["steps"]) == ("loss", 3, 7, 4)
    assert window["rate_per_step"] == pytest.approx(10.0) and window["factor"] == pytest.approx(1e4)
    assert model["loss_history"][5]["grad_norm"] == pytest.approx(1.5 * 81)

    # An op cause has no window to shade, only its kind and summary.
    op = picture_cause({"kind": "op", "summary": "Log of 0", "evidence": {"history": growth.to_json()}})
    assert op == {"kind": "op", "summary": "Log of 0", "trend": None}


def test_an_older_bundle_without_the_series_or_a_cause_still_draws(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(
        json.dumps(
            {
                "format": "nanlens.bundle/1",
                "step": 1,
                "loss_history": [{"step": 0, "loss": 6.7, "logged_loss": 6.7}, {"step": 1, "loss": None}],
            }
        )
    )
    rows, step = bundle_loss_history(tmp_path)
    assert rows == [
        {"step": 0, "loss": 6.7, "logged_loss": 6.7},
        {"step": 1, "loss": None, "logged_loss": None},
    ]
    model = PictureModel("bundle", str(tmp_path), "b", loss_history=rows, failing_step=step).to_json()
    assert model["cause"] is None and model["loss_history"] == rows


def test_a_cause_attached_after_the_pictures_is_marked_on_them(tmp_path: Path) -> None:
    """A bundle's pictures are made during the replay, its cause after: attach_cause marks it on the pictures."""
    findings = Findings(source_kind="bundle", source_path=str(tmp_path), origin=None)
    findings.extra["pictures"] = PictureModel("bundle", str(tmp_path), "b").to_json()
    attach_cause(findings)  # no origin: "unknown"
    assert findings.extra["pictures"]["cause"]["kind"] == "unknown"
    assert findings.extra["pictures"]["cause"]["summary"] == findings.extra["cause"]["summary"]


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


def test_pictures_cached_before_causes_get_the_cause_when_served(tmp_path: Path) -> None:
    """A locate cached before the timeline marked causes: the server marks the findings' cause on its pictures."""
    from types import SimpleNamespace

    from pyadapter.server.pictures import _pictures_of

    findings = Findings(source_kind="bundle", source_path=str(tmp_path), origin=None)
    old = PictureModel("bundle", str(tmp_path), "b").to_json()
    del old["cause"]
    findings.extra["pictures"] = old
    findings.extra["cause"] = {
        "kind": "divergence",
        "summary": "s",
        "evidence": {
            "trend": {
                "series": "grad_norm",
                "start_step": 2,
                "end_step": 6,
                "steps": 4,
                "factor": 1e4,
                "rate_per_step": 10.0,
            }
        },
    }
    served = _pictures_of(SimpleNamespace(findings=findings))
    assert served is not None and served["cause"]["trend"]["series"] == "grad_norm"
    assert (served["cause"]["trend"]["start_step"], served["cause"]["trend"]["end_step"]) == (2, 6)
