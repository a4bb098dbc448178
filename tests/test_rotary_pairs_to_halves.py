"""rotary_pairs_to_halves: DeepSeek-V3's rotary (interleaved pairs in, rotate_half halves out).
The problem's inputs catch kernels that compute one of the other layouts, read the tables' second
half or turn the wrong way; the starter passes every case; apply's probe tells DeepSeek's
function from the other layouts' (tests/test_mla.py applies it in the model)."""
from __future__ import annotations

import importlib.util
import os

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")

from autokernel.problems import get_problem  # noqa: E402
from autokernel.problems.registry import load_starter  # noqa: E402

from test_attention_masked import cases, judged  # noqa: E402

KIND = "rotary_pairs_to_halves"
HF = importlib.util.find_spec("transformers") is not None


def _halves(x, cos, sin, *, table=lambda t, half: t[..., :half], sign=1.0):
    half = x.shape[-1] // 2
    x1, x2 = x[..., ::2].double(), x[..., 1::2].double()
    c, s = table(cos, half).double(), table(sin, half).double()
    return torch.cat((x1 * c - sign * x2 * s, x2 * c + sign * x1 * s), -1).to(x.dtype)


WRONG = {
    "rotates halves": get_problem("rotary").reference,
    "writes pairs back": get_problem("rotary_interleaved").reference,
    "reads the tables' second half": lambda x, c, s: _halves(x, c, s, table=lambda t, half: t[..., half:]),
    "turns the other way": lambda x, c, s: _halves(x, c, s, sign=-1.0),
}


def test_reference_rotates_each_pair_into_the_halves():
    gen = torch.Generator().manual_seed(0)
    x, cos, sin = (torch.randn(*shape, dtype=torch.float64, generator=gen) for shape in ((2, 3, 5, 8), (5, 8), (5, 8)))
    out = get_problem(KIND).reference(x, cos, sin)
    assert torch.allclose(out, _halves(x, cos, sin))
    assert out[0, 0, 0, 1] == pytest.approx(float(x[0, 0, 0, 2] * cos[0, 1] - x[0, 0, 0, 3] * sin[0, 1]))
    assert out[0, 0, 0, 5] == pytest.approx(float(x[0, 0, 0, 3] * cos[0, 1] + x[0, 0, 0, 2] * sin[0, 1]))


@pytest.mark.parametrize("wrong", list(WRONG))
def test_the_inputs_catch_a_wrong_rotation(wrong):
    problem = get_problem(KIND)
    for dtype in (torch.float32, torch.bfloat16):
        for shape in problem.cpu_shapes:
            assert not all(judged(problem, dtype, WRONG[wrong], args) for _, args in cases(problem, shape, dtype)), \
                f"{wrong} passed every case at {shape} {dtype}"


def test_the_starter_passes_every_case_and_odd_widths():
    problem, starter = get_problem(KIND), load_starter(KIND)
    for dtype in problem.dtypes:
        for shape in problem.cpu_shapes:
            failed = [name for name, args in cases(problem, shape, dtype)
                      if not judged(problem, dtype, starter.kernel_fn, args)]
            assert not failed, (shape, dtype, failed)
    for d in (2, 12, 80):  # widths that are not powers of two: the padded tail holds no pair
        args = problem.make_inputs({"B": 2, "H": 3, "S": 5, "D": d}, torch.float32, "cpu", 0)
        assert torch.allclose(starter.kernel_fn(*args), problem.reference(*args), atol=1e-6)


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_apply_tells_deepseeks_function_from_the_other_layouts_by_a_probe():
    from transformers.models.cohere import modeling_cohere
    from transformers.models.deepseek_v3 import modeling_deepseek_v3
    from transformers.models.llama import modeling_llama

    from autokernel.integrate.calls import _rotary_form, _rotary_pairs_form, _rotary_pairs_to_halves_form

    deepseek = modeling_deepseek_v3.apply_rotary_pos_emb_interleave
    assert _rotary_pairs_to_halves_form(deepseek) is True
    assert _rotary_form(deepseek) is None and _rotary_pairs_form(deepseek) is None
    # DeepSeek's rotate_half form (rope_interleave off) and the other models' functions
    for fn in (modeling_deepseek_v3.apply_rotary_pos_emb, modeling_llama.apply_rotary_pos_emb,
               modeling_cohere.apply_rotary_pos_emb):
        assert _rotary_pairs_to_halves_form(fn) is None
