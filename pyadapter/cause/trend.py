"""Reading the guard's loss history: does a series (loss, gradient norm) grow geometrically before the failure?

The history is the manifest's ``loss_history``: ``{"step", "loss", "logged_loss"}`` in every bundle, and in newer
ones also ``grad_norm``, ``weight_norm``, ``update_ratio``, ``max_abs_output`` (floats or null; a non-finite
value is null with ``"<key>_nonfinite": "nan" | "inf" | "-inf"``). Only finite values count.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

# A trend is growth when the series ends at least this many times above its lowest value since the trend began,
# over at least MIN_STEPS steps, at a rate of at least MIN_RATE per step.
MIN_FACTOR = 100.0
MIN_STEPS = 2
MIN_RATE = 1.2
SERIES = ("grad_norm", "loss", "logged_loss", "update_ratio", "max_abs_output")
SUSTAINED_RATIO = 3.0
# A trend starts at the last value within this factor of the series' lowest (`series_trend`).
NEAR_LOW = 2.0


@dataclass
class Trend:
    """Growth of one series over the steps before the failure."""

    series: str  # which key of the history: "loss", "grad_norm", ...
    start_step: int  # the step the trend began (the series' lowest value before its end)
    end_step: int  # the last step with a finite value
    start_value: float
    end_value: float
    points: int  # finite entries in the trend
    # The values between start and end rose as a whole: the later half of the trend's values sits well above the
    # earlier half (`_sustained`), not one dip followed by a spike. True where only the end points are known.
    sustained: bool = True

    @property
    def steps(self) -> int:
        return self.end_step - self.start_step

    @property
    def factor(self) -> float:
        return self.end_value / self.start_value if self.start_value > 0 else math.inf

    @property
    def rate(self) -> float:
        """Geometric growth per step: factor ** (1 / steps)."""
        if self.steps <= 0:
            return 1.0
        if self.start_value <= 0:
            return math.inf
        return math.exp((math.log(self.end_value) - math.log(self.start_value)) / self.steps)

    @property
    def is_growth(self) -> bool:
        return (
            self.steps >= MIN_STEPS and self.factor >= MIN_FACTOR and self.rate >= MIN_RATE and self.sustained
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "series": self.series,
            "start_step": self.start_step,
            "end_step": self.end_step,
            "steps": self.steps,
            "start_value": _round(self.start_value),
            "end_value": _round(self.end_value),
            "factor": _round(self.factor),
            "rate_per_step": _round(self.rate),
        }


def _round(value: float) -> float | None:
    return float(f"{value:.4g}") if math.isfinite(value) else None


def finite_points(history: list[dict[str, Any]], key: str, signed: bool = False) -> list[tuple[int, float]]:
    """(step, value) of the rows whose `key` is a finite number, by step; magnitudes unless `signed`."""
    points = []
    for entry in history:
        if not isinstance(entry, dict):
            continue
        step, value = entry.get("step"), entry.get(key)
        if isinstance(step, bool) or not isinstance(step, int):
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        points.append((step, float(value) if signed else abs(float(value))))
    return sorted(points)


def series_trend(history: list[dict[str, Any]], key: str) -> Trend | None:
    """The growth of ``key`` from its lowest value to its last finite value, or None with fewer than 2 values, or
    when the last value is below 0 and below the first: a loss that fell through 0 (a flow's or a mixture's negative
    log-likelihood improving) grew in magnitude only, and was told "the loss rose x29.8" (`fall` speaks of a loss
    falling without bound)."""
    points = finite_points(history, key)
    if len(points) < 2:
        return None
    signed = finite_points(history, key, signed=True)
    if signed[-1][1] < 0 and signed[-1][1] < signed[0][1]:
        return None
    end_step, end_value = points[-1]
    # From the lowest value above 0: a gradient norm of exactly 0 (a saturated sigmoid's step) is no start of a
    # geometric growth, and "grew xinf per step (0 at step 25 ...)" said nothing.
    positive = [i for i in range(len(points)) if points[i][1] > 0]
    if not positive:
        return None
    low = min(positive, key=lambda i: (points[i][1], -points[i][0]))
    # The climb starts where the series last came back down near that low: a loss that wandered between 2 and 5
    # and took off at a rate changed in a notebook cell grew from its last dip (3.95), not from a 2.3 six steps
    # before. A climb that never dipped keeps its low.
    dips = [
        i
        for i in range(low + 1, len(points) - 1)
        if 0 < points[i][1] < points[i - 1][1] and points[i][1] <= NEAR_LOW * points[low][1]
    ]
    low = dips[-1] if dips else low
    start_step, start_value = points[low]
    values = [value for _, value in points[low:]]
    return Trend(key, start_step, end_step, start_value, end_value, len(values), _sustained(values))


def _sustained(values: list[float]) -> bool:
    """Whether a series rose over its span as a whole: the median of its later half `SUSTAINED_RATIO` times the
    median of its earlier half or more. A divergence's halves are far apart (a geometric one's by its factor **
    0.5; an accelerating one's less, but still by orders of magnitude); a flat, noisy series (a clipped gradient
    norm at its cap, a loss around a level) with one low dip before it and one spike at its end has halves alike,
    whatever the dip-to-spike factor."""
    if len(values) < 4:
        return True  # the end points are the trend
    half = len(values) // 2
    # Medians taken toward each other (the earlier half's upper, the later half's lower): a spike at the end of a
    # short span does not lift its half.
    first, second = statistics.median_high(values[:half]), statistics.median_low(values[half:])
    if first <= 0:
        return second > 0
    return second / first >= SUSTAINED_RATIO


def growth(history: list[dict[str, Any]]) -> Trend | None:
    """The strongest geometric growth among the history's series (gradient norm first when it grows), or None
    when none grows (or the history is too short to tell)."""
    trends = [t for t in (series_trend(history, key) for key in SERIES) if t is not None and t.is_growth]
    if len(finite_points(history, "loss")) >= 4:
        # Keras's running mean of the epoch (logged_loss) keeps a one-step spike in every later mean: beside a
        # per-step loss that did not grow, its "growth" is the spike's, not a divergence's.
        trends = [t for t in trends if t.series != "logged_loss"]
    if not trends:
        return None
    # The actual per-step loss or gradient norm beats Keras's running mean (logged_loss), which lags.
    preferred = [t for t in trends if t.series != "logged_loss"] or trends
    return max(preferred, key=lambda t: (t.series in ("grad_norm", "loss"), t.rate))


# A rise too slow or too small for a divergence's growth (`Trend.is_growth`) that an overflow's words still say: the
# series ended at least RISE_FACTOR times its lowest value, rising as a whole (`_sustained`).
RISE_FACTOR = 10.0


def rise(history: list[dict[str, Any]]) -> Trend | None:
    """The largest sustained rise of the loss or gradient norm (at least RISE_FACTOR) that is not a growth, or None.
    "With no growth over the steps before" was said of an overflow after the gradient norm rose x40 over 170
    steps; such a rise is not a divergence by these rules, but it is not nothing either."""
    trends = [
        t
        for t in (series_trend(history, key) for key in ("grad_norm", "loss"))
        if t is not None and not t.is_growth and _is_rise(t)
    ]
    return max(trends, key=lambda t: t.factor, default=None)


def _is_rise(trend: Trend) -> bool:
    """Rising as a whole (`_sustained`) to RISE_FACTOR times its lowest or more, over MIN_STEPS steps or more."""
    return trend.steps >= MIN_STEPS and trend.sustained and trend.factor >= RISE_FACTOR


def weights_rose(history: list[dict[str, Any]]) -> Trend | None:
    """The weights' norm rising as a whole to RISE_FACTOR times its lowest or more (`_sustained`), or None: the
    updates drove the weights up, too slowly for a divergence's growth, until some op left its dtype's range (a
    fine-tuning rate 10x too high under mixed_float16: 17.5 to 767 in 56 steps, then a float16 MatMul overflowed)."""
    rose = series_trend(history, "weight_norm")
    return rose if rose is not None and _is_rise(rose) else None


def non_finite_at(history: list[dict[str, Any]]) -> int | None:
    """The first step whose loss (or gradient norm) was recorded non-finite, if any."""
    for entry in history:
        if not isinstance(entry, dict):
            continue
        for key in ("loss", "grad_norm"):
            if entry.get(f"{key}_nonfinite") in ("nan", "inf", "-inf"):
                step = entry.get("step")
                return step if isinstance(step, int) and not isinstance(step, bool) else None
    return None


# A fast divergence blows up in 1-3 steps, too few for a trend (MIN_STEPS with MIN_FACTOR): a series that rose at
# least FAST_FACTOR times over its last FAST_STEPS finite steps, ending at the last finite step before the failure,
# or an update larger than the weights it changed (UPDATE_RATIO_LIMIT; healthy training moves weights by ~1e-3 of
# their norm per step), is the evidence instead.
FAST_FACTOR = 1e3
FAST_STEPS = 3
UPDATE_RATIO_LIMIT = 1.0
FAST_SERIES = ("grad_norm", "loss", "max_abs_output", "weight_norm")


def _failure_step(history: list[dict[str, Any]]) -> int | None:
    """The step the run failed at: the first with a non-finite loss or gradient norm, else the history's last."""
    failed = non_finite_at(history)
    if failed is not None:
        return failed
    steps = [e["step"] for e in history if isinstance(e, dict) and _is_step(e.get("step"))]
    return max(steps) if steps else None


def _is_step(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def fast_growth(history: list[dict[str, Any]]) -> Trend | None:
    """The largest jump (at least FAST_FACTOR) of a series over its last FAST_STEPS finite steps, when the series
    is finite up to the step before the failure; None when no series jumped (a slow rise, or none)."""
    failed = _failure_step(history)
    if failed is None:
        return None
    jumps = []
    for key in FAST_SERIES:
        points = [p for p in finite_points(history, key) if p[0] <= failed]
        if len(points) < 2 or points[-1][0] < failed - 1:
            continue  # a series that stopped earlier says nothing about the steps that blew up
        recent = [p for p in points if p[0] >= points[-1][0] - FAST_STEPS]
        low = min(range(len(recent)), key=lambda i: (recent[i][1], -recent[i][0]))
        (start_step, start_value), (end_step, end_value) = recent[low], recent[-1]
        if end_step > start_step and start_value > 0 and end_value / start_value >= FAST_FACTOR:
            jumps.append(Trend(key, start_step, end_step, start_value, end_value, len(recent) - low))
    return max(jumps, key=lambda t: (t.series in ("grad_norm", "loss"), t.factor), default=None)


def loss_jump(history: list[dict[str, Any]]) -> tuple[int, float, int, float] | None:
    """(step, largest loss before, step, loss) when the last finite loss is `FAST_FACTOR` times or more the largest
    finite loss before it; None otherwise."""
    points = [(s, v) for s, v in finite_points(history, "loss") if v > 0]
    if len(points) < 2:
        return None
    end_step, end = points[-1]
    start_step, start = max(points[:-1], key=lambda p: p[1])
    return (start_step, start, end_step, end) if end >= FAST_FACTOR * start else None


def large_update(history: list[dict[str, Any]]) -> tuple[int, float] | None:
    """(step, ratio) of the largest update/weight norm ratio at or above UPDATE_RATIO_LIMIT among the last
    FAST_STEPS steps before the failure: an update larger than the weights, the mark of a learning rate far too high."""
    failed = _failure_step(history)
    if failed is None:
        return None
    recent = [(s, v) for s, v in finite_points(history, "update_ratio") if failed - FAST_STEPS <= s <= failed]
    largest = max(recent, key=lambda p: p[1], default=None)
    return largest if largest is not None and largest[1] >= UPDATE_RATIO_LIMIT else None


# Weights that moved this little over the steps before a failure did not diverge: the updates were small and their
# norm stayed put, so a loss that jumped came from what the step read (an outlier record), not from the rate.
STEADY_WEIGHT_RATIO = 1.5
STEADY_UPDATE_RATIO = 0.01


def weights_steady(history: list[dict[str, Any]]) -> bool:
    """Whether the weights stood still over the last FAST_STEPS steps before the failure: their norm within
    STEADY_WEIGHT_RATIO of itself and every recorded update below STEADY_UPDATE_RATIO of it. False when the history
    does not record them (older bundles, too few steps)."""
    failed = _failure_step(history)
    if failed is None:
        return False
    recent = [(s, v) for s, v in finite_points(history, "weight_norm") if failed - FAST_STEPS <= s < failed]
    if len(recent) < 2 or min(v for _, v in recent) <= 0:
        return False
    if max(v for _, v in recent) / min(v for _, v in recent) > STEADY_WEIGHT_RATIO:
        return False
    updates = [v for s, v in finite_points(history, "update_ratio") if failed - FAST_STEPS <= s <= failed]
    return bool(updates) and max(updates) < STEADY_UPDATE_RATIO


# A loss that fell below 0 and on without bound: its magnitude at the end at least this times its start's.
FALL_FACTOR = 1e3


@dataclass
class Fall:
    """A loss that kept falling below 0 (a term the optimizer can drive to -inf): its first and last values."""

    start_step: int
    end_step: int
    start_value: float  # signed, as the history holds it
    end_value: float  # below 0

    def to_json(self) -> dict[str, Any]:
        return {
            "series": "loss",
            "start_step": self.start_step,
            "end_step": self.end_step,
            "start_value": _round(self.start_value),
            "end_value": _round(self.end_value),
        }


def fall(history: list[dict[str, Any]]) -> Fall | None:
    """The loss fell without bound before the failure: its last finite value is below 0, FALL_FACTOR times
    larger in magnitude than its first, and the fall held through the run's second half (`_sustained` of the
    magnitudes); None otherwise. Such a loss "improves" at every step: no divergence of the rate, a term of it
    that has no lower bound (a sign slip in a KL term, a log-likelihood of an unbounded density)."""
    signed = []
    for entry in history:
        if not isinstance(entry, dict):
            continue
        step, value = entry.get("step"), entry.get("loss")
        if isinstance(step, bool) or not isinstance(step, int):
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        signed.append((step, float(value)))
    signed.sort()
    if len(signed) < MIN_STEPS or signed[-1][1] >= 0:
        return None
    (start_step, start), (end_step, end) = signed[0], signed[-1]
    if abs(end) < FALL_FACTOR * max(abs(start), 1.0):
        return None
    negatives = [-v for _, v in signed if v < 0]
    if len(negatives) < MIN_STEPS or not _sustained(negatives):
        return None
    return Fall(start_step, end_step, start, end)
