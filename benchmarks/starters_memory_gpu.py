"""Benchmark the memory-bound starter kernels on a GPU against eager PyTorch and torch.compile.

    PYTHONPATH=src python benchmarks/starters_memory_gpu.py [--kinds reduce,softmax] [--budget-s 220]
                                                            [--no-compile] [--out DIR]

For every kind at every GPU target shape (first declared dtype) it checks the starter
against the reference, then times with triton.testing.do_bench (median, L2 flushed): the
starter at its default KNOBS and at a few other knob settings, eager PyTorch, and (time
permitting, last) torch.compile(mode="max-autotune-no-cudagraphs").  GB/s counts the
problem's fewest bytes.  A JSON log goes to --out (default $OUT or ./bench_out).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from pathlib import Path

import torch
import triton
import triton.testing

from autokernel.problems import format_shape, get_problem
from autokernel.problems.base import dtype_name

COPY_PEAK_GBS = 4200.0
KINDS = ["reduce", "softmax", "rmsnorm", "layernorm", "swiglu", "rotary", "cross_entropy"]

# Knob settings tried besides the defaults (each is merged over the file's KNOBS).
ALTERNATIVES: dict[str, list[dict]] = {
    "reduce": [{"ROWS_PER_PROGRAM": 1, "BLOCK_N": 2048}, {"ROWS_PER_PROGRAM": 8, "BLOCK_N": 512},
               {"num_warps": 4}, {"variant": "persistent", "PROGRAMS_PER_SM": 8}, {"num_stages": 3}],
    "softmax": [{"ROWS_PER_PROGRAM": 1}, {"ROWS_PER_PROGRAM": 2, "num_warps": 8},
                {"PROGRAMS_PER_SM": 2}, {"BLOCK_N": 8192}, {"variant": "looped"}],
    "rmsnorm": [{"ROWS_PER_PROGRAM": 2}, {"num_warps": 4}, {"num_warps": 16},
                {"PROGRAMS_PER_SM": 4}, {"variant": "looped"}],
    "layernorm": [{"ROWS_PER_PROGRAM": 2}, {"num_warps": 4}, {"num_warps": 16},
                  {"PROGRAMS_PER_SM": 4}, {"variant": "looped"}],
    "swiglu": [{"BLOCK": 2048, "num_warps": 4}, {"BLOCK": 8192, "num_warps": 8}, {"BLOCK": 8192, "num_warps": 16},
               {"variant": "persistent", "PROGRAMS_PER_SM": 8}],
    "rotary": [{"BLOCK_S": 16, "HEADS_PER_PROGRAM": 8}, {"BLOCK_S": 64, "HEADS_PER_PROGRAM": 2, "num_warps": 8},
               {"HEADS_PER_PROGRAM": 1}, {"num_warps": 8}],
    "cross_entropy": [{"BLOCK_V": 8192}, {"BLOCK_V": 2048}, {"variant": "lane_max"},
                      {"PROGRAMS_PER_SM": 4}, {"num_stages": 3}],
}


def upcast(args: tuple) -> tuple:
    return tuple(a.float() if torch.is_tensor(a) and a.is_floating_point() else a for a in args)


def check(out: torch.Tensor, ref: torch.Tensor, tol) -> tuple[bool, float]:
    out, ref = out.double(), ref.double()
    err = (out - ref).abs()
    ok = bool((err <= tol.atol + tol.rtol * ref.abs()).all())
    rel = float((out - ref).norm() / ref.norm().clamp_min(1e-30))
    return ok and rel <= tol.max_rel_norm, rel


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median") * 1e3  # µs


def row(kind: str, shape: str, impl: str, knobs: dict | None, us: float | None, nbytes: float, ok=None, note="") -> dict:
    gbs = nbytes / (us * 1e-6) / 1e9 if us else None
    return {"kind": kind, "shape": shape, "impl": impl, "knobs": knobs, "us": us, "gbs": gbs,
            "pct_copy": 100 * gbs / COPY_PEAK_GBS if gbs else None, "correct": ok, "note": note}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--budget-s", type=float, default=220.0)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--out", default=os.environ.get("OUT", "bench_out"))
    opts = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    deadline = time.monotonic() + opts.budget_s
    out_dir = Path(opts.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    log_path = out_dir / "starters_memory_gpu.json"
    torch.backends.cuda.matmul.allow_tf32 = False
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}
    rows: list[dict] = []

    def save() -> None:
        log_path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))

    kinds = [k for k in opts.kinds.split(",") if k]
    cases = []  # (kind, problem, module, shape, args, nbytes)
    for kind in kinds:
        problem = get_problem(kind)
        module = importlib.import_module(f"autokernel.kernels.{kind}")
        defaults = dict(module.KNOBS)
        dtype = problem.dtypes[0]
        for shape in problem.gpu_shapes:
            name = f"{format_shape(shape)} {dtype_name(dtype)}"
            args = problem.make_inputs(shape, dtype, "cuda", 0)
            nbytes = problem.bytes(shape, dtype)
            ref = problem.reference(*upcast(args))
            tol = problem.tolerance(dtype)
            us = bench(lambda: problem.reference(*args))
            rows.append(row(kind, name, "eager", None, us, nbytes))
            for alt in [{}] + ALTERNATIVES.get(kind, []):
                if time.monotonic() > deadline:
                    break
                module.KNOBS.clear()
                module.KNOBS.update({**defaults, **alt})
                try:
                    ok, rel = check(module.kernel_fn(*args), ref, tol)
                    us = bench(lambda: module.kernel_fn(*args))
                    rows.append(row(kind, name, "starter", alt, us, nbytes, ok, f"rel={rel:.2e}"))
                except Exception as exc:  # a knob setting that fails to compile is a finding, not a stop
                    rows.append(row(kind, name, "starter", alt, None, nbytes, False, repr(exc)[:200]))
            module.KNOBS.clear()
            module.KNOBS.update(defaults)
            save()
            cases.append((kind, problem, shape, name, args, nbytes))
            del ref
        torch.cuda.empty_cache()
    if not opts.no_compile:
        for kind, problem, shape, name, args, nbytes in cases:
            if time.monotonic() > deadline - 20:
                rows.append(row(kind, name, "compile", None, None, nbytes, note="skipped: out of time"))
                continue
            compiled = torch.compile(problem.reference, mode="max-autotune-no-cudagraphs", dynamic=False)
            try:
                compiled(*args)
                rows.append(row(kind, name, "compile", None, bench(lambda: compiled(*args)), nbytes))
            except Exception as exc:
                rows.append(row(kind, name, "compile", None, None, nbytes, note=repr(exc)[:200]))
            save()
    save()
    print_table(rows)
    return 0


def print_table(rows: list[dict]) -> None:
    print(f"{'kind':14} {'shape':22} {'impl':8} {'µs':>9} {'GB/s':>7} {'%4200':>6} ok  knobs")
    for r in rows:
        us = f"{r['us']:.1f}" if r["us"] else "-"
        gbs = f"{r['gbs']:.0f}" if r["gbs"] else "-"
        pct = f"{r['pct_copy']:.0f}" if r["pct_copy"] else "-"
        ok = {True: "y", False: "N", None: "-"}[r["correct"]]
        print(f"{r['kind']:14} {r['shape']:22} {r['impl']:8} {us:>9} {gbs:>7} {pct:>6} {ok:3} {r['knobs'] or ''} {r['note'] if r['us'] is None else ''}")
    best: dict[tuple, dict] = {}
    for r in rows:
        if r["us"] and r["impl"] == "starter" and r["correct"]:
            key = (r["kind"], r["shape"])
            if key not in best or r["us"] < best[key]["us"]:
                best[key] = r
    print("\nbest starter setting per shape:")
    for (kind, shape), r in best.items():
        print(f"  {kind:14} {shape:22} {r['us']:.1f} µs {r['gbs']:.0f} GB/s  {r['knobs']}")


if __name__ == "__main__":
    raise SystemExit(main())
