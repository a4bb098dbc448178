"""moe_experts: the experts of a mixture-of-experts layer (Mixtral, Qwen-MoE...),
``kernel_fn(x[T,D], top_k_index[T,K], top_k_weights[T,K], gate_up[E,2I,D], down[E,D,I]) -> [T,D]``.

Each token t went to K experts (``top_k_index``, int64, K distinct experts a token) with
routing weights ``top_k_weights`` (fp32, as the routers compute them).  An index outside [0, E)
marks a pair whose expert is held elsewhere (transformers' expert-parallel sentinel is E): it
adds nothing, whatever its weight.  Expert e is a SwiGLU MLP
whose gate and up projections are stacked in ``gate_up[e]`` (gate rows first, nn.Linear layout)::

    out[t] = sum_k w[t,k] * down[e] @ (silu(g) * u),   [g; u] = gate_up[e] @ x[t],  e = idx[t,k]

Dims (T, K, E, D, I): tokens, experts a token, experts, model width, expert hidden width.
Inputs: x ~ N(0, 1); router logits ~ N(0, 1) plus a per-expert offset ~ N(0, 0.3²) (uneven
loads: in one draw at Mixtral's 4096 x 2 pairs the experts got 529 to 1833; at small T some get none),
top-K of their softmax, renormalised; gate_up ~ N(0, 1/D), down ~ N(0, 1/I).  Two numerics
cases crowd one expert: with every token, and with a random share of them; one marks a share of
the pairs with the sentinel.

Floors: 6 T K D I flops; the bytes are the weights of the experts that can be hit (min(E, T K)
of them) plus x and out.  On an H200 (730 TFLOP/s bf16 as cuBLAS reaches it, 4.2 TB/s):
Mixtral-8x7B's experts at 4096 tokens are 2.89 TFLOP (3.95 ms) against 2.89 GB (0.69 ms):
compute bound; at 16 tokens 11.3 GFLOP (15 us) against 2.82 GB (0.67 ms): a weight read.
Qwen1.5-MoE's at 4096 tokens: 0.28 TFLOP (0.39 ms) against 1.07 GB (0.26 ms).

``eager`` is how a PyTorch user writes it without a per-expert Python loop: sort the pairs by
expert, one grouped GEMM each way where torch has one for the device and dtype
(``torch.nn.functional.grouped_mm`` / ``torch._grouped_mm``: CUDA, bf16), per-expert matmuls
otherwise.  ``reference`` is the per-expert loop of the model code (Hugging Face's "eager"
experts), which the harness runs in high precision for the ground truth.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .base import DEFAULT_TOLERANCES, Problem, Rows, Shape, Tolerance, element_size, generator, randn

# As fused_mlp: the relative-norm bound for bf16 at 1.5e-2 (eager's own bf16 rounding of g, u
# and h at the small edge shapes); the element-wise bounds stay the defaults.
TOLERANCES = {**DEFAULT_TOLERANCES,
              torch.bfloat16: Tolerance(atol=DEFAULT_TOLERANCES[torch.bfloat16].atol,
                                        rtol=DEFAULT_TOLERANCES[torch.bfloat16].rtol, max_rel_norm=1.5e-2)}


def _shape(t: int, k: int, e: int, d: int, i: int) -> Shape:
    return {"T": t, "K": k, "E": e, "D": d, "I": i}


# Mixtral-8x7B and Qwen1.5-MoE-A2.7B's experts at 4096 tokens
GPU_SHAPES = (_shape(4096, 2, 8, 4096, 14336), _shape(4096, 4, 60, 2048, 1408))
CPU_SHAPES = (_shape(16, 2, 4, 32, 48), _shape(9, 3, 5, 24, 20))
# one token (decode), and odd sizes with experts that get no token
GPU_EDGE_SHAPES = (_shape(1, 2, 8, 4096, 14336), _shape(333, 2, 8, 1000, 2731))
# the last one wider than a block of D and of I: a kernel's second k-iteration and column tile
# (the other CPU shapes fit in one)
CPU_EDGE_SHAPES = (_shape(1, 1, 1, 16, 16), _shape(3, 2, 7, 17, 9), _shape(5, 2, 3, 263, 265))


def reference(x, top_k_index, top_k_weights, gate_up, down):
    out = torch.zeros_like(x)
    for e in range(gate_up.shape[0]):
        token, k = torch.where(top_k_index == e)
        if token.numel() == 0:
            continue
        g, u = (x[token] @ gate_up[e].transpose(0, 1)).chunk(2, dim=-1)
        y = (F.silu(g) * u) @ down[e].transpose(0, 1)
        out.index_add_(0, token, (y * top_k_weights[token, k, None]).to(out.dtype))
    return out


def _grouped_mm():
    return getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)


def _can_group(x: torch.Tensor) -> bool:
    return (x.is_cuda and x.dtype == torch.bfloat16 and _grouped_mm() is not None
            and torch.cuda.get_device_capability(x.device) >= (9, 0))


def eager(x, top_k_index, top_k_weights, gate_up, down):
    T, K = top_k_index.shape
    E = gate_up.shape[0]
    experts, order = torch.sort(top_k_index.reshape(-1))
    rows = x[order // K]
    if _can_group(x):
        counts = torch.histc(experts.int(), bins=E, min=0, max=E - 1)
        ends = torch.cumsum(counts, 0, dtype=torch.int32)
        g, u = _grouped_mm()(rows, gate_up.transpose(1, 2), offs=ends).chunk(2, dim=-1)
        y = _grouped_mm()(F.silu(g) * u, down.transpose(1, 2), offs=ends)
    else:
        bounds = torch.searchsorted(experts, torch.arange(0, E + 1, device=x.device)).tolist()
        y = rows.new_zeros((rows.shape[0], x.shape[1]))
        for e, (begin, end) in enumerate(zip(bounds, bounds[1:])):
            if end > begin:
                g, u = (rows[begin:end] @ gate_up[e].transpose(0, 1)).chunk(2, dim=-1)
                y[begin:end] = (F.silu(g) * u) @ down[e].transpose(0, 1)
    weighted = y.float() * top_k_weights.reshape(-1)[order, None].float()
    # sentinel pairs (index outside [0, E)) add nothing: no expert's run holds them
    weighted = torch.where(((experts >= 0) & (experts < E))[:, None], weighted, 0.0)
    per_pair = torch.empty_like(weighted).index_copy_(0, order, weighted)
    return per_pair.view(T, K, -1).sum(1).to(x.dtype)


def _routing(t: int, k: int, e: int, device: str, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    logits = torch.randn((t, e), generator=gen, device=device) + torch.randn((1, e), generator=gen, device=device) * 0.3
    weights, index = torch.topk(torch.softmax(logits, dim=-1), k, dim=-1)
    return index, weights / weights.sum(dim=-1, keepdim=True)


def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
    gen = generator(device, seed)
    t, k, e, d, i = (shape[n] for n in ("T", "K", "E", "D", "I"))
    x = randn((t, d), dtype, device, gen)
    index, weights = _routing(t, min(k, e), e, device, gen)
    gate_up = randn((e, 2 * i, d), dtype, device, gen, scale=1.0 / math.sqrt(max(d, 1)))
    down = randn((e, d, i), dtype, device, gen, scale=1.0 / math.sqrt(max(i, 1)))
    return x, index, weights, gate_up, down


MASSIVE = 300.0  # the massive-activations case's scale of x: g and u ~ 300, h ~ 1e5


def _crowded(index: torch.Tensor, experts: int, gen: torch.Generator, share: float) -> torch.Tensor:
    """``index`` with one random expert among the choices of a random ``share`` of the tokens, at
    a random slot of each (the expert it displaces is dropped: a token's experts stay distinct).

    Random expert, random slot: the heavy load is the only sign of the case.  With the expert
    always 0 and always the first choice, a kernel told the case apart by its first column alone
    and went exact there, while it dropped every pair past an expert capacity of 3x the mean load
    on all other routings (token dropping, as GShard and Switch do: wrong for any skewed router)."""
    t, k = index.shape
    if t == 0 or k == 0 or experts == 0:
        return index.clone()
    device = index.device
    expert = int(torch.randint(0, experts, (1,), generator=gen, device=device))
    chosen = torch.rand((t,), generator=gen, device=device) < share
    slot = torch.randint(0, k, (t,), generator=gen, device=device)
    chosen &= ~(index == expert).any(dim=1)  # tokens that have it keep their choices
    crowded = index.clone()
    tokens = torch.nonzero(chosen).reshape(-1)
    crowded[tokens, slot[tokens]] = expert
    return crowded


def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
    """One expert crowded with every token (one long run, the others short) and with a random
    share of half to all of them (loads between the random draws' and the crowded case's: a kernel
    that went exact only where an expert had every token still dropped pairs below that), gates
    driven into silu's tails (up and down scaled back so the output stays O(1): see fused_mlp),
    small inputs, routing weights at two scales, a quarter of the pairs marked with the
    expert-parallel sentinel E, and (bf16, fp32) hidden activations past fp16's range."""
    x, index, weights, gate_up, down = make_inputs(shape, dtype, device, seed)
    routed = {name: (x, i, w, gate_up, down)
              for name, i, w in routing_cases(index, weights, gate_up.shape[0], generator(device, seed + 1))}

    def driven(factor: float) -> tuple:
        gu = gate_up.float().clone()
        half = gu.shape[1] // 2
        gu[:, half:] /= factor
        return (x.float() * factor).to(dtype), index, weights, gu.to(dtype), (down.float() / factor).to(dtype)

    cases = [
        ("one-crowded-expert", routed["one-crowded-expert"]),
        ("hot-expert", routed["hot-expert"]),
        ("saturated-gate", driven(30.0)),
        ("small", ((x.float() * 0.05).to(dtype), index, weights, gate_up, down)),
        ("mixed-routing-scales", routed["mixed-routing-scales"]),
        ("expert-parallel-sentinels", routed["expert-parallel-sentinels"]),
    ]
    if dtype != torch.float16:
        # hidden activations past fp16's range (|h| ~ 1e5), down scaled back so the output stays
        # O(1): a bf16 kernel that keeps h in fp16 turns them into inf (fp16 inputs hold no such h)
        cases.append(("massive-activations", ((x.float() * MASSIVE).to(dtype), index, weights, gate_up,
                                              (down.float() / MASSIVE ** 2).to(dtype))))
    return cases


def routing_cases(index: torch.Tensor, weights: torch.Tensor, experts: int,
                  gen: torch.Generator) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(name, top_k_index, top_k_weights) of the routing cases every experts kind runs: one expert
    crowded with every token, and with a random share of half to all of them, routing weights at
    two scales, a quarter of the pairs held elsewhere (``held_elsewhere``)."""
    device = index.device
    crowded = _crowded(index, experts, gen, 1.0)
    share = 0.5 + 0.5 * float(torch.rand((1,), generator=gen, device=device))
    hot = _crowded(index, experts, gen, share)
    scales = torch.pow(10.0, torch.randint(-1, 1, weights.shape, generator=gen, device=device).float())
    return [("one-crowded-expert", crowded, weights), ("hot-expert", hot, weights),
            ("mixed-routing-scales", index, weights * scales),
            ("expert-parallel-sentinels", held_elsewhere(index, experts, gen), weights)]


def held_elsewhere(index: torch.Tensor, experts: int, gen: torch.Generator) -> torch.Tensor:
    """``index`` with a quarter of the pairs held elsewhere, their weights kept, each marked by an
    index outside [0, E): transformers' sentinel E, E + 1, or -1 (expert-parallel dispatchers'
    "none"), by turns from a drawn start, so that every call with three or more such pairs holds
    each mark.  A kernel that clamps the index into range (or reads past the experts) adds them;
    one that took only E for a sentinel passed while E was the only one drawn (-1 then added
    expert E - 1)."""
    marks = torch.tensor([experts, experts + 1, -1], device=index.device)
    held = torch.rand(index.shape, generator=gen, device=index.device) < 0.25
    start = int(torch.randint(0, 3, (1,), generator=gen, device=index.device))
    turns = (torch.cumsum(held.reshape(-1).long(), 0).reshape(index.shape) + start) % 3
    return torch.where(held, marks[turns], index)


def shape_error(shape: Shape) -> str | None:
    """A token routes to K distinct experts of E: K > E has no such routing."""
    if shape["K"] > shape["E"]:
        return f"K={shape['K']} experts a token is more than the E={shape['E']} experts there are"
    return None


def flops(shape: Shape) -> float:
    return 6.0 * shape["T"] * shape["K"] * shape["D"] * shape["I"]


def nbytes(shape: Shape, dtype: torch.dtype) -> float:
    t, k, e, d, i = (shape[n] for n in ("T", "K", "E", "D", "I"))
    hit = min(e, t * k)
    return float((3 * hit * d * i + 2 * t * d) * element_size(dtype) + t * k * 12)


def make_problem() -> Problem:
    return Problem(
        kind="moe_experts",
        description="Mixture-of-experts experts: route each token to its K SwiGLU experts, sum with the routing weights",
        signature=("kernel_fn(x[T,D], top_k_index[T,K] int64, top_k_weights[T,K] fp32, gate_up[E,2I,D], "
                   "down[E,D,I]) -> [T,D]"),
        dims=("T", "K", "E", "D", "I"),
        reference=reference,
        make_inputs=make_inputs,
        flops=flops,
        bytes=nbytes,
        gpu_shapes=GPU_SHAPES,
        cpu_shapes=CPU_SHAPES,
        gpu_edge_shapes=GPU_EDGE_SHAPES,
        cpu_edge_shapes=CPU_EDGE_SHAPES,
        # Half precision only by default: Mixtral-8x7B's experts are 5.6 GB in fp32, and the judge's
        # sets at the GPU shapes then outgrow its memory plan on an H200 (fp32 stays available with
        # --dtype fp32, and CPU runs of models use it)
        dtypes=(torch.bfloat16, torch.float16),
        fixed_dims=("K", "E"),
        check_shape=shape_error,
        # a token's K pairs each keep a hidden row of I (gate/up's output): the widest buffer
        rows=Rows("T", lambda shape: shape["K"] * shape["I"]),
        adversarial_inputs=adversarial_inputs,
        tolerances=dict(TOLERANCES),
        eager=eager,
    )
