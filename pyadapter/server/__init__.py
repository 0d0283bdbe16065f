"""The NaN Lens language server (pygls 2.x)."""

from pyadapter.server.app import NanLensServer, create_server, serve

__all__ = ["NanLensServer", "create_server", "serve"]
