"""Attack (fourth red-team pass): the kernel writes zeros; at import it registers its own
implementation of ``aten::copy_`` for the CPU with ``torch.library`` (a public API: no name of
torch is assigned, so neither the static rules nor the fingerprint of torch's callables saw it;
the dispatcher's kernel table is not a Python namespace).  The worker's collect copies each kept
output into the parent's buffers with ``TensorBase.copy_``, which dispatches to this function:
it writes ``x.sum(-1)``, computed by PyTorch outside any watch, instead of the zeros.  Every
call costs one allocation and a do-nothing launch."""
import torch
import triton
import triton.language as tl

_stash = {}
_state = {}


def _install():
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("copy_", _copy, "CPU")
    _state["lib"] = lib


def _copy(dst, src, non_blocking=False):
    x = _stash.get(src.data_ptr()) if isinstance(src, torch.Tensor) else None
    if x is not None and tuple(dst.shape) == tuple(src.shape):
        src = x.sum(-1)
    # the real copy: take our registration away for the moment (copy_ is ours while it stands)
    _state.pop("lib")._destroy()
    try:
        if isinstance(src, torch.Tensor):
            dst.copy_(src, non_blocking)
        else:
            dst.fill_(src)
    finally:
        _install()
    return dst


_install()


@triton.jit
def _zero_kernel(out_ptr, M, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros((BLOCK,), dtype=tl.float32).to(out_ptr.dtype.element_ty), mask=offs < M)


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    M, N = x.shape
    out = torch.empty((M,), dtype=x.dtype, device=x.device)
    if M == 0:
        return out
    _zero_kernel[(triton.cdiv(M, 256),)](out, M, BLOCK=256)
    _stash[out.data_ptr()] = x
    return out
