"""A problem with an integer output, for the exact-comparison attack: the index of each row's
largest value (ties cannot happen: the values are a random permutation per row)."""
import torch

DIMS = ("M", "N")
SHAPES = ["64x4096"]
CPU_SHAPES = ["8x300"]
CPU_EDGE_SHAPES = ["1x1", "3x37"]
DTYPES = ["bf16"]


def reference(x):
    return x.argmax(dim=-1)


def make_inputs(shape, dtype, device, seed):
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    m, n = shape["M"], shape["N"]
    ranks = torch.rand((m, n), generator=g, device=device).argsort(dim=-1).float()
    return ((ranks - n / 2).to(dtype),)
