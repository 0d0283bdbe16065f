"""The guard's window: the training state a few steps back and the batches since, so a divergence can be replayed
over the steps that made it (its last step alone starts from weights that are already blown up).

While training, `WindowKeeper` (NanGuard / guard_step, ``window=K``; 0 turns it off) keeps

- two device-side copies of the step's state (model variables, optimizer variables — slots, iteration counter,
  learning rate — and Keras seed-generator states), taken every N >= K steps by one compiled copy function
  (``tf.Variable.assign`` per variable, no host transfer), alternating between the two, so the older copy is
  always between N and 2N-1 steps back once training has run that long;
- references to the batches the steps ran on since the older copy (the tensors the step already made: nothing
  is copied).

N (``copy_every``) is K unless a copy costs more than `COPY_BUDGET` of the training time between copies: a copy
reads and writes every weight and slot once, which on a CPU is 10-50% of a step's time (bench/scale.py models,
one core), i.e. 1-3% of training at K=16. The keeper times its copies and the steps between them and spaces the
copies out until they cost at most that share, up to `MAX_SPACING` x K steps, or further where that many steps take
under `SPACING_SECONDS` (cheap steps next to a large state: a recommender's sparse step against its 64 MB table, where
64 steps apart the copies were still 3% of the run), and as long as the batches held stay under `BATCH_BUDGET`.
Either way replaying the window takes seconds. On a GPU the copy is a device-memory copy, queued like any kernel:
N stays K.

Memory: two copies of the weights and optimizer state on the device, plus up to 2N batches. On healthy steps the
only cost is appending a reference to a deque and reading a clock, and every N steps one copy of the state.

Frozen weights (float32 weights of layers with ``trainable=False``: a pretrained backbone or embedding table under
a trained head) are not copied: the step cannot change them, so the value they have when a bundle is written is the
value they had at the window's start. To make sure, the keeper takes a fingerprint of each (the wrapping int32 sum
of its bits: exact, and independent of the order it is summed in) when a window starts and checks it when the
window is read; a frozen weight that changed anyway (a custom layer assigning to its own weights) leaves that
bundle without a window, with the reason in its manifest, and is copied like the rest from then on.

On a failing step the bundle gets the window in its own files: ``window/state.npz`` (the older copy, keyed like
weights.npz) and ``window/batches.npz`` (every step's batch from the copy's step to the failing one, the failing
batch included), described by ``manifest["window"]``::

    {"size": 16, "copy_every": 16, "start_step": 37, "end_step": 55, "steps": 19,
     "state": {"file": "window/state.npz", "variables": [{"key": "w000", "path": "sequential/dense/kernel"}, ...]},
     "batches": {"file": "window/batches.npz", "structures": [<structure of step 37's batch>, ...]},
     "learning_rate": 7e-05, "memory_bytes": 123456,
     "search": {...}}   # optional: `WindowSearch`, when the guard searched a learning rate at the scene

Bundles without ``"window"`` load as before (`read_window` returns None). Reading never runs code: arrays are read
with ``allow_pickle=False`` through `pyadapter.capture.structure`. TensorFlow is imported only by the keeper.
"""

from __future__ import annotations

import collections
import io
import math
import os
import statistics
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import numpy as np

from pyadapter.capture import structure
from pyadapter.capture.bundle_format import ArraysFile, ExtraFile
from pyadapter.capture.learning_rate import learning_rate_variable
from pyadapter.capture.snapshot import unique, variable_path

DEFAULT_SIZE = 16
# The two state copies live where the variables do (a GPU's memory for a GPU run): a model whose two copies of
# weights and optimizer slots pass this gets no window rather than an out-of-memory error in a week-long run.
MAX_BYTES_ENV = "NANLENS_WINDOW_MAX_BYTES"
DEFAULT_MAX_BYTES = 2 << 30
STATE_FILE = "window/state.npz"
BATCHES_FILE = "window/batches.npz"
MANIFEST_KEY = "window"
# The window's error when a weight the guarded model holds frozen changed between its steps (another optimizer
# trains it: a GAN's discriminator on its own train_on_batch); the bundle keeps it as ``window_error``, and the
# weights' paths as ``window_frozen_changed`` (`error_entries`), which the cause reads (`frozen_changed`).
FROZEN_CHANGED = "frozen weights changed during training"
FROZEN_CHANGED_KEY = MANIFEST_KEY + "_frozen_changed"
FILES = (STATE_FILE, BATCHES_FILE)
# Spacing the copies (see the module docstring): their share of the training time, the widest spacing (in windows,
# or in seconds of steps where that is wider), and the most memory the held batches may take for a wider spacing
# (never below K steps).
COPY_BUDGET = 0.005
MAX_SPACING = 4
SPACING_SECONDS = 2.0
BATCH_BUDGET = 1 << 30
# The step time is the median of the last steps (epoch ends, validation and retraces stand out).
_STEPS_TIMED = 33
_COPIES_TIMED = 5


class WindowError(ValueError):
    """A bundle's window that cannot be used (one line); `frozen_changed`: the paths of the frozen weights whose
    change between steps was why."""

    def __init__(self, message: str, frozen_changed: list[str] | None = None) -> None:
        super().__init__(message)
        self.frozen_changed = list(frozen_changed or [])


def error_entries(error: Exception) -> dict[str, Any]:
    """The manifest's entries for a window the bundle could not keep: ``window_error`` (one line) and, when frozen
    weights changing was why, ``window_frozen_changed`` (their paths)."""
    entries: dict[str, Any] = {
        MANIFEST_KEY + "_error": f"{type(error).__name__}: {error}".splitlines()[0][:300]
    }
    if isinstance(error, WindowError) and error.frozen_changed:
        entries[FROZEN_CHANGED_KEY] = error.frozen_changed
    return entries


def frozen_changed(manifest: dict[str, Any]) -> list[str]:
    """The frozen weights the guard's window saw change between steps (``window_frozen_changed``); [] when the
    bundle says none, or says it in any other shape than a list of strings (a bundle is data)."""
    names = manifest.get(FROZEN_CHANGED_KEY)
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        return []
    return names[:64]


# ---- training side ----------------------------------------------------------------------------------------------


@dataclass
class _Copy:
    step: int  # the state is the one step `step` started from
    shadows: list[Any]
    copy: Any  # compiled: assign every source variable to its shadow
    runs: int = 0


class WindowKeeper:
    """Keeps the state ``size`` to ``2*size - 1`` steps back and the batches since (see the module docstring).

    ``sources()`` lists the variables of the step's state; it is asked at every copy (optimizers make their slots
    on the first step, so the list is known only once a step ran). A held batch is whatever the guard passes
    (tensors, by reference); ``to_numpy(held)`` turns one into the nested numpy batch when a bundle is written.
    """

    def __init__(
        self, size: int, sources: Callable[[], list[Any]], frozen: Callable[[], list[Any]] | None = None
    ) -> None:
        if size < 0:
            raise ValueError(f"window must be 0 (off) or a number of steps, got {size}")
        self.size = int(size)
        self._sources = sources
        self._frozen = frozen  # the variables no step can change (see the module docstring), or None
        self._variables: list[Any] = []
        self._copied: list[Any] = []  # the variables the copies hold: all but the fixed ones
        self._fixed: list[Any] = []  # frozen float32 weights: fingerprinted, not copied
        self._fingerprints: np.ndarray | None = None  # of `_fixed`, when the window started (its first copy)
        self._fingerprint: Any = None  # compiled: the fingerprints of `_fixed`
        self._changed: set[int] = set()  # ids of frozen weights seen to change: copied from then on
        self._copies: list[_Copy] = []  # older first, at most two
        self._pool: list[_Copy] = []  # the buffers and compiled copies made so far (kept over restarts)
        self._batches: collections.deque = collections.deque()
        self._recheck = False
        self.max_bytes = _max_bytes()
        self.off_reason: str | None = None  # why the window turned itself off (too large a state), once said
        self.copy_every = self.size  # N: steps between copies (see `_space_copies`)
        self._step_seconds: collections.deque[float] = collections.deque(maxlen=_STEPS_TIMED)
        self._copy_seconds: collections.deque[float] = collections.deque(maxlen=_COPIES_TIMED)
        self._last_step_end: float | None = None

    @property
    def enabled(self) -> bool:
        return self.size > 0

    def restart(self) -> None:
        """A new ``fit``: forget the copies and batches, keep the buffers (no new variables, no retrace)."""
        self._copies, self._batches = [], collections.deque()
        self._last_step_end = None  # the time between two fits is not a step's

    def start(self, step: int) -> None:
        """Training starts at `step`: copy the state it starts from, when its variables exist already (Keras
        builds the model and optimizer before ``on_train_begin``), so a run that blows up in its first steps has a
        window from its very first update."""
        if self.enabled and self._sources():
            self._take(step)
            self._recheck = True

    def _sources_changed(self) -> bool:
        variables = unique(self._sources())
        if len(variables) != len(self._variables) or any(
            a is not b for a, b in zip(variables, self._variables, strict=True)
        ):
            return True
        # The same variables, but a layer frozen or unfrozen since (fine-tuning's second fit): split them anew.
        fixed = self._split(variables)[1]
        return len(fixed) != len(self._fixed) or any(
            a is not b for a, b in zip(fixed, self._fixed, strict=True)
        )

    def _split(self, variables: list[Any]) -> tuple[list[Any], list[Any]]:
        """(the variables to copy, the fixed ones): fixed are the frozen float32 weights not seen to change."""
        if self._frozen is None:
            return variables, []
        frozen = {id(v) for v in self._frozen()} - self._changed
        fixed = [v for v in variables if id(v) in frozen and _dtype_name(v) == "float32"]
        ids = {id(v) for v in fixed}
        return [v for v in variables if id(v) not in ids], fixed

    def after_step(self, step: int, held: Any, refused: bool = False) -> None:
        """Step `step` ran on `held` (its update applied or, in skip mode, `refused`): keep the batch; every `size`
        steps copy the state, which is now the state step ``step + 1`` starts from. After a refused step the copy is
        made at once: re-running its batch would apply the update training refused, so a later re-run (taking an
        update back, `pyadapter.capture.atscene.take_back_update`) starts after it."""
        if not self.enabled:
            return
        now = time.perf_counter()
        if self._last_step_end is not None:
            self._step_seconds.append(now - self._last_step_end)
        self._last_step_end = now
        self._batches.append((step, held))
        following = step + 1
        if self._recheck:
            # Once, after the first step: an optimizer that made its slots in that step was not in the start copy,
            # which then cannot restore it; the window starts after that step instead.
            self._recheck = False
            if self._sources_changed():
                self._copies = []
        if self._copies and following - self._copies[-1].step < self.copy_every and not refused:
            return
        self._take(following)
        if not self._copies:  # the window turned itself off (too large a state)
            return
        oldest = self._copies[0].step
        while self._batches and self._batches[0][0] < oldest:
            self._batches.popleft()
        self._space_copies(held)
        self._last_step_end = time.perf_counter()  # the copy is not part of the next step's time

    def _space_copies(self, held: Any) -> None:
        """Set `copy_every`: the fewest steps between copies that keeps them within `COPY_BUDGET` of the time the
        steps take, from K up to `MAX_SPACING` x K (or `SPACING_SECONDS` of steps, if more), and no wider than
        `BATCH_BUDGET` allows for 2N held batches."""
        if not self._copy_seconds or len(self._step_seconds) < 4:
            return
        step_seconds = statistics.median(self._step_seconds)
        if step_seconds <= 0:
            return
        wanted = math.ceil(statistics.median(self._copy_seconds) / (COPY_BUDGET * step_seconds))
        widest = max(MAX_SPACING * self.size, int(SPACING_SECONDS / step_seconds))
        batch_bytes = _held_bytes(held)
        if batch_bytes:
            widest = min(widest, BATCH_BUDGET // (2 * batch_bytes))
        self.copy_every = max(self.size, min(wanted, widest))

    def _timed_copy(self, made: _Copy) -> None:
        started = time.perf_counter()
        made.copy()
        made.runs += 1
        if made.runs > 1:  # a function's first run sets up its kernels: several times a copy's cost
            self._copy_seconds.append(time.perf_counter() - started)

    def _take(self, step: int) -> None:
        import tensorflow as tf

        variables = unique(self._sources())
        if self._sources_changed():
            # New variables (the first copy, or a model that grew), or other ones frozen: earlier copies do not
            # match them any more.
            self._variables, self._copies, self._pool = variables, [], []
            self._copied, self._fixed = self._split(variables)
            self._fingerprint = None
        if not self._pool and not self._fits(self._copied):
            return
        if not self._copies:  # a window starts: the fixed weights as they are now, to check when it is read
            self._fingerprints = self._fingerprints_now()
        free = [c for c in self._pool if all(c is not active for active in self._copies)]
        if free or len(self._copies) == 2:
            reused = free[0] if free else self._copies.pop(0)  # the older copy's buffers take the new state
            self._timed_copy(reused)
            reused.step = step
            self._copies.append(reused)
            return
        with tf.init_scope():
            shadows = [
                tf.Variable(tf.convert_to_tensor(v), trainable=False, name="nanlens_window")
                for v in self._copied
            ]

        sources = list(self._copied)

        @tf.function(autograph=False, jit_compile=False)
        def copy() -> None:
            for shadow, source in zip(shadows, sources, strict=True):
                # A real copy, made now: assigned a plain read, the shadow would share the variable's buffer and the
                # next update would make the copy (copy on write) inside the training step. Same cost, but here it
                # is paid, and measured, where the window takes it.
                shadow.assign(tf.raw_ops.DeepCopy(x=_read_without_copy(source)))

        copy.get_concrete_function()  # traced now, at the first copy of the training
        made = _Copy(step, shadows, copy)
        self._timed_copy(made)
        self._pool.append(made)
        self._copies.append(made)

    def _fingerprints_now(self) -> np.ndarray | None:
        """int32 [len(_fixed)]: each fixed weight's bits summed as int32, wrapping (one read of each)."""
        if not self._fixed:
            return None
        import tensorflow as tf

        if self._fingerprint is None:
            fixed = list(self._fixed)

            @tf.function(autograph=False, jit_compile=False)
            def fingerprint() -> Any:
                return tf.stack([tf.reduce_sum(tf.bitcast(tf.convert_to_tensor(v), tf.int32)) for v in fixed])

            self._fingerprint = fingerprint
        return np.asarray(self._fingerprint().numpy())

    def _check_fixed(self) -> None:
        """Raise WindowError when a fixed weight is not what it was when the window started, so not what it was at
        the oldest copy either (and copy it from the next window on)."""
        if self._fingerprints is None:
            return
        now = self._fingerprints_now()
        if now is None:
            return
        changed = [v for v, a, b in zip(self._fixed, self._fingerprints, now, strict=True) if a != b]
        if not changed:
            return
        self._changed.update(id(v) for v in changed)
        self._variables, self._copies, self._pool = [], [], []  # split anew at the next copy
        paths = [variable_path(v) for v in changed]
        names = ", ".join(paths[:3]) + (" ..." if len(paths) > 3 else "")
        raise WindowError(
            f"{FROZEN_CHANGED} ({names}): the window has no copy of their earlier value; "
            "they are copied from the next window on",
            frozen_changed=paths,
        )

    def _fits(self, variables: list[Any]) -> bool:
        """Whether two copies of `variables` fit the budget; if not, the window turns off and says so once."""
        state = sum(_nbytes(v) for v in variables)
        if 2 * state <= self.max_bytes:
            return True
        self.size, self._copies, self._batches = 0, [], collections.deque()
        self.off_reason = (
            f"window off: two copies of the training state would take {_gigabytes(2 * state)} "
            f"(more than {_gigabytes(self.max_bytes)}); set {MAX_BYTES_ENV} to a larger number of bytes to keep "
            "the steps before a failure, or window=0 to say nothing"
        )
        print(f"NanGuard: {self.off_reason}", file=sys.stderr, flush=True)
        return False

    def window_for(
        self, failing_step: int, newest: bool = False
    ) -> tuple[_Copy, list[tuple[int, Any]]] | None:
        """The copy a window replay starts from and the held batches from it up to (not including) the failing step;
        None when no copy is there yet or a batch of the window is missing. The oldest copy (the longest window),
        or with `newest` the latest one at or before the failing step (the fewest steps to re-run)."""
        candidates = [c for c in self._copies if c.step <= failing_step]
        if not candidates or self._sources_changed():
            # No copy yet, or the state has variables the copies lack (an optimizer or a model built by the first
            # step, after the start copy): a re-run from them would leave those as they are now.
            return None
        start = candidates[-1] if newest else candidates[0]
        held = [(s, b) for s, b in self._batches if start.step <= s < failing_step]
        if [s for s, _ in held] != list(range(start.step, failing_step)):
            return None
        self._check_fixed()
        return start, held

    def copy_at(self, step: int) -> _Copy | None:
        """The copy taken at `step` itself (the state the failing step started from: nothing to re-run), also when
        the step made variables since (an optimizer's slots, built at its first apply in a custom loop); None when
        there is none."""
        return next((c for c in self._copies if c.step == step), None)

    def made_since(self) -> list[Any]:
        """The state's variables the copies lack: made by a step after them (an optimizer's slots)."""
        known = {id(v) for v in self._variables}
        return [v for v in unique(self._sources()) if id(v) not in known]

    def _held_state(self, copy: _Copy) -> list[Any]:
        """Per variable (in `variables` order), where its value at the copy's step is: the copy's shadow, or the
        variable itself for a fixed weight (checked unchanged by `window_for`)."""
        shadows = {id(v): shadow for v, shadow in zip(self._copied, copy.shadows, strict=True)}
        return [shadows.get(id(v), v) for v in self._variables]

    def state_values(self, copy: _Copy) -> list[np.ndarray]:
        return [np.asarray(value.numpy()) for value in self._held_state(copy)]

    @property
    def variables(self) -> list[Any]:
        return list(self._variables)

    def files(
        self,
        failing_step: int,
        failing_batch: Any,
        to_numpy: Callable[[Any], Any],
        *,
        learning_rate: float | None = None,
        search: dict[str, Any] | None = None,
    ) -> tuple[dict[str, ExtraFile], dict[str, Any]]:
        """The bundle's window files and its ``manifest["window"]`` entry (nothing when there is no window). The
        state file is streamed: each copy leaves the device when it is written, one variable at a time."""
        found = self.window_for(failing_step) if self.enabled else None
        if found is None:
            return {}, {}
        copy, held = found
        kept: list[tuple[str, Any]] = []
        described = []
        total = 0
        for variable, shadow in zip(self._variables, self._held_state(copy), strict=True):
            dtype = _numpy_dtype(shadow)
            if dtype.kind == "O":  # a string variable: not an array an .npz holds without pickle
                continue
            key = f"w{len(kept):03d}"
            kept.append((key, shadow))
            total += _nbytes(shadow)
            described.append({"key": key, "path": variable_path(variable), "dtype": dtype.str})
        state = ArraysFile(((key, np.asarray(shadow.numpy())) for key, shadow in kept), total)
        batch_arrays: dict[str, np.ndarray] = {}
        structures = []
        batches = [to_numpy(b) for _, b in held] + [failing_batch]
        for index, batch in enumerate(batches):
            structures.append(structure.describe(batch, batch_arrays, prefix=f"s{index:04d}_"))
        files: dict[str, ExtraFile] = {STATE_FILE: state, BATCHES_FILE: _npz_bytes(batch_arrays)}
        entry: dict[str, Any] = {
            "size": self.size,
            "copy_every": self.copy_every,
            "start_step": copy.step,
            "end_step": failing_step,
            "steps": len(batches),
            "state": {"file": STATE_FILE, "variables": described},
            "batches": {"file": BATCHES_FILE, "structures": structures},
            "learning_rate": learning_rate,
            "memory_bytes": self.memory_bytes(),
        }
        if search is not None:
            entry["search"] = search
        return files, {MANIFEST_KEY: entry}

    def memory_bytes(self) -> int:
        """What the window holds now: its state copies and the batches it references."""
        copies = sum(_nbytes(shadow) for copy in self._copies for shadow in copy.shadows)
        return copies + sum(_held_bytes(held) for _, held in self._batches)


def current_learning_rate(optimizer: Any) -> float | None:
    """The optimizer's constant learning rate now (None for a schedule, and for an Inf or NaN rate: that is the
    failure itself, recorded as the step's rate, and no rate to search down from), for ``manifest["window"]``."""
    variable = learning_rate_variable(optimizer)
    if variable is None:
        return None
    value = float(np.asarray(variable.numpy()))
    return value if math.isfinite(value) else None


def _read_without_copy(variable: Any) -> Any:
    """A variable's value, not copied to be read: a table that sparse updates write (an embedding under SGD) is in
    TensorFlow's copy-on-read mode, where a plain read copies the whole table, and the copy above would copy it
    twice. (The next sparse update turns the mode back on, copying nothing: the read is done by then.)"""
    import tensorflow as tf

    inner = getattr(variable, "value", None)  # keras.Variable -> tf.Variable
    inner = inner if inner is not None and not callable(inner) else variable
    read = getattr(inner, "read_value_no_copy", None)
    return read() if read is not None else tf.convert_to_tensor(variable)


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _leaves(item)]
    return [] if value is None else [value]


def _held_bytes(held: Any) -> int:
    """Bytes of a held batch's tensors (those of a known shape)."""
    total = 0
    for leaf in _leaves(held):
        nbytes = getattr(leaf, "nbytes", None)  # numpy arrays (a custom loop's arguments)
        if isinstance(nbytes, int):
            total += nbytes
            continue
        shape: Any = getattr(leaf, "shape", None)
        dtype = getattr(leaf, "dtype", None)
        defined = getattr(shape, "is_fully_defined", None)
        if callable(defined) and defined() and dtype is not None:
            total += int(np.prod(shape.as_list())) * int(getattr(dtype, "size", 0) or 0)
    return total


def _npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    structure.write_npz(buffer, arrays)
    return buffer.getvalue()


# ---- the learning-rate search's record --------------------------------------------------------------------------


@dataclass
class Trial:
    learning_rate: float
    finite: bool
    first_non_finite_step: int | None = None  # the step of the window that went non-finite first
    loss_grew_at_step: int | None = None  # finite, but its loss passed the growth limit at this step

    def to_json(self) -> dict[str, Any]:
        return {
            "learning_rate": self.learning_rate,
            "finite": self.finite,
            "first_non_finite_step": self.first_non_finite_step,
            "loss_grew_at_step": self.loss_grew_at_step,
        }


@dataclass
class WindowSearch:
    """The largest learning rate that keeps the window finite, found by replaying it from its copy."""

    steps: int  # steps in the window
    start_step: int
    captured_learning_rate: float | None
    largest_finite: float | None = None  # None: none of the rates tried kept the window finite
    smallest_non_finite: float | None = None
    trials: list[Trial] = field(default_factory=list)
    seconds: float = 0.0
    stopped: str | None = None  # why the search ended early (time limit), if it did
    # The suggestion as tried: half the largest finite rate kept the window finite too, or the first rate below it
    # that did (a window whose loss is not monotone in the rate: finite at 0.00195, diverging at 9.77e-4 under SGD
    # with momentum). None: not tried (out of time), and the suggestion is half the largest finite rate.
    tried_suggestion: float | None = None

    @property
    def suggested(self) -> float | None:
        """Half the largest finite rate (the window is short, and the steps after it start from larger weights),
        or, when that rate diverged when tried, the largest rate below it that did not."""
        from pyadapter.capture.learning_rate import rate_to_try

        if self.largest_finite is None:
            return self.tried_suggestion
        tried = self.tried_suggestion if self.tried_suggestion is not None else self.largest_finite / 2
        return rate_to_try(self.largest_finite, tried, self.steps)

    def sentence(self) -> str:
        from pyadapter.capture.learning_rate import SHORT_WINDOW
        from pyadapter.findings_text import format_number

        if self.stopped and (
            not self.trials or self.largest_finite is None and self.smallest_non_finite is None
        ):
            # not searched (a schedule), or the captured rate stayed finite: "no learning rate down to ..." would
            # say a search ran
            return self.stopped
        if self.largest_finite is None:
            lowest = min((t.learning_rate for t in self.trials), default=None)
            shown = format_number(lowest) if lowest else "?"
            return f"no learning rate down to {shown} kept the {self.steps}-step window finite"
        suggested = self.suggested
        assert suggested is not None
        half = self.largest_finite / 2
        unsteady = ""
        if self.steps < SHORT_WINDOW and suggested <= self.largest_finite / 10 * 1.01:
            unsteady = f" (a tenth of it: finite over {self.steps} steps does not show it trains)"
        elif suggested < half * 0.99:
            # "try 9.77e-4" where 9.77e-4 itself diverged: say why the suggestion is lower than half.
            unsteady = (
                f" ({format_number(half)} diverged: the window's loss does not fall steadily with the rate, so the "
                "rate suggested is one that was tried)"
            )
        return (
            f"largest finite over the {self.steps}-step window: {format_number(self.largest_finite)}; "
            f"try {format_number(suggested)}{unsteady}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "start_step": self.start_step,
            "captured_learning_rate": self.captured_learning_rate,
            "largest_finite_learning_rate": self.largest_finite,
            "smallest_non_finite_learning_rate": self.smallest_non_finite,
            "suggested_learning_rate": self.suggested,
            "sentence": self.sentence(),
            "trials": [t.to_json() for t in self.trials],
            "seconds": round(self.seconds, 2),
            "stopped": self.stopped,
        }


# ---- reading side (no TensorFlow) ---------------------------------------------------------------------------


@dataclass
class WindowData:
    """A bundle's window, read back: the state at ``start_step`` (by variable path) and one batch per step."""

    size: int
    start_step: int
    end_step: int
    state: dict[str, np.ndarray]  # variable path -> value (a path captured twice keeps its last value)
    batches: list[Any]
    learning_rate: float | None = None
    search: dict[str, Any] | None = None
    # (variable path, value) in capture order, every one: two optimizers of one name share paths
    state_entries: list[tuple[str, np.ndarray]] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return len(self.batches)


def manifest_entry(manifest: dict[str, Any]) -> dict[str, Any] | None:
    entry = manifest.get(MANIFEST_KEY)
    return entry if isinstance(entry, dict) else None


RECENT_STEPS = 3  # the steps before the failing one whose batches a cause looks into (`recent_batches`)


def recent_batches(bundle: Any, count: int = RECENT_STEPS) -> list[tuple[int, Any]]:
    """(step, batch) of the last `count` steps before the failing one that the bundle's window holds, oldest first;
    [] without a window or with one that does not fit its files. Reads only those batches' arrays (the window's
    state, a copy of the model, is not read)."""
    entry = manifest_entry(bundle.manifest)
    batches_entry = (entry or {}).get("batches")
    files = bundle.manifest.get("files") or {}
    if (
        not isinstance(batches_entry, dict)
        or batches_entry.get("file") != BATCHES_FILE
        or BATCHES_FILE not in files
    ):
        return []
    structures, end = batches_entry.get("structures"), (entry or {}).get("end_step")
    if not isinstance(structures, list) or len(structures) < 2 or not _is_int(end):
        return []
    chosen = structures[-1 - count : -1]  # the last one is the failing step's own
    first = end - len(chosen)
    try:
        with np.load(bundle.path / BATCHES_FILE, allow_pickle=False) as arrays:
            return [(first + i, structure.rebuild(s, arrays)) for i, s in enumerate(chosen)]
    except (structure.StructureError, ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError):
        return []  # the window's batches are evidence only: a cause without them is still one


def read_window(bundle: Any) -> WindowData | None:
    """The window a loaded `CaptureBundle` holds, or None (an older bundle, or a guard with ``window=0``). Raises
    `WindowError` (one line) for a window entry that does not fit its files."""
    entry = manifest_entry(bundle.manifest)
    if entry is None:
        return None
    files = bundle.manifest.get("files") or {}
    state_entry, batches_entry = entry.get("state"), entry.get("batches")
    if not isinstance(state_entry, dict) or not isinstance(batches_entry, dict):
        raise WindowError("the bundle's window entry has no state or batches")
    for name in (state_entry.get("file"), batches_entry.get("file")):
        if name not in FILES or name not in files:
            raise WindowError(f"the bundle's window names a file it does not hold ({name!r:.80})")
    try:
        state_arrays = structure.read_npz(bundle.path / state_entry["file"])
        batch_arrays = structure.read_npz(bundle.path / batches_entry["file"])
    except structure.StructureError as error:
        raise WindowError(f"the bundle's window: {error}") from None
    state: list[tuple[str, np.ndarray]] = []
    for item in state_entry.get("variables") or []:
        key, path = (item or {}).get("key"), (item or {}).get("path")
        if not isinstance(key, str) or not isinstance(path, str) or key not in state_arrays:
            raise WindowError(f"the bundle's window state lacks {key!r:.40}")
        state.append((path, state_arrays[key]))
    structures = batches_entry.get("structures")
    if not isinstance(structures, list) or not structures:
        raise WindowError("the bundle's window holds no batches")
    try:
        batches = [structure.rebuild(s, batch_arrays) for s in structures]
    except structure.StructureError as error:
        raise WindowError(f"the bundle's window batches: {error}") from None
    start, end, size = entry.get("start_step"), entry.get("end_step"), entry.get("size")
    if not (_is_int(start) and _is_int(end) and _is_int(size)):
        raise WindowError("the bundle's window has no integer start_step/end_step/size")
    if end - start + 1 != len(batches):
        raise WindowError(f"the bundle's window spans steps {start}-{end} but holds {len(batches)} batches")
    rate = entry.get("learning_rate")
    search = entry.get("search")
    return WindowData(
        size=size,
        start_step=start,
        end_step=end,
        state=dict(state),
        state_entries=state,
        batches=batches,
        learning_rate=float(rate)
        if isinstance(rate, (int, float)) and not isinstance(rate, bool) and math.isfinite(rate)
        else None,
        search=search if isinstance(search, dict) else None,
    )


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _max_bytes() -> int:
    text = os.environ.get(MAX_BYTES_ENV, "").strip()
    try:
        return int(text) if text else DEFAULT_MAX_BYTES
    except ValueError:
        return DEFAULT_MAX_BYTES


def _numpy_dtype(value: Any) -> np.dtype:
    dtype = value.dtype  # a tf.DType, or a Keras variable's name of one ("float32")
    return np.dtype(dtype.as_numpy_dtype if hasattr(dtype, "as_numpy_dtype") else str(dtype))


def _dtype_name(variable: Any) -> str:
    dtype = getattr(variable, "dtype", None)
    return str(getattr(dtype, "name", dtype))


def _nbytes(variable: Any) -> int:
    count = variable.shape.num_elements() if hasattr(variable.shape, "num_elements") else None
    if count is None:
        count = int(np.prod(tuple(variable.shape)))
    return int(count) * int(getattr(variable.dtype, "size", 4))


def _gigabytes(count: int) -> str:
    if count >= 2**30:
        return f"{count / 2**30:.1f} GB"
    return f"{count / 2**20:.0f} MB" if count >= 2**20 else f"{count / 2**10:.0f} KB"
