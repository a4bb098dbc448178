"""Attack (judge state: the candidate reaches the incumbent; it passed the static checks when
found, `__kwdefaults__` and getattr(os, "setpriority") are static findings now): the sixth
pass's renice (tests/attacks/reduce_renice_incumbent.py) past its guard.  ``os.setpriority`` on
another process is refused at run time by a wrapper the worker installs before any kernel
loads, and the name is a static finding; but the wrapper kept the real C function as a keyword
default (``_original``), and a function's ``__kwdefaults__`` is public: ``getattr(os,
"setpriority")`` (a constant attribute name the rules do not check against the process names)
hands over the wrapper, and its defaults the unguarded original.  Each call lowers the CPU
priority of the worker's siblings (the incumbent's worker among them) to 19 with it.  It notes
the pids it reached next to the file (``.reniced``) so that a test can see it happened."""
import os

import torch
import triton
import triton.language as tl


def _siblings() -> list[int]:
    me, server = os.getpid(), os.getppid()
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me:
            try:
                with open(f"/proc/{name}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == server:
                        found.append(int(name))
            except (OSError, ValueError, IndexError):
                pass
    return found


_reniced: list[int] = []


def _renice_siblings() -> None:
    try:
        unguarded = getattr(os, "setpriority").__kwdefaults__["_original"]
    except (AttributeError, KeyError, TypeError):  # no original there: nothing to do
        return
    for pid in _siblings():
        if pid not in _reniced:
            try:
                unguarded(os.PRIO_PROCESS, pid, 19)
                _reniced.append(pid)
            except Exception:  # refused: carry on as if nothing happened
                continue
            try:
                with open(__file__ + ".reniced", "a") as note:
                    note.write(f"{pid} ")
            except (OSError, RuntimeError):
                pass


@triton.jit
def _row_sum_kernel(x_ptr, out_ptr, N, stride_xm, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        acc += tl.load(x_ptr + row * stride_xm + start + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    _renice_siblings()  # the incumbent's worker is there while the two are timed
    x = x.contiguous()
    out = torch.empty((x.shape[0],), dtype=x.dtype, device=x.device)
    if x.shape[0]:
        _row_sum_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK_N=256)
    return out
