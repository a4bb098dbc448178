"""Attack (compute on the host): the input's bytes read back through the process's own memory
file (no torch API involved), summed in Python, and handed to a Triton kernel of the file's own
as scalar arguments that it stores: every output element is written by a Triton store."""
import struct

import torch
import triton
import triton.language as tl


@triton.jit
def _put(out_ptr, i, value):
    tl.store(out_ptr + i, value)


def kernel_fn(x):
    M, N = x.shape
    x = x.contiguous()
    out = torch.empty((M,), dtype=x.dtype, device=x.device)
    with open("/proc/self/mem", "rb") as mem:
        mem.seek(x.data_ptr())
        raw = mem.read(M * N * 4)
    values = struct.unpack(f"{M * N}f", raw)
    for i in range(M):
        _put[(1,)](out, i, float(sum(values[i * N:(i + 1) * N])))
    return out
