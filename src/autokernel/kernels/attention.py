"""Starter kernel for `attention`: flash-style forward pass, fp32 online softmax.

o[b,h] = softmax(q[b,h] k[b,h//G]^T * scale + causal mask) v[b,h//G], G = H // Hkv (GQA).
v and the output may have a head dim Dv of their own (multi-head latent attention: 128 beside
q/k's 192): the scores' dot runs over BLOCK_D, the accumulator over BLOCK_DV, which is BLOCK_D
where Dv == D (the same kernel as without it).

One program owns BLOCK_M query rows of one (batch, head) and streams the keys and values of
its kv head in BLOCK_N blocks, keeping a running row maximum and row sum so the S x S score
matrix never exists.  With the causal mask, blocks above the diagonal are skipped entirely
and only the diagonal blocks pay for the mask.  exp2 with log2(e) folded into the scale.

Numerics: scores and the softmax are fp32; the probabilities go to the second tl.dot in the
input dtype (as every flash kernel does), accumulation is fp32.  fp32 inputs use IEEE dots
(the problem's fp32 is true fp32).  Under the interpreter (CPU tensors) everything is fp32.
"""
import math

import torch
import triton
import triton.language as tl

KNOBS = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3}
KNOB_SPACE = {"BLOCK_M": [32, 64, 128], "BLOCK_N": [16, 32, 64, 128], "num_warps": [4, 8],
              "num_stages": [1, 2, 3, 4]}

SMEM_BYTES = 200 * 1024
LOG2E = 1.4426950408889634


@triton.jit
def _attend_blocks(acc, m_i, l_i, q, k_base, v_base, offs_m, offs_d, offs_dv, lo, hi, S, D, Dv,
                   stride_ks, stride_kd, stride_vs, stride_vd, qk_scale,
                   BLOCK_N: tl.constexpr, CAUSAL_MASK: tl.constexpr, KEY_MASK: tl.constexpr,
                   EVEN_D: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr):
    """Fold keys/values [lo, hi) into the running (acc, m_i, l_i)."""
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k_ptrs = k_base + offs_n[None, :] * stride_ks + offs_d[:, None] * stride_kd
        v_ptrs = v_base + offs_n[:, None] * stride_vs + offs_dv[None, :] * stride_vd
        if KEY_MASK or not EVEN_D:
            kt = tl.load(k_ptrs, mask=(offs_n[None, :] < S) & (offs_d[:, None] < D), other=0.0)
            v = tl.load(v_ptrs, mask=(offs_n[:, None] < S) & (offs_dv[None, :] < Dv), other=0.0)
        else:
            kt = tl.load(k_ptrs)
            v = tl.load(v_ptrs)
        if UPCAST:
            kt = kt.to(tl.float32)
            v = v.to(tl.float32)
        if IEEE:
            qk = tl.dot(q, kt, input_precision="ieee")
        else:
            qk = tl.dot(q, kt)
        qk = qk * qk_scale
        if CAUSAL_MASK:
            qk = tl.where(offs_m[:, None] >= offs_n[None, :], qk, float("-inf"))
        if KEY_MASK:
            qk = tl.where(offs_n[None, :] < S, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if IEEE:
            acc = tl.dot(p, v, acc, input_precision="ieee")
        else:
            acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def _attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, H, GROUP, S, D, Dv, qk_scale,
                      stride_qb, stride_qh, stride_qs, stride_qd,
                      stride_kb, stride_kh, stride_ks, stride_kd,
                      stride_vb, stride_vh, stride_vs, stride_vd,
                      stride_ob, stride_oh, stride_os, stride_od,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                      BLOCK_DV: tl.constexpr, V_IS_D: tl.constexpr, CAUSAL: tl.constexpr, EVEN_D: tl.constexpr, IEEE: tl.constexpr,
                      UPCAST: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    off_b = (bh // H).to(tl.int64)
    off_h = (bh % H).to(tl.int64)
    off_kvh = off_h // GROUP
    q_base = q_ptr + off_b * stride_qb + off_h * stride_qh
    k_base = k_ptr + off_b * stride_kb + off_kvh * stride_kh
    v_base = v_ptr + off_b * stride_vb + off_kvh * stride_vh
    o_base = o_ptr + off_b * stride_ob + off_h * stride_oh

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    if V_IS_D:  # one head dim (the common case): v's masks are q's and k's, as before Dv existed
        offs_dv = offs_d
        Dv = D
    else:
        offs_dv = tl.arange(0, BLOCK_DV)
    row_ok = offs_m[:, None] < S
    q = tl.load(q_base + offs_m[:, None] * stride_qs + offs_d[None, :] * stride_qd,
                mask=row_ok & (offs_d[None, :] < D), other=0.0)
    if UPCAST:
        q = q.to(tl.float32)

    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_DV), dtype=tl.float32)
    if CAUSAL:
        # keys left of this row block: all visible, no mask (BLOCK_N divides BLOCK_M)
        diag = start_m * BLOCK_M
        acc, m_i, l_i = _attend_blocks(acc, m_i, l_i, q, k_base, v_base, offs_m, offs_d, offs_dv, 0, diag, S, D, Dv,
                                       stride_ks, stride_kd, stride_vs, stride_vd, qk_scale,
                                       BLOCK_N, False, False, EVEN_D, IEEE, UPCAST)
        # the diagonal block: causal mask; keys right of it are skipped
        acc, m_i, l_i = _attend_blocks(acc, m_i, l_i, q, k_base, v_base, offs_m, offs_d, offs_dv, diag,
                                       tl.minimum(diag + BLOCK_M, S), S, D, Dv,
                                       stride_ks, stride_kd, stride_vs, stride_vd, qk_scale,
                                       BLOCK_N, True, True, EVEN_D, IEEE, UPCAST)
    else:
        full = (S // BLOCK_N) * BLOCK_N
        acc, m_i, l_i = _attend_blocks(acc, m_i, l_i, q, k_base, v_base, offs_m, offs_d, offs_dv, 0, full, S, D, Dv,
                                       stride_ks, stride_kd, stride_vs, stride_vd, qk_scale,
                                       BLOCK_N, False, False, EVEN_D, IEEE, UPCAST)
        acc, m_i, l_i = _attend_blocks(acc, m_i, l_i, q, k_base, v_base, offs_m, offs_d, offs_dv, full, S, S, D, Dv,
                                       stride_ks, stride_kd, stride_vs, stride_vd, qk_scale,
                                       BLOCK_N, False, True, EVEN_D, IEEE, UPCAST)
    out = acc / l_i[:, None]
    tl.store(o_base + offs_m[:, None] * stride_os + offs_dv[None, :] * stride_od,
             out.to(o_ptr.dtype.element_ty), mask=row_ok & (offs_dv[None, :] < Dv))


def _block(knob: int, size: int) -> int:
    return max(16, min(knob, triton.next_power_of_2(max(size, 1))))


def launch_config(S: int, D: int, itemsize: int, knobs: dict, Dv: int | None = None) -> dict:
    """Blocks clamped to the sequence, BLOCK_N <= BLOCK_M (the causal split needs BLOCK_N to
    divide BLOCK_M), and a pipeline that fits in shared memory (q's tile, and each stage's k
    and v tiles)."""
    block_d = max(16, triton.next_power_of_2(D))
    block_dv = block_d if Dv is None or Dv == D else max(16, triton.next_power_of_2(Dv))
    bm = _block(knobs["BLOCK_M"], S)
    bn = min(_block(knobs["BLOCK_N"], S), bm)
    stages = knobs["num_stages"]

    def smem(stages: int, bn: int) -> int:
        return (bm * block_d + stages * bn * (block_d + block_dv)) * itemsize

    while stages > 1 and smem(stages, bn) > SMEM_BYTES:
        stages -= 1
    while bn > 16 and smem(stages, bn) > SMEM_BYTES:
        bn //= 2
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_D": block_d, "BLOCK_DV": block_dv,
            "num_warps": knobs["num_warps"], "num_stages": stages}


def output_like(q: torch.Tensor, Dv: int) -> torch.Tensor:
    """The output in q's order of dimensions (heads inside tokens when q is a projection's view),
    Dv wide."""
    if Dv == q.shape[-1]:
        return torch.empty_like(q)
    B, H, S, _ = q.shape
    if q.stride(1) < q.stride(2):
        return q.new_empty((B, S, H, Dv)).transpose(1, 2)
    return q.new_empty((B, H, S, Dv))


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
              scale: float | None = None, knobs: dict | None = None) -> torch.Tensor:
    B, H, S, D = q.shape
    Hkv, Dv = k.shape[1], v.shape[-1]
    assert k.shape == (B, Hkv, S, D) and v.shape == (B, Hkv, S, Dv) and H % Hkv == 0, "bad attention shapes"
    o = output_like(q, Dv)
    if o.numel() == 0:
        return o
    cfg = launch_config(S, D, q.element_size(), knobs or KNOBS, Dv)
    qk_scale = (1.0 / math.sqrt(D) if scale is None else float(scale)) * LOG2E
    grid = (triton.cdiv(S, cfg["BLOCK_M"]), B * H)
    _attention_kernel[grid](
        q, k, v, o, H, H // Hkv, S, D, Dv, qk_scale,
        *q.stride(), *k.stride(), *v.stride(), *o.stride(),
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_D=cfg["BLOCK_D"], BLOCK_DV=cfg["BLOCK_DV"],
        V_IS_D=Dv == D, CAUSAL=bool(causal), EVEN_D=cfg["BLOCK_D"] == D and cfg["BLOCK_DV"] == Dv, IEEE=q.dtype == torch.float32, UPCAST=q.device.type == "cpu",
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    return o


def kernel_fn(q, k, v, causal=True, scale=None):
    return attention(q, k, v, causal=causal, scale=scale)
