"""How much NanGuard slows down Keras `fit`, next to the anchors, measured in the same run.

Method (shared/notes/benchmarking.md): a Keras MLP (256->512->512->10, batch 64, Adam) on CPU with one intra-op and
one inter-op thread; one model instance for the in-process arms, reset to the same initial weights before every
round, `shuffle=False`; many short rounds in ABBA order; the figure is the median of per-round ratios of process
CPU time (wall-clock steps/s are printed too). A round's time runs from the first batch's begin to the end of
training (a callback with no per-batch-end hook, so Keras keeps its asynchronous batch callbacks): fit's own
set-up (data adapter, iterator, callbacks; ~100 ms here, a quarter of a 60-step round) is left out, as it would
dilute the per-step overhead. Arms:

- plain       `model.fit(...)`
- nanguard    `model.fit(..., callbacks=[NanGuard(dir)])`: the default, with the step history (history_size=256:
              gradient/weight/update norms and max |y_pred| measured in the step) and the window (window=16: a
              device-side copy of the weights and optimizer state every 16 steps, the batches kept by reference)
- nanguard-h0 `NanGuard(dir, history_size=0)`: the guard without the history (no history ops in the step)
- nanguard-w0 `NanGuard(dir, window=0)`: the guard without the window (the nanguard vs nanguard-w0 gap is what
              the window costs)
- py-loop     the hand-written way to keep the batch: `for x, y in ds:` in Python, keep (x, y), a tf.function
              step that checks the gradients and applies the update under tf.cond, read the flag per step
- check_numerics / dump (FULL_HEALTH): cannot be switched off in-process, so each runs in its own subprocess,
  which measures plain rounds first and then the anchor's rounds (ratio of medians in that subprocess).

Usage: python bench/guard_overhead.py [--rounds 60] [--steps 60] [--no-anchors]
The floor: NanGuard at most 3% slower than plain (median of interleaved rounds); within ~2% of 1.0 means no
measurable overhead on these shared 2-core machines. The history's own target: nanguard (history on) within 2% of
plain; the nanguard vs nanguard-h0 gap is what the history costs.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

BATCH = 64
FLOOR = 1.03
HISTORY_TARGET = 1.02


def setup_tf():
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    return tf


def make_data(steps: int):
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.random((BATCH * steps, 256), dtype="float32")
    y = rng.integers(0, 10, BATCH * steps)
    return x, y


def make_model():
    import keras

    keras.utils.set_random_seed(1)
    model = keras.Sequential(
        [
            keras.Input((256,)),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(10),
        ]
    )
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def timed(fn) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - cpu, time.perf_counter() - wall


class StepTimer:
    """Times a fit from its first batch to its end (set-up excluded). Built lazily: keras is imported late."""

    def __new__(cls):
        import keras

        class _Timer(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                if batch == 0:
                    self.start = (time.process_time(), time.perf_counter())

            def on_train_end(self, logs=None):
                self.elapsed = (time.process_time() - self.start[0], time.perf_counter() - self.start[1])

        return _Timer()


def timed_fit(model, x, y, callbacks) -> tuple[float, float]:
    timer = StepTimer()
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False, callbacks=[*callbacks, timer])
    return timer.elapsed


def make_py_loop(model, x, y):
    """The hand-written alternative: Python iterates the dataset and keeps each batch; the step checks grads."""
    tf = setup_tf()
    loss_fn = model.loss
    optimizer = model.optimizer
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)

    @tf.function
    def step(bx, by):
        with tf.GradientTape() as tape:
            loss = loss_fn(by, model(bx, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        ok = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads]) & tf.math.is_finite(loss)

        def apply():
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return tf.constant(True)

        return tf.cond(ok, apply, lambda: tf.constant(False))

    def run():
        kept = None
        for bx, by in dataset:
            kept = (bx, by)
            if not bool(step(bx, by)):
                raise RuntimeError(f"non-finite step; batch kept: {kept[0].shape}")

    return run


def interleaved(rounds: int, steps: int) -> dict:
    setup_tf()
    import numpy as np

    from pyadapter.capture.guard import NanGuard

    x, y = make_data(steps)
    model = make_model()
    initial = model.get_weights()
    capture_dir = tempfile.mkdtemp(prefix="nanlens-bench-")  # stays empty unless the model goes non-finite
    guard = NanGuard(capture_dir, verbose=True)
    guard_h0 = NanGuard(capture_dir, verbose=True, history_size=0)
    guard_w0 = NanGuard(capture_dir, verbose=True, window=0)

    py_loop = make_py_loop(model, x, y)
    arms = {
        "plain": lambda: timed_fit(model, x, y, []),
        "nanguard": lambda: timed_fit(model, x, y, [guard]),
        "nanguard-h0": lambda: timed_fit(model, x, y, [guard_h0]),
        "nanguard-w0": lambda: timed_fit(model, x, y, [guard_w0]),
        "py-loop": lambda: timed(py_loop),
    }
    for fn in arms.values():  # trace everything once
        model.set_weights(initial)
        fn()
    cpu = {name: [] for name in arms}
    wall = {name: [] for name in arms}
    for index in range(rounds):
        order = list(arms)
        if index % 2:
            order.reverse()  # ABBA over consecutive rounds
        for name in order:
            model.set_weights(initial)
            c, w = arms[name]()
            cpu[name].append(c)
            wall[name].append(w)
    if guard.failures or guard_h0.failures or guard_w0.failures:
        raise RuntimeError(
            f"the benchmark model went non-finite (see {capture_dir}); numbers would be meaningless"
        )
    shutil.rmtree(capture_dir, ignore_errors=True)
    result = {}
    for name in arms:
        ratios = [a / b for a, b in zip(cpu[name], cpu["plain"], strict=True)]
        result[name] = {
            "steps_per_s_wall": steps / statistics.median(wall[name]),
            "steps_per_s_cpu": steps / statistics.median(cpu[name]),
            "ratio_cpu_median": statistics.median(ratios),
            "ratio_cpu_q1_q3": [float(np.percentile(ratios, 25)), float(np.percentile(ratios, 75))],
            "ratio_wall_median": statistics.median(
                [a / b for a, b in zip(wall[name], wall["plain"], strict=True)]
            ),
        }
    return result


def anchor_subprocess(kind: str, rounds: int, steps: int) -> dict:
    """Run in a child: plain rounds, then switch the anchor on (irreversible) and run its rounds."""
    tf = setup_tf()
    x, y = make_data(steps)
    model = make_model()
    initial = model.get_weights()

    def fit():
        return timed_fit(model, x, y, [])

    model.set_weights(initial)
    fit()
    plain_cpu, plain_wall = [], []
    for _ in range(rounds):
        model.set_weights(initial)
        c, w = fit()
        plain_cpu.append(c)
        plain_wall.append(w)
    if kind == "check_numerics":
        tf.debugging.enable_check_numerics()
    else:
        dump_dir = tempfile.mkdtemp(prefix="nanlens-bench-dump-")
        atexit.register(shutil.rmtree, dump_dir, True)  # registered first: runs after tfdbg's own close
        tf.debugging.experimental.enable_dump_debug_info(
            dump_dir, tensor_debug_mode="FULL_HEALTH", circular_buffer_size=-1
        )
    model.train_function = None  # retrace under the instrumentation
    model.set_weights(initial)
    fit()
    anchor_cpu, anchor_wall = [], []
    for _ in range(rounds):
        model.set_weights(initial)
        c, w = fit()
        anchor_cpu.append(c)
        anchor_wall.append(w)
    return {
        "plain_steps_per_s_wall": steps / statistics.median(plain_wall),
        "steps_per_s_wall": steps / statistics.median(anchor_wall),
        "steps_per_s_cpu": steps / statistics.median(anchor_cpu),
        "ratio_cpu_median": statistics.median(anchor_cpu) / statistics.median(plain_cpu),
        "ratio_wall_median": statistics.median(anchor_wall) / statistics.median(plain_wall),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--anchor-rounds", type=int, default=8)
    parser.add_argument("--no-anchors", action="store_true")
    parser.add_argument("--anchor", choices=["check_numerics", "dump"], help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = parser.parse_args(argv)
    if args.anchor:
        print(json.dumps(anchor_subprocess(args.anchor, args.anchor_rounds, args.steps)))
        return 0

    results = interleaved(args.rounds, args.steps)
    if not args.no_anchors:
        for kind in ("check_numerics", "dump"):
            child = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--anchor",
                    kind,
                    "--anchor-rounds",
                    str(args.anchor_rounds),
                    "--steps",
                    str(args.steps),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if child.returncode != 0:
                results[kind] = {
                    "error": child.stderr.strip().splitlines()[-1] if child.stderr.strip() else "failed"
                }
            else:
                results[kind] = json.loads(child.stdout.strip().splitlines()[-1])
    if args.json:
        print(json.dumps(results, indent=1))
    else:
        print(f"Keras MLP fit, CPU, 1 intra/1 inter-op thread, batch {BATCH}, {args.steps} steps per round")
        print(
            f"in-process arms: {args.rounds} rounds, ABBA order, same initial weights, shuffle off;"
            " ratio = median of per-round CPU-time ratios to plain"
        )
        print(f"{'arm':16} {'steps/s (wall)':>15} {'ratio cpu':>10} {'q1-q3':>14} {'ratio wall':>11}")
        for name, r in results.items():
            if "error" in r:
                print(f"{name:16} error: {r['error']}")
                continue
            q = r.get("ratio_cpu_q1_q3")
            spread = f"{q[0]:.3f}-{q[1]:.3f}" if q else "(subprocess)"
            print(
                f"{name:16} {r['steps_per_s_wall']:15.1f} {r['ratio_cpu_median']:10.3f} {spread:>14} "
                f"{r['ratio_wall_median']:11.3f}"
            )
        verdict = "PASS" if results["nanguard"]["ratio_cpu_median"] <= FLOOR else "FAIL"
        print(f"floor: nanguard <= {FLOOR:.2f} x plain -> {verdict}")
        history = "met" if results["nanguard"]["ratio_cpu_median"] <= HISTORY_TARGET else "missed"
        print(
            f"history target: nanguard (history_size=256) <= {HISTORY_TARGET:.2f} x plain -> {history}"
            f" (without the history: {results['nanguard-h0']['ratio_cpu_median']:.3f})"
        )
        print(
            f"window: nanguard (window=16) {results['nanguard']['ratio_cpu_median']:.3f} x plain, without the window"
            f" (window=0) {results['nanguard-w0']['ratio_cpu_median']:.3f}"
        )
    return 0 if results["nanguard"]["ratio_cpu_median"] <= FLOOR else 1


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main())
