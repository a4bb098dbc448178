"""Remember the bits of tensors and tell later whether they changed: an exact clone when memory
allows, else a keyed fingerprint.

The fingerprint is a random linear form over the tensor's storage bytes read as 32-bit words,
modulo 2**64: slice ``c`` of the words contributes ``r_c * sum_i word_i * w_i``, with one
random weight vector ``w`` per ``Fingerprinter`` and slice length and one random odd factor ``r_c`` per slice and
snapshot.  The keys live in the judge's process only; a change passes unseen only if it
cancels in that form, which a kernel that cannot read the keys hits with probability about
2**-32 per snapshot (a change split across slices does not cancel: each slice has its own
factor).  The whole storage is covered, so writes outside a view's elements count too.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
import torch

from . import compare
from .memory import COMPARE_CHUNK_ELEMENTS

MASK = (1 << 64) - 1


def _words(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The storage of ``t`` as int32 words and its trailing bytes (fewer than 4) as uint8."""
    storage = t.untyped_storage()
    n = storage.nbytes()
    words = torch.empty(0, dtype=torch.int32, device=t.device).set_(storage, 0, (n // 4,)) if n >= 4 else \
        torch.empty(0, dtype=torch.int32, device=t.device)
    tail = torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage, 0, (n,))[n // 4 * 4:]
    return words, tail


class Fingerprinter:
    """Keyed fingerprints of tensor storages (keys drawn from the OS's randomness)."""

    def __init__(self, chunk: int = COMPARE_CHUNK_ELEMENTS):
        self.chunk = int(chunk)
        self._rng = random.SystemRandom()
        self._seed = self._rng.getrandbits(62)

    def _w(self, device: torch.device, n: int) -> torch.Tensor:
        """The weights for slices of ``n`` words: drawn again from the Fingerprinter's secret
        seed each time (nothing held between snapshots; the same length gets the same weights)."""
        gen = torch.Generator(device=device).manual_seed(self._seed ^ (n * 0x9E3779B1))
        return torch.randint(-(1 << 62), 1 << 62, (n,), dtype=torch.int64, device=device, generator=gen)

    def of(self, t: torch.Tensor, factors: list[int] | None = None) -> tuple[int, list[int]]:
        """The fingerprint of ``t``'s storage and the per-slice factors used (pass them back to
        fingerprint the same storage again)."""
        words, tail = _words(t.detach())
        n = words.numel()
        slices = max(1, -(-n // self.chunk))
        if factors is None:
            factors = [self._rng.getrandbits(62) * 2 + 1 for _ in range(slices + 1)]
        w = self._w(t.device, max(1, min(n, self.chunk)))
        acc = torch.zeros((), dtype=torch.int64, device=t.device)
        for c in range(slices):
            part = words[c * self.chunk:(c + 1) * self.chunk]
            if part.numel():
                # the factor enters as a wrapped int64: the sum is taken mod 2**64 either way
                acc += (part.to(torch.int64) * w[:part.numel()]).sum() * _signed(factors[c])
        value = int(acc) & MASK
        if tail.numel():
            for i, byte in enumerate(tail.tolist()):
                value = (value + factors[-1] * (byte + 1) * (i + 7)) & MASK
        return value, factors


def _signed(x: int) -> int:
    x &= MASK
    return x - (1 << 64) if x >= 1 << 63 else x


@dataclass
class _Entry:
    clone: torch.Tensor | None
    fingerprint: int | None
    factors: list[int] | None


class Snapshot:
    """The bits of some tensors now, to check them later (``changed``)."""

    def __init__(self, tensors: list[torch.Tensor], exact: bool, fingerprinter: Fingerprinter):
        self.exact = exact
        self._fp = fingerprinter
        self.entries: list[_Entry] = []
        for t in tensors:
            if exact:
                self.entries.append(_Entry(t.detach().clone(), None, None))
            else:
                value, factors = fingerprinter.of(t)
                self.entries.append(_Entry(None, value, factors))

    def differs(self, i: int, now: torch.Tensor) -> int | None:
        """0 when tensor ``i`` is unchanged; else the number of elements that changed, or -1
        when only a fingerprint was kept (changed, count unknown)."""
        entry = self.entries[i]
        if entry.clone is not None:
            if compare.bitwise_equal(now, entry.clone):
                return 0
            return compare.count_differing(now, entry.clone) if now.shape == entry.clone.shape else -1
        value, _ = self._fp.of(now, entry.factors)
        return 0 if value == entry.fingerprint else -1

    def changed(self, tensors: list[torch.Tensor]) -> list[tuple[int, int]]:
        """``(index, count)`` for every tensor that changed (count -1: unknown)."""
        out = []
        for i, now in enumerate(tensors[:len(self.entries)]):
            n = self.differs(i, now)
            if n:
                out.append((i, n))
        return out


def describe_change(n: int) -> str:
    return f"{n} elements changed" if n > 0 else "its bits changed"


__all__ = ["Fingerprinter", "Snapshot", "describe_change"]
