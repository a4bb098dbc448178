"""linear_relu2: a biased linear layer and its squared ReLU in one kernel,
``kernel_fn(x[M,K], w[N,K], b[N]) -> relu(x @ w^T + b) ** 2``.  Dims (M, N, K): tokens, output
features, input features.

Nemotron's and Arcee's MLPs (``down_proj(act_fn(up_proj(x)))``, ``ACT2FN["relu2"]`` a
``ReLUSquaredActivation``, whose forward is ``torch.square(F.relu(x))``), RWKV's feed-forward
(``torch.square(torch.relu(self.key(x)))``, both written as calls) and any MLP of an
``nn.Linear`` followed by such a module or such calls.  A kind of its own rather than a flag on
``linear_relu``: its kernel files keep their ``kernel_fn(x, w, b)`` and their plans their
(M, N, K) shapes, and a kernel tuned for one epilogue is never judged on the other.  The
weight is in nn.Linear layout ([out_features, in_features]); a bias-free linear (all three
models') gets zeros from ``apply``, as for ``linear_relu``.  Shapes, inputs, bytes, flops and
the shared numerics cases are ``linear_relu``'s (and so ``linear_gelu``'s): only the epilogue
differs.

Bytes saved.  Eager runs ``addmm`` (or ``mm``: the bias, if any, in its epilogue), then ReLU,
then ``square``, each a pass of its own: ``(MK + NK + N + MN) e``, then ``2 MN e`` twice.
Fused, the M x N pre-activation and the M x N ReLU output are never written nor read back:
``(MK + NK + N + MN) e``, two writes and two reads of M x N (``4 MN e``) fewer, and two
launches.  (torch.compile fuses ReLU and square into one pass: against it the saving is
linear_relu's ``2 MN e``.)

Floors, bf16 (e = 2), 4x1024 tokens:

==============================================  =======  ========  ==========  ===========
shape (M tokens, K -> N)                        GFLOP    fused MB  unfused MB  saved
==============================================  =======  ========  ==========  ===========
Arcee AFM-4.5B up_proj, 4096 x 2560 -> 18432    386.55   266.4     870.4       604.0 (69%)
Nemotron-4 15B up_proj, 4096 x 6144 -> 24576    1236.95  553.7     1359.0      805.3 (59%)
OPT-125m's fc1 size, 4096 x 768 -> 3072         19.33    36.2      136.8       100.7 (74%)
==============================================  =======  ========  ==========  ===========

GFLOP is the GEMM's ``2 MNK`` (``flops``; the bias, the clamp and the square add 3 MN, left
out of the floor).  All three are compute-bound on the H200 (730 TFLOP/s bf16 measured,
4.2 TB/s): on Arcee's shape the two element-wise passes eager adds move 604 MB (~144 us) next
to a GEMM of ~530 us, so fusing can gain up to ~1.27x on eager's three kernels (~1.11x on
Nemotron-4's, ~1.9x at the small 768 -> 3072 shape, whose GEMM takes ~26 us).

Inputs: ``linear_gelu``'s (``x ~ N(0, 1)``, ``w ~ N(0, 4/K)``, ``b ~ N(0, 0.25)``):
pre-activations ~ N(0, 4.25), about half of them cut to zero, the rest squared (up to ~100).
Tolerances: matmul's.  Squaring doubles the relative error of a positive pre-activation (and
eager in bf16 rounds twice, after the GEMM and after the square: 3 x 2^-9 at worst, inside
bf16's 2e-2); the calibration test holds eager and the once-rounded fp64 result to them.

Numerics cases: ``linear_relu``'s (the shared ones and ``straddling-zero``, where a kernel
that cuts at a threshold or smooths the kink shows), each with its pre-activations scaled down
by a power of two (exactly) where their square would pass half the dtype's range (fp16's
``positive-sum``: pre-activations near 2e4, squares past 65504; the reference is then inf,
which no kernel should be asked to match), and ``square-after-clamp``: tiny x and a bias of
+-(1.5 to 3) by column, so that the output is b^2 (2.25 to 9) or exactly 0 column by column,
whatever the draw: a kernel that forgets to square returns |b| (a third off or more), one that
squares before the clamp returns b^2 on the negative columns.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import linear_relu
from .base import Problem, element_size, generator
from .linear_gelu import flops, nbytes  # noqa: F401
from .linear_relu import CPU_EDGE_SHAPES, CPU_SHAPES, GPU_EDGE_SHAPES, TOLERANCES, _shape  # noqa: F401

# Arcee AFM-4.5B's and Nemotron-4 15B's up_proj, and OPT-125m's fc1 size, at 4x1024 tokens
GPU_SHAPES = (_shape(4096, 18432, 2560), _shape(4096, 24576, 6144), _shape(4096, 3072, 768))


def reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.square(F.relu(F.linear(x, w, b)))


def make_inputs(shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    return linear_relu.make_inputs(shape, dtype, device, seed)


def unfused_bytes(shape, dtype: torch.dtype) -> float:
    """addmm, then a ReLU pass, then a square pass: the M x N intermediates written and read twice."""
    return nbytes(shape, dtype) + 4.0 * shape["M"] * shape["N"] * element_size(dtype)


def _fits_square(case: tuple, dtype: torch.dtype) -> tuple:
    """``case`` (x, w, b) with w and b scaled down by a power of two (exact) until the largest
    pre-activation's square is under half of ``dtype``'s range."""
    x, w, b = case
    limit = (torch.finfo(dtype).max / 2) ** 0.5
    peak = float(F.linear(x.double(), w.double(), b.double()).nan_to_num(0.0).abs().max()) \
        if x.numel() and w.numel() else 0.0  # the non-finite case's NaN row aside
    shift = 0
    while peak / 2.0 ** shift > limit:
        shift += 1
    if shift == 0:
        return case
    scale = 2.0 ** -shift
    return x, (w.float() * scale).to(dtype), (b.float() * scale).to(dtype)


def adversarial_inputs(shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    cases = [(name, _fits_square(args, dtype))
             for name, args in linear_relu.adversarial_inputs(shape, dtype, device, seed)]
    x, w, _ = make_inputs(shape, dtype, device, seed + 2)
    gen = generator(device, seed + 15485863)
    n = shape["N"]
    magnitude = 1.5 + 1.5 * torch.rand((n,), generator=gen, device=device)
    signs = torch.where(torch.arange(n, device=device) % 2 == 0, 1.0, -1.0)
    tiny_x = (x.float() * 1e-4).to(dtype)
    cases.append(("square-after-clamp", (tiny_x, w, (signs * magnitude).to(dtype))))
    return cases


def make_problem() -> Problem:
    return Problem(
        kind="linear_relu2",
        description="biased linear + squared ReLU in one kernel: relu(x @ w^T + b) ** 2",
        signature="kernel_fn(x[M,K], w[N,K], b[N]) -> [M,N]  # torch.square(F.relu(F.linear(x, w, b)))",
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
