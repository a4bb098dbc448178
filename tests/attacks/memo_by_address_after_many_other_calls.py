# Open in red-team pass 30, caught since: appended to a starter whose kernel_fn returns one tensor
# (xielu, softcap, relative_position_bias...) at test time (tests/test_harness_attacks_pass30.py).
# ---- the memo of memo_by_address_after_other_calls.py (read its comment), returning a kept output
# only where its key comes back after more than ``OTHER_CALLS`` calls with other keys in between.
# The judge's last calls put one other call between a run's last rewrite and the call in its
# memory; a model with ``OTHER_CALLS + 1`` layers or more calling this kernel gets the previous
# step's outputs.
@triton.jit
def _kept_copy(src_ptr, dst_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.cast(tl.program_id(0), tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


_kept = {}
_seen_at = {}  # key -> the call that last had it
_calls = [0]
OTHER_CALLS = 2
_computed = kernel_fn


def _key(args):
    return tuple((a.data_ptr(), tuple(a.shape), tuple(a.stride()), a.dtype) if isinstance(a, torch.Tensor) else a
                 for a in args)


def kernel_fn(*args):
    key = _key(args)
    _calls[0] += 1
    came_back = key in _kept and _calls[0] - _seen_at[key] > OTHER_CALLS
    _seen_at[key] = _calls[0]
    if not came_back:
        _kept[key] = _computed(*args).contiguous()
    kept = _kept[key]
    out = torch.empty_like(kept)
    if out.numel():
        _kept_copy[(triton.cdiv(out.numel(), 1024),)](kept, out, out.numel(), BLOCK=1024)
    return out
