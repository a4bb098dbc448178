"""Put the winning kernels of a run back into a model (``autokernel.apply``).

For each problem of ``<workdir>/plan.json`` whose best kernel exists at
``<workdir>/problems/<name>/kernel.py``, the kernel's ``kernel_fn`` is registered as a PyTorch
custom op ``autokernel::<name>_<hash>`` (``torch.library.custom_op`` with a fake
implementation, so ``torch.compile`` treats it as one opaque call) and the places of the model
that compute that kind are switched to it:

* ``rmsnorm``   — modules named ``*RMSNorm*`` (or ``torch.nn.RMSNorm``) with a 1-D weight;
* ``layernorm`` — ``torch.nn.LayerNorm`` over the last dim with weight and bias;
* ``softmax``   — ``torch.nn.Softmax(dim=-1)``;
* ``swiglu`` / ``fused_mlp`` — MLP modules with gate/up/down linears (``gate_proj``/``up_proj``/
  ``down_proj``, ``w1``/``w3``/``w2``, ...) and a SiLU;
* ``attention`` — modules whose methods call ``F.scaled_dot_product_attention``;
* ``rotary``    — modules whose methods call a ``*rotary*``/``*rope*`` function of the
  ``rotate_half`` layout;
* ``matmul``    — ``torch.nn.Linear``, only when a kept kernel beat the starting kernel;
* ``cross_entropy`` — ``torch.nn.CrossEntropyLoss`` with default settings.

Which kernels: when the workdir has ``results.tsv``, only a kernel the harness passed (its
best row is timed, with no failed stage); on a GPU run (``plan.time_kind == "gpu"``) not one
whose best time is slower than PyTorch eager, unless ``allow_slower``.

A module is switched by giving it a generated subclass of its own class (``__class__``
swap): parameters, ``state_dict`` keys and ``isinstance`` stay as they were.  The new
``forward`` calls the op only when the call is one the kernel was judged on (dtype, device,
head dim, no mask, ...), decided by checking the arguments, and otherwise runs the original
code.  A kernel that fails on a call it accepted raises: nothing is caught.  Norm and MLP
classes are first probed: their original ``forward`` on a small random input is compared
with the problem's PyTorch reference, so that a module that only looks like the kind (say a
``(1 + weight)`` RMSNorm) is left alone.  The kernel is not run by ``apply``.

The returned model is a deep copy (``inplace=True`` patches the given model).  It is meant
for inference: the ops have no backward; and it cannot be pickled (its classes are generated):
save the original's ``state_dict`` and ``apply`` again after loading.  What was switched is in
``model._autokernel_replaced`` (list of ``(module name, kind)``); what was not, and why, in
``model._autokernel_skipped`` (list of ``(problem or module, reason)``).

On CPU the Triton kernels run only under the interpreter (``TRITON_INTERPRET=1``, set
before the first kernel is imported); without it nothing is switched.
"""
from __future__ import annotations

import copy
import csv
import functools
import hashlib
import importlib.util
import inspect
import json
import math
import os
import re
import sys
import types
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import torch
import torch.nn as nn
import torch.nn.functional as F

from .plan import Plan, PlanProblem, load_plan
from .problems.base import parse_dtype


class IntegrateError(ValueError):
    """A workdir that cannot be applied (user mistake, exit code 2)."""


# ------------------------------------------------------------------ the run's files
KEPT_STATUSES = ("keep", "start", "baseline")


def read_results(workdir: Path) -> list[dict[str, str]]:
    """Rows of ``<workdir>/results.tsv`` (empty when there is none)."""
    path = Path(workdir) / "results.tsv"
    if not path.is_file():
        return []
    with path.open(newline="") as fh:
        return [dict(r) for r in csv.DictReader(fh, delimiter="\t")]


def as_float(value: Any) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def best_rows(rows: Iterable[dict[str, str]]) -> dict[str, dict[str, str]]:
    """Per problem, the row of the kernel now at ``problems/<name>/kernel.py``: the last
    ``keep`` (each keep beat the one before), else the ``baseline`` (the starting kernel)."""
    best: dict[str, dict[str, str]] = {}
    for row in rows:
        status, name = row.get("status"), row.get("problem", "")
        if status == "keep" or (status in KEPT_STATUSES and best.get(name, {}).get("status") != "keep"):
            best[name] = row
    return best


def judged_correct(results: list[dict[str, str]], best: dict[str, dict[str, str]], name: str) -> bool:
    """Is the kernel on disk for ``name`` one the harness passed?  Without results (a workdir
    put together by hand) every kernel file counts."""
    if not results:
        return True
    row = best.get(name)
    return bool(row) and not row.get("failed_stage") and as_float(row.get("latency_us")) is not None


def kernel_path(workdir: Path, name: str) -> Path:
    return Path(workdir) / "problems" / name / "kernel.py"


def load_workdir_plan(workdir: Path) -> Plan:
    workdir = Path(workdir)
    if not workdir.is_dir():
        raise IntegrateError(f"workdir not found: {workdir}")
    path = workdir / "plan.json"
    if not path.is_file():
        raise IntegrateError(f"{workdir} has no plan.json (run `autokernel profile` or `autokernel run` first)")
    return load_plan(path)


# ------------------------------------------------------------------ custom ops
SCHEMAS: dict[str, str] = {
    "rmsnorm": "(Tensor x, Tensor weight, float eps) -> Tensor",
    "layernorm": "(Tensor x, Tensor weight, Tensor bias, float eps) -> Tensor",
    "softmax": "(Tensor x) -> Tensor",
    "swiglu": "(Tensor gate, Tensor up) -> Tensor",
    "rotary": "(Tensor x, Tensor cos, Tensor sin) -> Tensor",
    "attention": "(Tensor q, Tensor k, Tensor v, bool causal, float? scale) -> Tensor",
    "matmul": "(Tensor a, Tensor b) -> Tensor",
    "fused_mlp": "(Tensor x, Tensor w_gate, Tensor w_up, Tensor w_down) -> Tensor",
    "cross_entropy": "(Tensor logits, Tensor targets) -> Tensor",
    "reduce": "(Tensor x) -> Tensor",
}


def output_meta(kind: str, args: tuple) -> tuple[tuple[int, ...], torch.dtype]:
    """Shape and dtype of the op's output (what the fake implementation promises)."""
    x = args[0]
    if kind in ("rmsnorm", "layernorm", "softmax", "swiglu", "rotary"):
        return tuple(x.shape), x.dtype
    if kind == "attention":
        return tuple(x.shape[:-1]) + (args[2].shape[-1],), x.dtype
    if kind == "matmul":
        return (x.shape[0], args[1].shape[1]), x.dtype
    if kind == "fused_mlp":
        return (x.shape[0], args[3].shape[0]), x.dtype
    if kind == "cross_entropy":
        return (), x.dtype
    if kind == "reduce":
        return tuple(x.shape[:-1]), x.dtype
    raise KeyError(kind)


# op name -> number of calls of the real implementation in this process (the op runs
# eagerly even inside a compiled graph, so this counts every use)
OP_CALLS: Counter = Counter()
_OPS: dict[str, Callable[..., Any]] = {}
# op name (``<name>_<hash>``, without the namespace) -> the plan problem it was registered for
OP_PROBLEMS: dict[str, str] = {}
OP_NAMESPACE = "autokernel"


def _import_kernel(path: Path, unique: str) -> Any:
    module_name = f"autokernel_applied.{unique}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise IntegrateError(f"cannot import kernel file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


@functools.lru_cache(maxsize=None)
def _passthrough_layout(kind: str) -> Callable[[torch.Tensor], bool] | None:
    from .problems import get_problem

    return get_problem(kind).passthrough_layout


def keeps_layout(kind: str, args: tuple) -> bool:
    """Is the first argument passed to the kernel as it is, and the output given its layout?
    Only in the layout the problem declares (``Problem.passthrough_layout``, also judged by the
    harness); everything else is made contiguous, as in the harness."""
    accepts = _passthrough_layout(kind)
    x = args[0] if args else None
    return accepts is not None and isinstance(x, torch.Tensor) and accepts(x)


def register_kernel_op(kind: str, name: str, path: Path) -> tuple[str, Callable[..., Any]]:
    """Import ``path`` and register its ``kernel_fn`` as ``autokernel::<name>_<hash>``.
    Registering the same file twice returns the same op."""
    if kind not in SCHEMAS:
        raise IntegrateError(f"no custom-op schema for kind {kind!r}")
    source = Path(path).read_bytes()
    digest = hashlib.sha1(kind.encode() + b"\0" + source).hexdigest()[:10]
    opname = f"{re.sub(r'[^0-9A-Za-z_]', '_', name)}_{digest}"
    if opname in _OPS:
        return opname, _OPS[opname]
    module = _import_kernel(Path(path), opname)
    kernel_fn = getattr(module, "kernel_fn", None)
    if not callable(kernel_fn):
        raise IntegrateError(f"{path} defines no callable kernel_fn")

    def impl(*args):
        OP_CALLS[opname] += 1
        shape, dtype = output_meta(kind, args)
        keep = keeps_layout(kind, args)
        call_args = [a if i == 0 and keep else a.contiguous() if isinstance(a, torch.Tensor) else a
                     for i, a in enumerate(args)]
        out = kernel_fn(*call_args)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != shape:
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise RuntimeError(f"kernel {path} returned {got}, expected a tensor of shape {shape}")
        out = out if out.dtype == dtype else out.to(dtype)
        want = args[0] if keep else None  # the layout `fake` promised torch.compile
        if want is not None and out.stride() != want.stride():
            out = torch.empty_like(want).copy_(out)
        elif want is None and not out.is_contiguous():
            out = out.contiguous()
        return out

    def fake(*args):
        shape, dtype = output_meta(kind, args)
        if keeps_layout(kind, args):
            return torch.empty_like(args[0], dtype=dtype)
        return args[0].new_empty(shape, dtype=dtype)

    op = torch.library.custom_op(f"{OP_NAMESPACE}::{opname}", impl, mutates_args=(), schema=SCHEMAS[kind])
    op.register_fake(fake)
    _OPS[opname] = op
    OP_PROBLEMS[opname] = name
    return opname, op


def op_problems(model: nn.Module | None = None) -> dict[str, str]:
    """Qualified op name as the profiler shows it (``autokernel::<name>_<hash>``) -> plan
    problem name: every op registered in this process, and (winning over them) the ops
    ``apply`` put into ``model``."""
    out = {f"{OP_NAMESPACE}::{op}": name for op, name in OP_PROBLEMS.items()}
    for name, op in dict(getattr(model, "_autokernel_ops", {}) or {}).items():
        out[f"{OP_NAMESPACE}::{op}"] = name
    return out


# ------------------------------------------------------------------ what may be applied
@dataclass
class KernelOp:
    problem: PlanProblem
    opname: str
    op: Callable[..., Any]
    dtype: torch.dtype
    path: Path

    @property
    def kind(self) -> str:
        return self.problem.kind

    def dims(self, dim: str) -> set[int]:
        return {s[dim] for s in self.problem.shapes if dim in s}


@dataclass
class Selection:
    ops: list[KernelOp] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def select_kernels(workdir: Path, plan: Plan, *, device: torch.device,
                   allow_slower: bool = False) -> Selection:
    """Which problems' best kernels are applied, and why the others are not.  When the workdir
    has results (a run of the loop), a problem needs a correct (timed) best row in them; a
    workdir without ``results.tsv`` (put together by hand) applies every kernel file it has."""
    sel = Selection()
    results = read_results(workdir)
    best = best_rows(results)
    if device.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        for p in plan.supported:
            sel.skipped.append((p.name, "the model is on CPU and TRITON_INTERPRET=1 is not set"))
        return sel
    for p in plan.problems:
        if not p.supported or p.kind not in SCHEMAS:
            sel.skipped.append((p.name, "not supported by autokernel"))
            continue
        path = kernel_path(workdir, p.name)
        if not path.is_file():
            sel.skipped.append((p.name, f"no kernel at {path}"))
            continue
        row = best.get(p.name)
        if not judged_correct(results, best, p.name):
            sel.skipped.append((p.name, "no correct kernel recorded in results.tsv"))
            continue
        if p.kind == "matmul" and not (row and row.get("status") == "keep"
                                       and (as_float(row.get("speedup_vs_start")) or 0) > 1.0):
            sel.skipped.append((p.name, "matmul: no kept kernel faster than the starting kernel"))
            continue
        s_eager = as_float(row.get("speedup_vs_eager")) if row else None
        if (plan.time_kind == "gpu" and not allow_slower and s_eager is not None and s_eager < 1.0):
            sel.skipped.append((p.name, f"best kernel is slower than PyTorch eager ({s_eager:.2f}x)"))
            continue
        try:
            dtype = parse_dtype(p.dtype)
        except ValueError as exc:
            sel.skipped.append((p.name, str(exc)))
            continue
        opname, op = register_kernel_op(p.kind, p.name, path)
        sel.ops.append(KernelOp(p, opname, op, dtype, path))
    return sel


# ------------------------------------------------------------------ module helpers
def _related(module_name: str, plan_modules: list[str]) -> bool:
    """Is ``module_name`` one of the plan's modules, inside one, or around one?"""
    if not plan_modules:
        return True
    for p in plan_modules:
        if (module_name == p or module_name.startswith(p + ".") or p.startswith(module_name + ".")
                or (module_name and p.endswith("." + module_name))):
            return True
    return False


def _pick(kops: list[KernelOp], kind: str, module_name: str) -> KernelOp | None:
    """The op of ``kind`` whose plan entry names ``module_name`` (exact before related)."""
    same = [k for k in kops if k.kind == kind]
    for k in same:
        if module_name in k.problem.modules:
            return k
    for k in same:
        if _related(module_name, k.problem.modules):
            return k
    return None


def _model_device(model: nn.Module) -> torch.device:
    for t in list(model.parameters()) + list(model.buffers()):
        return t.device
    return torch.device("cpu")


_SUBCLASSES: dict[tuple, type] = {}


def _swap_class(module: nn.Module, key: tuple, members: dict[str, Any]) -> None:
    base = type(module)
    cache_key = (base,) + key
    cls = _SUBCLASSES.get(cache_key)
    if cls is None:
        cls = type(f"Autokernel{base.__name__}", (base,), dict(members, __module__=base.__module__))
        _SUBCLASSES[cache_key] = cls
    module.__class__ = cls


def _rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    out, ref = out.double(), ref.double()
    denom = ref.norm().item()
    return (out - ref).norm().item() / (denom if denom > 0 else 1.0)


PROBE_TOLERANCE = {torch.float32: 1e-4, torch.float16: 5e-3, torch.bfloat16: 3e-2}


def _probe(module: nn.Module, base: type, x: torch.Tensor, expected: Callable[[torch.Tensor], torch.Tensor]) -> bool:
    """Does the module's original ``forward`` compute what the problem's PyTorch reference
    computes (``expected``) on ``x``?  The kernel itself is not run here: whether it is right
    is for ``verify`` to show."""
    with torch.no_grad():
        ref = base.forward(module, x)
        want = expected(x)
    if not isinstance(ref, torch.Tensor) or ref.shape != want.shape:
        return False
    return _rel_error(want, ref) <= PROBE_TOLERANCE.get(x.dtype, 1e-4)


def _reference(kind: str) -> Callable[..., Any]:
    from .problems import get_problem

    return get_problem(kind).reference


def _probe_input(n: int, module: nn.Module, dtype: torch.dtype) -> torch.Tensor:
    gen = torch.Generator(device="cpu").manual_seed(1234)
    return torch.randn(3, n, generator=gen).to(device=_model_device(module), dtype=dtype)


def _ok_device(t: torch.Tensor, device: torch.device) -> bool:
    return t.device.type == device.type


# ------------------------------------------------------------------ norms, softmax, loss
def _rmsnorm_eps(module: nn.Module, dtype: torch.dtype) -> float | None:
    for attr in ("variance_epsilon", "eps", "epsilon"):
        if hasattr(module, attr):
            eps = getattr(module, attr)
            if eps is None and isinstance(module, getattr(nn, "RMSNorm", ())):
                return float(torch.finfo(dtype).eps)
            return float(eps) if isinstance(eps, (int, float)) else None
    return None


def _rmsnorm_members(k: KernelOp, n: int, eps: float, base: type) -> dict[str, Any]:
    op, dtype = k.op, k.dtype
    base_forward = base.forward

    def forward(self, x, *args, **kwargs):
        w = self.weight
        if not args and not kwargs and x.dtype == dtype and w.dtype == dtype and x.shape[-1] == n:
            return op(x.reshape(-1, n), w, eps).reshape(x.shape)
        return base_forward(self, x, *args, **kwargs)

    return {"forward": forward}


def _is_rmsnorm(module: nn.Module) -> bool:
    rms = getattr(nn, "RMSNorm", None)
    if rms is not None and isinstance(module, rms):
        return module.weight is not None and len(module.normalized_shape) == 1
    w = getattr(module, "weight", None)
    return ("rmsnorm" in type(module).__name__.lower() and isinstance(w, torch.Tensor) and w.dim() == 1)


def _apply_rmsnorm(model: nn.Module, k: KernelOp, done: set[int], replaced, skipped, probed) -> None:
    for name, m in model.named_modules():
        if id(m) in done or not _is_rmsnorm(m) or not _related(name, k.problem.modules):
            continue
        if _pick([k], "rmsnorm", name) is None:
            continue
        eps = _rmsnorm_eps(m, k.dtype)
        if eps is None:
            skipped.append((name, "rmsnorm: no eps attribute found"))
            continue
        if m.weight.dtype != k.dtype or not _ok_device(m.weight, _model_device(model)):
            skipped.append((name, f"rmsnorm: weight dtype {m.weight.dtype} is not the kernel's {k.dtype}"))
            continue
        n = m.weight.shape[0]
        base = type(m)
        ref = _reference("rmsnorm")
        if not _check_probe(base, m, k, probed, _probe_input(n, m, k.dtype),
                            lambda x, m=m, eps=eps, ref=ref: ref(x, m.weight, eps)):
            skipped.append((name, f"rmsnorm: {base.__name__} computes something else (probe mismatch)"))
            continue
        _swap_class(m, ("rmsnorm", k.opname, n, eps), _rmsnorm_members(k, n, eps, base))
        done.add(id(m))
        replaced.append((name, "rmsnorm"))


def _check_probe(base: type, m: nn.Module, k: KernelOp, probed: dict, x: torch.Tensor,
                 expected: Callable[[torch.Tensor], torch.Tensor]) -> bool:
    key = (base, k.kind)
    if key not in probed:
        probed[key] = _probe(m, base, x, expected)
    return probed[key]


def _layernorm_members(k: KernelOp, n: int) -> dict[str, Any]:
    op, dtype = k.op, k.dtype

    def forward(self, x):
        if x.dtype == dtype and x.shape[-1] == n:
            return op(x.reshape(-1, n), self.weight, self.bias, self.eps).reshape(x.shape)
        return nn.LayerNorm.forward(self, x)

    return {"forward": forward}


def _apply_layernorm(model, k, done, replaced, skipped, probed) -> None:
    for name, m in model.named_modules():
        if id(m) in done or type(m).forward is not nn.LayerNorm.forward or _pick([k], "layernorm", name) is None:
            continue
        if len(m.normalized_shape) != 1 or m.weight is None or getattr(m, "bias", None) is None:
            skipped.append((name, "layernorm: needs a 1-D normalized shape with weight and bias"))
            continue
        if m.weight.dtype != k.dtype:
            skipped.append((name, f"layernorm: weight dtype {m.weight.dtype} is not the kernel's {k.dtype}"))
            continue
        _swap_class(m, ("layernorm", k.opname, m.normalized_shape[0]), _layernorm_members(k, m.normalized_shape[0]))
        done.add(id(m))
        replaced.append((name, "layernorm"))


def _apply_softmax(model, k, done, replaced, skipped, probed) -> None:
    op, dtype = k.op, k.dtype

    def forward(self, x):
        if x.dtype == dtype and x.dim() >= 1 and x.numel() > 0:
            return op(x.reshape(-1, x.shape[-1])).reshape(x.shape)
        return nn.Softmax.forward(self, x)

    for name, m in model.named_modules():
        if id(m) in done or type(m).forward is not nn.Softmax.forward or _pick([k], "softmax", name) is None:
            continue
        if m.dim not in (-1,):
            skipped.append((name, f"softmax: dim={m.dim}; the kernel reduces the last dim (dim=-1)"))
            continue
        _swap_class(m, ("softmax", k.opname), {"forward": forward})
        done.add(id(m))
        replaced.append((name, "softmax"))


def _apply_cross_entropy(model, k, done, replaced, skipped, probed) -> None:
    op, dtype = k.op, k.dtype

    def forward(self, logits, targets):
        if (logits.dim() == 2 and logits.dtype == dtype and targets.dim() == 1
                and targets.dtype == torch.long and targets.shape[0] == logits.shape[0]):
            return op(logits, targets)
        return nn.CrossEntropyLoss.forward(self, logits, targets)

    for name, m in model.named_modules():
        if (id(m) in done or type(m).forward is not nn.CrossEntropyLoss.forward
                or _pick([k], "cross_entropy", name) is None):
            continue
        if (m.reduction != "mean" or m.ignore_index != -100 or m.weight is not None
                or getattr(m, "label_smoothing", 0.0) != 0.0):
            skipped.append((name, "cross_entropy: only mean reduction, ignore_index=-100, no weight or smoothing"))
            continue
        _swap_class(m, ("cross_entropy", k.opname), {"forward": forward})
        done.add(id(m))
        replaced.append((name, "cross_entropy"))


# ------------------------------------------------------------------ linears
def _linear_members(k: KernelOp) -> dict[str, Any]:
    op, dtype = k.op, k.dtype

    def forward(self, x):
        wt = self._autokernel_weight_t
        if x.dtype == dtype and x.shape[-1] == wt.shape[0] and x.numel() > 0:
            out = op(x.reshape(-1, wt.shape[0]), wt)
            if self.bias is not None:
                out = out + self.bias
            return out.reshape(*x.shape[:-1], wt.shape[1])
        return nn.Linear.forward(self, x)

    return {"forward": forward}


def _apply_matmul(model, k, done, replaced, skipped, probed) -> None:
    for name, m in model.named_modules():
        if id(m) in done or type(m).forward is not nn.Linear.forward or _pick([k], "matmul", name) is None:
            continue
        if m.weight.dtype != k.dtype:
            skipped.append((name, f"matmul: weight dtype {m.weight.dtype} is not the kernel's {k.dtype}"))
            continue
        # The kernel takes b[K, N]: keep a contiguous transposed copy (inference only:
        # later changes of the weight are not seen).
        m.register_buffer("_autokernel_weight_t", m.weight.detach().t().contiguous(), persistent=False)
        _swap_class(m, ("matmul", k.opname), _linear_members(k))
        done.add(id(m))
        replaced.append((name, "matmul"))


# ------------------------------------------------------------------ MLP (swiglu / fused_mlp)
_GATE_NAMES = ("gate_proj", "gate", "w1", "fc_gate", "w_gate", "wg")
_UP_NAMES = ("up_proj", "up", "w3", "fc_up", "w_up", "wu")
_DOWN_NAMES = ("down_proj", "down", "w2", "fc_down", "w_down", "wo", "out_proj")


def _find_linear(module: nn.Module, names: tuple[str, ...]) -> str | None:
    for n in names:
        if isinstance(getattr(module, n, None), nn.Linear):
            return n
    return None


def _class_code_names(cls: type) -> set[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass in (nn.Module, object):
            break
        for fn in vars(klass).values():
            if isinstance(fn, types.FunctionType):
                names |= _code_names(fn.__code__)
    return names


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _code_names(c)
    return names


def _mlp_parts(m: nn.Module) -> tuple[str, str, str] | None:
    if isinstance(m, nn.Linear):
        return None
    g, u, d = _find_linear(m, _GATE_NAMES), _find_linear(m, _UP_NAMES), _find_linear(m, _DOWN_NAMES)
    if not (g and u and d) or len({g, u, d}) != 3:
        return None
    silu = "silu" in _class_code_names(type(m)) or any(isinstance(c, nn.SiLU) for c in m.children())
    return (g, u, d) if silu else None


def _mlp_members(k: KernelOp, parts: tuple[str, str, str], d_in: int, fused: bool, base: type) -> dict[str, Any]:
    op, dtype = k.op, k.dtype
    g, u, d = parts
    base_forward = base.forward

    def forward(self, x, *args, **kwargs):
        if not args and not kwargs and x.dtype == dtype and x.shape[-1] == d_in and x.numel() > 0:
            x2 = x.reshape(-1, d_in)
            if fused:
                out = op(x2, getattr(self, g).weight, getattr(self, u).weight, getattr(self, d).weight)
            else:
                out = getattr(self, d)(op(getattr(self, g)(x2), getattr(self, u)(x2)))
            return out.reshape(*x.shape[:-1], out.shape[-1])
        return base_forward(self, x, *args, **kwargs)

    return {"forward": forward}


def _mlp_expected(m: nn.Module, parts: tuple[str, str, str]) -> Callable[[torch.Tensor], torch.Tensor]:
    swiglu = _reference("swiglu")
    g, u, d = (getattr(m, p) for p in parts)
    return lambda x: d(swiglu(g(x), u(x)))


def _apply_mlp(model, k, done, replaced, skipped, probed) -> None:
    fused = k.kind == "fused_mlp"
    for name, m in model.named_modules():
        if id(m) in done or _pick([k], k.kind, name) is None:
            continue
        parts = _mlp_parts(m)
        if parts is None:
            continue
        lins = [getattr(m, p) for p in parts]
        if any(lin.weight.dtype != k.dtype for lin in lins):
            skipped.append((name, f"{k.kind}: linear weights are not {k.dtype}"))
            continue
        if fused and any(lin.bias is not None for lin in lins):
            skipped.append((name, "fused_mlp: the linears have biases"))
            continue
        d_in = lins[0].in_features
        base = type(m)
        if not _check_probe(base, m, k, probed, _probe_input(d_in, m, k.dtype), _mlp_expected(m, parts)):
            skipped.append((name, f"{k.kind}: {base.__name__} computes something else (probe mismatch)"))
            continue
        _swap_class(m, (k.kind, k.opname, parts, d_in), _mlp_members(k, parts, d_in, fused, base))
        done.add(id(m))
        replaced.append((name, k.kind))


# ------------------------------------------------------------------ functions called in forward
def _sdpa_replacement(k: KernelOp) -> Callable[..., Any]:
    op, dtype = k.op, k.dtype
    head_dims = k.dims("D") or k.dims("head_dim")
    original = F.scaled_dot_product_attention

    def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                     is_causal=False, scale=None, enable_gqa=False):
        if (attn_mask is None and dropout_p == 0.0 and query.dim() == 4 and key.dim() == 4
                and value.dim() == 4 and query.dtype == dtype and key.dtype == dtype
                and value.dtype == dtype and (not head_dims or query.shape[-1] in head_dims)
                and key.shape[-1] == query.shape[-1] and value.shape[-1] == query.shape[-1]
                and key.shape[-2] == query.shape[-2] and value.shape[-2] == key.shape[-2]
                and key.shape[1] == value.shape[1] and query.shape[0] == key.shape[0]
                and (key.shape[1] == query.shape[1] or (enable_gqa and query.shape[1] % key.shape[1] == 0))):
            return op(query, key, value, bool(is_causal), scale)
        extra = {"enable_gqa": True} if enable_gqa else {}
        return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                        is_causal=is_causal, scale=scale, **extra)

    return scaled_dot_product_attention


def _rotary_ok(x, cos, sin, dtype) -> bool:
    return (x.dim() == 4 and x.dtype == dtype and cos.dtype == dtype and sin.dtype == dtype
            and cos.dim() >= 2 and tuple(cos.shape) == tuple(sin.shape)
            and all(s == 1 for s in cos.shape[:-2])
            and cos.shape[-2] == x.shape[-2] and cos.shape[-1] == x.shape[-1])


def _rotary_replacement(k: KernelOp, original: Callable[..., Any], pair: bool) -> Callable[..., Any]:
    op, dtype = k.op, k.dtype

    def as_2d(t):
        return t.reshape(t.shape[-2], t.shape[-1])

    if pair:
        def rotary_pair(q, k_, cos, sin, *args, **kwargs):
            if not args and not kwargs and _rotary_ok(q, cos, sin, dtype) and _rotary_ok(k_, cos, sin, dtype):
                c, s = as_2d(cos), as_2d(sin)
                return op(q, c, s), op(k_, c, s)
            return original(q, k_, cos, sin, *args, **kwargs)
        return rotary_pair

    def rotary_one(x, cos, sin, *args, **kwargs):
        if not args and not kwargs and _rotary_ok(x, cos, sin, dtype):
            return op(x, as_2d(cos), as_2d(sin))
        return original(x, cos, sin, *args, **kwargs)
    return rotary_one


_ROTARY_NAME = re.compile(r"rotary|rope", re.IGNORECASE)


def _rotary_form(fn: Any) -> bool | None:
    """True for ``f(q, k, cos, sin)``, False for ``f(x, cos, sin)``, None when ``fn`` is not a
    ``rotate_half``-layout rotary function."""
    if not isinstance(fn, types.FunctionType) or not _ROTARY_NAME.search(fn.__name__):
        return None
    if not any("rotate_half" in n for n in _code_names(fn.__code__)):
        return None
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
    return {4: True, 3: False}.get(len(params))


def _global_replacements(fn: types.FunctionType, sdpa: Callable | None,
                         rotary: KernelOp | None) -> tuple[dict[str, Any], set[str]]:
    """Names in ``fn``'s globals to rebind so that its calls reach the ops, and the kinds."""
    out: dict[str, Any] = {}
    kinds: set[str] = set()
    g = fn.__globals__
    names = _code_names(fn.__code__)
    for name in names:
        value = g.get(name)
        if sdpa is not None:
            if value is F and "scaled_dot_product_attention" in names:
                out[name] = _functional_proxy(sdpa)
                kinds.add("attention")
            elif value is F.scaled_dot_product_attention:
                out[name] = sdpa
                kinds.add("attention")
        if rotary is not None:
            form = _rotary_form(value)
            if form is not None:
                out[name] = _rotary_replacement(rotary, value, form)
                kinds.add("rotary")
    return out, kinds


_PROXIES: dict[int, types.ModuleType] = {}
_REBOUND_MODULES: list[types.ModuleType] = []


def _functional_proxy(sdpa: Callable) -> types.ModuleType:
    """A stand-in for ``torch.nn.functional`` whose ``scaled_dot_product_attention`` is ours."""
    proxy = _PROXIES.get(id(sdpa))
    if proxy is None:
        proxy = types.ModuleType("autokernel_functional")
        proxy.__dict__.update({k: v for k, v in vars(F).items() if not k.startswith("__")})
        proxy.scaled_dot_product_attention = sdpa
        _PROXIES[id(sdpa)] = proxy
    return proxy


def _rebound(fn: types.FunctionType, names: dict[str, Any]) -> types.FunctionType:
    """``fn`` with some of its globals rebound.  The new globals are the ``__dict__`` of a
    module registered in ``sys.modules`` under its own name: torch.compile finds a function's
    globals again by ``__name__`` when it builds guards."""
    module_name = f"autokernel_rebound_{len(_REBOUND_MODULES)}_{fn.__globals__.get('__name__', 'm')}"
    module = types.ModuleType(module_name)
    module.__dict__.update(fn.__globals__)
    module.__dict__.update(names)
    module.__dict__["__name__"] = module_name
    sys.modules[module_name] = module
    _REBOUND_MODULES.append(module)
    new = types.FunctionType(fn.__code__, module.__dict__, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__ = fn.__qualname__
    return new


def _apply_calls(model, kops: list[KernelOp], done_calls: set[int], replaced, skipped) -> None:
    """Attention (SDPA) and rotary: rebind the functions a module's methods call."""
    kinds = {"attention", "rotary"}
    if not any(k.kind in kinds for k in kops):
        return
    for name, m in model.named_modules():
        if id(m) in done_calls or isinstance(m, (nn.Linear, nn.LayerNorm)):
            continue
        att = _pick(kops, "attention", name)
        rot = _pick(kops, "rotary", name)
        if att is None and rot is None:
            continue
        key = (type(m), "calls", att.opname if att else None, rot.opname if rot else None)
        cls = _SUBCLASSES.get(key)
        if cls is None:
            cls = _calls_subclass(type(m), att, rot)
            _SUBCLASSES[key] = cls
        if not cls._autokernel_kinds:
            continue
        m.__class__ = cls
        done_calls.add(id(m))
        for kind in cls._autokernel_kinds:
            replaced.append((name, kind))


def _calls_subclass(base: type, att: KernelOp | None, rot: KernelOp | None) -> type:
    """A subclass of ``base`` whose methods that call SDPA / a rotary function call the ops
    instead (``_autokernel_kinds`` empty when there is none)."""
    sdpa = _sdpa_replacement(att) if att is not None else None
    members: dict[str, Any] = {}
    kinds: set[str] = set()
    for klass in base.__mro__:
        if klass in (nn.Module, object):
            break
        for attr, fn in vars(klass).items():
            if attr in members or not isinstance(fn, types.FunctionType):
                continue
            names, kinds_fn = _global_replacements(fn, sdpa, rot)
            if names:
                members[attr] = _rebound(fn, names)
                kinds |= kinds_fn
    members["_autokernel_kinds"] = tuple(sorted(kinds))
    return type(f"Autokernel{base.__name__}", (base,), dict(members, __module__=base.__module__))


# ------------------------------------------------------------------ entry point
_MODULE_APPLIERS = {
    "rmsnorm": _apply_rmsnorm,
    "layernorm": _apply_layernorm,
    "softmax": _apply_softmax,
    "cross_entropy": _apply_cross_entropy,
    "fused_mlp": _apply_mlp,
    "swiglu": _apply_mlp,
    "matmul": _apply_matmul,
}
# fused_mlp before swiglu (it covers more of the MLP); matmul last so that the linears of a
# fused MLP are left alone
_ORDER = ("rmsnorm", "layernorm", "softmax", "cross_entropy", "fused_mlp", "swiglu", "matmul")


def apply(model: nn.Module, workdir: str | Path, *, inplace: bool = False,
          allow_slower: bool = False) -> nn.Module:
    """Return ``model`` (a deep copy unless ``inplace``) running the run's best kernels.

    ``allow_slower``: on GPU runs, kernels whose best measured time is slower than PyTorch
    eager are left out unless this is set.  See the module docstring."""
    if not isinstance(model, nn.Module):
        raise IntegrateError(f"apply() needs a torch.nn.Module, got {type(model).__name__}")
    workdir = Path(workdir)
    plan = load_workdir_plan(workdir)
    patched = model if inplace else copy.deepcopy(model)
    device = _model_device(patched)
    sel = select_kernels(workdir, plan, device=device, allow_slower=allow_slower)
    replaced: list[tuple[str, str]] = []
    skipped = list(sel.skipped)
    done: set[int] = set()
    probed: dict = {}
    used_ops: set[str] = set()
    for kind in _ORDER:
        for k in [k for k in sel.ops if k.kind == kind]:
            before = len(replaced)
            _MODULE_APPLIERS[kind](patched, k, done, replaced, skipped, probed)
            if len(replaced) > before:
                used_ops.add(k.opname)
    calls_before = len(replaced)
    _apply_calls(patched, sel.ops, set(), replaced, skipped)
    for k in sel.ops:
        if k.kind in ("attention", "rotary") and any(kind == k.kind for _, kind in replaced[calls_before:]):
            used_ops.add(k.opname)
    for k in sel.ops:
        if k.opname not in used_ops:
            skipped.append((k.problem.name, f"{k.kind}: no place in the model where it applies"))
    patched._autokernel_replaced = replaced
    patched._autokernel_skipped = skipped
    patched._autokernel_ops = {k.problem.name: k.opname for k in sel.ops if k.opname in used_ops}
    _warn_apply(workdir, patched, device)
    return patched


def _warn_apply(workdir: Path, patched: nn.Module, device) -> None:
    """Say when nothing was replaced, and when interpreter-tuned kernels go onto a GPU."""
    import warnings

    from .provenance import gpu_use_warning, nothing_replaced_warning

    if not patched._autokernel_replaced:
        warnings.warn(nothing_replaced_warning(patched._autokernel_skipped), stacklevel=3)
    elif device.type == "cuda":
        message = gpu_use_warning(workdir, sorted(patched._autokernel_ops))
        if message:
            warnings.warn(message, stacklevel=3)


def summary(model: nn.Module) -> dict[str, Any]:
    """What ``apply`` did, as plain data."""
    return {
        "replaced": [list(r) for r in getattr(model, "_autokernel_replaced", [])],
        "skipped": [list(s) for s in getattr(model, "_autokernel_skipped", [])],
        "ops": dict(getattr(model, "_autokernel_ops", {})),
    }


def dumps_summary(model: nn.Module) -> str:
    return json.dumps(summary(model), indent=2)
