"""Child process that locates one bundle for the language server: ``python -m pyadapter.server.locate_worker
BUNDLE OUT.json [--trust-entry PATH]...``.

The server starts it in the workspace folder and only when the user asked for the locate or the automatic setting
allowed it (server/consent.py). It always replays (a bundle's own findings.json is read by the server itself):
the replay runs the bundle's program only when it lies inside the current folder and is unchanged since the
capture, or is one of the ``--trust-entry`` files the user agreed to run; else the one-line refusal is the error.

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

    trusted: list[str] = []
    positional: list[str] = []
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg == "--trust-entry" and rest:
            trusted.append(rest.pop(0))
        else:
            positional.append(arg)
    if len(positional) != 2:
        send(
            {
                "error": "usage: python -m pyadapter.server.locate_worker BUNDLE OUT.json [--trust-entry PATH]..."
            }
        )
        return 2
    bundle, out_path = positional
    from pyadapter.server.compute import progress_callback

    if trusted:
        try:
            from pyadapter.replay.trust import allow
        except ImportError:  # an install whose replay checks no program: nothing to allow
            pass
        else:
            allow(trusted)

    try:
        from pyadapter.replay import locate_bundle
    except ImportError:
        send(
            {
                "error": "locating bundles is not available in this NaN Lens install "
                "(pyadapter.replay.locate_bundle is missing)"
            }
        )
        return 3
    progress = progress_callback(
        lambda message, percentage: send({"progress": {"message": message, "percentage": percentage}})
    )
    # The server stops a locate with SIGTERM; turn it into an exception so the replay's temporary dump is removed.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        # This process is already the isolated one: replay here rather than in yet another child, which a
        # SIGTERM to this process would orphan.
        findings = locate_bundle(bundle, progress=progress, isolate=False, replay=True)
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
