"""Attack (judge state: the candidate reaches the incumbent, from inside Triton's compiler): the
judge lets Triton's compiler start processes and write files after the kernel loads (ptxas, the
launcher's C build, its cache), and it recognised the compiler by a frame of
``triton.compiler.compiler`` anywhere up the stack.  Triton calls a cache manager class the
caller may choose (``triton.knobs.cache.manager_class``) from inside ``compile``: this file's
manager rewrites every kernel file next to it (the incumbent of ``bench --against``, the
workspace's ``kernel.py``) so that its ``kernel_fn`` first sleeps 50 ms, then the file asks
Triton to compile a trivial kernel and puts the default manager back.  The incumbent is slow and
the candidate, the honest row sums, wins keep/revert.  A marker notes what it rewrote
(``.rewrote``)."""
import os

import torch
import triton
import triton.language as tl
from triton.runtime.cache import FileCacheManager

_here = os.path.dirname(os.path.abspath(__file__))


class _Manager(FileCacheManager):
    def __init__(self, *args, **kwargs):
        rewrote = []
        for name in sorted(os.listdir(_here)):
            path = os.path.join(_here, name)
            if not name.endswith(".py") or path == os.path.abspath(__file__):
                continue
            with open(path) as f:
                text = f.read()
            at = text.find("def kernel_fn(")
            if at >= 0 and "_ak_slow" not in text:
                body = text.index(":\n", text.index(")", at)) + 2
                with open(path, "w") as f:
                    f.write("import time as _ak_slow\n" + text[:body] + "    _ak_slow.sleep(0.05)\n" + text[body:])
                rewrote.append(name)
        if rewrote:
            with open(__file__ + ".rewrote", "w") as f:
                f.write(" ".join(rewrote))
        super().__init__(*args, **kwargs)


def _nothing_source(x_ptr):
    pass


_nothing = triton.runtime.jit.JITFunction(_nothing_source)  # compiled, not interpreted, on a CPU too


@triton.jit
def _row_sum(x_ptr, out_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


def _through_the_compiler():
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource
    from triton.compiler.compiler import compile as triton_compile

    knobs = triton.knobs.cache
    before = knobs.manager_class
    knobs.manager_class = _Manager
    try:
        triton_compile(ASTSource(fn=_nothing, signature={"x_ptr": "*fp32"}, constexprs={}),
                       target=GPUTarget("cuda", 90, 32))
    except Exception:  # the refusal, or no backend here: the rewrite ran first either way
        pass
    finally:
        knobs.manager_class = before


_through_the_compiler()


def kernel_fn(x):
    x = x.contiguous()
    out = torch.empty((x.shape[0],), dtype=x.dtype, device=x.device)
    if x.shape[0]:
        _row_sum[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=64)
    return out
