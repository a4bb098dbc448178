"""The offline tuner: turns the knobs a kernel file declares, screening many configurations
for each one it proposes.

A kernel file declares two plain literal dicts near the top (see the kernel file contract)::

    KNOBS = {"BLOCK_N": 1024, "num_warps": 4, "variant": "single_pass"}
    KNOB_SPACE = {"BLOCK_N": [256, 512, 1024, 2048], "num_warps": [2, 4, 8], "variant": [...]}

Each proposal is the current best file with only values inside the ``KNOBS`` literal changed
(the rest of the file is byte for byte the same), described like
``num_warps 4→1, BLOCK_S 16→8 (screened 1st of 375 in round 1; sweep)``.

Screen, then judge: before proposing, the tuner ranks a batch of configurations with the
screen (``screen.py``: a cheap timing-only run in a process of its own) and proposes only the
finalists that screened faster than the incumbent, best first; the loop's full judge decides
keep or revert for each.  Which configurations a round screens, and how time is shared, is
the search strategy (``search.py``, readable on its own).  The screen runs by default on a GPU;
on the CPU (interpreter timings mean nothing) it is off unless ``TunerAgent(screen=True)``, and
the tuner then proposes the strategy's configurations unscreened, as it also does when no time
is left for a screen or the screen cannot run.  When the screen has run and found nothing
faster, and the deadline leaves no time for another round and a judged evaluation, it stops
instead (a configuration it never timed would likely lose, and run past the deadline).

Memory: ``tuner_state.json`` in ``context.extra["log_dir"]`` (the loop's per-problem log
directory, git-ignored; else the problem directory) holds the proposals (by experiment
number), the screen results and the queue of finalists; ``tuner_screen.jsonl`` next to it logs
each screening round.  Judge outcomes come from the history rows.  A configuration is never
proposed twice, also across resumed runs; what crashed or timed out prunes every configuration
that dominates it.  Deterministic for a seed, history and screen results.  When nothing is
left, ``Proposal(source=None, rejected_reason=EXHAUSTED...)``.

The time the loop has left for the problem comes as ``context.extra["time_left_s"]`` (None or
absent: no deadline).
"""
from __future__ import annotations

import ast
import hashlib
import json
import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..files import write_text_atomic
from . import search
from .base import Context, Proposal
from .screen import FAILED as SCREEN_FAILED
from .screen import ScreenJob, rank, run_screen
from .search import Config, config_key, dominates  # noqa: F401  (re-exported for callers)

EXHAUSTED = "search space exhausted"
STATE_FILE = "tuner_state.json"
SCREEN_LOG = "tuner_screen.jsonl"
HARD_FAILURES = ("crash", "timeout")
STARTUP_PRIOR_S = 10.0  # a screen process's start, before one has been measured
PER_CONFIG_PRIOR_S = 0.5  # one configuration's screening, before one has been measured
MAX_BATCH = 600
DESCRIPTION_CHARS = 300  # results.tsv keeps this much of a description


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
    return search.is_ordered(values)


def _base_hash(source: str, decl: KnobDecl) -> str:
    """The kernel's code outside the KNOBS values: screen results hold only while it stays."""
    data = source.encode()
    for start, end in sorted(decl.value_spans.values(), reverse=True):
        data = data[:start] + data[end:]
    return hashlib.sha256(data).hexdigest()[:16]


@dataclass
class _Choice:
    config: Config
    note: str  # why, for the description: "screened 1st of 48 in round 2; sweep"


class TunerAgent:
    """Offline tuner over a kernel file's ``KNOB_SPACE``: screen, then propose (module doc)."""

    name = "tuner"

    def __init__(self, seed: int = 0, screen: bool | None = None):
        self.seed = seed
        self.screen = screen  # None: on for GPU devices, off on the CPU
        self._screen_broken = ""  # set when the screen cannot run; then this run proposes unscreened
        self._why_unscreened = ""
        self._screened_out_of_time = False  # this proposal's screen rounds ended for want of time

    # ---------------------------------------------------------------- state
    def _state_path(self, context: Context) -> Path:
        base = context.extra.get("log_dir") or context.problem_dir
        return Path(base) / STATE_FILE

    def _load_state(self, path: Path) -> dict:
        try:
            state = json.loads(path.read_text())
            if state.get("seed") == self.seed:
                for key, empty in (("proposals", {}), ("incumbents", []), ("screened", {}), ("rounds", []),
                                   ("queue", [])):
                    state.setdefault(key, empty)
                return state
        except (OSError, ValueError, AttributeError):
            pass
        return {"seed": self.seed, "proposals": {}, "incumbents": [], "screened": {}, "rounds": [], "queue": []}

    def _save_state(self, path: Path, state: dict) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(state, indent=1))

    # ---------------------------------------------------------------- propose
    def propose(self, context: Context) -> Proposal:
        t0 = time.monotonic()
        decl = parse_knobs(context.best_source)
        if decl is None or not decl.space:
            return Proposal(source=None, description="no knobs",
                            rejected_reason=f"{EXHAUSTED}: the kernel declares no KNOBS/KNOB_SPACE to tune")
        space = decl.space
        incumbent = {k: decl.knobs[k] for k in space}
        path = self._state_path(context)
        state = self._load_state(path)
        base = _base_hash(context.best_source, decl)
        if state.get("base") != base:  # other code around the knobs: earlier screens say nothing about it
            state.update(base=base, screened={}, queue=[])
        if incumbent not in state["incumbents"]:
            state["incumbents"].append(incumbent)

        proposed, failed = self._outcomes(state, context.history)
        failed += [s["config"] for s in state["screened"].values() if s["status"] in SCREEN_FAILED]
        choice = self._from_queue(state, incumbent, proposed, failed, space)
        self._screened_out_of_time = False
        if choice is None and self._screening_on(context):
            choice = self._screen_rounds(context, decl, state, incumbent, proposed, failed, t0, path)
        if choice is None and self._screened_out_of_time:
            # the screen saw nothing faster and the time left holds no more rounds: a judged
            # evaluation of a configuration it never timed would likely lose and run past the
            # deadline (on the H200, 72 s past a 5-minute --budget)
            self._save_state(path, state)
            left = context.extra.get("time_left_s")
            return Proposal(source=None, description="nothing screened faster",
                            rejected_reason=f"{EXHAUSTED} for the time left ({max(left - (time.monotonic() - t0), 0):.0f} s): "
                                            f"none of the {len(state['screened'])} configurations screened beats the "
                                            f"incumbent, and there is no time for another screen round and a judged "
                                            f"evaluation")
        if choice is None:
            choice = self._unscreened(context, state, space, incumbent, proposed, failed)
        if choice is None:
            self._save_state(path, state)
            total = search.space_size(space)
            return Proposal(source=None, description="search space exhausted",
                            rejected_reason=f"{EXHAUSTED}: proposed {len(proposed)} and screened "
                                            f"{len(state['screened'])} of {total} configurations; "
                                            f"none left that screened faster than the incumbent")
        full = {**decl.knobs, **choice.config}
        description = f"{describe_change(decl.knobs, full, list(decl.knobs))} ({choice.note})"
        state["proposals"][str(context.experiment)] = {"config": choice.config, "description": description,
                                                       "screen_s": round(time.monotonic() - t0, 3)}
        self._save_state(path, state)
        return Proposal(source=apply_knobs(context.best_source, decl, full), description=description)

    # ---------------------------------------------------------------- pieces
    def _outcomes(self, state: dict, history: list[dict[str, str]]) -> tuple[set[str], list[Config]]:
        """Keys of every configuration proposed (or seen as the incumbent), and those the judge
        found crashing or timing out."""
        rows = {int(r["experiment"]): r for r in history if str(r.get("experiment", "")).isdigit()}
        proposed = {config_key(c) for c in state["incumbents"]}
        failed = []
        for exp_text, entry in state["proposals"].items():
            proposed.add(config_key(entry["config"]))
            row = rows.get(int(exp_text))
            if (row is not None and row.get("agent") == self.name and row.get("status") in HARD_FAILURES
                    and row.get("description") == entry["description"][:DESCRIPTION_CHARS]):
                failed.append(entry["config"])
        return proposed, failed

    def _screening_on(self, context: Context) -> bool:
        wanted = self.screen if self.screen is not None else str(context.device).startswith("cuda")
        return bool(wanted) and not self._screen_broken and context.problem is not None

    def _from_queue(self, state: dict, incumbent: Config, proposed: set[str], failed: list[Config],
                    space: dict[str, list]) -> _Choice | None:
        """The best screened finalist not yet proposed that still beats the incumbent (compared
        within the round both were screened in); stale entries are dropped."""
        keep = []
        inc_key = config_key(incumbent)
        for entry in state["queue"]:
            config = entry["config"]
            if config_key(config) in proposed or any(dominates(config, f, space) for f in failed):
                continue
            round_incumbent = state["rounds"][entry["round"] - 1]["incumbent"] if entry["round"] <= len(state["rounds"]) else None
            if round_incumbent is not None and config_key(round_incumbent) == inc_key:
                inc_ratio = 1.0
            else:
                seen = state["screened"].get(inc_key)
                inc_ratio = seen["ratio"] if seen and seen.get("round") == entry["round"] else None
            if inc_ratio is None or entry["ratio"] is None:
                if not (inc_ratio == 1.0 and entry["ratio"] is None):
                    continue
            elif entry["ratio"] / inc_ratio >= search.PROPOSE_BELOW:
                continue
            keep.append(entry)
        state["queue"] = keep
        if not keep:
            return None
        entry = keep[0]
        note = (f"screened {search.ordinal(entry['rank'])} of {entry['of']} in round {entry['round']}; "
                f"{entry['reason']}")
        return _Choice(entry["config"], note)

    def _judge_seconds(self, context: Context, state: dict) -> float:
        """What one judged evaluation costs: this agent's recent rows minus their screening;
        before there are any, half the baseline's (which also timed eager PyTorch and
        torch.compile, and started the worker: later evaluations reuse all that)."""
        costs, baseline = [], None
        for row in context.history[-6:]:
            try:
                wall = float(row.get("wall_s") or 0.0)
            except ValueError:
                continue
            entry = state["proposals"].get(str(row.get("experiment")))
            if row.get("status") == "baseline":
                baseline = 0.5 * wall
            elif entry is not None:
                costs.append(max(wall - entry.get("screen_s", 0.0), 0.0))
        if costs:
            return statistics.median(costs)
        return baseline or 0.0

    def _screen_rounds(self, context: Context, decl: KnobDecl, state: dict, incumbent: Config,
                       proposed: set[str], failed: list[Config], t0: float, path: Path) -> _Choice | None:
        judge_s = self._judge_seconds(context, state)
        time_left = context.extra.get("time_left_s")
        self._why_unscreened = "no time left to screen"
        while True:
            spent = time.monotonic() - t0
            left = None if time_left is None else time_left - spent
            by_time = search.screen_allowance(left, judge_s)
            allowance = min(by_time, search.MAX_SCREEN_PER_PROPOSAL_S - spent)
            if allowance < search.MIN_SCREEN_S:
                self._screened_out_of_time = by_time < search.MIN_SCREEN_S and bool(state["screened"])
                return None
            startup = state.get("startup_s", STARTUP_PRIOR_S)
            per_config = max(state.get("per_config_s", PER_CONFIG_PRIOR_S), 1e-3)
            limit = int(1.5 * max(allowance * 0.7 - startup, 0.0) / per_config)
            limit = min(max(limit, 8), MAX_BATCH)
            round_no = len(state["rounds"]) + 1
            rng = random.Random(f"{self.seed}:{round_no}")
            excluded = proposed | set(state["screened"])
            batch = search.candidate_order(decl.space, incumbent, self._best(state, incumbent), excluded, failed,
                                           rng, limit)
            if not batch:
                return None
            sources = [(config_key(c), apply_knobs(context.best_source, decl, {**decl.knobs, **c})) for c, _ in batch]
            job = ScreenJob(problem_spec=context.problem_spec, device=context.device,
                            incumbent_source=context.best_source, candidates=sources,
                            shapes=context.extra.get("shapes"), dtype=context.extra.get("dtype"),
                            weights=context.extra.get("weights"), seed=rng.randrange(2 ** 31),
                            time_limit_s=allowance)
            report = run_screen(job)
            if report.error:  # it cannot run here: propose unscreened for the rest of this run
                self._screen_broken = report.error
                state["rounds"].append({"round": round_no, "incumbent": incumbent, "error": report.error})
                self._save_state(path, state)
                return None
            if not report.results:  # out of time before the first configuration
                return None
            reasons = {config_key(c): why for c, why in batch}
            configs = {config_key(c): c for c, _ in batch}
            for key, result in report.results.items():
                state["screened"][key] = {"config": configs[key], "status": result.status, "ratio": result.ratio,
                                          "rung": result.rung, "round": round_no}
                if result.status in SCREEN_FAILED:
                    failed.append(configs[key])
            if report.startup_s:
                state["startup_s"] = round(report.startup_s, 3)
            if report.per_config_s:
                state["per_config_s"] = round(report.per_config_s, 4)
            ranked = rank(report.results)
            of = len(report.results)
            state["rounds"].append({"round": round_no, "incumbent": incumbent, "screened": of,
                                    "finalists": [configs[k] for k in report.finalists],
                                    "wall_s": round(report.wall_s, 2)})
            state["queue"] = [{"config": configs[k], "round": round_no, "rank": ranked.index(k) + 1, "of": of,
                               "reason": reasons[k], "ratio": report.results[k].ratio}
                              for k in report.finalists]
            self._log_round(path.parent / SCREEN_LOG, round_no, incumbent, report, configs, reasons, ranked)
            choice = self._from_queue(state, incumbent, proposed, failed, decl.space)
            if choice is not None:
                return choice
            self._why_unscreened = "nothing screened so far beats the incumbent"

    @staticmethod
    def _best(state: dict, incumbent: Config) -> list[Config]:
        """The best configurations of the latest round (its finalists), best first."""
        for rnd in reversed(state["rounds"]):
            if rnd.get("finalists"):
                return list(rnd["finalists"])
        return [incumbent]

    def _unscreened(self, context: Context, state: dict, space: dict[str, list], incumbent: Config,
                    proposed: set[str], failed: list[Config]) -> _Choice | None:
        rng = random.Random(f"{self.seed}:unscreened:{context.experiment}")
        excluded = proposed | set(state["screened"])
        batch = search.candidate_order(space, incumbent, self._best(state, incumbent), excluded, failed, rng, 1)
        if not batch:
            return None
        config, reason = batch[0]
        if self._screening_on(context):
            why = self._why_unscreened
        else:
            why = "screen off on the CPU" if self.screen is None else "screen off"
        if self._screen_broken:
            why = f"screen failed: {self._screen_broken}"
        if context.problem is None:
            why = "no problem to screen against"
        return _Choice(config, f"unscreened, {reason}: {why}")

    @staticmethod
    def _log_round(path: Path, round_no: int, incumbent: Config, report, configs: dict, reasons: dict,
                   ranked: list[str]) -> None:
        line = {"round": round_no, "incumbent": incumbent, "wall_s": round(report.wall_s, 2),
                "startup_s": round(report.startup_s, 2), "finalists": [configs[k] for k in report.finalists],
                "results": [{"config": configs[k], "status": r.status, "ratio": r.ratio, "score_us": r.score_us,
                             "rung": r.rung, "reason": reasons[k], "message": r.message}
                            for k, r in sorted(report.results.items(),
                                               key=lambda kv: ranked.index(kv[0]) if kv[0] in ranked else len(ranked))]}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a") as fh:
                fh.write(json.dumps(line, default=str) + "\n")
        except OSError:
            pass

