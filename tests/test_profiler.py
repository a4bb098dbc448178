"""The profiler: real CPU profiles of the shipped examples (kinds and shapes derived from each
config), the plan's accounting, the CLI, and the GPU attribution logic on hand-made traces."""
from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest
import torch
from typer.testing import CliRunner

from autokernel.cli import app
from autokernel.models import load_model
from autokernel.plan import load_plan, save_plan
from autokernel.profiler import build_plan, events_to_tree, profile_model
from autokernel.recognize import ModuleInfo, Node, ScopeCall, TensorMeta, recognize_op

LLAMA_CFG = dict(vocab_size=96, dim=48, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=80)
B, S = 3, 20


def _problem(plan, kind):
    found = [p for p in plan.problems if p.kind == kind]
    assert len(found) == 1, f"{kind}: {[p.name for p in plan.problems]}"
    return found[0]


def _check_accounting(plan):
    total = sum(p.fraction for p in plan.problems) + sum(u.fraction for u in plan.uncovered)
    assert total <= 1.0
    assert total > 0.99  # nothing lost: every piece of time is somewhere
    assert all(p.time_us > 0 and 0 < p.fraction <= 1 for p in plan.problems)
    assert plan.total_time_us > 0
    for p in plan.problems:
        assert len(p.shapes) == len(p.calls) and all(c >= 1 for c in p.calls)


@pytest.fixture(scope="module")
def llama_plan():
    loaded = load_model("llama", dtype=torch.float32, device="cpu", input_shape=[B, S],
                        config_overrides={k: str(v) for k, v in LLAMA_CFG.items()})
    return profile_model(loaded, warmup=1, iters=2)


def test_llama_profile_finds_kinds_with_real_shapes(llama_plan):
    c = LLAMA_CFG
    M, hd = B * S, c["dim"] // c["n_heads"]
    plan = llama_plan
    assert plan.time_kind == "cpu" and plan.device == "cpu" and "CPU" in plan.device_name
    assert plan.input_shape == [B, S] and plan.dtype == "fp32" and plan.model == "llama"

    rms = _problem(plan, "rmsnorm")
    assert rms.shapes == [{"M": M, "N": c["dim"]}]
    assert rms.calls == [1] and rms.modules == ["layers.0.attn_norm"]  # the one norm with no residual to add
    add_rms = _problem(plan, "add_rmsnorm")  # norm(h, residual): the residual add inside the norm
    assert add_rms.shapes == [{"M": M, "N": c["dim"]}] and add_rms.calls == [2 * c["n_layers"]]
    assert "norm" in add_rms.modules and "layers.0.mlp_norm" in add_rms.modules

    attn = _problem(plan, "attention")
    assert attn.shapes == [{"B": B, "H": c["n_heads"], "Hkv": c["n_kv_heads"], "S": S, "D": hd, "causal": 1}]
    assert attn.calls == [c["n_layers"]]

    rot = _problem(plan, "rotary")
    by_heads = {s["H"]: calls for s, calls in zip(rot.shapes, rot.calls)}
    assert sorted(rot.shapes, key=lambda s: -s["H"]) == [
        {"B": B, "H": c["n_heads"], "S": S, "D": hd}, {"B": B, "H": c["n_kv_heads"], "S": S, "D": hd}]
    assert by_heads == {c["n_heads"]: c["n_layers"], c["n_kv_heads"]: c["n_layers"]}
    assert "apply_rotary" in rot.note and "rotate_half" in rot.note

    swiglu = _problem(plan, "swiglu")
    assert swiglu.shapes == [{"M": M, "N": c["hidden_dim"]}]
    assert swiglu.calls == [c["n_layers"]]

    mm = _problem(plan, "matmul")
    calls = {tuple(s.values()): n for s, n in zip(mm.shapes, mm.calls)}
    L = c["n_layers"]
    assert calls == {
        (M, c["dim"], c["dim"]): 2 * L,  # wq, wo
        (M, c["n_kv_heads"] * hd, c["dim"]): 2 * L,  # wk, wv
        (M, c["hidden_dim"], c["dim"]): 2 * L,  # gate, up
        (M, c["dim"], c["hidden_dim"]): L,  # down
        (M, c["vocab_size"], c["dim"]): 1,  # lm_head
    }
    assert "layers.1.mlp.down" in mm.modules and "lm_head" in mm.modules
    assert "transposed" in mm.note

    emb = _problem(plan, "embedding")
    assert emb.shapes == [{"M": M, "V": c["vocab_size"], "N": c["dim"]}] and emb.modules == ["embed"]

    assert {p.name for p in plan.problems} == {"rmsnorm", "add_rmsnorm", "attention", "rotary", "swiglu", "matmul",
                                               "embedding"}
    assert not any(u.name in ("aten::add", "aten::embedding") for u in plan.uncovered)
    _check_accounting(plan)


def test_plan_round_trips(llama_plan, tmp_path):
    save_plan(llama_plan, tmp_path / "plan.json")
    again = load_plan(tmp_path / "plan.json")
    assert again == llama_plan
    assert json.loads((tmp_path / "plan.json").read_text())["covered_fraction"] == pytest.approx(llama_plan.covered_fraction)


def test_fused_mlp_option_and_hooks_are_removed():
    loaded = load_model("llama", input_shape=[2, 8])
    module = sys.modules[type(loaded.model).__module__]
    rotary_before = module.apply_rotary
    plan = profile_model(loaded, warmup=0, iters=1, fuse_mlp=True)
    cfg = loaded.model.config
    fused = _problem(plan, "fused_mlp")
    assert fused.shapes == [{"M": 16, "D": cfg.dim, "H": cfg.hidden_dim}]
    assert not [p for p in plan.problems if p.kind == "swiglu"]
    mm = _problem(plan, "matmul")  # only the attention projections and the LM head are left
    assert (16, cfg.hidden_dim, cfg.dim) not in {tuple(s.values()) for s in mm.shapes}
    # the profiler leaves the model as it found it
    assert module.apply_rotary is rotary_before
    assert all(not m._forward_pre_hooks and not m._forward_hooks for m in loaded.model.modules())


@pytest.mark.parametrize("name,causal", [("gpt2", 1), ("bert", 0)])
def test_gpt2_and_bert_profiles(name, causal):
    loaded = load_model(name, input_shape=[2, 16])
    plan = profile_model(loaded, warmup=1, iters=1)
    cfg = loaded.model.config
    heads = getattr(cfg, "n_head", None) or cfg.n_heads
    width = getattr(cfg, "n_embd", None) or cfg.hidden_size
    ln = _problem(plan, "layernorm")
    assert ln.shapes == [{"M": 32, "N": width}]
    attn = _problem(plan, "attention")
    assert attn.shapes == [{"B": 2, "H": heads, "Hkv": heads, "S": 16, "D": width // heads, "causal": causal}]
    mm = _problem(plan, "matmul")
    assert {"M": 32, "N": cfg.vocab_size, "K": width} in mm.shapes
    gelu = _problem(plan, "gelu")  # F.gelu, its form read from the call (the trace keeps no strings)
    assert gelu.shapes[0] == {"M": 32, "N": 4 * width, "tanh": causal}  # GPT-2 uses the tanh form, BERT erf
    assert not any(u.name == "aten::gelu" for u in plan.uncovered)
    _check_accounting(plan)


NOTHING = """
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return (x.relu() + 1).exp()
"""


def test_cli_profile_writes_plan(tmp_path):
    out = tmp_path / "sub" / "plan.json"
    result = CliRunner().invoke(app, ["profile", "--model", "gpt2", "--device", "cpu", "--dtype", "fp32",
                                      "--input-shape", "1x8", "--iters", "1", "--warmup", "0", "--out", str(out)])
    assert result.exit_code == 0, result.output
    plan = load_plan(out)
    assert {p.kind for p in plan.problems} >= {"layernorm", "attention", "matmul"}
    assert "layernorm" in result.output and "uncovered" in result.output and "CPU op time" in result.output


def test_cli_model_with_nothing_supported(tmp_path):
    path = tmp_path / "nothing.py"
    path.write_text(NOTHING)
    out = tmp_path / "plan.json"
    result = CliRunner().invoke(app, ["profile", "--model", f"{path}:Model", "--input-shape", "8x16",
                                      "--device", "cpu", "--iters", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "nothing in this model" in result.output
    plan = load_plan(out)
    assert plan.problems == [] and plan.covered_fraction == 0
    assert {u.name for u in plan.uncovered} >= {"aten::relu", "aten::exp"}


# ------------------------------------------------------------------ GPU path, hand-made traces
def _op(name, shapes=(), kernels=(), concrete=(), dtypes=(), self_us=50.0):
    return Node(name=name, shapes=[list(s) for s in shapes], kernels=list(kernels), concrete=list(concrete),
                dtypes=list(dtypes), self_us=self_us)


def _scope(qualname, cls_name, args, **info):
    return Node(name="ak::m::0", scope=ScopeCall("module", qualname, ModuleInfo(qualname, cls_name, **info),
                                                 args=[TensorMeta(tuple(a), "bf16") for a in args]))


def _gpu_trace():
    root = Node(name="ak::forward::0")
    # An RMSNorm module: every kernel inside is rmsnorm time.
    norm = root.add(_scope("layers.0.norm", "LlamaRMSNorm", [(2, 64, 512)], eps=1e-5))
    norm.add(_op("aten::pow", [(2, 64, 512)], [("vectorized_elementwise_kernel<pow>", 3.0)]))
    norm.add(_op("aten::mean", [(2, 64, 512)], [("reduce_kernel<mean>", 4.0)]))
    norm.add(_op("aten::mul", [(2, 64, 512), (512,)], [("vectorized_elementwise_kernel<mul>", 2.0)]))
    # An attention module with repeated kv heads: SDPA sees 8 heads for k, the module says 2.
    attn = root.add(_scope("layers.0.attn", "LlamaAttention", [(2, 64, 512)], heads=8, kv_heads=2))
    lin = attn.add(_op("aten::linear", [(2, 64, 512), (512, 512), []], dtypes=["c10::BFloat16", "c10::BFloat16"]))
    lin.add(_op("aten::t", [(512, 512)], self_us=900.0))  # CPU time never counts on a GPU
    lin.add(_op("aten::mm", [(128, 512), (512, 512)], [("nvjet_tst_128x256_64x4_2x1_v_bz_TNT", 10.0)]))
    sdpa = attn.add(_op("aten::scaled_dot_product_attention", [(2, 8, 64, 64), (2, 8, 64, 64), (2, 8, 64, 64)] + [[]] * 5,
                        concrete=[None, None, None, None, 0.0, True, None, False], dtypes=["c10::BFloat16"] * 3))
    sdpa.add(_op("aten::_scaled_dot_product_flash_attention", [(2, 8, 64, 64)] * 3,
                 [("pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>", 20.0)]))
    # The GPU-timeline copy of a range shares the range's name: not a kernel.
    attn.kernels = [(attn.name, 1000.0)]
    # An op no kind covers.
    root.add(_op("aten::cumsum", [(2, 64, 2048)], [("cumsum_kernel", 5.0)]))
    # A GEMM-named kernel under an op no recognizer knows (here on the runtime launch event
    # below it): shapes from the op's operands.
    scaled = root.add(_op("aten::_scaled_mm", [(128, 512), (512, 256), [], []]))
    scaled.add(_op("cudaLaunchKernel", [], [("sm90_xmma_gemm_e4m3_bf16", 6.0)]))
    # A GEMM kernel whose shape cannot be read.
    root.add(_op("aten::_weird", [(7,)], [("cutlass_kernel_xyz", 1.0)]))
    return root


def test_gpu_trace_attribution():
    plan = build_plan([_gpu_trace()], model="m", device="cuda", time_kind="gpu", dtype="bf16",
                      input_shape=[2, 64], iters=1, device_name="NVIDIA H200")
    assert plan.time_kind == "gpu" and plan.device_name == "NVIDIA H200"
    assert plan.total_time_us == pytest.approx(3 + 4 + 2 + 10 + 20 + 5 + 6 + 1)

    rms = _problem(plan, "rmsnorm")
    assert rms.time_us == pytest.approx(9.0) and rms.shapes == [{"M": 128, "N": 512}] and rms.calls == [1]
    assert rms.modules == ["layers.0.norm"] and "eps=1e-05" in rms.note

    mm = _problem(plan, "matmul")
    assert mm.time_us == pytest.approx(16.0)
    assert {tuple(s.values()): n for s, n in zip(mm.shapes, mm.calls)} == {(128, 512, 512): 1, (128, 256, 512): 1}
    assert mm.modules == ["layers.0.attn"]

    attn = _problem(plan, "attention")
    assert attn.time_us == pytest.approx(20.0)
    assert attn.shapes == [{"B": 2, "H": 8, "Hkv": 2, "S": 64, "D": 64, "causal": 1}]
    assert "repeated" in attn.note

    uncovered = {u.name: u.time_us for u in plan.uncovered}
    assert uncovered["aten::cumsum"] == pytest.approx(5.0)
    assert any("GEMM kernel, shape unknown" in name for name in uncovered)
    assert sum(p.fraction for p in plan.problems) + sum(u.fraction for u in plan.uncovered) == pytest.approx(1.0)


def test_gpu_trace_calls_and_time_are_per_forward():
    plan = build_plan([_gpu_trace(), _gpu_trace()], model="m", device="cuda", time_kind="gpu", dtype="bf16",
                      input_shape=[2, 64], iters=2)
    assert plan.total_time_us == pytest.approx(51.0)
    assert _problem(plan, "rmsnorm").calls == [1]
    assert _problem(plan, "attention").time_us == pytest.approx(20.0)


def test_cpu_time_is_self_time_of_ops():
    root = Node(name="ak::forward::0")
    lin = root.add(_op("aten::linear", [(4, 8), (16, 8), (16,)], self_us=2.0))
    lin.add(_op("aten::addmm", [(16,), (4, 8), (8, 16)], self_us=30.0))
    root.add(_op("aten::relu", [(4, 16)], self_us=8.0))
    plan = build_plan([root], model="m", device="cpu", time_kind="cpu", dtype="fp32", input_shape=[4, 8], iters=1)
    mm = _problem(plan, "matmul")
    assert mm.time_us == pytest.approx(32.0) and mm.shapes == [{"M": 4, "N": 16, "K": 8}]
    assert plan.total_time_us == pytest.approx(40.0)
    assert plan.uncovered[0].name == "aten::relu"


def _cpu_pass(i, add_us=10.0, mm_us=30.0):
    root = Node(name=f"ak::forward::{i}")
    lin = root.add(_op("aten::linear", [(4, 8), (16, 8), (16,)], self_us=2.0))
    lin.add(_op("aten::addmm", [(16,), (4, 8), (8, 16)], self_us=mm_us))
    root.add(_op("aten::add", [(4, 16), (4, 16)], self_us=add_us))
    return root


def _plan_of(trees):
    return build_plan(trees, model="m", device="cpu", time_kind="cpu", dtype="fp32", input_shape=[4, 8],
                      iters=len(trees))


def test_shares_take_each_ops_median_over_the_passes():
    """One op preempted in one pass (a busy machine) moves no share; an op slow in most passes
    (a real regression) does; passes that ran different ops are averaged as they are."""
    clean = _plan_of([_cpu_pass(i) for i in range(3)])
    assert clean.covered_fraction == pytest.approx(32 / 42)
    spiked = _plan_of([_cpu_pass(0), _cpu_pass(1, add_us=500.0), _cpu_pass(2)])
    assert spiked.covered_fraction == pytest.approx(clean.covered_fraction)
    assert spiked.total_time_us == pytest.approx(42.0)
    slow = _plan_of([_cpu_pass(0, add_us=40.0), _cpu_pass(1, add_us=40.0), _cpu_pass(2)])
    assert slow.covered_fraction == pytest.approx(32 / 72)
    # the same spread of times on a GPU: each kernel's median
    gpu = [_gpu_trace() for _ in range(3)]
    gpu[1].children[0].children[0].kernels = [("vectorized_elementwise_kernel<pow>", 300.0)]
    plan = build_plan(gpu, model="m", device="cuda", time_kind="gpu", dtype="bf16", input_shape=[2, 64], iters=3)
    assert _problem(plan, "rmsnorm").time_us == pytest.approx(9.0)
    # different ops in one pass: no median, the mean of the passes
    other = _cpu_pass(2)
    other.add(_op("aten::cumsum", [(4, 16)], self_us=12.0))
    mixed = _plan_of([_cpu_pass(0), _cpu_pass(1, add_us=500.0), other])
    assert mixed.total_time_us == pytest.approx((42 * 3 + 490 + 12) / 3)


def _layer_end(between=(), norm_shape=(2, 4, 8), addend=(2, 4, 8)):
    """A block whose forward ends with a residual add, then the next block and its first norm."""
    root = Node(name="ak::forward::0")
    block = root.add(_scope("h.0", "Block", [(2, 4, 8)]))
    block.add(_op("aten::add", [(2, 4, 8), addend, []], self_us=5.0))
    for op in between:
        root.add(op)
    nxt = root.add(_scope("h.1", "Block", [(2, 4, 8)]))
    norm = nxt.add(_scope("h.1.ln_1", "LayerNorm", [norm_shape], is_layernorm=True))
    norm.add(_op("aten::layer_norm", [norm_shape, [8], [8], [8]], concrete=[None, [8], None, None, 1e-5], self_us=20.0))
    return root


def test_the_add_ending_a_module_is_paired_with_the_norm_called_next():
    plan = build_plan([_layer_end()], model="m", device="cpu", time_kind="cpu", dtype="fp32", input_shape=[2, 4], iters=1)
    fused = _problem(plan, "add_layernorm")
    assert fused.time_us == pytest.approx(25.0) and fused.add_from == {"h.1.ln_1": "h.0"} and not plan.uncovered
    # an op runs between (it might read the sum), or the add broadcasts: the add stays uncovered
    for root in (_layer_end(between=[_op("aten::cumsum", [(2, 4)], self_us=3.0)]), _layer_end(addend=(1, 4, 8))):
        plan = build_plan([root], model="m", device="cpu", time_kind="cpu", dtype="fp32", input_shape=[2, 4], iters=1)
        assert _problem(plan, "layernorm").add_from == {} and "aten::add" in {u.name for u in plan.uncovered}
    # metadata between is no op
    plan = build_plan([_layer_end(between=[_op("aten::view", [(2, 4, 8)], self_us=1.0)])], model="m", device="cpu",
                      time_kind="cpu", dtype="fp32", input_shape=[2, 4], iters=1)
    assert _problem(plan, "add_layernorm").add_from == {"h.1.ln_1": "h.0"}


def test_an_add_whose_rows_the_norm_reads_reshaped_is_paired():
    """OPT's decoder layer reshapes its residual sum to 2-D before its norm, and returns its
    last sum viewed back to 3-D, which the next layer's first norm reads: the norm's input is
    the sum's rows (the same width, the same count), in another shape."""
    plan = build_plan([_layer_end(norm_shape=(8, 8))], model="m", device="cpu", time_kind="cpu", dtype="fp32",
                      input_shape=[2, 4], iters=1)
    assert _problem(plan, "add_layernorm").add_from == {"h.1.ln_1": "h.0"} and not plan.uncovered
    # the same element count in rows of another width is not the sum's rows, nor is one dimension
    # order for another (a transpose, maybe)
    for other in ((2, 2, 16), (4, 2, 8)):
        plan = build_plan([_layer_end(norm_shape=other)], model="m", device="cpu", time_kind="cpu", dtype="fp32",
                          input_shape=[2, 4], iters=1)
        assert "add_layernorm" not in {p.kind for p in plan.problems}

    root = Node(name="ak::forward::0")  # in one forward: x = a + b; x = x.reshape(-1, 8); norm(x)
    layer = root.add(_scope("h.0", "Block", [(2, 4, 8)]))
    layer.add(_op("aten::add", [(2, 4, 8), (2, 4, 8), []], self_us=5.0))
    layer.add(_op("aten::reshape", [(2, 4, 8), []], self_us=1.0))
    norm = layer.add(_scope("h.0.ln_2", "LayerNorm", [(8, 8)], is_layernorm=True))
    norm.add(_op("aten::layer_norm", [(8, 8), [8], [8], [8]], concrete=[None, [8], None, None, 1e-5], self_us=20.0))
    plan = build_plan([root], model="m", device="cpu", time_kind="cpu", dtype="fp32", input_shape=[2, 4], iters=1)
    fused = _problem(plan, "add_layernorm")
    assert fused.modules == ["h.0.ln_2"] and fused.time_us == pytest.approx(25.0) and not plan.uncovered


def test_an_add_followed_by_a_norm_inside_its_own_module_is_not_fused_ahead():
    """OPT's decoder adds the position embeddings, then runs its first layer, whose first norm
    reads the sum: the add does not end the decoder's forward, so no add can be fused ahead
    there (apply found no place, and the norm's time went uncovered with it); the norm is a
    plain layernorm, the add uncovered."""
    root = Node(name="ak::forward::0")
    decoder = root.add(_scope("decoder", "Decoder", [(2, 4)]))
    decoder.add(_op("aten::add", [(2, 4, 8), (2, 4, 8)], self_us=5.0))
    layer = decoder.add(_scope("decoder.layers.0", "Block", [(2, 4, 8)]))
    norm = layer.add(_scope("decoder.layers.0.ln_1", "LayerNorm", [(2, 4, 8)], is_layernorm=True))
    norm.add(_op("aten::layer_norm", [(2, 4, 8), [8], [8], [8]], concrete=[None, [8], None, None, 1e-5],
                 self_us=20.0))
    plan = build_plan([root], model="m", device="cpu", time_kind="cpu", dtype="fp32", input_shape=[2, 4], iters=1)
    assert _problem(plan, "layernorm").modules == ["decoder.layers.0.ln_1"]
    assert "add_layernorm" not in {p.kind for p in plan.problems}
    assert [u.name for u in plan.uncovered] == ["aten::add"]


def test_events_to_tree_keeps_each_kernel_once():
    """FunctionEvent-like objects: the kernel list of a range may hold the range's own GPU
    copy (same name); only real kernels become time."""
    def ev(name, children=(), kernels=(), shapes=(), self_us=1.0):
        e = SimpleNamespace(name=name, cpu_children=list(children), kernels=[SimpleNamespace(name=k, duration=d)
                                                                              for k, d in kernels],
                            input_shapes=[list(s) for s in shapes], input_dtypes=["float"] * len(shapes),
                            concrete_inputs=[None] * len(shapes), self_cpu_time_total=self_us, is_async=False,
                            cpu_parent=None)
        for c in e.cpu_children:
            c.cpu_parent = e
        return e

    mm = ev("aten::mm", kernels=[("ampere_sgemm_64x64_nn", 7.0)], shapes=[(4, 8), (8, 16)])
    scope = ev("ak::m::0", [mm], kernels=[("ak::m::0", 99.0)])
    root = ev("ak::forward::0", [scope, ev("profiler::_record_function_exit._RecordFunction")])
    calls = [ScopeCall("module", "proj", ModuleInfo("proj", "Linear"), args=[TensorMeta((4, 8), "fp32")])]
    trees = events_to_tree([root, scope, mm], calls)
    assert len(trees) == 1
    (scope_node,) = trees[0].children
    assert scope_node.scope is calls[0] and scope_node.kernels == []
    plan = build_plan(trees, model="m", device="cuda", time_kind="gpu", dtype="fp32", input_shape=[4, 8], iters=1)
    assert plan.total_time_us == pytest.approx(7.0)
    assert _problem(plan, "matmul").shapes == [{"M": 4, "N": 16, "K": 8}]


@pytest.mark.parametrize("name,shapes,concrete,expected", [
    ("aten::_softmax", [(6, 10), [], []], [None, -1, False], ("softmax", {"M": 6, "N": 10})),
    ("aten::softmax", [(2, 3, 10), [], []], [None, 1, None], None),  # not the last dim: unsupported
    # F.softmax(bf16 logits, dim=-1, dtype=torch.float) (the MoE routers'): computed in fp32 (ScalarType 6)
    ("aten::softmax", [(6, 10), [], []], [None, -1, 6], ("softmax", {"M": 6, "N": 10}, "fp32")),
    ("aten::cross_entropy_loss", [(12, 50), (12,)], [None, None], ("cross_entropy", {"M": 12, "V": 50})),
    ("aten::sum", [(4, 5, 6), [], []], [None, [-1], False], ("reduce", {"M": 20, "N": 6})),
    ("aten::sum", [(4, 5, 6), [], []], [None, [0], False], None),
    ("aten::layer_norm", [(3, 7, 32), [], [32], [32]], [None, [32], None, None, 1e-5], ("layernorm", {"M": 21, "N": 32})),
    ("aten::bmm", [(5, 6, 7), (5, 7, 8)], [], ("matmul", {"M": 6, "N": 8, "K": 7})),
    ("aten::matmul", [(2, 3, 7), (7, 9)], [], ("matmul", {"M": 6, "N": 9, "K": 7})),
    ("aten::embedding", [(50, 16), (2, 7), [], [], []], [None, None, -1, False, False],
     ("embedding", {"M": 14, "V": 50, "N": 16})),
])
def test_op_recognizers(name, shapes, concrete, expected):
    found = recognize_op(_op(name, shapes, concrete=concrete, dtypes=["c10::BFloat16"]), "bf16")
    if expected is None:
        assert found is None or not hasattr(found, "kind")
    else:
        assert found.kind == expected[0] and found.shapes[0][0] == expected[1]
        assert found.dtype == (expected[2] if len(expected) > 2 else "bf16")


def test_a_residual_add_just_before_a_norm_counts_for_an_add_norm():
    """``x = a + b; norm(x)`` in one forward: the add and the norm are one add_layernorm
    instance.  An add with a broadcast operand, or with an op between it and the norm, is not."""
    root = Node(name="ak::forward::0")
    block = root.add(_scope("h.0", "Block", [(2, 8, 16)]))
    block.add(_op("aten::add", [(2, 8, 16), (2, 8, 16)], self_us=5.0))
    block.add(_op("aten::view", [(2, 8, 16)], self_us=1.0))  # metadata between: still adjacent
    ln = block.add(_scope("h.0.ln_2", "LayerNorm", [(2, 8, 16)], is_layernorm=True))
    ln.add(_op("aten::layer_norm", [(2, 8, 16)], self_us=7.0))
    block.add(_op("aten::add", [(2, 8, 16), (8, 16)], self_us=3.0))  # broadcast: a position embedding
    ln_f = block.add(_scope("ln_f", "LayerNorm", [(2, 8, 16)], is_layernorm=True))
    ln_f.add(_op("aten::layer_norm", [(2, 8, 16)], self_us=2.0))
    block.add(_op("aten::add", [(2, 8, 16), (2, 8, 16)], self_us=4.0))
    block.add(_op("aten::mul", [(2, 8, 16), []], self_us=1.0))
    ln_3 = block.add(_scope("ln_3", "LayerNorm", [(2, 8, 16)], is_layernorm=True))
    ln_3.add(_op("aten::layer_norm", [(2, 8, 16)], self_us=2.0))
    plan = build_plan([root], model="m", device="cpu", time_kind="cpu", dtype="fp32", input_shape=[2, 8], iters=1)
    fused = _problem(plan, "add_layernorm")
    assert fused.shapes == [{"M": 16, "N": 16}] and fused.time_us == pytest.approx(12.0)
    assert fused.modules == ["h.0.ln_2"] and "residual add just before" in fused.note
    assert _problem(plan, "layernorm").modules == ["ln_f", "ln_3"]
    assert {u.name: u.time_us for u in plan.uncovered} == {"aten::add": pytest.approx(7.0), "aten::mul": pytest.approx(1.0)}


def test_log_softmax_then_nll_is_one_cross_entropy():
    root = Node(name="ak::forward::0")
    root.add(_op("aten::log_softmax", [(8, 30), [], []], concrete=[None, -1, None], self_us=5.0))
    root.add(_op("aten::nll_loss_nd", [(8, 30), (8,)], self_us=3.0))
    plan = build_plan([root], model="m", device="cpu", time_kind="cpu", dtype="fp32", input_shape=[8], iters=1)
    ce = _problem(plan, "cross_entropy")
    assert ce.shapes == [{"M": 8, "V": 30}] and ce.calls == [1] and ce.time_us == pytest.approx(8.0)


def test_recognizer_dims_match_the_problem_kinds():
    from autokernel.problems.registry import get_problem, list_kinds
    from autokernel.recognize import KIND_DIMS

    assert set(KIND_DIMS) == set(list_kinds())
    for kind, dims in KIND_DIMS.items():
        assert get_problem(kind).dims == dims


def test_a_block_named_like_a_norm_does_not_claim_its_contents():
    root = Node(name="ak::forward::0")
    block = root.add(_scope("blocks.0", "PreLayerNormBlock", [(4, 8)]))
    block.add(_op("aten::linear", [(4, 8), (16, 8), []], self_us=10.0))
    norm = block.add(_scope("blocks.0.norm", "T5LayerNorm", [(4, 8)]))  # RMS norm under a LayerNorm name
    for name in ("aten::pow", "aten::mean", "aten::rsqrt", "aten::mul"):
        norm.add(_op(name, [(4, 8)], self_us=1.0))
    plan = build_plan([root], model="m", device="cpu", time_kind="cpu", dtype="fp32", input_shape=[4, 8], iters=1)
    assert _problem(plan, "matmul").time_us == pytest.approx(10.0)
    rms = _problem(plan, "rmsnorm")
    assert rms.time_us == pytest.approx(4.0) and rms.shapes == [{"M": 4, "N": 8}]
    assert not [p for p in plan.problems if p.kind == "layernorm"]


def test_problem_times_of_a_patched_model():
    """After apply(): the run's custom op counts for its problem even inside a scope that a
    recognizer would claim; unpatched places keep their recognized time; the rest is uncovered."""
    from autokernel.plan import Plan, PlanProblem
    from autokernel.profiler import problem_times

    root = Node(name="ak::forward::0")
    norm = root.add(_scope("layers.0.norm", "AutokernelLlamaRMSNorm", [(2, 64, 512)]))
    op = norm.add(_op("autokernel::rmsnorm_0123456789", [(128, 512), (512,), []]))
    op.add(_op("cuLaunchKernel", [], [("_rmsnorm_fwd", 4.0)]))
    norm.add(_op("aten::view", [(128, 512)], [("copy_kernel", 0.5)]))  # the scope's own: still rmsnorm
    mlp = root.add(_scope("layers.0.mlp", "AutokernelMLP", [(2, 64, 512)]))  # patched: no silu left
    mlp.add(_op("autokernel::swiglu_abcdef0123", [(128, 1024), (128, 1024)], [("_swiglu", 3.0)]))
    mlp.add(_op("aten::mm", [(128, 512), (512, 1024)], [("nvjet_tst_a", 10.0)], dtypes=["c10::BFloat16"] * 2))
    root.add(_op("aten::cumsum", [(2, 64, 2048)], [("cumsum_kernel", 5.0)]))
    plan = Plan(model="m", device="cuda", time_kind="gpu", dtype="bf16", input_shape=[2, 64], total_time_us=40.0,
                problems=[PlanProblem("rmsnorm", "rmsnorm", "bf16", [{"M": 128, "N": 512}], [1], 9.0, 0.2),
                          PlanProblem("swiglu", "swiglu", "bf16", [{"M": 128, "N": 1024}], [1], 6.0, 0.15),
                          PlanProblem("matmul", "matmul", "bf16", [{"M": 128, "N": 1024, "K": 512}], [1], 12.0, 0.3),
                          PlanProblem("softmax", "softmax", "bf16", [{"M": 128, "N": 64}], [1], 2.0, 0.05)])
    ops = {"autokernel::rmsnorm_0123456789": "rmsnorm", "autokernel::swiglu_abcdef0123": "swiglu"}
    times = problem_times([root, root], plan, time_kind="gpu", op_problems=ops, iters=2)
    assert times.total_us == pytest.approx(4 + 0.5 + 3 + 10 + 5)
    assert times.op_us == {"rmsnorm": pytest.approx(4.0), "swiglu": pytest.approx(3.0), "matmul": 0.0, "softmax": 0.0}
    assert times.problems == {"rmsnorm": pytest.approx(4.5), "swiglu": pytest.approx(3.0),
                              "matmul": pytest.approx(10.0), "softmax": 0.0}
    assert times.uncovered_us == pytest.approx(5.0)
    # without the op map, the custom ops are uncovered time (nothing recognizes them)
    plain = problem_times([root], plan, time_kind="gpu")
    assert plain.problems["swiglu"] == 0.0 and plain.uncovered_us == pytest.approx(5.0 + 3.0)
