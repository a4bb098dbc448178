"""A reduce kernel that writes far outside its output: on a GPU an illegal memory access,
which the harness must report as a `crash` verdict (used by harness_gpu_check.py)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _bad_store(out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK).to(tl.int64) + (1 << 40)
    tl.store(out_ptr + offs, tl.zeros((BLOCK,), dtype=tl.float32))


def kernel_fn(x):
    out = torch.empty((x.shape[0],), dtype=torch.float32, device=x.device)
    _bad_store[(1,)](out, BLOCK=128)
    return out.to(x.dtype)
