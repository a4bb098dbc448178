"""How closely the CPU judge's model of an fp32 ``/`` (interpreter_as_gpu.approximate_quotients: the
numerator times the rounded reciprocal) matches what a GPU's ``/`` gives, and how often either differs
from the correctly rounded quotient.  Run on a GPU:

    PYTHONPATH=src python benchmarks/division_model_gpu.py [--count 4000000]

Prints one markdown table: for each operand range, the share of quotients where the GPU's ``/`` is
the correctly rounded one, where it equals the model, and the largest distance in ulp of each."""
from __future__ import annotations

import argparse

import numpy as np
import torch
import triton
import triton.language as tl

from autokernel.harness.interpreter_as_gpu import approximate_quotients


try:
    from triton.language.extra import libdevice
except ImportError:  # older Triton
    from triton.language.extra.cuda import libdevice


@triton.jit
def _divide(a_ptr, b_ptr, out_ptr, n, HOW: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(a_ptr + offsets, mask=mask, other=1.0)
    b = tl.load(b_ptr + offsets, mask=mask, other=1.0)
    if HOW == 0:
        q = a / b
    elif HOW == 1:
        q = 1.0 / b  # a constant numerator: the compiler may emit a reciprocal
    else:
        q = libdevice.fast_dividef(a, b)
    tl.store(out_ptr + offsets, q, mask=mask)


def _ulps(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    xi = x.view(np.int32).astype(np.int64)
    yi = y.view(np.int32).astype(np.int64)
    xi = np.where(xi < 0, -(xi & 0x7FFFFFFF), xi)
    yi = np.where(yi < 0, -(yi & 0x7FFFFFFF), yi)
    return np.abs(xi - yi)


def _operands(name: str, count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    if name == "uniform(-1,1) / uniform(-1,1)":
        return rng.uniform(-1, 1, count), rng.uniform(-1, 1, count)
    if name == "1 / uniform(0.5,2)":
        return np.ones(count), rng.uniform(0.5, 2, count)
    if name == "1 / logspace(-30,30)":
        return np.ones(count), 10.0 ** rng.uniform(-30, 30, count)
    if name == "normal / logspace(-30,30)":
        return rng.standard_normal(count), 10.0 ** rng.uniform(-30, 30, count)
    if name == "log(d/8) / log(128/8)":  # relative_position_bias's bucket ratio
        d = rng.integers(8, 4096, count).astype(np.float32)
        return np.log(d / np.float32(8.0)).astype(np.float32), np.full(count, np.log(np.float32(16.0)), np.float32)
    if name == "integers / integers":
        return rng.integers(1, 1 << 20, count).astype(np.float64), rng.integers(1, 1 << 12, count).astype(np.float64)
    raise ValueError(name)


RANGES = ("uniform(-1,1) / uniform(-1,1)", "1 / uniform(0.5,2)", "1 / logspace(-30,30)", "normal / logspace(-30,30)",
          "log(d/8) / log(128/8)", "integers / integers")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=4_000_000)
    parser.add_argument("--device", default="cuda", help="cpu: under TRITON_INTERPRET=1, the CPU judge's own model")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    cases = [(name, 0) for name in RANGES] + [("1.0 / b in the kernel, b = logspace(-30,30)", 1),
                                              ("fast_dividef(normal, logspace(-30,30))", 2)]
    if args.device == "cpu":  # the CPU judge's interpreter (its libdevice has no fast_dividef)
        from autokernel.harness import interpreter_as_gpu
        interpreter_as_gpu.install()
        cases = cases[:-1]
    for name, how in cases:
        a64, b64 = _operands(name if how == 0 else "normal / logspace(-30,30)", args.count, rng)
        if how == 1:
            a64 = np.ones_like(a64)
        a = np.asarray(a64, np.float32)
        b = np.asarray(b64, np.float32)
        exact = (a.astype(np.float64) / b.astype(np.float64)).astype(np.float32)
        model = approximate_quotients(a, b, exact)
        ta, tb = torch.from_numpy(a).to(args.device), torch.from_numpy(b).to(args.device)
        out = torch.empty_like(ta)
        _divide[(triton.cdiv(args.count, 1024),)](ta, tb, out, args.count, HOW=how, BLOCK=1024)
        gpu = out.cpu().numpy()
        finite = np.isfinite(exact) & np.isfinite(gpu)
        gpu, exact, model = gpu[finite], exact[finite], model[finite]
        rows.append((name, int(finite.sum()), float(np.mean(gpu == exact)), float(np.mean(model == exact)),
                     float(np.mean(gpu == model)), int(_ulps(gpu, exact).max()), int(_ulps(gpu, model).max())))
    where = torch.cuda.get_device_name() if args.device == "cuda" else args.device
    print(f"device: {where}, torch {torch.__version__}, triton {triton.__version__}")
    print("| operands | quotients | GPU = correctly rounded | model = correctly rounded | GPU = model "
          "| max ulp GPU vs exact | max ulp GPU vs model |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, n, ge, me, gm, ue, um in rows:
        print(f"| {name} | {n} | {ge:.6f} | {me:.6f} | {gm:.6f} | {ue} | {um} |")


if __name__ == "__main__":
    main()
