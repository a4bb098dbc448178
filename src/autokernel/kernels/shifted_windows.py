"""Swin's shifted windows in one copy: the cyclic shift and window partition (reverse = 0), or
the window reverse and the shift back (reverse = 1).

Both directions are a permutation of rows of C elements: each output row (one token) is one
input row.  A program copies BLOCK_R output rows, BLOCK_C channels at a time: it computes each
row's source row from its index (integer division and modulo by the window grid, in int64),
then loads and stores the channels.  No arithmetic on the values: NaN and infinities move as
they are, and every dtype is copied exactly.

    reverse = 0: out row ((b*nh + i)*nw + j)*window^2 + p*window + q
                 <- x row b*H*W + ((i*window + p + shift) % H)*W + (j*window + q + shift) % W
    reverse = 1: out row b*H*W + r*W + s, with r' = (r - shift) % H, s' = (s - shift) % W,
                 <- x row ((b*nh + r'//window)*nw + s'//window)*window^2 + (r' % window)*window + s' % window
"""
import torch
import triton
import triton.language as tl

KNOBS = {"BLOCK_R": 64, "BLOCK_C": 64, "num_warps": 4, "num_stages": 1}
KNOB_SPACE = {"BLOCK_R": [8, 16, 32, 64, 128], "BLOCK_C": [32, 64, 128, 256], "num_warps": [1, 2, 4, 8],
              "num_stages": [1, 2]}


@triton.jit
def _shifted_windows_kernel(x_ptr, out_ptr, n_rows, C, H, W, window, shift, nh, nw,
                            REVERSE: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    rows = tl.cast(tl.program_id(0), tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R).to(tl.int64)
    row_ok = rows < n_rows
    area = window * window
    if REVERSE:
        hw = H * W
        b = rows // hw
        rem = rows % hw
        r = (rem // W - shift + H) % H
        s = (rem % W - shift + W) % W
        src = ((b * nh + r // window) * nw + s // window) * area + (r % window) * window + s % window
    else:
        per_image = nh * nw * area
        b = rows // per_image
        rem = rows % per_image
        win = rem // area
        pos = rem % area
        r = ((win // nw) * window + pos // window + shift) % H
        s = ((win % nw) * window + pos % window + shift) % W
        src = (b * H + r) * W + s
    for c0 in range(0, C, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        mask = row_ok[:, None] & (cols < C)[None, :]
        v = tl.load(x_ptr + src[:, None] * C + cols[None, :], mask=mask)
        tl.store(out_ptr + rows[:, None] * C + cols[None, :], v, mask=mask)


def kernel_fn(x: torch.Tensor, height: int, width: int, window: int, shift: int, reverse: int) -> torch.Tensor:
    x = x.contiguous()
    C = x.shape[-1]
    nh, nw = height // window, width // window
    if reverse:
        out = torch.empty((x.numel() // (height * width * C), height, width, C), dtype=x.dtype, device=x.device)
    else:
        out = torch.empty((x.shape[0] * nh * nw, window, window, C), dtype=x.dtype, device=x.device)
    n_rows = out.numel() // C if C else 0
    if n_rows == 0:
        return out
    block_r = KNOBS["BLOCK_R"]
    block_c = min(KNOBS["BLOCK_C"], triton.next_power_of_2(C))
    _shifted_windows_kernel[(triton.cdiv(n_rows, block_r),)](
        x, out, n_rows, C, height, width, window, shift, nh, nw, REVERSE=bool(reverse),
        BLOCK_R=block_r, BLOCK_C=block_c, num_warps=KNOBS["num_warps"], num_stages=KNOBS["num_stages"])
    return out
