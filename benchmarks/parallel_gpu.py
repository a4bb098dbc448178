"""Scale-out benchmark: `optimize --plan` on the LLaMA example with the tuner, one experiment
in flight against two (one per GPU), in the same budget.

    PYTHONPATH=src python benchmarks/parallel_gpu.py --out results/parallel      # the two-GPU machine, ~6 min
    PYTHONPATH=src python benchmarks/parallel_gpu.py --out /tmp/p --cpu-smoke    # CPU: checks the script works

Steps, each the real `autokernel` command in a subprocess (logs under --out):
1. `autokernel profile --model llama` on the GPU (the plan: the model's real shapes);
2. for each width in --widths: `autokernel optimize --plan plan.json --agent tuner --budget B
   --parallel N` in its own workdir;
3. from each workdir's results.tsv and logs/throughput.jsonl: experiments, experiments per
   hour, the mean evaluation time per experiment and each GPU's utilisation.
Writes parallel.json and prints a markdown table last, with the speedup of experiments per hour
over the first width.  The tuner needs no model or network, so proposals are near-instant and
the evaluations (the GPUs) bound the loop: two GPUs should give close to 2x the experiments
per hour at the same per-experiment evaluation time.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

GPU_CONFIG = "dim=4096,n_layers=4,n_heads=32,n_kv_heads=8,hidden_dim=11008,vocab_size=32000"
CPU_CONFIG = "dim=64,n_layers=1,n_heads=4,n_kv_heads=2,hidden_dim=176,vocab_size=256"
SMOKE_KINDS = ("rmsnorm", "swiglu")  # cheap under the interpreter; the smoke only checks that the script works


def cut_plan(path: Path, kinds: tuple[str, ...]) -> None:
    """Leave only ``kinds`` supported in the plan (for the CPU smoke: matmul and attention take
    minutes per evaluation under the Triton interpreter)."""
    plan = json.loads(path.read_text())
    for problem in plan["problems"]:
        if problem.get("kind") not in kinds:
            problem["supported"] = False
    path.write_text(json.dumps(plan, indent=2))


def autokernel(args: list[str], timeout: float, log: Path, env: dict[str, str]) -> tuple[int, str, float]:
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "autokernel", *args], capture_output=True, text=True,
                              timeout=timeout, env=env)
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code = 124
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
    wall = time.perf_counter() - start
    log.write_text(f"$ autokernel {' '.join(args)}\nexit {code}, {wall:.1f} s\n--- stdout\n{out}\n--- stderr\n{err}\n")
    return code, out, wall


def measure(workdir: Path) -> dict:
    """Experiments, experiments/h, mean evaluation time and utilisation per lane of the last
    optimize invocation in ``workdir``."""
    entries = [json.loads(line) for line in (workdir / "logs/throughput.jsonl").read_text().splitlines()
               if line.strip()] if (workdir / "logs/throughput.jsonl").is_file() else []
    with open(workdir / "results.tsv", newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    experiments = sum(1 for r in rows if r["status"] != "baseline")
    last = entries[-1] if entries else {}
    wall = float(last.get("wall_s") or 0.0)
    busy = last.get("lane_busy_s", [])
    return {"experiments": experiments, "kept": sum(1 for r in rows if r["status"] == "keep"),
            "wall_s": wall, "experiments_per_hour": 3600.0 * last.get("experiments", 0) / wall if wall else None,
            "mean_evaluation_s": last.get("mean_evaluation_s"), "lanes": last.get("lanes", []),
            "utilisation": [round(b / wall, 3) if wall else None for b in busy],
            "statuses": {s: sum(1 for r in rows if r["status"] == s) for s in sorted({r["status"] for r in rows})}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget", default=None, help="optimize budget per width (default 2m; 90s with --cpu-smoke)")
    ap.add_argument("--widths", default="1,2", help="--parallel values to compare (default 1,2)")
    ap.add_argument("--config", default=None, help="LLaMA example config overrides (default: a 4-layer 4096-wide model)")
    ap.add_argument("--input-shape", default="1x1024")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny model on CPU under the Triton interpreter")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    device = ["--device", "cpu"] if a.cpu_smoke else ["--device", "cuda"]
    if a.cpu_smoke:
        env["TRITON_INTERPRET"] = "1"
    budget = a.budget or ("90s" if a.cpu_smoke else "2m")
    config = a.config or (CPU_CONFIG if a.cpu_smoke else GPU_CONFIG)
    shape = "1x16" if a.cpu_smoke else a.input_shape
    dtype = ["--dtype", "fp32"] if a.cpu_smoke else []
    plan = a.out / "plan.json"
    code, _, _ = autokernel(["profile", "--model", "llama", "--config", config, "--input-shape", shape, *dtype,
                             *device, "--out", str(plan)], 900, a.out / "profile.log", env)
    if code != 0:
        print(f"profile failed (exit {code}); see {a.out / 'profile.log'}", file=sys.stderr)
        return 1
    if a.cpu_smoke:
        cut_plan(plan, SMOKE_KINDS)
    results = {}
    for width in [int(w) for w in a.widths.split(",")]:
        work = a.out / f"ws-parallel{width}"
        # GPUs named for every width, so that one in flight runs the same way as two (a lane
        # process per GPU, the tuner's screen off: see README "Scaling out")
        gpus = [] if a.cpu_smoke else ["--gpus", ",".join(str(i) for i in range(width))]
        code, _, wall = autokernel(["optimize", "--plan", str(plan), "--workdir", str(work), "--agent", "tuner",
                                    "--budget", budget, "--parallel", str(width), "--quiet", *gpus, *device],
                                   3600, a.out / f"optimize-parallel{width}.log", env)
        if code != 0:
            print(f"optimize --parallel {width} failed (exit {code}); see the log", file=sys.stderr)
            return 1
        results[width] = {**measure(work), "command_wall_s": round(wall, 1)}
    (a.out / "parallel.json").write_text(json.dumps({"budget": budget, "config": config, "input_shape": shape,
                                                      "device": device[1], "results": results}, indent=2))
    base = next(iter(results.values()))
    print(f"\n### optimize --plan (LLaMA example, tuner), budget {budget} per width, {device[1]}\n")
    print("| --parallel | experiments | kept | experiments/h | vs first | evaluation (mean) | utilisation per lane |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    for width, r in results.items():
        ratio = (r["experiments_per_hour"] / base["experiments_per_hour"]
                 if r["experiments_per_hour"] and base["experiments_per_hour"] else None)
        lanes = ", ".join(f"{n} {100 * u:.0f}%" for n, u in zip(r["lanes"], r["utilisation"]) if u is not None)
        per_hour = f"{r['experiments_per_hour']:.0f}" if r["experiments_per_hour"] else "–"
        mean = f"{r['mean_evaluation_s']:.2f} s" if r["mean_evaluation_s"] else "–"
        print(f"| {width} | {r['experiments']} | {r['kept']} | {per_hour} | "
              f"{f'{ratio:.2f}x' if ratio else '–'} | {mean} | {lanes or '–'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
