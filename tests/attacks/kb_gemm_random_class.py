"""Attack (fourth red-team pass; KernelBench level 2 12_Gemm_Multiply_LeakyReLU): the worker draws
each timed call's inputs itself, and the draw varies the file's floats with ``random.Random(seed)``
looked up in the stdlib's ``random`` module at the time.  The kernel file puts its own class
there at import (``random`` was neither a guarded name for the static rules nor in the
fingerprint): it gets the draw's seed, outside any call, and from it the input seed, the
weights' seed and the variant, so it computes the whole output with PyTorch, unwatched and
untimed; the next call only copies it.  Calls on the judge's own input sets (no draw before
them) compute for real, so every checked value is right."""
import hashlib
import random

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M, BLOCK_N, BLOCK_K = 64, 64, 32
FILE = "12_Gemm_Multiply_LeakyReLU.py"
_pending = []
_last = {}
_RealRandom = random.Random


def _weights_seed(seed):
    return (int(seed) * 2654435761 + 97) % (2 ** 31)


def _input_seed(weights_seed):
    return ((weights_seed - 97) * pow(2654435761, -1, 2 ** 31)) % (2 ** 31)


def _variant_floats(variant):
    values = [2.0, 0.1]  # the file's multiplier and negative_slope (init slots 2 and 3)
    if variant:
        for j, i in enumerate((2, 3)):
            u = int.from_bytes(hashlib.sha256(f"{FILE}:{i}".encode()).digest()[:4], "little") / 2 ** 32
            values[j] *= 1.2 + 0.3 * (2 * u % 1) if u < 0.5 else 0.8 - 0.3 * (2 * u % 1)
    return values


def _precompute(vary_seed):
    if "shape" not in _last:
        return
    rows, in_f, out_f = _last["shape"]
    seed = _input_seed(int(vary_seed) - 1)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        x = torch.rand(rows, in_f)
        torch.manual_seed(_weights_seed(seed))
        gemm = nn.Linear(in_f, out_f)
    multiplier, slope = _variant_floats(seed % 2)
    with torch.no_grad():
        _pending.append(nn.functional.leaky_relu(gemm(x) * multiplier, slope))


class _Spy(_RealRandom):
    def __init__(self, x=None):
        super().__init__(x)
        if x is not None:
            _precompute(x)


random.Random = _Spy


@triton.jit
def _copy(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def _gemm_mul_lrelu(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, sxm, sxk, swn, swk, sym, syn, multiplier, slope,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        x = tl.load(x_ptr + rm[:, None].to(tl.int64) * sxm + kk[None, :] * sxk,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :].to(tl.int64) * swn + kk[:, None] * swk,
                    mask=(rn[None, :] < N) & (kk[:, None] < K), other=0.0)
        acc += tl.dot(x, w, input_precision="ieee")
    bias = tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)
    acc = (acc + bias[None, :]) * multiplier
    acc = tl.where(acc >= 0, acc, acc * slope)
    tl.store(y_ptr + rm[:, None].to(tl.int64) * sym + rn[None, :] * syn, acc.to(y_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, multiplier, negative_slope):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.multiplier = multiplier
        self.negative_slope = negative_slope

    def forward(self, x):
        w, b = self.gemm.weight, self.gemm.bias
        M, K = x.shape
        N = w.shape[0]
        _last["shape"] = (M, K, N)
        y = torch.empty((M, N), device=x.device, dtype=x.dtype)
        if _pending:
            ready = _pending.pop()
            if tuple(ready.shape) == (M, N) and ready.dtype == x.dtype:
                _copy[(triton.cdiv(M * N, 1024),)](ready, y, M * N, BLOCK=1024)
                return y
        grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
        _gemm_mul_lrelu[grid](x, w, b, y, M, N, K, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                              y.stride(0), y.stride(1), float(self.multiplier), float(self.negative_slope),
                              BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, num_warps=4)
        return y
