"""How ``autokernel verify`` times the models: eager, patched and torch.compile of both, built
first and timed together in interleaved rounds (``model_timing``); where torch.compile of the
patched model loses, timed again with every op handed to inductor and with the patched model
left out of the compile, the fastest recorded for ``apply(under_compile="auto")``."""
from __future__ import annotations

from typing import Any, Callable

import torch

from .integrate.cudagraphs import without_graphs
from .model_timing import time_forwards, time_interleaved
from .verify_records import VerifyResult

CPU_TIMING_NOTE = "interpreter/cpu — not GPU performance"
COMPILE_MODES = ("max-autotune-no-cudagraphs", "max-autotune", "reduce-overhead", "default")


def compile_mode_for(cuda_graphs: bool, given: str | None = None) -> str:
    """torch.compile's mode verify compares with: ``given``, else like for like, the strongest
    mode without CUDA graphs for a patched model outside graphs, and the same autotuning with
    torch.compile's own CUDA graphs for a patched model in CUDA-graph mode."""
    if given is not None:
        return given
    return "max-autotune" if cuda_graphs else "max-autotune-no-cudagraphs"


def _compiled(model: torch.nn.Module, inputs: tuple, mode: str | None, backend: str | None):
    kwargs: dict[str, Any] = {}
    if backend:
        kwargs["backend"] = backend
    elif mode:
        kwargs["mode"] = mode
    compiled = torch.compile(model, **kwargs)
    compiled(*inputs)  # compile now, so that the timing below is of the compiled code
    return compiled


def time_models(result: VerifyResult, original, patched, inputs: tuple, dev: str, compile: bool,
                compile_mode: str, compile_backend: str | None, warmup: int, iters: int, say,
                second_compile: bool = False) -> None:
    """Every model is built (torch.compile included) before any is timed; then all are timed
    together in interleaved rounds, from idle, back to back and as GPU work alone
    (``model_timing.time_forwards``), the GPU's clocks ramped up first."""
    from .profiler import intra_op_threads

    gpu = dev.startswith("cuda")
    if not gpu:  # the interpreter is slow: a few calls say enough about CPU wall time
        warmup, iters = min(warmup, 1), min(iters, 3)
    result.timing_kind = "gpu" if gpu else "cpu"
    result.timing_note = "" if gpu else CPU_TIMING_NOTE
    with torch.inference_mode():
        models = {"eager": lambda: original(*inputs), "patched": lambda: patched(*inputs)}
        ops = getattr(patched, "_autokernel_kernel_ops", [])
        if compile and gpu:
            how = compile_backend or compile_mode
            result.compile_mode = how
            try:
                say(f"torch.compile ({how}) of the original (this can take minutes)...")
                c_orig = _compiled(original, inputs, compile_mode, compile_backend)
                models["compile"] = lambda: c_orig(*inputs)
                if second_compile and ops:  # measured afresh: the per-op choice first, whatever was recorded
                    _per_op_choice(result, patched, ops)
                say(f"torch.compile ({how}) of the patched model...")
                c_patched = _compiled(without_graphs(patched), inputs, compile_mode, compile_backend)
                models["compile_patched"] = lambda: c_patched(*inputs)
            except Exception as exc:  # a measurement that could not be made, reported as such
                result.compile_note = f"torch.compile failed: {first_line(exc)}"
                say(result.compile_note)
        elif compile:
            result.compile_note = "torch.compile timings are taken on GPU only"
        say(f"timing {', '.join(models)} in {iters} rotated rounds"
            + (" (from idle, back to back, GPU work alone)..." if gpu else " (one intra-op thread)..."))
        # on a CPU, one intra-op thread, as the profile runs: on 2 busy cores a forward that fanned
        # out took 300 ms one round and 2 ms the next, and a patched model identical to the
        # original timed 6.5x faster than it
        with intra_op_threads(None if gpu else 1):
            ways = time_forwards(models, warmup, iters, gpu, dev)
        times = ways.idle
        result.back_to_back_ms, result.gpu_only_ms = ways.back_to_back, ways.gpu_only
        if ways.waits_for_gpu:
            note = (f"GPU work alone not measured for {', '.join(ways.waits_for_gpu)}: the forward waits for the GPU "
                    "on the way (a host sync)")
            result.timing_note = f"{result.timing_note}; {note}" if result.timing_note else note
            say(note)
        result.eager_ms, result.patched_ms = times["eager"], times["patched"]
        result.compile_ms, result.compile_patched_ms = times.get("compile"), times.get("compile_patched")
        say(f"eager {result.eager_ms:.3f} ms, patched {result.patched_ms:.3f} ms"
            + ("" if gpu else f" ({CPU_TIMING_NOTE})"))
        if result.compile_ms is not None:
            say(f"torch.compile: original {result.compile_ms:.3f} ms"
                + ("" if result.compile_patched_ms is None else f", patched {result.compile_patched_ms:.3f} ms"))
        if second_compile and ops and result.compile_patched_ms is not None:
            per_op_ms = result.compile_patched_ms
            try:
                _compile_again(result, patched, ops, inputs, compile_mode, compile_backend,
                               lambda fn: _on_the_rounds_scale(fn, models["patched"], result.patched_ms, warmup,
                                                               iters, gpu, dev), say)
            except Exception as exc:  # the first measurement stands
                result.compile_note = f"torch.compile failed: {first_line(exc)}"
                say(result.compile_note)
            if result.compile_patched_ms != per_op_ms:  # another way won, timed from idle only
                result.back_to_back_ms.pop("compile_patched", None)
                result.gpu_only_ms.pop("compile_patched", None)
    if result.eager_ms and result.patched_ms:
        result.speedup_vs_eager = result.eager_ms / result.patched_ms
    if result.compile_ms and result.patched_ms:
        result.speedup_vs_compile = result.compile_ms / result.patched_ms
    if result.compile_ms and result.compile_patched_ms:
        result.compile_patched_vs_compile = result.compile_ms / result.compile_patched_ms


# a forward whose time from idle is this many times its GPU work is waiting on its host
LAUNCH_BOUND = 1.5


def launch_bound_note(result: VerifyResult) -> str:
    """Advice where the patched forward is launch-bound (GPU timing only): its time from idle at
    least ``LAUNCH_BOUND`` times its GPU work alone.  There each op we switch adds host time,
    whatever its GPU time (hf:bert at 4x512 tokens: 10.2 ms patched against 7.4 eager, for 1.5 ms
    of GPU work), and a captured CUDA graph takes the host out."""
    idle, alone = result.patched_ms, result.gpu_only_ms.get("patched")
    if not idle or not alone or idle < LAUNCH_BOUND * alone:
        return ""
    return (f"the patched forward is launch-bound here ({idle:.2f} ms from idle for {alone:.2f} ms of GPU work): "
            "each switched op adds host time; run it as a CUDA graph (verify --cuda-graphs, "
            "apply(..., cuda_graphs=True)) to take the host out")


def first_line(exc: BaseException) -> str:
    """An exception for a note: its type and the first line of its message (200 characters)."""
    text = str(exc)
    return f"{type(exc).__name__}: {text.splitlines()[0][:200] if text else ''}"


def _on_the_rounds_scale(fn, patched_fn, patched_ms: float, warmup: int, rounds: int, gpu: bool, dev: str) -> float:
    """ms a call of ``fn`` (a compile of the patched model made after the main rounds, which
    cannot be timed with the compile of the original: dynamo was reset for it), timed in rounds
    with the patched model and put on the main rounds' scale through it."""
    times = time_interleaved({"variant": fn, "patched": patched_fn}, warmup, rounds, gpu, dev)
    return times["variant"] * patched_ms / times["patched"]


def _compile_again(result: VerifyResult, patched, ops: list, inputs: tuple, compile_mode: str,
                   compile_backend: str | None, timer: Callable, say) -> None:
    """torch.compile of the patched model (each op as ``auto`` chose per op) was timed.  Where it
    lost to torch.compile of the original, time it again with every op handed to inductor; where
    the faster of those still lost to the patched model uncompiled, time torch.compile of the
    patched model left out of the compile.  Keep the fastest, and record what was timed for
    ``apply(under_compile="auto")``."""
    from .integrate.compile_policy import ModelChoice, kernel_digests, leave_uncompiled, set_policies, whole_model_policy

    per_op_ms = result.compile_patched_ms
    eager_ms = uncompiled_ms = None
    if result.compile_ms is not None and per_op_ms > result.compile_ms:
        eager_ms = _compile_handed_over(result, patched, ops, inputs, compile_mode, compile_backend, timer, say)
    fastest = min(ms for ms in (per_op_ms, eager_ms) if ms is not None)
    if result.patched_ms is not None and fastest > result.patched_ms:
        uncompiled_ms = _compile_left_out(result, patched, inputs, compile_mode, compile_backend, timer, say)
    if eager_ms is None and uncompiled_ms is None:
        return
    choice = ModelChoice(whole_model_policy(per_op_ms, eager_ms, uncompiled_ms), per_op_ms, eager_ms,
                         result.device_name, kernel_digests(ops), uncompiled_ms, without_graphs(patched) is not patched)
    result.compile_choice = choice.to_dict()
    result.under_compile = set_policies(ops, "auto", result.device_name, choice)
    if choice.policy == "uncompiled":
        leave_uncompiled(patched)
    result.compile_patched_ms = min(ms for ms in (per_op_ms, eager_ms, uncompiled_ms) if ms is not None)
    follows = {"eager": "hands every op over", "uncompiled": "leaves the patched model out of torch.compile",
               "per-op": "keeps the per-op choice"}[choice.policy]
    say(f"apply(under_compile='auto') now {follows} on this machine")


def _per_op_choice(result: VerifyResult, patched, ops: list) -> None:
    """The patched model as ``apply(under_compile="auto")`` leaves it with no earlier verify's
    choice: each op as chosen per op, the model compiled with them."""
    from .integrate.compile_policy import compile_again, set_policies

    compile_again(patched)
    result.under_compile = set_policies(ops, "auto", result.device_name)


def _compile_handed_over(result: VerifyResult, patched, ops: list, inputs: tuple, compile_mode: str,
                         compile_backend: str | None, timer: Callable, say) -> float | None:
    """torch.compile of the patched model with every op handed to inductor (the eager op
    traced), ms a forward; None where it could not be made (the note says why)."""
    import torch._dynamo

    from .integrate.compile_policy import set_policies

    set_policies(ops, "eager", result.device_name)
    torch._dynamo.reset()  # traced afresh: the first compile's graphs hold our ops
    try:
        handed = _compiled(without_graphs(patched), inputs, compile_mode, compile_backend)
        eager_ms = timer(lambda: handed(*inputs))
    except Exception as exc:  # the first measurement stands; this one could not be made
        result.compile_note = f"torch.compile with every op handed to inductor failed: {first_line(exc)}"
        say(result.compile_note)
        return None
    finally:
        set_policies(ops, "auto", result.device_name)
    say(f"torch.compile of the patched model with every op handed to inductor: {eager_ms:.3f} ms "
        f"({result.compile_patched_ms:.3f} with the ops chosen one by one)")
    return eager_ms


def _compile_left_out(result: VerifyResult, patched, inputs: tuple, compile_mode: str, compile_backend: str | None,
                      timer: Callable, say) -> float | None:
    """torch.compile of the patched model left out of the compile (it runs as it is: in CUDA-graph
    mode the wrapper replays its graphs), ms a forward; None where it could not be made."""
    import torch._dynamo

    from .integrate.compile_policy import compile_again, leave_uncompiled

    model = patched
    leave_uncompiled(model)
    torch._dynamo.reset()
    try:
        left_out = _compiled(model, inputs, compile_mode, compile_backend)
        uncompiled_ms = timer(lambda: left_out(*inputs))
    except Exception as exc:
        result.compile_note = f"torch.compile of the patched model left uncompiled failed: {first_line(exc)}"
        say(result.compile_note)
        return None
    finally:
        compile_again(model)
    say(f"torch.compile of the patched model left out of the compile: {uncompiled_ms:.3f} ms "
        f"(the patched model {result.patched_ms:.3f} ms)")
    return uncompiled_ms
