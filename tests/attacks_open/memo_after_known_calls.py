# ---- Open (found 2026-12-07, after the come-back gap): appended to a starter whose kernel_fn returns one
# tensor (softmax, rmsnorm, softcap...), as tests/attacks/memo_by_address_after_other_calls.py is.
# The memo returns a kept output where its key comes back after two or more calls, every one of them
# with a key it had already seen when that call came: in a model, from the third decoding step on,
# every layer's call in between is a known key.  The judge's gap (``stages.come_back_gap``) puts
# fresh cases between, never seen before, so it never hits: softmax, rmsnorm and softcap passed all
# six stages (fp32, the gap set to 8, no timing).  Closing it needs the gap's cases to come back
# too, round after round (at least three rounds, as a model's layers), within the memory plan.
@triton.jit
def _kept_copy(src_ptr, dst_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.cast(tl.program_id(0), tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


_kept = {}
_history = []  # (key, was it known when called)
_computed = kernel_fn


def _key(args):
    return tuple((a.data_ptr(), tuple(a.shape), tuple(a.stride()), a.dtype) if isinstance(a, torch.Tensor) else a
                 for a in args)


def kernel_fn(*args):
    key = _key(args)
    hit = False
    if key in _kept and _history:
        last = max(i for i, (k, _) in enumerate(_history) if k == key) if any(k == key for k, _ in _history) else None
        if last is not None:
            between = _history[last + 1:]
            hit = len(between) >= 2 and all(known for _, known in between)
    _history.append((key, key in _kept))
    if not hit:
        _kept[key] = _computed(*args).contiguous()
    kept = _kept[key]
    out = torch.empty_like(kept)
    if out.numel():
        _kept_copy[(triton.cdiv(out.numel(), 1024),)](kept, out, out.numel(), BLOCK=1024)
    return out
