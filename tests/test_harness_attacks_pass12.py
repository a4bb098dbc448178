"""Twelfth red-team pass on the judge (CPU, Triton interpreter): five kernel files that passed
``autokernel bench`` while wrong.  Two classes:

* every CPU shape fit in one block of a reduction: attention that attends to a 64-key window,
  matmul that sums the first 128 of K.  Each CPU shape set now has a shape whose reductions
  reach past ``PAST_ANY_BLOCK`` (more than two of the widest block any knob allows), so a
  kernel that stops after a block or two meets it.  (Larger shapes cost the interpreter too
  much: S^2 for the masked attention kinds, at every dtype and adversarial case of the edge
  stage; a window wider than every CPU shape is the GPU judge's to catch, at S = 2048.)
* the interpreter is not a GPU: programs of a launch run one after another, and the compiler's
  hints (``tl.max_contiguous``, ``tl.multiple_of``, ``tl.max_constancy``) are recorded and never
  used.  A split-row sum whose "last program finishes the row" counter is a plain load + store
  passed every stage and was wrong in 983 of 1280 rows on an H100; a stride-2 gather hinted
  contiguous passed and was wrong by 5.8 (of 3.9) there.  The interpreter now checks each hint
  against the values it is given, and a load of a value another program of the same launch
  stored, with no atomic between them, is a race.

Each test failed before its fix."""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch

from autokernel.harness import Evaluator, compare
from autokernel.problems import get_problem
from autokernel.problems.registry import load_starter

sys.path.insert(0, str(Path(__file__).parent))
from test_harness_attacks import ATTACKS  # noqa: E402

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 on CPU")

PAST_ANY_BLOCK = 256  # 2 x 128, the widest reduction block in any starter's KNOB_SPACE
# the dimensions each kind's kernel walks in blocks and sums over
REDUCTIONS = {"matmul": ("K",), "linear_gelu": ("K",), "fused_mlp": ("D", "H"),
              "attention": ("S",), "attention_rotary": ("S",), "attention_masked": ("S",),
              "attention_softcap": ("S",), "attention_sinks": ("S",),
              "moe_experts": ("D", "I"), "moe_experts_gptoss": ("D", "I")}


@pytest.mark.parametrize("kind", sorted(REDUCTIONS))
def test_some_cpu_shape_reaches_past_a_few_blocks_of_each_reduction(kind):
    problem = get_problem(kind)
    shapes = list(problem.cpu_shapes) + list(problem.cpu_edge_shapes)
    for dim in REDUCTIONS[kind]:
        assert max(s[dim] for s in shapes) > PAST_ANY_BLOCK, (kind, dim)


@pytest.mark.parametrize("kind", sorted(REDUCTIONS))
def test_no_starter_block_is_wider_than_the_reach(kind):
    """The reach above stays past a few blocks of every knob setting the tuner may pick."""
    space = load_starter(kind, None).KNOB_SPACE
    summed = "BLOCK_N" if kind.startswith("attention") else "BLOCK_K"  # keys, or the GEMMs' K
    widest = max(max(v) for k, v in space.items() if k.endswith(summed))
    assert 2 * widest <= PAST_ANY_BLOCK, (kind, widest)


def _load(path: Path, tmp: Path, edit: tuple[str, str] | None = None):
    source = path.read_text()
    if edit:
        assert edit[0] in source
        source = source.replace(*edit)
    target = tmp / f"{path.stem}.py"
    target.write_text(source)
    spec = importlib.util.spec_from_file_location(target.stem, target)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fails_some_shape(kind: str, kernel_fn) -> str | None:
    """The first CPU or edge shape (fp32, one draw) where ``kernel_fn`` is out of the problem's
    bound; None when it passes them all."""
    problem = get_problem(kind)
    for shape in list(problem.cpu_edge_shapes) + list(problem.cpu_shapes):
        args = problem.make_inputs(dict(shape), torch.float32, "cpu", 3)
        upcast = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
        out = kernel_fn(*args)
        verdict = compare.compare_outputs(out, problem.reference(*upcast), compare.output_meta(out),
                                          problem.tolerance(torch.float32))
        if not verdict.ok:
            return f"{shape}: {verdict.message}"
    return None


@pytest.mark.parametrize("kind,name,edit", [
    ("attention", "attention_pass12_key_window.py", None),
    ("attention", "attention_pass12_key_window.py", ("WINDOW=64,", "WINDOW=128,")),  # the widest key block
    ("attention_rotary", "attention_rotary_pass12_key_window.py", None),
    ("matmul", "matmul_pass12_k_prefix.py", None),
    ("matmul", "matmul_pass12_k_prefix.py", ("K = min(K, 128)", "K = min(K, 1024)")),
])
def test_a_kernel_that_stops_after_a_few_blocks_of_a_reduction_fails_a_cpu_shape(kind, name, edit, tmp_path):
    """Before: every CPU shape of attention had S <= 48 (attention_rotary 33) and of matmul K <= 64."""
    assert _fails_some_shape(kind, _load(ATTACKS / name, tmp_path, edit).kernel_fn) is not None


@pytest.mark.parametrize("kind", ["attention", "attention_rotary", "matmul", "linear_gelu", "fused_mlp"])
def test_the_starters_pass_the_longer_reductions(kind):
    assert _fails_some_shape(kind, load_starter(kind, None).kernel_fn) is None


def _judge(kind: str, name: str, shapes: list[str]):
    with Evaluator(kind, device="cpu", shapes=shapes, dtypes=["fp32"], timeout_s=120, baselines=False,
                   timing=False) as ev:
        return ev.evaluate(ATTACKS / name)


def test_a_counter_kept_by_plain_loads_and_stores_across_programs_is_a_race():
    """Before: passed all six stages (the programs of a launch ran one at a time)."""
    result = _judge("reduce", "reduce_pass12_split_row_plain_counter.py", ["4x300"])
    assert result.verdict == "incorrect" and result.failed_stage == "smoke", (result.verdict, result.message)
    assert "another program" in result.message and "race" in result.message, result.message


def test_a_false_contiguity_hint_fails():
    """Before: passed (the interpreter recorded the hint and computed the true gather)."""
    result = _judge("rotary_interleaved", "rotary_interleaved_pass12_contiguity_hint.py", ["2x3x16x64"])
    assert result.verdict == "incorrect" and result.failed_stage == "smoke", (result.verdict, result.message)
    assert "max_contiguous" in result.message, result.message
