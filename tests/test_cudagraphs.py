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


def test_a_graph_call_returns_the_models_output_type_with_fresh_tensors():
    """The copy of the static output came back as a plain dict for a transformers ModelOutput
    (a dict subclass), so ``patched(ids).logits`` raised AttributeError in CUDA-graph mode, and a
    named tuple could not be rebuilt from a generator."""
    from collections import namedtuple

    from transformers.modeling_outputs import CausalLMOutputWithPast

    from autokernel.integrate.cudagraphs import _copy

    logits = torch.randn(2, 3)
    out = _copy(CausalLMOutputWithPast(logits=logits))
    assert type(out) is CausalLMOutputWithPast and torch.equal(out.logits, logits)
    assert out.logits.data_ptr() != logits.data_ptr() and list(out.keys()) == ["logits"]
    pair = namedtuple("Pair", "a b")(logits, [logits])
    copied = _copy(pair)
    assert type(copied) is type(pair) and torch.equal(copied.a, logits) and copied.a.data_ptr() != logits.data_ptr()
    assert copied.b[0].data_ptr() != logits.data_ptr() and _copy({"x": logits})["x"].data_ptr() != logits.data_ptr()
