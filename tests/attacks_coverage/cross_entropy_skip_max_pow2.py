"""Attack (numerics at one shape only): cross-entropy whose log-sum-exp skips the running max
when the vocabulary is a multiple of 256; exp() of large logits overflows there."""
import torch
import triton
import triton.language as tl


@triton.jit
def _row_losses(logits_ptr, targets_ptr, loss_ptr, V, stride, ignore_index, SUBTRACT_MAX: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < V
    x = tl.load(logits_ptr + row * stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    target = tl.load(targets_ptr + row)
    shift = tl.max(x, axis=0) if SUBTRACT_MAX else 0.0
    lse = tl.log(tl.sum(tl.where(mask, tl.exp(x - shift), 0.0), axis=0)) + shift
    picked = tl.sum(tl.where(cols == target, x, 0.0), axis=0)
    valid = target != ignore_index
    tl.store(loss_ptr + row, tl.where(valid, lse - picked, 0.0))
    tl.store(loss_ptr + tl.num_programs(0) + row, tl.where(valid, 1.0, 0.0))


@triton.jit
def _mean(loss_ptr, out_ptr, M, BLOCK: tl.constexpr):
    rows = tl.arange(0, BLOCK)
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    count = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, M, BLOCK):
        r = start + rows
        total += tl.load(loss_ptr + r, mask=r < M, other=0.0)
        count += tl.load(loss_ptr + M + r, mask=r < M, other=0.0)
    tl.store(out_ptr, (tl.sum(total, axis=0) / tl.sum(count, axis=0)).to(out_ptr.dtype.element_ty))


def kernel_fn(logits, targets, ignore_index=-100):
    logits = logits.contiguous()
    m, v = logits.shape
    losses = torch.empty((2 * m,), dtype=torch.float32, device=logits.device)
    out = torch.empty((), dtype=logits.dtype, device=logits.device)
    _row_losses[(m,)](logits, targets.contiguous(), losses, v, logits.stride(0), int(ignore_index), SUBTRACT_MAX=v % 256 != 0,
                      BLOCK=triton.next_power_of_2(v))
    _mean[(1,)](losses, out, m, BLOCK=64)
    return out
