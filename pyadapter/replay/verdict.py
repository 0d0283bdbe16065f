"""What one replay of a captured step found, and the report of a whole replay (one or both modes).

No TensorFlow here: verdicts are plain records, made by ``step.py`` and printed or serialized by the commands.
JSON has no NaN or Infinity, so non-finite losses are written as the strings "nan", "inf", "-inf".
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

Mode = Literal["graph", "eager"]
MODES: tuple[Mode, ...] = ("graph", "eager")


def json_number(value: float | None) -> float | str | None:
    """A float as JSON allows it: finite numbers as numbers, NaN/Inf as strings."""
    if value is None:
        return None
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def number_from_json(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, str):
        return float(value)  # "nan", "inf", "-inf" parse as floats
    return float(value)


# The graph verdict's words for a guarded step that training ran as plain Python and that cannot be traced (it
# hands its tensors to NumPy: keras.io's actor-critic plays its episode in the step).
NOT_A_GRAPH = "the step is plain Python (training ran it eagerly) and cannot run as a graph"


@dataclass
class StepVerdict:
    """One run of the captured step in one mode: did it produce non-finite values, and where."""

    mode: Mode
    loss: float | None = None  # the step's loss as it returned it; None when the step returned none
    loss_finite: bool | None = None
    gradients_finite: bool | None = None  # None: the gradients were not seen (no optimizer call observed)
    weights_finite: bool | None = None  # the model's variables after the update
    non_finite_gradients: list[str] = field(
        default_factory=list
    )  # variable names whose gradient is non-finite
    non_finite_weights: list[str] = field(default_factory=list)  # variables non-finite after the update
    # Variables whose gradient is finite but too large to square in float32 (|g| > ~1.8e19): the optimizer's
    # squared-gradient state (Adam, RMSprop) goes +Inf from it, as NanGuard's gate judges (`gate_checks`).
    too_large_gradients: list[str] = field(default_factory=list)
    # Model state the forward pass wrote non-finite (BatchNormalization's moving variance), weights finite or not.
    non_finite_state: list[str] = field(default_factory=list)
    # Those of non_finite_state the step itself wrote after its optimizer update (a center loss's centers), not
    # its forward pass.
    written_after_update: list[str] = field(default_factory=list)
    error: str | None = (
        None  # one line when the step raised (e.g. a tf.debugging.check_numerics in user code)
    )
    seconds: float = 0.0
    # Run under a tfdbg2 dump (locate). Dumping turns off some graph rewrites (op fusion), so such a run can
    # differ from a plain graph run, e.g. relu(NaN) gives NaN unfused but 0 in a fused MatMul+Relu.
    dumped: bool = False
    # Stateful random ops in the replayed graph ("RandomStandardNormal at wgan_gp.py:73"): a re-run draws other
    # numbers than training did (`pyadapter.replay.stateful_random`).
    stateful_random: list[str] = field(default_factory=list)
    # Keras's sparse update (Adagrad, RMSprop on an Embedding's IndexedSlices gradients) raised on the step's
    # non-finite gradients ("indices[97] = 188 is not in [0, 129)"), which training never applied: the step was run
    # again with those gradients dense, which gives the same verdict (`pyadapter.replay.step.run_step`).
    applied_dense: bool = False

    @property
    def label(self) -> str:
        return f"{self.mode} (dumped)" if self.dumped else self.mode

    @property
    def reproduced(self) -> bool:
        """The step made something non-finite (or raised on a numeric check)."""
        if self.error is not None:
            return _is_numeric_error(self.error)
        return (
            self.loss_finite is False
            or self.gradients_finite is False
            or self.weights_finite is False
            or bool(self.too_large_gradients)
            or bool(self.non_finite_state)
        )

    def describe(self) -> str:
        """One line for a person: 'graph: NaN reproduced — loss nan, 3 gradients and 4 weights non-finite'."""
        from pyadapter.findings_text import verdict_sentence  # one wording for the CLI, the report and this

        return verdict_sentence(self.to_json())

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "reproduced": self.reproduced,
            "loss": json_number(self.loss),
            "loss_finite": self.loss_finite,
            "gradients_finite": self.gradients_finite,
            "weights_finite": self.weights_finite,
            "non_finite_gradients": list(self.non_finite_gradients),
            "non_finite_weights": list(self.non_finite_weights),
            **({"too_large_gradients": list(self.too_large_gradients)} if self.too_large_gradients else {}),
            **({"non_finite_state": list(self.non_finite_state)} if self.non_finite_state else {}),
            **(
                {"written_after_update": list(self.written_after_update)} if self.written_after_update else {}
            ),
            "error": self.error,
            "seconds": round(self.seconds, 3),
            "dumped": self.dumped,
            **({"stateful_random": list(self.stateful_random)} if self.stateful_random else {}),
            **({"applied_dense": True} if self.applied_dense else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepVerdict:
        return cls(
            mode=data["mode"],
            loss=number_from_json(data.get("loss")),
            loss_finite=data.get("loss_finite"),
            gradients_finite=data.get("gradients_finite"),
            weights_finite=data.get("weights_finite"),
            non_finite_gradients=list(data.get("non_finite_gradients", [])),
            non_finite_weights=list(data.get("non_finite_weights", [])),
            too_large_gradients=[str(v) for v in data.get("too_large_gradients", [])],
            non_finite_state=[str(v) for v in data.get("non_finite_state", [])],
            written_after_update=[str(v) for v in data.get("written_after_update", [])],
            error=data.get("error"),
            seconds=float(data.get("seconds", 0.0)),
            dumped=bool(data.get("dumped", False)),
            stateful_random=[str(v) for v in data.get("stateful_random", [])],
            applied_dense=data.get("applied_dense") is True,
        )


def _non_finite_count(verdict: StepVerdict) -> int:
    return (
        (verdict.loss_finite is False)
        + len(verdict.non_finite_gradients)
        + len(verdict.non_finite_weights)
        + len(verdict.too_large_gradients)
    )


def _fusion_note(graph: StepVerdict, eager: StepVerdict) -> str | None:
    """Both modes reproduce, the graph run with fewer non-finite values (a finite loss and one gradient, where eager
    has a NaN loss and every gradient): TensorFlow's graph rewrites fuse a MatMul with its bias and ReLU on CPU,
    and the fused ReLU gives 0 for NaN where relu(NaN) is NaN eagerly. Said so the two verdicts do not read as two
    failures. None when they agree."""
    if _non_finite_count(graph) >= _non_finite_count(eager):
        return None
    return (
        "Both modes reproduce it, graph mode with fewer non-finite values than eager: the compiled graph runs "
        "some ops fused (on CPU a MatMul with its bias and ReLU, and the fused ReLU turns NaN into 0), so values "
        "after them can stay finite. The graph run computes as training's compiled step did; the eager run "
        "shows the NaN op by op."
    )


def _is_numeric_error(message: str) -> bool:
    # tf.debugging.check_numerics / assert_all_finite raise InvalidArgumentError naming NaN or Inf.
    return re.search(r"\b(nan|inf|infinity)\b", message, re.IGNORECASE) is not None


@dataclass
class WorkerVerdict:
    """One worker's shard of a multi-worker bundle, replayed alone on this machine (eager)."""

    worker: int
    task: str  # "worker:1", as TF_CONFIG names it
    rows: int
    reproduced: bool  # its own data makes the step non-finite
    summary: str  # the step verdict in one line
    seen_at_capture: bool  # NanGuard saw this worker's own loss/gradients non-finite during training

    def to_json(self) -> dict[str, Any]:
        return {
            "worker": self.worker,
            "task": self.task,
            "rows": self.rows,
            "reproduced": self.reproduced,
            "summary": self.summary,
            "seen_at_capture": self.seen_at_capture,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WorkerVerdict:
        return cls(
            worker=int(data["worker"]),
            task=str(data.get("task", f"worker:{data['worker']}")),
            rows=int(data.get("rows", 0)),
            reproduced=bool(data.get("reproduced")),
            summary=str(data.get("summary", "")),
            seen_at_capture=bool(data.get("seen_at_capture")),
        )


@dataclass
class ReplayReport:
    """A replay of one bundle: which step, and the verdict of each mode that ran."""

    bundle: str
    entry_script: str
    step: int | None = None
    epoch: int | None = None  # 0-based, as Keras counts
    batch_index: int | None = None
    kind: str | None = None  # "keras_fit" or "custom_loop"
    captured: str | None = None  # what the guard saw at capture time, one line
    # How many gradients the guard saw non-finite at capture (None: not judged, as under a LossScaleOptimizer).
    captured_gradients: int | None = None
    # Training compiled its step with XLA (jit_compile=True); replays run it without (a dump has no XLA kernels).
    trained_with_xla: bool = False
    # Optimizers the step updates (a GAN's two): training held a failing update back, a replay applies each in turn.
    optimizers: int = 1
    verdicts: dict[str, StepVerdict] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # Batch leaves that hold NaN/Inf before the step runs ("x: 3 NaN of 512"): the data is the origin.
    non_finite_inputs: list[str] = field(default_factory=list)
    # Multi-worker bundles: each worker's shard replayed alone (`WorkerVerdict`), in worker order.
    workers: list[WorkerVerdict] = field(default_factory=list)
    # How the step was brought back, one line: rebuilt from the bundle, or by re-entering the user's program.
    route: str = ""
    # The batch rows the origin op's NaN/Inf came from (`pyadapter.cause.rows.BadRows.to_json`), or None.
    bad_rows: dict[str, Any] | None = None
    # Where the step's values first grew huge, for an overflow inside the optimizer's update
    # (`pyadapter.replay.rowvalues.FirstHuge.to_json`), or None.
    first_huge: dict[str, Any] | None = None

    @property
    def reproduced(self) -> dict[str, bool]:
        return {mode: verdict.reproduced for mode, verdict in self.verdicts.items()}

    def where(self) -> str:
        """'step 3 (epoch 0, batch 3; counting from 0)': the same words NanGuard's stop message and the bundle use."""
        text = f"step {self.step}"
        if self.epoch is not None:
            text += f" (epoch {self.epoch}, batch {self.batch_index}; counting from 0)"
        return text

    @property
    def note(self) -> str | None:
        """What the comparison of modes says, when both ran and disagree: a finding in itself."""
        graph, eager = self.verdicts.get("graph"), self.verdicts.get("eager")
        stateful = [op for v in self.verdicts.values() for op in v.stateful_random]
        if stateful:
            from pyadapter.replay.stateful_random import note, note_reproduced

            found = list(dict.fromkeys(stateful))
            # Reproduced all the same, from other draws: a DCGAN's re-run found 1 -inf where training's step
            # had 4, and the counts it printed differed from the scene's without a word.
            text = (
                note_reproduced(found) if all(v.reproduced for v in self.verdicts.values()) else note(found)
            )
            return text[0].upper() + text[1:] + "."
        if graph is not None and graph.dumped and graph.reproduced and self.captured_gradients:
            # By name once, as the guard counts training's (three unnamed tf.Variables are one "Variable" there:
            # "3 against 1" was put down to fusion in a GP with no MatMul, s42d p5).
            dumped = len(dict.fromkeys(graph.non_finite_gradients))
            if dumped > self.captured_gradients and self.optimizers > 1:
                return self._several_optimizers_note("dumped re-run", dumped)
            if dumped > self.captured_gradients and self.trained_with_xla:
                return (
                    f"The dumped re-run has more non-finite gradients than training had ({dumped} against "
                    f"{self.captured_gradients}): training compiled its step with XLA (jit_compile=True), whose fused "
                    "kernels compute some values differently, and every replay runs the step without XLA (a dump "
                    "has no XLA kernels). The origin is the same op; the counts differ."
                )
            if dumped > self.captured_gradients:
                return (
                    f"The dumped re-run has more non-finite gradients than training had ({dumped} against "
                    f"{self.captured_gradients}): under the dump TensorFlow runs the graph's ops unfused, while "
                    "training's compiled step fuses some (on CPU a MatMul with its bias and ReLU, and the fused "
                    "ReLU turns NaN into 0). The origin is the same; `nanlens replay --graph` computes as training did."
                )
        if graph is None and eager is not None and eager.reproduced and self.captured_gradients:
            # `replay --eager` alone: more non-finite gradients than training saw, with nothing to compare them to,
            # read as a different failure ("loss nan, 6 gradients" where training had a finite loss and 2).
            counted = len(dict.fromkeys(eager.non_finite_gradients))
            if counted > self.captured_gradients and self.optimizers > 1:
                return self._several_optimizers_note("eager run", counted)
            if counted > self.captured_gradients:
                return (
                    f"The eager run has more non-finite gradients than training had ({counted} against "
                    f"{self.captured_gradients}): eager execution runs every op on its own, while training's compiled "
                    "step fuses some (on CPU a MatMul with its bias and ReLU, and the fused ReLU turns NaN into 0). "
                    "The origin is the same; `nanlens replay --graph` computes as training did."
                )
        if graph is None or eager is None:
            return None
        if (graph.error or "").startswith(NOT_A_GRAPH):
            return None  # the graph verdict says why it has none; training ran the step eagerly too
        if graph.reproduced and eager.reproduced and not graph.dumped:
            return _fusion_note(graph, eager)
        if graph.reproduced == eager.reproduced:
            return None
        if graph.reproduced:
            return (
                "The NaN reproduces only in graph mode: the traced graph computes something eager execution "
                "does not (grappler rewrites, autograph control flow, or code that runs only at trace time)."
            )
        if graph.dumped:
            # Training's own graph may well reproduce it (a Cholesky of a matrix only just not positive definite
            # did): the dump is what ran differently, so "graph mode" is not to blame.
            return (
                "The NaN reproduces in eager mode but not in the dumped graph replay: a dump runs the graph with "
                "every op's output kept, so a borderline value (a matrix only just not positive definite, a sum at "
                "float32's edge) can come out on the other side; `nanlens replay --graph` runs the step as training "
                "compiled it, and a debugger session (eager) shows it."
            )
        return (
            "The NaN reproduces only in eager mode: graph mode computes it differently (op fusion or "
            "constant folding), so a debugger session will show it but a dump of the graph may not."
        )

    def _several_optimizers_note(self, run: str, counted: int) -> str:
        # A GAN's discriminator update made NaN weights: training held it back, so the generator's half stayed
        # finite; a replay applies every update of the step, and the next one reads those NaN weights. Fused ops
        # were said to be the reason, and "--graph computes as training did", which counted the same.
        return (
            f"The {run} has more non-finite gradients than training had ({counted} against "
            f"{self.captured_gradients}): the step updates {self.optimizers} optimizers, and the replay applies each "
            "update in turn where training held the failing one back, so a later update reads the weights an earlier "
            "one made non-finite. The origin is the first op that made NaN/Inf; the later counts follow from it."
        )

    def verdicts_json(self) -> dict[str, Any]:
        return {mode: verdict.to_json() for mode, verdict in self.verdicts.items()}

    def to_json(self) -> dict[str, Any]:
        return {
            "bundle": self.bundle,
            "entry_script": self.entry_script,
            "step": self.step,
            "epoch": self.epoch,
            "batch_index": self.batch_index,
            "kind": self.kind,
            "captured": self.captured,
            "captured_gradients": self.captured_gradients,
            "trained_with_xla": self.trained_with_xla,
            "optimizers": self.optimizers,
            "reproduced": self.reproduced,
            "verdicts": self.verdicts_json(),
            "note": self.note,
            "non_finite_inputs": list(self.non_finite_inputs),
            "warnings": list(self.warnings),
            "workers": [w.to_json() for w in self.workers],
            "route": self.route,
            "bad_rows": self.bad_rows,
            "first_huge": self.first_huge,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ReplayReport:
        return cls(
            bundle=str(data["bundle"]),
            entry_script=str(data.get("entry_script", "")),
            step=data.get("step"),
            epoch=data.get("epoch"),
            batch_index=data.get("batch_index"),
            kind=data.get("kind"),
            captured=data.get("captured"),
            captured_gradients=(
                n
                if isinstance(n := data.get("captured_gradients"), int) and not isinstance(n, bool)
                else None
            ),
            trained_with_xla=data.get("trained_with_xla") is True,
            optimizers=n
            if isinstance(n := data.get("optimizers"), int) and not isinstance(n, bool) and n > 0
            else 1,
            verdicts={mode: StepVerdict.from_json(v) for mode, v in data.get("verdicts", {}).items()},
            warnings=list(data.get("warnings", [])),
            non_finite_inputs=list(data.get("non_finite_inputs", [])),
            workers=[WorkerVerdict.from_json(w) for w in data.get("workers", [])],
            route=str(data.get("route", "")),
            bad_rows=data.get("bad_rows") if isinstance(data.get("bad_rows"), dict) else None,
            first_huge=data.get("first_huge") if isinstance(data.get("first_huge"), dict) else None,
        )

    def bad_workers(self) -> list[str]:
        """Tasks ("worker:1") whose own shard makes the step non-finite when replayed alone."""
        return [w.task for w in self.workers if w.reproduced]
