"""The GPU benchmark suite behind BENCHMARKS.md.  Needs a CUDA GPU.

    PYTHONPATH=src python benchmarks/gpu_suite.py starters --out results/   # every starter through the harness
    PYTHONPATH=src python benchmarks/gpu_suite.py loop --out results/ --budget 4m
    PYTHONPATH=src python benchmarks/gpu_suite.py model --out results/ --budget 3m

Each step runs the real `autokernel` command in a subprocess (so what is measured is what a
user gets), keeps its JSON/logs under --out, and prints a markdown table last.
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

MEMORY_KINDS = ["reduce", "softmax", "rmsnorm", "layernorm", "swiglu", "rotary", "cross_entropy"]
COMPUTE_KINDS = ["matmul", "attention", "fused_mlp"]
WARM_KINDS = ["reduce", "rmsnorm"]  # timed a second time to show the cost of an evaluation with warm caches


def autokernel(args: list[str], timeout: float, log: Path) -> tuple[int, str, float]:
    start = time.perf_counter()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    try:
        proc = subprocess.run([sys.executable, "-m", "autokernel", *args], capture_output=True, text=True,
                              timeout=timeout, env=env)
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code, out, err = 124, exc.stdout or "", exc.stderr or ""
        out = out.decode() if isinstance(out, bytes) else out
        err = err.decode() if isinstance(err, bytes) else err
    wall = time.perf_counter() - start
    log.write_text(f"$ autokernel {' '.join(args)}\nexit {code}, {wall:.1f} s\n--- stdout\n{out}\n--- stderr\n{err}\n")
    return code, out, wall


def fmt(x, spec=".1f"):
    return "–" if x is None else format(x, spec)


def starters(out: Path) -> None:
    import autokernel as package

    starters_dir = Path(package.__file__).parent / "kernels"
    autokernel(["calibrate"], 300, out / "calibrate.log")
    rows, walls = [], []
    for kind in MEMORY_KINDS + COMPUTE_KINDS:
        extra = ["--no-baselines"] if kind in COMPUTE_KINDS else []
        # cold (worker start, Triton and torch.compile baselines compiled), then warm (caches filled)
        passes = 2 if kind in WARM_KINDS else 1
        for attempt in range(passes):
            code, text, wall = autokernel(["bench", str(starters_dir / f"{kind}.py"), "--problem", kind, "--json", *extra],
                                          400, out / f"bench_{kind}_{attempt}.log")
            try:
                ev = json.loads(text)
            except json.JSONDecodeError:
                rows.append((kind, "-", f"exit {code}", "", "", "", "", "", ""))
                break
            (out / f"bench_{kind}.json").write_text(json.dumps(ev, indent=1))
            walls.append((kind, attempt, wall, ev.get("wall_s")))
        if not text.strip().startswith("{"):
            continue
        for t in ev.get("timings", []):
            shape = "×".join(str(v) for v in t["shape"].values())
            rate = f"{t['gbps']:.0f} GB/s" if kind in MEMORY_KINDS and t.get("gbps") else (
                f"{t['tflops']:.0f} TFLOP/s" if t.get("tflops") else "–")
            rows.append((kind, shape, ev["verdict"], fmt(t["latency_us"]), rate, fmt(t.get("pct_roofline"), ".0f"),
                         fmt(t.get("eager_us")), fmt(t.get("compile_us")), fmt(t.get("speedup_vs_compile"), ".2f")))
        if not ev.get("timings"):
            rows.append((kind, "-", ev["verdict"] + f" ({ev.get('failed_stage')}: {ev.get('message', '')[:80]})",
                         "", "", "", "", "", ""))
    print("\n| kind | shape | verdict | starter µs | throughput | % roofline | eager µs | compile µs | vs compile |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print("\n| kind | pass | wall of `autokernel bench` (s) | evaluation wall_s |")
    print("|---|---|---|---|")
    for kind, attempt, wall, ev_wall in walls:
        print(f"| {kind} | {'cold' if attempt == 0 else 'warm'} | {wall:.1f} | {fmt(ev_wall)} |")


def loop(out: Path, budget: str, kinds: list[str]) -> None:
    work = out / "loop_ws"
    args = ["optimize", "--workdir", str(work), "--budget", budget, "--quiet"]
    for kind in kinds:
        args += ["--problem", kind]
    code, text, wall = autokernel(args, 900, out / "loop.log")
    rows = list(csv.DictReader(open(work / "results.tsv"), delimiter="\t")) if (work / "results.tsv").exists() else []
    print(f"\noptimize exit {code}, {wall:.0f} s wall, {len(rows)} rows, "
          f"{3600 * len(rows) / max(wall, 1):.0f} experiments/hour")
    print("\n| problem | experiments | kept | start µs | best µs | speedup vs start | vs eager | % roofline |")
    print("|---|---|---|---|---|---|---|---|")
    for kind in kinds:
        mine = [r for r in rows if r["problem"] == kind]
        if not mine:
            continue
        base = next((r for r in mine if r["status"] == "baseline"), mine[0])
        best = [r for r in mine if r["status"] in ("baseline", "keep")][-1]
        kept = sum(r["status"] == "keep" for r in mine)
        print(f"| {kind} | {len(mine) - 1} | {kept} | {base['latency_us']} | {best['latency_us']} | "
              f"{best['speedup_vs_start']} | {best['speedup_vs_eager']} | {best['pct_roofline']} |")


def model(out: Path, budget: str, config: str, input_shape: str) -> None:
    work = out / "run_llama"
    code, text, wall = autokernel(["run", "--workdir", str(work), "--budget", budget, "--input-shape", input_shape,
                                   "--config", config], 1200, out / "run.log")
    print(f"\nrun exit {code}, {wall:.0f} s wall")
    for name in ("plan.json", "verify.json", "report.md"):
        if (work / name).exists():
            print(f"--- {name}\n{(work / name).read_text()[:6000]}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("step", choices=["starters", "loop", "model"])
    ap.add_argument("--out", type=Path, default=Path("gpu_results"))
    ap.add_argument("--budget", default="4m")
    ap.add_argument("--kinds", default="softmax,rmsnorm,layernorm,reduce")
    ap.add_argument("--config", default="dim=4096,n_layers=4,n_heads=32,n_kv_heads=8,hidden_dim=11008,vocab_size=32000")
    ap.add_argument("--input-shape", default="1x1024")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if a.step == "starters":
        starters(a.out)
    elif a.step == "loop":
        loop(a.out, a.budget, a.kinds.split(","))
    else:
        model(a.out, a.budget, a.config, a.input_shape)


if __name__ == "__main__":
    main()
