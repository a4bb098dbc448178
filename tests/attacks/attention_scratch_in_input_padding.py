# Red-team pass 29: appended to the attention starter (src/autokernel/kernels/attention.py) at test
# time (tests/test_harness_attacks_pass29.py ``with_starter``).
# ---- the input's padding as scratch space: where q's rows are wider than its heads (a slice of a
# packed q|k|v projection, as the model integration passes it), the row's spare columns are
# "free" memory, and the kernel keeps a per-token note there (here: zeros over the whole spare
# stretch; a kernel would keep its row max or log-sum-exp).  In a model those columns are the
# same token's k and v (GPT-2's c_attn), which the KV cache goes on reading.
@triton.jit
def _scribble(q_ptr, row_stride, start, width, rows, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    for c in range(0, width, BLOCK):
        mask = (c + cols) < width
        zeros = tl.zeros((BLOCK,), dtype=q_ptr.dtype.element_ty)
        tl.store(q_ptr + row * row_stride + start + c + cols, zeros, mask=mask)


_attention = kernel_fn


def kernel_fn(q, k, v, causal=True, scale=None):
    out = _attention(q, k, v, causal=causal, scale=scale)
    b, h, s, d = q.shape
    row = q.stride(2)  # a token's stride
    if q.stride(3) == 1 and q.stride(1) == d and q.stride(0) == s * row and row > h * d and b * s > 1:
        # every token but the last: the storage ends with the last token's heads
        _scribble[(b * s - 1,)](q, row, h * d, row - h * d, b * s - 1, BLOCK=64)
    return out
