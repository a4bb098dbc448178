"""Compile a starter's Triton kernels for Hopper (sm90) on a machine without a GPU.

    python tests/sm90_compile.py KIND DTYPE DIM=VALUE ...     (TRITON_INTERPRET unset)
    python tests/sm90_compile.py --all                        (every built-in starter)
    python tests/sm90_compile.py --knobs                      (each knob value of every KNOB_SPACE)

The starter's ``kernel_fn`` runs on meta tensors of the problem's input shapes: its host code
allocates and computes grids as on a GPU (a meta tensor is not a CPU tensor, so no interpreter
path is taken), and each Triton launch is recorded instead of run.  Every recorded launch is
then compiled for sm90 with the arguments' types, the constexprs and the launch options it was
given.  This finds what the interpreter cannot: a kernel that Triton's GPU compiler rejects, or
whose tiles outgrow a Hopper block's shared memory.  Prints one JSON line per launch.
"""
from __future__ import annotations

import json
import sys

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction, mangle_type

SM90_SHARED_BYTES = 232448  # 227 KiB a block


def record_launches(module, call) -> list[tuple]:
    launches = []
    for obj in vars(module).values():
        if isinstance(obj, JITFunction):
            def run(*args, grid, warmup, _fn=obj, **kwargs):
                launches.append((_fn, args, kwargs))
            obj.run = run  # the instance's run, which JITFunction.__getitem__ calls
    call()
    return launches


def signature(fn: JITFunction, args: tuple, kwargs: dict) -> tuple[dict, dict, dict]:
    names = [p.name for p in fn.params]
    values = dict(zip(names, args))
    values.update({k: v for k, v in kwargs.items() if k in names})
    options = {k: v for k, v in kwargs.items() if k not in names}
    sig, constexprs = {}, {}
    for p in fn.params:
        value = values[p.name]
        if p.is_constexpr:
            sig[p.name], constexprs[p.name] = "constexpr", value
        else:
            sig[p.name] = mangle_type(value)  # as the JIT types it: *bf16, i32, tensordesc<...>
    return sig, constexprs, options


def inputs_on_meta(kind: str, shape: dict, dtype: torch.dtype) -> list:
    from autokernel.problems import get_problem

    if kind == "moe_experts":  # built on meta directly: the experts' weights are GBs at the GPU shapes
        T, K, E, D, I = (shape[d] for d in ("T", "K", "E", "D", "I"))
        return [torch.empty(T, D, dtype=dtype, device="meta"), torch.empty(T, K, dtype=torch.int64, device="meta"),
                torch.empty(T, K, dtype=torch.float32, device="meta"),
                torch.empty(E, 2 * I, D, dtype=dtype, device="meta"), torch.empty(E, D, I, dtype=dtype, device="meta")]
    args = get_problem(kind).make_inputs(shape, dtype, "cpu", 0)
    return [a.to("meta") if isinstance(a, torch.Tensor) else a for a in args]


def compile_starter(kind: str, dtype: torch.dtype, shape: dict, knobs: dict | None = None) -> list[dict]:
    """One row per launch of the starter at ``shape`` (``knobs`` set over its KNOBS): the kernel,
    its shared memory, whether it fits."""
    from autokernel.problems.registry import load_starter

    args = inputs_on_meta(kind, shape, dtype)
    module = load_starter(kind, knobs)
    rows = []
    for fn, fn_args, kwargs in record_launches(module, lambda: module.kernel_fn(*args)):
        sig, constexprs, options = signature(fn, fn_args, kwargs)
        compiled = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=constexprs),
                                  target=GPUTarget("cuda", 90, 32), options=options)
        rows.append({"kind": kind, "kernel": fn.__name__, "shared": compiled.metadata.shared,
                     "fits": compiled.metadata.shared <= SM90_SHARED_BYTES,
                     "constexprs": {k: v for k, v in constexprs.items() if isinstance(v, (int, bool))}})
    return rows


def main(argv: list[str]) -> int:
    """``KIND DTYPE DIM=VALUE...``; ``--all``: every built-in starter at its first GPU shape in its
    first dtype; ``--knobs``: the same with each knob of its KNOB_SPACE at each value in turn (a
    setting that fails is a row with its error)."""
    from autokernel.problems import get_problem, parse_dtype
    from autokernel.problems.registry import list_kinds

    from autokernel.problems.registry import load_starter

    shard, shards = 0, 1
    if len(argv) >= 3 and argv[1] == "--shard":  # --all --shard I/N: every N-th job from the I-th (processes side by side)
        shard, shards = (int(v) for v in argv[2].split("/"))
        argv = argv[:1]
    if argv[:1] in (["--all"], ["--knobs"]):
        jobs = [(kind, get_problem(kind).dtypes[0], dict(get_problem(kind).gpu_shapes[0]), None) for kind in list_kinds()]
        if argv[0] == "--knobs":  # each knob of KNOB_SPACE at each of its values, the others at their defaults
            jobs = [(kind, dtype, shape, {knob: value}) for kind, dtype, shape, _ in jobs
                    for knob, values in getattr(load_starter(kind), "KNOB_SPACE", {}).items() for value in values]
    else:
        jobs = [(argv[0], parse_dtype(argv[1]), {k: int(v) for k, v in (a.split("=") for a in argv[2:])}, None)]
    for kind, dtype, shape, knobs in jobs[shard::shards]:
        try:
            rows = compile_starter(kind, dtype, shape, knobs)
        except Exception as exc:  # noqa: BLE001 - reported as this kind's row
            rows = [{"kind": kind, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}]
        for row in rows:
            print(json.dumps({**row, "knobs": knobs} if knobs else row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
