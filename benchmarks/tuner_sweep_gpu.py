"""The offline tuner against an exhaustive sweep, per kind, on a GPU.

    PYTHONPATH=src python benchmarks/tuner_sweep_gpu.py --out DIR            # rotary, attention, swiglu, rmsnorm; --budget 5m (~35 min)
    PYTHONPATH=src python benchmarks/tuner_sweep_gpu.py --quick --out DIR    # rotary + swiglu, --budget 2m, at most ~9 min
    PYTHONPATH=src python benchmarks/tuner_sweep_gpu.py --cpu-smoke --out DIR      # the script itself, on the CPU interpreter

For each kind, one after the other:

1. ``python -m autokernel optimize --problem KIND --budget T`` in a fresh workspace (the tuner,
   the default agent) — its best configuration, judged experiments, configurations screened,
   and wall time;
2. the sweep: every configuration of the starter's ``KNOB_SPACE`` when it has at most
   ``--sweep-max`` (rotary 375, attention 96, swiglu 600), else ``--samples`` random ones
   (seeded), plus the starter's default and the tuner's best — each checked against the
   reference at the GPU target shapes and timed with ``triton.testing.do_bench`` medians
   (L2 flushed, ``--rep-ms`` per shape), summed over the shapes, all in one process per
   kind (the screen's process machinery: a kernel that crashes or hangs is recorded and the
   sweep carries on);
3. the confirmation: the sweep's ``--confirm-top`` fastest, the default and the tuner's best
   re-timed in ``--confirm-rounds`` interleaved rounds in one process (median over rounds).
   The sweep only shortlists: one pass times configurations minutes apart, and on 2026-12-01
   it ranked the rotary default 159th of 375, 15% behind the best, where the re-timing put it
   within a few %.  The best, the default and the tuner's numbers in the table are these.  Each kind's sweep may use its share of ``--max-wall`` left after the
   optimize run; a sweep cut short says how much it covered.

The report compares the tuner's best with the sweep's best, both timed in the same sweep
process: the goal is within 1% on fully swept spaces, at least as fast as the best sample on
sampled ones.  The verdict uses the median of the per-round ratios of the re-timing (paired, as
the judge's keep rule compares); the table shows the ratio of the medians beside it, and the
round-to-round spread of the ratio when a goal is missed.  It prints the best configuration per
kind (to update the starters' ``KNOBS``), writes ``results.json`` and the optimize logs under
``--out``, and prints a markdown table last.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from autokernel.agents.screen import ScreenJob, run_screen
from autokernel.agents.search import all_configs, config_key, space_size
from autokernel.agents.tuner import STATE_FILE, apply_knobs, parse_knobs
from autokernel.harness.timing import spread
from autokernel.loop.budget import parse_budget
from autokernel.loop.results import read_results
from autokernel.problems import get_problem

SMALL_KINDS = ["rotary", "attention", "swiglu"]
DEFAULT_KINDS = SMALL_KINDS + ["rmsnorm"]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("tuner_sweep_out"))
    ap.add_argument("--kinds", default=",".join(DEFAULT_KINDS), help="comma-separated kinds")
    ap.add_argument("--budget", default="5m", help="the optimize budget per kind (90s, 5m, ...)")
    ap.add_argument("--max-wall", type=float, default=None, help="total seconds for the whole run (sweeps shrink to fit)")
    ap.add_argument("--sweep-max", type=int, default=1000, help="sweep spaces up to this size whole")
    ap.add_argument("--samples", type=int, default=300, help="random configurations for larger spaces")
    ap.add_argument("--rep-ms", type=float, default=50.0, help="do_bench timing window per shape (ms)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--confirm-top", type=int, default=8, help="re-time this many of the sweep's fastest")
    ap.add_argument("--confirm-rounds", type=int, default=5, help="interleaved rounds of the re-timing")
    ap.add_argument("--quick", action="store_true", help="rotary + swiglu, --budget 2m, --max-wall 540, --rep-ms 10")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny run on the CPU interpreter (checks the script)")
    args = ap.parse_args(argv)
    if args.quick:
        args.kinds, args.budget, args.rep_ms = "rotary,swiglu", "2m", 10.0
        args.max_wall = args.max_wall or 540.0
    if args.cpu_smoke:
        args.kinds, args.budget, args.samples, args.sweep_max = "rotary", "45s", 12, 0
        args.confirm_top, args.confirm_rounds = 2, 2
        args.max_wall = args.max_wall or 150.0
    args.device = "cpu" if args.cpu_smoke else "cuda"
    try:
        args.budget_s = parse_budget(args.budget)
    except ValueError as exc:
        ap.error(str(exc))
    return args


def run_optimize_cli(kind: str, args, out: Path) -> dict:
    """The tuner, as a user runs it; its best configuration and what it used."""
    work = out / f"ws_{kind}_{int(time.time())}"  # fresh: a workspace left from an earlier run would resume
    cmd = [sys.executable, "-m", "autokernel", "optimize", "--problem", kind, "--workdir", str(work),
           "--budget", args.budget, "--device", args.device, "--seed", str(args.seed)]
    if args.cpu_smoke:
        cmd += ["--dtype", "fp32"]
    t0 = time.monotonic()
    with open(out / f"optimize_{kind}.log", "w") as log:
        proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=args.budget_s + 600)
    wall = time.monotonic() - t0
    rows = read_results(work / "results.tsv") if (work / "results.tsv").exists() else []
    kernel = work / "problems" / kind / "kernel.py"
    decl = parse_knobs(kernel.read_text()) if kernel.exists() else None
    states = list((work / "logs").rglob(STATE_FILE)) if (work / "logs").exists() else []
    screened = sum(len(json.loads(p.read_text()).get("screened", {})) for p in states)
    judged = [r for r in rows if r.status != "baseline"]
    return {"returncode": proc.returncode, "wall_s": round(wall, 1), "best": decl.knobs if decl else None,
            "judged": len(judged), "kept": sum(1 for r in rows if r.status == "keep"), "screened": screened,
            # an experiment's wall time is its proposal (the screen, for the tuner) and its evaluation
            "experiment_wall_s": [round(r.wall_s, 1) for r in rows], "statuses": [r.status for r in rows]}


def sweep(kind: str, tuner_best: dict | None, args, time_limit_s: float) -> dict:
    problem = get_problem(kind)
    source = Path(problem.starter).read_text()
    decl = parse_knobs(source)
    space = decl.space
    default = {k: decl.knobs[k] for k in space}
    size = space_size(space)
    rng = random.Random(args.seed)
    if size <= args.sweep_max:
        configs, mode = all_configs(space), "swept"
        rng.shuffle(configs)  # a sweep cut short by time is a random sample
    else:
        mode = "sampled"
        seen, configs = set(), []
        while len(configs) < min(args.samples, size):
            c = {k: rng.choice(v) for k, v in space.items()}
            if config_key(c) not in seen:
                seen.add(config_key(c))
                configs.append(c)
    first = [default] + ([{k: tuner_best[k] for k in space}] if tuner_best else [])
    ordered, seen = [], set()
    for c in first + configs:
        if config_key(c) not in seen:
            seen.add(config_key(c))
            ordered.append(c)
    candidates = [(config_key(c), apply_knobs(source, decl, {**decl.knobs, **c})) for c in ordered]
    job = ScreenJob(problem_spec=kind, device=args.device, incumbent_source=source, candidates=candidates,
                    dtype="fp32" if args.cpu_smoke else None, seed=args.seed, time_limit_s=time_limit_s,
                    config_timeout_s=120.0, rep_ms=args.rep_ms, halving=False)
    t0 = time.monotonic()
    report = run_screen(job)
    wall = time.monotonic() - t0
    by_key = {config_key(c): c for c in ordered}
    timed = {k: r.score_us for k, r in report.results.items() if r.status == "ok" and r.score_us}
    failed = {k: r.status for k, r in report.results.items() if r.status != "ok"}
    ranked = sorted(timed, key=timed.get)
    out = {"space": size, "mode": mode, "planned": len(ordered), "measured": len(report.results),
           "correct": len(timed), "failed": len(failed), "wall_s": round(wall, 1), "error": report.error}
    if ranked:
        out["best"], out["best_us"] = by_key[ranked[0]], timed[ranked[0]]
    dkey = config_key(default)
    out["default"], out["default_us"] = default, timed.get(dkey)
    out["default_rank"] = ranked.index(dkey) + 1 if dkey in timed else None
    if tuner_best:
        tkey = config_key({k: tuner_best[k] for k in space})
        out["tuner_us"] = timed.get(tkey)
        out["tuner_rank"] = ranked.index(tkey) + 1 if tkey in timed else None
    out["top5"] = [{"config": by_key[k], "us": round(timed[k], 3)} for k in ranked[:5]]
    shortlist = [by_key[k] for k in ranked[:args.confirm_top]]
    for extra in (default, {k: tuner_best[k] for k in space} if tuner_best else None):
        if extra is not None and config_key(extra) in timed and extra not in shortlist:
            shortlist.append(extra)
    if len(shortlist) > 1 and args.confirm_rounds > 0:
        rounds = confirm(kind, source, decl, shortlist, args)
        conf = out["confirmed"] = {k: statistics.median(v) for k, v in rounds.items()}
        if conf:
            best_key = min(conf, key=conf.get)
            out["best"], out["best_us"] = by_key[best_key], conf[best_key]
            out["default_us"] = conf.get(dkey, out["default_us"])
            if tuner_best:
                tkey = config_key({k: tuner_best[k] for k in space})
                out["tuner_us"] = conf.get(tkey, out.get("tuner_us"))
                if tkey in rounds:  # how far apart the two are round by round, and how steady that is
                    ratios = [t / b for t, b in zip(rounds[tkey], rounds[best_key])]
                    out["ratio_rounds"] = [round(r, 4) for r in ratios]
                    out["ratio_paired"] = statistics.median(ratios)
                    out["ratio_noise"] = spread(ratios)
    return out


def confirm(kind: str, source: str, decl, shortlist: list[dict], args) -> dict[str, list[float]]:
    """Re-time the sweep's shortlist (its fastest, the default, the tuner's best) in
    ``--confirm-rounds`` interleaved rounds, a fresh order each round, in one process: the
    median over rounds per configuration.  A one-pass sweep ranks configurations timed minutes
    apart, under whatever clocks the GPU ran at then; only these numbers are compared."""
    rng = random.Random(args.seed + 1)
    candidates = []
    for r in range(args.confirm_rounds):
        order = list(shortlist)
        rng.shuffle(order)
        candidates += [(f"{config_key(c)}#{r}", apply_knobs(source, decl, {**decl.knobs, **c})) for c in order]
    job = ScreenJob(problem_spec=kind, device=args.device, incumbent_source=source, candidates=candidates,
                    dtype="fp32" if args.cpu_smoke else None, seed=args.seed, time_limit_s=600.0,
                    config_timeout_s=120.0, rep_ms=args.rep_ms * 4, halving=False)
    report = run_screen(job)
    per_key: dict[str, list[float]] = {}
    for key, result in report.results.items():
        if "#" in key and result.status == "ok" and result.score_us:
            per_key.setdefault(key.rsplit("#", 1)[0], []).append(result.score_us)
    return {k: v for k, v in per_key.items() if len(v) == args.confirm_rounds}  # per round, in round order


def verdict(s: dict) -> str:
    if not s.get("tuner_us") or not s.get("best_us"):
        return "n/a"
    # the median of the per-round ratios where the re-timing has both (round-to-round drift of the
    # GPU's clocks cancels in each round's ratio: the judge's keep rule compares the same way),
    # else the ratio of the two medians
    ratio = s.get("ratio_paired") or s["tuner_us"] / s["best_us"]
    swept = s["mode"] == "swept" and s["measured"] >= s["planned"]
    goal = 1.01 if swept else 1.0 + 1e-9
    text = f"{'met' if ratio <= goal else 'missed'} ({'within 1%' if swept else 'vs best sample'})"
    noise = s.get("ratio_noise")
    if ratio > goal and noise is not None:  # the re-timing's own round-to-round spread of the same ratio
        text += f"; {'within' if ratio - goal <= noise else 'beyond'} the re-timing's noise (+-{noise:.1%})"
    return text


def fmt(config: dict | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items()) if config else "-"


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("no CUDA GPU: run with --cpu-smoke to check the script on the CPU", file=sys.stderr)
            return 2
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    args.out.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    results = {}
    for i, kind in enumerate(kinds):
        print(f"== {kind}: autokernel optimize --budget {args.budget}", flush=True)
        tuned = run_optimize_cli(kind, args, args.out)
        share = None
        if args.max_wall is not None:
            left = args.max_wall - (time.monotonic() - t_start)
            later = len(kinds) - i - 1
            # keep each later kind its optimize budget plus an equal part of what remains
            share = max((left - later * (args.budget_s + 30)) / (later + 1), 20.0)
        limit = share if share is not None else 3600.0
        print(f"== {kind}: sweep (up to {limit:.0f} s)", flush=True)
        swept = sweep(kind, tuned["best"], args, limit)
        results[kind] = {"tuner": tuned, "sweep": swept, "verdict": verdict(swept)}
        (args.out / "results.json").write_text(json.dumps(results, indent=1, default=str))
        print(f"   best configuration for {kind}: {fmt(swept.get('best'))}  "
              f"({swept.get('best_us') or 0:.2f} us; default {swept.get('default_us') or 0:.2f} us, "
              f"rank {swept.get('default_rank')})", flush=True)
    total = time.monotonic() - t_start
    timing = "interpreter (CPU smoke: times mean nothing)" if args.cpu_smoke else "GPU, do_bench medians"
    print(f"\ntotal wall {total:.0f} s; timings: {timing}\n")
    print("| kind | space | sweep | sweep best | sweep best us | default us (rank) | tuner best | tuner us (rank) "
          "| tuner / best | goal | tuner judged / screened | tuner wall s | sweep wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for kind, r in results.items():
        s, t = r["sweep"], r["tuner"]
        ratio = f"{s['tuner_us'] / s['best_us']:.3f}" if s.get("tuner_us") and s.get("best_us") else "-"
        if s.get("ratio_paired"):
            ratio += f" (paired {s['ratio_paired']:.3f})"
        cover = f"{s['mode']} {s['measured']}/{s['planned']}"
        if s.get("confirmed"):
            cover += f", {len(s['confirmed'])} re-timed x{args.confirm_rounds}"
        print(f"| {kind} | {s['space']} | {cover} | {fmt(s.get('best'))} | {s.get('best_us') or 0:.2f} | "
              f"{s.get('default_us') or 0:.2f} ({s.get('default_rank')}) | {fmt(t['best'])} | "
              f"{s.get('tuner_us') or 0:.2f} ({s.get('tuner_rank')}) | {ratio} | {r['verdict']} | "
              f"{t['judged']} / {t['screened']} | {t['wall_s']} | {s['wall_s']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
