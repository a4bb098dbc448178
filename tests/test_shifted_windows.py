"""shifted_windows (Swin's cyclic shift + window partition, and window reverse + shift back), on CPU
under the Triton interpreter: the reference against transformers' own functions, the starter
against the reference (both directions, with and without a shift, a grid that is not square), a
kernel that drops the shift caught by the judge's inputs, and hf:swin planned and placed, the
patched model matching the original exactly (a grid to pad too: the pad stays PyTorch's)."""
from __future__ import annotations

import copy
import importlib.util
import os
import shutil

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")

from autokernel.problems import get_problem  # noqa: E402
from autokernel.problems.registry import load_starter  # noqa: E402
from autokernel.problems.shifted_windows import eager_bytes  # noqa: E402

from test_softcap import _patched_with_starter  # noqa: E402

HF = importlib.util.find_spec("transformers") is not None
SWIN = "embed_dim=32,depths=[2,2],num_heads=[2,4],image_size=64,window_size=4,patch_size=4"
SHAPES = [(2, 8, 12, 5, 4, 2, 0), (2, 8, 12, 5, 4, 2, 1), (1, 6, 3, 3, 3, 0, 0), (1, 6, 3, 3, 3, 0, 1),
          (3, 4, 4, 7, 4, 3, 1)]


def shape(b, h, w, c, window, shift, reverse):
    return {"B": b, "H": h, "W": w, "C": c, "window": window, "shift": shift, "reverse": reverse}


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_reference_is_what_swin_layer_computes():
    from transformers.models.swin.modeling_swin import window_partition, window_reverse

    problem = get_problem("shifted_windows")
    x = torch.randn(2, 8, 12, 5)
    windows = problem.reference(x, 8, 12, 4, 2, 0)
    torch.testing.assert_close(windows, window_partition(torch.roll(x, (-2, -2), (1, 2)), 4), rtol=0, atol=0)
    back = problem.reference(windows.view(-1, 16, 5), 8, 12, 4, 2, 1)
    torch.testing.assert_close(back, torch.roll(window_reverse(windows, 4, 8, 12), (2, 2), (1, 2)), rtol=0, atol=0)
    torch.testing.assert_close(back, x, rtol=0, atol=0)


def test_starter_matches_the_reference_exactly():
    """Bit for bit, both directions, with and without a shift, NaN and inf moved as they are (the
    judge's tolerances would let a value be a rounding off; test_starters runs the whole judge)."""
    problem = get_problem("shifted_windows")
    kernel = load_starter("shifted_windows").kernel_fn
    for dims, dtype in zip(SHAPES, (torch.float32, torch.bfloat16, torch.float32, torch.bfloat16, torch.float16)):
        args = problem.make_inputs(shape(*dims), dtype, "cpu", 1)
        for _, case in [("random", args)] + problem.adversarial_inputs(shape(*dims), dtype, "cpu", 2)[-2:]:
            out, ref = kernel(*case), problem.reference(*case)
            assert out.shape == ref.shape and out.dtype == ref.dtype
            bits = {4: torch.int32, 2: torch.int16}[out.element_size()]
            assert torch.equal(out.view(bits), ref.view(bits))


def test_a_kernel_that_drops_the_shift_is_caught():
    problem = get_problem("shifted_windows")
    for dims in SHAPES[:2]:
        x, *rest = problem.make_inputs(shape(*dims), torch.float32, "cpu", 0)
        unshifted = problem.reference(x, *rest[:3], 0, rest[4])
        assert not torch.equal(unshifted, problem.reference(x, *rest))


def test_bytes_count_one_read_and_one_write_against_eagers_copies():
    problem = get_problem("shifted_windows")
    s = shape(1, 56, 56, 96, 7, 3, 0)
    n = 56 * 56 * 96 * 4
    assert problem.bytes(s, torch.float32) == 2 * n
    assert eager_bytes(s, torch.float32) == 6 * n  # pad, roll, partition copy
    assert eager_bytes(dict(s, reverse=1), torch.float32) == 4 * n  # reverse copy, roll
    assert eager_bytes(dict(s, shift=0), torch.float32) == 4 * n  # pad, partition copy
    assert problem.check_shape(dict(s, H=57)) and problem.check_shape(dict(s, shift=7))


@pytest.fixture(scope="module")
def swin():
    """hf:swin at the coverage test's size, its bias tables random (Swin initialises them to
    zeros: a wrong gather or a lost region mask would change nothing), and its plan."""
    from autokernel.models import load_model
    from autokernel.profiler import profile_model

    loaded = load_model("hf:swin", config_overrides=SWIN, dtype=torch.float32)
    with torch.no_grad():
        for name, p in loaded.model.named_parameters():
            if name.endswith("relative_position_bias_table"):
                p.normal_(0, 2)
    return loaded, profile_model(loaded, warmup=0, iters=1)


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_swin_layers_are_planned_and_placed_and_match(tmp_path, swin):
    """Every SwinLayer's partition and reverse is one call (both directions, shifted and not):
    8 calls over the 4 layers; the patched model gives the original's output bit for bit."""
    loaded, plan = swin[0], copy.deepcopy(swin[1])
    problem = next(p for p in plan.problems if p.kind == "shifted_windows")
    assert problem.supported and sum(problem.calls) == 8, (problem.calls, problem.note)
    assert {(s["shift"], s["reverse"]) for s in problem.shapes} == {(0, 0), (0, 1), (2, 0), (2, 1)}
    assert len(problem.modules) == 4 and all(m.split(".")[-2] == "blocks" for m in problem.modules)
    calls, got, want = _patched_with_starter(tmp_path, loaded, plan, problem, 3)
    assert calls == 8
    assert torch.equal(got, want)


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_a_grid_to_pad_keeps_its_pad_and_matches(tmp_path):
    """A 10x10 grid with window 4 pads to 12x12: the pad is not counted (the layer's own
    maybe_pad runs), the op takes the padded grid, and the crop after the reverse stays."""
    from autokernel.models import load_model
    from autokernel.profiler import profile_model

    loaded = load_model("hf:swin", config_overrides="embed_dim=16,depths=[2],num_heads=[2],image_size=40,"
                        "window_size=4,patch_size=4", dtype=torch.float32)
    plan = profile_model(loaded, warmup=0, iters=1)
    problem = next(p for p in plan.problems if p.kind == "shifted_windows")
    assert {s["H"] for s in problem.shapes} == {12} and "aten::pad" in {u.name for u in plan.uncovered}
    calls, got, want = _patched_with_starter(tmp_path, loaded, plan, problem, 1)
    assert calls == sum(problem.calls) == 4
    assert torch.equal(got, want)


# ------------------------------------------------------------------ window_bias
BIAS_SHAPES = [(1, 8, 12, 3, 4, 2), (1, 8, 8, 2, 4, 0), (1, 6, 9, 2, 3, 1)]


def bias_shape(b, h, w, heads, window, shift):
    return {"B": b, "H": h, "W": w, "heads": heads, "window": window, "shift": shift}


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_window_bias_reference_is_what_swin_computes():
    """The reference against transformers' own SwinLayer.get_attn_mask and SwinRelativePositionBias
    (a random table; Swin's index), combined as SwinAttention does."""
    from transformers import SwinConfig
    from transformers.models.swin.modeling_swin import SwinLayer

    config = SwinConfig(embed_dim=8, window_size=4)
    layer = SwinLayer(config, dim=8, input_resolution=(8, 12), num_heads=2, shift_size=2)
    bias = layer.attention.relative_position_bias
    with torch.no_grad():
        bias.relative_position_bias_table.normal_()
    mask = layer.get_attn_mask(8, 12, dtype=torch.float32, device="cpu")  # [nW, S, S]
    want = bias() + mask.unsqueeze(1).unsqueeze(0).expand(3, -1, -1, -1, -1).reshape(-1, 1, 16, 16)
    problem = get_problem("window_bias")
    args = (bias.relative_position_bias_table, bias.relative_position_index, 3, 8, 12, 4, 2)
    torch.testing.assert_close(problem.reference(*args), want, rtol=0, atol=0)
    torch.testing.assert_close(problem.reference(*args[:-1], 0), bias(), rtol=0, atol=0)


def test_window_bias_starter_matches_the_reference():
    """fp32 bit for bit (shifted, unshifted, a 3-window with shift 1), Swin's own index and a table
    near +100 (bias + mask cancels) among the cases; test_starters runs the whole judge."""
    problem = get_problem("window_bias")
    kernel = load_starter("window_bias").kernel_fn
    for dims, dtype in zip(BIAS_SHAPES, (torch.float32, torch.float32, torch.bfloat16)):
        s = bias_shape(*dims)
        for _, case in [("random", problem.make_inputs(s, dtype, "cpu", 1))] + problem.adversarial_inputs(s, dtype, "cpu", 2)[2:]:
            out, ref = kernel(*case), problem.reference(*case)
            assert out.shape == ref.shape and out.dtype == ref.dtype
            # fp32 exactly; bf16 within its rounding of the fp32 sum (the interpreter's cast may truncate)
            exact = dict(rtol=0, atol=0) if dtype == torch.float32 else {}
            torch.testing.assert_close(out, ref, equal_nan=True, **exact)


def test_window_bias_judges_inputs_catch_a_kernel_without_the_region_mask_or_the_index():
    problem = get_problem("window_bias")
    table, index, *rest = problem.make_inputs(bias_shape(*BIAS_SHAPES[0]), torch.float32, "cpu", 0)
    want = problem.reference(table, index, *rest)
    no_mask = problem.reference(table, index, *rest[:-1], 0).expand_as(want)
    assert not torch.equal(no_mask, want)
    p = torch.arange(4)
    coords = torch.stack(torch.meshgrid(p, p, indexing="ij")).flatten(1)
    rel = coords[:, :, None] - coords[:, None, :] + 3
    assert not torch.equal(problem.reference(table, (rel[0] * 7 + rel[1]).flatten(), *rest), want)


def test_window_bias_bytes_write_the_mask_once():
    problem = get_problem("window_bias")
    s = bias_shape(64, 56, 56, 3, 7, 3)
    out = 64 * 64 * 3 * 49 * 49 * 4
    assert problem.bytes(s, torch.float32) == out + 13 * 13 * 3 * 4 + 49 * 49 * 8
    assert problem.bytes(dict(s, shift=0), torch.float32) == 3 * 49 * 49 * 4 + 13 * 13 * 3 * 4 + 49 * 49 * 8


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_swin_masks_are_planned_and_placed_and_match(tmp_path, swin):
    """Each layer's mask is one window_bias call (4 layers: two shifted); with random bias tables
    the patched model equals the original bit for bit."""
    loaded, plan = swin[0], copy.deepcopy(swin[1])
    problem = next(p for p in plan.problems if p.kind == "window_bias")
    assert problem.supported and sum(problem.calls) == 4, (problem.calls, problem.note)
    assert {(s["shift"], s["heads"]) for s in problem.shapes} == {(0, 2), (2, 2), (0, 4), (2, 4)}
    calls, got, want = _patched_with_starter(tmp_path, loaded, plan, problem, 2)
    assert calls == 4
    assert torch.equal(got, want)


# ------------------------------------------------------------------ look-alikes left alone
def window_partition(x, window):  # windows taken column-major: not Swin's order
    b, h, w, c = x.shape
    x = x.view(b, h // window, window, w // window, window, c).permute(0, 3, 1, 2, 4, 5)
    return x.contiguous().view(-1, window, window, c)


def window_reverse(windows, window, h, w):
    c = windows.shape[-1]
    x = windows.view(-1, w // window, h // window, window, window, windows.shape[-1]).permute(0, 2, 3, 1, 4, 5)
    return x.contiguous().view(-1, h, w, c)


class LookAlikeLayer(torch.nn.Module):
    """A forward written as SwinLayer's, around window functions of another layout."""

    window_size, shift_size = 4, 2

    def cyclic_shift(self, x, reverse=False):
        return torch.roll(x, (self.shift_size, self.shift_size) if reverse else (-self.shift_size, -self.shift_size), (1, 2))

    def maybe_pad(self, x, height, width):
        return x, (0, 0, 0, 0, 0, 0)

    def forward(self, x):
        x, _ = self.maybe_pad(x, x.shape[1], x.shape[2])
        windows = window_partition(self.cyclic_shift(x), self.window_size)
        return self.cyclic_shift(window_reverse(windows * 2, self.window_size, x.shape[1], x.shape[2]), reverse=True)


def test_a_layer_whose_window_functions_differ_is_left_alone():
    """The rewrite matched SwinLayer's statements by name and put the op in place of any functions
    so called: a layer partitioning windows in another order got Swin's windows (its output
    changed).  The class is probed first: its own functions against the reference."""
    from types import SimpleNamespace

    from autokernel.integrate.windows import rewritten_members, window_helpers

    k = SimpleNamespace(op=lambda *args: get_problem("shifted_windows").reference(*args), dtype=torch.float32)
    assert rewritten_members(LookAlikeLayer, window_helpers(k)) is None


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_a_layer_with_another_mask_keeps_its_own(tmp_path, swin):
    """Swin layers whose get_attn_mask fills -1e4 between regions (a subclass): window_bias's
    rewrite found the call by name and put Swin's -100 mask in its place (the output changed);
    the layer's get_attn_mask and its attention's bias module are probed against the reference
    first, and such a layer is left alone."""
    from transformers.models.swin.modeling_swin import SwinLayer

    from autokernel.integrate import apply
    from autokernel.plan import save_plan
    from autokernel.problems.registry import KERNELS_DIR

    class OtherMaskLayer(SwinLayer):
        def get_attn_mask(self, height, width, dtype, device):
            mask = super().get_attn_mask(height, width, dtype, device)
            return None if mask is None else mask * 100.0

    model = copy.deepcopy(swin[0].model)
    for m in model.modules():
        if type(m) is SwinLayer:
            m.__class__ = OtherMaskLayer
    plan = copy.deepcopy(swin[1])
    plan.problems = [p for p in plan.problems if p.kind in ("shifted_windows", "window_bias")]
    for p in plan.problems:
        (tmp_path / "problems" / p.name).mkdir(parents=True)
        shutil.copyfile(KERNELS_DIR / f"{p.kind}.py", tmp_path / "problems" / p.name / "kernel.py")
    save_plan(plan, tmp_path / "plan.json")
    patched = apply(model, tmp_path)
    assert {kind for _, kind in patched._autokernel_replaced} == {"shifted_windows"}  # its own functions are Swin's
    assert any("window_bias" in why for _, why in patched._autokernel_skipped)
    ids = swin[0].make_inputs(2)
    with torch.no_grad():
        assert torch.equal(patched(*ids), model(*ids))
