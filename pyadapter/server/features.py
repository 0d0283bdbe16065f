"""The LSP features of the server: one decorated function per feature, each a few lines over the server's state.

Life cycle and settings, document and notebook sync (a change may flip findings' staleness), hover and CodeLens on
the marked lines (render.py words them), the quick fixes, shutdown. The workspace commands are in commands.py.
"""

from __future__ import annotations

import asyncio
import logging

from lsprotocol import types
from pygls.uris import to_fs_path

from pyadapter import __version__
from pyadapter.server import render
from pyadapter.server.core import NanLensServer
from pyadapter.server.notebooks import import_preamble
from pyadapter.server.settings import parse_settings

log = logging.getLogger("nanlens.server")


def register(server: NanLensServer) -> None:
    """Register the features on ``server``; pygls passes each the server as ``ls`` (its type hints are read at
    registration, so NanLensServer is imported for real above)."""

    @server.feature(types.INITIALIZE)
    def initialize(ls: NanLensServer, params: types.InitializeParams) -> None:
        ls.settings = parse_settings(params.initialization_options)

    @server.feature(types.INITIALIZED)
    def initialized(ls: NanLensServer, params: types.InitializedParams) -> None:
        ls.loop = asyncio.get_running_loop()
        ls.refresh_workspace_folders()
        log.info(
            "NaN Lens server %s ready; workspace folders: %s", __version__, ls.workspace_folders or "none"
        )
        ls.window_log_message(
            types.LogMessageParams(types.MessageType.Info, f"NaN Lens server {__version__} ready")
        )
        ls.apply_settings(ls.settings)
        ls.watcher.start()
        ls.publish()  # an empty state at first, so the client knows the server is up

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(ls: NanLensServer, params: types.DidChangeConfigurationParams) -> None:
        settings = params.settings
        if not (isinstance(settings, dict) and isinstance(settings.get("nanlens"), dict)):
            log.debug("ignoring a configuration change without nanlens settings")
            return
        ls.apply_settings(parse_settings(settings["nanlens"]))

    @server.feature(types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
    def did_change_workspace_folders(
        ls: NanLensServer, params: types.DidChangeWorkspaceFoldersParams
    ) -> None:
        ls.refresh_workspace_folders()
        ls.update_watcher_roots()

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: NanLensServer, params: types.DidOpenTextDocumentParams) -> None:
        _recheck(ls, params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: NanLensServer, params: types.DidChangeTextDocumentParams) -> None:
        _recheck(ls, params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: NanLensServer, params: types.DidCloseTextDocumentParams) -> None:
        _recheck(ls, params.text_document.uri)

    # A notebook with findings opened, edited or closed: its cells' documents changed (where diagnostics and
    # lenses go), and so may its findings' staleness (its cells' sources as the user sees them).
    @server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    def notebook_did_open(ls: NanLensServer, params: types.DidOpenNotebookDocumentParams) -> None:
        _notebook_shown_or_hidden(ls, params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def notebook_did_change(ls: NanLensServer, params: types.DidChangeNotebookDocumentParams) -> None:
        cells = params.change.cells
        if cells is None or not (cells.structure or cells.text_content):
            return  # metadata or execution state only
        if files := ls.finding_files_of(params.notebook_document.uri):
            # Cells added, removed or moved: cell N is another document now. Typing: only if staleness flipped.
            if ls.refresh_staleness(files) or cells.structure:
                ls.publish()

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def notebook_did_close(ls: NanLensServer, params: types.DidCloseNotebookDocumentParams) -> None:
        _notebook_shown_or_hidden(ls, params.notebook_document.uri)

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    def hover(ls: NanLensServer, params: types.HoverParams) -> types.Hover | None:
        place = ls.documents.place_of_uri(params.text_document.uri)
        if place is None:
            return None
        hits = render.findings_at(ls.records.values(), place[0], params.position.line, place[1])
        # The line a cause says to change (the optimizer's, the reading line): its own section, unless the
        # origin's hover on that same line already says the cause.
        changes = [
            r
            for r in render.causes_at(ls.records.values(), place[0], params.position.line, place[1])
            if not any(record is r and f.role != "propagated" for record, f in hits)
        ]
        if not hits and not changes:
            return None
        sections = [render.hover_markdown(hits)] if hits else []
        sections += [render.cause_markdown(r, on_change_line=True) for r in changes]
        return types.Hover(
            contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value="\n\n---\n\n".join(sections)),
            range=render.place_range(place[0], params.position.line + 1, place[1], ls.documents.line_text),
        )

    @server.feature(types.TEXT_DOCUMENT_CODE_LENS, types.CodeLensOptions(resolve_provider=False))
    def code_lens(ls: NanLensServer, params: types.CodeLensParams) -> list[types.CodeLens]:
        place = ls.documents.place_of_uri(params.text_document.uri)
        if place is None:
            return []
        return render.locate_lenses(ls.records.values(), place[0], place[1]) + render.code_lenses(
            ls.records.values(), place[0], ls.documents.line_text, place[1]
        )

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix]),
    )
    def code_action(ls: NanLensServer, params: types.CodeActionParams) -> list[types.CodeAction]:
        from pyadapter.server.code_actions import code_actions

        uri = params.text_document.uri
        place = ls.documents.place_of_uri(uri)
        if place is None:
            return []
        path, cell = place
        if cell is None:
            return code_actions(
                ls.records, path, uri, ls.documents.current_text(path), params.context.diagnostics
            )
        doc = ls.documents.synced_document(uri)
        notebook = ls.workspace.get_notebook_document(cell_uri=uri)
        earlier = [
            d.source
            for c in (notebook.cells[:cell] if notebook else [])
            if c.kind == types.NotebookCellKind.Code
            and (d := ls.documents.synced_document(c.document)) is not None
        ]
        return code_actions(
            ls.records,
            path,
            uri,
            doc.source if doc is not None else None,
            params.context.diagnostics,
            cell,
            preamble=import_preamble(earlier),
        )

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: NanLensServer, params: None) -> None:
        log.info("shutting down")
        ls.stop_work()


def _recheck(ls: NanLensServer, uri: str) -> None:
    """An editor buffer opened, changed or closed: its findings may have become (or stopped being) stale."""
    path = to_fs_path(uri)
    if (
        path is not None
        and any(path in r.files() for r in ls.records.values())
        and ls.refresh_staleness({path})
    ):
        ls.publish()


def _notebook_shown_or_hidden(ls: NanLensServer, uri: str) -> None:
    """A notebook with findings opened or closed: its findings move between its cells' documents and the disk."""
    if files := ls.finding_files_of(uri):
        ls.refresh_staleness(files)
        ls.publish()
