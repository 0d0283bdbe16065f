"""Bench workload for bench/scale.py: three model families at any size, and a guarded training run that fails.

Families (all take float features; `Probe`, an RMS normalisation without epsilon, is the first layer of each):

  mlp          Dense(width) x 3 + Dense(10) on 256 features; params ~ 2 width^2
  convnet      ResNet-style on 16x16x3 images: stem conv, three stages (width, 2 width, 4 width), each a stride-2
               downsampling conv (not in the first stage) and one residual block of two 3x3 convs; params ~ 470 width^2
  transformer  encoder on 32 tokens of 16 features: Dense(d) + 4 blocks of (pre-norm multi-head attention, d/64
               heads, and a 4d MLP), mean-pooled; params ~ 48 d^2

Run as a program (what `bench/scale.py` does for capture and locate):

    python bench/programs/scale_train.py FAMILY WIDTH CAPTURE_DIR [--fail-at N] [--result FILE]

trains with `NanGuard(CAPTURE_DIR, locate=False)`; batch N (default 3) holds one all-zero sample, so `Probe`'s rsqrt
makes Inf there (the line marked ORIGIN) and the guard stops. Then trains on with `NanGuard(CAPTURE_DIR)` (locate at
the scene on) until the same batch fails again. The timing of the guard's handling of each failing step (from its
flag to a complete bundle) and the peak RSS during it are written to FILE as JSON.
"""

from __future__ import annotations

import json
import sys
import time

import keras
import numpy as np
import tensorflow as tf

BATCH = {"mlp": 64, "convnet": 8, "transformer": 8}
FEATURES = 256
IMAGE = (16, 16, 3)
TOKENS, TOKEN_FEATURES = 32, 16


@keras.saving.register_keras_serializable(package="nanlens_bench")
class Probe(keras.layers.Layer):
    """RMS normalisation over the last axis, written without an epsilon (the bug)."""

    def call(self, x):
        return x * tf.math.rsqrt(tf.reduce_mean(tf.square(x), axis=-1, keepdims=True))  # ORIGIN


def mlp(width: int) -> keras.Model:
    return keras.Sequential([
        keras.Input((FEATURES,)),
        Probe(),
        keras.layers.Dense(width, activation="relu"),
        keras.layers.Dense(width, activation="relu"),
        keras.layers.Dense(width, activation="relu"),
        keras.layers.Dense(10),
    ])


def convnet(width: int) -> keras.Model:
    layers = keras.layers

    def block(x, channels):
        y = layers.Conv2D(channels, 3, padding="same", activation="relu")(x)
        y = layers.Conv2D(channels, 3, padding="same")(y)
        return layers.ReLU()(layers.Add()([x, y]))

    inputs = keras.Input(IMAGE)
    x = Probe()(inputs)
    x = layers.Conv2D(width, 3, padding="same", activation="relu")(x)
    for stage, channels in enumerate((width, 2 * width, 4 * width)):
        if stage:
            x = layers.Conv2D(channels, 3, strides=2, padding="same", activation="relu")(x)
        x = block(x, channels)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(10)(x))


def transformer(d: int, blocks: int = 4) -> keras.Model:
    layers = keras.layers
    heads = max(1, d // 64)
    inputs = keras.Input((TOKENS, TOKEN_FEATURES))
    x = layers.Dense(d)(Probe()(inputs))
    for _ in range(blocks):
        y = layers.LayerNormalization()(x)
        y = layers.MultiHeadAttention(heads, d // heads)(y, y)
        x = layers.Add()([x, y])
        y = layers.LayerNormalization()(x)
        y = layers.Dense(4 * d, activation="gelu")(y)
        x = layers.Add()([x, layers.Dense(d)(y)])
    x = layers.GlobalAveragePooling1D()(layers.LayerNormalization()(x))
    return keras.Model(inputs, layers.Dense(10)(x))


BUILDERS = {"mlp": mlp, "convnet": convnet, "transformer": transformer}


def make_model(family: str, width: int) -> keras.Model:
    keras.utils.set_random_seed(1)
    model = BUILDERS[family](width)
    model.compile(keras.optimizers.Adam(1e-4), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def make_data(family: str, steps: int, zero_batch: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    batch = BATCH[family]
    shape = {"mlp": (FEATURES,), "convnet": IMAGE, "transformer": (TOKENS, TOKEN_FEATURES)}[family]
    x = rng.standard_normal((batch * steps, *shape), dtype="float32")
    y = rng.integers(0, 10, batch * steps)
    if zero_batch is not None:
        x[zero_batch * batch] = 0.0  # one all-zero sample: Probe divides by its zero RMS
    return x, y


def main(argv: list[str]) -> None:
    import argparse

    from pyadapter import NanGuard

    parser = argparse.ArgumentParser()
    parser.add_argument("family", choices=sorted(BUILDERS))
    parser.add_argument("width", type=int)
    parser.add_argument("capture_dir")
    parser.add_argument("--fail-at", type=int, default=3)
    parser.add_argument("--result")
    args = parser.parse_args(argv)

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    model = make_model(args.family, args.width)
    x, y = make_data(args.family, args.fail_at + 2, zero_batch=args.fail_at)

    # Bench instrumentation: time the guard's handling of the failing step and the peak RSS during it.
    timings: dict = {}
    after_step = NanGuard._after_step

    def timed_after_step(self, function, verdict, *rest, **options):
        if bool(verdict.ok):
            return after_step(self, function, verdict, *rest, **options)
        rss_before = _status_kb("VmRSS")
        _reset_peak_rss()
        started, cpu = time.perf_counter(), time.process_time()
        try:
            return after_step(self, function, verdict, *rest, **options)
        finally:
            timings.update(seconds=time.perf_counter() - started, cpu_seconds=time.process_time() - cpu,
                           rss_before_mb=rss_before / 1024, peak_rss_mb=_status_kb("VmHWM") / 1024)

    NanGuard._after_step = timed_after_step
    results: dict = {"params": int(model.count_params())}
    # First without the locate at the scene (the capture alone), then with it: the same batch fails again.
    for name, locate in (("capture", False), ("locate", True)):
        timings = {}
        guard = NanGuard(args.capture_dir, locate=locate, run_name=f"{args.family}-{name}")
        model.fit(x, y, batch_size=BATCH[args.family], epochs=1, shuffle=False, verbose=0, callbacks=[guard])
        timings["bundle"] = None if guard.last_bundle is None else str(guard.last_bundle)
        timings["error"] = guard.failures[-1].bundle_error if guard.failures else "no failure"
        results[name] = timings
    if args.result:
        with open(args.result, "w") as handle:
            json.dump(results, handle)


def _status_kb(field: str) -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return float(line.split()[1])
    return float("nan")


def _reset_peak_rss() -> None:
    try:  # Linux: "5" resets VmHWM to the current RSS
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        pass


if __name__ == "__main__":
    main(sys.argv[1:])
