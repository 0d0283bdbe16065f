"""What the server knows about one source (a bundle or a dump): status, findings, staleness."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal

from pyadapter.cause import Cause, cause_of
from pyadapter.findings import Finding, Findings
from pyadapter.server.consent import Untrusted, entry_of
from pyadapter.server.sources import SourceRef

# "unlocated": a bundle without findings that waits for the user's Locate (locating runs its program).
Status = Literal["ok", "scanning", "error", "unlocated"]


@dataclass
class SourceRecord:
    ref: SourceRef
    status: Status = "scanning"
    error: str | None = None
    findings: Findings | None = None
    manifest: dict[str, Any] | None = None  # a bundle's manifest.json
    snapshot: dict[str, str] = field(default_factory=dict)  # user file -> text hash when findings were made
    stale_files: set[str] = field(default_factory=set)
    pinned: bool = False  # added by an explicit locateBundle outside the watched folders
    foreign: str | None = (
        None  # a bundle from elsewhere ("pulled", "captured on node-7"): never located unasked
    )
    untrusted: Untrusted | None = (
        None  # the last locate refused to run the bundle's program without the user's say
    )

    @property
    def entry(self) -> str | None:
        """The program a bundle names (what a locate or replay of it runs), as its manifest records it."""
        return entry_of(self.manifest) if self.kind == "bundle" else None

    @property
    def id(self) -> str:
        return self.ref.id

    @property
    def kind(self) -> str:
        return self.ref.kind

    @property
    def path(self) -> str:
        return self.ref.path

    @property
    def step(self) -> int | None:
        for holder in (self.findings.bundle if self.findings else None, self.manifest):
            if isinstance(holder, dict) and isinstance(holder.get("step"), int):
                return holder["step"]
        origin = self.findings.origin if self.findings else None
        return origin.op.step if origin is not None and origin.op.step is not None else None

    @property
    def label(self) -> str:
        step = self.step
        return f"{self.ref.name} (step {step})" if step is not None else self.ref.name

    @property
    def entry_script(self) -> str | None:
        """The script that ran, when known: said by the findings or manifest, else the outermost module frame."""
        for holder in (
            self.findings.extra if self.findings else None,
            self.findings.bundle if self.findings else None,
            self.manifest,
        ):
            if isinstance(holder, dict):
                for key in ("entry_script", "script"):
                    value = holder.get(key)
                    if isinstance(value, dict):  # a bundle manifest records {"path", "sha256", "argv", "cwd"}
                        value = value.get("path")
                    if isinstance(value, str) and value.endswith(".py"):
                        return value
        origin = self.findings.origin if self.findings else None
        if origin is not None:
            for frame in origin.stack:  # outermost first
                if frame.function == "<module>" and frame.file.endswith(".py"):
                    return frame.file
        return None

    def all_findings(self) -> list[Finding]:
        """Every marked line, the origin included once (scanners may or may not list it in `findings`)."""
        if self.findings is None:
            return []
        out: list[Finding] = []
        seen: set[tuple] = set()
        candidates = ([self.findings.origin] if self.findings.origin else []) + list(self.findings.findings)
        for finding in candidates:
            key = (finding.file, finding.cell, finding.line, finding.role, finding.op.name)
            if key not in seen:
                seen.add(key)
                out.append(finding)
        return out

    @property
    def cause(self) -> Cause | None:
        """The findings' cause (why, with the line to change), when they carry one."""
        return cause_of(self.findings) if self.findings is not None else None

    def is_stale(self, finding: Finding) -> bool:
        return finding.file in self.stale_files

    def files(self) -> set[str]:
        files = {f.file for f in self.all_findings()}
        cause = self.cause
        if cause is not None and cause.change is not None:
            files.add(cause.change.file)
        return files


def same_file(a: str, b: str) -> bool:
    return os.path.normcase(os.path.normpath(a)) == os.path.normcase(os.path.normpath(b))
