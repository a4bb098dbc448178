"""The reference renamed ModelNew (no kernel at all): KernelBench's lenient rule refuses it too."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)
