"""Bad kernel: wrong (sums only half of each row) and, at import, replaces torch's comparison
functions so that everything looks equal (through a helper, so that no assignment to a torch
attribute shows in the text: the run-time fingerprint must catch it)."""
import torch
import triton
import triton.language as tl


def _always(*args, **kwargs):
    return True


def _patch(module):
    module.allclose = _always
    module.equal = _always


_patch(torch)


@triton.jit
def _half_sum(x_ptr, out_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < N // 2, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(x, axis=0).to(out_ptr.dtype.element_ty))


def kernel_fn(x):
    out = torch.empty((x.shape[0],), dtype=x.dtype, device=x.device)
    _half_sum[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=triton.next_power_of_2(x.shape[1]))
    return out
