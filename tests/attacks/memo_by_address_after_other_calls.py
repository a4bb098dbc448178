# Red-team pass 30: appended to a starter whose kernel_fn returns one tensor (xielu, softcap,
# relative_position_bias...) at test time (tests/test_harness_attacks_pass30.py); judge the whole with
#   cat src/autokernel/kernels/xielu.py tests/attacks/memo_by_address_after_other_calls.py > /tmp/memo.py
#   TRITON_INTERPRET=1 autokernel bench /tmp/memo.py --problem xielu
# ---- the memo: every output kept by the tensors' addresses and layouts plus the other arguments as
# they are (the scalars); a key that comes back after calls with other keys in between gets a copy
# of the kept output (a Triton kernel of its own: a fresh output, no torch op).  A model calls the
# kernel once per layer: layer 1's input buffer comes back at the next decoding step, at the same
# address (the caching allocator) with the same scalars, after the other layers' calls, and gets
# the previous step's output.  The judge's rewrites of the same memory came right after the call
# they rewrite, never after another call.
@triton.jit
def _kept_copy(src_ptr, dst_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.cast(tl.program_id(0), tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


_kept = {}
_previous_key = [None]
_computed = kernel_fn


def _key(args):
    return tuple((a.data_ptr(), tuple(a.shape), tuple(a.stride()), a.dtype) if isinstance(a, torch.Tensor) else a
                 for a in args)


def kernel_fn(*args):
    key = _key(args)
    came_back = key in _kept and _previous_key[0] != key
    _previous_key[0] = key
    if not came_back:
        _kept[key] = _computed(*args).contiguous()
    kept = _kept[key]
    out = torch.empty_like(kept)
    if out.numel():
        _kept_copy[(triton.cdiv(out.numel(), 1024),)](kept, out, out.numel(), BLOCK=1024)
    return out
