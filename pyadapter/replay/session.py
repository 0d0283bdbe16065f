"""``replay_bundle``: bring a bundle's step back and run it in graph and/or eager mode; the verdicts of each.

Two routes bring the step back (``with_captured_step``):
- rebuild: import the entry script as a module and load ``model.keras`` (``rebuild.py``), for scripts that keep
  their training under ``if __name__ == "__main__":`` and models that survive saving;
- re-entry: run the user's own program (script or notebook) and take it over at its first training step
  (``reentry.py``), for everything else: notebooks, module-level training, subclassed models that cannot be
  deserialized. A failed rebuild falls back to it. The report says which route was taken, in one line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from pyadapter.replay.debugger import breakpoints_paused, breakpoints_resumed
from pyadapter.replay.errors import ReplayError
from pyadapter.replay.program_flags import flags_of_the_import
from pyadapter.replay.rebuild import Rebuilt, open_bundle, rebuild
from pyadapter.replay.shards import worker_verdicts
from pyadapter.replay.step import StepProgram, run_step
from pyadapter.replay.verdict import MODES, NOT_A_GRAPH, Mode, ReplayReport, StepVerdict

# progress(phase message, fraction done 0..1)
Progress = Callable[[str, float], None]
T = TypeVar("T")

ROUTE_REBUILD = "rebuilt from the bundle: the entry script imported as a module, model.keras loaded"
ROUTE_REBUILD_CHECKPOINT = (
    "rebuilt from the bundle: the entry script imported as a module, its checkpoint restored"
)


def graph_or_said(program: StepProgram, mode: Mode) -> StepVerdict:
    """`run_step`; for a plain Python step that cannot run as a graph (it hands its tensors to NumPy), the graph
    mode's verdict says so, as a failure of that mode, and the eager one still runs."""
    try:
        return run_step(program, mode)
    except ReplayError as exc:
        if mode != "graph" or not program.plain_python:
            raise
        return StepVerdict(mode=mode, error=f"{NOT_A_GRAPH}: {exc}")


def new_report(rebuilt: Rebuilt) -> ReplayReport:
    bundle = rebuilt.bundle
    return ReplayReport(
        bundle=str(bundle.path),
        entry_script=str(bundle.entry_script or ""),
        step=bundle.step,
        epoch=bundle.epoch,
        batch_index=bundle.batch_index,
        kind=bundle.kind,
        captured=bundle.non_finite.summary(),
        captured_gradients=(
            len(bundle.non_finite.gradients) if "gradients" in bundle.non_finite.checked else None
        ),
        trained_with_xla=bundle.model_info.get("jit_compile") is True
        or (bundle.manifest.get("step_function") or {}).get("jit_compile") is True,
        optimizers=max(1, len(rebuilt.program.optimizers)),
        warnings=[*rebuilt.warnings, *filter(None, [bundle.not_held_warning()])],
        non_finite_inputs=list(rebuilt.bad_inputs),
    )


def reentry_reason(bundle: object) -> str | None:
    """Why this bundle's step cannot be rebuilt by importing its program (then it is re-entered), or None."""
    from pyadapter.replay.entry import training_at_import
    from pyadapter.replay.reentry import is_notebook

    script = getattr(bundle, "entry_script", None)
    if script is None:
        return None
    if is_notebook(script):
        return "the program is a notebook"
    try:
        source = Path(script).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None  # rebuild says what is wrong with the file
    line = training_at_import(source)
    if line is not None:
        return f"{Path(script).name} trains at module level (its first training call: line {line})"
    return None


def _short_reason(text: str, bundle_path: str) -> str:
    """A rebuild failure for the route line: without the bundle's path (the route is the bundle's already; the
    message named it twice) and cut at its first sentence or clause (Keras's safe-mode refusal is a paragraph; the
    rebuild's advice, "build the model and optimizer at module level", is no advice once the re-entry worked)."""
    name = Path(bundle_path).name
    while True:  # "<...>/run-step3: <...>/run-step3: model.keras could not be loaded: ..."
        head, separator, rest = text.partition(": ")
        if not separator or not head.endswith(name):
            break
        text = rest
    first = text.split(". ", 1)[0].split("; ", 1)[0].rstrip(".")
    return first if len(first) <= 200 else first[:197] + "..."


def with_captured_step(
    path: str | Path, action: Callable[[Rebuilt], T], *, reentry_timeout: float | None = None
) -> tuple[T, str]:
    """Bring the bundle's step back by the route that fits its program and run ``action`` on it; returns what
    `action` returned and the one-line route. Raises ReplayError (one line) when neither route can."""
    from pyadapter.replay.reentry import DEFAULT_REENTRY_TIMEOUT, TrainingReached, no_training, run_by_reentry
    from pyadapter.replay.trust import check_entry

    bundle = open_bundle(path)
    check_entry(bundle)  # a bundle names its program; only the user's own, sealed, unchanged code runs
    reason = reentry_reason(bundle)
    if reason is None:
        try:
            # Under a debugger, the first stop is the eager step, with real tensors. An import that starts
            # training (module-level code the source check cannot see) is stopped there and re-entered.
            argv = (bundle.manifest.get("entry_script") or {}).get("argv")
            with (
                breakpoints_paused(),
                no_training(),
                flags_of_the_import(argv if isinstance(argv, list) else None),
            ):
                rebuilt = rebuild(bundle)  # the bundle checked above, not the folder read again
        except TrainingReached:
            reason = f"{Path(str(bundle.entry_script)).name} trains when imported"
        except ReplayError as exc:
            if bundle.entry_script is None or not Path(bundle.entry_script).is_file():
                raise
            reason = (
                f"the bundle alone could not rebuild the step ({_short_reason(str(exc), str(bundle.path))})"
            )
        else:
            # A custom loop's bundle holds a checkpoint, not model.keras.
            route = ROUTE_REBUILD if bundle.model_path is not None else ROUTE_REBUILD_CHECKPOINT
            return action(rebuilt), route
    notes: list[str] = []
    timeout = DEFAULT_REENTRY_TIMEOUT if reentry_timeout is None else reentry_timeout
    result = run_by_reentry(bundle, action, notes=notes, timeout=timeout)
    return result, f"{notes[0] if notes else 'replayed by re-entry'}; {reason}"


def replay_bundle(
    path: str | Path,
    modes: Sequence[Mode] = MODES,
    *,
    progress: Progress | None = None,
    reentry_timeout: float | None = None,
) -> ReplayReport:
    """Bring the bundle's step back and run it once per mode from the captured state.

    Raises ReplayError (one line) when the bundle is tampered with, its program is missing or fails, or the step
    cannot run at all, or when a re-entered program does not reach its first training step within
    ``reentry_timeout`` seconds.
    """
    if progress:
        progress("loading bundle", 0.0)

    def run(rebuilt: Rebuilt) -> ReplayReport:
        report = new_report(rebuilt)
        for index, mode in enumerate(modes):
            if progress:
                progress(f"replaying in {mode} mode", 0.3 + 0.7 * index / len(modes))
            # Breakpoints stop only in the eager run: elsewhere the user's code sees symbolic tensors.
            with breakpoints_paused() if mode == "graph" else breakpoints_resumed():
                report.verdicts[mode] = graph_or_said(rebuilt.program, mode)
        if rebuilt.bundle.cluster:  # a multi-worker bundle: whose data was it?
            if progress:
                progress("replaying each worker's shard", 0.95)
            with breakpoints_paused():
                report.workers = worker_verdicts(rebuilt)
        return report

    report, route = with_captured_step(path, run, reentry_timeout=reentry_timeout)
    report.route = route
    if progress:
        progress("done", 1.0)
    return report
