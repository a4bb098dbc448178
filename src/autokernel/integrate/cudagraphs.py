"""Opt-in CUDA-graph mode (``apply(..., cuda_graphs=True)``, ``autokernel verify --cuda-graphs``).

At small token counts a forward pass is launch-bound: the CPU issues kernels more slowly than
the GPU runs them (at 1x1024 tokens the LLaMA example took 4.9 ms of wall time for 3.4 ms of
GPU work).  The wrapper captures the whole forward once per input signature (shapes, dtypes,
device) with ``torch.cuda.graph`` on static input buffers, then each call copies the inputs in and
replays the graph.  Inference only (captured under ``no_grad``); GPU only: on a model that is not
on a CUDA device ``apply`` refuses.

What a call returns lives in the graph's static output, which the next replay overwrites.  As
torch.compile's CUDA graphs do, a call hands out the static output itself (no copy: Gemma-2's
2.1 GB of logits took 1.4 ms a forward to copy, the whole of its loss to torch.compile's graphs,
BENCHMARKS.md twenty-first session), each time on a storage of its own, and the next replay of the
same graph makes the tensors the last call returned refuse every access ("overwritten by a later
call"): reading a kept output after the next call raises instead of giving that call's numbers.
Views taken of an output before the next call are not guarded (torch marks a tensor, not its
storage: on an H100 such a view read the next call's values).  Clone what you keep.  Where this
torch cannot mark a tensor so (the call is private to its CUDA builds), or with
``static_outputs=False`` (``apply(..., copy_graph_outputs=True)``), a call returns a copy.

Host tensors a forward moves to the GPU while it is captured go through pinned memory
(``capture_copies``: transformers 5.17's eager masks make one); a forward that cannot be captured
raises ``GraphCaptureError`` (one line from the CLI, exit 2).
"""
from __future__ import annotations

from collections import Counter
from typing import Any

import torch
import torch.nn as nn

from .capture_copies import PinnedHostCopies
from .ops import OP_CALLS
from .runfiles import IntegrateError

STALE = ("this output of an autokernel CUDA graph was overwritten by a later call of the same model "
         "(the graph reuses its output buffers, as torch.compile's CUDA graphs do): clone it before the "
         "next call to keep it")


class GraphCaptureError(IntegrateError):
    """A forward that cannot be captured as a CUDA graph (a host sync, a copy the capture refuses)."""


WARMUP_CALLS = 3  # eager calls on a side stream before capture (lazy init, autotuning, allocator)


class CudaGraphed(nn.Module):
    """``model``'s forward, captured and replayed as a CUDA graph per input signature."""

    def __init__(self, model: nn.Module, static_outputs: bool = True):
        super().__init__()
        self.model = model
        self._graphs: dict[tuple, tuple[Any, list[torch.Tensor], Any]] = {}
        # the static outputs handed out (guarded), or copies where this torch cannot guard them
        self.static_outputs = static_outputs and can_guard_outputs()
        self._handed: dict[tuple, list[torch.Tensor]] = {}  # signature -> the last call's output aliases
        # op name -> calls of our op that the eager forward made and the captured one did not
        # (a model that takes another path while a stream captures: say, a library that builds
        # an attention mask when it cannot read the padding mask's values)
        self.capture_fallbacks: dict[str, int] = {}
        self._kept: dict[tuple, list[torch.Tensor]] = {}  # signature -> pinned buffers its graph copies from
        self._captured_calls: dict[tuple, Counter] = {}  # signature -> calls of our ops its capture made

    def forward(self, *args: torch.Tensor) -> Any:
        if not args or any(not isinstance(a, torch.Tensor) or not a.is_cuda for a in args):
            return self.model(*args)  # nothing to capture: not CUDA tensors
        key = signature(args)
        entry = self._graphs.get(key)
        if entry is None:
            entry = self._graphs[key] = self._capture(args)
        return self._replay(key, entry, args)

    def calls_in_graph(self, *args: Any) -> Counter | None:
        """Calls of our ops the graph for these inputs holds (a replay runs no Python to count
        them); None where no graph was captured for them."""
        return self._captured_calls.get(signature(args)) if all(isinstance(a, torch.Tensor) for a in args) else None

    def _replay(self, key: tuple, entry: tuple[Any, list[torch.Tensor], Any], args: tuple[torch.Tensor, ...]) -> Any:
        graph, static, out = entry
        for buffer, a in zip(static, args):
            buffer.copy_(a)
        if not self.static_outputs:
            graph.replay()
            return _copy(out)
        for alias in self._handed.pop(key, ()):
            torch._C._set_storage_access_error_msg(alias, STALE)
        graph.replay()
        handed: list[torch.Tensor] = []
        result = _aliased(out, handed)
        self._handed[key] = handed
        return result

    def _capture(self, args: tuple[torch.Tensor, ...]) -> tuple[Any, list[torch.Tensor], Any]:
        static = [a.clone() for a in args]
        with torch.no_grad():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(WARMUP_CALLS):
                    before = Counter(OP_CALLS)
                    self.model(*static)
                    eager_calls = Counter(OP_CALLS) - before
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            before = Counter(OP_CALLS)
            kept: list[torch.Tensor] = []  # pinned host buffers the graph copies from on every replay
            try:
                with torch.cuda.graph(graph), PinnedHostCopies(kept):
                    out = self.model(*static)
            except RuntimeError as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise GraphCaptureError(f"the model could not be captured as a CUDA graph ({first}); run it "
                                        f"without CUDA graphs") from exc
            captured_calls = Counter(OP_CALLS) - before
            self.capture_fallbacks.update(missing_calls(eager_calls, captured_calls))
        key = signature(args)
        self._kept[key], self._captured_calls[key] = kept, captured_calls
        return graph, static, out


def signature(args: tuple[torch.Tensor, ...]) -> tuple:
    """What a graph is captured for: the inputs' shapes, dtypes and devices."""
    return tuple((tuple(a.shape), a.dtype, a.device) for a in args)


def missing_calls(eager: Counter, captured: Counter) -> dict[str, int]:
    """Calls of our ops an eager forward made that the captured forward did not."""
    return {op: n - captured.get(op, 0) for op, n in sorted(eager.items()) if n > captured.get(op, 0)}


def can_guard_outputs() -> bool:
    """Whether this torch can give a tensor a storage of its own over existing memory and make a
    tensor refuse access (torch.compile's CUDA graphs do both; the second in CUDA builds only)."""
    return hasattr(torch._C, "_construct_storage_from_data_pointer") and hasattr(
        torch._C, "_set_storage_access_error_msg")


def _aliased(out: Any, handed: list[torch.Tensor]) -> Any:
    """``out`` with each tensor replaced by one over the same memory on a storage of its own
    (appended to ``handed``), of the output's own type (``_rebuilt``)."""
    if isinstance(out, torch.Tensor):
        storage = out.untyped_storage()
        alias = torch.empty((), dtype=out.dtype, device=out.device)
        alias.set_(torch._C._construct_storage_from_data_pointer(storage.data_ptr(), out.device, storage.nbytes()),
                   out.storage_offset(), out.shape, out.stride())
        alias._autokernel_static = out  # the memory stays the graph's while the alias lives
        handed.append(alias)
        return alias
    return _rebuilt(out, lambda o: _aliased(o, handed))


def _copy(out: Any) -> Any:
    """A fresh copy of the graph's static output, of the output's own type (``_rebuilt``)."""
    if isinstance(out, torch.Tensor):
        return out.clone()
    return _rebuilt(out, _copy)


def _rebuilt(out: Any, each) -> Any:
    """``out`` (a tuple, list or dict, or anything else as it is) with ``each`` applied to its
    items, of its own type: a transformers ``ModelOutput`` (a dict subclass) keeps its
    attributes, a named tuple its fields."""
    if isinstance(out, tuple) and hasattr(out, "_fields"):
        return type(out)(*(each(o) for o in out))
    if isinstance(out, (tuple, list)):
        return type(out)(each(o) for o in out)
    if isinstance(out, dict):
        items = {k: each(v) for k, v in out.items()}
        try:
            return type(out)(**items) if type(out) is not dict else items
        except TypeError:  # a mapping type that its items cannot rebuild
            return items
    return out


def without_graphs(model: nn.Module) -> nn.Module:
    """The patched model under the CUDA-graph wrapper: what ``torch.compile`` of the patched model
    compiles.  Compiling the wrapper would trace a graph replay into compiled code, whose own
    CUDA graphs (mode ``reduce-overhead``) then capture a replay of ours: on the H200 that died
    with "unspecified launch failure" (hf:gpt2, 2026-12-04).  torch.compile's mode decides about
    CUDA graphs for the compiled model."""
    return model.model if isinstance(model, CudaGraphed) else model


def cuda_graphs_refusal(device: torch.device) -> str | None:
    """Why the CUDA-graph mode cannot be used for a model on ``device`` (None: it can)."""
    if device.type != "cuda":
        return f"CUDA-graph mode needs the model on a CUDA device; it is on {device.type}"
    if not torch.cuda.is_available():
        return "CUDA-graph mode needs a GPU; none is available"
    return None
