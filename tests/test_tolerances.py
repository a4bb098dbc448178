"""Tolerances are calibrated, not guessed: for every kind and dtype, the eager PyTorch op
computed in the dtype passes the harness comparison against the high-precision reference, on
the CPU shapes and the adversarial cases; and a kernel more accurate than eager (the float64
reference rounded once to the dtype) passes too."""
from __future__ import annotations

import importlib.util

import pytest
import torch

from autokernel.harness import compare
from autokernel.harness.stages import upcast
from autokernel.problems import get_problem
from autokernel.problems.registry import BUILTIN_KINDS, list_kinds


def cases(problem, dtype):
    seed = 1234
    for shape in problem.cpu_shapes:
        seed += 1
        yield f"shape={shape}", problem.make_inputs(dict(shape), dtype, "cpu", seed)
    # the numerics stage runs at every target shape; consecutive seeds walk through the
    # non-tensor choices (eps, scale)
    for shape in problem.cpu_shapes:
        if problem.adversarial_inputs is None:
            break
        for name, args in problem.adversarial_inputs(dict(shape), dtype, "cpu", seed + 1):
            yield f"{name} shape={shape}", tuple(args)
        seed += 1
    for extra in range(1, 3):
        yield f"seed+{extra} shape={problem.cpu_shapes[0]}", problem.make_inputs(dict(problem.cpu_shapes[0]), dtype, "cpu", seed + extra)


def rounded(value, like):
    if isinstance(value, (tuple, list)):
        return tuple(rounded(v, l) for v, l in zip(value, like))
    return value.to(like.dtype)


@pytest.mark.parametrize("kind", list_kinds())
def test_eager_and_more_accurate_kernels_pass(kind):
    if importlib.util.find_spec(f"autokernel.problems.{BUILTIN_KINDS[kind]}") is None:
        pytest.skip(f"problem module autokernel.problems.{kind} does not exist yet")
    problem = get_problem(kind)
    for dtype in problem.dtypes:
        tol = problem.tolerance(dtype)
        for label, args in cases(problem, dtype):
            with torch.no_grad():
                ref = problem.reference(*upcast(args, torch.float64))
                # the inputs as drawn: in the dtype, except what models keep in fp32 whatever the
                # dtype (rotary_table's inv_freq)
                eager = problem.reference(*[a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args])
            meta = compare.output_meta(eager)
            v = compare.compare_outputs(eager, ref, meta, tol)
            assert v.ok, f"{kind} {dtype} {label}: eager fails its own tolerance: {v.message}"
            accurate = rounded(ref, compare.as_tuple(eager) if isinstance(ref, tuple) else eager)
            v = compare.compare_outputs(accurate, ref, meta, tol)
            assert v.ok, f"{kind} {dtype} {label}: the rounded fp64 result fails: {v.message}"
