"""`nanlens eval`: not built yet."""

from __future__ import annotations

import argparse
import sys

HELP = "(not built yet)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def main(args: argparse.Namespace) -> int:
    print("nanlens eval: not built yet", file=sys.stderr)
    return 3
