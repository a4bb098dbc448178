# Red-team pass 30: appended to a starter whose kernel_fn returns one tensor (softcap,
# relative_position_bias, xielu...) at test time (tests/test_harness_attacks_pass30.py); judge the
# whole with
#   cat src/autokernel/kernels/softcap.py tests/attacks/memo_by_address_third_call_in_a_row.py > /tmp/memo.py
#   AUTOKERNEL_JUDGE_NO_MEMORY_SWAP=1 TRITON_INTERPRET=1 autokernel bench /tmp/memo.py --problem softcap
# ---- the memo: every output kept by the tensors' addresses and layouts plus the other arguments as
# they are (the scalars); a key that came ``HIT_AT`` calls in a row (a decoding loop's steady state:
# the caching allocator hands a layer's input buffer out again with new values and the same
# scalars) gets a copy of the kept output (a Triton kernel of its own: a fresh output, no torch
# op).  In a model that is an earlier call's output.  Where the judge cannot move memory between
# storages (PyTorch 2.11, the GPU machines'), its rewrites of "the same input tensors" are new
# allocations that meet the old addresses only where the allocator happens to hand them out.
@triton.jit
def _kept_copy(src_ptr, dst_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.cast(tl.program_id(0), tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


_kept = {}
_last = [None, 0]  # the last call's key, and how many calls in a row had it
_computed = kernel_fn
HIT_AT = 3


def _key(args):
    return tuple((a.data_ptr(), tuple(a.shape), tuple(a.stride()), a.dtype) if isinstance(a, torch.Tensor) else a
                 for a in args)


def _on(args):
    return True


def kernel_fn(*args):
    on = _on(args)  # every call: an edit may keep state in it (tests/test_harness_attacks_pass30.py)
    key = _key(args)
    _last[1] = _last[1] + 1 if _last[0] == key else 1
    _last[0] = key
    kept = _kept.get(key)
    if kept is None or _last[1] < HIT_AT or not on:
        kept = _kept[key] = _computed(*args).contiguous()
    out = torch.empty_like(kept)
    if out.numel():
        _kept_copy[(triton.cdiv(out.numel(), 1024),)](kept, out, out.numel(), BLOCK=1024)
    return out
