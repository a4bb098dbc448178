"""Matmul by torch.mm, recorded by the watch as an allowed op: an op's schema is a plain
attribute of the op object, and ``torch.utils.flop_counter`` holds ``torch.ops.aten`` as a
module global; for the length of the call aten.mm's op is given aten.view's schema, so the
watch (which names ops by their schema) recorded ``aten.view``.  A Triton kernel of the file's
is handed the output and copies the product into it (sixth red-team pass: passed all six
stages with the watch naming ops by their schema; the op named as an allowed one must now be
that very op object)."""
import torch
import torch.utils.flop_counter as _counter
import triton
import triton.language as tl


@triton.jit
def _copy(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


def kernel_fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    aten = _counter.aten
    mm, view = aten.mm.default, aten.view.default
    saved = mm._schema
    mm._schema = view._schema
    product = torch.mm(a, b)
    mm._schema = saved
    out = torch.empty_like(product)
    n = out.numel()
    _copy[(triton.cdiv(max(n, 1), 256),)](product, out, n, BLOCK=256)
    return out
