"""``nanlens.server.pictureModel``: the op graph and health timeline of one source, for the editor's webviews.

A bundle's pictures are made during its locate (from the replay's dump, which is removed afterwards) and come
with its findings (``findings.extra["pictures"]``); findings cached before pictures existed are located again.
A dump's pictures are made on demand from the dump, in the compute pool, and kept on its current findings
(a rescan replaces those, and with them the pictures).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING, Any

from pyadapter.server.state import SourceRecord, same_file

if TYPE_CHECKING:
    from pyadapter.server.core import NanLensServer

log = logging.getLogger("nanlens.server.pictures")

PICTURES_KEY = "pictures"


def find_record(records: dict[str, SourceRecord], wanted: object) -> SourceRecord | None:
    """A source by id ("bundle:/abs/path") or path; without one, the only source, else the first with an origin."""
    if isinstance(wanted, dict):
        wanted = wanted.get("sourceId") or wanted.get("id") or wanted.get("path")
    if isinstance(wanted, str) and wanted:
        if wanted in records:
            return records[wanted]
        for record in records.values():
            if same_file(record.path, wanted):
                return record
        return None
    if len(records) == 1:
        return next(iter(records.values()))
    with_origin = [r for r in records.values() if r.findings is not None and r.findings.origin is not None]
    return sorted(with_origin, key=lambda r: r.path)[0] if with_origin else None


def _pictures_of(record: SourceRecord | None) -> dict[str, Any] | None:
    findings = record.findings if record is not None else None
    pictures = findings.extra.get(PICTURES_KEY) if findings is not None else None
    if not isinstance(pictures, dict):
        return None
    if "cause" not in pictures and findings is not None and findings.extra.get("cause") is not None:
        # Pictures cached by a locate from before the timeline marked the cause: mark it now (reads nothing).
        from pyadapter.pictures.model import with_cause

        with_cause(pictures, findings.extra["cause"])
    return pictures


def _error(text: str) -> dict[str, Any]:
    return {"error": text}


def _not_located(record: SourceRecord) -> str:
    """Why a bundle has no pictures yet: it waits for the user's Locate (which runs its program)."""
    if record.untrusted is not None:
        return f"{record.untrusted.message}; use Locate to run it"
    runs = f" (it runs {os.path.basename(record.entry)})" if record.entry else ""
    return f"{record.label} is not located yet: use Locate{runs} first"


async def _settled(ls: NanLensServer, source_id: str) -> SourceRecord | None:
    """The record once no computation of it is running."""
    while (job := ls.jobs.get(source_id)) is not None and job.done is not None:
        await asyncio.shield(job.done)
    return ls.records.get(source_id)


async def picture_model(ls: NanLensServer, wanted: object) -> dict[str, Any]:
    record = find_record(ls.records, wanted)
    if record is None:
        what = f" {wanted!r}" if wanted else ""
        return _error(
            f"no capture bundle or dump{what} is known; locate a bundle or open a workspace with one"
        )
    source_id = record.id
    record = await _settled(ls, source_id)
    if record is None:
        return _error("the source was cleared")
    if record.status == "error":
        return _error(record.error or "this source could not be read")
    if record.status == "unlocated":
        return _error(_not_located(record))
    pictures = _pictures_of(record)
    if pictures is not None:
        return pictures
    if record.findings is None:
        return _error("this source has no findings yet")
    if record.kind == "bundle":
        log.info("%s: findings without pictures (made by an older locate); locating again", record.path)
        await ls.locate(record.path, force=True)
        again = ls.records.get(source_id)
        if again is not None and again.status == "unlocated":
            return _error(_not_located(again))
        pictures = _pictures_of(again)
        return (
            pictures
            if pictures is not None
            else _error("locating the bundle again made no pictures; see the log")
        )
    findings = record.findings
    path = record.path
    label = record.label

    def build() -> dict[str, Any]:
        from pyadapter.pictures import build_picture_model

        return build_picture_model(path, findings=findings, label=label).to_json()

    try:
        assert ls.loop is not None
        pictures = await ls.loop.run_in_executor(ls.executor, build)
    except Exception as exc:  # one line for the editor; the details in the log
        log.exception("making the pictures of %s failed", path)
        lines = str(exc).strip().splitlines()
        return _error(f"cannot draw {os.path.basename(path)}: {lines[0] if lines else type(exc).__name__}")
    if ls.records.get(source_id) is record and record.findings is findings:
        findings.extra[PICTURES_KEY] = pictures
    return pictures
