"""Bad kernel: fails at import."""
import torch

KNOBS = {"BLOCK": 64}
raise RuntimeError("this kernel file is broken on purpose")


def kernel_fn(x):
    return x
