"""A Conv1d run as the GEMM of its windows (``recognize.window_conv1d_parts``) whose output the
forward holding it hands straight to ``F.gelu`` (Whisper's encoder:
``nn.functional.gelu(self.conv1(input_features))``): one ``linear_gelu`` problem, the GELU the
GEMM's epilogue, placed at that forward's module (``apply`` rewrites the call:
``integrate.conv_gelus``)."""
from __future__ import annotations

from .recognize import METADATA_OPS, Instance, Node, _arg, _concrete, make_shape

GELU_OPS = ("aten::gelu",)
GELU_CALL = "ak::gelu::"  # + the form: the profiler's range around an ``F.gelu`` call (``profiler.GELU_LABEL``)


def _gelu_op(node: Node) -> tuple[Node, bool] | None:
    """The ``aten::gelu`` op of ``node`` (that op, or the range of an ``F.gelu`` call holding it)
    and its form (True: tanh)."""
    if node.scope is not None:
        return None
    if node.name in GELU_OPS:
        return node, _concrete(node, 1) == "tanh"
    if node.name.startswith(GELU_CALL):
        ops = [c for c in node.children if c.scope is None and c.name in GELU_OPS]
        if len(ops) == 1:
            return ops[0], node.name == GELU_CALL + "tanh" or _concrete(ops[0], 1) == "tanh"
    return None


def pair_window_conv_gelu(parent: Node, default_dtype: str) -> dict[int, Instance]:
    """A window convolution child's call directly followed (metadata ops aside) by an
    ``aten::gelu`` op of the parent's own forward on a tensor of the convolution's output shape:
    map both (by id) to one ``linear_gelu`` instance, M = B*L_out, N = out, K = C*kernel.  The
    exact (erf) form only, the one ``apply`` takes."""
    out: dict[int, Instance] = {}
    owner = parent.scope.info if parent.scope is not None else None
    if owner is None or not owner.qualname:
        return out
    kids = [c for c in parent.children if c.scope is not None or c.name not in METADATA_OPS]
    for first, second in zip(kids, kids[1:]):
        conv = first.scope
        if (conv is None or conv.kind != "module" or conv.info is None or conv.info.window_conv1d is None
                or conv.info.qualname.rpartition(".")[0] != owner.qualname or not conv.args or not conv.outputs
                or _gelu_op(second) is None):
            continue
        gelu, tanh = _gelu_op(second)
        x, y = conv.args[0].shape, conv.outputs[0].shape
        if tanh or len(x) != 3 or len(y) != 3 or tuple(_arg(gelu, 0) or ()) != tuple(y):
            continue  # the tanh form: apply takes only the exact one, so the convolution stays a matmul
        kernel, stride, padding = conv.info.window_conv1d
        B, C, _ = x
        _, N, l_out = y
        name = conv.info.qualname.rsplit(".", 1)[-1]
        inst = Instance("linear_gelu", conv.args[0].dtype or default_dtype,
                        [(make_shape("linear_gelu", B * l_out, N, C * kernel, 0), 1)], module=owner.qualname,
                        notes=(f"{name} (Conv1d, kernel {kernel}, stride {stride}, padding {padding}: the GEMM of "
                               f"its windows) + F.gelu (erf form) in {owner.cls_name}",))
        out[id(first)] = out[id(second)] = out[id(gelu)] = inst
    return out
