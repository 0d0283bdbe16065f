"""Run a user's script in this process as ``__main__``, the way ``python script args...`` would.

Used by ``nanlens run`` and by the input-pipeline re-run child (replay/rerun.py); it sits below both so neither
reaches into the other's room. Pure standard library: no TensorFlow, nothing of NaN Lens.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # sys.exit("message") prints the message and exits 1, like python
    return 1


def _print_script_traceback(exc: BaseException, script: str) -> None:
    """Print the traceback like python would: starting at the script's own frame, not NaN Lens's."""
    tb = exc.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != script:
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb if tb is not None else exc.__traceback__)


def run_script(script: str, script_args: list[str]) -> int:
    """Run ``script`` as __main__ the way ``python script args...`` would; returns its exit code."""
    script = os.path.abspath(script)
    saved_argv, saved_path0 = sys.argv, (sys.path[0] if sys.path else None)
    sys.argv = [script, *script_args]
    script_dir = os.path.dirname(script)
    if sys.path:
        sys.path[0] = script_dir
    else:
        sys.path.insert(0, script_dir)
    try:
        runpy.run_path(script, run_name="__main__")
        return 0
    except SystemExit as exc:
        return _exit_code(exc)
    except KeyboardInterrupt as exc:
        _print_script_traceback(exc, script)
        return 130
    except BaseException as exc:  # noqa: BLE001 - the script's own failure is reported like python does
        _print_script_traceback(exc, script)
        return 1
    finally:
        sys.argv = saved_argv
        if saved_path0 is not None and sys.path:
            sys.path[0] = saved_path0
