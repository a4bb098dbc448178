"""rotary_interleaved: rotary embedding on interleaved pairs (Cohere's layout).  The problem's
inputs catch kernels that rotate halves, read one table entry per pair (models pass each angle
twice) or turn the wrong way; the starter passes every case; apply tells the two layouts apart by
a probe and puts the op into Cohere's attention.  (test_models_coverage profiles hf:cohere.)"""
from __future__ import annotations

import importlib.util
import os

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")

from autokernel.problems import get_problem  # noqa: E402
from autokernel.problems.registry import load_starter  # noqa: E402
from autokernel.problems.rotary import reference as rotate_halves  # noqa: E402

from test_attention_masked import cases, judged  # noqa: E402


def _pairs(x, cos, sin, *, cos_of=lambda c: c, sign=1.0):
    # in fp64: compared with the fp64 reference at allclose's bounds, an fp32 pass failed one draw in eight
    x1, x2 = x[..., ::2].double(), x[..., 1::2].double()
    c, s = cos_of(cos).double(), cos_of(sin).double()
    even = x1 * c[..., ::2] - sign * x2 * s[..., ::2]
    odd = x2 * c[..., 1::2] + sign * x1 * s[..., 1::2]
    return torch.stack((even, odd), -1).flatten(-2).to(x.dtype)


WRONG = {
    "rotates halves": rotate_halves,
    # models pass each angle twice: a kernel that reads every other entry and reuses it
    "reads one table entry a pair": lambda x, c, s: _pairs(x, c, s, cos_of=lambda t: t[..., ::2].repeat_interleave(2, -1)),
    "turns the other way": lambda x, c, s: _pairs(x, c, s, sign=-1.0),
}


def test_reference_rotates_each_pair():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64, generator=gen)
    cos = torch.randn(5, 8, dtype=torch.float64, generator=gen)
    sin = torch.randn(5, 8, dtype=torch.float64, generator=gen)
    out = get_problem("rotary_interleaved").reference(x, cos, sin)
    assert torch.allclose(out, _pairs(x, cos, sin))
    assert out[0, 0, 0, 0] == pytest.approx(float(x[0, 0, 0, 0] * cos[0, 0] - x[0, 0, 0, 1] * sin[0, 0]))
    assert out[0, 0, 0, 1] == pytest.approx(float(x[0, 0, 0, 1] * cos[0, 1] + x[0, 0, 0, 0] * sin[0, 1]))


@pytest.mark.parametrize("wrong", list(WRONG))
def test_the_inputs_catch_a_wrong_rotation(wrong):
    problem = get_problem("rotary_interleaved")
    for dtype in (torch.float32, torch.bfloat16):
        for shape in problem.cpu_shapes:
            assert not all(judged(problem, dtype, WRONG[wrong], args) for _, args in cases(problem, shape, dtype)), \
                f"{wrong} passed every case at {shape} {dtype}"


def test_the_starter_passes_every_case_and_odd_widths():
    problem = get_problem("rotary_interleaved")
    starter = load_starter("rotary_interleaved")
    for dtype in problem.dtypes:
        for shape in problem.cpu_shapes:
            failed = [name for name, args in cases(problem, shape, dtype)
                      if not judged(problem, dtype, starter.kernel_fn, args)]
            assert not failed, (shape, dtype, failed)
    for d in (8, 80):  # a head width that is not a power of two: the padded tail holds no pair
        args = problem.make_inputs({"B": 2, "H": 3, "S": 5, "D": d}, torch.float32, "cpu", 0)
        assert torch.allclose(starter.kernel_fn(*args), problem.reference(*args), atol=1e-6)


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers is not installed")
def test_apply_tells_the_layouts_apart_by_a_probe():
    from transformers.models.cohere import modeling_cohere
    from transformers.models.llama import modeling_llama

    from autokernel.integrate.calls import _rotary_form, _rotary_pairs_form

    assert _rotary_pairs_form(modeling_cohere.apply_rotary_pos_emb) is True
    assert _rotary_form(modeling_cohere.apply_rotary_pos_emb) is None  # names rotate_half, rotates pairs
    assert _rotary_form(modeling_llama.apply_rotary_pos_emb) is True
    assert _rotary_pairs_form(modeling_llama.apply_rotary_pos_emb) is None


GPTJ = "n_embd=64,n_layer=2,n_head=4,rotary_dim=8,vocab_size=256"


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers is not installed")
def test_half_wide_tables_passed_sin_first_are_told_by_a_probe():
    """GPT-J's and CodeGen's ``apply_rotary_pos_emb(x, sin, cos)``: x is [B, S, H, D], each angle
    is in the tables once (the function repeats it for both elements of its pair)."""
    from transformers.models.codegen import modeling_codegen
    from transformers.models.gptj import modeling_gptj
    from transformers.models.llama import modeling_llama

    from autokernel.integrate.rotary_tables import TableConvention, table_convention

    gptj = TableConvention(sin_first=True, tables="half", seq_first=True)
    assert table_convention(modeling_gptj.apply_rotary_pos_emb, "rotary_interleaved") == gptj
    assert table_convention(modeling_codegen.apply_rotary_pos_emb, "rotary_interleaved") == gptj
    assert table_convention(modeling_gptj.apply_rotary_pos_emb, "rotary") is None  # it rotates pairs, not halves
    assert table_convention(modeling_llama.apply_rotary_pos_emb, "rotary") is None  # the ops' own convention


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers is not installed")
def test_tables_whose_first_half_holds_the_angles_are_told_by_a_probe():
    """ERNIE 4.5's and GLM's ``apply_rotary_pos_emb(q, k, cos, sin)``: full-width tables, of which
    the first half holds each angle once (repeated per pair inside); GLM rotates only the tables'
    width of each head and passes the rest through."""
    from transformers.models.ernie4_5 import modeling_ernie4_5
    from transformers.models.glm import modeling_glm

    from autokernel.integrate.rotary_tables import TableConvention, table_convention

    assert table_convention(modeling_ernie4_5.apply_rotary_pos_emb, "rotary_interleaved") == \
        TableConvention(tables="first_half")
    assert table_convention(modeling_glm.apply_rotary_pos_emb, "rotary_interleaved") == \
        TableConvention(tables="first_half", partial=True)
    assert table_convention(modeling_glm.apply_rotary_pos_emb, "rotary") is None


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers is not installed")
def test_glms_partial_rotary_goes_through_the_op(tmp_path):
    from autokernel.integrate import OP_CALLS, apply
    from autokernel.models import load_model
    from autokernel.profiler import profile_model

    from test_integrate import make_workdir, rel

    torch.manual_seed(0)
    loaded = load_model("hf:glm", config_overrides="hidden_size=64,num_hidden_layers=2,num_attention_heads=4,"
                        "num_key_value_heads=2,intermediate_size=128,vocab_size=256", input_shape=[1, 8],
                        dtype=torch.float32)
    plan = profile_model(loaded, warmup=0, iters=1)
    problem = next(p for p in plan.problems if p.kind == "rotary_interleaved")
    assert problem.supported
    patched = apply(loaded.model, make_workdir(tmp_path / "wd", [problem], model="hf:glm", input_shape=(1, 8)))
    layers = {f"model.model.layers.{i}.self_attn" for i in range(2)}
    assert layers <= {name for name, kind in patched._autokernel_replaced if kind == "rotary_interleaved"}
    ids = torch.randint(0, 256, (1, 8))
    op = patched._autokernel_ops[problem.name]
    before = OP_CALLS[op]
    with torch.no_grad():
        out, ref = patched(ids), loaded.model(ids)
    assert OP_CALLS[op] - before == 4  # q and k of each layer
    assert rel(out, ref) < 1e-5


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers is not installed")
def test_gptj_rotates_q_and_k_through_the_op(tmp_path):
    from autokernel.integrate import OP_CALLS, apply
    from autokernel.models import load_model
    from autokernel.profiler import profile_model

    from test_integrate import make_workdir, rel

    torch.manual_seed(0)
    loaded = load_model("hf:gptj", config_overrides=GPTJ, input_shape=[1, 8], dtype=torch.float32)
    plan = profile_model(loaded, warmup=0, iters=1)
    problem = next(p for p in plan.problems if p.kind == "rotary_interleaved")
    assert problem.supported and {"B": 1, "H": 4, "S": 8, "D": 8} in problem.shapes
    patched = apply(loaded.model, make_workdir(tmp_path / "wd", [problem], model="hf:gptj", input_shape=(1, 8)))
    layers = {f"model.transformer.h.{i}.attn" for i in range(2)}
    assert layers <= {name for name, kind in patched._autokernel_replaced if kind == "rotary_interleaved"}
    ids = torch.randint(0, 256, (1, 8))
    op = patched._autokernel_ops[problem.name]
    before = OP_CALLS[op]
    with torch.no_grad():
        out, ref = patched(ids), loaded.model(ids)
    assert OP_CALLS[op] - before == 4  # q and k of each layer
    assert rel(out, ref) < 1e-5
