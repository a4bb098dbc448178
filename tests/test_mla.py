"""DeepSeek-V3's multi-head latent attention (MLA): its SDPA call, whose v has a head dim of its
own (16 beside q/k's 24 at the coverage config, 128 beside 192 as the model runs), is an
``attention`` problem with ``Dv``; its ``apply_rotary_pos_emb_interleave`` (interleaved pairs in,
rotate_half halves out) is a ``rotary_pairs_to_halves`` one.  Before, both were planned as
``attention`` and ``rotary``, placed, and then handed every call back to PyTorch, and then
reported unsupported.  Recognizers on hand-made trees, the problems' shapes and costs, apply's
checks, and the tiny model profiled, applied and verified with the starters."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil

import pytest
import torch

from autokernel.problems import get_problem
from autokernel.problems.registry import KERNELS_DIR, load_starter
from autokernel.recognize import Instance, ModuleInfo, Node, ScopeCall, TensorMeta, Unsupported, recognize_op, recognize_scope

HF = importlib.util.find_spec("transformers") is not None
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def _sdpa(q, k, v, mask=None) -> Node:
    return Node(name="aten::scaled_dot_product_attention", shapes=[list(q), list(k), list(v), list(mask or [])] + [[]] * 4,
                concrete=[None, None, None, None, 0.0, mask is None, None, False], dtypes=["float"] * 4)


def test_attention_with_a_value_head_dim_of_its_own_is_attention_with_dv():
    got = recognize_op(_sdpa((2, 2, 64, 24), (2, 2, 64, 24), (2, 2, 64, 16)), "fp32")
    assert isinstance(got, Instance) and got.kind == "attention"
    assert got.shapes == [({"B": 2, "H": 2, "Hkv": 2, "S": 64, "D": 24, "causal": 1, "Dv": 16}, 1)]
    # one head dim for all: the shape has no Dv, as every plan recorded before it had
    same = recognize_op(_sdpa((2, 2, 64, 24), (2, 2, 64, 24), (2, 2, 64, 24)), "fp32")
    assert isinstance(same, Instance) and same.shapes[0][0] == {"B": 2, "H": 2, "Hkv": 2, "S": 64, "D": 24, "causal": 1}
    # with a mask (attention_masked takes one head dim): unsupported, with the reason
    masked = recognize_op(_sdpa((2, 2, 64, 24), (2, 2, 64, 24), (2, 2, 64, 16), mask=(2, 1, 64, 64)), "fp32")
    assert isinstance(masked, Unsupported) and "value head dim 16 differs" in masked.label


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


def test_interleaved_pairs_rotated_into_halves_are_their_own_kind():
    got = _recognize(_rotary_call(("cat",), step=2))
    assert isinstance(got, Instance) and got.kind == "rotary_pairs_to_halves"
    assert [shape for shape, _ in got.shapes] == [{"B": 2, "H": 2, "S": 64, "D": 8}, {"B": 2, "H": 1, "S": 64, "D": 8}]
    # halves (step 1), rotate_half named, or pairs stacked back (Cohere's): the kinds that compute them
    assert _recognize(_rotary_call(("cat",), step=1)).kind == "rotary"
    assert _recognize(_rotary_call(("rotate_half", "cat"), step=2)).kind == "rotary"
    assert _recognize(_rotary_call(("stack",), step=2, stack=True)).kind == "rotary_interleaved"


MLA = {"B": 1, "H": 128, "Hkv": 128, "S": 4096, "D": 192, "causal": 1, "Dv": 128}


def test_a_value_head_dim_changes_costs_and_edges_only_where_a_shape_has_one():
    problem = get_problem("attention")
    plain = {"B": 2, "H": 2, "Hkv": 2, "S": 64, "D": 24, "causal": 1}
    # without Dv: the costs and edge shapes every recorded problem had
    assert problem.flops(plain) == 4 * 2 * 2 * 64 ** 2 * 24 / 2
    assert problem.bytes(plain, torch.float32) == (2 * 2 * 2 * 64 * 24 + 2 * 2 * 2 * 64 * 24) * 4
    assert problem.bytes(dict(plain, Dv=24), torch.float32) == problem.bytes(plain, torch.float32)
    assert problem.edge_shapes_for("cpu", [plain]) == problem.cpu_edge_shapes
    assert problem.edge_shapes_for("cuda", [plain]) == problem.gpu_edge_shapes
    # DeepSeek-V3 as it runs (the docstring's numbers): 0.687 TFLOP, 671 MB in bf16
    assert problem.flops(MLA) == 2 * 128 * 4096 ** 2 * (192 + 128) / 2
    assert problem.bytes(MLA, torch.bfloat16) == 2 * 128 * 4096 * (2 * 192 + 2 * 128)
    # with Dv: edges at the target's heads and head dims beside the usual ones
    extra = problem.edge_shapes_for("cuda", [MLA])[len(problem.gpu_edge_shapes):]
    assert len(extra) == 3 and all(e["D"] == 192 and e["Dv"] == 128 and e["H"] == 128 for e in extra)
    assert {e["causal"] for e in extra} == {0, 1} and min(e["S"] for e in extra) == 1
    # inputs and text shapes
    q, k, v, causal, _ = problem.make_inputs(dict(plain, Dv=16), torch.float32, "cpu", 0)
    assert q.shape[-1] == k.shape[-1] == 24 and v.shape[-1] == 16 and causal
    assert problem.parse_shape("2x2x2x64x24x1x16") == dict(plain, Dv=16)
    assert problem.parse_shape("2x2x2x64x24x1") == plain
    with pytest.raises(ValueError):
        get_problem("attention_masked").parse_shape("2x2x2x64x24x1x0x16")


def test_an_sdpa_call_goes_to_the_op_only_at_the_head_dims_it_was_judged_at():
    from autokernel.integrate.calls import _sdpa_ok

    q, k = torch.randn(1, 2, 5, 24), torch.randn(1, 2, 5, 24)
    v16, v24 = torch.randn(1, 2, 5, 16), torch.randn(1, 2, 5, 24)
    assert _sdpa_ok(q, k, v16, torch.float32, {(24, 16)}, False)
    assert not _sdpa_ok(q, k, v24, torch.float32, {(24, 16)}, False)
    assert not _sdpa_ok(q, k, v16, torch.float32, {(24, 24)}, False)
    assert not _sdpa_ok(q, k, v16, torch.float32, set(), False)  # none given: one head dim
    assert _sdpa_ok(q, k, v24, torch.float32, set(), False)


def test_the_kinds_reference_is_deepseeks_function_and_neither_other_rotary():
    problem = get_problem("rotary_pairs_to_halves")
    x, cos, sin = problem.make_inputs({"B": 2, "H": 3, "S": 5, "D": 8}, torch.float64, "cpu", 0)
    want = problem.reference(x, cos, sin)
    for other in ("rotary", "rotary_interleaved"):
        assert not torch.allclose(get_problem(other).reference(x, cos, sin), want)
    if HF:
        from transformers.models.deepseek_v3.modeling_deepseek_v3 import apply_rotary_pos_emb_interleave

        # the model's tables are cat(freqs, freqs); only the first half is read either way
        got, _ = apply_rotary_pos_emb_interleave(x, x, cos[None], sin[None])
        assert torch.allclose(got, want)


def test_the_inputs_catch_a_default_scale_taken_from_the_value_head_dim():
    """SDPA's scale is 1/sqrt of q's head dim: a kernel that takes v's (or the output's) fails."""
    from test_attention_masked import cases, judged

    problem = get_problem("attention")
    reference = problem.reference

    def wrong(q, k, v, causal=True, scale=None):
        return reference(q, k, v, causal, v.shape[-1] ** -0.5 if scale is None else scale)

    shape = {"B": 1, "H": 2, "Hkv": 1, "S": 12, "D": 24, "causal": 1, "Dv": 16}
    assert not all(judged(problem, torch.float32, wrong, args) for _, args in cases(problem, shape, torch.float32))


@pytest.mark.skipif(not INTERPRET, reason="needs TRITON_INTERPRET=1 on CPU")
def test_the_attention_starter_takes_a_value_head_dim_and_keeps_q_layout():
    problem, starter = get_problem("attention"), load_starter("attention")
    shape = {"B": 1, "H": 4, "Hkv": 2, "S": 19, "D": 24, "causal": 1, "Dv": 16}
    q, k, v, causal, scale = problem.make_inputs(shape, torch.float32, "cpu", 1)
    q = q.transpose(1, 2).contiguous().transpose(1, 2)  # heads inside tokens, as a projection's view
    got = starter.kernel_fn(q, k, v, causal, scale)
    assert got.shape == (1, 4, 19, 16) and got.transpose(1, 2).is_contiguous()
    assert torch.allclose(got, problem.reference(q, k, v, causal, scale), atol=1e-5)


TINY_DEEPSEEK = ("hidden_size=64,num_hidden_layers=2,num_attention_heads=2,num_key_value_heads=2,intermediate_size=128,"
                 "moe_intermediate_size=32,n_routed_experts=4,num_experts_per_tok=2,vocab_size=256,q_lora_rank=32,"
                 "kv_lora_rank=16,qk_rope_head_dim=8,qk_nope_head_dim=16,v_head_dim=16,first_k_dense_replace=1,"
                 "n_group=1,topk_group=1")


@pytest.mark.skipif(not HF or not INTERPRET, reason="needs transformers and TRITON_INTERPRET=1")
def test_deepseek_v3_attention_and_rotary_are_placed_and_verify(tmp_path):
    """hf:deepseek_v3 (the coverage config, 2x12 tokens): the SDPA call is ``attention`` with Dv 16
    beside D 24 and the rotary ``rotary_pairs_to_halves``; both starters are applied, each layer's
    calls reach the ops (one attention and two rotary calls a layer: q and k), and the model
    verifies and matches the original."""
    from autokernel.integrate import OP_CALLS, apply
    from autokernel.models import load_model
    from autokernel.plan import save_plan
    from autokernel.profiler import profile_model
    from autokernel.verify import verify

    loaded = load_model("hf:deepseek_v3", config_overrides=TINY_DEEPSEEK, input_shape=[2, 12])
    plan = profile_model(loaded, warmup=0, iters=1)
    chosen = [p for p in plan.problems if p.kind in ("attention", "rotary_pairs_to_halves")]
    assert sorted(p.kind for p in chosen) == ["attention", "rotary_pairs_to_halves"], \
        [(p.kind, p.supported, p.note) for p in plan.problems]
    assert all(p.supported for p in chosen), [(p.kind, p.note) for p in chosen]
    attention = next(p for p in chosen if p.kind == "attention")
    assert attention.shapes == [{"B": 2, "H": 2, "Hkv": 2, "S": 12, "D": 24, "causal": 1, "Dv": 16}]
    plan.problems = chosen
    for p in chosen:
        (tmp_path / "problems" / p.name).mkdir(parents=True)
        shutil.copyfile(KERNELS_DIR / f"{p.kind}.py", tmp_path / "problems" / p.name / "kernel.py")
    save_plan(plan, tmp_path / "plan.json")
    (tmp_path / "run.json").write_text(json.dumps({"model": "hf:deepseek_v3", "dtype": "fp32", "device": "cpu",
                                                   "input_shape": [2, 12], "config": TINY_DEEPSEEK}))
    result = verify(tmp_path, seeds=(0, 1), timing=False, breakdown=False, log=lambda *_: None)
    assert result.passed, result
    patched = apply(loaded.model, tmp_path)
    ops = {p.kind: patched._autokernel_ops[p.name] for p in chosen}
    before = {kind: OP_CALLS[op] for kind, op in ops.items()}
    ids = loaded.make_inputs(3)
    with torch.no_grad():
        got, want = patched(*ids), loaded.model(*ids)
    assert {kind: OP_CALLS[op] - before[kind] for kind, op in ops.items()} == {"attention": 2, "rotary_pairs_to_halves": 4}
    assert ((got - want).norm() / want.norm()).item() < 1e-5


def test_the_profile_legend_names_dv_where_a_shape_has_it():
    from autokernel.cli.profile_cmd import shape_legend
    from autokernel.plan import Plan, PlanProblem

    plan = Plan(model="m", device="cpu", time_kind="cpu", dtype="fp32", input_shape=[1, 8], total_time_us=1.0,
                problems=[PlanProblem("a", "attention", "fp32", [MLA], [1], 1.0, 0.5)])
    assert shape_legend(plan) == ("shapes: attention BxHxHkvxSxDxcausalx[Dv] (`autokernel problems KIND` explains "
                                  "a kind; [a dim]: where a shape has it)")


@pytest.mark.skipif(not INTERPRET, reason="needs TRITON_INTERPRET=1 on CPU")
def test_the_op_keeps_a_projection_views_layout_for_an_output_of_another_width():
    """q, k, v as slices of one packed projection (heads inside tokens), v 16 wide beside q's 24:
    the op's output is Dv wide in q's order of dimensions, and the fake promises torch.compile
    those strides (before, the op's layout copy and the fake took q's shape)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from autokernel.integrate import register_kernel_op
    from autokernel.problems.attention import packed_qkv

    _, op = register_kernel_op("attention", "attention_value_dim", KERNELS_DIR / "attention.py")
    problem = get_problem("attention")
    q, k, v, causal, _ = problem.make_inputs({"B": 2, "H": 4, "Hkv": 2, "S": 5, "D": 24, "causal": 1, "Dv": 16},
                                             torch.float32, "cpu", 0)
    pq, pk, pv = packed_qkv(q, k, v)
    out = op(pq, pk, pv, causal, None)
    assert out.shape == (2, 4, 5, 16) and out.transpose(1, 2).is_contiguous()
    torch.testing.assert_close(out, problem.reference(q, k, v, causal), atol=1e-4, rtol=1e-4)
    with FakeTensorMode() as mode:
        fake = op(*(mode.from_tensor(t) for t in (pq, pk, pv)), causal, None)
        assert fake.shape == out.shape and fake.stride() == out.stride()
    assert op(q, k, v, causal, None).is_contiguous()  # a contiguous q: a contiguous output
