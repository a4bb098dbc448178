"""Linears whose output rows are misaligned for the GEMM libraries, padded.

A bf16/fp16 ``nn.Linear`` with ``out_features`` not a multiple of 8 writes output rows that do
not start on 16-byte boundaries; cuBLAS then falls back to slow kernels.  Measured on the H200
(benchmarks/model_profile_gpu.py): GPT-2's tied LM head (50257 outputs) took 1.68 ms per forward
of a 3.3 ms model, BERT's MLM decoder (30522) 0.42 ms of 1.7 ms.  Padding the weight (and bias)
with zero rows to a multiple of 8 once, computing the aligned product and returning a view of the
first ``out_features`` columns gives the same values with a fast kernel.  The output is that
view (row stride the padded width), not contiguous.  GPU only (on the CPU alignment costs
nothing); inference only (later changes of the weight are not seen: the padded copy is made at
apply time); the padded copy costs the weight's memory once more.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from .patching import _swap_class

ALIGN = 8  # elements: 16 bytes of bf16/fp16
MIN_OUT_FEATURES = 1024  # below this the misaligned GEMM is small enough not to matter
DTYPES = (torch.bfloat16, torch.float16)


def padded_width(n: int, align: int = ALIGN) -> int:
    return -(-n // align) * align


def needs_alignment(module: nn.Module, on_gpu: bool) -> bool:
    return (on_gpu and type(module).forward is nn.Linear.forward and module.weight.dtype in DTYPES
            and module.out_features % ALIGN != 0 and module.out_features >= MIN_OUT_FEATURES)


def _aligned_members(n: int) -> dict[str, Any]:
    def forward(self, x):
        if x.dtype == self._autokernel_padded_weight.dtype:
            return F.linear(x, self._autokernel_padded_weight, self._autokernel_padded_bias)[..., :n]
        return nn.Linear.forward(self, x)

    return {"forward": forward}


def align_linears(model: nn.Module, done: set[int], replaced: list[tuple[str, str]], on_gpu: bool) -> None:
    """Pad every misaligned half-precision linear of ``model`` not already replaced (``done``)."""
    for name, m in model.named_modules():
        if id(m) in done or not needs_alignment(m, on_gpu):
            continue
        n, k = m.weight.shape
        weight = m.weight.detach()
        padded = weight.new_zeros((padded_width(n), k))
        padded[:n].copy_(weight)
        m.register_buffer("_autokernel_padded_weight", padded, persistent=False)
        bias = None
        if m.bias is not None:
            bias = m.bias.detach().new_zeros(padded_width(n))
            bias[:n].copy_(m.bias.detach())
        m.register_buffer("_autokernel_padded_bias", bias, persistent=False)
        _swap_class(m, ("aligned-linear", n), _aligned_members(n))
        done.add(id(m))
        replaced.append((name, "aligned-linear"))
