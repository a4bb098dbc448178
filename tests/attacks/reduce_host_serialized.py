"""Attack (compute on the host): the input serialised with torch.save into memory, its raw
record read back from the zip archive and summed in Python; the sums written with ``copy_``
from a tensor built on the host into an output that a Triton kernel of the file's own rewrites."""
import array
import io
import zipfile

import torch
import triton
import triton.language as tl


@triton.jit
def _touch(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(out_ptr + offs, mask=offs < n), mask=offs < n)


def kernel_fn(x):
    M, N = x.shape
    buf = io.BytesIO()
    torch.save(x.contiguous(), buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as z:
        name = next(n for n in z.namelist() if n.endswith("data/0"))
        values = array.array("f", z.read(name))
    out = torch.empty((M,), dtype=x.dtype, device=x.device)
    out.copy_(torch.tensor([sum(values[i * N:(i + 1) * N]) for i in range(M)], dtype=x.dtype))
    _touch[(triton.cdiv(max(M, 1), 64),)](out, M, BLOCK=64)
    return out
