"""Starter kernel for `attention_cross`: flash-style forward, Sq queries against Sk keys.

o[b,h] = softmax(q[b,h] k[b,h//G]^T * scale (+ mask | masked to -inf)) v[b,h//G], G = H // Hkv,
q [B,H,Sq,D], k and v [B,Hkv,Sk,D], no causal mask; mask None or [B|1,H|1,Sq|1,Sk].

One program owns BLOCK_M query rows of one (batch, head) and streams its kv head's keys and
values in BLOCK_N blocks, keeping a running row max and row sum (the Sq x Sk scores never
exist).  The query block is clamped to Sq (a decoding step, Sq = 1, runs one 16-row tile) and
the key block to Sk.  Full key blocks load without bounds; the last, partial one (Sk not a
multiple of BLOCK_N) masks its keys.  The mask, when given, is read through its strides (a
size-1 dimension broadcast with stride 0): a [BLOCK_N] vector per block for a key-padding mask,
a [BLOCK_M, BLOCK_N] tile for a mask per query row.

Numerics: scores, mask and softmax in fp32, the running max in natural units (scores times scale
plus the mask), base 2 only inside exp2 (a finfo.min mask times log2(e) would overflow to -inf
and make SDPA's uniform rows dead ones).  A row whose every key is masked keeps a max of -inf,
exp2 runs against 0 instead, its sum stays 0 and the row is written as zeros, as SDPA writes it.
fp32 inputs use IEEE dots; under the interpreter (CPU tensors) everything is fp32.
"""
import math

import torch
import triton
import triton.language as tl

KNOBS = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3}
KNOB_SPACE = {"BLOCK_M": [16, 32, 64, 128], "BLOCK_N": [16, 32, 64, 128], "num_warps": [4, 8],
              "num_stages": [1, 2, 3, 4]}

SMEM_BYTES = 200 * 1024
LOG2E = tl.constexpr(1.4426950408889634)  # a constexpr: a jit function reads no other global


@triton.jit
def _fold_keys(acc, m_i, l_i, q, k_base, v_base, mask_base, offs_m, offs_d, lo, hi, Sq, Sk, D,
               stride_ks, stride_kd, stride_vs, stride_vd, stride_mq, stride_mk, sm_scale,
               BLOCK_N: tl.constexpr, PARTIAL: tl.constexpr, EVEN_D: tl.constexpr, IEEE: tl.constexpr,
               UPCAST: tl.constexpr, HAS_MASK: tl.constexpr, ADDITIVE: tl.constexpr, PER_QUERY: tl.constexpr):
    """Fold the keys and values [lo, hi) into the running (acc, m_i, l_i); m_i in natural units."""
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        key_ok = offs_n < Sk
        k_ptrs = k_base + offs_n[None, :] * stride_ks + offs_d[:, None] * stride_kd
        v_ptrs = v_base + offs_n[:, None] * stride_vs + offs_d[None, :] * stride_vd
        if PARTIAL or not EVEN_D:
            kt = tl.load(k_ptrs, mask=key_ok[None, :] & (offs_d[:, None] < D), other=0.0)
            v = tl.load(v_ptrs, mask=key_ok[:, None] & (offs_d[None, :] < D), other=0.0)
        else:
            kt = tl.load(k_ptrs)
            v = tl.load(v_ptrs)
        if UPCAST:
            kt = kt.to(tl.float32)
            v = v.to(tl.float32)
        if IEEE:
            s = tl.dot(q, kt, input_precision="ieee")
        else:
            s = tl.dot(q, kt)
        s = s * sm_scale
        if HAS_MASK:
            if PER_QUERY:
                mval = tl.load(mask_base + offs_m[:, None].to(tl.int64) * stride_mq + offs_n[None, :] * stride_mk,
                               mask=(offs_m[:, None] < Sq) & key_ok[None, :], other=0)
            else:
                mval = tl.load(mask_base + offs_n * stride_mk, mask=key_ok, other=0)[None, :]
            if ADDITIVE:
                s = s + mval.to(tl.float32)
            else:
                s = tl.where(mval != 0, s, float("-inf"))
        if PARTIAL:
            s = tl.where(key_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        pivot = tl.where(m_new == float("-inf"), 0.0, m_new)  # every key so far masked: no -inf - -inf
        p = tl.math.exp2((s - pivot[:, None]) * LOG2E)
        alpha = tl.math.exp2((m_i - pivot) * LOG2E)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if IEEE:
            acc = tl.dot(p, v, acc, input_precision="ieee")
        else:
            acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def _attention_cross_kernel(q_ptr, k_ptr, v_ptr, m_ptr, o_ptr, H, GROUP, Sq, Sk, D, sm_scale,
                            stride_qb, stride_qh, stride_qs, stride_qd,
                            stride_kb, stride_kh, stride_ks, stride_kd,
                            stride_vb, stride_vh, stride_vs, stride_vd,
                            stride_mb, stride_mh, stride_mq, stride_mk,
                            stride_ob, stride_oh, stride_os, stride_od,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                            EVEN_D: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr,
                            HAS_MASK: tl.constexpr, ADDITIVE: tl.constexpr, PER_QUERY: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    off_b = (bh // H).to(tl.int64)
    off_h = (bh % H).to(tl.int64)
    off_kvh = off_h // GROUP
    q_base = q_ptr + off_b * stride_qb + off_h * stride_qh
    k_base = k_ptr + off_b * stride_kb + off_kvh * stride_kh
    v_base = v_ptr + off_b * stride_vb + off_kvh * stride_vh
    mask_base = m_ptr + off_b * stride_mb + off_h * stride_mh
    o_base = o_ptr + off_b * stride_ob + off_h * stride_oh

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    tile_ok = (offs_m[:, None] < Sq) & (offs_d[None, :] < D)
    q = tl.load(q_base + offs_m[:, None] * stride_qs + offs_d[None, :] * stride_qd, mask=tile_ok, other=0.0)
    if UPCAST:
        q = q.to(tl.float32)

    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    full = (Sk // BLOCK_N) * BLOCK_N
    acc, m_i, l_i = _fold_keys(acc, m_i, l_i, q, k_base, v_base, mask_base, offs_m, offs_d, 0, full, Sq, Sk, D,
                               stride_ks, stride_kd, stride_vs, stride_vd, stride_mq, stride_mk, sm_scale,
                               BLOCK_N, False, EVEN_D, IEEE, UPCAST, HAS_MASK, ADDITIVE, PER_QUERY)
    acc, m_i, l_i = _fold_keys(acc, m_i, l_i, q, k_base, v_base, mask_base, offs_m, offs_d, full, Sk, Sq, Sk, D,
                               stride_ks, stride_kd, stride_vs, stride_vd, stride_mq, stride_mk, sm_scale,
                               BLOCK_N, True, EVEN_D, IEEE, UPCAST, HAS_MASK, ADDITIVE, PER_QUERY)
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]  # every key masked: acc is 0, the row 0
    tl.store(o_base + offs_m[:, None] * stride_os + offs_d[None, :] * stride_od,
             out.to(o_ptr.dtype.element_ty), mask=tile_ok)


def _block(knob: int, size: int) -> int:
    return max(16, min(knob, triton.next_power_of_2(max(size, 1))))


def launch_config(Sq: int, Sk: int, D: int, itemsize: int, knobs: dict) -> dict:
    """The query block clamped to Sq, the key block to Sk, a pipeline that fits in shared memory."""
    block_d = max(16, triton.next_power_of_2(D))
    bm = _block(knobs["BLOCK_M"], Sq)
    bn = _block(knobs["BLOCK_N"], Sk)
    stages = knobs["num_stages"]

    def smem(bn_, stages_):
        return (bm * block_d + stages_ * (2 * bn_ * block_d + bm * bn_)) * itemsize

    while stages > 1 and smem(bn, stages) > SMEM_BYTES:
        stages -= 1
    while bn > 16 and smem(bn, stages) > SMEM_BYTES:
        bn //= 2
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_D": block_d, "num_warps": knobs["num_warps"],
            "num_stages": stages}


def mask_strides(mask: torch.Tensor, B: int, H: int, Sq: int, Sk: int) -> tuple[int, int, int, int]:
    """The mask's strides over (batch, head, query, key), 0 where it broadcasts (size 1)."""
    assert mask.dim() == 4 and mask.shape[-1] == Sk, "mask must be [B|1, H|1, Sq|1, Sk]"
    for size, full in zip(mask.shape[:3], (B, H, Sq)):
        assert size in (1, full), "mask must be [B|1, H|1, Sq|1, Sk]"
    return tuple(0 if size == 1 else stride for size, stride in zip(mask.shape, mask.stride()))


def attention_cross(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                    scale: float | None = None, knobs: dict | None = None) -> torch.Tensor:
    B, H, Sq, D = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    assert k.shape == (B, Hkv, Sk, D) and v.shape == k.shape and H % Hkv == 0, "bad attention shapes"
    o = torch.empty_like(q)  # q's order of dimensions: heads inside tokens when q is a projection's view
    if o.numel() == 0:
        return o
    if mask is None:
        m, strides, additive, per_query = q, (0, 0, 0, 0), False, False
    else:
        m, strides = mask, mask_strides(mask, B, H, Sq, Sk)
        additive, per_query = mask.dtype != torch.bool, mask.shape[2] != 1
    cfg = launch_config(Sq, Sk, D, q.element_size(), knobs or KNOBS)
    sm_scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    grid = (triton.cdiv(Sq, cfg["BLOCK_M"]), B * H)
    _attention_cross_kernel[grid](
        q, k, v, m, o, H, H // Hkv, Sq, Sk, D, sm_scale,
        *q.stride(), *k.stride(), *v.stride(), *strides, *o.stride(),
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_D=cfg["BLOCK_D"],
        EVEN_D=cfg["BLOCK_D"] == D, IEEE=q.dtype == torch.float32, UPCAST=q.device.type == "cpu",
        HAS_MASK=mask is not None, ADDITIVE=additive, PER_QUERY=per_query,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    return o


def kernel_fn(q, k, v, mask=None, scale=None):
    return attention_cross(q, k, v, mask, scale=scale)
