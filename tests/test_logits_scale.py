"""A linear's output multiplied or divided by a Python number in its parent's forward
(Granite's ``logits = self.lm_head(h); logits = logits / self.config.logits_scaling``, Cohere's
``logits = logits * self.logit_scale``): the profiler folds the scale into the matmul problem,
and the matmul applier rewrites the parent's forward so that the GEMM's input takes the scale
where it is narrower than the output (K < N: a [T, K] pass instead of a [T, N] one), else the
GEMM's fresh output in place.  Before, the scale was an uncovered aten::div or aten::mul over
the logits (6.4% of hf:granite, 3.5-9.2% of hf:cohere at 2x128 tokens, vocabulary 1024)."""
from __future__ import annotations

import importlib.util
import os
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn

os.environ.setdefault("TRITON_INTERPRET", "1")

from autokernel.integrate import OP_CALLS, OP_NAMESPACE  # noqa: E402
from autokernel.integrate.row_adds import SCALED  # noqa: E402
from autokernel.models import load_model  # noqa: E402
from autokernel.profiler import profile_model, profile_problem_times  # noqa: E402

from test_logits_bias import D, V, _loaded, _placed  # noqa: E402  (the same tiny wrapped heads' helpers)

HF = importlib.util.find_spec("transformers") is not None


class _GraniteHead(nn.Module):
    """Granite's spelling: two statements, a divide by a config value."""

    def __init__(self, n_out=V, scale=8.0):
        super().__init__()
        self.body = nn.Linear(D, D, bias=False)
        self.lm_head = nn.Linear(D, n_out, bias=False)
        self.config = SimpleNamespace(logits_scaling=scale)

    def forward(self, x):
        h = self.body(x)
        logits = self.lm_head(h)
        logits = logits / self.config.logits_scaling
        return logits


class _CohereHead(_GraniteHead):
    """Cohere's spelling: a multiply by an attribute, here one expression."""

    def __init__(self, n_out=V, scale=0.3):
        super().__init__(n_out)
        self.logit_scale = scale

    def forward(self, x):
        h = self.body(x)
        return self.lm_head(h) * self.logit_scale


def _ops_run(model, x) -> list[tuple[str, tuple]]:
    with torch.no_grad(), torch.profiler.profile(record_shapes=True) as prof:
        model(x)
    return [(e.name, tuple(tuple(s) for s in e.input_shapes[:1])) for e in prof.events()]


@pytest.mark.parametrize("head,n_out,op_name", [(_GraniteHead, V, "aten::div"), (_CohereHead, V, "aten::mul"),
                                                (_GraniteHead, D // 2, "aten::div_")],
                         ids=["granite", "cohere", "narrow_output"])
def test_the_scale_after_a_linear_is_part_of_the_placed_matmul(head, n_out, op_name):
    loaded = _loaded(head(n_out))
    plan = profile_model(loaded, warmup=0, iters=1)
    matmul = next(p for p in plan.problems if p.kind == "matmul")
    assert matmul.supported and "head" in matmul.modules and matmul.module_time_us["head"] > 0, matmul.modules
    assert not any(u.name in ("aten::div", "aten::mul") for u in plan.not_covered), plan.not_covered
    assert plan.covered_fraction == pytest.approx(1.0, abs=1e-6)
    assert sum(matmul.calls) == 2, matmul.calls  # the scale adds no GEMM call

    patched, placed, op = _placed(loaded.model, plan, f"scale_{head.__name__}{n_out}")
    assert {("head.lm_head", "matmul"), ("head.body", "matmul"), ("head", SCALED)} <= set(placed.replaced)
    x = loaded.make_inputs(1)[0]
    before = OP_CALLS[op]
    with torch.no_grad():
        ref, out = loaded.model(x), patched(x)
    assert OP_CALLS[op] - before == 2
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    ran = _ops_run(patched, x)
    scaled = [shape for name, shape in ran if name == op_name]
    # K < N: the GEMM's [T, K] input is scaled, not its [T, N] output; else the output in place
    assert scaled == [((2, 16, D),)] if n_out > D else scaled == [((32, n_out),)] or scaled == [((2, 16, n_out),)], ran
    assert not any(name in ("aten::div", "aten::mul") and shape[0][-1] == n_out for name, shape in ran), ran
    # the patched model's profile (verify's "after") counts the scale for the matmul problem too
    after = profile_problem_times(patched, (x,), plan, device="cpu", op_problems={f"{OP_NAMESPACE}::{op}": "matmul"},
                                  warmup=0, iters=1)
    assert after.uncovered_us == 0 and after.problems["matmul"] > after.op_us["matmul"] > 0, after


def test_training_and_a_tensor_scale_run_the_original_expression():
    loaded = _loaded(_GraniteHead())
    patched, placed, _ = _placed(loaded.model, profile_model(loaded, warmup=0, iters=1), "scale_fallbacks")
    assert ("head", SCALED) in set(placed.replaced)
    x = loaded.make_inputs(2)[0]
    patched.train()
    with torch.no_grad():
        ran = [name for name, _ in _ops_run(patched, x)]
        # not bit for bit: the switched linears multiply by a transposed copy of the weights, whose
        # GEMM rounds otherwise than F.linear's on some CPUs (AVX2: 2026-12-07); the division is
        # the original's, counted below
        torch.testing.assert_close(patched(x), loaded.model(x), rtol=1e-6, atol=1e-7)
    assert ran.count("aten::div") == 1 and "aten::div_" not in ran
    patched.eval()
    patched.head.config.logits_scaling = torch.tensor(8.0)  # a tensor: as written
    loaded.model.head.config.logits_scaling = torch.tensor(8.0)
    with torch.no_grad():
        torch.testing.assert_close(patched(x), loaded.model(x), rtol=1e-5, atol=1e-5)


class _BiasedHead(_GraniteHead):
    """A head with a bias, wider than its input (K < N): scaling the GEMM's input instead of its
    output would scale x W but not the bias."""

    def __init__(self):
        super().__init__()
        self.lm_head = nn.Linear(D, V, bias=True)
        with torch.no_grad():
            self.lm_head.bias.normal_(generator=torch.Generator().manual_seed(3))


def test_a_biased_linear_is_scaled_after_its_bias():
    """Before: ``linear_scale_call`` took the input-scaling path for any K < N linear, so a biased
    one computed x W / s + b for (x W + b) / s (off by 7/8 of the bias at s = 8)."""
    loaded = _loaded(_BiasedHead())
    patched, placed, _ = _placed(loaded.model, profile_model(loaded, warmup=0, iters=1), "scale_biased")
    assert ("head", SCALED) in set(placed.replaced)
    x = loaded.make_inputs(1)[0]
    with torch.no_grad():
        torch.testing.assert_close(patched(x), loaded.model(x), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not HF, reason="transformers is not installed")
@pytest.mark.parametrize("spec,op_name", [("hf:granite", "aten::div"), ("hf:cohere", "aten::mul")])
def test_hf_logits_scale_is_covered_and_the_patched_model_matches(spec, op_name):
    """(Granite's other multiplies, its residual and embedding multipliers, stay uncovered.)"""
    config = ("hidden_size=64,num_hidden_layers=1,num_attention_heads=2,num_key_value_heads=2,intermediate_size=128,"
              "vocab_size=512")
    if spec == "hf:granite":
        config += ",logits_scaling=6.0"  # its default 1.0 would scale nothing
    loaded = load_model(spec, config_overrides=config, input_shape=[1, 16], dtype=torch.float32)
    plan = profile_model(loaded, warmup=0, iters=1)
    matmul = next(p for p in plan.problems if p.kind == "matmul")
    assert "model" in matmul.modules and matmul.module_time_us.get("model", 0) > 0, matmul.module_time_us
    assert not any(u.name == op_name and u.fraction > 0.01 for u in plan.not_covered), plan.not_covered
    patched, placed, _ = _placed(loaded.model, plan, f"scale_{spec[3:]}")
    assert ("model", SCALED) in set(placed.replaced), placed.replaced
    x = loaded.make_inputs(1)
    with torch.no_grad():
        torch.testing.assert_close(patched(*x), loaded.model(*x), rtol=1e-4, atol=1e-4)
