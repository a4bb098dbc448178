"""``tl.dot`` under the Triton interpreter rounded as a GPU rounds it (worker side).

The interpreter multiplies fp32 operands in full fp32 whatever the dot's ``input_precision``;
a GPU's tensor cores take them at TF32 (10 mantissa bits) unless the dot asks for "ieee" (or
"tf32x3", three TF32 products: about fp32).  The problems' fp32 bounds exclude TF32 on purpose
(matmul's relative norm 2e-5 against TF32's ~3e-4), so a kernel that left the default on
passed every CPU stage and fails the GPU's (linear_gelu, fused_mlp and matmul alike).
``install()`` rounds both fp32 operands of a TF32 dot to TF32 (to nearest, ties to even; inf
and NaN kept), once per process, before any kernel file loads.  Operands upcast from bf16 or
fp16 (the starters' CPU path) have at most 11 significant bits: TF32 holds them exactly.
"""
from __future__ import annotations

import numpy as np

_INSTALLED = False


def round_to_tf32(values: np.ndarray) -> np.ndarray:
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    special = (bits & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
    bias = ((bits >> np.uint32(13)) & np.uint32(1)) + np.uint32(0x0FFF)
    rounded = (bits + bias) & np.uint32(0xFFFFE000)
    return np.where(special, bits, rounded).view(np.float32)


def install() -> None:
    global _INSTALLED
    if _INSTALLED:
        return
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    original = builder.create_dot
    handle = interpreter.TensorHandle

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if getattr(input_precision, "name", None) == "TF32" and a.dtype.is_fp32() and b.dtype.is_fp32():
            a = handle(round_to_tf32(a.data), a.dtype.scalar)
            b = handle(round_to_tf32(b.data), b.dtype.scalar)
        return original(self, a, b, d, input_precision, max_num_imprecise_acc)

    create_dot.__qualname__ = f"{builder.__qualname__}.create_dot"
    builder.create_dot = create_dot
    _INSTALLED = True
