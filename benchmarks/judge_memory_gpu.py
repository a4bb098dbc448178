"""The judge's memory on large KernelBench problems: Tanh, RMSNorm, L1Norm and L2Norm at the
files' sizes (input sets of 6-8 GiB), judged as the arena judges them (the strict judge at the
file's sizes, timed against eager and torch.compile, then again at held-out sizes), with our
own solutions from tests/kernelbench_solutions/level1.

    PYTHONPATH=src python benchmarks/judge_memory_gpu.py --out DIR [--kb DIR] [--budget 1500]
    PYTHONPATH=src python benchmarks/judge_memory_gpu.py --out DIR --cpu-smoke    # CPU, scaled down
    ... --memory-mib 50000      # the same under a 50000 MiB budget: the memory-saving path

Per problem: the verdict (and the held-out verdict), the evaluation wall time, the parent's
peak allocated GPU memory (``torch.cuda.max_memory_allocated``) and peak reserved memory, and
the device-wide peak in use (total less the least free memory, sampled every 20 ms by
``torch.cuda.mem_get_info`` while the judge runs: the judge, its workers and anything else on
the GPU).  Before the memory plan the judge's parent held ~120 GiB on an H200 and these four
ran out of memory.  Writes DIR/judge_memory.json and DIR/judge_memory.md; prints the markdown
table last.  Problems not started once ``--budget`` seconds are spent are listed as skipped.
Expected wall time on an H200: 10-20 minutes cold (a torch.compile max-autotune baseline per
problem), 4-8 minutes with the baselines cached; ``--budget`` (default 1500 s) bounds it.
``--kb`` takes the KernelBench directory or its level1/ folder.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBLEMS = ("22_Tanh", "36_RMSNorm_", "38_L1Norm_", "39_L2Norm_")
SOLUTIONS = ROOT / "tests" / "kernelbench_solutions" / "level1"
SMOKE_SCALE = 0.002


class FreeSampler:
    """The least free device memory seen while running (a background thread)."""

    def __init__(self, device: str, period_s: float = 0.02):
        import torch

        self.torch, self.device, self.period_s = torch, device, period_s
        self.total = torch.cuda.mem_get_info(torch.device(device))[1]
        self.least_free = self.total
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            free, _ = self.torch.cuda.mem_get_info(self.torch.device(self.device))
            self.least_free = min(self.least_free, free)
            time.sleep(self.period_s)

    def __enter__(self) -> "FreeSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def gib(n: float | None) -> str:
    return "-" if n is None else f"{n / (1 << 30):.1f}"


def run_one(name: str, kb_dir: Path, device: str, scale: float | None, budget: int | None) -> dict:
    import torch

    from autokernel.arena.judge import JudgeSettings, judge
    from autokernel.problems.kernelbench import KernelBenchOptions

    problem_file = kb_dir / f"{name}.py"
    solution = SOLUTIONS / f"{name}.py"
    settings = JudgeSettings(device=device, options=KernelBenchOptions(scale=scale), timeout_s=300.0,
                             memory_budget=budget)
    gpu = device.startswith("cuda")
    row: dict = {"problem": name}
    if gpu:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    sampler = FreeSampler(device) if gpu else None
    try:
        if sampler:
            with sampler:
                result = judge(problem_file, solution, settings)
        else:
            result = judge(problem_file, solution, settings)
    except Exception as exc:  # a crash of the judge is the finding here: record it, go on
        row.update(verdict="judge-error", message=f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
        result = None
    row["wall_s"] = round(time.perf_counter() - started, 1)
    if result is not None:
        row.update(verdict=result.verdict, failed_stage=result.failed_stage, message=(result.message or "")[:300],
                   heldout=result.heldout, heldout_message=(result.heldout_message or "")[:300],
                   sizes=result.sizes, speedup_vs_eager=result.speedup_vs_eager,
                   speedup_vs_compile=result.speedup_vs_compile)
    if gpu:
        row["parent_peak_allocated"] = torch.cuda.max_memory_allocated()
        row["parent_peak_reserved"] = torch.cuda.max_memory_reserved()
        row["device_peak_used"] = sampler.total - sampler.least_free
        row["device_total"] = sampler.total
    return row


def table(rows: list[dict], device: str) -> str:
    lines = [f"Judge memory on KernelBench level 1 ({device})", "",
             "| problem | verdict | held-out | wall s | parent peak alloc GiB | parent peak reserved GiB | "
             "device peak used GiB | speedup vs eager | message |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        eager = r.get("speedup_vs_eager")
        lines.append(f"| {r['problem']} | {r.get('verdict')} | {r.get('heldout') or '-'} | {r.get('wall_s', '-')} | "
                     f"{gib(r.get('parent_peak_allocated'))} | {gib(r.get('parent_peak_reserved'))} | "
                     f"{gib(r.get('device_peak_used'))} | {f'{eager:.2f}x' if eager else '-'} | "
                     f"{(r.get('message') or '').replace('|', '/')[:120]} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--kb", type=Path, default=ROOT.parent / "shared" / "kernelbench",
                    help="the KernelBench directory (holds level1/); default ../shared/kernelbench")
    ap.add_argument("--budget", type=float, default=1500.0, help="wall-time budget in seconds")
    ap.add_argument("--cpu-smoke", action="store_true", help=f"CPU, sizes scaled by {SMOKE_SCALE}")
    ap.add_argument("--problems", default=",".join(PROBLEMS), help="comma-separated KernelBench file stems")
    ap.add_argument("--memory-mib", type=float, default=None,
                    help="the judge's memory budget in MiB (default: measured); a small one exercises the "
                         "memory-saving path (e.g. 50000 on an H200, 1.5 with --cpu-smoke)")
    args = ap.parse_args(argv)
    kb_dir = args.kb / "level1" if (args.kb / "level1").is_dir() else args.kb
    names = [n for n in args.problems.split(",") if n]
    missing = [n for n in names if not (kb_dir / f"{n}.py").is_file() or not (SOLUTIONS / f"{n}.py").is_file()]
    if missing:
        print(f"judge_memory_gpu: no problem or solution file for {', '.join(missing)} (looked in {kb_dir} "
              f"and {SOLUTIONS})", file=sys.stderr)
        return 2
    import torch

    if args.cpu_smoke:
        device, scale = "cpu", SMOKE_SCALE
    elif torch.cuda.is_available():
        device, scale = "cuda:0", None
    else:
        print("judge_memory_gpu: no GPU here; use --cpu-smoke", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    rows = []
    for name in names:
        if time.perf_counter() - started > args.budget:
            rows.append({"problem": name, "verdict": "skipped", "message": "wall-time budget spent"})
            continue
        row = run_one(name, kb_dir, device, scale, int(args.memory_mib * (1 << 20)) if args.memory_mib else None)
        print(json.dumps(row), flush=True)
        rows.append(row)
    where = torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu smoke, scaled"
    if args.memory_mib:
        where += f", memory budget {args.memory_mib:g} MiB"
    md = table(rows, where)
    (args.out / "judge_memory.json").write_text(json.dumps(rows, indent=1))
    (args.out / "judge_memory.md").write_text(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
