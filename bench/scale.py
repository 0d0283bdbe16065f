"""Cost curves against parameter count: guard overhead, capture, locate; three model families at three sizes.

Families and sizes (bench/programs/scale_train.py builds them; batch 64 for the MLP, 8 for the others):

  mlp          256 features -> 3 x Dense(width) -> 10
  convnet      ResNet-style, 16x16x3 images, stages of width, 2 width, 4 width channels
  transformer  encoder, 32 tokens, 4 blocks of multi-head attention (d/64 heads) + 4d MLP

Measured, per family and size, all in this one run:

- guard overhead: NanGuard vs plain `fit`, method of bench/guard_overhead.py (shared/notes/benchmarking.md): one
  model instance per size, reset to the same initial weights before every round, shuffle off, 1 intra/1 inter-op
  thread, many short rounds in ABBA order, the figure is the median of per-round process-CPU-time ratios (a round
  runs from the first batch's begin to the end of fit). A round is 1 to 4 whole copy intervals of the window (the
  interval NanGuard chose, read after a warm-up fit; nearest ~1 s of CPU), so it pays the window's state copies at
  the rate a long run does; sizes whose round is over 2.5 s run half the rounds (at least 12). Each family's rounds
  are split over four child processes, one after the
  other, and pooled: two processes measuring the same model can differ by 2% on this VM (merge_overhead).
- anchors at the smallest size of each family: tf.debugging.enable_check_numerics and a FULL_HEALTH dump
  (tf.debugging.experimental.enable_dump_debug_info), each in its own child: plain rounds, then the anchor's
  rounds, ratio of medians (as bench/guard_overhead.py).
- capture and locate: the program trains with NanGuard until a batch with an all-zero sample makes Probe's rsqrt
  produce Inf. Twice in one process: first `NanGuard(locate=False)`: capture = the guard's handling of the
  failing step (from reading the step's failed flag to a complete bundle on disk), the bundle's size and the peak
  RSS during it (VmHWM reset just before); then `NanGuard(locate=True)`: the guard's total, and the locate at the
  scene as the bundle's manifest states (`located_at_scene.seconds`). Then `nanlens locate BUNDLE --replay` in a
  fresh process (wall time, TensorFlow's import included; the replay's dump size).
- exponents: least-squares slope of log(cost) against log(parameters) per family (1.0 = linear).

Usage:
    python bench/scale.py            # full run (~55 min on 2 cores); writes bench/results/scale.json and PNGs
    python bench/scale.py --from-json bench/results/scale.json   # tables and PNGs of a saved run
    python bench/scale.py --quick    # small sizes, few rounds, anchors and --replay for the MLP only, captures
                                     # of the MLP and one ConvNet: a smoke test (< 3 min); PNGs to a temp folder
Ratios are reported, not asserted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PROGRAM = HERE / "programs" / "scale_train.py"
RESULTS = HERE / "results"
FAMILIES = ("mlp", "convnet", "transformer")
# Widths: ~1M, ~5M and the largest that keeps the full run within minutes on 2 cores.
FULL_WIDTHS = {"mlp": (640, 1600, 4800), "convnet": (48, 104, 224), "transformer": (144, 320, 768)}
QUICK_WIDTHS = {
    "mlp": (64, 256),
    "convnet": (8, 16),
    "transformer": (32,),
}  # quick: one Transformer (its fits trace for ~40 s)


def _python() -> str:
    return sys.executable


def _child(args: list[str], timeout: float) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), str(HERE / "programs"), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [_python(), str(Path(__file__).resolve()), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
        check=False,
    )
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-3:] if proc.stderr.strip() else ["failed"]
        return {"error": " | ".join(tail)}
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------ children (one TF each)


def _setup_tf():
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    return tf


def _timer():
    import keras

    class StepTimer(keras.callbacks.Callback):  # first batch's begin to the end of fit: set-up left out
        def on_train_batch_begin(self, batch, logs=None):
            if batch == 0:
                self.start = (time.process_time(), time.perf_counter())

        def on_train_end(self, logs=None):
            self.elapsed = (time.process_time() - self.start[0], time.perf_counter() - self.start[1])

    return StepTimer()


def _fit(model, x, y, batch, callbacks) -> tuple[float, float]:
    timer = _timer()
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False, callbacks=[*callbacks, timer])
    return timer.elapsed


def _cpu_per_step(model, family) -> float:
    import scale_train

    x, y = scale_train.make_data(family, 4)
    batch = scale_train.BATCH[family]
    _fit(model, x, y, batch, [])  # trace
    cpu, _ = _fit(model, x, y, batch, [])
    return max(cpu / 4, 1e-6)


def _steps_for(model, family, target_s: float, lo: int, hi: int) -> int:
    return max(lo, min(hi, round(target_s / _cpu_per_step(model, family))))


WINDOW = 16  # NanGuard's default window (pyadapter.capture.window.DEFAULT_SIZE)
MIN_LONG_ROUNDS = 12
# The guard-overhead rounds of a family are split over this many child processes (merge_overhead says why).
OVERHEAD_PROCESSES = 4


def child_overhead(
    family: str, widths: list[int], rounds: int, round_s: float, min_long_rounds: int = MIN_LONG_ROUNDS
) -> dict:
    _setup_tf()
    import numpy as np
    import scale_train

    from pyadapter import NanGuard

    out = []
    for width in widths:
        model = scale_train.make_model(family, width)
        initial = model.get_weights()
        # Whole copy intervals per round: NanGuard copies the training state once every `window_copy_every` steps
        # (its window of 16, spaced out to as many as 64 where a copy would cost over 0.5% of the steps), and a long
        # run pays that once per interval; a round of 3 steps would pay it for none or all of them. A warm-up fit
        # long enough for the guard to time its copies gives the interval; a round is then 1 to 4 of them.
        step_s = _cpu_per_step(model, family)
        batch = scale_train.BATCH[family]
        capture_dir = tempfile.mkdtemp(prefix="nanlens-scale-")
        guard = NanGuard(capture_dir, verbose=True)
        x, y = scale_train.make_data(family, 3 * WINDOW)
        _fit(model, x, y, batch, [guard])
        interval = guard.window_copy_every or WINDOW
        intervals = max(1, min(4, round(round_s / step_s / interval)))
        steps = intervals * interval
        rounds_here = rounds if steps * step_s <= 2.5 * round_s else max(min_long_rounds, rounds // 2)
        x, y = scale_train.make_data(family, steps)
        arms = {"plain": [], "nanguard": [guard]}
        for callbacks in arms.values():
            model.set_weights(initial)
            _fit(model, x, y, batch, callbacks)
        cpu = {name: [] for name in arms}
        wall = {name: [] for name in arms}
        for index in range(rounds_here):
            order = ["plain", "nanguard"] if index % 2 == 0 else ["nanguard", "plain"]
            for name in order:
                model.set_weights(initial)
                c, w = _fit(model, x, y, batch, arms[name])
                cpu[name].append(c)
                wall[name].append(w)
        if guard.failures:
            raise RuntimeError(f"{family} {width} went non-finite (see {capture_dir})")
        shutil.rmtree(capture_dir, ignore_errors=True)
        ratios = [a / b for a, b in zip(cpu["nanguard"], cpu["plain"], strict=True)]
        out.append(
            {
                "family": family,
                "width": width,
                "params": int(model.count_params()),
                "steps": steps,
                "copy_every": interval,
                "rounds": rounds_here,
                "plain_s_per_step": statistics.median(cpu["plain"]) / steps,
                "nanguard_s_per_step": statistics.median(cpu["nanguard"]) / steps,
                "ratio": statistics.median(ratios),
                "q1_q3": [float(np.percentile(ratios, 25)), float(np.percentile(ratios, 75))],
                "ratio_wall": statistics.median(
                    [a / b for a, b in zip(wall["nanguard"], wall["plain"], strict=True)]
                ),
                # Per round, for merging the processes' rounds (merge_overhead).
                "round_ratios": ratios,
                "round_wall_ratios": [a / b for a, b in zip(wall["nanguard"], wall["plain"], strict=True)],
                "round_plain_s": cpu["plain"],
                "round_nanguard_s": cpu["nanguard"],
            }
        )
        del model
    return {"sizes": out}


def merge_overhead(parts: list[dict]) -> dict:
    """One family's overhead from the child processes that measured it: every size's rounds pooled, the ratio the
    median over all of them, and each process's own median kept (``process_ratios``) to show their spread.

    Why several processes: on this VM the rounds of one process agree closely, but two processes measuring the
    same model can sit 2% apart (ConvNet 1M, interleaved steps: 1.039 with quartiles 1.033-1.044 in one, 1.015
    with 1.007-1.022 in the next), as if each process drew its own placement of threads and buffers. One process
    per family made that draw part of the figure."""
    import numpy as np

    failed = [p for p in parts if "error" in p]
    if failed:
        return failed[
            0
        ]  # a process that failed leaves the family's figure incomplete: say so, do not pool the rest
    merged = []
    for sizes in zip(*(p["sizes"] for p in parts), strict=True):
        ratios = [r for s in sizes for r in s["round_ratios"]]
        # Each process sizes its rounds from the copy interval its own guard chose: per step before pooling.
        plain = [t / s["steps"] for s in sizes for t in s["round_plain_s"]]
        guarded = [t / s["steps"] for s in sizes for t in s["round_nanguard_s"]]
        merged.append(
            {
                **{k: v for k, v in sizes[0].items() if not k.startswith("round_")},
                "copy_every": int(statistics.median(s["copy_every"] for s in sizes)),
                "steps": int(statistics.median(s["steps"] for s in sizes)),
                "rounds": len(ratios),
                "processes": len(sizes),
                "process_ratios": [s["ratio"] for s in sizes],
                "plain_s_per_step": statistics.median(plain),
                "nanguard_s_per_step": statistics.median(guarded),
                "ratio": statistics.median(ratios),
                "q1_q3": [float(np.percentile(ratios, 25)), float(np.percentile(ratios, 75))],
                "ratio_wall": statistics.median(r for s in sizes for r in s["round_wall_ratios"]),
            }
        )
    return {"sizes": merged}


def child_anchor(family: str, width: int, kind: str, rounds: int, round_s: float) -> dict:
    tf = _setup_tf()
    import scale_train

    model = scale_train.make_model(family, width)
    initial = model.get_weights()
    steps = _steps_for(model, family, round_s, 3, 60)
    x, y = scale_train.make_data(family, steps)
    batch = scale_train.BATCH[family]

    def measure() -> list[float]:
        model.set_weights(initial)
        _fit(model, x, y, batch, [])
        times = []
        for _ in range(rounds):
            model.set_weights(initial)
            times.append(_fit(model, x, y, batch, [])[0])
        return times

    plain = measure()
    dump_dir = None
    if kind == "check_numerics":
        tf.debugging.enable_check_numerics()
    else:
        dump_dir = tempfile.mkdtemp(prefix="nanlens-scale-dump-")
        tf.debugging.experimental.enable_dump_debug_info(
            dump_dir, tensor_debug_mode="FULL_HEALTH", circular_buffer_size=-1
        )
    model.train_function = None  # retrace under the instrumentation
    anchored = measure()
    result = {
        "family": family,
        "width": width,
        "params": int(model.count_params()),
        "kind": kind,
        "steps": steps,
        "rounds": rounds,
        "plain_s_per_step": statistics.median(plain) / steps,
        "anchor_s_per_step": statistics.median(anchored) / steps,
        "ratio": statistics.median(anchored) / statistics.median(plain),
    }
    if dump_dir is not None:
        tf.debugging.experimental.disable_dump_debug_info()
        shutil.rmtree(dump_dir, ignore_errors=True)
    return result


def _tree_bytes(path: str | Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def capture_and_locate(family: str, width: int, replay: bool, workdir: Path, timeout: float) -> dict:
    """Runs the program (capture without, then with, the locate at the scene) and `nanlens locate --replay`."""
    capture_dir = workdir / f"{family}-{width}"
    result_file = workdir / f"{family}-{width}.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    started = time.perf_counter()
    proc = subprocess.run(
        [
            _python(),
            str(PROGRAM.relative_to(REPO)),
            family,
            str(width),
            str(capture_dir),
            "--result",
            str(result_file),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=timeout,
        check=False,
    )
    out: dict = {"family": family, "width": width, "program_s": time.perf_counter() - started}
    if proc.returncode != 0 or not result_file.exists():
        tail = proc.stderr.strip().splitlines()[-3:] if proc.stderr.strip() else ["failed"]
        return {**out, "error": " | ".join(tail)}
    runs = json.loads(result_file.read_text())
    out["params"] = runs["params"]
    capture, located = runs["capture"], runs["locate"]
    for name, run in (("capture", capture), ("scene", located)):
        if run.get("error") or not run.get("bundle"):
            return {**out, "error": f"{name}: {run.get('error') or 'no bundle'}"}
    out["capture_s"] = capture["seconds"]
    out["capture_cpu_s"] = capture["cpu_seconds"]
    out["capture_rss_before_mb"] = capture["rss_before_mb"]
    out["capture_peak_rss_mb"] = capture["peak_rss_mb"]
    out["bundle_bytes"] = _tree_bytes(capture["bundle"])
    out["with_locate_s"] = located["seconds"]
    manifest = json.loads((Path(located["bundle"]) / "manifest.json").read_text())
    scene = manifest.get("located_at_scene") or {}
    out["scene_s"] = scene.get("seconds")
    out["scene_origin"] = scene.get("origin") or scene.get("error")
    out["scene_peak_rss_mb"] = located["peak_rss_mb"]
    if replay:
        dump_dir = workdir / f"{family}-{width}-replay-dump"
        started = time.perf_counter()
        proc = subprocess.run(
            [
                _python(),
                "-m",
                "pyadapter",
                "locate",
                capture["bundle"],
                "--replay",
                "--json",
                "--dump-dir",
                str(dump_dir),
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=env,
            timeout=timeout,
            check=False,
        )
        out["replay_s"] = time.perf_counter() - started
        out["replay_dump_bytes"] = _tree_bytes(dump_dir) if dump_dir.exists() else None
        shutil.rmtree(dump_dir, ignore_errors=True)
        try:
            origin = json.loads(proc.stdout).get("origin") or {}
            out["replay_origin"] = f"{Path(origin.get('file', '?')).name}:{origin.get('line')}"
        except (json.JSONDecodeError, AttributeError):
            out["replay_origin"] = (
                f"error (exit {proc.returncode}): " + (proc.stderr.strip().splitlines() or [""])[-1]
            )
    shutil.rmtree(capture_dir, ignore_errors=True)
    return out


# ------------------------------------------------------------------------------------------------ report


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of log y against log x (the exponent of y ~ x^k)."""
    pts = [(math.log(x), math.log(y)) for x, y in points if x and y and x > 0 and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    var = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / var if var else None


def _fmt_params(n: float) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}k"


def _fmt(value, spec: str, missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


METRICS = {  # key: (title, unit, table format)
    "plain_s_per_step": ("plain fit, CPU s/step", "s", ".4f"),
    "nanguard_s_per_step": ("NanGuard fit, CPU s/step", "s", ".4f"),
    "capture_s": ("capture: failing step to complete bundle", "s", ".2f"),
    "bundle_bytes": ("bundle size", "bytes", ".0f"),
    "capture_extra_rss_mb": ("peak RSS during capture above RSS before it", "MB", ".0f"),
    "scene_s": ("locate at the scene", "s", ".2f"),
    "replay_s": ("nanlens locate BUNDLE --replay (fresh process)", "s", ".1f"),
}


def report(data: dict, picture_dir: Path | None) -> None:
    overhead = [row for fam in data["overhead"].values() for row in fam.get("sizes", [])]
    print(
        f"\n== guard overhead (NanGuard / plain, median of per-round CPU-time ratios, ABBA; "
        f"{data['conditions']})"
    )
    print(
        f"{'family':12} {'params':>8} {'steps':>5} {'copy every':>10} {'rounds':>6} {'plain s/step':>12} "
        f"{'ratio':>7} {'q1-q3':>13} {'wall':>6}  each process"
    )
    for fam, result in data["overhead"].items():
        if "error" in result:
            print(f"{fam:12} error: {result['error']}")
    for r in overhead:
        each = " ".join(f"{x:.3f}" for x in r.get("process_ratios", []))
        print(
            f"{r['family']:12} {_fmt_params(r['params']):>8} {r['steps']:5d} {r.get('copy_every', WINDOW):10d} "
            f"{r['rounds']:6d} {r['plain_s_per_step']:12.4f} {r['ratio']:7.3f} "
            f"{r['q1_q3'][0]:6.3f}-{r['q1_q3'][1]:.3f} {r['ratio_wall']:6.3f}  {each}"
        )
    print("\n== anchors at the smallest size (anchor / plain in the same child, ratio of medians)")
    print(f"{'family':12} {'params':>8} {'anchor':16} {'s/step':>8} {'ratio':>7}")
    for a in data["anchors"]:
        if "error" in a:
            print(f"{a.get('family', '?'):12} {'':>8} {a.get('kind', '?'):16} error: {a['error']}")
            continue
        print(
            f"{a['family']:12} {_fmt_params(a['params']):>8} {a['kind']:16} {a['anchor_s_per_step']:8.4f} "
            f"{a['ratio']:7.2f}"
        )
    print("\n== capture and locate (the program's failing step; times in s, sizes in MB)")
    print(
        f"{'family':12} {'params':>8} {'capture':>8} {'bundle':>8} {'RSS before':>10} {'peak':>7} "
        f"{'scene':>7} {'guard+loc':>9} {'replay':>7} {'dump':>7}  origin (scene / replay)"
    )
    for c in data["capture"]:
        if "error" in c:
            print(f"{c['family']:12} {c['width']:>8} error: {c['error']}")
            continue
        dump = c.get("replay_dump_bytes")
        print(
            f"{c['family']:12} {_fmt_params(c['params']):>8} {c['capture_s']:8.2f} {c['bundle_bytes'] / 1e6:8.1f} "
            f"{c['capture_rss_before_mb']:10.0f} {c['capture_peak_rss_mb']:7.0f} {_fmt(c['scene_s'], '7.2f'):>7} "
            f"{c['with_locate_s']:9.2f} {_fmt(c.get('replay_s'), '7.1f'):>7} "
            f"{_fmt(None if dump is None else dump / 1e6, '7.1f'):>7}  "
            f"{_origin(c.get('scene_origin'))} / {c.get('replay_origin', '-')}"
        )

    rows = _rows(data)
    print("\n== exponents: slope of log(cost) vs log(parameters), per family (1.0 = linear)")
    print(f"{'cost':48} " + " ".join(f"{fam:>11}" for fam in FAMILIES))
    data["exponents"] = {}
    for key, (title, _unit, _spec) in METRICS.items():
        ks = {fam: slope([(r["params"], r.get(key)) for r in rows if r["family"] == fam]) for fam in FAMILIES}
        data["exponents"][key] = ks
        print(f"{title:48} " + " ".join(f"{_fmt(ks[fam], '.2f'):>11}" for fam in FAMILIES))
    if picture_dir is not None:
        pictures(data, rows, picture_dir)


def _origin(origin) -> str:
    if isinstance(origin, dict):
        return f"{Path(str(origin.get('file'))).name}:{origin.get('line')} {origin.get('op')}"
    return str(origin)


def _rows(data: dict) -> list[dict]:
    """One row per (family, size) joining overhead and capture results."""
    rows: dict[tuple, dict] = {}
    for fam in data["overhead"].values():
        for r in fam.get("sizes", []):
            rows.setdefault((r["family"], r["width"]), {}).update(r)
    for c in data["capture"]:
        if "error" not in c:
            row = rows.setdefault((c["family"], c["width"]), {})
            row.update(c)
            row["capture_extra_rss_mb"] = max(c["capture_peak_rss_mb"] - c["capture_rss_before_mb"], 0.5)
    return [r for r in rows.values() if "params" in r]


def pictures(data: dict, rows: list[dict], folder: Path) -> None:
    import plot_png

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    series = {}
    for fam in FAMILIES:
        fam_rows = sorted(
            (r for r in rows if r["family"] == fam and "plain_s_per_step" in r), key=lambda r: r["params"]
        )
        series[f"{fam} plain"] = [(r["params"], r["plain_s_per_step"]) for r in fam_rows]
        series[f"{fam} nanguard"] = [(r["params"], r["nanguard_s_per_step"]) for r in fam_rows]
    anchors = {
        f"{a['kind']} ({a['family']}) x{a['ratio']:.1f}": (a["params"], a["anchor_s_per_step"])
        for a in data["anchors"]
        if "error" not in a
    }
    path = folder / "scale_guard.png"
    plot_png.loglog_png(
        str(path), "Guard: CPU seconds per training step", "parameters", "CPU s per step", series, anchors
    )
    written.append(path)
    for key, name in (
        ("capture_s", "capture"),
        ("bundle_bytes", "bundle_size"),
        ("capture_extra_rss_mb", "capture_rss"),
        ("scene_s", "locate_scene"),
        ("replay_s", "locate_replay"),
    ):
        title, unit, _ = METRICS[key]
        series = {}
        for fam in FAMILIES:
            pts = sorted((r["params"], r[key]) for r in rows if r["family"] == fam and r.get(key))
            if pts:
                k = data["exponents"][key][fam]
                series[f"{fam} (k={_fmt(k, '.2f')})"] = pts
        if not series:
            continue
        path = folder / f"scale_{name}.png"
        plot_png.loglog_png(str(path), title, "parameters", unit, series, {})
        written.append(path)
    print("\npictures: " + ", ".join(str(p) for p in written))


# ------------------------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="small sizes, few rounds (a smoke test, < 3 min)"
    )
    parser.add_argument("--rounds", type=int, help="ABBA rounds per size (default 24; quick 2)")
    parser.add_argument("--anchor-rounds", type=int, help="rounds per anchor arm (default 6; quick 2)")
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--no-anchors", action="store_true")
    parser.add_argument("--out", help="JSON results (default bench/results/scale.json; quick: a temp folder)")
    parser.add_argument(
        "--pictures", help="folder for the PNGs (default bench/results; quick: a temp folder)"
    )
    parser.add_argument(
        "--from-json", metavar="FILE", help="print the tables and draw the pictures of a saved run"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        spec = json.loads(args.spec)
        result = child_overhead(**spec) if args.child == "overhead" else child_anchor(**spec)
        print(json.dumps(result))
        return 0

    if args.from_json:
        data = json.loads(Path(args.from_json).read_text())
        report(data, Path(args.pictures) if args.pictures else RESULTS)
        return 0
    quick = args.quick
    widths = QUICK_WIDTHS if quick else FULL_WIDTHS
    rounds = args.rounds or (2 if quick else 24)
    anchor_rounds = args.anchor_rounds or (2 if quick else 6)
    round_s = 0.2 if quick else 1.0
    families = [f for f in args.families.split(",") if f]
    scratch = Path(tempfile.mkdtemp(prefix="nanlens-scale-"))
    out_path = Path(args.out) if args.out else (scratch / "scale.json" if quick else RESULTS / "scale.json")
    picture_dir = Path(args.pictures) if args.pictures else (scratch if quick else RESULTS)
    load = os.getloadavg()[0]
    data: dict = {
        "conditions": f"{os.cpu_count()} CPUs, load {load:.1f} at start, 1 intra/1 inter-op TF thread, "
        f"{'quick' if quick else 'full'} run",
        "overhead": {},
        "anchors": [],
        "capture": [],
    }
    started = time.perf_counter()
    timeout = 600 if quick else 3600
    processes = 1 if quick else OVERHEAD_PROCESSES
    for fam in families:
        parts = []
        for index in range(processes):
            print(
                f"[{time.perf_counter() - started:6.0f} s] overhead {fam} {list(widths[fam])}"
                f" (process {index + 1} of {processes})",
                flush=True,
            )
            spec = {
                "family": fam,
                "widths": list(widths[fam]),
                "rounds": math.ceil(rounds / processes),
                "round_s": round_s,
                # quick: every size its few rounds (a smoke test; 12 rounds of the Transformer took 3 of its minutes)
                "min_long_rounds": rounds if quick else math.ceil(MIN_LONG_ROUNDS / processes),
            }
            parts.append(_child(["--child", "overhead", "--spec", json.dumps(spec)], timeout))
        data["overhead"][fam] = merge_overhead(parts)
    if not args.no_anchors:
        for fam in families[:1] if quick else families:  # quick: the first family's anchors only
            for kind in ("check_numerics", "dump"):
                print(
                    f"[{time.perf_counter() - started:6.0f} s] anchor {kind} {fam} {widths[fam][0]}",
                    flush=True,
                )
                spec = {
                    "family": fam,
                    "width": widths[fam][0],
                    "kind": kind,
                    "rounds": anchor_rounds,
                    "round_s": round_s,
                }
                result = _child(["--child", "anchor", "--spec", json.dumps(spec)], timeout)
                data["anchors"].append({"family": fam, "kind": kind, **result})
    for fam in families:
        for index, width in enumerate(widths[fam]):
            if quick and (fam == "transformer" or (fam != families[0] and index)):
                continue  # quick: the first family's sizes, one of the next; the Transformer's locate alone is ~10 s
            replay = not quick or (index == 0 and fam == families[0])
            print(
                f"[{time.perf_counter() - started:6.0f} s] capture/locate {fam} {width}"
                f"{' + locate --replay' if replay else ''}",
                flush=True,
            )
            data["capture"].append(capture_and_locate(fam, width, replay, scratch, timeout))
    data["elapsed_s"] = time.perf_counter() - started
    report(data, picture_dir)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(data, indent=1))
    print(f"results: {out_path} ({data['elapsed_s']:.0f} s)")
    if scratch not in (out_path.parent, picture_dir):
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE / "programs"))
    sys.path.insert(0, str(REPO))
    sys.exit(main())
