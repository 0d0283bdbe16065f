"""The language server put together: the server object (core.py) with its LSP features (features.py) and its
workspace commands (commands.py), served over stdio.

Where to look: core.py holds all state (settings, sources, published diagnostics) and publishing; jobs.py computes
findings (watcher events, the thread pool, results); documents.py reads what the user sees; render.py words it.
"""

from __future__ import annotations

import logging
import sys

from pyadapter import __version__
from pyadapter.server import commands, features
from pyadapter.server.core import NanLensServer, log

__all__ = ["NanLensServer", "create_server", "serve"]


def create_server(poll_interval: float = 1.5) -> NanLensServer:
    server = NanLensServer(poll_interval=poll_interval)
    features.register(server)
    commands.register(server)
    return server


def serve(log_level: str = "INFO") -> None:
    logging.basicConfig(
        stream=sys.stderr, level=log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    # pygls logs every message body at INFO; keep that for DEBUG only.
    logging.getLogger("pygls").setLevel(logging.DEBUG if log_level == "DEBUG" else logging.WARNING)
    log.info("starting NaN Lens language server %s (python %s)", __version__, sys.version.split()[0])
    server = create_server()
    try:
        server.start_io()
    finally:
        server.stop_work()
