"""The hook a replay by re-entry uses to take over the user's own program at its first training step.

A replay child that re-enters the user's program (``pyadapter.replay.reentry``) installs a `Takeover` here; the
guards then hand it their live objects instead of training: ``guard_step`` on its first call, and Keras ``fit``
(patched by the replay itself) at ``on_train_begin``, once the model and its optimizers are built. The takeover
loads the captured state into those objects, runs the captured step and ends the program. Outside such a replay
nothing is installed and the guards behave as always. The capture room defines the hook; the replay room fills
it, so neither imports the other for it.
"""

from __future__ import annotations

from typing import Any, Protocol


class Takeover(Protocol):
    def keras_fit(self, model: Any, call: str = "fit") -> None:
        """Called instead of training by the first ``fit`` (or ``train_on_batch``, `call`); does not return (raises
        to end the program)."""

    def guarded_step(self, guarded: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Called before each guarded step (a `GuardedStep`) runs: takes over the captured one and does not return;
        returns for another guarded function of the program (a GAN's other step), which then runs as it would."""


_active: Takeover | None = None


def install(takeover: Takeover | None) -> None:
    global _active
    _active = takeover


def active() -> Takeover | None:
    return _active
