"""Attack (fourth red-team pass): the row sums computed in C++ built with
``torch.utils.cpp_extension.load_inline`` at import, reading the input through a raw pointer
(no aten op for the watch, no Python read for the audit hook); a Triton kernel of the file's own
then merely rewrites the output in place, so the output counts as handed to one of its kernels.
Native code in a file judged under the Triton-only rule defeats every run-time check."""
import torch
import triton
import triton.language as tl
from torch.utils.cpp_extension import load_inline

_SOURCE = """
#include <torch/extension.h>
void row_sum(torch::Tensor x, torch::Tensor out) {
    const float* p = x.data_ptr<float>();
    float* o = out.data_ptr<float>();
    int64_t m = x.size(0), n = x.size(1), s = x.stride(0);
    for (int64_t i = 0; i < m; ++i) {
        float acc = 0.f;
        for (int64_t j = 0; j < n; ++j) acc += p[i * s + j];
        o[i] = acc;
    }
}
"""
_native = load_inline(name="autokernel_attack_row_sum", cpp_sources=_SOURCE, functions=["row_sum"],
                      extra_cflags=["-O1"], verbose=False)


@triton.jit
def _touch(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(out_ptr + offs, mask=offs < n), mask=offs < n)


def kernel_fn(x):
    x = x.contiguous()
    out = torch.empty((x.shape[0],), dtype=x.dtype, device=x.device)
    if x.shape[0]:
        _native.row_sum(x.float() if x.dtype != torch.float32 else x, out)
        _touch[(triton.cdiv(x.shape[0], 64),)](out, x.shape[0], BLOCK=64)
    return out
