"""DeepSeek-V3's multi-head latent attention, which no kind computes, is reported as unsupported
with its reason (hand-made trees: pure recognizers).  Before, the SDPA call with a value head dim
of 16 beside q/k's 24 was an ``attention`` problem and ``apply_rotary_pos_emb_interleave``
(interleaved pairs in, rotate_half halves out) a ``rotary`` one: both were planned, placed, and
then handed every call back to PyTorch ("placed, but its op does not take all its calls")."""
from __future__ import annotations

from autokernel.recognize import Instance, ModuleInfo, Node, ScopeCall, TensorMeta, Unsupported, recognize_op, recognize_scope


def _sdpa(q, k, v) -> Node:
    return Node(name="aten::scaled_dot_product_attention", shapes=[list(q), list(k), list(v), []] + [[]] * 4,
                concrete=[None, None, None, None, 0.0, True, None, False], dtypes=["float"] * 3)


def test_attention_with_a_value_head_dim_of_its_own_is_unsupported():
    got = recognize_op(_sdpa((2, 2, 64, 24), (2, 2, 64, 24), (2, 2, 64, 16)), "fp32")
    assert isinstance(got, Unsupported)
    assert "value head dim 16 differs from the query/key head dim 24" in got.label
    same = recognize_op(_sdpa((2, 2, 64, 24), (2, 2, 64, 24), (2, 2, 64, 24)), "fp32")
    assert isinstance(same, Instance) and same.kind == "attention"


def _rotary_call(code_names: tuple[str, ...], step: int, stack: bool = False) -> Node:
    """A marked rotary function on q [2,2,64,8] and k [2,1,64,8] inside an attention module,
    slicing its input with ``step`` on the last dim and joining with cat (or stack)."""
    q, k, table = (2, 2, 64, 8), (2, 1, 64, 8), (1, 64, 8)
    meta = [TensorMeta(s, "fp32") for s in (q, k, table, table)]
    root = Node(name="ak::forward::0")
    attn = root.add(Node(name="ak::m::0", scope=ScopeCall("module", "layers.0.self_attn", ModuleInfo(
        "layers.0.self_attn", "DeepseekV3Attention", heads=2, kv_heads=2), args=meta[:1])))
    fn = attn.add(Node(name="ak::f::1", scope=ScopeCall("function", "m.apply_rotary_pos_emb_interleave", None,
                                                        args=meta, outputs=meta[:2], code_names=code_names)))
    for start in (0, 1):
        fn.add(Node(name="aten::slice", shapes=[list(q), [], [], [], []], concrete=[None, -1, start, 2 ** 63 - 1, step]))
    fn.add(Node(name="aten::mul", shapes=[[2, 2, 64, 4], [1, 1, 64, 4]]))
    fn.add(Node(name="aten::stack" if stack else "aten::cat", shapes=[[]]))
    return fn


def _recognize(fn: Node):
    return recognize_scope(fn, [], {c.name for c in fn.children}, "fp32", False)


def test_interleaved_pairs_rotated_into_halves_are_unsupported():
    got = _recognize(_rotary_call(("cat",), step=2))
    assert isinstance(got, Unsupported) and "interleaved pairs in, rotate_half halves out" in got.label
    # halves (step 1), rotate_half named, or pairs stacked back (Cohere's): the kinds that compute them
    assert _recognize(_rotary_call(("cat",), step=1)).kind == "rotary"
    assert _recognize(_rotary_call(("rotate_half", "cat"), step=2)).kind == "rotary"
    assert _recognize(_rotary_call(("stack",), step=2, stack=True)).kind == "rotary_interleaved"
