"""Run a user's script in this process as ``__main__``, the way ``python script args...`` would.

Used by ``nanlens run`` and by the input-pipeline re-run child (replay/rerun.py); it sits below both so neither
reaches into the other's room. Pure standard library: no TensorFlow, nothing of NaN Lens.
"""

from __future__ import annotations

import importlib.util
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


def run_module(module: str, module_args: list[str]) -> int:
    """Run ``module`` as __main__ the way ``python -m module args...`` would (the working directory first on
    sys.path, so the package is found where the user stands); returns its exit code."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [module, *module_args]  # run_module puts the module's file here, as python does
    sys.path.insert(0, os.getcwd())
    try:
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            found = None
        if found is None:
            print(f"No module named {module!r}", file=sys.stderr)  # as python -m says it
            return 1
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return 0
    except SystemExit as exc:
        return _exit_code(exc)
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:  # noqa: BLE001 - the module's own failure is reported like python does
        traceback.print_exception(type(exc), exc, exc.__traceback__)
        return 1
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
