"""The learning rate a failing step's update used, recorded in the bundle's manifest as ``learning_rate``:

    {"value": 0.01 | "inf" | "-inf" | "nan", "schedule": "WarmupSchedule" | null, "file": "...", "line": 12,
     "code": "decay = self.peak * tf.math.rsqrt(...)"}

A learning-rate schedule that returns Inf or NaN at some step (a warm-up written ``base / (warmup - step)``, a decay
through ``log`` of 0) makes finite gradients write non-finite weights at exactly that step, often hours into a run;
the update, not the model, is then the cause. ``file``/``line`` name the schedule's ``__call__`` (its ``return``
line when it has one), read from its source with `inspect` while training, where the user's own code is loaded;
``code`` is that line's text, so that a notebook cell (run from a file the kernel made) can be found by it later.
Reading the record (`read`) never runs anything: it is data, checked field by field.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import linecache
import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from pyadapter.dump.frames import is_user_file

MANIFEST_KEY = "learning_rate"
# Earlier steps a schedule is evaluated at, as fractions of the failing step (`LearningRate.earlier`).
_FRACTIONS = (1 / 16, 1 / 8, 1 / 4, 1 / 2)
_SAMPLES = len(_FRACTIONS)
_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


@dataclass
class LearningRate:
    value: float
    schedule: str | None = None  # the schedule's class name; None for a constant rate
    file: str | None = None  # where the schedule's __call__ is written
    line: int | None = None
    code: str | None = None  # the text of that line, stripped
    # The schedule's rate at earlier steps, (step, rate), oldest first: whether it was still rising when the run
    # failed (a decay written upside down, ``sqrt(step / warmup)``, grows without end). Empty for a constant.
    earlier: list[tuple[int, float]] = field(default_factory=list)
    # The schedule's rate at the step before the failing one: a warm-up that peaked a few steps before the failure
    # rose at every earlier sample, but is falling now.
    previous: float | None = None
    # (step, rate before it, rate at it): the latest step of the last `RESTART_STEPS` before the failing one where
    # the schedule's rate rose `RESTART_FACTOR`x or more at once (a warm restart of CosineDecayRestarts, a cyclic
    # schedule's jump): the run then diverged at a rate it met again only there.
    restart: tuple[int, float, float] | None = None

    @property
    def finite(self) -> bool:
        return math.isfinite(self.value)

    def shown(self) -> str:
        return str(self.value) if self.finite else _text(self.value)

    def to_json(self) -> dict[str, Any]:
        return {
            "value": self.value if self.finite else _text(self.value),
            "schedule": self.schedule,
            "file": self.file,
            "line": self.line,
            "code": self.code,
            **({"earlier": [[step, rate] for step, rate in self.earlier]} if self.earlier else {}),
            **({"previous": self.previous} if self.previous is not None else {}),
            **({"restart": list(self.restart)} if self.restart is not None else {}),
        }

    def rising(self) -> list[tuple[int, float]]:
        """The earlier rates when the schedule rose at every one of them up to this step's, to at least twice the
        first (the steps a rate "still rising at step N" is shown with), and still at the step before this one;
        [] otherwise."""
        if self.previous is not None and self.previous >= self.value:
            return []
        points = [*self.earlier, (-1, self.value)]
        rates = [rate for _, rate in points]
        if len(rates) < 3 or not all(math.isfinite(r) and r > 0 for r in rates):
            return []
        if all(a < b for a, b in itertools.pairwise(rates)) and rates[-1] >= 2 * rates[0]:
            return list(self.earlier)
        return []


def _text(value: float) -> str:
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def read(data: Any) -> LearningRate | None:
    """The record as a bundle holds it, or None when it is absent or not one (a bundle is data: no raise)."""
    if not isinstance(data, dict):
        return None
    value = data.get("value")
    if isinstance(value, str):
        value = _NON_FINITE.get(value)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    schedule, file, line, code = data.get("schedule"), data.get("file"), data.get("line"), data.get("code")
    previous, restart = data.get("previous"), data.get("restart")
    return LearningRate(
        float(value),
        schedule if isinstance(schedule, str) else None,
        file if isinstance(file, str) else None,
        line if isinstance(line, int) and not isinstance(line, bool) and line > 0 else None,
        code[:500] if isinstance(code, str) else None,
        _read_earlier(data.get("earlier")),
        float(previous) if _is_finite_number(previous) else None,
        _read_restart(restart),
    )


def _is_finite_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _read_restart(data: Any) -> tuple[int, float, float] | None:
    """The ``restart`` triple [step, rate before, rate at] if it is one (a bundle is data)."""
    if not (isinstance(data, list) and len(data) == 3):
        return None
    step, before, after = data
    if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
        if _is_finite_number(before) and _is_finite_number(after) and 0 < before < after:
            return step, float(before), float(after)
    return None


def _read_earlier(data: Any) -> list[tuple[int, float]]:
    """The ``earlier`` pairs that are [step, finite rate]; anything else is dropped (a bundle is data)."""
    if not isinstance(data, list):
        return []
    pairs: list[tuple[int, float]] = []
    for item in data[:_SAMPLES]:
        if not (isinstance(item, list) and len(item) == 2):
            continue
        step, rate = item
        if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
            if isinstance(rate, (int, float)) and not isinstance(rate, bool) and math.isfinite(rate):
                pairs.append((step, float(rate)))
    return pairs


def manifest_entry(optimizer: Any, update_in_state: bool) -> dict[str, Any]:
    """``{"learning_rate": ...}`` for the step that just failed (the optimizer's iteration count went up by one if
    its update is in the state: applied and not taken back), or {} when the rate cannot be told. Never raises."""
    try:
        step = int(optimizer.iterations.numpy()) - (1 if update_in_state else 0)
    except Exception:  # noqa: BLE001 - an optimizer without an iteration count
        return {}
    record = of_step(optimizer, step)
    return {MANIFEST_KEY: record.to_json()} if record is not None else {}


def learning_rate_variable(optimizer: Any) -> Any:
    """The variable holding the optimizer's constant learning rate (a LossScaleOptimizer's inner one), or None
    (a schedule, or an optimizer line without one)."""
    inner = getattr(optimizer, "inner_optimizer", None)
    if inner is not None:
        return learning_rate_variable(inner)
    rate = getattr(optimizer, "_learning_rate", None)
    if rate is None:
        rate = getattr(optimizer, "learning_rate", None)
    return rate if hasattr(rate, "assign") and hasattr(rate, "numpy") else None


def of_step(optimizer: Any, step: int) -> LearningRate | None:
    """The learning rate `optimizer` used at `step` (a schedule is evaluated at it), or None when it cannot be
    told (an optimizer without one, a schedule that raises). Called while training, on a failing step."""
    inner = getattr(optimizer, "inner_optimizer", None)  # a LossScaleOptimizer's own optimizer holds the rate
    if inner is not None:
        return of_step(inner, step)
    rate = getattr(optimizer, "_learning_rate", None)
    try:
        import numpy as np
        import tensorflow as tf

        variable = learning_rate_variable(optimizer)
        if variable is not None:  # a constant
            return LearningRate(float(np.asarray(variable.numpy())))
        if rate is not None and callable(rate):
            arguments = (tf.constant(step, tf.int64),) if _takes_step(rate) else ()
            with _iterations_at(optimizer, step, when=not arguments):
                value = float(np.asarray(rate(*arguments)))
                file, line = _source_of(rate)
                if not math.isfinite(value):
                    file, line = _line_that_made_it(rate, arguments, math.isnan(value)) or (file, line)
                else:
                    file, line = _line_that_made_value(rate, arguments, value) or (file, line)
            name = type(rate).__name__ if not inspect.isfunction(rate) else rate.__qualname__
            code = linecache.getline(file, line).strip() if file and line else ""
            earlier = _earlier_rates(optimizer, rate, step, takes_step=bool(arguments))
            recent = _recent_rates(optimizer, rate, step, takes_step=bool(arguments))
            previous = recent[-1][1] if recent and recent[-1][0] == step - 1 else None
            restart = _last_restart([*recent, *([(step, value)] if math.isfinite(value) else [])])
            return LearningRate(value, name, file, line, code or None, earlier, previous, restart)
    except Exception:  # noqa: BLE001 - a schedule is the user's code; the record is an extra
        return None
    return None


def _earlier_rates(optimizer: Any, rate: Any, step: int, takes_step: bool) -> list[tuple[int, float]]:
    """The schedule's finite rates at `_FRACTIONS` of `step` (`LearningRate.earlier`)."""
    earlier: list[tuple[int, float]] = []
    for at in sorted({int(step * f) for f in _FRACTIONS if 0 < int(step * f) < step}):
        value = _rate_at(optimizer, rate, at, takes_step)
        if value is not None:
            earlier.append((at, value))
    return earlier


# How far back a warm restart is looked for, and how much the rate must rise at once to be one.
RESTART_STEPS = 64
RESTART_FACTOR = 2.0


def _recent_rates(optimizer: Any, rate: Any, step: int, takes_step: bool) -> list[tuple[int, float]]:
    """The schedule's finite rates at the `RESTART_STEPS` steps before `step`, oldest first."""
    recent = []
    for at in range(max(step - RESTART_STEPS, 0), step):
        value = _rate_at(optimizer, rate, at, takes_step)
        if value is not None:
            recent.append((at, value))
    return recent


def _last_restart(rates: list[tuple[int, float]]) -> tuple[int, float, float] | None:
    """The latest (step, rate before, rate at) where consecutive steps' rates rose `RESTART_FACTOR`x or more after
    a step that did not rise: a restart comes after a decay (or a flat stretch); a linear warm-up from 0 doubles
    its rate from step 1 to 2, rising all the way."""
    for (_, earlier), (_, before), (step, after) in reversed(
        list(zip(rates, rates[1:], rates[2:], strict=False))
    ):
        if before > 0 and after >= RESTART_FACTOR * before and before <= earlier:
            return step, before, after
    return None


def _rate_at(optimizer: Any, rate: Any, step: int, takes_step: bool) -> float | None:
    """The schedule's rate at `step`, or None when it is not finite or the schedule raises there."""
    import numpy as np
    import tensorflow as tf

    try:
        arguments = (tf.constant(step, tf.int64),) if takes_step else ()
        with _iterations_at(optimizer, step, when=not takes_step):
            value = float(np.asarray(rate(*arguments)))
    except Exception:  # noqa: BLE001 - the user's schedule; the earlier rates are an extra
        return None
    return value if math.isfinite(value) else None


@contextlib.contextmanager
def _iterations_at(optimizer: Any, step: int, when: bool) -> Iterator[None]:
    """A rate of no arguments (``lambda: schedule(optimizer.iterations)``) reads the optimizer's iteration count
    itself: it is set to the failing step while the rate is evaluated, and put back."""
    iterations = getattr(optimizer, "iterations", None)
    if not when or iterations is None or not hasattr(iterations, "assign"):
        yield
        return
    now = iterations.numpy()
    iterations.assign(step)
    try:
        yield
    finally:
        iterations.assign(now)


def _takes_step(rate: Any) -> bool:
    try:
        return len(inspect.signature(rate).parameters) >= 1
    except (TypeError, ValueError):
        return True


def _line_that_made_it(rate: Any, arguments: tuple, nan: bool = False) -> tuple[str, int] | None:
    """Run the schedule again under a trace function on the user's own frames (not a library's): the first line
    after which a local name holds a non-finite value (``decay = peak * rsqrt(step - warmup)``), or the first
    ``return`` of a non-finite value (``return base / (warmup - step)``, also inside a function the schedule
    calls). For a NaN rate (`nan`), the first NaN: the Transformer tutorial's ``arg1 = rsqrt(step)`` is Inf at step 0
    by design (``minimum`` drops it); ``arg2 = step * warmup_steps ** -1.5`` with ``warmup_steps=0`` is the NaN.
    None when neither is seen. A debugger's trace function is put back afterwards."""
    import numpy as np

    found: list[tuple[str, int]] = []
    last_line: dict[int, int] = {}

    def non_finite(value: Any) -> bool:
        if not hasattr(value, "dtype") and not isinstance(value, float):
            return False
        try:
            array = np.asarray(value)
            if array.dtype.kind != "f" or array.size > 1 << 20:
                return False
            return bool(np.isnan(array).any()) if nan else not bool(np.isfinite(array).all())
        except Exception:  # noqa: BLE001 - a local that is not a number
            return False

    def local_trace(frame: Any, event: str, arg: Any) -> Any:
        if found:
            return None
        previous = last_line.get(id(frame))
        if event == "return" and non_finite(arg):
            found.append((frame.f_code.co_filename, frame.f_lineno))
        elif previous is not None and event in ("line", "return"):
            if any(non_finite(v) for v in frame.f_locals.values()):
                found.append((frame.f_code.co_filename, previous))
        last_line[id(frame)] = frame.f_lineno
        return None if found else local_trace

    def global_trace(frame: Any, event: str, _: Any) -> Any:
        return local_trace if event == "call" and is_user_file(frame.f_code.co_filename) else None

    _traced(rate, arguments, global_trace)
    return found[0] if found else None


def _traced(rate: Any, arguments: tuple, trace: Any) -> None:
    """Call the schedule once under `trace` (a global trace function); a debugger's own is put back after."""
    previous_trace = sys.gettrace()
    sys.settrace(trace)
    try:
        rate(*arguments)
    except Exception:  # noqa: BLE001 - the user's schedule: what it did up to here counts
        pass
    finally:
        sys.settrace(previous_trace)


def _line_that_made_value(rate: Any, arguments: tuple, value: float) -> tuple[str, int] | None:
    """The line of the schedule's own frame that last gave a local the value it returned (``decay = peak *
    tf.sqrt(step / warmup)`` under ``return tf.where(step < warmup, warm, decay)``), or None when no local holds it
    (the return line computes it). A debugger's trace function is put back afterwards."""
    import numpy as np

    made: list[tuple[str, int]] = []
    seen: dict[str, int] = {}
    last_line: list[int] = []
    top: list[Any] = []

    def equal(local: Any) -> bool:
        if not hasattr(local, "dtype") and not isinstance(local, float):
            return False
        try:
            array = np.asarray(local)
            return array.dtype.kind == "f" and array.size == 1 and float(array.reshape(())) == value
        except Exception:  # noqa: BLE001 - a local that is not a number
            return False

    def local_trace(frame: Any, event: str, _: Any) -> Any:
        if frame is not top[0]:
            return None
        if last_line and event in ("line", "return"):
            for name, local in frame.f_locals.items():
                if seen.get(name) != id(local):
                    seen[name] = id(local)
                    if equal(local):
                        made.append((frame.f_code.co_filename, last_line[-1]))
        last_line[:] = [frame.f_lineno]
        return local_trace

    def global_trace(frame: Any, event: str, _: Any) -> Any:
        if event != "call" or top or not is_user_file(frame.f_code.co_filename):
            return None
        top.append(frame)  # the schedule's own __call__: the lines of the functions it calls are theirs
        return local_trace

    _traced(rate, arguments, global_trace)
    return made[-1] if made else None


def _source_of(rate: Any) -> tuple[str | None, int | None]:
    """The file and line of a schedule's ``__call__`` (a function's own body): its first ``return``, else its
    ``def``; (None, None) for code without source (Keras's own schedules are found too, and are as good a line)."""
    function = type(rate).__call__ if not inspect.isfunction(rate) else rate
    try:
        lines, first = inspect.getsourcelines(function)
        file = inspect.getsourcefile(function)
    except (OSError, TypeError):
        return None, None
    for offset, text in enumerate(lines):
        if text.strip().startswith("return"):
            return file, first + offset
    return file, first


# A window of fewer steps shows that a rate stays finite that long, not that it trains: the rate to try from it is
# a tenth of the largest finite one, not half. Half of a 6-step window's 0.0486 blew one fold's first epoch up to a
# loss of 3e19 and left four of five folds predicting the mean (s43c p8); a tenth trained every fold. Half of a
# 5-step window's 0.05 diverged later in another run (s42c nb3).
SHORT_WINDOW = 20


def rate_to_try(largest_finite: float, suggested: float, steps: int) -> float:
    """The rate to suggest from a window search: `suggested` (half the largest finite, or one tried below it), and
    for a window shorter than `SHORT_WINDOW` no more than a tenth of the largest finite."""
    return min(suggested, largest_finite / 10) if steps < SHORT_WINDOW else suggested
