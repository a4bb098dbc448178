"""KernelBench problem files, judged as KernelBench means them and stricter where it matters.

A KernelBench file defines ``class Model(nn.Module)``, ``get_inputs()`` and
``get_init_inputs()``; a solution file defines ``ModelNew`` with the same constructor.
``load_kernelbench(path, options) -> Problem``.  What the judge does with it:

* **Sizes are the shape.**  The problem's dimensions are the file's module-level size
  constants (kb_sizes.py: ``batch_size``, ``dim``, ``M``...), and a shape gives them values: the
  file is executed again with those numbers, so ``get_inputs``/``get_init_inputs`` and the
  constants computed from them follow.  The target shape is the file's own sizes (or
  ``options.scale`` times them); held-out shapes move every size to an unseen odd value.  A
  file without size constants has one placeholder dimension ``default``.
* **Weights are drawn per case.**  Every input draw also builds ``Model`` under a seed of
  its own and hands its parameters to the kernel as arguments: a case's arguments are
  ``(*get_inputs(), *Model parameters, *size values)``.  The reference and ``ModelNew`` both
  run with those parameters (``torch.func.functional_call``), so a solution that ignores a
  weight or a bias, or that baked the values in, fails.  ``ModelNew``'s parameters are matched
  to ``Model``'s by name and shape, else by order and shape; when neither matches the
  solution cannot be judged (``ModelNew`` must keep ``Model``'s parameters and read them in
  ``forward``).  A parameter initialised to one value everywhere (LayerNorm's ones and
  zeros) gets seeded noise around it.  Buffers are copied once from a ``Model`` built under
  ``MODEL_SEED``.  Inputs are drawn on the judge's device (``get_inputs`` under
  ``torch.device``), seeded per case.
* **Training mode**, as KernelBench runs it (BatchNorm uses batch statistics), under
  ``torch.no_grad()``.  A reference that draws random numbers in training mode (dropout with
  p > 0) cannot be compared and is refused (``ProblemError``).
* **Scalars vary**: every Python float that ``get_inputs`` returns (a scale, a margin) is
  multiplied by a factor in [0.5, 1.5) drawn per case (``vary_floats``), sign kept, so a
  solution that bakes the file's value in fails.  Floats of ``get_init_inputs`` (eps, slopes,
  scaling factors) alternate per case between the file's values and a second set
  (``varied_init_inputs``), both ``Model`` and ``ModelNew`` built for each; the case carries
  which one as an int before the sizes.  Limit: the second set is fixed per file (so that
  ``ModelNew`` is built before the judged calls), so a solution that bakes in both values,
  read from the judge's source, passes; floats that change ``Model``'s parameter shapes are
  not varied.
* **Signed inputs**: the numerics stage adds one draw where every floating input that
  ``get_inputs`` makes non-negative (``torch.rand``) is mapped to [-1, 1), when the reference
  stays finite there, so that a copy cannot pass as ReLU.
* **Allow-list by default**: ``ModelNew`` may call no PyTorch compute op, only allocation,
  views and copies, like kernels of the built-in kinds.  ``options.allow_torch`` gives
  KernelBench's lenient rule: only the ops the reference runs (widened to their families,
  e.g. mm/addmm/bmm) are refused.
* **Tolerances** follow KernelBench: fp32 atol = rtol = 1e-4, fp16/bf16 1e-2, unless
  ``options.atol``/``options.rtol`` are given; the relative-norm bound is the larger of the two.
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import random
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from . import kb_sizes
from .base import Problem, Shape, Tolerance, element_size
from .registry import ProblemError

MODEL_SEED = 0
PLACEHOLDER: Shape = {"default": 0}
HELDOUT_TRIES = 6
MODULE_CACHE = 64

# Ops the reference may run that are no computation (never refused in --allow-torch mode).
_NOT_COMPUTE = frozenset({
    "aten.empty", "aten.empty_like", "aten.empty_strided", "aten.new_empty", "aten.new_empty_strided",
    "aten.zeros", "aten.zeros_like", "aten.ones", "aten.ones_like", "aten.full", "aten.full_like",
    "aten.new_zeros", "aten.new_ones", "aten.new_full", "aten.fill_", "aten.fill", "aten.zero_",
    "aten.copy_", "aten._to_copy", "aten.clone", "aten.contiguous", "aten.detach", "aten.alias",
    "aten.lift_fresh", "aten.lift_fresh_copy", "aten._unsafe_view", "aten.view", "aten.reshape",
    "aten._local_scalar_dense", "aten.sym_size", "aten.sym_stride", "aten.sym_numel",
    "aten.sym_storage_offset", "aten.arange", "aten.resize_", "aten.set_",
})

# The same computation reached differently on different devices/shapes.
_FAMILIES: tuple[frozenset[str], ...] = (
    frozenset({"aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten.matmul", "aten.linear",
               "aten.mv", "aten.addmv", "aten.dot", "aten.addbmm", "aten._addmm_activation"}),
    frozenset({"aten._softmax", "aten.softmax", "aten._safe_softmax", "aten._log_softmax",
               "aten.log_softmax"}),
    frozenset({"aten.convolution", "aten._convolution", "aten.cudnn_convolution",
               "aten.conv2d", "aten.conv1d", "aten.conv3d", "aten.cudnn_convolution_transpose",
               "aten.convolution_overrideable", "aten._slow_conv2d_forward",
               "aten.mkldnn_convolution"}),
    frozenset({"aten.scaled_dot_product_attention", "aten._scaled_dot_product_attention_math",
               "aten._scaled_dot_product_flash_attention", "aten._scaled_dot_product_efficient_attention",
               "aten._scaled_dot_product_cudnn_attention", "aten._flash_attention_forward",
               "aten._efficient_attention_forward", "aten._safe_softmax"}),
    frozenset({"aten.native_layer_norm", "aten.layer_norm"}),
    frozenset({"aten.native_group_norm", "aten.group_norm"}),
    frozenset({"aten._native_batch_norm_legit_no_training", "aten._native_batch_norm_legit",
               "aten.native_batch_norm", "aten.batch_norm", "aten.cudnn_batch_norm",
               "aten._batch_norm_impl_index", "aten._native_batch_norm_legit_functional"}),
)
_RANDOM_OPS = frozenset({"aten.native_dropout", "aten.bernoulli", "aten.bernoulli_", "aten.rand", "aten.rand_like",
                         "aten.randn", "aten.randn_like", "aten.uniform_", "aten.normal_", "aten.randint",
                         "aten.randperm", "aten.multinomial", "aten.exponential_"})


@dataclass(frozen=True)
class KernelBenchOptions:
    """How to judge a KernelBench file (the CLI's --scale, --allow-torch, --atol, --rtol)."""

    scale: float | None = None
    allow_torch: bool = False
    atol: float | None = None
    rtol: float | None = None


class SizeError(ProblemError):
    """The file's sizes cannot be moved safely (the arena skips the problem with this reason)."""


def tolerances(options: KernelBenchOptions) -> dict[torch.dtype, Tolerance]:
    def tol(default: float) -> Tolerance:
        atol = default if options.atol is None else float(options.atol)
        rtol = default if options.rtol is None else float(options.rtol)
        return Tolerance(atol, rtol, max(atol, rtol))

    return {torch.float32: tol(1e-4), torch.float16: tol(1e-2), torch.bfloat16: tol(1e-2)}


@dataclass
class Probe:
    """What running the reference once at some sizes on fake tensors revealed."""

    ops: frozenset[str]
    tensor_bytes: list[tuple[int, bool, int]]  # (numel, floating, element size) of inputs, params, outputs
    n_inputs: int
    note: str = ""


class KernelBenchFile:
    """One KernelBench file: its text, its size constants and the module at any sizes."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.source = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ProblemError(f"cannot read {path}: {exc}") from None
        base = self._exec(self.source)
        self.constants = kb_sizes.int_constants(self.source, vars(base))
        self.size_names = kb_sizes.size_names(self.constants)
        self._modules: dict[tuple, Any] = {(): base}
        self._probes: dict[tuple, Probe] = {}

    # ------------------------------------------------------------ modules
    def file_shape(self) -> Shape:
        return {n: self.constants[n] for n in self.size_names} if self.size_names else dict(PLACEHOLDER)

    def values(self, shape: Shape) -> dict[str, int]:
        return {**self.constants, **{n: int(shape[n]) for n in self.size_names}}

    def module(self, shape: Shape | None = None) -> Any:
        key = tuple(int(shape[n]) for n in self.size_names) if shape and self.size_names else ()
        if key and key == tuple(self.constants[n] for n in self.size_names):
            key = ()
        if key not in self._modules:
            if len(self._modules) > MODULE_CACHE:  # held-out draws add one each: keep the file's own
                self._modules = {(): self._modules[()]}
                self._probes.clear()
            self._modules[key] = self._exec(kb_sizes.with_constants(self.source, self.values(shape)))
        return self._modules[key]

    def _exec(self, text: str) -> Any:
        digest = hashlib.sha1(text.encode()).hexdigest()[:10]
        module = types.ModuleType(f"_autokernel_kernelbench_{self.path.stem}_{digest}")
        module.__file__ = str(self.path)
        sys.modules[module.__name__] = module  # torch.compile (the baseline) looks globals up by module name
        folder = str(self.path.resolve().parent)
        sys.path.insert(0, folder)
        try:
            exec(compile(text, str(self.path), "exec"), module.__dict__)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise ProblemError(f"cannot import KernelBench file {self.path}: {_one_line(exc)}") from None
        finally:
            with contextlib.suppress(ValueError):
                sys.path.remove(folder)
        for name in ("Model", "get_inputs", "get_init_inputs"):
            if not hasattr(module, name):
                raise ProblemError(f"KernelBench file {self.path} lacks {name}")
        return module

    # ------------------------------------------------------------ probing
    def probe(self, shape: Shape) -> Probe:
        """Run the reference at ``shape`` on fake tensors (no memory, no compute); raises
        ``SizeError`` when it fails there."""
        key = tuple(sorted(shape.items()))
        if key not in self._probes:
            self._probes[key] = _probe(self.module(shape), self.path)
        return self._probes[key]

    def fits(self, shape: Shape) -> str | None:
        """None when the reference runs at ``shape``, else why not."""
        try:
            self.probe(shape)
        except SizeError as exc:
            return str(exc)
        return None

    def choose(self, candidate: dict[str, int]) -> tuple[Shape | None, str | None]:
        """``candidate`` sizes, or the same with the file's divisibility kept, whichever the
        reference runs at first; (None, why) when neither."""
        first = {n: candidate[n] for n in self.size_names}
        why = self.fits(first)
        if why is None:
            return first, None
        kept = kb_sizes.keep_divisibility(self.constants, {**self.constants, **candidate}, self.size_names)
        second = {n: kept[n] for n in self.size_names}
        if second != first and self.fits(second) is None:
            return second, None
        return None, why

    def scaled_shape(self, factor: float) -> Shape:
        if not self.size_names:
            return dict(PLACEHOLDER)
        first_why = None
        for floor in kb_sizes.FLOORS:  # a pooling or a large kernel needs sizes above the smallest floor
            target = kb_sizes.scaled(self.constants, self.size_names, factor, floor)
            chosen, why = self.choose(target)
            if chosen is not None:
                return chosen
            first_why = first_why or (kb_sizes.describe(self.constants, target), why)
        raise SizeError(f"cannot scale {self.path.name} by {factor:g} ({first_why[0]}): {first_why[1]}")

    def heldout_shape(self, shape: Shape, rng: random.Random) -> Shape:
        """Unseen sizes near ``shape`` at which the reference runs; ``shape`` itself when the
        file has no sizes or none of the tries runs."""
        if not self.size_names:
            return dict(shape)
        current = self.values(shape)
        for _ in range(HELDOUT_TRIES):
            chosen, _why = self.choose(kb_sizes.moved(current, self.size_names, rng))
            if chosen is not None and chosen != dict(shape):
                return chosen
        return dict(shape)

    def describe(self, shape: Shape) -> str:
        return kb_sizes.describe(self.constants, self.values(shape))


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if len(text) > 300:
        text = text[:300] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


REAL_PROBE_LIMIT = 1 << 26  # elements of input: above it a fake-tensor limitation is not re-run for real


def _probe(module: Any, path: Path) -> Probe:
    """Run the reference once on fake tensors; where fake tensors cannot follow it (an op with a
    data-dependent output) run it for real on the CPU when the inputs are small enough, else
    trust the sizes (the judge's first case will tell)."""
    from torch._subclasses import fake_tensor

    quiet = logging.getLogger("torch._subclasses.fake_tensor")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # a failing size is an answer here, not an error to log
    try:
        with fake_tensor.FakeTensorMode(allow_non_fake_inputs=True):
            return _run_probe(module, path)
    except (fake_tensor.DataDependentOutputException, fake_tensor.DynamicOutputShapeException,
            fake_tensor.UnsupportedOperatorException) as exc:
        limitation = exc
    except ProblemError:
        raise
    except Exception as exc:
        raise SizeError(f"the reference fails: {_one_line(exc)}") from None
    finally:
        quiet.setLevel(level)
    with fake_tensor.FakeTensorMode(allow_non_fake_inputs=True), torch.random.fork_rng(devices=[]):
        numel = sum(t.numel() for t in module.get_inputs() if isinstance(t, torch.Tensor))
    if numel > REAL_PROBE_LIMIT:
        return Probe(frozenset(), [], _count_inputs(module), note=f"not probed: {_one_line(limitation)}")
    try:
        return _run_probe(module, path)
    except ProblemError:
        raise
    except Exception as exc:
        raise SizeError(f"the reference fails: {_one_line(exc)}") from None


def _count_inputs(module: Any) -> int:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True), torch.random.fork_rng(devices=[]):
        return len(list(module.get_inputs()))


def _run_probe(module: Any, path: Path) -> Probe:
    from torch.utils._python_dispatch import TorchDispatchMode

    ops: set[str] = set()

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            if not getattr(func, "is_view", False):
                ops.add(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(MODEL_SEED)
        model = module.Model(*module.get_init_inputs())
        inputs = list(module.get_inputs())
        params = [p.detach() for p in model.parameters()]
        with torch.no_grad(), Recorder():
            outs = model(*inputs)
    random_ops = sorted(ops & _RANDOM_OPS)
    if random_ops:
        raise ProblemError(f"KernelBench file {path.name}: the reference draws random numbers in training mode "
                           f"({', '.join(random_ops)}, e.g. dropout with p > 0): its outputs cannot be compared")
    sizes = [(t.numel(), t.is_floating_point(), t.element_size())
             for t in inputs + params + _flatten(outs) if isinstance(t, torch.Tensor)]
    return Probe(frozenset(ops), sizes, len(inputs))


def _flatten(value: Any) -> list:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flatten(v)]
    return [value]


def forbidden_ops(recorded: frozenset[str]) -> frozenset[str]:
    """The reference's compute ops widened to their families (``--allow-torch`` mode)."""
    compute = {op for op in recorded if op not in _NOT_COMPUTE and op.startswith("aten.")}
    for family in _FAMILIES:
        if compute & family:
            compute |= family
    return frozenset(compute)


def _to(value: Any, device: str, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor):
        value = value.to(device)
        return value.to(dtype) if value.is_floating_point() else value
    return value


def build_model(cls: type, init_args: list, device: Any, dtype: torch.dtype, seed: int = MODEL_SEED) -> torch.nn.Module:
    """``cls(*init_args)`` built under ``seed`` in training mode (as KernelBench runs it),
    frozen, on device/dtype."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = cls(*init_args)
    for p in model.parameters():
        p.requires_grad_(False)
    if any(t.is_floating_point() for t in list(model.parameters()) + list(model.buffers())):
        return model.to(device=device, dtype=dtype)
    return model.to(device)


def match_parameters(reference: torch.nn.Module, candidate: torch.nn.Module) -> list[str]:
    """For each parameter of ``reference`` (in order), the name of the ``candidate``
    parameter that receives it: same name and shape, else same position and shape.
    Raises AttributeError when neither matches."""
    ref = [(n, tuple(p.shape)) for n, p in reference.named_parameters()]
    new = [(n, tuple(p.shape)) for n, p in candidate.named_parameters()]
    by_name = dict(new)
    if all(by_name.get(n) == s for n, s in ref):
        return [n for n, _ in ref]
    if len(new) >= len(ref) and all(ns == rs for (_, ns), (_, rs) in zip(new, ref)):
        return [n for n, _ in new[:len(ref)]]
    raise AttributeError("ModelNew's parameters " + _names(new) + " do not match Model's " + _names(ref)
                         + " by name or by order and shape: the judge cannot give it the weights it draws for "
                         "each case (keep Model's parameters and read them in forward)")


def _names(params: list[tuple[str, tuple]]) -> str:
    return "(" + ", ".join(f"{n}{list(s)}" for n, s in params[:6]) + (", ..." if len(params) > 6 else "") + ")"


def copy_buffers(source: torch.nn.Module, target: torch.nn.Module) -> int:
    """Copy every buffer of ``source`` whose name and shape exist in ``target``."""
    target_state = dict(target.named_buffers())
    n = 0
    with torch.no_grad():
        for name, value in source.named_buffers():
            if name in target_state and target_state[name].shape == value.shape:
                target_state[name].copy_(value.to(target_state[name].dtype))
                n += 1
    return n


def load_kernelbench(path: str | Path, options: KernelBenchOptions | None = None) -> Problem:
    """A Problem judging ``ModelNew`` solutions of the KernelBench file at ``path``."""
    options = options or KernelBenchOptions()
    path = Path(path)
    if not path.is_file():
        raise ProblemError(f"problem file not found: {path}")
    kb = KernelBenchFile(path)
    target = kb.scaled_shape(options.scale) if options.scale else kb.file_shape()
    probe = kb.probe(target)  # raises when the reference cannot run at its own sizes
    n_sizes = len(kb.size_names)
    n_inputs = probe.n_inputs
    slots = init_float_slots(kb.module(target))
    n_variant = 1 if slots else 0  # the case's init-float variant travels as one int before the sizes
    models: dict[tuple, torch.nn.Module] = {}

    def split(args: tuple) -> tuple[Shape, tuple, tuple, int]:
        sizes = dict(zip(kb.size_names, args[len(args) - n_sizes:])) if n_sizes else dict(PLACEHOLDER)
        rest = args[:len(args) - n_sizes]
        variant = int(rest[-1]) if n_variant else 0
        rest = rest[:len(rest) - n_variant]
        return sizes, tuple(rest[:n_inputs]), tuple(rest[n_inputs:]), variant

    def init_args(module: Any, variant: int) -> list:
        return varied_init_inputs(list(module.get_init_inputs()), slots, path.name, variant)

    def reference(*args):
        sizes, inputs, params, variant = split(args)
        device, dtype = _device_and_dtype(inputs + params)
        key = (tuple(sizes.items()), str(device), dtype, variant)
        if key not in models:
            if len(models) > 8:
                models.clear()
            module = kb.module(sizes)
            models[key] = build_model(module.Model, init_args(module, variant), device, dtype)
        model = models[key]
        names = [n for n, _ in model.named_parameters()]
        with torch.no_grad():
            return torch.func.functional_call(model, dict(zip(names, params)), inputs, strict=False)

    def make_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> tuple:
        module = kb.module(shape)
        forked = [torch.device(device).index or 0] if str(device).startswith("cuda") else []
        with torch.random.fork_rng(devices=forked), torch.device(device):
            torch.manual_seed(int(seed))
            inputs = list(module.get_inputs())  # drawn on the device: full KernelBench sizes are large
        inputs = vary_floats(inputs, _init_seed(seed) + 1)
        variant = int(seed) % 2 if n_variant else 0
        drawn = build_model(module.Model, init_args(module, variant), "cpu", torch.float32,
                            seed=_init_seed(seed))
        params = [_unconstant(p.detach(), _init_seed(seed) + i) for i, p in enumerate(drawn.parameters())]
        sizes = [int(shape[n]) for n in kb.size_names]
        return (tuple(_to(a, device, dtype) for a in inputs + params) + ((variant,) if n_variant else ())
                + tuple(sizes))

    def adversarial_inputs(shape: Shape, dtype: torch.dtype, device: str, seed: int) -> list[tuple[str, tuple]]:
        args = make_inputs(shape, dtype, device, seed)
        signed = list(args)
        changed = False
        for i in range(n_inputs):
            x = args[i]
            if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() and bool((x >= 0).all()):
                lo, hi = x.min(), x.max()
                signed[i] = ((x - lo) / (hi - lo) * 2 - 1).to(x.dtype) if hi > lo else -x
                changed = True
        if not changed:
            return []
        with torch.no_grad():
            outs = [o for o in _flatten(reference(*signed)) if isinstance(o, torch.Tensor)]
            finite = all(bool(torch.isfinite(o).all()) for o in outs if o.is_floating_point())
            held = {a.untyped_storage().data_ptr() for a in signed if isinstance(a, torch.Tensor)}
            for o in outs:  # the answer for these inputs must not linger in freed device memory the worker may map
                if o.untyped_storage().data_ptr() not in held:  # (never an input the reference returned as is)
                    o.zero_()
        if not finite:
            return []
        return [("signed", tuple(signed))]

    def make_kernel(kernel_module: Any, shape: Shape, dtype: torch.dtype, device: str) -> Callable:
        new_cls = getattr(kernel_module, "ModelNew", None)
        if not isinstance(new_cls, type):
            raise AttributeError("kernel file defines no class ModelNew (KernelBench problems need ModelNew)")
        module = kb.module(shape)
        built = []
        for variant in range(1 + n_variant):  # every variant built here, outside the judged calls
            args = init_args(module, variant)
            reference_model = build_model(module.Model, args, "cpu", torch.float32)
            new_model = build_model(new_cls, args, "cpu", torch.float32)
            names = match_parameters(reference_model, new_model)
            copy_buffers(reference_model, new_model)
            new_model = new_model.to(device=device, dtype=dtype) if any(
                t.is_floating_point() for t in list(new_model.parameters()) + list(new_model.buffers())) \
                else new_model.to(device)
            built.append((new_model, names))

        def run(*args):
            _sizes, inputs, params, variant = split(args)
            new_model, names = built[variant]
            with torch.no_grad():
                return torch.func.functional_call(new_model, dict(zip(names, params)), inputs, strict=False)

        return run

    probes: dict[tuple, float] = {}

    def nbytes(shape: Shape, dtype: torch.dtype) -> float:
        key = (tuple(shape.items()), dtype)
        if key not in probes:
            try:
                sizes = kb.probe(shape).tensor_bytes
            except SizeError:
                sizes = probe.tensor_bytes
            probes[key] = float(sum(n * (element_size(dtype) if floating else size) for n, floating, size in sizes))
        return probes[key]

    banned = forbidden_ops(probe.ops) if options.allow_torch else None
    scaled_note = f"; scaled by {options.scale:g}: {kb.describe(target)}" if options.scale else ""
    rule = "block-list of the reference's ops (--allow-torch)" if options.allow_torch else \
        "no PyTorch compute in ModelNew"
    problem = Problem(
        kind=f"kernelbench:{path.stem}",
        description=f"KernelBench problem {path.name} ({rule}){scaled_note}",
        signature="ModelNew(*get_init_inputs())(*get_inputs()), weights drawn per case",
        dims=kb.size_names or tuple(PLACEHOLDER),
        reference=reference,
        make_inputs=make_inputs,
        flops=lambda shape: 0.0,
        bytes=nbytes,
        gpu_shapes=(dict(target),),
        cpu_shapes=(dict(target),),
        dtypes=(torch.float32,),
        tolerances=tolerances(options),
        adversarial_inputs=adversarial_inputs,
        make_kernel=make_kernel,
        entry_point="ModelNew",
        forbidden_ops=banned,
        source=f"kernelbench:{path}",
        heldout=kb.heldout_shape,
    )
    problem.kernelbench = kb  # the arena reads sizes and descriptions from it
    return problem


def vary_floats(inputs: list, seed: int) -> list:
    """``inputs`` with every Python float (not bool, not int: ints may be sizes) multiplied by
    its own factor in [0.5, 1.5) drawn from ``seed``: its sign kept, zero left as zero.  The
    file's own value (``s = 3.14``) is one point, so a solution that bakes it in fails."""
    rng = random.Random(int(seed))
    out = []
    for value in inputs:
        factor = 1.0 + rng.uniform(-0.5, 0.5)
        out.append(value * factor if type(value) is float and math.isfinite(value) else value)
    return out


def init_float_slots(module: Any) -> tuple[int, ...]:
    """Positions of the Python floats (finite, non-zero) in ``get_init_inputs()`` that can vary
    without changing ``Model``'s parameters (a width multiplier such as MobileNet's ``alpha``
    cannot: it is left alone)."""
    args = list(module.get_init_inputs())
    slots = tuple(i for i, v in enumerate(args) if type(v) is float and math.isfinite(v) and v != 0.0)
    if not slots:
        return ()
    try:
        with torch.device("meta"):
            plain = [(n, tuple(p.shape)) for n, p in module.Model(*args).named_parameters()]
            varied = [(n, tuple(p.shape)) for n, p in
                      module.Model(*varied_init_inputs(args, slots, "", 1)).named_parameters()]
    except Exception:  # noqa: BLE001 - a file that breaks with other values keeps its own
        return ()
    return slots if plain == varied else ()


def varied_init_inputs(args: list, slots: tuple[int, ...], name: str, variant: int) -> list:
    """Variant 0 is the file's ``get_init_inputs()``; variant 1 multiplies the floats at
    ``slots`` by factors of 0.5-0.8 or 1.2-1.5 (sign kept), fixed per file and slot, so that
    ``ModelNew`` can be built for both before any call (building it per draw would put its
    construction inside timed calls)."""
    if variant == 0:
        return list(args)
    out = list(args)
    for i in slots:
        digest = hashlib.sha256(f"{name}:{i}".encode()).digest()
        u = int.from_bytes(digest[:4], "little") / 2 ** 32
        factor = 1.2 + 0.3 * (2 * u % 1) if u < 0.5 else 0.8 - 0.3 * (2 * u % 1)
        out[i] = out[i] * factor
    return out


def _unconstant(param: torch.Tensor, seed: int) -> torch.Tensor:
    """A parameter initialised to one value everywhere (LayerNorm's ones and zeros) gets
    seeded noise around it, so that a kernel that assumes the default value fails."""
    if not param.is_floating_point() or param.numel() == 0 or not bool((param == param.reshape(-1)[0]).all()):
        return param
    gen = torch.Generator().manual_seed(seed)
    return param + 0.1 * torch.randn(param.shape, generator=gen, dtype=param.dtype)


def _init_seed(seed: int) -> int:
    """The seed the case's weights are drawn with (differs from the inputs' seed)."""
    return (int(seed) * 2654435761 + 97) % (2 ** 31)


def _device_and_dtype(args: tuple) -> tuple[torch.device, torch.dtype]:
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    device = tensors[0].device if tensors else torch.device("cpu")
    floating = [t.dtype for t in tensors if t.is_floating_point()]
    return device, (floating[0] if floating else torch.float32)


def is_kernelbench_source(module: Any) -> bool:
    return isinstance(getattr(module, "Model", None), type) and callable(getattr(module, "get_inputs", None))
