"""Host tensors moved to the GPU while a CUDA graph captures go through pinned memory
(integrate.capture_copies).  Capturing needs a GPU; here the meta device stands for it and a
clone for pinning, so what is tested is which calls are routed and what they return."""
from __future__ import annotations

import torch

from autokernel.integrate.capture_copies import PinnedHostCopies


def _mode(kept):
    return PinnedHostCopies(kept, pin=lambda t: t.clone(), to_device=lambda d: d.type == "meta")


def test_a_factory_onto_the_device_and_a_host_tensor_moved_there_go_through_the_pinned_buffers():
    kept: list[torch.Tensor] = []
    host = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    with _mode(kept):
        # transformers 5.17's eager mask: torch.tensor(0.0, device=mask.device, dtype=dtype)
        zero = torch.tensor(0.0, device="meta", dtype=torch.bfloat16)
        ids = torch.as_tensor([1, 2, 3], device=torch.device("meta"))
        moved = host.to("meta")
        moved_as = host.to(torch.empty(1, dtype=torch.float16, device="meta"))
        moved_kw = host.to(device="meta", dtype=torch.float64)
        on_host = host.to(torch.float64)  # no device: not routed
        host_factory = torch.tensor([1.0])  # the host's own: not routed
    assert (zero.device.type, zero.dtype, zero.shape) == ("meta", torch.bfloat16, torch.Size([]))
    assert (ids.device.type, ids.dtype) == ("meta", torch.int64)
    assert (moved.device.type, moved.dtype, moved.shape) == ("meta", torch.float32, (2, 3))
    assert (moved_as.device.type, moved_as.dtype) == ("meta", torch.float16)
    assert (moved_kw.device.type, moved_kw.dtype) == ("meta", torch.float64)
    assert on_host.device.type == "cpu" and host_factory.device.type == "cpu"
    # one pinned buffer a routed call, holding the value the capture saw
    assert len(kept) == 5 and all(t.device.type == "cpu" for t in kept)
    assert kept[0].item() == 0.0 and kept[1].tolist() == [1, 2, 3] and torch.equal(kept[2], host)


def test_outside_the_mode_nothing_is_routed():
    kept: list[torch.Tensor] = []
    _mode(kept)
    torch.tensor(0.0, device="meta")
    torch.zeros(2).to("meta")
    assert kept == []


def test_verify_counts_a_graph_replays_calls_from_its_capture():
    """A replay runs no Python: verify counted no call of any op in CUDA-graph mode and noted every
    kernel as "installed but not called" (hf:whisper and hf:albert on an H100, 2026-12-06)."""
    from collections import Counter

    from autokernel.integrate.ops import OP_CALLS
    from autokernel.verify import ops_called

    class Replaying:
        def calls_in_graph(self, *args):
            return Counter({"rmsnorm_abc": 3}) if args[0].shape == (1, 8) else None

    ops = {"rmsnorm": "rmsnorm_abc", "swiglu": "swiglu_def"}
    before = dict(OP_CALLS)
    assert ops_called(Replaying(), (torch.zeros(1, 8),), ops, before) == {"rmsnorm": 3, "swiglu": 0}
    # no graph for these inputs, or an eager model: the calls counted since ``before``
    OP_CALLS["swiglu_def"] += 2
    assert ops_called(Replaying(), (torch.zeros(2, 8),), ops, before) == {"rmsnorm": 0, "swiglu": 2}
    assert ops_called(object(), (torch.zeros(1, 8),), ops, before) == {"rmsnorm": 0, "swiglu": 2}
    OP_CALLS["swiglu_def"] -= 2
