"""Check the harness on a GPU: calibrate, bench a few starters through the CLI (--json), then
time warm evaluations in one process (the way the optimization loop calls the harness).

    PYTHONPATH=src python benchmarks/harness_gpu_check.py [--kinds reduce,softmax,matmul]
                                                          [--budget 170] [--out DIR]

Prints wall time per evaluation: "cold" is a whole `autokernel bench` process (Python start,
torch import, worker start, CUDA init); "warm" is `Evaluator.evaluate` with its worker running
and the baselines cached — the number the ≤ 12 s goal for memory-bound kinds is about.
Steps that would outrun ``--budget`` seconds are skipped.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMPILE_BASELINE_KINDS = {"reduce", "softmax"}  # max-autotune of matmul takes minutes


def run_cli(args: list[str], out_dir: Path, name: str, timeout: float) -> tuple[dict | None, float, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TRITON_INTERPRET", None)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "autokernel", *args], capture_output=True, text=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None, time.perf_counter() - t0, "timed out"
    wall = time.perf_counter() - t0
    (out_dir / f"{name}.stderr.txt").write_text(proc.stderr[-20000:])
    try:
        record = json.loads(proc.stdout)
    except ValueError:
        return None, wall, f"rc={proc.returncode}, stdout not JSON: {proc.stdout[:200]!r} {proc.stderr[-400:]!r}"
    (out_dir / f"{name}.json").write_text(json.dumps(record, indent=1))
    return record, wall, f"rc={proc.returncode}"


def fmt(x, spec=".1f"):
    return "-" if x is None else format(x, spec)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kinds", default="reduce,softmax,matmul")
    ap.add_argument("--budget", type=float, default=170.0)
    ap.add_argument("--out", default=os.environ.get("OUT", "harness_gpu_check_out"))
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    left = lambda: args.budget - (time.perf_counter() - start)  # noqa: E731
    lines: list[str] = []

    cal, wall, note = run_cli(["calibrate", "--json"], out_dir, "calibrate", max(10.0, left()))
    lines.append(f"calibrate: {wall:.1f} s {note} " + (
        f"copy {cal['bandwidth_gbps']:.0f} GB/s, bf16 mm {cal['bf16_tflops']:.0f} TFLOP/s" if cal else ""))
    print(lines[-1], flush=True)

    kinds = [k for k in args.kinds.split(",") if k]
    for kind in kinds:
        if left() < 40:
            lines.append(f"{kind}: skipped (budget)")
            continue
        cli = ["bench", str(ROOT / "src/autokernel/kernels" / f"{kind}.py"), "--problem", kind, "--json"]
        if kind not in COMPILE_BASELINE_KINDS:
            cli.append("--no-baselines")
        record, wall, note = run_cli(cli, out_dir, f"bench_{kind}", left() - 5)
        if record is None:
            lines.append(f"{kind}: cold {wall:.1f} s: {note}")
            print(lines[-1], flush=True)
            continue
        lines.append(f"{kind}: cold {wall:.1f} s (evaluation {record['wall_s']:.1f} s) verdict {record['verdict']} "
                     f"{record['failed_stage'] or ''} {record['message'][:160]}")
        for t in record["timings"]:
            shape = "x".join(str(v) for v in t["shape"].values())
            lines.append(f"    {shape:>16} {t['dtype']} {fmt(t['latency_us'], '.2f'):>9} us ±{fmt(t['spread_us'], '.2f')}"
                         f"  {fmt(t['gbps'], '.0f'):>5} GB/s {fmt(t['tflops'], '.1f'):>6} TF  {fmt(t['pct_roofline'])}% roof"
                         f"  eager {fmt(t['eager_us'], '.2f')}  compile {fmt(t['compile_us'], '.2f')}")
        print("\n".join(lines[-1 - len(record["timings"]):]), flush=True)

    # warm evaluations in one process: the loop's view
    if left() > 30:
        sys.path.insert(0, str(ROOT / "src"))
        from autokernel.harness import Evaluator

        for kind in [k for k in kinds if k in COMPILE_BASELINE_KINDS][:2]:
            if left() < 25:
                break
            starter = ROOT / "src/autokernel/kernels" / f"{kind}.py"
            with Evaluator(kind, device="cuda") as ev:
                t0 = time.perf_counter()
                first = ev.evaluate(starter)
                t1 = time.perf_counter()
                second = ev.evaluate(starter, incumbent_file=starter)
                t2 = time.perf_counter()
            cmp = second.vs_incumbent
            lines.append(f"{kind}: warm {t1 - t0:.1f} s ({first.verdict}); with incumbent {t2 - t1:.1f} s "
                         f"({second.verdict}); self-comparison ratio "
                         f"{(cmp.candidate_us / cmp.incumbent_us) if cmp else float('nan'):.3f} noise "
                         f"{cmp.noise_frac if cmp else float('nan'):.3f} significant {cmp.significant if cmp else None}")
            print(lines[-1], flush=True)

    fault = ROOT / "benchmarks" / "harness_gpu_fault_kernel.py"
    if left() > 20 and fault.exists():
        record, wall, note = run_cli(["bench", str(fault), "--problem", "reduce", "--json", "--no-baselines",
                                      "--timeout", "20"], out_dir, "bench_fault", left() - 2)
        lines.append(f"cuda fault kernel: {wall:.1f} s " + (f"verdict {record['verdict']}: {record['message'][:160]}"
                                                           if record else note))
        print(lines[-1], flush=True)

    print("\n==== summary ====")
    print("\n".join(lines))
    (out_dir / "summary.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
