"""Starter kernel for `attention_softcap`: flash-style forward with soft-capped scores and a mask.

o[b,h] = softmax(softcap * tanh(q[b,h] k[b,h//G]^T * scale / softcap) (+ mask | masked to -inf)) v[b,h//G]

The `attention_masked` starter's structure (one program per BLOCK_M query rows of one (batch,
head), keys and values streamed in BLOCK_N blocks with a running max and sum, the mask tile of
each block read through its strides), with the cap applied to each score tile before the mask.
The cap bounds the scores to ±softcap, so the running max never meets an overflow of its own.

tanh(t) keeps fp32's relative precision at every t (``_tanh``: the `softcap` starter's): the
capped score's error stays relative to the score, whatever the cap.  A tanh computed as
1 - 2 / (exp(2t) + 1) keeps only ~1e-7 absolute: times a cap of 10^4, 10^-3 on every score, and
a Gemma-2 model with such a cap failed verification (1e-4) after the kernel had passed the judge,
whose caps then stopped at 100.

Numerics: scores, cap, mask and softmax are fp32, the running max is kept in natural units
(see `attention_masked`: finfo.min masks), the probabilities go to the second dot in the input
dtype; fp32 inputs use IEEE dots; under the interpreter (CPU tensors) everything is fp32.
"""
import math

import torch
import triton
import triton.language as tl

# head_dim 256 (Gemma-2-9B's heads, 2x16x2048 tokens, H200, 2026-12-05): 128 query rows, a 32-key
# block and three stages took 0.578 ms; the earlier 64/32/2 1.413 ms (benchmarks/starter_knobs_gpu.py)
KNOBS = {"BLOCK_M": 128, "BLOCK_N": 32, "num_warps": 8, "num_stages": 3}
KNOB_SPACE = {"BLOCK_M": [32, 64, 128], "BLOCK_N": [16, 32, 64, 128], "num_warps": [4, 8],
              "num_stages": [1, 2, 3, 4]}

SMEM_BYTES = 200 * 1024


@triton.jit
def _tanh(t):
    """tanh with fp32's relative precision everywhere: (1 - e) / (1 + e), e = exp(-2|t|), the sign
    put back (no overflow), and the odd series below |t| = 0.05, where that quotient cancels."""
    a = tl.abs(t)
    e = tl.exp(-2.0 * a)
    a2 = a * a
    near = a * (1.0 + a2 * (-0.3333333333333333 + a2 * (0.13333333333333333 + a2 * -0.05396825396825397)))
    th = tl.where(a < 0.05, near, (1.0 - e) / (1.0 + e))
    return tl.where(t < 0, -th, th)


@triton.jit
def _attend_blocks(acc, m_i, l_i, q, k_base, v_base, mask_base, offs_m, offs_d, lo, hi, S, D,
                   stride_ks, stride_kd, stride_vs, stride_vd, stride_mq, stride_mk, cap_scale, softcap,
                   BLOCK_N: tl.constexpr, KEY_MASK: tl.constexpr, EVEN_D: tl.constexpr, IEEE: tl.constexpr,
                   UPCAST: tl.constexpr, ADDITIVE: tl.constexpr, PER_QUERY: tl.constexpr):
    """Fold keys/values [lo, hi) into the running (acc, m_i, l_i); m_i in natural units
    (capped scores plus the mask)."""
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
        if IEEE:
            qk = tl.dot(q, kt, input_precision="ieee")
        else:
            qk = tl.dot(q, kt)
        qk = softcap * _tanh(qk * cap_scale)
        if ADDITIVE:
            qk = qk + mval.to(tl.float32)
        else:
            qk = tl.where(mval != 0, qk, float("-inf"))
        if KEY_MASK:
            qk = tl.where(key_ok[None, :], qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row masked so far: no -inf - -inf
        # exponents floored at -1000 (exp2 of it is 0 anyway): a finfo.min mask minus the max would
        # overflow to -inf when multiplied by log2(e), which the interpreter warns about
        p = tl.math.exp2(tl.maximum(qk - m_ref[:, None], -1000.0) * 1.4426950408889634)
        alpha = tl.math.exp2(tl.maximum(m_i - m_ref, -1000.0) * 1.4426950408889634)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if IEEE:
            acc = tl.dot(p, v, acc, input_precision="ieee")
        else:
            acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def _attention_softcap_kernel(q_ptr, k_ptr, v_ptr, m_ptr, o_ptr, H, GROUP, S, D, cap_scale, softcap,
                             stride_qb, stride_qh, stride_qs, stride_qd,
                             stride_kb, stride_kh, stride_ks, stride_kd,
                             stride_vb, stride_vh, stride_vs, stride_vd,
                             stride_mb, stride_mh, stride_mq, stride_mk,
                             stride_ob, stride_oh, stride_os, stride_od,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                             EVEN_D: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr,
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
                                   stride_ks, stride_kd, stride_vs, stride_vd, stride_mq, stride_mk, cap_scale, softcap,
                                   BLOCK_N, False, EVEN_D, IEEE, UPCAST, ADDITIVE, PER_QUERY)
    acc, m_i, l_i = _attend_blocks(acc, m_i, l_i, q, k_base, v_base, mask_base, offs_m, offs_d, full, S, S, D,
                                   stride_ks, stride_kd, stride_vs, stride_vd, stride_mq, stride_mk, cap_scale, softcap,
                                   BLOCK_N, True, EVEN_D, IEEE, UPCAST, ADDITIVE, PER_QUERY)
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]  # every key masked: acc is 0, the row 0
    tl.store(o_base + offs_m[:, None] * stride_os + offs_d[None, :] * stride_od,
             out.to(o_ptr.dtype.element_ty), mask=row_ok & (offs_d[None, :] < D))


def _block(knob: int, size: int) -> int:
    return max(16, min(knob, triton.next_power_of_2(max(size, 1))))


def launch_config(S: int, D: int, itemsize: int, knobs: dict) -> dict:
    """Blocks clamped to the sequence and a pipeline that fits in shared memory."""
    block_d = max(16, triton.next_power_of_2(D))
    bm = _block(knobs["BLOCK_M"], S)
    bn = _block(knobs["BLOCK_N"], S)
    stages = knobs["num_stages"]

    def smem(bn_, stages_):
        return (bm * block_d + stages_ * (2 * bn_ * block_d + bm * bn_)) * itemsize

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


def attention_softcap(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                      scale: float | None, softcap: float, knobs: dict | None = None) -> torch.Tensor:
    B, H, S, D = q.shape
    Hkv = k.shape[1]
    assert k.shape == (B, Hkv, S, D) and v.shape == k.shape and H % Hkv == 0, "bad attention shapes"
    strides = mask_strides(mask, B, H, S)
    o = torch.empty_like(q)  # q's order of dimensions: heads inside tokens when q is a projection's view
    if o.numel() == 0:
        return o
    cfg = launch_config(S, D, q.element_size(), knobs or KNOBS)
    sm_scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    assert softcap > 0, "softcap must be positive"
    grid = (triton.cdiv(S, cfg["BLOCK_M"]), B * H)
    _attention_softcap_kernel[grid](
        q, k, v, mask, o, H, H // Hkv, S, D, sm_scale / float(softcap), float(softcap),
        *q.stride(), *k.stride(), *v.stride(), *strides, *o.stride(),
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_D=cfg["BLOCK_D"],
        EVEN_D=cfg["BLOCK_D"] == D, IEEE=q.dtype == torch.float32, UPCAST=q.device.type == "cpu",
        ADDITIVE=mask.dtype != torch.bool, PER_QUERY=mask.shape[2] != 1,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    return o


def kernel_fn(q, k, v, mask, scale, softcap):
    return attention_softcap(q, k, v, mask, scale, softcap)
