"""What NanGuard costs on a recommender-style model: a large embedding table under a small head, trained with SGD,
so each step reads and writes only the rows its batch looks up (a gather, an IndexedSlices gradient, a scatter).

Such a step is cheap next to its table (1M x 16 = 64 MB): anything that reads the whole table once per step costs as
much as the step. The gate reads the rows the update wrote, not the table (`pyadapter.capture.gate_update`); this
bench shows what is left. Method as bench/guard_overhead.py: one model reset to the same weights before every round,
ABBA-ordered rounds of one fit each, timed from the first batch to the end of fit in process CPU time, the median of
per-round ratios against plain fit in the same process. The anchor (tf.debugging.enable_check_numerics, which
cannot be switched off again) runs in a child process: plain rounds there, then its own rounds.

Arms: plain; nanguard (every default: history and window); nanguard-w0 (window=0: what the window's state copies
cost, as the table is copied whole every 64 steps at most); check_numerics.

Usage: python bench/embedding_overhead.py [--vocabulary 1000000] [--rounds 10] [--steps 64] [--no-anchor]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

BATCH, TOKENS, DIMENSION = 32, 8, 16


def setup_tf():
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    return tf


def make_model(vocabulary: int):
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((TOKENS,), dtype="int32"),
            keras.layers.Embedding(vocabulary, DIMENSION),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(1),
        ]
    )
    model.compile(keras.optimizers.SGD(0.05), "mse", jit_compile=False)
    return model


def make_data(vocabulary: int, steps: int):
    import numpy as np

    rng = np.random.default_rng(0)
    tokens = rng.integers(0, vocabulary, size=(BATCH * steps, TOKENS))
    return tokens, rng.integers(0, 2, size=(BATCH * steps, 1)).astype("float32")


def timed_fit(model, x, y, callbacks) -> float:
    import keras

    class Timer(keras.callbacks.Callback):  # first batch's begin to the end of fit: fit's set-up left out
        def on_train_batch_begin(self, batch, logs=None):
            if batch == 0:
                self.start = time.process_time()

        def on_train_end(self, logs=None):
            self.elapsed = time.process_time() - self.start

    timer = Timer()
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False, callbacks=[*callbacks, timer])
    return timer.elapsed


def guard_rounds(vocabulary: int, rounds: int, steps: int) -> dict:
    setup_tf()
    from pyadapter import NanGuard

    model = make_model(vocabulary)
    x, y = make_data(vocabulary, steps)
    arms = {
        "plain": [],
        "nanguard": [NanGuard(tempfile.mkdtemp(prefix="nanlens-bench-"), verbose=False)],
        "nanguard-w0": [NanGuard(tempfile.mkdtemp(prefix="nanlens-bench-"), verbose=False, window=0)],
    }
    initial = model.get_weights()
    for callbacks in arms.values():  # trace each arm, and let the window time its copies
        for _ in range(3):
            timed_fit(model, x, y, callbacks)
    # A round is one whole copy interval at least, so that every round pays the window's copy at the rate a long
    # run does (a 64-step round with copies 150 steps apart would pay it in some rounds and not others).
    steps = max(steps, arms["nanguard"][0].window_copy_every or steps)
    x, y = make_data(vocabulary, steps)
    for callbacks in arms.values():
        timed_fit(model, x, y, callbacks)
    cpu: dict[str, list[float]] = {name: [] for name in arms}
    names = list(arms)
    for index in range(rounds):
        for name in names if index % 2 == 0 else names[::-1]:
            model.set_weights(initial)
            cpu[name].append(timed_fit(model, x, y, arms[name]))
    failures = [f for callbacks in arms.values() for guard in callbacks for f in guard.failures]
    if failures:
        raise RuntimeError(f"the bench model went non-finite: {failures[0]}")
    return {
        "params": int(model.count_params()),
        "steps": steps,
        "plain_ms_per_step": 1000 * statistics.median(cpu["plain"]) / steps,
        "copy_every": arms["nanguard"][0].window_copy_every,
        "ratios": {
            name: statistics.median(a / b for a, b in zip(cpu[name], cpu["plain"], strict=True))
            for name in names[1:]
        },
    }


def anchor_rounds(vocabulary: int, rounds: int, steps: int) -> dict:
    tf = setup_tf()
    model = make_model(vocabulary)
    x, y = make_data(vocabulary, steps)
    initial = model.get_weights()
    timed_fit(model, x, y, [])
    plain = []
    for _ in range(rounds):
        model.set_weights(initial)
        plain.append(timed_fit(model, x, y, []))
    tf.debugging.enable_check_numerics()
    model.train_function = None  # retrace under the instrumentation
    timed_fit(model, x, y, [])
    anchor = []
    for _ in range(rounds):
        model.set_weights(initial)
        anchor.append(timed_fit(model, x, y, []))
    return {"check_numerics": statistics.median(anchor) / statistics.median(plain)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--vocabulary", type=int, default=1_000_000, help="rows of the embedding table")
    parser.add_argument("--rounds", type=int, default=10, help="ABBA rounds per arm")
    parser.add_argument(
        "--steps", type=int, default=64, help="steps per round (one fit; at least the window's copy interval)"
    )
    parser.add_argument("--no-anchor", action="store_true", help="leave out check_numerics")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(anchor_rounds(args.vocabulary, args.rounds, args.steps)))
        return 0
    result = guard_rounds(args.vocabulary, args.rounds, args.steps)
    ratios = dict(result["ratios"])
    if not args.no_anchor:
        child = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                "anchor",
                f"--vocabulary={args.vocabulary}",
                f"--rounds={max(2, args.rounds // 2)}",
                f"--steps={args.steps}",
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=3600,
        )
        if child.returncode != 0:
            print(f"check_numerics anchor failed: {child.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        else:
            ratios.update(json.loads(child.stdout.strip().splitlines()[-1]))
    print(
        f"embedding table {args.vocabulary} x {DIMENSION} + head ({result['params'] / 1e6:.1f}M parameters), SGD, "
        f"batch {BATCH}: plain {result['plain_ms_per_step']:.2f} ms/step (CPU), {args.rounds} rounds of "
        f"{result['steps']} steps (a whole copy interval); the window copied the state every "
        f"{result['copy_every']} steps"
    )
    print(f"{'arm':16} {'CPU time / plain':>16}")
    for name, ratio in ratios.items():
        print(f"{name:16} {ratio:16.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
