"""Replay by re-entry: run the user's own program and take it over at its first training step.

Rebuilding a step from the bundle alone (import the script as a module, deserialize ``model.keras``) works only
for programs shaped for it. Re-entry does not care about the shape: the entry script runs as ``__main__`` (or a
notebook's code cells run in order, as one program), and builds its model, optimizers and data exactly as it did
in training. The first Keras ``fit`` (at ``on_train_begin``, once the model is built) or the first call of the
``guard_step`` function does not train: the captured weights, optimizer state, random-generator state and batch
are loaded into the objects the program just built, the caller's action runs the captured step (graph, eager,
under a dump or a debugger), and the program ends there. Its setup work (reading data, building the model) is
the price of this route.

The program runs only here, in a replay the user asked for. It is the program from the bundle's entry record as
it is on this disk now: a module-level training script, a ``keras.Model`` subclass with constructor arguments
and its own ``train_step``, or a notebook all work unchanged. Under a debugger, breakpoints are paused while the
program sets itself up and come back for the eager step.
"""

from __future__ import annotations

import ast
import contextlib
import itertools
import linecache
import os
import re
import runpy
import signal
import sys
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from pyadapter.capture import takeover
from pyadapter.capture.fit_call import MANIFEST_KEY as FIT_CALL_KEY
from pyadapter.capture.fit_call import FitCall, FitCounter, calling_line, running_cell
from pyadapter.findings import placed_records
from pyadapter.replay.cell_files import (
    NANLENS_FOLDER,
    cell_file,
    cell_files_dir,
    notebook_cell_of,
    shown_place,
)  # noqa: F401 - read from here too
from pyadapter.replay.debugger import breakpoints_paused
from pyadapter.replay.entry import package_root
from pyadapter.replay.errors import ReplayError
from pyadapter.replay.scratch_files import ScratchFiles

T = TypeVar("T")

DEFAULT_REENTRY_TIMEOUT = 600.0  # seconds until the program must reach its first training step


class _Finished(BaseException):
    """Unwinds the user's program once the captured step ran (a BaseException: ``except Exception`` in the
    user's code does not stop it)."""


class _TimedOut(BaseException):
    pass


# Why the last fit a re-entry passed over was not the captured one, when it was an earlier call of the same line.
_EARLIER_CALL = "the last an earlier call of the captured fit's line"
# Why a guard_step bundle's re-entry passed a fit over: it came before the guarded loop.
_BEFORE_THE_STEP = "a fit before the guarded step"


def is_notebook(path: str | Path) -> bool:
    return str(path).lower().endswith(".ipynb")


class _BundleTakeover:
    """Loads the bundle's captured state into the program's live objects, runs the action, ends the program."""

    def __init__(self, bundle: Any, action: Callable[[Any], Any]) -> None:
        self.bundle = bundle
        self.action = action
        self.reached: str | None = None
        self.result: Any = None
        self.error: BaseException | None = None
        self.seconds_to_step = 0.0
        self.phases_skipped = 0  # fits before the captured one, run one step each (`takes_fit`)
        self.last_skip_reason: str | None = (
            None  # why the last fit skipped was not the captured one, said whole
        )
        self.other_steps = 0  # calls of the program's other guarded functions, run as they would
        self.started = time.perf_counter()
        self.fits = FitCounter()  # the fits this re-entry has begun, per calling line
        self.kernel_order = False  # a notebook's cells ran in the order its kernel ran them (`kernel_order`)
        self.current_fit: FitCall | None = None  # the fit being begun (`begin_fit`)
        # The program's own code (a script, or a notebook's code cells), for `takes_fit`.
        self.program_text = ""
        # The program's writes to files training left go to a scratch copy (set up by run_by_reentry).
        self.files = ScratchFiles([])

    def begin_fit(self, call: tuple[str, int, str] | None) -> None:
        """A ``fit`` of the program begins, called from `call` (file, line, text)."""
        if call is None:
            self.current_fit = None
            return
        path, _, code = call
        cell = notebook_cell_of(path)
        if cell is None:
            self.current_fit = self.fits.begin(code)
            return
        # The cell running (which may call a function of the fit's cell); its fits are counted per run of it, as
        # training counted them per execution of the cell (a fit cell the kernel ran again is run again here).
        running = running_cell(lambda file, _: notebook_cell_of(file))
        if running is None:
            running = cell[1]
        self.current_fit = self.fits.begin(code, cell[1], _CELL_RUN.number, running)

    def _not_the_captured_fit(self) -> bool:
        """Whether the fit being begun is not the one the bundle came from, told by its calling line (a resumed
        run's second fit, a later fold of a cross-validation, a notebook cell's fit after a healthy one in an
        earlier cell). Undecided (False) when the bundle or this call lacks it, or when the captured line's text
        is no longer in the program (edited: the other checks decide)."""
        recorded = FitCall.from_json(self.bundle.model_info.get(FIT_CALL_KEY))
        current = self.current_fit
        if recorded is None or current is None or recorded.code not in self.program_text:
            return False
        return not recorded.same_fit(current)

    def _run(self, where: str, build: Callable[[], Any]) -> None:
        self.reached = where
        self.seconds_to_step = time.perf_counter() - self.started
        try:
            with breakpoints_paused(), self.files.paused():
                rebuilt = build()
            with self.files.paused():
                self.result = self.action(rebuilt)
        except BaseException as exc:  # noqa: BLE001 - carried out of the user's program, raised by run_by_reentry
            self.error = exc
        raise _Finished

    def keras_fit(self, model: Any, call: str = "fit") -> None:
        self._run(f"{type(model).__name__}.{call}", lambda: _keras_rebuilt(self.bundle, model))

    def takes_fit(self, model: Any) -> bool:
        """Whether this ``fit`` is the bundle's: a program that trains in phases (the head on a frozen base, then the
        whole model fine-tuned with another optimizer) calls fit more than once, and the captured state fits only
        the phase it came from. Told by the line that called it (`_not_the_captured_fit`: a resumed run, a fold of a
        cross-validation, a notebook's second fit), the optimizer's class and the number of trainable variables the
        manifest records (the class alone while the model has no weights yet), and the shapes of the model's
        variables (a grid search's models of other widths); a bundle without them takes the first fit."""
        from pyadapter.capture.bundle_format import KIND_FIT
        from pyadapter.capture.guard import primary_optimizer

        if self.bundle.kind != KIND_FIT:
            # A guard_step bundle: a fit before the guarded loop is an earlier phase (a distillation's teacher
            # trained with fit, then the student in a custom loop), run one step on the way to the step; it was
            # taken over and refused ("the program reached Keras fit first", s40f p6). What the step reads of the
            # teacher the bundle holds by the program's name for it.
            self.phases_skipped += 1
            self.last_skip_reason = _BEFORE_THE_STEP
            return False
        if self._not_the_captured_fit():
            self.phases_skipped += 1
            recorded = FitCall.from_json(self.bundle.model_info.get(FIT_CALL_KEY))
            same_line = (
                recorded is not None
                and self.current_fit is not None
                and recorded.code == self.current_fit.code
            )
            # A loop of one-epoch fits calls one line: its earlier calls are no "other line".
            self.last_skip_reason = (
                _EARLIER_CALL if same_line else "the last called from another line than the captured fit"
            )
            return False
        info = self.bundle.model_info
        optimizer, trainable = info.get("optimizer"), info.get("trainable_variables")
        if not isinstance(optimizer, str) or not isinstance(trainable, int):
            return True
        try:
            name = type(primary_optimizer(model)).__name__
        except (ValueError, AttributeError):  # no optimizer: Keras raises its own error for that fit
            return True
        # A subclassed model makes its weights at its first call: before its first fit, only the optimizer tells.
        built = all(layer.built for layer in model._flatten_layers())
        if name != optimizer:
            reason: str | None = f"its optimizer is {name}, the captured one {optimizer}"
        elif not built:
            return True
        elif len(model.trainable_variables) != trainable:
            reason = f"its model has {len(model.trainable_variables)} trainable weights, the captured one {trainable}"
        else:
            reason = self._other_shape(model)
        if reason is None:
            return True
        self.phases_skipped += 1
        # Run with the argv the bundle recorded, a program builds another model from settings it reads elsewhere.
        self.last_skip_reason = (
            f"the last: {reason}; a program that reads its settings from environment variables or a file builds "
            "another model when they differ from training's: run nanlens with them as training had them"
        )
        return False

    def _other_shape(self, model: Any) -> str | None:
        """The first of the model's variables whose shape is not the captured value's, said in a few words, or None
        (the same shapes in order, or a manifest that lists none: an older bundle). A grid search fits a model of
        another width first, with the same optimizer class and number of weights; a width read from an environment
        variable (``HIDDEN=64 python train.py``) replayed without it builds one too."""
        from pyadapter.capture import keras_lines
        from pyadapter.capture.snapshot import variable_path

        captured = [
            v
            for v in (self.bundle.manifest.get("weights") or {}).get("variables") or []
            if isinstance(v, dict) and v.get("group") == "model"
        ]
        if not captured:
            return None
        variables = keras_lines.model_variables(model)
        for entry, variable in zip(captured, variables, strict=False):
            if entry.get("shape") != list(variable.shape):
                return (
                    f"its model's {variable_path(variable)} is {list(variable.shape)}, the captured one "
                    f"{entry.get('shape')}"
                )
        if len(captured) != len(variables):
            return f"its model has {len(variables)} variables, the captured one {len(captured)}"
        return None

    def takes(self, model: Any) -> bool:
        """Whether a ``train_on_batch`` of `model` is the bundle's step: the model the guard watched, told by the
        name Keras gave it (the program makes its models in the same order again, so a GAN's discriminator and
        combined model get the names they had). A bundle without the name takes the first call; a guard_step bundle
        none."""
        from pyadapter.capture.bundle_format import KIND_FIT

        if self.bundle.kind != KIND_FIT:
            return False  # a guard_step bundle: its step is the guarded function's, reached later
        name = self.bundle.model_info.get("name")
        return not isinstance(name, str) or getattr(model, "name", None) == name

    def guarded_step(self, guarded: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        name = getattr(guarded.python_function, "__qualname__", "the guarded step")
        recorded = (self.bundle.manifest.get("step_function") or {}).get("qualname")
        if isinstance(recorded, str) and recorded != name:
            # Another guarded function of the program (a GAN's train_g before the train_d that failed): it trains
            # as it would, and the captured one is taken over when it is called. It was taken over instead and fed
            # the other step's batch ("Input 0 of layer dense_6 is incompatible").
            self.other_steps += 1
            return
        self._run(name, lambda: _loop_rebuilt(self.bundle, guarded, (tuple(args), dict(kwargs))))


def _keras_rebuilt(bundle: Any, model: Any) -> Any:
    from pyadapter.capture import step_state
    from pyadapter.capture.bundle_format import KIND_FIT
    from pyadapter.capture.guard import model_optimizers
    from pyadapter.replay.rebuild import Rebuilt, keras_step_program, non_finite_inputs, to_tensors
    from pyadapter.replay.state import assign_captured_state

    if bundle.kind != KIND_FIT:
        raise ReplayError(
            f"{bundle.path}: the bundle was captured by guard_step, but the program reached Keras fit first"
        )
    _refuse_tf_keras_under_replicas(bundle, model)
    optimizers = model_optimizers(model)
    data = to_tensors(bundle.batch())
    if _unbuilt([model], optimizers):
        _warm_up(model.train_step, (data,), {})
    # The step has built every optimizer it applies; one still unbuilt is one it does not use (the optimizer of a
    # GAN's bare super().compile()), and building it would only add variables the capture had no values for.
    warnings = assign_captured_state(bundle.weight_entries(), model, optimizers, build=False)
    # Accumulators and a micro-step counter the model's train_step keeps itself, found by the program's names for
    # them (``self.n_acc``: the model's attributes).
    kept, missed = step_state.assign(step_state.namespace_of(model.train_step), bundle.step_state_entries())
    warnings += missed
    program = keras_step_program(bundle, model, optimizers, data, kept=kept)
    program.snapshot()
    return Rebuilt(
        bundle=bundle,
        entry=None,
        program=program,
        warnings=warnings,
        bad_inputs=non_finite_inputs(bundle.batch()),
    )


def _is_variable(value: Any) -> bool:
    import keras
    import tensorflow as tf

    return isinstance(value, (tf.Variable, keras.Variable))


def _loop_rebuilt(bundle: Any, guarded: Any, live: tuple[tuple[Any, ...], dict[str, Any]]) -> Any:
    from pyadapter.capture import step_state
    from pyadapter.capture.bundle_format import KIND_LOOP
    from pyadapter.replay.rebuild import (
        Rebuilt,
        captured_arguments,
        loop_step_program,
        non_finite_inputs,
        what_each_optimizer_trains,
    )
    from pyadapter.replay.restore import restore_checkpoint
    from pyadapter.replay.state import assign_captured_state, build_optimizers

    if bundle.kind != KIND_LOOP:
        raise ReplayError(
            f"{bundle.path}: the bundle was captured by Keras fit, but the program reached a "
            "guard_step function first"
        )
    models, optimizers = list(guarded.models), list(guarded.optimizers)
    args, kwargs = captured_arguments(bundle, live)  # an object argument (a model) is the program's own
    # A variable passed as an argument (an image the step optimizes in place) holds the captured value now; the
    # warm-up's update is undone below, and each run starts from it as from the step's own state.
    # Variables only: a Keras optimizer passed in (``train_step(x, model, optimizer)``) has an ``assign`` method too.
    argument_variables = [value for value in [*args, *kwargs.values()] if _is_variable(value)]
    captured_values = [value.numpy() for value in argument_variables]
    if _unbuilt(models, optimizers):
        _warm_up(guarded.python_function, args, kwargs)
    trainable = [v for m in models for v in m.trainable_variables]
    if argument_variables:
        # keras.io's style transfer: the optimizer trains the image passed in, updated outside the step, so the
        # warm-up built nothing; built on the model's weights, the checkpoint's image went into a conv kernel
        # ("incompatible tensor with shape (1, 64, 64, 3)"). Each optimizer is built on what it trained.
        for optimizer, own in what_each_optimizer_trains(
            bundle, guarded.checkpoint, argument_variables + trainable
        ):
            build_optimizers([optimizer], own)
    build_optimizers(optimizers, trainable)
    if bundle.checkpoint_prefix is not None:
        restore_checkpoint(bundle, guarded.checkpoint).expect_partial()
    for variable, value in zip(argument_variables, captured_values, strict=True):
        variable.assign(value)
    warnings = assign_captured_state(bundle.weight_entries(), models, optimizers)
    # Accumulators and a micro-step counter the step keeps itself, found by the program's names for them.
    namespace = step_state.namespace_of(guarded.python_function)
    kept, missed = step_state.assign(namespace, bundle.step_state_entries())
    warnings += missed
    kept += argument_variables
    program = loop_step_program(
        bundle,
        guarded.python_function,
        models,
        optimizers,
        args,
        kwargs,
        by_hand=guarded.hand_variables(),
        kept=kept,
    )
    program.snapshot()
    return Rebuilt(
        bundle=bundle,
        entry=None,
        program=program,
        warnings=warnings,
        bad_inputs=non_finite_inputs(bundle.batch()),
    )


def _refuse_tf_keras_under_replicas(bundle: Any, model: Any) -> None:
    """One line for a tf_keras model that trains under a strategy of several replicas: its train_step run outside
    ``strategy.run`` (as a replay runs it) updates its metrics' per-replica variables from the cross-replica
    context, which TensorFlow refuses ("SyncOnReadVariable does not support `assign_add` in cross-replica
    context"), and that error was all `nanlens locate` said."""
    from pyadapter.capture import keras_lines

    strategy = getattr(model, "distribute_strategy", None)
    replicas = getattr(strategy, "num_replicas_in_sync", 1)
    if keras_lines.is_tf_keras(model) and isinstance(replicas, int) and replicas > 1:
        raise ReplayError(
            f"{bundle.path}: the model is a tf_keras one trained under a tf.distribute strategy of {replicas} "
            "replicas, which NaN Lens cannot replay yet (tf_keras's metrics refuse an update outside "
            "strategy.run); a run of the program on one device (no strategy) writes a bundle it replays"
        )


def _unbuilt(models: list[Any], optimizers: list[Any]) -> bool:
    """Whether some variable of the step does not exist yet: Keras builds a model without a strategy, and an
    optimizer, only when the first step is traced, which in a re-entry has not happened."""
    from pyadapter.capture.keras_lines import optimizer_built

    layers_built = all(layer.built for model in models for layer in model._flatten_layers())
    return not layers_built or any(not optimizer_built(optimizer) for optimizer in optimizers)


def _warm_up(step: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Run the step once eagerly so it creates its variables (a model's, each optimizer's slots over the
    variables it really trains) as training did; every value it changes is set from the bundle afterwards."""
    import tensorflow as tf

    from pyadapter.eager import eager

    with eager():
        try:
            step(*args, **kwargs)
        except tf.errors.InvalidArgumentError:
            # The optimizers are built before they update: Keras's sparse update of an Embedding's non-finite
            # gradients (Adagrad's, RMSprop's) raises on them, an update the replay runs again (`run_step`).
            pass


def _legacy_keras() -> Any:
    """tf_keras when the program runs with ``TF_USE_LEGACY_KERAS=1`` (set for a tf_keras bundle), else None
    (TensorFlow says so itself when such a program touches tf.keras without it)."""
    if os.environ.get("TF_USE_LEGACY_KERAS") not in ("1", "true", "True"):
        return None
    try:
        import tf_keras
    except ImportError:
        return None
    return tf_keras


# fit(x, y, batch_size, epochs, verbose, ...): verbose given by position comes fifth (Keras 3 and tf_keras).
_FIT_VERBOSE_POSITION = 4


@contextlib.contextmanager
def _fit_taken_over(hook: _BundleTakeover | _Refuse) -> Iterator[None]:
    """Every ``keras.Model.fit`` hands its built model to the hook at ``on_train_begin``, and the first
    ``train_on_batch`` of the bundle's model (a loop of ``train_on_batch`` calls, a GAN's alternating models) hands
    its model over before it trains; with ``TF_USE_LEGACY_KERAS=1`` (set for a tf_keras bundle) ``tf_keras.Model``'s
    too."""
    import keras

    lines = [(keras.Model, keras.callbacks.Callback)]
    tf_keras = _legacy_keras()
    if tf_keras is not None:
        lines.append((tf_keras.Model, tf_keras.callbacks.Callback))
    originals = []
    for model_class, callback_class in lines:

        class _TakeOver(callback_class):  # type: ignore[misc,valid-type]
            def on_train_begin(self, logs: dict | None = None) -> None:
                if hook.takes_fit(self.model):
                    hook.keras_fit(self.model)  # does not return
                # An earlier phase of the program (a frozen base's head trained before the fine-tuning that
                # failed): one step, so the program goes on to the fit that was captured. Keras ends fit after a
                # step that sets stop_training; the captured state replaces what this step changes.
                self.model.stop_training = True

        def fit(
            self: Any, *args: Any, _original: Any = model_class.fit, _callback: Any = _TakeOver, **kwargs: Any
        ) -> Any:
            # The program's own callbacks do not run: a replay must not touch what training wrote (CSVLogger
            # opens its log for writing at on_train_begin, emptying it; TensorBoard and ModelCheckpoint write).
            kwargs.pop("callbacks", None)
            if len(args) <= _FIT_VERBOSE_POSITION:
                # An earlier fit runs one step: its progress bar ("Epoch 1/2 75/75 ... loss: 8.04") read as the
                # replay training a whole epoch. (Its validation still runs: a program may read its History.)
                kwargs["verbose"] = 0
            if isinstance(hook, _BundleTakeover):
                hook.begin_fit(calling_line())
            try:
                return _original(self, *args, callbacks=[_callback()], **kwargs)
            finally:
                # The one step of an earlier fit ended it through stop_training; left set, a program that checks
                # it after each fit (a DQN's ``if q_net.stop_training: break``, as NaN Lens's own README advises
                # for loops of fit calls) ended before the captured fit.
                self.stop_training = False

        def train_on_batch(
            self: Any, *args: Any, _original: Any = model_class.train_on_batch, **kwargs: Any
        ) -> Any:
            if hook.takes(self):
                hook.keras_fit(self, call="train_on_batch")  # does not return
            return _original(self, *args, **kwargs)  # another model of the program (a GAN's other half)

        for name, replacement in (("fit", fit), ("train_on_batch", train_on_batch)):
            originals.append((model_class, name, getattr(model_class, name)))
            setattr(model_class, name, replacement)
    try:
        yield
    finally:
        for model_class, name, original in reversed(originals):
            setattr(model_class, name, original)


class TrainingReached(BaseException):
    """Raised by `no_training` when the program reaches fit or a guarded step (a BaseException, so the user's
    ``except Exception`` does not swallow it)."""


class _Refuse:
    def keras_fit(self, model: Any, call: str = "fit") -> None:
        raise TrainingReached

    def takes(self, model: Any) -> bool:
        return True

    def takes_fit(self, model: Any) -> bool:
        return True

    def guarded_step(self, guarded: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        raise TrainingReached


@contextlib.contextmanager
def no_training() -> Iterator[None]:
    """While importing a program for a rebuild: its first fit or guarded step raises `TrainingReached` instead of
    training (a script that trains when imported, however it is written, is then re-entered instead)."""
    hook = _Refuse()
    takeover.install(hook)
    try:
        with _fit_taken_over(hook), _no_summaries():
            yield
    finally:
        takeover.install(None)


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """SIGALRM after `seconds` (main thread only; elsewhere no limit)."""
    import threading

    if threading.current_thread() is not threading.main_thread() or seconds <= 0:
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise _TimedOut

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def _no_summaries() -> Iterator[None]:
    """``tf.summary.create_file_writer`` gives a writer that writes nothing while a program runs for a replay: its
    set-up and the replayed step would otherwise add event files to the run's TensorBoard logs.

    Every module that exports it is patched: ``import tensorflow.summary as summary`` (Keras 3's TensorBoard
    callback) makes a module of its own, not ``tf.summary``, and a pipeline re-run, where callbacks run, wrote a
    second run's event files into the training's log folder through it."""
    import importlib

    import tensorflow as tf

    original = tf.summary.create_file_writer
    with contextlib.suppress(ImportError):
        importlib.import_module("tensorflow.summary")  # made now, so patched below, not made later unpatched

    def create_file_writer(*args: Any, **kwargs: Any) -> Any:
        return tf.summary.create_noop_writer()

    exporting = [
        module
        for name, module in list(sys.modules.items())
        if name.startswith("tensorflow") and getattr(module, "create_file_writer", None) is original
    ]
    for module in exporting:
        module.create_file_writer = create_file_writer  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for module in exporting:
            module.create_file_writer = original  # type: ignore[attr-defined]


def _save_targets() -> list[tuple[Any, str, str]]:
    """(owner, attribute, name shown) of the calls that write a model or checkpoint to disk."""
    import keras
    import tensorflow as tf

    targets: list[tuple[Any, str, str]] = [
        (keras.Model, "save", "Model.save"),
        (keras.Model, "save_weights", "Model.save_weights"),
        (keras.saving, "save_model", "keras.saving.save_model"),
        (keras.models, "save_model", "keras.models.save_model"),
        (tf.train.Checkpoint, "save", "Checkpoint.save"),
        (tf.train.Checkpoint, "write", "Checkpoint.write"),
        (tf.train.CheckpointManager, "save", "CheckpointManager.save"),
        (tf.saved_model, "save", "tf.saved_model.save"),
    ]
    tf_keras = _legacy_keras()
    if tf_keras is not None:
        targets += [
            (tf_keras.Model, "save", "Model.save"),
            (tf_keras.Model, "save_weights", "Model.save_weights"),
        ]
    return [(owner, name, shown) for owner, name, shown in targets if hasattr(owner, name)]


@contextlib.contextmanager
def _no_saves(skipped: list[str]) -> Iterator[None]:
    """While a program runs for a replay, its saves write nothing (each is listed in `skipped`): a program that
    trains in phases saves between them, and its earlier phase, run one step on the way to the captured fit, would
    overwrite the model or checkpoint that training wrote. Loading what training saved still works."""
    originals = []
    for owner, name, shown in _save_targets():

        def not_written(*args: Any, _shown: str = shown, **kwargs: Any) -> None:
            path = next((a for a in args if isinstance(a, (str, os.PathLike))), kwargs.get("filepath"))
            skipped.append(f"{_shown}({os.fspath(path)!r})" if path is not None else _shown)

        originals.append((owner, name, vars(owner).get(name)))  # None: inherited, removed again after
        setattr(owner, name, not_written)
    try:
        yield
    finally:
        for owner, name, original in reversed(originals):
            if original is None:
                delattr(owner, name)
            else:
                setattr(owner, name, original)


def _unset_variable(exc: BaseException) -> str | None:
    """The environment variable a program's ``os.environ["NAME"]`` found unset (a KeyError raised by a line that
    reads the environment), or None."""
    if not isinstance(exc, KeyError) or len(exc.args) != 1 or not isinstance(exc.args[0], str):
        return None
    name = exc.args[0]
    if name in os.environ:
        return None
    tb = exc.__traceback__
    lines = []
    while tb is not None:
        lines.append(linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    reads_environment = any("environ" in line or "getenv" in line for line in lines[-3:])
    return name if reads_environment else None


def _file_missing(exc: BaseException) -> bool:
    """A missing file, as Python, Keras (``ValueError: File not found: filepath=...``) or TensorFlow says it."""
    if isinstance(exc, FileNotFoundError):
        return True
    text = str(exc).lower()
    return "file not found" in text or "no such file" in text or type(exc).__name__ == "NotFoundError"


def scratch_files_for(program: Path, folder: Path) -> ScratchFiles:
    """The scratch copy a program run again writes into: its own folder and the one it runs in are kept, NaN Lens's
    folders in them are written as is."""
    return ScratchFiles(
        [program.parent, folder], own=[program.parent / NANLENS_FOLDER, folder / NANLENS_FOLDER]
    )


@contextlib.contextmanager
def files_kept(files: ScratchFiles, skipped_saves: list[str]) -> Iterator[None]:
    """While a program runs again for NaN Lens (a re-entry, the pipeline re-run of `nanlens locate`), what it
    writes is kept from training's files: Python's writes go to `files` (a scratch copy), its Keras saves write
    nothing (each listed in `skipped_saves`), nor its TensorBoard summaries."""
    with _no_summaries(), _no_saves(skipped_saves), files.active():
        yield


@contextlib.contextmanager
def _program_context(script: Path, argv: list[str], cwd: Path, root: Path | None = None) -> Iterator[None]:
    """argv, sys.path and the working directory as the program had them: its folder first on sys.path, or for a
    program run as ``python -m`` the folder its package is in (`root`)."""
    saved_argv, saved_path, saved_cwd = list(sys.argv), list(sys.path), os.getcwd()
    sys.argv = [str(script), *argv]
    sys.path.insert(0, str(root or script.parent))
    os.chdir(cwd)
    try:
        yield
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        os.chdir(saved_cwd)


def _run_package_module(program: Path, module: str) -> None:
    """``python -m <module>`` again: the module found on sys.path must be the verified program file itself."""
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or Path(spec.origin).resolve() != program.resolve():
        raise ReplayError(f"re-entry: the module {module} is not the program {program} here")
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def _notebook_shell() -> Any:
    """An IPython shell for the cells' transformed magics (``get_ipython().run_line_magic(...)``), if IPython
    is installed; None otherwise (cells then hold ``pass`` where their magics were)."""
    try:
        from IPython.core.interactiveshell import InteractiveShell
    except ImportError:
        return None
    return InteractiveShell.instance()


def write_cell_files(path: Path) -> list[tuple[Path, str]]:
    """Write the notebook's code cells (magics turned into Python) to their cell files, unchanged ones left as they
    are; [(cell file, source)] in order. A debugger's breakpoint for a notebook cell goes on its cell file.
    Raises ValueError (one line) for a notebook that cannot be read."""
    from pyadapter.capture.notebook import notebook_code_cells

    cells = notebook_code_cells(path)
    cell_files_dir(path).mkdir(parents=True, exist_ok=True)
    written = []
    for cell in cells:
        target = cell_file(path, cell.index)
        source = _captured_body(cell.raw) or cell.source
        if not target.exists() or target.read_text(encoding="utf-8") != source:
            target.write_text(source, encoding="utf-8")
        written.append((target, source))
    return written


# The name a re-entered ``%%capture NAME`` cell gives NAME's value by (`_captured_body`).
CAPTURED_OUTPUT = "__nanlens_captured_output__"


def _empty_captured_output() -> Any:
    """What ``%%capture NAME`` gives NAME, with nothing captured (IPython's ``CapturedIO``, if installed): a later
    cell's ``NAME.show()`` or ``NAME.stdout`` runs."""
    import io

    try:
        from IPython.utils.capture import CapturedIO
    except ImportError:
        return types.SimpleNamespace(stdout="", stderr="", outputs=[], show=lambda: None)
    return CapturedIO(io.StringIO(), io.StringIO(), [])


def _captured_body(raw: str) -> str | None:
    """A ``%%capture [NAME]`` cell as code on the cell's own lines: its body runs as the cell's code, and the magic's
    line gives NAME an empty captured output. IPython's transform makes the cell one line,
    ``get_ipython().run_cell_magic('capture', ...)``, whose body runs from a string: a fit in it had no line of the
    cell, and the re-entry took no fit for the captured one (s39c har). The replay shows the output the magic hid.
    None for any other cell."""
    lines = raw.splitlines()
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None or not re.match(r"^\s*%%capture(\s|$)", lines[first]):
        return None
    words = [w for w in lines[first].split()[1:] if not w.startswith("-")]
    name = words[0] if words and words[0].isidentifier() else None
    from pyadapter.capture.notebook_file import transform_source

    body = transform_source("\n".join(lines[first + 1 :]))
    magic = f"{name} = {CAPTURED_OUTPUT}()" if name is not None else "pass"
    missing = len(lines) - first - 1 - len(body.splitlines())
    return "\n" * first + magic + "\n" + body + "\n" * max(missing, 0)


class _NoShellCommands:
    """The re-entry's IPython shell, less what reaches outside the program: ``!pip install ...``, ``%pip``,
    ``%conda``, ``%%bash`` and other shell commands are not run again. The run that wrote the bundle ran them; their
    packages and files are there, and a replay reinstalling packages or downloading data (on a machine that may be
    offline) is not what the user asked for. ``%%writefile`` and the magics that run Python (``%%time``) run."""

    LINE_MAGICS = frozenset({"pip", "conda", "mamba", "micromamba", "sx", "system", "sc"})
    CELL_MAGICS = frozenset({"bash", "sh", "script", "system", "sx", "perl", "ruby"})
    # Magics that hook the kernel's display (``%matplotlib inline``, the first line of most Colab notebooks): a
    # plain shell has no GUI to enable ("NotImplementedError: Implement enable_gui in a subclass") and a replay
    # shows no figures. Plots the cells draw go to matplotlib's non-interactive Agg backend instead.
    DISPLAY_MAGICS = frozenset({"matplotlib", "gui", "pylab"})

    def __init__(self, shell: Any, skipped: list[str]) -> None:
        self._shell = shell
        self.skipped = skipped

    def __getattr__(self, name: str) -> Any:
        return getattr(self._shell, name)

    def system(self, command: str) -> None:
        self.skipped.append(f"!{command}")

    def getoutput(self, command: str, *args: Any, **kwargs: Any) -> list[str]:
        self.skipped.append(f"!{command}")
        return []

    def run_line_magic(self, name: str, line: str, *args: Any, **kwargs: Any) -> Any:
        if name in self.LINE_MAGICS:
            self.skipped.append(f"%{name} {line}".strip())
            return None
        if name in self.DISPLAY_MAGICS:
            _no_display()
            return None
        return self._shell.run_line_magic(name, line, *args, **kwargs)

    def run_cell_magic(self, name: str, line: str, cell: str) -> Any:
        if name in self.CELL_MAGICS:
            self.skipped.append(f"%%{name} {line}".strip())
            return None
        return self._shell.run_cell_magic(name, line, cell)


def _no_display() -> None:
    """matplotlib (if the program's environment has it) draws to the Agg backend: no window, no kernel display."""
    import importlib

    try:
        matplotlib = importlib.import_module("matplotlib")  # not a dependency of NaN Lens: the program's
    except ImportError:
        return
    matplotlib.use("Agg")


class _CellRun:
    """Which run of a cell a re-entered notebook is in (its place in the order `run_notebook` runs them): a fit's
    count restarts with each run, as training's restarted with each of the kernel's executions."""

    number = 0


_CELL_RUN = _CellRun()


def kernel_order(bundle: Any, path: Path) -> list[int] | None:
    """The saved notebook's code cells (positions among its code cells) in the order the kernel ran them, when that
    is not top to bottom: a config cell at the bottom run first, a fit cell run again after the plot cell below it
    (which reads the fit's ``history``: run once at its last execution, it ran before the fit). Each recorded
    execution is matched to the saved cell with the same source; a cell the kernel ran again runs again, and runs of
    one cell in a row run once. Only the user's saved cells run; the bundle gives their order. None when the order
    is top to bottom, or when the kernel ran code the saved notebook does not hold (the saved order is then the best
    there is, and the replay's route says why)."""
    from pyadapter.capture.notebook import NotebookError, NotebookInfo
    from pyadapter.capture.notebook_file import notebook_code_cells, same_cell_text

    recorded = (bundle.manifest.get("entry_script") or {}).get("notebook")
    try:
        info = NotebookInfo.from_manifest(recorded)
        saved = notebook_code_cells(path)
    except (NotebookError, TypeError, ValueError, AttributeError, OSError):
        return None
    positions: dict[str, list[int]] = {}
    for index, cell in enumerate(saved):
        positions.setdefault(same_cell_text(cell.raw), []).append(index)
    runs = sorted(
        (c for c in info.cells if c.execution_count is not None), key=lambda c: c.execution_count or 0
    )
    # Saved cells of the same text (a fit cell pasted again below an edited config cell) take that text's
    # executions in turn, top to bottom, as "Run All" ran them; further executions re-ran the last of them.
    seen: dict[str, int] = {}
    ordered: list[int] = []
    for executed in runs:
        text = same_cell_text(executed.source)
        places = positions.get(text)
        if not places:
            return None
        turn = seen[text] = seen.get(text, -1) + 1
        place = places[min(turn, len(places) - 1)]
        if not ordered or ordered[-1] != place:
            ordered.append(place)
    top_to_bottom = all(a < b for a, b in itertools.pairwise(ordered))
    return None if top_to_bottom else ordered


class _CellOutputs:
    """A cell's value as the kernel keeps it: a cell that ends in an expression (``X.shape, y.shape``) has its value
    in ``_`` (``__``, ``___`` the ones before), ``_N`` and ``Out[N]`` (N its execution count), and its source in
    ``In[N]``, which a later cell reads (``shapes = _``): run with exec alone, that cell raised NameError. IPython's
    rules: nothing for a value of None or a last line ending in ";", and ``_`` and friends are left alone once the
    program assigns them itself."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        self.namespace = namespace
        self.last: list[Any] = [None, None, None]  # the values of _, __, ___ as set here
        namespace.setdefault("In", [""])
        namespace.setdefault("Out", {})
        namespace["_ih"], namespace["_oh"] = namespace["In"], namespace["Out"]

    def run(self, source: str, filename: str, count: int) -> None:
        """Run one cell's source (its cell file's text) as execution number `count`."""
        self.namespace["In"].append(source.rstrip("\n"))  # as IPython stores it
        tree = ast.parse(source, filename)
        last = tree.body[-1] if tree.body else None
        if not isinstance(last, ast.Expr) or source.rstrip().endswith(";"):
            exec(compile(tree, filename, "exec"), self.namespace)  # noqa: S102 - the user's own notebook, run because the user asked
            return
        body = ast.Module(body=tree.body[:-1], type_ignores=[])
        exec(compile(body, filename, "exec"), self.namespace)  # noqa: S102 - as above
        value = eval(compile(ast.Expression(last.value), filename, "eval"), self.namespace)  # noqa: S307 - as above
        if value is not None:
            self._keep(value, count)

    def _keep(self, value: Any, count: int) -> None:
        names = ("_", "__", "___")
        own = all(
            name not in self.namespace or self.namespace[name] is mine
            for name, mine in zip(names, self.last, strict=True)
        )
        self.last = [value, *self.last[:2]]
        if own:
            self.namespace.update(zip(names, self.last, strict=True))
        self.namespace[f"_{count}"] = value
        self.namespace["Out"][count] = value


def run_notebook(
    path: Path,
    skipped: list[str] | None = None,
    order: list[int] | None = None,
    went_past: list[str] | None = None,
) -> None:
    """Run the notebook's code cells in order in one ``__main__`` namespace, each from its own cell file; shell
    commands are not run again (`_NoShellCommands`), and are listed in `skipped`. `order`: the code cells' positions
    to run, in the kernel's order (`kernel_order`), in place of top to bottom. A cell whose import fails is gone
    past, as the kernel went past it to train, and listed in `went_past`."""
    try:
        cells = write_cell_files(path)
    except ValueError as exc:
        raise ReplayError(f"re-entry: cannot read the notebook {path}: {exc}") from None
    if order is not None:
        cells = [cells[i] for i in order if 0 <= i < len(cells)]
    module = types.ModuleType("__main__")
    namespace = module.__dict__
    namespace["__builtins__"] = __builtins__
    shell = _notebook_shell()
    if shell is not None:
        # Magics that run code (a `%%time` cell around `model.fit`) run it in the shell's user namespace: make
        # that the cells' namespace, as in the kernel, or they do not see the model the cells before made.
        shell.user_module, shell.user_ns = module, namespace
        shell.ns_table["user_global"] = shell.ns_table["user_local"] = namespace
        quiet = _NoShellCommands(shell, skipped if skipped is not None else [])
        namespace["get_ipython"] = lambda: quiet
    saved_main = sys.modules.get("__main__")
    sys.modules["__main__"] = module
    # A cell the kernel ran again later may have raised the first time (a fit cell run before the cell that
    # defines its data, then again after it): the kernel went on, and so does the replay, up to a cell's last run.
    last_run = {target: number for number, (target, _) in enumerate(cells)}
    namespace[CAPTURED_OUTPUT] = _empty_captured_output
    outputs = _CellOutputs(namespace)
    try:
        for number, (target, source) in enumerate(cells):
            _CELL_RUN.number = number
            try:
                outputs.run(source, str(target), number + 1)
            except ImportError as exc:
                # A tutorial's ``import seaborn as sns`` where seaborn is not installed: the kernel raised there
                # too and training ran in later cells; the replay stopped at it ("failed before its first training
                # step", s41c p1). A later cell that needed the module fails on its own name.
                if went_past is None or number == len(cells) - 1:
                    raise
                went_past.append(f"{type(exc).__name__}: {_first_line(exc)}{_where(exc)}")
            except Exception:
                if last_run[target] == number:
                    raise
    finally:
        if saved_main is not None:
            sys.modules["__main__"] = saved_main


def map_cell_file_of(place: dict[str, Any]) -> None:
    """A ``{"file", "line"}`` record from a re-entered notebook's cell file (where the replay's values first grew
    huge, `rowvalues.first_huge`): the .ipynb and its ``cell`` instead."""
    where = notebook_cell_of(place["file"]) if isinstance(place.get("file"), str) else None
    if where is not None:
        place["file"], place["cell"] = where


def map_cell_files(findings: Any) -> None:
    """Findings from a re-entered notebook: frames in its cell files become (the .ipynb, cell, line)."""
    for item in [*([findings.origin] if findings.origin else []), *findings.findings]:
        for target in [item, *item.stack]:
            where = notebook_cell_of(target.file)
            if where is not None:
                target.file, target.cell = where
    for record in placed_records(findings.extra):  # the -inf mask of a ListNet loss was cell3.py:4 (s42e p5)
        map_cell_file_of(record)
    origin = findings.origin
    if origin is not None and origin.cell is not None:
        # The code shown is the saved cell's line: a cell file holds the cell as IPython transformed it (a %%time
        # cell is one line, get_ipython().run_cell_magic(...)), so its line 2 was blank.
        from pyadapter.capture.notebook_file import NotebookError, read_notebook_cells

        try:
            cells = read_notebook_cells(origin.file)
            lines = cells[origin.cell].source.splitlines() if 0 <= origin.cell < len(cells) else []
        except NotebookError:
            lines = []
        if 0 < origin.line <= len(lines) and lines[origin.line - 1] != findings.extra.get("origin_code"):
            findings.extra["origin_code"] = lines[origin.line - 1]
            findings.extra.pop("origin_statement", None)  # read from the cell file IPython transformed


def run_by_reentry(
    bundle: Any,
    action: Callable[[Any], T],
    *,
    timeout: float = DEFAULT_REENTRY_TIMEOUT,
    notes: list[str] | None = None,
) -> T:
    """Run the bundle's program until its first training step, run ``action(rebuilt)`` there, end the program;
    returns what `action` returned. Raises ReplayError (one line) when the program is gone, fails or ends before
    its first training step, or does not reach it within `timeout` seconds. ``notes`` receives one line on the
    route (the seconds the program's own setup took)."""
    entry = bundle.entry_script
    if entry is None:
        raise ReplayError(
            f"{bundle.path}: the bundle does not record its program, so it cannot be re-entered"
        )
    program = Path(entry)
    if not program.is_file():
        raise ReplayError(
            f"re-entry: the program {program} is not on this disk; open the bundle where the code is (findings "
            "located at the scene show without it)"
        )
    from pyadapter.replay.trust import check_entry, safe_cwd

    program = check_entry(bundle)
    recorded = bundle.manifest.get("entry_script") or {}
    argv = recorded.get("argv")
    args = [str(a) for a in argv[1:]] if isinstance(argv, list) and not is_notebook(program) else []
    folder = safe_cwd(bundle, program)
    hook = _BundleTakeover(bundle, action)
    hook.program_text = _program_text(program)
    hook.files = scratch_files_for(program, folder)
    kind = "notebook" if is_notebook(program) else "script"
    # Run as `python -m pkg.train` in training: run as that module of its package again (relative imports).
    module = recorded.get("module") if isinstance(recorded.get("module"), str) else None
    root = package_root(program, module) if not is_notebook(program) else None
    skipped_commands: list[str] = []  # a notebook's shell commands, not run again
    skipped_saves: list[str] = []  # the program's saves, not written
    went_past: list[str] = []  # a notebook's cells whose imports failed, gone past as the kernel went
    takeover.install(hook)
    try:
        with (
            _program_context(program, args, folder, root),
            _fit_taken_over(hook),
            files_kept(hook.files, skipped_saves),
            _deadline(timeout),
        ):
            with breakpoints_paused():
                if is_notebook(program):
                    order = kernel_order(bundle, program)
                    hook.kernel_order = order is not None
                    run_notebook(program, skipped_commands, order, went_past)
                elif root is not None and module is not None:
                    _run_package_module(program, module)
                else:
                    runpy.run_path(str(program), run_name="__main__")
    except _Finished:
        pass
    except _TimedOut:
        raise ReplayError(
            f"re-entry: {program.name} did not reach fit, train_on_batch or the guarded step within {timeout:.0f} s; stopped "
            "(no file was changed)"
        ) from None
    except SystemExit as exc:
        raise ReplayError(
            f"re-entry: the {kind} {program.name} exited (code {exc.code}) before its first training step"
        ) from None
    except ReplayError:
        raise
    except Exception as exc:  # the user's program failed while setting up: one line, where
        ran_in = recorded.get("cwd")
        hint = ""
        if isinstance(ran_in, str) and Path(ran_in).resolve() != folder and isinstance(exc, OSError):
            # A relative path that training read from another folder: safe_cwd runs only inside this one.
            hint = f" (in training it ran in {ran_in}, outside the folder nanlens runs in: run nanlens from there)"
        elif _unset_variable(exc) is not None:
            # `run.sh` exported DATA_DIR and ran the program; nanlens was started without it. The bundle holds no
            # environment (its values may be secrets, and a replay must not take settings a bundle chose).
            hint = (
                f" (the program reads the environment variable {_unset_variable(exc)}, which training had and "
                "nanlens's environment has not: set it as training had it, e.g. "
                f"`{_unset_variable(exc)}=... nanlens ...`; for the editor, in the environment VS Code "
                "starts from)"
            )
        elif skipped_saves and _file_missing(exc):
            # The program saved, then loaded what it saved (a checkpoint between two fits): the replay wrote none
            # of its saves, so the load needs the file training left, which is gone (a bundle copied elsewhere).
            hint = (
                f" (the replay skipped the program's save {skipped_saves[-1][:80]} before it, as it skips every "
                "save: the file training saved must be there)"
            )
        if went_past and not hint:
            hint = f" (after a cell's import failed and the replay went past it: {went_past[0]})"
        raise ReplayError(
            f"re-entry: the {kind} {program.name} failed before its first training step: "
            f"{type(exc).__name__}: {_first_line(exc)}{_where(exc)}{hint}"
        ) from None
    finally:
        takeover.install(None)
    if hook.reached is None:
        if hook.other_steps:
            recorded = (bundle.manifest.get("step_function") or {}).get("qualname")
            raise ReplayError(
                f"re-entry: the {kind} {program.name} called other guarded steps {hook.other_steps} time"
                f"{'s' if hook.other_steps != 1 else ''} and ended without calling {recorded}, the captured one; "
                "nothing to replay"
            )
        if hook.phases_skipped:
            # It reached fits, none of them the captured one: the program is not as it ran (a notebook's edited
            # cell not saved, cells run out of order), or took another path this time.
            raise ReplayError(
                f"re-entry: the {kind} {program.name} ran {hook.phases_skipped} fit"
                f"{'s' if hook.phases_skipped != 1 else ''}, none of them the captured one, and ended"
                f"{f' ({hook.last_skip_reason})' if hook.last_skip_reason else ''}"
                f"{_unsaved_note(bundle, program) or '; nothing to replay'}"
            )
        raise ReplayError(
            f"re-entry: the {kind} {program.name} ended without reaching Keras fit, train_on_batch or the guarded step; "
            "nothing to replay"
        )
    if hook.error is not None:
        raise hook.error
    if notes is not None:
        skipped = hook.phases_skipped
        # A loop of one-epoch fits: its earlier fits are the same line's calls, not "other calls, optimizers".
        same = hook.last_skip_reason == _EARLIER_CALL
        before_loop = hook.last_skip_reason == _BEFORE_THE_STEP
        one, many = (
            ("an earlier call of the same line", "earlier calls of the same line")
            if same
            else ("a phase before the guarded loop", "phases before the guarded loop")
            if before_loop
            else ("another call, optimizer or weights", "other calls, optimizers or weights")
        )
        phases = (
            f"; the fit before it ({one}) ran one step only"
            if skipped == 1
            else f"; the {skipped} fits before it ({many}) ran one step each"
            if skipped
            else ""
        )
        count = len(skipped_commands)
        commands = (
            f"; {count} shell command{'s' if count != 1 else ''} not run again ({skipped_commands[0][:60]}"
            f"{', ...' if count > 1 else ''})"
            if count
            else ""
        )
        saves = (
            f"; {len(skipped_saves)} save{'s' if len(skipped_saves) != 1 else ''} not written ({skipped_saves[0][:60]}"
            f"{', ...' if len(skipped_saves) > 1 else ''})"
            if skipped_saves
            else ""
        )
        imports = (
            f"; went past {len(went_past)} cell{'s' if len(went_past) != 1 else ''} whose import failed, as the "
            f"kernel did ({went_past[0]})"
            if went_past
            else ""
        )
        commands += imports
        notes.append(
            f"replayed by re-entry: ran the {kind} {program.name}"
            f"{' (its cells in the order the kernel ran them)' if hook.kernel_order else ''} up to {hook.reached} "
            f"({hook.seconds_to_step:.1f} s of its own setup{phases}{commands}{saves}{hook.files.note()}), then the "
            "captured step from the "
            "captured state"
            f"{_unsaved_note(bundle, program)}"
        )
    return hook.result


def _unsaved_note(bundle: Any, program: Path) -> str:
    """For a notebook whose kernel ran code the saved file does not hold: which executions, since the replay ran
    the saved cells (a step that then stays finite is explained)."""
    if not is_notebook(program):
        return ""
    from pyadapter.capture.notebook import NotebookError, NotebookInfo

    recorded = (bundle.manifest.get("entry_script") or {}).get("notebook")
    try:
        info = NotebookInfo.from_manifest(recorded)
    except (NotebookError, TypeError, ValueError, AttributeError):
        return ""
    info.path = program
    unsaved = info.unsaved_cells()
    if not unsaved:
        return ""
    runs = ", ".join(
        f"In [{c.execution_count}]" if c.execution_count is not None else "?" for c in unsaved[:3]
    )
    more = ", ..." if len(unsaved) > 3 else ""
    if _code_changed_since_capture(bundle, program):
        # The saved cells are not what the kernel ran because the user edited them after the capture (a fix):
        # replaying the saved cells is what they asked for, not a notebook they forgot to save.
        return (
            f"; {program.name} was edited since the capture (the kernel had run {runs}{more} as they were then): "
            "the replay ran the saved cells, with the edit, and then the step from the captured state (weights, "
            "optimizer, learning rate), which an edit of those does not change"
        )
    # Cells run out of order (an evaluation cell rebinding ``labels`` before the class weights are made again,
    # s42c nb7) leave state no saved notebook rebuilds: "save the notebook and capture again" could not help there.
    return (
        f"; the kernel ran code the saved {program.name} does not hold ({runs}{more}): the replay ran the saved "
        "cells top to bottom, then the step from the captured state (batch, weights, optimizer), so what the "
        "kernel's own order of runs made before the step may differ (a notebook saved before training replays "
        "its cells as they ran)"
    )


def _code_changed_since_capture(bundle: Any, program: Path) -> bool:
    """Whether the notebook's code cells differ from those saved when the bundle was written (its recorded hash)."""
    from pyadapter.capture.notebook import code_sha256

    recorded = (bundle.manifest.get("entry_script") or {}).get("code_sha256")
    if not isinstance(recorded, str):
        return False
    try:
        return code_sha256(program) != recorded
    except ValueError:
        return False


def _program_text(program: Path) -> str:
    """The program's own code: the script, or a notebook's code cells; empty when it cannot be read."""
    try:
        if is_notebook(program):
            from pyadapter.capture.notebook_file import read_notebook_cells

            return "\n".join(cell.source for cell in read_notebook_cells(program) if cell.cell_type == "code")
        return program.read_text(encoding="utf-8", errors="replace")
    except Exception:  # noqa: BLE001 - only a hint for telling fits apart
        return ""


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


def _where(exc: BaseException) -> str:
    from pyadapter.dump.frames import is_user_file

    tb = exc.__traceback__
    found = ""
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if is_user_file(name):
            found = f" (at {shown_place(name, tb.tb_lineno)})"
        tb = tb.tb_next
    return found
