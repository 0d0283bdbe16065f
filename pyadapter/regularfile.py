"""Opening a file whose name someone else chose (a bundle's manifest.json, a findings.json, a source file a
finding names) without ever waiting on it.

``open()`` of a FIFO for reading blocks until a writer comes, forever if none does: one FIFO named manifest.json
in a captures folder stopped the language server's folder watcher for good. `open_regular` opens non-blocking
(which changes nothing for a regular file) and hands back only a regular file; anything else is `NotRegularFile`,
an OSError, so callers that handle an unreadable file handle this one too.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO


class NotRegularFile(OSError):
    """The name is a FIFO, a device, a socket or a folder: nothing to read as a file."""


def open_regular(path: str | os.PathLike[str], *, follow_symlinks: bool = True) -> BinaryIO:
    """``path`` opened for reading in binary mode, if it is a regular file. ``follow_symlinks=False``: a symlink
    (the last part of the path) is an OSError (ELOOP) too, for a file inside a bundle, which holds regular files
    only (`CaptureBundle.load`)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(errno.EINVAL, "not a regular file", os.fspath(path))
        return open(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
