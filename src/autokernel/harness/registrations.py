"""Operator registrations made in the worker after the judge set up (``install``).

``torch.library`` (and everything built on it: ``custom_op``, ``register_kernel``,
``register_autograd``...) replaces what PyTorch's dispatcher runs for an operator, for the whole
process: a kernel file that registers its own ``aten::copy_`` for the CPU runs its code inside
the judge's own tensor work (the copy of its outputs into the parent's buffers, the digests, the
draws of the timed inputs), unwatched and untimed.  No Python name changes, so the fingerprint
cannot see it; every registration goes through the methods of torch's ``_DispatchModule``
binding, which are wrapped here to count, before any kernel loads (the fingerprint then covers
the wrappers)."""
from __future__ import annotations

from typing import Any

# the binding's methods that register a kernel or a fallback for a dispatch key
_REGISTERING = ("impl", "impl_t_t", "impl_with_aoti_compile", "fallback", "fallback_fallthrough",
                "register_ad_inplace_or_view_fallback")


class RegistrationCounter:
    """How many registrations were made since ``install``, and which (the first thousand)."""

    def __init__(self) -> None:
        self.count = 0
        self.names: list[str] = []

    def since(self, before: int) -> str | None:
        """None when nothing was registered since the count was ``before``; else which ones."""
        if self.count == before:
            return None
        return ", ".join(self.names[before:before + 3]) or "an operator"


_COUNTER: RegistrationCounter | None = None


def install() -> RegistrationCounter:
    global _COUNTER
    if _COUNTER is not None:
        return _COUNTER
    import torch

    counter = RegistrationCounter()
    binding = torch._C._DispatchModule

    def wrap(method: str, original: Any):
        def registering(self, *args, **kwargs):
            counter.count += 1
            if len(counter.names) < 1000:
                what = [str(a) for a in args[:2] if isinstance(a, str)]
                counter.names.append(f"{method}({', '.join(what)})")
            return original(self, *args, **kwargs)

        return registering

    for method in _REGISTERING:
        original = vars(binding).get(method)
        if original is not None:
            setattr(binding, method, wrap(method, original))
    _COUNTER = counter
    return counter
