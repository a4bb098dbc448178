"""Matmul by torch.mm, recorded by the watch under another name: the op packet ``aten.mm`` is a
key of torch.utils.flop_counter's registry, and the watch named each op it saw by ``str()`` of
the op's packet, which reads the packet's ``_qualified_op_name``; set to ``"aten::view"`` for
the length of the call, torch.mm was recorded as ``aten.view``, an allowed op.  A Triton kernel
of the file's is handed the output and copies the product into it (sixth red-team pass: passed
all six stages and timing)."""
import torch
import triton
import triton.language as tl
from torch.utils.flop_counter import flop_registry

_mm = next(k for k in flop_registry if str(k) == "aten.mm")
_name = _mm._qualified_op_name


@triton.jit
def _copy(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


def kernel_fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    _mm._qualified_op_name = "aten::view"
    product = torch.mm(a, b)
    _mm._qualified_op_name = _name
    out = torch.empty_like(product)
    n = out.numel()
    _copy[(triton.cdiv(max(n, 1), 256),)](product, out, n, BLOCK=256)
    return out
