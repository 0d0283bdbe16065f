"""``build_picture_model``: the op graph around the origin and the health timeline of a dump (plus, for a
bundle, its loss history), as one ``PictureModel``."""

from __future__ import annotations

import os
from typing import Any

from pyadapter.dump.origin import HostScan
from pyadapter.findings import Findings
from pyadapter.pictures.hosts import read_dump_tables
from pyadapter.pictures.model import PictureModel, history_rows, picture_cause
from pyadapter.pictures.neighborhood import DEFAULT_HOPS_BACK, DEFAULT_HOPS_FORWARD, neighborhood
from pyadapter.pictures.timeline import build_timeline


def build_picture_model(
    dump_dir: str | os.PathLike[str],
    *,
    findings: Findings | None = None,
    source_kind: str | None = None,
    source_path: str | None = None,
    label: str | None = None,
    loss_history: list[dict[str, Any]] | None = None,
    failing_step: int | None = None,
    hops_back: int = DEFAULT_HOPS_BACK,
    hops_forward: int = DEFAULT_HOPS_FORWARD,
) -> PictureModel:
    """Read the dump (without TensorFlow) and describe both pictures.

    ``findings`` (the scan or locate result of the same dump) supplies the origin's caption; the source fields
    default to the dump itself. Raises ``pyadapter.dump.ScanError`` when the directory holds no dump.
    """
    tables = read_dump_tables(dump_dir)
    path = source_path or (findings.source_path if findings else tables.dump_dir)
    kind = source_kind or (findings.source_kind if findings else "dump")
    model = PictureModel(
        source_kind=kind,
        source_path=path,
        label=label or os.path.basename(path.rstrip(os.sep)) or path,
        loss_history=history_rows(loss_history) if loss_history is not None else None,
        failing_step=failing_step,
        hops_back=hops_back,
        hops_forward=hops_forward,
    )
    if findings is not None and findings.origin is not None:
        model.origin = findings.origin.to_json()
    if findings is not None:  # a bundle's cause comes later, from pyadapter.cause.attach_cause (with_cause)
        model.cause = picture_cause(findings.extra.get("cause"))
    candidate = tables.origin
    host: HostScan | None = (
        candidate.host if candidate is not None else (tables.hosts[0] if tables.hosts else None)
    )
    if candidate is not None:
        near = neighborhood(candidate.host, candidate, hops_back, hops_forward)
        model.nodes, model.edges = near.nodes, near.edges
        model.graph_name, model.truncated = near.graph_name, near.truncated
        model.notes.extend(near.notes)
    else:
        model.notes.append("no NaN or Inf in this dump: there is no origin to draw")
    if host is not None:
        model.timeline = build_timeline(host, candidate)
        if len(tables.hosts) > 1:
            model.notes.append(
                f"the timeline shows host {host.host} (the origin's) of {len(tables.hosts)} hosts"
            )
    return model


def bundle_loss_history(
    bundle_path: str | os.PathLike[str],
) -> tuple[list[dict[str, Any]] | None, int | None]:
    """(loss history, failing step) from a bundle's manifest, read as plain JSON; (None, None) if unreadable."""
    from pyadapter import safejson

    try:
        manifest = safejson.load_file(os.path.join(os.fspath(bundle_path), "manifest.json"))
    except (OSError, ValueError):  # safejson.JSONError is a ValueError
        return None, None
    if not isinstance(manifest, dict):
        return None, None
    step = manifest.get("step")
    return history_rows(manifest.get("loss_history")), step if isinstance(step, int) and not isinstance(
        step, bool
    ) else None


def attach_bundle_pictures(
    findings: Findings,
    dump_dir: str | os.PathLike[str],
    bundle_path: str,
    *,
    history: list[dict[str, Any]] | None = None,
    step: int | None = None,
) -> None:
    """During a locate, while the replay's dump still exists: ``findings.extra["pictures"]`` for the bundle.

    The loss history and failing step come from the bundle's manifest unless given (at the scene the bundle is
    not written yet). Never raises: pictures are an extra, so a failure becomes a warning and the findings stay
    as they are.
    """
    try:
        if history is None or step is None:
            history, step = bundle_loss_history(bundle_path)
        name = os.path.basename(bundle_path.rstrip(os.sep))
        model = build_picture_model(
            dump_dir,
            findings=findings,
            source_kind="bundle",
            source_path=bundle_path,
            label=f"{name} (step {step})" if step is not None else name,
            loss_history=history,
            failing_step=step,
        )
        findings.extra["pictures"] = model.to_json()
    except Exception as exc:  # an extra must not fail the locate
        warnings = findings.extra.setdefault("warnings", [])
        if isinstance(warnings, list):
            warnings.append(f"the op graph and timeline could not be made: {type(exc).__name__}: {exc}")
