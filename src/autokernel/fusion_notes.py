"""What a fusion flag (``--fused-rotary``, ``--fused-mlp``) found nothing to fuse in: said once
after profiling, so that a plan without the fused kind is no silent surprise (hf:phi's and
hf:stablelm's partial rotary concatenates the rotated part of q and k with the rest before
attention, which ``attention_rotary`` does not take)."""
from __future__ import annotations

from .plan import Plan


def unfused_flags(plan: Plan, *, fuse_rotary: bool, fuse_mlp: bool) -> list[str]:
    kinds = {p.kind for p in plan.problems}
    notes = []
    if fuse_rotary and "attention_rotary" not in kinds and not any(k.startswith("rotary") for k in kinds):
        notes.append("--fused-rotary: no rotary embedding was planned here (the model has none, or none "
                     "autokernel recognises): the flag changes nothing")
    elif fuse_rotary and "attention_rotary" not in kinds:
        notes.append("--fused-rotary: no rotary on q and k here is directly followed by unmasked attention on "
                     "them (a partial rotary, a mask, or another rotary form): rotary and attention are planned apart")
    if fuse_mlp and "fused_mlp" not in kinds:
        notes.append("--fused-mlp: no SwiGLU MLP here (gate and up projections, silu(gate) * up, down "
                     "projection, in one module): the MLPs are planned as without the flag")
    return notes
