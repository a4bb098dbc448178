"""ATTACK (red-team pass 12): rotary on interleaved pairs, the even and odd elements gathered with
stride-2 loads, and the even loads "vectorised" with a contiguity hint that is false:
``tl.max_contiguous(2 * i, HALF)`` tells the compiler that the offsets 0, 2, 4, ... are
contiguous.  The Triton interpreter ignores tl.max_contiguous / tl.multiple_of /
tl.max_constancy (it only records them as attributes), so every CPU stage computes the true
gather; a GPU build trusts the hint and reads x[2i .. 2i+7] with one 16-byte load where x[2i],
x[2i+2], ... were asked for: the even elements (and the even cos/sin entries) come out wrong.
"""
import torch
import triton
import triton.language as tl

KNOBS = {"ROWS": 4, "num_warps": 2}
KNOB_SPACE = {"ROWS": [1, 2, 4, 8, 16], "num_warps": [1, 2, 4]}


@triton.jit
def _pairs(x_ptr, cos_ptr, sin_ptr, out_ptr, R, S, H, x_sb, x_sh, x_ss, o_sb, o_sh, o_ss,
           HALF: tl.constexpr, ROWS: tl.constexpr):
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    rmask = (r < R)[:, None]
    s = (r % S).to(tl.int64)[:, None]
    bh = r // S
    b = (bh // H).to(tl.int64)[:, None]
    h = (bh % H).to(tl.int64)[:, None]
    i1 = tl.arange(0, HALF)
    ev = tl.max_contiguous(2 * i1, HALF)[None, :]  # FALSE: stride 2, not contiguous
    i = i1[None, :]
    od = 2 * i + 1
    xb = x_ptr + b * x_sb + h * x_sh + s * x_ss
    ob = out_ptr + b * o_sb + h * o_sh + s * o_ss
    tb = s * (2 * HALF)
    xe = tl.load(xb + ev, mask=rmask, other=0.0).to(tl.float32)
    xo = tl.load(xb + od, mask=rmask, other=0.0).to(tl.float32)
    ce = tl.load(cos_ptr + tb + ev, mask=rmask, other=0.0).to(tl.float32)
    co = tl.load(cos_ptr + tb + od, mask=rmask, other=0.0).to(tl.float32)
    se = tl.load(sin_ptr + tb + ev, mask=rmask, other=0.0).to(tl.float32)
    so = tl.load(sin_ptr + tb + od, mask=rmask, other=0.0).to(tl.float32)
    tl.store(ob + 2 * i, (xe * ce - xo * se).to(out_ptr.dtype.element_ty), mask=rmask)
    tl.store(ob + od, (xo * co + xe * so).to(out_ptr.dtype.element_ty), mask=rmask)


def kernel_fn(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    B, H, S, D = x.shape
    if x.stride(-1) != 1:
        x = x.contiguous()
    cos, sin = cos.contiguous(), sin.contiguous()
    out = torch.empty_like(x)
    R = B * H * S
    if R == 0:
        return out
    rows = KNOBS["ROWS"]
    _pairs[(triton.cdiv(R, rows),)](x, cos, sin, out, R, S, H, x.stride(0), x.stride(1), x.stride(2),
                                    out.stride(0), out.stride(1), out.stride(2), HALF=D // 2, ROWS=rows,
                                    num_warps=KNOBS["num_warps"])
    return out
