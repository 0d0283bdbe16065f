"""The guarded ``train_function`` that NanGuard installs on a Keras model (see `pyadapter.capture.guard`).

Built like Keras's own (Keras 3, TensorFlow backend): the inner step (``strategy.run(model.train_step)``,
compiled with the model's ``jit_compile``) has the gate of `pyadapter.capture.gate`; the outer, never-XLA
function reads the batch from the iterator, runs the step, and hands the batch back as a
``tf.experimental.Optional`` filled only when the step failed, so healthy steps copy nothing to Python but one
boolean. Each step's verdict goes to the installed guard's ``_after_step``. Cached per model and configuration.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import keras
import numpy as np
import tensorflow as tf

from pyadapter.capture import (
    batchcodec,
    bundle_format,
    cluster,
    datasource,
    fit_call,
    gate,
    keras_lines,
    legacy_keras,
    rng,
    snapshot,
    step_state,
)

if TYPE_CHECKING:
    from pyadapter.capture.guard import NanGuard


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


def known_variables(model: keras.Model) -> list[Any]:
    """The variables the gate, the metric restore and the seed record take care of: the model's (its metrics'
    included), its optimizers' and its seed generators' states. A write to any other in the step is held back when
    the step fails and kept as the step's own state (`gate.hooks`'s `known_variables`)."""
    return [
        *keras_lines.model_variables(model),
        *keras_lines.metrics_variables(model),
        *(v for o in model_optimizers(model) for v in keras_lines.optimizer_variables(o)),
        *(v for _, v in rng.seed_generator_states(model, with_global=True)),
    ]


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
        self.fit_call: fit_call.FitCall | None = None  # which fit of the program runs it (set by the guard)
        # Set by the guard when no fit called it (a train_on_batch loop): finds the calling line at the first step.
        self.find_fit_call: Callable[[], fit_call.FitCall | None] | None = None
        self.fit_input: str | None = None  # "dataset" when fit was given a tf.data dataset (set by the guard)
        # The optimizer's step when this fit began (set by the guard): a fit resumed at initial_epoch=40 counts its
        # epochs from 40, so its first step cannot be told from the epoch and batch index.
        self.first_step: int | None = None
        self.keras_function: Any = model.train_function  # Keras's own, put back after fit
        self.meta = gate.GateMeta()
        self.template: Any = None  # data structure with leaf indices, from the last trace
        self.seed_paths: list[str] = []
        self.strategy = model.distribute_strategy
        self.steps_per_execution = keras_lines.steps_per_execution(model)
        self.input = datasource.InputTracker()  # the tf.data iterator read, for the bundle's data_source
        # A train_step that applies its optimizer more than once (a WGAN critic's extra steps) is traced again with
        # a copy before each update, so that a failing step is taken back whole (`gate.RepeatedUpdate`).
        self.copy_before_updates = False
        self._repeated_update = False  # the last trace raised gate.RepeatedUpdate (as a StagingError)
        # The last trace made Keras's global SeedGenerator (`rng.states_before_step`): trace again after its call.
        self._trace_again = False
        # Variables the model's own train_step writes that no model, metric or optimizer lists (gradient
        # accumulators and a micro-step counter a subclass keeps, ``self.n_acc.assign_add(1)``), seen while it was
        # traced: its state as much as the weights (`gate.written_by_hand`).
        self.written_by_hand: list[Any] = []
        self._make_functions(model)

    def _make_functions(self, model: keras.Model) -> None:
        self._one_step = self._make_one_step(model)

        # A named function, not a lambda: TensorFlow's error messages name the traced function, and its parser of
        # them stops at "<lambda>", so an op that raises (a singular matrix's MatrixSolve) lost its source line.
        def step_on_iterator(iterator: Any) -> Any:
            return self._step_and_capture(iterator.get_next())

        self._step_on_iterator = self._wrap(step_on_iterator, model)
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
            keras_lines.steps_per_execution(model),
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
            with gate.hooks(
                model_optimizers(model_),
                [model_],
                config,
                # Writes to any other variable (a subclass's own accumulators) are held back when the step fails.
                known_variables=lambda: known_variables(model_),
                copy_before_updates=self.copy_before_updates,
                # Eagerly, the first update has run already: no second try.
                on_repeated_update=None if tf.executing_eagerly() else self._found_repeated_update,
            ) as scope:
                outputs = strategy.run(replica_step, args=(data,))
                verdict, meta = gate.combine(scope)
            self.meta = meta
            self.written_by_hand = snapshot.unique([*self.written_by_hand, *gate.written_by_hand(scope)])
            return _reduce_logs(outputs, strategy), verdict

        if not model.run_eagerly:
            one_step_on_data = tf.function(
                one_step_on_data, reduce_retracing=True, jit_compile=model.jit_compile
            )
        return one_step_on_data

    def _step_and_capture(self, data: Any) -> Any:
        model = self.model_ref()
        data = _optionals_to_none(data)
        with rng.states_before_step(rng.seed_generator_states(model, with_global=True)) as before:
            outputs, verdict = self._one_step(data)
        self.seed_paths = [path for path, _ in before.states]
        seeds_before = [read for _, read in before.states]
        self._trace_again |= before.global_made_by_step
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

    def step_state(self, model: keras.Model) -> list[tuple[Any, str]]:
        """The variables the model's train_step keeps itself (`written_by_hand`), each with the program's name for
        it (``self.n_acc``, ``self.acc[3]``: the model's attributes, or a global's): kept in the bundle under those
        names (`step_state`), set again by name by a replay."""
        return step_state.named(model.train_step, self.written_by_hand)

    def captured_batch(self, captured: Any) -> tuple[Any, dict[str, np.ndarray]]:
        """(this process's part of a failing step's batch, nested as fed; Keras seed states from before the
        step), from the Optional the step handed back."""
        leaves, seeds_before = captured.get_value()
        # Ragged and sparse leaves stay ragged and sparse: densified, the replayed step would differ.
        flat = [batchcodec.from_tf_parts(list(parts)) for parts in leaves]
        data = tf.nest.map_structure(lambda index: flat[index], self.template)
        seed_states = {
            path: np.asarray(v.numpy()) for path, v in zip(self.seed_paths, seeds_before, strict=True)
        }
        return data, seed_states

    def model_info(self, model: keras.Model) -> dict[str, Any]:
        """The bundle's ``model`` entry: how the model was built and trained."""
        return {
            "class_name": type(model).__name__,
            "module": type(model).__module__,
            # Which of a program's models (a GAN trained with train_on_batch has two).
            "name": str(model.name),
            "jit_compile": bool(model.jit_compile),
            "run_eagerly": bool(model.run_eagerly),
            "steps_per_execution": self.steps_per_execution,
            "distribute_strategy": type(self.strategy).__name__,
            "num_replicas": self.strategy.num_replicas_in_sync,
            "optimizer": type(primary_optimizer(model)).__name__,
            "optimizers": [type(optimizer).__name__ for optimizer in model_optimizers(model)],
            # With "optimizer": which fit of a program that trains in phases (a replay by re-entry takes that one).
            "trainable_variables": len(model.trainable_variables),
            "loss_scale_optimizer": gate.is_loss_scale_optimizer(primary_optimizer(model)),
            "file": bundle_format.MODEL_FILE,
            **({fit_call.MANIFEST_KEY: self.fit_call.to_json()} if self.fit_call is not None else {}),
            **({"fit_input": self.fit_input} if self.fit_input is not None else {}),
            **({"first_step": self.first_step} if self.first_step is not None else {}),
            **_accumulation(primary_optimizer(model)),
            **_inner(primary_optimizer(model)),
        }

    # ---- called by Keras fit instead of its own train function ----

    def uninstall(self) -> None:
        """Give the model its own train function back (after fit, or when fit is aborted by an error)."""
        self.guard = None
        model = self.model_ref()
        if model is not None and model.train_function is self:
            model.train_function = self.keras_function

    def __call__(self, iterator: Any) -> Any:
        if self.find_fit_call is not None:
            self.fit_call, self.find_fit_call = self.find_fit_call(), None
        try:
            return self._run(iterator)
        except (tf.errors.OutOfRangeError, StopIteration):
            raise  # the end of an epoch, not an error
        except tf.errors.OpError as error:
            # An op of the model's step raised (a singular matrix's MatrixSolve): say so, and leave NanGuard's
            # frames (and TensorFlow's under them) out of the traceback, which then ends at the program's fit line
            # and TensorFlow's message naming the op's own line.
            guard = self.guard
            self.uninstall()
            if guard is not None:
                guard._step_raised(error)
            raise error.with_traceback(None) from None
        except BaseException:
            # fit is aborting and will not call on_train_end: do not leave the guard installed.
            self.uninstall()
            raise

    def _found_repeated_update(self) -> None:
        self._repeated_update = True

    def _traced(self, name: str, argument: Any) -> Any:
        """``self.<name>(argument)`` (`_step_on_iterator` or `_step_on_data`); when its first trace found repeated
        updates, the functions are made again and traced with copies (a failed trace ran nothing: the iterator has
        not moved)."""
        self._repeated_update = False
        try:
            result = getattr(self, name)(argument)
        except Exception:
            model = self.model_ref()
            if not self._repeated_update or self.copy_before_updates or model is None:
                raise
            self.copy_before_updates = True
            self._make_functions(model)
            result = getattr(self, name)(argument)
        model = self.model_ref()
        if self._trace_again and model is not None and not model.run_eagerly:
            self._trace_again = False
            self._make_functions(model)
        return result

    def _run(self, iterator: Any) -> Any:
        guard = self.guard
        logs = None
        if isinstance(iterator, (tf.data.Iterator, tf.distribute.DistributedIterator)):
            for index in range(self.steps_per_execution):
                self.input.see(iterator)
                try:
                    outputs, verdict, captured, kept = self._traced("_step_on_iterator", iterator)
                except tf.errors.OutOfRangeError:
                    if index == 0:
                        raise
                    break
                logs = outputs
                if guard is not None and not guard._after_step(self, verdict, captured, outputs, kept):
                    break
            return logs
        for _, data in zip(range(self.steps_per_execution), iterator, strict=False):
            logs, verdict, captured, kept = self._traced("_step_on_data", data)
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


def _inner(optimizer: Any) -> dict[str, str]:
    """``{"inner_optimizer": "Adam"}`` for a LossScaleOptimizer (``mixed_float16``): its own name tells no rate's
    usual size, its inner optimizer's does. {} otherwise."""
    inner = getattr(optimizer, "inner_optimizer", None)
    return {"inner_optimizer": type(inner).__name__} if inner is not None else {}


def _accumulation(optimizer: Any) -> dict[str, int]:
    """``{"gradient_accumulation_steps": k}`` for a Keras 3 optimizer that applies one update per k steps
    (``Adam(gradient_accumulation_steps=4)``): k steps of a fit are one update of the weights. {} otherwise."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)  # a LossScaleOptimizer's
    steps = getattr(inner, "gradient_accumulation_steps", None)
    return {"gradient_accumulation_steps": steps} if isinstance(steps, int) and steps > 1 else {}


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


def cached_functions(model: keras.Model) -> dict[tuple, GuardedTrainFunction]:
    return model.__dict__.setdefault(_CACHE_ATTRIBUTE, {})  # __dict__: no Keras attribute tracking
