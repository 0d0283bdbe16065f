"""`nanlens serve`: the language server the VS Code extension starts (LSP over stdio)."""

from __future__ import annotations

import argparse

HELP = "run the NaN Lens language server over stdio (started by the VS Code extension)"
DESCRIPTION = """Run the NaN Lens language server (pygls, LSP over stdio).

The VS Code extension starts this with the chosen Python interpreter. It logs to stderr
(shown in the editor's "NaN Lens" output channel)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--stdio", action="store_true", help="talk LSP over stdin/stdout (the default and only transport)"
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="how much the server logs to stderr (default: INFO)",
    )


def main(args: argparse.Namespace) -> int:
    from pyadapter.server import serve

    serve(log_level=args.log_level)
    return 0
