"""A small Debug Adapter Protocol client: talks to `python -m debugpy.adapter` over stdio exactly as an editor does.

Messages are Content-Length framed JSON. A reader thread sorts what arrives into responses (by request seq) and
events (in arrival order), so a test can send a request and then wait for the response or for an event with a
timeout. Reverse requests from the adapter (e.g. `runInTerminal`) are answered with an error: tests launch with
the internal console.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

Message = dict[str, Any]


class DapError(RuntimeError):
    """The adapter answered a request with success=false, went away, or a wait timed out."""


class DapClient:
    def __init__(
        self, command: Sequence[str], *, cwd: str | None = None, env: dict[str, str] | None = None
    ) -> None:
        self.process = subprocess.Popen(
            list(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
        )
        self._seq = 0
        self._send_lock = threading.Lock()
        self._responses: dict[int, Message] = {}
        self._responses_cv = threading.Condition()
        self._events: queue.Queue[Message] = queue.Queue()
        self.seen_events: list[Message] = []  # every event, for failure messages
        self.output: list[str] = []  # the debuggee's `output` events, joined on failure
        self._reader = threading.Thread(target=self._read_loop, name="dap-reader", daemon=True)
        self._reader.start()
        self.stderr_lines: list[str] = []
        self._stderr_reader = threading.Thread(target=self._read_stderr, name="dap-stderr", daemon=True)
        self._stderr_reader.start()

    # -- wire ---------------------------------------------------------------------------------------------------

    def _write(self, message: Message) -> None:
        body = json.dumps(message).encode("utf-8")
        assert self.process.stdin is not None
        with self._send_lock:
            self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            self.process.stdin.flush()

    def _read_message(self) -> Message | None:
        stream = self.process.stdout
        assert stream is not None
        length = None
        while True:
            line = stream.readline()
            if not line:
                return None
            line = line.strip()
            if not line:
                break
            name, _, value = line.decode("ascii").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        if length is None:
            return None
        return json.loads(stream.read(length).decode("utf-8"))

    def _read_loop(self) -> None:
        while True:
            try:
                message = self._read_message()
            except (OSError, ValueError):
                message = None
            if message is None:
                with self._responses_cv:
                    self._responses[-1] = {"closed": True}
                    self._responses_cv.notify_all()
                self._events.put({"type": "event", "event": "<closed>"})
                return
            kind = message.get("type")
            if kind == "response":
                with self._responses_cv:
                    self._responses[int(message["request_seq"])] = message
                    self._responses_cv.notify_all()
            elif kind == "event":
                self.seen_events.append(message)
                if message.get("event") == "output":
                    self.output.append(str(message.get("body", {}).get("output", "")))
                self._events.put(message)
            elif kind == "request":
                self._write(
                    {
                        "seq": self._next_seq(),
                        "type": "response",
                        "request_seq": message["seq"],
                        "command": message.get("command"),
                        "success": False,
                        "message": "not supported by the test client",
                    }
                )

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for raw in self.process.stderr:
            self.stderr_lines.append(raw.decode("utf-8", "replace"))

    def _next_seq(self) -> int:
        with self._send_lock:
            self._seq += 1
            return self._seq

    # -- requests and events ------------------------------------------------------------------------------------

    def send(self, command: str, arguments: Message | None = None) -> int:
        """Send a request without waiting; returns its seq for `response`."""
        seq = self._next_seq()
        message: Message = {"seq": seq, "type": "request", "command": command}
        if arguments is not None:
            message["arguments"] = arguments
        self._write(message)
        return seq

    def response(self, seq: int, timeout: float = 30.0) -> Message:
        deadline = time.monotonic() + timeout
        with self._responses_cv:
            while seq not in self._responses:
                if -1 in self._responses:
                    raise DapError(f"adapter closed before answering request {seq}{self._context()}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise DapError(f"no response to request {seq} within {timeout:.0f}s{self._context()}")
                self._responses_cv.wait(remaining)
            message = self._responses.pop(seq)
        if not message.get("success", False):
            raise DapError(f"{message.get('command')} failed: {message.get('message')}{self._context()}")
        return message

    def request(self, command: str, arguments: Message | None = None, timeout: float = 30.0) -> Message:
        return self.response(self.send(command, arguments), timeout)

    def wait_event(
        self, name: str, timeout: float = 60.0, where: Callable[[Message], bool] | None = None
    ) -> Message:
        """The next event called `name` (earlier events of other names are dropped from the queue)."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DapError(f"no {name!r} event within {timeout:.0f}s{self._context()}")
            try:
                event = self._events.get(timeout=remaining)
            except queue.Empty:
                continue
            if event.get("event") == name and (where is None or where(event)):
                return event
            if event.get("event") == "<closed>":
                raise DapError(f"adapter closed while waiting for {name!r}{self._context()}")
            if event.get("event") in ("terminated", "exited") and name not in ("terminated", "exited"):
                raise DapError(f"debuggee ended while waiting for {name!r}{self._context()}")

    def _context(self) -> str:
        tail = "".join(self.output)[-3000:]
        err = "".join(self.stderr_lines)[-1500:]
        return f"\n--- debuggee output (tail) ---\n{tail}\n--- adapter stderr (tail) ---\n{err}"

    def debuggee_output(self) -> str:
        return "".join(self.output)

    # -- lifecycle ----------------------------------------------------------------------------------------------

    def close(self, timeout: float = 20.0) -> None:
        """Disconnect (terminating the debuggee), then make sure the adapter process is gone."""
        if self.process.poll() is None:
            try:
                seq = self.send("disconnect", {"terminateDebuggee": True})
                self.response(seq, timeout=timeout)
            except (DapError, OSError):
                pass
            # The stdio adapter serves until its client goes away: closing stdin is the editor hanging up.
            try:
                assert self.process.stdin is not None
                self.process.stdin.close()
            except OSError:
                pass
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass

    def __enter__(self) -> DapClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def replay_stopped_at(dap: DapClient, bundle: str, cwd: str, source: str, line: int) -> dict[str, Any]:
    """Drive debugpy's adapter as the editor's "Replay eagerly" does (launch `python -m pyadapter replay BUNDLE
    --eager` in the workspace folder `cwd`, one breakpoint at source:line) and wait for the first stop; returns the
    `stopped` event."""
    dap.request(
        "initialize",
        {
            "adapterID": "nanlens",
            "clientID": "nanlens-tests",
            "clientName": "NaN Lens tests",
            "linesStartAt1": True,
            "columnsStartAt1": True,
            "pathFormat": "path",
            "supportsRunInTerminalRequest": False,
        },
    )
    launch = dap.send(
        "launch",
        {
            "name": "NaN Lens: replay eagerly",
            "type": "nanlens",
            "request": "launch",
            "module": "pyadapter",
            "args": ["replay", bundle, "--eager"],
            "python": [sys.executable],
            "cwd": cwd,
            "justMyCode": False,
            "console": "internalConsole",
            "env": {"TF_CPP_MIN_LOG_LEVEL": "2"},
        },
    )
    dap.wait_event("initialized", timeout=60)
    answer = dap.request("setBreakpoints", {"source": {"path": source}, "breakpoints": [{"line": line}]})
    assert answer["body"]["breakpoints"][0]["verified"], answer
    dap.request("configurationDone")
    dap.response(launch, timeout=60)
    return dap.wait_event("stopped", timeout=240)
