"""softmax_interp_duck_argument.py with one line more: the duck-typed argument's class sets
``__module__ = "triton.language.core"``, and the judge told Triton's own launch arguments by the
module their class names, so the object passed as a Triton object and the interpreter's exempt
frame ran torch.softmax again (sixth red-team pass: passed all six stages and timing)."""
import functools
import torch
import triton
import triton.language as tl


@triton.jit
def _copy(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=m), mask=m)


class _Obj:
    __module__ = "triton.language.core"
    pass


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    x = x.contiguous()
    y = torch.empty_like(x)
    st = _Obj()
    st.data_ptr = int                      # storage key 0, stable across the interpreter's lookups
    st.cpu = functools.partial(torch.softmax, x, -1)   # called from the interpreter's _to_cpu frame
    st.copy_ = id                          # copy-back of the "source" is a no-op
    src = _Obj()
    src.data_ptr = x.data_ptr
    src.untyped_storage = lambda: st
    src.new_empty = x.new_empty
    src.storage_offset = int
    src.size = x.size
    src.stride = x.stride
    src.dtype = x.dtype
    n = M * N
    _copy[(triton.cdiv(max(n, 1), 1024),)](src, y, n, BLOCK=1024)
    return y
