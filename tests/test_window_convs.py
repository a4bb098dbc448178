"""A Conv1d (one group, no dilation, zero padding) is the GEMM of its unfolded windows
[B*L_out, C*kernel] by its weight [C*kernel, out]: the profiler plans it into the matmul problem
with those dims (Whisper's encoder stems, uncovered before: 9.5-10.3% of hf:whisper's CPU time
at its coverage test's config), and ``apply`` runs it so, the output the convolution's
(Whisper's own stems: ``test_whisper_placed``)."""
from __future__ import annotations

import os

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
    """Two stems at odd sizes, the second fed the first's output as the applier leaves it
    (channels last in memory) through a tanh, then the rows read as Whisper reads them."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(5, 12, kernel_size=5, stride=1, padding=2)
        self.conv2 = nn.Conv1d(12, 12, kernel_size=3, stride=3, padding=0, bias=False)

    def forward(self, x):
        return self.conv2(torch.tanh(self.conv1(x))).permute(0, 2, 1)

    def reference(self, x):
        h = torch.tanh(F.conv1d(x, self.conv1.weight, self.conv1.bias, padding=2))
        return F.conv1d(h, self.conv2.weight, stride=3).permute(0, 2, 1)


class GeluStems(Stems):
    """Whisper's spelling, ``F.gelu(self.conv(x))``, twice (the module's own ``nn.functional``
    once), and once in the tanh form, which stays a matmul."""

    def __init__(self):
        super().__init__()
        self.conv3 = nn.Conv1d(12, 6, kernel_size=1)

    def forward(self, x):
        h = nn.functional.gelu(self.conv2(F.gelu(self.conv1(x))))
        return F.gelu(self.conv3(h), approximate="tanh").permute(0, 2, 1)

    def reference(self, x):
        h = F.gelu(F.conv1d(x, self.conv1.weight, self.conv1.bias, padding=2))
        h = F.gelu(F.conv1d(h, self.conv2.weight, stride=3))
        return F.gelu(F.conv1d(h, self.conv3.weight, self.conv3.bias), approximate="tanh").permute(0, 2, 1)


class Encoder(nn.Module):  # the stems in a child, as Whisper's encoder holds them
    def __init__(self):
        super().__init__()
        self.encoder = GeluStems()

    def forward(self, x):
        return self.encoder(x)


def _planned(model, x):
    from autokernel.models import LoadedModel
    from autokernel.profiler import profile_model

    loaded = LoadedModel(model=model, make_inputs=lambda seed: (x,), spec="custom", description="stems",
                         input_shape=list(x.shape), input_kind="float")
    return profile_model(loaded, warmup=0, iters=1)


def _kept(problems) -> str:
    head = "experiment\tproblem\tagent\tstatus\tfailed_stage\tlatency_us\tspeedup_vs_eager\tspeedup_vs_start\n"
    return head + "".join(f"{2 * i}\t{p.name}\ttuner\tbaseline\t\t100\t0.5\t1\n"
                          f"{2 * i + 1}\t{p.name}\ttuner\tkeep\t\t70\t0.7\t1.4\n" for i, p in enumerate(problems))


def test_apply_runs_conv1d_stems_as_gemms(tmp_path):
    """Planned as one matmul problem (M = B*L_out, N = out, K = C*kernel), placed at both
    convolutions, and the patched output is the original's."""
    from autokernel.integrate import OP_CALLS, apply
    from test_integrate import make_workdir

    torch.manual_seed(0)
    model = Stems().eval()
    x = torch.randn(2, 5, 13)
    plan = _planned(model, x)
    (matmul,) = [p for p in plan.problems if p.kind == "matmul"]
    assert matmul.supported and sorted(matmul.modules) == ["conv1", "conv2"]
    assert sorted(matmul.shapes, key=lambda s: s["K"]) == [{"M": 26, "N": 12, "K": 25}, {"M": 8, "N": 12, "K": 36}]
    assert not any("conv" in u.name for u in plan.not_covered), [u.name for u in plan.not_covered]

    patched = apply(model, make_workdir(tmp_path / "wd", [matmul], model="custom", input_shape=[2, 5, 13],
                                         results=_kept([matmul])))  # a kept kernel beat the start
    assert sorted(patched._autokernel_replaced) == [("conv1", "matmul"), ("conv2", "matmul")]
    op = patched._autokernel_ops[matmul.name]
    before = OP_CALLS[op]
    with torch.no_grad():
        got, want = patched(x), model.reference(x)
    assert OP_CALLS[op] - before == 2
    assert got.shape == want.shape == (2, 4, 12)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), (got - want).abs().max()
    # another length, fed as a view of [B, L, C] rows (not contiguous): the same windows
    rows = torch.randn(3, 9, 5)
    with torch.no_grad():
        got = patched.conv1(rows.transpose(1, 2))
    assert torch.allclose(got, F.conv1d(rows.transpose(1, 2), model.conv1.weight, model.conv1.bias, padding=2),
                          rtol=1e-5, atol=1e-5)


def test_a_conv1d_then_gelu_is_linear_gelu_and_placed(tmp_path):
    """``F.gelu(self.conv(x))`` in the forward: one linear_gelu problem at the module holding it
    (the windows' GEMM, the GELU its epilogue), the forward rewritten to run the op, the bias-free
    convolution with zeros; the tanh-form GELU's convolution is a matmul.  Output the original's."""
    from autokernel.integrate import OP_CALLS, apply
    from test_integrate import make_workdir

    torch.manual_seed(0)
    model = Encoder().eval()
    x = torch.randn(2, 5, 13)
    plan = _planned(model, x)
    by_kind = {p.kind: p for p in plan.problems}
    gelus, matmul = by_kind["linear_gelu"], by_kind["matmul"]
    assert gelus.supported and gelus.modules == ["encoder"], gelus.modules
    assert sorted(gelus.shapes, key=lambda s: s["K"]) == [{"M": 26, "N": 12, "K": 25, "tanh": 0},
                                                          {"M": 8, "N": 12, "K": 36, "tanh": 0}]
    assert matmul.modules == ["encoder.conv3"] and matmul.shapes == [{"M": 8, "N": 6, "K": 12}]
    assert not any("gelu" in u.name or "conv" in u.name for u in plan.not_covered), [u.name for u in plan.not_covered]

    problems = [gelus, matmul]
    patched = apply(model, make_workdir(tmp_path / "wd", problems, model="custom", input_shape=[2, 5, 13],
                                         results=_kept(problems)))
    assert sorted(patched._autokernel_replaced) == [("encoder", "linear_gelu"), ("encoder.conv3", "matmul")], \
        patched._autokernel_replaced
    ops = {p.kind: patched._autokernel_ops[p.name] for p in problems}
    before = {kind: OP_CALLS[op] for kind, op in ops.items()}
    with torch.no_grad():
        got, want = patched(x), model.encoder.reference(x)
    assert {kind: OP_CALLS[op] - before[kind] for kind, op in ops.items()} == {"linear_gelu": 2, "matmul": 1}
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), (got - want).abs().max()
    patched.train()  # in training the forward runs as written
    with torch.no_grad():
        assert torch.allclose(patched(x), want, rtol=1e-5, atol=1e-5)
    assert OP_CALLS[ops["linear_gelu"]] - before["linear_gelu"] == 2
