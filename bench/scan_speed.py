"""Scan speed and memory: `nanlens scan` against TensorFlow's DebugDataReader, side by side.

Generates (once, cached under ~/.cache/nanlens/bench/) a FULL_HEALTH dump of a Keras MLP trained for many
steps whose last step alone goes non-finite (bench/programs/mlp_fit_last_step_nan.py, ~170 MB of graph
traces by default), then runs each arm in its own fresh subprocess:

  reader  tensorflow.python.debug.lib.debug_events_reader.DebugDataReader: load the dump, walk the trace
          digests in order reading each debug tensor until the first NaN/Inf, then read that op's stack.
  scan    pyadapter.dump.scan_dump: the causal origin and its user stack (no TensorFlow import).

Reported per arm: the job time (after imports), the whole process time (imports included), and peak RSS
(ru_maxrss of the child), plus the job's CPU time, which shared, busy machines disturb less. The floor: scan at least 5x faster and at most 1/4 of the reader's peak memory.

    python bench/scan_speed.py            # full size (first run generates the dump: several minutes)
    python bench/scan_speed.py --small    # ~12 MB of traces, quick
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
FULL_STEPS = 4100  # ~42 KB of traces per step -> ~170 MB
SMALL_STEPS = 300
SPEED_FLOOR = 5.0
MEMORY_FLOOR = 0.25


# ------------------------------------------------------------------------------------------------ arms


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def arm_reader(dump: str) -> dict[str, object]:
    from tensorflow.python.debug.lib import debug_events_reader

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
    result["process_s"] = process_s
    return result


# ------------------------------------------------------------------------------------------------ dump


def ensure_dump(steps: int, regenerate: bool) -> Path:
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


# ------------------------------------------------------------------------------------------------ main


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--small", action="store_true", help=f"a {SMALL_STEPS}-step dump instead of {FULL_STEPS}"
    )
    parser.add_argument("--steps", type=int, help="training steps of the generated dump (overrides --small)")
    parser.add_argument("--rounds", type=int, default=1, help="run each arm this many times (alternating)")
    parser.add_argument("--regenerate", action="store_true", help="regenerate the cached dump")
    parser.add_argument("--arm", choices=("reader", "scan"), help=argparse.SUPPRESS)
    parser.add_argument("dump", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.arm:
        result = arm_reader(args.dump) if args.arm == "reader" else arm_scan(args.dump)
        result["peak_rss_mb"] = _peak_rss_mb()
        print(json.dumps(result))
        return 0

    steps = args.steps or (SMALL_STEPS if args.small else FULL_STEPS)
    dump = ensure_dump(steps, args.regenerate)
    size = traces_size(dump)
    print(
        f"dump: {dump}  ({size / 1e6:.0f} MB of graph_execution_traces, {steps} steps, NaN in the last one)"
    )

    results: dict[str, list[dict[str, object]]] = {"reader": [], "scan": []}
    for round_number in range(args.rounds):
        order = ("reader", "scan") if round_number % 2 == 0 else ("scan", "reader")
        for name in order:
            results[name].append(run_arm(name, dump))

    def best(name: str, key: str) -> float:
        return min(float(r[key]) for r in results[name])  # type: ignore[arg-type]

    print()
    print(
        f"{'arm':<8} {'job s':>8} {'job CPU s':>10} {'process s':>10} {'peak RSS MB':>12} {'traces':>9}  first NaN/Inf at"
    )
    for name in ("reader", "scan"):
        found = results[name][-1]["found"]
        where = (
            f"{found.get('op')} {os.path.basename(str(found.get('file')))}:{found.get('line')}"
            if found
            else "-"
        )  # type: ignore[union-attr]
        traces = int(results[name][-1]["traces_checked"])  # type: ignore[call-overload]
        print(
            f"{name:<8} {best(name, 'job_s'):>8.2f} {best(name, 'job_cpu_s'):>10.2f} {best(name, 'process_s'):>10.2f} "
            f"{best(name, 'peak_rss_mb'):>12.0f} {traces:>9,}  {where}"
        )
    speedup_job = best("reader", "job_s") / best("scan", "job_s")
    speedup_process = best("reader", "process_s") / best("scan", "process_s")
    speedup_cpu = best("reader", "job_cpu_s") / best("scan", "job_cpu_s")
    memory_ratio = best("scan", "peak_rss_mb") / best("reader", "peak_rss_mb")
    print()
    print(f"speed-up (job):      {speedup_job:6.1f}x   (floor {SPEED_FLOOR:.0f}x)")
    print(f"speed-up (job CPU):  {speedup_cpu:6.1f}x")
    print(f"speed-up (process):  {speedup_process:6.1f}x   (imports included: TensorFlow's for the reader)")
    print(f"memory (scan/reader): {memory_ratio:5.2f}    (floor {MEMORY_FLOOR:.2f})")
    ok = speedup_job >= SPEED_FLOOR and memory_ratio <= MEMORY_FLOOR
    print("floor met" if ok else "FLOOR NOT MET")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
