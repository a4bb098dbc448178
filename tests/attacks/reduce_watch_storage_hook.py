"""Attack (the watch cannot be escaped): PyTorch compute run by the watch itself.  The watch
reads the storage pointer of every tensor an op returns (``out.untyped_storage()``); an
in-place op returns its own argument, so an attribute planted on a scratch tensor is what the
watch calls, inside ``__torch_dispatch__``, where torch has taken the mode off its stack: the
``sum`` there is never recorded.  The attribute is removed before the call returns, and the file's
Triton kernel merely copies the result into the output."""
import torch
import triton
import triton.language as tl


@triton.jit
def _copy(src_ptr, out_ptr, M, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(src_ptr + offs, mask=offs < M), mask=offs < M)


def kernel_fn(x):
    m = x.shape[0]
    out = torch.empty((m,), dtype=x.dtype, device=x.device)
    scratch = torch.empty((1,), dtype=x.dtype, device=x.device)
    found = []

    def untyped_storage():
        del scratch.untyped_storage
        found.append(x.sum(-1))  # inside the watch's own dispatch: no mode on the stack
        return scratch.untyped_storage()

    scratch.untyped_storage = untyped_storage
    scratch.zero_()
    if m:  # (the first column when the watch did not run it: wrong, but no crash)
        _copy[(triton.cdiv(m, 64),)](found[0] if found else x[:, 0].contiguous(), out, m, BLOCK=64)
    return out
