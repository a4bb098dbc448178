"""``verify``'s timing of the patched model without each kernel (``integrate.in_model``: why)."""
from __future__ import annotations

import gc
import math
import statistics
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

from .integrate.cudagraphs import CudaGraphed, GraphCaptureError
from .integrate.in_model import InModelChoice, adopt, candidates
from .model_timing import time_interleaved

Timer = Callable[[dict[str, Callable[[], object]], int, int, bool, str], dict[str, float]]


def choose_in_model(original: torch.nn.Module, workdir: Path, patched: torch.nn.Module, inputs: tuple, *,
                    device_name: str, under_compile: str, warmup: int, rounds: int, gpu: bool, dev: str,
                    say: Callable[[str], None], timer: Timer | None = None,
                    cuda_graphs: bool = False) -> torch.nn.Module:
    """The patched model (``apply(original, workdir, in_model="all", cuda_graphs=cuda_graphs)``)
    timed against itself without each kernel it runs, then without all those it ran slower with;
    the model to go on with (the one without them, where it timed faster).  Each variant is built
    in ``patched``'s mode (captured as a CUDA graph of its own in CUDA-graph mode).  It holds the
    measurement as the choice it follows (``_autokernel_in_model``; None where none was made: no
    kernel, or a variant that could not be built)."""
    from .integrate import apply

    timer = timer or time_interleaved
    digests = getattr(patched, "_autokernel_selected", {})
    selected = set(digests)
    running = sorted(getattr(patched, "_autokernel_ops", {}))
    if not running:
        return patched

    def build(only: set[str] | None = None, in_model: Any = "all") -> torch.nn.Module:
        with warnings.catch_warnings():  # apply's warnings were given for the patched model
            warnings.simplefilter("ignore")
            return apply(original, workdir, under_compile=under_compile, only=only, in_model=in_model,
                         cuda_graphs=cuda_graphs)

    def ratio(variant: torch.nn.Module, against: torch.nn.Module | None = None) -> tuple[float, float]:
        """``variant``'s time over ``against``'s (the patched model with every kernel), and the latter's."""
        base = patched if against is None else against
        with torch.inference_mode():
            times = timer({"every": lambda: base(*inputs), "variant": lambda: variant(*inputs)}, warmup, rounds,
                          gpu, dev)
        return times["variant"] / times["every"], times["every"]

    say(f"timing the patched model without each of its {len(running)} kernel(s) in turn...")
    ratios: dict[str, float] = {}
    every_samples: list[float] = []
    try:
        for name in running:
            variant = build(only=selected - {name})
            ratios[name], every = ratio(variant)
            every_samples.append(every)
            del variant
            _release(dev)
        every_ms = statistics.median(every_samples)
        without_ms = {name: r * every_ms for name, r in ratios.items()}
        choice = InModelChoice(device_name, dict(digests), cuda_graphs, every_ms, without_ms)
        for name in running:
            say(f"  without {name}: {without_ms[name]:.3f} ms (with every kernel {every_ms:.3f} ms)")
        slower = candidates(every_ms, without_ms)
        if slower:
            variant = build(only=selected - set(slower))
            chosen_ratio, _ = ratio(variant)
            del variant
            _release(dev)
            choice.chosen_ms = chosen_ratio * every_ms
            if adopt(every_ms, choice.chosen_ms):
                choice.left_out = slower
                say(f"leaving out {', '.join(slower)}: {choice.chosen_ms:.3f} ms without them, {every_ms:.3f} ms "
                    f"with every kernel")
            else:
                say(f"without {', '.join(slower)} together: {choice.chosen_ms:.3f} ms, not faster than every kernel "
                    f"({every_ms:.3f} ms): every kernel stays")
        else:
            say("the model is fastest with every kernel")
        current = build(in_model=choice) if choice.left_out else patched
        current_ms = choice.chosen_ms if choice.left_out else every_ms
    except (RuntimeError, torch.cuda.OutOfMemoryError, GraphCaptureError) as exc:  # a measurement not made
        say(f"the model without each kernel could not be timed ({_first_line(exc)}); every kernel stays")
        _release(dev)
        return patched
    try:
        original_ratio, _ = ratio(_original_in_mode(original, cuda_graphs), current)
    except (RuntimeError, torch.cuda.OutOfMemoryError, GraphCaptureError) as exc:
        say(f"the original model could not be timed in this mode ({_first_line(exc)}); the patched model stays")
        original_ratio = math.inf
    _release(dev)
    original_ms = original_ratio * current_ms
    if adopt(current_ms, original_ms):
        # a launch-bound forward can lose to the original even without the kernels that cost it
        # most (each launch of ours costs host time): then the model runs unchanged
        say(f"the original model timed faster ({original_ms:.3f} ms) than the patched one ({current_ms:.3f} ms"
            + (f" without {', '.join(choice.left_out)}" if choice.left_out else "") + "): every kernel left out, "
            "the model runs unchanged" + ("" if cuda_graphs else " (a launch-bound model may gain in CUDA-graph "
                                          "mode: --cuda-graphs)"))
        del current
        _release(dev)
        choice.left_out, choice.chosen_ms, choice.original_faster = list(running), original_ms, True
        return build(in_model=choice)
    current._autokernel_in_model = choice
    return current


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _original_in_mode(original: torch.nn.Module, cuda_graphs: bool) -> torch.nn.Module:
    """The original model as the patched one runs: captured as a CUDA graph of its own in that mode."""
    return CudaGraphed(original) if cuda_graphs else original


def _release(dev: str) -> None:
    gc.collect()
    if dev.startswith("cuda"):
        torch.cuda.empty_cache()
