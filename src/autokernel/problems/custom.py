"""Load a problem from a Python file: the autokernel format or a KernelBench problem file.

``load_problem_file(path) -> Problem``.  A file that cannot be imported or lacks a required
name raises ``ProblemError`` with a one-line message (a user mistake: the CLI exits 2).

Autokernel problem files
------------------------
A plain Python module with these module-level names (see ``examples/custom_problem.py``):

==================== ========= =================================================================
name                 required  meaning
==================== ========= =================================================================
``DIMS``             yes       dimension names, e.g. ``("M", "N")``
``SHAPES``           yes       target (GPU) shapes: dicts ``{"M": 4096, "N": 4096}`` or strings
                               ``"4096x4096"`` / ``"M=4096,N=4096"``
``reference``        yes       ``reference(*args)``: the PyTorch definition.  The harness calls it
                               on upcast copies of the inputs (fp64 on CPU, fp32 on GPU)
``make_inputs``      yes       ``make_inputs(shape, dtype, device, seed) -> tuple`` of the
                               positional arguments of ``kernel_fn``; random, never zeros, seeded
                               (the same seed gives the same values: checked at load)
``KIND`` / ``NAME``  no        the problem's name (default: the file's stem)
``DESCRIPTION``      no        one line
``SIGNATURE``        no        e.g. ``"kernel_fn(x[M,N]) -> [M,N]"``
``CPU_SHAPES``       no        small shapes for the CPU interpreter (default: ``SHAPES``)
``EDGE_SHAPES``      no        shapes for the edges stage on GPU; ``CPU_EDGE_SHAPES`` on CPU
                               (default: ``EDGE_SHAPES``)
``DTYPES``           no        names (``"bf16"``, ``"fp16"``, ``"fp32"``) or torch dtypes
                               (default: all three)
``flops``            no        ``flops(shape) -> float`` (default: 0, the roofline uses bytes)
``bytes``            no        ``bytes(shape, dtype) -> float``, fewest bytes (default: each input
                               read once and each output written once, measured on fake tensors)
``TOLERANCES``       no        ``{dtype: Tolerance | (atol, rtol, max_rel_norm) | dict}``
``FIXED_DIMS``       no        dimensions held-out and edge shapes must keep
``ALLOWED_OPS``      no        PyTorch ops a kernel may call besides allocation/views/copies
``adversarial_inputs`` no      ``adversarial_inputs(shape, dtype, device, seed) ->
                               [(case name, args)]`` for the numerics stage
==================== ========= =================================================================

Kernels for such a problem are ordinary kernel files defining ``kernel_fn``; the harness
runs in allow-list mode (only allocation, views, metadata and copies besides ``ALLOWED_OPS``).

KernelBench problem files
-------------------------
Recognised by ``class Model(nn.Module)`` plus ``get_inputs()``; loaded by
``kernelbench.load_kernelbench`` (see that module: sizes as the shape, weights drawn per case,
training mode, signed inputs, allow-list by default, KernelBench's tolerances).
"""
from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from .base import DEFAULT_TOLERANCES, FLAG_DIMS, Problem, Shape, Tolerance, check_dim, parse_dtype, parse_shape
from .registry import ProblemError

def load_problem_file(path: str | Path) -> Problem:
    """Load an autokernel or KernelBench problem file (see the module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise ProblemError(f"problem file not found: {path}")
    module = _import_file(path)
    if _is_kernelbench(module):
        return _kernelbench_problem(module, path)
    return _user_problem(module, path)


# ------------------------------------------------------------------- importing
def _import_file(path: Path) -> Any:
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
    name = f"_autokernel_problem_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ProblemError(f"cannot import problem file {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # a SyntaxError or a sys.exit in a user file is still their mistake
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise ProblemError(f"cannot import problem file {path}: {_one_line(exc)}") from None
    finally:
        try:
            sys.path.remove(folder)
        except ValueError:
            pass
    return module


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _check_seeded(make_inputs: Any, shape: dict, dtype: Any, path: Path) -> None:
    """``make_inputs`` must give the same inputs for the same seed: the judge's worker draws a
    timed call's inputs itself and the judge draws them again to check that call.  Checked on
    the CPU at one small shape; a ``make_inputs`` that cannot run there is left to the judge."""
    import torch

    from ..harness.compare import bitwise_equal

    try:
        first, second = (tuple(make_inputs(dict(shape), dtype, "cpu", 7)) for _ in range(2))
    except Exception:
        return
    for i, (a, b) in enumerate(zip(first, second)):
        same = bitwise_equal(a, b) if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) else a == b
        if not same:
            raise ProblemError(f"problem file {path}: make_inputs gave different values for the same seed (argument {i}); "
                               "draw with a torch.Generator seeded from `seed` (the judge draws a timed call's inputs "
                               "in its worker and again to check the call, so the same seed must give the same inputs)")


def _is_kernelbench(module: Any) -> bool:
    return isinstance(getattr(module, "Model", None), type) and callable(getattr(module, "get_inputs", None))


# --------------------------------------------------------- autokernel format
def _user_problem(module: Any, path: Path) -> Problem:
    missing = [n for n in ("DIMS", "SHAPES", "reference", "make_inputs") if not hasattr(module, n)]
    entry = next((n for n in ("ModelNew", "kernel_fn") if hasattr(module, n)), None)
    if missing and entry:  # `bench PROBLEM --problem KERNEL`: the two swapped
        raise ProblemError(f"problem file {path} defines {entry}: it is a kernel file, not a problem (give it as "
                           f"`bench`'s first argument or `optimize --kernel`, and the problem after --problem)")
    if missing:
        raise ProblemError(f"problem file {path} lacks {', '.join(missing)} (autokernel format needs DIMS, "
                           "SHAPES, reference, make_inputs; a KernelBench file needs Model, get_inputs, "
                           "get_init_inputs)")
    for name in ("reference", "make_inputs"):
        if not callable(getattr(module, name)):
            raise ProblemError(f"problem file {path}: {name} must be a function")
    dims = _dims(module.DIMS, path)
    gpu_shapes = _shapes(module.SHAPES, dims, path, "SHAPES")
    if not gpu_shapes:
        raise ProblemError(f"problem file {path}: SHAPES is empty")
    cpu_shapes = _shapes(getattr(module, "CPU_SHAPES", gpu_shapes), dims, path, "CPU_SHAPES")
    gpu_edges = _shapes(getattr(module, "EDGE_SHAPES", ()), dims, path, "EDGE_SHAPES")
    cpu_edges = _shapes(getattr(module, "CPU_EDGE_SHAPES", gpu_edges), dims, path, "CPU_EDGE_SHAPES")
    dtypes = _dtypes(getattr(module, "DTYPES", ("bf16", "fp16", "fp32")), path)
    name = str(getattr(module, "KIND", None) or getattr(module, "NAME", None) or path.stem)
    flops_fn = getattr(module, "flops", None)
    bytes_fn = getattr(module, "bytes", None)
    adversarial = getattr(module, "adversarial_inputs", None)
    fixed = tuple(str(d) for d in getattr(module, "FIXED_DIMS", ()))
    unknown = [d for d in fixed if d not in dims]
    if unknown:
        raise ProblemError(f"problem file {path}: FIXED_DIMS names unknown dimension(s) {', '.join(unknown)}")
    _check_seeded(module.make_inputs, cpu_shapes[0] if cpu_shapes else gpu_shapes[0], dtypes[0], path)
    return Problem(
        kind=name,
        description=str(getattr(module, "DESCRIPTION", f"user problem from {path.name}")),
        signature=str(getattr(module, "SIGNATURE", "kernel_fn(*make_inputs(shape, dtype, device, seed))")),
        dims=dims,
        reference=module.reference,
        make_inputs=module.make_inputs,
        flops=(lambda shape: float(flops_fn(shape))) if callable(flops_fn) else (lambda shape: 0.0),
        bytes=(lambda shape, dtype: float(bytes_fn(shape, dtype))) if callable(bytes_fn)
        else _measured_bytes(module.make_inputs, module.reference),
        gpu_shapes=gpu_shapes,
        cpu_shapes=cpu_shapes,
        dtypes=dtypes,
        tolerances=_tolerances(getattr(module, "TOLERANCES", None), path),
        gpu_edge_shapes=gpu_edges,
        cpu_edge_shapes=cpu_edges,
        fixed_dims=fixed,
        adversarial_inputs=adversarial if callable(adversarial) else None,
        allowed_ops=frozenset(str(o) for o in getattr(module, "ALLOWED_OPS", ())),
        source=str(path),
    )


def _dims(value: Any, path: Path) -> tuple[str, ...]:
    if isinstance(value, str) or not all(isinstance(d, str) for d in value) or not value:
        raise ProblemError(f"problem file {path}: DIMS must be a non-empty list of names, e.g. ('M', 'N')")
    return tuple(value)


def _shapes(values: Any, dims: tuple[str, ...], path: Path, what: str) -> tuple[Shape, ...]:
    if isinstance(values, (str, Mapping)):
        values = [values]
    flags = [d for d in dims if d in FLAG_DIMS]
    out = []
    for value in values:
        try:
            if isinstance(value, str):
                out.append(parse_shape(value, dims, flags))
                continue
            if isinstance(value, Mapping):
                if set(value) != set(dims):
                    raise ValueError(f"shape {dict(value)} must name exactly the dimensions {', '.join(dims)}")
                sizes = [int(value[d]) for d in dims]
            else:
                sizes = [int(v) for v in value]
                if len(sizes) != len(dims):
                    raise ValueError(f"shape {value!r} has {len(sizes)} values; expected {len(dims)}")
            out.append({d: check_dim(n, str(value), d, d in flags) for d, n in zip(dims, sizes)})
        except (ValueError, TypeError) as exc:
            raise ProblemError(f"problem file {path}: bad entry in {what}: {exc}") from None
    return tuple(out)


def _dtypes(values: Any, path: Path) -> tuple[torch.dtype, ...]:
    if isinstance(values, (str, torch.dtype)):
        values = [values]
    out = []
    for value in values:
        if isinstance(value, torch.dtype):
            out.append(value)
            continue
        try:
            out.append(parse_dtype(str(value)))
        except ValueError as exc:
            raise ProblemError(f"problem file {path}: {exc}") from None
    if not out:
        raise ProblemError(f"problem file {path}: DTYPES is empty")
    return tuple(out)


def _tolerances(value: Any, path: Path) -> dict[torch.dtype, Tolerance]:
    out = dict(DEFAULT_TOLERANCES)
    if value is None:
        return out
    if not isinstance(value, Mapping):
        raise ProblemError(f"problem file {path}: TOLERANCES must be a dict {{dtype: (atol, rtol, max_rel_norm)}}")
    for key, tol in value.items():
        try:
            dtype = key if isinstance(key, torch.dtype) else parse_dtype(str(key))
            if isinstance(tol, Tolerance):
                out[dtype] = tol
            elif isinstance(tol, Mapping):
                out[dtype] = Tolerance(float(tol["atol"]), float(tol["rtol"]), float(tol["max_rel_norm"]))
            else:
                atol, rtol, norm = tol
                out[dtype] = Tolerance(float(atol), float(rtol), float(norm))
        except (ValueError, TypeError, KeyError) as exc:
            raise ProblemError(f"problem file {path}: bad TOLERANCES entry for {key!r}: {_one_line(exc)}") from None
    return out


def _measured_bytes(make_inputs: Callable, reference: Callable) -> Callable[[Shape, torch.dtype], float]:
    """Bytes of the inputs plus the outputs, measured on fake tensors (no memory, no compute)."""
    cache: dict[tuple, float] = {}

    def count(shape: Shape, dtype: torch.dtype) -> float:
        key = (tuple(shape.items()), dtype)
        if key not in cache:
            from torch._subclasses.fake_tensor import FakeTensorMode

            with FakeTensorMode():
                args = make_inputs(dict(shape), dtype, "cpu", 0)
                outs = reference(*args)
            cache[key] = float(_tensor_bytes(args) + _tensor_bytes(outs))
        return cache[key]

    return count


def _tensor_bytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(v) for v in value)
    if isinstance(value, Mapping):
        return sum(_tensor_bytes(v) for v in value.values())
    return 0


# ------------------------------------------------------------ KernelBench format
def _kernelbench_problem(module: Any, path: Path) -> Problem:
    from .kernelbench import load_kernelbench

    if not callable(getattr(module, "get_init_inputs", None)):
        raise ProblemError(f"KernelBench file {path} lacks get_init_inputs()")
    model_cls = module.Model
    if not (isinstance(model_cls, type) and issubclass(model_cls, torch.nn.Module)):
        raise ProblemError(f"KernelBench file {path}: Model must be a torch.nn.Module subclass")
    return load_kernelbench(path)
