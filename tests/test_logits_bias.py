"""A bias-free LM head followed by a bias row written in the parent's forward
(``lm_logits = self.lm_head(h) + self.final_logits_bias``: Marian, Pegasus, mBART; BART's two
statements ``v = self.lm_head(h); v = v + self.final_logits_bias.to(v.device)``): the profiler
folds the [1, V] row add into the matmul problem, and the matmul applier rewrites the parent's
forward so that the GEMM's fresh output takes the row in place (the matmul op has no bias
operand).  In training, for another dtype or shape of the row, the original expression runs."""
from __future__ import annotations

import importlib.util
import os

import pytest
import torch
import torch.nn as nn

os.environ.setdefault("TRITON_INTERPRET", "1")

from autokernel.integrate import OP_CALLS, OP_NAMESPACE, register_kernel_op  # noqa: E402
from autokernel.integrate.apply import place_ops  # noqa: E402
from autokernel.integrate.placement import structural_copy  # noqa: E402
from autokernel.integrate.row_adds import ROW_ADD  # noqa: E402
from autokernel.integrate.selection import KernelOp  # noqa: E402
from autokernel.models import LoadedModel  # noqa: E402
from autokernel.problems.base import parse_dtype  # noqa: E402
from autokernel.problems.registry import KERNELS_DIR  # noqa: E402
from autokernel.profiler import profile_model, profile_problem_times  # noqa: E402

HF = importlib.util.find_spec("transformers") is not None
D, V = 32, 96


class _Head(nn.Module):
    """Marian's spelling: one expression."""

    def __init__(self, row_shape=(1, V)):
        super().__init__()
        self.body = nn.Linear(D, D, bias=False)
        self.lm_head = nn.Linear(D, V, bias=False)
        self.register_buffer("final_logits_bias", torch.randn(*row_shape, generator=torch.Generator().manual_seed(3)))

    def forward(self, x):
        h = self.body(x)
        lm_logits = self.lm_head(h) + self.final_logits_bias
        return lm_logits


class _BartHead(_Head):
    """BART's spelling: two statements, the row moved to the logits' device."""

    def forward(self, x):
        h = self.body(x)
        lm_logits = self.lm_head(h)
        lm_logits = lm_logits + self.final_logits_bias.to(lm_logits.device)
        return lm_logits


class _Wrapper(nn.Module):  # as the loaders wrap a model: the head's forward is not the root's
    def __init__(self, head):
        super().__init__()
        self.head = head

    def forward(self, x):
        return self.head(x)


def _loaded(head) -> LoadedModel:
    return LoadedModel(model=_Wrapper(head).eval(),
                       make_inputs=lambda seed: (torch.randn(2, 16, D, generator=torch.Generator().manual_seed(seed)),),
                       spec="test", description="test", input_shape=[2, 16, D], input_kind="float")


def _placed(model, plan, tag):
    """A copy of ``model`` with the matmul starter placed where the plan's matmul problem runs
    (``apply`` takes a matmul kernel only where the loop beat its start): the copy, the places, the op."""
    matmul = next(p for p in plan.problems if p.kind == "matmul")
    opname, op = register_kernel_op("matmul", f"logits_bias_{tag}", KERNELS_DIR / "matmul.py")
    patched = structural_copy(model)
    placed = place_ops(patched, [KernelOp(matmul, opname, op, parse_dtype(matmul.dtype), KERNELS_DIR / "matmul.py")])
    return patched, placed, opname


def _ops_run(model, x) -> list[str]:
    with torch.no_grad(), torch.profiler.profile() as prof:
        model(x)
    return [e.name for e in prof.events()]


@pytest.mark.parametrize("head", [_Head, _BartHead])
def test_the_row_add_after_the_lm_head_is_part_of_the_placed_matmul(head):
    loaded = _loaded(head())
    plan = profile_model(loaded, warmup=0, iters=1)
    matmul = next(p for p in plan.problems if p.kind == "matmul")
    # the add is the matmul problem's, placed at the module whose forward writes it
    assert matmul.supported and "head" in matmul.modules and matmul.module_time_us["head"] > 0, matmul.modules
    assert not any(u.name.startswith("aten::add") for u in plan.not_covered), plan.not_covered
    assert "not placeable" not in matmul.note, matmul.note
    assert plan.covered_fraction == pytest.approx(1.0, abs=1e-6)
    # two GEMMs a pass: the row add adds no call of its own
    assert sum(matmul.calls) == 2 and all(s["M"] == 32 for s in matmul.shapes), (matmul.shapes, matmul.calls)

    patched, placed, op = _placed(loaded.model, plan, head.__name__)
    assert {("head.lm_head", "matmul"), ("head.body", "matmul"), ("head", ROW_ADD)} <= set(placed.replaced)
    assert not placed.skipped, placed.skipped
    x = loaded.make_inputs(1)[0]
    before = OP_CALLS[op]
    with torch.no_grad():
        ref, out = loaded.model(x), patched(x)
    assert OP_CALLS[op] - before == 2
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    # the row goes onto the GEMM's fresh output in place: no second [T, V] tensor is written
    ran = _ops_run(patched, x)
    assert "aten::add_" in ran and "aten::add" not in ran, sorted(set(ran))
    # the patched model's profile (verify's "after") counts the in-place add for the matmul problem too
    after = profile_problem_times(patched, (x,), plan, device="cpu", op_problems={f"{OP_NAMESPACE}::{op}": "matmul"},
                                  warmup=0, iters=1)
    assert after.uncovered_us == 0 and after.problems["matmul"] > after.op_us["matmul"] > 0, after


def test_training_and_unexpected_rows_run_the_original_expression():
    loaded = _loaded(_Head())
    patched, placed, _ = _placed(loaded.model, profile_model(loaded, warmup=0, iters=1), "fallbacks")
    assert ("head", ROW_ADD) in set(placed.replaced)
    x = loaded.make_inputs(2)[0]
    head = patched.head
    # training: the original out-of-place add
    patched.train()
    with torch.no_grad():
        ran = _ops_run(patched, x)
        out = patched(x)
    assert "aten::add" in ran and "aten::add_" not in ran
    patched.eval()
    torch.testing.assert_close(out, loaded.model(x), rtol=1e-5, atol=1e-5)
    # a row of another dtype: the original promotes, so the rewritten forward does too
    head.final_logits_bias = head.final_logits_bias.double()
    with torch.no_grad():
        out = patched(x)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, loaded.model.head.lm_head(loaded.model.head.body(x)).double()
                               + head.final_logits_bias, rtol=1e-5, atol=1e-5)
    # a buffer that makes the sum larger than the output ([2, V] onto a [V] output): as the original
    head.final_logits_bias = torch.randn(2, V)
    with torch.no_grad():
        out = patched(x[0, 0])
    assert out.shape == (2, V)


def test_a_buffer_that_is_not_a_row_is_left_out():
    """A [2, 1, V] buffer (a row a batch entry) is no row of the logits: the add stays uncovered."""
    plan = profile_model(_loaded(_Head(row_shape=(2, 1, V))), warmup=0, iters=1)
    matmul = next(p for p in plan.problems if p.kind == "matmul")
    assert "head" not in matmul.modules
    assert any(u.name == "aten::add" for u in plan.not_covered)


@pytest.mark.skipif(not HF, reason="transformers is not installed")
@pytest.mark.parametrize("spec", ["hf:marian", "hf:bart"])
def test_hf_logits_bias_is_placed_and_matches(spec):
    from autokernel.models import load_model

    config = ("d_model=64,encoder_layers=1,decoder_layers=1,encoder_attention_heads=4,decoder_attention_heads=4,"
              "encoder_ffn_dim=128,decoder_ffn_dim=128,vocab_size=256,pad_token_id=0")
    loaded = load_model(spec, config_overrides=config, input_shape=[2, 16], dtype=torch.float32)
    loaded.model.model.final_logits_bias.normal_()  # zeros would hide a missing add
    plan = profile_model(loaded, warmup=0, iters=1)
    matmul = next(p for p in plan.problems if p.kind == "matmul")
    assert "model" in matmul.modules and "not placeable at model," not in matmul.note, matmul.note
    patched, placed, op = _placed(loaded.model, plan, spec[3:])
    assert ("model", ROW_ADD) in set(placed.replaced)
    before = OP_CALLS[op]
    with torch.no_grad():
        x = loaded.make_inputs(1)
        ref, out = loaded.model(*x), patched(*x)
    assert OP_CALLS[op] > before
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


class _Scores(nn.Module):
    def forward(self, x):  # a GEMM of its own forward: no linear child the matmul applier switches
        return torch.matmul(x, x.transpose(-2, -1)) @ x


class _HeadAroundScores(_Head):
    def __init__(self):
        super().__init__()
        self.block = _Scores()
        self.unused = nn.Linear(D, D)  # never called: no GEMM of the problem's

    def forward(self, x):
        h = self.block(self.body(x))
        return self.lm_head(h) + self.final_logits_bias


class _HeadWithOwnGemm(_Head):
    def forward(self, x):
        h = torch.matmul(x, self.body.weight)
        return self.lm_head(h) + self.final_logits_bias


def test_the_rewritten_forward_places_its_row_add_and_nothing_inside_it():
    """Rewriting the head's forward places the row add, the head's own share of the matmul
    problem; the GEMMs of ``block``, a module inside the head that nothing switched, stay not
    covered, and a linear inside it that never ran is not switched.  A forward that also runs a
    GEMM of its own keeps its add out of the problem: both would be counted at the head, and the
    rewrite places only the add."""
    loaded = _loaded(_HeadAroundScores())
    plan = profile_model(loaded, warmup=0, iters=1)
    matmul = next(p for p in plan.problems if p.kind == "matmul")
    assert matmul.module_time_us.get("head", 0) > 0 and "head.block" not in matmul.module_time_us, matmul.module_time_us
    assert "not placeable at head.block" in matmul.note, matmul.note
    # the head is the problem's for its row add only: the linears inside it that ran no GEMM of
    # the problem are not switched for being inside it
    _, placed, _ = _placed(loaded.model, plan, "around")
    assert ("head", ROW_ADD) in placed.replaced and "head.unused" not in dict(placed.replaced), placed.replaced

    plan = profile_model(_loaded(_HeadWithOwnGemm()), warmup=0, iters=1)
    assert any(u.name == "aten::add" for u in plan.not_covered), plan.not_covered
