"""Appliers for the linear epilogue kinds, ``linear_gelu``, ``linear_relu`` and ``linear_relu2``
(one code path; an ``Epilogue`` says which activation modules a kind takes and the op's arguments after
the bias): a module whose forward runs a linear, then the activation module on its
output, then (optionally) a chain of other children, each on the output of the one before
(GPT-2's ``GPT2MLP``: ``c_fc``, ``act``, ``c_proj``, ``dropout``; BERT's ``BertIntermediate``:
``dense``, ``intermediate_act_fn``; ViT's ``ViTMLP``; BERT's ``BertPredictionHeadTransform``:
``dense``, ``transform_act_fn``, ``LayerNorm``).  The linear and the activation become one call
of the op; the rest of the chain runs as it is.

A module whose forward does more (BART's and Whisper's layers: attention, residual adds and
``self.activation_fn(self.fc1(h))``; ConvNeXt's ``x = self.pwconv1(x); x = self.act(x)``; OPT's
decoder layers, the same two statements with an ``nn.ReLU``) has its forward's source rewritten
instead (``rewrite``): each such pair of its children, the activation confirmed by a probe,
calls ``linear_epilogue_call``, which runs the op for the calls it was judged on and the two
children otherwise.  The linear's output must feed only the activation: the pair is matched
only nested, or as two consecutive statements that reassign one name.  The pair may also be
in another method of the module's class that the forward reaches through ``self.<name>``,
called or handed on as a bound method, or in one those reach (ALBERT's layer passes
``self.ff_chunk``, which holds ``ffn`` and its GELU, to ``apply_chunking_to_forward``): each
method where a pair is found is rewritten the same way (its signature kept), and the forward
only where it holds one itself.  A kind's activation may
also be a function the forward calls by its name instead of a child (``torch.relu`` /
``F.relu`` / ``nn.functional.relu`` for ``linear_relu``, with no keywords), or such a call inside
another one (``linear_relu2``: ``torch.square(torch.relu(...))``, RWKV's feed-forward
``torch.square(torch.relu(self.key(x)))``); each name must resolve to its function in the
globals of the function that calls it.  A ``linear_relu2`` activation module is a leaf module
without parameters or buffers that computes relu(x)**2 exactly on a probe of signed values
(transformers' ``ReLUSquaredActivation``, ``ACT2FN["relu2"]``: Nemotron's and Arcee's MLPs);
then, as for every kind, its pair must match the reference.

What the forward does is read from one probe call of the module's own forward on a small random
input, with hooks on its children: every child runs once, the linear on the module's input, each
next child on the output of the one before (the same tensor, not a copy), and the module
returns the last child's output.  The result must also match the problem's reference followed
by the rest of the chain.  Otherwise the module is left alone.  In training mode (dropout) and
for any call the kernel was not judged on (dtype, width, extra arguments) the original forward
runs.

GPT-2's ``Conv1D`` stores its weight [K, N] (``x @ W + b``): the op takes nn.Linear's [N, K], so
the Conv1D gets a contiguous transposed copy as a non-persistent buffer (inference only: later
changes of the weight are not seen; it costs one more copy of that weight in memory).

The op takes a bias b[N].  A bias-free ``nn.Linear`` (T5's ``wi``, before its ReLU) gets one
made of zeros, once, in its weight's dtype and on its device, as a non-persistent buffer (``.to``
moves it, ``state_dict`` leaves it out): the kernel judged on drawn biases computes
``act(x @ w^T + 0)``, which is the module's ``act(x @ w^T)``.  The probe compares the module's
forward with the reference on that zero bias, so the fused call is what was checked.  Only the
pair's linear must be in the run's dtype (T5 keeps ``wo`` in fp32 in a bf16 model).
"""
from __future__ import annotations

import ast
import types
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn as nn

from ..recognize import gelu_form, is_relu2_module, is_relu_module, linear_dims
from .patching import PROBE_TOLERANCE, _pick, _probe_input, _reference, _rel_error, _swap_class, rewrap
from .rewrite import compile_forward, reached_methods, statement_lists
from .selection import KernelOp

WEIGHT_NK = "_autokernel_weight_nk"
ZERO_BIAS = "_autokernel_zero_bias"


@dataclass(frozen=True)
class Epilogue:
    """What sets one linear epilogue kind apart.  ``forms(module)``: for an activation
    module of the kind, the op's arguments after the bias that the probe may find it computes,
    the one its class says first (GELU: ``(tanh,)``, then the other form); ``()`` for any other
    module.  ``functions``: the torch functions a forward may call the activation by instead of
    a module (ReLU: ``torch.relu``, ``F.relu``), each of one form, ``()``.  ``outer``: where
    the activation is one of ``functions`` inside a call of one of these (squared ReLU:
    ``torch.square(torch.relu(v))``), these; ``()`` where the inner call alone is it."""

    kind: str
    activation: str
    forms: Callable[[nn.Module], tuple[tuple, ...]]
    functions: tuple[Callable, ...] = ()
    outer: tuple[Callable, ...] = ()

    def call(self, v: Any) -> Any:
        """The activation written as calls, on ``v`` (what a rewritten forward runs where the op
        does not take the call)."""
        v = self.functions[0](v)
        return self.outer[0](v) if self.outer else v


def _gelu_forms(m: nn.Module) -> tuple[tuple, ...]:
    tanh = gelu_form(m)
    return () if tanh is None else ((tanh,), (not tanh,))


EPILOGUES = {e.kind: e for e in (Epilogue("linear_gelu", "GELU", _gelu_forms),
                                 Epilogue("linear_relu", "ReLU", lambda m: ((),) if is_relu_module(m) else (),
                                          (torch.relu, torch.nn.functional.relu)),
                                 Epilogue("linear_relu2", "squared ReLU",
                                          lambda m: ((),) if is_relu2_module(m) else (),
                                          (torch.relu, torch.nn.functional.relu), (torch.square,)))}
CALLED = "<call>"  # the activation of a pair in which the forward calls one of the kind's ``functions``


def activation_child(m: nn.Module, ep: Epilogue) -> tuple[str, tuple] | None:
    """(name, form its class says) of ``m``'s one activation child of ``ep``'s kind, when ``m``
    also has a linear child; which linear feeds it, and what comes after, is learnt by
    ``traced_chain``."""
    if linear_dims(m) is not None or ep.forms(m):
        return None
    children = dict(m.named_children())
    acts = [n for n, c in children.items() if ep.forms(c)]
    if len(acts) != 1 or not any(linear_dims(c) is not None for c in children.values()):
        return None
    return acts[0], ep.forms(children[acts[0]])[0]


def traced_chain(m: nn.Module, x: torch.Tensor) -> list[str] | None:
    """The children ``m.forward(x)`` runs, in order, when it is a plain chain: each child called
    once with one positional tensor, the first on ``x``, each next one on the output of the one
    before, the forward returning the last output.  None for anything else."""
    calls: list[tuple[str, tuple, dict, Any]] = []
    handles = [c.register_forward_hook(lambda mod, args, kwargs, out, n=n: calls.append((n, args, kwargs, out)),
                                       with_kwargs=True)
               for n, c in m.named_children()]
    try:
        with torch.no_grad():
            result = type(m).forward(m, x)
    except Exception:  # a forward that does not take one tensor is not a chain
        return None
    finally:
        for h in handles:
            h.remove()
    previous: Any = x
    for _, args, kwargs, out in calls:
        if kwargs or len(args) != 1 or args[0] is not previous or not isinstance(out, torch.Tensor):
            return None
        previous = out
    names = [n for n, *_ in calls]
    if not calls or result is not previous or len(set(names)) != len(names):
        return None
    return names


def _epilogue_members(k: KernelOp, lin: str, form: tuple, rest: tuple[str, ...], K: int, N: int, transposed: bool,
                      base: type) -> dict[str, Any]:
    op, dtype = k.op, k.dtype
    base_forward = base.forward

    def forward(self, x, *args, **kwargs):
        if (not args and not kwargs and not self.training and isinstance(x, torch.Tensor) and x.dtype == dtype
                and x.dim() >= 1 and x.shape[-1] == K and x.numel() > 0):
            y = op(x.reshape(-1, K), *_op_weight_bias(getattr(self, lin), transposed), *form).reshape(*x.shape[:-1], N)
            for name in rest:
                y = getattr(self, name)(y)
            return y
        return base_forward(self, x, *args, **kwargs)

    return {"forward": forward}


def _apply_linear_epilogue(model, k, done, replaced, skipped, probed) -> None:
    ep, dtype = EPILOGUES[k.kind], k.dtype
    for name, m in model.named_modules():
        if id(m) in done or _pick([k], ep.kind, name) is None:
            continue
        found = activation_child(m, ep)
        if found is None:  # the activation may be a function the forward calls
            if ep.functions and linear_dims(m) is None and _rewrite_calls(m, k, ep, done, probed):
                replaced.append((name, ep.kind))
            elif ep.kind == "linear_gelu" and _conv_gelus(m, k, done, probed):
                replaced.append((name, ep.kind))  # F.gelu(self.<conv>(e)): Whisper's encoder stems
            continue
        act_name, named_form = found
        base = type(m)
        if not any(_takes(c, dtype) for c in m.children()):
            skipped.append((name, f"{ep.kind}: no linear's weight (and bias) is {dtype}"))
            continue
        x, order = _trace_from_each_linear(m, act_name, dtype)
        if order is None:
            if not _rewrite_calls(m, k, ep, done, probed):
                skipped.append((name, f"{ep.kind}: {base.__name__}.forward is neither {act_name}(linear(x)) "
                                      f"followed by a chain of children (probe) nor calls self.{act_name}(self.<linear>(...)), "
                                      f"in it or in a method it reaches"))
                continue
            replaced.append((name, ep.kind))
            continue
        lin = getattr(m, order[0])
        K, N, transposed = linear_dims(lin)
        rest = tuple(order[2:])
        key = (base, ep.kind, named_form, tuple(order), lin.bias is None)
        if key not in probed:  # the form the class name says first, then the others
            probed[key] = next((form for form in ep.forms(getattr(m, act_name))
                                if _chain_matches(m, x, lin, ep.kind, form, rest, transposed)), None)
        if probed[key] is None:
            skipped.append((name, f"{ep.kind}: {base.__name__} computes something else (probe mismatch)"))
            continue
        form = probed[key]
        _keep_op_tensors(lin, N, transposed)
        _swap_class(m, (ep.kind, k.identity, order[0], form, rest, K, N, transposed),
                    _epilogue_members(k, order[0], form, rest, K, N, transposed, base))
        done.update({id(m), id(lin), id(getattr(m, act_name))})
        replaced.append((name, ep.kind))


def _conv_gelus(m: nn.Module, k: KernelOp, done: set[int], probed: dict) -> bool:
    from .conv_gelus import rewrite_conv_gelus  # it reads this module's call matchers

    return rewrite_conv_gelus(m, k, done, probed)


def _trace_from_each_linear(m: nn.Module, act_name: str, dtype: torch.dtype) -> tuple[torch.Tensor, list[str] | None]:
    """Probe the forward with an input as wide as each linear child's input (of those in
    ``dtype``); the first trace that starts with such a linear and then ``act_name`` wins."""
    x = None
    for width in dict.fromkeys(linear_dims(c)[0] for c in m.children() if _takes(c, dtype)):
        x = _probe_input(width, m, dtype)[None]
        order = traced_chain(m, x)
        if order is not None and len(order) >= 2 and order[1] == act_name and _takes(getattr(m, order[0]), dtype):
            return x, order
    return x, None


def _takes(lin: nn.Module, dtype: torch.dtype) -> bool:
    """Is ``lin`` a linear whose weight (and bias, if it has one) the op of ``dtype`` takes?"""
    return (linear_dims(lin) is not None and lin.weight.dtype == dtype
            and (lin.bias is None or lin.bias.dtype == dtype))


def _probe_bias(lin: nn.Module, n: int) -> torch.Tensor:
    """The bias the op will be handed: the linear's own, else zeros as ``_keep_op_tensors`` makes them."""
    return lin.bias if lin.bias is not None else torch.zeros(n, dtype=lin.weight.dtype, device=lin.weight.device)


def _keep_op_tensors(lin: nn.Module, n: int, transposed: bool) -> None:
    """What the op takes and the linear does not hold, made once (inference only): Conv1D's
    weight as [N, K], a bias-free linear's zero bias."""
    if transposed and WEIGHT_NK not in lin._buffers:
        lin.register_buffer(WEIGHT_NK, lin.weight.detach().t().contiguous(), persistent=False)
    if lin.bias is None and ZERO_BIAS not in lin._buffers:
        lin.register_buffer(ZERO_BIAS, _probe_bias(lin, n).detach(), persistent=False)


def _op_weight_bias(lin: nn.Module, transposed: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The op's w[N, K] and b[N] for a switched linear (``_keep_op_tensors`` ran)."""
    w = getattr(lin, WEIGHT_NK) if transposed else lin.weight
    return w, (lin.bias if lin.bias is not None else getattr(lin, ZERO_BIAS))


def _chain_matches(m: nn.Module, x: torch.Tensor, lin: nn.Module, kind: str, form: tuple, rest: tuple[str, ...],
                   transposed: bool) -> bool:
    """Does the module's own forward compute the reference (on the [N, K] weight), then ``rest``?"""
    with torch.no_grad():
        got = type(m).forward(m, x)
        w = lin.weight.t() if transposed else lin.weight
        want = _reference(kind)(x, w, _probe_bias(lin, w.shape[0]), *form)
        for name in rest:
            want = getattr(m, name)(want)
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        return False
    return _rel_error(want, got) <= PROBE_TOLERANCE.get(x.dtype, 1e-4)


# ------------------------------------------------------------------ act(linear(x)) inside a longer forward
CALL_HELPER = "_autokernel_linear_epilogue"  # the name a rewritten forward calls ``linear_epilogue_call`` by


def pairs_attribute(kind: str) -> str:
    """The class attribute of a rewritten forward's pairs of ``kind``: (linear, act) -> what the op
    needs (one per kind: a class rewritten for one kind and then another keeps both)."""
    return f"_autokernel_{kind}_pairs"


def linear_epilogue_call(module: nn.Module, kind: str, lin_name: str, act_name: str, x: Any) -> Any:
    """``module.<act>(module.<lin>(x))`` (``torch.relu(module.<lin>(x))`` for ``CALLED``, or
    ``torch.square(torch.relu(...))`` for linear_relu2's), through ``kind``'s op for the calls it
    was judged on."""
    lin = getattr(module, lin_name)
    fused = getattr(type(module), pairs_attribute(kind), {}).get((lin_name, act_name))
    if (fused is not None and isinstance(x, torch.Tensor) and x.dtype == fused[1] and x.dim() >= 1
            and x.shape[-1] == fused[3] and x.numel() > 0):
        op, _, form, K, N, transposed = fused
        return op(x.reshape(-1, K), *_op_weight_bias(lin, transposed), *form).reshape(*x.shape[:-1], N)
    act = EPILOGUES[kind].call if act_name == CALLED else getattr(module, act_name)
    return act(lin(x))


def _self_call(node: ast.AST, self_name: str) -> tuple[str, ast.expr] | None:
    """(child, argument) of ``self.<child>(argument)``, one positional argument, no keywords."""
    if (isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords
            and not isinstance(node.args[0], ast.Starred) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == self_name):
        return node.func.attr, node.args[0]
    return None


def _resolve(expr: ast.expr, namespace: dict[str, Any]) -> Any:
    """What a dotted name (``torch.relu``, ``nn.functional.relu``) is in ``namespace``; None if not one."""
    if isinstance(expr, ast.Name):
        return namespace.get(expr.id)
    if isinstance(expr, ast.Attribute):
        owner = _resolve(expr.value, namespace)
        return getattr(owner, expr.attr, None) if isinstance(owner, types.ModuleType) else None
    return None


def activation_call(self_name: str, namespace: dict[str, Any], functions: tuple[Callable, ...],
                    outer: tuple[Callable, ...] = ()):
    """A matcher: (activation, argument) of ``self.<act>(argument)``, or (``CALLED``, argument) of
    a call of one of ``functions`` by its name in ``namespace`` (the forward's globals), inside a
    call of one of ``outer`` where that is given (``torch.square(torch.relu(argument))``); each call
    with one positional argument, no keywords (``F.relu(x, inplace=True)`` is left alone)."""
    def called(node: ast.AST, among: tuple[Callable, ...]) -> ast.expr | None:
        if (not isinstance(node, ast.Call) or len(node.args) != 1 or node.keywords
                or isinstance(node.args[0], ast.Starred)):
            return None
        fn = _resolve(node.func, namespace)
        return node.args[0] if any(fn is f for f in among) else None

    def match(node: ast.AST) -> tuple[str, ast.expr] | None:
        found = _self_call(node, self_name)
        if found is not None or not functions:
            return found
        arg = called(node, outer) if outer else node
        arg = called(arg, functions) if arg is not None else None
        return (CALLED, arg) if arg is not None else None

    return match


def _helper_call(self_name: str, kind: str, lin: str, act: str, arg: ast.expr) -> ast.Call:
    return ast.Call(func=ast.Name(CALL_HELPER, ast.Load()),
                    args=[ast.Name(self_name, ast.Load()), ast.Constant(kind), ast.Constant(lin), ast.Constant(act), arg],
                    keywords=[])


class _ActOfLinear(ast.NodeTransformer):
    """``self.<act>(self.<lin>(e))`` (or ``torch.relu(self.<lin>(e))``,
    ``torch.square(torch.relu(self.<lin>(e)))``) -> the helper's call (BART's and Whisper's
    layers, RWKV's feed-forward)."""

    def __init__(self, self_name: str, kind: str, pairs: set[tuple[str, str]], act_of: Callable):
        self.self_name, self.kind, self.pairs, self.act_of, self.found = self_name, kind, pairs, act_of, set()

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        outer = self.act_of(node)
        inner = _self_call(outer[1], self.self_name) if outer else None
        if inner is not None and (inner[0], outer[0]) in self.pairs:
            self.found.add((inner[0], outer[0]))
            return _helper_call(self.self_name, self.kind, inner[0], outer[0], inner[1])
        return node


def _fuse_consecutive(body: list[ast.stmt], self_name: str, kind: str, pairs: set[tuple[str, str]], found: set,
                      act_of: Callable) -> None:
    """``v = self.<lin>(e)`` directly followed by ``v = self.<act>(v)`` (or ``v = torch.relu(v)``)
    -> ``v = helper(...)`` (ConvNeXt's and OPT's layers)."""
    i = 0
    while i + 1 < len(body):
        first, second = body[i], body[i + 1]
        lin = _self_call(first.value, self_name) if _assigns_one_name(first) else None
        act = act_of(second.value) if _assigns_one_name(second) else None
        if (lin and act and (lin[0], act[0]) in pairs and first.targets[0].id == second.targets[0].id
                and isinstance(act[1], ast.Name) and act[1].id == first.targets[0].id):
            first.value = _helper_call(self_name, kind, lin[0], act[0], lin[1])
            del body[i + 1]
            found.add((lin[0], act[0]))
        i += 1


def _assigns_one_name(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)


def _rewrite_calls(m: nn.Module, k: KernelOp, ep: Epilogue, done: set[int], probed: dict) -> bool:
    """Rewrite ``m``'s forward, and the methods of its class that the forward reaches
    (``rewrite.reached_methods``: ALBERT's ``ff_chunk``), so that each ``act(linear(x))`` of its
    children (a linear, an activation module of ``ep``'s kind or a call of one of its
    ``functions``, that the probe confirms) calls the op; False when none is found."""
    children = dict(m.named_children())
    acts = list(children.items()) + ([(CALLED, ep.call)] if ep.functions else [])
    pairs = {}
    for lin_name, lin in children.items():
        if id(lin) in done or not _takes(lin, k.dtype):
            continue
        dims = linear_dims(lin)
        for act_name, act in acts:
            forms = ((),) if act_name == CALLED else ep.forms(act)
            if not forms or id(act) in done:
                continue
            key = (type(lin), CALLED if act_name == CALLED else type(act), forms[0], dims[2], lin.bias is None,
                   f"{ep.kind} call")
            if key not in probed:
                x = _probe_input(dims[0], m, k.dtype)
                probed[key] = next((form for form in forms if _pair_matches(lin, act, x, ep.kind, form, dims[2])),
                                   None)
            if probed[key] is not None:
                pairs[(lin_name, act_name)] = (k.op, k.dtype, probed[key], *dims)
    if not pairs:
        return False
    shadowed = set(vars(m)) | set(children) | set(m._parameters) | set(m._buffers)
    members, found = {}, set()
    for method, fn, inner, tree, fdef in reached_methods(type(m), shadowed, (nn.Module, object)):
        self_name, here = fdef.args.args[0].arg, set()
        act_of = activation_call(self_name, inner.__globals__, ep.functions, ep.outer)
        for body in list(statement_lists(fdef)):
            _fuse_consecutive(body, self_name, ep.kind, set(pairs), here, act_of)
        visitor = _ActOfLinear(self_name, ep.kind, set(pairs), act_of)
        visitor.visit(fdef)
        here |= visitor.found
        new = rewrap(fn, compile_forward(inner, tree, {CALL_HELPER: linear_epilogue_call})) if here else None
        if new is not None:
            members[method] = new
            found |= here
    if not found:
        return False
    used = {pair: pairs[pair] for pair in sorted(found)}
    for lin_name, act_name in used:
        lin = children[lin_name]
        _, _, _, _, N, transposed = used[(lin_name, act_name)]
        _keep_op_tensors(lin, N, transposed)
        done.update({id(lin)} | ({id(children[act_name])} if act_name != CALLED else set()))
    _swap_class(m, (f"{ep.kind} calls", k.identity, tuple(sorted(used.items(), key=lambda kv: kv[0]))),
                {**members, pairs_attribute(ep.kind): used})
    return True


def _pair_matches(lin: nn.Module, act: nn.Module, x: torch.Tensor, kind: str, form: tuple, transposed: bool) -> bool:
    with torch.no_grad():
        got = act(lin(x))
        w = lin.weight.t() if transposed else lin.weight
        want = _reference(kind)(x, w, _probe_bias(lin, w.shape[0]), *form)
    return got.shape == want.shape and _rel_error(want, got) <= PROBE_TOLERANCE.get(x.dtype, 1e-4)
