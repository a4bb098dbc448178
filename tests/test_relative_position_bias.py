"""relative_position_bias (T5's relative attention bias: buckets of key - query distances and a
table gather), on CPU under the Triton interpreter: the reference against transformers' own
``compute_bias``; the starter exact at every shape and case; the distances where a float log
can pick another bucket, and the numerics cases that put them before a kernel, catching the ways
of rounding the bucket that differ from PyTorch's only there."""
from __future__ import annotations

import importlib.util
import math
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

os.environ.setdefault("TRITON_INTERPRET", "1")

from autokernel.problems import get_problem  # noqa: E402
from autokernel.problems.position_buckets import (boundary_windows, buckets, relative_positions,  # noqa: E402
                                                  sensitive_distances, side_buckets)
from autokernel.problems.registry import KERNELS_DIR, load_starter  # noqa: E402

HF = importlib.util.find_spec("transformers") is not None
KIND = "relative_position_bias"


@pytest.mark.skipif(not HF, reason="transformers is not installed")
@pytest.mark.parametrize("decoder", [False, True], ids=["encoder", "decoder"])
def test_reference_is_t5s_compute_bias(decoder):
    """Bit for bit, at table sizes and max distances around T5's, with and without a cache (query
    and key lengths differ: a decoding step)."""
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    problem = get_problem(KIND)
    checked = 0
    for num_buckets in (4, 13, 32, 64):
        for max_distance in (7, 33, 128, 300):
            if max_distance <= side_buckets(num_buckets, not decoder)[1]:
                continue
            config = T5Config(d_model=16, d_kv=4, num_heads=3, relative_attention_num_buckets=num_buckets,
                              relative_attention_max_distance=max_distance, is_decoder=decoder)
            attention = T5Attention(config, has_relative_attention_bias=True, layer_idx=0)
            table = attention.relative_attention_bias.weight
            for query_length, key_length, past in ((7, 7, 0), (40, 200, 0), (1, 151, 150), (9, 300, 3)):
                with torch.no_grad():
                    want = attention.compute_bias(query_length, key_length, past_seen_tokens=past)
                    got = problem.reference(table, query_length, key_length, past, not decoder, max_distance)
                assert got.dtype == want.dtype and torch.equal(got, want), (num_buckets, max_distance, past)
                checked += 1
    assert checked > 40


def _cases(problem, shape, dtype, seed):
    yield "draw", problem.make_inputs(dict(shape), dtype, "cpu", seed)
    yield from problem.adversarial_inputs(dict(shape), dtype, "cpu", seed)


def test_starter_is_exact_with_small_blocks():
    """Several key blocks and rows a program, partial tiles both ways (the judge runs the default
    knobs at every shape, dtype and case: test_starters.py)."""
    problem = get_problem(KIND)
    module = load_starter(KIND, {"BLOCK_K": 16, "ROWS": 4})
    for shape, dtype in zip((*problem.cpu_shapes, problem.cpu_edge_shapes[2]), (torch.float32, torch.bfloat16, torch.float16)):
        for name, args in _cases(problem, shape, dtype, 11):
            got = module.kernel_fn(*args)
            want = problem.reference(args[0].double(), *args[1:])
            assert got.dtype == dtype and got.shape == want.shape, (shape, name)
            assert torch.equal(got.double(), want), (shape, dtype, name, args[1:])


def test_table_columns_hold_distinct_exact_values():
    """A wrong bucket always changes the value: no two rows of a column are equal, in any dtype,
    at any magnitude the cases move them to; and no zeros (the tolerance is relative)."""
    problem = get_problem(KIND)
    shape = {"H": 3, "Sq": 2, "Sk": 2, "NB": 300, "bidirectional": 1}
    for dtype in problem.dtypes:
        for name, args in _cases(problem, shape, dtype, 3):
            table = args[0].double()
            assert table.dtype == torch.float64 and torch.isfinite(table).all() and (table != 0).all(), name
            for column in table.T:
                assert column.unique().numel() == shape["NB"], (dtype, name)


def test_shapes_need_a_bucket_below_the_log():
    problem = get_problem(KIND)
    assert problem.parse_shape("4x8x8x4x1")["NB"] == 4
    with pytest.raises(ValueError, match="NB"):
        problem.parse_shape("4x8x8x3x1")  # one bucket a side: max_exact 0, the log divides by zero
    assert problem.parse_shape("4x8x8x2x0")["bidirectional"] == 0


# ------------------------------------------------------------------ where a float log can pick another row
def test_t5s_sensitive_distances_are_16_32_and_64():
    """T5's 32 buckets both ways (16 a side, max_exact 8), 128 apart: the scaled log is 2 log2(n / 8),
    an integer at n = 16, 32 and 64, where PyTorch's float32 chain lands on it exactly."""
    assert sensitive_distances(16)[128] == (16, 32, 64)
    n = torch.tensor([15, 16, 17, 31, 32, 33, 63, 64, 65])
    v = torch.log(n.float() / 8) / math.log(128 / 8) * 8
    assert v[[1, 4, 7]].tolist() == [2.0, 4.0, 6.0]
    assert buckets(-n, True, 32, 128).tolist() == [9, 10, 10, 11, 12, 12, 13, 14, 14]


def test_boundary_windows_put_the_distances_in_reach():
    for num_buckets, both, sq, sk in ((32, True, 32, 32), (32, False, 5, 40), (38, True, 1, 1), (17, False, 1, 1)):
        side, _ = side_buckets(num_buckets, both)
        for max_distance, offset in boundary_windows(num_buckets, both, sq, sk, seed=5, count=4):
            reached = set((-relative_positions(sq, sk, offset, "cpu")).flatten().tolist())
            assert reached & set(sensitive_distances(side)[max_distance]), (num_buckets, max_distance, offset)


def _bucket_rounded(way: str):
    """A kernel that computes the bucket in float32 as PyTorch does, but for one step (``way``)."""
    f32 = np.float32

    def steps(n, max_exact, logs, max_distance):
        ratio = n.astype(f32) / f32(max_exact)
        log_ratio = f32(math.log(max_distance / max_exact))
        if way == "float32-log":  # NumPy's float32 log: Triton's tl.log under the interpreter
            return np.log(ratio) / log_ratio * f32(logs)
        log = np.log(ratio.astype(np.float64)).astype(f32)
        if way == "folded-constant":
            return log * f32(f32(logs) / log_ratio)
        if way == "float64":
            return np.log(n / max_exact) / math.log(max_distance / max_exact) * logs
        if way == "log2":
            return np.log2(ratio) / f32(math.log2(max_distance / max_exact)) * f32(logs)
        if way == "log-difference":
            return (np.log(n.astype(np.float64)).astype(f32) - f32(math.log(max_exact))) / log_ratio * f32(logs)
        assert way == "pytorch"
        return log / log_ratio * f32(logs)

    def kernel_fn(table, query_length, key_length, offset, bidirectional, max_distance):
        rel = relative_positions(query_length, key_length, offset, "cpu").numpy()
        side, max_exact = side_buckets(table.shape[0], bidirectional)
        upper = np.where(rel > 0, side, 0) if bidirectional else 0
        n = np.abs(rel) if bidirectional else np.maximum(-rel, 0)
        far = max_exact + steps(np.maximum(n, max_exact), max_exact, side - max_exact, max_distance).astype(np.int64)
        rows = upper + np.where(n < max_exact, n, np.minimum(far, side - 1))
        return F.embedding(torch.from_numpy(rows), table).permute(2, 0, 1).unsqueeze(0)

    return kernel_fn


@pytest.mark.parametrize("way", ["float32-log", "folded-constant", "float64", "log2", "log-difference"])
def test_numerics_cases_catch_a_bucket_rounded_another_way(way):
    """Each way differs from PyTorch's bucket only where the scaled log is an integer, at a few
    table sizes and max distances (none of them T5's 32 buckets at 128): regular draws never
    show it; the numerics cases of every shape of one CPU evaluation (targets and edges, every
    dtype) do, and the same emulation with PyTorch's rounding passes them all."""
    problem = get_problem(KIND)
    wrong, same = _bucket_rounded(way), _bucket_rounded("pytorch")
    failed = []
    for i, shape in enumerate((*problem.cpu_shapes, *problem.cpu_edge_shapes)):
        for dtype in problem.dtypes:
            seed = 1000 + 17 * i + len(failed)
            for name, args in _cases(problem, shape, dtype, seed):
                want = problem.reference(args[0].double(), *args[1:])
                assert torch.equal(same(*args).double(), want), (shape, name)
                if not torch.equal(wrong(*args).double(), want):
                    assert name.startswith("log-boundaries"), (way, shape, name)
                    failed.append(name)
    assert failed, f"no numerics case shows a bucket rounded by {way}"


def test_the_starters_log_in_float32_fails_the_numerics_cases(tmp_path):
    """The starter with Triton's float32 log in place of the correctly rounded one (NumPy's float32
    log under the interpreter, one bit off PyTorch's for 7% of inputs) is exact on regular draws
    and fails a log-boundaries case at the edge shapes of 38 buckets both ways and 17 one way."""
    source = (KERNELS_DIR / f"{KIND}.py").read_text()
    line = "    return tl.log(x.to(tl.float64)).to(tl.float32)\n"
    assert source.count(line) == 1
    path = tmp_path / "float32_log.py"
    path.write_text(source.replace(line, "    return tl.log(x)\n"))
    spec = importlib.util.spec_from_file_location("float32_log", path)
    variant = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(variant)
    problem = get_problem(KIND)
    failed = []
    for shape in problem.cpu_edge_shapes[-2:]:
        for seed in range(4):
            for name, args in _cases(problem, shape, torch.float32, seed):
                if not torch.equal(variant.kernel_fn(*args).double(), problem.reference(args[0].double(), *args[1:])):
                    failed.append(name)
    assert failed and all(name.startswith("log-boundaries") for name in failed), failed


# ------------------------------------------------------------------ the profiler plans it, apply places it
T5 = "d_model=64,num_layers=2,num_heads=4,d_ff=128,d_kv=16,vocab_size=256"
GREEDY = {"decoder_start_token_id": 0, "pad_token_id": 0}  # the config's random model names no start token
STACKS = ["model.encoder.block.0.layer.0.SelfAttention", "model.decoder.block.0.layer.0.SelfAttention"]


def _t5(tmp_path, tokens=40):
    from autokernel.integrate import apply
    from autokernel.models import load_model
    from autokernel.profiler import profile_model
    from test_integrate import make_workdir

    loaded = load_model("hf:t5", config_overrides=T5, input_shape=[1, tokens], dtype=torch.float32)
    plan = profile_model(loaded, warmup=0, iters=1)
    problem = next(p for p in plan.problems if p.kind == KIND)
    patched = apply(loaded.model, make_workdir(tmp_path / "wd", [problem], model="hf:t5", input_shape=(1, tokens)))
    return loaded, plan, problem, patched


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_t5_plans_the_bias_of_each_stack_and_apply_places_it(tmp_path):
    """T5 computes the bias in its first layer's self-attention, once per stack (bidirectional in
    the encoder, one-way in the decoder): the profiler claims the whole of ``compute_bias`` (the
    buckets' small ops and the table lookup) for one problem, and the patched model runs the op
    twice a forward with the original's output to the bit."""
    from autokernel.integrate import OP_CALLS

    loaded, plan, problem, patched = _t5(tmp_path)
    assert problem.supported and problem.modules == STACKS
    # in the order of their measured time, which two shapes this close swap from run to run
    assert sorted(problem.shapes, key=lambda s: -s["bidirectional"]) == [
        {"H": 4, "Sq": 40, "Sk": 40, "NB": 32, "bidirectional": 1},
        {"H": 4, "Sq": 40, "Sk": 40, "NB": 32, "bidirectional": 0}]
    assert not {"aten::log", "aten::abs", "aten::div", "aten::min"} & {u.name for u in plan.not_covered}
    embedding = next(p for p in plan.problems if p.kind == "embedding")
    assert all(s["V"] == 256 for s in embedding.shapes)  # the bias table's lookup is the bias's, not embedding's
    assert [(name, kind) for name, kind in patched._autokernel_replaced] == [(s, KIND) for s in STACKS]
    op = patched._autokernel_ops[problem.name]
    ids = loaded.make_inputs(0)
    before = OP_CALLS[op]
    with torch.no_grad():
        assert torch.equal(patched(*ids), loaded.model(*ids))
    assert OP_CALLS[op] - before == 2


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_a_decoding_step_takes_the_op_with_its_cache_offset(tmp_path):
    """Generating with a cache, the decoder asks for 1 x (seen + 1) with ``past_seen_tokens`` seen:
    the op takes those calls (query and key lengths differ) and the tokens generated are the
    original's; a tensor of seen tokens goes to the module's own ``compute_bias``."""
    from autokernel.integrate import OP_CALLS

    loaded, _, problem, patched = _t5(tmp_path, tokens=24)
    original, model = loaded.model.model, patched.model
    op = patched._autokernel_ops[problem.name]
    ids = loaded.make_inputs(0)[0]
    before = OP_CALLS[op]
    with torch.no_grad():
        got = model.generate(input_ids=ids, max_new_tokens=20, min_new_tokens=20, do_sample=False, **GREEDY)
        want = original.generate(input_ids=ids, max_new_tokens=20, min_new_tokens=20, do_sample=False, **GREEDY)
    assert torch.equal(got, want) and got.shape[1] > 20
    assert OP_CALLS[op] - before == 1 + 20  # the encoder once, the decoder at every step (distances past 16: its log buckets)
    decoder = model.get_submodule("decoder.block.0.layer.0.SelfAttention")
    before = OP_CALLS[op]
    with torch.no_grad():
        step = decoder.compute_bias(1, 37, past_seen_tokens=36)
        tensor_seen = decoder.compute_bias(3, 7, past_seen_tokens=torch.tensor(4))
        reference = get_problem(KIND).reference
        table = decoder.relative_attention_bias.weight
        assert torch.equal(step, reference(table, 1, 37, 36, False, 128))
        assert torch.equal(tensor_seen, reference(table, 3, 7, 4, False, 128))
    assert OP_CALLS[op] - before == 1


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_profiling_leaves_compute_bias_as_it_was():
    from transformers.models.t5.modeling_t5 import T5Attention

    from autokernel.models import load_model
    from autokernel.profiler import profile_model

    original = T5Attention.__dict__["compute_bias"]
    profile_model(load_model("hf:t5", config_overrides=T5, input_shape=[1, 6], dtype=torch.float32), warmup=0, iters=1)
    assert T5Attention.__dict__["compute_bias"] is original


def _attention_class(compute_bias):
    from transformers.models.t5.modeling_t5 import T5Attention

    return type("OtherBiasAttention", (T5Attention,), {"compute_bias": compute_bias})


def _doubled(self, query_length, key_length, device=None, past_seen_tokens=0):
    return 2 * super(type(self), self).compute_bias(query_length, key_length, device, past_seen_tokens)


def _cache_positions(self, query_length, key_length, device=None, cache_position=None):
    return super(type(self), self).compute_bias(query_length, key_length, device)


@pytest.mark.skipif(not HF, reason="transformers is not installed")
@pytest.mark.parametrize("compute_bias,why", [(_doubled, "computes something else"), (_cache_positions, "is not T5's")],
                         ids=["other-values", "cache-position-signature"])
def test_a_compute_bias_of_another_kind_is_left_alone(compute_bias, why, tmp_path):
    from transformers import T5Config

    from autokernel.integrate import apply
    from autokernel.plan import PlanProblem
    from test_integrate import make_workdir

    config = T5Config(d_model=16, d_kv=4, num_heads=2, is_decoder=False)
    model = nn_sequential(attention=_attention_class(compute_bias)(config, has_relative_attention_bias=True, layer_idx=0))
    problem = PlanProblem(KIND, KIND, "fp32", [{"H": 2, "Sq": 5, "Sk": 5, "NB": 32, "bidirectional": 1}], [1], 10.0, 0.1,
                          ["attention"])
    patched = apply(model, make_workdir(tmp_path / "wd", [problem], model="custom"))
    assert patched._autokernel_replaced == []
    assert any(name == "attention" and why in reason for name, reason in patched._autokernel_skipped)


def nn_sequential(**modules):
    model = torch.nn.Sequential()
    for name, module in modules.items():
        model.add_module(name, module)
    return model


def _compute_bias_call(parts):
    from autokernel.recognize import ModuleInfo, Node, ScopeCall, TensorMeta

    root = Node(name="ak::forward::0")
    attention = root.add(Node(name="ak::m::0", scope=ScopeCall("module", "encoder.attn", ModuleInfo(
        "encoder.attn", "T5Attention", heads=4, relative_bias=parts), args=[TensorMeta((1, 8, 64), "fp32")])))
    call = attention.add(Node(name="ak::f::1", scope=ScopeCall(
        "function", "transformers.models.t5.modeling_t5.T5Attention.compute_bias", None,
        outputs=[TensorMeta((1, 4, 8, 9), "bf16")])))
    call.add(Node(name="aten::log", shapes=[[8, 9]], self_us=3.0))
    return call


def test_a_compute_bias_call_is_one_problem_at_its_module():
    from autokernel.recognize import Instance, Unsupported, recognize_scope

    found = recognize_scope(_compute_bias_call((32, 128, False)), [], {"aten::log"}, "fp32", False)
    assert isinstance(found, Instance) and found.kind == KIND and found.dtype == "bf16" and found.module == "encoder.attn"
    assert found.shapes == [({"H": 4, "Sq": 8, "Sk": 9, "NB": 32, "bidirectional": 0}, 1)]
    # no log buckets (max_distance not past max_exact): reported, not planned
    assert isinstance(recognize_scope(_compute_bias_call((32, 8, True)), [], set(), "fp32", False), Unsupported)
    assert recognize_scope(_compute_bias_call(None), [], set(), "fp32", False) is None  # no table: not T5's


def test_the_reference_does_not_take_the_machines_float32_log(monkeypatch):
    """The reference's bucket is the correctly rounded chain on every machine: PyTorch's CPU float32
    log is one bit off at some distances with AVX2 (an AMD EPYC, 2026-12-07), where the judge then
    failed the starter at the log-boundaries cases.  A float32 log one ulp low changes no row."""
    from autokernel.problems import position_buckets

    problem = get_problem(KIND)
    shape = problem.cpu_edge_shapes[-2]  # 38 rows both ways: boundaries at several max distances
    cases = list(_cases(problem, shape, torch.float32, 5))
    want = [problem.reference(*args) for _, args in cases]
    exact_log = torch.log

    def log_one_ulp_low(x):
        out = exact_log(x)
        return torch.nextafter(out, torch.full_like(out, -math.inf)) if x.dtype == torch.float32 else out

    monkeypatch.setattr(position_buckets.torch, "log", log_one_ulp_low)
    assert any(name.startswith("log-boundaries") for name, _ in cases)
    for (name, args), rows in zip(cases, want):
        assert torch.equal(problem.reference(*args), rows), name
