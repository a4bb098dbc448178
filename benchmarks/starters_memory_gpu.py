"""Benchmark the memory-bound starter kernels on a GPU against eager PyTorch and torch.compile.

    PYTHONPATH=src python benchmarks/starters_memory_gpu.py [--kinds softmax,cross_entropy] [--budget-s 220]
                                                            [--no-compile] [--compile-mode MODE] [--out DIR]
    TRITON_INTERPRET=1 PYTHONPATH=src python benchmarks/starters_memory_gpu.py --dry-run --kinds softmax

For every kind at every GPU target shape (first declared dtype) it checks the starter
against the reference, then times with triton.testing.do_bench (median, L2 flushed): the
starter at its default KNOBS and at the other knob settings `alternatives` lists for that
shape (a setting that fails the check is not timed), eager PyTorch, and (time permitting,
last) torch.compile.  GB/s counts the problem's fewest bytes.  A JSON log goes to --out
(default $OUT or ./bench_out), rewritten after every shape.

--budget-s bounds the run: no new setting starts after it, a torch.compile starts only with
--compile-reserve-s left, a watchdog prints what was measured and exits 3 at budget + 10 s,
and faulthandler kills the process at budget + 25 s whatever it is doing.
--dry-run runs the same loop on CPU at the problems' tiny CPU shapes (Triton interpreter,
wall-clock timing, no torch.compile) to check the script itself.
"""
from __future__ import annotations

import argparse
import faulthandler
import importlib
import json
import os
import sys
import threading
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
    "softmax": [{"ROWS_PER_PROGRAM": 2, "num_warps": 8}, {"PROGRAMS_PER_SM": 2}, {"variant": "looped"}],
    "rmsnorm": [{"ROWS_PER_PROGRAM": 2}, {"num_warps": 4}, {"num_warps": 16},
                {"PROGRAMS_PER_SM": 4}, {"variant": "looped"}],
    "layernorm": [{"ROWS_PER_PROGRAM": 2}, {"num_warps": 4}, {"num_warps": 16},
                  {"PROGRAMS_PER_SM": 4}, {"variant": "looped"}],
    "swiglu": [{"BLOCK": 2048, "num_warps": 4}, {"BLOCK": 8192, "num_warps": 8}, {"BLOCK": 8192, "num_warps": 16},
               {"variant": "persistent", "PROGRAMS_PER_SM": 8}],
    "rotary": [{"BLOCK_S": 16, "HEADS_PER_PROGRAM": 8}, {"BLOCK_S": 64, "HEADS_PER_PROGRAM": 2, "num_warps": 8},
               {"HEADS_PER_PROGRAM": 1}, {"num_warps": 8}],
    "cross_entropy": [{"SPLIT": 2}, {"SPLIT": 4}, {"BLOCK_V": 4096}, {"BLOCK_V": 16384, "num_warps": 16},
                      {"variant": "lane_max"}, {"PROGRAMS_PER_SM": 4}, {"num_stages": 3}],
}

# softmax rows wider than this get the wide-row sweep instead of ALTERNATIVES["softmax"]
SOFTMAX_WIDE = 16384
SOFTMAX_WIDE_ALTERNATIVES = [
    {"variant": "row_vec", "num_warps": 16},
    {"variant": "single_pass", "MAX_BLOCK_N": 65536, "num_warps": 32},
    {"variant": "looped"},
    {"variant": "looped", "BLOCK_N": 16384, "num_warps": 32},
    {"variant": "looped", "BLOCK_N": 16384, "num_warps": 32, "PROGRAMS_PER_SM": 1},
    {"variant": "looped", "BLOCK_N": 8192, "num_warps": 16, "PROGRAMS_PER_SM": 2},
    {"variant": "looped", "BLOCK_N": 4096, "num_warps": 8, "PROGRAMS_PER_SM": 4},
]


def alternatives(kind: str, shape: dict, wide: int = SOFTMAX_WIDE) -> list[dict]:
    """Knob settings to time at one shape, the defaults ({}) first."""
    if kind == "softmax" and shape["N"] > wide:
        return [{}] + SOFTMAX_WIDE_ALTERNATIVES
    if kind == "softmax":
        return [{}, {"variant": "row_vec"}] + ALTERNATIVES["softmax"]
    return [{}] + ALTERNATIVES.get(kind, [])


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


def bench_cpu(fn, reps: int = 3) -> float:
    """Wall-clock median for --dry-run (no CUDA events on CPU)."""
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e6)
    return sorted(times)[len(times) // 2]


def row(kind: str, shape: str, impl: str, knobs: dict | None, us: float | None, nbytes: float, ok=None, note="") -> dict:
    gbs = nbytes / (us * 1e-6) / 1e9 if us else None
    return {"kind": kind, "shape": shape, "impl": impl, "knobs": knobs, "us": us, "gbs": gbs,
            "pct_copy": 100 * gbs / COPY_PEAK_GBS if gbs else None, "correct": ok, "note": note}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--budget-s", type=float, default=220.0)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--compile-mode", default="max-autotune-no-cudagraphs")
    parser.add_argument("--compile-reserve-s", type=float, default=25.0,
                        help="start a torch.compile only with this much budget left")
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes, Triton interpreter")
    parser.add_argument("--out", default=os.environ.get("OUT", "bench_out"))
    opts = parser.parse_args()
    kinds = [k for k in opts.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        print(f"unknown kind(s) {unknown}; choose from {','.join(KINDS)}", file=sys.stderr)
        return 2
    if opts.dry_run:
        if os.environ.get("TRITON_INTERPRET") != "1":
            print("--dry-run needs TRITON_INTERPRET=1 in the environment", file=sys.stderr)
            return 2
        device, timer = "cpu", bench_cpu
    elif not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    else:
        device, timer = "cuda", bench
    deadline = time.monotonic() + opts.budget_s
    out_dir = Path(opts.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    log_path = out_dir / "starters_memory_gpu.json"
    torch.backends.cuda.matmul.allow_tf32 = False
    meta = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu (dry run)",
            "torch": torch.__version__, "triton": triton.__version__, "kinds": kinds, "budget_s": opts.budget_s}
    rows: list[dict] = []
    done = threading.Lock()  # held by whoever prints the final table

    def save() -> None:
        log_path.write_text(json.dumps({"meta": meta, "rows": list(rows)}, indent=1))

    def watchdog() -> None:
        if done.acquire(blocking=False):
            rows.append(row("-", "-", "watchdog", None, None, 0, note=f"budget {opts.budget_s:.0f} s + 10 s passed"))
            save()
            print_table(list(rows))
            sys.stdout.flush()
            os._exit(3)

    timer_thread = threading.Timer(opts.budget_s + 10, watchdog)
    timer_thread.daemon = True
    timer_thread.start()
    # last resort if a C call holds the GIL: dump stacks and exit, from a C thread
    faulthandler.dump_traceback_later(opts.budget_s + 25, exit=True)

    cases = []  # (kind, problem, module, shape, args, nbytes)
    for kind in kinds:
        problem = get_problem(kind)
        module = importlib.import_module(f"autokernel.kernels.{kind}")
        defaults = dict(module.KNOBS)
        dtype = problem.dtypes[0]
        shapes = problem.cpu_shapes if opts.dry_run else problem.gpu_shapes
        for shape in shapes:
            if time.monotonic() > deadline:
                rows.append(row(kind, format_shape(shape), "starter", None, None, 0, note="skipped: out of time"))
                continue
            name = f"{format_shape(shape)} {dtype_name(dtype)}"
            args = problem.make_inputs(shape, dtype, device, 0)
            nbytes = problem.bytes(shape, dtype)
            ref = problem.reference(*upcast(args))
            tol = problem.tolerance(dtype)
            us = timer(lambda: problem.reference(*args))
            rows.append(row(kind, name, "eager", None, us, nbytes))
            # the dry run sends its wider CPU shape through the wide-row sweep too
            for alt in alternatives(kind, shape, wide=256 if opts.dry_run else SOFTMAX_WIDE):
                if time.monotonic() > deadline:
                    rows.append(row(kind, name, "starter", alt, None, nbytes, note="skipped: out of time"))
                    continue
                module.KNOBS.clear()
                module.KNOBS.update({**defaults, **alt})
                try:
                    ok, rel = check(module.kernel_fn(*args), ref, tol)
                    us = timer(lambda: module.kernel_fn(*args)) if ok else None
                    rows.append(row(kind, name, "starter", alt, us, nbytes, ok,
                                    f"rel={rel:.2e}" + ("" if ok else " WRONG: not timed")))
                except Exception as exc:  # a knob setting that fails to compile is a finding, not a stop
                    rows.append(row(kind, name, "starter", alt, None, nbytes, False, repr(exc)[:200]))
            module.KNOBS.clear()
            module.KNOBS.update(defaults)
            save()
            cases.append((kind, problem, shape, name, args, nbytes))
            del ref
        torch.cuda.empty_cache()
    if not opts.no_compile and not opts.dry_run:
        for kind, problem, shape, name, args, nbytes in cases:
            if time.monotonic() > deadline - opts.compile_reserve_s:
                rows.append(row(kind, name, "compile", None, None, nbytes, note="skipped: out of time"))
                continue
            compiled = torch.compile(problem.reference, mode=opts.compile_mode, dynamic=False)
            try:
                compiled(*args)
                rows.append(row(kind, name, "compile", None, bench(lambda: compiled(*args)), nbytes,
                                note=opts.compile_mode))
            except Exception as exc:
                rows.append(row(kind, name, "compile", None, None, nbytes, note=repr(exc)[:200]))
            save()
    if not done.acquire(blocking=False):  # the watchdog is printing; let it finish and exit
        time.sleep(60)
    timer_thread.cancel()
    faulthandler.cancel_dump_traceback_later()
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
        note = r["note"] if r["us"] is None or r["impl"] == "compile" else ""
        print(f"{r['kind']:14} {r['shape']:22} {r['impl']:8} {us:>9} {gbs:>7} {pct:>6} {ok:3} {r['knobs'] or ''} {note}")
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
