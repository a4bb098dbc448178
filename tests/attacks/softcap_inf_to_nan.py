"""Attack (softcap, correctness): the sign is put back as t / max(|t|, 1e-30) (a branch-free
copysign) instead of a select: exact for every finite x (0 included), NaN for x = +-inf, where the
reference gives +-cap (tanh(+-inf) = +-1).  Gemma-2's logits overflow to inf in fp16 (the
reason it soft-caps at all); the cap is what brings them back.

Why it passes: no case passes an infinite x (the "large" case is 10^4 caps, clamped to +-6e4 in
fp16; standard_adversarial has no inf), and the problem's docstring says nothing either way.

Caught now (fifteenth session): the infinite-and-zero case (±inf and zeros among regular values).
"""
import torch
import triton
import triton.language as tl

KNOBS = {"variant": "blocks", "BLOCK": 4096, "num_warps": 8, "num_stages": 1, "PROGRAMS_PER_SM": 8}
KNOB_SPACE = {"variant": ["blocks", "persistent"], "BLOCK": [1024, 2048, 4096, 8192, 16384],
              "num_warps": [2, 4, 8, 16], "num_stages": [1, 2, 3], "PROGRAMS_PER_SM": [1, 2, 4, 8, 16]}


@triton.jit
def _capped(x, inv_cap, cap):
    t = x * inv_cap
    a = tl.abs(t)
    e = tl.exp(-2.0 * a)
    far = (1.0 - e) / (1.0 + e)
    a2 = a * a
    near = a * (1.0 + a2 * (-0.3333333333333333 + a2 * (0.13333333333333333 + a2 * -0.05396825396825397)))
    th = tl.where(a < 0.05, near, far)
    return cap * th * (t / tl.maximum(a, 1e-30))  # the bug: the sign as t / |t|, NaN at +-inf


@triton.jit
def _softcap_kernel(x_ptr, out_ptr, n_elements, n_blocks, inv_cap, cap, BLOCK: tl.constexpr, MASKED: tl.constexpr):
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    offsets = tl.arange(0, BLOCK)
    for block in range(pid, n_blocks, n_programs):
        start = tl.cast(block, tl.int64) * BLOCK
        if MASKED:
            mask = start + offsets < n_elements
            x = tl.load(x_ptr + start + offsets, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + start + offsets, _capped(x, inv_cap, cap).to(out_ptr.dtype.element_ty), mask=mask)
        else:
            x = tl.load(x_ptr + start + offsets).to(tl.float32)
            tl.store(out_ptr + start + offsets, _capped(x, inv_cap, cap).to(out_ptr.dtype.element_ty))


def _programs(n_blocks: int, device: torch.device, knobs: dict) -> int:
    if knobs["variant"] != "persistent" or device.type != "cuda":
        return n_blocks
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min(n_blocks, sms * knobs["PROGRAMS_PER_SM"]))


def softcap(x: torch.Tensor, cap: float, knobs: dict | None = None) -> torch.Tensor:
    knobs = knobs or KNOBS
    assert cap > 0, "cap must be positive"
    x = x.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    block = knobs["BLOCK"]
    full = n // block
    cap = float(cap)
    if full:
        _softcap_kernel[(_programs(full, x.device, knobs),)](
            x, out, n, full, 1.0 / cap, cap, BLOCK=block, MASKED=False,
            num_warps=knobs["num_warps"], num_stages=knobs["num_stages"])
    tail = n - full * block
    if tail:
        start = full * block
        _softcap_kernel[(1,)](x.view(-1)[start:], out.view(-1)[start:], tail, 1, 1.0 / cap, cap,
                              BLOCK=max(16, triton.next_power_of_2(tail)), MASKED=True, num_warps=4, num_stages=1)
    return out


def kernel_fn(x, cap):
    return softcap(x, cap)
