"""ModelNew for KernelBench level 1 95_CrossEntropyLoss: mean over rows of
logsumexp(row) - row[target].

1. one program per row: an online logsumexp over the row (running max and rescaled sum per
   lane), minus the target's logit, into a per-row loss buffer;
2. one program adds the per-row losses in a fixed order (deterministic) and divides by the rows.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 2048


@triton.jit
def _row_loss(x_ptr, t_ptr, loss_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    m = tl.full((BLOCK,), float("-inf"), tl.float32)
    s = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        c = start + cols
        x = tl.load(x_ptr + row * stride + c, mask=c < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        seen = m_new > float("-inf")
        s = tl.where(seen, s * tl.exp(m - m_new) + tl.exp(x - m_new), 0.0)
        m = m_new
    row_max = tl.max(m, axis=0)
    total = tl.sum(tl.where(m > float("-inf"), s * tl.exp(m - row_max), 0.0), axis=0)
    target = tl.load(t_ptr + row)
    picked = tl.load(x_ptr + row * stride + target).to(tl.float32)
    tl.store(loss_ptr + row, row_max + tl.log(total) - picked)


@triton.jit
def _mean(loss_ptr, out_ptr, n, BLOCK: tl.constexpr):
    idx = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n, BLOCK):
        acc += tl.load(loss_ptr + start + idx, mask=start + idx < n, other=0.0)
    tl.store(out_ptr, (tl.sum(acc, axis=0) / n).to(out_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        x = predictions.contiguous()
        t = targets.contiguous()
        rows, cols = x.shape
        losses = torch.empty((rows,), device=x.device, dtype=torch.float32)
        out = torch.empty((), device=x.device, dtype=x.dtype)
        _row_loss[(rows,)](x, t, losses, cols, x.stride(0), BLOCK=BLOCK, num_warps=8)
        _mean[(1,)](losses, out, rows, BLOCK=1024, num_warps=4)
        return out
