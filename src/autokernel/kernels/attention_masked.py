"""Starter kernel for `attention_masked`: flash-style forward with a bool or additive mask.

o[b,h] = softmax(q[b,h] k[b,h//G]^T * scale (+ mask | masked to -inf)) v[b,h//G], G = H // Hkv.

The structure of the `attention` starter (one program per BLOCK_M query rows of one (batch,
head), keys and values streamed in BLOCK_N blocks, running max and sum), plus the mask tile
of each block: a [BLOCK_N] vector for a key-padding mask ([B,1,1,S]), a [BLOCK_M, BLOCK_N]
tile for a mask per query row ([B,1,S,S]).  The mask is read through its strides; a size-1
dimension (a mask shared by the batch or the heads) gets stride 0.

Numerics: scores, mask and softmax are fp32 and the running max is kept in natural units
(scores times scale plus the mask), converted to base 2 only inside exp2: an additive mask
of finfo.min times log2(e) would overflow to -inf and turn a row of finfo.min entries (which
SDPA treats as uniform) into a dead one.  A row whose every key is masked (-inf everywhere)
keeps a max of -inf; exp2 then runs against 0 instead of it, its sum stays 0 and the row is
written as zeros, as SDPA writes it.
"""
import math

import torch
import triton
import triton.language as tl

# FP32_DOT: the dots' precision for fp32 inputs ("ieee": fused multiply-adds; "tf32x3": three TF32
# tensor-core products per dot, about fp32's accuracy); half-precision inputs take tensor cores anyway.
# On an H100 (2026-12-07, fp32, 4x16 heads, additive per-query mask) tf32x3 ran 0.40 ms at S 1024, D 64
# (eager 0.62) and 0.55 ms at S 512, D 256 (eager 0.45), where ieee took 2.5-27.6 ms; relative errors
# 1e-6 and 2.6e-6 against fp32's bound of 1e-4.
KNOBS = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3, "FP32_DOT": "tf32x3"}
KNOB_SPACE = {"BLOCK_M": [16, 32, 64, 128], "BLOCK_N": [16, 32, 64, 128], "num_warps": [4, 8],
              "num_stages": [1, 2, 3, 4], "FP32_DOT": ["ieee", "tf32x3"]}

SMEM_BYTES = 200 * 1024
# an fp32 program keeps its q tile and accumulator, BLOCK_M x BLOCK_D each, in registers: past 64 x 64
# they spill (S 512, D 256 on an H100, tf32x3: 0.87 ms at BLOCK_M 64, 0.55 at 16)
FP32_TILE_ELEMENTS = 64 * 64


@triton.jit
def _attend_blocks(acc, m_i, l_i, q, k_base, v_base, mask_base, offs_m, offs_d, lo, hi, S, D,
                   stride_ks, stride_kd, stride_vs, stride_vd, stride_mq, stride_mk, sm_scale,
                   BLOCK_N: tl.constexpr, KEY_MASK: tl.constexpr, EVEN_D: tl.constexpr, FP32: tl.constexpr,
                   PRECISION: tl.constexpr, UPCAST: tl.constexpr, ADDITIVE: tl.constexpr, PER_QUERY: tl.constexpr):
    """Fold keys/values [lo, hi) into the running (acc, m_i, l_i); m_i in natural units."""
    row_ok = offs_m < S
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        key_ok = offs_n < S
        k_ptrs = k_base + offs_n[None, :] * stride_ks + offs_d[:, None] * stride_kd
        v_ptrs = v_base + offs_n[:, None] * stride_vs + offs_d[None, :] * stride_vd
        if KEY_MASK or not EVEN_D:
            kt = tl.load(k_ptrs, mask=key_ok[None, :] & (offs_d[:, None] < D), other=0.0)
            v = tl.load(v_ptrs, mask=key_ok[:, None] & (offs_d[None, :] < D), other=0.0)
        else:
            kt = tl.load(k_ptrs)
            v = tl.load(v_ptrs)
        if PER_QUERY:
            mval = tl.load(mask_base + offs_m[:, None].to(tl.int64) * stride_mq + offs_n[None, :] * stride_mk,
                           mask=row_ok[:, None] & key_ok[None, :], other=0)
        else:
            mval = tl.load(mask_base + offs_n * stride_mk, mask=key_ok, other=0)[None, :]
        if UPCAST:
            kt = kt.to(tl.float32)
            v = v.to(tl.float32)
        if FP32:
            qk = tl.dot(q, kt, input_precision=PRECISION)
        else:
            qk = tl.dot(q, kt)
        qk = qk * sm_scale
        if ADDITIVE:
            qk = qk + mval.to(tl.float32)
        else:
            qk = tl.where(mval != 0, qk, float("-inf"))
        if KEY_MASK:
            qk = tl.where(key_ok[None, :], qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row masked so far: no -inf - -inf
        p = tl.math.exp2((qk - m_ref[:, None]) * 1.4426950408889634)
        alpha = tl.math.exp2((m_i - m_ref) * 1.4426950408889634)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if FP32:
            acc = tl.dot(p, v, acc, input_precision=PRECISION)
        else:
            acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def _attention_masked_kernel(q_ptr, k_ptr, v_ptr, m_ptr, o_ptr, H, GROUP, S, D, sm_scale,
                             stride_qb, stride_qh, stride_qs, stride_qd,
                             stride_kb, stride_kh, stride_ks, stride_kd,
                             stride_vb, stride_vh, stride_vs, stride_vd,
                             stride_mb, stride_mh, stride_mq, stride_mk,
                             stride_ob, stride_oh, stride_os, stride_od,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                             EVEN_D: tl.constexpr, FP32: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
                             ADDITIVE: tl.constexpr, PER_QUERY: tl.constexpr):
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
    row_ok = offs_m[:, None] < S
    q = tl.load(q_base + offs_m[:, None] * stride_qs + offs_d[None, :] * stride_qd,
                mask=row_ok & (offs_d[None, :] < D), other=0.0)
    if UPCAST:
        q = q.to(tl.float32)

    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    full = (S // BLOCK_N) * BLOCK_N
    acc, m_i, l_i = _attend_blocks(acc, m_i, l_i, q, k_base, v_base, mask_base, offs_m, offs_d, 0, full, S, D,
                                   stride_ks, stride_kd, stride_vs, stride_vd, stride_mq, stride_mk, sm_scale,
                                   BLOCK_N, False, EVEN_D, FP32, PRECISION, UPCAST, ADDITIVE, PER_QUERY)
    acc, m_i, l_i = _attend_blocks(acc, m_i, l_i, q, k_base, v_base, mask_base, offs_m, offs_d, full, S, S, D,
                                   stride_ks, stride_kd, stride_vs, stride_vd, stride_mq, stride_mk, sm_scale,
                                   BLOCK_N, True, EVEN_D, FP32, PRECISION, UPCAST, ADDITIVE, PER_QUERY)
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]  # every key masked: acc is 0, the row 0
    tl.store(o_base + offs_m[:, None] * stride_os + offs_d[None, :] * stride_od,
             out.to(o_ptr.dtype.element_ty), mask=row_ok & (offs_d[None, :] < D))


def _block(knob: int, size: int) -> int:
    return max(16, min(knob, triton.next_power_of_2(max(size, 1))))


def launch_config(S: int, D: int, itemsize: int, knobs: dict) -> dict:
    """Blocks clamped to the sequence and a pipeline that fits in shared memory."""
    block_d = max(16, triton.next_power_of_2(D))
    bm = _block(knobs["BLOCK_M"], S)
    while itemsize == 4 and bm > 16 and bm * block_d > FP32_TILE_ELEMENTS:
        bm //= 2
    bn = _block(knobs["BLOCK_N"], S)
    # fp32 tiles in at most two stages: D 64 on an H100 (tf32x3, 64x64 blocks) ran 0.40 ms in two and
    # 0.52 in three, side by side
    stages = min(knobs["num_stages"], 2) if itemsize == 4 else knobs["num_stages"]

    def smem(bn_, stages_):
        return (bm * block_d + stages_ * (2 * bn_ * block_d + bm * bn_)) * itemsize

    # two stages kept over 64-key blocks first: fp32 at D 256 on an H100 (tf32x3, 16 query rows) ran
    # 0.55 ms with 32 keys a block in two stages and 1.25 ms with 64 in one
    while stages > 2 and smem(bn, stages) > SMEM_BYTES:
        stages -= 1
    while bn > 32 and smem(bn, stages) > SMEM_BYTES:
        bn //= 2
    while stages > 1 and smem(bn, stages) > SMEM_BYTES:
        stages -= 1
    while bn > 16 and smem(bn, stages) > SMEM_BYTES:
        bn //= 2
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_D": block_d, "num_warps": knobs["num_warps"],
            "num_stages": stages}


def mask_strides(mask: torch.Tensor, B: int, H: int, S: int) -> tuple[int, int, int, int]:
    """The mask's strides over (batch, head, query, key), 0 where it broadcasts (size 1)."""
    assert mask.dim() == 4 and mask.shape[-1] == S, "mask must be [B|1, H|1, S|1, S]"
    for size, full in zip(mask.shape[:3], (B, H, S)):
        assert size in (1, full), "mask must be [B|1, H|1, S|1, S]"
    return tuple(0 if size == 1 else stride for size, stride in zip(mask.shape, mask.stride()))


def attention_masked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                     scale: float | None = None, knobs: dict | None = None) -> torch.Tensor:
    B, H, S, D = q.shape
    Hkv = k.shape[1]
    assert k.shape == (B, Hkv, S, D) and v.shape == k.shape and H % Hkv == 0, "bad attention shapes"
    strides = mask_strides(mask, B, H, S)
    o = torch.empty_like(q)  # q's order of dimensions: heads inside tokens when q is a projection's view
    if o.numel() == 0:
        return o
    knobs = {**KNOBS, **(knobs or {})}
    cfg = launch_config(S, D, q.element_size(), knobs)
    sm_scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    grid = (triton.cdiv(S, cfg["BLOCK_M"]), B * H)
    _attention_masked_kernel[grid](
        q, k, v, mask, o, H, H // Hkv, S, D, sm_scale,
        *q.stride(), *k.stride(), *v.stride(), *strides, *o.stride(),
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_D=cfg["BLOCK_D"],
        EVEN_D=cfg["BLOCK_D"] == D, FP32=q.dtype == torch.float32, PRECISION=knobs["FP32_DOT"],
        UPCAST=q.device.type == "cpu",
        ADDITIVE=mask.dtype != torch.bool, PER_QUERY=mask.shape[2] != 1,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    return o


def kernel_fn(q, k, v, mask, scale=None):
    return attention_masked(q, k, v, mask, scale=scale)
