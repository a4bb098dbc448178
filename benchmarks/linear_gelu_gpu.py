"""linear_gelu on a GPU: gelu(x @ w^T + b) at GPT-2 and BERT MLP shapes, side by side in one run.

    PYTHONPATH=src python benchmarks/linear_gelu_gpu.py --out DIR [--max-minutes 9] [--sweep]
    PYTHONPATH=src python benchmarks/linear_gelu_gpu.py --out DIR --cpu-smoke   # the script itself, on CPU

For each shape (bf16): eager PyTorch (``F.gelu(F.linear(x, w, b))``: cuBLAS addmm with the bias,
then one GELU kernel), for the GPT-2 row also GPT-2's own spelled-out ``NewGELUActivation``
after the addmm (what hf:gpt2 runs), torch.compile of the eager op (mode ``default`` and
``max-autotune-no-cudagraphs``), and the shipped starter kernel; with ``--sweep`` also the best
of a few starter knob settings.  Each is checked against the fp32 reference first, then timed
with triton.testing.do_bench (median, L2 flushed) after the GPU clocks are ramped, twice in
alternating order, the best of the two kept.  The table gives each time, the starter's speedup
on each baseline, and its fraction of the flop floor (2MNK at 730 TFLOP/s) and of the byte
floor (x, w, b read once, the output written once, at 4.2 TB/s).

--max-minutes bounds the run: a shape starts only while SHAPE_MINUTES (its two compiles, the
sweep's builds and the timings, ~2.5 min on an H200) are left, so the run ends near the bound.  Logs and
``results.json`` go to --out; a markdown table is printed last.  --cpu-smoke runs the same
steps on CPU at tiny shapes under the Triton interpreter, without torch.compile: the numbers
mean nothing, the plumbing is checked.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from models_gpu import time_ms  # noqa: E402  (the same do_bench timing as the fused kinds' table)

PEAK_TFLOPS = 730.0  # H200 bf16 dense, measured (the judge's calibrated ceiling)
PEAK_TBS = 4.2  # H200 HBM3e, measured copy bandwidth
GPU_SHAPES = [("GPT-2 c_fc, 4x1024 tokens", {"M": 4096, "N": 3072, "K": 768, "tanh": 1}),
              ("BERT-base, 8x512 tokens", {"M": 4096, "N": 3072, "K": 768, "tanh": 0}),
              ("BERT-large, 8x512 tokens", {"M": 4096, "N": 4096, "K": 1024, "tanh": 0}),
              ("GPT-2 c_fc, 1x1024 tokens", {"M": 1024, "N": 3072, "K": 768, "tanh": 1})]
CPU_SHAPES = [("tiny tanh", {"M": 32, "N": 48, "K": 32, "tanh": 1}), ("tiny erf", {"M": 24, "N": 40, "K": 48, "tanh": 0})]
SWEEP = [{"variant": v, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": s}
         for v in ("tiled", "tma", "tma_persistent") for bm, bn in ((128, 128), (128, 256)) for s in (3, 4)]
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs")
SHAPE_MINUTES = 2.5  # GPU: what one shape is expected to take, compiles included


def floors_us(problem, shape, dtype) -> tuple[float, float]:
    """(flop floor, byte floor) in microseconds."""
    return problem.flops(shape) / (PEAK_TFLOPS * 1e12) * 1e6, problem.bytes(shape, dtype) / (PEAK_TBS * 1e12) * 1e6


def gpt2_new_gelu(x):
    """GPT-2's NewGELUActivation as transformers writes it (eight element-wise ops)."""
    import torch

    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def candidates(problem, args, gpu: bool, sweep: bool, log) -> dict:
    """name -> callable, each checked against the fp32 reference (a wrong one is left out)."""
    import torch
    import torch.nn.functional as F

    from autokernel.verify import rel_error

    x, w, b, tanh = args
    ref = problem.reference(x.float(), w.float(), b.float(), tanh)
    fns = {"eager": lambda: problem.reference(x, w, b, tanh)}
    if tanh:
        wt = w.t().contiguous()  # Conv1D's [K, N] weight
        fns["eager (GPT-2 NewGELU)"] = lambda: gpt2_new_gelu(torch.addmm(b, x, wt))
    if gpu:
        for mode in COMPILE_MODES:
            compiled = torch.compile(lambda x_, w_, b_: F.gelu(F.linear(x_, w_, b_), approximate="tanh" if tanh else "none"),
                                     mode=mode, dynamic=False)
            fns[f"compile ({mode})"] = (lambda c=compiled: c(x, w, b))
    from autokernel.problems.registry import load_starter

    module = load_starter("linear_gelu")
    fns["starter"] = lambda: module.kernel_fn(x, w, b, tanh)
    if sweep:
        for knobs in SWEEP:
            tuned = load_starter("linear_gelu", knobs)
            fns["sweep " + ",".join(str(v) for v in knobs.values())] = (lambda t=tuned: t.kernel_fn(x, w, b, tanh))
    bound = problem.tolerance(x.dtype).max_rel_norm
    checked = {}
    with torch.no_grad():
        for name, fn in fns.items():
            try:
                err = rel_error(fn(), ref)  # autokernel.verify's: NaN/inf or a wrong shape is inf
            except Exception as exc:  # a config that does not compile is reported, not fatal
                log(f"  {name}: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            if err > bound:
                log(f"  {name}: relative error {err:.3g} above the bound {bound:g}: left out")
                continue
            checked[name] = fn
    return checked


def bench_shape(label: str, shape: dict, gpu: bool, sweep: bool, log) -> dict:
    import torch

    from autokernel.problems import get_problem
    from autokernel.problems.linear_gelu import unfused_bytes

    problem = get_problem("linear_gelu")
    device, dtype = ("cuda", torch.bfloat16) if gpu else ("cpu", torch.float32)
    args = problem.make_inputs(shape, dtype, device, 0)
    fns = candidates(problem, args, gpu, sweep, log)
    if gpu:
        from autokernel.hardware import ramp_gpu_clocks

        ramp_gpu_clocks(device, 1.0)
    times: dict[str, float] = {}
    with torch.no_grad():
        for order in (list(fns), list(reversed(fns))):  # best of two, alternating order
            for name in order:
                t = time_ms(fns[name], gpu)
                times[name] = min(times.get(name, math.inf), t)
    flop_us, byte_us = floors_us(problem, shape, dtype)
    row = {"label": label, "shape": shape, "dtype": str(dtype).replace("torch.", ""), "times_ms": times,
           "flop_floor_us": flop_us, "byte_floor_us": byte_us,
           "bytes_fused": problem.bytes(shape, dtype), "bytes_unfused": unfused_bytes(shape, dtype)}
    sweeps = {k: v for k, v in times.items() if k.startswith("sweep ")}
    if sweeps:
        best = min(sweeps, key=sweeps.get)
        row["best_sweep"] = best
        times["starter (best sweep)"] = sweeps[best]
    log(f"  {label}: " + ", ".join(f"{k} {v * 1e3:.1f} us" for k, v in times.items() if not k.startswith("sweep ")))
    return row


def fmt_us(ms: float | None) -> str:
    return "-" if ms is None else f"{ms * 1e3:.1f}"


def markdown(rows: list[dict], skipped: list[str], device: str) -> str:
    cols = ["eager", "eager (GPT-2 NewGELU)", *(f"compile ({m})" for m in COMPILE_MODES), "starter",
            "starter (best sweep)"]
    shown = [c for c in cols if any(c in r.get("times_ms", {}) for r in rows)]
    lines = [f"linear_gelu on {device} (times in us, median of do_bench; floors: {PEAK_TFLOPS:g} TFLOP/s, "
             f"{PEAK_TBS:g} TB/s)", "",
             "| shape | M x K -> N | GELU | " + " | ".join(shown) + " | starter vs eager | vs GPT-2's own GELU "
             "| vs best compile | starter % flop floor | % byte floor |",
             "|---|---|---|" + "---|" * len(shown) + "---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['label']} | error: {r['error']} |")
            continue
        t, s = r["times_ms"], r["shape"]
        best = t.get("starter (best sweep)", t.get("starter"))
        if "starter (best sweep)" in t and "starter" in t:
            best = min(t["starter"], t["starter (best sweep)"])
        compiles = [t[k] for k in t if k.startswith("compile")]
        cells = [fmt_us(t.get(c)) for c in shown]
        ratio = (lambda base: f"{base / best:.2f}x" if base and best else "-")
        flop = f"{r['flop_floor_us'] / (best * 1e3):.0%}" if best else "-"
        byte = f"{r['byte_floor_us'] / (best * 1e3):.0%}" if best else "-"
        lines.append(f"| {r['label']} | {s['M']} x {s['K']} -> {s['N']} | {'tanh' if s['tanh'] else 'erf'} | "
                     + " | ".join(cells) + f" | {ratio(t.get('eager'))} | {ratio(t.get('eager (GPT-2 NewGELU)'))} "
                     f"| {ratio(min(compiles) if compiles else None)} "
                     f"| {flop} | {byte} |")
    lines.append("")
    lines.append("The starter columns' ratios and floor fractions use the faster of the shipped starter and the "
                 "best sweep setting (when --sweep ran).  Bytes the fusion saves against addmm + GELU: "
                 "2 M N elements (one write and one read of the pre-activation).")
    if skipped:
        lines.append(f"Not run (out of time): {', '.join(skipped)}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench_out")))
    ap.add_argument("--max-minutes", type=float, default=9.0)
    ap.add_argument("--cpu-smoke", action="store_true")
    ap.add_argument("--sweep", action="store_true", help="also time a few starter knob settings (12)")
    opts = ap.parse_args(argv)
    gpu = not opts.cpu_smoke
    if not gpu:
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    if gpu and not torch.cuda.is_available():
        print("no GPU here: use --cpu-smoke to check the script on CPU", file=sys.stderr)
        return 2
    if opts.max_minutes <= 0:
        print("--max-minutes must be positive", file=sys.stderr)
        return 2
    opts.out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + opts.max_minutes * 60
    log_file = (opts.out / "linear_gelu_gpu.log").open("a")

    def log(msg: str) -> None:
        print(msg, flush=True)
        log_file.write(msg + "\n")
        log_file.flush()

    device = torch.cuda.get_device_name() if gpu else "cpu (smoke: interpreter, numbers mean nothing)"
    results: dict = {"device": device, "rows": [], "skipped": []}
    for label, shape in GPU_SHAPES if gpu else CPU_SHAPES:
        if results["rows"] and time.monotonic() > deadline - (SHAPE_MINUTES * 60 if gpu else 0):
            results["skipped"].append(label)
            continue
        log(f"{label} {shape}")
        try:
            results["rows"].append(bench_shape(label, shape, gpu, opts.sweep, log))
        except Exception as exc:
            log(traceback.format_exc())
            results["rows"].append({"label": label, "shape": shape, "error": f"{type(exc).__name__}: {exc}"[:200]})
        (opts.out / "results.json").write_text(json.dumps(results, indent=2, default=str))
    table = markdown(results["rows"], results["skipped"], device)
    (opts.out / "linear_gelu_gpu.md").write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
