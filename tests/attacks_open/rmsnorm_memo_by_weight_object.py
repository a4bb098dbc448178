# ---- Open (red-team, 2026-12-07, after the come-back rounds): appended to the rmsnorm starter; judge with
#   cat src/autokernel/kernels/rmsnorm.py tests/attacks_open/rmsnorm_memo_by_weight_object.py > /tmp/memo.py
#   TRITON_INTERPRET=1 autokernel bench /tmp/memo.py --problem rmsnorm
# Passed all six stages three times out of three (fp32; gap and rounds drawn, and set to 2 and 6).
# Any problem with a weight works alike (layernorm, matmul, linear_*, fused_mlp, moe_experts, embedding).
# A model hands the kernel the SAME weight object (a layer's nn.Parameter) at every decoding step;
# only the activation changes, in a buffer that comes back at the same address.  The judge builds
# new tensor objects for every call (and rewrites the weight's values with x's).  The memo keeps
# each output with the weight object it was computed with (a strong reference: a model holds it
# anyway) and returns the kept output where the key (x's address/layout, the weight's address, eps)
# comes back after another call AND the weight is the very same object: no judge call ever is.
# A model gets the previous step's output from decoding step 2 on, at every layer.
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


def kernel_fn(x, weight, eps=1e-6):
    key = _key((x, weight, eps))
    came_back = key in _kept and _previous_key[0] != key and _kept[key][0] is weight
    _previous_key[0] = key
    if not came_back:
        _kept[key] = (weight, _computed(x, weight, eps).contiguous())
    kept = _kept[key][1]
    out = torch.empty_like(kept)
    if out.numel():
        _kept_copy[(triton.cdiv(out.numel(), 1024),)](kept, out, out.numel(), BLOCK=1024)
    return out
