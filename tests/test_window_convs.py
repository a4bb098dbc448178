"""A Conv1d (one group, no dilation, zero padding) is the GEMM of its unfolded windows
[B*L_out, C*kernel] by its weight [C*kernel, out]: the profiler plans it into the matmul problem
with those dims (Whisper's encoder stems, uncovered before: 9.5-10.3% of hf:whisper's CPU time
at its coverage test's config), and ``apply`` runs it so, the output the convolution's
(Whisper's own stems: ``test_whisper_placed``)."""
from __future__ import annotations

import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

os.environ.setdefault("TRITON_INTERPRET", "1")

from autokernel.recognize import window_conv1d_parts  # noqa: E402


def test_only_a_plain_conv1d_is_a_window_gemm():
    assert window_conv1d_parts(nn.Conv1d(80, 64, 3, padding=1)) == (3, 1, 1)
    assert window_conv1d_parts(nn.Conv1d(64, 64, 3, stride=2, padding=1)) == (3, 2, 1)
    assert window_conv1d_parts(nn.Conv1d(8, 8, 3, groups=2)) is None
    assert window_conv1d_parts(nn.Conv1d(8, 8, 3, dilation=2)) is None
    assert window_conv1d_parts(nn.Conv1d(8, 8, 3, padding="same")) is None
    assert window_conv1d_parts(nn.Conv1d(8, 8, 3, padding=1, padding_mode="reflect")) is None
    assert window_conv1d_parts(nn.Conv2d(8, 8, 3)) is None

    class Causal(nn.Conv1d):  # a forward of its own: not the GEMM of its windows
        def forward(self, x):
            return super().forward(F.pad(x, (2, 0)))

    assert window_conv1d_parts(Causal(8, 8, 3)) is None


class Stems(nn.Module):
    """Two stems as Whisper's, at odd sizes: the second takes the first's output as the applier
    leaves it (channels last in memory), then the rows are read as Whisper reads them."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(5, 12, kernel_size=5, stride=1, padding=2)
        self.conv2 = nn.Conv1d(12, 12, kernel_size=3, stride=3, padding=0, bias=False)

    def forward(self, x):
        h = F.gelu(self.conv2(F.gelu(self.conv1(x))))
        return h.permute(0, 2, 1)


def test_apply_runs_conv1d_stems_as_gemms(tmp_path):
    """Planned as one matmul problem (M = B*L_out, N = out, K = C*kernel), placed at both
    convolutions, and the patched output is the original's."""
    from autokernel.integrate import OP_CALLS, apply
    from autokernel.models import LoadedModel
    from autokernel.profiler import profile_model
    from test_integrate import _results, make_workdir

    torch.manual_seed(0)
    model = Stems().eval()
    x = torch.randn(2, 5, 13)
    loaded = LoadedModel(model=model, make_inputs=lambda seed: (x,), spec="custom", description="stems",
                         input_shape=[2, 5, 13], input_kind="float")
    plan = profile_model(loaded, warmup=0, iters=1)
    (matmul,) = [p for p in plan.problems if p.kind == "matmul"]
    assert matmul.supported and sorted(matmul.modules) == ["conv1", "conv2"]
    assert sorted(matmul.shapes, key=lambda s: s["K"]) == [{"M": 26, "N": 12, "K": 25}, {"M": 8, "N": 12, "K": 36}]
    assert not any("conv" in u.name for u in plan.not_covered), [u.name for u in plan.not_covered]

    patched = apply(model, make_workdir(tmp_path / "wd", [matmul], model="custom", input_shape=[2, 5, 13],
                                         results=_results(1.3)))  # a kept kernel beat the start
    assert sorted(patched._autokernel_replaced) == [("conv1", "matmul"), ("conv2", "matmul")]
    op = patched._autokernel_ops[matmul.name]
    before = OP_CALLS[op]
    with torch.no_grad():
        got = patched(x)
        want = F.gelu(F.conv1d(F.gelu(F.conv1d(x, model.conv1.weight, model.conv1.bias, padding=2)),
                               model.conv2.weight, stride=3)).permute(0, 2, 1)
    assert OP_CALLS[op] - before == 2
    assert got.shape == want.shape == (2, 4, 12)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), (got - want).abs().max()
    # another length, fed as a view of [B, L, C] rows (not contiguous): the same windows
    rows = torch.randn(3, 9, 5)
    with torch.no_grad():
        got = patched.conv1(rows.transpose(1, 2))
    assert torch.allclose(got, F.conv1d(rows.transpose(1, 2), model.conv1.weight, model.conv1.bias, padding=2),
                          rtol=1e-5, atol=1e-5)

