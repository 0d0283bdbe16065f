"""LSP work-done progress for long scans and locates, driven from the event loop.

Workers report from their threads; the server forwards each report here with ``loop.call_soon_threadsafe``.
Reports are throttled (a scanner may call back thousands of times) and silently dropped when the client does
not support server-initiated progress or refused the token.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time

from lsprotocol import types
from pygls.lsp.server import LanguageServer

log = logging.getLogger("nanlens.server.progress")

_tokens = itertools.count(1)
MIN_INTERVAL = 0.25  # seconds between two reports sent to the client


class ProgressBar:
    """One progress bar in the client: begin once, report often (throttled), end once."""

    def __init__(self, server: LanguageServer, title: str) -> None:
        self._server = server
        self._title = title
        self._token = f"nanlens-{next(_tokens)}"
        self._state = "new"  # new -> creating -> running -> ended (or dead when the client said no)
        self._ended_message: str | None = None
        self._last_report = 0.0
        self._last_percentage: int | None = None
        self._last_sent: tuple[str | None, int | None] | None = None

    @property
    def state(self) -> str:
        """ "new" until start(); then "creating", "running", "ended", or "dead" (no bar in this client)."""
        return self._state

    def start(self) -> None:
        """Ask the client for a progress bar (if it supports them); reports before it answers are dropped."""
        caps = self._server.client_capabilities
        if not (caps and caps.window and caps.window.work_done_progress):
            self._state = "dead"
            return
        self._state = "creating"
        asyncio.ensure_future(self._create())

    async def _create(self) -> None:
        try:
            await self._server.work_done_progress.create_async(self._token)
        except Exception as exc:  # the client refused or went away: no bar, the work goes on
            log.debug("progress bar refused: %s", exc)
            self._state = "dead"
            return
        self._server.work_done_progress.begin(
            self._token, types.WorkDoneProgressBegin(title=self._title, cancellable=False, percentage=0)
        )
        self._state = "running"
        if self._ended_message is not None:
            self._send_end()

    def report(self, message: str | None, percentage: int | None) -> None:
        if self._state != "running":
            return
        now = time.monotonic()
        if now - self._last_report < MIN_INTERVAL and percentage != 100:
            return
        if percentage is not None and self._last_percentage is not None:
            percentage = max(
                percentage, self._last_percentage
            )  # VS Code ignores a bar going backwards anyway
        if (message, percentage) == self._last_sent:
            return
        self._last_sent = (message, percentage)
        self._last_report, self._last_percentage = (
            now,
            percentage if percentage is not None else self._last_percentage,
        )
        self._server.work_done_progress.report(
            self._token, types.WorkDoneProgressReport(message=message, percentage=percentage)
        )

    def end(self, message: str | None = None) -> None:
        self._ended_message = message or ""
        if self._state == "running":
            self._send_end()

    def _send_end(self) -> None:
        self._state = "ended"
        self._server.work_done_progress.end(
            self._token, types.WorkDoneProgressEnd(message=self._ended_message or None)
        )
