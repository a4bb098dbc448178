"""hf:whisper whole (log-mel features into the encoder's two convolution stems and layers, the
decoder's tokens through self- and cross-attention), on CPU under the Triton interpreter: the
profiler plans each stem and the GELU after it into the linear_gelu problem at the window GEMM's
dims, and ``apply``,
every supported problem's starter kernel kept, places every problem (the stems, the add ending
the decoder's cross-attention block with the final norm after it, the attention ops with the
heads' copies of q, k and v dropped) and gives the original's logits."""
from __future__ import annotations

import importlib.util
import os

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

os.environ.setdefault("TRITON_INTERPRET", "1")

HF = importlib.util.find_spec("transformers") is not None
RESULTS_HEAD = "experiment\tproblem\tagent\tstatus\tfailed_stage\tlatency_us\tspeedup_vs_eager\tspeedup_vs_start\n"


def kept_rows(problems) -> str:
    """results.tsv where each problem's kernel beat its start (a matmul goes in only then)."""
    rows = (f"{2 * i}\t{p.name}\ttuner\tbaseline\t\t100\t0.5\t1\n{2 * i + 1}\t{p.name}\ttuner\tkeep\t\t70\t0.7\t1.4\n"
            for i, p in enumerate(problems))
    return RESULTS_HEAD + "".join(rows)


class FourDimCopies(TorchDispatchMode):
    """Counts the copies (``aten.clone``) of 4-D tensors a forward makes."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.clone.default and args[0].dim() == 4:
            self.count += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.skipif(not HF, reason="transformers is not installed")
def test_every_problem_of_whisper_is_placed_and_the_logits_kept(tmp_path):
    from autokernel.integrate import OP_CALLS, apply
    from autokernel.models import load_model
    from autokernel.profiler import profile_model
    from test_attention_cross import WHISPER  # 80 mel bins, 64 frames, width 64, one layer each side
    from test_integrate import make_workdir

    loaded = load_model("hf:whisper", config_overrides=WHISPER, dtype=torch.float32)
    plan = profile_model(loaded, warmup=0, iters=1)
    (gelus,) = [p for p in plan.problems if p.kind == "linear_gelu"]
    assert "model.model.encoder" in gelus.modules, gelus.modules
    # conv1 (kernel 3, padding 1, 64 frames) and conv2 (stride 2, 32 frames), each with F.gelu after it
    assert {"M": 2 * 64, "N": 64, "K": 80 * 3, "tanh": 0} in gelus.shapes
    assert {"M": 2 * 32, "N": 64, "K": 64 * 3, "tanh": 0} in gelus.shapes
    assert not any(("conv" in u.name or "gelu" in u.name or "not placeable" in u.name or "contiguous" in u.name)
                   for u in plan.not_covered), [u.name for u in plan.not_covered]
    problems = [p for p in plan.problems if p.supported]
    assert {"matmul", "add_layernorm", "linear_gelu", "attention", "attention_cross"} <= {p.kind for p in problems}

    patched = apply(loaded.model, make_workdir(tmp_path / "wd", problems, model="hf:whisper",
                                               input_shape=loaded.input_shape, results=kept_rows(problems)))
    assert patched._autokernel_skipped == []
    replaced = set(patched._autokernel_replaced)
    assert ("model.model.encoder", "linear_gelu") in replaced
    assert ("model.model.decoder.layers.0.final_layer_norm", "add_layernorm") in replaced
    gelu_op = patched._autokernel_ops[gelus.name]
    before = OP_CALLS[gelu_op]
    inputs = loaded.make_inputs(0)
    with torch.no_grad(), FourDimCopies() as original:
        want = loaded.model(*inputs)
    with torch.no_grad(), FourDimCopies() as ours:
        got = patched(*inputs)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-5), (got - want).abs().max()
    # the original copies q, k, v of its three attention modules into heads and SDPA's outputs
    # back; the patched model copies only the stems' windows
    assert (original.count, ours.count) == (12, 2)
    assert OP_CALLS[gelu_op] - before == 4  # the two stems, fc1 of the encoder's layer and of the decoder's
