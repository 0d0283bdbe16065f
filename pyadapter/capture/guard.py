"""NanGuard: the Keras callback that stops (or skips) a training step whose loss or gradients are not finite.

``model.fit(..., callbacks=[NanGuard("captures")])`` is the only change. At ``on_train_begin`` the callback swaps
``model.train_function`` for a guarded one built like Keras's own (Keras 3, TensorFlow backend):

- the inner step (``strategy.run(model.train_step)``, compiled with the model's ``jit_compile``) has the gate of
  `pyadapter.capture.gate`: the optimizer update runs inside ``tf.cond(loss and gradients finite, ...)``;
- the outer, never-XLA function reads the batch from the iterator, runs the step, and hands the batch back as a
  ``tf.experimental.Optional`` that is filled only when the step failed: on healthy steps no batch is copied or
  pulled to Python, and the only thing Python reads is one boolean;
- on a failing step Python writes a capture bundle (`pyadapter.capture.bundle`) with the batch, the model and
  optimizer state from before the update (it was not applied), RNG states and loss history, then stops training
  (``on_nan="stop"``) or goes on (``"skip"``).

The guarded function is cached per model and configuration, so later ``fit`` calls do not retrace. It works for
Sequential, functional and subclassed models, custom ``train_step``s that call ``super()`` or the optimizer,
``jit_compile`` on or off, ``steps_per_execution`` (run as single steps) and MirroredStrategy.
"""

from __future__ import annotations

import collections
import sys
import time
import warnings
import weakref
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
    datasource,
    gate,
    keras_fixes,
    keras_lines,
    legacy_keras,
    model_archive,
    rng,
    snapshot,
    storage,
    structure,
)
from pyadapter.capture import history as step_history
from pyadapter.capture import window as step_window
from pyadapter.capture import writer as bundle_writer
from pyadapter.capture.options import GuardOptions
from pyadapter.capture.policy import Attempt, FailurePolicy, write_located
from pyadapter.capture.verdict import Failure, NonFiniteReport


def _optionals_to_none(data: Any) -> Any:
    # As Keras's _autoconvert_optionals: an Optional in the data stands for "no value" (e.g. no sample weights).
    return keras.tree.map_structure(lambda v: None if isinstance(v, tf.experimental.Optional) else v, data)


def _replica_parts(value: Any, strategy: tf.distribute.Strategy) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, tf.distribute.DistributedValues):
        return list(strategy.experimental_local_results(value))
    return [value]


def _reduce_logs(outputs: Any, strategy: tf.distribute.Strategy) -> Any:
    if cluster.cluster_of(strategy) is not None:
        # Keras's reduce_per_replica asks MultiWorkerMirroredStrategy for reduce(MEAN, scalar, axis=0), which
        # fails on scalar logs; the mean over all replicas of the cluster is reduce(MEAN, value, axis=None).
        return tf.nest.map_structure(lambda v: strategy.reduce("MEAN", v, axis=None), outputs)
    try:
        from keras.src.backend.tensorflow.trainer import reduce_per_replica
    except ImportError:  # pragma: no cover - Keras internals moved
        return tf.nest.map_structure(lambda v: strategy.experimental_local_results(v)[0], outputs)
    return reduce_per_replica(outputs, strategy, reduction="auto")


def model_optimizers(model: keras.Model) -> list[Any]:
    """The optimizers a model trains with: ``model.optimizer`` and any optimizer it holds as an attribute (a GAN's
    ``d_optimizer`` / ``g_optimizer`` passed to its own ``compile``), each once."""
    found: list[Any] = []
    candidates = [getattr(model, "optimizer", None), *vars(model).values()]
    for value in candidates:
        if keras_lines.is_optimizer(value) and all(value is not seen for seen in found):  # either Keras line
            found.append(value)
    return found


def primary_optimizer(model: keras.Model) -> Any:
    """The optimizer whose iteration count is the model's step: the one that has taken the most steps; among
    equals, one the model holds itself (a GAN's ``d_optimizer``) before the ``model.optimizer`` that a bare
    ``super().compile()`` makes and nothing uses."""
    optimizers = model_optimizers(model)
    own = getattr(model, "optimizer", None)
    return max(optimizers, key=lambda o: (int(o.iterations.numpy()), len(optimizers) == 1 or o is not own))


class GuardedTrainFunction:
    """The replacement for ``model.train_function`` (see module docstring). One per model and configuration."""

    def __init__(
        self, model: keras.Model, config: gate.GateConfig, restore_metrics: bool, keep_batches: bool = False
    ) -> None:
        self.model_ref = weakref.ref(model)
        self.config = config
        self.restore_metrics = restore_metrics
        # The window (`pyadapter.capture.window`): hand every step's batch back to Python as the tensors it already
        # is (a reference, no copy); off: the batch leaves the function only on a failing step.
        self.keep_batches = keep_batches
        self.guard: NanGuard | None = None
        self.keras_function: Any = model.train_function  # Keras's own, put back after fit
        self.meta = gate.GateMeta()
        self.template: Any = None  # data structure with leaf indices, from the last trace
        self.seed_paths: list[str] = []
        self.strategy = model.distribute_strategy
        self.steps_per_execution = int(getattr(model, "steps_per_execution", 1) or 1)
        self.input = datasource.InputTracker()  # the tf.data iterator read, for the bundle's data_source
        self._one_step = self._make_one_step(model)
        self._step_on_iterator = self._wrap(
            lambda iterator: self._step_and_capture(iterator.get_next()), model
        )
        self._step_on_data = self._wrap(self._step_and_capture, model)

    @staticmethod
    def key(
        model: keras.Model, config: gate.GateConfig, restore_metrics: bool, keep_batches: bool = False
    ) -> tuple:
        return (
            config,
            restore_metrics,
            keep_batches,
            bool(model.run_eagerly),
            model.jit_compile,
            int(getattr(model, "steps_per_execution", 1) or 1),
            tuple(id(optimizer) for optimizer in model_optimizers(model)),
            id(model.distribute_strategy),
        )

    def _wrap(self, fn: Any, model: keras.Model) -> Any:
        return fn if model.run_eagerly else tf.function(fn, reduce_retracing=True)

    def _make_one_step(self, model: keras.Model) -> Any:
        config, strategy = self.config, self.strategy
        restore_metrics = self.restore_metrics

        def replica_step(data: Any) -> Any:
            model_ = self.model_ref()
            assert model_ is not None, "the model is alive while its train function runs"
            metrics = list(model_.metrics_variables) if restore_metrics else []
            logs = gate.train_step_keeping_metrics(model_.train_step, data, metrics)
            return logs

        def one_step_on_data(data: Any) -> Any:
            model_ = self.model_ref()
            with gate.hooks(model_optimizers(model_), [model_], config) as scope:
                outputs = strategy.run(replica_step, args=(data,))
                verdict, meta = gate.combine(scope)
            self.meta = meta
            return _reduce_logs(outputs, strategy), verdict

        if not model.run_eagerly:
            one_step_on_data = tf.function(
                one_step_on_data, reduce_retracing=True, jit_compile=model.jit_compile
            )
        return one_step_on_data

    def _step_and_capture(self, data: Any) -> Any:
        model = self.model_ref()
        data = _optionals_to_none(data)
        seeds = rng.seed_generator_states(model)
        self.seed_paths = [path for path, _ in seeds]
        seeds_before = [tf.identity(tf.convert_to_tensor(variable)) for _, variable in seeds]
        outputs, verdict = self._one_step(data)
        flat = tf.nest.flatten(data)
        self.template = tf.nest.pack_sequence_as(data, list(range(len(flat))))
        # Tuples, not lists: tf.data structures would turn lists into stacked tensors.
        leaves = tuple(tuple(_replica_parts(value, self.strategy)) for value in flat)
        element = (leaves, tuple(seeds_before))
        spec = tf.nest.map_structure(tf.type_spec_from_value, element)
        captured = tf.cond(
            verdict.ok,
            lambda: tf.experimental.Optional.empty(spec),
            lambda: tf.experimental.Optional.from_value(element),
        )
        kept = tuple(flat) if self.keep_batches else ()
        return outputs, verdict, captured, kept

    # ---- called by Keras fit instead of its own train function ----

    def uninstall(self) -> None:
        """Give the model its own train function back (after fit, or when fit is aborted by an error)."""
        self.guard = None
        model = self.model_ref()
        if model is not None and model.train_function is self:
            model.train_function = self.keras_function

    def __call__(self, iterator: Any) -> Any:
        try:
            return self._run(iterator)
        except (tf.errors.OutOfRangeError, StopIteration):
            raise  # the end of an epoch, not an error
        except BaseException:
            # fit is aborting and will not call on_train_end: do not leave the guard installed.
            self.uninstall()
            raise

    def _run(self, iterator: Any) -> Any:
        guard = self.guard
        logs = None
        if isinstance(iterator, (tf.data.Iterator, tf.distribute.DistributedIterator)):
            for index in range(self.steps_per_execution):
                self.input.see(iterator)
                try:
                    outputs, verdict, captured, kept = self._step_on_iterator(iterator)
                except tf.errors.OutOfRangeError:
                    if index == 0:
                        raise
                    break
                logs = outputs
                if guard is not None and not guard._after_step(self, verdict, captured, outputs, kept):
                    break
            return logs
        for _, data in zip(range(self.steps_per_execution), iterator, strict=False):
            logs, verdict, captured, kept = self._step_on_data(data)
            if guard is not None and not guard._after_step(self, verdict, captured, logs, kept):
                break
        return logs


class LegacyGuardedTrainFunction(GuardedTrainFunction):
    """The guarded ``train_function`` of a tf_keras model: the same outer function and capture, around tf_keras's
    own step (see `legacy_keras.make_one_step`)."""

    @staticmethod
    def key(model: Any, config: gate.GateConfig, restore_metrics: bool, keep_batches: bool = False) -> tuple:
        return (
            "tf_keras",
            config,
            restore_metrics,
            keep_batches,
            bool(model.run_eagerly),
            model.jit_compile,
            keras_lines.steps_per_execution(model),
            tuple(id(o) for o in model_optimizers(model)),
            id(model.distribute_strategy),
        )

    def _make_one_step(self, model: Any) -> Any:
        self.steps_per_execution = keras_lines.steps_per_execution(model)
        return legacy_keras.make_one_step(self, model, model_optimizers)


# What NanGuard does with compile(steps_per_execution=N), said once per guard: the guarantees hold per step, and
# the speed-up does not (measured on a small MLP on CPU: about the time of steps_per_execution=1).
STEPS_PER_EXECUTION_NOTE = (
    "NanGuard: steps_per_execution={n}: each step is still checked and a failing step's own batch captured, "
    "because the guard runs the {n} steps of an execution as {n} calls; this gives up the speed-up "
    "steps_per_execution buys (a small model runs about as fast as with steps_per_execution=1)"
)


# Guarded functions live on the model (like Keras's own train_function), so they go when it goes: a module-level
# weak-keyed cache would not, as Keras's train function, kept for restoring, refers back to the model.
_CACHE_ATTRIBUTE = "_nanlens_guarded_train_functions"


def _cached_functions(model: keras.Model) -> dict[tuple, GuardedTrainFunction]:
    return model.__dict__.setdefault(_CACHE_ATTRIBUTE, {})  # __dict__: no Keras attribute tracking


class NanGuard(keras.callbacks.Callback):
    """Keras callback: check every training step for NaN/Inf inside the compiled step; on a failing step do not
    apply the update, write a capture bundle, then stop training (default) or skip the step.

    Args:
        capture_dir: where bundles go (``capture_dir/<run>-step<N>/``); created if missing. The default, ``.nanlens/captures``, is a folder the editor watches.
        on_nan: ``"stop"`` (set ``model.stop_training``; fit returns after this batch) or ``"skip"``.
        run_name: bundle name prefix; default ``<script>-<YYYYmmdd-HHMMSS>``.
        check_weights: also check the trainable weights after each applied update (catches an optimizer or
            learning rate that makes finite gradients produce NaN/Inf weights).
        protect_weights: keep a copy of the weights and optimizer state during the update so that such an update
            is undone too (costs roughly one copy of the model per step; off by default).
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
        window: keep the training state this many steps back and the batches since (`pyadapter.capture.window`:
            two device-side copies of the weights and optimizer state, taken every ``window`` steps, and references
            to up to ``2 * window`` batches), so that a failing step's bundle holds the steps that led to it; for a
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
        self.options = GuardOptions(
            capture_dir=capture_dir,
            on_nan=on_nan,
            run_name=run_name,
            check_weights=check_weights,
            protect_weights=protect_weights,
            max_bundles=max_bundles,
            max_consecutive_skips=max_consecutive_skips,
            history_size=history_size,
            locate=locate,
            window=window,
            verbose=verbose,
        )
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
        keras_fixes.install_multiworker_fit_fix()  # without it Keras 3 fit fails under MultiWorkerMirroredStrategy

    @property
    def last_bundle(self) -> Path | str | None:
        return self.policy.last_bundle

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
            self._window = step_window.WindowKeeper(self.window_size, lambda: _state_variables(model))
            self._window_model = weakref.ref(model)
        key = function_class.key(model, self.config, restore_metrics, keep)
        per_model = _cached_functions(model)
        function = per_model.get(key)
        if function is None or function.keras_function is not keras_function:
            # New, or the model was compiled again since (Keras then builds a new train function): retrace.
            function = per_model[key] = function_class(model, self.config, restore_metrics, keep)
        function.keras_function = keras_function
        function.guard = self
        self._function = function
        model.train_function = function
        if function.steps_per_execution > 1 and self.verbose and not getattr(self, "_said_executions", False):
            self._said_executions = True
            print(
                STEPS_PER_EXECUTION_NOTE.format(n=function.steps_per_execution), file=sys.stderr, flush=True
            )
        self._step = int(primary_optimizer(model).iterations.numpy())
        self.policy.passed()  # a new fit starts a new run of failures
        if self._window is not None:
            _build_own_optimizer(model)
            self._window.start(self._step)

    def on_train_end(self, logs: dict | None = None) -> None:
        if self._function is not None:
            self._function.uninstall()
        self._function = None

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._epoch = epoch
        self._batch = 0

    # ---- per step, called by GuardedTrainFunction ----

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
        if bool(verdict.ok):
            self.policy.passed()
            if self._window is not None:
                self._window.after_step(step, kept)
            return True
        stop = self.policy.failed()
        report = gate.report(verdict, function.meta, list(self.model.trainable_variables))

        def write(attempt: Attempt) -> None:
            if self._cluster is not None:
                attempt.path = self._write_cluster_bundle(
                    function, verdict, report, captured, step, batch_index
                )
                return
            data, seed_states = self._captured_batch(function, captured)
            write_located(
                attempt,
                locate=lambda: self._locate_at_scene(function, report, data, seed_states, step, batch_index),
                window_files=lambda located: self._window_files(function, located, data, step, batch_index),
                data_source=lambda: datasource.manifest_entry(
                    datasource.dataset_of(function.input.iterator), data, function.input.batches_before
                ),
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
            )

        # Multi-worker: counted before writing, as every worker must make the same number of attempts (each is a
        # collective), whether its own part of an attempt failed or not.
        attempt = self.policy.attempt(write, count_first=self._cluster is not None)
        failure = self.policy.record(step, self._epoch, batch_index, report, attempt, stop)
        if self._window is not None:
            self._window.after_step(
                step, kept
            )  # skip mode goes on: the refused step is part of later windows
        self.policy.say(failure, prefix="\n")
        if stop:
            self.model.stop_training = True
        return not stop

    def _captured_batch(
        self, function: GuardedTrainFunction, captured: Any
    ) -> tuple[Any, dict[str, np.ndarray]]:
        """(this process's part of the failing batch, nested as fed; Keras seed states from before the step)."""
        leaves, seeds_before = captured.get_value()
        # Ragged and sparse leaves stay ragged and sparse: densified, the replayed step would differ.
        flat = [batchcodec.from_tf_parts(list(parts)) for parts in leaves]
        data = tf.nest.map_structure(lambda index: flat[index], function.template)
        seed_states = {
            path: np.asarray(v.numpy()) for path, v in zip(function.seed_paths, seeds_before, strict=True)
        }
        return data, seed_states

    def _window_files(
        self,
        function: GuardedTrainFunction,
        located: atscene.SceneFiles,
        data: Any,
        step: int,
        batch_index: int,
    ) -> tuple[dict[str, bytes], dict[str, Any]]:
        """The window's bundle files and manifest entry; for a divergence located here, with the learning-rate
        search (`pyadapter.capture.window`). Never raises: the bundle is written without the window instead."""
        keeper = self._window
        if keeper is None:
            return {}, {}
        model = self.model
        template = function.template

        def to_numpy(kept: Any) -> Any:
            flat = [None if leaf is None else batchcodec.from_tf(leaf) for leaf in kept]
            return tf.nest.map_structure(lambda index: flat[index], template)

        try:
            search = atscene.window_search(
                keeper,
                located,
                step_call=model.train_step,
                kind=bundle_format.KIND_FIT,
                failing_batch=data,
                to_numpy=to_numpy,
                step=step,
                history=self._history,
                model_info=self._model_info(function),
                trainable=list(model.trainable_variables),
                optimizers=model_optimizers(model),
                extra_state=keras_lines.metrics_variables(model),
                reset=model.reset_metrics,
                epoch=self._epoch,
                batch_index=batch_index,
                verbose=self.verbose,
            )
            rate = step_window.current_learning_rate(primary_optimizer(model))
            return keeper.files(step, data, to_numpy, learning_rate=rate, search=search)
        except Exception as exc:  # noqa: BLE001 - the bundle matters more than its window
            return {}, {
                step_window.MANIFEST_KEY + "_error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            }

    def _model_info(self, function: GuardedTrainFunction) -> dict[str, Any]:
        model = self.model
        return {
            "class_name": type(model).__name__,
            "module": type(model).__module__,
            "jit_compile": bool(model.jit_compile),
            "run_eagerly": bool(model.run_eagerly),
            "steps_per_execution": function.steps_per_execution,
            "distribute_strategy": type(function.strategy).__name__,
            "num_replicas": function.strategy.num_replicas_in_sync,
            "optimizer": type(primary_optimizer(model)).__name__,
            "optimizers": [type(optimizer).__name__ for optimizer in model_optimizers(model)],
            "loss_scale_optimizer": gate.is_loss_scale_optimizer(primary_optimizer(model)),
            "file": bundle_format.MODEL_FILE,
        }

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
        extra_files: dict[str, bytes] | None = None,
        seed_states: dict[str, np.ndarray] | None = None,
    ) -> Path | str:
        model = self.model
        if data is None or seed_states is None:
            data, seed_states = self._captured_batch(function, captured)
        replicas = function.strategy.num_replicas_in_sync
        if batch_note is None and replicas > 1:
            batch_note = f"global batch: the {replicas} replicas' shards concatenated"

        def save_state(writer: bundle_format.BundleWriter) -> dict:
            for name, content in (extra_files or {}).items():
                writer.file(name).write_bytes(content)
            return _save_keras_state(writer, model, seed_states)

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
                "model": self._model_info(function),
                "optimizer_iterations": int(primary_optimizer(model).iterations.numpy()),
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
    ) -> atscene.SceneFiles:
        """Re-run the failing step here under a dump (see `pyadapter.replay.scene`); the bundle's findings.json
        and the manifest's ``located_at_scene`` entry. Never raises: the bundle is written either way."""
        if not atscene.locate_enabled(self.locate):
            return atscene.SceneFiles()
        if function.strategy.num_replicas_in_sync > 1:
            return atscene.SceneFiles(
                manifest={
                    "located_at_scene": {"skipped": "several replicas: locate the bundle on one device"}
                }
            )
        from pyadapter.replay import scene

        model = self.model
        optimizers = model_optimizers(model)
        seeds = rng.seed_generator_states(model)
        seed_variables = [variable for _, variable in seeds]
        step_call = scene.SceneStep(
            step=model.train_step,
            args=(snapshot.to_tensors(data),),
            kwargs={},
            variables=snapshot.unique(
                [
                    *model.variables,
                    *keras_lines.metrics_variables(model),
                    *(v for o in optimizers for v in keras_lines.optimizer_variables(o)),
                    *seed_variables,
                ]
            ),
            trainable=list(model.trainable_variables),
            optimizers=optimizers,
            seeds_before={id(v): seed_states[p] for p, v in seeds if p in seed_states},
            seed_variables=seed_variables,
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
        )

    def _write_cluster_bundle(
        self,
        function: GuardedTrainFunction,
        verdict: gate.Verdict,
        report: NonFiniteReport,
        captured: Any,
        step: int,
        batch_index: int,
    ) -> Path | str | None:
        """Multi-worker: every worker stages its shard, the chief assembles one bundle (see cluster.py).

        Every worker runs the same collectives in the same order whatever fails locally, so no worker waits for
        one that gave up. Returns the bundle's path (the same on every worker) or raises with the reason."""
        info = self._cluster
        assert info is not None
        channel = cluster.WorkerChannel(function.strategy)
        name = f"{self.run_name}-step{step}"
        staging = storage.join(str(self.capture_dir), f".{name}.shards")
        staged, local_error = 1.0, None
        described: Any = None
        seed_states: dict[str, np.ndarray] = {}
        try:
            data, seed_states = self._captured_batch(function, captured)
            arrays: dict[str, np.ndarray] = {}
            described = structure.describe(data, arrays)
            cluster.stage_shard(staging, info.worker_index, arrays)
        except Exception as exc:  # noqa: BLE001 - the other workers must still hear from this one
            staged, local_error = 0.0, f"{type(exc).__name__}: {exc}".splitlines()[0]
        n = info.num_workers
        mine = np.zeros(2 * n)
        mine[info.worker_index] = staged
        mine[n + info.worker_index] = 0.0 if bool(verdict.local_ok) else 1.0
        agreed = channel.sum(mine)
        staged_by, bad_by = agreed[:n] > 0.5, agreed[n:] > 0.5
        suffix, chief_error = -1.0, None
        if info.is_chief:
            try:
                if described is None:
                    raise RuntimeError(f"the chief's own shard failed: {local_error}")
                path = self._write_chief_bundle(
                    function, report, step, batch_index, staging, staged_by, bad_by, described, seed_states
                )
                final = str(path).rstrip("/").rsplit("/", 1)[-1]
                suffix = 0.0 if final == name else float(final.rsplit("-", 1)[1])
            except Exception as exc:  # noqa: BLE001 - said below, on every worker
                chief_error = f"{type(exc).__name__}: {exc}".splitlines()[0]
            finally:
                storage.remove_tree(staging)
        suffix = float(channel.sum(np.array([suffix if info.is_chief else 0.0]))[0])
        if suffix < 0:
            raise RuntimeError(chief_error or f"the chief ({info.tasks[0]}) could not write the bundle")
        if local_error is not None:
            raise RuntimeError(
                f"this worker's shard could not be staged ({local_error}); the bundle lacks it"
            )
        final_name = name if suffix == 0 else f"{name}-{int(suffix)}"
        if isinstance(self.capture_dir, Path):
            return self.capture_dir / final_name
        return storage.join(self.capture_dir, final_name)

    def _write_chief_bundle(
        self,
        function: GuardedTrainFunction,
        report: NonFiniteReport,
        step: int,
        batch_index: int,
        staging: str,
        staged_by: np.ndarray,
        bad_by: np.ndarray,
        described: Any,
        seed_states: dict[str, np.ndarray],
    ) -> Path | str:
        info = self._cluster
        assert info is not None
        shards, files, layout = [], {}, []
        for worker in range(info.num_workers):
            entry: dict[str, Any] = {
                "worker": worker,
                "task": info.tasks[worker],
                "address": info.addresses[worker],
                "own_data_non_finite": bool(bad_by[worker]),
            }
            if staged_by[worker]:
                raw, arrays = cluster.read_staged_shard(staging, worker)
                shards.append(arrays)
                files[cluster.shard_file(worker)] = raw
                entry.update(file=cluster.shard_file(worker), rows=cluster.rows(arrays))
            else:
                entry.update(file=None, rows=0, missing="the worker could not stage its shard")
            layout.append(entry)
        if not shards:
            raise RuntimeError("no worker could stage its shard of the batch")
        data = structure.rebuild(described, cluster.join_shards(shards), any_rows=True)
        cluster_manifest = {
            **info.to_json(),
            "written_by": info.tasks[info.worker_index],
            "shards": layout,
            "non_finite_workers": [info.tasks[w] for w in range(info.num_workers) if bad_by[w]],
        }
        note = f"global batch: the {len(shards)} workers' shards ({cluster.SHARDS_DIR}/) concatenated in worker order"
        return self._write_bundle(
            function,
            report,
            None,
            step,
            batch_index,
            data=data,
            batch_note=note,
            extra={"cluster": cluster_manifest},
            extra_files=files,
            seed_states=seed_states,
        )


def _state_variables(model: keras.Model) -> list[Any]:
    """What the window copies: the model's variables, its optimizers' (slots, iterations, learning rate) and its
    seed generators' states."""
    return snapshot.unique(
        [
            *model.variables,
            *(v for o in model_optimizers(model) for v in keras_lines.optimizer_variables(o)),
            *(v for _, v in rng.seed_generator_states(model)),
        ]
    )


def _build_own_optimizer(model: keras.Model) -> None:
    """Make the slots of a model's only optimizer now, as its first update would (Keras's own ``train_step``
    builds it on the model's trainable variables, under its name scope), so the window's first copy holds them:
    a run that blows up in its first steps then has a window from step 0. Custom steps are left alone (an
    optimizer may train only some variables); their window starts after the first step."""
    optimizers = model_optimizers(model)
    if (
        keras_lines.is_tf_keras(model)
        or len(optimizers) != 1
        or optimizers[0] is not getattr(model, "optimizer", None)
        or type(model).train_step is not keras.Model.train_step
        or keras_lines.optimizer_built(optimizers[0])
    ):
        return
    from pyadapter.capture.optimizers import build_optimizers

    with model.distribute_strategy.scope():
        build_optimizers(optimizers, list(model.trainable_variables))


def _save_keras_state(writer: bundle_format.BundleWriter, model: keras.Model, seed_states: dict) -> dict:
    """model.keras (architecture and compile settings: `model_archive`) and weights.npz (every model and optimizer
    value, streamed one variable at a time), with the seed states from before the step."""
    seeds = dict(rng.seed_generator_states(model))
    after = {path: seeds[path].numpy() for path in seed_states if path in seeds}
    extra: dict[str, Any] = {}
    described: list[dict[str, Any]] = []
    try:
        for path, value in seed_states.items():
            if path in seeds:
                seeds[path].assign(value)
        model_file = writer.file(bundle_format.MODEL_FILE)
        try:
            with warnings.catch_warnings():
                # "You are saving a model that has not yet been built": a subclass built only inside its step.
                warnings.simplefilter("ignore", UserWarning)
                model_archive.save(model, model_file, keras_lines.keras_line(model) or keras_lines.KERAS3)
        except Exception as exc:  # noqa: BLE001 - e.g. a custom object without get_config: keep the rest
            model_file.unlink(missing_ok=True)
            extra["model_save_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
        values, total = snapshot.variable_values(
            [
                ("model", list(model.variables)),
                (
                    "optimizer",
                    [v for o in model_optimizers(model) for v in keras_lines.optimizer_variables(o)],
                ),
            ],
            described,
        )
        # Written while the seed states are the captured ones: the values are read as they are written.
        writer.write_arrays(bundle_format.WEIGHTS_FILE, values, total)
    finally:
        for path, value in after.items():
            seeds[path].assign(value)
    return {"weights": {"file": bundle_format.WEIGHTS_FILE, "variables": described}, **extra}
