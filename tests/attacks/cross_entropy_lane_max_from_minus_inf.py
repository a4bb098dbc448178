"""Attack (cross_entropy, correctness): every lane of the chunk keeps its own running max and sum
(no reduction inside the loop), the maxima starting at -inf.  A lane whose logits are all -inf
(a vocabulary masked for constrained decoding, or padded past the real vocabulary) computes
exp(-inf - -inf) = NaN, and the loss is NaN where the reference's is finite.  (Lanes past the
row's end read a finite floor, so short rows stay right.)  The starter's
lanes start at a finite -3e38 for this reason.

Why it passed: no case of the judge's drew a -inf logit (softmax has a masked-inf case,
cross_entropy did not).
"""
import torch
import triton
import triton.language as tl

LANES = 64


@triton.jit
def _row_loss(logits_ptr, targets_ptr, loss_ptr, V, stride, ignore_index, LANES: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, LANES)
    run_max = tl.full((LANES,), float("-inf"), dtype=tl.float32)
    run_sum = tl.zeros((LANES,), dtype=tl.float32)
    for start in range(0, V, LANES):
        ok = start + cols < V
        # lanes past the row read a finite floor: a lane that never sees a logit stays finite
        x = tl.load(logits_ptr + row * stride + start + cols, mask=ok, other=0.0).to(tl.float32)
        x = tl.where(ok, x, -1.0e30)
        new_max = tl.maximum(run_max, x)
        run_sum = run_sum * tl.exp(run_max - new_max) + tl.exp(x - new_max)
        run_max = new_max
    top = tl.max(run_max, axis=0)
    lse = top + tl.log(tl.sum(run_sum * tl.exp(run_max - top), axis=0))
    target = tl.load(targets_ptr + row)
    counts = target != ignore_index
    picked = tl.load(logits_ptr + row * stride + tl.where(counts, target, 0)).to(tl.float32)
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
    _row_loss[(M,)](logits, targets, work, V, logits.stride(0), int(ignore_index), LANES=LANES)
    _mean[(1,)](work, out, M, BLOCK=1024)
    return out
