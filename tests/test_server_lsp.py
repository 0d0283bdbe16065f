"""The language server over stdio, driven by pygls's LanguageClient as the extension would drive it.

A session fixture makes one real tfdbg2 dump (a tf.function taking log(0) on the line marked `# ORIGIN`); each
test starts its own `python -m pyadapter serve` and checks what an editor user would see: the marked line, the
hover, the CodeLens, the `nanlens/findings` state, progress, one clear message for a bad setting, stale marks.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from lsprotocol import types
from pygls.lsp.client import LanguageClient
from pygls.uris import from_fs_path

from pyadapter.capture.seal import sealed

pytestmark = pytest.mark.slow

PYTHON = sys.executable
# The lenses (and hover links) of an origin line that open the client's pictures of its source.
PICTURE_COMMANDS = ("nanlens.showOpGraph", "nanlens.showTimeline")
TIMEOUT = 60.0  # seconds to wait for one expected message (a cold scanner import on a busy CI box)

PROGRAM = '''\
"""A training step gone wrong: log of a zero."""
import sys

import tensorflow as tf


@tf.function
def compute(x):
    y = tf.math.log(x)  # ORIGIN
    return y * 2.0


if __name__ == "__main__":
    tf.debugging.experimental.enable_dump_debug_info(
        sys.argv[1], tensor_debug_mode="FULL_HEALTH", circular_buffer_size=-1)
    compute(tf.constant([0.0, 1.0]))
    tf.debugging.experimental.disable_dump_debug_info()
'''


# --- fixtures --------------------------------------------------------------------------------------------------------


class Workspace:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.program = root / "train.py"
        self.dump = root / ".nanlens" / "dumps" / "run1"
        self.origin_line = next(i for i, line in enumerate(PROGRAM.splitlines(), 1) if "# ORIGIN" in line)


@pytest.fixture(scope="session")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    """A workspace folder holding train.py and the real dump of one run of it, in the default dumpDirs."""
    ws = Workspace(tmp_path_factory.mktemp("ws"))
    ws.program.write_text(PROGRAM)
    ws.dump.parent.mkdir(parents=True)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    subprocess.run(
        [PYTHON, str(ws.program), str(ws.dump)],
        check=True,
        env=env,
        cwd=ws.root,
        timeout=300,
        capture_output=True,
    )
    assert any(ws.dump.glob("tfdbg_events.*.metadata"))
    return ws


def plain(value: Any) -> Any:
    """pygls hands unknown notifications' params over as namedtuples; make them JSON-like again."""
    if hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


class Session:
    """One server process and everything it sent, with a way to wait for what a test expects."""

    def __init__(self, workspace: Path, options: dict[str, Any] | None = None, progress: bool = True) -> None:
        self.workspace = workspace
        self.options = options
        self.progress = progress
        self.client = LanguageClient("nanlens-test", "0")
        self.diagnostics: dict[str, list[types.Diagnostic]] = {}
        self.findings: list[dict[str, Any]] = []
        self.messages: list[types.ShowMessageParams] = []
        self.progress_events: list[tuple[str, Any]] = []
        self.stderr: list[str] = []
        self._changed = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        c = self.client

        @c.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def on_diagnostics(_ls: LanguageClient, params: types.PublishDiagnosticsParams) -> None:
            self.diagnostics[params.uri] = list(params.diagnostics)
            self._changed.set()

        @c.feature("nanlens/findings")
        def on_findings(_ls: LanguageClient, params: Any) -> None:
            self.findings.append(plain(params))
            self._changed.set()

        @c.feature(types.WINDOW_SHOW_MESSAGE)
        def on_message(_ls: LanguageClient, params: types.ShowMessageParams) -> None:
            self.messages.append(params)
            self._changed.set()

        @c.feature(types.WINDOW_LOG_MESSAGE)
        def on_log(_ls: LanguageClient, params: types.LogMessageParams) -> None:
            pass

        @c.feature(types.WINDOW_WORK_DONE_PROGRESS_CREATE)
        def on_progress_create(_ls: LanguageClient, params: types.WorkDoneProgressCreateParams) -> None:
            self.progress_events.append(("create", params.token))

        @c.feature(types.PROGRESS)
        def on_progress(_ls: LanguageClient, params: types.ProgressParams) -> None:
            value = params.value if isinstance(params.value, dict) else plain(params.value)
            self.progress_events.append((value.get("kind"), value))
            self._changed.set()

        @c.feature(types.WORKSPACE_CODE_LENS_REFRESH)
        def on_lens_refresh(_ls: LanguageClient, params: None) -> None:
            pass

    async def __aenter__(self) -> Session:
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        await self.client.start_io(PYTHON, "-m", "pyadapter", "serve", env=env, cwd=str(self.workspace))
        self._tasks.append(asyncio.create_task(self._drain_stderr()))
        caps = types.ClientCapabilities(
            window=types.WindowClientCapabilities(work_done_progress=self.progress),
            workspace=types.WorkspaceClientCapabilities(
                code_lens=types.CodeLensWorkspaceClientCapabilities(refresh_support=True)
            ),
            notebook_document=types.NotebookDocumentClientCapabilities(
                synchronization=types.NotebookDocumentSyncClientCapabilities()
            ),
        )
        uri = from_fs_path(str(self.workspace))
        await self.client.initialize_async(
            types.InitializeParams(
                capabilities=caps,
                root_uri=uri,
                workspace_folders=[types.WorkspaceFolder(uri=uri, name="ws")],
                initialization_options=self.options,
            )
        )
        self.client.initialized(types.InitializedParams())
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await asyncio.wait_for(self.client.shutdown_async(None), 10)
            self.client.exit(None)
            await asyncio.wait_for(self.client.stop(), 10)
        finally:
            for task in self._tasks:
                task.cancel()

    async def _drain_stderr(self) -> None:
        server = self.client._server  # the client pipes the server's stderr; read it so the pipe never fills
        assert server is not None and server.stderr is not None
        while line := await server.stderr.readline():
            self.stderr.append(line.decode("utf-8", "replace").rstrip())

    async def wait_for(self, what: str, predicate: Callable[[], Any], timeout: float = TIMEOUT) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            result = predicate()
            if result:
                return result
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.client.stopped:
                log = "\n".join(self.stderr[-30:])
                raise AssertionError(
                    f"timed out waiting for {what}; last state: {self.findings[-1:]}\n"
                    f"messages: {self.messages}\nserver log:\n{log}"
                )
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.5))
            except asyncio.TimeoutError:
                pass

    def sources(self) -> list[dict[str, Any]]:
        return self.findings[-1]["sources"] if self.findings else []

    def source(self, kind: str, path: Path) -> dict[str, Any] | None:
        return next((s for s in self.sources() if s["kind"] == kind and s["path"] == str(path)), None)

    def settled(self, kind: str, path: Path) -> dict[str, Any] | None:
        s = self.source(kind, path)
        return s if s is not None and s["status"] != "scanning" else None

    def diagnostics_of(self, path: Path) -> list[types.Diagnostic]:
        return self.diagnostics.get(from_fs_path(str(path)), [])

    async def hover(self, path: Path | str, line: int) -> types.Hover | None:
        """Hover a line of a file (a Path) or of a document given by its URI (a notebook cell's)."""
        uri = path if isinstance(path, str) else from_fs_path(str(path))
        return await self.client.text_document_hover_async(
            types.HoverParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                position=types.Position(line=line - 1, character=4),
            )
        )

    async def code_lenses(self, path: Path | str, pictures: bool = False) -> list[types.CodeLens]:
        """The document's lenses; without ``pictures``, less the 'Show op graph' / 'Health timeline' pair every
        origin line of a readable source gets (test_bundle_with_precomputed_findings_gets_replay_lens checks it)."""
        uri = path if isinstance(path, str) else from_fs_path(str(path))
        lenses = (
            await self.client.text_document_code_lens_async(
                types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
            )
            or []
        )
        if pictures:
            return lenses
        return [lens for lens in lenses if not (lens.command and lens.command.command in PICTURE_COMMANDS)]

    async def command(self, name: str, *arguments: Any) -> Any:
        return await self.client.workspace_execute_command_async(
            types.ExecuteCommandParams(command=name, arguments=list(arguments))
        )


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 240))


def origin_diagnostic(session: Session, ws: Workspace) -> types.Diagnostic | None:
    return next(
        (
            d
            for d in session.diagnostics_of(ws.program)
            if d.range.start.line == ws.origin_line - 1 and (d.data or {}).get("role") == "origin"
        ),
        None,
    )


# --- tests -----------------------------------------------------------------------------------------------------------


def test_dump_in_workspace_marks_origin_line_with_hover_lens_findings_and_progress(
    workspace: Workspace,
) -> None:
    ws = workspace

    async def body() -> None:
        async with Session(
            ws.root,
            {"captureDirs": [".nanlens", "captures"], "dumpDirs": [".nanlens/dumps"], "logLevel": "INFO"},
        ) as s:
            diag = await s.wait_for("the origin diagnostic", lambda: origin_diagnostic(s, ws))
            assert diag.severity == types.DiagnosticSeverity.Error
            assert diag.source == "NaN Lens" and diag.code == "Log"
            assert diag.data["sourceId"] == f"dump:{ws.dump}"
            assert "-inf" in diag.message
            # The line is underlined from its code, not from column 0 of the indentation.
            assert diag.range.start.character == PROGRAM.splitlines()[ws.origin_line - 1].index("y =")

            source = await s.wait_for("an ok dump source", lambda: s.settled("dump", ws.dump))
            assert source["status"] == "ok" and source["error"] is None
            assert source["id"] == f"dump:{ws.dump}" and source["label"].startswith("run1")
            origin = source["origin"]
            assert origin["file"] == str(ws.program) and origin["line"] == ws.origin_line
            assert origin["op"]["type"] == "Log" and origin["stale"] is False
            assert any(f["role"] == "origin" and f["line"] == ws.origin_line for f in source["findings"])

            hover = await s.hover(ws.program, ws.origin_line)
            assert hover is not None and isinstance(hover.contents, types.MarkupContent)
            assert hover.contents.kind == types.MarkupKind.Markdown
            text = hover.contents.value
            assert "`Log`" in text and "-inf" in text and "inputs" in text
            assert await s.hover(ws.program, 1) is None

            lenses = await s.code_lenses(ws.program)
            assert [lens.range.start.line for lens in lenses] == [ws.origin_line - 1]
            command = lenses[0].command
            assert command is not None and command.command == "nanlens.debugEagerly"
            assert command.title == "$(debug-alt) Run eagerly under debugger"
            assert list(command.arguments) == [
                {"script": str(ws.program), "file": str(ws.program), "line": ws.origin_line}
            ]

            kinds = [kind for kind, _ in s.progress_events]
            assert "create" in kinds and "begin" in kinds
            await s.wait_for("the progress end", lambda: "end" in [k for k, _ in s.progress_events])
            assert s.messages == []  # nothing wrong, nothing to pop up
            assert any("starting NaN Lens language server" in line for line in s.stderr)  # logs go to stderr

    run(body())


def test_bad_dump_dir_gives_one_message_and_server_keeps_working(
    workspace: Workspace, tmp_path: Path
) -> None:
    ws = workspace
    not_a_dir = tmp_path / "dumps.txt"
    not_a_dir.write_text("not a folder")
    missing = tmp_path / "no-such-dumps"

    async def body() -> None:
        options = {"dumpDirs": [".nanlens/dumps", str(missing), str(not_a_dir)], "captureDirs": []}
        async with Session(ws.root, options) as s:
            await s.wait_for("a settings message", lambda: s.messages)
            await s.wait_for(
                "the origin diagnostic", lambda: origin_diagnostic(s, ws)
            )  # the good dir still works
            assert len(s.messages) == 1
            message = s.messages[0]
            assert message.type == types.MessageType.Warning
            assert str(missing) in message.message and str(not_a_dir) in message.message
            assert "\n" not in message.message

            # A malformed change of settings: one more message, and the server still answers.
            s.client.workspace_did_change_configuration(
                types.DidChangeConfigurationParams(
                    settings={"nanlens": {"dumpDirs": 42, "captureDirs": [], "logLevel": "INFO"}}
                )
            )
            await s.wait_for("a second message", lambda: len(s.messages) >= 2)
            assert "dumpDirs" in s.messages[1].message
            # The same settings again (clients resend them): no second pop-up for the same problem.
            s.client.workspace_did_change_configuration(
                types.DidChangeConfigurationParams(
                    settings={"nanlens": {"dumpDirs": 42, "captureDirs": [], "logLevel": "INFO"}}
                )
            )
            hover = await s.hover(ws.program, ws.origin_line)
            assert hover is not None
            assert s.client.stopped is False
            assert len(s.messages) == 2

    run(body())


def test_file_changed_since_the_dump_is_marked_stale(workspace: Workspace) -> None:
    ws = workspace
    original = ws.program.read_text()
    uri = from_fs_path(str(ws.program))
    edited = original.replace(
        '"""A training step gone wrong: log of a zero."""\n',
        '"""A training step gone wrong: log of a zero."""\nEPS = 1e-7\n',
    )

    def stale_state(s: Session) -> dict[str, Any] | None:
        source = s.settled("dump", ws.dump)
        return source if source and source["origin"] and source["origin"]["stale"] else None

    def fresh_state(s: Session) -> dict[str, Any] | None:
        source = s.settled("dump", ws.dump)
        return source if source and source["origin"] and not source["origin"]["stale"] else None

    async def body() -> None:
        async with Session(ws.root, {"dumpDirs": [".nanlens/dumps"], "captureDirs": []}) as s:
            await s.wait_for("the origin diagnostic", lambda: origin_diagnostic(s, ws))
            await s.wait_for("fresh findings", lambda: fresh_state(s))

            # Unsaved edit in the editor: the marks no longer describe this text.
            s.client.text_document_did_open(
                types.DidOpenTextDocumentParams(
                    types.TextDocumentItem(uri=uri, language_id="python", version=1, text=edited)
                )
            )
            await s.wait_for("stale findings after an editor edit", lambda: stale_state(s))
            diag = next(d for d in s.diagnostics_of(ws.program) if d.range.start.line == ws.origin_line - 1)
            assert diag.message.startswith("(stale) ")
            assert diag.severity == types.DiagnosticSeverity.Information
            hover = await s.hover(ws.program, ws.origin_line)
            assert hover is not None and "(stale)" in hover.contents.value  # type: ignore[union-attr]

            # Undo in the editor: fresh again.
            s.client.text_document_did_change(
                types.DidChangeTextDocumentParams(
                    text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
                    content_changes=[types.TextDocumentContentChangeWholeDocument(text=original)],
                )
            )
            await s.wait_for("fresh findings after undo", lambda: fresh_state(s))
            s.client.text_document_did_close(
                types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri=uri))
            )

            # Saved edit on disk, file not open: noticed by the watcher.
            try:
                ws.program.write_text(edited)
                await s.wait_for("stale findings after a disk edit", lambda: stale_state(s))
            finally:
                ws.program.write_text(original)
            await s.wait_for("fresh findings after restoring the file", lambda: fresh_state(s))

    run(body())


def test_growing_dump_is_rescanned_live(workspace: Workspace, tmp_path: Path) -> None:
    """A dump still being written (training running): markers appear once the traces arrive."""
    ws = workspace
    live = tmp_path / ".nanlens" / "dumps" / "live"
    live.mkdir(parents=True)
    late = (".execution", ".graph_execution_traces")
    for f in ws.dump.iterdir():  # first what a run writes at start; the executions come later
        if f.name.endswith(late):
            (live / f.name).write_bytes(b"")
        else:
            shutil.copy2(f, live / f.name)

    async def body() -> None:
        async with Session(tmp_path, {"dumpDirs": [".nanlens/dumps"], "captureDirs": []}) as s:
            first = await s.wait_for("a first scan", lambda: s.settled("dump", live))
            assert first["origin"] is None
            for f in ws.dump.iterdir():
                if f.name.endswith(late):
                    shutil.copyfile(f, live / f.name)
            grown = await s.wait_for(
                "the origin after the dump grew", lambda: (x := s.settled("dump", live)) and x["origin"] and x
            )
            assert grown["origin"]["line"] == ws.origin_line and grown["origin"]["file"] == str(ws.program)

    run(body())


def make_bundle(root: Path, step: int) -> Path:
    bundle = root / "captures" / f"run-step{step}"
    bundle.mkdir(parents=True)
    (bundle / "manifest.json").write_text(json.dumps({"format": "nanlens.bundle/1", "step": step}))
    return bundle


def test_bundle_with_precomputed_findings_gets_replay_lens(workspace: Workspace, tmp_path: Path) -> None:
    from pyadapter.dump import scan_dump

    ws = workspace
    bundle = make_bundle(tmp_path, step=7)
    findings = scan_dump(str(ws.dump))  # what a locate of this bundle would have found
    findings.source_kind, findings.source_path, findings.bundle = "bundle", str(bundle), {"step": 7}
    Path(str(bundle) + ".findings.json").write_text(findings.dumps())

    async def body() -> None:
        async with Session(tmp_path, {"captureDirs": ["captures"], "dumpDirs": []}) as s:
            source = await s.wait_for("the bundle source", lambda: s.settled("bundle", bundle))
            assert source["status"] == "ok" and source["step"] == 7
            assert source["label"] == "run-step7 (step 7)"
            lenses = await s.code_lenses(ws.program)
            assert len(lenses) == 1 and lenses[0].command is not None
            assert lenses[0].range.start.line == ws.origin_line - 1
            assert lenses[0].command.title == "$(debug-alt) Replay eagerly (step 7)"
            assert lenses[0].command.command == "nanlens.replayEagerly"
            assert list(lenses[0].command.arguments) == [
                {"bundle": str(bundle), "file": str(ws.program), "line": ws.origin_line, "step": 7}
            ]
            # The server, not the client, offers the pictures on the origin line: lenses and hover links.
            pictures = [
                (lens.range.start.line, lens.command.command, list(lens.command.arguments))
                for lens in await s.code_lenses(ws.program, pictures=True)
                if lens.command is not None and lens.command.command in PICTURE_COMMANDS
            ]
            assert pictures == [
                (ws.origin_line - 1, command, [{"sourceId": source["id"]}]) for command in PICTURE_COMMANDS
            ]
            hover = await s.hover(ws.program, ws.origin_line)
            assert hover is not None and isinstance(hover.contents, types.MarkupContent)
            assert "[Show op graph](command:nanlens.showOpGraph?" in hover.contents.value
            assert "[Health timeline](command:nanlens.showTimeline?" in hover.contents.value

    run(body())


NOTEBOOK_CELLS = [  # (kind, source): a markdown cell first, so the cell index is not the code-cell index
    ("markdown", "# Training\nThe loss goes NaN in the third cell."),
    ("code", "import tensorflow as tf\nx = tf.constant([0.0, 1.0])"),
    ("code", "def loss(x):\n    return tf.math.log(x)  # ORIGIN\nprint(loss(x))"),
]


def test_notebook_findings_are_shown_on_the_cells_of_the_open_notebook(tmp_path: Path) -> None:
    """A bundle captured in a notebook (precomputed findings, as a locate writes them): diagnostics, hover and
    CodeLens go to the cell's document while the notebook is open (LSP notebook sync), never onto the .ipynb."""
    from pyadapter.findings import Finding, Findings, OpRef, TensorHealth

    bundle = make_bundle(tmp_path, step=5)
    notebook = tmp_path / "analysis.ipynb"
    notebook.write_text(
        json.dumps(
            {
                "cells": [
                    {
                        "cell_type": kind,
                        "metadata": {},
                        "source": source.splitlines(keepends=True),
                        **({"outputs": [], "execution_count": None} if kind == "code" else {}),
                    }
                    for kind, source in NOTEBOOK_CELLS
                ],
                "metadata": {"language_info": {"name": "python"}},
                "nbformat": 4,
                "nbformat_minor": 5,
            }
        )
    )
    origin = Finding(
        file=str(notebook),
        line=2,
        cell=2,
        role="origin",
        op=OpRef(name="Log", type="Log"),
        health=TensorHealth(dtype="float32", size=2, neg_inf=1),
        message="Log produced 1 -inf of 2",
    )
    findings = Findings(
        source_kind="bundle", source_path=str(bundle), origin=origin, findings=[origin], bundle={"step": 5}
    )
    Path(str(bundle) + ".findings.json").write_text(findings.dumps())
    nb_uri = from_fs_path(str(notebook))
    cell_uris = [f"vscode-notebook-cell:{notebook}#cell{i}" for i in range(len(NOTEBOOK_CELLS))]
    opened = types.DidOpenNotebookDocumentParams(
        notebook_document=types.NotebookDocument(
            uri=nb_uri,
            notebook_type="jupyter-notebook",
            version=1,
            cells=[
                types.NotebookCell(
                    kind=types.NotebookCellKind.Markup if kind == "markdown" else types.NotebookCellKind.Code,
                    document=cell_uri,
                )
                for (kind, _), cell_uri in zip(NOTEBOOK_CELLS, cell_uris, strict=True)
            ],
        ),
        cell_text_documents=[
            types.TextDocumentItem(
                uri=cell_uri, language_id=kind if kind == "markdown" else "python", version=1, text=source
            )
            for (kind, source), cell_uri in zip(NOTEBOOK_CELLS, cell_uris, strict=True)
        ],
    )

    async def body() -> None:
        async with Session(tmp_path, {"captureDirs": ["captures"], "dumpDirs": []}) as s:
            source = await s.wait_for("the bundle source", lambda: s.settled("bundle", bundle))
            assert (
                source["status"] == "ok" and source["origin"]["cell"] == 2 and source["origin"]["line"] == 2
            )
            assert s.diagnostics_of(notebook) == []  # closed: nothing, and never on the .ipynb's JSON lines

            s.client.notebook_document_did_open(opened)
            diags = await s.wait_for(
                "a diagnostic on the third cell", lambda: s.diagnostics.get(cell_uris[2])
            )
            assert [(d.range.start.line, d.range.start.character, d.code) for d in diags] == [
                (1, len("    "), "Log")
            ]
            assert diags[0].severity == types.DiagnosticSeverity.Error and "-inf" in diags[0].message
            assert not s.diagnostics.get(cell_uris[0]) and not s.diagnostics.get(cell_uris[1])
            assert s.diagnostics_of(notebook) == []

            hover = await s.hover(cell_uris[2], 2)
            assert hover is not None and isinstance(hover.contents, types.MarkupContent)
            assert "`Log`" in hover.contents.value and "step: 5" in hover.contents.value
            assert await s.hover(cell_uris[1], 2) is None  # line 2 of another cell
            lenses = await s.code_lenses(cell_uris[2])
            assert [lens.range.start.line for lens in lenses] == [1]
            assert (
                lenses[0].command is not None
                and lenses[0].command.title == "$(debug-alt) Replay eagerly (step 5)"
            )
            (target,) = lenses[0].command.arguments
            cell_file = Path(target.pop("cellFile"))
            assert target == {"bundle": str(bundle), "file": str(notebook), "line": 2, "step": 5, "cell": 2}
            # The replay runs the notebook's cells as a script from these files: the debugger's breakpoint goes
            # on the cell file, which holds that cell's code line for line.
            cell_source = json.loads(notebook.read_text(encoding="utf-8"))["cells"][2]["source"]
            cell_text = "".join(cell_source) if isinstance(cell_source, list) else cell_source
            assert cell_file.read_text(encoding="utf-8").splitlines()[1] == cell_text.splitlines()[1]
            # The Captures view and the palette replay from the finding alone: the server completes the target.
            asked = await s.command("nanlens.server.replayTarget", str(bundle))
            assert asked == {**target, "cellFile": str(cell_file)}
            assert await s.command("nanlens.server.replayTarget", str(tmp_path / "no-such-bundle")) is None
            assert await s.code_lenses(cell_uris[1]) == []
            actions = await s.client.text_document_code_action_async(
                types.CodeActionParams(
                    text_document=types.TextDocumentIdentifier(uri=cell_uris[2]),
                    range=diags[0].range,
                    context=types.CodeActionContext(diagnostics=diags),
                )
            )
            assert actions and all(
                isinstance(a, types.CodeAction) and a.title.startswith("NaN Lens: ") for a in actions
            )
            edit = actions[0].edit  # type: ignore[union-attr]
            assert edit is not None and edit.changes is not None and list(edit.changes) == [cell_uris[2]]
            assert all(e.range.start.line == 1 for e in edit.changes[cell_uris[2]])  # line 2 of the cell

            # Typing in the cell (unsaved) makes the finding stale, as an edited .py buffer does.
            s.client.notebook_document_did_change(
                types.DidChangeNotebookDocumentParams(
                    notebook_document=types.VersionedNotebookDocumentIdentifier(version=2, uri=nb_uri),
                    change=types.NotebookDocumentChangeEvent(
                        cells=types.NotebookDocumentCellChanges(
                            text_content=[
                                types.NotebookDocumentCellContentChanges(
                                    document=types.VersionedTextDocumentIdentifier(
                                        uri=cell_uris[2], version=2
                                    ),
                                    changes=[
                                        types.TextDocumentContentChangePartial(
                                            range=types.Range(types.Position(1, 25), types.Position(1, 25)),
                                            text=" + 1e-7",
                                        )
                                    ],
                                )
                            ]
                        )
                    ),
                )
            )
            stale = await s.wait_for(
                "the finding marked stale",
                lambda: (d := s.diagnostics.get(cell_uris[2])) and d[0].message.startswith("(stale) ") and d,
            )
            assert stale[0].severity == types.DiagnosticSeverity.Information

            s.client.notebook_document_did_close(
                types.DidCloseNotebookDocumentParams(
                    notebook_document=types.NotebookDocumentIdentifier(uri=nb_uri),
                    cell_text_documents=[types.TextDocumentIdentifier(uri=u) for u in cell_uris],
                )
            )
            await s.wait_for("the cell's diagnostics cleared", lambda: s.diagnostics.get(cell_uris[2]) == [])
            # Closed without saving: the code on disk is what ran again, so the finding is current.
            await s.wait_for(
                "a current origin again",
                lambda: (src := s.settled("bundle", bundle)) and src["origin"]["stale"] is False,
            )

    run(body())


def test_bundle_that_cannot_be_located_is_an_error_source_with_one_message(tmp_path: Path) -> None:
    bundle = make_bundle(tmp_path, step=3)  # a manifest and nothing to replay

    async def body() -> None:
        async with Session(tmp_path, {"captureDirs": ["captures"], "dumpDirs": []}) as s:
            waiting = await s.wait_for("the bundle", lambda: s.settled("bundle", bundle))
            assert (
                waiting["status"] == "unlocated"
                and waiting["foreign"] == "not sealed by your NanGuard here"  # a manifest anyone wrote
                and not s.messages
            )
            await s.command("nanlens.server.locateBundle", str(bundle))  # the click
            source = await s.wait_for(
                "the bundle to fail",
                lambda: (x := s.settled("bundle", bundle)) and x["status"] != "unlocated" and x,
                timeout=120,
            )
            assert source["status"] == "error" and source["error"] and "\n" not in source["error"]
            assert source["findings"] == [] and source["origin"] is None
            await s.wait_for("one message", lambda: s.messages)
            assert len(s.messages) == 1 and "run-step3" in s.messages[0].message
            assert not list(tmp_path.glob("captures/*.findings.json"))  # a failure is not cached
            assert sorted(p.name for p in bundle.iterdir()) == ["manifest.json"]  # nothing written inside

    run(body())


def test_commands_locate_rescan_clear(workspace: Workspace, tmp_path: Path) -> None:
    ws = workspace

    async def body() -> None:
        # Watch nothing: the dump comes in through the locate command only.
        async with Session(tmp_path, {"captureDirs": [], "dumpDirs": []}) as s:
            bad = await s.command("nanlens.server.locateBundle", str(tmp_path / "nothing-here"))
            assert bad["status"] == "error" and "not a capture bundle" in bad["error"]
            await s.wait_for("a message about the bad path", lambda: s.messages)

            located = await s.command("nanlens.server.locateBundle", str(ws.dump))
            assert located["status"] == "ok" and located["kind"] == "dump"
            assert located["origin"]["line"] == ws.origin_line
            await s.wait_for("the origin diagnostic", lambda: origin_diagnostic(s, ws))

            await s.command("nanlens.server.clear")
            await s.wait_for("markers cleared", lambda: not s.diagnostics_of(ws.program) and not s.sources())

            await s.command("nanlens.server.locateBundle", str(ws.dump))
            await s.wait_for("the origin again", lambda: origin_diagnostic(s, ws))
            await s.command("nanlens.server.rescan")
            source = await s.wait_for("a rescanned source", lambda: s.settled("dump", ws.dump))
            assert source["status"] == "ok" and source["origin"]["line"] == ws.origin_line

    run(body())


class GuardedCapture:
    """A workspace where zoo_log_of_zero.py ran under NanGuard told not to locate at the scene: one bundle in
    captures/ without findings, whose manifest names train.py in this workspace."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.program = root / "train.py"
        self.bundle = next(p for p in (root / "captures").iterdir() if p.is_dir())
        self.origin_line = next(
            i for i, line in enumerate(self.program.read_text().splitlines(), 1) if "# ORIGIN" in line
        )

    def copy(self, root: Path, name: str | None = None, host: str | None = None) -> Path:
        """The bundle copied into ``root/captures`` (renamed, another host recorded) with train.py beside it in
        ``root``: the manifest names the copy's program (manifest.json holds the other files' hashes, not its
        own, so the copy is a valid bundle)."""
        program = root / "train.py"
        if not program.exists():
            shutil.copyfile(self.program, program)
        bundle = root / "captures" / (name or self.bundle.name)
        shutil.copytree(self.bundle, bundle)
        manifest = json.loads((bundle / "manifest.json").read_text())
        manifest["entry_script"]["path"] = str(program)
        manifest["entry_script"]["cwd"] = str(root)
        if host is not None:
            manifest["host"]["hostname"] = host
        # As the user's NanGuard would have sealed it had the program lived here.
        (bundle / "manifest.json").write_text(json.dumps(sealed(manifest)))
        return bundle


@pytest.fixture(scope="session")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> GuardedCapture:
    root = tmp_path_factory.mktemp("guarded")
    shutil.copyfile(Path(__file__).parent / "zoo" / "zoo_log_of_zero.py", root / "train.py")
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="2",
        NANLENS_CAPTURE_DIR="captures",
        CUDA_VISIBLE_DEVICES="",
        NANLENS_LOCATE_AT_SCENE="0",
    )
    subprocess.run([PYTHON, str(root / "train.py")], env=env, cwd=root, timeout=300, capture_output=True)
    bundles = [p for p in (root / "captures").iterdir() if p.is_dir()]
    assert len(bundles) == 1, "the guarded run wrote one bundle"
    assert not (bundles[0] / "findings.json").exists()
    return GuardedCapture(root)


class ChildWatch:
    """Samples the server's child processes (the locate worker, a replay) every 50 ms while a test runs."""

    def __init__(self, session: Session) -> None:
        import psutil

        server = session.client._server
        assert server is not None
        self.process = psutil.Process(server.pid)
        self.seen: dict[int, str] = {}  # pid -> command line
        self._task = asyncio.create_task(self._sample())

    async def _sample(self) -> None:
        import psutil

        while True:
            try:
                for child in self.process.children(recursive=True):
                    try:
                        self.seen.setdefault(child.pid, " ".join(child.cmdline()))
                    except psutil.Error:
                        pass
            except psutil.Error:
                return
            await asyncio.sleep(0.05)

    def stop(self) -> dict[int, str]:
        self._task.cancel()
        return self.seen


def begun(session: Session) -> list[Any]:
    """The titles of the progress bars the server began (a locate's, a scan's)."""
    return [v.get("title") for kind, v in session.progress_events if kind == "begin"]


def test_bundle_from_a_guarded_training_run_waits_for_the_click_then_is_located_cached_and_replayable(
    guarded: GuardedCapture, tmp_path: Path
) -> None:
    """The main flow for a bundle without findings located at the scene: the server shows it and offers "Locate
    (runs train.py)", runs nothing until that click (no child, no progress), then locates it in a child process
    (with progress), marks the origin line with a 'Replay eagerly' lens, and caches the result beside the bundle."""
    bundle = guarded.copy(tmp_path)
    program = tmp_path / "train.py"
    origin_line = guarded.origin_line
    bundle_files = sorted((p.name, p.stat().st_mtime_ns) for p in bundle.iterdir())

    async def body() -> None:
        async with Session(tmp_path, {"captureDirs": ["captures"], "dumpDirs": []}) as s:
            children = ChildWatch(s)
            waiting = await s.wait_for("the bundle waiting for a click", lambda: s.settled("bundle", bundle))
            assert waiting["status"] == "unlocated" and waiting["origin"] is None and waiting["error"] is None
            assert (
                waiting["entry"] == str(program)
                and waiting["foreign"] is None
                and waiting["untrusted"] is None
            )
            (lens,) = await s.code_lenses(program)
            assert lens.range.start.line == 0 and lens.command is not None
            assert lens.command.command == "nanlens.locateBundle" and list(lens.command.arguments) == [
                str(bundle)
            ]
            assert lens.command.title.startswith(f"$(search) Locate NaN in {bundle.name}")
            assert lens.command.title.endswith("(runs train.py)")
            await asyncio.sleep(5)  # three watcher polls: still nothing runs
            assert children.stop() == {}, "a child ran before the click"
            assert s.progress_events == [] and s.messages == []
            assert s.source("bundle", bundle)["status"] == "unlocated"
            assert not Path(str(bundle) + ".findings.json").exists()

            children = ChildWatch(s)
            source = await s.command("nanlens.server.locateBundle", str(bundle))  # the click
            source = json.loads(json.dumps(source, default=lambda o: o._asdict()))
            assert source["status"] == "ok", source["error"]
            assert any("locate_worker" in cmd for cmd in children.stop().values())
            assert source["origin"]["file"] == str(program) and source["origin"]["line"] == origin_line
            step = source["step"]
            assert isinstance(step, int) and source["label"] == f"{bundle.name} (step {step})"
            messages = [v.get("message") for kind, v in s.progress_events if kind == "report"]
            assert any(m and "replay" in m for m in messages), messages
            lenses = await s.code_lenses(program)
            assert [lens.range.start.line for lens in lenses] == [origin_line - 1]
            assert lenses[0].command is not None
            assert lenses[0].command.title == f"$(debug-alt) Replay eagerly (step {step})"
            assert list(lenses[0].command.arguments) == [
                {"bundle": str(bundle), "file": str(program), "line": origin_line, "step": step}
            ]
        cache = Path(str(bundle) + ".findings.json")
        assert cache.is_file()
        assert (
            sorted((p.name, p.stat().st_mtime_ns) for p in bundle.iterdir()) == bundle_files
        )  # bundle untouched

        # A new server (the editor reopened) reads the cached result instead of replaying again.
        async with Session(tmp_path, {"captureDirs": ["captures"], "dumpDirs": []}) as s:
            started = time.monotonic()
            source = await s.wait_for("the cached bundle", lambda: s.settled("bundle", bundle))
            assert time.monotonic() - started < 10
            assert source["status"] == "ok" and source["origin"]["line"] == origin_line
            assert not any(kind == "report" for kind, _ in s.progress_events)

    run(body())


def test_automatic_locate_runs_own_bundles_never_foreign_ones_until_clicked(
    guarded: GuardedCapture, tmp_path: Path
) -> None:
    """With nanlens.locate.automatic on, the user's own bundle (captured on this host) is located as it appears;
    a bundle recorded on another host is not, whatever the setting, until the user clicks Locate."""
    own = guarded.copy(tmp_path, "own-step1")
    foreign = guarded.copy(tmp_path, "foreign-step1", host="node-7.cluster.example")
    program = tmp_path / "train.py"

    async def body() -> None:
        async with Session(
            tmp_path, {"captureDirs": ["captures"], "dumpDirs": [], "locateAutomatic": True}
        ) as s:
            children = ChildWatch(s)
            located = await s.wait_for(
                "the own bundle located",
                lambda: (x := s.settled("bundle", own)) and x["status"] == "ok" and x,
                timeout=240,
            )
            assert located["origin"]["line"] == guarded.origin_line
            await asyncio.sleep(4)  # more polls: the foreign one still waits
            waiting = s.source("bundle", foreign)
            assert waiting is not None and waiting["status"] == "unlocated"
            assert waiting["foreign"] == "captured on node-7.cluster.example"
            ran = children.stop()
            assert [cmd for cmd in ran.values() if str(foreign) in cmd] == [], ran
            assert [cmd for cmd in ran.values() if str(own) in cmd], ran
            assert [t for t in begun(s) if foreign.name in str(t)] == []
            (lens,) = [
                lens
                for lens in await s.code_lenses(program)
                if lens.command and lens.command.command == "nanlens.locateBundle"
            ]
            assert list(lens.command.arguments) == [str(foreign)]
            assert "captured on node-7.cluster.example" in lens.command.title

            source = await s.command("nanlens.server.locateBundle", str(foreign))  # the click
            source = json.loads(json.dumps(source, default=lambda o: o._asdict()))
            assert source["status"] == "ok", source["error"]
            assert source["origin"]["line"] == guarded.origin_line and source["foreign"] is not None

    run(body())


def test_a_changed_program_runs_only_once_the_user_trusts_it(guarded: GuardedCapture, tmp_path: Path) -> None:
    """The program changed since the capture: the click's locate is refused in the workspace folder (nothing
    cached, no message), the answer names the file for the editor's question, and the locate with that file
    trusted runs it. A pulled bundle is shown but not located on the pull."""
    bundle = guarded.copy(tmp_path)
    program = tmp_path / "train.py"
    program.write_text(program.read_text() + "\n# a change of the user's\n")

    async def body() -> None:
        async with Session(
            tmp_path, {"captureDirs": ["captures"], "dumpDirs": [], "locateAutomatic": True}
        ) as s:
            waiting = await s.wait_for("the bundle", lambda: s.settled("bundle", bundle))
            # The setting is on and the bundle is ours, so it was tried: refused, it waits for the user.
            assert waiting["status"] == "unlocated", waiting
            assert (
                waiting["untrusted"]["file"] == str(program) and waiting["untrusted"]["reason"] == "changed"
            )
            refused = await s.command("nanlens.server.locateBundle", str(bundle))
            refused = json.loads(json.dumps(refused, default=lambda o: o._asdict()))
            assert refused["status"] == "unlocated" and refused["untrusted"]["file"] == str(program)
            assert "--trust-entry" in refused["untrusted"]["message"] and s.messages == []
            assert not Path(str(bundle) + ".findings.json").exists()
            check = await s.command("nanlens.server.checkEntry", str(bundle))
            check = json.loads(json.dumps(check, default=lambda o: o._asdict()))
            assert check["trusted"] is False and check["untrusted"]["reason"] == "changed"

            source = await s.command(
                "nanlens.server.locateBundle", str(bundle), {"trustEntry": [str(program)]}
            )
            source = json.loads(json.dumps(source, default=lambda o: o._asdict()))
            assert source["status"] == "ok", source
            assert source["origin"]["line"] == guarded.origin_line and source["untrusted"] is None
            check = await s.command("nanlens.server.checkEntry", str(bundle))  # remembered for the session
            assert json.loads(json.dumps(check, default=lambda o: o._asdict()))["trusted"] is True

    run(body())


def test_a_pulled_bundle_is_shown_but_never_located_unasked(guarded: GuardedCapture, tmp_path: Path) -> None:
    bundle = guarded.copy(tmp_path, "pulled-step1")

    async def body() -> None:
        # Watching nothing: the bundle comes in as "Pull Capture Bundle" hands it over, with the setting on.
        async with Session(tmp_path, {"captureDirs": [], "dumpDirs": [], "locateAutomatic": True}) as s:
            children = ChildWatch(s)
            source = await s.command("nanlens.server.locateBundle", str(bundle), {"pulled": True})
            source = json.loads(json.dumps(source, default=lambda o: o._asdict()))
            assert source["status"] == "unlocated" and source["foreign"] == "pulled"
            assert Path(str(bundle) + ".pulled").is_file()
            await asyncio.sleep(3)
            assert children.stop() == {} and s.progress_events == []
            await s.command("nanlens.server.rescan")
            again = await s.wait_for("the rescanned bundle", lambda: s.settled("bundle", bundle))
            assert again["status"] == "unlocated" and again["foreign"] == "pulled"

    run(body())


def test_bundle_located_at_the_scene_is_shown_at_once_without_a_replay(tmp_path: Path) -> None:
    """NanGuard located the origin while training still ran (findings.json in the bundle): the server shows it
    as soon as the bundle appears, with no locate child and no code run."""
    zoo = Path(__file__).parent / "zoo" / "zoo_log_of_zero.py"
    program = tmp_path / "train.py"
    shutil.copyfile(zoo, program)
    origin_line = next(i for i, line in enumerate(program.read_text().splitlines(), 1) if "# ORIGIN" in line)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", NANLENS_CAPTURE_DIR="captures", CUDA_VISIBLE_DEVICES="")
    env.pop("NANLENS_LOCATE_AT_SCENE", None)
    subprocess.run([PYTHON, str(program)], env=env, cwd=tmp_path, timeout=300, capture_output=True)
    bundle = next(p for p in (tmp_path / "captures").iterdir() if p.is_dir())
    assert (bundle / "findings.json").is_file()

    async def body() -> None:
        async with Session(tmp_path, {"captureDirs": ["captures"], "dumpDirs": []}) as s:
            started = time.monotonic()
            source = await s.wait_for("the bundle", lambda: s.settled("bundle", bundle), timeout=60)
            assert time.monotonic() - started < 10
            assert source["status"] == "ok", source["error"]
            assert source["origin"]["file"] == str(program) and source["origin"]["line"] == origin_line
            assert not any(kind == "report" for kind, _ in s.progress_events), "no locate ran"
            lenses = await s.code_lenses(program)
            assert [lens.range.start.line for lens in lenses] == [origin_line - 1]
        assert not Path(str(bundle) + ".findings.json").exists()

    run(body())
