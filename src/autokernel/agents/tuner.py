"""The offline tuner: turns the knobs a kernel file declares, one real edit at a time.

A kernel file declares two plain literal dicts near the top (see the kernel file contract)::

    KNOBS = {"BLOCK_N": 1024, "num_warps": 4, "variant": "single_pass"}
    KNOB_SPACE = {"BLOCK_N": [256, 512, 1024, 2048], "num_warps": [2, 4, 8], "variant": [...]}

Each proposal is the current best file with only values inside the ``KNOBS`` literal changed
(the rest of the file is byte for byte the same), described like
``num_warps 4→8, BLOCK_N 1024→2048``.

Search: coordinate descent.  Around a *centre* (at first the incumbent), try the neighbours
along one knob at a time — the next value up and down for ordered knobs, every other value for
categorical ones — continuing first along the knob and direction that last improved.  The
centre moves to the fastest correct configuration measured in the current sweep.  When every
neighbour of the centre has been tried, restart from a random untried point drawn from a
generator seeded by ``(seed, restart number)``, and descend from there.  The loop keeps a
candidate only when it beats the incumbent beyond noise, so a restart costs nothing when it
finds nothing.

Memory: the configurations proposed (by experiment number) live in ``tuner_state.json`` in
``context.extra["log_dir"]`` (the loop's per-problem log directory, git-ignored), falling back
to the problem directory.  Outcomes come from the history rows.  A configuration is never
proposed twice; one that crashed or timed out prunes every untried configuration of the same
categorical values whose size knobs (block sizes, warps, stages, rows per program) are all at
least as large.  Deterministic for a given seed and history.  When nothing is left,
``Proposal(source=None, rejected_reason=EXHAUSTED)``.
"""
from __future__ import annotations

import ast
import itertools
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..files import write_text_atomic
from .base import Context, Proposal

EXHAUSTED = "search space exhausted"
STATE_FILE = "tuner_state.json"
HARD_FAILURES = ("crash", "timeout")
_SIZE_KNOB = re.compile(r"block|warps|stages|rows|group|split|tile", re.IGNORECASE)
_ENUMERATE_LIMIT = 200_000

Config = dict[str, Any]


# --------------------------------------------------------------------------- parsing / editing
@dataclass
class KnobDecl:
    knobs: Config  # current values, in file order
    space: dict[str, list]  # values the tuner may choose, per knob (only knobs also in KNOBS)
    value_spans: dict[str, tuple[int, int]]  # byte span of each KNOBS value in the source


def _literal_dict(tree: ast.Module, name: str) -> ast.Dict | None:
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) and isinstance(node.value, ast.Dict):
            return node.value
    return None


def parse_knobs(source: str) -> KnobDecl | None:
    """The ``KNOBS``/``KNOB_SPACE`` declaration of a kernel file, or None when it has none."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    knobs_node, space_node = _literal_dict(tree, "KNOBS"), _literal_dict(tree, "KNOB_SPACE")
    if knobs_node is None or space_node is None:
        return None
    try:
        knobs = ast.literal_eval(knobs_node)
        space = ast.literal_eval(space_node)
    except ValueError:
        return None
    if not isinstance(knobs, dict) or not isinstance(space, dict):
        return None
    line_starts = [0]
    for line in source.encode().splitlines(keepends=True):
        line_starts.append(line_starts[-1] + len(line))
    spans = {}
    for key_node, value_node in zip(knobs_node.keys, knobs_node.values):
        if isinstance(key_node, ast.Constant) and isinstance(key_node.value, str):
            start = line_starts[value_node.lineno - 1] + value_node.col_offset
            end = line_starts[value_node.end_lineno - 1] + value_node.end_col_offset
            spans[key_node.value] = (start, end)
    clean_space = {}
    for knob, values in space.items():
        if knob in knobs and knob in spans and isinstance(values, (list, tuple)) and values:
            values = list(dict.fromkeys(values))
            if knobs[knob] not in values:
                values.append(knobs[knob])
                if _ordered(values):
                    values.sort()
            clean_space[knob] = values
    return KnobDecl(knobs=knobs, space=clean_space, value_spans=spans)


def _render(value: Any, original: str) -> str:
    if isinstance(value, str):
        text = json.dumps(value)
        return text if original.startswith('"') else repr(value)
    return repr(value)


def apply_knobs(source: str, decl: KnobDecl, config: Config) -> str:
    """``source`` with the values inside the KNOBS literal set to ``config`` (only those bytes change)."""
    data = source.encode()
    edits = sorted(((decl.value_spans[k], v) for k, v in config.items()
                    if k in decl.value_spans and decl.knobs.get(k) != v), key=lambda e: -e[0][0])
    for (start, end), value in edits:
        original = data[start:end].decode()
        data = data[:start] + _render(value, original).encode() + data[end:]
    return data.decode()


def describe_change(old: Config, new: Config, order: list[str]) -> str:
    parts = [f"{k} {_short(old.get(k))}→{_short(new[k])}" for k in order if old.get(k) != new.get(k)]
    return ", ".join(parts) or "no change"


def _short(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


def _ordered(values: list) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def config_key(config: Config) -> str:
    return json.dumps(sorted(config.items()), default=str)


# --------------------------------------------------------------------------- search
def neighbours(center: Config, space: dict[str, list], first: tuple[str, int] | None = None) -> list[tuple[Config, tuple[str, int]]]:
    """Configurations one knob away from ``center`` with the move that makes each, in the
    order coordinate descent tries them: the knob/direction in ``first`` continued first,
    then every knob in order (up before down for ordered knobs)."""
    order = list(space)
    if first and first[0] in space:
        start = order.index(first[0])
        order = order[start:] + order[:start]
    out: list[tuple[Config, tuple[str, int]]] = []
    for knob in order:
        values = space[knob]
        idx = values.index(center[knob]) if center[knob] in values else 0
        if _ordered(values):
            steps = [1, -1]
            if first and first[0] == knob and first[1] == -1:
                steps = [-1, 1]
            moves = [(values[idx + s], s) for s in steps if 0 <= idx + s < len(values)]
        else:
            moves = [(v, 0) for v in values if v != center[knob]]
        for value, step in moves:
            out.append(({**center, knob: value}, (knob, step)))
    return out


def dominates(config: Config, failed: Config, space: dict[str, list]) -> bool:
    """``config`` uses at least the resources of ``failed`` (same categorical values, every
    size knob at least as large), so it would fail the same way."""
    for knob, values in space.items():
        a, b = config.get(knob), failed.get(knob)
        if _ordered(values) and _SIZE_KNOB.search(knob):
            if a < b:
                return False
        elif a != b:
            return False
    return True


class TunerAgent:
    """Offline coordinate-descent tuner over a kernel file's ``KNOB_SPACE`` (see module doc)."""

    name = "tuner"

    def __init__(self, seed: int = 0):
        self.seed = seed

    # ---------------------------------------------------------------- state
    def _state_path(self, context: Context) -> Path:
        base = context.extra.get("log_dir") or context.problem_dir
        return Path(base) / STATE_FILE

    def _load_state(self, path: Path) -> dict:
        try:
            state = json.loads(path.read_text())
            if state.get("seed") == self.seed:
                return state
        except (OSError, ValueError):
            pass
        return {"seed": self.seed, "proposals": {}, "restarts": 0, "segment_start": 0, "incumbents": []}

    def _save_state(self, path: Path, state: dict) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(state, indent=1))

    # ---------------------------------------------------------------- propose
    def propose(self, context: Context) -> Proposal:
        decl = parse_knobs(context.best_source)
        if decl is None or not decl.space:
            return Proposal(source=None, description="no knobs",
                            rejected_reason=f"{EXHAUSTED}: the kernel declares no KNOBS/KNOB_SPACE to tune")
        space = decl.space
        incumbent = {k: decl.knobs[k] for k in space}
        path = self._state_path(context)
        state = self._load_state(path)

        # outcomes of earlier proposals, from the history rows
        rows = {int(r["experiment"]): r for r in context.history if r.get("experiment", "").isdigit()}
        # every incumbent seen (the starting kernel's configuration among them) counts as tried
        seen = state.setdefault("incumbents", [])
        if incumbent not in seen:
            seen.append(incumbent)
        tried: set[str] = {config_key(c) for c in seen}
        measured: dict[str, float] = {}
        failed: list[Config] = []
        segment: list[tuple[Config, tuple[str, int] | None, int]] = []
        for exp_text, entry in sorted(state["proposals"].items(), key=lambda kv: int(kv[0])):
            exp = int(exp_text)
            config = entry["config"]
            tried.add(config_key(config))
            row = rows.get(exp)
            if row is None or row.get("agent") != self.name or row.get("description") != entry["description"]:
                continue  # stopped before its row was written, or the row is another agent's
            if row["status"] in ("keep", "revert") and row.get("latency_us"):
                measured[config_key(config)] = float(row["latency_us"])
            elif row["status"] in HARD_FAILURES:
                failed.append(config)
            if exp >= state["segment_start"]:
                segment.append((config, tuple(entry["move"]) if entry.get("move") else None, exp))
        best_us = context.best.score_us if context.best is not None else None
        if best_us:
            measured[config_key(incumbent)] = float(best_us)

        def usable(config: Config) -> bool:
            return config_key(config) not in tried and not any(dominates(config, f, space) for f in failed)

        # the centre: the fastest correct configuration of the current sweep
        pool: list[tuple[Config, tuple[str, int] | None]] = [(c, m) for c, m, _ in segment if config_key(c) in measured]
        if state["segment_start"] == 0 or any(config_key(c) == config_key(incumbent) for c, _ in pool):
            pool.append((incumbent, None))
        choice: tuple[Config, tuple[str, int] | None] | None = None
        move_kind = "descent"
        if pool:
            center, last_move = min(pool, key=lambda cm: measured.get(config_key(cm[0]), float("inf")))
            for cand, move in neighbours(center, space, last_move):
                if usable(cand):
                    choice = (cand, move)
                    break
        if choice is None:  # local optimum (or the restart point failed): restart
            restart = state["restarts"] + 1
            point = self._random_point(space, usable, random.Random(f"{self.seed}:{restart}"))
            if point is None:
                self._save_state(path, state)
                return Proposal(source=None, description="search space exhausted", rejected_reason=EXHAUSTED)
            state["restarts"] = restart
            state["segment_start"] = context.experiment
            choice = (point, None)
            move_kind = "restart"

        config, move = choice
        full = {**decl.knobs, **config}
        description = describe_change(decl.knobs, full, list(decl.knobs))
        if move_kind == "restart":
            description = f"restart {state['restarts']}: {description}"
        state["proposals"][str(context.experiment)] = {"config": config, "move": list(move) if move else None,
                                                       "description": description}
        self._save_state(path, state)
        return Proposal(source=apply_knobs(context.best_source, decl, full), description=description)

    @staticmethod
    def _random_point(space: dict[str, list], usable, rng: random.Random) -> Config | None:
        knobs = list(space)
        total = 1
        for values in space.values():
            total *= len(values)
        if total <= _ENUMERATE_LIMIT:
            options = [dict(zip(knobs, combo)) for combo in itertools.product(*(space[k] for k in knobs))]
            options = [c for c in options if usable(c)]
            return rng.choice(options) if options else None
        for _ in range(5000):
            config = {k: rng.choice(space[k]) for k in knobs}
            if usable(config):
                return config
        return None
