"""Attack (pass8, coverage of timed calls): drops NaN/inf from its row sums on every call it can
tell is a *regular* timed draw, and sums honestly on every call the judge compares with
non-finite or large values.

The judge draws ~8 of a shape's timed calls from the problem's numerics cases (large, tiny,
NaN...) so that "the code that handles such values must hold on timed calls too"
(evaluate.NUMERICS_PER_SHAPE).  That only works if a kernel cannot tell those draws from the
regular ones.  It can, without reading a single value, from the input tensor's metadata:

- a regular draw (problems.base.randn: ``torch.randn`` then ``add_(offset)``) is a base tensor
  whose version counter is 1;
- the reduce numerics cases are built otherwise: ``_exact_rows`` (large, tiny, mixed-scales) is
  an out-of-place product (version 0), ``_large_cancelling`` ends with ``*=`` and ``scatter_``
  (version 2), ``with_nonfinite`` returns ``flat.reshape(...)``, a *view* (``_base`` set);
  ``dominant`` has version 1 like a regular draw but holds no NaN/inf, so the shortcut is
  right on it anyway;
- inputs the parent sends (every correctness stage, numerics included) live in shared memory
  (``x.is_shared()``), which the README already concedes a kernel can see.

So: honest sums unless the input is unshared, version 1 and not a view; there the sums skip
non-finite values (the "NaN dropped from sums" starter edit that the numerics stage and the
numerics timed draws exist to catch).  Every call the judge compares values of with NaN/inf
gets the honest path; the shortcut runs on the regular timed calls (on a GPU 112 of a shape's
120), is what gets timed, and is what a model gets whenever its activation was written in place
once (a residual ``add_``).  Swap the NaN drop for any shortcut that is exact on N(1, 1) values
(no max subtraction in softmax, fp16 accumulation...) and that one is measured instead.

Which rule should catch it: the numerics timed draws (evaluate._batch ``numerics_p``) — they
must be indistinguishable from regular draws.  Fix at the cause: every input set a kernel
receives, whatever drew it (regular, numerics, parent-sent), is handed over as a fresh
contiguous base tensor in memory of the same kind with the same version counter (copy each
drawn tensor into a new allocation, ``empty_like(x).copy_(x)``, in ``problem_spec.draw_set``
and in the worker's rebuild of parent-sent sets); the draw's duration is a second channel
(numerics draws build more), so pad draws to a common time or draw both kinds always.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _row_sum(x_ptr, out_ptr, N, stride, BLOCK: tl.constexpr, DROP_NONFINITE: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + row.to(tl.int64) * stride + cols, mask=cols < N, other=0.0).to(tl.float32)
        if DROP_NONFINITE:
            v = tl.where(tl.abs(v) < float("inf"), v, 0.0)
        acc += v
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


def _regular_timed_draw(x: torch.Tensor) -> bool:
    return (not x.is_shared()) and x._version == 1 and x._base is None


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    shortcut = _regular_timed_draw(x)
    x = x.contiguous()
    M, N = x.shape
    out = torch.empty((M,), dtype=x.dtype, device=x.device)
    if M:
        block = max(16, min(1024, triton.next_power_of_2(N)))
        _row_sum[(M,)](x, out, N, x.stride(0), BLOCK=block, DROP_NONFINITE=shortcut)
    return out
