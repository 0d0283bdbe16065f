"""`nanlens pull`: copy a capture bundle from a cluster's storage (gs://, s3://, hdfs://, a mounted folder) here."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Any

HELP = (
    "copy a capture bundle from gs://, s3://, hdfs:// or a mounted folder into the editor's captures folder"
)
DESCRIPTION = """\
Copy one capture bundle (a folder with manifest.json, as NanGuard writes it, also to a remote capture_dir)
from any filesystem TensorFlow can open into DIR, where the editor sees it. Only the files the manifest
lists are copied, each checked against its size and sha256 as it arrives; the bundle then gets the same
safety checks as `nanlens locate` applies. A bundle that fails any check is not kept. Before anything is
copied, the list is checked: only files a bundle may hold, and at most --max-size bytes in all (default 32G)
that must also fit the free space of DIR. s3://, hdfs:// and
az:// need the tensorflow-io package; gs:// works with TensorFlow alone (with Google Cloud credentials).

examples:
  nanlens pull gs://my-bucket/runs/.nanlens/captures/train-20250101-120000-step4711
  nanlens pull s3://my-bucket/captures/train-step4711 ~/project/.nanlens/captures
  nanlens pull /mnt/cluster/captures/train-step4711
"""

DEFAULT_DIR = os.path.join(".nanlens", "captures")

# Show a progress bar by default only for bundles at least this large (and only on a terminal).
PROGRESS_MIN_BYTES = 4_000_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "url", metavar="URL", help="the bundle folder: gs://..., s3://..., hdfs://... or a local path"
    )
    parser.add_argument(
        "dir",
        metavar="DIR",
        nargs="?",
        default=DEFAULT_DIR,
        help=f"local folder to put the bundle in (default: {DEFAULT_DIR}, the folder the editor watches)",
    )
    parser.add_argument(
        "--max-size",
        metavar="SIZE",
        type=_size,
        default=None,
        help="refuse a bundle larger than this, before copying anything (e.g. 64G, 500M; default: 32G)",
    )
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: on for large bundles when stderr is a terminal)",
    )


def _size(text: str) -> int:
    from pyadapter.capture.storage import parse_size

    try:
        return parse_size(text)
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(
            f"not a size: {text!r} (say 64G, 500M or a number of bytes)"
        ) from None


def pull_bundle(
    url: str, directory: str = DEFAULT_DIR, progress: Any = None, max_bytes: int | None = None
) -> Path:
    """Copies the bundle at `url` into `directory` (verified); a bad bundle, one larger than `max_bytes`
    (default `storage.DEFAULT_MAX_PULL_BYTES`) or a URL DIR is a CliError."""
    from pyadapter.capture.bundle_format import BundleError
    from pyadapter.capture.reader import CaptureBundle
    from pyadapter.capture.storage import DEFAULT_MAX_PULL_BYTES, fetch_bundle, is_remote, mark_pulled
    from pyadapter.commands.errors import CliError

    if is_remote(directory):
        raise CliError(f"DIR must be a local folder, not {directory}")
    limit = DEFAULT_MAX_PULL_BYTES if max_bytes is None else max_bytes
    try:
        path = fetch_bundle(
            url,
            Path(os.path.expanduser(directory)),
            progress=progress,
            max_bytes=limit,
            verify=CaptureBundle.load,
        )
    except BundleError as exc:
        raise CliError(str(exc)) from None
    mark_pulled(path)  # from elsewhere: the editor shows it but never replays it by itself
    return path


def main(args: argparse.Namespace) -> int:
    from pyadapter.commands.scan import ProgressBar

    show = args.progress
    bar = None
    if show or (show is None and sys.stderr.isatty()):
        bar = ProgressBar(min_total=0 if show else PROGRESS_MIN_BYTES, label="pulling")
    try:
        path = pull_bundle(args.url, args.dir, progress=bar, max_bytes=args.max_size)
    finally:
        if bar is not None:
            bar.close()
    # Say the path the way DIR was given (relative stays relative), so it can be pasted as is.
    shown = os.path.join(os.path.expanduser(args.dir), path.name)
    print(f"pulled {args.url} into {shown}")
    print(f"next: nanlens locate {shlex.quote(shown)}")
    return 0
