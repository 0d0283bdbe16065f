"""Re-running a bundle's entry script under a dump, to find a NaN made before the step (in the input pipeline).

When the captured batch already holds NaN/Inf, replaying the step cannot show where it was made: the batch was
taken after the input pipeline (e.g. a ``Dataset.map`` function). So the entry script is run again, with the
argv and working directory the bundle recorded, while ``DumpRecorder`` dumps everything TensorFlow runs (tf.data
functions included), up to the first non-finite step: the guard in the script (NanGuard / guard_step) calls
``write_bundle`` there, and in this child that call records the step and ends the run instead of writing a
bundle (so the user's capture folder gets no copy). The parent scans the dump (``scan_dump``).

Child: ``python -m pyadapter.replay.rerun DUMP_DIR RESULT.json SCRIPT [ARGS...]`` (run in the recorded cwd).
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyadapter.childproc import run_python
from pyadapter.replay.lifeline import exit_with_parent

# Steps up to which the re-run happens without being asked: it trains that far again, under a dump.
RERUN_MAX_STEP = 2000
DEFAULT_RERUN_TIMEOUT = 600.0


@dataclass
class RerunResult:
    """What re-running the entry script under a dump gave."""

    dump_dir: str
    seconds: float
    stopped_at_step: int | None = None  # the first non-finite step the guard saw in the re-run
    exit_code: int | None = None
    error: str | None = None  # one line when the re-run could not be done


def rerun_command(bundle: Any) -> str:
    """The command a user runs by hand for the same re-run: ``nanlens run --dump -- SCRIPT ARGS``."""
    script = bundle.entry_script
    argv = (bundle.manifest.get("entry_script") or {}).get("argv") or []
    parts = ["nanlens", "run", "--dump", "--", str(script), *[str(a) for a in argv[1:]]]
    return " ".join(_quote(p) for p in parts)


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def _last_line(text: str) -> str:
    for line in reversed(text.strip().splitlines()):
        if line.strip():
            return line.strip()[:300]
    return ""


def rerun_entry_script(bundle: Any, dump_dir: str, *, timeout: float = DEFAULT_RERUN_TIMEOUT) -> RerunResult:
    """Run the bundle's entry script again under a FULL_HEALTH dump into ``dump_dir``, in a child process
    bounded by ``timeout`` seconds, until its guard sees the first non-finite step."""
    started = time.perf_counter()
    info = bundle.manifest.get("entry_script") or {}
    script = bundle.entry_script
    if script is None or not Path(script).is_file():
        return RerunResult(dump_dir, 0.0, error=f"the entry script {script} is missing")
    from pyadapter.replay.trust import check_entry, safe_cwd

    program = check_entry(bundle)  # only the user's own, sealed, unchanged program (or one they trusted) runs
    argv = [str(a) for a in (info.get("argv") or [])[1:]]
    cwd = str(safe_cwd(bundle, program))
    with tempfile.TemporaryDirectory(prefix="nanlens-rerun-") as tmp:
        # The checked, resolved program: the raw recorded path, if relative, names another file in the child's cwd.
        return _run_child(Path(tmp) / "result.json", dump_dir, [str(program), *argv], cwd, timeout, started)


def _run_child(
    with_result: Path, dump_dir: str, script_argv: list[str], cwd: str, timeout: float, started: float
) -> RerunResult:
    try:
        child = run_python(
            ["-m", "pyadapter.replay.rerun", dump_dir, str(with_result), *script_argv],
            cwd=cwd,
            timeout=timeout,
            # the whole run is dumped already; a second dump at the scene would cut it short
            env={"NANLENS_LOCATE_AT_SCENE": "0"},
            stdout="discard",
            stderr="pipe",
        )
    except OSError as exc:
        return RerunResult(dump_dir, 0.0, error=f"cannot start the re-run: {exc.strerror or exc}")
    if child.timed_out:
        return RerunResult(
            dump_dir,
            time.perf_counter() - started,
            error=f"the re-run took longer than {timeout:.0f} s; stopped",
        )
    stderr = child.stderr
    result = RerunResult(dump_dir, time.perf_counter() - started, exit_code=child.returncode)
    try:
        data = json.loads(with_result.read_text(encoding="utf-8"))
        result.stopped_at_step = data.get("stopped_at_step")
    except (OSError, json.JSONDecodeError):
        pass
    if result.stopped_at_step is None:
        tail = _last_line(stderr or "")
        result.error = "the re-run never reached a non-finite step" + (
            f" (its last words: {tail})" if tail else ""
        )
    return result


# ---- the child -----------------------------------------------------------------------------------------------


class _StopAtFirstNonFiniteStep(SystemExit):
    """Raised instead of writing the bundle: ends the script (a SystemExit passes through training loops)."""


def _stop_instead_of_writing(result_path: str) -> None:
    from pyadapter.capture import writer

    def record_and_stop(kind: str, step: int) -> None:
        Path(result_path).write_text(
            json.dumps({"stopped_at_step": int(step), "kind": kind}), encoding="utf-8"
        )
        raise _StopAtFirstNonFiniteStep(0)

    writer.instead_of_writing(record_and_stop)


@contextlib.contextmanager
def sequential_pipelines() -> Iterator[None]:
    """``Dataset.map`` / ``interleave`` run one element at a time in the re-run. With ``num_parallel_calls`` the
    traces of several elements' map functions interleave in the dump, and the scan matched an op with another
    element's inputs: a NaN the data held was then named as made by the map's first op (5 runs in 6). The
    elements and their order are those of training (a parallel map is deterministic unless told otherwise)."""
    import tensorflow as tf

    originals = {name: getattr(tf.data.Dataset, name) for name in ("map", "interleave")}
    for name in originals:
        original = getattr(tf.data.Dataset, name)
        # map(map_func, num_parallel_calls, deterministic, ...), interleave(map_func, cycle_length, block_length,
        # num_parallel_calls, deterministic, ...): the parallelism arguments by keyword or position.
        position = 0 if name == "map" else 2

        def sequential(
            self: Any, *args: Any, _original: Any = original, _at: int = position, **kwargs: Any
        ) -> Any:
            # The function by position, or by its keyword (``.map(map_func=get_spectrogram, ...)``, as the
            # simple_audio tutorial writes it).
            if "map_func" in kwargs:
                func = kwargs.pop("map_func")
            else:
                func, args = args[0], args[1:]
            args = args[:_at] + args[_at + 2 :]
            kwargs.pop("num_parallel_calls", None)
            kwargs.pop("deterministic", None)
            return _original(self, func, *args, **kwargs)

        setattr(tf.data.Dataset, name, sequential)
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(tf.data.Dataset, name, original)


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(
            "usage: python -m pyadapter.replay.rerun DUMP_DIR RESULT.json SCRIPT [ARGS...]", file=sys.stderr
        )
        return 2
    dump_dir, result_path, script, *script_args = argv
    exit_with_parent()
    from pyadapter.dump.recorder import DumpRecorder
    from pyadapter.replay.reentry import files_kept, scratch_files_for
    from pyadapter.userscript import run_script

    _stop_instead_of_writing(result_path)
    recorder = DumpRecorder(dump_dir, "FULL_HEALTH")
    recorder.start()
    try:
        # The program runs from its start to the failing step: its set-up and callbacks write as in training (a
        # CSVLogger reopened history.csv and left it empty, `open("run_log.txt", "w")` a new log); kept from them.
        with sequential_pipelines(), files_kept(scratch_files_for(Path(script).resolve(), Path.cwd()), []):
            if script.lower().endswith(".ipynb"):
                # A notebook's code cells, in order, as a re-entry runs them (it ran "the notebook's JSON as
                # Python": NameError: name 'null' is not defined).
                from pyadapter.replay.reentry import run_notebook

                run_notebook(Path(script))
                return 0
            return run_script(script, script_args)
    finally:
        recorder.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
