"""Child process of ``locate_bundle``: ``python -m pyadapter.replay.worker BUNDLE DUMP_DIR REPORT.json``.

Dumping instruments every op TensorFlow runs in the process, so it is done here, away from the caller (the
language server, an editor's worker). Progress goes to stderr as ``nanlens-progress: <phase>`` lines; the
result is written to REPORT.json as ``{"report": {...}}`` or ``{"error": "one line"}``. The worker exits by
itself when its parent dies, so a stopped locate leaves nothing running.
"""

from __future__ import annotations

import json
import os
import sys

from pyadapter.replay.lifeline import exit_with_parent

PROGRESS_PREFIX = "nanlens-progress: "


def phase(message: str) -> None:
    print(PROGRESS_PREFIX + message, file=sys.stderr, flush=True)


def _write(path: str, payload: dict) -> None:
    tmp = path + ".part"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(payload, fh)
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m pyadapter.replay.worker BUNDLE DUMP_DIR REPORT.json", file=sys.stderr)
        return 2
    bundle, dump_dir, report_path = argv
    exit_with_parent()
    phase("loading bundle")
    from pyadapter.replay.errors import ReplayError

    try:
        from pyadapter.replay.dumping import dump_replay

        report = dump_replay(bundle, dump_dir, phase=phase)
    except ReplayError as exc:
        _write(report_path, {"error": str(exc)})
        return 2
    except Exception as exc:  # anything else: one line for the user, the traceback for the log
        import traceback

        traceback.print_exc(file=sys.stderr)
        lines = str(exc).strip().splitlines()
        _write(report_path, {"error": f"replay failed: {type(exc).__name__}: {lines[0] if lines else ''}"})
        return 1
    _write(report_path, {"report": report.to_json()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
