"""xielu: the xIELU activation over a tensor,
``kernel_fn(x[M,N], alpha_p, alpha_n, beta, eps) -> out[M,N]`` in x's dtype::

    out = alpha_p * x * x + beta * x                      where x > 0
          (expm1(min(x, eps)) - x) * alpha_n + beta * x    elsewhere

Apertus' MLP activation (``down_proj(act_fn(up_proj(x)))``, ``act_fn`` transformers'
``XIELUActivation``).  The module keeps two learned parameters and two buffers; what it
multiplies by is ``alpha_p = softplus(self.alpha_p)`` and ``alpha_n = beta + softplus(self.alpha_n)``,
computed in the parameters' dtype, ``beta`` and ``eps`` (-1e-6) its buffers.  ``apply`` hands the
kernel those four numbers as the module computes them (``integrate/xielus.py``).  Without the
optional xIELU CUDA extension (or on a CPU) the module runs its Python fallback: about a dozen
element-wise ops (softplus and add on the scalars; gt, mul, mul, mul, min, expm1, sub, mul, mul,
add, add, where over [T, I]), about half of Apertus' CPU time at a small size (41-53% covered before).

Bytes, Apertus-8B (hidden 4096, intermediate 21504), 4096 tokens, bf16 (e = 2):
``2 MN e`` = 352.3 MB fused (read x, write out once): 84 us at 4.2 TB/s.  Eager's fallback
makes twelve passes over [T, I] tensors (``eager_bytes``: 29 MN e = 5.1 GB, ~1.2 ms), next to
the up_proj GEMM's 722 GFLOP and (MK + NK + MN) e = 386 MB (~1 ms at 730 TFLOP/s).  Fusing the
activation into the up_proj's epilogue (a ``linear_xielu``, as ``linear_relu2``) would save only
the last 2 MN e (352 MB, ~84 us, ~8% of the GEMM) on top of this kind, and would need a GEMM as
fast as cuBLAS's to gain anything; this element-wise kind takes the ~1.1 ms of the fallback's
27 MN e more with a kernel that is easy to make correct.

Scalars: every draw takes all four from continuous ranges (a kernel must not be able to read
them as flags of a small set): ``alpha_p`` log-uniform in [0.05, 20], ``beta`` uniform in
[0.125, 1], ``alpha_n = beta + a`` with ``a`` log-uniform in [0.05, 20] (softplus is positive),
``eps = -e`` with ``e`` log-uniform in [1e-7, 1e-2] (Apertus: alpha_p = alpha_n = 0.8, beta 0.5,
eps -1e-6 at initialisation).  Inputs: N(0, 2).

Numerics cases: ``standard_adversarial``'s (large magnitudes kept where alpha_p x^2 stays inside
the dtype's range, tiny ones, mixed scales, one dominant value a row); ``around-eps``: values
between 4 eps and -2 eps, where the clamp decides the output (a kernel that ignores eps, taking
min(x, 0), is off by about (eps - x) alpha_n, the output's own size there: fp32's tolerance sees
it on every draw, bf16's only where |eps| alpha_n passes its atol); ``small-negative``:
values in (-1e-2, 0), where expm1 written as exp(x) - 1 loses its relative precision; NaN
among regular values (NaN out: the negative branch's ``- x`` and ``beta * x`` carry it whatever
min does).  The reference computes in fp32 (fp64 when upcast) and rounds once; the module's own
bf16 forward rounds after each op (tests/test_xielu.py compares both with the fp64 result).
FLOPs: ~10 MN (both branches, the exponential counted as one).
"""
from __future__ import annotations

import math
import random

import torch

from .base import (Problem, Shape, element_size, generator, log_uniform, randn, rowwise_shapes,
                   standard_adversarial, with_nonfinite)

ALPHA_RANGE = (0.05, 20.0)  # alpha_p, and alpha_n - beta (log-uniform)
BETA_RANGE = (0.125, 1.0)  # uniform
EPS_RANGE = (1e-7, 1e-2)  # -eps (log-uniform)


def reference(x: torch.Tensor, alpha_p: float, alpha_n: float, beta: float, eps: float) -> torch.Tensor:
    work = torch.promote_types(x.dtype, torch.float32)
    v = x.to(work)
    negative = (torch.expm1(torch.clamp(v, max=eps)) - v) * alpha_n + beta * v
    return torch.where(v > 0, alpha_p * v * v + beta * v, negative).to(x.dtype)


def eager(x: torch.Tensor, alpha_p: float, alpha_n: float, beta: float, eps: float) -> torch.Tensor:
    """What transformers' fallback (``XIELUActivation._xielu_python``) runs, in x's dtype, the
    scalars as tensors of that dtype."""
    ap, an, b, e = (torch.tensor(v, dtype=x.dtype, device=x.device) for v in (alpha_p, alpha_n, beta, eps))
    return torch.where(x > 0, ap * x * x + b * x, (torch.expm1(torch.min(x, e)) - x) * an + b * x)


def draw_scalars(seed: int) -> tuple[float, float, float, float]:
    """(alpha_p, alpha_n, beta, eps) for the input draw ``seed``, each from a continuous range."""
    rng = random.Random(int(seed) * 104729 + 17)
    alpha_p = log_uniform(rng, *ALPHA_RANGE)
    beta = rng.uniform(*BETA_RANGE)
    alpha_n = beta + log_uniform(rng, *ALPHA_RANGE)
    eps = -log_uniform(rng, *EPS_RANGE)
    return alpha_p, alpha_n, beta, eps


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    x = randn((shape["M"], shape["N"]), dtype, device, generator(device, seed), scale=2.0)
    return (x, *draw_scalars(seed))


def largest_input(dtype: torch.dtype, alpha_p: float, alpha_n: float) -> float:
    """The largest |x| whose output stays under a quarter of ``dtype``'s range (and 1e6)."""
    limit = torch.finfo(dtype).max / 4
    return min(1e6, math.sqrt(limit / (2 * alpha_p)), limit / (2 * alpha_n))


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    x, *scalars = make_inputs(shape, dtype, device, seed + 1)
    alpha_p, alpha_n, _, eps = scalars
    large = largest_input(dtype, alpha_p, alpha_n)
    gen = generator(device, seed + 7919)
    cases = standard_adversarial(x, gen, large=large)
    cases = [(name, t.float().clamp(-large, large).to(dtype)) for name, t in cases]
    m, n = shape["M"], shape["N"]
    u = torch.rand((m, n), generator=gen, device=device)
    cases.append(("around-eps", (eps * (4.0 - 6.0 * u)).to(dtype)))  # from 4 eps up to -2 eps
    cases.append(("small-negative", (-1e-2 * u).to(dtype)))
    cases.append(("nan", with_nonfinite(x, gen)))
    return [(name, (t, *scalars)) for name, t in cases]


def flops(shape: Shape) -> float:
    return 10.0 * shape["M"] * shape["N"]


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    return 2.0 * shape["M"] * shape["N"] * element_size(dtype)


def eager_bytes(shape: Shape, dtype: torch.dtype) -> float:
    """The fallback's passes over [M, N], in MN e: gt (read x, write a bool: 1.5), alpha_p * x (2),
    times x (3), beta * x (2), add (3), min (2), expm1 (2), sub (3), times alpha_n (2), beta * x
    again (2), add (3), where (a bool and two reads, a write: 3.5): 29 MN e."""
    return 29.0 * shape["M"] * shape["N"] * element_size(dtype)


def make_problem() -> Problem:
    return Problem(
        kind="xielu",
        description="xIELU activation (Apertus' MLP): alpha_p x^2 + beta x for x > 0, "
                    "(expm1(min(x, eps)) - x) alpha_n + beta x elsewhere",
        signature="kernel_fn(x[M,N], alpha_p: float, alpha_n: float, beta: float, eps: float) -> out[M,N]  "
                  "# where(x > 0, alpha_p*x*x + beta*x, (expm1(min(x, eps)) - x)*alpha_n + beta*x), in x's dtype",
        dims=("M", "N"),
        reference=reference,
        eager=eager,
        make_inputs=make_inputs,
        flops=flops,
        bytes=bytes_moved,
        # Apertus-8B's up_proj output (intermediate 21504) at 4096 and 1024 tokens, and a narrower MLP
        gpu_shapes=({"M": 4096, "N": 21504}, {"M": 1024, "N": 21504}, {"M": 4096, "N": 8192}),
        **rowwise_shapes(),
        adversarial_inputs=adversarial_inputs,
    )
