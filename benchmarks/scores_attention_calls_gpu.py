"""Why a written-out attention's rewrite runs the model's own statements instead of the
attention_masked op, outside and inside CUDA graphs: each guard of the rewrite (``ready``, the
scale's ``scalar``, the mask ``attend`` hands the op) logged with what it saw, per verify.

The twenty-eighth session saw hf:gptj (transformers 5.17's ``_attn``) call the op outside graphs
and never while its graph was captured ("installed but not called").

    python benchmarks/scores_attention_calls_gpu.py OUT [--model hf:gptj] [--config n_layer=1] [--shape 2x128]
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import torch

import autokernel.integrate.scores_attention as scores

sys.path.insert(0, str(Path(__file__).resolve().parent))
import models_gpu  # noqa: E402

SEEN: Counter = Counter()
_helpers = scores.helpers


def _described(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"tensor {tuple(x.shape)} {x.dtype} on {x.device.type}{' (inference)' if x.is_inference() else ''}"
    return repr(x)


def logged_helpers(k):
    """``scores.helpers`` whose guards count what they were given and what they answered."""
    from autokernel.integrate.calls import kernel_mask

    made = _helpers(k)
    ready, scalar, attend = made[scores.READY], made[scores.SCALAR], made[scores.ATTEND]
    def capturing() -> bool:
        return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()

    def logged_ready(module, q, key, v, scale, dims, to_v=False):
        answer = ready(module, q, key, v, scale, dims, to_v)
        # the op's own dtype and head dims beside q's and k's: the 2026-12-07 call on an H100 saw ready
        # False outside graphs too (q fp32, v bf16), where the same model on the CPU answers True
        SEEN[("ready", answer, type(module).__name__, "q " + str(q.dtype), "k " + str(key.dtype),
              "v " + str(v.dtype), "op " + str(k.dtype), "op D " + str(k.dims("D")), "q D " + str(q.shape[-1]),
              "autocast " + str(torch.is_autocast_enabled(q.device.type)), _described(scale), dims, to_v,
              capturing())] += 1
        return answer

    def logged_scalar(x, divide):
        answer = scalar(x, divide)
        SEEN[("scalar", answer, _described(x), divide, capturing())] += 1
        return answer

    def logged_attend(q, key, v, mask, scale):
        takes = (mask is not None and kernel_mask(mask, q, key) is not None) if q.dim() == 4 else "heads folded"
        SEEN[("attend", str(q.dtype), str(v.dtype), _described(mask), takes, capturing())] += 1
        return attend(q, key, v, mask, scale)

    made[scores.READY], made[scores.SCALAR], made[scores.ATTEND] = logged_ready, logged_scalar, logged_attend
    return made


def print_scores_ops(spec: str, config: str, shape: str, gpu: bool) -> None:
    """The profile's ops up to the first softmax under each attention module, with the dtypes the
    profiler recorded for their inputs: the 2026-12-07 call (H100) planned hf:gptj's
    attention_masked in bf16, where the CPU plans it in fp32 (q and k cast to fp32 in ``_attn``), so
    the rewrite's guard (q fp32 against the op's bf16) declined every call."""
    from autokernel.models import load_model
    from autokernel.profiler import trace_model

    loaded = load_model(spec, dtype=torch.bfloat16 if gpu else torch.float32, device="cuda" if gpu else "cpu",
                        input_shape=shape, config_overrides=config)
    roots = trace_model(loaded.model, loaded.make_inputs(0), on_gpu=gpu, warmup=1, iters=1)

    def walk(node, depth=0):
        info = node.scope.info if node.scope is not None else None
        if info is not None and "Attention" in info.cls_name:
            print(f"scope {node.scope.name} ({info.cls_name})")
            for kid in node.children:
                if kid.scope is None:
                    print(f"  {kid.name} shapes {kid.shapes} dtypes {kid.dtypes}")
                    if "softmax" in kid.name:
                        break
            return
        for kid in node.children:
            walk(kid, depth + 1)

    for root in roots:
        walk(root)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--model", default="hf:gptj")
    ap.add_argument("--config", default="n_layer=1")
    ap.add_argument("--shape", default="2x128")
    args = ap.parse_args()
    from autokernel.verify import verify

    scores.helpers = logged_helpers
    gpu = torch.cuda.is_available()
    print_scores_ops(args.model, args.config, args.shape, gpu)
    for graphs in ((False, True) if gpu else (False,)):
        wd = models_gpu.starters_workdir(args.out / ("graphs" if graphs else "eager"), args.model, args.config,
                                         args.shape, gpu, captured=graphs)
        SEEN.clear()
        plan = json.loads((wd / "plan.json").read_text())
        for problem in plan["problems"]:
            if problem["kind"] == "attention_masked":
                print(f"plan: {problem['name']} {problem['dtype']} {problem['shapes']}")
        v = verify(wd, seeds=(0,), timing=False, breakdown=False, cuda_graphs=graphs, in_model="all", log=print)
        print(f"{args.model}, CUDA graphs {graphs}: passed {v.passed}, op calls {v.op_calls}; {v.message}")
        for seen, count in SEEN.items():
            print(f"  {count} x {seen}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
