"""Swin's shifted windows (``shifted_windows``): the copies a ``SwinLayer`` forward makes around its
window attention, each direction one problem instance placed at the layer.

Before attention the forward pads the normalised hidden states (``maybe_pad``: ``F.pad``, a copy
even with nothing to pad), rolls them by ``-shift`` (``cyclic_shift``, shifted layers only) and
cuts them into windows (``window_partition``: a view, a transpose and ``.contiguous()``); after
it, ``window_reverse`` (a transpose and ``.contiguous()``) and the roll back by ``+shift``.  In
the profile these are ops of the layer's own forward: ``aten::pad`` (4-D), ``aten::roll``,
``aten::contiguous`` of a 6-D [B, nh, nw, window, window, C] view, then, after the attention
child, ``aten::contiguous`` of a 6-D [B, nh, window, nw, window, C] view and ``aten::roll``.  A pad
that pads stays out (``apply`` leaves it to PyTorch): only a pad by zeros, which the placed
forward skips, is counted with the partition.  The window mask's own partition (a [1, H, W, 1]
image of region ids, when the layer is shifted) is not the hidden states' and is left alone.
"""
from __future__ import annotations

import inspect
from typing import Any

import torch

from .recognize import METADATA_OPS, Instance, Node, _arg, _concrete, _dtype, make_shape

WINDOW_FUNCTIONS = ("window_partition", "window_reverse")
WINDOW_METHODS = ("cyclic_shift", "maybe_pad")


def is_shifted_window_layer(module: Any) -> bool:
    """A module whose class's forward calls ``window_partition`` and ``window_reverse`` and
    that has ``cyclic_shift`` and ``maybe_pad`` methods and int ``window_size`` / ``shift_size``
    (transformers' ``SwinLayer`` and its copies)."""
    forward = inspect.unwrap(getattr(type(module), "forward", None) or (lambda: None))
    names = getattr(getattr(forward, "__code__", None), "co_names", ())
    return (all(n in names for n in WINDOW_FUNCTIONS) and all(callable(getattr(module, m, None)) for m in WINDOW_METHODS)
            and isinstance(getattr(module, "window_size", None), int) and isinstance(getattr(module, "shift_size", None), int))


def _roll_shift(node: Node, sign: int) -> int | None:
    """The shift of an ``aten::roll`` over dims (1, 2) by (sign*s, sign*s), s > 0; else None."""
    shifts, dims = _concrete(node, 1), _concrete(node, 2)
    if (isinstance(shifts, (list, tuple)) and len(shifts) == 2 and shifts[0] == shifts[1]
            and isinstance(dims, (list, tuple)) and list(dims) == [1, 2] and shifts[0] * sign > 0):
        return int(shifts[0]) * sign
    return None


def _zero_pad(node: Node) -> bool:
    pads = _concrete(node, 1)
    return isinstance(pads, (list, tuple)) and not any(pads)


def pair_shifted_windows(parent: Node, default_dtype: str) -> dict[int, Instance]:
    """Map the ops of a shifted-window layer's forward (by id) to one ``shifted_windows`` instance
    per direction: (pad by zeros,) roll, partition copy; reverse copy, roll."""
    out: dict[int, Instance] = {}
    owner = parent.scope.info if parent.scope is not None else None
    if owner is None or not getattr(owner, "shifted_windows", False):
        return out
    kids = [c for c in parent.children
            if c.scope is not None or c.name not in METADATA_OPS or c.name == "aten::contiguous"]
    i, at, partitioned = 0, 0, None
    while i < len(kids):
        node = kids[i]
        if node.scope is None and node.name == "aten::contiguous" and len(_arg(node, 0) or ()) == 6:
            B, a, b, c, d, C = _arg(node, 0)
            before = [k for k in kids[max(0, i - 2):i] if k.scope is None]
            nodes, shift = [node], 0
            if partitioned is None:  # [B, nh, nw, window, window, C] of the rolled (padded) grid
                if c != d:
                    i += 1
                    continue
                nh, nw, window = a, b, c
                for k in reversed(before):
                    if k.name == "aten::roll" and _arg(k, 0) == [B, nh * window, nw * window, C]:
                        shift = _roll_shift(k, -1) or 0
                        if shift:
                            nodes.append(k)
                    elif k.name == "aten::pad" and _zero_pad(k) and _arg(k, 0) == [B, nh * window, nw * window, C]:
                        nodes.append(k)
                partitioned, at = (B, nh, nw, window, C, shift), i
                reverse = 0
            else:  # [B, nh, window, nw, window, C], after attention
                pB, nh, nw, window, pC, shift0 = partitioned
                if (B, C, a, b, c, d) != (pB, pC, nh, window, nw, window) or not any(
                        k.scope is not None for k in kids[at:i]):  # the attention child between
                    i += 1
                    continue
                after = kids[i + 1] if i + 1 < len(kids) else None
                if (shift0 and after is not None and after.scope is None and after.name == "aten::roll"
                        and _roll_shift(after, 1) == shift0 and _arg(after, 0) == [B, nh * window, nw * window, C]):
                    nodes.append(after)
                    shift = shift0
                elif shift0:
                    break  # the roll back is not where it should be: leave the reverse uncovered
                reverse = 1
            inst = Instance("shifted_windows", _dtype(node, 0, default_dtype),
                            [(make_shape("shifted_windows", B, nh * window, nw * window, C, window, shift, reverse), 1)],
                            module=owner.qualname,
                            notes=(f"{owner.cls_name}'s {'window reverse + roll back' if reverse else 'pad + roll + window partition'} "
                                   f"(window {window}, shift {shift})",))
            for k in nodes:
                out[id(k)] = inst
            if reverse:
                break
        i += 1
    return out


def is_window_bias_module(module: Any) -> bool:
    """A Swin relative position bias module: a 2-D ``relative_position_bias_table`` parameter and a
    ``relative_position_index`` buffer, its forward taking no input (transformers'
    ``SwinRelativePositionBias``)."""
    table = getattr(module, "relative_position_bias_table", None)
    index = getattr(module, "relative_position_index", None)
    return (isinstance(table, torch.Tensor) and table.dim() == 2 and isinstance(index, torch.Tensor)
            and not index.is_floating_point())


BIAS_OPS = ("aten::unsqueeze", "aten::expand", "aten::reshape", "aten::add")  # the mask's expand and the add


def pair_window_bias(parent: Node, default_dtype: str) -> dict[int, Instance]:
    """In a shifted-window layer's forward: the region mask it builds between the window partition
    and the attention call (shifted layers), the attention's relative position bias module call and,
    after it, the mask's expand (a reshape copy) and the add of the two, as one ``window_bias``
    instance (B, H, W of the padded grid, heads, window, shift) placed at the layer."""
    out: dict[int, Instance] = {}
    owner = parent.scope.info if parent.scope is not None else None
    if owner is None or not getattr(owner, "shifted_windows", False):
        return out
    kids = parent.children
    part = next((i for i, k in enumerate(kids) if k.scope is None and k.name == "aten::contiguous"
                 and len(_arg(k, 0) or ()) == 6), None)
    if part is None:
        return out
    B, nh, nw, window, _, _ = _arg(kids[part], 0)
    roll = next((k for k in kids[:part] if k.scope is None and k.name == "aten::roll"), None)
    shift = (_roll_shift(roll, -1) or 0) if roll is not None else 0
    for a in range(part + 1, len(kids)):
        attention = kids[a].scope
        if attention is None or attention.kind != "module":
            continue
        inner = kids[a].children
        bias = next((i for i, c in enumerate(inner) if c.scope is not None and c.scope.kind == "module"
                     and getattr(c.scope.info, "window_bias_table", False)), None)
        if bias is None:
            return out
        outputs = inner[bias].scope.outputs
        heads = outputs[0].shape[1] if outputs and len(outputs[0].shape) == 4 else None
        if heads is None or outputs[0].shape[2] != window * window:
            return out
        nodes = [inner[bias]]
        if shift:
            nodes += [k for k in kids[part + 1:a] if k.scope is None]
            for c in inner[bias + 1:]:
                if c.scope is not None or c.name not in BIAS_OPS:
                    break
                nodes.append(c)
        inst = Instance("window_bias", _dtype(kids[part], 0, default_dtype),
                        [(make_shape("window_bias", B, nh * window, nw * window, heads, window, shift), 1)],
                        module=owner.qualname,
                        notes=(f"{owner.cls_name}'s attention mask: relative position bias"
                               + (" + the shifted windows' region mask" if shift else "")
                               + f" (window {window}, shift {shift})",))
        for k in nodes:
            out[id(k)] = inst
        return out
    return out
