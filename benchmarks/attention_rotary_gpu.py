"""attention_rotary on a GPU: does fusing the rotary embedding into attention pay?

At the problem's GPU shapes (the LLaMA example at dim 4096: 32 heads of 128, 8 kv heads, 4x1024
tokens, bf16, causal; and the same with 32 kv heads), side by side in one run: eager (the
rotation as the model writes it, then SDPA), torch.compile of that same function (default and
max-autotune-no-cudagraphs), our rotary starter on q and k followed by our attention starter,
and the fused attention_rotary starter.  Each is checked against the fp32 reference first, then
timed (do_bench medians; GPU clocks ramped first; two alternating rounds, the best of each).
Reports us and the fraction of the attention's flop floor (730 TFLOP/s), with the byte floors
(4.2 TB/s) of the pair and of the fused kernel.  Writes attention_rotary.json and .md under
--out, prints the markdown table last.

    PYTHONPATH=src python benchmarks/attention_rotary_gpu.py --out DIR              # ~3-5 min on an H200
    PYTHONPATH=src python benchmarks/attention_rotary_gpu.py --out DIR --cpu-smoke  # tiny, interpreter
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

FLOP_PEAK = 730e12  # H200 dense bf16, the figure the problem's docstring uses
BYTE_PEAK = 4.2e12
METHODS = ("eager", "compile default", "compile max-autotune-no-cudagraphs", "rotary + attention starters",
           "fused starter", "fused starter, best knobs")
# the fused starter's defaults are the attention starter's, untuned for the rotation's registers:
# a small sweep gives the fairer answer (the separate starters' defaults were swept on the H200)
SWEEP = {"BLOCK_M": [64, 128], "BLOCK_N": [32, 64], "num_warps": [4, 8], "num_stages": [2, 3]}


def floors_us(problem, shape, dtype) -> dict:
    """The attention's flop floor, and the floors of the pair (attention's max(flops, bytes) plus
    the rotary's bytes) and of the fused kernel (max(flops, its bytes))."""
    from autokernel.problems.attention_rotary import unfused_bytes
    from autokernel.problems.base import element_size

    flop_us = problem.flops(shape) / FLOP_PEAK * 1e6
    fused = problem.bytes(shape, dtype)
    table = 2 * shape["S"] * shape["D"] * element_size(dtype)
    attention_bytes = fused - table  # q, k, v read, o written
    rotary_bytes = unfused_bytes(shape, dtype) - attention_bytes  # q, k read and written, the table read
    return {"flop_us": flop_us, "fused_us": max(flop_us, fused / BYTE_PEAK * 1e6),
            "pair_us": max(flop_us, attention_bytes / BYTE_PEAK * 1e6) + rotary_bytes / BYTE_PEAK * 1e6,
            "saved_mb": (unfused_bytes(shape, dtype) - fused) / 1e6}


def methods(problem, gpu: bool, smoke: bool) -> dict:
    import torch

    from autokernel.problems.attention_rotary import eager

    from autokernel.problems.registry import load_starter

    rotary, attention, fused = load_starter("rotary"), load_starter("attention"), load_starter("attention_rotary")

    def starters(q, k, v, cos, sin, causal, scale=None):
        return attention.kernel_fn(rotary.kernel_fn(q, cos, sin), rotary.kernel_fn(k, cos, sin), v, causal, scale)

    def compiled(mode):
        if smoke:  # no C++ compiler needed: dynamo + AOTAutograd as inductor would trace it
            return torch.compile(eager, backend="aot_eager")
        return torch.compile(eager, mode=mode)

    return {"eager": eager, "compile default": compiled("default"),
            "compile max-autotune-no-cudagraphs": compiled("max-autotune-no-cudagraphs"),
            "rotary + attention starters": starters, "fused starter": fused.kernel_fn}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--max-wall", type=float, default=480.0, help="seconds; what is left untimed is reported")
    ap.add_argument("--rep-ms", type=float, default=100.0, help="do_bench repetition window per timing")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny shape on CPU (Triton interpreter)")
    args = ap.parse_args(argv)
    if args.cpu_smoke:
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    from autokernel.hardware import ramp_gpu_clocks
    from autokernel.problems import get_problem

    gpu = not args.cpu_smoke
    if gpu and not torch.cuda.is_available():
        print("no GPU: run with --cpu-smoke on a CPU", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    device = "cuda" if gpu else "cpu"
    dtype = torch.bfloat16 if gpu else torch.float32
    problem = get_problem("attention_rotary")
    shapes = list(problem.gpu_shapes) if gpu else [{"B": 1, "H": 2, "Hkv": 1, "S": 16, "D": 16, "causal": 1}]

    def bench(fn) -> float:
        if gpu:
            import triton.testing
            return float(triton.testing.do_bench(fn, warmup=25, rep=args.rep_ms, return_mode="median")) * 1e3
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e6

    fns = methods(problem, gpu, args.cpu_smoke)
    rows = []
    for shape in shapes:
        inputs = problem.make_inputs(dict(shape), dtype, device, 0)
        q, k, v, cos, sin, causal = inputs[:6]
        call = (q, k, v, cos, sin, causal)
        from autokernel.harness.stages import upcast
        with torch.no_grad():
            want = problem.reference(*upcast(call, torch.float32 if gpu else torch.float64)).float()
        row = {"shape": dict(shape), "dtype": str(dtype).replace("torch.", ""), "gflop": problem.flops(shape) / 1e9,
               **floors_us(problem, shape, dtype), "us": {}, "ok": {}, "notes": []}
        for name, fn in fns.items():
            if time.perf_counter() - started > args.max_wall:
                row["notes"].append(f"{name}: not run (--max-wall)")
                continue
            try:
                with torch.no_grad():
                    got = fn(*call).float()  # compiles here, outside the timing
                if gpu:
                    torch.cuda.synchronize()
                tol = 3e-2 if dtype == torch.bfloat16 else 1e-4
                row["ok"][name] = bool(torch.allclose(got, want, atol=tol, rtol=tol))
            except Exception as exc:  # a method that fails is reported, not fatal
                row["ok"][name] = False
                row["notes"].append(f"{name}: {type(exc).__name__}: {str(exc)[:200]}")
        timed = [n for n in fns if row["ok"].get(n)]
        for _ in range(2):  # alternating rounds, the best of each: clocks and neighbours move
            if gpu:
                ramp_gpu_clocks(device, 1.0)
            for name in timed:
                if time.perf_counter() - started > args.max_wall:
                    break
                with torch.no_grad():
                    us = bench(lambda: fns[name](*call))
                row["us"][name] = min(us, row["us"].get(name, us))
        sweep_knobs(row, call, want, dtype, bench, started, args.max_wall, smoke=not gpu,
                    warm=(lambda: ramp_gpu_clocks(device, 0.3)) if gpu else (lambda: None))
        rows.append(row)
        (args.out / "attention_rotary.json").write_text(json.dumps({"rows": rows, "gpu": gpu,
                                                                   "device": torch.cuda.get_device_name() if gpu else "cpu"},
                                                                  indent=1))
    table = markdown(rows, gpu)
    (args.out / "attention_rotary.md").write_text(table)
    print(table)
    return 0


def sweep_knobs(row: dict, call: tuple, want, dtype, bench, started: float, max_wall: float, smoke: bool,
                warm) -> None:
    """Time the fused starter over ``SWEEP`` (two settings on the CPU smoke); the best correct
    one is the row's "fused starter, best knobs".  ``warm`` ramps the clocks after each
    setting's compile (idle host work lets them fall)."""
    import itertools

    import torch

    from autokernel.problems.registry import load_starter

    fused = load_starter("attention_rotary")
    configs = [dict(zip(SWEEP, values)) for values in itertools.product(*SWEEP.values())]
    best = None
    for cfg in configs[:2] if smoke else configs:
        if time.perf_counter() - started > max_wall:
            row["notes"].append("knob sweep cut short (--max-wall)")
            break
        try:
            with torch.no_grad():
                got = fused.attention_rotary(*call, knobs=cfg).float()
            tol = 3e-2 if dtype == torch.bfloat16 else 1e-4
            if not torch.allclose(got, want, atol=tol, rtol=tol):
                row["notes"].append(f"knobs {cfg}: wrong result")
                continue
            warm()
            with torch.no_grad():
                us = bench(lambda: fused.attention_rotary(*call, knobs=cfg))
        except Exception as exc:  # a setting that does not compile (shared memory) is noted
            row["notes"].append(f"knobs {cfg}: {type(exc).__name__}")
            continue
        if best is None or us < best[0]:
            best = (us, cfg)
    if best is not None:
        row["us"]["fused starter, best knobs"] = best[0]
        row["ok"]["fused starter, best knobs"] = True
        row["best_knobs"] = best[1]
        row["notes"].append(f"best knobs {best[1]}")


def markdown(rows: list[dict], gpu: bool) -> str:
    unit = "us" if gpu else "us (interpreter, not GPU performance)"
    lines = [f"| shape B×H×Hkv×S×D causal | method | {unit} | % of flop floor | vs eager | correct |",
             "|---|---|---:|---:|---:|---|"]
    for row in rows:
        s = row["shape"]
        label = f"{s['B']}×{s['H']}×{s['Hkv']}×{s['S']}×{s['D']} {'causal' if s['causal'] else 'full'}"
        eager = row["us"].get("eager")
        for name in METHODS:
            us = row["us"].get(name)
            pct = f"{100 * row['flop_us'] / us:.0f}%" if us else "–"
            ratio = f"{eager / us:.2f}×" if us and eager else "–"
            lines.append(f"| {label} | {name} | {us:.1f} |" if us else f"| {label} | {name} | – |")
            lines[-1] += f" {pct} | {ratio} | {'yes' if row['ok'].get(name) else 'NO' if name in row['ok'] else '–'} |"
        lines.append(f"| {label} | floors: flop {row['flop_us']:.1f}, pair {row['pair_us']:.1f}, fused "
                     f"{row['fused_us']:.1f} (fusion saves {row['saved_mb']:.1f} MB) | | | | |")
        fused = min((t for n, t in row["us"].items() if n.startswith("fused")), default=None)
        pair = row["us"].get("rotary + attention starters")
        others = {n: t for n, t in row["us"].items() if not n.startswith("fused")}
        if fused and pair and others:
            best = min(others, key=others.get)
            lines.append(f"| {label} | does it pay: fused {pair / fused:.2f}× the separate starters, "
                         f"{others[best] / fused:.2f}× the fastest other ({best}) | | | | |")
        for note in row["notes"]:
            lines.append(f"| {label} | note: {note} | | | | |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
