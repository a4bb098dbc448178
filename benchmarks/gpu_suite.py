"""The GPU benchmark suite behind BENCHMARKS.md.  Needs a CUDA GPU.

    PYTHONPATH=src python benchmarks/gpu_suite.py starters --out results/   # every starter through the harness
    PYTHONPATH=src python benchmarks/gpu_suite.py loop --out results/ --budget 10m --kinds softmax,rmsnorm
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


def starters(out: Path, kinds: list[str] | None = None) -> None:
    import autokernel as package

    starters_dir = Path(package.__file__).parent / "kernels"
    autokernel(["calibrate"], 300, out / "calibrate.log")
    rows, walls = [], []
    for kind in kinds or MEMORY_KINDS + COMPUTE_KINDS:
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


def num(text: str, spec: str = ".1f") -> str:
    try:
        return format(float(text), spec)
    except (TypeError, ValueError):
        return "–"


def experiment_json(work: Path, kind: str, experiment: int) -> dict | None:
    found = sorted(work.glob(f"logs/*/{kind}/exp_{experiment:04d}.json"))
    return json.loads(found[-1].read_text()) if found else None


def per_shape(ev: dict | None) -> dict[str, float]:
    if not ev:
        return {}
    return {"×".join(str(v) for v in t["shape"].values()): t["latency_us"] for t in ev.get("timings", [])}


def logged_run(log: Path) -> tuple[int, float]:
    """Exit code and wall time of an earlier `autokernel` call, from its log (see autokernel())."""
    try:
        code, wall = log.read_text().splitlines()[1].removeprefix("exit ").removesuffix(" s").split(", ")
        return int(code), float(wall)
    except (OSError, IndexError, ValueError):
        return -1, float("nan")


def loop(out: Path, budget: str, kinds: list[str], run: bool = True) -> None:
    """One `autokernel optimize` per kind (its own workspace, the whole budget each), one after
    another on this process's GPU; run several of these on several GPUs with CUDA_VISIBLE_DEVICES."""
    from autokernel.loop.budget import parse_budget

    budget_s = parse_budget(budget)
    summary, shapes = [], []
    for kind in kinds:
        work = out / f"loop_{kind}"
        args = ["optimize", "--problem", kind, "--workdir", str(work), "--budget", budget, "--quiet"]
        if run:
            code, _, wall = autokernel(args, budget_s + 900, out / f"loop_{kind}.log")
        else:  # summarize an earlier run (e.g. one cut short by a time limit before its table)
            code, wall = logged_run(out / f"loop_{kind}.log")
        tsv = work / "results.tsv"
        rows = list(csv.DictReader(open(tsv), delimiter="\t")) if tsv.exists() else []
        if not rows:
            summary.append(f"| {kind} | exit {code}, no results | | | | | | | | |")
            continue
        start = next((r for r in rows if r["status"] == "baseline"), rows[0])
        best = [r for r in rows if r["status"] in ("baseline", "keep")][-1]
        experiments = [r for r in rows if r is not start]
        kept = sum(r["status"] == "keep" for r in rows)
        start_wall = float(start["wall_s"] or 0)
        warm_rate = 3600 * len(experiments) / max(wall - start_wall, 1)
        last_keep = max((int(r["experiment"]) for r in rows if r["status"] == "keep"), default=0)
        summary.append(f"| {kind} | {len(experiments)} | {kept} (last #{last_keep}) | {num(start['latency_us'])} | "
                       f"{num(best['latency_us'])} | {num(best['speedup_vs_start'], '.3f')}× | "
                       f"{num(best['speedup_vs_eager'], '.2f')}× | {num(best['pct_roofline'], '.0f')} | "
                       f"{start_wall:.0f} | {warm_rate:.0f} | {3600 * len(experiments) / max(wall, 1):.0f} |")
        before = per_shape(experiment_json(work, kind, int(start["experiment"])))
        after = per_shape(experiment_json(work, kind, int(best["experiment"])))
        for shape, us in before.items():
            shapes.append(f"| {kind} | {shape} | {us:.1f} | {after.get(shape, float('nan')):.1f} | "
                          f"{us / after[shape]:.2f}× |" if shape in after else f"| {kind} | {shape} | {us:.1f} | – | – |")
        desc = [f"#{r['experiment']} {r['description']}" for r in rows if r["status"] == "keep"]
        (out / f"loop_{kind}_kept.txt").write_text("\n".join(desc) + "\n")
    print(f"\nper kind: `autokernel optimize --problem KIND --budget {budget}`")
    print("\n| problem | experiments | kept | start µs | best µs | vs start | vs eager | % roofline "
          "| first evaluation s | experiments/h after it | experiments/h overall |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(summary))
    print("\n| problem | shape | starter µs | tuned µs | gain |")
    print("|---|---|---|---|---|")
    print("\n".join(shapes))


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
    ap.add_argument("--kinds", default=None, help="comma-separated (starters: every kind; loop: the memory-bound ones)")
    ap.add_argument("--config", default="dim=4096,n_layers=4,n_heads=32,n_kv_heads=8,hidden_dim=11008,vocab_size=32000")
    ap.add_argument("--input-shape", default="1x1024")
    ap.add_argument("--no-run", action="store_true", help="loop: only print the tables of the workspaces under --out")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    kinds = a.kinds.split(",") if a.kinds else None
    if a.step == "starters":
        starters(a.out, kinds)
    elif a.step == "loop":
        loop(a.out, a.budget, kinds or MEMORY_KINDS, run=not a.no_run)
    else:
        model(a.out, a.budget, a.config, a.input_shape)


if __name__ == "__main__":
    main()
