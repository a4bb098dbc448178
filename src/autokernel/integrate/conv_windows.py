"""A Conv1d's input as the rows of its windows, and a GEMM's rows back as its output: what the
appliers that run a Conv1d as a GEMM (``matmul``; ``linear_gelu`` with the GELU after it) share.
The weight [out, C, kernel] seen as [out, C*kernel] matches a window's row order (channel, tap)."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def window_rows(x: torch.Tensor, kernel: int, stride: int, padding: int) -> tuple[torch.Tensor, int, int] | None:
    """``x`` [B, C, L] padded with zeros on both sides and unfolded: (rows [B*L_out, C*kernel], B,
    L_out), one copy; None where no window fits."""
    b, c, length = x.shape
    if length + 2 * padding < kernel:
        return None
    windows = F.pad(x, (padding, padding)).unfold(2, kernel, stride)  # [B, C, L_out, kernel], a view
    l_out = windows.shape[2]
    return windows.permute(0, 2, 1, 3).reshape(b * l_out, c * kernel), b, l_out


def as_conv_output(rows: torch.Tensor, b: int, l_out: int) -> torch.Tensor:
    """A GEMM's rows [B*L_out, out] seen as the convolution's [B, out, L_out] (channels last in memory)."""
    return rows.reshape(b, l_out, rows.shape[-1]).permute(0, 2, 1)
