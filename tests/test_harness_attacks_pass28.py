"""Twenty-eighth red-team pass on the judge (CPU, Triton interpreter): the kinds and surfaces new
in the last sessions (xielu, matmul's output scale, relative_position_bias, attention_cross,
linear_relu2, rotary_interleaved), attacked as an optimiser rewarded for passing would.

* **Outputs kept by the draw's scalars.**  The cached-output check of the smoke stage writes a
  fresh draw into the same input tensors, and takes the non-tensor arguments drawn with it
  (``stages.with_scalars_of``).  xielu, softcap and relative_position_bias have one floating
  tensor and scalars that change with every draw, so a kernel that keeps its outputs by the
  tensors' addresses and layouts plus the scalars (never reading a value) met a new key at every
  rewrite, computed afresh and passed all six stages; a model calls each layer with the same
  scalars and often the same buffer (the caching allocator), and got an earlier call's output.
  Each floating tensor is now also rewritten alone with the scalars kept, for these kinds too
  (multi-tensor kinds had that check already).

Each test failed before its fix."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from autokernel.harness.evaluate import evaluate
from autokernel.problems.registry import KERNELS_DIR

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 on CPU")

# appended to a shipped starter: its kernel_fn behind a memo keyed on the tensors' addresses and
# layouts and the other arguments as they are (a copy of the kept output through a Triton kernel of
# its own: a fresh output every call, no computing torch op)
MEMO = '''

@triton.jit
def _memo_copy(src_ptr, dst_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.cast(tl.program_id(0), tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


_memo = {}
_computed = kernel_fn


def kernel_fn(*args):
    key = tuple((a.data_ptr(), tuple(a.shape), tuple(a.stride()), a.dtype) if isinstance(a, torch.Tensor) else a
                for a in args)
    kept = _memo.get(key)
    if kept is None:
        kept = _memo[key] = _computed(*args).contiguous()
    out = torch.empty_like(kept)
    if out.numel():
        _memo_copy[(triton.cdiv(out.numel(), 1024),)](kept, out, out.numel(), BLOCK=1024)
    return out
'''


@pytest.mark.xfail(strict=True, reason="open: the in-place rewrite takes fresh scalars, which key the memo")
@pytest.mark.parametrize("kind", ["xielu", "softcap", "relative_position_bias"])
def test_outputs_kept_by_the_draws_scalars_are_a_cached_output(tmp_path, kind):
    """Before: each passed all six stages (xielu 14 s, softcap 11 s, relative_position_bias 25 s)."""
    path = tmp_path / f"{kind}_memo.py"
    path.write_text((KERNELS_DIR / f"{kind}.py").read_text() + MEMO)
    ev = evaluate(kind, path, device="cpu", dtypes=["fp32"], timing=False, baselines=False)
    assert ev.verdict == "rejected" and ev.failed_stage == "smoke", ev.message
    assert "cached-output" in {f.rule for f in ev.integrity}, ev.message
