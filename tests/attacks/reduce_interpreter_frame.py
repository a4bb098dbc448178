"""Attack (watch escape): torch.sum called from a frame compiled under the Triton interpreter's
file name, which the watch used to exempt by file name."""
import os

import torch
import triton

_where = os.path.join(os.path.dirname(triton.__file__), "runtime", "interpreter.py")
_scope = {"torch": torch}
exec(compile("def hidden_sum(x):\n    return x.sum(1)\n", _where, "exec"), _scope)


def kernel_fn(x):
    return _scope["hidden_sum"](x)
