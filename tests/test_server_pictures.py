"""`nanlens.server.pictureModel` over stdio: the op graph and timeline the editor's webviews draw.

Uses the language-server harness of test_server_lsp (its real dump of a tf.function taking log(0)).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_server_lsp import Session, Workspace, make_bundle, plain, run, workspace  # noqa: F401 - the fixture is used

from pyadapter.pictures import SCHEMA

pytestmark = pytest.mark.slow

CMD = "nanlens.server.pictureModel"


def test_picture_model_of_a_dump_source(workspace: Workspace) -> None:  # noqa: F811 - pytest fixture
    ws = workspace

    async def body() -> None:
        async with Session(ws.root, {"captureDirs": [], "dumpDirs": [".nanlens/dumps"]}) as s:
            source = await s.wait_for("the dump source", lambda: s.settled("dump", ws.dump))
            model = plain(await s.command(CMD, source["id"]))
            assert model["schema"] == SCHEMA, model
            origin = next(n for n in model["nodes"] if n["role"] == "origin")
            assert origin["type"] == "Log" and origin["health_class"] == "neg_inf"
            assert (origin["file"], origin["line"]) == (str(ws.program), ws.origin_line)
            assert any(e["target"] == origin["id"] for e in model["edges"])
            assert model["timeline"]["origin_x"] is not None
            assert model["source"]["path"] == str(ws.dump)
            # By path, and without an argument (the only source): the same picture.
            again = plain(await s.command(CMD, str(ws.dump)))
            assert again == model
            alone = plain(await s.command(CMD))
            assert alone == model
            unknown = plain(await s.command(CMD, "dump:/no/such/dump"))
            assert "no capture bundle or dump" in unknown["error"]

    run(body())


def test_picture_model_of_a_bundle_comes_with_its_findings(workspace: Workspace, tmp_path: Path) -> None:  # noqa: F811
    from pyadapter.dump import scan_dump
    from pyadapter.pictures import build_picture_model

    ws = workspace
    bundle = make_bundle(tmp_path, step=7)
    findings = scan_dump(str(ws.dump))  # what a locate of this bundle finds, pictures included
    findings.extra["pictures"] = build_picture_model(
        ws.dump,
        findings=findings,
        source_kind="bundle",
        source_path=str(bundle),
        failing_step=7,
        loss_history=[
            {"step": 6, "loss": 1.5, "logged_loss": 1.5},
            {"step": 7, "loss": None, "logged_loss": None},
        ],
    ).to_json()
    findings.source_kind, findings.source_path, findings.bundle = "bundle", str(bundle), {"step": 7}
    Path(str(bundle) + ".findings.json").write_text(findings.dumps())

    async def body() -> None:
        async with Session(tmp_path, {"captureDirs": ["captures"], "dumpDirs": []}) as s:
            source = await s.wait_for("the bundle source", lambda: s.settled("bundle", bundle))
            model = plain(await s.command(CMD, {"sourceId": source["id"]}))
            assert model["source"] == {"kind": "bundle", "path": str(bundle), "label": "run-step7"}
            assert model["failing_step"] == 7 and model["loss_history"][-1] == {
                "step": 7,
                "loss": None,
                "logged_loss": None,
            }
            assert any(n["role"] == "origin" and n["type"] == "Log" for n in model["nodes"])

    run(body())
