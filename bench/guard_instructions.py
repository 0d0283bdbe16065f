"""NanGuard's per-step cost as instructions executed, not seconds: a figure the machine's load does not move.

Fit-level CPU-time ratios on a shared 2-core VM spread by +-2-5% from process to process (bench/scale.py, README),
more than the guard's cost at millisecond steps. valgrind's callgrind counts the instructions every thread executes,
the same on a loaded machine as on a quiet one. Each arm runs in its own process under callgrind with
instrumentation off; one fit traces everything (the guard's functions, the window's copy), then a second fit of
the same model with the same callbacks counts the instructions of steps [START, START + STEPS) only (toggled with
``callgrind_control`` from a callback), and the figure is instructions per step.

What it does not see: time spent waiting on memory. The guard's checks read every gradient and weight once more
per step; at sizes beyond the caches that is bandwidth (README, "Cost against model size"), which bench/scale.py's
CPU-time ratios measure.

Usage (needs valgrind; each arm takes minutes, as valgrind runs the whole program about 50x slower):
    python bench/guard_instructions.py [--family mlp] [--width 640] [--steps 40] [--arms plain,guard,nohistory]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
START = 5  # the first counted step of the second fit (its first steps settle the iterator)
ARMS = {
    "plain": "[]",
    "guard": "[NanGuard(CAPTURES, locate=False)]",
    "nohistory": "[NanGuard(CAPTURES, locate=False, history_size=0)]",
    "nowindow": "[NanGuard(CAPTURES, locate=False, window=0)]",
}

CHILD = """
import os, subprocess, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
sys.path[:0] = [{programs!r}, {repo!r}]
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
import keras
import scale_train
from pyadapter import NanGuard

CAPTURES = {captures!r}
model = scale_train.make_model({family!r}, {width})
x, y = scale_train.make_data({family!r}, {start} + {steps} + 2)
batch = scale_train.BATCH[{family!r}]
callbacks = {arm}


def toggle(state):
    subprocess.run(["callgrind_control", "-i", state, str(os.getpid())], capture_output=True, check=False)


class Count(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.on = False

    def on_train_batch_begin(self, batch, logs=None):
        if self.on and batch == {start}:
            toggle("on")

    def on_train_batch_end(self, batch, logs=None):
        if self.on and batch == {start} + {steps} - 1:
            toggle("off")


count = Count()
for counted in (False, True):  # the first fit traces; the second counts
    count.on = counted
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False, callbacks=[*callbacks, count])
"""


def run_arm(arm: str, family: str, width: int, steps: int, work: Path) -> dict:
    out = work / f"callgrind.{arm}"
    script = work / f"child_{arm}.py"
    script.write_text(
        CHILD.format(
            programs=str(HERE / "programs"),
            repo=str(REPO),
            captures=str(work / "captures"),
            family=family,
            width=width,
            start=START,
            steps=steps,
            arm=ARMS[arm],
        ),
        encoding="utf-8",
    )
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out}",
            sys.executable,
            str(script),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    match = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or match is None:
        raise SystemExit(f"{arm}: valgrind run failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    return {"arm": arm, "instructions": int(match.group(1)), "per_step": int(match.group(1)) / steps}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", default="mlp", choices=("mlp", "convnet", "transformer"))
    parser.add_argument(
        "--width", type=int, default=640, help="the family's width (mlp 640: 1.0M parameters)"
    )
    parser.add_argument("--steps", type=int, default=40, help="steps counted (default 40: two window copies)")
    parser.add_argument(
        "--arms", default="plain,guard,nohistory", help=f"comma-separated, of {', '.join(ARMS)}"
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("guard_instructions: valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    arms = [a for a in args.arms.split(",") if a]
    unknown = [a for a in arms if a not in ARMS]
    if unknown or "plain" not in arms:
        print(
            f"guard_instructions: --arms must include plain and name only {', '.join(ARMS)}", file=sys.stderr
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="nanlens-instructions-") as tmp:
        rows = []
        for arm in arms:
            print(f"guard_instructions: {arm} under callgrind ...", file=sys.stderr, flush=True)
            rows.append(run_arm(arm, args.family, args.width, args.steps, Path(tmp)))
    plain = next(r for r in rows if r["arm"] == "plain")["per_step"]
    print(
        f"{args.family} width {args.width}, steps {START}-{START + args.steps - 1} of a second fit, one thread"
    )
    print(f"{'arm':<10} {'instructions/step':>18} {'vs plain':>9}")
    for row in rows:
        row["ratio"] = row["per_step"] / plain
        print(f"{row['arm']:<10} {row['per_step'] / 1e6:>16.2f}M {row['ratio']:>9.3f}")
    if args.json:
        args.json.write_text(json.dumps({"family": args.family, "width": args.width, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
