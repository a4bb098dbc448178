"""Bad kernel: lets PyTorch do the work."""
import torch


def kernel_fn(x):
    out = torch.empty((x.shape[0],), dtype=x.dtype, device=x.device)
    out.copy_(x.float().sum(-1))
    return out
