"""The CUDA-graph mode's CPU-testable parts (capture itself needs a GPU: benchmarks/models_gpu.py --cuda-graphs)."""
from collections import Counter

import torch

from autokernel.integrate.cudagraphs import cuda_graphs_refusal, missing_calls


def test_missing_calls_names_the_ops_the_captured_forward_left_out():
    eager = Counter({"attention_1": 12, "gelu_2": 12, "layernorm_3": 25})
    captured = Counter({"gelu_2": 12, "layernorm_3": 24})
    assert missing_calls(eager, captured) == {"attention_1": 12, "layernorm_3": 1}
    assert missing_calls(eager, eager) == {}


def test_cuda_graph_mode_refuses_a_model_on_the_cpu():
    assert "CUDA device" in cuda_graphs_refusal(torch.device("cpu"))


def test_compile_of_the_patched_model_compiles_the_model_under_the_graph_wrapper(monkeypatch):
    # torch.compile (reduce-overhead) of the wrapper captured a replay of our graph in its own:
    # "unspecified launch failure" on the H200 (hf:gpt2, 2026-12-04)
    from autokernel import verify_timing as verify_mod
    from autokernel.integrate.cudagraphs import CudaGraphed
    from autokernel.model_timing import ForwardTimes

    compiled = []

    def fake_compiled(model, inputs, mode, backend):
        compiled.append(model)
        return model

    monkeypatch.setattr(verify_mod, "_compiled", fake_compiled)
    monkeypatch.setattr(verify_mod, "time_forwards", lambda fns, warmup, rounds, gpu, dev: ForwardTimes(
        idle={name: (fn(), 1.0)[1] for name, fn in fns.items()}))
    original, inner = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
    result = verify_mod.VerifyResult(passed=True, model="m", dtype="fp32", device="cuda")
    verify_mod.time_models(result, original, CudaGraphed(inner), (torch.randn(2, 4),), "cuda", True,
                            "reduce-overhead", None, 1, 1, lambda *a: None)
    assert compiled == [original, inner]
    assert result.compile_patched_ms == 1.0
