"""Does the judge time a kernel as the GPU runs it, and where does an evaluation's wall time go?

    PYTHONPATH=src python benchmarks/timing_gpu.py --out DIR [--kinds rotary,softmax,...] [--repeats 3]
    PYTHONPATH=src python benchmarks/timing_gpu.py --out DIR --cpu-smoke     # the script itself, CPU, ~1 min
    ... --profile    # also profile the warm evaluations: DIR/profiles/<kind>-parent.txt, -workers.txt
    ... --cpu-smoke --tiny   # the smallest edge shape: on the CPU the judge's own overhead shows

For each kind's starter, at the problem's GPU target shapes (the first dtype):

1. the judge: ``Evaluator.evaluate`` ``--repeats`` times in one Evaluator (the first evaluation
   pays for compiles and the first worker; later ones are what the loop pays), its per-shape
   latency (median of judged calls, the harness's spin, flush and watch around each), the
   evaluation's wall time and its phases (load, stages, timing, baselines), and any note about
   calls the GPU spin did not cover;
2. ``triton.testing.do_bench`` of the same ``kernel_fn`` on inputs from the same problem
   (L2 flushed between calls, median), in this process, no watch.

The ratio judge / do_bench should be near 1: the judge's own host work must not show as GPU
time.  Writes DIR/timing_gpu.json and prints a markdown table last.
"""
from __future__ import annotations

import argparse
import cProfile
import importlib.util
import io
import json
import math
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch

from autokernel.harness import Evaluator
from autokernel.harness.worker_main import PROFILE_ENV
from autokernel.problems.registry import KERNELS_DIR, get_problem

KINDS = ("rotary", "softmax", "rmsnorm", "add_rmsnorm", "matmul", "cross_entropy")


def load_kernel_fn(kind: str):
    spec = importlib.util.spec_from_file_location(f"starter_{kind}", KERNELS_DIR / f"{kind}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.kernel_fn


def do_bench_us(kind: str, shape: dict, dtype: torch.dtype, device: str) -> float:
    problem = get_problem(kind)
    fn = load_kernel_fn(kind)
    args = problem.make_inputs(dict(shape), dtype, device, 1234)
    if device.startswith("cuda"):
        import triton.testing

        return float(triton.testing.do_bench(lambda: fn(*args), warmup=25, rep=200, return_mode="median")) * 1000.0
    fn(*args)
    t0 = time.perf_counter()
    fn(*args)
    return (time.perf_counter() - t0) * 1e6


def judge_runs(kind: str, device: str, repeats: int, shapes, profile_dir: Path | None = None) -> list[dict]:
    """With ``profile_dir``: the parent (cProfile) and the workers (their requests) of the
    evaluations after the first are profiled; summaries go to ``profile_dir/<kind>-*.txt``."""
    runs = []
    # one folder for every kind, named before the first worker starts: workers are forked from a
    # forkserver that keeps the environment it started with
    worker_dir = profile_dir / "workers" if profile_dir else None
    parent = cProfile.Profile()
    first_workers: set[Path] = set()
    with Evaluator(kind, device=device, shapes=shapes, timeout_s=120) as evaluator:
        for i in range(repeats):
            if profile_dir and i == 1:
                first_workers = set(worker_dir.glob("*.prof"))
                parent.enable()
            ev = evaluator.evaluate(KERNELS_DIR / f"{kind}.py")
            runs.append({"verdict": ev.verdict, "message": ev.message, "wall_s": ev.wall_s, "phases": ev.phases,
                         "round_trips": evaluator.last_round_trips,
                         "timings": [{"shape": t.shape, "dtype": t.dtype, "latency_us": t.latency_us,
                                      "spread_us": t.spread_us, "eager_us": t.eager_us, "compile_us": t.compile_us}
                                     for t in ev.timings]})
            print(f"  {kind}: {ev.verdict} {ev.wall_s:.2f} s {evaluator.last_round_trips} round trips {ev.phases} "
                  f"{ev.message[:160]}", flush=True)
    if profile_dir:
        parent.disable()
        write_profile(parent, profile_dir / f"{kind}-parent.txt")
        warm = sorted(set(worker_dir.glob("*.prof")) - first_workers)
        if warm:
            write_profile(pstats.Stats(*map(str, warm)), profile_dir / f"{kind}-workers.txt")
    return runs


def write_profile(profile, path: Path) -> None:
    stream = io.StringIO()
    stats = profile if isinstance(profile, pstats.Stats) else pstats.Stats(profile, stream=stream)
    stats.stream = stream
    stats.sort_stats("cumulative").print_stats(90)
    stats.sort_stats("tottime").print_stats(50)
    path.write_text(stream.getvalue())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--repeats", type=int, default=None,
                    help="evaluations per kind (default 3; with --cpu-smoke 1, or 2 with --profile)")
    ap.add_argument("--cpu-smoke", action="store_true")
    ap.add_argument("--tiny", action="store_true",
                    help="with --cpu-smoke: time the smallest edge shape (the judge's overhead, not the interpreter's)")
    ap.add_argument("--profile", action="store_true",
                    help="profile the warm evaluations (parent and workers) into DIR/profiles")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    device = "cpu" if args.cpu_smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("timing_gpu.py: no GPU here (use --cpu-smoke to check the script on CPU)", file=sys.stderr)
        return 2
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if args.profile:
        os.environ[PROFILE_ENV] = str(args.out / "profiles" / "workers")
    results = {}
    for kind in kinds:
        problem = get_problem(kind)
        shapes = [problem.cpu_shapes[0]] if args.cpu_smoke else None
        if args.cpu_smoke and args.tiny:
            shapes = [min(problem.edge_shapes_for(device), key=lambda s: math.prod(s.values()))]
        print(f"{kind}: judging the starter", flush=True)
        repeats = args.repeats or ((2 if args.profile else 1) if args.cpu_smoke else 3)
        runs = judge_runs(kind, device, repeats, shapes, args.out / "profiles" if args.profile else None)
        last = runs[-1]
        bench = []
        for t in last["timings"]:
            dtype = getattr(torch, {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}.get(t["dtype"], t["dtype"]))
            bench.append(do_bench_us(kind, t["shape"], dtype, device))
        results[kind] = {"runs": runs, "do_bench_us": bench}
        (args.out / "timing_gpu.json").write_text(json.dumps(results, indent=2, default=str))

    print("\n| kind | shape | judge µs | do_bench µs | judge / do_bench | eager µs |")
    print("|---|---|---:|---:|---:|---:|")
    for kind, r in results.items():
        for t, b in zip(r["runs"][-1]["timings"], r["do_bench_us"]):
            shape = "x".join(str(v) for v in t["shape"].values())
            print(f"| {kind} | {shape} {t['dtype']} | {t['latency_us']:.1f} | {b:.1f} | {t['latency_us'] / b:.2f} | "
                  f"{t['eager_us'] or float('nan'):.1f} |")
    print("\n| kind | first eval s | warm eval s (median) | round trips | load | stages | timing | baselines |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for kind, r in results.items():
        runs = r["runs"]
        warm = runs[1:] or runs
        med = statistics.median(x["wall_s"] for x in warm)
        ph = {k: statistics.median(x["phases"].get(k, 0.0) for x in warm) for k in ("load", "stages", "timing", "baselines")}
        trips = statistics.median(x["round_trips"] for x in warm)
        print(f"| {kind} | {runs[0]['wall_s']:.2f} | {med:.2f} | {trips:.0f} | {ph['load']:.2f} | {ph['stages']:.2f} | "
              f"{ph['timing']:.2f} | {ph['baselines']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
