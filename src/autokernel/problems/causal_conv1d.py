"""causal_conv1d: a causal depthwise convolution over the sequence with its bias, and silu after
it where ``silu`` is 1, as transformers' ``causal_conv1d_fn`` computes it (Mamba's mixer, before
the selective scan), ``kernel_fn(x[B,D,L], weight[D,K], bias[D], silu) -> out[B,D,L]`` in x's dtype::

    c[b,d,l]   = bias[d] + sum_k weight[d,k] x[b,d,l-K+1+k]      (x = 0 before l = 0)
    out[b,d,l] = silu(c[b,d,l]) if silu else c[b,d,l]

Weight and bias are the mixer's ``conv1d`` parameters, in the model's dtype.  Without the
causal-conv1d package transformers runs ``F.conv1d`` with K - 1 zeros of padding on both sides,
keeps the first L outputs and applies the activation: 5-6% of hf:mamba's CPU time once the scan is
covered.

Bytes, Mamba-130m (D = 1536, K = 4) at B = 8, L = 2048, bf16 (e = 2): the op reads x and writes
out once, 2 BDL e = 101 MB (24 us at 4.2 TB/s), plus the (K + 1) D e of the parameters.  Eager
writes the padded convolution [B, D, L + K - 1] (~BDL e after reading x), then silu reads the
first L columns through a strided view and writes them: ~4 BDL e = 201 MB (``eager_bytes``).
Folding the convolution into the scan's kernel would save its output's write and read only if
the scan were the one reader; it is not (x_proj reads the same activations for dt, Bs and Cs), so
the convolution is a kind of its own.
FLOPs: (2K + 5) per output (K multiply-adds, the bias, silu counted as 4).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .base import Problem, Shape, element_size, generator, randn, standard_adversarial


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, silu: int) -> torch.Tensor:
    work = torch.promote_types(x.dtype, torch.float32)
    K = weight.shape[1]
    out = F.conv1d(x.to(work), weight.to(work).unsqueeze(1), bias.to(work), padding=K - 1,
                   groups=x.shape[1])[:, :, :x.shape[2]]
    return (F.silu(out) if silu else out).to(x.dtype)


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    B, D, L, K = shape["B"], shape["D"], shape["L"], shape["K"]
    gen = generator(device, seed)
    x = randn((B, D, L), dtype, device, gen)
    weight = randn((D, K), dtype, device, gen, scale=K ** -0.5)
    bias = randn((D,), dtype, device, gen, scale=0.5)
    return (x, weight, bias, shape["silu"])


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    x, weight, bias, silu = make_inputs(shape, dtype, device, seed + 1)
    gen = generator(device, seed + 7919)
    # sums of K products of up to 1e3 stay inside fp16
    return [(name, (t, weight, bias, silu)) for name, t in standard_adversarial(x, gen, large=1e3)]


def flops(shape: Shape) -> float:
    return (2.0 * shape["K"] + 1 + 4 * shape["silu"]) * shape["B"] * shape["D"] * shape["L"]


def bytes_moved(shape: Shape, dtype: torch.dtype) -> float:
    B, D, L, K = shape["B"], shape["D"], shape["L"], shape["K"]
    return (2.0 * B * D * L + (K + 1) * D) * element_size(dtype)


def eager_bytes(shape: Shape, dtype: torch.dtype) -> float:
    """F.conv1d reads x and writes [B, D, L + K - 1]; silu reads L of those columns and writes them."""
    B, D, L, K = shape["B"], shape["D"], shape["L"], shape["K"]
    return (B * D * L + B * D * (L + K - 1) + (2.0 * B * D * L if shape["silu"] else 0)) * element_size(dtype)


def _s(b: int, d: int, l: int, k: int, silu: int = 1) -> Shape:
    return {"B": b, "D": d, "L": l, "K": k, "silu": silu}


def make_problem() -> Problem:
    return Problem(
        kind="causal_conv1d",
        description="Mamba's causal depthwise conv1d over the sequence, its bias, and silu (silu = 1)",
        signature="kernel_fn(x[B,D,L], weight[D,K], bias[D], silu: int) -> out[B,D,L]  "
                  "# out[b,d,l] = act(bias[d] + sum_k weight[d,k]*x[b,d,l-K+1+k]), x = 0 before l = 0; in x's dtype",
        dims=("B", "D", "L", "K", "silu"),
        reference=reference,
        make_inputs=make_inputs,
        flops=flops,
        bytes=bytes_moved,
        # Mamba-130m (D 1536), -370m (D 2048) and -1.4b (D 4096), kernel 4
        gpu_shapes=(_s(8, 1536, 2048, 4), _s(4, 2048, 2048, 4), _s(1, 4096, 4096, 4), _s(8, 1536, 2048, 4, 0)),
        cpu_shapes=(_s(2, 8, 12, 4), _s(1, 12, 7, 4, 0)),
        gpu_edge_shapes=(_s(1, 1, 1, 4), _s(3, 37, 129, 4), _s(2, 1000, 3, 4, 0)),
        cpu_edge_shapes=(_s(1, 1, 1, 4), _s(3, 5, 3, 4, 0)),
        fixed_dims=("K", "silu"),
        adversarial_inputs=adversarial_inputs,
    )
