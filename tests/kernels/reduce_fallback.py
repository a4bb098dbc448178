"""Bad kernel: a Triton kernel that quietly falls back to PyTorch when it fails."""
import torch
import triton
import triton.language as tl


@triton.jit
def _sum_rows(x_ptr, out_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(x, axis=0).to(out_ptr.dtype.element_ty))


def kernel_fn(x):
    try:
        out = torch.empty((x.shape[0],), dtype=x.dtype, device=x.device)
        _sum_rows[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=64)  # wrong when N > 64
        if x.shape[1] > 64:
            raise ValueError("too wide")
        return out
    except Exception:
        return torch.sum(x.float(), dim=-1).to(x.dtype)
