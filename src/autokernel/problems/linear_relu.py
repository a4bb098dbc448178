"""linear_relu: a biased linear layer and its ReLU in one kernel,
``kernel_fn(x[M,K], w[N,K], b[N]) -> relu(x @ w^T + b)``.  Dims (M, N, K): tokens, output
features, input features.

OPT's decoder layers (``h = self.fc1(h); h = self.activation_fn(h)``, ``ACT2FN["relu"]`` an
``nn.ReLU``), T5's ``T5DenseActDense`` (``wi``, an ``nn.Linear`` without a bias, then ``act``, an
``nn.ReLU``), a forward calling ``torch.relu(self.key(x))`` (the ReLU a function call; RWKV's squared
ReLU, ``torch.square(torch.relu(self.key(x)))``, is ``linear_relu2``) and
any MLP of an ``nn.Linear`` followed by an ``nn.ReLU`` module or call.  The weight is in
nn.Linear layout ([out_features, in_features]).  The kernel always takes a bias: for a bias-free
linear ``apply`` hands it zeros (made once per module, in the weight's dtype and on its device),
so the judged ``relu(x @ w^T + b)`` at ``b = 0`` is the module's ``relu(x @ w^T)`` (the N zeros
read are 0.02% of the fused bytes at OPT-125m's shape).  Inputs, bytes, flops and the shared
numerics cases are ``linear_gelu``'s (imported from it): only the epilogue differs.

Bytes saved.  cuBLAS ``addmm`` (bias in its epilogue) then a separate ReLU kernel move
``(MK + NK + N + MN) e`` then ``2 MN e``; fused, the M x N pre-activation is never written nor
read back: ``(MK + NK + N + MN) e``, one write and one read of M x N (``2 MN e``) fewer, and one
launch.  OPT's eager ReLU is one element-wise kernel, so that is the whole saving.

Floors, bf16 (e = 2), 4x1024 tokens:

=====================================  ======  =============  ===========  ==========
shape (M tokens, K -> N)               GFLOP   fused MB       unfused MB   saved
=====================================  ======  =============  ===========  ==========
OPT-125m fc1, 4096 x 768 -> 3072       19.33   36.2           86.5         50.3 (58%)
OPT-350m fc1, 4096 x 1024 -> 4096      34.36   50.3           117.4        67.1 (57%)
OPT-1.3b fc1, 4096 x 2048 -> 8192      137.44  117.5          251.7        134.2 (53%)
=====================================  ======  =============  ===========  ==========

GFLOP is the GEMM's ``2 MNK`` (``flops``; the bias and the ReLU add 2 MN, left out of the
floor).  On the H200 (730 TFLOP/s bf16 measured, 4.2 TB/s) all three are compute-bound: at
OPT-125m's shape 26.5 us of GEMM against 8.6 us of fused traffic, and the separate ReLU pass
moves 50.3 MB more (~12 us), so fusing can gain up to ~1.45x on eager's ``addmm`` + ``relu``
(~1.34x at OPT-350m's, ~1.17x at OPT-1.3b's; the GEMM at its floor in both).

Inputs: ``linear_gelu``'s (``x ~ N(0, 1)``, ``w ~ N(0, 4/K)``, ``b ~ N(0, 0.25)``):
pre-activations ~ N(0, 4.25), about half of them cut to zero.  Tolerances: matmul's (true fp32
for fp32; TF32 fails).  ReLU is continuous, so an error in the pre-activation moves the output
by no more: the GEMM's tolerances hold.  Numerics cases: ``linear_gelu``'s shared ones
(matmul's large, tiny, mixed scales, dominant value, near-overflow sums with the problem's bias;
``bias-dominant``: tiny x, the output about relu(b), whole columns zero) and
``straddling-zero``: pre-activations on both sides of zero and close to it (x w^T / 16, std
0.125, and a bias ~ N(0, 0.0025)), where a kernel that cuts at a threshold, smooths the kink or rounds
before the bias shows.
"""
from __future__ import annotations

import random

import torch
import torch.nn.functional as F

from . import matmul
from .base import Problem, Shape, generator, randn
# unfused_bytes too: addmm then a ReLU pass moves what addmm then a GELU pass does
from .linear_gelu import biased_linear_cases, biased_linear_inputs, flops, nbytes, unfused_bytes  # noqa: F401

TOLERANCES = dict(matmul.TOLERANCES)


def _shape(m: int, n: int, k: int) -> Shape:
    return {"M": m, "N": n, "K": k}


# OPT-125m, OPT-350m and OPT-1.3b fc1 at 4x1024 tokens
GPU_SHAPES = (_shape(4096, 3072, 768), _shape(4096, 4096, 1024), _shape(4096, 8192, 2048))
# the first: whole power-of-two tiles both ways (a kernel may take another path in them: red-team
# pass 26 dropped NaN there), the second ragged
CPU_SHAPES = (_shape(32, 64, 32), _shape(24, 40, 48))
GPU_EDGE_SHAPES = (_shape(1, 3072, 768), _shape(2047, 3001, 769), _shape(4097, 1, 511))
CPU_EDGE_SHAPES = (_shape(1, 33, 17), _shape(37, 19, 45), _shape(5, 3, 1), _shape(3, 5, 1031))  # K: matmul's


def reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.relu(F.linear(x, w, b))


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    return biased_linear_inputs(shape, dtype, device, seed)


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    (x, w, _), cases = biased_linear_cases(shape, dtype, device, seed)
    gen = generator(device, seed + 104729)
    near_zero_w = (w.float() / 16).to(dtype)  # x w^T ~ N(0, 1/64)
    small_b = randn((shape["N"],), dtype, device, gen, scale=0.05)
    cases.append(("straddling-zero", (x, near_zero_w, small_b)))
    # torch.relu keeps NaN (red-team pass 25: the starters' tl.maximum, which drops it, passed every
    # case): a NaN in x makes its row's pre-activations NaN in any summation order, one in w its
    # column's; rows at both edges and a column through every row of tiles (pass 26: a kernel dropping
    # NaN in tiles away from the first row passed with x[0, 0] alone).  (An inf would not do: blocked
    # GEMMs multiply it by padding zeros, and eager bf16 on the CPU gave NaN where the float64
    # reference gave 0.)
    rng = random.Random(seed)
    special = x.clone()
    special[0, 0] = float("nan")
    special[-1, rng.randrange(shape["K"])] = float("nan")
    special_w = w.clone()
    special_w[rng.randrange(shape["N"]), rng.randrange(shape["K"])] = float("nan")
    cases.append(("non-finite", (special, special_w, small_b)))
    return cases


def make_problem() -> Problem:
    return Problem(
        kind="linear_relu",
        description="biased linear + ReLU in one kernel: relu(x @ w^T + b)",
        signature="kernel_fn(x[M,K], w[N,K], b[N]) -> [M,N]  # F.relu(F.linear(x, w, b))",
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
