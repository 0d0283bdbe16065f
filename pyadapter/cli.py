"""The `nanlens` command line: one verb per module under ``pyadapter.commands``.

Each command module exposes ``HELP`` (one line), ``DESCRIPTION`` (the --help text), ``add_arguments(parser)``
and ``main(args) -> int``. Command modules import TensorFlow lazily, inside ``main``, so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from pyadapter import __version__
from pyadapter.commands.errors import CliError
from pyadapter.printable import printable

# Order is the order shown in --help: the flow from a training run to the editor.
VERBS = ("run", "scan", "locate", "pull", "replay", "report", "serve", "eval")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nanlens",
        description="NaN Lens: find where NaN/Inf starts in TensorFlow 2 training and replay that step eagerly.",
        epilog="Run `nanlens VERB --help` for a verb's options.",
    )
    parser.add_argument("--version", action="version", version=f"nanlens {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for verb in VERBS:
        module = importlib.import_module(f"pyadapter.commands.{verb}")
        p = sub.add_parser(
            verb,
            help=module.HELP,
            description=getattr(module, "DESCRIPTION", module.HELP),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(p)
        p.set_defaults(_command=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "verb", None):
        parser.print_help()
        return 2
    try:
        return int(args._command.main(args) or 0)
    except CliError as exc:
        # A bundle chooses much of what an error says (its paths, its program's name): no control characters.
        print(printable(f"nanlens: error: {exc}"), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("nanlens: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
