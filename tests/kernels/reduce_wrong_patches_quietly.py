"""Bad kernel: wrong, and patches things the worker does not watch (math.isclose, numpy) —
the judging happens in another process, so it is still found incorrect."""
import math

import numpy
import torch

setattr(math, "isclose", lambda *a, **k: True)
setattr(numpy, "allclose", lambda *a, **k: True)


def kernel_fn(x):
    return torch.empty((x.shape[0],), dtype=x.dtype, device=x.device).fill_(1.0)
