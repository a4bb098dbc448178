"""attention_rotary: attention(rotary(q), rotary(k), v) as one problem.  The inputs catch kernels
that take shortcuts with the table, the starter matches the reference (causal or not, odd
lengths, GQA, several key blocks), the profiler plans the pair in the llama example and a tiny
Hugging Face Llama when asked (``fuse_rotary``), and ``apply`` runs the pair as one op where
the forward's source allows it (matching the original model), the separate paths otherwise."""
from __future__ import annotations

import importlib.util
import os
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

os.environ.setdefault("TRITON_INTERPRET", "1")

from autokernel.integrate import OP_CALLS, apply  # noqa: E402
from autokernel.integrate.rotary_attention import pair_site  # noqa: E402
from autokernel.plan import PlanProblem  # noqa: E402
from autokernel.problems import get_problem  # noqa: E402
from autokernel.problems.attention_rotary import rope_table, rotate  # noqa: E402
from autokernel.problems.registry import KERNELS_DIR, load_starter  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from test_attention_masked import judged  # noqa: E402
from test_integrate import make_workdir  # noqa: E402

HF = importlib.util.find_spec("transformers") is not None


def all_cases(problem, shape, dtype, seed=0):
    return [("random", problem.make_inputs(dict(shape), dtype, "cpu", seed + s)) for s in range(3)] + \
        problem.adversarial_inputs(dict(shape), dtype, "cpu", seed + 5)


def _attention(q, k, v, cos, sin, causal=True, scale=None, *, rot_q=rotate, rot_k=rotate):
    return get_problem("attention").reference(rot_q(q, cos, sin), rot_k(k, cos, sin), v, causal, scale)


def _own_table(x, cos, sin):
    """A kernel that computes the default RoPE table (theta 10000, positions from 0) itself."""
    c, s = rope_table(torch.arange(x.shape[-2]), x.shape[-1], 10000.0, torch.float64)
    return rotate(x, c.to(x.dtype), s.to(x.dtype))


def _first_half_table(x, cos, sin):
    """A kernel that reads only the first half of cos/sin (a real table's halves are alike)."""
    half = x.shape[-1] // 2
    return rotate(x, cos[:, :half].repeat(1, 2), sin[:, :half].repeat(1, 2))


WRONG = {
    "computes its own table": dict(rot_q=_own_table, rot_k=_own_table),
    "reads half of the table": dict(rot_q=_first_half_table, rot_k=_first_half_table),
    "rotates only q": dict(rot_k=lambda x, c, s: x),
    "rotates only k": dict(rot_q=lambda x, c, s: x),
}


@pytest.mark.parametrize("wrong", list(WRONG))
def test_the_inputs_catch_shortcuts_with_the_rotation(wrong):
    problem = get_problem("attention_rotary")
    bad = lambda *a: _attention(*a, **WRONG[wrong])  # noqa: E731
    for shape in problem.cpu_shapes:
        cases = all_cases(problem, shape, torch.float32)
        assert all(judged(problem, torch.float32, _attention, args) for _, args in cases)  # the right one passes
        assert not all(judged(problem, torch.float32, bad, args) for _, args in cases), (wrong, shape)


def test_starter_matches_the_reference_causal_or_not_odd_lengths_and_several_key_blocks():
    problem = get_problem("attention_rotary")
    kernel = load_starter("attention_rotary")
    small = {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 1}  # several blocks, a diagonal one
    fn = lambda *a: kernel.attention_rotary(*a, knobs=small)  # noqa: E731
    for shape in ({"B": 1, "H": 2, "Hkv": 1, "S": 37, "D": 32, "causal": 1},
                  {"B": 1, "H": 2, "Hkv": 2, "S": 23, "D": 16, "causal": 0}):
        for dtype in (torch.float32, torch.bfloat16):
            halves = [c for c in problem.adversarial_inputs(dict(shape), dtype, "cpu", 3) if c[0] == "independent-halves"]
            for name, args in [("random", problem.make_inputs(dict(shape), dtype, "cpu", 11))] + halves:
                assert judged(problem, dtype, fn, args), (shape, dtype, name)
                if dtype == torch.float32:  # eager's pair, SDPA on rotated q and k, agrees
                    assert torch.allclose(fn(*args), problem.eager(*args), atol=2e-5, rtol=1e-4)


def _plan(spec, config, fuse):
    from autokernel.models import load_model
    from autokernel.profiler import profile_model

    loaded = load_model(spec, dtype=torch.float32, device="cpu", input_shape=[2, 12], config_overrides=config)
    return profile_model(loaded, warmup=0, iters=1, fuse_rotary=fuse)


TINY_HF_LLAMA = "hidden_size=32,num_hidden_layers=1,num_attention_heads=4,num_key_value_heads=2,intermediate_size=64,vocab_size=128"


@pytest.mark.parametrize("spec, config, module", [
    ("llama", {"n_layers": "1"}, "layers.0.attn"),
    pytest.param("hf:llama", TINY_HF_LLAMA, "model.model.layers.0.self_attn",
                 marks=pytest.mark.skipif(not HF, reason="transformers is not installed")),
])
def test_the_profiler_plans_the_pair_when_asked(spec, config, module):
    plan = _plan(spec, config, True)
    fused = {p.kind: p for p in plan.problems}
    assert "rotary" not in fused and "attention" not in fused
    p = fused["attention_rotary"]
    d = 16 if spec == "llama" else 8
    assert p.shapes == [{"B": 2, "H": 4, "Hkv": 2, "S": 12, "D": d, "causal": 1}] and p.modules == [module]
    if spec == "llama":  # the rotation's ops are the fused problem's: nothing left uncovered
        assert plan.covered_fraction == pytest.approx(1.0)
    plain = {p.kind for p in _plan(spec, config, False).problems}
    assert "attention_rotary" not in plain and {"rotary", "attention"} <= plain


def _fused_problem(shape, modules, calls=1):
    return PlanProblem("attention_rotary", "attention_rotary", "fp32", [shape], [calls], 100.0, 0.2, modules)


@pytest.fixture(scope="module")
def llama2():
    from autokernel.models import load_model

    return load_model("llama", dtype=torch.float32, device="cpu", input_shape=[1, 8], config_overrides={"n_layers": "2"})


def test_apply_runs_the_pair_as_one_op_in_the_llama_example(tmp_path, llama2):
    shape = {"B": 1, "H": 4, "Hkv": 2, "S": 8, "D": 16, "causal": 1}
    wd = make_workdir(tmp_path / "wd", [_fused_problem(shape, ["layers.0.attn", "layers.1.attn"], 2)])
    patched = apply(llama2.model, wd)
    assert sorted(patched._autokernel_replaced) == [("layers.0.attn", "attention_rotary"),
                                                   ("layers.1.attn", "attention_rotary")]
    op = patched._autokernel_ops["attention_rotary"]
    before = OP_CALLS[op]
    with torch.no_grad():
        x = llama2.make_inputs(3)
        out, ref = patched(*x), llama2.model(*x)
    assert OP_CALLS[op] - before == 2
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-4)


def test_only_separate_kernels_kept_keeps_the_separate_paths(tmp_path, llama2):
    """A fused kernel with no correct row in results.tsv is not applied: the rotary and attention
    ops run as before."""
    shape = {"B": 1, "H": 4, "Hkv": 2, "S": 8, "D": 16, "causal": 1}
    probs = [PlanProblem("rotary", "rotary", "fp32", [{"B": 1, "H": 4, "S": 8, "D": 16}, {"B": 1, "H": 2, "S": 8, "D": 16}],
                         [2, 2], 100.0, 0.1, ["layers.0.attn", "layers.1.attn"]),
             PlanProblem("attention", "attention", "fp32", [dict(shape)], [2], 100.0, 0.1,
                         ["layers.0.attn", "layers.1.attn"]),
             _fused_problem(shape, ["layers.0.attn", "layers.1.attn"], 2)]
    header = ("experiment\tproblem\tagent\tstatus\tfailed_stage\tlatency_us\tthroughput\tthroughput_unit\tpct_roofline\t"
              "speedup_vs_eager\tspeedup_vs_start\twall_s\ttokens\tcommit\tdescription\n")
    rows = "".join(f"{i}\t{name}\ttuner\tbaseline\t\t10\t\t\t\t\t1.0\t1\t0\tabc\tstart\n"
                   for i, name in enumerate(("rotary", "attention"), 1))
    rows += "3\tattention_rotary\ttuner\tincorrect\tnumerics\t\t\t\t\t\t\t1\t0\tabc\tstart\n"
    patched = apply(llama2.model, make_workdir(tmp_path / "wd", probs, results=header + rows))
    assert {kind for _, kind in patched._autokernel_replaced} == {"rotary", "attention"}
    assert "attention_rotary" not in patched._autokernel_ops
    before = dict(OP_CALLS)
    with torch.no_grad():
        x = llama2.make_inputs(4)
        out, ref = patched(*x), llama2.model(*x)
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-4)
    calls = {name: OP_CALLS[op] - before.get(op, 0) for name, op in patched._autokernel_ops.items()}
    assert calls == {"rotary": 4, "attention": 2}


def test_apply_then_torch_compile_traces_the_fused_op(tmp_path, llama2):
    shape = {"B": 1, "H": 4, "Hkv": 2, "S": 8, "D": 16, "causal": 1}
    patched = apply(llama2.model, make_workdir(tmp_path / "wd", [_fused_problem(shape, ["layers.0.attn", "layers.1.attn"], 2)]))
    torch._dynamo.reset()
    compiled = torch.compile(patched, backend="aot_eager", fullgraph=True)
    op = patched._autokernel_ops["attention_rotary"]
    before = OP_CALLS[op]
    with torch.no_grad():
        x = llama2.make_inputs(5)
        out, ref = compiled(*x), llama2.model(*x)
    assert OP_CALLS[op] > before
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-4)


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_hugging_face_llama_runs_the_fused_op_without_a_cache_and_its_own_paths_with_one(tmp_path):
    """transformers' forward updates the KV cache with the rotated keys between the rotation and
    the attention: with a cache the method runs as before (the cache holds rotated keys), without
    one the pair is one op; the logits match transformers' own either way."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                                      num_key_value_heads=2, intermediate_size=128, vocab_size=128)
    model = transformers.LlamaForCausalLM._from_config(config, attn_implementation="sdpa").eval()
    shape = {"B": 2, "H": 4, "Hkv": 2, "S": 6, "D": 16, "causal": 1}
    patched = apply(model, make_workdir(tmp_path / "wd", [_fused_problem(shape, ["model.layers.0.self_attn"])],
                                        model="custom"))
    assert ("model.layers.0.self_attn", "attention_rotary") in patched._autokernel_replaced
    op = patched._autokernel_ops["attention_rotary"]
    ids = torch.randint(0, 128, (2, 6))
    with torch.no_grad():
        before = OP_CALLS[op]
        got = patched(ids, use_cache=False).logits
        assert OP_CALLS[op] - before == 1
        assert torch.allclose(got, model(ids, use_cache=False).logits, atol=1e-5, rtol=1e-4)
        out = patched(ids, use_cache=True)
        assert OP_CALLS[op] - before == 1  # the cache: transformers' own path
        want = model(ids, use_cache=True)
        assert torch.allclose(out.logits, want.logits, atol=1e-5, rtol=1e-4)
        assert torch.allclose(out.past_key_values.layers[0].keys, want.past_key_values.layers[0].keys)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(q, k, cos, sin):
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class MaskedAttention(nn.Module):
    """Rotary, then SDPA with a mask: the fused op cannot take the call; the pair is rotated
    (by the model's own function) before SDPA runs."""

    n_heads = 2

    def forward(self, q, k, v, cos, sin, mask):
        q, k = apply_rotary(q, k, cos, sin)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_a_call_the_fused_op_cannot_take_gets_rotated_q_and_k(tmp_path):
    shape = {"B": 1, "H": 2, "Hkv": 2, "S": 5, "D": 8, "causal": 0}
    m = MaskedAttention()
    patched = apply(m, make_workdir(tmp_path / "wd", [_fused_problem(shape, [""])], model="custom"))
    assert ("", "attention_rotary") in patched._autokernel_replaced
    op = patched._autokernel_ops["attention_rotary"]
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 8, generator=gen) for _ in range(3))
    angle = torch.rand(5, 8, generator=gen)
    mask = torch.rand(1, 1, 5, 5, generator=gen) > 0.3
    mask[..., 0] = True
    before = OP_CALLS[op]
    with torch.no_grad():
        out = patched(q, k, v, angle.cos(), angle.sin(), mask)
    assert OP_CALLS[op] == before
    assert torch.allclose(out, m(q, k, v, angle.cos(), angle.sin(), mask), atol=1e-6)


def _site(source: str):
    import linecache

    namespace = {"F": F, "torch": torch, "apply_rotary": apply_rotary}
    # inspect.getsource needs the text: register it under the function's file name
    name = f"<pair-site-{abs(hash(source))}>"
    linecache.cache[name] = (len(source), None, textwrap.dedent(source).splitlines(True), name)
    code = compile(textwrap.dedent(source), name, "exec")
    exec(code, namespace)  # noqa: S102
    return pair_site(namespace["forward"])


def test_the_source_check_takes_only_rotated_q_and_k_that_go_to_attention_alone():
    ok = _site("""
        def forward(self, q, k, v, cos, sin, cache=None):
            q, k = apply_rotary(q, k, cos, sin)
            if cache is not None:
                k = cache.update(k)
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    """)
    assert ok is not None and ok.rotary == "apply_rotary" and [g[0] for g in ok.guards] == ["cache"]
    refused = {
        "q read after the attention": """
            def forward(self, q, k, v, cos, sin):
                q, k = apply_rotary(q, k, cos, sin)
                y = F.scaled_dot_product_attention(q, k, v)
                return y + q.sum()""",
        "k read before the attention": """
            def forward(self, q, k, v, cos, sin):
                q, k = apply_rotary(q, k, cos, sin)
                k = k * 2
                return F.scaled_dot_product_attention(q, k, v)""",
        "the guard is not a parameter": """
            def forward(self, q, k, v, cos, sin):
                cache = self.cache
                q, k = apply_rotary(q, k, cos, sin)
                if cache is not None:
                    k = cache.update(k)
                return F.scaled_dot_product_attention(q, k, v)""",
        "q and k swapped": """
            def forward(self, q, k, v, cos, sin):
                q, k = apply_rotary(q, k, cos, sin)
                return F.scaled_dot_product_attention(k, q, v)""",
        "SDPA through torch.nn.functional": """
            def forward(self, q, k, v, cos, sin):
                q, k = apply_rotary(q, k, cos, sin)
                return torch.nn.functional.scaled_dot_product_attention(q, k, v)""",
        "no attention": """
            def forward(self, q, k, v, cos, sin):
                q, k = apply_rotary(q, k, cos, sin)
                return q @ k.transpose(-1, -2)""",
    }
    for why, source in refused.items():
        assert _site(source) is None, why


def test_profile_fused_rotary_then_verify_the_llama_example(tmp_path):
    """``autokernel profile --fused-rotary`` plans the pair; with the fused starter as the run's
    only kernel the patched model verifies against the original."""
    import json
    import shutil

    from typer.testing import CliRunner

    from autokernel.cli import app
    from autokernel.plan import load_plan
    from autokernel.verify import verify

    res = CliRunner().invoke(app, ["profile", "--model", "llama", "--device", "cpu", "--input-shape", "2x12",
                                   "--config", "n_layers=1", "--fused-rotary", "--warmup", "0", "--iters", "1",
                                   "--out", str(tmp_path / "plan.json")])
    assert res.exit_code == 0, res.output
    plan = load_plan(tmp_path / "plan.json")
    assert [p.kind for p in plan.problems if "attention" in p.kind or "rotary" in p.kind] == ["attention_rotary"]
    assert "--fused-rotary:" not in res.output  # it found the pair: no note
    (tmp_path / "problems" / "attention_rotary").mkdir(parents=True)
    shutil.copyfile(KERNELS_DIR / "attention_rotary.py", tmp_path / "problems" / "attention_rotary" / "kernel.py")
    (tmp_path / "run.json").write_text(json.dumps({"model": "llama", "dtype": "fp32", "device": "cpu",
                                                   "input_shape": [2, 12], "config": {"n_layers": "1"}}))
    result = verify(tmp_path, seeds=(0, 1), timing=False, breakdown=False, log=lambda *_: None)
    assert result.passed and ("layers.0.attn", "attention_rotary") in [tuple(r) for r in result.replaced]


def _pair_tree(mask: bool = False, between: str | None = None, k_heads: int = 2):
    """A GPU-style trace of one attention module: a marked rotary function on q [2,8,64,64] and
    k [2,2,64,64], then SDPA (kv heads repeated to 8 by transformers' repeat_kv)."""
    from autokernel.recognize import ModuleInfo, Node, ScopeCall, TensorMeta

    def meta(*shapes):
        return [TensorMeta(s, "bf16") for s in shapes]

    root = Node(name="ak::forward::0")
    attn = root.add(Node(name="ak::m::0", scope=ScopeCall("module", "layers.0.attn", ModuleInfo(
        "layers.0.attn", "LlamaAttention", heads=8, kv_heads=2), args=meta((2, 64, 512)))))
    q, k, table = (2, 8, 64, 64), (2, k_heads, 64, 64), (1, 64, 64)
    rot = attn.add(Node(name="ak::f::1", scope=ScopeCall("function", "m.apply_rotary_pos_emb", None,
                                                          args=meta(q, k, table, table), outputs=meta(q, k),
                                                          code_names=("rotate_half",))))
    rot.add(Node(name="aten::mul", shapes=[list(q), list(table)], kernels=[("elementwise<mul>", 2.0)]))
    if between:
        attn.add(Node(name=between, shapes=[list(q)], kernels=[(f"{between} kernel", 1.0)]))
    args = [list(q), [2, 8, 64, 64], [2, 8, 64, 64], [2, 1, 64, 64] if mask else []] + [[]] * 4
    sdpa = attn.add(Node(name="aten::scaled_dot_product_attention", shapes=args,
                         concrete=[None, None, None, None, 0.0, not mask, None, False],
                         dtypes=["c10::BFloat16"] * 3 + (["bool"] if mask else [])))
    sdpa.add(Node(name="aten::_scaled_dot_product_flash_attention", shapes=[list(q)] * 3,
                  kernels=[("flash_fwd_kernel", 20.0)]))
    return root, attn, rot, sdpa


def test_fused_rotary_that_finds_no_pair_says_so(tmp_path):
    """hf:phi's partial rotary (the rotated part of q and k concatenated with the rest before
    attention) is no pair the fused kind takes: ``profile --fused-rotary`` planned rotary and
    attention apart without a word, as if the flag had not been given (and ``--fused-mlp`` a
    GELU MLP as it was)."""
    pytest.importorskip("transformers")
    from typer.testing import CliRunner

    from autokernel.cli import app
    from autokernel.plan import load_plan

    res = CliRunner().invoke(app, ["profile", "--model", "hf:phi", "--device", "cpu", "--input-shape", "1x8",
                                   "--config", "hidden_size=32,num_hidden_layers=1,num_attention_heads=2,"
                                   "intermediate_size=64,vocab_size=128", "--fused-rotary", "--fused-mlp", "--warmup", "0",
                                   "--iters", "1", "--out", str(tmp_path / "plan.json")])
    assert res.exit_code == 0, res.output
    kinds = {p.kind for p in load_plan(tmp_path / "plan.json").problems}
    assert {"rotary", "attention"} <= kinds and "attention_rotary" not in kinds
    assert "--fused-rotary: no rotary on q and k here is directly followed by unmasked attention" in res.output
    assert "--fused-mlp: no SwiGLU MLP here" in res.output  # phi's MLP is fc2(gelu(fc1(x)))


def test_the_pair_in_a_trace_and_what_breaks_it():
    from autokernel.profiler import build_plan
    from autokernel.recognize import pair_rotary_attention

    root, attn, rot, sdpa = _pair_tree()
    found = pair_rotary_attention(attn, "bf16")
    assert set(found) == {id(rot), id(sdpa)} and found[id(rot)] is found[id(sdpa)]
    assert found[id(rot)].shapes == [({"B": 2, "H": 8, "Hkv": 2, "S": 64, "D": 64, "causal": 1}, 1)]
    plan = build_plan([root], model="m", device="cuda", time_kind="gpu", dtype="bf16", input_shape=[2, 64], iters=1,
                      fuse_rotary=True)
    assert [(p.kind, p.time_us) for p in plan.problems] == [("attention_rotary", 22.0)]  # both kernels
    assert not pair_rotary_attention(_pair_tree(mask=True)[1], "bf16")  # a mask: attention_masked's
    assert not pair_rotary_attention(_pair_tree(between="aten::add")[1], "bf16")  # k or q changed between
    assert not pair_rotary_attention(_pair_tree(k_heads=4)[1], "bf16")  # not the k attention reads


def test_a_run_with_the_pair_fused_is_another_run():
    from autokernel.pipeline import _run_differences

    old = {"model": "llama", "dtype": "fp32", "input_shape": [2, 8], "config": {}}  # run.json before the flag
    assert not _run_differences(old, dict(old, fused_rotary=False))
    assert _run_differences(old, dict(old, fused_rotary=True))


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_hugging_face_eager_attention_gets_rotated_q_and_k(tmp_path):
    """transformers' eager attention (not SDPA) is not ours: the pair reaches it rotated."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                      num_key_value_heads=1, intermediate_size=64, vocab_size=64)
    model = transformers.LlamaForCausalLM._from_config(config, attn_implementation="eager").eval()
    shape = {"B": 1, "H": 2, "Hkv": 1, "S": 5, "D": 16, "causal": 1}
    patched = apply(model, make_workdir(tmp_path / "wd", [_fused_problem(shape, ["model.layers.0.self_attn"])],
                                        model="custom"))
    op = patched._autokernel_ops["attention_rotary"]
    ids = torch.randint(0, 64, (1, 5))
    before = OP_CALLS[op]
    with torch.no_grad():
        got = patched(ids, use_cache=False).logits
        want = model(ids, use_cache=False).logits
    assert OP_CALLS[op] == before
    assert torch.allclose(got, want, atol=1e-6, rtol=1e-5)


def test_a_rotary_function_made_into_a_module_is_still_recognised():
    """transformers 5.25 (with the ``kernels`` package it installs) turns ``apply_rotary_pos_emb``
    into an ``nn.Module`` instance whose class's ``forward`` calls the function it closes over:
    the fused pair, the profiler's marks and Gemma's rotary coverage were all lost."""
    from autokernel.integrate.calls import _rotary_form
    from autokernel.recognize import module_wrapped_function

    def made_into_a_module(func):
        class Func(torch.nn.Module):
            def forward(self, *args, **kwargs):
                return func(*args, **kwargs)
        return Func()

    wrapped = made_into_a_module(apply_rotary_pos_emb)
    assert module_wrapped_function(wrapped) is apply_rotary_pos_emb
    assert module_wrapped_function(apply_rotary_pos_emb) is apply_rotary_pos_emb
    assert module_wrapped_function(torch.nn.Linear(2, 2)).__class__ is torch.nn.Linear  # no function inside
    assert _rotary_form(wrapped) is True


def rotate_half(x):  # module level: the recognisers read the names a function's code refers to
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def test_fused_rotary_on_a_model_without_rotary_says_there_is_none():
    """New-user trial: `profile --model hf:whisper --fused-rotary` (learned positions, no rotary
    at all) said "no rotary on q and k here is directly followed by unmasked attention on them
    (a partial rotary, a mask, or another rotary form)", as if a rotary had been found unfused."""
    from autokernel.fusion_notes import unfused_flags
    from autokernel.plan import Plan, PlanProblem

    def plan(*kinds):
        return Plan(model="m", device="cpu", time_kind="cpu", dtype="fp32", input_shape=[1, 8], total_time_us=10.0,
                    problems=[PlanProblem(k, k, "fp32", [{"M": 8, "N": 64}], [1], 1.0, 0.1, []) for k in kinds])

    (none,) = unfused_flags(plan("attention", "matmul", "linear_gelu"), fuse_rotary=True, fuse_mlp=False)
    assert none.startswith("--fused-rotary: no rotary embedding was planned here") and "followed by" not in none
    (apart,) = unfused_flags(plan("rotary", "attention"), fuse_rotary=True, fuse_mlp=False)
    assert "directly followed by unmasked attention" in apart
    assert unfused_flags(plan("attention_rotary"), fuse_rotary=True, fuse_mlp=False) == []
