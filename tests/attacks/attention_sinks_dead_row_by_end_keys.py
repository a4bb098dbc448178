"""Attack (attention_sinks, correctness): dead rows found from two mask entries.  A query row is
taken as dead (every key masked: its output is zeros, the sink takes all the mass) when its mask
hides both its first and its last key; such rows are written as zeros, and a query tile whose
rows are all such is written without touching k, v or the rest of the mask (the early exit an
optimiser adds for padded batches).  Wrong for every mask that hides key 0 of a live row: a
left-padded batch (transformers' padding_side="left", the recommended setting for batched
generation with decoder models such as GPT-OSS) under its causal mask hides the pad keys, key 0
first, and the future keys, key S-1 among them, so every query row but the last of a padded
sequence comes out zeros.

Why it passes: every mask the judge draws keeps key 0 visible in every row (visible_keys keeps
each row's first key; padding-per-row and per-head-mask do too); one-key-visible leaves key S-1
to the rows that lose key 0; the rows that lose both ends (fully-masked-rows, finfo-min-rows,
fp32-finfo-min-rows, a dead key-padding batch row) are dead indeed, and their output is zeros.

Caught now (sixteenth session, red-team pass on attention_sinks): the left-padded case (key 0 hidden; with the causal pattern the padded rows see nothing), which every attention kind with a mask now has.
"""

import math

import torch
import triton
import triton.language as tl

KNOBS = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3}
KNOB_SPACE = {"BLOCK_M": [32, 64, 128], "BLOCK_N": [16, 32, 64, 128], "num_warps": [4, 8],
              "num_stages": [1, 2, 3, 4]}

SMEM_BYTES = 200 * 1024


@triton.jit
def _attend_blocks(acc, m_i, l_i, q, k_base, v_base, mask_base, offs_m, offs_d, lo, hi, S, D,
                   stride_ks, stride_kd, stride_vs, stride_vd, stride_mq, stride_mk, sm_scale,
                   BLOCK_N: tl.constexpr, KEY_MASK: tl.constexpr, EVEN_D: tl.constexpr, IEEE: tl.constexpr,
                   UPCAST: tl.constexpr, ADDITIVE: tl.constexpr, PER_QUERY: tl.constexpr):
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
            mval = tl.load(mask_base + offs_m[:, None] * stride_mq + offs_n[None, :] * stride_mk,
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
        if IEEE:
            acc = tl.dot(p, v, acc, input_precision="ieee")
        else:
            acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def _attention_sinks_kernel(q_ptr, k_ptr, v_ptr, m_ptr, s_ptr, o_ptr, H, GROUP, S, D, sm_scale,
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

    # the cheat: a row is dead when its first and its last key are masked
    if PER_QUERY:
        first = tl.load(mask_base + offs_m * stride_mq, mask=offs_m < S, other=0)
        last = tl.load(mask_base + offs_m * stride_mq + (S - 1) * stride_mk, mask=offs_m < S, other=0)
    else:
        first = tl.load(mask_base + offs_m * 0)
        last = tl.load(mask_base + offs_m * 0 + (S - 1) * stride_mk)
    if ADDITIVE:
        dead = (first.to(tl.float32) < -6.0e4) & (last.to(tl.float32) < -6.0e4)
    else:
        dead = (first == 0) & (last == 0)
    live = tl.max(((~dead) & (offs_m < S)).to(tl.int32), 0)
    if live == 0:
        tl.store(o_base + offs_m[:, None] * stride_os + offs_d[None, :] * stride_od,
                 tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32).to(o_ptr.dtype.element_ty),
                 mask=row_ok & (offs_d[None, :] < D))
        return

    sink = tl.load(s_ptr + off_h).to(tl.float32)
    m_i = tl.zeros((BLOCK_M,), dtype=tl.float32) + sink
    l_i = tl.full((BLOCK_M,), 1.0, dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    full = (S // BLOCK_N) * BLOCK_N
    acc, m_i, l_i = _attend_blocks(acc, m_i, l_i, q, k_base, v_base, mask_base, offs_m, offs_d, 0, full, S, D,
                                   stride_ks, stride_kd, stride_vs, stride_vd, stride_mq, stride_mk, sm_scale,
                                   BLOCK_N, False, EVEN_D, IEEE, UPCAST, ADDITIVE, PER_QUERY)
    acc, m_i, l_i = _attend_blocks(acc, m_i, l_i, q, k_base, v_base, mask_base, offs_m, offs_d, full, S, S, D,
                                   stride_ks, stride_kd, stride_vs, stride_vd, stride_mq, stride_mk, sm_scale,
                                   BLOCK_N, True, EVEN_D, IEEE, UPCAST, ADDITIVE, PER_QUERY)
    out = tl.where(dead[:, None], 0.0, acc / l_i[:, None])  # l_i >= exp(sink - max) > 0; every key masked: acc is 0, the row 0
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


def attention_sinks(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
                    scale: float | None, sinks: torch.Tensor, knobs: dict | None = None) -> torch.Tensor:
    B, H, S, D = q.shape
    Hkv = k.shape[1]
    assert k.shape == (B, Hkv, S, D) and v.shape == k.shape and H % Hkv == 0, "bad attention shapes"
    strides = mask_strides(mask, B, H, S)
    assert sinks.shape == (H,), "sinks must be [H]"
    sinks = sinks.contiguous()
    o = torch.empty_like(q)  # q's order of dimensions: heads inside tokens when q is a projection's view
    if o.numel() == 0:
        return o
    cfg = launch_config(S, D, q.element_size(), knobs or KNOBS)
    sm_scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    grid = (triton.cdiv(S, cfg["BLOCK_M"]), B * H)
    _attention_sinks_kernel[grid](
        q, k, v, mask, sinks, o, H, H // Hkv, S, D, sm_scale,
        *q.stride(), *k.stride(), *v.stride(), *strides, *o.stride(),
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_D=cfg["BLOCK_D"],
        EVEN_D=cfg["BLOCK_D"] == D, IEEE=q.dtype == torch.float32, UPCAST=q.device.type == "cpu",
        ADDITIVE=mask.dtype != torch.bool, PER_QUERY=mask.shape[2] != 1,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    return o


def kernel_fn(q, k, v, mask, scale, sinks):
    return attention_sinks(q, k, v, mask, scale, sinks)
