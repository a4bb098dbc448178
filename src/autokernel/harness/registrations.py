"""Operator registrations made in the worker after the judge set up (``install``).

``torch.library`` (and everything built on it: ``custom_op``, ``register_kernel``,
``register_autograd``...) replaces what PyTorch's dispatcher runs for an operator, for the whole
process: a kernel file that registers its own ``aten::copy_`` for the CPU runs its code inside
the judge's own tensor work (the copy of its outputs into the parent's buffers, the digests, the
draws of the timed inputs), unwatched and untimed.  No Python name changes, so the fingerprint
cannot see it; every registration goes through the methods of torch's ``_DispatchModule``
binding, which are wrapped here to count, before any kernel loads (the fingerprint then covers
the wrappers).

What counts is a kernel or fallback for an operator that existed when the judge set up, at a
dispatch key real tensors go through: torch itself registers lazily, on first use of
``torch.compile`` say, but for operators it defines then (``prims::inductor_seed``...) or for
the ``Meta`` key of fake tensors, which the judge's own work never reaches."""
from __future__ import annotations

from typing import Any

# the binding's methods that register a kernel, and those that register a fallback
_IMPLS = ("impl", "impl_t_t", "impl_with_aoti_compile")
_FALLBACKS = ("fallback", "fallback_fallthrough", "register_ad_inplace_or_view_fallback")
# keys the judge's work on real tensors, with no mode active, never dispatches to
_UNREACHED_KEYS = ("Meta", "Python", "Functionalize", "FuncTorch", "PreDispatch", "Fake")


class RegistrationCounter:
    """How many registrations that count were made since ``install``, and which (the first
    thousand)."""

    def __init__(self) -> None:
        self.count = 0
        self.names: list[str] = []

    def since(self, before: int) -> str | None:
        """None when nothing was registered since the count was ``before``; else which ones."""
        if self.count == before:
            return None
        return ", ".join(self.names[before:before + 3]) or "an operator"

    def note(self, what: str) -> None:
        self.count += 1
        if len(self.names) < 1000:
            self.names.append(what)


_COUNTER: RegistrationCounter | None = None


def _reached(key: Any) -> bool:
    key = str(key or "CompositeImplicitAutograd")
    return not any(part in key for part in _UNREACHED_KEYS)


def install() -> RegistrationCounter:
    global _COUNTER
    if _COUNTER is not None:
        return _COUNTER
    import torch

    counter = RegistrationCounter()
    binding = torch._C._DispatchModule
    existing = {name.split(".")[0] for name in torch._C._dispatch_get_all_op_names()}
    short = {name.split("::")[-1] for name in existing}  # for libraries made before install (no namespace known)
    namespaces: dict[int, str] = {}  # id of a library made after install -> its namespace
    make_library = torch._C._dispatch_library

    def dispatch_library(kind, ns, *args, **kwargs):
        module = make_library(kind, ns, *args, **kwargs)
        namespaces[id(module)] = str(ns)
        return module

    def wrap_impl(method: str, original: Any):
        def registering(self, name, *args, **kwargs):
            key = args[0] if args else kwargs.get("dispatch_key", "")
            text = str(name)
            ns = namespaces.get(id(self))
            qualified = text if "::" in text else (f"{ns}::{text}" if ns is not None else None)
            known = qualified.split(".")[0] in existing if qualified else text.split(".")[0] in short
            if _reached(key) and known:  # an operator that existed at install
                counter.note(f"{method}({qualified or text}, {key})")
            return original(self, name, *args, **kwargs)

        return registering

    def wrap_fallback(method: str, original: Any):
        def registering(self, *args, **kwargs):
            key = args[0] if args else kwargs.get("dispatch_key", "")
            if _reached(key):
                counter.note(f"{method}({key})")
            return original(self, *args, **kwargs)

        return registering

    for method in _IMPLS + _FALLBACKS:
        original = vars(binding).get(method)
        if original is not None:
            wrap = wrap_impl if method in _IMPLS else wrap_fallback
            setattr(binding, method, wrap(method, original))
    torch._C._dispatch_library = dispatch_library
    _COUNTER = counter
    return counter
