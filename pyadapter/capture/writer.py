"""Writing a capture bundle: the manifest and files of one failing step (`write_bundle`, shared by NanGuard and
guard_step), built in a `BundleWriter` (``bundle_format``: the format, atomic writes) on local disk and, for a URL
capture folder, published there by ``storage``. Reading bundles back is ``reader.CaptureBundle``; none of those
modules imports this one, so there is no import circle between format, storage and writing.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pyadapter.capture import bundle_format as bundle
from pyadapter.capture import history as step_history
from pyadapter.capture import rng, snapshot, storage, structure
from pyadapter.capture.progress import WriteProgress
from pyadapter.capture.verdict import NonFiniteReport

# A process that wants the failing step rather than a bundle (the input-pipeline re-run of `nanlens locate`)
# registers a function here: it is called with (kind, step) instead of writing, and ends the run.
_instead: Callable[[str, int], None] | None = None


def instead_of_writing(hook: Callable[[str, int], None] | None) -> None:
    """Call ``hook(kind, step)`` instead of writing any bundle in this process (None: write again)."""
    global _instead
    _instead = hook


def write_bundle(
    *,
    capture_dir: Path | str,
    run: str,
    kind: str,
    step: int,
    epoch: int | None,
    batch_index: int | None,
    on_nan: str,
    report: NonFiniteReport,
    batch: Any,
    batch_note: str | None,
    seed_states: dict[str, np.ndarray],
    history: Any,
    extra: dict[str, Any],
    save_state: Any,
    verbose: bool = True,
) -> Path | str:
    """Writes one bundle atomically (shared by NanGuard and guard_step); returns its final path (a URL string for
    a URL capture folder). With `verbose`, a write that takes over a second shows its progress on stderr and ends
    with its size, time and the process's peak RSS (`progress.WriteProgress`)."""
    if _instead is not None:
        _instead(kind, step)
    name = f"{run}-step{step}"
    remote = storage.is_remote(capture_dir)
    # A URL capture folder (gs://, s3://, hdfs://, ram://): build the bundle on local disk, then publish it there
    # with manifest.json last (those filesystems cannot rename a directory into place atomically).
    local_parent = Path(tempfile.mkdtemp(prefix="nanlens-bundle-")) if remote else Path(capture_dir)
    try:
        local = _write_local_bundle(
            local_parent,
            name,
            kind=kind,
            run=run,
            step=step,
            epoch=epoch,
            batch_index=batch_index,
            on_nan=on_nan,
            report=report,
            batch=batch,
            batch_note=batch_note,
            seed_states=seed_states,
            history=history,
            extra=extra,
            save_state=save_state,
            progress=WriteProgress() if verbose else None,
        )
        if not remote:
            return local
        return storage.publish_bundle(local, storage.join(str(capture_dir), name))
    finally:
        if remote:
            shutil.rmtree(local_parent, ignore_errors=True)


def history_to_json(history: Any) -> list[dict[str, Any]]:
    """The guard's ring of `history.HistoryEntry` as the manifest's ``loss_history`` (see ``history.py``)."""
    return step_history.rows(history)


def _write_local_bundle(
    capture_dir: Path,
    name: str,
    *,
    kind: str,
    run: str,
    step: int,
    epoch: int | None,
    batch_index: int | None,
    on_nan: str,
    report: NonFiniteReport,
    batch: Any,
    batch_note: str | None,
    seed_states: dict[str, np.ndarray],
    history: Any,
    extra: dict[str, Any],
    save_state: Any,
    progress: WriteProgress | None,
) -> Path:
    arrays: dict[str, np.ndarray] = {}
    described = structure.describe(batch, arrays)
    history_json = history_to_json(history)
    with bundle.BundleWriter(capture_dir, name, progress) as writer:
        writer.write_arrays(bundle.BATCH_FILE, arrays)
        state_manifest = save_state(writer)
        manifest: dict[str, Any] = {
            "format": bundle.FORMAT,
            "nanlens_version": snapshot.nanlens_version(),
            "kind": kind,
            "created": snapshot.utc_now(),
            "run": run,
            "step": int(step),
            "epoch": epoch,
            "batch_index": batch_index,
            "on_nan": on_nan,
            "state": "before_update" if report.state_usable else "after_update",
            "non_finite": report.to_json(),
            "versions": snapshot.versions(),
            "host": snapshot.host_info(),
            "entry_script": snapshot.entry_script_info(),
            "batch": {"file": bundle.BATCH_FILE, "structure": described, "note": batch_note},
            "rng": rng.capture(seed_states),
            "loss_history": history_json,
        }
        manifest.update(extra)
        manifest.update(state_manifest)
        final = writer.commit(manifest, seal=True)
    if progress is not None:
        progress.finish(final)
    return final
