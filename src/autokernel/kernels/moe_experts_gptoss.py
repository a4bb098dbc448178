"""Starter kernel for `moe_experts_gptoss`: GPT-OSS's experts (clamped, biased GLU, interleaved gate/up).

out[t] = sum over k of w[t, k] * (h @ down[e] + down_bias[e]), e = idx[t, k], where
gu = x[t] @ gate_up[e] + gate_up_bias[e], g = min(gu[0::2], limit), u = clamp(gu[1::2], ±limit)
and h = (u + 1) * g * sigmoid(alpha * g).

The `moe_experts` starter's five launches (count, place, gate/up grouped GEMM, down grouped GEMM,
combine; no host sync), with this layout: the weights are stored for x @ W ([E, D, 2I] and
[E, I, D]), so a B tile is read row-major; gate column n is gate_up's column 2n and up's is
2n + 1: the gate/up GEMM reads 2 BLOCK_N adjacent columns as one tile, adds the biases and splits
its accumulator into the gate and up halves in registers, then applies the clamps and the GLU
before h is written (in the input dtype, sorted order); the down GEMM adds
down_bias before the routing weight scales the row.  sigmoid(alpha g) uses exp of -|alpha g| only.
fp32 inputs use IEEE dots; under the interpreter (CPU tensors) tiles are upcast to fp32.
"""
import torch
import triton
import triton.language as tl

# GPT-OSS-20B's experts at 4096 tokens (H200, 2026-12-05, benchmarks/starter_knobs_gpu.py): 128x128
# gate/up pairs (a 128x256 tile of gate_up) 1.948 ms and a 128x256 down tile 2.014 ms, each against
# 2.183 ms with 64-row tiles in both.  BLOCK_N counts (gate, up) pairs: a program reads 2 BLOCK_N
# columns of gate_up and holds a BLOCK_M x 2 BLOCK_N accumulator
KNOBS = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3,
         "DOWN_BLOCK_M": 128, "DOWN_BLOCK_N": 256, "DOWN_BLOCK_K": 64, "DOWN_num_warps": 8, "DOWN_num_stages": 3,
         "COMBINE_BLOCK": 1024}
KNOB_SPACE = {"BLOCK_M": [16, 32, 64, 128], "BLOCK_N": [32, 64, 128], "BLOCK_K": [32, 64, 128],
              "GROUP_M": [1, 4, 8, 16, 64],
              "num_warps": [4, 8], "num_stages": [2, 3, 4],
              "DOWN_BLOCK_M": [16, 32, 64, 128], "DOWN_BLOCK_N": [32, 64, 128, 256], "DOWN_BLOCK_K": [32, 64, 128],
              "DOWN_num_warps": [4, 8], "DOWN_num_stages": [2, 3, 4], "COMBINE_BLOCK": [256, 512, 1024, 2048]}

ROUTE_BLOCK = 1024  # pairs per program of the count and place launches


@triton.jit
def _count_kernel(idx_ptr, counts_ptr, pairs, experts, BLOCK: tl.constexpr):
    p = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    e = tl.load(idx_ptr + p, mask=p < pairs, other=0)
    ok = (p < pairs) & (e >= 0) & (e < experts)
    tl.atomic_add(counts_ptr + e, tl.full((BLOCK,), 1, tl.int32), mask=ok)


@triton.jit
def _place_kernel(idx_ptr, counts_ptr, cursor_ptr, order_ptr, pairs, experts,
                  E_POW: tl.constexpr, BLOCK: tl.constexpr):
    p = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    e = tl.load(idx_ptr + p, mask=p < pairs, other=0).to(tl.int32)
    ok = (p < pairs) & (e >= 0) & (e < experts)
    ex = tl.arange(0, E_POW)
    counts = tl.load(counts_ptr + ex, mask=ex < experts, other=0)
    starts = tl.cumsum(counts, 0) - counts
    start = tl.sum(tl.where(e[:, None] == ex[None, :], starts[None, :], 0), 1)
    slot = tl.atomic_add(cursor_ptr + e, tl.full((BLOCK,), 1, tl.int32), mask=ok)
    tl.store(order_ptr + start + slot, p, mask=ok)


@triton.jit
def _expert_tile(counts_ptr, experts, tiles_n, E_POW: tl.constexpr, BLOCK_M: tl.constexpr, GROUP_M: tl.constexpr):
    """(expert, first sorted row of its run, its run's length, first row of this tile in the
    run, column tile) of program ``program_id(0)``; the expert is >= ``experts`` past the last
    tile.  Within an expert the tiles go in groups of GROUP_M row tiles, each group swept column
    by column, so a group's rows of x stay in L2 while the expert's weight tiles stream past."""
    ex = tl.arange(0, E_POW)
    counts = tl.load(counts_ptr + ex, mask=ex < experts, other=0)
    tiles_m = (counts + BLOCK_M - 1) // BLOCK_M
    tiles = tiles_m * tiles_n
    tile = tl.program_id(0)
    e = tl.sum((tl.cumsum(tiles, 0) <= tile).to(tl.int32), 0)
    before = ex < e
    t = tile - tl.sum(tl.where(before, tiles, 0), 0)
    start = tl.sum(tl.where(before, counts, 0), 0)
    count = tl.sum(tl.where(ex == e, counts, 0), 0)
    m_tiles = tl.sum(tl.where(ex == e, tiles_m, 0), 0)
    group = GROUP_M * tiles_n
    first_m = (t // group) * GROUP_M
    rows_in_group = tl.maximum(tl.minimum(m_tiles - first_m, GROUP_M), 1)  # 1 past the last tile: no division by 0
    pid_m = first_m + (t % group) % rows_in_group
    pid_n = (t % group) // rows_in_group
    return e, start, count, pid_m * BLOCK_M, pid_n


@triton.jit
def _gate_up_kernel(x_ptr, w_ptr, b_ptr, counts_ptr, order_ptr, h_ptr, experts, top_k, D, I, alpha, limit,
                    stride_xt, stride_we, stride_wn, stride_wk, stride_be, stride_h,
                    E_POW: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    GROUP_M: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr):
    e, start, count, row0, pid_n = _expert_tile(counts_ptr, experts, tl.cdiv(I, BLOCK_N), E_POW, BLOCK_M, GROUP_M)
    if e >= experts:
        return
    rows = row0 + tl.arange(0, BLOCK_M)
    row_ok = rows < count
    pair = tl.load(order_ptr + start + rows, mask=row_ok, other=0)
    token = (pair // top_k).to(tl.int64)
    # 2 * BLOCK_N adjacent gate_up columns: BLOCK_N (gate, up) pairs, read as one contiguous tile
    # (a tile of every other column is read with strided, unvectorised loads)
    rc = pid_n * 2 * BLOCK_N + tl.arange(0, 2 * BLOCK_N)
    col_ok = rc < 2 * I
    rk = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + token[:, None] * stride_xt + rk[None, :]
    w_ptrs = w_ptr + e.to(tl.int64) * stride_we + rc[None, :] * stride_wn + rk[:, None] * stride_wk

    acc = tl.zeros((BLOCK_M, 2 * BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(D, BLOCK_K)):
        k_left = D - k * BLOCK_K
        x = tl.load(x_ptrs, mask=row_ok[:, None] & (rk[None, :] < k_left), other=0.0)
        w = tl.load(w_ptrs, mask=(rk[:, None] < k_left) & col_ok[None, :], other=0.0)
        if UPCAST:
            x = x.to(tl.float32)
            w = w.to(tl.float32)
        if IEEE:
            acc = tl.dot(x, w, acc, input_precision="ieee")
        else:
            acc = tl.dot(x, w, acc)
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K * stride_wk

    acc += tl.load(b_ptr + e.to(tl.int64) * stride_be + rc, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    g, u = tl.split(tl.reshape(acc, (BLOCK_M, BLOCK_N, 2)))  # even columns gate, odd ones up
    g = tl.minimum(g, limit)
    u = tl.minimum(tl.maximum(u, -limit), limit)
    # sigmoid(alpha g) with exp of -|alpha g| only (no overflow for large |g|)
    ag = alpha * g
    z = tl.exp(-tl.abs(ag))
    sigmoid = tl.where(ag >= 0, 1.0 / (1.0 + z), z / (1.0 + z))
    h = (u + 1.0) * (g * sigmoid)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    pos = (start + rows).to(tl.int64)
    tl.store(h_ptr + pos[:, None] * stride_h + rn[None, :], h.to(h_ptr.dtype.element_ty),
             mask=row_ok[:, None] & (rn[None, :] < I))


@triton.jit
def _down_kernel(h_ptr, w_ptr, b_ptr, counts_ptr, order_ptr, weights_ptr, out_ptr, experts, D, I,
                 stride_h, stride_we, stride_wn, stride_wk, stride_be,
                 E_POW: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 GROUP_M: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr):
    e, start, count, row0, pid_n = _expert_tile(counts_ptr, experts, tl.cdiv(D, BLOCK_N), E_POW, BLOCK_M, GROUP_M)
    if e >= experts:
        return
    rows = row0 + tl.arange(0, BLOCK_M)
    row_ok = rows < count
    pos = (start + rows).to(tl.int64)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rn_load = rn % D
    rk = tl.arange(0, BLOCK_K)
    h_ptrs = h_ptr + pos[:, None] * stride_h + rk[None, :]
    w_ptrs = w_ptr + e.to(tl.int64) * stride_we + rn_load[None, :] * stride_wn + rk[:, None] * stride_wk

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(I, BLOCK_K)):
        k_left = I - k * BLOCK_K
        a = tl.load(h_ptrs, mask=row_ok[:, None] & (rk[None, :] < k_left), other=0.0)
        b = tl.load(w_ptrs, mask=rk[:, None] < k_left, other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        if IEEE:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
        h_ptrs += BLOCK_K
        w_ptrs += BLOCK_K * stride_wk

    acc += tl.load(b_ptr + e.to(tl.int64) * stride_be + rn_load).to(tl.float32)[None, :]
    pair = tl.load(order_ptr + start + rows, mask=row_ok, other=0)
    weight = tl.load(weights_ptr + pair, mask=row_ok, other=0.0).to(tl.float32)
    acc = acc * weight[:, None]
    tl.store(out_ptr + pair.to(tl.int64)[:, None] * D + rn[None, :], acc,
             mask=row_ok[:, None] & (rn[None, :] < D))


@triton.jit
def _combine_kernel(pairs_ptr, out_ptr, D, top_k, stride_out, BLOCK: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = cols < D
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for k in range(0, top_k):
        acc += tl.load(pairs_ptr + (t * top_k + k) * D + cols, mask=ok, other=0.0)
    tl.store(out_ptr + t * stride_out + cols, acc.to(out_ptr.dtype.element_ty), mask=ok)


SMEM_BYTES = 200 * 1024  # shared memory one program may use (H200: 227 KiB a block)


def _block(knob: int, size: int) -> int:
    """A block no wider than needed (at least 16: the smallest dot)."""
    return max(16, min(knob, triton.next_power_of_2(max(size, 1))))


def _fit(bm: int, bn: int, bk: int, stages: int, b_tiles: int, element: int) -> tuple[int, int]:
    """(BLOCK_K, stages) that fit SMEM_BYTES: a stage holds an A tile and ``b_tiles`` B tiles;
    BLOCK_K is halved while even one stage does not fit."""
    while bk > 16 and (bm * bk + b_tiles * bk * bn) * element > SMEM_BYTES:
        bk //= 2
    per_stage = (bm * bk + b_tiles * bk * bn) * element
    return bk, max(1, min(stages, SMEM_BYTES // per_stage))


def moe_experts_gptoss(x, top_k_index, top_k_weights, gate_up, gate_up_bias, down, down_bias, alpha, limit,
                       knobs: dict | None = None) -> torch.Tensor:
    kn = knobs or KNOBS
    T, D = x.shape
    K = top_k_index.shape[1]
    E, _, two_i = gate_up.shape
    I = two_i // 2
    assert top_k_index.shape == (T, K) and top_k_weights.shape == (T, K), "bad routing shapes"
    assert gate_up.shape == (E, D, 2 * I) and down.shape == (E, I, D), "bad expert weight shapes"
    assert gate_up_bias.shape == (E, 2 * I) and down_bias.shape == (E, D), "bad expert bias shapes"
    gate_up_bias, down_bias = gate_up_bias.contiguous(), down_bias.contiguous()
    if T == 0 or D == 0 or I == 0 or K == 0:
        return torch.zeros((T, D), dtype=x.dtype, device=x.device)
    x, idx, weights = x.contiguous(), top_k_index.contiguous(), top_k_weights.contiguous()
    pairs = T * K
    counts = torch.zeros((E,), dtype=torch.int32, device=x.device)
    cursor = torch.zeros((E,), dtype=torch.int32, device=x.device)
    order = torch.empty((pairs,), dtype=torch.int32, device=x.device)
    e_pow = max(16, triton.next_power_of_2(E))
    route_block = max(16, min(ROUTE_BLOCK, 16384 // e_pow))
    route_grid = (triton.cdiv(pairs, route_block),)
    _count_kernel[route_grid](idx, counts, pairs, E, BLOCK=route_block)
    _place_kernel[route_grid](idx, counts, cursor, order, pairs, E, E_POW=e_pow, BLOCK=route_block)

    ieee, upcast = x.dtype == torch.float32, x.device.type == "cpu"
    h = torch.empty((pairs, I), dtype=x.dtype, device=x.device)
    bm, bn, bk = _block(kn["BLOCK_M"], pairs), _block(kn["BLOCK_N"], I), _block(kn["BLOCK_K"], D)
    bk, stages = _fit(bm, bn, bk, kn["num_stages"], 2, x.element_size())
    grid = ((triton.cdiv(pairs, bm) + E) * triton.cdiv(I, bn),)
    _gate_up_kernel[grid](x, gate_up, gate_up_bias, counts, order, h, E, K, D, I, float(alpha), float(limit),
                          x.stride(0), gate_up.stride(0), gate_up.stride(2), gate_up.stride(1), gate_up_bias.stride(0),
                          h.stride(0),
                          E_POW=e_pow, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=kn["GROUP_M"], IEEE=ieee,
                          UPCAST=upcast, num_warps=kn["num_warps"], num_stages=stages)

    # zeros: a pair whose expert index is out of range (a sentinel) adds nothing
    pair_out = torch.zeros((pairs, D), dtype=torch.float32, device=x.device)
    bm, bn, bk = (_block(kn["DOWN_BLOCK_M"], pairs), _block(kn["DOWN_BLOCK_N"], D),
                  _block(kn["DOWN_BLOCK_K"], I))
    bk, stages = _fit(bm, bn, bk, kn["DOWN_num_stages"], 1, h.element_size())
    grid = ((triton.cdiv(pairs, bm) + E) * triton.cdiv(D, bn),)
    _down_kernel[grid](h, down, down_bias, counts, order, weights, pair_out, E, D, I,
                       h.stride(0), down.stride(0), down.stride(2), down.stride(1), down_bias.stride(0),
                       E_POW=e_pow, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=kn["GROUP_M"], IEEE=ieee,
                       UPCAST=upcast, num_warps=kn["DOWN_num_warps"], num_stages=stages)

    out = torch.empty((T, D), dtype=x.dtype, device=x.device)
    block = max(16, min(kn["COMBINE_BLOCK"], triton.next_power_of_2(D)))
    _combine_kernel[(T, triton.cdiv(D, block))](pair_out, out, D, K, out.stride(0), BLOCK=block)
    return out


def kernel_fn(x, top_k_index, top_k_weights, gate_up, gate_up_bias, down, down_bias, alpha, limit):
    return moe_experts_gptoss(x, top_k_index, top_k_weights, gate_up, gate_up_bias, down, down_bias, alpha, limit)
