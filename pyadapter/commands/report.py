"""`nanlens report`: the findings, the op graph and the health timeline as one self-contained HTML page."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import TYPE_CHECKING

from pyadapter.printable import printable

if TYPE_CHECKING:
    from pyadapter.findings import Findings

HELP = "write the findings, the op graph and the health timeline as one self-contained HTML page"
DESCRIPTION = """\
Make one HTML file to look at a NaN from anywhere, e.g. a run on a remote machine: the origin and the
lines it spread to, the op graph around the origin (its inputs a few hops back and its consumers a few
hops forward, each colored by its tensor health) and the health timeline (how many tensors were non-finite
execution after execution; for a capture bundle also the loss history up to the failing step). All
scripts and styles are inside the file: viewing it needs no network.

For a capture bundle, a `<bundle>.findings.json` that `nanlens locate -o` or the editor wrote is reused when
it is newer than the bundle and holds the pictures; otherwise the step is replayed (as `nanlens locate`).

examples:
  nanlens report .nanlens/captures/train-20250101-120000-step4711 --html nan.html
  nanlens report .nanlens/dumps/20250101-120000 --html nan.html
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "source", metavar="BUNDLE_OR_DUMP", help="a capture bundle or a tfdbg2 dump directory"
    )
    parser.add_argument("--html", metavar="OUT.html", required=True, help="where to write the page")
    parser.add_argument(
        "--relocate", action="store_true", help="replay a bundle's step again even if its findings are cached"
    )


def _is_bundle(path: str) -> bool:
    from pyadapter import safejson

    try:
        manifest = safejson.load_file(os.path.join(path, "manifest.json"))
    except (OSError, ValueError):  # safejson.JSONError is a ValueError
        return False
    return isinstance(manifest, dict) and manifest.get("format") == "nanlens.bundle/1"


def _is_dump(path: str) -> bool:
    try:
        return any(name.startswith("tfdbg_events.") for name in os.listdir(path))
    except OSError:
        return False


def _cached_bundle_findings(bundle: str) -> Findings | None:
    """``<bundle>.findings.json`` when it is at least as new as the bundle and carries the pictures."""
    from pyadapter.findings import FindingsError, load_findings

    cache = bundle.rstrip(os.sep) + ".findings.json"
    try:
        newest = max(
            os.stat(os.path.join(root, name)).st_mtime for root, _, names in os.walk(bundle) for name in names
        )
        if os.stat(cache).st_mtime < newest:
            return None
        findings = load_findings(cache)
    except (OSError, ValueError, FindingsError):
        return None
    pictures = findings.extra.get("pictures")
    if findings.source_kind != "bundle" or not isinstance(pictures, dict):
        return None
    return findings


def _bundle_findings(bundle: str, relocate: bool) -> Findings:
    from pyadapter.commands.errors import CliError
    from pyadapter.replay.errors import ReplayError
    from pyadapter.replay.locate import locate_bundle

    if not relocate:
        cached = _cached_bundle_findings(bundle)
        if cached is not None:
            print(f"nanlens report: using {bundle.rstrip(os.sep)}.findings.json", file=sys.stderr)
            return cached
    shown: set[str] = set()

    def progress(phase: str, fraction: float) -> None:
        if phase not in shown and phase != "done":
            shown.add(phase)
            print(printable(f"nanlens report: {phase}"), file=sys.stderr, flush=True)

    try:
        # What the replayed code prints must not mix with our output.
        with contextlib.redirect_stdout(sys.stderr):
            return locate_bundle(bundle, progress=progress, isolate=False)
    except ReplayError as exc:
        raise CliError(str(exc)) from None
    except Exception as exc:  # the user's code failing in an unforeseen way: still one line
        lines = str(exc).strip().splitlines()
        raise CliError(f"locate failed: {type(exc).__name__}: {lines[0] if lines else ''}") from None


def main(args: argparse.Namespace) -> int:
    from pyadapter.commands.errors import CliError
    from pyadapter.dump import ScanError, scan_dump
    from pyadapter.pictures import build_picture_model
    from pyadapter.pictures.html import ReportAssetsMissing, read_assets, render_report

    source = os.path.abspath(args.source)
    if not os.path.isdir(source):
        raise CliError(f"{args.source} is not a directory (pass a capture bundle or a dump directory)")
    try:
        assets = read_assets()  # before any long replay: a broken install fails at once
    except ReportAssetsMissing as exc:
        raise CliError(str(exc)) from None
    if _is_bundle(source):
        findings = _bundle_findings(source, args.relocate)
        pictures = findings.extra.get("pictures")
        if not isinstance(pictures, dict):
            warnings = [w for w in findings.extra.get("warnings", []) if "op graph" in str(w)]
            raise CliError(warnings[0] if warnings else "the locate made no pictures for this bundle")
    elif _is_dump(source):
        try:
            findings = scan_dump(source)
            pictures = build_picture_model(source, findings=findings).to_json()
        except ScanError as exc:
            raise CliError(str(exc)) from None
    else:
        raise CliError(
            f"{args.source} is neither a capture bundle (manifest.json of format nanlens.bundle/1) "
            "nor a tfdbg2 dump (tfdbg_events.* files)"
        )
    page = render_report(findings, pictures, assets)
    out = os.path.abspath(args.html)
    tmp = out + ".part"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(page)
        os.replace(tmp, out)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise CliError(f"cannot write {args.html}: {exc.strerror or exc}") from None
    origin = findings.origin
    where = f"origin {origin.op.type} at {origin.file}:{origin.line}" if origin else "no origin"
    print(printable(f"nanlens report: wrote {out} ({len(page) // 1024} KB; {where})"))
    return 0
