"""moe_experts on a GPU: the grouped-GEMM starter against PyTorch's ways of running a mixture of
experts, side by side in one run.

    PYTHONPATH=src python benchmarks/moe_gpu.py --out DIR [--max-minutes 6]
    PYTHONPATH=src python benchmarks/moe_gpu.py --out DIR --cpu-smoke   # the script itself, on CPU

Per shape, bf16 (T tokens, K experts a token, E experts, width D, expert hidden I):
  - Mixtral-8x7B's experts at 4096 tokens (prefill) and 16 (decode-like: the weights are the cost)
  - Qwen1.5-MoE-A2.7B's (60 small experts, 4 a token) at 4096 tokens
  - the small ``hf:mixtral`` default (D=256, I=512) at 4096 tokens: launch-bound
each of:
  - starter: the shipped kernel (five launches, no host sync)
  - grouped: the problem's eager op, what transformers runs by default (sort the pairs, one
    ``grouped_mm`` each way where torch has it for the GPU, SiLU * up, weighted sum)
  - loop: the per-expert loop of transformers' "eager" experts (a host sync an expert)
  - compile: torch.compile of ``grouped`` (default mode; max-autotune compiles take minutes)
Times are the GPU time of one call (models_gpu.device_time_ms: 10 calls captured in a CUDA
graph and replayed, do_bench median) where the op can be captured, else do_bench of plain calls
(the loop: host syncs).
The floors: flops / peak bf16 and bytes / copy bandwidth (hardware.ceilings: measured if the
GPU was calibrated, else the vendor's numbers); "% floor" is the starter's share of the larger.
Errors: the relative norm error of the starter and of ``grouped`` against the fp32 reference.

Logs and results.json go to --out; a markdown table is printed last.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from models_gpu import device_time_ms, time_ms  # noqa: E402  (the fused kinds' table times the same way)

GPU_SHAPES = [("mixtral-8x7b prefill", {"T": 4096, "K": 2, "E": 8, "D": 4096, "I": 14336}),
              ("mixtral-8x7b decode", {"T": 16, "K": 2, "E": 8, "D": 4096, "I": 14336}),
              ("qwen1.5-moe prefill", {"T": 4096, "K": 4, "E": 60, "D": 2048, "I": 1408}),
              ("hf:mixtral small default", {"T": 4096, "K": 2, "E": 8, "D": 256, "I": 512})]
CPU_SHAPES = [("tiny", {"T": 12, "K": 2, "E": 4, "D": 32, "I": 48})]


def rel_error(out, ref) -> float:
    return float((out.float() - ref.float()).norm() / ref.float().norm())


def bench_shape(name: str, shape: dict, gpu: bool) -> dict:
    import torch

    from autokernel.hardware import ceilings
    from autokernel.harness.roofline import floor_us
    from autokernel.problems import get_problem
    from autokernel.problems.registry import load_starter

    problem = get_problem("moe_experts")
    starter = load_starter("moe_experts")
    device, dtype = ("cuda", torch.bfloat16) if gpu else ("cpu", torch.float32)
    args = problem.make_inputs(shape, dtype, device, 0)
    row: dict = {"name": name, "shape": shape, "dtype": str(dtype).replace("torch.", ""),
                 "flops": problem.flops(shape), "bytes": problem.bytes(shape, dtype)}
    counts = torch.bincount(args[1].reshape(-1), minlength=shape["E"]).tolist()
    row["tokens_per_expert"] = [min(counts), max(counts)]
    with torch.no_grad():
        ref = problem.reference(*[a.float() if a.is_floating_point() else a for a in args])
        row["starter_error"] = rel_error(starter.kernel_fn(*args), ref)
        row["grouped_error"] = rel_error(problem.eager(*args), ref)
        ways = {"starter": (lambda: starter.kernel_fn(*args), True),
                "grouped": (lambda: problem.eager(*args), True),
                "loop": (lambda: problem.reference(*args), False)}
        if gpu:
            compiled = torch.compile(problem.eager)
            compiled(*args)
            ways["compile"] = (lambda: compiled(*args), True)
        for way, (fn, capture) in ways.items():
            row[f"{way}_ms"] = (device_time_ms(fn) if capture else time_ms(fn, True)) if gpu else time_ms(fn, False)
    if gpu:
        cei = ceilings()
        if cei is not None:
            row["floor_ms"] = floor_us(row["bytes"], row["flops"], cei.bandwidth_gbps, cei.peak_tflops("bf16")) / 1e3
            row["starter_of_floor"] = row["floor_ms"] / row["starter_ms"]
            row["bound"] = ("compute" if row["flops"] / (cei.peak_tflops("bf16") * 1e12)
                            > row["bytes"] / (cei.bandwidth_gbps * 1e9) else "memory")
        row["starter_tflops"] = row["flops"] / (row["starter_ms"] * 1e-3) / 1e12
    return row


def fmt(x, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def times(x) -> str:
    return "—" if x is None else f"{x:.2f}x"


def markdown(rows: list[dict]) -> str:
    lines = ["| shape | T,K,E,D,I | tokens/expert | starter ms | grouped ms | loop ms | compile ms | "
             "starter vs grouped | vs loop | vs compile | floor ms (bound) | % floor | starter TFLOP/s | "
             "error starter / grouped |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "exception" in r:
            lines.append(f"| {r['name']} | failed: {r['exception']} |" + " |" * 12)
            continue
        s = r["starter_ms"]
        ratio = {w: (r[f"{w}_ms"] / s if r.get(f"{w}_ms") else None) for w in ("grouped", "loop", "compile")}
        floor = f"{fmt(r.get('floor_ms'))} ({r.get('bound', '—')})"
        pct = f"{100 * r['starter_of_floor']:.0f}%" if r.get("starter_of_floor") else "—"
        lines.append(f"| {r['name']} | {','.join(str(v) for v in r['shape'].values())} | "
                     f"{r['tokens_per_expert'][0]}-{r['tokens_per_expert'][1]} | {s:.3f} | {fmt(r['grouped_ms'])} | "
                     f"{fmt(r['loop_ms'])} | {fmt(r.get('compile_ms'))} | {times(ratio['grouped'])} | "
                     f"{times(ratio['loop'])} | {times(ratio['compile'])} | {floor} | {pct} | "
                     f"{fmt(r.get('starter_tflops'), 0)} | {r['starter_error']:.1e} / {r['grouped_error']:.1e} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench_out")),
                    help="folder for results.json and moe_gpu.md (default $OUT or bench_out)")
    ap.add_argument("--max-minutes", type=float, default=6.0, help="shapes not started by then are skipped")
    ap.add_argument("--cpu-smoke", action="store_true", help="a tiny shape on CPU (Triton interpreter): checks the script")
    opts = ap.parse_args(argv)
    gpu = not opts.cpu_smoke
    if not gpu:
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    if gpu and not torch.cuda.is_available():
        print("no GPU here: use --cpu-smoke to check the script on CPU", file=sys.stderr)
        return 2
    opts.out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + opts.max_minutes * 60
    results: dict = {"device": torch.cuda.get_device_name() if gpu else "cpu (smoke)",
                     "torch": torch.__version__, "rows": [], "skipped": []}
    for name, shape in GPU_SHAPES if gpu else CPU_SHAPES:
        if time.monotonic() > deadline:
            results["skipped"].append(name)
            continue
        print(f"moe_experts {name} {shape}", flush=True)
        try:
            results["rows"].append(bench_shape(name, shape, gpu))
        except Exception as exc:  # noqa: BLE001 - one shape's failure is a row of the table
            traceback.print_exc()
            results["rows"].append({"name": name, "shape": shape, "exception": f"{type(exc).__name__}: {exc}"[:200]})
        (opts.out / "results.json").write_text(json.dumps(results, indent=2, default=str))
        if gpu:
            torch.cuda.empty_cache()
    table = markdown(results["rows"])
    if results["skipped"]:
        table += "\n\nnot run (time limit): " + ", ".join(results["skipped"])
    (opts.out / "moe_gpu.md").write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
