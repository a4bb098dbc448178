"""Coverage of the judge on a GPU (issue 9, item 5).  One command:

    PYTHONPATH=src python benchmarks/coverage_gpu.py --out results/coverage        # needs a CUDA GPU
    PYTHONPATH=src python benchmarks/coverage_gpu.py --out /tmp/cov --cpu-smoke    # tiny, interpreter

Three parts, each bounded by --budget-s (the whole run stops starting new work after it):

1. ``attacks``: every file in tests/attacks_coverage/ through ``evaluate`` on the device, with
   the verdict, the failing stage and the message (attacks must fail, honest_cov_* must pass).
   On a GPU these run at the problems' GPU shapes, where the attack files' shape-dependent
   paths differ from the CPU ones (reduce's GPU widths are multiples of 256, so its atomics
   only show at the edge and held-out shapes, which are now called twice).
2. ``bandwidth``: the margin behind ``integrity.BELOW_FLOOR_FACTOR``: GB/s of a copy (what
   ``autokernel calibrate`` measures), a read-only pass (``x.sum()``) and a write-only pass
   (``fill_``) over 1 GiB; the factor must stay below copy / fastest.
3. ``wall``: the wall time of a full evaluation (all stages plus timing, no baselines) of the
   starters of --kinds, twice (cold, then warm caches).  For the time before these changes run
   the same script with the old tree's sources: ``PYTHONPATH=OLD/src python
   benchmarks/coverage_gpu.py --parts wall --out DIR`` (the script imports autokernel from
   PYTHONPATH).

JSON goes to --out/coverage.json; a markdown table is printed last.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ATTACKS = ROOT / "tests" / "attacks_coverage"
# attack file -> problem (and, for --cpu-smoke, the shapes and dtypes that keep it tiny)
RUNS = {
    "softmax_skip_max_pow2": ("softmax", None, ["fp32"]),
    "cross_entropy_skip_max_pow2": ("cross_entropy", None, ["fp32"]),
    "reduce_atomics_unless_largest": ("reduce", None, ["fp32"]),
    "rmsnorm_fixed_eps": ("rmsnorm", None, ["fp32"]),
    "cross_entropy_fixed_ignore": ("cross_entropy", None, ["fp32"]),
    "softmax_zero_flat_rows": ("softmax", ["2x50257"], ["bf16"]),
    "argmax_pairs": (str(ATTACKS / "argmax_problem.py"), None, None),
    "honest_cov_softmax_two_pass": ("softmax", ["5x300"], ["bf16"]),
    "honest_cov_rmsnorm_split_columns": ("rmsnorm", ["5x200"], ["fp16"]),
    "honest_cov_cross_entropy_online": ("cross_entropy", ["6x300"], ["fp32"]),
}


def run_attacks(device: str, smoke: bool, deadline: float) -> list[dict]:
    from autokernel.harness.evaluate import evaluate

    rows = []
    for name, (problem, shapes, dtypes) in RUNS.items():
        if time.monotonic() > deadline:
            rows.append({"file": name, "verdict": "not run (budget)"})
            continue
        start = time.perf_counter()
        ev = evaluate(problem, ATTACKS / f"{name}.py", device=device, timing=False, baselines=False,
                      shapes=shapes if smoke else None, dtypes=dtypes if smoke else None)
        expected = "pass" if name.startswith("honest") else "not pass"
        ok = (ev.verdict == "pass") == (expected == "pass")
        rows.append({"file": name, "expected": expected, "verdict": ev.verdict, "stage": ev.failed_stage,
                     "as_expected": ok, "seconds": round(time.perf_counter() - start, 1), "message": ev.message[:300]})
        print(f"{name}: {ev.verdict} ({ev.failed_stage}) {ev.message[:160]}", flush=True)
    return rows


def _gbps(nbytes: float, fn, calls: int = 20) -> float:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    fn()
    for _ in range(calls):
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return nbytes / statistics.median(times) / 1e9


def run_bandwidth() -> dict:
    import torch

    from autokernel.harness import integrity

    n = 1 << 28  # fp32 elements: 1 GiB
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    copy = _gbps(2 * 4 * n, lambda: dst.copy_(src))
    read = _gbps(4 * n, lambda: src.sum())
    write = _gbps(4 * n, lambda: dst.fill_(1.0))
    fastest = max(copy, read, write)
    return {"copy_gbps": round(copy), "read_gbps": round(read), "write_gbps": round(write),
            "copy_over_fastest": round(copy / fastest, 3), "factor": integrity.BELOW_FLOOR_FACTOR,
            "factor_ok": integrity.BELOW_FLOOR_FACTOR < copy / fastest}


def run_wall(kinds: list[str], device: str, deadline: float) -> list[dict]:
    from autokernel.harness import Evaluator
    from autokernel.problems.registry import KERNELS_DIR

    rows = []
    for kind in kinds:
        for attempt in ("cold", "warm"):
            if time.monotonic() > deadline:
                rows.append({"kind": kind, "run": attempt, "verdict": "not run (budget)"})
                continue
            start = time.perf_counter()
            with Evaluator(kind, device=device, baselines=False) as ev:
                result = ev.evaluate(KERNELS_DIR / f"{kind}.py")
            stages = {s.name: s.seconds for s in result.stages}
            rows.append({"kind": kind, "run": attempt, "verdict": result.verdict,
                         "wall_s": round(time.perf_counter() - start, 2), "stages_s": stages})
            print(f"{kind} {attempt}: {result.verdict} {rows[-1]['wall_s']} s {stages}", flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny shapes in the Triton interpreter")
    parser.add_argument("--budget-s", type=float, default=1500.0)
    parser.add_argument("--parts", default="attacks,bandwidth,wall", help="comma-separated: attacks, bandwidth, wall")
    parser.add_argument("--kinds", default="softmax,rmsnorm,layernorm,reduce,cross_entropy,rotary,swiglu,matmul,attention")
    args = parser.parse_args()
    import torch

    if not args.cpu_smoke and not torch.cuda.is_available():
        print("coverage_gpu.py: no CUDA GPU (use --cpu-smoke to try it in the interpreter)", file=sys.stderr)
        return 2
    if args.cpu_smoke:
        import os

        os.environ["TRITON_INTERPRET"] = "1"
    device = "cpu" if args.cpu_smoke else "cuda"
    deadline = time.monotonic() + args.budget_s
    args.out.mkdir(parents=True, exist_ok=True)
    parts = set(args.parts.split(","))
    report = {"attacks": run_attacks(device, args.cpu_smoke, deadline) if "attacks" in parts else []}
    report["bandwidth"] = run_bandwidth() if "bandwidth" in parts and not args.cpu_smoke else None
    kinds = ["softmax"] if args.cpu_smoke else args.kinds.split(",")
    report["wall"] = run_wall(kinds, device, deadline) if "wall" in parts else []
    (args.out / "coverage.json").write_text(json.dumps(report, indent=2))

    print("\n| file | expected | verdict | stage | s |\n|---|---|---|---|---:|")
    for r in report["attacks"]:
        print(f"| {r['file']} | {r.get('expected', '')} | {r['verdict']} | {r.get('stage') or ''} | {r.get('seconds', '')} |")
    if report["bandwidth"]:
        b = report["bandwidth"]
        print(f"\ncopy {b['copy_gbps']} GB/s, read-only {b['read_gbps']}, write-only {b['write_gbps']}: copy/fastest "
              f"{b['copy_over_fastest']}; below-floor factor {b['factor']} {'ok' if b['factor_ok'] else 'TOO LOOSE for honest kernels'}")
    print("\n| kind | run | verdict | wall s |\n|---|---|---|---:|")
    for r in report["wall"]:
        print(f"| {r['kind']} | {r['run']} | {r['verdict']} | {r.get('wall_s', '')} |")
    return 0 if all(r.get("as_expected", True) for r in report["attacks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
