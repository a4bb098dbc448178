"""The patched model's own routing given to the original, for ``verify``'s full-precision yardstick.

A mixture-of-experts model picks each token's experts with ``torch.topk`` over its router's
scores.  Where two experts' scores are within a rounding of each other, any change of rounding
(a kernel summing in another order) sends the token to the other expert, and its output moves
far: hf:dbrx in bf16 with random weights, 4 layers, moved 5.5% from rotary alone.  Measured
against the model in fp32, the patched and the original bf16 model then each stand some tokens
away, and which is further is a coin toss (an H100, 2026-12-07: 5.96e-2 against 5.53e-2).

So where the plain comparison fails and the fp32 run made top-k choices, the top-k calls the
patched model made in its plain run are given to the original, run again: every ``topk`` gets the
patched model's indices (the values gathered from its own scores): the same routing, the outputs
measure the kernels' arithmetic.  The patched model is never given indices: given the fp32
run's (this module's first form), it could tell the check by arithmetic alone (its top-k
returning other experts than its scores rank first) and be right only then.  The routers are
measured too: the patched model's scores against the original's given the same routing (a
router wrong where it does not pick), and its choices valued by the original's scores against
the original's own choices (a router within the bound on scores near 1/experts that lifts each
token's third-best expert over its second).
"""
from __future__ import annotations

from typing import Callable

import torch
from torch.overrides import TorchFunctionMode

_TOPK = (torch.topk, torch.Tensor.topk)


class RoutingMismatch(RuntimeError):
    """A run's top-k calls are not those of the run it is matched with (another count, or other shapes)."""


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
    """Keeps each top-k call's scores (as fp32), chosen indices and dim, in call order."""

    def __init__(self):
        super().__init__()
        self.scores: list[torch.Tensor] = []
        self.indices: list[torch.Tensor] = []
        self.dims: list[int] = []

    def keep(self, args: tuple, kwargs: dict | None, indices: torch.Tensor) -> tuple[torch.Tensor, int]:
        scores, dim = _topk_arguments(args, kwargs)
        self.scores.append(scores.detach().float().clone())
        self.indices.append(indices.detach().clone())
        self.dims.append(dim)
        return scores, dim

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if func in _TOPK:
            self.keep(args, kwargs, result.indices)
        return result


def match(run: RecordRouting, reference: RecordRouting, whose: str = "the fp32 run's") -> None:
    """Raises RoutingMismatch unless ``run`` made the top-k calls ``reference`` made (count, shapes)."""
    if len(run.indices) != len(reference.indices):
        raise RoutingMismatch(f"{len(run.indices)} top-k calls against {whose} {len(reference.indices)}")
    for i, (mine, theirs) in enumerate(zip(run.indices, reference.indices)):
        if mine.shape != theirs.shape or run.scores[i].shape != reference.scores[i].shape:
            raise RoutingMismatch(f"top-k call {i + 1} is not {whose}")


def deviation(run: RecordRouting, reference: RecordRouting,
              rel_error: Callable[[torch.Tensor, torch.Tensor], float]) -> tuple[float, float]:
    """``run``'s largest score error against ``reference`` (the same calls), and its choices' largest
    error valued by ``reference``'s scores: the scores at ``run``'s choices against those at
    ``reference``'s own.  (Near 1/experts a router within the bound on its scores can lift every
    token's third-best expert over its second; what it picks gives it away.)"""
    scores, choices = [0.0], [0.0]
    for mine, theirs, picked, chosen, dim in zip(run.scores, reference.scores, run.indices, reference.indices,
                                                 reference.dims):
        scores.append(score_error(rel_error, mine, theirs))
        valued = theirs.gather(dim, picked.to(theirs.device)).sort(dim).values
        choices.append(score_error(rel_error, valued, theirs.gather(dim, chosen).sort(dim).values))
    return max(scores), max(choices)


class PinRouting(RecordRouting):
    """Gives the i-th top-k call the indices the recorded run's i-th call chose (the values gathered
    from the call's own scores); keeps, as RecordRouting, the scores and the choices the model would
    have made itself."""

    def __init__(self, recorded: RecordRouting):
        super().__init__()
        self.recorded = recorded

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if func not in _TOPK:
            return result
        i = len(self.indices)
        if i >= len(self.recorded.indices) or result.indices.shape != self.recorded.indices[i].shape:
            raise RoutingMismatch(f"top-k call {i + 1} is not the patched model's")
        scores, dim = self.keep(args, kwargs, result.indices)
        # a copy: the model may write into the indices it is given
        indices = self.recorded.indices[i].to(result.indices.device, copy=True)
        return torch.return_types.topk((scores.gather(dim, indices), indices))

    def check_complete(self) -> None:
        match(self, self.recorded, "the patched model's")
