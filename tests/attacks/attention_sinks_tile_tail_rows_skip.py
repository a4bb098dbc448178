"""Attack (attention_sinks, correctness): block skipping decided by the tile's last two query rows.
For a per-query mask ([B|1, H|1, S, S]) each key block is first probed through two mask rows
only, the tile's last row and the one above it (two BLOCK_N vectors, no mask tile, no QK^T): when
both see no key of the block it is skipped (no dots, no mask tile load).  For a causal mask the
tile's last row sees the most keys, so this is exact there, and checking two rows keeps a single
dead row from skipping a tile.  Wrong for masks whose visible band moves across the tile: a
sliding-window mask (GPT-OSS's every other layer: causal and the 128-key window, which the model
integration passes as it is), with BLOCK_M 128 and BLOCK_N 64, skips for the tile of rows
[128t, 128t+127] the key block [128t-128, 128t-65], which rows 128t .. 128t+62 see (row 128t loses
63 of its 128 keys); chunked / block-diagonal masks likewise.

Why it passes: on the CPU every shape (held-out included, S <= 41) is one query tile and one key
block, so a block is skipped only when rows S-1 and S-2 are both dead, which no draw or case
makes (drawn masks keep key 0 in every row; fully-masked-rows kills every third row; one-key-
visible leaves each row one key; padding masks hide whole key columns).  The GPU shapes' masks are
random holes, a padded tail or every third row dead, never a band: two consecutive rows
that see nothing of a 64-key block see nothing of it only where every row of the tile does.

Caught now (sixteenth session, red-team pass on attention_sinks): the sliding-window case (a causal band of W keys, W drawn in 1..S/3) at the CPU edge shape of 200 tokens (two 128-row tiles).
"""

import math

import torch
import triton
import triton.language as tl

KNOBS = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3}
KNOB_SPACE = {"BLOCK_M": [32, 64, 128], "BLOCK_N": [16, 32, 64, 128], "num_warps": [4, 8],
              "num_stages": [1, 2, 3, 4]}

SMEM_BYTES = 200 * 1024


@triton.jit
def _attend_blocks(acc, m_i, l_i, q, k_base, v_base, mask_base, offs_m, offs_d, lo, hi, S, D,
                   stride_ks, stride_kd, stride_vs, stride_vd, stride_mq, stride_mk, sm_scale,
                   BLOCK_N: tl.constexpr, KEY_MASK: tl.constexpr, EVEN_D: tl.constexpr, IEEE: tl.constexpr,
                   UPCAST: tl.constexpr, ADDITIVE: tl.constexpr, PER_QUERY: tl.constexpr, r_last):
    """Fold keys/values [lo, hi) into the running (acc, m_i, l_i); m_i in natural units."""
    row_ok = offs_m < S
    r_prev = tl.maximum(r_last - 1, 0)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        key_ok = offs_n < S
        seen = 1
        if PER_QUERY:
            # the cheat: two mask rows (the tile's last two) decide whether the block is seen
            a = tl.load(mask_base + r_last * stride_mq + offs_n * stride_mk, mask=key_ok, other=0)
            b = tl.load(mask_base + r_prev * stride_mq + offs_n * stride_mk, mask=key_ok, other=0)
            if ADDITIVE:
                va = (a.to(tl.float32) > -6.0e4) & key_ok
                vb = (b.to(tl.float32) > -6.0e4) & key_ok
            else:
                va = (a != 0) & key_ok
                vb = (b != 0) & key_ok
            seen = tl.max((va | vb).to(tl.int32), 0)
        if seen > 0:
            acc, m_i, l_i = _one_block(acc, m_i, l_i, q, k_base, v_base, mask_base, offs_m, offs_d, offs_n, key_ok,
                                       row_ok, D, stride_ks, stride_kd, stride_vs, stride_vd, stride_mq, stride_mk,
                                       sm_scale, KEY_MASK, EVEN_D, IEEE, UPCAST, ADDITIVE, PER_QUERY)
    return acc, m_i, l_i


@triton.jit
def _one_block(acc, m_i, l_i, q, k_base, v_base, mask_base, offs_m, offs_d, offs_n, key_ok, row_ok, D,
               stride_ks, stride_kd, stride_vs, stride_vd, stride_mq, stride_mk, sm_scale,
               KEY_MASK: tl.constexpr, EVEN_D: tl.constexpr, IEEE: tl.constexpr,
               UPCAST: tl.constexpr, ADDITIVE: tl.constexpr, PER_QUERY: tl.constexpr):
    if True:
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

    sink = tl.load(s_ptr + off_h).to(tl.float32)
    m_i = tl.zeros((BLOCK_M,), dtype=tl.float32) + sink
    l_i = tl.full((BLOCK_M,), 1.0, dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    full = (S // BLOCK_N) * BLOCK_N
    r_last = tl.minimum(start_m * BLOCK_M + BLOCK_M - 1, S - 1)
    acc, m_i, l_i = _attend_blocks(acc, m_i, l_i, q, k_base, v_base, mask_base, offs_m, offs_d, 0, full, S, D,
                                   stride_ks, stride_kd, stride_vs, stride_vd, stride_mq, stride_mk, sm_scale,
                                   BLOCK_N, False, EVEN_D, IEEE, UPCAST, ADDITIVE, PER_QUERY, r_last)
    acc, m_i, l_i = _attend_blocks(acc, m_i, l_i, q, k_base, v_base, mask_base, offs_m, offs_d, full, S, S, D,
                                   stride_ks, stride_kd, stride_vs, stride_vd, stride_mq, stride_mk, sm_scale,
                                   BLOCK_N, True, EVEN_D, IEEE, UPCAST, ADDITIVE, PER_QUERY, r_last)
    out = acc / l_i[:, None]  # l_i >= exp(sink - max) > 0; every key masked: acc is 0, the row 0
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
