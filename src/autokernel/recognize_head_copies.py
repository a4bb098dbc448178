"""The heads' copies an attention module writes out (``head_copies``: Whisper's
``proj(h).view(B, S, H, D).transpose(1, 2).contiguous()`` of q, k and v), counted with the
attention problem of the attention that module runs: ``apply`` drops them where it places that
attention's op, which takes the head-strided views as they are."""
from __future__ import annotations

from .recognize import ATTENTION_OPS, Instance, Node, _arg, recognize_op

COPY_OPS = ("aten::contiguous",)


def _attention_below(node: Node, default_dtype: str) -> Instance | None:
    """The first attention op under ``node`` that a kind takes, as ``recognize_op`` plans it."""
    for child in node.children:
        if child.scope is None and child.name in ATTENTION_OPS:
            found = recognize_op(child, default_dtype)
            return found if isinstance(found, Instance) and found.kind.startswith("attention") else None
        found = _attention_below(child, default_dtype)
        if found is not None:
            return found
    return None


def pair_head_copies(parent: Node, default_dtype: str) -> dict[int, Instance]:
    """In the forward of a module that writes droppable heads' copies (``ModuleInfo.head_copies``),
    its own ``aten::contiguous`` ops on 4-D tensors: map each (by id) to an instance, no shape of
    its own, of the kind its attention call is planned as, placed at that module."""
    owner = parent.scope.info if parent.scope is not None and parent.scope.kind == "module" else None
    if owner is None or not owner.head_copies:
        return {}
    copies = [c for c in parent.children if c.scope is None and c.name in COPY_OPS and len(_arg(c, 0) or ()) == 4]
    attention = _attention_below(parent, default_dtype) if copies else None
    if attention is None:
        return {}
    inst = Instance(attention.kind, attention.dtype, [], module=owner.qualname,
                    notes=(f"the heads' copies of q, k, v in {owner.cls_name} (.transpose(1, 2).contiguous()): "
                           "apply drops them, the op takes the head-strided views",))
    return {id(c): inst for c in copies}
