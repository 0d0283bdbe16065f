"""The "Replay eagerly" debug session, driven over DAP exactly as an editor drives debugpy's adapter: the
debuggee `python -m pyadapter replay BUNDLE --eager` stops on the origin line inside a Keras layer's `call`, and
the tensors in that frame hold real values."""

from __future__ import annotations

import sys

import pytest
from dap_client import DapClient
from replay_fixtures import captured, quiet_env

pytestmark = pytest.mark.slow


def test_debug_session_stops_on_origin_line_with_real_tensors(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    cap = captured("keras_layer", tmp_path_factory)
    source = str(cap.origin_file)
    with DapClient([sys.executable, "-m", "debugpy.adapter"], env=quiet_env()) as dap:
        dap.request("initialize", {
            "adapterID": "nanlens", "clientID": "nanlens-tests", "clientName": "NaN Lens tests",
            "linesStartAt1": True, "columnsStartAt1": True, "pathFormat": "path",
            "supportsRunInTerminalRequest": False,
        })
        launch = dap.send("launch", {
            "name": "NaN Lens: replay eagerly",
            "type": "nanlens",
            "request": "launch",
            "module": "pyadapter",
            "args": ["replay", str(cap.bundle), "--eager"],
            "python": [sys.executable],
            "cwd": str(cap.bundle.parent),
            "justMyCode": False,
            "console": "internalConsole",
            "env": {"TF_CPP_MIN_LOG_LEVEL": "2"},
        })
        dap.wait_event("initialized", timeout=60)
        answer = dap.request("setBreakpoints", {
            "source": {"path": source}, "breakpoints": [{"line": cap.origin_line}],
        })
        assert answer["body"]["breakpoints"][0]["verified"], answer
        dap.request("configurationDone")
        dap.response(launch, timeout=60)

        stopped = dap.wait_event("stopped", timeout=240)
        assert stopped["body"]["reason"] == "breakpoint"
        thread = stopped["body"]["threadId"]
        frames = dap.request("stackTrace", {"threadId": thread, "levels": 5})["body"]["stackFrames"]
        top = frames[0]
        assert top["source"]["path"] == source
        assert top["line"] == cap.origin_line

        # Real values, not a symbolic graph tensor: the softmax output has underflowed to exact zeros.
        smallest = dap.request("evaluate", {"expression": "float(probs.numpy().min())", "frameId": top["id"],
                                            "context": "repl"})["body"]["result"]
        assert float(smallest) == 0.0
        shown = dap.request("evaluate", {"expression": "probs", "frameId": top["id"], "context": "watch"})
        assert "numpy=" in shown["body"]["result"] and "0." in shown["body"]["result"]

        dap.request("continue", {"threadId": thread})
        dap.wait_event("terminated", timeout=120)
        assert "eager: NaN reproduced" in dap.debuggee_output()
