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
Recognised by ``class Model(nn.Module)`` plus ``get_inputs()`` and ``get_init_inputs()``.  The
kernel file then defines ``ModelNew`` taking the same constructor arguments.

* Inputs come from ``get_inputs()``: the harness seed seeds torch first, tensors are moved to
  the device and floating tensors cast to the dtype.  KernelBench fixes its sizes inside the
  file, so the problem has a single placeholder dimension ``"default"`` and a single shape
  ``{"default": 0}``; held-out shapes are that same shape with fresh random inputs.
* ``Model`` and ``ModelNew`` are both built under the same torch seed (``MODEL_SEED``) from
  ``get_init_inputs()``; when ``ModelNew`` has parameters and buffers with the same names and
  shapes, the reference's ``state_dict`` is copied into it, so both compute with the same
  weights.  The reference model is cast to the dtype of the (upcast) inputs it is called with.
* ``flops`` is unknown (0); ``bytes`` is the size of the inputs plus the outputs.
* The PyTorch ops the reference model runs are recorded once (on fake tensors) and become
  ``forbidden_ops`` (block-list mode), widened to their families (a matmul may reach the
  dispatcher as ``mm``, ``addmm`` or ``bmm`` depending on the device), so a ``ModelNew`` that
  keeps calling them is caught.  Other ops (allocation, views, small glue) stay allowed.
* Dtypes: fp32 only by default (KernelBench's own setting; ``--dtype`` may ask for others),
  with KernelBench's own fp32 tolerance (atol = rtol = 1e-2) and a relative-norm bound.
"""
from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from .base import (DEFAULT_TOLERANCES, Problem, Shape, Tolerance, element_size, parse_dtype,
                   parse_shape)
from .registry import ProblemError

MODEL_SEED = 0
KERNELBENCH_DIMS = ("default",)
KERNELBENCH_SHAPE: Shape = {"default": 0}
KERNELBENCH_FP32_TOLERANCE = Tolerance(atol=1e-2, rtol=1e-2, max_rel_norm=5e-3)

# Ops a KernelBench ModelNew may always call: allocation, copies, views, metadata.
_ALWAYS_ALLOWED = frozenset({
    "aten.empty", "aten.empty_like", "aten.empty_strided", "aten.new_empty", "aten.new_empty_strided",
    "aten.zeros", "aten.zeros_like", "aten.ones", "aten.ones_like", "aten.full", "aten.full_like",
    "aten.new_zeros", "aten.new_ones", "aten.new_full", "aten.fill_", "aten.fill", "aten.zero_",
    "aten.copy_", "aten._to_copy", "aten.clone", "aten.contiguous", "aten.detach", "aten.alias",
    "aten.lift_fresh", "aten.lift_fresh_copy", "aten._unsafe_view", "aten.view", "aten.reshape",
    "aten._local_scalar_dense", "aten.sym_size", "aten.sym_stride", "aten.sym_numel",
    "aten.sym_storage_offset", "aten.arange", "aten.resize_", "aten.set_",
})

# Ops that are the same computation reached differently on different devices/shapes.
_FAMILIES: tuple[frozenset[str], ...] = (
    frozenset({"aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten.matmul", "aten.linear",
               "aten.mv", "aten.addmv", "aten.dot", "aten.addbmm", "aten._addmm_activation"}),
    frozenset({"aten._softmax", "aten.softmax", "aten._safe_softmax", "aten._log_softmax",
               "aten.log_softmax"}),
    frozenset({"aten.convolution", "aten._convolution", "aten.cudnn_convolution",
               "aten.conv2d", "aten.conv1d", "aten.conv3d", "aten.cudnn_convolution_transpose",
               "aten.convolution_overrideable", "aten._slow_conv2d_forward",
               "aten.mkldnn_convolution"}),
    # scaled_dot_product_attention decomposes to mul/bmm/_safe_softmax on CPU and fake tensors;
    # _safe_softmax is its marker there.
    frozenset({"aten.scaled_dot_product_attention", "aten._scaled_dot_product_attention_math",
               "aten._scaled_dot_product_flash_attention", "aten._scaled_dot_product_efficient_attention",
               "aten._scaled_dot_product_cudnn_attention", "aten._flash_attention_forward",
               "aten._efficient_attention_forward", "aten._safe_softmax"}),
    frozenset({"aten.native_layer_norm", "aten.layer_norm"}),
    frozenset({"aten.native_group_norm", "aten.group_norm"}),
    frozenset({"aten._native_batch_norm_legit_no_training", "aten._native_batch_norm_legit",
               "aten.native_batch_norm", "aten.batch_norm", "aten.cudnn_batch_norm",
               "aten._batch_norm_impl_index"}),
)


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


def _is_kernelbench(module: Any) -> bool:
    return isinstance(getattr(module, "Model", None), type) and callable(getattr(module, "get_inputs", None))


# --------------------------------------------------------- autokernel format
def _user_problem(module: Any, path: Path) -> Problem:
    missing = [n for n in ("DIMS", "SHAPES", "reference", "make_inputs") if not hasattr(module, n)]
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
    out = []
    for value in values:
        try:
            if isinstance(value, str):
                out.append(parse_shape(value, dims))
            elif isinstance(value, Mapping):
                if set(value) != set(dims):
                    raise ValueError(f"shape {dict(value)} must name exactly the dimensions {', '.join(dims)}")
                out.append({d: int(value[d]) for d in dims})
            else:
                values_ = [int(v) for v in value]
                if len(values_) != len(dims):
                    raise ValueError(f"shape {value!r} has {len(values_)} values; expected {len(dims)}")
                out.append(dict(zip(dims, values_)))
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
    if not callable(getattr(module, "get_init_inputs", None)):
        raise ProblemError(f"KernelBench file {path} lacks get_init_inputs()")
    model_cls = module.Model
    if not (isinstance(model_cls, type) and issubclass(model_cls, torch.nn.Module)):
        raise ProblemError(f"KernelBench file {path}: Model must be a torch.nn.Module subclass")
    try:
        init_args = list(module.get_init_inputs())
        inputs = module.get_inputs()
        if not isinstance(inputs, (list, tuple)):
            raise TypeError("get_inputs() must return a list of arguments")
    except Exception as exc:
        raise ProblemError(f"KernelBench file {path}: {_one_line(exc)}") from None
    try:
        trace = _trace_model(model_cls, init_args, module.get_inputs)
    except Exception as exc:
        raise ProblemError(f"KernelBench file {path}: running Model failed: {_one_line(exc)}") from None

    reference_models: dict[tuple, torch.nn.Module] = {}

    def reference(*args):
        device, dtype = _device_and_dtype(args)
        key = (str(device), dtype)
        if key not in reference_models:
            reference_models[key] = build_model(model_cls, init_args, device, dtype)
        with torch.no_grad():
            return reference_models[key](*args)

    def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
        forked = [torch.device(device).index or 0] if str(device).startswith("cuda") else []
        with torch.random.fork_rng(devices=forked):
            torch.manual_seed(int(seed))
            args = module.get_inputs()
        return tuple(_to_device(a, device, dtype) for a in args)

    def make_kernel(kernel_module: Any, shape: Shape, dtype: torch.dtype, device: str) -> Callable:
        new_cls = getattr(kernel_module, "ModelNew", None)
        if not isinstance(new_cls, type):
            raise AttributeError("kernel file defines no class ModelNew (KernelBench problems need ModelNew)")
        reference_model = build_model(model_cls, init_args, "cpu", torch.float32)
        new_model = build_model(new_cls, init_args, "cpu", torch.float32)
        copy_matching_state(reference_model, new_model)
        new_model = new_model.to(device=device, dtype=dtype) if _has_floating_state(new_model) else new_model.to(device)

        def run(*args):
            with torch.no_grad():
                return new_model(*args)

        return run

    def nbytes(shape: Shape, dtype: torch.dtype) -> float:
        return float(sum(n * (element_size(dtype) if floating else size) for n, floating, size in trace.tensors))

    forbidden = trace.forbidden_ops()
    tolerances = dict(DEFAULT_TOLERANCES)
    tolerances[torch.float32] = KERNELBENCH_FP32_TOLERANCE
    return Problem(
        kind=f"kernelbench:{path.stem}",
        description=f"KernelBench problem {path.name}: " + (", ".join(sorted(forbidden)) or "no compute ops"),
        signature="ModelNew(*get_init_inputs())(*get_inputs())",
        dims=KERNELBENCH_DIMS,
        reference=reference,
        make_inputs=make_inputs,
        flops=lambda shape: 0.0,
        bytes=nbytes,
        gpu_shapes=(dict(KERNELBENCH_SHAPE),),
        cpu_shapes=(dict(KERNELBENCH_SHAPE),),
        dtypes=(torch.float32,),
        tolerances=tolerances,
        make_kernel=make_kernel,
        forbidden_ops=forbidden,
        source=f"kernelbench:{path}",
        heldout=lambda shape, rng: dict(shape),
    )


def build_model(cls: type, init_args: list, device: Any, dtype: torch.dtype) -> torch.nn.Module:
    """Construct ``cls(*init_args)`` under ``MODEL_SEED``, frozen, in eval mode, on device/dtype."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(MODEL_SEED)
        model = cls(*init_args)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    if _has_floating_state(model):
        return model.to(device=device, dtype=dtype)
    return model.to(device)


def copy_matching_state(source: torch.nn.Module, target: torch.nn.Module) -> int:
    """Copy every parameter/buffer of ``source`` whose name and shape exist in ``target``.
    Returns how many were copied."""
    target_state = target.state_dict()
    matching = {k: v for k, v in source.state_dict().items()
                if k in target_state and target_state[k].shape == v.shape}
    if matching:
        target.load_state_dict(matching, strict=False)
    return len(matching)


def _has_floating_state(model: torch.nn.Module) -> bool:
    return any(t.is_floating_point() for t in list(model.parameters()) + list(model.buffers()))


def _device_and_dtype(args: tuple) -> tuple[torch.device, torch.dtype]:
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    device = tensors[0].device if tensors else torch.device("cpu")
    floating = [t.dtype for t in tensors if t.is_floating_point()]
    return device, (floating[0] if floating else torch.float32)


def _to_device(value: Any, device: str, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor):
        value = value.to(device)
        return value.to(dtype) if value.is_floating_point() else value
    return value


class _Trace:
    """What running the reference Model once revealed: ops called and tensor sizes."""

    def __init__(self) -> None:
        self.ops: set[str] = set()
        # (numel, is floating, element size) of each input and output tensor
        self.tensors: list[tuple[int, bool, int]] = []

    def forbidden_ops(self) -> frozenset[str]:
        recorded = {op for op in self.ops if op not in _ALWAYS_ALLOWED and op.startswith("aten.")}
        compute = set(recorded)
        for family in _FAMILIES:
            if recorded & family:
                compute |= family
        return frozenset(compute)


def _trace_model(model_cls: type, init_args: list, get_inputs: Callable) -> _Trace:
    """Run the reference once on fake tensors (falling back to real CPU tensors for models
    that fake tensors cannot run) to record its ops and its input/output sizes."""
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode(allow_non_fake_inputs=True):
            return _record(model_cls, init_args, get_inputs)
    except Exception:
        return _record(model_cls, init_args, get_inputs)


def _record(model_cls: type, init_args: list, get_inputs: Callable) -> _Trace:
    from torch.utils._python_dispatch import TorchDispatchMode

    trace = _Trace()

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not getattr(func, "is_view", False):
                trace.ops.add(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(MODEL_SEED)
        model = model_cls(*init_args).eval()
        args = [a.cpu() if isinstance(a, torch.Tensor) else a for a in get_inputs()]
    with torch.no_grad(), Recorder():
        outs = model(*args)
    for value in list(args) + _flatten(outs):
        if isinstance(value, torch.Tensor):
            trace.tensors.append((value.numel(), value.is_floating_point(), value.element_size()))
    return trace


def _flatten(value: Any) -> list:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flatten(v)]
    return [value]
