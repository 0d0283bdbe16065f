"""guard_step: the NanGuard guarantees for custom training loops.

::

    ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer)

    @guard_step(checkpoint=ckpt, capture_dir="captures")     # or model=model, optimizer=optimizer
    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for x, y in dataset:
        train_step(x, y)          # raises NonFiniteStepError at a failing step (on_nan="stop")

The step function is compiled again by guard_step with the same options (``jit_compile``, ``input_signature``,
``reduce_retracing``, ``autograph``) plus the gate of `pyadapter.capture.gate` around every ``optimizer.apply``
/ ``apply_gradients`` of the given optimizers; a plain Python step function runs eagerly, gated the same way.
The step's arguments are kept in Python as the tensors the loop passed (nothing is copied on healthy steps); on a
failing step they become the bundle's batch, next to a tf.train.Checkpoint of what is trained (before the
update, which was not applied), the entry script and the step function's qualified name.

Losses are checked before the update when the step computes them through ``model.compute_loss`` or
``optimizer.scale_loss``, passes them to `pyadapter.capture.gate.record_loss`, or differentiates them (a scalar
target of ``tape.gradient``, see `pyadapter.capture.tape_targets`); gradients always (except under a
LossScaleOptimizer, which skips non-finite gradients by design). With several optimizers each update is gated on
its own gradients and the losses recorded before it.

Call the guarded step from Python (eagerly), e.g. in a ``for`` loop over a dataset; under a tf.distribute strategy
its ``strategy.run`` calls are gated across replicas like NanGuard's.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import inspect
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

# autograph's stack mapper (what tf.function's own conversion uses): no public name in TF 2.x
from tensorflow.python.autograph.impl import api as autograph_api

from pyadapter.capture import (
    atscene,
    bundle_format,
    datasource,
    gate,
    keras_lines,
    learning_rate,
    loop_bundle,
    rng,
    snapshot,
    step_state,
    storage,
    takeover,
)
from pyadapter.capture import history as step_history
from pyadapter.capture import window as step_window
from pyadapter.capture.options import GuardOptions
from pyadapter.capture.policy import Attempt, FailurePolicy, write_located
from pyadapter.capture.verdict import Failure, NonFiniteReport


class NonFiniteStepError(RuntimeError):
    """Raised by a guarded step at a non-finite step with ``on_nan="stop"``; ``.failure`` has the details."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message())
        self.failure = failure


# A traceback names it as users import it (``pyadapter.NonFiniteStepError: NanGuard: step 9 ...``), not as the
# module that raises it: the stop is NaN Lens doing its job, not an error inside it.
NonFiniteStepError.__module__ = "pyadapter"


class GuardedStep:
    """A step function wrapped by `guard_step`. Call it like the original; ``.failures`` / ``.last_bundle`` tell
    what happened; ``.python_function`` / ``.step_function`` are the original and what was wrapped."""

    def __init__(
        self,
        step_function: Any,
        *,
        options: GuardOptions,
        checkpoint: Any,
        model: Any,
        optimizer: Any,
    ) -> None:
        self.options = options
        self.policy = FailurePolicy(self.options)
        objects = {}
        if checkpoint is not None:
            objects.update(loop_bundle.trackable_children(checkpoint))
        if model is not None:
            objects.setdefault("model", model)
        if optimizer is not None:
            objects.setdefault("optimizer", optimizer)
        if not objects:
            raise ValueError("guard_step needs checkpoint=tf.train.Checkpoint(...) or model= and optimizer=")
        self.checkpoint = checkpoint if checkpoint is not None else tf.train.Checkpoint(**objects)
        # Keras 3 or tf_keras (TF_USE_LEGACY_KERAS=1) objects, not a mix of both lines (one line says so).
        self.models = [v for v in objects.values() if keras_lines.is_model(v)]
        self.optimizers = [v for v in objects.values() if keras_lines.is_optimizer(v)]
        if optimizer is not None and optimizer not in self.optimizers:
            self.optimizers.append(optimizer)
        keras_lines.check_same_line([*self.models, *self.optimizers], "guard_step")
        # What a step that updates by hand trains (tf.Module variables, bare tf.Variables): with no Keras
        # optimizer to gate, their writes are gated (`gate_manual`), and they are part of the step's state.
        self._hand_variables, self._hand_names = _trained_by_hand(objects, self.models)
        if not self.optimizers and not self.trainable_variables():
            raise ValueError(
                "guard_step found nothing to gate: no Keras optimizer and no trainable variable (pass "
                "optimizer=..., or checkpoint=tf.train.Checkpoint(model=...) of what the step trains)"
            )
        self.step_function = step_function
        self.capture_dir = self.options.capture_dir
        self.on_nan = options.on_nan
        self.run_name = options.run_name
        self.config = options.gate_config
        self.max_bundles = options.max_bundles
        self.max_consecutive_skips = options.max_consecutive_skips
        self.locate = options.locate
        self.verbose = options.verbose
        self.failures: list[Failure] = self.policy.failures
        self.meta = gate.GateMeta()  # of the call that just ran
        self._traces: list[
            tuple[gate.GateMeta, list[str]]
        ] = []  # per trace of the compiled step: seed paths too
        self._written_by_hand: list[Any] = []  # variables the step writes itself, seen while it was traced
        self._history: collections.deque = collections.deque(maxlen=options.history_size)
        self._calls = 0
        self._first_iteration: int | None = None
        self._seed_paths: list[str] = []
        # Python's and NumPy's random states before the last call of a plain Python step (`_traced`); None for a
        # tf.function step.
        self.host_random_before: rng.HostStates | None = None
        # The window (`pyadapter.capture.window`): the arguments of the last steps, kept by reference, and the state
        # copied every `window` steps. Off for per-replica arguments (decided at the first call).
        self._window: step_window.WindowKeeper | None = (
            step_window.WindowKeeper(
                options.window,
                self._state_variables,
                frozen=lambda: [w for m in self.models for w in keras_lines.frozen_weights(m)],
            )
            if options.window
            else None
        )

        # The last trace made Keras's global SeedGenerator (`rng.states_before_step`): trace again after its call.
        self._trace_again = False
        if isinstance(step_function, tf.types.experimental.PolymorphicFunction):
            self.python_function = step_function.python_function
            self._autograph = bool(getattr(step_function, "_autograph", True))
            self._compiled = self._compile(step_function)
        else:
            self.python_function = step_function
            self._autograph = False
            self._compiled = self._traced
        functools.update_wrapper(self, self.python_function)

    def _compile(self, step_function: Any) -> Any:
        """Our tf.function around `_traced`, compiled as the user's `step_function` was."""

        @tf.autograph.experimental.do_not_convert
        def traced(*args: Any, **kwargs: Any) -> Any:
            return self._traced(*args, **kwargs)

        # The step's own signature, so input_signature and keyword arguments bind as they did before.
        functools.update_wrapper(
            traced, self.python_function, assigned=("__name__", "__qualname__", "__doc__")
        )
        traced.__signature__ = inspect.signature(self.python_function)
        return tf.function(
            traced,
            input_signature=step_function.input_signature,
            jit_compile=getattr(step_function, "_jit_compile", None),
            reduce_retracing=getattr(step_function, "_reduce_retracing", False),
            autograph=False,  # ours is plain Python; the step itself is converted in _traced
        )

    @property
    def last_bundle(self) -> Path | str | None:
        return self.policy.last_bundle

    @property
    def window_copy_every(self) -> int | None:
        """Steps between the window's state copies now: ``window``, or more once copies would cost over 0.5% of
        the training time (see `pyadapter.capture.window`); None while the window is off."""
        keeper = self._window
        return keeper.copy_every if keeper is not None and keeper.enabled else None

    def _seed_states(self, with_global: bool = False) -> list[tuple[str, Any]]:
        found: list[tuple[str, Any]] = []
        for model in self.models:
            found += [
                (path, variable)
                for path, variable in rng.seed_generator_states(model, with_global=with_global)
                if all(variable is not seen for _, seen in found)
            ]
        return found

    def _traced(self, *args: Any, **kwargs: Any) -> Any:
        # A plain Python step runs here for each call and may draw from Python's and NumPy's generators (an
        # episode's actions): their states before it, for the bundle and the scene's re-run. A traced step's
        # draws are ops, seeded through its graph.
        host = rng.host_states() if tf.executing_eagerly() else None
        with rng.states_before_step(self._seed_states(with_global=True)) as before:
            result, verdict, meta, scope = self._gated_call(args, kwargs)
        seed_paths = [path for path, _ in before.states]
        seeds_before = tuple(read for _, read in before.states)
        self._trace_again |= before.global_made_by_step
        # Variables the step keeps by hand (gradient accumulators): restored around the scene's and the window's
        # re-runs like the models' (a re-run of the failing step would leave its NaN in them).
        self._written_by_hand = snapshot.unique([*self._written_by_hand, *gate.written_by_hand(scope)])
        if tf.executing_eagerly():  # a plain Python step: this call's own
            self.meta = meta
            self._seed_paths = seed_paths
            self.host_random_before = host
            return result, verdict, seeds_before, tf.constant(-1)
        # A step traced once per Python argument value (``apply_now=True/False``) has one gate per trace: each call
        # says which trace ran, so its verdict is read with that trace's names (and its seed states with its paths).
        self._traces.append((meta, seed_paths))
        return result, verdict, seeds_before, tf.constant(len(self._traces) - 1)

    def _gated_call(self, args: tuple, kwargs: dict) -> tuple[Any, Any, gate.GateMeta, Any]:
        function = self.python_function
        source_map: Any = contextlib.nullcontext()
        if self._autograph:
            # As tf.function(autograph=True) would: Python control flow on tensors becomes graph control flow; and,
            # as its converted_call does, the ops' stacks name the step's own lines, not autograph's generated
            # temporary file (a dump's stack frames are what locate maps to the user's code).
            # A bound method (a trainer's ``tf.function(self._train_step)``): to_graph converts its function and
            # drops ``self``, so the converted function is bound to it again.
            owner = function.__self__ if inspect.ismethod(function) else None
            converted = tf.autograph.to_graph(function, recursive=True)
            source_map = autograph_api.StackTraceMapper(converted)
            function = converted if owner is None else functools.partial(converted, owner)
        by_hand = not self.optimizers
        with gate.hooks(
            self.optimizers,
            self.models,
            self.config,
            manual_variables=self.trainable_variables() if by_hand else None,
            manual_names=self._hand_names if by_hand else None,
            # With no optimizer too: a hand-written Adam's slots and step counter are the step's own state, held
            # back when it fails and kept by the window, as an accumulator is (s41e p2).
            known_variables=self._known_variables(),
        ) as scope:
            with source_map:
                result = function(*args, **kwargs)
            verdict, meta = gate.combine(scope)
        return result, verdict, meta, scope

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if tf.inside_function():
            raise gate.GuardError(
                "call the guarded step from Python (eagerly), not from inside another tf.function"
            )
        replay = takeover.active()
        if (
            replay is not None
        ):  # a replay by re-entry: this call is the captured step, from the captured state
            replay.guarded_step(self, args, kwargs)
        if self._first_iteration is None:
            # A step that updates by hand counts no iterations: its steps are this guard's calls.
            self._first_iteration = int(self.optimizers[0].iterations.numpy()) if self.optimizers else 0
            if self._window is not None and any(
                isinstance(v, tf.distribute.DistributedValues) for v in tf.nest.flatten((args, kwargs))
            ):
                self._window = None  # one device's arguments and state only
            if self._window is not None:
                if isinstance(self._compiled, tf.types.experimental.PolymorphicFunction):
                    # Trace first (the call then runs that trace): the variables the step writes itself (a hand-
                    # written Adam's slots, its step counter ``t``) are known only from the trace, and the window's
                    # first copy must hold them too. Taking back step 0's update left them as the step wrote them,
                    # and the re-runs, from t = 1, never divided by 1 - beta1 ** 0 (s41e p2).
                    self._compiled.get_concrete_function(*args, **kwargs)
                self._window.start(self._first_iteration)
        result, verdict, seeds_before, trace = self._compiled(*args, **kwargs)
        if self._trace_again:
            self._trace_again = False
            self._compiled = self._compile(self.step_function)
        if int(trace) >= 0:
            self.meta, self._seed_paths = self._traces[int(trace)]
        step = self._first_iteration + self._calls
        index = self._calls
        self._calls += 1
        loss = verdict.loss if "loss" in self.meta.checked else _scalar_loss(result)
        self._history.append(step_history.HistoryEntry(step, loss, None, verdict.metrics))
        if bool(verdict.ok):
            self.policy.passed()
            if self._window is not None:
                self._window.after_step(step, (args, kwargs))
            return result
        stop = self.policy.failed()
        returned_loss_bad = (
            loss is not None and "loss" not in self.meta.checked and not np.isfinite(loss.numpy())
        )
        report = gate.report(
            verdict, self.meta, self.trainable_variables(), loss_seen_bad=bool(returned_loss_bad)
        )
        if report.update_applied and self._window is not None:
            report.update_taken_back = self._take_back_update(step, (tuple(args), dict(kwargs)))
        caller = sys._getframe(1)  # the loop's frame: its dataset, if a local there reads files
        if self.run_name is None:
            # Named once, before the locate: findings.json names the bundle's folder, which the writer makes later.
            self.run_name = snapshot.default_run_name()

        def write(attempt: Attempt) -> None:
            seed_states = {
                p: np.asarray(v.numpy()) for p, v in zip(self._seed_paths, seeds_before, strict=True)
            }
            not_held = self.variables_not_held(args, kwargs)
            not_held_entry = (
                {bundle_format.NOT_HELD_KEY: {"count": len(not_held), "names": not_held[:20]}}
                if not_held
                else {}
            )
            write_located(
                attempt,
                locate=lambda bundle: self._locate_at_scene(
                    report, step, index, args, kwargs, seed_states, bundle
                ),
                window_files=lambda located: self._window_files(located, step, index, args, kwargs),
                # (its position in the dataset is not known)
                data_source=lambda: datasource.manifest_entry(
                    datasource.dataset_in_frame(caller),
                    {"args": list(snapshot.to_numpy_structure(tuple(args)))},
                    None,
                ),
                write=lambda files, extra: loop_bundle.write_bundle(
                    self, report, step, index, args, kwargs, seed_states, files, {**extra, **not_held_entry}
                ),
                remote=storage.is_remote(self.capture_dir),
            )
            attempt.note = bundle_format.not_held_warning(len(not_held), not_held[:20])

        attempt = self.policy.attempt(write)
        failure = self.policy.record(step, None, index, report, attempt, stop)
        if self._window is not None and not stop:  # skip mode goes on: the step is part of later windows
            self._window.after_step(step, (args, kwargs), refused=True)
        if stop:
            raise NonFiniteStepError(failure)
        self.policy.say(failure)
        return result

    def trainable_variables(self) -> list[Any]:
        """What the step trains: its Keras models' trainable variables, what its optimizers update besides (bare
        ``tf.Variable`` weights no model lists), then what it updates by hand."""
        return snapshot.unique(
            [
                *(v for m in self.models for v in m.trainable_variables),
                *(v for o in self.optimizers for v in keras_lines.trained_variables(o)),
                *self._hand_variables,
            ]
        )

    def step_state(self, args: tuple, kwargs: dict) -> list[tuple[Any, str]]:
        """The variables the step keeps itself (gradient accumulators, a micro-step counter) or reads and nothing
        else holds (a temperature the loop anneals), each with the name the program gives it (``accum_grads[2]``,
        ``temperature``, ``self.temperature``): kept in the bundle under those names (`step_state`)."""
        return self._named_state(self._unheld_variables(args, kwargs))

    def _named_state(self, unheld: list[Any]) -> list[tuple[Any, str]]:
        """`step_state` of the step's own writes and the `unheld` variables it reads."""
        return step_state.named(self.python_function, snapshot.unique([*self._written_by_hand, *unheld]))

    def hand_variables(self) -> list[Any]:
        """The variables of the step's tf.Modules and its bare tf.Variables (a step that updates by hand)."""
        return list(self._hand_variables)

    def _known_variables(self) -> list[Any]:
        """The variables the gate and the metric restore take care of: the models' (metrics' included) and the
        optimizers'. A write to any other in the step is held back when the step fails (an accumulator of
        gradients)."""
        return [
            *(v for m in self.models for v in [*m.variables, *keras_lines.metrics_variables(m)]),
            *(v for o in self.optimizers for v in keras_lines.optimizer_variables(o)),
        ]

    def hand_variable_names(self) -> dict[int, str]:
        """Names of the variables the step trains, by id: ``model.w`` for a tf.Module's (see `_trained_by_hand`)."""
        return dict(self._hand_names)

    def _state_variables(self) -> list[Any]:
        """What the window copies: the models', optimizers' and checkpoint's variables and the seed states."""
        # Variables the checkpoint holds, also in a list or dict (``Checkpoint(params=[w_x, w_h])``).
        held = [
            v
            for v in tf.nest.flatten(list(loop_bundle.trackable_children(self.checkpoint).values()))
            if isinstance(v, tf.Variable)
        ]
        return snapshot.unique(
            [
                *(v for m in self.models for v in keras_lines.model_variables(m)),
                *(v for o in self.optimizers for v in keras_lines.optimizer_variables(o)),
                *held,
                *self._hand_variables,
                *self._written_by_hand,
                *(v for _, v in self._seed_states()),
            ]
        )

    def variables_not_held(self, args: tuple, kwargs: dict) -> list[str]:
        """Names of the variables the compiled step reads that the bundle does not hold: a network the step only
        reads (a DQN's target network, a frozen teacher) given to guard_step neither as ``model=`` nor in
        ``checkpoint=``, and that the program names by no name of its own (`step_state`). A replay starts those
        from the values the re-run program gives them, not training's. Empty for a step that is not a tf.function
        (its reads are not known without running it)."""
        unheld = self._unheld_variables(args, kwargs)  # (the step's trace looked up once)
        kept = {id(v) for v, _ in self._named_state(unheld)}
        return [v.name.split(":")[0] for v in unheld if id(v) not in kept]

    def _unheld_variables(self, args: tuple, kwargs: dict) -> list[Any]:
        """The variables of the compiled step's trace for `args` that no model, optimizer, checkpoint or the
        step's own writes hold."""
        if not isinstance(self._compiled, tf.types.experimental.PolymorphicFunction):
            return []
        try:  # the trace the failing call used
            concrete = self._compiled.get_concrete_function(*args, **kwargs)
        except Exception:  # noqa: BLE001 - a signature it cannot restate: say nothing rather than guess
            return []
        held = {
            id(backing)
            for v in [
                *self._state_variables(),
                *(v for m in self.models for v in keras_lines.metrics_variables(m)),
            ]
            for backing in _backings(v)
        }
        # A Keras SeedGenerator's state is random state, not a network: the bundle's RNG record speaks for it.
        held |= gate.guard_variable_ids()  # the guard's own flags of an update in a branch
        return [v for v in concrete.variables if id(v) not in held and "seed_generator" not in v.name]

    def rate_first(self) -> list[Any]:
        """The optimizers, the one of the largest learning rate now first (the others in their order): a GAN whose
        generator's SGD(0.02) beside its discriminator's SGD(0.002) diverged was told the first optimizer's rate
        and line (the discriminator's), and lowering it did not help. The window search scales every rate alike
        and reports the first's; the bundle records the first's rate."""
        if len(self.optimizers) < 2:
            return list(self.optimizers)

        def rate(optimizer: Any) -> float:
            try:
                used = learning_rate.of_step(optimizer, int(optimizer.iterations.numpy()))
            except Exception:  # noqa: BLE001 - an optimizer whose rate cannot be read keeps its place
                return -math.inf
            return used.value if used is not None and used.finite else -math.inf

        return sorted(self.optimizers, key=rate, reverse=True)

    def _live_step(self, like: tuple[tuple, dict] | None = None) -> atscene.LiveStep:
        """The step a window re-runs: the loop's own Python step on the window's held arguments (object arguments,
        a model passed to the step, as in `like`: the failing call)."""
        models = list(self.models)

        def reset() -> None:
            for model in models:
                model.reset_metrics()

        return atscene.LiveStep(
            call=self.python_function,
            kind=bundle_format.KIND_LOOP,
            to_numpy=lambda held: loop_bundle.batch_of(*held),
            trainable=self.trainable_variables(),
            optimizers=self.rate_first(),
            extra_state=[v for m in models for v in keras_lines.metrics_variables(m)],
            reset=reset,
            like=like,
        )

    def _take_back_update(self, step: int, like: tuple[tuple, dict]) -> bool:
        """`atscene.take_back_update` for this loop. Never raises: the bundle then says the weights are the ones
        after the update."""
        keeper = self._window
        if keeper is None:
            return False
        try:
            return atscene.take_back_update(keeper, step, self._live_step(like), self.verbose)
        except Exception as exc:  # noqa: BLE001 - the bundle matters more than taking the update back
            if self.verbose:
                print(f"guard_step: could not take the update back: {exc}".splitlines()[0], file=sys.stderr)
            return False

    def _window_files(
        self, located: atscene.SceneFiles, step: int, index: int, args: tuple, kwargs: dict
    ) -> tuple[dict[str, bundle_format.ExtraFile], dict[str, Any]]:
        """The window's bundle files and manifest entry, with the learning-rate search for a divergence located
        here. Never raises: the bundle is written without the window instead."""
        keeper = self._window
        if keeper is None:
            return {}, {}
        live = self._live_step((tuple(args), dict(kwargs)))
        failing = live.to_numpy((args, kwargs))
        try:
            search = atscene.window_search(
                keeper,
                located,
                live,
                failing_batch=failing,
                step=step,
                history=self._history,
                model_info={
                    "optimizer": type(live.optimizers[0]).__name__ if live.optimizers else None,
                    "optimizers": [type(o).__name__ for o in self.optimizers],
                },
                epoch=None,
                batch_index=index,
                verbose=self.verbose,
            )
            rate = step_window.current_learning_rate(live.optimizers[0]) if live.optimizers else None
            return keeper.files(step, failing, live.to_numpy, learning_rate=rate, search=search)
        except Exception as exc:  # noqa: BLE001 - the bundle matters more than its window
            return {}, step_window.error_entries(exc)

    def _locate_at_scene(
        self,
        report: NonFiniteReport,
        step: int,
        index: int,
        args: tuple,
        kwargs: dict,
        seed_states: dict[str, np.ndarray],
        bundle: Path | str | None = None,
    ) -> atscene.SceneFiles:
        """Re-run the failing step here under a dump (`pyadapter.replay.scene`): findings.json for the bundle.
        `bundle`: where it was written already (None: it is written after)."""
        if not atscene.locate_enabled(self.locate):
            return atscene.SceneFiles()
        if any(isinstance(v, tf.distribute.DistributedValues) for v in tf.nest.flatten((args, kwargs))):
            if self.verbose:  # say why the editor will not mark a line at once, and what will
                print(
                    "NaN Lens: not located here: the step's arguments are per-replica (a tf.distribute strategy); "
                    "`nanlens locate` on the bundle replays the step on one device",
                    file=sys.stderr,
                    flush=True,
                )
            return atscene.SceneFiles(
                manifest={
                    "located_at_scene": {"skipped": "per-replica arguments: locate the bundle on one device"}
                }
            )
        from pyadapter.replay import scene

        seeds = self._seed_states(with_global=True)
        seed_variables = [variable for _, variable in seeds]
        # Variables the checkpoint holds, also in a list or dict (``Checkpoint(params=[w_x, w_h])``).
        held = [
            v
            for v in tf.nest.flatten(list(loop_bundle.trackable_children(self.checkpoint).values()))
            if isinstance(v, tf.Variable)
        ]
        variables = [
            v
            for m in self.models
            for v in [*keras_lines.model_variables(m), *keras_lines.metrics_variables(m)]
        ]
        variables += [v for o in self.optimizers for v in keras_lines.optimizer_variables(o)]
        step_call = scene.SceneStep(
            step=self.python_function,
            args=tuple(args),
            kwargs=dict(kwargs),
            variables=snapshot.unique(
                [*variables, *held, *self._hand_variables, *self._written_by_hand, *seed_variables]
            ),
            trainable=self.trainable_variables(),
            optimizers=list(self.optimizers),
            seeds_before={id(v): seed_states[p] for p, v in seeds if p in seed_states},
            seed_variables=seed_variables,
            compiled_with_xla=bool(getattr(self.step_function, "_jit_compile", False)),
            forward_state=gate.forward_state_variables(list(self.models)),
            host_random=self.host_random_before,
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
            epoch=None,
            batch_index=index,
            kind=bundle_format.KIND_LOOP,
            batch_problem_of=loop_bundle.batch_of(args, kwargs),
            bundle=bundle,
        )


def _scalar_loss(result: Any) -> Any:
    for value in tf.nest.flatten(result):
        if isinstance(value, tf.Tensor) and value.dtype.is_floating and value.shape.rank == 0:
            return value
    return None


def _backing(variable: Any) -> Any:
    """The tf.Variable a compiled function captures for `variable` (a Keras 3 variable holds one as ``.value``)."""
    value = getattr(variable, "value", None)
    return value if isinstance(value, tf.Variable) else variable


def _backings(variable: Any) -> list[Any]:
    """`_backing`, and under a tf.distribute strategy its per-replica variables, which a step run by
    ``strategy.run`` captures instead (every one was named "a variable the bundle does not hold")."""
    backing = _backing(variable)
    values = (
        getattr(backing, "values", None) if isinstance(backing, tf.distribute.DistributedValues) else None
    )
    return [backing, *values] if isinstance(values, tuple) else [backing]


def guard_step(
    step_function: Any = None,
    *,
    capture_dir: str | Path = ".nanlens/captures",
    checkpoint: Any = None,
    model: Any = None,
    optimizer: Any = None,
    on_nan: str = "stop",
    run_name: str | None = None,
    check_weights: bool = True,
    protect_weights: bool = False,
    max_bundles: int = 5,
    max_consecutive_skips: int | None = 100,
    history_size: int = step_history.DEFAULT_SIZE,
    locate: bool = True,
    window: int = step_window.DEFAULT_SIZE,
    verbose: bool = True,
) -> Any:
    """Guard a custom training step: decorator (``@guard_step(checkpoint=ckpt)``) or wrapper
    (``step = guard_step(step, model=m, optimizer=o)``). See the module docstring.

    Args:
        step_function: the step (a tf.function or a plain Python function, which then runs eagerly).
        capture_dir: where bundles go (``capture_dir/<run>-step<N>/``).
        checkpoint: a tf.train.Checkpoint of what is trained; its Keras optimizers are gated and its Keras
            models' ``compute_loss`` watched. Saved (``checkpoint.write``) into the bundle on a failing step.
        model, optimizer: instead of / in addition to `checkpoint`.
        on_nan: ``"stop"`` (raise `NonFiniteStepError`) or ``"skip"`` (return the step's result, go on).
        Other arguments as for `NanGuard`.
    """
    options = GuardOptions.of(locals())  # validated now, as NanGuard's are
    given = dict(options=options, checkpoint=checkpoint, model=model, optimizer=optimizer)
    if step_function is None:
        return lambda function: GuardedStep(function, **given)
    return GuardedStep(step_function, **given)


def _trained_by_hand(objects: dict[str, Any], models: list[Any]) -> tuple[list[Any], dict[int, str]]:
    """The trainable variables of the non-Keras tf.Modules and the bare trainable tf.Variables among the objects
    guard_step was given, and a name for each (by id of the variable and of a keras.Variable's tf.Variable):
    ``model.w`` for ``Checkpoint(model=m)`` and ``m.w``. Keras models' variables are named by their paths."""
    variables: list[Any] = []
    names: dict[int, str] = {}

    def add(variable: Any, name: str) -> None:
        if not getattr(variable, "trainable", False) or any(variable is v for v in variables):
            return
        variables.append(variable)
        names[id(variable)] = name
        inner = getattr(variable, "value", None)
        if isinstance(inner, tf.Variable):
            names[id(inner)] = name

    for key, value in objects.items():
        if isinstance(value, tf.Variable):
            add(value, key)
        elif (
            isinstance(value, tf.Module)
            and not keras_lines.is_model(value)
            and not keras_lines.is_optimizer(value)
        ):
            for path, variable in value._flatten(  # tf.Module's own walk, with attribute paths
                predicate=lambda v: isinstance(v, tf.Variable), with_path=True
            ):
                add(variable, ".".join([key, *(str(p) for p in path)]))
    for model in models:
        for variable in model.trainable_variables:
            names[id(variable)] = snapshot.variable_path(variable)
            inner = getattr(variable, "value", None)
            if isinstance(inner, tf.Variable):
                names[id(inner)] = names[id(variable)]
    return variables, names
