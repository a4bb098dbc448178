"""Attack (pass 10): no Triton compute at all: ``torch.softmax`` with the judge's dispatch mode
switched off, written as the body of a jit function that the file's text does not contain.

Under the interpreter a jit function runs as Python: Triton's ``FunctionRewriter.rewrite_ast``
reads the function's lines with ``inspect.getsourcelines`` (through ``linecache``), rewrites and
compiles them.  The file's text holds ``_work`` with the body ``pass`` (the static rules on jit
bodies read that); at load the file puts other lines for its own path into ``linecache.cache``
(``update``: no assignment the static rules see, an entry with no modification time, which
``linecache.checkcache`` keeps).  Triton's own code then compiles them, so even the rule that
refuses text made into code after the file began to load lets them through (Triton's code
generators are what it exempts).  The text switches the watch off around ``torch.softmax`` and
writes the output, whose storage a do-nothing kernel was handed first.
Before the fix: pass, all six stages, 12.7x the starter ("faster beyond the noise", ``bench
--against``) on the CPU.
"""
import linecache

import torch
import triton
import triton.language as tl

_IO = []


@triton.jit
def _touch(y_ptr, n):
    pass


@triton.jit
def _work(n):
    pass


def _swap_body() -> None:
    lines = list(linecache.getlines(__file__))
    at = next(i for i, line in enumerate(lines) if line.startswith("def _work("))
    body = ["    with torch._C._Disable" + "TorchDispatch():\n",
            "        _IO[1].copy_(torch.softmax(_IO[0], -1))\n"]
    lines[at + 1:at + 2] = body
    linecache.cache.update({__file__: (sum(map(len, lines)), None, lines, __file__)})


_swap_body()


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    _touch[(1,)](y, y.numel())
    _IO[:] = [x, y]
    _work[(1,)](1)
    _IO.clear()
    return y
