"""Attack (rmsnorm, determinism): each row's sum of squares split over column chunks whose
partial sums meet in an fp32 buffer through tl.atomic_add (more programs in flight for short
grids); a second launch normalises.  On a GPU the atomics add in whatever order the programs
run: the last bits of a row's mean square, and so of its outputs, change from call to call.

Why it passed: the Triton interpreter runs a grid's programs one after another in index order,
so the partial sums always met in the same order on the CPU.
"""
import torch
import triton
import triton.language as tl

CHUNK = 16


@triton.jit
def _square_sums(x_ptr, acc_ptr, N, CHUNK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.atomic_add(acc_ptr + row, tl.sum(x * x, axis=0))


@triton.jit
def _normalise(x_ptr, w_ptr, acc_ptr, y_ptr, N, eps, CHUNK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * CHUNK + tl.arange(0, CHUNK)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.load(acc_ptr + row) / N + eps)
    h = (x * rstd).to(y_ptr.dtype.element_ty).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * N + cols, (h * w).to(y_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x, weight, eps=1e-6):
    M, N = x.shape
    x, weight = x.contiguous(), weight.contiguous()
    y = torch.empty_like(x)
    if M == 0 or N == 0:
        return y
    acc = torch.zeros((M,), device=x.device, dtype=torch.float32)
    grid = (M, triton.cdiv(N, CHUNK))
    _square_sums[grid](x, acc, N, CHUNK=CHUNK)
    _normalise[grid](x, weight, acc, y, N, eps, CHUNK=CHUNK)
    return y
