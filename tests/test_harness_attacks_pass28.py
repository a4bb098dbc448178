"""Twenty-eighth red-team pass on the judge (CPU, Triton interpreter): the kinds and surfaces new
in the last sessions (xielu, matmul's output scale, relative_position_bias, attention_cross,
linear_relu2, rotary_interleaved), attacked as an optimiser rewarded for passing would.

* **Outputs kept by the draw's scalars.**  The cached-output check of the smoke stage writes a
  fresh draw into the same input tensors, and takes the non-tensor arguments drawn with it
  (``stages.with_scalars_of``); each floating tensor was then rewritten alone with the scalars
  kept, but only where there were two or more.  xielu, softcap and relative_position_bias have
  one floating tensor and scalars that change with every draw, so the scalars named the draw: a
  kernel that kept its outputs by the tensors' addresses and layouts plus the scalars (never
  reading a value) met a new key at every rewrite and passed all six stages (each of the three,
  every run); a model calls a layer with the same scalars, often on a buffer at the same address
  (the caching allocator), and would get an earlier call's output.  A lone tensor with scalars is
  now rewritten alone too, the scalars kept.  The first test's memo leaves the address out of its
  key; before, that memo was caught as a wrong result at numerics (the cases share a draw's
  scalars), never as a cache.
* **Outputs kept by the inputs' addresses.**  With the address in the key, the memo was caught
  only where the allocator happened to place the worker's copy of the rewritten set at the old
  address (the worker copied every call's inputs into fresh memory): on the CPU softcap was
  caught on most runs, xielu on some, relative_position_bias on none (it passed all six stages,
  or failed at edges where an address came back by chance).  The rewrites now reach the kernel
  at the previous call's addresses, in fresh tensors (worker_main ``_take_inputs_memory``;
  PyTorch 2.12 or later).

Each test failed before its fix."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from autokernel.harness.evaluate import evaluate
from autokernel.problems.registry import KERNELS_DIR

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs TRITON_INTERPRET=1 on CPU")

# appended to a shipped starter: its kernel_fn behind a memo keyed on the tensors' layouts and the
# other arguments as they are (a copy of the kept output through a Triton kernel of its own: a
# fresh output every call, no computing torch op).  The attack that passed keyed on the tensors'
# addresses too: ``(a.data_ptr(), tuple(a.shape), ...)``.
MEMO = '''

@triton.jit
def _memo_copy(src_ptr, dst_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.cast(tl.program_id(0), tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


_memo = {}
_computed = kernel_fn


def kernel_fn(*args):
    key = tuple((tuple(a.shape), tuple(a.stride()), a.dtype) if isinstance(a, torch.Tensor) else a
                for a in args)
    kept = _memo.get(key)
    if kept is None:
        kept = _memo[key] = _computed(*args).contiguous()
    out = torch.empty_like(kept)
    if out.numel():
        _memo_copy[(triton.cdiv(out.numel(), 1024),)](kept, out, out.numel(), BLOCK=1024)
    return out
'''


# the same memo keyed on the tensors' addresses too, as a kernel would key it in a model: the
# caching allocator hands a layer's input buffers out again, at the same addresses, with the
# same scalars
ADDRESS_MEMO = MEMO.replace("(tuple(a.shape),", "(a.data_ptr(), tuple(a.shape),")


@pytest.mark.parametrize("kind", ["xielu", "softcap", "relative_position_bias"])
def test_outputs_kept_by_the_draws_scalars_are_a_cached_output(tmp_path, kind):
    """Before: each was incorrect at numerics (xielu and softcap at case=tiny, relative_position_bias at
    tiny-values), their address-keyed form passed all six stages."""
    path = tmp_path / f"{kind}_memo.py"
    path.write_text((KERNELS_DIR / f"{kind}.py").read_text() + MEMO)
    ev = evaluate(kind, path, device="cpu", dtypes=["fp32"], timing=False, baselines=False)
    assert ev.verdict == "rejected" and ev.failed_stage == "smoke", ev.message
    assert "cached-output" in {f.rule for f in ev.integrity}, ev.message


@pytest.mark.skipif(not hasattr(torch.UntypedStorage, "_swap_data_ptr_"),
                    reason="the worker moves memory between storages with PyTorch 2.12 or later")
@pytest.mark.parametrize("kind", ["xielu", "softcap", "relative_position_bias"])
def test_outputs_kept_by_the_inputs_addresses_are_a_cached_output(tmp_path, kind):
    """Before: the worker copied every call's inputs into fresh memory, so the rewrite of the same
    tensors met the memo's key only where the allocator happened to hand the old memory out again:
    in four runs relative_position_bias was never caught as a cache (it passed all six stages in
    three, and was incorrect at edges in one, where an address came back by chance), xielu passed
    in two, softcap was caught in all four.  The rewrites now take the previous call's memory, in
    fresh tensors."""
    assert ADDRESS_MEMO != MEMO
    path = tmp_path / f"{kind}_address_memo.py"
    path.write_text((KERNELS_DIR / f"{kind}.py").read_text() + ADDRESS_MEMO)
    ev = evaluate(kind, path, device="cpu", dtypes=["fp32"], timing=False, baselines=False)
    assert ev.verdict == "rejected" and ev.failed_stage == "smoke", ev.message
    assert "cached-output" in {f.rule for f in ev.integrity}, ev.message
