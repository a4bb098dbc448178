"""selective_scan: Mamba's selective scan with its gate, as transformers' ``mamba_selective_scan``
computes it with ``delta_softplus=True`` and D, z and the dt bias given,
``kernel_fn(u[B,D,L], delta[B,D,L], A[D,N], Bs[B,N,L], Cs[B,N,L], Dskip[D], z[B,D,L], delta_bias[D])
-> out[B,D,L]`` in u's dtype::

    dt[b,d,l]  = softplus(delta[b,d,l] + delta_bias[d])
    h[b,d,:]   = exp(dt A[d,:]) * h[b,d,:] + dt u[b,d,l] Bs[b,:,l]      (h = 0 before l = 0)
    out[b,d,l] = (sum_n h[b,d,n] Cs[b,n,l] + Dskip[d] u[b,d,l]) * silu(z[b,d,l])

``A`` (= -exp(A_log)), ``Dskip`` and ``delta_bias`` are fp32 whatever the model's dtype (the mixer
hands them over as ``.float()``); the rest are in the dtype.  Without the mamba-ssm CUDA package
(and on a CPU) transformers runs this in PyTorch: the discretization materialised over
[B, D, L, N] in fp32, then a Python loop over L of a multiply-add and a [B, D, N] x [B, N, 1]
matmul per step, a stack, the D skip and the gate: ~89% of hf:mamba's time at a small size.  The
kind is the whole function: dt's bias and softplus, the discretization, the recurrence, the output
contraction, the D skip and the silu gate; the state lives in registers (a kernel walks L, parallel
over batch x channels), nothing of size N leaves the kernel but A, Bs and Cs.

Bytes, Mamba-130m (D = 1536, N = 16) at B = 8, L = 2048, bf16 (e = 2): the op reads u, delta, z
and writes out, 4 BDL e = 201 MB, reads Bs and Cs, 2 BNL e = 1 MB, and A, Dskip, delta_bias in
fp32 (0.1 MB): ~202 MB, 48 us at 4.2 TB/s.  Eager (``eager_bytes``) writes exp(dt A) and
dt Bs and dt Bs u over [B, D, L, N] in fp32 and reads them back, and reads and writes the
[B, D, N] state at every step: ~32 BDLN bytes, 12.9 GB at that size, 268x the floor.
FLOPs: ~(6N + 12) per (b, d, l): per state n dt*A, exp, dt u * Bs, the multiply-add of the update
and the multiply-add of the contraction; per element the bias add, softplus (exp, log), the D
skip and silu.  2.72 GFLOP at that size; what limits a kernel is the BDLN = 403M exponentials
(the special-function units: ~0.1 ms on an H100), not the FMAs.  ``flops`` counts exp as one.

Baselines: the reference is a Python loop over L, as transformers' path is; torch.compile of it
unrolls every step (CPU, 2026-12-07: 35 s to compile 64 steps, 123 s for 256; the GPU shapes have
2048-4096).  The baselines time ``eager`` instead: the same scan a chunk of 32 steps at a time
(cumulative sums of dt A inside a chunk), 64-128 Python steps at the GPU shapes.

Numerics: dt from its real range (softplus(delta + bias) log-uniform in [1e-3, 1e-1], as Mamba
initialises it), A = -(1..N) scaled; cases: ``large-dt`` (delta + bias above softplus' threshold
of 20, where softplus is the identity and exp(dt A) underflows to 0), ``tiny-dt`` (delta + bias
near -15: dt ~ 3e-7, the state barely moves), ``long-memory`` (A near 0: the state keeps every
step, sums of L terms), ``large-u`` (u times 30).

Reference: float64 for fp32 inputs (fp32 for half precision, whose output rounding dominates).
The recurrence multiplies L decay factors near 1, and an fp32 scan in PyTorch on an H100 drifted:
the ``long-memory`` case at 1x4096x4096x16 was 1.45x the fp32 bound from float64 (the judge then
failed the starter, itself at 0.18x, as 1.77x), 0.60x at 8x1536x2048x16 (2026-12-07,
``benchmarks/scan_precision_gpu.py``).  On the CPU the fp32 reference stayed at 0.11x.

Tolerance: fp32's atol is matmul's (1e-3, not 1e-4): the output is a contraction of N state
terms, times a gate of up to ~|z|; where the terms cancel, fp32's rounding of terms of size ~100
(large-u) is an absolute error near 1e-4 on an output near 0, in any summation order (the harness
drew one at 1.8x the default bound: 9.3e-4 on 4.27 with z times 30 too).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .base import DEFAULT_TOLERANCES, Problem, Shape, Tolerance, element_size, generator, randn

TOLERANCES = {**DEFAULT_TOLERANCES, torch.float32: Tolerance(atol=1e-3, rtol=1e-4, max_rel_norm=1e-4)}
DT_RANGE = (1e-3, 1e-1)
EAGER_CHUNK = 32  # steps of ``eager``'s Python loop  # softplus(delta + bias), as Mamba's dt_proj bias is initialised


def reference(u: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, Bs: torch.Tensor, Cs: torch.Tensor,
              Dskip: torch.Tensor, z: torch.Tensor, delta_bias: torch.Tensor) -> torch.Tensor:
    work = torch.float64 if u.dtype in (torch.float32, torch.float64) else torch.float32
    u_, delta_, z_ = u.to(work), delta.to(work), z.to(work)
    A_, Bs_, Cs_ = A.to(work), Bs.to(work), Cs.to(work)
    dt = F.softplus(delta_ + delta_bias.to(work)[:, None])
    h = torch.zeros(u.shape[0], u.shape[1], A.shape[1], dtype=work, device=u.device)
    ys = []
    for l in range(u.shape[2]):
        dt_l = dt[:, :, l, None]
        h = torch.exp(dt_l * A_) * h + dt_l * u_[:, :, l, None] * Bs_[:, None, :, l]
        ys.append((h * Cs_[:, None, :, l]).sum(-1))
    y = torch.stack(ys, dim=-1) if ys else torch.zeros_like(u_)
    y = y + u_ * Dskip.to(work)[:, None]
    return (y * F.silu(z_)).to(u.dtype)


def eager(u: torch.Tensor, delta: torch.Tensor, A: torch.Tensor, Bs: torch.Tensor, Cs: torch.Tensor,
          Dskip: torch.Tensor, z: torch.Tensor, delta_bias: torch.Tensor) -> torch.Tensor:
    """The scan in PyTorch a chunk of ``EAGER_CHUNK`` steps at a time (the baselines' op): within a
    chunk h_t = exp(S_t) h_0 + sum_{s<=t} exp(S_t - S_s) dt_s u_s Bs_s, with S the cumulative
    sum of dt A over the chunk (each exponent <= 0: no overflow), in fp32.  L / EAGER_CHUNK Python
    steps instead of the reference's L, so that torch.compile's baseline traces a loop it can
    finish; it materialises [B, D, T, T, N] per chunk."""
    B, D, L = u.shape
    dt = F.softplus(delta.float() + delta_bias.float()[:, None])
    log_decay = dt[..., None] * A.float()[:, None, :]  # [B, D, L, N]
    dBu = (dt * u.float())[..., None] * Bs.float().transpose(1, 2)[:, None]  # [B, D, L, N]
    Cl = Cs.float().transpose(1, 2)[:, None]  # [B, 1, L, N]
    h = torch.zeros(B, D, A.shape[1], dtype=torch.float32, device=u.device)
    ys = []
    for c0 in range(0, L, EAGER_CHUNK):
        S = log_decay[:, :, c0:c0 + EAGER_CHUNK].cumsum(2)  # [B, D, T, N]
        T = S.shape[2]
        later = torch.ones(T, T, dtype=torch.bool, device=u.device).triu(1)  # s > t
        gaps = (S[:, :, :, None] - S[:, :, None]).masked_fill(later[:, :, None], float("-inf"))
        hs = S.exp() * h[:, :, None] + (gaps.exp() * dBu[:, :, None, c0:c0 + T]).sum(3)  # [B, D, T, N]
        ys.append((hs * Cl[:, :, c0:c0 + T]).sum(-1))
        h = hs[:, :, -1]
    y = torch.cat(ys, dim=-1) if ys else torch.zeros(B, D, L, device=u.device)
    return ((y + u.float() * Dskip.float()[:, None]) * F.silu(z.float())).to(u.dtype)


def dt_bias(D: int, gen: torch.Generator, device: str) -> torch.Tensor:
    """Mamba's dt_proj bias: the inverse softplus of dt log-uniform in ``DT_RANGE``."""
    lo, hi = math.log(DT_RANGE[0]), math.log(DT_RANGE[1])
    dt = torch.exp(torch.rand(D, generator=gen, device=device) * (hi - lo) + lo)
    return dt + torch.log(-torch.expm1(-dt))


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    B, D, L, N = shape["B"], shape["D"], shape["L"], shape["N"]
    gen = generator(device, seed)
    u = randn((B, D, L), dtype, device, gen)
    delta = randn((B, D, L), dtype, device, gen, scale=0.5)
    # -(1..N) as Mamba initialises A_log, each channel scaled: no two rows alike
    scale = torch.exp(torch.rand((D, 1), generator=gen, device=device) * 2 - 1)
    A = -torch.arange(1, N + 1, device=device, dtype=torch.float32)[None, :] * scale
    Bs = randn((B, N, L), dtype, device, gen)
    Cs = randn((B, N, L), dtype, device, gen)
    Dskip = randn((D,), torch.float32, device, gen)
    z = randn((B, D, L), dtype, device, gen)
    return (u, delta, A, Bs, Cs, Dskip, z, dt_bias(D, gen, device))


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    u, delta, A, Bs, Cs, Dskip, z, bias = make_inputs(shape, dtype, device, seed + 1)
    gen = generator(device, seed + 7919)
    shift = torch.rand(delta.shape, generator=gen, device=device)
    return [
        ("large-dt", (u, (25 + 10 * shift - bias[:, None]).to(dtype), A, Bs, Cs, Dskip, z, bias)),
        ("tiny-dt", (u, (-15 - shift - bias[:, None]).to(dtype), A, Bs, Cs, Dskip, z, bias)),
        ("long-memory", (u, delta, A * 1e-3, Bs, Cs, Dskip, z, bias)),
        ("large-u", ((u.float() * 30).to(dtype), delta, A, Bs, Cs, Dskip, z, bias)),
    ]


def heldout(shape: Shape, rng) -> Shape:
    """The same state size; another batch, channel count and length (odd ones)."""
    out = dict(shape)
    out["B"] = max(1, shape["B"] + rng.choice((-1, 1)))
    out["D"] = max(1, shape["D"] + rng.choice((-3, 5)))
    out["L"] = max(1, shape["L"] + rng.choice((-3, 5)))
    return out


def flops(shape: Shape) -> float:
    return (6.0 * shape["N"] + 12.0) * shape["B"] * shape["D"] * shape["L"]


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    B, D, L, N = shape["B"], shape["D"], shape["L"], shape["N"]
    return (4.0 * B * D * L + 2.0 * B * N * L) * element_size(dtype) + 4.0 * (D * N + 2 * D)


def eager_bytes(shape: Shape, dtype: torch.dtype) -> float:
    """transformers' PyTorch path: exp(dt A), dt Bs and dt Bs u written over [B, D, L, N] in fp32
    (3 writes, 2 reads), the loop reading exp(dt A) and dt Bs u and reading and writing the state
    twice a step (update, then the matmul's read): ~8 passes of 4 BDLN bytes, plus the four
    [B, D, L] tensors and the stack, D skip and gate's passes."""
    B, D, L, N = shape["B"], shape["D"], shape["L"], shape["N"]
    return 32.0 * B * D * L * N + 12.0 * B * D * L * element_size(dtype)


def _s(b: int, d: int, l: int, n: int) -> Shape:
    return {"B": b, "D": d, "L": l, "N": n}


def make_problem() -> Problem:
    return Problem(
        kind="selective_scan",
        description="Mamba's selective scan: softplus(delta + bias), exp(dt A) and dt Bs u, the recurrence over L, "
                    "the contraction with Cs, the D skip and the silu(z) gate",
        signature="kernel_fn(u[B,D,L], delta[B,D,L], A[D,N] fp32, Bs[B,N,L], Cs[B,N,L], Dskip[D] fp32, z[B,D,L], "
                  "delta_bias[D] fp32) -> out[B,D,L]  # h = exp(dt*A)*h + dt*u*Bs; out = (h.Cs + Dskip*u)*silu(z), "
                  "dt = softplus(delta + delta_bias); in u's dtype",
        dims=("B", "D", "L", "N"),
        reference=reference,
        eager=eager,
        make_inputs=make_inputs,
        flops=flops,
        bytes=bytes_moved,
        # Mamba-130m (D 1536), -370m (D 2048) and -1.4b (D 4096), N 16
        gpu_shapes=(_s(8, 1536, 2048, 16), _s(4, 2048, 2048, 16), _s(1, 4096, 4096, 16)),
        cpu_shapes=(_s(2, 8, 12, 16), _s(1, 12, 7, 4)),
        gpu_edge_shapes=(_s(1, 1, 1, 16), _s(3, 37, 129, 16), _s(2, 1000, 33, 16)),
        cpu_edge_shapes=(_s(1, 1, 1, 16), _s(3, 5, 3, 4)),
        tolerances=dict(TOLERANCES),
        fixed_dims=("N",),
        adversarial_inputs=adversarial_inputs,
        heldout=heldout,
    )
