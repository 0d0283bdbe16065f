"""The scanner's rules on small dumps written by hand (no TensorFlow): causal order, rounds, gradient ops,
eager executions, health layouts, user frames, and directories that are not dumps."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

from pyadapter.dump import ScanError, scan_dump
from pyadapter.dump.events import debug_event_class
from pyadapter.dump.frames import is_user_file
from pyadapter.dump.health import LAYOUTS
from pyadapter.dump.tfrecord import masked_crc32c
from pyadapter.findings import Findings, Frame

USER_FILE = "/home/someone/project/train.py"
USER_LINES = [f"line {n} of train.py" for n in range(1, 41)]
KERAS_LOSSES = "/opt/venv/lib/python3.11/site-packages/keras/src/losses/losses.py"
TF_MATH_OPS = "/opt/venv/lib/python3.11/site-packages/tensorflow/python/ops/math_ops.py"
TF_DEBUG_CALLBACK = "/opt/venv/lib/python3.11/site-packages/tensorflow/python/debug/lib/dumping_callback.py"
NANLENS_CHECKS = str(Path(__file__).resolve().parents[1] / "pyadapter" / "capture" / "gate_checks.py")
TF_BACKPROP = "/opt/venv/lib/python3.11/site-packages/tensorflow/python/eager/backprop.py"
NANLENS_FILE, BACKPROP_FILE = 5, 6  # their indexes among DumpWriter's source files
MODE_NUMBERS = {"CURT_HEALTH": 2, "CONCISE_HEALTH": 3, "FULL_HEALTH": 4, "SHAPE": 5}


def full_health(
    tensor_id: float, *, size: int = 4, nan: int = 0, neg_inf: int = 0, pos_inf: int = 0, zero: int = 0
):
    finite = size - nan - neg_inf - pos_inf
    return [tensor_id, -1, 1, 1, size, neg_inf, pos_inf, nan, 0, zero, finite - zero]


class DumpWriter:
    """Writes the six files of a tfdbg2 dump by hand, with the same record framing TensorFlow uses."""

    def __init__(self, directory: Path, host: str = "box", mode: str = "FULL_HEALTH") -> None:
        self.dir = directory
        self.dir.mkdir(exist_ok=True)
        self.host = host
        self.mode = mode
        self.events: dict[str, list[bytes]] = {
            s: []
            for s in (
                "metadata",
                "source_files",
                "stack_frames",
                "graphs",
                "execution",
                "graph_execution_traces",
            )
        }
        self.wall = 1000.0
        self.next_tensor_id = 1
        self.frames: dict[tuple[int, int], str] = {}
        self.event_class = debug_event_class()
        ev = self._event()
        ev.debug_metadata.tensorflow_version = "2.21.0"
        ev.debug_metadata.file_version = "debug.Event:1"
        self._add("metadata", ev)
        self._source_file(USER_FILE, USER_LINES)
        self._source_file("/usr/lib/python3/dist-packages/tensorflow/ops.py", ["x"] * 10)
        self._source_file(KERAS_LOSSES, ["x"] * 10)
        self._source_file(TF_DEBUG_CALLBACK, ["x"] * 10)
        self._source_file(TF_MATH_OPS, ["x"] * 10)
        self._source_file(NANLENS_CHECKS, ["x"] * 200)
        self._source_file(TF_BACKPROP, ["x"] * 10)

    def _event(self):  # type: ignore[no-untyped-def]
        self.wall += 0.001
        ev = self.event_class()
        ev.wall_time = self.wall
        return ev

    def _add(self, suffix: str, ev) -> None:  # type: ignore[no-untyped-def]
        self.events[suffix].append(ev.SerializeToString())

    def _source_file(self, path: str, lines: list[str]) -> None:
        # SourceFile is not in the scanner's subset (it reads it by hand), so encode it by hand too.
        body = _len_field(1, path.encode()) + _len_field(2, self.host.encode())
        body += b"".join(_len_field(3, line.encode()) for line in lines)
        wall_time = b"\x09" + struct.pack("<d", self.wall)  # DebugEvent.wall_time, field 1, fixed64
        self.events["source_files"].append(wall_time + _len_field(4, body))

    def frame(self, line: int, file_index: int = 0) -> str:
        frame_id = f"frame-{file_index}-{line}"
        if (file_index, line) not in self.frames:
            ev = self._event()
            ev.stack_frame_with_id.id = frame_id
            ev.stack_frame_with_id.file_line_col.file_index = file_index
            ev.stack_frame_with_id.file_line_col.line = line
            ev.stack_frame_with_id.file_line_col.func = "step"
            self._add("stack_frames", ev)
            self.frames[(file_index, line)] = frame_id
        return frame_id

    def op(
        self,
        graph: str,
        name: str,
        op_type: str,
        inputs: list[str],
        line: int,
        *,
        library_only: bool = False,
        inner: tuple[int, ...] = (),
    ) -> int:
        """Create a one-output op; returns its tensor id. ``library_only``: made wholly inside Keras (its stack
        has no user frame, as in a replay that calls ``train_step`` directly). ``inner``: indexes of the source
        files whose frames (line 7) sit inside the user's line, innermost last, before TF's op wrapper."""
        ev = self._event()
        goc = ev.graph_op_creation
        goc.op_type, goc.op_name, goc.graph_id, goc.graph_name = op_type, name, graph, f"name-of-{graph}"
        goc.input_names.extend(inputs)
        goc.num_outputs = 1
        goc.code_location.host_name = self.host
        if library_only:
            stack = [self.frame(2, 1), self.frame(line, 2), self.frame(3, 4), self.frame(7, 3)]
        else:
            stack = [self.frame(1), self.frame(2, 1), self.frame(line)]
        if inner:
            stack += [self.frame(7, index) for index in inner] + [self.frame(3, 4)]
        goc.code_location.stack_frame_ids.extend(stack)
        tensor_id = self.next_tensor_id
        self.next_tensor_id += 1
        goc.output_tensor_ids.append(tensor_id)
        self._add("graphs", ev)
        return tensor_id

    def trace(self, graph: str, name: str, values: list[float], *, as_double_val: bool = False) -> None:
        ev = self._event()
        t = ev.graph_execution_trace
        t.tfdbg_context_id, t.op_name, t.tensor_debug_mode = graph, name, MODE_NUMBERS[self.mode]
        t.tensor_proto.dtype = 2
        t.tensor_proto.tensor_shape.dim.add().size = len(values)
        if as_double_val:
            t.tensor_proto.double_val.extend(values)
        else:
            t.tensor_proto.tensor_content = struct.pack(f"<{len(values)}d", *values)
        t.device_name = "/job:localhost/replica:0/task:0/device:CPU:0"
        self._add("graph_execution_traces", ev)

    def execution(
        self, op_type: str, inputs: list[int], outputs: list[int], healths: list[list[float]], line: int
    ):  # type: ignore[no-untyped-def]
        ev = self._event()
        ex = ev.execution
        ex.op_type, ex.num_outputs, ex.tensor_debug_mode = op_type, len(outputs), MODE_NUMBERS[self.mode]
        ex.input_tensor_ids.extend(inputs)
        ex.output_tensor_ids.extend(outputs)
        for values in healths:
            proto = ex.tensor_protos.add()
            proto.dtype = 2
            proto.tensor_shape.dim.add().size = len(values)
            proto.tensor_content = struct.pack(f"<{len(values)}d", *values)
        ex.code_location.host_name = self.host
        ex.code_location.stack_frame_ids.extend([self.frame(1), self.frame(line)])
        self._add("execution", ev)

    def write(self) -> Path:
        for suffix, records in self.events.items():
            with open(self.dir / f"tfdbg_events.1700000000.{self.host}.{suffix}", "wb") as f:
                for data in records:
                    length = struct.pack("<Q", len(data))
                    f.write(length + struct.pack("<I", masked_crc32c(length)) + data)
                    f.write(struct.pack("<I", masked_crc32c(data)))
        return self.dir


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _len_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def softmax_log_graph(w: DumpWriter) -> dict[str, int]:
    """x -> Softmax (line 10) -> Log (line 11) -> Mul (line 12)."""
    ids = {"x": w.op("g", "x", "Placeholder", [], 9)}
    ids["Softmax"] = w.op("g", "Softmax", "Softmax", ["x:0"], 10)
    ids["Log"] = w.op("g", "Log", "Log", ["Softmax:0"], 11)
    ids["mul"] = w.op("g", "mul", "Mul", ["Log:0", "x:0"], 12)
    return ids


def test_origin_follows_graph_topology_not_file_order(tmp_path: Path) -> None:
    w = DumpWriter(tmp_path)
    ids = softmax_log_graph(w)
    for name in ("x", "Softmax", "Log", "mul"):  # step 1: all finite
        w.trace("g", name, full_health(ids[name]))
    # Step 2: the downstream Mul's trace is written first, then Log, then Log's input Softmax.
    w.trace("g", "mul", full_health(ids["mul"], nan=3))
    w.trace("g", "x", full_health(ids["x"]))
    w.trace("g", "Log", full_health(ids["Log"], neg_inf=3))
    w.trace("g", "Softmax", full_health(ids["Softmax"], zero=3))
    findings = scan_dump(w.write())
    origin = findings.origin
    assert origin is not None
    assert (origin.file, origin.line, origin.op.name, origin.op.step) == (USER_FILE, 11, "Log", 1)
    assert origin.message == "Log produced 3 -inf (of 4 values) from input Softmax:0 which holds 3 zeros"
    assert [f.line for f in origin.stack] == [1, 11], "library frames (dist-packages) are left out"
    assert findings.extra["origin_code"] == "line 11 of train.py"
    assert [(f.role, f.line) for f in findings.findings] == [("origin", 11), ("propagated", 12)]


def test_inputs_are_judged_within_the_same_execution(tmp_path: Path) -> None:
    """Step 2: Log goes -inf from finite Softmax; step 3: everything is NaN. The step-3 NaN in Softmax must
    not hide that Log's input was finite in step 2."""
    w = DumpWriter(tmp_path)
    ids = softmax_log_graph(w)
    for name in ("x", "Softmax", "Log", "mul"):
        w.trace("g", name, full_health(ids[name]))
    for name, health in (("x", {}), ("Softmax", {"zero": 1}), ("Log", {"neg_inf": 1}), ("mul", {"nan": 1})):
        w.trace("g", name, full_health(ids[name], **health))
    for name in ("x", "Softmax", "Log", "mul"):
        w.trace("g", name, full_health(ids[name], nan=4))
    origin = scan_dump(w.write()).origin
    assert origin is not None and origin.op.name == "Log" and origin.op.step == 1


def test_placeholder_is_an_origin_only_when_nothing_else_is(tmp_path: Path) -> None:
    w = DumpWriter(tmp_path)
    ids = softmax_log_graph(w)
    w.trace("g", "x", full_health(ids["x"], nan=1))
    w.trace("g", "Softmax", full_health(ids["Softmax"], nan=4))
    origin = scan_dump(w.write()).origin
    assert origin is not None and origin.op.type == "Placeholder" and origin.line == 9


def keras_loss_graph(w: DumpWriter) -> dict[str, int]:
    """data (a function argument, never traced) -> MatMul (user line 10) -> Square made inside Keras's loss."""
    ids = {"data": w.op("g", "data", "Placeholder", [], 9)}
    ids["MatMul"] = w.op("g", "MatMul", "MatMul", ["data:0"], 10)
    ids["Square"] = w.op("g", "Square", "Square", ["MatMul:0"], 5, library_only=True)
    return ids


def test_an_op_made_inside_keras_is_never_marked_in_a_library_file(tmp_path: Path) -> None:
    w = DumpWriter(tmp_path)
    ids = keras_loss_graph(w)
    w.trace("g", "MatMul", full_health(ids["MatMul"]))
    w.trace("g", "Square", full_health(ids["Square"], pos_inf=2))
    dump = w.write()

    # No user line anywhere: no finding at all, and the reason names the Keras file (not TF's debug callback).
    findings = scan_dump(dump)
    assert findings.origin is None and findings.findings == []
    unlocated = findings.extra["unlocated_origin"]
    assert unlocated["op"]["type"] == "Square"
    assert (
        "keras/src/losses/losses.py:5" in unlocated["reason"]
        and "no line of your code" in unlocated["reason"]
    )
    assert "dumping_callback" not in unlocated["reason"]

    # With the training call known (a bundle's model.fit line), the op is marked there and says where it was made.
    fit_line = Frame(USER_FILE, 30, "main")
    findings = scan_dump(dump, entry_frame=fit_line)
    origin = findings.origin
    assert origin is not None and (origin.file, origin.line, origin.op.type) == (USER_FILE, 30, "Square")
    assert "made inside TensorFlow/Keras code (keras/src/losses/losses.py:5" in origin.message
    assert findings.extra["origin_created_in"]["file"] == KERAS_LOSSES
    assert findings.extra["origin_code"] == "line 30 of train.py"
    for finding in findings.findings:
        assert "site-packages" not in finding.file and "dist-packages" not in finding.file


def test_an_argument_fed_op_is_not_the_origin_when_bad_data_came_in_first(tmp_path: Path) -> None:
    w = DumpWriter(tmp_path)
    ids = keras_loss_graph(w)
    ids["rows"] = w.op("pipe", "args_1", "Placeholder", [], 20)  # a tf.data function's input, traced
    w.trace("pipe", "args_1", full_health(ids["rows"], nan=1))
    w.trace("g", "MatMul", full_health(ids["MatMul"], nan=2))  # its input `data` has no trace: unknown
    origin = scan_dump(w.write()).origin
    assert origin is not None and (origin.op.type, origin.line) == ("Placeholder", 20)
    assert "brought in data that already held 1 NaN" in origin.message


def test_an_argument_fed_op_stays_the_origin_without_earlier_bad_data(tmp_path: Path) -> None:
    w = DumpWriter(tmp_path)
    ids = keras_loss_graph(w)
    w.trace("g", "MatMul", full_health(ids["MatMul"], pos_inf=2))
    origin = scan_dump(w.write()).origin
    assert origin is not None and (origin.op.type, origin.line) == ("MatMul", 10)
    assert [(i.name, i.health) for i in origin.inputs] == [("data:0", None)], (
        "an untraced argument is unknown"
    )


def test_tf1_style_gradient_maps_to_its_forward_op(tmp_path: Path) -> None:
    w = DumpWriter(tmp_path)
    x = w.op("g", "x", "Placeholder", [], 5)
    w.op("g", "Sqrt", "Sqrt", ["x:0"], 6)
    w.op("g", "gradients/Fill", "Fill", [], 20)
    grad = w.op("g", "gradients/Sqrt_grad/SqrtGrad", "SqrtGrad", ["Sqrt:0", "gradients/Fill:0"], 20)
    w.trace("g", "x", full_health(x, zero=1))
    w.trace("g", "Sqrt", full_health(x + 1, zero=1))
    w.trace("g", "gradients/Sqrt_grad/SqrtGrad", full_health(grad, pos_inf=1))
    origin = scan_dump(w.write()).origin
    assert origin is not None
    assert (origin.role, origin.line, origin.op.forward_op) == ("backward-origin", 6, "Sqrt")
    assert "backward pass" in origin.message and "train.py:20" in origin.message


def test_the_checks_nan_lens_adds_are_not_lines_the_nan_spread_to(tmp_path: Path) -> None:
    """A guarded step's own finite checks (and a replay's) read the NaN the step made, at the user's training
    line: `locate --replay` of a custom train_step listed "simclr.py:64 L2Loss" under "spread to". A gradient made
    through NaN Lens's wrapper of ``tape.gradient`` is TensorFlow's backprop, and is the user's."""
    w = DumpWriter(tmp_path)
    ids = softmax_log_graph(w)
    grad = w.op("g", "gradient_tape/mul_grad/Mul", "Mul", ["mul:0"], 20, inner=(NANLENS_FILE, BACKPROP_FILE))
    check = w.op("g", "L2Loss", "L2Loss", ["gradient_tape/mul_grad/Mul:0"], 30, inner=(NANLENS_FILE,))
    w.trace("g", "x", full_health(ids["x"]))
    w.trace("g", "Softmax", full_health(ids["Softmax"], zero=3))
    w.trace("g", "Log", full_health(ids["Log"], neg_inf=3))
    w.trace("g", "mul", full_health(ids["mul"], nan=3))
    w.trace("g", "gradient_tape/mul_grad/Mul", full_health(grad, nan=3))
    w.trace("g", "L2Loss", full_health(check, size=1, nan=1))
    findings = scan_dump(w.write())
    assert [(f.role, f.line, f.op.name) for f in findings.findings] == [
        ("origin", 11, "Log"),
        ("propagated", 12, "mul"),
        ("propagated", 20, "gradient_tape/mul_grad/Mul"),
    ]


def test_a_metric_read_is_not_a_line_the_nan_spread_to(tmp_path: Path) -> None:
    """A custom train_step's metric, ``div_no_nan/ReadVariableOp`` at its ``return {"loss": tracker.result()}``, was
    listed under "spread to": it reads a running total, and the NaN did not pass through the user's computation
    there."""
    w = DumpWriter(tmp_path)
    ids = softmax_log_graph(w)
    read = w.op("g", "div_no_nan/ReadVariableOp", "ReadVariableOp", [], 40)
    w.trace("g", "x", full_health(ids["x"]))
    w.trace("g", "Softmax", full_health(ids["Softmax"], zero=3))
    w.trace("g", "Log", full_health(ids["Log"], neg_inf=3))
    w.trace("g", "mul", full_health(ids["mul"], nan=3))
    w.trace("g", "div_no_nan/ReadVariableOp", full_health(read, size=1, nan=1))
    findings = scan_dump(w.write())
    assert [(f.role, f.line, f.op.name) for f in findings.findings] == [
        ("origin", 11, "Log"),
        ("propagated", 12, "mul"),
    ]


def test_values_in_double_val_are_read_too(tmp_path: Path) -> None:
    w = DumpWriter(tmp_path)
    ids = softmax_log_graph(w)
    w.trace("g", "Softmax", full_health(ids["Softmax"], zero=2), as_double_val=True)
    w.trace("g", "Log", full_health(ids["Log"], neg_inf=2), as_double_val=True)
    origin = scan_dump(w.write()).origin
    assert origin is not None and origin.op.name == "Log"


@pytest.mark.parametrize(
    "mode, log_values, expected",
    [
        ("CURT_HEALTH", lambda tid: [tid, 1.0], {"nan": 1}),
        ("CONCISE_HEALTH", lambda tid: [tid, 4, 2, 0, 1], {"size": 4, "neg_inf": 2, "nan": 1}),
    ],
)
def test_other_health_modes(tmp_path: Path, mode: str, log_values, expected: dict[str, int]) -> None:  # type: ignore[no-untyped-def]
    w = DumpWriter(tmp_path, mode=mode)
    ids = softmax_log_graph(w)
    finite = [float(ids["Softmax"])] + [0.0] * (LAYOUTS[mode].length - 1)
    w.trace("g", "Softmax", finite)
    w.trace("g", "Log", log_values(float(ids["Log"])))
    findings = scan_dump(w.write())
    assert findings.tensor_debug_mode == mode
    assert findings.origin is not None and findings.origin.op.name == "Log"
    health = findings.origin.health
    assert health is not None and not health.is_finite
    for key, value in expected.items():
        assert getattr(health, key) == value


def test_shape_mode_says_it_cannot_find_nans(tmp_path: Path) -> None:
    w = DumpWriter(tmp_path, mode="SHAPE")
    ids = softmax_log_graph(w)
    w.trace("g", "Log", [float(ids["Log"]), 1, 1, 4, 4, 0, 0, 0, 0, 0])
    findings = scan_dump(w.write())
    assert findings.origin is None
    assert any("SHAPE mode" in w and "FULL_HEALTH" in w for w in findings.extra["warnings"])


def test_eager_origin_uses_input_tensor_ids(tmp_path: Path) -> None:
    w = DumpWriter(tmp_path)
    w.execution("Mul", [1], [2], [full_health(-1, zero=4)], line=20)
    w.execution("RealDiv", [1, 2], [3], [full_health(-1, pos_inf=4)], line=21)
    w.execution("Sub", [3, 3], [4], [full_health(-1, nan=4)], line=22)
    w.execution("Sqrt", [5], [6], [full_health(-1, nan=1)], line=23)  # an unrelated NaN, not downstream
    findings = scan_dump(w.write())
    origin = findings.origin
    assert origin is not None and (origin.line, origin.op.type, origin.op.execution_index) == (
        21,
        "RealDiv",
        1,
    )
    assert "Mul:0 (tensor #2) which holds 4 zeros" in origin.message
    assert [(f.role, f.line) for f in findings.findings] == [("origin", 21), ("propagated", 22)]


def test_findings_json_round_trips(tmp_path: Path) -> None:
    w = DumpWriter(tmp_path)
    ids = softmax_log_graph(w)
    w.trace("g", "Log", full_health(ids["Log"], neg_inf=1))
    findings = scan_dump(w.write())
    again = Findings.from_json(findings.to_json())
    assert again.to_json() == findings.to_json()


def test_user_frames_exclude_libraries_stdlib_and_nanlens() -> None:
    import threading

    import pyadapter

    assert is_user_file("/home/me/project/train.py")
    assert not is_user_file("/usr/lib/python3/dist-packages/keras/src/trainer.py")
    assert not is_user_file("/opt/venv/lib/python3.11/site-packages/tensorflow/python/ops/math_ops.py")
    assert not is_user_file("/usr/lib/python3.11/runpy.py")
    assert not is_user_file(threading.__file__)
    assert not is_user_file(str(Path(pyadapter.__file__).parent / "commands" / "run.py"))
    assert not is_user_file("/work/<frozen runpy>")
    assert not is_user_file("<stdin>")


def test_masked_crc_matches_tfrecord() -> None:
    # crc32c("123456789") = 0xE3069283 (RFC 3720); TFRecord masks it as ((c >> 15) | (c << 17)) + 0xA282EAD8.
    c = 0xE3069283
    assert masked_crc32c(b"123456789") == (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def test_foreign_bytes_under_dump_names_is_an_error(tmp_path: Path) -> None:
    for suffix in ("metadata", "graphs", "graph_execution_traces"):
        (tmp_path / f"tfdbg_events.1700000000.box.{suffix}").write_bytes(
            b"PK\x03\x04 this is a zip file, honest"
        )
    with pytest.raises(ScanError, match="no readable tfdbg2 records.*not a TFRecord file"):
        scan_dump(tmp_path)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p, "is empty"),
        (lambda p: (p / "notes.txt").write_text("hi") and p, "not a tfdbg2 dump"),
        (lambda p: p / "missing", "no such dump directory"),
        (lambda p: (p / "file.bin").write_bytes(b"x") and p / "file.bin", "not a directory"),
    ],
    ids=["empty", "foreign", "missing", "file"],
)
def test_not_a_dump_is_a_one_line_error(tmp_path: Path, make, message: str) -> None:  # type: ignore[no-untyped-def]
    import subprocess

    target = make(tmp_path)
    with pytest.raises(ScanError, match=message):
        scan_dump(target)
    result = subprocess.run(
        [sys.executable, "-m", "pyadapter", "scan", str(target)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("nanlens: error: ")
    assert message in result.stderr


def test_the_statement_around_a_line_is_its_other_lines_when_it_spans_several() -> None:
    from pyadapter.dump.statement import MAX_STATEMENT_LINES, statement_around

    source = (
        "def f(x, logvar):\n"
        "    y = tf.exp(x)\n"
        "    return tf.reduce_sum(\n"
        "        x * tf.exp(-logvar),\n"
        "        axis=1)\n"
    )
    assert statement_around(source, 5) == {
        "before": ["    return tf.reduce_sum(", "        x * tf.exp(-logvar),"],
        "after": [],
    }
    assert statement_around(source, 3) == {
        "before": [],
        "after": ["        x * tf.exp(-logvar),", "        axis=1)"],
    }
    assert statement_around(source, 2) is None  # one line: nothing to add
    assert statement_around(source, 1) is None  # a def's header: not a whole block
    long_call = "y = f(\n" + "    1,\n" * MAX_STATEMENT_LINES + ")\n"
    assert statement_around(long_call, 2) is None  # shown as its recorded line alone
    assert statement_around("y = (\n", 1) is None  # does not parse
