"""Recording a tfdbg2 dump that stays readable when the run is killed.

``tf.debugging.experimental.enable_dump_debug_info`` as is loses data on a killed run: with the default
circular buffer the traces are written only at exit, and even unbuffered the .graphs and .stack_frames files
stay in memory until a flush. ``DumpRecorder`` turns the buffer off, flushes every file from a daemon thread
every ~2 s and on SIGTERM, and switches XLA compilation off (tfdbg's DebugNumericSummaryV2 has no XLA kernel,
so Keras' jit_compile would fail under dumping).

TensorFlow is imported when recording starts, not when this module is imported.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

# The folder, inside a replay's dump, of the eager re-run made when the dumped graph stayed finite
# (`pyadapter.replay.dumping`), which locate scans next.
EAGER_DUMP = "eager-rerun"

MODES = ("FULL_HEALTH", "CONCISE_HEALTH", "CURT_HEALTH", "SHAPE")
FLUSH_INTERVAL_SECONDS = 2.0


class _PseudoFileWarningFilter(logging.Filter):
    """Drop TF's 'Failed to read source code from path ...' warnings and its 'Enabled/Disabled dumping callback'
    notes while we record. The paths are not files (``<frozen runpy>``; a notebook cell's
    ``/tmp/ipykernel_<pid>/<hash>.py``, whose source the bundle records from the notebook itself), and a kernel
    that shows INFO logs would print both into the user's cell output for a dump the user did not ask for."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith("Failed to read source code from path"):
            return False
        return not message.startswith(("Enabled dumping callback", "Disabled dumping callback"))


def force_jit_off() -> None:
    """Turn XLA auto-clustering off and make Keras compile with jit_compile=False."""
    import tensorflow as tf

    tf.config.optimizer.set_jit(False)
    keras = sys.modules.get("keras")
    if keras is None:
        try:  # TensorFlow 2.21 already imports it; this is the fallback
            keras = importlib.import_module("keras")
        except ImportError:
            return
    model_cls = getattr(keras, "Model", None)
    if model_cls is None or getattr(model_cls.compile, "_nanlens_no_jit", False):
        return
    original = model_cls.compile
    signature = inspect.signature(original)

    @functools.wraps(original)
    def compile_without_jit(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind_partial(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)  # let Keras report the bad call
        requested = bound.arguments.get("jit_compile")
        if requested not in (None, False, "auto"):
            print(
                "nanlens: jit_compile=True ignored while recording a dump (tfdbg has no XLA kernels)",
                file=sys.stderr,
            )
        if "jit_compile" in signature.parameters:
            bound.arguments["jit_compile"] = False
        return original(*bound.args, **bound.kwargs)

    compile_without_jit._nanlens_no_jit = True  # type: ignore[attr-defined]
    model_cls.compile = compile_without_jit


def _dumping_callback_object() -> Any:
    """The callback object enable_dump_debug_info made (for the calling thread), or None."""
    from tensorflow.python.debug.lib import dumping_callback

    state = getattr(dumping_callback, "_state", None)
    return getattr(state, "dumping_callback", None) if state is not None else None


def _dumping_callback() -> Any:
    """The op callback enable_dump_debug_info registered (for the calling thread)."""
    return getattr(_dumping_callback_object(), "callback", None)


def _op_types_as_text() -> None:
    """Give the dump's op filter each op's type as text. TensorFlow's eager fallback of a generated op
    (``gen_nn_ops.bias_add_eager_fallback``, taken when the fast path declines) calls the op callbacks with the type
    as bytes (b"BiasAdd"), and the callback's ``re.match(op_regex, op_type)`` raised "TypeError: cannot use a string
    pattern on a bytes-like object" inside the user's ``Dense.call``: every dump with an op_regex (ours always have
    one) failed on such a step."""
    instance = _dumping_callback_object()
    should_dump = getattr(instance, "_should_dump_tensor", None)
    if should_dump is None or getattr(should_dump, "nanlens_text_types", False):
        return

    def should_dump_text(op_type: Any, dtype: Any) -> Any:
        if isinstance(op_type, bytes):
            op_type = op_type.decode("utf-8", "replace")
        return should_dump(op_type, dtype)

    should_dump_text.nanlens_text_types = True  # type: ignore[attr-defined]
    instance._should_dump_tensor = should_dump_text


def _instrument_py_function_threads(callback: Any) -> Any:
    """Make eager code run by tf.py_function (and so tf.data functions in debug mode) visible to the dump.

    Op callbacks are thread-local and TensorFlow runs py_function bodies on its own worker threads, so
    without this the ops inside a tf.data map function under --eager would not be recorded at all.
    Returns a function that undoes the patch.
    """
    try:
        from tensorflow.python.eager import context
        from tensorflow.python.ops import script_ops
    except ImportError:  # pragma: no cover - private modules moved
        return lambda: None
    original = script_ops.EagerFunc.__call__

    @functools.wraps(original)
    def call_with_dump_callback(self: Any, *args: Any, **kwargs: Any) -> Any:
        ctx = context.context()
        added = callback not in ctx.op_callbacks
        if added:
            ctx.add_op_callback(callback)
        try:
            return original(self, *args, **kwargs)
        finally:
            if added:
                ctx.remove_op_callback(callback)

    script_ops.EagerFunc.__call__ = call_with_dump_callback

    def undo() -> None:
        script_ops.EagerFunc.__call__ = original

    return undo


class DumpRecorder:
    """Context manager: record a tfdbg2 dump of everything TensorFlow runs inside it.

    ``with DumpRecorder("dumps/run1", mode="FULL_HEALTH"): train()``
    """

    def __init__(
        self,
        dump_dir: str | os.PathLike[str],
        mode: str = "FULL_HEALTH",
        *,
        flush_interval: float = FLUSH_INTERVAL_SECONDS,
        op_regex: str | None = None,
        handle_sigterm: bool = True,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown tensor debug mode {mode!r}; choose one of {', '.join(MODES)}")
        self.dump_dir = os.path.abspath(os.fspath(dump_dir))
        self.mode = mode
        self.flush_interval = flush_interval
        self.op_regex = op_regex
        self.handle_sigterm = handle_sigterm
        self._writer: Any = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._previous_sigterm: Any = None
        self._log_filter = _PseudoFileWarningFilter()
        self._undo_patches: list[Any] = []

    @property
    def active(self) -> bool:
        return self._writer is not None

    def start(self) -> DumpRecorder:
        import tensorflow as tf

        os.makedirs(self.dump_dir, exist_ok=True)
        force_jit_off()
        logging.getLogger("tensorflow").addFilter(self._log_filter)
        self._writer = tf.debugging.experimental.enable_dump_debug_info(
            self.dump_dir,
            tensor_debug_mode=self.mode,
            circular_buffer_size=-1,
            op_regex=self.op_regex,
        )
        _op_types_as_text()
        callback = _dumping_callback()
        if callback is not None:
            self._undo_patches.append(_instrument_py_function_threads(callback))
        self._stop.clear()
        self._thread = threading.Thread(target=self._flush_loop, name="nanlens-dump-flush", daemon=True)
        self._thread.start()
        if self.handle_sigterm and threading.current_thread() is threading.main_thread():
            self._previous_sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)
        return self

    def flush(self) -> None:
        """Write everything buffered so far to disk (safe to call from any thread)."""
        with self._lock:
            if self._writer is None:
                return
            try:
                self._writer.FlushNonExecutionFiles()
                self._writer.FlushExecutionFiles()
            except Exception:  # noqa: BLE001 - a failed periodic flush must not kill the run
                pass

    def close(self) -> None:
        """Flush and close the dump files; restores the SIGTERM handler. Idempotent."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._thread = None
        with self._lock:
            if self._writer is not None:
                import tensorflow as tf

                try:
                    self._writer.FlushNonExecutionFiles()
                    self._writer.FlushExecutionFiles()
                finally:
                    tf.debugging.experimental.disable_dump_debug_info()
                    self._writer = None
                    while self._undo_patches:
                        self._undo_patches.pop()()
        if self._previous_sigterm is not None:
            try:
                signal.signal(signal.SIGTERM, self._previous_sigterm)
            except ValueError:  # not in the main thread any more
                pass
            self._previous_sigterm = None
        logging.getLogger("tensorflow").removeFilter(self._log_filter)

    def _flush_loop(self) -> None:
        while not self._stop.wait(self.flush_interval):
            self.flush()

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        # Flush first: whatever happens during unwinding, the files on disk are readable now.
        self.flush()
        raise SystemExit(128 + signum)

    def __enter__(self) -> DumpRecorder:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()


STEP_DUMP_MODE = "FULL_HEALTH"


@contextlib.contextmanager
def step_dump(
    dump_dir: str | os.PathLike[str], mode: str = STEP_DUMP_MODE, op_regex: str | None = None
) -> Iterator[None]:
    """A FULL_HEALTH tfdbg2 dump into `dump_dir` for the duration of the block (one replayed step: no flush
    thread, no signal handler, so it works in any thread), every file flushed on exit. ``mode="FULL_TENSOR"`` with
    an `op_regex` records the whole values of the ops it matches (the scene's look at one op's rows)."""
    import tensorflow as tf

    quiet = _PseudoFileWarningFilter()
    logging.getLogger("tensorflow").addFilter(quiet)
    # No Grappler for the dumped step's graph: with a debug op on every output, each op's output has a second
    # consumer, so it fuses or rewrites next to nothing there, and its passes over a graph twice the step's size
    # were 40% of the dumped run (MobileNetV3Small's step: 31 s, 18 s without; bench/scale.py's Transformer too).
    # Read when the function is instantiated, inside the block: training's own functions keep theirs.
    grappler_was_off = tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer", False)
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    if op_regex is None:
        # The step's arguments unrecorded, as under Grappler (which pruned their debug ops): the scan reads a
        # NaN that came in with the batch from the op that first took it, and the cause the batch's own array.
        op_regex = "(?!Placeholder$)"
    try:
        writer = tf.debugging.experimental.enable_dump_debug_info(
            str(dump_dir), tensor_debug_mode=mode, circular_buffer_size=-1, op_regex=op_regex
        )
        _op_types_as_text()
        try:
            yield
        finally:
            writer.FlushNonExecutionFiles()
            writer.FlushExecutionFiles()
            tf.debugging.experimental.disable_dump_debug_info()
    finally:
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": grappler_was_off})
        logging.getLogger("tensorflow").removeFilter(quiet)
