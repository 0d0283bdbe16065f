"""NanGuard: the Keras callback that stops (or skips) a training step whose loss or gradients are not finite.

``model.fit(..., callbacks=[NanGuard("captures")])`` is the only change. At ``on_train_begin`` the callback swaps
``model.train_function`` for a guarded one (`pyadapter.capture.train_function`: the update runs only if the loss
and gradients are finite, and healthy steps pull nothing to Python but one boolean). On a failing step the
callback writes a capture bundle (`pyadapter.capture.bundle`) with the batch, the model and optimizer state from
before the update (it was not applied), RNG states and loss history, then stops training (``on_nan="stop"``) or
goes on (``"skip"``), as `pyadapter.capture.policy` decides for both guards.

It works for Sequential, functional and subclassed models, custom ``train_step``s that call ``super()`` or the
optimizer, ``jit_compile`` on or off, ``steps_per_execution`` (run as single steps) and MirroredStrategy.
"""

from __future__ import annotations

import collections
import math
import re
import sys
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from pyadapter.capture import (
    atscene,
    batchcodec,
    bundle_format,
    cluster,
    cluster_bundle,
    datasource,
    fit_arrays,
    fit_call,
    gate,
    keras_fixes,
    keras_lines,
    keras_state,
    learning_rate,
    notebook,
    rng,
    snapshot,
    storage,
)
from pyadapter.capture import history as step_history
from pyadapter.capture import window as step_window
from pyadapter.capture import writer as bundle_writer
from pyadapter.capture.options import GuardOptions
from pyadapter.capture.policy import Attempt, FailurePolicy, write_located
from pyadapter.capture.train_function import (
    STEPS_PER_EXECUTION_NOTE,
    GuardedTrainFunction,
    LegacyGuardedTrainFunction,
    cached_functions,
    model_optimizers,
    primary_optimizer,
)
from pyadapter.capture.verdict import Failure, NonFiniteReport
from pyadapter.findings_text import WEIGHTS_HELD_IT

# Imported here by name elsewhere (pyadapter.replay.reentry, tests): the guarded function moved to train_function.
__all__ = ["GuardedTrainFunction", "NanGuard", "model_optimizers", "primary_optimizer"]


def _this_fit() -> fit_call.FitCall | None:
    """Which fit of the program this is (`pyadapter.capture.fit_call`), with its notebook cell in a kernel."""
    found = fit_call.calling_line()
    if found is None:
        return None
    path, line, code = found
    where = notebook.cell_location(path, line)
    if where is None:
        return fit_call.TRAINING.begin(code)
    run_cell = fit_call.running_cell(notebook.cell_location)
    return fit_call.TRAINING.begin(code, where[1], notebook.execution_count(), run_cell)


class NanGuard(keras.callbacks.Callback):
    """Keras callback: check every training step for NaN/Inf inside the compiled step; on a failing step do not
    apply the update, write a capture bundle, then stop training (default) or skip the step.

    Args:
        capture_dir: where bundles go (``capture_dir/<run>-step<N>/``); created if missing. The default, ``.nanlens/captures``, is a folder the editor watches.
        on_nan: ``"stop"`` (set ``model.stop_training``; fit returns after this batch) or ``"skip"``.
        run_name: bundle name prefix; default ``<script>-<YYYYmmdd-HHMMSS>``.
        check_weights: also check the trainable weights after each applied update (catches an optimizer or
            learning rate that makes finite gradients produce NaN/Inf weights). Of a weight the update wrote only
            some rows of (an embedding table under SGD), those rows.
        protect_weights: keep a copy of the weights and optimizer state during the update so that such an update
            is undone too (costs roughly one copy of the model per step; off by default). Without it such an
            update goes through and is then taken back from the window (below): the state the step started from
            is re-made from the window's newest copy with the steps since re-run, so training does not go on, and
            the bundle does not start, from non-finite weights. With ``window=0`` too, the bundle says it holds
            the weights after the update.
        max_bundles: bundles written at most per guard (skip mode can see many failing steps).
        max_consecutive_skips: in skip mode, stop after this many non-finite steps in a row (None: never).
        history_size: how many recent steps the bundle's ``loss_history`` records (loss, gradient norm, weight
            norm, update/weight ratio, max |prediction|; see `pyadapter.capture.history`), measured inside the
            compiled step and read only on a failing step. 0: no history, and no extra ops in the step.
        locate: on a failing step, before stopping or skipping, re-run it once right here (from the state before
            it, nothing kept) under a FULL_HEALTH dump and write the origin into the bundle (``findings.json``),
            so the editor marks the line at once, whatever the program's shape. Costs a few seconds, on failure
            only. Off (or ``NANLENS_LOCATE_AT_SCENE=0`` in the environment): ``nanlens locate BUNDLE`` replays the
            bundle later instead.
        window: keep the training state at least this many steps back and the batches since
            (`pyadapter.capture.window`: two device-side copies of the weights and optimizer state, taken every
            ``window`` steps, or up to 4x further apart (more where those steps take under 2 s) where a copy would
            cost more than 0.5% of the training time (``guard.window_copy_every``), and references to the batches
            since the older copy), so that a
            failing step's bundle holds the steps that led to it; for a
            divergence the guard then replays them at lower learning rates (graph mode, at most a minute) and the
            fix proposes the largest that kept them finite. 0: off (one model copy and the batches less).
        verbose: print the one-paragraph report to stderr on a failing step (and, once, what the guard does with
            ``steps_per_execution`` > 1).

    After training, ``guard.failures`` lists what happened and ``guard.last_bundle`` is the newest bundle.
    """

    def __init__(
        self,
        capture_dir: str | Path = ".nanlens/captures",
        on_nan: str = "stop",
        *,
        run_name: str | None = None,
        check_weights: bool = True,
        protect_weights: bool = False,
        max_bundles: int = 5,
        max_consecutive_skips: int | None = 100,
        history_size: int = step_history.DEFAULT_SIZE,
        locate: bool = True,
        window: int = step_window.DEFAULT_SIZE,
        verbose: bool = True,
    ) -> None:
        super().__init__()
        self.options = GuardOptions.of(locals())  # validated there, as guard_step's are
        self.policy = FailurePolicy(self.options)
        self.window_size = window
        self._window: step_window.WindowKeeper | None = None
        self._window_model: Any = lambda: None
        self.capture_dir = self.options.capture_dir
        self.on_nan = on_nan
        self.run_name = run_name  # set at on_train_begin when None (all workers must agree on it)
        self.config = self.options.gate_config
        self.max_bundles = max_bundles
        self.max_consecutive_skips = max_consecutive_skips
        self.locate = locate
        self.verbose = verbose
        self.failures: list[Failure] = self.policy.failures
        self._history: collections.deque = collections.deque(maxlen=history_size)
        self._function: GuardedTrainFunction | None = None
        self._step = 0
        self._epoch: int | None = None
        self._batch = 0
        self._cluster: cluster.ClusterInfo | None = None
        # The step NanGuard stopped training at, until a new fit: a step after it means the program went on (a
        # train_on_batch loop whose stop check breaks only its inner loop).
        self._stopped_at: int | None = None
        keras_fixes.install_multiworker_fit_fix()  # without it Keras 3 fit fails under MultiWorkerMirroredStrategy

    @property
    def last_bundle(self) -> Path | str | None:
        return self.policy.last_bundle

    @property
    def window_copy_every(self) -> int | None:
        """Steps between the window's state copies now: ``window``, or more once copies would cost over 0.5% of
        the training time (see `pyadapter.capture.window`); None while the window is off."""
        keeper = self._window
        return keeper.copy_every if keeper is not None and keeper.enabled else None

    # ---- both Keras lines ----
    # One NanGuard class serves Keras 3 and tf_keras (Keras 2, TF_USE_LEGACY_KERAS=1): it stays the Keras 3
    # Callback it always was (so Keras 3 fit sees no change) and also answers what tf_keras's CallbackList asks of
    # a callback, which its own Callback base would have answered. A per-line subclass chosen in set_model would
    # come too late (tf_keras asks these questions while building its CallbackList, before set_model), and making
    # it a tf_keras Callback subclass would import tf_keras where it may be absent. The line is then told from the
    # model at on_train_begin, and tf_keras specifics live in `pyadapter.capture.legacy_keras`.

    _supports_tf_logs = True  # tf_keras: no per-batch hook reads logs, so they need no conversion to numpy

    def _implements_train_batch_hooks(self) -> bool:
        return False  # no per-batch hook: tf_keras then keeps its fast path, as Keras 3 does

    def _implements_test_batch_hooks(self) -> bool:
        return False

    def _implements_predict_batch_hooks(self) -> bool:
        return False

    def set_model(self, model: Any) -> None:
        if model is not None:  # a raw tf.Module or other non-Keras object: one line saying what fits
            keras_lines.check_model(model)
        super().set_model(model)
        if self.on_nan == "skip":
            _go_first(self, sys._getframe(1))

    # ---- Keras callback hooks (no per-batch hook: Keras keeps dispatching batch callbacks asynchronously) ----

    def on_train_begin(self, logs: dict | None = None) -> None:
        model = self.model
        line = keras_lines.check_model(model)
        if not model_optimizers(model):
            raise gate.GuardError("NanGuard needs a compiled model with an optimizer")
        keras_lines.check_same_line([model, *model_optimizers(model)], "NanGuard")
        function_class = LegacyGuardedTrainFunction if line == keras_lines.TF_KERAS else GuardedTrainFunction
        self._cluster = cluster.cluster_of(model.distribute_strategy)
        if self.run_name is None:
            if self._cluster is not None:
                # All workers must name the bundle alike: the chief's clock decides.
                now = time.time() if self._cluster.is_chief else 0.0
                stamp = cluster.WorkerChannel(model.distribute_strategy).sum(np.array([now]))[0]
                self.run_name = snapshot.default_run_name(float(stamp))
            else:
                self.run_name = snapshot.default_run_name()
        keras_function = model.train_function
        if isinstance(keras_function, GuardedTrainFunction):  # left installed by a fit that raised
            keras_function = keras_function.keras_function
        restore_metrics = self.on_nan == "skip"
        # The window needs one device's batches and state: not under several replicas.
        keep = (
            self.window_size > 0 and model.distribute_strategy.num_replicas_in_sync == 1 and not self._cluster
        )
        if not keep:
            self._window = None
        elif self._window is not None and self._window_model() is model:
            self._window.restart()  # the same model's buffers and compiled copy serve the next fit
        else:
            self._window = step_window.WindowKeeper(
                self.window_size,
                lambda: [*keras_state.state_variables(model), *self._written_by_hand()],
                frozen=lambda: keras_lines.frozen_weights(model),
            )
            self._window_model = weakref.ref(model)
        key = function_class.key(model, self.config, restore_metrics, keep)
        per_model = cached_functions(model)
        function = per_model.get(key)
        if function is None or function.keras_function is not keras_function:
            # New, or the model was compiled again since (Keras then builds a new train function): retrace.
            function = per_model[key] = function_class(model, self.config, restore_metrics, keep)
        function.keras_function = keras_function
        function.guard = self
        # A loop of train_on_batch whose program calls on_train_begin itself: its training call is the line that
        # calls train_on_batch, known at the first step (`GuardedTrainFunction.__call__`), not this one.
        by_fit = fit_call.keras_fit_on_stack()
        function.fit_call = _this_fit() if by_fit else None
        function.find_fit_call = None if by_fit else _this_fit
        function.fit_input = fit_call.fit_input_kind()
        self._function = function
        model.train_function = function
        if function.steps_per_execution > 1 and self.verbose and not getattr(self, "_said_executions", False):
            self._said_executions = True
            print(
                STEPS_PER_EXECUTION_NOTE.format(n=function.steps_per_execution), file=sys.stderr, flush=True
            )
        self._step = int(primary_optimizer(model).iterations.numpy())
        function.first_step = self._step
        self._continue_history(model)
        self.policy.passed()  # a new fit starts a new run of failures
        self._stopped_at = None
        if self._window is not None:
            keras_state.build_own_optimizer(model)
            self._window.start(self._step)

    def _continue_history(self, model: keras.Model) -> None:
        """A guard made for each fit of one model (``for epoch in ...: model.fit(..., epochs=1,
        callbacks=[NanGuard()])`` with the program's own rate decay) starts from the steps the earlier guards of
        that model recorded: with one fit's steps alone, a rate the program raised between fits went unseen, and the
        advice ("try 0.0374") could not be followed, the program's formula raising it again."""
        earlier = _MODEL_HISTORIES.get(model)
        if earlier is not None and earlier is not self._history and not self._history:
            self._history.extend(entry for entry in earlier if entry.step < self._step)
        try:
            _MODEL_HISTORIES[model] = self._history
        except TypeError:  # a model that takes no weak reference: each guard keeps its own steps
            pass

    def on_train_end(self, logs: dict | None = None) -> None:
        if self._function is not None:
            self._function.uninstall()
        self._function = None
        self._say_after_the_progress_bar()

    def _say_after_the_progress_bar(self) -> None:
        """Keras ends the epoch after the stopped step: its progress line ("loss: nan"), History and CSVLogger
        count the refused step's loss, and are read last, as "the guard did not work". One line after them says
        what that loss is and which weights the model holds."""
        failures = self.policy.failures
        if not self.verbose or not failures or (self.params or {}).get("verbose", 1) == 0:
            return
        failure = failures[-1]
        if failure.action != "stopped":
            return
        report = failure.report
        if report.update_applied and not report.update_taken_back:
            held = "its update was applied"
        else:
            held = (
                f"its update was not applied, so the model holds its weights from before step {failure.step}"
            )
            # Keras validates the stopped epoch at those weights: a NaN there reads as "the guard did not work",
            # when it says the weights had gone bad before the step (a raw scale below 0, weights at 1e16).
            # Not when an earlier epoch's validation was already non-finite beside finite steps: that was said,
            # and it is the validation data's.
            if not getattr(self, "_said_validation", False):
                held += _validated_at_those_weights(getattr(self, "_epoch_logs", None), failure.cause)
        where = f"; bundle: {failure.bundle}" if failure.bundle is not None else ""
        # A finite loss with NaN gradients (a fused ReLU hides the NaN from the forward pass): "the non-finite step"
        # read as a NaN loss that the progress line does not show.
        # Only a loss the guard read is known finite: a LossScaleOptimizer's step or a per-sample (vector) loss
        # is judged on its gradients alone, and Keras then shows "loss: nan" beside "its loss was finite".
        what = (
            "the non-finite step NanGuard stopped at"
            if report.loss or not report.gradients
            else "the step NanGuard stopped at (its loss was finite, its gradients were not)"
            if "loss" in report.checked
            else "the step NanGuard stopped at (its gradients were not finite)"
        )
        print(
            f"NanGuard: the loss Keras shows above (and History, CSVLogger keep) counts step {failure.step}, "
            f"{what}: {held}{where}",
            file=sys.stderr,
            flush=True,
        )

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._epoch = epoch
        self._epoch_logs: dict | None = None
        self._batch = 0
        self._epoch_steps = [0, 0]  # passed, failed

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        """An epoch whose every step was skipped trained on nothing: Keras's means of no batch read 0, a perfect
        loss that ModelCheckpoint(save_best_only) saved and EarlyStopping(restore_best_weights) restored, blown-up
        weights and all. Its training metrics are NaN instead (no step counted); in skip mode NanGuard goes first
        among the callbacks (`_go_first`), so every callback reads them so.

        Validation is not a training step and is not gated, but a NaN/Inf val_loss beside finite training steps
        is said once: EarlyStopping and ModelCheckpoint on val_loss then keep the first epoch's weights without a
        word (Keras counts a NaN as the best value)."""
        self._epoch_logs = dict(logs or {})
        passed, failed = getattr(self, "_epoch_steps", (0, 0))
        if logs and failed and not passed and self.on_nan == "skip":
            trained = [k for k, v in logs.items() if not k.startswith("val_") and isinstance(v, (int, float))]
            for name in trained:
                logs[name] = math.nan
            if self.verbose and trained:
                print(
                    f"NanGuard: every step of epoch {epoch} was skipped ({failed}): its training metrics are NaN, "
                    "not the 0 of an empty mean, so callbacks that monitor them see no improvement",
                    file=sys.stderr,
                    flush=True,
                )
        training = logs.get("loss") if logs else None
        if not self.verbose or not logs or failed or not isinstance(training, (int, float)):
            return
        if not math.isfinite(float(training)):
            if passed and not getattr(self, "_said_epoch_mean", False):
                self._said_epoch_mean = True
                self._say_epoch_mean_overflowed(epoch, float(training))
            return
        not_finite = _non_finite_metrics(logs)
        # A metric NaN in training too, beside a finite loss and steps that all passed: the metric's own arithmetic
        # (0 / 0 in its update_state or result), not the data or the model.
        metrics = [name for name in not_finite if not name.startswith("val_") and name != "loss"]
        bad = [name for name in not_finite if name.startswith("val_") and name[len("val_") :] not in metrics]
        val_loss = logs.get("val_loss")
        losses = "the loss and every training step were"
        if isinstance(val_loss, (int, float)) and math.isfinite(float(val_loss)) and bad:
            # A validation metric alone (val_loss finite): the model and the validation data gave a finite loss,
            # so the metric's own arithmetic made it (a precision of 0/0 when nothing is predicted positive).
            metrics += bad
            bad = []
            losses = "the loss, val_loss and every training step were"
        if metrics and not getattr(self, "_said_metric", False):
            self._said_metric = True
            self._end_progress_line()
            print(
                f"NanGuard: the metric {', '.join(metrics)} is not finite at epoch {epoch} while {losses}: the "
                "metric computes it (a division by a count that can be 0 in the metric's code), not the model or "
                "the data; callbacks that monitor it cannot compare it",
                file=sys.stderr,
                flush=True,
            )
        if bad and not getattr(self, "_said_validation", False):
            self._said_validation = True
            self._end_progress_line()
            print(
                f"NanGuard: {', '.join(bad)} is not finite at epoch {epoch} while the training steps were: "
                f"{self._validation_said()}; callbacks that monitor it (EarlyStopping, ModelCheckpoint, "
                "ReduceLROnPlateau) cannot compare it",
                file=sys.stderr,
                flush=True,
            )

    def _validation_said(self) -> str:
        """Where the validation arrays hold NaN/Inf (read once, when a val_loss is first not finite: a target
        encoding that maps categories unseen in training to NaN, s38e p9), or that they hold none; a dataset or
        generator is not read (that would run the pipeline again)."""
        try:
            given = fit_arrays.validation_arrays(self.model)
            places = fit_arrays.non_finite_places(*given) if given is not None else None
        except Exception:  # a message must not break training
            places = None
        if places:
            return "the validation data holds NaN/Inf: " + "; ".join(places)
        if places == []:
            return (
                "the validation arrays are finite, so the model makes it only on them (inputs outside the range "
                "of the training data: unseen categories, larger values)"
            )
        return (
            "the validation data (x or y of validation_data / validation_split) holds NaN/Inf, or the model makes "
            "it only there"
        )

    def _end_progress_line(self) -> None:
        """Keras's progress bar (stdout) is mid-line, with no newline until the epoch ends (its logger's
        on_epoch_end runs after NanGuard's): a line printed now would be glued to it ("loss: 1.2432NaN Lens:
        locating ...", a val_loss message a user never saw inside the bar)."""
        if self.verbose and (self.params or {}).get("verbose") in (1, "auto"):
            print(file=sys.stderr, flush=True)

    def _say_epoch_mean_overflowed(self, epoch: int, shown: float) -> None:
        """The epoch's loss Keras shows is inf or NaN while every step's loss was finite: Keras's running sum of
        the epoch's losses overflowed float32 (losses of 3e36 on targets in nanoseconds, 1.7e18). No step failed,
        so no bundle; without a word the user saw "loss: inf" with the guard on and nothing from it."""
        largest: tuple[int, float] | None = None
        for entry in list(self._history):
            try:
                value = float(np.asarray(entry.loss).item()) if entry.loss is not None else None
            except (TypeError, ValueError):
                value = None
            if (
                value is not None
                and math.isfinite(value)
                and (largest is None or abs(value) > abs(largest[1]))
            ):
                largest = (entry.step, value)
        at = f" (up to {largest[1]:.3g}, at step {largest[0]})" if largest is not None else ""
        print(
            f"NanGuard: the loss Keras shows for epoch {epoch} is {shown} while every step's loss was finite{at}: "
            "Keras's running mean of the epoch's losses overflowed float32 (max 3.4e38). No step failed, so no "
            "bundle; losses that large come from unscaled targets or features (values in the millions or more): "
            "scale them",
            file=sys.stderr,
            flush=True,
        )

    # ---- per step, called by GuardedTrainFunction ----

    def _step_raised(self, error: tf.errors.OpError) -> None:
        """Says that an op of the step raised (a singular matrix's MatrixSolve, a failed Cholesky, the program's own
        check_numerics): the traceback passes through NanGuard's train function, which reads as NanGuard's crash,
        and no bundle is written (a step that raises hands back no batch)."""
        if not self.verbose:
            return
        message = (error.message or "").strip().splitlines()
        said = next((line for line in reversed(message) if line and not line.lstrip().startswith("[[")), "")
        # The words of NanGuard's stop message: "step 3 (epoch 0, batch 3; counting from 0)".
        epoch = (
            f" (epoch {self._epoch}, batch {self._batch}; counting from 0)" if self._epoch is not None else ""
        )
        full = error.message or ""
        # A compiled step's message names the node, and its line only when TensorFlow kept the stack (it says
        # "<stack traces unavailable>" for a sparse CTC loss inside Keras's compiled loss, s42b p3).
        named = "names the op and its line" if "stack traces unavailable" not in full else "names the op"
        node = re.search(r"Detected at node '?([\w/.-]+)", full)
        if node is not None and "stack traces unavailable" in full:
            named += f" ({node.group(1)})"
        words = (
            f"NanGuard: step {self._step}{epoch} raised {type(error).__name__} "
            f"({said.strip() or 'no message'}) in an op of the model's own step, before any check: the error is the "
            f"program's, not NanGuard's, and TensorFlow's message below {named}. No bundle: a step that raises "
            "hands back no batch"
        )
        if "Not enough time for target transition sequence" in full:
            words += (
                "; a CTC label is longer than the logit frames allow (it needs as many frames as its length plus "
                "its repeated neighbours): leave out such labels where the data is read, or downsample the time "
                "axis less"
            )
        if any(phrase in said for phrase in _SINGULAR_MATRIX):
            words += (
                "; the matrix is singular (or not positive definite): keep it invertible, e.g. add a jitter, a "
                "multiple of the identity scaled to the matrix (1e-3 * the mean of its diagonal: a fixed 1e-6 vanishes in float32 "
                "beside a diagonal of 1e2), or keep the diagonal's entries away from 0; a ridge or regularization "
                "weight of 0, or two identical rows (samples drawn with replacement), makes a Gram matrix singular"
            )
        print(words, file=sys.stderr, flush=True)

    def _after_step(
        self, function: GuardedTrainFunction, verdict: gate.Verdict, captured: Any, logs: Any, kept: Any = ()
    ) -> bool:
        """Returns False when training must stop."""
        step, batch_index = self._step, self._batch
        self._step += 1
        self._batch += 1
        loss = verdict.loss if function.meta.has_loss else None
        self._history.append(
            step_history.HistoryEntry(
                step, loss, logs.get("loss") if isinstance(logs, dict) else None, verdict.metrics
            )
        )
        counts = getattr(self, "_epoch_steps", None)
        if counts is not None:
            counts[0 if bool(verdict.ok) else 1] += 1
        if bool(verdict.ok):
            self.policy.passed()
            if self._window is not None:
                self._window.after_step(step, kept)
            return True
        if self._stopped_at is not None:
            return self._failed_after_the_stop(function, verdict, step, batch_index)
        stop = self.policy.failed()
        self._end_progress_line()
        report = gate.report(verdict, function.meta, list(self.model.trainable_variables))
        if report.update_applied and self._window is not None and self._cluster is None:
            report.update_taken_back = self._take_back_update(function, step)

        def write(attempt: Attempt) -> None:
            if self._cluster is not None:
                attempt.path = self._write_cluster_bundle(
                    function, verdict, report, captured, step, batch_index
                )
                return
            data, seed_states = function.captured_batch(captured)
            write_located(
                attempt,
                locate=lambda bundle: self._locate_at_scene(
                    function, report, data, seed_states, step, batch_index, bundle
                ),
                window_files=lambda located: self._window_files(function, located, data, step, batch_index),
                data_source=lambda: {
                    **datasource.manifest_entry(
                        datasource.dataset_of(function.input.iterator), data, function.input.batches_before
                    ),
                    **fit_arrays.manifest_entry(data, self.model),  # NumPy inputs: each row's index in them
                },
                write=lambda files, extra: self._write_bundle(
                    function,
                    report,
                    captured,
                    step,
                    batch_index,
                    data=data,
                    seed_states=seed_states,
                    extra_files=files,
                    extra=extra,
                ),
                remote=storage.is_remote(self.capture_dir),
            )
            attempt.note = attempt.note or _unsaved_model_note(attempt.path)

        # Multi-worker: counted before writing, as every worker must make the same number of attempts (each is a
        # collective), whether its own part of an attempt failed or not.
        attempt = self.policy.attempt(write, count_first=self._cluster is not None)
        failure = self.policy.record(step, self._epoch, batch_index, report, attempt, stop)
        if self._window is not None and not stop:
            # Skip mode goes on: the refused step is part of later windows.
            self._window.after_step(step, kept, refused=True)
        self.policy.say(failure, prefix="\n")
        if stop:
            self.model.stop_training = True
            self._stopped_at = step
        return not stop

    def _failed_after_the_stop(
        self, function: GuardedTrainFunction, verdict: gate.Verdict, step: int, batch_index: int
    ) -> bool:
        """A failing step the program ran after NanGuard stopped training: a loop of ``train_on_batch`` whose ``if
        model.stop_training: break`` leaves only its inner loop. Each such step wrote a bundle of the same
        divergence as the first (five, the limit) and printed "training stopped" again for every step left. Said
        once; recorded, refused, no bundle."""
        report = gate.report(verdict, function.meta, list(self.model.trainable_variables))
        self.policy.failed()
        self.policy.record(step, self._epoch, batch_index, report, Attempt(), True)
        self.model.stop_training = True
        if self.verbose and not getattr(self, "_said_went_on", False):
            self._said_went_on = True
            print(
                f"NanGuard: step {step} is non-finite too: the program went on training after NanGuard stopped it "
                f"at step {self._stopped_at} (model.stop_training is set, but a loop of train_on_batch must check "
                "it, and a check that breaks only the inner loop lets the outer one go on). Updates of non-finite "
                "steps are still not applied; no more bundles or messages for them",
                file=sys.stderr,
                flush=True,
            )
        return False

    def _window_files(
        self,
        function: GuardedTrainFunction,
        located: atscene.SceneFiles,
        data: Any,
        step: int,
        batch_index: int,
    ) -> tuple[dict[str, bundle_format.ExtraFile], dict[str, Any]]:
        """The window's bundle files and manifest entry; for a divergence located here, with the learning-rate
        search (`pyadapter.capture.window`). Never raises: the bundle is written without the window instead."""
        keeper = self._window
        if keeper is None:
            return {}, {}
        live = self._live_step(function)
        try:
            search = atscene.window_search(
                keeper,
                located,
                live,
                failing_batch=data,
                step=step,
                history=self._history,
                model_info=function.model_info(self.model),
                epoch=self._epoch,
                batch_index=batch_index,
                verbose=self.verbose,
            )
            rate = step_window.current_learning_rate(primary_optimizer(self.model))
            return keeper.files(step, data, live.to_numpy, learning_rate=rate, search=search)
        except Exception as exc:  # noqa: BLE001 - the bundle matters more than its window
            return {}, step_window.error_entries(exc)

    def _written_by_hand(self) -> list[Any]:
        """What the installed train function saw the model's train_step write itself (`written_by_hand`): part of
        the state the window copies."""
        return list(self._function.written_by_hand) if self._function is not None else []

    def _live_step(self, function: GuardedTrainFunction) -> atscene.LiveStep:
        """The step a window re-runs: Keras's ``train_step`` on the window's held batches."""
        model = self.model
        template = function.template

        def to_numpy(kept: Any) -> Any:
            flat = [None if leaf is None else batchcodec.from_tf(leaf) for leaf in kept]
            return tf.nest.map_structure(lambda index: flat[index], template)

        return atscene.LiveStep(
            call=model.train_step,
            kind=bundle_format.KIND_FIT,
            to_numpy=to_numpy,
            trainable=list(model.trainable_variables),
            optimizers=model_optimizers(model),
            extra_state=keras_lines.metrics_variables(model),
            reset=model.reset_metrics,
        )

    def _take_back_update(self, function: GuardedTrainFunction, step: int) -> bool:
        """`atscene.take_back_update` for this model. Never raises: the bundle then says the weights are the ones
        after the update."""
        keeper = self._window
        if keeper is None:
            return False
        try:
            return atscene.take_back_update(keeper, step, self._live_step(function), self.verbose)
        except Exception as exc:  # noqa: BLE001 - the bundle matters more than taking the update back
            if self.verbose:
                print(f"NanGuard: could not take the update back: {exc}".splitlines()[0], file=sys.stderr)
            return False

    def _write_bundle(
        self,
        function: GuardedTrainFunction,
        report: NonFiniteReport,
        captured: Any,
        step: int,
        batch_index: int,
        *,
        data: Any = None,
        batch_note: str | None = None,
        extra: dict[str, Any] | None = None,
        extra_files: Mapping[str, bundle_format.ExtraFile] | None = None,
        seed_states: dict[str, np.ndarray] | None = None,
    ) -> Path | str:
        model = self.model
        if data is None or seed_states is None:
            data, seed_states = function.captured_batch(captured)
        replicas = function.strategy.num_replicas_in_sync
        if batch_note is None and replicas > 1:
            batch_note = f"global batch: the {replicas} replicas' shards concatenated"

        model_entry = function.model_info(self.model)

        def save_state(writer: bundle_format.BundleWriter) -> dict:
            for name, content in (extra_files or {}).items():
                writer.write_extra(name, content)
            # What the model's train_step keeps itself (accumulators, a micro-step counter), by the program's names.
            saved = keras_state.save_keras_state(writer, model, seed_states, kept=function.step_state(model))
            if "model_save_error" in saved:
                model_entry.pop("file", None)  # no model.keras: the manifest does not name one
            return saved

        return bundle_writer.write_bundle(
            capture_dir=self.capture_dir,
            run=self.run_name or snapshot.default_run_name(),
            kind=bundle_format.KIND_FIT,
            step=step,
            epoch=self._epoch,
            batch_index=batch_index,
            on_nan=self.on_nan,
            report=report,
            batch=data,
            batch_note=batch_note,
            seed_states=seed_states,
            history=self._history,
            extra={
                "model": model_entry,
                "optimizer_iterations": int(primary_optimizer(model).iterations.numpy()),
                **learning_rate.manifest_entry(primary_optimizer(model), report.update_in_state),
                **keras_lines.manifest_entry([model]),
                **(extra or {}),
            },
            save_state=save_state,
            verbose=self.verbose,
        )

    def _locate_at_scene(
        self,
        function: GuardedTrainFunction,
        report: NonFiniteReport,
        data: Any,
        seed_states: dict[str, np.ndarray],
        step: int,
        batch_index: int,
        bundle: Path | str | None = None,
    ) -> atscene.SceneFiles:
        """Re-run the failing step here under a dump (see `pyadapter.replay.scene`); the bundle's findings.json
        and the manifest's ``located_at_scene`` entry. Never raises: the bundle is written either way. `bundle`:
        where it was written already (None: it is written after)."""
        if not atscene.locate_enabled(self.locate):
            return atscene.SceneFiles()
        if function.strategy.num_replicas_in_sync > 1:
            if self.verbose:  # say why the editor will not mark a line at once, and what will
                print(
                    f"NaN Lens: not located here: the step runs on {function.strategy.num_replicas_in_sync} "
                    "replicas (a tf.distribute strategy); `nanlens locate` on the bundle replays the step on one "
                    "device",
                    file=sys.stderr,
                    flush=True,
                )
            return atscene.SceneFiles(
                manifest={
                    "located_at_scene": {"skipped": "several replicas: locate the bundle on one device"}
                }
            )
        from pyadapter.replay import scene

        model = self.model
        optimizers = model_optimizers(model)
        seeds = rng.seed_generator_states(model, with_global=True)
        seed_variables = [variable for _, variable in seeds]
        step_call = scene.SceneStep(
            step=model.train_step,
            args=(snapshot.to_tensors(data),),
            kwargs={},
            variables=snapshot.unique(
                [
                    *keras_lines.model_variables(model),
                    *keras_lines.metrics_variables(model),
                    *(v for o in optimizers for v in keras_lines.optimizer_variables(o)),
                    *function.written_by_hand,  # the step's own accumulators and counter, put back after re-runs
                    *seed_variables,
                ]
            ),
            trainable=list(model.trainable_variables),
            optimizers=optimizers,
            seeds_before={id(v): seed_states[p] for p, v in seeds if p in seed_states},
            seed_variables=seed_variables,
            compiled_with_xla=bool(getattr(model, "jit_compile", False)),
            forward_state=gate.forward_state_variables([model]),
        )
        return atscene.findings_files(
            scene,
            step_call,
            capture_dir=self.capture_dir,
            run_name=self.run_name,
            verbose=self.verbose,
            history=self._history,
            report=report,
            step=step,
            epoch=self._epoch,
            batch_index=batch_index,
            kind=bundle_format.KIND_FIT,
            batch_problem_of=data,
            bundle=bundle,
        )

    def _write_cluster_bundle(
        self,
        function: GuardedTrainFunction,
        verdict: gate.Verdict,
        report: NonFiniteReport,
        captured: Any,
        step: int,
        batch_index: int,
    ) -> Path | str:
        """Multi-worker: every worker stages its shard, the chief assembles one bundle (`cluster_bundle`)."""
        assert self._cluster is not None

        def write(chief: cluster_bundle.ChiefBatch) -> Path | str:
            return self._write_bundle(
                function,
                report,
                None,
                step,
                batch_index,
                data=chief.data,
                batch_note=chief.note,
                extra={"cluster": chief.manifest},
                extra_files=chief.files,
                seed_states=chief.seed_states,
            )

        return cluster_bundle.write_cluster_bundle(
            self._cluster,
            function.strategy,
            self.capture_dir,
            f"{self.run_name}-step{step}",
            bool(verdict.local_ok),
            lambda: function.captured_batch(captured),
            write,
        )


def _non_finite_metrics(logs: Mapping[str, Any]) -> list[str]:
    """The names of an epoch's logged numbers that are NaN/Inf."""
    return [
        name
        for name, value in logs.items()
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isfinite(float(value))
    ]


def _validated_at_those_weights(logs: dict | None, cause: str | None) -> str:
    """What the stopped epoch's non-finite validation metrics say of the weights held: the clause to add, or ''.
    `cause`: the sentence of the cause located at the scene ("op: ...", "data: ..."), None if none was."""
    logs = logs or {}
    bad = [name for name in _non_finite_metrics(logs) if name.startswith("val_")]
    if not bad:
        return ""
    shown = f"{bad[0]}: {float(logs[bad[0]])}" + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "")
    said = f"; the {shown} above is what those weights give on the validation data"
    if cause is not None and (cause.startswith("divergence:") or WEIGHTS_HELD_IT in cause):
        # Weights grown huge, or a weight carried out of its domain before the step (the cause says which).
        return said + ": they had gone bad before this step (the cause says how)"
    if cause is None or cause.startswith("data:"):
        # A batch holding NaN/Inf (or no cause found): the weights may be fine and the validation data as bad.
        return said + ": it holds NaN/Inf too, or those weights had gone bad before this step"
    # An op's 0 / 0 (a Dice loss on an empty mask) meets validation records too: the weights need not be bad.
    return said + ": the cause above makes it there too (the validation data runs through the same code)"


def _go_first(guard: Any, caller: Any) -> None:
    """Put `guard` first among the callbacks of the fit setting its model, when the caller is a Keras
    ``CallbackList.set_model`` (its ``self``): its epoch-end fix of the logs must come before the user's callbacks
    read them. The list is replaced, not changed in place: the caller is iterating over it."""
    owner = caller.f_locals.get("self") if caller is not None else None
    callbacks = getattr(owner, "callbacks", None)
    if type(owner).__name__ != "CallbackList" or not isinstance(callbacks, list) or guard not in callbacks:
        return
    if owner is not None and callbacks[0] is not guard:
        owner.callbacks = [guard, *(c for c in callbacks if c is not guard)]


def _unsaved_model_note(bundle: Any) -> str | None:
    """Said at the stop, where the model class can still be changed: the bundle holds no model.keras (a subclass
    without get_config, an argument Keras cannot serialize), so a replay re-runs the program up to this fit."""
    if not isinstance(bundle, Path):
        return None
    try:
        import json

        manifest = json.loads(bundle_format.read_manifest_bytes(bundle / bundle_format.MANIFEST))
    except (OSError, ValueError, bundle_format.BundleError):
        return None
    reason = manifest.get("model_save_error") if isinstance(manifest, dict) else None
    if not isinstance(reason, str) or not reason:
        return None
    return (
        f"the model could not be saved as model.keras ({reason}); replays re-run your program up to this fit "
        "instead (give the model get_config to rebuild it from the bundle)"
    )


# The step history of each model's latest guard, for a guard made for a later fit of the same model.
_MODEL_HISTORIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


# What TensorFlow's CPU kernels say of a matrix they cannot invert or factor (MatrixSolve, MatrixInverse, Cholesky).
_SINGULAR_MATRIX = ("not invertible", "Cholesky decomposition was not successful")
