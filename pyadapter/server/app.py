"""The pygls server object and its LSP features: one feature per decorated function, state on the server."""

from __future__ import annotations

import logging
import sys

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from pyadapter import __version__

log = logging.getLogger("nanlens.server")


class NanLensServer(LanguageServer):
    """All server state lives here."""

    def __init__(self) -> None:
        super().__init__("nanlens", __version__)
        self.workspace_folders: list[str] = []


def create_server() -> NanLensServer:
    server = NanLensServer()

    @server.feature(types.INITIALIZED)
    def initialized(ls: NanLensServer, params: types.InitializedParams) -> None:
        folders = ls.workspace.folders.values() if ls.workspace else []
        ls.workspace_folders = [f.uri for f in folders]
        log.info("NaN Lens server %s ready; workspace folders: %s", __version__, ls.workspace_folders or "none")
        ls.window_log_message(types.LogMessageParams(types.MessageType.Info, f"NaN Lens server {__version__} ready"))

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: NanLensServer, params: None) -> None:
        log.info("shutting down")

    return server


def serve(log_level: str = "INFO") -> None:
    logging.basicConfig(stream=sys.stderr, level=log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    log.info("starting NaN Lens language server %s (python %s)", __version__, sys.version.split()[0])
    create_server().start_io()
