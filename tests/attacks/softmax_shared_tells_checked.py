"""Attack (pass 9, kernel fast on unchecked calls only): the honest softmax (max subtracted) on
every call that came with the judge's own input set, and exp without the max on every other.

The correctness stages call the kernel on input sets the judge's parent process drew and sent:
on the CPU they arrived as shared-memory tensors, on a GPU through CUDA IPC.  Timed calls get
sets the worker draws itself, in its own memory.  So "the parent's memory is here" meant "a
correctness call", told three ways (``TELL``), none of which reads a value, calls an op or is a
static finding:

- ``"is_shared"``: the input itself, ``x.is_shared()``;
- ``"shared_cache"``: torch's cache of storages other processes shared with this one holds a
  live entry while the parent's set (or its output buffers) is mapped here;
- ``"rss_shmem"``: /proc/self/status counts resident shared memory then (once the worker has
  read the parent's pages: a first fix that copied the parent's set into the worker's memory
  before the call, the parent's set still mapped, made this one work).

The numerics stage (large values, where exp without the max overflows to inf and the row
becomes NaN) only ever saw the safe path, and the timed calls, whose values the judge checks
only on a sample (the numerics timed draws among them), ran the shortcut.  Which timed calls
draw a numerics case is random, so the verdict was too: on the CPU it passed whenever none of
its few timed calls drew the large-values case; on a GPU, a shape's ~120 timed calls had eight
numerics draws.

Which rule should catch it: none needs to.  The worker now copies every parent-sent set into
fresh memory of its own right before the call, as it draws timed sets, and opens the parent's
memory only around those copies (worker_main ``_State.call``): no input is shared and none of
the parent's memory is mapped while any call runs.  Each tell answers "timed" on every call, the
numerics stage's included, and the file fails there (``incorrect``, numerics, large values).
"""
import torch
import triton
import triton.language as tl

TELL = "is_shared"


@triton.jit
def _softmax(x_ptr, out_ptr, N, stride, SAFE: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
    if SAFE:
        x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * N + cols, (e / tl.sum(e, axis=0)).to(out_ptr.dtype.element_ty), mask=cols < N)


def _parents_memory_here(x: torch.Tensor) -> bool:
    if TELL == "is_shared":
        return x.is_shared()
    if TELL == "shared_cache":
        from torch.multiprocessing import reductions

        return any(not ref.expired() for ref in list(reductions.shared_cache.values()))
    with open("/proc/self/status") as f:
        return any(line.startswith("RssShmem:") and line.split()[1] != "0" for line in f)


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    checked = _parents_memory_here(x)  # the judge's own set: a correctness call
    x = x.contiguous()
    m, n = x.shape
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m and n:
        _softmax[(m,)](x, out, n, x.stride(0), SAFE=checked, BLOCK=max(16, triton.next_power_of_2(n)))
    return out
