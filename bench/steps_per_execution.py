"""What NanGuard costs under ``compile(steps_per_execution=N)``, next to plain fit, measured in the same run.

NanGuard checks every step and captures the failing step's own batch by running the N steps of an execution as N
calls of its one-step function, so it gives up the dispatch saving that ``steps_per_execution`` buys. This measures
by how much, on a model small enough for dispatch to matter (MLP 16-32-1, batch 32, Adam, CPU, one intra-op and one
inter-op thread): four arms (N = 1 or 8, with or without NanGuard), each an epoch of ``--steps`` steps, in
alternating order for ``--rounds`` rounds after one warm-up round; the figure is the median process CPU time.

Usage: python bench/steps_per_execution.py [--rounds 8] [--steps 400]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()

    import keras
    import numpy as np
    import tensorflow as tf

    from pyadapter import NanGuard

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    rng = np.random.default_rng(0)
    x = rng.random((32 * args.steps, 16), dtype="float32")
    y = rng.random((32 * args.steps, 1), dtype="float32")
    models = {}
    for n in (1, 8):
        model = keras.Sequential(
            [keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)]
        )
        model.compile(optimizer="adam", loss="mse", steps_per_execution=n)
        models[n] = model
    captures = tempfile.mkdtemp(prefix="nanlens-bench-")

    def run(n: int, guarded: bool) -> float:
        callbacks = [NanGuard(captures, verbose=False)] if guarded else []
        started = time.process_time()
        models[n].fit(x, y, batch_size=32, epochs=1, verbose=0, shuffle=False, callbacks=callbacks)
        return time.process_time() - started

    arms = [(1, False), (1, True), (8, False), (8, True)]
    try:
        for arm in arms:
            run(*arm)  # traces
        times: dict[tuple[int, bool], list[float]] = {arm: [] for arm in arms}
        for index in range(args.rounds):
            for arm in arms if index % 2 == 0 else arms[::-1]:
                times[arm].append(run(*arm))
    finally:
        shutil.rmtree(captures, ignore_errors=True)
    median = {arm: statistics.median(values) for arm, values in times.items()}
    for (n, guarded), seconds in median.items():
        label = "NanGuard" if guarded else "plain"
        print(f"steps_per_execution={n} {label:8s} {args.steps / seconds:6.0f} steps/s (CPU)")
    print(f"NanGuard / plain at N=8: {median[(8, True)] / median[(8, False)]:.2f}x")
    print(f"NanGuard / plain at N=1: {median[(1, True)] / median[(1, False)]:.2f}x")


if __name__ == "__main__":
    main()
