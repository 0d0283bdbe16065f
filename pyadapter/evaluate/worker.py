"""The subprocess that locates one origin with the product's engines and writes the findings as JSON.

``python -m pyadapter.evaluate.worker bundle|dump PATH OUT.json``. Running each locate in its own process keeps
one program's TensorFlow/Keras state (custom objects, global policies, logical devices) from leaking into the
next, and lets the evaluation bound it with a timeout. On failure it writes ``{"error": "one line"}``.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path


def locate(kind: str, path: str) -> dict[str, object]:
    if kind == "bundle":
        from pyadapter.replay import locate_bundle

        # This worker is already its own process (bounded by the evaluation's timeout): replay in it.
        return locate_bundle(path, isolate=False).to_json()
    if kind == "dump":
        from pyadapter.cause import attach_cause
        from pyadapter.dump import scan_dump

        findings = scan_dump(path)
        attach_cause(findings)  # as `nanlens scan` does: a dump's cause, from its findings alone
        return findings.to_json()
    raise SystemExit(f"unknown kind {kind!r}")


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m pyadapter.evaluate.worker bundle|dump PATH OUT.json", file=sys.stderr)
        return 2
    kind, path, out = argv
    try:
        document = locate(kind, path)
        code = 0
    except Exception as exc:  # any engine failure is one row's error, never the evaluation's crash
        text = str(exc).strip().splitlines()
        document = {"error": f"{type(exc).__name__}: {text[0] if text else ''}".strip()}
        traceback.print_exc(file=sys.stderr)
        code = 1
    Path(out).write_text(json.dumps(document), encoding="utf-8")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
