"""Wall-clock budgets written the way people say them: ``90s``, ``30m``, ``8h``, ``1h30m``."""
from __future__ import annotations

import re

_UNIT_SECONDS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)([dhms])")


class BudgetError(ValueError):
    """A budget that does not parse (user mistake, exit code 2)."""


def parse_budget(text: str) -> float:
    """Seconds in a budget string.

    Accepted: one or more ``<number><unit>`` parts with units d, h, m, s in decreasing order
    (``1h30m``, ``2.5h``, ``45s``), or a bare number of seconds (``600``), at least a minute: a
    bare ``3`` is more likely 3 hours or minutes than the 3 seconds it reads as (a run given it
    spent its budget before one experiment, without a word).  The result must be positive.
    """
    raw = text
    text = text.strip().lower().replace(" ", "")
    if not text:
        raise BudgetError("empty budget; write it like 90s, 30m, 8h or 1h30m")
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        seconds = float(text)
        if 0 < seconds < 60:
            raise BudgetError(f"budget {raw!r} would be {text} seconds; give a unit: {text}h, {text}m or {text}s")
    else:
        pos, seconds, last_rank = 0, 0.0, -1
        order = list(_UNIT_SECONDS)
        for match in _PART.finditer(text):
            rank = order.index(match.group(2))
            if match.start() != pos or rank <= last_rank:
                break
            seconds += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
            pos, last_rank = match.end(), rank
        if pos != len(text) or last_rank < 0:
            raise BudgetError(f"cannot parse budget {raw!r}; write it like 90s, 30m, 8h or 1h30m")
    if seconds <= 0:
        raise BudgetError(f"budget {raw!r} must be positive")
    return seconds


def format_duration(seconds: float) -> str:
    """``3725`` -> ``1h02m``, ``95`` -> ``1m35s``, ``7.2`` -> ``7s``."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"
