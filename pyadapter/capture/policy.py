"""FailurePolicy: what a guard does at a non-finite step, the same for NanGuard and guard_step.

It counts failing steps in a row, decides stop or skip (``on_nan``, ``max_consecutive_skips``), caps the bundles
written (``max_bundles``), assembles a bundle's extras in one order (the findings located at the scene, the
window's files, the data source) and records the `Failure` and its message. What differs between the guards
(how a batch is read back, how state is saved, how training is stopped) stays with them, passed in as callables.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyadapter import numpy_warnings
from pyadapter.capture import atscene, bundle_format
from pyadapter.capture.bundle_format import ExtraFile
from pyadapter.capture.options import GuardOptions
from pyadapter.capture.verdict import Failure, NonFiniteReport

# (the files and manifest entry the window adds to a bundle), from what was located at the scene
WindowFiles = Callable[[atscene.SceneFiles], tuple[dict[str, ExtraFile], dict[str, Any]]]
# Writes the bundle with these extra files and manifest entries; returns where it went.
WriteBundle = Callable[[dict[str, ExtraFile], dict[str, Any]], "Path | str"]


@dataclass
class Attempt:
    """One try at writing a failing step's bundle; filled as it goes, so a late error keeps what came before."""

    path: Path | str | None = None
    error: str | None = None
    origin: str | None = None  # located at the scene
    cause: str | None = None
    # What a replay of the bundle will lack (variables the step reads that it does not hold).
    note: str | None = None


def first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


@dataclass
class FailurePolicy:
    """The failure state of one guard: consecutive failures, bundles written, failures seen."""

    options: GuardOptions
    consecutive: int = 0
    bundles_written: int = 0
    failures: list[Failure] = field(default_factory=list)

    @property
    def last_bundle(self) -> Path | str | None:
        for failure in reversed(self.failures):
            if failure.bundle is not None:
                return failure.bundle
        return None

    def passed(self) -> None:
        """A healthy step: the run of failures is over."""
        self.consecutive = 0

    def failed(self) -> bool:
        """A failing step: True when training must stop (``on_nan="stop"``, or too many skips in a row)."""
        self.consecutive += 1
        limit = self.options.max_consecutive_skips
        return self.options.on_nan == "stop" or (limit is not None and self.consecutive >= limit)

    def attempt(self, write: Callable[[Attempt], None], *, count_first: bool = False) -> Attempt:
        """Run ``write`` (which fills the Attempt) unless ``max_bundles`` are written. Never raises: training must
        still stop or skip cleanly, and the failure says why there is no bundle. ``count_first``: count the try
        before it runs (multi-worker: every worker must make the same number of collective attempts)."""
        attempt = Attempt()
        if self.bundles_written >= self.options.max_bundles:
            return attempt
        if count_first:
            self.bundles_written += 1
        try:
            write(attempt)
        except Exception as exc:  # noqa: BLE001 - said in the failure's message
            attempt.error = first_line(exc)
        if not count_first and attempt.path is not None:
            self.bundles_written += 1
        return attempt

    def record(
        self,
        step: int,
        epoch: int | None,
        batch_index: int,
        report: NonFiniteReport,
        attempt: Attempt,
        stop: bool,
    ) -> Failure:
        failure = Failure(
            step,
            epoch,
            batch_index,
            report,
            attempt.path,
            "stopped" if stop else "skipped",
            attempt.error,
            origin=attempt.origin,
            cause=attempt.cause,
            note=attempt.note,
        )
        self.failures.append(failure)
        return failure

    def say(self, failure: Failure, prefix: str = "") -> None:
        """The failure's message on stderr, when the guard is verbose."""
        if self.options.verbose:
            print(prefix + failure.message(), file=sys.stderr, flush=True)


def write_located(
    attempt: Attempt,
    *,
    locate: Callable[[Path | str | None], atscene.SceneFiles],
    window_files: WindowFiles,
    data_source: Callable[[], dict[str, Any]],
    write: WriteBundle,
    remote: bool = False,
) -> None:
    """A bundle with its extras, in the order both guards use: write the whole bundle (sealed), then locate the
    step at the scene (`locate` is given the bundle's path) and add its findings, and the window's learning-rate
    search that needs them, to that bundle (`bundle_format.add_to_bundle`); then say the cause. Written first: a
    run killed during a slow locate (a 200-step rollout unrolled in the step) kept no bundle at all (s42d p8).
    A URL capture folder (`remote`) cannot take files into a published bundle atomically: there the step is
    located first and the bundle written once, as before."""
    if remote:
        located = locate(None)
        attempt.origin = located.origin
        files, window_entry = window_files(located)
        attempt.path = write(
            {**located.files, **files},
            {**located.manifest, **window_entry, **data_source(), **numpy_warnings.manifest_entry()},
        )
        attempt.cause = atscene.cause_sentence(attempt.path, located)
        return
    files, window_entry = window_files(atscene.SceneFiles())
    attempt.path = write(files, {**window_entry, **data_source(), **numpy_warnings.manifest_entry()})
    located = locate(attempt.path)
    attempt.origin = located.origin
    entries = dict(located.manifest)
    if located.files:
        # The window's entry again, now with its learning-rate search for a divergence located here; its files
        # are in the bundle already (the same copies: only the entry is taken).
        searched_files, searched_entry = window_files(located)
        if set(searched_files) == set(files):
            entries.update(searched_entry)
    if located.files or entries:
        try:
            bundle_format.add_to_bundle(Path(attempt.path), located.files, entries)
        except Exception as exc:  # noqa: BLE001 - the bundle stands as written; a replay locates it
            print(
                f"NanGuard: could not add what was located here to the bundle ({first_line(exc)}); "
                f"`nanlens locate {attempt.path}` locates it by replay",
                file=sys.stderr,
                flush=True,
            )
            return
    attempt.cause = atscene.cause_sentence(attempt.path, located)
