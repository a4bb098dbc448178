"""moe_experts_gptoss: GPT-OSS's experts, ``kernel_fn(x[T,D], top_k_index[T,K], top_k_weights[T,K],
gate_up[E,D,2I], gate_up_bias[E,2I], down[E,I,D], down_bias[E,D], alpha, limit) -> [T,D]``.

The routing is ``moe_experts``' (token t went to the K distinct experts ``top_k_index[t]`` with
weights ``top_k_weights[t]``, fp32; an index outside [0, E), transformers' expert-parallel
sentinel E, adds nothing).  Each expert is GPT-OSS's clamped, biased GLU, its weights stored as
``x @ W`` (transposed against nn.Linear) with gate and up interleaved column by column::

    gu = x[t] @ gate_up[e] + gate_up_bias[e];   g = gu[0::2], u = gu[1::2]
    g = min(g, limit);  u = clamp(u, -limit, limit)
    h = (u + 1) * g * sigmoid(alpha * g)
    out[t] = sum_k w[t,k] * (h @ down[e] + down_bias[e]),   e = idx[t,k]

(GPT-OSS: alpha 1.702, limit 7.0.)  A kind of its own: ``moe_experts``' kernel files take
another layout and activation.  Dims (T, K, E, D, I) as ``moe_experts``.

Inputs: x ~ N(0, 1), the routing of ``moe_experts`` (uneven loads), gate_up ~ N(0, 1/D), biases
~ N(0, 0.5²), down ~ N(0, 1/I); alpha walks through 1.702 on even draws and is drawn from
[1, 3] on odd ones, limit through 7.0 and [3, 10], so neither can be kept.  Numerics cases
(besides ``moe_experts``' crowded experts, sentinels, small inputs and routing scales): gate and
up driven past the limit (the clamps decide the output; down scaled back), g and u spread over
the clamps' neighbourhood at alpha 1 and limit 3 (the draws' low corner, where the sigmoid of a
clamped g is not 1), every g near -300 (sigmoid's tail: exp must not overflow), and biases
alone (x = 0: a kernel that drops a bias or adds it after the weighting is wrong everywhere).

``reference`` is transformers' per-expert loop (the harness runs it in high precision); it is
also the eager baseline, as transformers runs it by default.  Floors: 6 T K D I flops; bytes the
hit experts' weights (3 D I each, plus biases) and x and out.  GPT-OSS-20B's experts at 4096
tokens (E 32, K 4, D = I = 2880): 0.82 TFLOP (1.1 ms at 730 TFLOP/s) against 1.6 GB (0.38 ms).
"""
from __future__ import annotations

import math

import torch

from .base import Problem, Rows, Shape, choose_or_draw, element_size, generator, randn
from .moe_experts import TOLERANCES, _routing, routing_cases, shape_error

ALPHAS, ALPHA_RANGE = (1.702,), (1.0, 3.0)
LIMITS, LIMIT_RANGE = (7.0,), (3.0, 10.0)


def _shape(t: int, k: int, e: int, d: int, i: int) -> Shape:
    return {"T": t, "K": k, "E": e, "D": d, "I": i}


# GPT-OSS-20B's experts at 4096 and 1024 tokens (-120B's 128 experts are 6.4 GB of weights: the
# judge's sets of them, 118 GiB, outgrow its memory plan on an H200)
GPU_SHAPES = (_shape(4096, 4, 32, 2880, 2880), _shape(1024, 4, 32, 2880, 2880))
CPU_SHAPES = (_shape(16, 2, 4, 32, 24), _shape(9, 3, 5, 24, 20))
# one token (decode) at GPT-OSS's width, and odd sizes (I narrower than the targets': the edge
# shapes' answers are checked on the CPU too, tests/test_tolerances.py)
# and 64 tokens (batched decode) over 128 experts (GPT-OSS-120B's count; a kernel that scheduled
# 32 at most passed while every shape had 32)
GPU_EDGE_SHAPES = (_shape(1, 4, 32, 2880, 1000), _shape(64, 4, 128, 1024, 256), _shape(333, 4, 32, 1000, 2731))
# 40 experts (past 32), and D and I wider than a block (a second k-iteration and column tile)
CPU_EDGE_SHAPES = (_shape(1, 1, 1, 16, 16), _shape(3, 2, 7, 17, 9), _shape(8, 4, 40, 16, 8),
                   _shape(5, 2, 3, 263, 265))


def glu(gu: torch.Tensor, alpha: float, limit: float) -> torch.Tensor:
    g, u = gu[..., 0::2], gu[..., 1::2]
    g = g.clamp(max=limit)
    u = u.clamp(min=-limit, max=limit)
    return (u + 1) * (g * torch.sigmoid(g * alpha))


def reference(x, top_k_index, top_k_weights, gate_up, gate_up_bias, down, down_bias, alpha, limit):
    out = torch.zeros_like(x)
    for e in range(gate_up.shape[0]):
        token, k = torch.where(top_k_index == e)
        if token.numel() == 0:
            continue
        h = glu(x[token] @ gate_up[e] + gate_up_bias[e], alpha, limit)
        y = h @ down[e] + down_bias[e]
        out.index_add_(0, token, (y * top_k_weights[token, k, None]).to(out.dtype))
    return out


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    gen = generator(device, seed)
    t, k, e, d, i = (shape[n] for n in ("T", "K", "E", "D", "I"))
    x = randn((t, d), dtype, device, gen)
    index, weights = _routing(t, min(k, e), e, device, gen)
    gate_up = randn((e, d, 2 * i), dtype, device, gen, scale=1.0 / math.sqrt(max(d, 1)))
    gate_up_bias = randn((e, 2 * i), dtype, device, gen, scale=0.5)
    down = randn((e, i, d), dtype, device, gen, scale=1.0 / math.sqrt(max(i, 1)))
    down_bias = randn((e, d), dtype, device, gen, scale=0.5)
    alpha = choose_or_draw(ALPHAS, *ALPHA_RANGE, seed)
    limit = choose_or_draw(LIMITS, *LIMIT_RANGE, seed // 2)
    return x, index, weights, gate_up, gate_up_bias, down, down_bias, alpha, limit


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    args = make_inputs(shape, dtype, device, seed)
    x, index, weights, gate_up, gate_up_bias, down, down_bias, alpha, limit = args
    experts = (gate_up, gate_up_bias, down, down_bias, alpha, limit)
    routed = [(name, (x, i, w) + experts)
              for name, i, w in routing_cases(index, weights, gate_up.shape[0], generator(device, seed + 1))]
    return routed + [
        # |g| and |u| ~ 20 limits: both clamps decide the output (h up to limit (limit + 1): down
        # scaled back by as much, so the output stays O(1) and h's rounding to the dtype within bounds)
        ("past-the-limit", scaled(args, 20.0 * limit, 20.0 * limit, limit * (limit + 1))),
        # every g near -300 (the gate biases): sigmoid(alpha g) underflows, h is 0 and the output
        # down's biases alone (exp(-alpha g) overflows: it must not turn into inf * 0 or inf / inf)
        ("gate-far-negative", (x, index, weights, gate_up, far_negative_gate(gate_up_bias), down, down_bias, alpha,
                               limit)),
        # g and u spread over the clamps' neighbourhood (±0.5 to 3 limits) at the low corner of the
        # draws, alpha 1 and limit 3, where sigmoid(alpha limit) is 0.95, not 1: a kernel that took
        # the sigmoid of the unclamped g, or clamped g below too, passed while the draws seldom
        # fell there
        ("near-the-limit", scaled(args, 1.7 * LIMIT_RANGE[0], LIMIT_RANGE[0], LIMIT_RANGE[0] * (LIMIT_RANGE[0] + 1),
                                  ALPHA_RANGE[0], LIMIT_RANGE[0])),
        # x = 0: the output is the biases' alone, through the activation, weighted
        ("biases-alone", (torch.zeros_like(x), index, weights) + experts),
        ("small", ((x.float() * 0.05).to(dtype), index, weights) + experts),
    ]


def scaled(args: tuple, gate: float, up: float, back: float, alpha: float | None = None,
           limit: float | None = None) -> tuple:
    """``args`` with the gate and up columns times ``gate`` and ``up`` (their biases too), down
    divided by ``back``, and alpha and limit replaced where given."""
    x, index, weights, gate_up, gate_up_bias, down, down_bias, drawn_alpha, drawn_limit = args
    factor = torch.tensor([gate, up], device=x.device).repeat(gate_up.shape[-1] // 2)
    return (x, index, weights, (gate_up.float() * factor).to(gate_up.dtype),
            (gate_up_bias.float() * factor).to(gate_up_bias.dtype), (down.float() / back).to(down.dtype), down_bias,
            drawn_alpha if alpha is None else alpha, drawn_limit if limit is None else limit)


def far_negative_gate(gate_up_bias: torch.Tensor) -> torch.Tensor:
    biased = gate_up_bias.float().clone()
    biased[:, 0::2] = -300.0
    return biased.to(gate_up_bias.dtype)


def flops(shape: Shape) -> float:
    return 6.0 * shape["T"] * shape["K"] * shape["D"] * shape["I"]


def nbytes(shape: Shape, dtype: torch.dtype) -> float:
    t, k, e, d, i = (shape[n] for n in ("T", "K", "E", "D", "I"))
    hit = min(e, t * k)
    return float((hit * (3 * d * i + 2 * i + d) + 2 * t * d) * element_size(dtype) + t * k * 12)


def make_problem() -> Problem:
    return Problem(
        kind="moe_experts_gptoss",
        description="GPT-OSS's mixture-of-experts experts: clamped, biased GLU experts (interleaved gate/up, x @ W)",
        signature=("kernel_fn(x[T,D], top_k_index[T,K] int64, top_k_weights[T,K] fp32, gate_up[E,D,2I], "
                   "gate_up_bias[E,2I], down[E,I,D], down_bias[E,D], alpha, limit) -> [T,D]"),
        dims=("T", "K", "E", "D", "I"),
        reference=reference,
        make_inputs=make_inputs,
        flops=flops,
        bytes=nbytes,
        gpu_shapes=GPU_SHAPES,
        cpu_shapes=CPU_SHAPES,
        gpu_edge_shapes=GPU_EDGE_SHAPES,
        cpu_edge_shapes=CPU_EDGE_SHAPES,
        dtypes=(torch.bfloat16, torch.float16),  # as moe_experts: the judge's fp32 sets outgrow the GPU's memory plan
        fixed_dims=("K", "E"),
        check_shape=shape_error,
        rows=Rows("T", lambda shape: shape["K"] * shape["I"]),
        adversarial_inputs=adversarial_inputs,
        tolerances=dict(TOLERANCES),
    )
