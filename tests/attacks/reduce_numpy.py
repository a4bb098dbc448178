"""Attack (compute outside Triton): numpy does the sums; no Triton kernel at all."""
import numpy
import torch


def kernel_fn(x):
    return torch.from_numpy(numpy.asarray(x.detach().cpu()).sum(axis=1).astype(numpy.asarray(x.cpu()).dtype))
