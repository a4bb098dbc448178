"""Applier for ``shifted_windows``: a Swin layer's forward (transformers' ``SwinLayer``, found by
``recognize_windows.is_shifted_window_layer``) rewritten so that its window data movement is two
op calls.

In the forward's source (as an earlier applier may have rewritten it: the residual adds)::

    window_partition(self.cyclic_shift(x), self.window_size)
        -> _ak_window_partition(self, x, window_partition)           # op(x, Hp, Wp, window, shift, 0)
    self.cyclic_shift(window_reverse(a, self.window_size, hp, wp), reverse=True)
        -> _ak_window_reverse(self, a, hp, wp, window_reverse)       # op(a, hp, wp, window, shift, 1)
    self.maybe_pad(x, height, width)
        -> _ak_maybe_pad(self, x, height, width)

``shift`` is the layer's ``shift_size`` where it is positive (``cyclic_shift`` rolls only then),
else 0, and ``window`` its ``window_size``, both read at each call (``set_shift_and_window_size``
changes them for a small input).  ``_ak_maybe_pad`` hands ``x`` itself on, with zero pads, where
the grid is a multiple of the window already (``maybe_pad``'s ``F.pad`` by zeros is a copy of the
same values; nothing writes that tensor afterwards: the partition reads it, the rest reads its
shape and dtype); a grid that needs padding is padded by the layer's own ``maybe_pad``.  Both
rewrites must be found, or the class is left alone.  A call the op was not judged on (another
dtype, a window size that is a tensor while tracing, torch.compile handing the eager op to
inductor) runs the layer's own code.
"""
from __future__ import annotations

import ast
import copy
import inspect
import math
import types
from typing import Any, Callable

import torch

from ..recognize_windows import is_shifted_window_layer
from .ops import traced_as_original
from .patching import apply_rewritten_members, rewrap
from .rewrite import compile_forward, parse_forward

PARTITION, REVERSE, PAD = "_ak_window_partition", "_ak_window_reverse", "_ak_maybe_pad"


def window_helpers(k: Any) -> dict[str, Callable[..., Any]]:
    op, dtype = k.op, k.dtype

    def usable(layer: Any, x: Any) -> bool:
        return (isinstance(x, torch.Tensor) and x.dtype == dtype and x.numel() > 0
                and type(layer.window_size) is int and type(layer.shift_size) is int and layer.window_size > 0
                and not traced_as_original(op))

    def shift_of(layer: Any) -> int:
        return layer.shift_size if layer.shift_size > 0 else 0

    def partition(layer: Any, x: Any, window_partition: Callable) -> Any:
        if usable(layer, x) and x.dim() == 4 and x.shape[1] % layer.window_size == 0 \
                and x.shape[2] % layer.window_size == 0:
            return op(x, x.shape[1], x.shape[2], layer.window_size, shift_of(layer), 0)
        return window_partition(layer.cyclic_shift(x), layer.window_size)

    def reverse(layer: Any, windows: Any, height: Any, width: Any, window_reverse: Callable) -> Any:
        if (usable(layer, windows) and type(height) is int and type(width) is int and windows.dim() >= 2
                and height % layer.window_size == 0 and width % layer.window_size == 0
                and windows.numel() % (height * width * windows.shape[-1]) == 0):
            return op(windows, height, width, layer.window_size, shift_of(layer), 1)
        return layer.cyclic_shift(window_reverse(windows, layer.window_size, height, width), reverse=True)

    def maybe_pad(layer: Any, x: Any, height: Any, width: Any) -> Any:
        if usable(layer, x) and type(height) is int and type(width) is int \
                and height % layer.window_size == 0 and width % layer.window_size == 0:
            return x, (0, 0, 0, 0, 0, 0)
        return layer.maybe_pad(x, height, width)

    return {PARTITION: partition, REVERSE: reverse, PAD: maybe_pad}


def _is_self_attr(node: ast.expr, self_name: str, attr: str) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.value, ast.Name)
            and node.value.id == self_name)


def _self_call(node: ast.expr, self_name: str, method: str) -> bool:
    return isinstance(node, ast.Call) and _is_self_attr(node.func, self_name, method)


def _named_call(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name


def _helper(name: str, args: list[ast.expr]) -> ast.Call:
    return ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=args, keywords=[])


class _Windows(ast.NodeTransformer):
    def __init__(self, self_name: str):
        self.self_name = self_name
        self.found: dict[str, int] = {PARTITION: 0, REVERSE: 0, PAD: 0}

    def visit_Call(self, node: ast.Call) -> ast.expr:
        node = self.generic_visit(node)
        me = ast.Name(id=self.self_name, ctx=ast.Load())
        # window_partition(self.cyclic_shift(x), self.window_size)
        if (_named_call(node, "window_partition") and len(node.args) == 2 and not node.keywords
                and _self_call(node.args[0], self.self_name, "cyclic_shift") and len(node.args[0].args) == 1
                and not node.args[0].keywords and _is_self_attr(node.args[1], self.self_name, "window_size")):
            self.found[PARTITION] += 1
            return _helper(PARTITION, [me, node.args[0].args[0], ast.Name(id="window_partition", ctx=ast.Load())])
        # self.cyclic_shift(window_reverse(a, self.window_size, h, w), reverse=True)
        if (_self_call(node, self.self_name, "cyclic_shift") and len(node.args) == 1 and len(node.keywords) == 1
                and node.keywords[0].arg == "reverse" and isinstance(node.keywords[0].value, ast.Constant)
                and node.keywords[0].value.value is True and _named_call(node.args[0], "window_reverse")):
            inner = node.args[0]
            if len(inner.args) == 4 and not inner.keywords and _is_self_attr(inner.args[1], self.self_name, "window_size"):
                self.found[REVERSE] += 1
                return _helper(REVERSE, [me, inner.args[0], inner.args[2], inner.args[3],
                                         ast.Name(id="window_reverse", ctx=ast.Load())])
        # self.maybe_pad(x, height, width)
        if _self_call(node, self.self_name, "maybe_pad") and len(node.args) == 3 and not node.keywords:
            self.found[PAD] += 1
            return _helper(PAD, [me, *node.args])
        return node


def computes_shifted_windows(cls: type, names: dict[str, Any]) -> bool:
    """Do ``window_partition`` and ``window_reverse`` (as the forward's globals ``names`` hold them)
    and ``cls.cyclic_shift`` compute the problem's reference, both ways, on a small random grid
    (8 x 12, window 4, shift 2 and 0)?  The rewrite finds them by name only."""
    from ..problems import get_problem

    reference = get_problem("shifted_windows").reference
    partition, reverse, shift = names.get("window_partition"), names.get("window_reverse"), getattr(cls, "cyclic_shift", None)
    if not (callable(partition) and callable(reverse) and callable(shift)):
        return False
    x = torch.randn(2, 8, 12, 3, generator=torch.Generator().manual_seed(0))
    try:
        for s in (2, 0):
            layer = types.SimpleNamespace(shift_size=s, window_size=4)
            windows = partition(shift(layer, x), 4)
            back = shift(layer, reverse(windows, 4, 8, 12), reverse=True)
            if not (torch.equal(windows, reference(x, 8, 12, 4, s, 0))
                    and torch.equal(back, reference(windows.reshape(-1, 16, 3), 8, 12, 4, s, 1))):
                return False
    except Exception:  # noqa: BLE001 - a look-alike that cannot run on the probe is not Swin's
        return False
    return True


def rewritten_members(cls: type, helpers: dict[str, Callable[..., Any]]) -> dict[str, Callable] | None:
    """``cls.forward`` with its window partition, reverse and pad calling the helpers; None where
    the forward has no source, or not exactly one partition and one reverse of that form, or where
    the functions it calls by those names compute something else (``computes_shifted_windows``)."""
    forward = cls.forward
    inner = inspect.unwrap(forward)
    parsed = parse_forward(inner) if isinstance(inner, types.FunctionType) else None
    if parsed is None or not computes_shifted_windows(cls, inner.__globals__):
        return None
    tree, fdef = parsed
    rewriter = _Windows(fdef.args.args[0].arg)
    rewriter.visit(fdef)
    if rewriter.found[PARTITION] != 1 or rewriter.found[REVERSE] != 1 or rewriter.found[PAD] > 1:
        return None
    new = rewrap(forward, compile_forward(inner, tree, helpers))
    return None if new is None else {"forward": new}


def _apply_shifted_windows(model, k, done, replaced, skipped, probed) -> None:
    before = len(replaced)
    layers = {name for name, m in model.named_modules() if is_shifted_window_layer(m)}
    apply_rewritten_members(_Only(model, layers), k, "shifted_windows", "shifted_windows", window_helpers,
                            rewritten_members, probed, replaced)
    placed = {name for name, kind in replaced[before:]}
    for name in sorted(set(k.problem.modules) - placed):
        skipped.append((name, "shifted_windows: its forward has no window_partition(self.cyclic_shift(x), "
                              "self.window_size) and cyclic_shift(window_reverse(...), reverse=True) to rewrite"))


class _Only:
    """``model`` whose ``named_modules`` lists only ``names``."""

    def __init__(self, model: Any, names: set[str]):
        self.model, self.names = model, names

    def named_modules(self):
        return ((n, m) for n, m in self.model.named_modules() if n in self.names)


# ------------------------------------------------------------------ window_bias
GRID = "_autokernel_window_grid"  # on the attention module, from the layer's call to its own attention call
BIAS_CLASS = "_autokernel_window_bias"  # on an attention class whose forward takes the grid
MASK, BIAS = "_ak_window_mask", "_ak_window_bias"


def window_bias_helpers(k: Any) -> dict[str, Callable[..., Any]]:
    """The layer's ``get_attn_mask`` call hands the grid (padded height and width, window, shift)
    to its attention module and gives no mask, where the op can take it (the attention's class
    rewritten, the table of the judged dtype, Swin's index of window^4 entries); the attention's
    forward, given no mask and that grid, takes the op's mask in place of its bias + mask."""
    op, dtype = k.op, k.dtype

    def window_mask(layer: Any, height: Any, width: Any, *args: Any, **kwargs: Any) -> Any:
        attention = getattr(layer, "attention", None)
        if isinstance(attention, torch.nn.Module):
            attention.__dict__.pop(GRID, None)  # none left from a call that did not reach its attention
        bias = getattr(attention, "relative_position_bias", None)
        table = getattr(bias, "relative_position_bias_table", None)
        index = getattr(bias, "relative_position_index", None)
        window, shift = layer.window_size, layer.shift_size
        if (getattr(type(attention), BIAS_CLASS, False) and isinstance(table, torch.Tensor) and table.dtype == dtype
                and isinstance(index, torch.Tensor) and type(window) is int and type(shift) is int
                and type(height) is int and type(width) is int and window > 0 and index.numel() == window ** 4
                and height % window == 0 and width % window == 0 and not traced_as_original(op)):
            attention.__dict__[GRID] = (height, width, window, shift if shift > 0 else 0)
            return None
        return layer.get_attn_mask(height, width, *args, **kwargs)

    def window_bias(attention: Any, attention_mask: Any, input_shape: Any) -> Any:
        grid = attention.__dict__.pop(GRID, None)
        if grid is None or attention_mask is not None:
            return None
        height, width, window, shift = grid
        bias = attention.relative_position_bias
        batch = input_shape[0] // ((height // window) * (width // window))
        return op(bias.relative_position_bias_table, bias.relative_position_index, batch, height, width, window, shift)

    return {MASK: window_mask, BIAS: window_bias}


def _is_mask_test(node: ast.expr, name: str) -> bool:
    """``name is not None``."""
    return (isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == name
            and len(node.ops) == 1 and isinstance(node.ops[0], ast.IsNot) and isinstance(node.comparators[0], ast.Constant)
            and node.comparators[0].value is None)


def _assigned_names(stmts: list[ast.stmt]) -> set[str]:
    return {t.id for s in stmts if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)}


def rewritten_attention(cls: type, helpers: dict[str, Callable[..., Any]]) -> dict[str, Any] | None:
    """``cls.forward`` (Swin's attention) with ``rpb = self.relative_position_bias()`` and the
    ``if attention_mask is not None: combined = rpb + mask... else: combined = rpb`` after it
    taking the op's mask first; None where the forward has not exactly that."""
    forward = cls.forward
    inner = inspect.unwrap(forward)
    parsed = parse_forward(inner) if isinstance(inner, types.FunctionType) else None
    if parsed is None:
        return None
    tree, fdef = parsed
    me = fdef.args.args[0].arg
    params = [a.arg for a in fdef.args.args]
    if len(params) < 3 or not any(isinstance(s, ast.Assign) and "input_shape" in _assigned_names([s]) for s in fdef.body):
        return None
    mask = params[2]
    body = fdef.body
    for i in range(len(body) - 1):
        first, second = body[i], body[i + 1]
        if not (isinstance(first, ast.Assign) and len(first.targets) == 1 and isinstance(first.targets[0], ast.Name)
                and _self_call(first.value, me, "relative_position_bias") and not first.value.args
                and not first.value.keywords and isinstance(second, ast.If) and _is_mask_test(second.test, mask)):
            continue
        combined = _assigned_names(second.body) & _assigned_names(second.orelse)
        if len(combined) != 1:
            return None
        target = combined.pop()
        call = _helper(BIAS, [ast.Name(id=me, ctx=ast.Load()), ast.Name(id=mask, ctx=ast.Load()),
                              ast.Name(id="input_shape", ctx=ast.Load())])
        body[i:i + 2] = [ast.Assign(targets=[ast.Name(id=target, ctx=ast.Store())], value=call, lineno=first.lineno),
                         ast.If(test=ast.Compare(left=ast.Name(id=target, ctx=ast.Load()), ops=[ast.Is()],
                                                 comparators=[ast.Constant(value=None)]),
                                body=[first, second], orelse=[])]
        new = rewrap(forward, compile_forward(inner, tree, helpers))
        return None if new is None else {"forward": new, BIAS_CLASS: True}
    return None


class _MaskCalls(ast.NodeTransformer):
    def __init__(self, self_name: str):
        self.self_name, self.found = self_name, 0

    def visit_Call(self, node: ast.Call) -> ast.expr:
        node = self.generic_visit(node)
        if _self_call(node, self.self_name, "get_attn_mask") and len(node.args) >= 2:
            self.found += 1
            return ast.Call(func=ast.Name(id=MASK, ctx=ast.Load()),
                            args=[ast.Name(id=self.self_name, ctx=ast.Load()), *node.args], keywords=node.keywords)
        return node


def rewritten_layer_mask(cls: type, helpers: dict[str, Callable[..., Any]]) -> dict[str, Callable] | None:
    """``cls.forward`` (a Swin layer) with its one ``self.get_attn_mask(...)`` call going to the helper."""
    forward = cls.forward
    inner = inspect.unwrap(forward)
    parsed = parse_forward(inner) if isinstance(inner, types.FunctionType) else None
    if parsed is None:
        return None
    tree, fdef = parsed
    rewriter = _MaskCalls(fdef.args.args[0].arg)
    rewriter.visit(fdef)
    if rewriter.found != 1:
        return None
    new = rewrap(forward, compile_forward(inner, tree, helpers))
    return None if new is None else {"forward": new}


def computes_window_bias(layer: Any, probed: dict) -> bool:
    """Do the layer class's ``get_attn_mask`` (on a stand-in layer: an 8 x 12 grid, window 4,
    shift 2 and 0) and its attention's bias module (a copy with a random table) compute what the
    problem's reference does?  The rewrite finds them by name only.  The class's answer is kept in
    ``probed``; the bias module is probed for each layer (its window may differ)."""
    from ..problems import get_problem

    reference = get_problem("window_bias").reference
    key = (type(layer), "window_bias mask probe")
    if key not in probed:
        ok = False
        try:
            zeros = torch.zeros(49, 1), torch.zeros(256, dtype=torch.long)
            stand_in = types.SimpleNamespace(window_size=4, shift_size=2)
            mask = type(layer).get_attn_mask(stand_in, 8, 12, dtype=torch.float32, device=torch.device("cpu"))
            stand_in.shift_size = 0
            ok = (isinstance(mask, torch.Tensor) and mask.shape == (6, 16, 16)
                  and torch.equal(mask.unsqueeze(1), reference(*zeros, 1, 8, 12, 4, 2))
                  and type(layer).get_attn_mask(stand_in, 8, 12, dtype=torch.float32, device=torch.device("cpu")) is None)
        except Exception:  # noqa: BLE001 - a look-alike that cannot run on the probe is not Swin's
            ok = False
        probed[key] = ok
    if not probed[key]:
        return False
    try:
        bias = copy.deepcopy(layer.attention.relative_position_bias)
        table, index = bias.relative_position_bias_table, bias.relative_position_index
        window = math.isqrt(math.isqrt(index.numel()))
        with torch.no_grad():
            table.copy_(torch.randn(table.shape, generator=torch.Generator().manual_seed(0)).to(table.dtype))
            got = bias()
        return torch.equal(got, reference(table, index, 1, window, window, window, 0))
    except Exception:  # noqa: BLE001 - a bias module that cannot run alone is not Swin's
        return False


def _apply_window_bias(model, k, done, replaced, skipped, probed) -> None:
    from ..recognize_windows import is_window_bias_module

    layers = {name: m for name, m in model.named_modules() if is_shifted_window_layer(m)
              and isinstance(getattr(m, "attention", None), torch.nn.Module)
              and is_window_bias_module(getattr(m.attention, "relative_position_bias", None))
              and computes_window_bias(m, probed)}
    attentions = {f"{name}.attention" for name in layers}
    ignored: list[tuple[str, str]] = []
    apply_rewritten_members(_Only(model, attentions), k, "window_bias", "window_bias attention", window_bias_helpers,
                            rewritten_attention, probed, ignored)
    ready = {name for name, m in layers.items() if getattr(type(m.attention), BIAS_CLASS, False)}
    before = len(replaced)
    apply_rewritten_members(_Only(model, ready), k, "window_bias", "window_bias", window_bias_helpers,
                            rewritten_layer_mask, probed, replaced)
    placed = {name for name, kind in replaced[before:]}
    for name in sorted(set(k.problem.modules) - placed):
        skipped.append((name, "window_bias: no Swin layer whose forward calls self.get_attn_mask(...) once, with an "
                              "attention whose forward adds self.relative_position_bias() and the mask"))
