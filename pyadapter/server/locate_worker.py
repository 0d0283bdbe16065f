"""Child process that locates one bundle for the language server: ``python -m pyadapter.server.locate_worker
BUNDLE OUT.json``.

Talks to the server with JSON lines on its original stdout: ``{"progress": {"message", "percentage"}}`` while
working, ``{"error": "one line"}`` on failure. Whatever the replayed user code prints goes to stderr (the
server's log), so it can never be mistaken for a message. The findings are written to OUT.json.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import TextIO


def _channel() -> TextIO:
    """Keep the real stdout for messages; point fd 1 (and sys.stdout) at stderr for everything else."""
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return channel


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str]) -> int:
    channel = _channel()

    def send(message: dict) -> None:
        channel.write(json.dumps(message) + "\n")
        channel.flush()

    if len(argv) != 2:
        send({"error": "usage: python -m pyadapter.server.locate_worker BUNDLE OUT.json"})
        return 2
    bundle, out_path = argv
    from pyadapter.server.compute import progress_callback

    try:
        from pyadapter.replay import locate_bundle
    except ImportError:
        send({"error": "locating bundles is not available in this NaN Lens install "
                       "(pyadapter.replay.locate_bundle is missing)"})
        return 3
    progress = progress_callback(lambda message, percentage: send(
        {"progress": {"message": message, "percentage": percentage}}))
    # The server stops a locate with SIGTERM; turn it into an exception so the replay's temporary dump is removed.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        # This process is already the isolated one: replay here rather than in yet another child, which a
        # SIGTERM to this process would orphan.
        findings = locate_bundle(bundle, progress=progress, isolate=False)
    except KeyboardInterrupt:
        send({"error": "locating was interrupted"})
        return 130
    except Exception as exc:  # every failure becomes one line for the editor; the traceback goes to the log
        import traceback

        traceback.print_exc(file=sys.stderr)
        lines = str(exc).strip().splitlines()
        send({"error": lines[0] if lines else type(exc).__name__})
        return 1
    tmp = out_path + ".part"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(findings.dumps())
    os.replace(tmp, out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
