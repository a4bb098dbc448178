"""How the offline tuner searches a kernel's knob space: what to screen next, what to propose.

Words: a *configuration* is one value per knob (``{"BLOCK_S": 8, "num_warps": 1, ...}``); the
*space* is every combination of the values ``KNOB_SPACE`` lists; the *incumbent* is the
configuration of the current best kernel; the *distance* between two configurations is the
number of knobs whose values differ.

The search runs in rounds.  A round:

1. **Picks a batch** of configurations nobody has screened or proposed yet
   (``candidate_order``), best bets first:

   * ``sweep`` — a space of at most ``SWEEP_LIMIT`` configurations is swept whole: every
     configuration, nearest to the incumbent first (one knob changed, then two, then
     three, ...; ties in an order shuffled by the seed).  A round screens as many as its time
     allows and the next round takes the rest, so a small space is exhausted.
   * a larger space alternates two kinds: ``near best`` — configurations at most
     ``NEAR_DISTANCE`` knobs away from one of the ``TOP_K`` best configurations screened so
     far (or the incumbent), nearest first — and ``random`` ones drawn uniformly from the rest
     of the space.  Moving *two* knobs at once models the interactions coordinate descent
     misses (smaller blocks may only pay with fewer warps); the random half keeps the search
     from circling one basin.

2. **Screens it** (``screen.py``): each configuration is run on fresh inputs at the target
   shapes, checked against the reference, and timed briefly, relative to the incumbent timed
   in the same process.  Then **successive halving**: the best third (``HALVING_KEEP``) is
   timed again with twice the repetitions, and again, until at most ``FINALISTS`` remain
   (``survivors``).  The screen's numbers stay in the tuner's own state and log files.

3. **Proposes the finalists** that screened faster than the incumbent by at least
   ``1 - PROPOSE_BELOW``, best first, one per experiment.  Each goes through the full judge
   and the loop's keep/revert: the screen only chooses what is worth judging.

What is never done again: a configuration proposed once is never proposed again (the record
survives resumed runs, in the workspace); a configuration screened once is not screened again
while the kernel's code outside ``KNOBS`` stays the same.  What is pruned: a configuration that
crashed, timed out or raised (in the screen or in the judge), and every configuration that
*dominates* it — same categorical values and every size knob (blocks, warps, stages, rows...)
at least as large — since it would fail the same way.

Time: ``screen_allowance`` says how long a round may screen — half of the time left to the
problem minus one judged evaluation (so a budget of a few minutes still leaves room for the
judge), at most ``MAX_SCREEN_S``.  When no time is left for screening, or no screen can run
(CPU by default, where timings mean nothing), the tuner proposes the next configuration of
``candidate_order`` unscreened and lets the judge rank it.

Everything here is pure and deterministic for a seed: the same seed, history and screen
results give the same proposals.
"""
from __future__ import annotations

import itertools
import json
import math
import random
import re
from typing import Any

Config = dict[str, Any]

SWEEP_LIMIT = 1000  # spaces up to this size are swept whole (nearest first)
NEAR_DISTANCE = 2  # "near best": at most this many knobs changed
TOP_K = 3  # how many of the best screened configurations a round searches around
HALVING_KEEP = 1 / 3  # successive halving keeps this fraction for the next, longer timing
FINALISTS = 4  # halving stops here; these are proposed (when faster than the incumbent)
PROPOSE_BELOW = 0.99  # propose a finalist only when it screened at least 1% faster
MAX_SCREEN_S = 180.0  # one round's screening time, at most
MAX_SCREEN_PER_PROPOSAL_S = 2 * MAX_SCREEN_S  # rounds that find nothing faster stop here for now
SCREEN_SHARE = 0.5  # of the time left, what screening may take
MIN_SCREEN_S = 8.0  # below this a round is not worth starting a screen process for
ENUMERATE_LIMIT = 200_000  # larger spaces are sampled, not listed

_SIZE_KNOB = re.compile(r"block|warps|stages|rows|group|split|tile", re.IGNORECASE)


# --------------------------------------------------------------------------- configurations
def config_key(config: Config) -> str:
    return json.dumps(sorted(config.items()), default=str)


def space_size(space: dict[str, list]) -> int:
    return math.prod(len(values) for values in space.values())


def all_configs(space: dict[str, list]) -> list[Config]:
    knobs = list(space)
    return [dict(zip(knobs, combo)) for combo in itertools.product(*(space[k] for k in knobs))]


def distance(a: Config, b: Config) -> int:
    return sum(1 for k in a if a.get(k) != b.get(k))


def is_ordered(values: list) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def dominates(config: Config, failed: Config, space: dict[str, list]) -> bool:
    """``config`` uses at least the resources of ``failed`` (same categorical values, every
    size knob at least as large), so it would fail the same way."""
    for knob, values in space.items():
        a, b = config.get(knob), failed.get(knob)
        if is_ordered(values) and _SIZE_KNOB.search(knob):
            if a < b:
                return False
        elif a != b:
            return False
    return True


def near(center: Config, space: dict[str, list], max_changed: int = NEAR_DISTANCE) -> list[Config]:
    """Every configuration that changes 1..``max_changed`` knobs of ``center`` (any values)."""
    out = []
    knobs = list(space)
    for n in range(1, max_changed + 1):
        for chosen in itertools.combinations(knobs, n):
            options = [[v for v in space[k] if v != center.get(k)] for k in chosen]
            for values in itertools.product(*options):
                out.append({**center, **dict(zip(chosen, values))})
    return out


# --------------------------------------------------------------------------- what to try next
def candidate_order(space: dict[str, list], incumbent: Config, best: list[Config], excluded: set[str],
                    failed: list[Config], rng: random.Random, limit: int) -> list[tuple[Config, str]]:
    """Up to ``limit`` configurations to try next, best bets first, each with the reason it
    was picked (``sweep``, ``near best`` or ``random``).  ``excluded``: keys already screened
    or proposed; ``best``: the best screened configurations, best first."""

    def usable(config: Config) -> bool:
        return config_key(config) not in excluded and not any(dominates(config, f, space) for f in failed)

    if space_size(space) <= SWEEP_LIMIT:
        configs = all_configs(space)
        rng.shuffle(configs)  # the seed orders configurations at the same distance
        configs.sort(key=lambda c: distance(c, incumbent))
        return [(c, "sweep") for c in configs if usable(c)][:limit]

    centres = [incumbent] + [c for c in best[:TOP_K] if c != incumbent]
    near_list: list[Config] = []
    seen: set[str] = set()
    for centre in centres:
        ring = near(centre, space)
        rng.shuffle(ring)
        ring.sort(key=lambda c: distance(c, centre))
        for c in ring:
            key = config_key(c)
            if key not in seen and usable(c):
                seen.add(key)
                near_list.append(c)
    out: list[tuple[Config, str]] = []
    near_iter = iter(near_list)
    tries = 0
    while len(out) < limit:
        config = next(near_iter, None)
        if config is not None:
            out.append((config, "near best"))
        for _ in range(200):  # one random configuration nobody has tried
            tries += 1
            pick = {k: rng.choice(v) for k, v in space.items()}
            key = config_key(pick)
            if key not in seen and usable(pick):
                seen.add(key)
                out.append((pick, "random"))
                break
        else:
            if config is None:
                break  # nothing near and nothing random left
        if tries > 50 * limit + 1000:
            break
    return out[:limit]


def survivors(ratios: dict[str, float], keep: float = HALVING_KEEP, finalists: int = FINALISTS) -> list[str]:
    """Successive halving's next rung: the best ``keep`` fraction of ``ratios`` (keys of
    configurations → time relative to the incumbent; lower is better), at least
    ``finalists`` of them, best first."""
    ranked = sorted(ratios, key=lambda k: (ratios[k], k))
    return ranked[:max(finalists, math.ceil(len(ranked) * keep))]


def screen_allowance(time_left_s: float | None, judge_s: float) -> float:
    """Seconds a round may spend screening: half of the time left minus one judged
    evaluation, at most ``MAX_SCREEN_S``; 0 when that is under ``MIN_SCREEN_S``.  Without a
    deadline, ``MAX_SCREEN_S``."""
    if time_left_s is None:
        return MAX_SCREEN_S
    seconds = min(SCREEN_SHARE * time_left_s - judge_s, MAX_SCREEN_S)
    return seconds if seconds >= MIN_SCREEN_S else 0.0


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"

