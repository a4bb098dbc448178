"""Routing pinned to the fp32 model's choices, for ``verify``'s full-precision yardstick.

A mixture-of-experts model picks each token's experts with ``torch.topk`` over its router's
scores.  Where two experts' scores are within a rounding of each other, any change of rounding
(a kernel summing in another order) sends the token to the other expert, and its output moves
far: hf:dbrx in bf16 with random weights, 4 layers, moved 5.5% from rotary alone.  Measured
against the model in fp32, the patched and the original bf16 model then each stand some tokens
away, and which is further is a coin toss (an H100, 2026-12-07: 5.96e-2 against 5.53e-2).

So where the plain comparison fails and the fp32 run made top-k choices, both bf16 models run
again with every ``topk`` given the fp32 run's indices (the values gathered from their own
scores, so a router's arithmetic still shows).  The routing noise gone, the pinned outputs
measure the kernels' arithmetic.  The pinned runs also measure each router's scores against the
fp32 run's: a router kernel right only at the scores it picks, and wrong elsewhere, would pick
other experts unpinned and look right pinned; its scores give it away.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch.overrides import TorchFunctionMode

_TOPK = (torch.topk, torch.Tensor.topk)


class RoutingMismatch(RuntimeError):
    """A pinned run's top-k calls are not the fp32 run's (another count, or other shapes)."""


def _topk_arguments(args: tuple, kwargs: dict) -> tuple[torch.Tensor, int]:
    values = dict(zip(("input", "k", "dim", "largest", "sorted"), args))
    values.update(kwargs or {})
    return values["input"], values.get("dim", -1)


def score_error(rel_error: Callable[[torch.Tensor, torch.Tensor], float], scores: torch.Tensor,
                exact: torch.Tensor) -> float:
    """``rel_error`` over the fp32 run's finite scores; where that run's score is -inf, +inf or NaN (an
    expert masked out before the top-k) the scores must hold the same, else inf.  (Measured whole, one
    -inf made every model's score error inf, and inf is within an original's inf.)"""
    finite = torch.isfinite(exact)
    if scores.shape != exact.shape or finite.all():
        return rel_error(scores, exact)
    same = (scores[~finite] == exact[~finite]) | (torch.isnan(scores[~finite]) & torch.isnan(exact[~finite]))
    if not bool(same.all()):
        return float("inf")
    return rel_error(scores[finite], exact[finite]) if bool(finite.any()) else 0.0


class RecordRouting(TorchFunctionMode):
    """Keeps each top-k call's scores (as fp32) and chosen indices, in call order."""

    def __init__(self):
        super().__init__()
        self.scores: list[torch.Tensor] = []
        self.indices: list[torch.Tensor] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if func in _TOPK:
            scores, _ = _topk_arguments(args, kwargs)
            self.scores.append(scores.detach().float().clone())
            self.indices.append(result.indices.detach().clone())
        return result


class PinRouting(TorchFunctionMode):
    """Gives the i-th top-k call the indices the recorded run's i-th call chose; keeps the
    relative error of its scores against the recorded run's, and of the recorded run's scores at the
    model's own choices against those at the recorded run's choices."""

    def __init__(self, recorded: RecordRouting, rel_error: Callable[[torch.Tensor, torch.Tensor], float]):
        super().__init__()
        self.recorded = recorded
        self.rel_error = rel_error
        self.score_errors: list[float] = []
        self.choice_errors: list[float] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if func not in _TOPK:
            return result
        i = len(self.score_errors)
        if i >= len(self.recorded.indices) or result.indices.shape != self.recorded.indices[i].shape:
            raise RoutingMismatch(f"top-k call {i + 1} is not the fp32 run's")
        scores, dim = _topk_arguments(args, kwargs)
        exact = self.recorded.scores[i]
        self.score_errors.append(score_error(self.rel_error, scores.detach().float(), exact))
        # the model's own choices, valued by the fp32 run: a router that lifts the third-best expert
        # just over the second for every token stays within the bound on its scores where they sit
        # near 1/experts, yet routes every token elsewhere; what it picks gives it away
        own = result.indices.detach().to(exact.device)
        picked = exact.gather(dim, self.recorded.indices[i]).sort(dim).values
        self.choice_errors.append(score_error(self.rel_error, exact.gather(dim, own).sort(dim).values, picked))
        # a copy: the model may write into the indices it is given, and the next model is pinned to these
        indices = self.recorded.indices[i].to(result.indices.device, copy=True)
        return torch.return_types.topk((scores.gather(dim, indices), indices))

    def check_complete(self) -> None:
        if len(self.score_errors) != len(self.recorded.indices):
            raise RoutingMismatch(f"{len(self.score_errors)} top-k calls against the fp32 run's "
                                  f"{len(self.recorded.indices)}")
