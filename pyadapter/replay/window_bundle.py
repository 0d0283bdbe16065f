"""A bundle's window, replayed (``nanlens replay BUNDLE --window``, "Verify fix" for a divergence): the captured
step brought back by `pyadapter.replay.session.with_captured_step`, the window read from the bundle, and the
learning rate the user's code sets now. The replay itself is `pyadapter.replay.window.WindowRun`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyadapter.capture import learning_rate as learning_rate_module
from pyadapter.capture.window import WindowSearch
from pyadapter.findings_text import place_text
from pyadapter.replay.errors import ReplayError
from pyadapter.replay.window import GROWTH_LIMIT, SEARCH_SECONDS, WindowVerdict, run_of_program


def learning_rate_in_source(bundle_path: str | Path) -> tuple[float, str] | None:
    """(the learning rate the user's code sets now, "file:line") on the line the bundle's cause says to change
    (after a quick fix, the new rate); None when the bundle has no divergence cause or the line holds no number.
    Reads the findings and the source file; runs nothing."""
    from pyadapter.capture.bundle_format import FINDINGS_FILE
    from pyadapter.cause import attach_cause
    from pyadapter.findings import FindingsError, load_findings
    from pyadapter.fixes.cause import learning_rate_on_line

    findings_path = Path(bundle_path) / FINDINGS_FILE
    if not findings_path.is_file():
        return None
    try:
        cause = attach_cause(load_findings(findings_path), bundle_path)
    except FindingsError:
        return None
    change = cause.change
    if cause.kind != "divergence" or change is None:
        return None
    places = [(change.file, change.line, change.cell)]
    optimizer_line = cause.evidence.get("optimizer_line")
    if isinstance(optimizer_line, dict) and isinstance(optimizer_line.get("line"), int):
        # The change names the inputs' scale (or building the model again): the rate is on the optimizer's line.
        cell = optimizer_line.get("cell")
        places.append(
            (str(optimizer_line.get("file")), optimizer_line["line"], cell if isinstance(cell, int) else None)
        )
    for file, line, cell in places:
        text = _source_text(file, cell)
        rate = learning_rate_on_line(text, line) if text is not None else None
        if rate is not None:
            where = place_text(file, line, cell)
            return rate, where
    if (
        isinstance(optimizer_line, dict)
        and isinstance(optimizer_line.get("file"), str)
        and optimizer_line.get("call") == "keras.optimizers.get"
    ):
        # The optimizer reads its rate from a config file (keras.optimizers.get(config["optimizer"])): the cause,
        # classified again, no longer finds the edited file's line by the captured rate; the one line of a config
        # beside the program that sets a rate is the rate now.
        from pyadapter.cause.change_line import config_rate_lines

        lines = config_rate_lines([str(Path(optimizer_line["file"]).resolve().parent)], None)
        if len(lines) == 1:
            path, number = lines[0]
            text = _source_text(path, None)
            rate = learning_rate_on_line(text, number) if text is not None else None
            if rate is not None:
                return rate, f"{path}:{number}"
    return None


def _source_text(file: str, cell: int | None) -> str | None:
    """The text of a .py file, or of a notebook's cell `cell` (lines count inside the cell)."""
    if cell is not None:
        from pyadapter.capture.notebook import NotebookError, read_notebook_cells

        try:
            cells = read_notebook_cells(file)
        except NotebookError:
            return None
        return cells[cell].source if 0 <= cell < len(cells) else None
    try:
        return Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


@dataclass
class BundleWindowReport:
    """What ``nanlens replay BUNDLE --window`` says."""

    bundle: str
    start_step: int
    end_step: int
    steps: int
    learning_rate: float | None  # the rate replayed
    rate_from: str  # "option", "source file:line" or "captured"
    verdict: WindowVerdict
    captured: WindowVerdict | None = None  # the same window at the captured rate (when another was replayed)
    search: WindowSearch | None = None
    route: str = ""
    warnings: list[str] = field(default_factory=list)

    @property
    def finite(self) -> bool:
        return self.verdict.finite

    def to_json(self) -> dict[str, Any]:
        return {
            "bundle": self.bundle,
            "window": {"start_step": self.start_step, "end_step": self.end_step, "steps": self.steps},
            "learning_rate": self.learning_rate,
            "learning_rate_from": self.rate_from,
            "finite": self.finite,
            "verdict": self.verdict.to_json(),
            "captured": self.captured.to_json() if self.captured else None,
            "search": self.search.to_json() if self.search else None,
            "message": self.message(),
            "route": self.route,
            "warnings": list(self.warnings),
        }

    def message(self) -> str:
        """One line for the editor and the CLI."""
        text = self.verdict.sentence()
        captured = self.captured
        if captured is not None and not captured.finite and captured.first_non_finite_step is None:
            # Finite, but its loss grew past the limit: no step went non-finite to name.
            text += f" (at the captured rate its loss passed {GROWTH_LIMIT:g}x the first step's at step {captured.grew_at})"
        elif captured is not None and not captured.finite:
            text += f" (at the captured rate it went non-finite at step {captured.first_non_finite_step})"
        elif self.captured is not None:
            # "too" only beside a finite run: at 0.3 it diverged, at the window's own 0.03 it did not.
            text += " (it stayed finite at the captured rate" + (" too)" if self.verdict.finite else ")")
        if self.search is not None:
            text += f"; {self.search.sentence()}"
        return text


def _schedule_label(scheduled: tuple[str, float], step: int, failing_rate: float | None) -> str:
    """How a window run on the program's learning-rate schedule is labelled: the schedule the code builds now, its
    rate at the failing step, and whether that is the rate training had there."""
    from pyadapter.findings_text import format_number

    name, now = scheduled
    if failing_rate is None:
        return f"the {name} your code builds now, at step {step}"
    if math.isclose(now, failing_rate, rel_tol=1e-3):
        return f"the {name} your code builds, as in training: {format_number(failing_rate)} at step {step}"
    return f"the {name} your code builds now, at step {step}; training's gave {format_number(failing_rate)} there"


def replay_bundle_window(
    path: str | Path,
    *,
    learning_rate: float | None = None,
    search: bool = False,
    search_seconds: float = SEARCH_SECONDS,
    reentry_timeout: float | None = None,
) -> BundleWindowReport:
    """Replay the bundle's window from its state copy in graph mode at `learning_rate` (default: the rate the
    user's code sets now on the cause's change line, else the captured one), and at the captured rate when that
    differs; with `search`, also the largest rate that keeps the window finite. Raises ReplayError (one line)."""
    from pyadapter.capture.window import WindowError, read_window
    from pyadapter.replay.debugger import breakpoints_paused
    from pyadapter.replay.rebuild import open_bundle
    from pyadapter.replay.session import with_captured_step

    bundle = open_bundle(path)
    try:
        window = read_window(bundle)
    except WindowError as exc:
        raise ReplayError(f"{bundle.path}: {exc}") from None
    if window is None:
        raise ReplayError(
            f"{bundle.path}: the bundle holds no window (the guard ran with window=0, is older, or failed before "
            "its first state copy); `nanlens replay` replays the captured step alone"
        )
    rate_from = "option"
    if learning_rate is None:
        found = learning_rate_in_source(bundle.path)
        if found is not None:
            learning_rate, rate_from = found[0], f"source {found[1]}"
        else:
            rate_from = "captured"

    def action(rebuilt: Any) -> BundleWindowReport:
        with breakpoints_paused():
            run, warnings = run_of_program(rebuilt.program, window, bundle.kind)
            captured_rate = run.captured_learning_rate
            failing = learning_rate_module.read(bundle.manifest.get(learning_rate_module.MANIFEST_KEY))
            failing_rate = failing.value if failing is not None and failing.finite else None
            changed = run.rate_changed(failing_rate)
            if changed is not None:
                warnings = [*warnings, f"{changed}: a window that stays finite here says nothing of the run"]
            same = learning_rate is None or (
                captured_rate is not None and math.isclose(learning_rate, captured_rate, rel_tol=1e-6)
            )
            verdict = run.replay(None if same else learning_rate)
            captured = None if same else run.replay(None)
            searched = run.search(seconds=search_seconds, failing_rate=failing_rate) if search else None
            shown_rate, shown_from = verdict.learning_rate, rate_from
            if not same or rate_from != "captured":
                shown_from = rate_from if not same else f"{rate_from} (= the captured rate)"
            elif captured_rate is None:
                scheduled = run.schedule_rate(bundle.step)
                if scheduled is not None:
                    # The window ran on the schedule the re-entered code builds now, which may not be training's.
                    shown_rate, shown_from = (
                        scheduled[1],
                        _schedule_label(scheduled, bundle.step, failing_rate),
                    )
        return BundleWindowReport(
            bundle=str(bundle.path),
            start_step=window.start_step,
            end_step=window.end_step,
            steps=window.steps,
            learning_rate=shown_rate,
            rate_from=shown_from,
            verdict=verdict,
            captured=captured,
            search=searched,
            warnings=[*rebuilt.warnings, *warnings],
        )

    report, route = with_captured_step(path, action, reentry_timeout=reentry_timeout)
    report.route = route
    return report
