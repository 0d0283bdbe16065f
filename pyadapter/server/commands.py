"""The server's workspace commands (``nanlens.server.*``), one decorated function each: locate a bundle, check
whether a replay would run its program, where a replay stops, rescan, clear, the pictures, verify a fix.
Each reads its arguments defensively (the editor, or a user's keybinding, may send anything) and answers JSON.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from lsprotocol import types

from pyadapter.server import render
from pyadapter.server.consent import check_entry
from pyadapter.server.core import NanLensServer
from pyadapter.server.sources import read_bundle_manifest
from pyadapter.server.state import same_file

log = logging.getLogger("nanlens.server")

CMD_LOCATE = "nanlens.server.locateBundle"
CMD_RESCAN = "nanlens.server.rescan"
CMD_CLEAR = "nanlens.server.clear"
CMD_PICTURES = "nanlens.server.pictureModel"
CMD_VERIFY = "nanlens.server.verifyFix"
CMD_CHECK_ENTRY = "nanlens.server.checkEntry"
CMD_REPLAY_TARGET = "nanlens.server.replayTarget"


def _options(value: Any) -> dict[str, Any]:
    """A command's options object (pygls may hand it over as a namedtuple-like object)."""
    if isinstance(value, dict):
        return value
    if hasattr(value, "_asdict"):
        return dict(value._asdict())
    return {}


def register(server: NanLensServer) -> None:
    """Register the commands on ``server``; pygls passes each the server as ``ls``."""

    @server.command(CMD_LOCATE)
    async def locate_bundle(ls: NanLensServer, *args: Any) -> dict[str, Any] | None:
        path = args[0] if args else None
        options = _options(args[1] if len(args) > 1 else None)
        if not isinstance(path, str) or not path.strip():
            ls.show_message(types.MessageType.Error, f"{CMD_LOCATE} needs a bundle path (got {path!r})")
            return None
        pulled = options.get("pulled") is True
        run = options.get("run", not pulled) is not False
        return await ls.locate(
            path, force=bool(options.get("force")), run=run, trust=options.get("trustEntry"), pulled=pulled
        )

    @server.command(CMD_CHECK_ENTRY)
    async def check_bundle_entry(ls: NanLensServer, *args: Any) -> dict[str, Any]:
        """Before the editor starts a replay itself (Replay eagerly): would it run the bundle's program?"""
        path = args[0] if args else None
        options = _options(args[1] if len(args) > 1 else None)
        if not isinstance(path, str) or not path.strip():
            return {
                "entry": None,
                "trusted": None,
                "untrusted": None,
                "error": f"{CMD_CHECK_ENTRY} needs a bundle",
            }
        path = os.path.normpath(os.path.abspath(path))
        root = options.get("root") if isinstance(options.get("root"), str) else ls.cwd_for(path)
        trusted = set(ls.trust(path, options.get("trustEntry")))
        manifest = read_bundle_manifest(path)
        assert ls.loop is not None
        return await ls.loop.run_in_executor(ls.executor, lambda: check_entry(path, manifest, root, trusted))

    @server.command(CMD_REPLAY_TARGET)
    async def bundle_replay_target(ls: NanLensServer, *args: Any) -> dict[str, Any] | None:
        """Where a replay of a located bundle stops: its origin, and for a notebook origin the cell file the
        debugger binds to (the Captures view has only the finding; the CodeLens gets this from the server too)."""
        path = args[0] if args else None
        if not isinstance(path, str) or not path.strip():
            return None
        record = next(
            (
                r
                for r in ls.records.values()
                if r.kind == "bundle" and same_file(r.path, path) and r.findings is not None
            ),
            None,
        )
        if record is None or record.findings is None or record.findings.origin is None:
            return None
        origin = record.findings.origin
        assert ls.loop is not None
        # Writing a notebook's cell files reads the notebook: off the event loop.
        folders = list(ls.workspace_folders) or [os.getcwd()]
        return await ls.loop.run_in_executor(
            ls.executor, lambda: render.replay_target(record, origin, folders)
        )

    @server.command(CMD_RESCAN)
    def rescan(ls: NanLensServer, *args: Any) -> None:
        log.info("rescan requested")
        ls.rescan()

    @server.command(CMD_CLEAR)
    def clear(ls: NanLensServer, *args: Any) -> None:
        log.info("clear requested")
        ls.clear()

    @server.command(CMD_PICTURES)
    async def picture_model(ls: NanLensServer, *args: Any) -> dict[str, Any]:
        from pyadapter.server.pictures import picture_model as serve_pictures

        return await serve_pictures(ls, args[0] if args else None)

    @server.command(CMD_VERIFY)
    async def verify_fix(ls: NanLensServer, *args: Any) -> dict[str, Any]:
        from pyadapter.server.verify import verify_fix as run_verify

        return await run_verify(ls, args[0] if args else None, _options(args[1] if len(args) > 1 else None))
