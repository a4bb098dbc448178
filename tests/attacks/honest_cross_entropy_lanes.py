"""Honest but unusual: cross-entropy with an online softmax per lane (each of LANES lanes walks
a strided share of the columns), lanes merged at the end; per-row losses, then a second kernel
takes the mean over the rows that count."""
import torch
import triton
import triton.language as tl

LANES = 4


@triton.jit
def _row_loss(x_ptr, t_ptr, loss_ptr, N, stride, ignore_index, LANES: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    lane_m = tl.full((LANES, BLOCK), float("-inf"), tl.float32)
    lane_s = tl.zeros((LANES, BLOCK), tl.float32)
    lanes = tl.arange(0, LANES)[:, None]
    cols0 = tl.arange(0, BLOCK)[None, :]
    for start in range(0, N, LANES * BLOCK):
        cols = start + lanes * BLOCK + cols0
        x = tl.load(x_ptr + row * stride + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
        new_m = tl.maximum(lane_m, x)
        keep = tl.where(new_m == float("-inf"), 0.0, tl.exp(lane_m - new_m))
        add = tl.where(x == float("-inf"), 0.0, tl.exp(x - new_m))
        lane_s = lane_s * keep + add
        lane_m = new_m
    m = tl.max(tl.max(lane_m, axis=1), axis=0)
    s = tl.sum(tl.sum(lane_s * tl.exp(lane_m - m), axis=1), axis=0)
    target = tl.load(t_ptr + row)
    valid = target != ignore_index
    picked = tl.load(x_ptr + row * stride + tl.where(valid, target, 0)).to(tl.float32)
    loss = tl.log(s) + m - picked
    tl.store(loss_ptr + row, tl.where(valid, loss, 0.0))
    tl.store(loss_ptr + tl.num_programs(0) + row, tl.where(valid, 1.0, 0.0))


@triton.jit
def _mean(loss_ptr, out_ptr, M, BLOCK: tl.constexpr):
    total = tl.zeros((BLOCK,), tl.float32)
    count = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, M, BLOCK):
        rows = start + tl.arange(0, BLOCK)
        total += tl.load(loss_ptr + rows, mask=rows < M, other=0.0)
        count += tl.load(loss_ptr + M + rows, mask=rows < M, other=0.0)
    tl.store(out_ptr, (tl.sum(total, axis=0) / tl.sum(count, axis=0)).to(out_ptr.dtype.element_ty))


def kernel_fn(logits, targets, ignore_index=-100):
    logits = logits.contiguous()
    M, N = logits.shape
    out = torch.empty((), dtype=logits.dtype, device=logits.device)
    losses = torch.empty((2 * M,), dtype=torch.float32, device=logits.device)
    block = max(16, min(64, triton.next_power_of_2(triton.cdiv(N, LANES))))
    _row_loss[(M,)](logits, targets, losses, N, logits.stride(0), int(ignore_index), LANES=LANES, BLOCK=block)
    _mean[(1,)](losses, out, M, BLOCK=64)
    return out
