"""matmul: ``kernel_fn(a[M,K], b[K,N]) -> [M,N]``, dims (M, N, K).

Inputs: ``a ~ N(0, 1)``, ``b ~ N(0, 1/K)`` so every output is O(1) whatever K.

Tolerances: the defaults of base.py for bf16/fp16.  fp32 is *true* fp32: the ground truth is
computed with TF32 off, and the fp32 relative-norm bound (2e-5) is far tighter than TF32's
10-bit mantissa allows (~5e-4), so a
kernel that lets tl.dot use TF32 on fp32 inputs fails on purpose (the starter passes
``input_precision="ieee"``).  Someone who wants TF32 speed should use bf16 inputs, which is
what TF32 rounds to anyway.  The eager op in each dtype passes with margin
(tests/test_problems_compute.py checks it on CPU).

Numerics cases: the standard ones (large, tiny, mixed scales per row, a dominant value),
``positive-sum`` (no cancellation, outputs near a third of the fp16 range), and
``fp16-overflow`` (integer values, exactly representable in every dtype, arranged so that an
fp16 running sum passes 65504 halfway through K although the exact result is small; fp32
accumulation is exact for them).
"""
from __future__ import annotations

import math

import torch

from .base import DEFAULT_TOLERANCES, Problem, Shape, Tolerance, element_size, generator, randn, standard_adversarial

# fp32: an absolute floor for outputs near zero (the error of a dot product scales with
# sum |a_k b_k|, not with |result|), and a relative norm far below TF32's ~5e-4.
TOLERANCES = {**DEFAULT_TOLERANCES, torch.float32: Tolerance(atol=1e-3, rtol=1e-4, max_rel_norm=2e-5)}


def _shape(m: int, n: int, k: int) -> Shape:
    return {"M": m, "N": n, "K": k}


GPU_SHAPES = (_shape(2048, 2048, 2048), _shape(4096, 4096, 4096), _shape(4096, 11008, 4096))
CPU_SHAPES = (_shape(32, 32, 32), _shape(48, 40, 64))
GPU_EDGE_SHAPES = (_shape(1, 4096, 4096), _shape(2047, 3001, 1025), _shape(4097, 1, 511))
# K = 1031: more than eight K blocks of the widest BLOCK_K (a kernel that sums a prefix of K meets it)
CPU_EDGE_SHAPES = (_shape(1, 33, 17), _shape(37, 19, 45), _shape(5, 3, 1), _shape(3, 5, 1031))


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    gen = generator(device, seed)
    a = randn((shape["M"], shape["K"]), dtype, device, gen)
    b = randn((shape["K"], shape["N"]), dtype, device, gen, scale=1.0 / math.sqrt(max(shape["K"], 1)))
    return a, b


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    gen = generator(device, seed)
    a, b = make_inputs(shape, dtype, device, seed)
    m, n, k = shape["M"], shape["N"], shape["K"]
    # large=100: bigger magnitudes are covered, exactly, by the two cases below
    cases = [(name, (x, b)) for name, x in standard_adversarial(a, gen, large=100.0)]

    a_pos = a.float().abs().add_(0.05)
    b_pos = torch.rand((k, n), generator=gen, device=device).add_(0.05)
    # E|a| * E|b| ~ 0.85 * 0.55: outputs near 2e4 at most, inside fp16's 65504
    b_pos.mul_(2e4 / (0.85 * 0.55 * max(k, 1)) / 3.0)
    cases.append(("positive-sum", (a_pos.to(dtype), b_pos.to(dtype))))

    if k >= 8:
        s, signs = overflow_halves(k, device)
        a_ovf = signs[None, :] * s + integer_noise((m, k), gen, device)
        b_ovf = s + integer_noise((k, n), gen, device)
        cases.append(("fp16-overflow", (a_ovf.to(dtype), b_ovf.to(dtype))))
    if dtype == torch.bfloat16:
        cases.append(("beyond-fp16-range", (outlier_feature(a, gen), b)))
    return cases


def outlier_feature(a: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """``a`` with one column (a feature) at +-2^17, past fp16's 65504, as bf16 models' massive
    activations are.  A kernel that fed bf16 operands to its dot as fp16 (exact for every other
    draw) got inf there.  One column, not all of ``a`` scaled: the outputs grow by 2^17 * |b| and no
    two huge terms cancel, so the accumulation's error stays inside bf16's element-wise bound.  (fp32
    needs no such case: fp16's 10 mantissa bits already fail its bounds on every draw.)"""
    out = a.to(torch.float32, copy=True)
    col = int(torch.randint(0, a.shape[-1], (1,), generator=gen, device=a.device))
    signs = torch.randint(0, 2, (a.shape[0],), generator=gen, device=a.device).float() * 2 - 1
    out[:, col] = signs * 2.0 ** 17
    return out.to(a.dtype)


def overflow_halves(k: int, device: str) -> tuple[int, torch.Tensor]:
    """(s, signs) for a dot of length ``k`` whose fp16 running sum overflows: with |a|, |b| ~ s
    (integers, exact in every dtype) and a's signs +1 over the first half of K and -1 over the
    second, the running sum passes 65504 after k/2 terms while the exact result stays small."""
    s = min(128, math.ceil(math.sqrt(1.5 * 2 * 65504 / k)))
    signs = torch.ones(k, device=device)
    signs[k // 2:] = -1
    return s, signs


def integer_noise(shape: tuple[int, ...], gen: torch.Generator, device: str) -> torch.Tensor:
    """Integers in [-2, 2]: the spread of ``overflow_halves``' operands, exact in every dtype."""
    return torch.randint(-2, 3, shape, generator=gen, device=device).float()


def flops(shape: Shape) -> float:
    return 2.0 * shape["M"] * shape["N"] * shape["K"]


def nbytes(shape: Shape, dtype: torch.dtype) -> float:
    m, n, k = shape["M"], shape["N"], shape["K"]
    return float((m * k + k * n + m * n) * element_size(dtype))


def make_problem() -> Problem:
    return Problem(
        kind="matmul",
        description="dense matrix product a @ b, fp32 accumulation",
        signature="kernel_fn(a[M,K], b[K,N]) -> [M,N]",
        dims=("M", "N", "K"),
        reference=reference,
        make_inputs=make_inputs,
        flops=flops,
        bytes=nbytes,
        gpu_shapes=GPU_SHAPES,
        cpu_shapes=CPU_SHAPES,
        gpu_edge_shapes=GPU_EDGE_SHAPES,
        cpu_edge_shapes=CPU_EDGE_SHAPES,
        adversarial_inputs=adversarial_inputs,
        tolerances=dict(TOLERANCES),
    )
