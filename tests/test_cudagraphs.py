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
