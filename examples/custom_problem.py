"""An autokernel problem file: the tanh approximation of GELU, as GPT-2 uses it.

Run a kernel for it with::

    autokernel bench my_gelu_kernel.py --problem examples/custom_problem.py

The names below are the autokernel problem-file format (documented in
``autokernel.problems.custom``).  Only DIMS, SHAPES, reference and make_inputs are required.
"""
import torch

KIND = "gelu_tanh"
DESCRIPTION = "GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))"
SIGNATURE = "kernel_fn(x[M,N]) -> [M,N]"
DIMS = ("M", "N")
SHAPES = ["4096x3072", "8192x3072", "2048x8192"]   # GPT-2 style MLP activations
CPU_SHAPES = ["16x64", "8x256"]
EDGE_SHAPES = ["1x3072", "4097x3071"]
CPU_EDGE_SHAPES = ["1x1", "7x33"]
DTYPES = ("bf16", "fp16", "fp32")


def reference(x):
    return torch.nn.functional.gelu(x, approximate="tanh")


def make_inputs(shape, dtype, device, seed):
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    x = torch.randn(shape["M"], shape["N"], generator=gen, device=device, dtype=torch.float32)
    return (x.mul_(2.0).to(dtype),)


def adversarial_inputs(shape, dtype, device, seed):
    (x,) = make_inputs(shape, dtype, device, seed)
    # Far tails (where a naive tanh overflows) and values near zero.
    big = 60.0 if dtype != torch.float16 else 30.0
    return [("tails", ((x.float() * big).to(dtype),)), ("tiny", ((x.float() * 1e-4).to(dtype),))]


def flops(shape):
    return 10.0 * shape["M"] * shape["N"]   # a few mul/add and one tanh per element


def bytes(shape, dtype):
    return 2.0 * shape["M"] * shape["N"] * torch.empty((), dtype=dtype).element_size()

