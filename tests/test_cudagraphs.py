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


def test_a_call_hands_out_the_static_output_and_the_next_replay_marks_the_last_ones_stale(monkeypatch):
    """Static outputs as torch.compile's CUDA graphs hand them out: no copy (Gemma-2's logits
    copy was 1.4 ms a forward, its whole loss to torch.compile's graphs), each call's tensors on a
    storage of their own over the graph's memory, and the next replay of the graph marks the last
    call's storages so that reading them raises (torch's CUDA builds; recorded here).  A fake
    graph on CPU tensors: capture needs a GPU."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    from autokernel.integrate import cudagraphs

    marked = []
    monkeypatch.setattr(torch._C, "_set_storage_access_error_msg", lambda t, msg: marked.append((t, msg)),
                        raising=False)
    static_in = torch.zeros(4)
    static_out = CausalLMOutputWithPast(logits=torch.zeros(2, 4))

    class Graph:
        def replay(self):
            static_out.logits.copy_(torch.stack([static_in, -static_in]))

    wrapped = cudagraphs.CudaGraphed(torch.nn.Identity())
    assert wrapped.static_outputs
    entry = (Graph(), [static_in], static_out)
    first = wrapped._replay("key", entry, (torch.arange(4.0),))
    assert type(first) is CausalLMOutputWithPast and first.logits.tolist() == [[0, 1, 2, 3], [0, -1, -2, -3]]
    assert first.logits.data_ptr() == static_out.logits.data_ptr()  # no copy
    assert first.logits.untyped_storage()._cdata != static_out.logits.untyped_storage()._cdata
    assert marked == []
    second = wrapped._replay("key", entry, (torch.ones(4),))
    assert second.logits.tolist() == [[1] * 4, [-1] * 4]
    assert len(marked) == 1 and marked[0][0] is first.logits and "overwritten by a later call" in marked[0][1]
    asked = cudagraphs.CudaGraphed(torch.nn.Identity(), static_outputs=False)  # apply(copy_graph_outputs=True)
    copied = asked._replay("key", entry, (torch.full((4,), 3.0),))
    assert not asked.static_outputs and copied.logits.data_ptr() != static_out.logits.data_ptr()
    monkeypatch.delattr(torch._C, "_set_storage_access_error_msg", raising=False)
    if not cudagraphs.can_guard_outputs():  # this torch cannot mark a storage: copies
        copying = cudagraphs.CudaGraphed(torch.nn.Identity())
        assert not copying.static_outputs
        third = copying._replay("key", entry, (torch.full((4,), 2.0),))
        assert third.logits.data_ptr() != static_out.logits.data_ptr() and third.logits[0, 0] == 2
