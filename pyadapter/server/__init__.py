"""The NaN Lens language server (pygls 2.x).

Imported lazily: the locate worker child process (pyadapter.server.locate_worker) must not pay for pygls and
lsprotocol, which take a second or more to import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyadapter.server.app import NanLensServer, create_server, serve

__all__ = ["NanLensServer", "create_server", "serve"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from pyadapter.server import app

        return getattr(app, name)
    raise AttributeError(f"module 'pyadapter.server' has no attribute {name!r}")
