"""``locate_bundle``: replay a bundle's step once in graph mode under a FULL_HEALTH dump, scan the dump, and
return Findings for the bundle (its step and the replay verdicts in ``findings.bundle``).

By default the dumped replay runs in a child process (``pyadapter.replay.worker``): dumping instruments every op
TensorFlow runs in its process, and the caller may be a long-lived one (the language server). ``isolate=False``
runs it here instead (the ``nanlens locate`` command does: it saves a second TensorFlow start). This module does
not import TensorFlow itself.

When the captured batch itself already holds NaN/Inf, the step only carried it: the origin's message says so
("the captured batch already holds N NaN/Inf values (x[row, col] = nan, ...)"), and the entry script is run
again under a dump up to that step (``rerun.py``) to find the op that made it before the step, e.g. a ``log``
in a ``Dataset.map`` function. ``findings.bundle["origin_from"]`` tells which source the origin comes from:
"replay" (the step's dump), "input pipeline re-run", or "captured batch" (the data held NaN/Inf before any
TensorFlow op touched it, or the re-run was not done).
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyadapter.cause import attach_cause
from pyadapter.childproc import run_python
from pyadapter.dump.recorder import EAGER_DUMP
from pyadapter.findings import Finding, Findings, Frame
from pyadapter.replay.batchhealth import BatchProblem, batch_problem
from pyadapter.replay.errors import ReplayError
from pyadapter.replay.reentry import map_cell_file_of, map_cell_files
from pyadapter.replay.rerun import DEFAULT_RERUN_TIMEOUT, RERUN_MAX_STEP, rerun_command, rerun_entry_script
from pyadapter.replay.verdict import ReplayReport

# progress(phase message, fraction done 0..1)
Progress = Callable[[str, float], None]

# How ``rebuild.py`` starts its warning about a non-finite batch.
BATCH_WARNING_START = "the captured batch already holds non-finite values"
RERUN_PHASE = "re-running the input pipeline under a dump"
RERUN_SCAN_PHASE = "scanning the re-run's dump"
PHASES = {
    "loading bundle": 0.0,
    "replaying each worker's shard": 0.3,
    "replaying with dump": 0.45,
    "scanning": 0.85,
    RERUN_PHASE: 0.9,
    RERUN_SCAN_PHASE: 0.97,
    "done": 1.0,
}
DEFAULT_TIMEOUT = 900.0  # seconds for the child's whole replay; a real step is seconds to a minute


def _report_progress(progress: Progress | None, phase: str, fraction: float | None = None) -> None:
    if progress is None:
        return
    try:
        progress(phase, PHASES.get(phase, 0.0) if fraction is None else fraction)
    except Exception:  # progress is decoration; never let it break a locate
        pass


def _load_bundle(path: str | Path) -> Any:
    """The verified CaptureBundle (JSON and arrays only); a tampered or foreign one raises ReplayError."""
    from pyadapter.capture.bundle_format import BundleError
    from pyadapter.capture.reader import CaptureBundle

    try:
        return CaptureBundle.load(path)
    except BundleError as exc:
        raise ReplayError(str(exc)) from None


def check_bundle(path: str | Path) -> Any:
    """Fail fast, without TensorFlow: a tampered bundle or a missing entry script is one line. Returns the
    loaded CaptureBundle."""
    bundle = _load_bundle(path)
    check_replayable(bundle)
    return bundle


def check_replayable(bundle: Any) -> None:
    """``check_bundle`` for a loaded CaptureBundle: its program may run here (raises ReplayError, one line)."""
    from pyadapter.replay.trust import check_entry

    check_entry(bundle)  # the user's own, unchanged program (or one they trusted), before TensorFlow starts
    from pyadapter.capture.keras_lines import MixedKerasError, use_line_of_bundle

    try:  # a tf_keras bundle: the worker and a re-run of the program inherit TF_USE_LEGACY_KERAS=1
        use_line_of_bundle(bundle.keras_line, str(bundle.path))
    except MixedKerasError as exc:
        raise ReplayError(str(exc)) from None


def scene_findings(path: str | Path) -> Findings | None:
    """The findings NanGuard/guard_step located at the scene and wrote into the bundle, or None if it holds none.
    Reads JSON only (the bundle is verified first); raises ReplayError for a bad bundle or findings file."""
    from pyadapter.findings import FindingsError, load_findings

    bundle = _load_bundle(path)
    if bundle.findings_path is None:
        return None
    try:
        findings = load_findings(bundle.findings_path)
    except FindingsError as exc:
        raise ReplayError(f"{bundle.path}: findings.json: {exc}") from None
    # The bundle may have been renamed or moved since (a -1 suffix, a pull): it is where it is now.
    findings.source_kind = "bundle"
    findings.source_path = str(bundle.path)
    if findings.bundle is not None:
        findings.bundle["path"] = str(bundle.path)
    return findings


def _captured_batch_problem(bundle: Any) -> BatchProblem | None:
    from pyadapter.capture.bundle_format import BundleError

    try:
        return batch_problem(bundle.batch())
    except (BundleError, OSError, ValueError):
        return None  # the replay reads the batch too and reports what is wrong with it


def _run_worker(path: str, dump_dir: str, progress: Progress | None, timeout: float) -> ReplayReport:
    from pyadapter.replay.worker import PROGRESS_PREFIX

    with tempfile.TemporaryDirectory(prefix="nanlens-locate-report-") as tmp:
        report_path = os.path.join(tmp, "report.json")
        tail: collections.deque[str] = collections.deque(maxlen=40)

        def on_line(line: str) -> None:
            if line.startswith(PROGRESS_PREFIX):
                _report_progress(progress, line[len(PROGRESS_PREFIX) :].strip())
            else:
                tail.append(line)

        try:
            child = run_python(
                ["-m", "pyadapter.replay.worker", path, dump_dir, report_path],
                timeout=timeout,
                stderr="merge",
                on_line=on_line,
            )
        except OSError as exc:
            raise ReplayError(f"cannot start the replay worker: {exc.strerror or exc}") from None
        if child.timed_out:
            raise ReplayError(f"replaying the step took longer than {timeout:.0f} s; stopped")
        try:
            with open(report_path, encoding="utf-8") as fh:
                result: dict[str, Any] = json.load(fh)
        except (OSError, json.JSONDecodeError):
            last = next((line for line in reversed(tail) if line.strip()), "")
            raise ReplayError(
                f"the replay worker ended without a result (exit code {child.returncode})"
                + (f": {last.strip()}" if last else "")
            ) from None
    if "error" in result:
        raise ReplayError(str(result["error"]))
    return ReplayReport.from_json(result["report"])


def _run_here(path: str, dump_dir: str, progress: Progress | None) -> ReplayReport:
    from pyadapter.replay.dumping import dump_replay

    return dump_replay(path, dump_dir, phase=lambda message: _report_progress(progress, message))


def bundle_section(report: ReplayReport) -> dict[str, Any]:
    """``findings.bundle``: the bundle's step and what replaying it showed."""
    return {
        "path": report.bundle,
        "kind": report.kind,
        "step": report.step,
        "epoch": report.epoch,
        "batch_index": report.batch_index,
        "entry_script": report.entry_script,
        "captured": report.captured,
        "reproduced": report.reproduced,
        "verdicts": report.verdicts_json(),
        "note": report.note,
        "non_finite_inputs": list(report.non_finite_inputs),
        "workers": [w.to_json() for w in report.workers],
        "route": report.route,
        **({"bad_rows": report.bad_rows} if report.bad_rows else {}),
        **({"first_huge": report.first_huge} if report.first_huge else {}),
    }


def locate_bundle(
    path: str | Path,
    *,
    progress: Progress | None = None,
    isolate: bool = True,
    dump_dir: str | Path | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    pictures: bool = True,
    rerun_pipeline: bool | None = None,
    rerun_timeout: float = DEFAULT_RERUN_TIMEOUT,
    replay: bool = False,
) -> Findings:
    """Find the op, file and line where the bundle's step first made NaN/Inf.

    ``progress(phase, fraction)`` is called with the phases "loading bundle", "replaying with dump",
    "scanning", ("re-running the input pipeline under a dump", "scanning the re-run's dump",) "done".
    ``dump_dir`` keeps the dump there (it must not exist or be empty); by default it goes to a temporary
    directory that is removed. Raises ReplayError (one line) for a bad bundle, a missing entry script, a step
    that cannot run, or a dump that cannot be scanned. With ``pictures`` (default) the op graph and health
    timeline made from the dump are added as ``findings.extra["pictures"]`` (``pyadapter.pictures``).

    An op made inside Keras/TensorFlow code (no line of the user's on its stack) is marked at the entry
    script's training call (``model.fit(...)`` / the guarded step's call), never at a library file.
    When the captured batch already holds NaN/Inf, the entry script is re-run under a dump up to the captured
    step to find where it was made: automatically when that step is at most ``RERUN_MAX_STEP``, always with
    ``rerun_pipeline=True``, never with ``rerun_pipeline=False``; each re-run is bounded by ``rerun_timeout``.

    A bundle whose origin was located at the scene (NanGuard/guard_step wrote ``findings.json`` into it while the
    training process still held the live step) is answered from that file, with no replay and no code run:
    ``findings.bundle["origin_from"]`` is "scene". ``replay=True`` (or a ``dump_dir`` to keep) replays anyway.

    Either way the findings get their ``cause`` (``pyadapter.cause.attach_cause``: op, divergence, data,
    precision or unknown, with its evidence and the line to change), read from the findings and the bundle.
    """
    from pyadapter.dump import ScanError, scan_dump
    from pyadapter.replay.callsite import bundle_training_call

    bundle_path = str(Path(path).absolute())
    _report_progress(progress, "loading bundle")
    if not replay and dump_dir is None:
        scene = scene_findings(bundle_path)
        if scene is not None:
            attach_cause(scene, bundle_path)
            _report_progress(progress, "done")
            return scene
    bundle = _load_bundle(bundle_path)
    problem = _captured_batch_problem(bundle)
    entry_frame = bundle_training_call(bundle)

    def batch_only(error: ReplayError, problem: BatchProblem) -> Findings:
        # The batch itself holds the NaN/Inf and the bundle says where: the step need not run to name the data
        # (a program that is gone or changed, an unset environment variable must not cost the whole answer).
        findings = _batch_only_findings(bundle, bundle_path, problem, entry_frame, str(error))
        attach_cause(findings, bundle_path)
        _report_progress(progress, "done")
        return findings

    try:
        check_replayable(bundle)
    except ReplayError as exc:
        if problem is None:
            raise
        return batch_only(exc, problem)

    keep = dump_dir is not None
    if keep:
        target = Path(dump_dir).absolute()  # type: ignore[arg-type]
        if target.exists() and any(target.iterdir()):
            raise ReplayError(f"dump directory {target} is not empty")
        target.mkdir(parents=True, exist_ok=True)
        dump_path = str(target)
    else:
        dump_path = tempfile.mkdtemp(prefix="nanlens-locate-dump-")
    try:
        try:
            if isolate:
                report = _run_worker(bundle_path, dump_path, progress, timeout)
            else:
                report = _run_here(bundle_path, dump_path, progress)
        except ReplayError as exc:
            if problem is None:
                raise
            return batch_only(exc, problem)
        _report_progress(progress, "scanning")

        scan_span = (PHASES[RERUN_PHASE] if problem else PHASES["done"]) - PHASES["scanning"]

        def scan_progress(done: int, total: int) -> None:
            _report_progress(progress, "scanning", PHASES["scanning"] + scan_span * done / max(total, 1))

        try:
            findings = scan_dump(dump_path, progress=scan_progress, entry_frame=entry_frame)
            eager_dump = os.path.join(dump_path, EAGER_DUMP)
            if findings.origin is None and os.path.isdir(eager_dump):
                # The dumped graph stayed finite and the eager run did not (`dumping.dump_replay`): its dump names
                # the op, as the scene's eager re-run does.
                eager = scan_dump(eager_dump, entry_frame=entry_frame)
                if eager.origin is not None:
                    findings = eager
                    findings.extra.setdefault("warnings", []).append(
                        "located in an eager re-run of the step: the dumped graph re-run stayed finite (a dump "
                        "keeps every op's output, and a value at the edge came out finite there)"
                    )
        except ScanError as exc:
            raise ReplayError(f"the replay's dump cannot be scanned: {exc}") from None
        map_cell_files(findings)  # a re-entered notebook ran its cells from files: name the cells
        if pictures:  # the op graph and timeline need the dump, which is removed below
            from pyadapter.pictures.build import attach_bundle_pictures

            attach_bundle_pictures(findings, dump_path, bundle_path)
    finally:
        if not keep:
            shutil.rmtree(dump_path, ignore_errors=True)

    findings.source_kind = "bundle"
    findings.source_path = bundle_path
    findings.bundle = bundle_section(report)
    findings.bundle["origin_from"] = "replay"
    if isinstance(findings.bundle.get("first_huge"), dict):
        map_cell_file_of(findings.bundle["first_huge"])
    _name_the_worker(findings, report)
    if problem is not None:
        _origin_before_the_step(
            findings,
            bundle,
            problem,
            rerun=rerun_pipeline if rerun_pipeline is not None else (report.step or 0) <= RERUN_MAX_STEP,
            rerun_asked=rerun_pipeline is True,
            rerun_timeout=rerun_timeout,
            kept_dump=dump_path if keep else None,
            progress=progress,
        )
    replay_warnings = list(report.warnings)
    if (
        problem is not None
    ):  # the replay's own note on the batch; the origin's message says it (and more) here
        replay_warnings = [w for w in replay_warnings if not w.startswith(BATCH_WARNING_START)]
    warnings = replay_warnings + list(findings.extra.get("warnings", []))
    if report.note:
        warnings.append(report.note)
    findings.extra["warnings"] = warnings
    if keep:
        findings.extra["dump"] = dump_path
    attach_cause(findings, bundle_path)
    _report_progress(progress, "done")
    return findings


def _batch_only_findings(
    bundle: Any, bundle_path: str, problem: BatchProblem, entry_frame: Frame | None, error: str
) -> Findings:
    """Findings from the bundle alone, for a captured batch that holds NaN/Inf whose step could not be replayed:
    the origin is the training call that took the data in, its message names the values and why the step did
    not run. ``findings.bundle["not_replayed"]`` holds the replay's error."""
    from pyadapter.findings import OpRef, TensorHealth

    origin = None
    if entry_frame is not None:
        origin = Finding(
            file=entry_frame.file,
            line=entry_frame.line,
            role="origin",
            op=OpRef(name="the captured batch", type="Placeholder"),
            health=TensorHealth(
                size=problem.size, nan=problem.nan, pos_inf=problem.pos_inf, neg_inf=problem.neg_inf
            ),
            stack=[entry_frame],
            message=f"{problem.describe()}: it was in the data before any TensorFlow op touched it",
        )
    findings = Findings(source_kind="bundle", source_path=bundle_path, origin=origin)
    if origin is not None:
        findings.findings.append(origin)
        code = _source_line(origin.file, origin.line)
        if code is not None:
            findings.extra["origin_code"] = code
    script = bundle.entry_script
    findings.bundle = {
        "path": bundle_path,
        "kind": bundle.kind,
        "step": bundle.step,
        "epoch": bundle.epoch,
        "batch_index": bundle.batch_index,
        "entry_script": str(script) if script is not None else None,
        "reproduced": {},
        "verdicts": {},
        "origin_from": "captured batch",
        "non_finite_batch": problem.to_json(),
        "not_replayed": error,
    }
    findings.extra["warnings"] = [
        f"the step was not replayed ({error}); the data's values are read from the bundle's batch"
    ]
    return findings


def _name_the_worker(findings: Findings, report: ReplayReport) -> None:
    """Multi-worker bundles: say whose data it was, on the origin and in ``extra["workers"]``."""
    from pyadapter.replay.shards import describe_workers

    sentence = describe_workers(report.workers)
    if sentence is None:
        return
    findings.extra["workers"] = {"bad": report.bad_workers(), "sentence": sentence}
    if findings.origin is not None:
        findings.origin.message = f"{findings.origin.message.rstrip('.')}; {sentence}."


def _origin_before_the_step(
    findings: Findings,
    bundle: Any,
    problem: BatchProblem,
    *,
    rerun: bool,
    rerun_timeout: float,
    kept_dump: str | None,
    progress: Progress | None,
    rerun_asked: bool = False,
) -> None:
    """The captured batch already held NaN/Inf: say so on the origin, and (if ``rerun``) re-run the entry
    script under a dump to find the op that made it before the step; not when the arrays given to fit held it,
    unless the re-run was asked for (``rerun_asked``: ``--rerun-pipeline``)."""
    assert findings.bundle is not None
    findings.bundle["non_finite_batch"] = problem.to_json()
    findings.bundle["origin_from"] = "captured batch"
    step = findings.bundle.get("step")
    carried = f"{problem.describe()}, so step {step} is not where it was made"
    replay_origin = findings.origin
    if replay_origin is not None:
        replay_origin.message = f"{carried}: in the step, {replay_origin.message}"
    else:
        findings.extra.setdefault("warnings", []).append(carried)
    held = _held_by_the_arrays_given_to_fit(bundle) if rerun and not rerun_asked else None
    if held is not None:
        # The arrays fit was given hold the bad row (found there by its bytes when the step failed): no op of a
        # pipeline made it, and re-running the program under a dump took 2-10 minutes to say the same, the
        # training call (s40c nb3, s40e p4/p6, s40d p3/p9). The data cause reads where the program made it.
        from pyadapter.replay.callsite import bundle_training_call

        _at_the_training_call(findings, problem, bundle_training_call(bundle), held)
        return
    if not rerun:
        hint = f"; to find where, re-run the script under a dump: `{rerun_command(bundle)}`"
        if isinstance(step, int) and step > RERUN_MAX_STEP:
            hint += (
                f" (or `nanlens locate --rerun-pipeline`: step {step} is past the {RERUN_MAX_STEP} steps "
                "re-run by themselves)"
            )
        if replay_origin is not None:
            replay_origin.message += hint
        return
    rerun_findings = _rerun_and_scan(findings, bundle, rerun_timeout, kept_dump, progress)
    if rerun_findings is None or rerun_findings.origin is None:
        return
    from pyadapter.replay.callsite import bundle_training_call

    _adopt_rerun_origin(findings, rerun_findings, problem, bundle_training_call(bundle))


def _weights_of_fit_s_class_weight(bundle: Any) -> str | None:
    """'the sample weights Keras made of fit's class_weight' when the batch's only NaN/Inf are its sample weights and
    the failing fit call passes ``class_weight=``: Keras made them of the class weights before any op of a pipeline
    (an inverse-log weight of a class with one sample, s42f p7, re-ran the program 4 minutes to say the same)."""
    from pyadapter.capture import records
    from pyadapter.capture.fit_call import MANIFEST_KEY as FIT_CALL

    call = ((bundle.manifest or {}).get("model") or {}).get(FIT_CALL) or {}
    if "class_weight" not in str(call.get("code") or "") and "class_weight" not in _training_statement(
        bundle
    ):
        return None
    try:
        bad = [label for label, value, _ in records.leaves(bundle.batch()) if _holds_non_finite(value)]
    except Exception:  # noqa: BLE001 - a batch that cannot be read: the re-run decides as before
        return None
    return "the class_weight given to fit" if bad == ["sample_weight"] else None


def _training_statement(bundle: Any) -> str:
    """The text of the whole statement of the bundle's training call (a fit call over several lines), read from
    the user's file; "" when it cannot be read (a notebook's cell, a file gone)."""
    import ast

    from pyadapter.replay.callsite import bundle_training_call

    frame = bundle_training_call(bundle)
    if frame is None or frame.cell is not None or not frame.file.endswith(".py"):
        return ""
    try:
        source = Path(frame.file).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ""
    holding = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.stmt)
        and not hasattr(node, "body")
        and node.lineno <= frame.line <= (node.end_lineno or node.lineno)
    ]
    if not holding:
        return ""
    statement = min(holding, key=lambda n: (n.end_lineno or n.lineno) - n.lineno)
    return ast.get_source_segment(source, statement) or ""


def _holds_non_finite(value: Any) -> bool:
    import numpy as np

    return isinstance(value, np.ndarray) and value.dtype.kind == "f" and not bool(np.isfinite(value).all())


def _held_by_the_arrays_given_to_fit(bundle: Any) -> str | None:
    """'index 413 of the array passed to fit' when the bundle's ``fit_rows`` found the batch's first bad row in the
    arrays (or DataFrame) fit was given, by its bytes: the value was in them before any TensorFlow op ran; 'row 156
    of the arrays the dataset was sliced from (...)' when the guard found it, as the batch has it, in the arrays a
    tf.data pipeline was sliced from (``"held"``). None otherwise (a generator, a pipeline that reads files or
    changed the value, a row not found)."""
    from pyadapter.capture import fit_arrays, records

    weighted = _weights_of_fit_s_class_weight(bundle)
    if weighted is not None:
        return weighted
    entry = (bundle.manifest or {}).get(fit_arrays.MANIFEST_KEY)
    if not isinstance(entry, dict) or fit_arrays.check(entry) is not None:
        return None
    sliced = entry.get("of") == fit_arrays.SLICES
    if sliced and entry.get("held") is not True:
        return (
            None  # a pipeline's map functions take the sliced rows: the re-run marks the one given the value
        )
    try:
        element = records.first_bad_element(bundle.batch())
    except Exception:  # noqa: BLE001 - a batch that cannot be read: the re-run decides as before
        return None
    if element is None:
        return None
    index = fit_arrays.index_of_row(entry, element.row, entry.get("of"))
    if index is None:
        return None
    if sliced:
        # The sliced arrays hold the bad row as the batch has it (s42f p3: a sample_weight a left merge made NaN;
        # the re-run under a dump ran past 600 s to say the same).
        return f"row {index} of the arrays the dataset was sliced from (Dataset.from_tensor_slices)"
    return f"index {index} of the array passed to fit"


def _at_the_training_call(
    findings: Findings, problem: BatchProblem, training_call: Frame | None, held: str
) -> None:
    """The origin of a batch whose bad value the arrays given to fit held: the training call, as the re-run's scan
    names it for Keras's own map over those arrays (`_adopt_rerun_origin`)."""
    origin = findings.origin
    if origin is None or training_call is None:
        return
    _mark_at_the_training_call(origin, findings.extra, training_call)
    origin.message = (
        f"{problem.describe()}: it was in the data before any TensorFlow op touched it ({held} holds it, found "
        "there when the step failed); look at how the data was read or built"
    )
    if "sliced from" in held:  # a user who knows the pipeline is re-run by default is told why not here
        origin.message += (
            "; no op of the pipeline made it, so it was not re-run under a dump (`nanlens locate --rerun-pipeline` "
            "re-runs it)"
        )
    place = (origin.file, origin.line, origin.cell)
    findings.findings = [
        origin,
        *(
            f
            for f in findings.findings
            if f is not origin and f.role == "propagated" and (f.file, f.line, f.cell) != place
        ),
    ]


def _mark_at_the_training_call(origin: Finding, extra: dict[str, Any], training_call: Frame) -> None:
    """Move `origin` to the training call's line (``model.fit(...)``), its recorded source line with it."""
    origin.file, origin.line, origin.cell, origin.stack = (
        training_call.file,
        training_call.line,
        training_call.cell,
        [training_call],
    )
    extra.pop("origin_statement", None)
    extra.pop("origin_code", None)
    code = _source_line(training_call.file, training_call.line)
    if code is not None:
        extra["origin_code"] = code


def _rerun_and_scan(
    findings: Findings, bundle: Any, timeout: float, kept_dump: str | None, progress: Progress | None
) -> Findings | None:
    from pyadapter.dump import ScanError, scan_dump

    _report_progress(progress, RERUN_PHASE)
    if kept_dump is not None:
        rerun_dir = os.path.join(kept_dump, "rerun-pipeline")
        os.makedirs(rerun_dir, exist_ok=True)
    else:
        rerun_dir = tempfile.mkdtemp(prefix="nanlens-rerun-dump-")
    warnings = findings.extra.setdefault("warnings", [])
    changed = _program_changed(bundle)
    try:
        result = rerun_entry_script(bundle, rerun_dir, timeout=timeout)
        findings.extra["rerun"] = {
            "command": rerun_command(bundle),
            "seconds": round(result.seconds, 2),
            "stopped_at_step": result.stopped_at_step,
            "exit_code": result.exit_code,
            "error": result.error,
        }
        if kept_dump is not None:
            findings.extra["rerun"]["dump"] = rerun_dir
        if result.error is not None and result.stopped_at_step is None and not os.listdir(rerun_dir):
            warnings.append(f"re-running the input pipeline under a dump failed: {result.error}")
            return None
        if result.error is not None:
            warnings.append(f"re-running the input pipeline under a dump: {result.error}")
        step = findings.bundle.get("step") if findings.bundle else None
        if (
            result.stopped_at_step is not None
            and step is not None
            and result.stopped_at_step != step
            and changed
        ):
            # Run with --trust-entry after an edit (often the fix): a failure at another step is the edited
            # program's own, not the one the bundle caught.
            warnings.append(
                f"the re-run went non-finite at step {result.stopped_at_step}, the bundle at step {step}, and the "
                "program changed since the capture: that failure is the changed program's, not this bundle's, so "
                "its origin is not taken"
            )
            return None
        if result.stopped_at_step is not None and step is not None and result.stopped_at_step != step:
            warnings.append(
                f"the re-run went non-finite at step {result.stopped_at_step}, the bundle at step {step} "
                "(the data came in another order: fit's or the pipeline's shuffle, or unseeded random draws); "
                "its origin is the re-run's"
            )
        _report_progress(progress, RERUN_SCAN_PHASE)
        try:
            rerun = scan_dump(rerun_dir)
            map_cell_files(rerun)  # a notebook's cells ran from files: name the cells
            return rerun
        except ScanError as exc:
            warnings.append(f"the re-run's dump cannot be scanned: {exc}")
            return None
    finally:
        if kept_dump is None:
            shutil.rmtree(rerun_dir, ignore_errors=True)


def _program_changed(bundle: Any) -> bool:
    from pyadapter.replay.trust import changed_since_capture

    script = bundle.entry_script
    return (
        script is not None
        and Path(script).is_file()
        and changed_since_capture(bundle, Path(script).resolve())
    )


# Ops that make no NaN out of finite values (a NaN in their output came in through an input): a difference or a
# product of two finite numbers is finite or infinite, never NaN (nor is a sum or mean of finite numbers: one that
# overflows stays +inf or -inf); moving, joining or choosing values makes none either.
_NO_NEW_NAN = frozenset(
    {
        "Mul",
        "Sum",
        "Mean",
        "Max",
        "Min",
        "Sub",
        "Add",
        "AddV2",
        "AddN",
        "BiasAdd",
        "Neg",
        "Identity",
        "Cast",
        "ConcatV2",
        "Reshape",
        "Transpose",
        "StridedSlice",
        "Slice",
        "GatherV2",
        "Pack",
        "ExpandDims",
        "Squeeze",
        "Maximum",
        "Minimum",
        "Select",
        "SelectV2",
        "Relu",
        "Relu6",
        "Tanh",
        "Sigmoid",
        "Abs",
        "Square",
    }
)


# Sums of products make NaN from finite values only by overflowing both ways at once; fed a batch that holds NaN
# already (which is when `_carried_in` is asked), the NaN came in with it.
_CARRY_PRODUCT_SUMS = frozenset(
    {"MatMul", "_FusedMatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum", "Conv2D", "_FusedConv2D", "Conv3D"}
)


def _carried_in(origin: Finding, problem: BatchProblem) -> bool:
    """The re-run's origin only carried a NaN the captured batch already held: an op of the training step (not of a
    tf.data function, whose graph TensorFlow names ``Dataset_...``) that makes no NaN of finite values, with NaN in
    its output and an input of no recorded health (the step's argument: the batch, as tf.data handed it over from
    arrays in memory, which no op records). An output of Inf only is carried in too when the batch holds Inf (a
    target of np.log(0)): these ops make Inf of finite values only by overflowing, and the batch brought one."""
    graph = origin.op.graph or ""
    carries = origin.op.type in _NO_NEW_NAN or origin.op.type in _CARRY_PRODUCT_SUMS
    if not carries or graph.startswith("Dataset_") or origin.health is None:
        return False
    if origin.health.nan == 0 and not (problem.pos_inf or problem.neg_inf):
        return False
    return any(i.health is None for i in origin.inputs)


def _source_line(path: str, line: int) -> str | None:
    """Line `line` of the user's source file `path` (a regular .py file), or None."""
    import linecache

    if not path.endswith(".py") or not os.path.isfile(path):
        return None
    text = linecache.getline(path, line)
    return text.rstrip("\n") if text else None


def _adopt_rerun_origin(
    findings: Findings, rerun: Findings, problem: BatchProblem, training_call: Frame | None = None
) -> None:
    """Take the re-run's origin when an op in the user's code made the NaN/Inf (e.g. a log in a Dataset.map
    function); when the data held it before any op did, point at where it entered instead: the training call
    (`training_call`, the line of ``model.fit(...)``) when the first op to hold it is one of the model's."""
    from pyadapter.dump.origin import ITERATOR_READ_TYPES, WEAK_ORIGIN_TYPES
    from pyadapter.findings_text import KERAS_ARRAY_MAP

    new = rerun.origin
    assert new is not None and findings.bundle is not None
    made_by_user_code = (
        new.op.type not in WEAK_ORIGIN_TYPES
        and "origin_created_in" not in rerun.extra
        and not _carried_in(new, problem)
    )
    if made_by_user_code:
        findings.bundle["origin_from"] = "input pipeline re-run"
        new.message += f" (found by re-running the script under a dump: {problem.describe()})"
    else:
        from pyadapter.dump.messages import bad_counts

        graph = new.op.graph or ""
        entered = (
            # A map function's argument: what the pipeline handed it (Keras's grab_batch gets the whole arrays).
            f"the re-run of the input pipeline under a dump found {bad_counts(new.health)} in what its map "
            f"function {graph.removeprefix('Dataset_map_')} was given"
            if new.op.type == "Placeholder" and graph.startswith("Dataset_map_")
            else f"{new.op.type} {new.op.name} brought {bad_counts(new.health)} in here, in the re-run under a dump"
        )
        in_the_step = not graph.startswith("Dataset_") and new.op.type not in ITERATOR_READ_TYPES
        # Keras's own map over the arrays given to fit: the re-run's first to hold the bad value may be another
        # call's (a cross-validation loop's predict of an earlier fold, over arrays that hold it too); the arrays
        # reached the captured step through its training call, so that is the line.
        keras_arrays = new.op.type == "Placeholder" and graph == f"Dataset_map_{KERAS_ARRAY_MAP}"
        if (in_the_step or keras_arrays) and training_call is not None:
            if in_the_step:
                # The first op of the step that took the value (a Normalization layer's Sub) is no place to
                # change, and which op that is varies from one re-run to the next (the data's order, a shuffle's,
                # decides whether the iterator's output was recorded): the data entered at the training call,
                # every time.
                entered = (
                    f"the first op to take it, {new.op.type} {new.op.name} at {os.path.basename(new.file)}:"
                    f"{new.line}, got {bad_counts(new.health)} from the batch, in the re-run under a dump"
                )
            _mark_at_the_training_call(new, rerun.extra, training_call)
        new.message = (
            f"{problem.describe()}: it was in the data before any TensorFlow op touched it ({entered}); look at "
            "how the data was read or built"
        )
    replaced = findings.origin
    seen = {(new.file, new.line)}
    kept: list[Finding] = [new]
    for finding in [*rerun.findings, *findings.findings]:
        if finding is new or finding is replaced or (finding.file, finding.line) in seen:
            continue
        if finding.role == "propagated":
            seen.add((finding.file, finding.line))
            kept.append(finding)
    findings.origin = new
    findings.findings = kept
    for key in ("origin_code", "origin_statement", "origin_created_in"):
        findings.extra.pop(key, None)
        if key in rerun.extra:
            findings.extra[key] = rerun.extra[key]
