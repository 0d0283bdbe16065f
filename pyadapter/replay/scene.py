"""Locate at the scene: when a guarded step fails, find its origin right there, in the training process.

The process still holds the live model, optimizers, batch and code, whatever shape the program has (a notebook,
a script that trains at module level, a subclassed model with constructor arguments): nothing has to be rebuilt.
`locate_here` puts the pre-step values back (weights, optimizer slots, metrics, Keras seed generators, so
dropout and sampling draw the same values), runs the step once as a graph under a FULL_HEALTH dump, scans the
dump, and then puts every value back to what training had before the re-run: the update of the re-run is never
kept, and training goes on (or stops) exactly as it would have without it.

The step runs in a short-lived thread of its own: its ops' creation stacks then hold only the step's own frames,
as in a replay from the bundle, not the user's ``fit`` call around it (which is passed as ``entry_frame``, the
line that stands for ops made wholly inside Keras). The dump is enabled and disabled in that same thread.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from pyadapter.capture.rng import host_states, set_host_states
from pyadapter.findings import Findings, Frame
from pyadapter.replay.errors import ReplayError

# Origin sources in ``findings.bundle["origin_from"]``.
ORIGIN_FROM_SCENE = "scene"
# A step that draws unseeded random numbers and stayed finite when re-run is re-run again, up to this many runs in
# all, while the runs fit in the budget (seconds, the first run's time counted for the next).
STATEFUL_RANDOM_TRIES = 3
STATEFUL_RANDOM_BUDGET_S = 45.0


@dataclass
class SceneStep:
    """The failing step as the live process holds it."""

    step: Callable[..., Any]  # plain Python step (Keras ``model.train_step``, or the guarded loop function)
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    variables: list[Any]  # every variable the step may change: weights, optimizer slots, metrics, seed states
    trainable: list[Any]
    optimizers: list[Any]
    seeds_before: dict[int, Any]  # id(seed state variable) -> value before the failing step
    seed_variables: list[Any]
    compiled_with_xla: bool = False  # training's step had jit_compile=True (the dumped re-run has no XLA)
    forward_state: list[Any] = field(
        default_factory=list
    )  # BatchNormalization's moving statistics, judged too
    # A plain Python step's Python and NumPy random states before it (`rng.host_states`), set again before each
    # re-run (the same episode's actions); None for a traced step. Such a step may call NumPy on its tensors,
    # which a graph cannot: it is re-run eagerly then.
    host_random: Any = None


@dataclass
class SceneResult:
    findings: Findings | None
    seconds: float
    error: str | None = None  # one line when locating at the scene failed (the bundle is written anyway)


def say(message: str) -> None:
    print(f"NaN Lens: {message}", file=sys.stderr, flush=True)


def user_call_site() -> Frame | None:
    """The innermost frame of the user's own code on this thread's stack: the ``model.fit(...)`` line (or the
    guarded step's call), which stands for ops made wholly inside Keras."""
    from pyadapter.dump.frames import innermost_user_call

    found = innermost_user_call(sys._getframe(1))
    if found is None:
        return None
    path, line, _, function = found
    return Frame(
        file=os.path.abspath(path) if not path.startswith("<") else path, line=line, function=function
    )


def _run_dumped(
    scene: SceneStep,
    dump_dir: str,
    mode: str = "graph",
    around: Callable[[], AbstractContextManager[None]] | None = None,
    draw: int = 0,
) -> Any:
    """Restore the pre-step values, run the step once (as a graph, or eagerly) under the dump; the StepVerdict.
    `around` instead of the dump: what wraps the step (the look at the origin's values, `_rows_of_origin`)."""
    from pyadapter.dump.recorder import step_dump as dumping
    from pyadapter.replay.step import StepProgram, run_step

    # Keras fit's step reports its loss through the metrics' running means: fresh ones, as the replay has, so the
    # verdict's loss is the step's own, not the epoch's mean with the failing step counted twice. (`locate_here`
    # puts the metrics back afterwards, with every other variable.)
    reset_metrics = getattr(getattr(scene.step, "__self__", None), "reset_metrics", None)

    def before_run() -> None:
        if scene.host_random is not None:
            set_host_states(scene.host_random)
        for variable in scene.seed_variables:
            value = scene.seeds_before.get(id(variable))
            if value is not None:
                variable.assign(value)  # as read from this very variable before the step: same dtype
        if callable(reset_metrics):
            reset_metrics()

    program = StepProgram(
        step=scene.step,
        args=scene.args,
        kwargs=scene.kwargs,
        state=[],  # restored by the caller, around the whole re-run
        trainable=scene.trainable,
        optimizers=scene.optimizers,
        forward_state=scene.forward_state,
        before_run=before_run,
        description="the failing step, at the scene",
    )
    return run_step(program, mode, restore=True, around=around or (lambda: dumping(dump_dir)), draw=draw)  # type: ignore[arg-type]


def locate_here(
    scene: SceneStep,
    *,
    entry_frame: Frame | None,
    bundle_path: str,
    report: Any,
    batch: Any,
    history: list[dict[str, Any]] | None,
    step: int,
    epoch: int | None,
    batch_index: int | None,
    kind: str,
    entry_script: str | None,
) -> SceneResult:
    """Re-run the failing step under a dump and scan it; every variable is as it was before this call after it.

    Never raises for the user's code or the dump (training must go on cleanly): failures become ``error``."""
    import numpy as np

    started = time.perf_counter()
    saved = [(variable, np.array(variable.numpy(), copy=True)) for variable in scene.variables]
    dump_dir = graph_dir = tempfile.mkdtemp(prefix="nanlens-scene-dump-")
    eager_dir: str | None = None
    retry_dirs: list[str] = []
    mode = "graph"
    host_now = None
    if scene.host_random is not None:
        host_now = host_states()  # training's generators go on from here after the re-runs
    try:
        try:
            verdict = _in_own_thread(lambda: _run_dumped(scene, dump_dir))
        except ReplayError:
            if scene.host_random is None:
                raise
            # A plain Python step that hands its tensors to NumPy (keras.io's actor-critic plays its episode in
            # the step: np.random.choice(p=probs)) cannot run as a graph; it ran eagerly in training too.
            for variable, value in saved:
                variable.assign(value)
            eager_dir = dump_dir = tempfile.mkdtemp(prefix="nanlens-scene-dump-eager-")
            verdict = _in_own_thread(lambda: _run_dumped(scene, dump_dir, "eager"))
            mode = "eager"
        findings = _scan(dump_dir, entry_frame)
        tries = 1
        first_seconds = time.perf_counter() - started
        while (
            findings.origin is None
            and getattr(verdict, "stateful_random", None)
            and tries < STATEFUL_RANDOM_TRIES
            and time.perf_counter() - started + first_seconds < STATEFUL_RANDOM_BUDGET_S
        ):
            # The step draws unseeded random numbers (a GAN's noise): this re-run drew others than training did and
            # stayed finite. Whether the NaN comes back is chance, and from a diverging state it mostly does: draw
            # again, each time from the values before the step.
            for variable, value in saved:
                variable.assign(value)
            retry_dir = tempfile.mkdtemp(prefix="nanlens-scene-dump-retry-")
            retry_dirs.append(retry_dir)
            verdict = _in_own_thread(functools.partial(_run_dumped, scene, retry_dir, draw=tries))
            findings = _scan(retry_dir, entry_frame)
            dump_dir = retry_dir
            tries += 1
        if tries > 1:
            findings.extra.setdefault("warnings", []).append(
                f"located in re-run {tries} of the step: it draws unseeded random numbers, and the "
                f"first {'re-run' if tries == 2 else f'{tries - 1} re-runs'} drew other numbers than training "
                "did and stayed finite"
                if findings.origin is not None
                else f"the step was re-run {tries} times: each drew other random numbers than training did and "
                "stayed finite"
            )
        hidden = mode == "graph" and _hidden_in_a_traced_function(findings)
        # Not when the step draws from stateful random ops (unseeded tf.random.normal): a re-run draws other numbers,
        # and an eager one could find another failure than training's.
        if hidden or (
            mode == "graph" and findings.origin is None and not getattr(verdict, "stateful_random", None)
        ):
            # The step called a tf.function that training had traced already: its graph is reused, so its ops
            # were not instrumented and the NaN seems to come out of the call. Or the dumped graph stayed finite
            # where training's did not (a Cholesky of a matrix only just not positive definite: a dump keeps every
            # op's output, and a borderline value came out on the other side). Run the step once more, eagerly
            # (every op executes under the dump), and take the origin from there.
            for variable, value in saved:  # the graph re-run applied its update: start again from before it
                variable.assign(value)
            eager_dir = tempfile.mkdtemp(prefix="nanlens-scene-dump-eager-")
            eager_verdict = _in_own_thread(lambda: _run_dumped(scene, eager_dir, "eager"))
            eager = _scan(eager_dir, entry_frame)
            if eager.origin is not None:
                findings, verdict, dump_dir, mode = eager, eager_verdict, eager_dir, "eager"
                findings.extra.setdefault("warnings", []).append(
                    "located in an eager re-run of the step: the graph re-run called tf.functions traced "
                    "before, whose ops a dump cannot see"
                    if hidden
                    else "located in an eager re-run of the step: the dumped graph re-run stayed finite (a dump "
                    "keeps every op's output, and a value at the edge came out finite there)"
                )
        _describe(
            findings,
            verdict,
            scene=scene,
            report=report,
            batch=batch,
            bundle_path=bundle_path,
            step=step,
            epoch=epoch,
            batch_index=batch_index,
            kind=kind,
            entry_script=entry_script,
        )
        rows, huge = _values_of_the_step(scene, findings, batch, saved, verdict, mode)
        if rows is not None and findings.bundle is not None:
            findings.bundle["bad_rows"] = rows.to_json()
        if huge is not None and findings.bundle is not None:
            findings.bundle["first_huge"] = huge.to_json()
        _attach_pictures(findings, dump_dir, bundle_path, history, step)
        seconds = time.perf_counter() - started
        findings.extra["located_at_scene"] = {"seconds": round(seconds, 2)}
        return SceneResult(findings, seconds)
    except Exception as exc:  # noqa: BLE001 - the step, the scan or a picture: say it, keep training's state
        return SceneResult(None, time.perf_counter() - started, _one_line(exc))
    finally:
        for variable, value in saved:
            variable.assign(value)
        if host_now is not None:
            set_host_states(host_now)
        for folder in {graph_dir, eager_dir, *retry_dirs}:  # all, whichever the origin came from
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)


def _values_of_the_step(
    scene: SceneStep, findings: Findings, batch: Any, saved: list[tuple[Any, Any]], verdict: Any, mode: str
) -> tuple[Any, Any]:
    """(the batch rows the origin op's NaN/Inf came from, where the values first grew huge) or None each
    (`pyadapter.replay.rowvalues`), each from one more run of the step from the state before it (the rows eager
    unless the step draws unseeded random numbers). An eager locate's dump names no ops, so its origin gets none."""
    from pyadapter.replay.rowvalues import first_huge, origin_rows

    if mode != "graph":
        return None, None
    eager_first = not getattr(verdict, "stateful_random", None)

    def run_values(run_mode: str, around: Callable[[], AbstractContextManager[None]]) -> None:
        for variable, value in saved:  # the locate's run applied its update: start again from before it
            variable.assign(value)
        _in_own_thread(lambda: _run_dumped(scene, "", run_mode, around))

    rows = origin_rows(findings.origin, batch, run_values, eager_first=eager_first)
    return rows, (first_huge(findings.origin, run_values) if eager_first else None)


_CALL_OUTPUT = re.compile(r"(?:^|/)(?:Stateful)?PartitionedCall(?:_\d+)?:\d+$")


def _hidden_in_a_traced_function(findings: Findings) -> bool:
    """The origin's NaN/Inf came out of a call to another tf.function (whose ops were not dumped)."""
    origin = findings.origin
    return origin is not None and any(_CALL_OUTPUT.search(i.name) for i in origin.inputs)


def _in_own_thread(run: Callable[[], Any]) -> Any:
    """`run()` in a short-lived thread (see the module docstring); re-raises what it raised."""
    outcome: dict[str, Any] = {}
    from pyadapter.capture import rng

    # Keras keeps its global SeedGenerator per thread: the re-run draws ``keras.random.*(seed=None)`` from training's.
    share_generator = rng.keras_global_seed_generator_sharer()

    def work() -> None:
        try:
            share_generator()
            outcome["value"] = run()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=work, name="nanlens-locate-at-scene", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _scan(dump_dir: str, entry_frame: Frame | None) -> Findings:
    from pyadapter.dump import scan_dump

    return scan_dump(dump_dir, entry_frame=entry_frame)


def _describe(
    findings: Findings,
    verdict: Any,
    *,
    scene: SceneStep,
    report: Any,
    batch: Any,
    bundle_path: str,
    step: int,
    epoch: int | None,
    batch_index: int | None,
    kind: str,
    entry_script: str | None,
) -> None:
    """The ``bundle`` section as ``locate_bundle`` writes it, with origin_from "scene"; a batch that already held
    NaN/Inf is said on the origin, as a locate from the bundle says it."""
    from pyadapter.replay.batchhealth import batch_problem
    from pyadapter.replay.verdict import ReplayReport

    verdict.dumped = True
    # What the at-scene verdict beside training's own count says (6 NaN gradients under the dump, 2 in training:
    # fused ops, or XLA), as `nanlens locate --replay` says it.
    note = ReplayReport(
        bundle=bundle_path,
        entry_script=entry_script or "",
        captured_gradients=len(report.gradients) if "gradients" in report.checked else None,
        trained_with_xla=scene.compiled_with_xla,
        optimizers=max(1, len(scene.optimizers)),
        verdicts={"graph": verdict},
    ).note
    findings.source_kind = "bundle"
    findings.source_path = bundle_path
    findings.bundle = {
        "path": bundle_path,
        "kind": kind,
        "step": step,
        "epoch": epoch,
        "batch_index": batch_index,
        "entry_script": entry_script or "",
        "captured": report.summary(),
        "reproduced": {"graph": verdict.reproduced},
        "verdicts": {"graph": verdict.to_json()},
        "note": note,
        "non_finite_inputs": [],
        "workers": [],
        "origin_from": ORIGIN_FROM_SCENE,
    }
    if note:
        findings.extra.setdefault("warnings", []).append(note)
    problem = batch_problem(batch)
    if problem is not None:
        findings.bundle["non_finite_batch"] = problem.to_json()
        carried = f"{problem.describe()}, so step {step} is not where it was made"
        if findings.origin is not None:
            findings.origin.message = (
                f"{carried}: in the step, {findings.origin.message}; to find where, run `nanlens locate` on the "
                "bundle (it reads the code that made the arrays given to fit, or re-runs the input pipeline under "
                "a dump)"
            )
        else:
            findings.extra.setdefault("warnings", []).append(carried)


def _attach_pictures(
    findings: Findings, dump_dir: str, bundle_path: str, history: list[dict[str, Any]] | None, step: int
) -> None:
    from pyadapter.pictures.build import attach_bundle_pictures

    attach_bundle_pictures(findings, dump_dir, bundle_path, history=history, step=step)
