"""Mamba's mixer without its CUDA packages: transformers' ``mamba_selective_scan``
(``selective_scan``) and ``causal_conv1d_fn`` (``causal_conv1d``), each a function the profiler
marks, so that its ops sit in a function scope and are one instance at the mixer.

``mamba_selective_scan`` is what MambaMixer's forward (transformers 5.17) or the
``mamba_scan_forward`` it calls (5.25) runs without the mamba-ssm package: softplus, the
discretization over [B, D, L, N], a Python loop over L, the D skip and the silu gate.  Its tensors,
in call order, are u [B, D, L], delta [B, D, L], A [D, N], Bs [B, N, L], Cs [B, N, L], then the
keywords D [D], z [B, D, L] and delta_bias [D]; a call without one of the last three is not the
problem's (``apply`` would not switch it) and is reported unsupported.  Whether it asked for
softplus is not in the trace: ``apply`` checks that at each call and runs the function itself
otherwise.

``causal_conv1d_fn`` (called by the forward, or in 5.25 by ``causal_conv1d_forward``) runs
``F.conv1d`` padded by K - 1, keeps the first L outputs and applies the activation: tensors x
[B, D, L], weight [D, K] and bias [D].  The activation is a string, not in the trace: silu where
``aten::silu`` runs in the scope, none where no activation op does; another is unsupported.
"""
from __future__ import annotations

from .recognize import Instance, Node, ScopeCall, Unsupported, _enclosing_module, _op_names_below, make_shape

SCAN_FUNCTION = "mamba_selective_scan"
CONV_FUNCTION = "causal_conv1d_fn"
# activations ACT2FN may apply after the convolution other than silu (and gelu's, tanh's pieces)
OTHER_ACTIVATION_OPS = frozenset({"aten::gelu", "aten::relu", "aten::tanh", "aten::sigmoid", "aten::mul",
                                  "aten::softplus", "aten::elu", "aten::leaky_relu", "aten::hardswish", "aten::mish"})


def marked(call: ScopeCall, function: str) -> bool:
    return call.kind == "function" and call.name.rsplit(".", 1)[-1] == function


def scan_shapes_fit(shapes: list[tuple[int, ...]]) -> tuple[int, int, int, int] | None:
    """(B, D, L, N) where the scan's eight tensors' shapes are the problem's, else None."""
    if len(shapes) != 8 or len(shapes[0]) != 3 or len(shapes[2]) != 2:
        return None
    (b, d, l), n = shapes[0], shapes[2][1]
    want = [(b, d, l), (b, d, l), (d, n), (b, n, l), (b, n, l), (d,), (b, d, l), (d,)]
    return (b, d, l, n) if [tuple(s) for s in shapes] == want else None


def conv_shapes_fit(shapes: list[tuple[int, ...]]) -> tuple[int, int, int, int] | None:
    """(B, D, L, K) where the convolution's three tensors' shapes are the problem's, else None."""
    if len(shapes) != 3 or len(shapes[0]) != 3 or len(shapes[1]) != 2:
        return None
    (b, d, l), k = shapes[0], shapes[1][1]
    return (b, d, l, k) if [tuple(s) for s in shapes] == [(b, d, l), (d, k), (d,)] else None


def _module(node: Node) -> str:
    module = _enclosing_module(node.parent, lambda info: True)
    return module.qualname if module else ""


def selective_scan_instance(call: ScopeCall, node: Node, default_dtype: str) -> Instance | Unsupported:
    dims = scan_shapes_fit([a.shape for a in call.args])
    if dims is None:
        return Unsupported(f"{call.name} (without D, z or the dt bias, or in another layout)")
    return Instance("selective_scan", call.args[0].dtype or default_dtype, [(make_shape("selective_scan", *dims), 1)],
                    module=_module(node),
                    notes=(f"{SCAN_FUNCTION}: softplus, discretization, the scan over L, D skip, silu gate",))


def causal_conv1d_instance(call: ScopeCall, node: Node, default_dtype: str) -> Instance | Unsupported:
    dims = conv_shapes_fit([a.shape for a in call.args])
    below = _op_names_below(node)
    if dims is None or "aten::conv1d" not in below:
        return Unsupported(f"{call.name} (without a bias, or in another layout)")
    if below & OTHER_ACTIVATION_OPS:
        return Unsupported(f"{call.name} (an activation other than silu)")
    silu = int("aten::silu" in below)
    return Instance("causal_conv1d", call.args[0].dtype or default_dtype,
                    [(make_shape("causal_conv1d", *dims, silu), 1)], module=_module(node),
                    notes=(f"{CONV_FUNCTION}: causal depthwise conv1d + bias" + (" + silu" if silu else ""),))
