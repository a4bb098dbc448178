"""Profile a model and write its plan: which problem kinds, with which real shapes, take how
much of the model's time.

How time is counted:

* on a GPU, only device kernels count.  torch.profiler links each kernel to the CPU op that
  launched it (by correlation id); the kernel is attributed to that op and its ancestors, and
  never counted again through an aten op's own time;
* on a CPU, the self CPU time of each op counts (an op's children are counted for themselves),
  measured on one intra-op thread (``intra_op_threads``), and the plan says ``time_kind="cpu"``.  Ops that launch no device kernel (views, metadata,
  allocation: ``recognize.METADATA_OPS``) count on neither: on a GPU they have no kernel
  time, and counting their dispatcher overhead on a CPU would make CPU shares unlike GPU ones;
* over the profiled passes, each op's time (and each kernel's) is its median
  (``typical_pass``): one op preempted once on a busy machine does not move the shares, an op
  slow in most passes does.  Passes that ran different ops are averaged as they are.

How time is attributed: forward pre/post hooks open a ``record_function`` range per module call (and
the model's ``apply_rotary*`` functions and T5's ``compute_bias`` methods are wrapped the same way
while profiling), so every op sits in a tree of module scopes.  For each piece of time (a kernel, or
an op's self time) the outermost scope that claims it wins (an RMSNorm module, a rotary function, a
SwiGLU MLP's elementwise part); otherwise the outermost recognized op on its path
(``aten::linear`` over ``aten::addmm``, ``aten::scaled_dot_product_attention`` over the flash
kernel op); otherwise a GEMM-named kernel (``nvjet_*``, ``*gemm*``, ``cutlass*``); otherwise
the time is *uncovered*, reported under the outermost op's name.

The same machinery profiles a model patched by ``autokernel.apply`` (``problem_times``): time
under one of the run's custom ops (``autokernel::<name>_<hash>``) counts for that op's plan
problem before any recognizer is asked, the rest is recognized as above and mapped to the plan
problem of the same kind and dtype, and what maps to no plan problem is uncovered.
"""
from __future__ import annotations

import contextlib
import inspect
import platform
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from statistics import median
from typing import Any, Iterator

import torch
from torch import nn

from .models import LoadedModel
from .plan import Plan, PlanProblem, UncoveredTime
from .quiet import filtered_stderr
from .problems.base import dtype_name
from .recognize import (METADATA_OPS, Instance, Node, ScopeCall, TensorMeta, Unsupported, is_gemm_kernel,
                        matmul_shape, module_info, module_wrapped_function, pair_adds_ahead, pair_cross_entropy,
                        pair_linear_activation, pair_linear_row_add, pair_residual_adds, pair_rotary_attention,
                        pair_softcap, recognize_op, recognize_scope, shape_weight)
from .recognize_head_copies import pair_head_copies
from .recognize_scores import pair_scores_attention
from .recognize_window_convs import pair_window_conv_gelu
from .recognize_windows import pair_shifted_windows, pair_window_bias

SCOPE_PREFIX = "ak::"
FORWARD_LABEL = "ak::forward::"
MODULE_LABEL = "ak::m::"
FUNCTION_LABEL = "ak::f::"
GELU_LABEL = "ak::gelu::"  # + "tanh" | "none": the form of an F.gelu call (the trace does not record strings)
# rotary functions, transformers' eager attention (Gemma-2 soft-caps its scores there), and Mamba's
# selective scan and causal convolution (transformers' fallbacks for mamba-ssm and causal-conv1d)
MARKED_FUNCTIONS = re.compile(r"^(apply_rotary|eager_attention_forward$|mamba_selective_scan$|causal_conv1d_fn$)",
                              re.IGNORECASE)
# methods of the model's module classes, marked the same way: T5's relative position bias
MARKED_METHODS = ("compute_bias",)
DEFAULT_WARMUP = 2  # untimed forward passes before profiling
DEFAULT_ITERS = 3  # profiled forward passes


# ------------------------------------------------------------------ tracing
class Tracer:
    """While active: a ``record_function`` range around every module call and every marked
    function call, and a table of what each range was called with."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.calls: list[ScopeCall] = []
        self._infos = {m: module_info(name, m) for name, m in model.named_modules()}
        self._open: dict[int, list[tuple[Any, int]]] = defaultdict(list)
        self._handles: list[Any] = []
        self._patched: list[tuple[dict[str, Any], str, Any]] = []
        self._patched_methods: list[tuple[type, str, Any]] = []

    def __enter__(self) -> "Tracer":
        for module in self._infos:
            self._handles.append(module.register_forward_pre_hook(self._pre, with_kwargs=True))
            self._handles.append(module.register_forward_hook(self._post, always_call=True))
        self._patch_functions()
        self._patch_methods()
        self._gelu_mode = GeluFormMarker()
        self._gelu_mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._gelu_mode.__exit__(None, None, None)
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for namespace, name, original in reversed(self._patched):
            namespace[name] = original
        self._patched.clear()
        for klass, name, original in reversed(self._patched_methods):
            setattr(klass, name, original)
        self._patched_methods.clear()
        for stack in self._open.values():  # ranges left open by an exception
            while stack:
                stack.pop()[0].__exit__(None, None, None)

    def _pre(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        call = ScopeCall("module", self._infos[module].qualname, self._infos[module],
                         args=tensor_metas(list(args) + list(kwargs.values())))
        self.calls.append(call)
        rf = torch.profiler.record_function(f"{MODULE_LABEL}{len(self.calls) - 1}")
        rf.__enter__()
        self._open[id(module)].append((rf, len(self.calls) - 1))

    def _post(self, module: nn.Module, args: tuple, output: Any) -> None:
        stack = self._open.get(id(module))
        if not stack:
            return
        rf, index = stack.pop()
        self.calls[index].outputs = tensor_metas(output)
        rf.__exit__(None, None, None)

    def _patch_functions(self) -> None:
        """Wrap ``apply_rotary*`` and ``eager_attention_forward`` functions in the Python modules
        that define the model, and in the globals of its classes' methods (``autokernel.apply``
        gives a patched method its own copy of the globals)."""
        seen: set[int] = set()
        for namespace in self._namespaces():
            py_name = str(namespace.get("__name__", ""))
            if id(namespace) in seen or py_name.startswith("torch.") or py_name == "torch":
                continue
            seen.add(id(namespace))
            for name, fn in list(namespace.items()):
                if MARKED_FUNCTIONS.match(name) and inspect.isfunction(module_wrapped_function(fn)):
                    namespace[name] = self._wrap(fn, f"{py_name}.{name}")
                    self._patched.append((namespace, name, fn))

    def _patch_methods(self) -> None:
        """Wrap the ``MARKED_METHODS`` the model's module classes define (each class of their MROs
        that defines one, put back on exit): a scope named ``<module>.<Class>.<method>``."""
        seen: set[type] = set()
        for module in self._infos:
            for klass in type(module).__mro__:
                if klass in (nn.Module, object):
                    break
                if klass in seen:
                    continue
                seen.add(klass)
                for name in MARKED_METHODS:
                    fn = vars(klass).get(name)
                    if inspect.isfunction(fn):
                        setattr(klass, name, self._wrap(fn, f"{klass.__module__}.{klass.__qualname__}.{name}"))
                        self._patched_methods.append((klass, name, fn))

    def _namespaces(self) -> Iterator[dict[str, Any]]:
        for module in self._infos:
            py_module = sys.modules.get(type(module).__module__)
            if py_module is not None:
                yield vars(py_module)
            for klass in type(module).__mro__:
                if klass in (nn.Module, object):
                    break
                for fn in vars(klass).values():
                    if inspect.isfunction(fn):
                        yield fn.__globals__
                        inner = _unwrapped(fn)
                        if inner is not fn:  # behind a decorator (transformers' deprecate_kwarg on
                            yield inner.__globals__  # forwards): a patched method's own globals

    def _wrap(self, fn: Any, qualified: str) -> Any:
        code_names = tuple(getattr(getattr(module_wrapped_function(fn), "__code__", None), "co_names", ()))

        def marked(*args: Any, **kwargs: Any) -> Any:
            call = ScopeCall("function", qualified, None, args=tensor_metas(list(args) + list(kwargs.values())),
                             code_names=code_names)
            self.calls.append(call)
            with torch.profiler.record_function(f"{FUNCTION_LABEL}{len(self.calls) - 1}"):
                out = fn(*args, **kwargs)
            call.outputs = tensor_metas(out)
            return out

        marked.__wrapped__ = fn  # type: ignore[attr-defined]
        return marked


def _unwrapped(fn: Any) -> Any:
    """The function behind ``functools.wraps`` decorators (``fn`` itself where none, or where the
    chain loops or ends in no plain function)."""
    try:
        inner = inspect.unwrap(fn)
    except ValueError:
        return fn
    return inner if inspect.isfunction(inner) else fn


class GeluFormMarker(torch.overrides.TorchFunctionMode):
    """Wraps each ``F.gelu`` call in a range named after its ``approximate`` argument, which
    the profiler's trace does not record (it keeps no string arguments)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.gelu:
            form = kwargs.get("approximate", args[1] if len(args) > 1 else "none")
            with torch.profiler.record_function(f"{GELU_LABEL}{form}"):
                return func(*args, **kwargs)
        return func(*args, **kwargs)


def tensor_metas(values: Any) -> list[TensorMeta]:
    if isinstance(values, torch.Tensor):
        values = [values]
    elif isinstance(values, dict):
        values = list(values.values())
    elif not isinstance(values, (list, tuple)):
        values = [getattr(values, "logits", None)] if hasattr(values, "logits") else []
    return [TensorMeta(tuple(v.shape), dtype_name(v.dtype)) for v in values if isinstance(v, torch.Tensor)]


# ------------------------------------------------------------------ trace -> tree
def events_to_tree(events: Any, calls: list[ScopeCall], dtypes_by_id: dict[int, list[str]] | None = None) -> list[Node]:
    """Convert torch.profiler FunctionEvents into Nodes: one root per profiled forward.
    ``dtypes_by_id``: each event's input dtypes by its id, where the events do not carry them."""
    roots = []
    for event in events:
        on_cpu = getattr(event, "device_type", torch.autograd.DeviceType.CPU) == torch.autograd.DeviceType.CPU
        # (a range also has a copy on the GPU timeline, with the same name: not a root)
        if event.name.startswith(FORWARD_LABEL) and on_cpu and getattr(event, "cpu_parent", None) is None:
            roots.append(_convert(event, calls, dtypes_by_id or {}))
    return roots


def recorded_dtypes(prof: Any) -> dict[int, list[str]]:
    """The input dtypes the profiler recorded for each op, by the id its event has.  PyTorch
    2.11's events (the GPU machines') do not carry them (``input_dtypes`` came later), though its
    raw records do: without these every problem took the model's dtype, and a bf16 model's fp32
    work (GPT-J's scores, from q and k cast to fp32) was planned and judged in bf16."""
    try:
        records = prof.profiler.kineto_results.events()
    except AttributeError:  # no raw records to read: the events' own dtypes, or the model's
        return {}
    return {r.correlation_id(): list(r.dtypes()) for r in records}


def _convert(event: Any, calls: list[ScopeCall], dtypes_by_id: dict[int, list[str]]) -> Node:
    name = event.name
    scope = None
    for label in (MODULE_LABEL, FUNCTION_LABEL):
        index = name[len(label):]
        if name.startswith(label) and index.isdigit() and int(index) < len(calls):
            scope = calls[int(index)]
    is_scope = name.startswith(SCOPE_PREFIX)
    kernels = [(k.name, float(k.duration)) for k in getattr(event, "kernels", ())
               # the same range's GPU-timeline copy, or the legacy self-copy: not kernels
               if k.name != name and not k.name.startswith(SCOPE_PREFIX)]
    node = Node(name=name, scope=scope, kernels=kernels,
                shapes=[] if is_scope else [list(s) if isinstance(s, (list, tuple)) else [] for s in (event.input_shapes or [])],
                dtypes=[] if is_scope else list(getattr(event, "input_dtypes", None) or dtypes_by_id.get(event.id) or []),
                concrete=[] if is_scope else list(getattr(event, "concrete_inputs", None) or []),
                self_us=0.0 if is_scope else float(event.self_cpu_time_total))
    for child in event.cpu_children:
        if getattr(child, "is_async", False) or child.name.startswith(("profiler::", "[memory]")):
            continue
        node.add(_convert(child, calls, dtypes_by_id))
    return node


# ------------------------------------------------------------------ attribution
@dataclass
class Attribution:
    instances: list[tuple[Instance, float]] = field(default_factory=list)  # (instance, time in us)
    uncovered: dict[str, float] = field(default_factory=dict)
    total_us: float = 0.0
    op_times: dict[str, float] = field(default_factory=dict)  # problem -> time under its custom op


def walk(node: Node) -> Iterator[Node]:
    yield node
    for child in node.children:
        yield from walk(child)


def time_units(node: Node, time_kind: str) -> list[tuple[str, float]]:
    """The pieces of time a node owns: its device kernels on a GPU, its self time on a CPU."""
    if time_kind == "gpu":
        return [(k, us) for k, us in node.kernels if k != node.name and not k.startswith(SCOPE_PREFIX)]
    if node.scope is not None or node.name.startswith(SCOPE_PREFIX) or node.name in METADATA_OPS:
        return []  # metadata ops launch no kernel: no time on a GPU, none counted on a CPU
    return [(node.name, node.self_us)]


def op_owner(node: Node, op_problems: dict[str, str]) -> str | None:
    """The plan problem whose custom op ``node`` runs in (the outermost such op), if any."""
    owner = None
    n: Node | None = node
    while n is not None:
        owner = op_problems.get(n.name, owner)
        n = n.parent
    return owner


def attribute(roots: list[Node], *, time_kind: str, default_dtype: str, fuse_mlp: bool = False,
              op_problems: dict[str, str] | None = None, fuse_rotary: bool = False) -> Attribution:
    """Attribute every piece of time to an instance of a kind, or to an uncovered label.
    ``op_problems`` (profiler op name -> plan problem, for a patched model): time under one of
    those ops goes to ``op_times`` of its problem, before any recognizer is asked.
    ``fuse_rotary``: a rotary function followed by attention on its q and k is one
    ``attention_rotary`` (``pair_rotary_attention``)."""
    result = Attribution()
    by_key: dict[int, Instance] = {}  # id(claiming node) -> its instance
    times: dict[int, float] = defaultdict(float)
    subtree_ops: dict[int, set[str]] = {}
    paired: dict[int, Instance] = {}  # id(node) -> the fused instance of a pair it belongs to
    add_before: dict[int, Node] = {}  # id(residual add) -> the norm scope it is fused with
    add_from: dict[int, str] = {}  # id(norm scope) -> the module whose forward ends with its add
    for root in roots:
        for node in walk(root):
            paired.update(pair_cross_entropy(node, default_dtype))
            paired.update(pair_linear_activation(node))
            paired.update(pair_linear_row_add(node, default_dtype))
            paired.update(pair_softcap(node, default_dtype))
            paired.update(pair_scores_attention(node, default_dtype))
            paired.update(pair_head_copies(node, default_dtype))
            paired.update(pair_window_conv_gelu(node, default_dtype))
            paired.update(pair_shifted_windows(node, default_dtype))
            paired.update(pair_window_bias(node, default_dtype))
            if fuse_rotary:
                paired.update(pair_rotary_attention(node, default_dtype))
            add_before.update(pair_residual_adds(node))
        for add_id, (norm, producer) in pair_adds_ahead(root).items():
            add_before[add_id] = norm
            add_from[id(norm)] = producer
    norms_after_add = {id(norm) for norm in add_before.values()}

    def claimed(node: Node, claim: Instance) -> Instance:
        if id(node) in add_from and not claim.add_from:
            claim.add_from = add_from[id(node)]
            claim.notes += (f"the residual add ending {claim.add_from} (fused ahead)",)
        return claim

    def ops_under(node: Node) -> set[str]:
        if id(node) not in subtree_ops:
            names: set[str] = set()
            for child in node.children:
                if child.scope is None:
                    names.add(child.name)
                names |= ops_under(child)
            subtree_ops[id(node)] = names
        return subtree_ops[id(node)]

    def classify(node: Node) -> tuple[int, Instance] | Unsupported | None:
        chain = []
        n: Node | None = node
        while n is not None:
            chain.append(n)
            n = n.parent
        chain.reverse()  # outermost first
        for i, n in enumerate(chain):
            if n.scope is None:
                continue
            if id(n) in paired:  # linear + GELU or ReLU, or a rotary function + the attention after it
                inst = paired[id(n)]
                return id(inst), by_key.setdefault(id(inst), inst)
            claim = recognize_scope(n, [c for c in chain[i + 1:] if c.scope is None], ops_under(n),
                                    default_dtype, fuse_mlp, id(n) in norms_after_add)
            if isinstance(claim, Unsupported):
                return claim
            if claim is not None:
                return id(n), by_key.setdefault(id(n), claimed(n, claim))
        for n in chain:
            if n.scope is not None or n.name.startswith(SCOPE_PREFIX):
                continue
            if id(n) in paired:
                inst = paired[id(n)]
                return id(inst), by_key.setdefault(id(inst), _placed(inst, n))
            if id(n) in add_before:  # the add counts for the norm scope it is fused with
                norm = add_before[id(n)]
                claim = by_key.get(id(norm)) or recognize_scope(norm, [], ops_under(norm), default_dtype, fuse_mlp,
                                                                 True)
                if isinstance(claim, Instance):
                    return id(norm), by_key.setdefault(id(norm), claimed(norm, claim))
            found = by_key.get(id(n)) or recognize_op(n, default_dtype)
            if isinstance(found, Unsupported):
                return found
            if found is not None:
                return id(n), by_key.setdefault(id(n), _placed(found, n))
        return None

    for root in roots:
        for node in walk(root):
            for kernel_name, us in time_units(node, time_kind):
                if us <= 0:
                    continue
                result.total_us += us
                owner = op_owner(node, op_problems) if op_problems else None
                if owner is not None:
                    result.op_times[owner] = result.op_times.get(owner, 0.0) + us
                    continue
                claim = classify(node)
                if claim is None and time_kind == "gpu" and is_gemm_kernel(kernel_name):
                    claim = _gemm_kernel(node, kernel_name, default_dtype, by_key)
                if isinstance(claim, tuple):
                    times[claim[0]] += us
                else:
                    label = claim.label if isinstance(claim, Unsupported) else _uncovered_label(node, kernel_name)
                    result.uncovered[label] = result.uncovered.get(label, 0.0) + us
    result.instances = [(inst, times[key]) for key, inst in by_key.items() if times[key] > 0]
    return result


def _placed(inst: Instance, node: Node) -> Instance:
    """The instance with the qualname of the innermost module around ``node``."""
    if inst.module:
        return inst
    n = node.parent
    while n is not None:
        if n.scope is not None and n.scope.kind == "module":
            inst.module = n.scope.name
            break
        n = n.parent
    return inst


def _gemm_kernel(node: Node, kernel_name: str, default_dtype: str,
                 by_key: dict[int, Instance]) -> tuple[int, Instance] | Unsupported:
    """A GEMM-named kernel under no recognized op: read (M,N,K) from the two matrix operands
    of the nearest op (the launching op, or the op above a runtime launch event)."""
    op: Node | None = node
    while op is not None and (op.scope is not None or len([s for s in op.shapes if len(s) >= 2]) < 2):
        op = None if op.name.startswith(SCOPE_PREFIX) else op.parent
    if op is not None:
        if id(op) in by_key:
            return id(op), by_key[id(op)]
        mats = [s for s in op.shapes if len(s) >= 2]
        found = matmul_shape(mats[0], mats[1]) or matmul_shape(mats[-2], mats[-1])
        if found is not None:
            inst = _placed(Instance("matmul", default_dtype, [found], notes=(f"GEMM kernel under {op.name}",)), op)
            by_key[id(op)] = inst
            return id(op), inst
    return Unsupported(f"{_short(kernel_name)} (GEMM kernel, shape unknown)")


def _uncovered_label(node: Node, kernel_name: str) -> str:
    outermost = None
    n: Node | None = node
    while n is not None:
        if n.scope is None and not n.name.startswith(SCOPE_PREFIX):
            outermost = n
        n = n.parent
    return outermost.name if outermost is not None else _short(kernel_name)


def _short(name: str, limit: int = 80) -> str:
    return name if len(name) <= limit else name[: limit - 3] + "..."


# ------------------------------------------------------------------ one typical pass
def typical_pass(roots: list[Node]) -> Node | None:
    """The profiled passes merged into one: each op's self time, and each of its kernels' time,
    is its median over the passes.  A CPU op preempted once in a busy machine (or one slow
    kernel) then moves nothing, while an op slow in most passes (a real regression) still
    shows.  None when the passes did not run the same ops in the same order (then the caller
    averages them as they are)."""
    if len(roots) < 2:
        return None
    signature = _pass_signature(roots[0])
    if any(_pass_signature(r) != signature for r in roots[1:]):
        return None
    return _median_node(roots)


def _pass_signature(root: Node) -> list[tuple]:
    out: list[tuple] = []

    def visit(node: Node, depth: int) -> None:
        label = node.scope.name if node.scope is not None else node.name
        out.append((depth, label, len(node.children), tuple(k for k, _ in node.kernels)))
        for child in node.children:
            visit(child, depth + 1)

    for child in root.children:  # the root's own name holds the pass index
        visit(child, 0)
    return out


def _median_node(nodes: list[Node]) -> Node:
    first = nodes[0]
    merged = Node(name=first.name, shapes=first.shapes, dtypes=first.dtypes, concrete=first.concrete,
                  self_us=median([n.self_us for n in nodes]), scope=first.scope,
                  kernels=[(name, median([n.kernels[i][1] for n in nodes])) for i, (name, _) in enumerate(first.kernels)])
    for children in zip(*(n.children for n in nodes)):
        merged.add(_median_node(list(children)))
    return merged


def _steady(roots: list[Node], iters: int) -> tuple[list[Node], int]:
    """``roots`` as one typical pass when they can be merged (``typical_pass``), else as given."""
    merged = typical_pass(roots) if len(roots) == max(1, iters) else None
    return ([merged], 1) if merged is not None else (roots, iters)


# ------------------------------------------------------------------ plan
def build_plan(roots: list[Node], *, model: str, device: str, time_kind: str, dtype: str,
               input_shape: list[int], iters: int, fuse_mlp: bool = False, device_name: str = "",
               fuse_rotary: bool = False) -> Plan:
    """Group the attributed time by (kind, dtype) into plan problems, per forward pass."""
    roots, iters = _steady(roots, max(1, iters))
    att = attribute(roots, time_kind=time_kind, default_dtype=dtype, fuse_mlp=fuse_mlp, fuse_rotary=fuse_rotary)
    total = att.total_us / iters

    @dataclass
    class Group:
        time: float = 0.0
        shapes: dict[tuple, list] = field(default_factory=dict)  # key -> [shape, calls, time]
        modules: list[str] = field(default_factory=list)
        module_time: dict[str, float] = field(default_factory=dict)
        module_calls: dict[str, dict[tuple, float]] = field(default_factory=dict)
        notes: list[str] = field(default_factory=list)
        add_from: dict[str, str] = field(default_factory=dict)

    groups: dict[tuple[str, str], Group] = {}
    for inst, us in att.instances:
        g = groups.setdefault((inst.kind, inst.dtype), Group())
        g.time += us
        weights = [shape_weight(s) * mult for s, mult in inst.shapes]
        for (shape, mult), w in zip(inst.shapes, weights):
            key = tuple(shape.items())
            entry = g.shapes.setdefault(key, [shape, 0, 0.0])
            entry[1] += mult
            entry[2] += us * w / sum(weights)
            # the root module's own share (qualname "") too: the placement check needs all of it
            calls = g.module_calls.setdefault(inst.module or "", {})
            calls[key] = calls.get(key, 0.0) + mult
        if inst.module and inst.module not in g.modules:
            g.modules.append(inst.module)
        g.module_time[inst.module or ""] = g.module_time.get(inst.module or "", 0.0) + us
        if inst.module and inst.add_from:
            g.add_from[inst.module] = inst.add_from
        for note in inst.notes:
            if note not in g.notes:
                g.notes.append(note)

    problems: list[PlanProblem] = []
    seen_kinds: dict[str, int] = defaultdict(int)
    for (kind, dt), g in sorted(groups.items(), key=lambda kv: -kv[1].time):
        seen_kinds[kind] += 1
        name = kind if seen_kinds[kind] == 1 else f"{kind}_{seen_kinds[kind]}"
        entries = sorted(g.shapes.values(), key=lambda e: -e[2])
        index = {tuple(e[0].items()): i for i, e in enumerate(entries)}
        problems.append(PlanProblem(
            name=name, kind=kind, dtype=dt,
            shapes=[e[0] for e in entries],
            calls=[max(1, round(e[1] / iters)) for e in entries],
            time_us=g.time / iters,
            fraction=_fraction(g.time / iters, total),
            modules=g.modules,
            module_time_us={m: t / iters for m, t in g.module_time.items()},
            module_calls={m: [[index[k], c / iters] for k, c in calls.items()] for m, calls in g.module_calls.items()},
            add_from=g.add_from,
            note="; ".join(g.notes[:6])))

    # every uncovered op by name (the largest twelve and "(N other ops)" before: the report's
    # table promised every one)
    uncovered = [UncoveredTime(label, us / iters, _fraction(us / iters, total))
                 for label, us in sorted(att.uncovered.items(), key=lambda kv: -kv[1])]
    _cap_fractions([*problems, *uncovered])
    return Plan(model=model, device=device, time_kind=time_kind, dtype=dtype, input_shape=list(input_shape),
                total_time_us=total, problems=problems, uncovered=uncovered, device_name=device_name,
                created=datetime.now(timezone.utc).isoformat(timespec="seconds"))


def _fraction(part: float, total: float) -> float:
    return min(1.0, part / total) if total > 0 else 0.0


def _cap_fractions(items: list[Any]) -> None:
    """Floating-point sums of shares of one total can come out a hair above 1 (in any
    summation order); take the excess, with a margin, off the largest share so that the
    plan's fractions sum to at most 1."""
    margin = 1e-12
    if items and sum(i.fraction for i in items) > 1.0 - margin:
        largest = max(items, key=lambda i: i.fraction)
        excess = sum(i.fraction for i in items) - (1.0 - margin)
        largest.fraction = max(0.0, largest.fraction - excess)


# ------------------------------------------------------------------ entry point
def trace_model(model: nn.Module, inputs: tuple, *, on_gpu: bool, warmup: int = DEFAULT_WARMUP,
                iters: int = DEFAULT_ITERS, captured: bool = False) -> list[Node]:
    """Run ``warmup`` untimed forward passes, then profile ``iters`` of them; one tree root
    per profiled pass.  ``captured``: the passes run ``as_captured``."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if on_gpu:
        activities.append(torch.profiler.ProfilerActivity.CUDA)

    def sync() -> None:
        if on_gpu:
            torch.cuda.synchronize()

    with torch.no_grad(), intra_op_threads(None if on_gpu else 1), as_captured(captured):
        for _ in range(max(0, warmup)):
            model(*inputs)
        sync()
        tracer = Tracer(model)
        with filtered_stderr(), tracer, torch.profiler.profile(activities=activities, record_shapes=True) as prof:
            for i in range(max(1, iters)):
                with torch.profiler.record_function(f"{FORWARD_LABEL}{i}"):
                    model(*inputs)
            sync()
    events = prof.events()
    carried = not events or getattr(events[0], "input_dtypes", None) is not None  # (not on PyTorch 2.11)
    return events_to_tree(events, tracer.calls, None if carried else recorded_dtypes(prof))


@contextlib.contextmanager
def as_captured(enabled: bool = True) -> Iterator[None]:
    """Forward passes as a CUDA graph capture runs them (``apply(..., cuda_graphs=True)``):
    ``torch.cuda.is_current_stream_capturing()`` answers True, so that libraries take the path
    they take while a stream captures.  transformers cannot read the padding mask's values then
    (a host sync), so it builds the whole attention mask and calls attention with it: profiled
    this way, the plan has the ``attention_masked`` problems the captured model runs.  Nothing
    is captured; the kernels run as usual."""
    if not enabled:
        yield
        return
    real = torch.cuda.is_current_stream_capturing
    torch.cuda.is_current_stream_capturing = lambda: True
    try:
        yield
    finally:
        torch.cuda.is_current_stream_capturing = real


@contextlib.contextmanager
def intra_op_threads(n: int | None) -> Iterator[None]:
    """Run with ``n`` intra-op threads (None: as set).  A CPU profile runs on one: an op that
    fans out to worker threads has a self time that includes waiting for workers the OS has
    descheduled, so on a busy machine such ops took a scheduler quantum each (a 3 ms forward
    measured 140 ms, every share wrong); on one thread an op's time is its own work."""
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def profile_model(loaded: LoadedModel, *, device: str | None = None, dtype: torch.dtype | None = None,
                  warmup: int = DEFAULT_WARMUP, iters: int = DEFAULT_ITERS, fuse_mlp: bool = False,
                  captured: bool = False, fuse_rotary: bool = False) -> Plan:
    """Profile ``iters`` forward passes of the loaded model (after ``warmup`` untimed ones)
    and return its plan.  ``captured``: the passes run as a CUDA graph capture runs them
    (``as_captured``), for a model that will run in CUDA-graph mode.  A problem that ``apply``
    finds no place for in the model is marked unsupported, with the reason, and so is one whose op
    takes none of its calls when the patched copy runs a forward on the same inputs (``placement``;
    that forward costs about one more pass of the model)."""
    device = device or loaded.device
    dtype = dtype or loaded.dtype
    on_gpu = str(device).startswith("cuda")
    inputs = loaded.make_inputs(0)
    roots = trace_model(loaded.model, inputs, on_gpu=on_gpu, warmup=warmup, iters=iters, captured=captured)
    plan = build_plan(roots, model=loaded.spec, device="cuda" if on_gpu else "cpu",
                      time_kind="gpu" if on_gpu else "cpu", dtype=dtype_name(dtype),
                      input_shape=loaded.input_shape, iters=max(1, iters), fuse_mlp=fuse_mlp,
                      device_name=device_label(device), fuse_rotary=fuse_rotary)
    from .integrate.placement import mark_placement

    mark_placement(plan, loaded.model, inputs, captured)
    return plan


def device_label(device: str) -> str:
    if str(device).startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return f"CPU ({platform.processor() or platform.machine()}), CPU op time on one thread"


# ------------------------------------------------------------------ per-problem times of a patched model
@dataclass
class ProblemTimes:
    """Where the time of a (patched) model goes, per plan problem, per forward pass."""

    time_kind: str  # "gpu" | "cpu", as in a plan
    total_us: float
    problems: dict[str, float]  # plan problem -> time (its custom op's time and recognized time)
    op_us: dict[str, float]  # plan problem -> the part of it spent in the run's custom op
    uncovered_us: float  # time that maps to no plan problem
    warmup: int = DEFAULT_WARMUP
    iters: int = DEFAULT_ITERS
    uncovered_ops: dict[str, float] = field(default_factory=dict)  # op -> time, per forward pass


def problem_times(roots: list[Node], plan: Plan, *, time_kind: str, op_problems: dict[str, str] | None = None,
                  iters: int = 1) -> ProblemTimes:
    """Attribute a profile to ``plan``'s problems: a custom op's time to its problem, a
    recognized instance to the plan problem of the same kind and dtype, the rest uncovered."""
    roots, steady_iters = _steady(roots, max(1, iters))
    fuse_mlp = any(p.kind == "fused_mlp" for p in plan.problems)
    fuse_rotary = any(p.kind == "attention_rotary" for p in plan.problems)
    att = attribute(roots, time_kind=time_kind, default_dtype=plan.dtype, fuse_mlp=fuse_mlp,
                    op_problems=op_problems, fuse_rotary=fuse_rotary)
    by_kind: dict[tuple[str, str], str] = {}
    for p in plan.problems:
        by_kind.setdefault((p.kind, p.dtype), p.name)
    names = {p.name for p in plan.problems}
    times = {p.name: 0.0 for p in plan.problems}
    ops = {p.name: 0.0 for p in plan.problems}
    uncovered_ops = dict(att.uncovered)
    for name, us in att.op_times.items():
        if name in names:
            times[name] += us
            ops[name] += us
        else:
            uncovered_ops[name] = uncovered_ops.get(name, 0.0) + us
    for inst, us in att.instances:
        name = by_kind.get((inst.kind, inst.dtype))
        if name is None:
            label = f"{inst.kind} ({inst.dtype}, not in the plan)"
            uncovered_ops[label] = uncovered_ops.get(label, 0.0) + us
        else:
            times[name] += us
    uncovered = sum(uncovered_ops.values())
    per = steady_iters
    return ProblemTimes(time_kind=time_kind, total_us=att.total_us / per,
                        problems={k: v / per for k, v in times.items()}, op_us={k: v / per for k, v in ops.items()},
                        uncovered_us=uncovered / per, iters=max(1, iters),
                        uncovered_ops={k: v / per for k, v in uncovered_ops.items()})


def profile_problem_times(model: nn.Module, inputs: tuple, plan: Plan, *, device: str,
                          op_problems: dict[str, str] | None = None, warmup: int = DEFAULT_WARMUP,
                          iters: int = DEFAULT_ITERS) -> ProblemTimes:
    """Profile ``model`` (typically patched by ``autokernel.apply``) like ``profile_model``
    does and return its time per plan problem.  ``op_problems`` maps profiler op names
    (``autokernel::<name>_<hash>``) to plan problem names."""
    on_gpu = str(device).startswith("cuda")
    roots = trace_model(model, inputs, on_gpu=on_gpu, warmup=warmup, iters=iters)
    out = problem_times(roots, plan, time_kind="gpu" if on_gpu else "cpu", op_problems=op_problems, iters=iters)
    out.warmup = max(0, warmup)
    return out
