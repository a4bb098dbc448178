"""Mamba's selective scan (``selective_scan``): a call of transformers' ``mamba_selective_scan``
(marked by the profiler, so its ops sit in a function scope) with D, z and the dt bias given.

The function is what MambaMixer's forward (transformers 5.17) or the ``mamba_scan_forward`` it
calls (5.25) runs without the mamba-ssm package: softplus, the discretization over
[B, D, L, N], a Python loop over L, the D skip and the silu gate.  Its tensors, in call order,
are u [B, D, L], delta [B, D, L], A [D, N], Bs [B, N, L], Cs [B, N, L], then the keywords D [D],
z [B, D, L] and delta_bias [D]; a call without one of the last three is not the problem's
(``apply`` would not switch it) and is reported unsupported.  Whether it asked for softplus
is not in the trace: ``apply`` checks that at each call and runs the function itself otherwise.
"""
from __future__ import annotations

from .recognize import Instance, Node, ScopeCall, Unsupported, _enclosing_module, make_shape

SCAN_FUNCTION = "mamba_selective_scan"


def is_selective_scan(call: ScopeCall) -> bool:
    return call.kind == "function" and call.name.rsplit(".", 1)[-1] == SCAN_FUNCTION


def _shapes_fit(shapes: list[tuple[int, ...]]) -> tuple[int, int, int, int] | None:
    """(B, D, L, N) where the eight tensors' shapes are the problem's, else None."""
    if len(shapes) != 8 or len(shapes[0]) != 3 or len(shapes[2]) != 2:
        return None
    (b, d, l), n = shapes[0], shapes[2][1]
    want = [(b, d, l), (b, d, l), (d, n), (b, n, l), (b, n, l), (d,), (b, d, l), (d,)]
    return (b, d, l, n) if [tuple(s) for s in shapes] == want else None


def selective_scan_instance(call: ScopeCall, node: Node, default_dtype: str) -> Instance | Unsupported:
    dims = _shapes_fit([a.shape for a in call.args])
    if dims is None:
        return Unsupported(f"{call.name} (without D, z or the dt bias, or in another layout)")
    module = _enclosing_module(node.parent, lambda info: True)
    return Instance("selective_scan", call.args[0].dtype or default_dtype, [(make_shape("selective_scan", *dims), 1)],
                    module=module.qualname if module else "",
                    notes=(f"{SCAN_FUNCTION}: softplus, discretization, the scan over L, D skip, silu gate",))
