"""GuardOptions: the options NanGuard and guard_step share, validated once.

Both guards take the same keyword arguments (see `NanGuard` for what each means); each builds one `GuardOptions`
from them, so a bad value is refused with the same words whichever guard it was given to.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from pyadapter.capture import gate, storage
from pyadapter.capture import history as step_history
from pyadapter.capture import window as step_window
from pyadapter.capture.verdict import ON_NAN


@dataclass(frozen=True)
class GuardOptions:
    """What a guard does on a failing step and what it keeps to explain it."""

    capture_dir: Path | str = ".nanlens/captures"  # made absolute (or kept as a URL) by __post_init__
    on_nan: str = "stop"
    run_name: str | None = None
    check_weights: bool = True
    protect_weights: bool = False
    max_bundles: int = 5
    max_consecutive_skips: int | None = 100
    history_size: int = step_history.DEFAULT_SIZE
    locate: bool = True
    window: int = step_window.DEFAULT_SIZE
    verbose: bool = True

    def __post_init__(self) -> None:
        # The window first: NanGuard has refused a bad window before a bad on_nan since the window came.
        if not isinstance(self.window, int) or isinstance(self.window, bool) or self.window < 0:
            raise ValueError(f"window must be 0 (off) or a number of steps, got {self.window!r}")
        if self.on_nan not in ON_NAN:
            raise ValueError(f"on_nan must be one of {ON_NAN}, got {self.on_nan!r}")
        # Frozen: the one place the folder is resolved, so both guards write where the user meant at creation
        # (a later chdir does not move the bundles).
        object.__setattr__(self, "capture_dir", storage.capture_location(self.capture_dir))

    @classmethod
    def of(cls, arguments: Mapping[str, Any]) -> GuardOptions:
        """From a guard's keyword arguments (the ``locals()`` of its signature): one list of options, kept here,
        whatever else the guard takes. Every field must be there: a guard that lacks one fails at once."""
        return cls(**{option.name: arguments[option.name] for option in fields(cls)})

    @property
    def gate_config(self) -> gate.GateConfig:
        """What the in-graph gate checks (part of the traced step)."""
        return gate.GateConfig(
            check_weights=self.check_weights,
            protect_weights=self.protect_weights,
            history=self.history_size > 0,
        )
