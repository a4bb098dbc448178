"""Attack (cross_entropy, correctness): a vocabulary that is a multiple of the vector width takes
(or any tiny one) the careful path (row max, then log-sum-exp of the shifted logits); an odd one takes the "tail"
path, which drops the max and sums exp(x) as it is.  Logits past ~88 overflow there: the loss
is inf, where the reference's is finite.

Why it passed: the numerics stage draws its large logits at the target shapes only (V = 256,
300 on the CPU, both even); the odd vocabularies (the 3x37 edge, every held-out shape, which
default_heldout makes odd) got regular draws only.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _row_loss(logits_ptr, targets_ptr, loss_ptr, V, stride, ignore_index,
              BLOCK: tl.constexpr, SHIFT: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(logits_ptr + row * stride + cols, mask=cols < V, other=-float("inf")).to(tl.float32)
    target = tl.load(targets_ptr + row)
    counts = target != ignore_index
    picked = tl.sum(tl.where(cols == target, x, 0.0), axis=0)
    if SHIFT:
        top = tl.max(x, axis=0)
        lse = top + tl.log(tl.sum(tl.exp(x - top), axis=0))
    else:
        lse = tl.log(tl.sum(tl.exp(x), axis=0))
    tl.store(loss_ptr + row, tl.where(counts, lse - picked, 0.0))
    tl.store(loss_ptr + tl.num_programs(0) + row, counts.to(tl.float32))


@triton.jit
def _mean(loss_ptr, out_ptr, M, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    total = 0.0
    count = 0.0
    for start in range(0, M, BLOCK):
        total += tl.sum(tl.load(loss_ptr + start + r, mask=start + r < M, other=0.0), axis=0)
        count += tl.sum(tl.load(loss_ptr + M + start + r, mask=start + r < M, other=0.0), axis=0)
    tl.store(out_ptr, (total / count).to(out_ptr.dtype.element_ty))


def kernel_fn(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    logits = logits.contiguous()
    targets = targets.contiguous()
    M, V = logits.shape
    out = torch.empty((), dtype=logits.dtype, device=logits.device)
    work = torch.empty((2 * max(M, 1),), dtype=torch.float32, device=logits.device)
    _row_loss[(M,)](logits, targets, work, V, logits.stride(0), int(ignore_index),
                    BLOCK=triton.next_power_of_2(V), SHIFT=V % 2 == 0 or V < 16)
    _mean[(1,)](work, out, M, BLOCK=1024)
    return out
