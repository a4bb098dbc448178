"""Check and time the compute-bound starters (matmul, attention, fused_mlp) on a GPU.

    PYTHONPATH=src python benchmarks/starters_compute_gpu.py [--out DIR] [--budget SECONDS]

For each target shape: the starter's output against the problem's ground truth (fp32, TF32
off) with the problem's tolerance (also on the numerics cases, and the eager op in the
dtype, to see the tolerance calibration on GPU); then the median time
(``triton.testing.do_bench``, L2 flushed) of a few knob settings of the starter and of the
baselines — cuBLAS (torch.matmul), SDPA (default and each backend), eager and torch.compile.
Writes ``compute_starters.json`` under --out (default $OUT or .), the table last on stdout.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import time
from pathlib import Path

import torch
import triton
import triton.testing

from autokernel.problems import dtype_name, format_shape, get_problem

MATMUL_KNOBS = [
    {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3},
    {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 4},
    {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 4},
    {"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3},
]
ATTENTION_KNOBS = [
    {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3},
    {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 2},
    {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3},
    {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3},
]
MLP_KNOBS = [
    {},  # the file's KNOBS
    {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 8, "num_stages": 4},
    {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4, "num_stages": 4},
]


def check(problem, fn, args, dtype) -> dict:
    """Worst element-wise excess (<= 0 passes) and relative norm of fn(*args) vs the truth."""
    tol = problem.tolerance(dtype)
    up = [a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    ref = problem.reference(*up).double()
    out = fn(*args).double()
    if not torch.isfinite(out).all():
        return {"ok": False, "why": "non-finite"}
    excess = ((out - ref).abs() - (tol.atol + tol.rtol * ref.abs())).max().item()
    rel = ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    return {"ok": excess <= 0 and rel <= tol.max_rel_norm, "excess": excess, "rel_norm": rel,
            "max_rel_norm": tol.max_rel_norm}


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median") * 1e3  # µs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--budget", type=float, default=200.0, help="seconds; optional work is skipped after it")
    opts = ap.parse_args()
    start = time.time()
    out_dir = Path(opts.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    log: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
                 "rows": [], "checks": []}
    rows = log["rows"]

    def save():
        (out_dir / "compute_starters.json").write_text(json.dumps(log, indent=1))

    def left() -> float:
        return opts.budget - (time.time() - start)

    def record(kind, shape, dtype, who, us, flops, knobs=None):
        rows.append({"kind": kind, "shape": format_shape(shape), "dtype": dtype_name(dtype), "who": who,
                     "us": round(us, 2), "tflops": round(flops / us / 1e6, 1), "knobs": knobs})
        save()

    def run_checks(problem, kernel, shape, dtype, seed=0, adversarial=False):
        args = problem.make_inputs(shape, dtype, "cuda", seed)
        res = {"kind": problem.kind, "shape": format_shape(shape), "dtype": dtype_name(dtype), "case": "random",
               "starter": check(problem, kernel.kernel_fn, args, dtype),
               "eager": check(problem, problem.reference, args, dtype)}
        log["checks"].append(res)
        if adversarial and problem.adversarial_inputs:
            for name, adv in problem.adversarial_inputs(shape, dtype, "cuda", seed + 1):
                log["checks"].append({"kind": problem.kind, "shape": format_shape(shape), "dtype": dtype_name(dtype),
                                      "case": name, "starter": check(problem, kernel.kernel_fn, adv, dtype),
                                      "eager": check(problem, problem.reference, adv, dtype)})
        save()
        return args

    # ------------------------------------------------------------------ matmul
    problem = get_problem("matmul")
    mm = importlib.import_module("autokernel.kernels.matmul")
    plan = [(s, torch.bfloat16) for s in problem.gpu_shapes] + [(problem.gpu_shapes[0], torch.float16),
                                                                 (problem.gpu_shapes[0], torch.float32)]
    for i, (shape, dtype) in enumerate(plan):
        args = run_checks(problem, mm, shape, dtype, adversarial=i == 0)
        for edge in problem.gpu_edge_shapes[:2] if i == 0 else ():
            run_checks(problem, mm, edge, dtype)
        fl = problem.flops(shape)
        torch.backends.cuda.matmul.allow_tf32 = False
        record("matmul", shape, dtype, "cuBLAS", bench(lambda: torch.matmul(*args)), fl)
        for knobs in (MATMUL_KNOBS if dtype != torch.float32 else MATMUL_KNOBS[:1]):
            record("matmul", shape, dtype, "starter", bench(lambda: mm.matmul(*args, knobs=knobs)), fl, knobs)
    print(f"matmul done at {time.time() - start:.0f}s", flush=True)

    # --------------------------------------------------------------- attention
    from torch.nn.attention import SDPBackend, sdpa_kernel

    problem = get_problem("attention")
    att = importlib.import_module("autokernel.kernels.attention")
    for i, shape in enumerate(problem.gpu_shapes):
        dtype = torch.bfloat16
        q, k, v, causal = run_checks(problem, att, shape, dtype, adversarial=i == 0)
        if i == 0:
            run_checks(problem, att, shape, torch.float16)
            for edge in problem.gpu_edge_shapes:
                run_checks(problem, att, edge, dtype)
        fl = problem.flops(shape)
        gqa = shape["Hkv"] != shape["H"]

        def sdpa():
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

        record("attention", shape, dtype, "SDPA", bench(sdpa), fl)
        for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                              ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    us = bench(sdpa)
                record("attention", shape, dtype, f"SDPA-{name}", us, fl)
            except RuntimeError as exc:
                log.setdefault("skipped", []).append(f"SDPA-{name} {format_shape(shape)}: {str(exc)[:120]}")
        for knobs in ATTENTION_KNOBS:
            record("attention", shape, dtype, "starter",
                   bench(lambda: att.attention(q, k, v, causal, knobs=knobs)), fl, knobs)
    print(f"attention done at {time.time() - start:.0f}s", flush=True)

    # --------------------------------------------------------------- fused_mlp
    problem = get_problem("fused_mlp")
    mlp = importlib.import_module("autokernel.kernels.fused_mlp")
    for i, shape in enumerate(problem.gpu_shapes):
        dtype = torch.bfloat16
        args = run_checks(problem, mlp, shape, dtype, adversarial=i == 0)
        if i == 0:
            run_checks(problem, mlp, problem.gpu_edge_shapes[1], dtype)
        fl = problem.flops(shape)
        record("fused_mlp", shape, dtype, "eager", bench(lambda: problem.reference(*args)), fl)
        for knobs in MLP_KNOBS:
            merged = {**mlp.KNOBS, **knobs}
            record("fused_mlp", shape, dtype, "starter", bench(lambda: mlp.fused_mlp(*args, knobs=merged)), fl, knobs)
        if i == 0 and left() > 90:
            compiled = torch.compile(problem.reference, mode="max-autotune-no-cudagraphs")
            compiled(*args)
            record("fused_mlp", shape, dtype, "compile-max-autotune", bench(lambda: compiled(*args)), fl)
    print(f"fused_mlp done at {time.time() - start:.0f}s", flush=True)

    log["wall_s"] = round(time.time() - start, 1)
    save()
    failed = [c for c in log["checks"] if not c["starter"]["ok"]]
    eager_failed = [c for c in log["checks"] if not c["eager"]["ok"]]
    print(f"\nchecks: {len(log['checks'])}, starter failures: {len(failed)}, eager failures: {len(eager_failed)}")
    for c in failed + eager_failed:
        print("  FAIL", c["kind"], c["shape"], c["dtype"], c["case"], "starter", c["starter"], "eager", c["eager"])
    print(f"\n{'kind':10s} {'shape':24s} {'dtype':5s} {'who':22s} {'us':>9s} {'TFLOP/s':>8s}  knobs")
    for r in rows:
        knobs = "" if not r["knobs"] else ",".join(f"{k}={v}" for k, v in r["knobs"].items())
        print(f"{r['kind']:10s} {r['shape']:24s} {r['dtype']:5s} {r['who']:22s} {r['us']:9.1f} {r['tflops']:8.1f}  {knobs}")


if __name__ == "__main__":
    main()
