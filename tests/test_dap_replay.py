"""The "Replay eagerly" debug session, driven over DAP exactly as an editor drives debugpy's adapter: the
debuggee `python -m pyadapter replay BUNDLE --eager` stops on the origin line (inside a Keras layer's `call`; in
the own `train_step` of a VAE subclass trained at module level; in the `call` of a subclass built with constructor
arguments), and the tensors in that frame hold real values. The last two are replayed by re-entry: the program
runs again up to its `fit`, with breakpoints paused until the captured step runs eagerly."""

from __future__ import annotations

import sys

import pytest
from dap_client import DapClient, replay_stopped_at
from replay_fixtures import captured, quiet_env

pytestmark = pytest.mark.slow


# (program, an expression in the origin frame, what it shows when the values are real)
CASES = [
    # The softmax output has underflowed to exact zeros.
    ("keras_layer", "float(probs.numpy().min())", 0.0),
    # The decoder's sigmoid saturated at exactly 1, so log(1 - recon) is -inf.
    ("module_level_vae", "float(recon.numpy().max())", 1.0),
    # The constant batch: its per-feature standard deviation is 0.
    ("subclass_args", "float(tf.math.reduce_std(x, axis=0).numpy().min())", 0.0),
]


@pytest.mark.parametrize(("name", "expression", "expected"), CASES, ids=[c[0] for c in CASES])
def test_debug_session_stops_on_origin_line_with_real_tensors(
    name: str,
    expression: str,
    expected: float,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    cap = captured(name, tmp_path_factory)
    source = str(cap.origin_file)
    with DapClient([sys.executable, "-m", "debugpy.adapter"], env=quiet_env()) as dap:
        # In the workspace folder holding the program, as the editor starts it.
        stopped = replay_stopped_at(dap, str(cap.bundle), str(cap.script.parent), source, cap.origin_line)
        assert stopped["body"]["reason"] == "breakpoint"
        thread = stopped["body"]["threadId"]
        frames = dap.request("stackTrace", {"threadId": thread, "levels": 5})["body"]["stackFrames"]
        top = frames[0]
        assert top["source"]["path"] == source
        assert top["line"] == cap.origin_line

        # Real values, not a symbolic graph tensor.
        value = dap.request("evaluate", {"expression": expression, "frameId": top["id"], "context": "repl"})[
            "body"
        ]["result"]
        assert float(value) == expected
        if name == "keras_layer":
            shown = dap.request("evaluate", {"expression": "probs", "frameId": top["id"], "context": "watch"})
            assert "numpy=" in shown["body"]["result"] and "0." in shown["body"]["result"]

        dap.request("continue", {"threadId": thread})
        dap.wait_event("terminated", timeout=120)
        assert "eager: NaN reproduced" in dap.debuggee_output()
