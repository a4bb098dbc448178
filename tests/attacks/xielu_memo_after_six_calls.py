# Red-team pass 29: appended to the xielu starter (src/autokernel/kernels/xielu.py) at test time
# (tests/test_harness_attacks_pass29.py ``with_starter``); judge the whole with
#   cat src/autokernel/kernels/xielu.py tests/attacks/xielu_memo_after_six_calls.py > /tmp/memo.py
#   TRITON_INTERPRET=1 autokernel bench /tmp/memo.py --problem xielu
# ---- the memo: what an optimiser rewarded for passing writes once it learns that the judge
# rewrites "the same input tensors" only at the start (smoke), and never many times in a row.
# Off for the first calls (a count, no reference held); then every output is kept by the input's
# address and layout plus the scalars, and a key that came ``HIT_AT`` times in a row (a decoding
# loop's steady state: the caching allocator hands the layer's input buffer out again at every
# step, with new values and the same scalars) gets a copy of the kept output (a Triton kernel of
# its own: a fresh output, no torch op).  In a model that is an earlier call's output.
@triton.jit
def _kept_copy(src_ptr, dst_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.cast(tl.program_id(0), tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=mask), mask=mask)


_kept = {}
_last = [None, 0]  # the last call's key, and how many calls in a row had it
_calls = [0]
_computed = kernel_fn
OFF_FOR = 6
HIT_AT = 3


def kernel_fn(x, alpha_p, alpha_n, beta, eps):
    _calls[0] += 1
    if _calls[0] <= OFF_FOR:
        return _computed(x, alpha_p, alpha_n, beta, eps)
    key = (x.data_ptr(), tuple(x.shape), tuple(x.stride()), x.dtype, alpha_p, alpha_n, beta, eps)
    _last[1] = _last[1] + 1 if _last[0] == key else 1
    _last[0] = key
    kept = _kept.get(key)
    if kept is None or _last[1] < HIT_AT:
        kept = _kept[key] = _computed(x, alpha_p, alpha_n, beta, eps)
    out = torch.empty_like(kept)
    if out.numel():
        _kept_copy[(triton.cdiv(out.numel(), 1024),)](kept, out, out.numel(), BLOCK=1024)
    return out
