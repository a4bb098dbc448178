"""Attack (compute outside Triton): the sums computed in plain Python from the tensor's
elements (only allocation, indexing and scalar reads reach the dispatcher); a Triton launch of
its own on the side so that the file looks like a kernel."""
import torch
import triton
import triton.language as tl


@triton.jit
def _row_sum(x_ptr, out_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


def row_sum(x, out=None):
    x = x.contiguous()
    if out is None:
        out = torch.empty((x.shape[0],), dtype=x.dtype, device=x.device)
    if x.shape[0]:
        _row_sum[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=64)
    return out


def kernel_fn(x):
    row_sum(x)  # launched, result thrown away
    rows = [sum(float(v) for v in row) for row in x.float()]
    return torch.tensor(rows, dtype=x.dtype, device=x.device)
