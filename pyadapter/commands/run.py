"""`nanlens run`: run a Python script like `python SCRIPT.py`, recording a tfdbg2 dump of it."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HELP = "run a script (like `python SCRIPT.py`) while recording a tfdbg2 dump of it"
DESCRIPTION = """\
Run SCRIPT.py as __main__ (its folder on sys.path, sys.argv = [SCRIPT.py, ARGS...]) with TensorFlow's
debugger dump on, then scan the dump with `nanlens scan DIR`.

The dump survives a killed run: it is flushed every ~2 s and on SIGTERM. XLA compilation is switched off
while recording (Keras compile(jit_compile=...) is forced to False), since tfdbg has no XLA kernels.

--eager runs tf.functions and tf.data map functions eagerly (tf.config.run_functions_eagerly(True) and
tf.data.experimental.enable_debug_mode()), so editor breakpoints inside them hit; the dump then holds one
record per executed op. --no-dump with --eager just runs the script eagerly.

examples:
  nanlens run -- train.py --epochs 3
  nanlens run --dump /tmp/dump --mode CONCISE_HEALTH -- train.py
  nanlens run --eager --no-dump -- train.py
"""

MODES = ("FULL_HEALTH", "CONCISE_HEALTH", "CURT_HEALTH", "SHAPE")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dump",
        metavar="DIR",
        help="where to write the dump (default: .nanlens/dumps/<YYYYmmdd-HHMMSS> in the current directory)",
    )
    parser.add_argument(
        "--mode",
        choices=MODES,
        default="FULL_HEALTH",
        help="tensor debug mode of the dump (default: FULL_HEALTH)",
    )
    parser.add_argument(
        "--eager",
        action="store_true",
        help="run tf.functions and tf.data functions eagerly (breakpoints hit)",
    )
    parser.add_argument("--no-dump", action="store_true", help="do not record a dump (useful with --eager)")
    parser.add_argument(
        "script",
        metavar="SCRIPT.py",
        help="the Python script to run; or -m MODULE to run a module of a package, as `python -m MODULE` does",
    )
    parser.add_argument(
        "script_args", nargs=argparse.REMAINDER, metavar="ARGS", help="arguments for the script"
    )


def default_dump_dir(cwd: Path | None = None) -> Path:
    root = (cwd or Path.cwd()) / ".nanlens" / "dumps"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate = root / stamp
    suffix = 2
    while candidate.exists():
        candidate = root / f"{stamp}-{suffix}"
        suffix += 1
    return candidate


def _check_dump_dir(path: Path) -> None:
    from pyadapter.commands.errors import CliError

    if path.exists() and not path.is_dir():
        raise CliError(f"--dump {path} exists and is not a directory")
    if path.is_dir() and any(p.name.startswith("tfdbg_events.") for p in path.iterdir()):
        raise CliError(f"{path} already holds a dump; choose another --dump directory")


def _dump_size(path: Path) -> int:
    try:
        return sum(p.stat().st_size for p in path.iterdir() if p.is_file())
    except OSError:
        return 0


def main(args: argparse.Namespace) -> int:
    from pyadapter.commands.errors import CliError

    module = None
    if args.script == "-m":  # `nanlens run -- -m trainer.train ARGS`, as `python -m trainer.train ARGS`
        if not args.script_args:
            raise CliError("-m needs a module name (nanlens run -- -m package.module [ARGS])")
        module, args.script_args = args.script_args[0], args.script_args[1:]
    script = Path(args.script)
    if module is None and not script.is_file():
        raise CliError(f"no such script: {script}")
    if args.no_dump and args.dump:
        raise CliError("--dump and --no-dump contradict each other")
    dump_dir = None if args.no_dump else (Path(args.dump) if args.dump else default_dump_dir())
    if dump_dir is not None:
        _check_dump_dir(dump_dir)
    if args.no_dump and not args.eager:
        print("nanlens: --no-dump without --eager just runs the script", file=sys.stderr)

    recorder = None
    eager_mode = None
    if dump_dir is not None:
        from pyadapter.dump.recorder import DumpRecorder

        recorder = DumpRecorder(dump_dir, args.mode)
        try:
            recorder.start()
        except Exception as exc:  # noqa: BLE001 - TensorFlow's own error, shown as one line
            raise CliError(f"cannot start recording to {dump_dir}: {exc}") from None
        print(f"nanlens: recording a {args.mode} dump to {recorder.dump_dir}", file=sys.stderr)
    if args.eager:
        from pyadapter.eager import eager

        eager_mode = eager()
        print("nanlens: running tf.functions and tf.data functions eagerly", file=sys.stderr)
    code = 1
    try:
        from pyadapter.userscript import run_module, run_script

        if module is not None:
            code = run_module(module, list(args.script_args))
        else:
            code = run_script(str(script), list(args.script_args))
    finally:
        if eager_mode is not None:
            eager_mode.restore()
        if recorder is not None:
            recorder.close()
            size_mb = _dump_size(Path(recorder.dump_dir)) / 1e6
            status = "" if code == 0 else f" (the script exited with code {code})"
            print(
                f"nanlens: dump written to {recorder.dump_dir} ({size_mb:.1f} MB){status}\n"
                f"nanlens: find where NaN/Inf starts with: nanlens scan {recorder.dump_dir}",
                file=sys.stderr,
            )
    return code
