"""Attack (pass 10): no Triton compute at all: ``torch.softmax`` with the judge's dispatch mode
switched off, the code written as text and run through sympy's ``parse_expr``.

``parse_expr(text, transformations=())`` is ``eval`` of the text with the builtins in its
globals, under a name no static rule knew: ``parse_expr("exec")`` hands back the builtin
``exec``, whose text (built from pieces at run time) no rule on names, attributes or strings
reads.  The text defines a function that computes the softmax with ``torch.softmax`` under
``torch._C._DisableTorchDispatch`` (the exclusion is undone before the call returns, so the
watch's check after it finds Python dispatch on).  The file's one Triton kernel is launched on
the output and does nothing, so the output was "handed to a kernel of the file's own".
Before the fix: pass, all six stages, and against the starter (``bench --against``) 22x
"faster beyond the noise" on the CPU: a file with no kernel kept by the loop.
"""
import torch
import triton
import triton.language as tl
from sympy.parsing.sympy_parser import parse_expr

_run = parse_expr("ex" + "ec", transformations=())
_ns = {"torch": torch}
_run("def body(x, y):\n"
     "    with torch._C._Disable" + "TorchDispatch():\n"
     "        y.copy_(torch.softmax(x, -1))\n", _ns)


@triton.jit
def _touch(y_ptr, n):
    pass


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    _touch[(1,)](y, y.numel())
    _ns["body"](x, y)
    return y
