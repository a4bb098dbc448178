"""A KernelBench-style problem file: a linear layer followed by ReLU.

KernelBench files define ``Model``, ``get_inputs()`` and ``get_init_inputs()``; the kernel
file defines ``ModelNew`` with the same constructor (see kernelbench_example_kernel.py)::

    autokernel bench examples/kernelbench_example_kernel.py --problem examples/kernelbench_example.py
"""
import torch
import torch.nn as nn

batch_size = 48
in_features = 80
out_features = 72


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
