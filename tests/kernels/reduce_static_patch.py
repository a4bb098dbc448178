"""Bad kernel: assigns to torch.allclose in plain sight."""
import torch

torch.allclose = lambda *a, **k: True


def kernel_fn(x):
    return torch.empty((x.shape[0],), dtype=x.dtype, device=x.device).fill_(0.0)
