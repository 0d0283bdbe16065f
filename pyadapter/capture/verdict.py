"""What went non-finite in a failing step (as stored in a bundle's manifest) and the record a guard keeps of it.

Nothing here imports TensorFlow.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ON_NAN = ("stop", "skip")


def _names(names: list[str], limit: int) -> str:
    return ", ".join(names[:limit]) + (f" (+{len(names) - limit} more)" if len(names) > limit else "")


@dataclass
class NonFiniteReport:
    """The verdict of one failing step.

    ``loss``: a loss seen in the step (``model.compute_loss`` / ``optimizer.scale_loss``) was NaN/Inf.
    ``gradients``: paths of the variables whose gradient had a NaN/Inf (empty if the gradients were fine or, with
    a ``LossScaleOptimizer``, not checked because non-finite gradients are its normal business).
    ``weights``: paths of trainable variables that held a NaN/Inf right after an update with finite gradients
    (an optimizer/learning-rate problem; such an update is already applied unless ``protect_weights`` was on).
    ``update_applied``: whether the failing update reached the variables.
    ``update_taken_back``: it did, and the guard then put back the state the step started from (re-made from its
    window's copy: `pyadapter.capture.atscene.take_back_update`); the variables are the finite ones again.
    ``weights_before_step``: the trainable weights were non-finite already when this step began (an earlier update
    broke them while the weights check was off); ``weights`` then names them.
    A gradient or weight whose values are finite but so large that their float32 sum overflows (about 3e38)
    counts as non-finite too.
    ``gradients_too_large``: the failing ``gradients`` were finite, but their squares overflow float32 (|g| past
    about 1.8e19), which would have made the optimizer's squared-gradient state +Inf (`gate_checks`); the update was
    not applied.
    """

    loss: bool = False
    gradients: list[str] = field(default_factory=list)
    weights: list[str] = field(default_factory=list)
    update_applied: bool = False
    checked: list[str] = field(default_factory=list)
    weights_before_step: bool = False
    update_taken_back: bool = False
    gradients_too_large: bool = False
    # Paths of the non-trainable state the step's forward pass wrote non-finite (BatchNormalization's moving
    # variance of a batch whose variance overflowed float32), put back as the step found it; no update was applied.
    forward_state: list[str] = field(default_factory=list)
    # Paths of such state the step's own code wrote non-finite after its optimizer update (a center loss's
    # ``self.centers.assign_sub(...)`` after apply_gradients, s42e p3): put back, and that update taken back with it.
    written_after_update: list[str] = field(default_factory=list)
    # The optimizer's constant learning rate was Inf or NaN (set between steps: a callback, the program): finite
    # gradients would have made a non-finite update, which was not applied.
    learning_rate: bool = False

    @property
    def update_in_state(self) -> bool:
        """Whether the variables hold the failing update now (applied and not taken back)."""
        return self.update_applied and not self.update_taken_back

    @property
    def state_usable(self) -> bool:
        """Whether the variables saved with this step are the finite ones from before the failing update."""
        return not self.update_in_state and not self.weights_before_step

    @property
    def kinds(self) -> list[str]:
        kinds = []
        if self.loss:
            kinds.append("loss")
        if self.gradients:
            kinds.append("gradients")
        if self.weights or self.forward_state or self.written_after_update:
            kinds.append("weights")
        if self.learning_rate:
            kinds.append("learning_rate")
        return kinds or ["unknown"]

    def summary(self, limit: int = 4) -> str:
        """One line: 'non-finite loss and gradients of dense_1/kernel, dense_1/bias'."""
        parts = []
        if self.loss:
            parts.append("loss")
        weights_label = "weights before the step" if self.weights_before_step else "weights after the update"
        too_large = self.gradients_too_large and not self.loss
        for label, names in (
            ("gradients", [] if too_large else self.gradients),
            (weights_label, self.weights),
        ):
            if names:
                parts.append(f"{label} of {_names(names, limit)}")
        if self.forward_state:
            parts.append(f"values the forward pass wrote to {_names(self.forward_state, limit)}")
        if self.written_after_update:
            parts.append(
                f"values the step's own write after its update put in {_names(self.written_after_update, limit)}"
            )
        if self.learning_rate:
            parts.append("learning rate (finite gradients would have made a non-finite update)")
        text = "non-finite " + (" and ".join(parts) if parts else "values")
        if too_large:
            large = (
                f"gradients of {_names(self.gradients, limit)} too large for float32: finite, but their squares "
                "overflow to Inf (|g| > 1.8e19), as Adam's and RMSprop's second moments and clipnorm compute them"
            )
            return large if not parts else f"{large}; {text}"
        return text

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["kinds"] = self.kinds
        data["summary"] = self.summary()
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NonFiniteReport:
        if not isinstance(data, dict):
            raise ValueError("non_finite is not an object")
        return cls(
            loss=bool(data.get("loss", False)),
            gradients=[str(n) for n in data.get("gradients", [])],
            weights=[str(n) for n in data.get("weights", [])],
            update_applied=bool(data.get("update_applied", False)),
            checked=[str(n) for n in data.get("checked", [])],
            weights_before_step=bool(data.get("weights_before_step", False)),
            update_taken_back=bool(data.get("update_taken_back", False)),
            gradients_too_large=bool(data.get("gradients_too_large", False)),
            forward_state=[str(n) for n in data.get("forward_state", [])],
            written_after_update=[str(n) for n in data.get("written_after_update", [])],
            learning_rate=bool(data.get("learning_rate", False)),
        )


@dataclass
class Failure:
    """One non-finite step seen by a guard."""

    step: int
    epoch: int | None
    batch_index: int | None
    report: NonFiniteReport
    bundle: Path | str | None  # a str for a URL capture folder (gs://...)
    action: str  # "stopped" | "skipped"
    bundle_error: str | None = None  # why no bundle was written, if writing failed
    origin: str | None = None  # "file:line: Op", when the origin was located at the scene
    cause: str | None = None  # "divergence: the run diverged ...", the cause of what was located at the scene
    # What a replay of the bundle will lack, said once here, where the program can still be changed.
    note: str | None = None

    def message(self) -> str:
        where = f"step {self.step}"
        if self.epoch is not None:
            where += f" (epoch {self.epoch}, batch {self.batch_index}; counting from 0)"
        if self.report.update_taken_back:
            update = (
                "made weights non-finite and was taken back (the state before it re-made from the window)"
            )
        elif self.report.update_applied:
            update = "was applied (it made weights non-finite)"
        else:
            update = "was not applied"
        action = "training stopped" if self.action == "stopped" else "step skipped, training goes on"
        lines = [f"NanGuard: {where}: {self.report.summary()}. The update {update}; {action}."]
        if self.bundle is not None:
            lines.append(f"NanGuard: capture bundle: {self.bundle}")
            if isinstance(self.bundle, str):  # a URL: locate needs a local copy
                lines.append(f"NanGuard: bring it home, then locate: nanlens pull {self.bundle}")
            elif self.origin is not None:
                lines.append(
                    f"NanGuard: origin (located here): {self.origin}; the editor marks it, "
                    f"`nanlens locate {self.bundle}` prints it"
                )
                if self.cause is not None:
                    lines.append(f"NanGuard: cause: {self.cause}")
            else:
                lines.append(
                    f"NanGuard: find where it was made (an op, or the data before any op): nanlens locate {self.bundle}"
                )
                # No op made it (gradients too large to square), and the cause is known still.
                if self.cause is not None:
                    lines.append(f"NanGuard: cause: {self.cause}")
            if self.note is not None:
                lines.append(f"NanGuard: note: {self.note}")
        elif self.bundle_error:
            lines.append(f"NanGuard: could not write the capture bundle: {self.bundle_error}")
        return "\n".join(lines)
