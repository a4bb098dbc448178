"""The host time of one call of our ops, next to PyTorch's: what a launch-bound model pays per op.

    PYTHONPATH=src python benchmarks/op_overhead_gpu.py --out DIR [--kinds layernorm,gelu,...]
    PYTHONPATH=src TRITON_INTERPRET=1 python benchmarks/op_overhead_gpu.py --out DIR --cpu-smoke

For each kind, at its smallest (CPU) shape on the GPU so that the kernels themselves take next to
nothing: host microseconds per call (calls queued without a sync, wall time / calls) of the eager
PyTorch op, the starter's ``kernel_fn`` called directly, and the op ``apply`` puts into a model
(``integrate.register_kernel_op``: torch.library custom op around ``kernel_fn``).  Then cProfile
of the op's calls: where the host time goes.  Writes DIR/op_overhead.md; prints a table last.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path


KINDS = "layernorm,add_layernorm,gelu,attention,embedding,rmsnorm,rotary,swiglu"


def host_us(fn, sync, calls: int) -> float:
    for _ in range(20):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - t0
    sync()
    return elapsed / calls * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--kinds", default=KINDS)
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--cpu-smoke", action="store_true")
    args = ap.parse_args(argv)
    import torch

    from autokernel.integrate import register_kernel_op
    from autokernel.problems import get_problem
    from autokernel.problems.registry import KERNELS_DIR, load_starter

    gpu = not args.cpu_smoke
    if gpu and not torch.cuda.is_available():
        print("op_overhead_gpu.py: no GPU here (use --cpu-smoke)", file=sys.stderr)
        return 2
    device, dtype = ("cuda", torch.bfloat16) if gpu else ("cpu", torch.float32)
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    calls = args.calls if gpu else 3
    args.out.mkdir(parents=True, exist_ok=True)
    rows, text = [], []
    for kind in [k.strip() for k in args.kinds.split(",") if k.strip()]:
        problem = get_problem(kind)
        inputs = problem.make_inputs(dict(problem.cpu_shapes[0]), dtype, device, 0)
        module = load_starter(kind)
        _, op = register_kernel_op(kind, f"overhead_{kind}", KERNELS_DIR / f"{kind}.py")
        eager = problem.eager or problem.reference
        with torch.inference_mode():
            row = {"kind": kind,
                   "eager": host_us(lambda: eager(*inputs), sync, calls),
                   "kernel_fn": host_us(lambda: module.kernel_fn(*inputs), sync, calls),
                   "op": host_us(lambda: op(*inputs), sync, calls)}
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(min(calls, 300)):
                op(*inputs)
            profiler.disable()
            sync()
        rows.append(row)
        stream = io.StringIO()
        pstats.Stats(profiler, stream=stream).sort_stats("tottime").print_stats(18)
        text += [f"## {kind}", "", "```", stream.getvalue(), "```", ""]
        print(f"{kind}: eager {row['eager']:.1f} µs, kernel_fn {row['kernel_fn']:.1f} µs, op {row['op']:.1f} µs",
              flush=True)
    table = ["| kind | eager µs | kernel_fn µs | op µs | op - kernel_fn µs |", "|---|---:|---:|---:|---:|"]
    table += [f"| {r['kind']} | {r['eager']:.1f} | {r['kernel_fn']:.1f} | {r['op']:.1f} | {r['op'] - r['kernel_fn']:.1f} |"
              for r in rows]
    (args.out / "op_overhead.md").write_text("\n".join(text + table) + "\n")
    print("\n".join(text))
    print("\n".join(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
