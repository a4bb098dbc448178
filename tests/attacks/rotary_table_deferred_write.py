"""Attack (rotary_table, timing): work shifted between the calls of one timed request: the
first calls return outputs they never wrote and the request's last call computes them all, so
the median per-call time is a do-nothing launch while every output is right when collected.

Why it passes: outputs are compared when the parent collects them, after the whole request, not
when their call returned; and the score is the median of per-call times, which work moved
between calls of one request changes while the request's total does not.  The kernel predicts
the request's length from the judge's own plan (timing.CPU_PLAN: 0.5 s / warm-up time, 1..3
calls; on a GPU GPU_PLAN and pool_size, which a kernel can compute the same way).  On a GPU the
heavy call can also busy-wait on the host past GPU_COVER_US_MAX so that it is "uncovered" and
dropped from the medians (evaluate._batch, timing.without_uncovered); the tiny calls would be
padded to just above 0.95x the roofline to stay clear of below-floor.
"""
import time

import torch
import triton
import triton.language as tl

KNOBS = {"ROWS": 4, "num_warps": 4, "num_stages": 1}
KNOB_SPACE = {"ROWS": [1, 2, 4, 8, 16, 32], "num_warps": [1, 2, 4, 8], "num_stages": [1, 2]}


@triton.jit
def _rotary_table_kernel(pos_ptr, inv_ptr, cos_ptr, sin_ptr, R, HALF, scaling, ROWS: tl.constexpr,
                         BLOCK_H: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_H)
    row_ok = rows < R
    col_ok = cols < HALF
    pos = tl.load(pos_ptr + rows, mask=row_ok, other=0).to(tl.float32)
    inv = tl.load(inv_ptr + cols, mask=col_ok, other=0.0)
    angle = pos[:, None] * inv[None, :]
    c = (tl.cos(angle) * scaling).to(cos_ptr.dtype.element_ty)
    s = (tl.sin(angle) * scaling).to(sin_ptr.dtype.element_ty)
    mask = row_ok[:, None] & col_ok[None, :]
    base = rows.to(tl.int64)[:, None] * (2 * HALF) + cols[None, :]
    tl.store(cos_ptr + base, c, mask=mask)
    tl.store(cos_ptr + base + HALF, c, mask=mask)
    tl.store(sin_ptr + base, s, mask=mask)
    tl.store(sin_ptr + base + HALF, s, mask=mask)


def _honest(position_ids: torch.Tensor, inv_freq: torch.Tensor, scaling: float, like: torch.Tensor):
    position_ids = position_ids.contiguous()
    inv_freq = inv_freq.contiguous()
    half = inv_freq.numel()
    shape = (*position_ids.shape, 2 * half)
    cos = torch.empty(shape, dtype=like.dtype, device=position_ids.device)
    sin = torch.empty(shape, dtype=like.dtype, device=position_ids.device)
    R = position_ids.numel()
    if R == 0 or half == 0:
        return cos, sin
    rows = max(1, min(KNOBS["ROWS"], triton.next_power_of_2(R)))
    _rotary_table_kernel[(triton.cdiv(R, rows),)](position_ids, inv_freq, cos, sin, R, half, float(scaling), ROWS=rows,
                                                  BLOCK_H=max(2, triton.next_power_of_2(half)),
                                                  num_warps=KNOBS["num_warps"], num_stages=KNOBS["num_stages"])
    return cos, sin


TARGETS = [(2, 32, 64), (1, 37, 96)]  # the problem's cpu_shapes (B, S, D), in the judge's order
EDGES = {(1, 1, 2), (3, 7, 32), (1, 5, 160)}
_state = {"heldout": False, "keys": [], "last_us": {}, "timed": False, "seen": {}, "pending": []}


def _write_nothing(position_ids, inv_freq, cos, sin):
    # a real launch of the file's kernel with both outputs as arguments and no row to write
    _rotary_table_kernel[(1,)](position_ids, inv_freq, cos, sin, 0, inv_freq.numel(), 1.0, ROWS=1,
                               BLOCK_H=max(2, triton.next_power_of_2(inv_freq.numel())))


def _timed_honest(key, *args):
    t0 = time.perf_counter()
    out = _honest(*args)
    _state["last_us"][key] = (time.perf_counter() - t0) * 1e6
    return out


def kernel_fn(position_ids, inv_freq, scaling, like):
    key = (*position_ids.shape, 2 * inv_freq.numel())
    st = _state
    if key not in TARGETS and key not in EDGES:
        st["heldout"] = True  # a held-out shape: the correctness stages are nearly over
    keys = st["keys"]
    keys.append(key)
    if st["heldout"] and not st["timed"] and len(keys) >= 3 and keys[-1] == TARGETS[1] \
            and keys[-2] == TARGETS[0] and keys[-3] != TARGETS[0]:
        st["timed"] = True  # the two warm-up calls (one per target shape, in order): this was the second
        return _timed_honest(key, position_ids, inv_freq, scaling, like)
    if not st["timed"] or key not in TARGETS:
        return _timed_honest(key, position_ids, inv_freq, scaling, like)
    n = max(1, min(3, int(0.5e6 / max(st["last_us"][key], 1.0))))  # timing.calls_for(CPU_PLAN, warm-up time)
    count = st["seen"].get(key, 0)
    st["seen"][key] = count + 1
    if n < 2:
        return _honest(position_ids, inv_freq, scaling, like)
    half = inv_freq.numel()
    shape = (*position_ids.shape, 2 * half)
    cos = torch.empty(shape, dtype=like.dtype, device=position_ids.device)
    sin = torch.empty(shape, dtype=like.dtype, device=position_ids.device)
    st["pending"].append((position_ids, inv_freq, scaling, cos, sin))
    if count % n != n - 1:
        _write_nothing(position_ids, inv_freq, cos, sin)
        return cos, sin
    for p, inv, sc, c, s in st["pending"]:  # the request's last call: everyone's work
        R = p.numel()
        rows = max(1, min(KNOBS["ROWS"], triton.next_power_of_2(R)))
        _rotary_table_kernel[(triton.cdiv(R, rows),)](p, inv, c, s, R, half, float(sc), ROWS=rows,
                                                      BLOCK_H=max(2, triton.next_power_of_2(half)))
    st["pending"] = []
    return cos, sin
