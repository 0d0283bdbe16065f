"""Child processes of a locate/replay exit on their own when their parent dies, instead of running on orphaned."""

from __future__ import annotations

import os
import threading
import time


def exit_with_parent(poll_seconds: float = 0.5) -> None:
    """Start a daemon thread that ends this process (exit code 3) as soon as its parent process is gone."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(poll_seconds)
            if os.getppid() != parent:
                os._exit(3)

    threading.Thread(target=watch, name="nanlens-parent-watch", daemon=True).start()
