"""Locating at the scene, the capture side: what NanGuard and guard_step share around
`pyadapter.replay.scene.locate_here` (which re-runs the step under a dump): whether it is on, what it says on
stderr, and the ``findings.json`` and manifest entry it adds to the bundle. Notebook frames are mapped to cells.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyadapter.capture import bundle_format, snapshot, storage
from pyadapter.capture import writer as bundle_writer
from pyadapter.capture.verdict import NonFiniteReport
from pyadapter.findings_text import place_text

LOCATE_ENV = "NANLENS_LOCATE_AT_SCENE"


def locate_enabled(option: bool) -> bool:
    """The guard's ``locate`` option, unless the environment turns it off (``NANLENS_LOCATE_AT_SCENE=0``: no code
    change needed, e.g. for a run whose failing step is too expensive to run twice)."""
    return option and os.environ.get(LOCATE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


@dataclass
class SceneFiles:
    """What locating at the scene adds to a bundle."""

    files: dict[str, bytes] = field(default_factory=dict)  # findings.json, when an origin was located
    manifest: dict[str, Any] = field(default_factory=dict)  # {"located_at_scene": {...}}
    origin: str | None = None  # "file:line: Op" for the guard's stop message


@dataclass
class LiveStep:
    """The live training step a window re-runs (the learning-rate search, taking an update back), as one guard
    gives it: NanGuard's ``model.train_step``, guard_step's own Python step."""

    call: Any
    kind: str  # bundle_format.KIND_FIT / KIND_LOOP: how a held batch becomes the step's arguments
    to_numpy: Any  # a batch the window holds -> the nested numpy batch
    trainable: list[Any]
    optimizers: list[Any]
    extra_state: list[Any]  # the metric variables: put back as they were after a re-run
    reset: Any  # fresh metrics before each step
    # A call of the step as the program made it (custom loops): where a held batch has an object argument (a
    # model passed to the step), the re-run takes the object from here.
    like: tuple[tuple[Any, ...], dict[str, Any]] | None = None

    def run(self, keeper: Any, copy: Any, batches: list[Any]) -> Any:
        """A `pyadapter.replay.window.WindowRun` from the keeper's `copy` through `batches` (nested numpy)."""
        from pyadapter.replay.window import WindowRun, calls_of

        return WindowRun(
            step=self.call,
            calls=calls_of(batches, self.kind, self.like),
            start_step=copy.step,
            state=keeper.variables,
            values=keeper.state_values(copy),
            trainable=self.trainable,
            optimizers=self.optimizers,
            before_run=self.reset,
            step_reset=self.reset,
        )


def findings_files(
    scene: Any,
    step_call: Any,
    *,
    capture_dir: Any,
    run_name: str | None,
    verbose: bool,
    history: Any,
    report: NonFiniteReport,
    step: int,
    epoch: int | None,
    batch_index: int,
    kind: str,
    batch_problem_of: Any,
    bundle: Path | str | None = None,
) -> SceneFiles:
    """Shared by NanGuard and guard_step: locate at the scene, say so on stderr; what goes into the bundle.
    `bundle`: where the bundle was written already, said before the locate starts (None: written after it)."""
    bundle_path = str(bundle or storage.join(str(capture_dir), f"{run_name or 'run'}-step{step}"))
    entry = snapshot.entry_script_path()
    if verbose and bundle is not None:
        # Said first: a run killed during a slow locate still has its bundle, and the user its path (s42d p8).
        scene.say(
            f"capture bundle: {bundle} (locating the origin here now; if this is interrupted, "
            f"`nanlens locate {bundle}` does it)"
        )
    if verbose:
        scene.say(
            f"locating the origin of step {step} here (replaying it once under a FULL_HEALTH dump; "
            "nothing is kept)..."
        )
    result = scene.locate_here(
        step_call,
        entry_frame=scene.user_call_site(),
        bundle_path=bundle_path,
        report=report,
        batch=batch_problem_of,
        history=bundle_writer.history_to_json(history),
        step=step,
        epoch=epoch,
        batch_index=batch_index,
        kind=kind,
        entry_script=str(entry) if entry else None,
    )
    entry_json: dict[str, Any] = {"seconds": round(result.seconds, 2)}
    if result.findings is not None and (result.findings.bundle or {}).get("non_finite_batch"):
        # The step only carried NaN/Inf that the batch held already: the op that made it ran before the step
        # (a tf.data map function, the data itself). `nanlens locate` re-runs the input pipeline to find it, so
        # the bundle does not answer with the step's weaker origin.
        entry_json["deferred"] = "the captured batch already holds NaN/Inf; the origin is before the step"
        if verbose:
            scene.say(
                "the failing batch already holds NaN/Inf, so the step only carried it; `nanlens locate` on "
                "the bundle finds where it was made (in the code that made the arrays given to fit, else by "
                "re-running the input pipeline under a dump)"
            )
        return SceneFiles(manifest={"located_at_scene": entry_json})
    if result.findings is None:
        entry_json["error"] = result.error
        if verbose:
            scene.say(
                f"could not locate at the scene ({result.error}); `nanlens locate` on the bundle will try"
            )
        return SceneFiles(manifest={"located_at_scene": entry_json})
    unsaved_place = map_to_notebook(result.findings)
    origin = result.findings.origin
    stateful = ((result.findings.bundle or {}).get("verdicts", {}).get("graph") or {}).get("stateful_random")
    if origin is None and stateful:
        from pyadapter.replay.stateful_random import note

        warnings = result.findings.extra.setdefault("warnings", [])
        if not any(note(stateful).lower() in str(w).lower() for w in warnings):  # the replay's note says it
            warnings.append(note(stateful))
    if verbose:
        where = "no origin (the step stayed finite when re-run)"
        if origin is None and stateful:
            where = f"no origin (the step stayed finite when re-run: {note(stateful)})"
        if origin is not None:
            place = unsaved_place or place_text(origin.file, origin.line, origin.cell)
            where = f"{place}: {origin.op.type} ({origin.message.split(';')[0]})"
        scene.say(f"located in {result.seconds:.1f} s: {where}")
    entry_json["origin"] = (
        None
        if origin is None
        else {"file": origin.file, "line": origin.line, "cell": origin.cell, "op": origin.op.type}
    )
    text = None
    if origin is not None:
        text = f"{unsaved_place or place_text(origin.file, origin.line, origin.cell)}: {origin.op.type}"
    return SceneFiles(
        {bundle_format.FINDINGS_FILE: result.findings.dumps().encode("utf-8")},
        {"located_at_scene": entry_json},
        text,
    )


def map_to_notebook(findings: Any) -> str | None:
    """In a Jupyter kernel: frames in cell code become (the .ipynb, cell index, line in the cell). Returns how to
    name an origin in code the saved notebook does not hold ("In [12], line 7 (...)"), else None."""
    try:
        from pyadapter.capture import notebook
    except ImportError:
        return None
    info = notebook.current_notebook()
    if info is None:
        # A kernel that knows no notebook file (Colab keeps it off the kernel's disk; a front end that says
        # nothing): its cell's file /tmp/ipykernel_.../<hash>.py means nothing to the user; "In [7], line 4" does.
        origin = findings.origin
        cells = notebook.kernel_cells()
        if origin is None or cells is None:
            return None
        ran = notebook.executed_place(origin.file, origin.line, notebook.NotebookInfo(Path(), None, cells))
        if ran is None:
            return None
        return (
            f"{ran[0]}, line {ran[1]} (the kernel was not told its notebook, and no notebook in its folder "
            "holds the cells it ran)"
        )
    notebook.map_findings_to_notebook(findings, info)
    origin = findings.origin
    place = (
        None if origin is None or origin.cell is not None else _run_cell_place(origin.file, origin.line, info)
    )
    return None if place is None else f"{place} (edited and run, not in the saved {info.path.name})"


def _run_cell_place(file: str, line: int, info: Any = None) -> str | None:
    """ "In [12], line 7" for a line of code this kernel ran that no saved cell holds (the kernel's own file of the
    cell, /tmp/ipykernel_.../....py, means nothing to the user); None elsewhere. `info`: the kernel's notebook, when
    the caller has it already."""
    try:
        from pyadapter.capture import notebook
    except ImportError:
        return None
    info = info if info is not None else notebook.current_notebook()
    place = notebook.executed_place(file, line, info) if info is not None else None
    return None if place is None else f"{place[0]}, line {place[1]}"


def _scene_cause(located: SceneFiles, context: Any) -> Any:
    """The cause of the failure located here (`pyadapter.cause.classify`), or None without findings."""
    import json

    from pyadapter.cause import classify
    from pyadapter.findings import Findings

    content = located.files.get(bundle_format.FINDINGS_FILE)
    if content is None:
        return None
    return classify(Findings.from_json(json.loads(content)), context)


def window_search(
    keeper: Any,
    located: SceneFiles,
    live: LiveStep,
    *,
    failing_batch: Any,
    step: int,
    history: Any,
    model_info: dict[str, Any],
    epoch: int | None,
    batch_index: int | None,
    verbose: bool,
) -> dict[str, Any] | None:
    """For a divergence located here: the largest learning rate that keeps the guard's window finite, found by
    replaying the window from the copy the guard kept (`pyadapter.replay.window`), as the bundle's
    ``window["search"]``. Every variable is put back as it was before. None when the failure is not a divergence,
    the learning rate was not finite, the window is not there yet, or the search could not run."""
    found = keeper.window_for(step)
    if found is None or not located.files:
        return None
    from pyadapter.capture import learning_rate
    from pyadapter.cause import CauseContext

    used = learning_rate.of_step(live.optimizers[0], step) if live.optimizers else None
    if used is not None and (not used.finite or used.value < 0):
        return None  # the rate itself is the cause (`pyadapter.cause`): no lower rate to search for

    from pyadapter.capture.window import RECENT_STEPS

    entry = snapshot.entry_script_info()
    context = CauseContext(
        history=bundle_writer.history_to_json(history),
        model_info=model_info,
        batch=failing_batch,
        step=step,
        epoch=epoch,
        batch_index=batch_index,
        entry_script=entry.get("path"),
        cwd=entry.get("cwd"),
        # A record far out in a batch just before (not a rate) is the cause then: no search.
        recent_batches=[(s, live.to_numpy(b)) for s, b in found[1][-RECENT_STEPS:]],
    )
    cause = _scene_cause(located, context)
    if cause is None or cause.kind != "divergence":
        return None
    if (cause.evidence.get("weights_at_start") or {}).get("non_finite"):
        # NaN weights given to the model before this fit's first update: no rate of this fit helps.
        return None
    from pyadapter.replay import scene

    copy, held = found
    run = live.run(keeper, copy, [live.to_numpy(b) for _, b in held] + [failing_batch])
    saved = _live_values([*keeper.variables, *live.extra_state])
    failing_rate = used.value if used is not None else None
    try:
        if verbose and run.rate_changed(failing_rate) is None:  # (reads the copy's rate: puts the copy back)
            scene.say(
                f"the run diverged: replaying the last {_steps(run.steps)} from the guard's copy at lower learning "
                "rates (graph mode, at most a minute)..."
            )
        search = run.search(failing_rate=failing_rate)
    finally:
        for variable, value in saved:
            variable.assign(value)
    if verbose:
        scene.say(f"{search.sentence()} ({search.seconds:.1f} s, {len(search.trials)} replays)")
    return search.to_json()


def _steps(count: int) -> str:
    return "step" if count == 1 else f"{count} steps"


def cause_sentence(bundle_path: Any, located: SceneFiles) -> str | None:
    """The cause of the bundle just written, in one sentence, for the guard's stop message (needs the findings
    located here; None otherwise or for a URL capture folder)."""
    if not located.files or not isinstance(bundle_path, os.PathLike):
        return None
    try:
        from pyadapter.cause import attach_cause
        from pyadapter.findings import load_findings
        from pyadapter.findings_text import place_text

        findings = load_findings(os.path.join(bundle_path, bundle_format.FINDINGS_FILE))
        cause = attach_cause(findings, os.fspath(bundle_path))
    except Exception:  # noqa: BLE001 - the message goes out without a cause rather than not at all
        return None
    if cause.kind == "unknown":
        return None
    change = cause.change
    where = ""
    if change is not None:
        place = (change.cell is None and _run_cell_place(change.file, change.line)) or place_text(
            os.path.basename(change.file), change.line, change.cell
        )
        where = f" Change {place}: {change.what}."
    return f"{cause.kind}: {cause.summary}.{where}"


def take_back_update(keeper: Any, step: int, live: LiveStep, verbose: bool) -> bool:
    """The failing update went through (``protect_weights`` off) and made the weights non-finite: put back the
    state the step started from, re-made from the window's newest copy at or before it with the steps since
    re-run (graph mode, no debugger; a copy taken right before the step needs none). The bundle then holds the
    finite state its replay starts from, so locating finds the op that made the update non-finite (a learning-rate
    schedule's) rather than weights that "came with the data"; in skip mode training goes on from it.

    Returns whether the state was put back. Not when there is no copy yet or a held batch is missing, or when a
    re-run step was not finite (a step that draws unseeded random numbers re-runs differently): every variable is
    then left as the update left it. The metric variables (`live.extra_state`) are left as they were either way."""
    found = keeper.window_for(step, newest=True)
    if found is None:
        return _take_back_a_first_update(keeper, step, live, verbose)
    from pyadapter.replay import scene

    copy, held = found
    run = live.run(keeper, copy, [live.to_numpy(b) for _, b in held])
    saved = _live_values([*keeper.variables, *live.extra_state])
    metrics = {id(v) for v in live.extra_state}
    taken_back = run.replay(stop_on_growth=False).finite  # every step re-run, each finite
    for variable, value in saved:
        if not taken_back or id(variable) in metrics:
            variable.assign(value)
    if verbose:
        rerun = f", {run.steps} steps re-run" if run.steps else ""
        scene.say(
            f"the update of step {step} made the weights non-finite: took it back (the state before it re-made "
            f"from the window's copy of step {copy.step}{rerun})"
            if taken_back
            else f"the update of step {step} made the weights non-finite and could not be taken back (re-running "
            f"the window from step {copy.step} did not stay finite); the bundle holds the weights after it"
        )
    return taken_back


def _take_back_a_first_update(keeper: Any, step: int, live: LiveStep, verbose: bool) -> bool:
    """`take_back_update` for the first step since the window's copy when that step made its optimizer's slots (a
    custom loop's optimizer builds at its first ``apply_gradients``, after the copy at the loop's start): a unit-norm
    kernel_constraint of a zero kernel made the weights NaN at step 0, and the update stayed, so the bundle held
    NaN weights and its locate blamed "weights non-finite when this fit began". The copied variables are put back
    and the slots given the values a fresh optimizer of the same config starts with. False (nothing changed) when
    no copy was taken at the step or a new variable is not such a slot."""
    copy = keeper.copy_at(step)
    if copy is None:
        return False
    made = keeper.made_since()
    try:
        fresh = _fresh_slot_values(live.optimizers, made)
    except Exception:  # noqa: BLE001 - an optimizer that cannot be made again from its config: leave the update
        fresh = None
    if fresh is None:
        return False
    for variable, value in zip(keeper.variables, keeper.state_values(copy), strict=True):
        variable.assign(value)
    for variable in made:
        variable.assign(fresh[id(variable)])
    if verbose:
        from pyadapter.replay import scene

        scene.say(
            f"the update of step {step} made the weights non-finite: took it back (the state before it from the "
            "window's copy, the optimizer's new slots as a fresh optimizer makes them)"
        )
    return True


def _fresh_slot_values(optimizers: list[Any], made: list[Any]) -> dict[int, Any] | None:
    """{id of each variable of `made`: its initial value}, from a twin of its optimizer made from the optimizer's
    config and built on the same variables (Adam's zeros, Adagrad's initial accumulator); None when a variable of
    `made` is no optimizer's."""
    wanted = {id(v) for v in made}
    fresh: dict[int, Any] = {}
    for optimizer in optimizers:
        owned = [v for v in optimizer.variables if id(v) in wanted]
        if not owned:
            continue
        twin = type(optimizer).from_config(optimizer.get_config())
        twin.build(list(optimizer._trainable_variables))
        if len(twin.variables) != len(optimizer.variables):
            return None
        for live, made_fresh in zip(optimizer.variables, twin.variables, strict=True):
            if id(live) in wanted:
                fresh[id(live)] = made_fresh.numpy()
    return fresh if set(fresh) == wanted else None


def _live_values(variables: list[Any]) -> list[tuple[Any, Any]]:
    """(variable, a numpy copy of its value) for each distinct variable: to put them back afterwards."""
    import numpy as np

    return [(variable, np.array(variable.numpy(), copy=True)) for variable in snapshot.unique(variables)]
