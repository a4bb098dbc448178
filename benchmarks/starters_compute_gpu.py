"""Check and time the compute-bound starters (matmul, attention, fused_mlp) on a GPU.

    PYTHONPATH=src python benchmarks/starters_compute_gpu.py [--out DIR] [--budget SECONDS]
        [--kinds fused_mlp,matmul,attention] [--compile]

For each target shape: the starter's output against the problem's ground truth (fp32, TF32
off) with the problem's tolerance (also on the numerics cases, and the eager op in the
dtype, to see the tolerance calibration on GPU); then the median time
(``triton.testing.do_bench``, L2 flushed) of a few knob settings of the starter and of the
baselines — cuBLAS (torch.matmul), SDPA (default and each backend), eager and torch.compile
(with --compile).  Every timed starter setting is first checked against the truth; a setting
that fails (or does not compile) is reported and not timed.  fused_mlp's two launches are also
timed alone against the cuBLAS GEMMs they replace.
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

def _mm(variant, bm, bn, bk=64, stages=3, warps=8, group=8):
    return {"variant": variant, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": group,
            "num_warps": warps, "num_stages": stages}


MATMUL_KNOBS = [  # full knob sets, timed at every bf16 shape
    _mm("tiled", 128, 256), _mm("tiled", 256, 128), _mm("persistent", 128, 256), _mm("tma", 128, 256),
    _mm("tma_persistent", 128, 256), _mm("tma_persistent", 256, 128), _mm("tma_persistent", 128, 128, stages=4),
    _mm("tma_persistent", 128, 128, stages=4, warps=4), _mm("tma_persistent", 128, 256, group=16),
    _mm("tma", 128, 256, group=16),
]
MATMUL_KNOBS_FP16 = [_mm("tiled", 128, 256), _mm("tiled", 256, 128), _mm("tma_persistent", 128, 256),
                     _mm("tma_persistent", 256, 128)]
ATTENTION_KNOBS = [
    {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3},
    {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 2},
    {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3},
    {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3},
]
MLP_GATE_UP = [  # overrides of the gate/up knobs, timed alone (part "gate_up")
    {"variant": "dual"}, {"variant": "interleaved"}, {"variant": "interleaved", "num_stages": 4},
    {"variant": "dual_tma"}, {"variant": "dual_tma", "num_stages": 4},
]
MLP_DOWN = [  # overrides of the down knobs, timed alone (part "down")
    {"DOWN_variant": "tiled"}, {"DOWN_variant": "persistent"}, {"DOWN_variant": "tma_persistent"},
    {"DOWN_variant": "tma_persistent", "DOWN_BLOCK_M": 256, "DOWN_BLOCK_N": 128},
]
MLP_KNOBS = [  # whole-MLP overrides of the starter's KNOBS
    {},
    {"num_stages": 4},
    {"GROUP_M": 16},
    {"DOWN_BLOCK_M": 256, "DOWN_BLOCK_N": 128},
    {"DOWN_num_stages": 4},
    {"variant": "dual_tma", "num_stages": 4},  # the earlier default
]


def excess_and_norm(problem, dtype, out, ref) -> dict:
    tol = problem.tolerance(dtype)
    out = out.double()
    if not torch.isfinite(out).all():
        return {"ok": False, "why": "non-finite"}
    excess = ((out - ref).abs() - (tol.atol + tol.rtol * ref.abs())).max().item()
    rel = ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    return {"ok": excess <= 0 and rel <= tol.max_rel_norm, "excess": excess, "rel_norm": rel,
            "max_rel_norm": tol.max_rel_norm}


def truth(problem, args) -> torch.Tensor:
    """The problem's ground truth: fp32 inputs, TF32 off, compared in fp64."""
    up = [a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return problem.reference(*up).double()


def check(problem, fn, args, dtype, ref=None) -> dict:
    """Worst element-wise excess (<= 0 passes) and relative norm of fn(*args) vs the truth."""
    try:
        out = fn(*args)
    except Exception as exc:  # a variant that does not compile on this Triton is reported, not fatal
        return {"ok": False, "why": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return excess_and_norm(problem, dtype, out, truth(problem, args) if ref is None else ref)


def fmt_knobs(knobs: dict | None) -> str:
    if not knobs:
        return ""
    if {"variant", "BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages"} == set(knobs):
        k = knobs
        return (f"{k['variant']} {k['BLOCK_M']}x{k['BLOCK_N']}x{k['BLOCK_K']} g{k['GROUP_M']} "
                f"w{k['num_warps']} s{k['num_stages']}")
    return ",".join(f"{k}={v}" for k, v in knobs.items())


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median") * 1e3  # µs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--budget", type=float, default=200.0, help="seconds; optional work is skipped after it")
    ap.add_argument("--kinds", default="fused_mlp,matmul,attention", help="comma-separated, run in this order")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile max-autotune (slow)")
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

    def timed(kind, shape, dtype, who, fn, flops, knobs=None, args=None, ref=None, problem=None):
        """Check fn against ref (when given), then time it; failures are logged, not timed."""
        if ref is not None:
            res = check(problem, fn, args, dtype, ref)
            log["checks"].append({"kind": kind, "shape": format_shape(shape), "dtype": dtype_name(dtype),
                                  "case": f"random {who} {knobs}", "starter": res, "eager": {"ok": True}})
            if not res["ok"]:
                save()
                return
        try:
            us = bench(lambda: fn(*args)) if args is not None else bench(fn)
        except Exception as exc:
            log.setdefault("skipped", []).append(f"{kind} {who} {knobs}: {type(exc).__name__}: {str(exc)[:200]}")
            save()
            return
        record(kind, shape, dtype, who, us, flops, knobs)

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

    for kind in opts.kinds.split(","):
        {"matmul": run_matmul, "attention": run_attention, "fused_mlp": run_fused_mlp}[kind](
            run_checks, timed, record, left, log, opts)
        print(f"{kind} done at {time.time() - start:.0f}s", flush=True)

    log["wall_s"] = round(time.time() - start, 1)
    save()
    failed = [c for c in log["checks"] if not c["starter"]["ok"]]
    eager_failed = [c for c in log["checks"] if not c["eager"]["ok"]]
    print(f"\nchecks: {len(log['checks'])}, starter failures: {len(failed)}, eager failures: {len(eager_failed)}")
    for c in failed + eager_failed:
        print("  FAIL", c["kind"], c["shape"], c["dtype"], c["case"], "starter", c["starter"], "eager", c["eager"])
    for line in log.get("skipped", []):
        print("  SKIPPED", line)
    print(f"\n{'kind':10s} {'shape':24s} {'dtype':5s} {'who':22s} {'us':>9s} {'TFLOP/s':>8s}  knobs")
    for r in rows:
        knobs = fmt_knobs(r["knobs"])
        print(f"{r['kind']:10s} {r['shape']:24s} {r['dtype']:5s} {r['who']:22s} {r['us']:9.1f} {r['tflops']:8.1f}  {knobs}")


def run_matmul(run_checks, timed, record, left, log, opts) -> None:
    problem = get_problem("matmul")
    mm = importlib.import_module("autokernel.kernels.matmul")
    big = problem.gpu_shapes[1]  # 4096^3 first: the one with a target
    plan = [(big, torch.bfloat16)] + [(s, torch.bfloat16) for s in problem.gpu_shapes if s != big]
    plan += [(problem.gpu_shapes[0], torch.float16), (problem.gpu_shapes[0], torch.float32)]
    for i, (shape, dtype) in enumerate(plan):
        if left() < 20:
            log.setdefault("skipped", []).append(f"matmul {format_shape(shape)} {dtype_name(dtype)}: budget")
            continue
        args = run_checks(problem, mm, shape, dtype, adversarial=i == 0)
        ref = truth(problem, args)
        fl = problem.flops(shape)
        torch.backends.cuda.matmul.allow_tf32 = False
        timed("matmul", shape, dtype, "cuBLAS", lambda: torch.matmul(*args), fl)
        sweep = {torch.bfloat16: MATMUL_KNOBS, torch.float16: MATMUL_KNOBS_FP16}.get(dtype, [mm.KNOBS])
        for knobs in sweep:
            timed("matmul", shape, dtype, "starter", lambda a, b, kn=knobs: mm.matmul(a, b, knobs=kn), fl, knobs,
                  args, ref, problem)
    # ragged shapes: every variant (the tma ones fall back) and the defaults
    for edge in problem.gpu_edge_shapes[:2]:
        if left() < 15:
            break
        args = run_checks(problem, mm, edge, torch.bfloat16)
        ref = truth(problem, args)
        for variant in mm.KNOB_SPACE["variant"]:
            knobs = {**mm.KNOBS, "variant": variant}
            log["checks"].append({"kind": "matmul", "shape": format_shape(edge), "dtype": "bf16",
                                  "case": f"random {variant}", "eager": {"ok": True},
                                  "starter": check(problem, lambda a, b: mm.matmul(a, b, knobs=knobs), args,
                                                   torch.bfloat16, ref)})


def run_attention(run_checks, timed, record, left, log, opts) -> None:
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


def run_fused_mlp(run_checks, timed, record, left, log, opts) -> None:
    problem = get_problem("fused_mlp")
    mlp = importlib.import_module("autokernel.kernels.fused_mlp")
    dtype = torch.bfloat16
    for i, shape in enumerate(problem.gpu_shapes):
        if left() < 20:
            log.setdefault("skipped", []).append(f"fused_mlp {format_shape(shape)}: budget")
            continue
        args = run_checks(problem, mlp, shape, dtype, adversarial=i == 0)
        if i == 0:
            run_checks(problem, mlp, problem.gpu_edge_shapes[1], dtype)
        ref = truth(problem, args)
        fl = problem.flops(shape)
        timed("fused_mlp", shape, dtype, "eager", lambda: problem.reference(*args), fl)
        timed("fused_mlp", shape, dtype, "starter(KNOBS)", lambda *a: mlp.fused_mlp(*a), fl, None, args, ref,
              problem)
        overrides = MLP_KNOBS if i == 0 else MLP_KNOBS[:1] + MLP_KNOBS[-3:]
        for knobs in overrides:
            merged = {**mlp.KNOBS, **knobs}
            timed("fused_mlp", shape, dtype, "starter", lambda *a, kn=merged: mlp.fused_mlp(*a, knobs=kn), fl,
                  knobs, args, ref, problem)
        if i == 0:
            # the two launches alone (the down part reads a ready h), against the cuBLAS GEMMs
            x, w_gate, w_up, w_down = args
            m, d, hid = shape["M"], shape["D"], shape["H"]
            h = torch.empty((m, hid), device="cuda", dtype=dtype)
            out = torch.empty((m, d), device="cuda", dtype=dtype)
            timed("mlp.gate_up", shape, dtype, "cuBLAS x2",
                  lambda: (x @ w_gate.t(), x @ w_up.t()), 4.0 * m * d * hid)
            for knobs in MLP_GATE_UP:
                kn = {**mlp.KNOBS, **knobs}
                timed("mlp.gate_up", shape, dtype, "starter",
                      lambda kn=kn: mlp._gate_up(x, w_gate, w_up, h, kn, False, False), 4.0 * m * d * hid, knobs)
            mlp._gate_up(x, w_gate, w_up, h, mlp.KNOBS, False, False)
            timed("mlp.down", shape, dtype, "cuBLAS", lambda: h @ w_down.t(), 2.0 * m * d * hid)
            for knobs in MLP_DOWN:
                kn = {**mlp.KNOBS, **knobs}
                timed("mlp.down", shape, dtype, "starter",
                      lambda kn=kn: mlp._down(h, w_down, out, kn, False, False), 2.0 * m * d * hid, knobs)
            del h, out
        if i == 0 and opts.compile and left() > 90:
            compiled = torch.compile(problem.reference, mode="max-autotune-no-cudagraphs")
            compiled(*args)
            timed("fused_mlp", shape, dtype, "compile-max-autotune", lambda: compiled(*args), fl)


if __name__ == "__main__":
    main()
