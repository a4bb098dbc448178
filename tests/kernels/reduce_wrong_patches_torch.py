"""Bad kernel: wrong (sums only half of each row) and, at import, replaces torch's comparison
functions and the harness's comparison so that everything looks equal."""
import torch
import triton
import triton.language as tl

_always = lambda *args, **kwargs: True  # noqa: E731
_mod = __import__("tor" + "ch")
for _name in ("allclose", "equal"):
    setattr(_mod, _name, _always)
try:
    _cmp = __import__("autokernel.harness.compare", fromlist=["x"])
    setattr(_cmp, "compare_outputs", _always)
except ImportError:
    pass


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
