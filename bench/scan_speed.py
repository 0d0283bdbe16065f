"""Scan speed and memory: `nanlens scan` against TensorFlow's DebugDataReader, side by side, at two dump sizes.

Generates (once, cached under ~/.cache/nanlens/bench/) FULL_HEALTH dumps of a Keras MLP trained for many
steps whose last step alone goes non-finite (bench/programs/mlp_fit_last_step_nan.py): the default one of
~173 MB of graph traces and one --scale times as many steps (5x: ~870 MB), then runs each arm on each dump in
its own fresh subprocess:

  reader  tensorflow.python.debug.lib.debug_events_reader.DebugDataReader: load the dump, walk the trace
          digests in order reading each debug tensor until the first NaN/Inf, then read that op's stack.
  scan    pyadapter.dump.scan_dump: the causal origin and its user stack (no TensorFlow import).

Reported per arm and dump: the job time (after imports, and after waiting 0.3 s for the threads numpy's import
starts to go idle: see `_settle_after_imports`), the job's CPU time (which shared, busy machines
disturb less), the whole process time (imports included) and peak RSS (ru_maxrss of the child); then the
ratios, how each arm grows from the default dump to the larger one (time and memory against size), and
whether the floors hold on the default dump: scan at least 50x faster (job time and job CPU time) and at
most 1/20 of the reader's peak memory.

    python bench/scan_speed.py            # both sizes (first run generates the dumps: minutes, more at 5x)
    python bench/scan_speed.py --small    # 300 and 1500 steps (~12 and ~63 MB of traces), quick
    python bench/scan_speed.py --scale 0  # the default dump only
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PROGRAM = HERE / "programs" / "mlp_fit_last_step_nan.py"
CACHE = Path(os.environ.get("NANLENS_BENCH_CACHE", Path.home() / ".cache" / "nanlens" / "bench"))
FULL_STEPS = 4100  # ~42 KB of traces per step -> ~173 MB
SMALL_STEPS = 300
SCALE = 5  # the second dump has this many times the steps
SPEED_FLOOR = 50.0
MEMORY_FLOOR = 1 / 20
RESULTS = HERE / "results"


# ------------------------------------------------------------------------------------------------ arms


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


SETTLE_S = 0.3


def _settle_after_imports() -> None:
    """Wait for the imports' background threads to go idle before the clock starts, in both arms: numpy's import
    starts OpenBLAS's thread pool, whose threads spin for ~50 ms of CPU (on this 2-core VM) before they sleep.
    Neither arm uses BLAS; without the wait that spin lands in the first ~0.1 s of the job, which is a fifth of
    the scan's CPU time and nothing of the reader's. The wait is taken out of the process time too."""
    time.sleep(SETTLE_S)


def arm_reader(dump: str) -> dict[str, object]:
    from tensorflow.python.debug.lib import debug_events_reader

    _settle_after_imports()
    started, cpu_started = time.perf_counter(), time.process_time()
    found: dict[str, object] = {}
    with debug_events_reader.DebugDataReader(dump) as reader:
        reader.update()
        traces_checked = 0
        for digest in reader.graph_execution_traces(digest=True):
            traces_checked += 1
            values = reader.graph_execution_trace_to_tensor_value(digest)
            # FULL_HEALTH: [id, device, dtype, rank, size, -inf, +inf, nan, neg, zero, pos]
            if values[5] or values[6] or values[7]:
                op = reader.graph_by_id(digest.graph_id).get_op_creation_digest(digest.op_name)
                _host, frames = reader.read_graph_op_creation_stack_trace(op)
                file_path, line, _func = frames[-1][:3]
                found = {"op": digest.op_name, "file": file_path, "line": line}
                break
    return {
        "job_s": time.perf_counter() - started,
        "job_cpu_s": time.process_time() - cpu_started,
        "found": found,
        "traces_checked": traces_checked,
    }


def arm_scan(dump: str) -> dict[str, object]:
    from pyadapter.dump import scan_dump
    from pyadapter.dump.events import debug_event_class

    debug_event_class()  # the protobuf import, so "job" compares like with like
    _settle_after_imports()
    started, cpu_started = time.perf_counter(), time.process_time()
    findings = scan_dump(dump)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    origin = findings.origin
    found = {"op": origin.op.name, "file": origin.file, "line": origin.line} if origin else {}
    return {
        "job_s": elapsed,
        "job_cpu_s": cpu,
        "found": found,
        "traces_checked": findings.extra["scan"]["traces_read"],
    }


def run_arm(name: str, dump: Path) -> dict[str, object]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--arm", name, str(dump)],
        env=env,
        capture_output=True,
        text=True,
    )
    process_s = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"arm {name} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_s"] = process_s - SETTLE_S
    return result


# ------------------------------------------------------------------------------------------------ dump


def ensure_dump(steps: int, regenerate: bool) -> Path:
    """The cached dump of a ``steps``-step run, generated first if missing (its COMPLETE file records how long
    that took)."""
    dump = CACHE / f"mlp-last-step-nan-{steps}"
    done = dump / "COMPLETE"
    if done.exists() and not regenerate:
        return dump
    if dump.exists():
        shutil.rmtree(dump)
    dump.parent.mkdir(parents=True, exist_ok=True)
    print(f"generating a {steps}-step FULL_HEALTH dump in {dump} (once; cached) ...", flush=True)
    started = time.perf_counter()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-m", "pyadapter", "run", "--dump", str(dump), "--", str(PROGRAM), str(steps)],
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"generating the dump failed:\n{proc.stderr[-3000:]}")
    done.write_text(json.dumps({"steps": steps, "seconds": time.perf_counter() - started}))
    print(f"  generated in {time.perf_counter() - started:.0f} s", flush=True)
    return dump


def traces_size(dump: Path) -> int:
    return sum(p.stat().st_size for p in dump.glob("*.graph_execution_traces"))


def generation_seconds(dump: Path) -> float | None:
    try:
        return float(json.loads((dump / "COMPLETE").read_text())["seconds"])
    except (OSError, ValueError, KeyError):
        return None


# ------------------------------------------------------------------------------------------------ main


def measure(dump: Path, steps: int, rounds: int) -> dict[str, object]:
    """Both arms on one dump, ``rounds`` times each (alternating order); the best of each figure is kept."""
    runs: dict[str, list[dict[str, object]]] = {"reader": [], "scan": []}
    for round_number in range(rounds):
        order = ("reader", "scan") if round_number % 2 == 0 else ("scan", "reader")
        for name in order:
            runs[name].append(run_arm(name, dump))
    arms: dict[str, dict[str, object]] = {}
    for name, results in runs.items():
        arms[name] = {
            key: min(float(r[key]) for r in results)  # type: ignore[arg-type]
            for key in ("job_s", "job_cpu_s", "process_s", "peak_rss_mb")
        }
        arms[name]["traces_checked"] = results[-1]["traces_checked"]
        arms[name]["found"] = results[-1]["found"]
    return {
        "dump": str(dump),
        "steps": steps,
        "traces_mb": traces_size(dump) / 1e6,
        "dump_mb": sum(p.stat().st_size for p in dump.glob("tfdbg_events.*")) / 1e6,
        "generation_s": generation_seconds(dump),
        "rounds": rounds,
        "arms": arms,
    }


def _ratio(m: dict[str, object], key: str) -> float:
    arms = m["arms"]
    return float(arms["reader"][key]) / max(float(arms["scan"][key]), 1e-9)  # type: ignore[index]


def report(measured: list[dict[str, object]]) -> tuple[list[str], bool]:
    lines: list[str] = []
    out = lines.append
    out(
        f"{'dump':<26} {'arm':<7} {'job s':>8} {'job CPU s':>10} {'process s':>10} {'peak RSS MB':>12} "
        f"{'traces':>10}  first NaN/Inf at"
    )
    for m in measured:
        label = f"{m['traces_mb']:.0f} MB traces ({m['steps']} st)"
        for name in ("reader", "scan"):
            arm = m["arms"][name]  # type: ignore[index]
            found = arm["found"]
            where = (
                f"{found.get('op')} {os.path.basename(str(found.get('file')))}:{found.get('line')}"
                if found
                else "-"
            )
            out(
                f"{label:<26} {name:<7} {arm['job_s']:>8.2f} {arm['job_cpu_s']:>10.2f} {arm['process_s']:>10.2f} "
                f"{arm['peak_rss_mb']:>12.0f} {int(arm['traces_checked']):>10,}  {where}"
            )
            label = ""
    out("")
    out(f"{'dump':<26} {'speed-up job':>13} {'job CPU':>8} {'process':>8} {'memory scan/reader':>19}")
    for m in measured:
        memory = 1 / _ratio(m, "peak_rss_mb")
        out(
            f"{m['traces_mb']:>6.0f} MB traces{'':<12} {_ratio(m, 'job_s'):>12.1f}x {_ratio(m, 'job_cpu_s'):>7.1f}x "
            f"{_ratio(m, 'process_s'):>7.1f}x {memory:>12.3f} (1/{1 / memory:.0f})"
        )
    if len(measured) == 2:
        small, big = measured
        size = float(big["traces_mb"]) / float(small["traces_mb"])
        out("")
        out(
            f"growth from {small['traces_mb']:.0f} to {big['traces_mb']:.0f} MB of traces ({size:.2f}x the size):"
        )
        for name in ("reader", "scan"):
            a, b = small["arms"][name], big["arms"][name]  # type: ignore[index]
            out(
                f"  {name:<7} job {b['job_s'] / a['job_s']:5.2f}x   job CPU {b['job_cpu_s'] / a['job_cpu_s']:5.2f}x   "
                f"peak RSS {b['peak_rss_mb'] / a['peak_rss_mb']:5.2f}x ({a['peak_rss_mb']:.0f} -> {b['peak_rss_mb']:.0f} MB)"
            )
    for m in measured:
        if m["generation_s"] is not None:
            out(f"dump of {m['steps']} steps generated in {m['generation_s']:.0f} s (cached: {m['dump']})")
    base = measured[0]
    speed_job, speed_cpu = _ratio(base, "job_s"), _ratio(base, "job_cpu_s")
    memory = 1 / _ratio(base, "peak_rss_mb")
    ok = min(speed_job, speed_cpu) >= SPEED_FLOOR and memory <= MEMORY_FLOOR
    out("")
    out(
        f"floors on the {base['traces_mb']:.0f} MB dump: speed-up >= {SPEED_FLOOR:.0f}x (job {speed_job:.1f}x, "
        f"job CPU {speed_cpu:.1f}x), memory <= 1/{1 / MEMORY_FLOOR:.0f} of the reader's (1/{1 / memory:.1f}): "
        + ("met" if ok else "NOT MET")
    )
    return lines, ok


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--small", action="store_true", help=f"a {SMALL_STEPS}-step dump instead of {FULL_STEPS}"
    )
    parser.add_argument("--steps", type=int, help="training steps of the default dump (overrides --small)")
    parser.add_argument(
        "--scale",
        type=float,
        default=SCALE,
        help=f"the second dump has this many times the steps (default {SCALE}; 0: no second dump)",
    )
    parser.add_argument("--rounds", type=int, default=1, help="run each arm this many times (alternating)")
    parser.add_argument("--big-rounds", type=int, help="rounds on the second dump (default: --rounds)")
    parser.add_argument("--regenerate", action="store_true", help="regenerate the cached dumps")
    parser.add_argument(
        "--out",
        type=Path,
        help="write the report (.txt) and figures (.json) here "
        "(default for full-size runs: bench/results/scan_speed.{txt,json})",
    )
    parser.add_argument("--arm", choices=("reader", "scan"), help=argparse.SUPPRESS)
    parser.add_argument("dump", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.arm:
        result = arm_reader(args.dump) if args.arm == "reader" else arm_scan(args.dump)
        result["peak_rss_mb"] = _peak_rss_mb()
        print(json.dumps(result))
        return 0

    steps = args.steps or (SMALL_STEPS if args.small else FULL_STEPS)
    sizes = [steps] + ([round(steps * args.scale)] if args.scale > 0 else [])
    dumps = [ensure_dump(n, args.regenerate) for n in sizes]
    measured = []
    for n, dump in zip(sizes, dumps, strict=True):
        print(
            f"dump: {dump}  ({traces_size(dump) / 1e6:.0f} MB of graph_execution_traces, {n} steps, "
            "NaN in the last one)",
            flush=True,
        )
        rounds = args.rounds if n == steps else (args.big_rounds or args.rounds)
        measured.append(measure(dump, n, rounds))
    lines, ok = report(measured)
    load = os.getloadavg()
    lines.append(
        f"machine: {os.cpu_count()} CPUs, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} "
        "at the end of the run"
    )
    print()
    print("\n".join(lines))
    out = args.out or (RESULTS / "scan_speed" if steps == FULL_STEPS and not args.small else None)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".txt").write_text("\n".join(lines) + "\n")
        out.with_suffix(".json").write_text(
            json.dumps({"measured": measured, "floors_met": ok, "loadavg": load}, indent=1) + "\n"
        )
        print(f"written: {out.with_suffix('.txt')}, {out.with_suffix('.json')}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
