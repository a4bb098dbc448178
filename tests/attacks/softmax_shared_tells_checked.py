"""Attack (pass 9, kernel fast on unchecked calls only): the honest softmax (max subtracted) on
every input that lives in shared memory, and exp without the max on every other input.

The correctness stages call the kernel on input sets the judge's parent process drew and sent:
on the CPU they arrived as shared-memory tensors (``x.is_shared()``), on a GPU through CUDA IPC.
Timed calls get sets the worker draws itself, in its own memory.  So "not shared" meant "a timed
call": the numerics stage (large values, where exp without the max overflows to inf and the row
becomes NaN) only ever saw the safe path, and the timed calls, whose values the judge checks only
on a sample (the numerics timed draws among them), ran the shortcut.  Which timed calls draw a
numerics case is random, so the verdict was too: on the CPU it passed whenever none of its few
timed calls drew the large-values case; on a GPU, a shape's ~120 timed calls had eight numerics
draws.  Telling the two apart reads no value: no host read, no op, nothing the watch sees.

Which rule should catch it: none needs to.  The worker now copies every parent-sent set into
fresh memory of its own, through the path its draws take, right before the call (worker_main
``_State._inputs``), so every input is unshared: the file takes its shortcut on every call, the
numerics stage's included, and fails there (``incorrect``, numerics, large values).
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _softmax(x_ptr, out_ptr, N, stride, SAFE: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
    if SAFE:
        x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * N + cols, (e / tl.sum(e, axis=0)).to(out_ptr.dtype.element_ty), mask=cols < N)


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    checked = x.is_shared()  # sent by the judge's parent: a correctness call
    x = x.contiguous()
    m, n = x.shape
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m and n:
        _softmax[(m,)](x, out, n, x.stride(0), SAFE=checked, BLOCK=max(16, triton.next_power_of_2(n)))
    return out
