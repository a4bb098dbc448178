"""The optimization loop with a stand-in evaluator (fast, deterministic): rows, commits,
keep/revert, broken proposals, interruption and resume, exhaustion."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from autokernel.agents.base import AgentConfig, Proposal
from autokernel.agents.tuner import parse_knobs
from autokernel.harness.records import Comparison, Evaluation, ShapeTiming
from autokernel.loop.optimize import Target, decide, run_optimize
from autokernel.loop.results import read_results


# --------------------------------------------------------------------------- stand-ins
def fake_latency(source: str) -> float:
    """A made-up, deterministic cost of a kernel file from its knobs."""
    decl = parse_knobs(source)
    knobs = decl.knobs if decl else {}
    cost = 100.0
    for name, value in sorted(knobs.items()):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            cost += 7.0 * (len(str(value)) % 3)
        else:
            cost += abs((sum(map(ord, name)) % 5) + 1 - (int(value).bit_length() % 7)) * 3.0
    return cost


class FakeEvaluator:
    """Judges a kernel file without running it: a file containing WRONG is incorrect, one
    containing CRASH crashes; otherwise the time is ``fake_latency``."""

    created: list["FakeEvaluator"] = []

    def __init__(self, spec, *, device, shapes=None, dtypes=None, timeout_s=60.0, weights=None, hook=None,
                 stop_at_loss=False):
        self.spec, self.device, self.shapes, self.dtypes = spec, device, shapes, dtypes
        self.stop_at_loss = stop_at_loss
        self.calls: list[tuple[str, str | None]] = []
        self.closed = False
        self.hook = hook
        FakeEvaluator.created.append(self)

    def evaluate(self, kernel_file, incumbent_file=None):
        self.calls.append((str(kernel_file), str(incumbent_file) if incumbent_file else None))
        if self.hook:
            self.hook(self, kernel_file)
        source = Path(kernel_file).read_text()
        if "CRASH" in source:
            return Evaluation(problem=self.spec, kernel_file=str(kernel_file), correct=False, verdict="crash",
                              message="worker died (signal 11)")
        if "WRONG" in source:
            return Evaluation(problem=self.spec, kernel_file=str(kernel_file), correct=False, verdict="incorrect",
                              failed_stage="smoke", message="max error 3.0 at shape 4x8")
        us = fake_latency(source)
        timing = ShapeTiming(shape={"M": 4, "N": 8}, dtype="fp32", latency_us=us, spread_us=0.1, gbps=1.0,
                             floor_us=us / 4, pct_roofline=25.0, eager_us=150.0, speedup_vs_eager=150.0 / us)
        ev = Evaluation(problem=self.spec, kernel_file=str(kernel_file), correct=True, verdict="pass",
                        timing_kind="interpreter", timings=[timing], score_us=us, eager_score_us=150.0)
        if incumbent_file is not None:
            inc = fake_latency(Path(incumbent_file).read_text())
            ev.vs_incumbent = Comparison(candidate_us=us, incumbent_us=inc, noise_frac=0.02, significant=us < inc * 0.98)
        return ev

    def close(self):
        self.closed = True


class ScriptedAgent:
    """Returns the sources a script gives it, one per call (None entries: a rejection)."""

    name = "scripted"

    def __init__(self, make_source):
        self.make_source = make_source
        self.contexts = []

    def propose(self, context):
        self.contexts.append(context)
        source, description = self.make_source(context)
        if source is None:
            return Proposal(source=None, description=description, rejected_reason="no valid file")
        return Proposal(source=source, description=description)


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout


def kernel_commits(root: Path, name: str) -> list[str]:
    """Subjects of the commits that changed problems/<name>/kernel.py, newest first."""
    return git(root, "log", "--format=%s", "--", f"problems/{name}/kernel.py").splitlines()


def run(targets, workdir, agent, **kw):
    kw.setdefault("budget_s", None)
    kw.setdefault("device", "cpu")
    kw.setdefault("show_progress", False)
    return run_optimize(targets, workdir, agent=agent, _evaluator_factory=FakeEvaluator, **kw)


# --------------------------------------------------------------------------- tests
def test_two_problems_rows_commits_and_summary(tmp_path):
    work = tmp_path / "ws"
    targets = [Target("reduce", "reduce"), Target("softmax", "softmax")]
    summary = run(targets, work, AgentConfig(name="tuner", seed=3), max_experiments=4)
    assert summary.stopped_reason == "max-experiments"
    assert summary.branch == "autokernel/reduce+softmax"
    assert git(work, "rev-parse", "--abbrev-ref", "HEAD").strip() == summary.branch
    assert git(work, "status", "--porcelain") == ""
    rows = read_results(work / "results.tsv")
    for name in ("reduce", "softmax"):
        mine = [r for r in rows if r.problem == name]
        assert [r.experiment for r in mine] == list(range(5))
        assert mine[0].status == "baseline" and mine[0].speedup_vs_start == 1.0
        kept = [r for r in mine if r.status == "keep"]
        # only kept experiments (and the setup) touched kernel.py
        subjects = kernel_commits(work, name)
        assert subjects[-1] == f"setup {name}"
        assert sorted(s for s in subjects[:-1]) == sorted(f"exp {r.experiment} {name}: {r.description} "
                                                          f"({r.speedup_vs_start:.3g}x vs start)" for r in kept)
        # the stable path holds the best kernel: the last kept candidate, or the starter
        best_source = (work / "problems" / name / "kernel.py").read_text()
        expected = min([fake_latency(best_source)] + [r.latency_us for r in mine if r.status == "keep"])
        assert fake_latency(best_source) == pytest.approx(expected)
        for r in mine[1:]:
            assert r.status in ("keep", "revert") and r.agent == "tuner" and "→" in r.description
        assert (work / "problems" / name / "problem.json").exists()
        summary_p = next(p for p in summary.problems if p.name == name)
        assert summary_p.experiments == 4 and summary_p.kept == len(kept)
        assert summary_p.best_score_us == pytest.approx(fake_latency(best_source))
    # logs exist but are not committed
    assert list((work / "logs").rglob("exp_0001.json"))
    assert "logs" not in git(work, "ls-files")
    assert "results.tsv" in git(work, "ls-files")
    # a second invocation with the same cap has nothing to do and records nothing
    again = run(targets, work, AgentConfig(name="tuner", seed=3), max_experiments=4)
    assert again.stopped_reason == "max-experiments" and again.experiments_run == 0
    assert len(read_results(work / "results.tsv")) == len(rows)


def test_keep_needs_significance_and_candidate_vs_incumbent(tmp_path):
    work = tmp_path / "ws"
    slow = lambda ctx: (ctx.best_source.replace('"num_warps": 8', '"num_warps": 8 ') + "\n# same speed\n", "noop")
    agent = ScriptedAgent(slow)
    run([Target("reduce", "reduce")], work, agent, max_experiments=2)
    rows = read_results(work / "results.tsv")
    assert [r.status for r in rows] == ["baseline", "revert", "revert"]
    calls = FakeEvaluator.created[-1].calls
    assert calls[0][1] is None  # baseline alone
    assert all(inc and inc.endswith("problems/reduce/kernel.py") for _, inc in calls[1:])
    assert kernel_commits(work, "reduce") == ["setup reduce"]
    # the loop's judge stops at a loss: a revert skips the stages after smoke
    assert FakeEvaluator.created[-1].stop_at_loss is True


def test_broken_proposal_is_recorded_incorrect_and_reverted(tmp_path):
    work = tmp_path / "ws"

    def script(ctx):
        n = ctx.experiment
        if n == 1:
            return ctx.best_source + "\n# WRONG: returns garbage\n", "broken kernel"
        if n == 2:
            return None, "nothing"
        if n == 3:
            return ctx.best_source + "\n# CRASH\n", "segfaulting kernel"
        return ctx.best_source, "same"

    agent = ScriptedAgent(script)
    start = (Path(__file__).parents[1] / "src/autokernel/kernels/reduce.py").read_text()
    run([Target("reduce", "reduce")], work, agent, max_experiments=3)
    rows = read_results(work / "results.tsv")
    assert [(r.status, r.failed_stage) for r in rows] == [("baseline", ""), ("incorrect", "smoke"), ("rejected", ""),
                                                          ("crash", "")]
    assert rows[1].latency_us is None and "rejected: no valid file" in rows[2].description
    assert (work / "problems/reduce/kernel.py").read_text() == start
    assert kernel_commits(work, "reduce") == ["setup reduce"]
    # the agent saw the failure of the previous experiment
    assert agent.contexts[1].last_failure["status"] == "incorrect"
    assert "max error" in agent.contexts[1].last_failure["message"]
    assert agent.contexts[2].last_failure["status"] == "rejected"
    assert git(work, "status", "--porcelain") == ""


def test_incorrect_start_kernel_is_replaced_by_first_correct(tmp_path):
    work = tmp_path / "ws"
    bad = tmp_path / "bad.py"
    good = (Path(__file__).parents[1] / "src/autokernel/kernels/reduce.py").read_text()
    bad.write_text(good + "\n# WRONG\n")
    agent = ScriptedAgent(lambda ctx: (good, "fixed"))
    run([Target("reduce", "reduce", start_file=bad)], work, agent, max_experiments=1)
    rows = read_results(work / "results.tsv")
    assert rows[0].status == "baseline" and rows[0].failed_stage == "smoke"
    assert rows[1].status == "keep"
    assert FakeEvaluator.created[-1].calls[1][1] is None  # nothing correct to compare with
    assert (work / "problems/reduce/kernel.py").read_text() == good


def test_interrupt_then_resume_continues_numbering(tmp_path):
    work = tmp_path / "ws"
    target = [Target("softmax", "softmax")]
    seen = {"n": 0}

    def hook(evaluator, kernel_file):
        seen["n"] += 1
        if seen["n"] == 4:  # during the evaluation of experiment 3
            raise KeyboardInterrupt

    factory = lambda spec, **kw: FakeEvaluator(spec, hook=hook, **kw)
    s1 = run_optimize(target, work, agent=AgentConfig(seed=1), budget_s=None, device="cpu", show_progress=False,
                      max_experiments=6, _evaluator_factory=factory)
    assert s1.stopped_reason == "interrupted"
    assert FakeEvaluator.created[-1].closed
    rows1 = read_results(work / "results.tsv")
    assert [r.experiment for r in rows1] == [0, 1, 2]
    assert git(work, "status", "--porcelain") == ""
    assert not (work / ".autokernel.lock").exists()
    s2 = run(target, work, AgentConfig(seed=1), max_experiments=6)
    assert s2.stopped_reason == "max-experiments"
    rows2 = read_results(work / "results.tsv")
    assert [r.experiment for r in rows2] == list(range(7))
    assert [r.to_line() for r in rows2[:3]] == [r.to_line() for r in rows1]
    descriptions = [r.description for r in rows2[1:]]
    assert len(set(descriptions)) == len(descriptions)  # the tuner never repeats itself


def test_exhausted_space_ends_problem(tmp_path):
    work = tmp_path / "ws"
    src = tmp_path / "tiny.py"
    starter = (Path(__file__).parents[1] / "src/autokernel/kernels/reduce.py").read_text()
    decl = parse_knobs(starter)
    # shrink the space to two values of one knob: one proposal, then exhausted
    space_line = next(l for l in starter.splitlines() if l.startswith("KNOB_SPACE"))
    warps = decl.knobs["num_warps"]
    tiny = starter.replace(space_line, f'KNOB_SPACE = {{"num_warps": [{warps}, {warps * 2}]}}  # ' + space_line[:20])
    lines = tiny.splitlines(keepends=True)
    # drop continuation lines of the original KNOB_SPACE literal
    out, skipping = [], False
    for line in lines:
        if line.startswith("KNOB_SPACE"):
            out.append(line)
            skipping = not line.rstrip().endswith("}") or line.count("{") > line.count("}")
            continue
        if skipping:
            skipping = not line.rstrip().endswith("}")
            continue
        out.append(line)
    src.write_text("".join(out))
    assert parse_knobs(src.read_text()).space == {"num_warps": [warps, warps * 2]}
    summary = run([Target("reduce", "reduce", start_file=src)], work, AgentConfig(seed=0), max_experiments=10)
    assert summary.stopped_reason == "all-done"
    # the stop line says why, in the tuner's words (it said only "search space exhausted")
    assert summary.message.startswith("reduce: search space exhausted: proposed 2 and screened"), summary.message
    rows = read_results(work / "results.tsv")
    assert [r.experiment for r in rows] == [0, 1]
    assert rows[1].description.startswith(f"num_warps {warps}→{warps * 2} (")  # + why the tuner chose it
    assert "exhausted" in summary.problems[0].note


def test_budget_stops_between_experiments(tmp_path):
    import time

    work = tmp_path / "ws"

    def hook(evaluator, kernel_file):
        time.sleep(0.3)

    factory = lambda spec, **kw: FakeEvaluator(spec, hook=hook, **kw)
    summary = run_optimize([Target("reduce", "reduce")], work, agent=AgentConfig(), budget_s=1.0, device="cpu",
                           show_progress=False, _evaluator_factory=factory)
    assert summary.stopped_reason == "budget"
    rows = read_results(work / "results.tsv")
    assert 1 <= len(rows) <= 5  # baseline + the experiments that started before the deadline


def test_decide_never_keeps_incorrect():
    ev = Evaluation(problem="p", kernel_file="k", correct=False, verdict="incorrect",
                    vs_incumbent=Comparison(candidate_us=1.0, incumbent_us=100.0, noise_frac=0.01, significant=True))
    assert decide(ev, incumbent_correct=True) == "incorrect"
    assert decide(ev, incumbent_correct=False) == "incorrect"
    ok = Evaluation(problem="p", kernel_file="k", correct=True, verdict="pass", score_us=5.0)
    assert decide(ok, incumbent_correct=True) == "revert"  # no comparison: not proven faster
    ok.vs_incumbent = Comparison(candidate_us=5.0, incumbent_us=5.1, noise_frac=0.05, significant=False)
    assert decide(ok, incumbent_correct=True) == "revert"
    ok.vs_incumbent = Comparison(candidate_us=4.0, incumbent_us=5.0, noise_frac=0.05, significant=True)
    assert decide(ok, incumbent_correct=True) == "keep"
    rejected = Evaluation(problem="p", kernel_file="k", correct=False, verdict="rejected")
    assert decide(rejected, incumbent_correct=True) == "rejected"
    slower = Evaluation(problem="p", kernel_file="k", correct=False, verdict="slower", score_us=6.0,
                        vs_incumbent=Comparison(candidate_us=6.0, incumbent_us=5.0, noise_frac=0.01, significant=False))
    assert decide(slower, incumbent_correct=True, incumbent_us=5.0) == "revert"


def test_command_style_agent_edits_are_undone(tmp_path):
    work = tmp_path / "ws"

    def script(ctx):
        # an external agent scribbles in the problem directory and edits kernel.py in place
        (ctx.problem_dir / "scratch.txt").write_text("notes")
        ctx.kernel_path.write_text(ctx.best_source + "\n# edited in place WRONG\n")
        return ctx.kernel_path.read_text(), "in-place edit"

    run([Target("reduce", "reduce")], work, ScriptedAgent(script), max_experiments=1)
    assert not (work / "problems/reduce/scratch.txt").exists()
    assert "WRONG" not in (work / "problems/reduce/kernel.py").read_text()
    assert read_results(work / "results.tsv")[-1].status == "incorrect"
    assert git(work, "status", "--porcelain") == ""


def test_plan_run_follows_amdahl_and_records_the_plan(tmp_path):
    import json

    from autokernel.loop.optimize import targets_from_plan
    from autokernel.plan import Plan, PlanProblem, save_plan

    plan = Plan(model="examples/tiny.py:Tiny", device="cpu", time_kind="cpu", dtype="fp32", input_shape=[2, 8],
                total_time_us=100.0, problems=[
                    PlanProblem("softmax", "softmax", "fp32", [{"M": 4, "N": 33}], [2], 10.0, 0.1),
                    PlanProblem("reduce_1", "reduce", "fp32", [{"M": 8, "N": 64}, {"M": 3, "N": 7}], [1, 3], 60.0, 0.6),
                    PlanProblem("conv", "", "fp32", [], [], 20.0, 0.2, supported=False)])
    path = tmp_path / "plan.json"
    save_plan(plan, path)
    targets = targets_from_plan(plan)
    assert [t.name for t in targets] == ["softmax", "reduce_1"]
    assert targets[1].weights == [1.0, 3.0] and targets[1].fraction == 0.6
    work = tmp_path / "ws"
    summary = run(targets, work, AgentConfig(seed=0), max_experiments=2, plan_path=path)
    assert summary.run_name == "tiny-Tiny"  # named after the plan's model (issue 10)
    assert json.loads((work / "plan.json").read_text()) == json.loads(path.read_text())
    assert "plan.json" in git(work, "ls-files")
    record = json.loads((work / "problems/reduce_1/problem.json").read_text())
    assert record["fraction"] == 0.6 and record["weights"] == [1.0, 3.0] and record["kind"] == "reduce"
    rows = [r for r in read_results(work / "results.tsv") if r.status != "baseline"]
    assert rows[0].problem == "reduce_1"  # the larger share of the model time goes first
    evaluator = next(e for e in FakeEvaluator.created[::-1] if e.spec == "reduce")
    assert evaluator.shapes == [{"M": 8, "N": 64}, {"M": 3, "N": 7}] and evaluator.dtypes == ["fp32"]


def test_changed_problem_definition_needs_a_new_run(tmp_path):
    from autokernel.loop.optimize import OptimizeError

    work = tmp_path / "ws"
    run([Target("reduce", "reduce", shapes=[{"M": 4, "N": 32}])], work, AgentConfig(), max_experiments=1)
    before = git(work, "rev-parse", "HEAD")
    with pytest.raises(OptimizeError, match="another --run-name"):
        run([Target("reduce", "reduce", shapes=[{"M": 8, "N": 32}])], work, AgentConfig(), max_experiments=1)
    assert git(work, "rev-parse", "HEAD") == before and git(work, "status", "--porcelain") == ""
    other = run([Target("reduce", "reduce", shapes=[{"M": 8, "N": 32}])], work, AgentConfig(), max_experiments=1,
                run_name="bigger")
    assert other.branch == "autokernel/bigger"


def test_speedup_vs_start_is_the_ratio_of_recorded_scores():
    """Issue 10: "rmsnorm went from 1787566 to 127994 us (14x) but read 21.94x" — chaining
    paired ratios gave a figure nobody can recompute; vs start is start / this score, always."""
    from autokernel.loop.optimize import speedup_vs_start
    from autokernel.loop.results import ExperimentRecord

    base = ExperimentRecord(0, "p", "tuner", "baseline", latency_us=1787566.0, speedup_vs_start=1.0)
    ev = Evaluation(problem="p", kernel_file="k", correct=True, verdict="pass", score_us=127994.0,
                    vs_incumbent=Comparison(candidate_us=81500.0, incumbent_us=200000.0, noise_frac=0.01,
                                            significant=True))
    assert speedup_vs_start(base, ev, "keep") == pytest.approx(1787566.0 / 127994.0)  # 13.97x, not the 21.9x of chaining 8.94x by the paired ratio
    assert speedup_vs_start(base, ev, "baseline") == 1.0
    broken = ExperimentRecord(0, "p", "tuner", "baseline", failed_stage="smoke")
    assert speedup_vs_start(broken, ev, "keep") is None


def test_keep_needs_a_recorded_score_below_the_best():
    """Issue 10: "start 558819 us, best 684818 us, 1.05x vs start" — a paired gain on a drifting
    machine kept a kernel whose own score was slower than the start's."""
    ev = Evaluation(problem="p", kernel_file="k", correct=True, verdict="pass", score_us=684818.0,
                    vs_incumbent=Comparison(candidate_us=530000.0, incumbent_us=558819.0, noise_frac=0.01,
                                            significant=True))
    assert decide(ev, incumbent_correct=True) == "keep"  # the paired figure alone
    assert decide(ev, incumbent_correct=True, incumbent_us=558819.0) == "revert"
    ev.score_us = 530000.0
    assert decide(ev, incumbent_correct=True, incumbent_us=558819.0) == "keep"


def test_progress_line_prints_the_ratio_the_decision_used():
    """Issue 10: "revert (vs best 1.06x ±2%)" then "keep (vs best 1.01x ±3%)": the line showed
    the ratio of overall scores, the decision used the median per-round ratio."""
    from types import SimpleNamespace

    from autokernel.harness.timing import compare_rounds
    from autokernel.loop.optimize import progress_line
    from autokernel.loop.results import ExperimentRecord

    # one slow incumbent round inflates its overall score; the per-round median says ~1.0
    paired = compare_rounds([100.0, 100.0, 100.0, 100.0, 100.0], [101.0, 99.0, 100.0, 100.5, 150.0],
                            candidate_us=100.0, incumbent_us=106.0)
    base = ExperimentRecord(0, "p", "tuner", "baseline", latency_us=106.0, speedup_vs_start=1.0)
    record = ExperimentRecord(1, "p", "tuner", decide(SimpleNamespace(correct=True, verdict="pass", score_us=100.0,
                                                                      vs_incumbent=paired), incumbent_correct=True),
                              latency_us=100.0)
    line = progress_line(SimpleNamespace(name="p", best_row=base, rows=[base, record]), record, None, paired)
    assert record.status == "revert"
    assert f"vs best {1 / paired.median_ratio:.4f}x" in line and "1.06x" not in line  # ~1.0: four decimals


def test_progress_line_shows_the_paired_comparison_behind_a_revert():
    """A candidate's own score can look far better than the best's (measured earlier, on a
    busier machine); the line must show the paired comparison the decision rested on."""
    from types import SimpleNamespace

    from autokernel.loop.optimize import progress_line
    from autokernel.loop.results import ExperimentRecord

    base = ExperimentRecord(0, "matmul", "tuner", "baseline", latency_us=578372.0, speedup_vs_start=1.0)
    record = ExperimentRecord(3, "matmul", "tuner", "revert", latency_us=238494.8, description="variant auto→tma")
    run = SimpleNamespace(name="matmul", best_row=base, rows=[base, record])
    paired = Comparison(candidate_us=238494.8, incumbent_us=249947.2, noise_frac=0.12, significant=False)
    line = progress_line(run, record, None, paired)
    assert "revert" in line and "vs best 1.05x ±12%" in line and "best 5.784e+05 us" in line
    assert "vs best" not in progress_line(run, record, None, None)
    # a faster candidate reverted says why (a new user read "1.17x ±14%" then revert as a bug):
    # the gain must clear the noise and the minimum gain together
    from autokernel.harness.timing import MIN_GAIN

    assert f"within the noise (a keep needs {1 / (1 - MIN_GAIN - 0.12):.3g}x)" in line
    unconfirmed = Comparison(candidate_us=200000.0, incumbent_us=249947.2, noise_frac=0.01, significant=False,
                             wall_confirmed=False)
    assert "the judge's own clock did not see half that gain" in progress_line(run, record, None, unconfirmed)
    # a new user read "(vs best 1x ±1%) but the judge's own clock did not see half that gain": a gain of 1x
    small = Comparison(candidate_us=248947.2, incumbent_us=249947.2, noise_frac=0.01, significant=False,
                       wall_confirmed=False)
    assert "vs best 1.0040x ±1%" in progress_line(run, record, None, small)
    slower = Comparison(candidate_us=260000.0, incumbent_us=249947.2, noise_frac=0.01, significant=False)
    slower_line = progress_line(run, record, None, slower)
    assert "within the noise" not in slower_line and "but " not in slower_line  # slower: no reason needed
    # ... except that its own score reads lower than the best's (a new user saw "7.699e+04 us (vs best
    # 0.898x) ... best 9.994e+04 us" reverted and took it for a bug): the line says which to read,
    # the best's time beside it where that is far off its score (578372 us), else in words
    assert "the best took 2.499e+05 us beside it" in slower_line and "side by side" not in slower_line
    near_best = SimpleNamespace(name="matmul", best_row=ExperimentRecord(0, "matmul", "tuner", "baseline",
                                                                         latency_us=300000.0), rows=[base, record])
    assert "side by side it was slower" in progress_line(near_best, record, None, slower)
    record.latency_us = 600000.0
    assert "side by side" not in progress_line(near_best, record, None, slower)  # its own score is higher too
    # the best's time in the pair is shown where it is far off its recorded score (a new user saw
    # "1.019e+05 us (vs best 0.995x ±22%) best 1.92e+04 us" and could not square the numbers)
    assert "(vs best 1.05x ±12%, the best took 2.499e+05 us beside it)" in line
    near = Comparison(candidate_us=500000.0, incumbent_us=560000.0, noise_frac=0.01, significant=False)
    assert "beside it" not in progress_line(run, record, None, near)


def test_a_kernel_kept_after_a_timed_out_start_is_the_first_measured_not_a_gain(tmp_path):
    """hf:whisper on CPU: the starting matmul kernel's evaluation timed out, and the first correct
    candidate was reported ``keep`` like an improvement, though there was nothing to compare it
    with (and apply then left it out).  It is still kept (the workspace's first correct kernel,
    a commit), but its row, its commit and its progress line say what it is."""
    work = tmp_path / "ws"
    start = tmp_path / "slow.py"
    good = (Path(__file__).parents[1] / "src/autokernel/kernels/matmul.py").read_text()
    start.write_text(good + "\n# TIMEOUT\n")

    class TimingOut(FakeEvaluator):
        def evaluate(self, kernel_file, incumbent_file=None):
            if "TIMEOUT" in Path(kernel_file).read_text():
                self.calls.append((str(kernel_file), None))
                return Evaluation(problem=self.spec, kernel_file=str(kernel_file), correct=False, verdict="timeout",
                                  failed_stage="numerics", message="no answer within 10 s during stage numerics")
            return super().evaluate(kernel_file, incumbent_file)

    agent = ScriptedAgent(lambda ctx: (good, "BLOCK_M=64"))
    run_optimize([Target("matmul", "matmul", start_file=start)], work, agent=agent, budget_s=None, device="cpu",
                 show_progress=False, max_experiments=1, _evaluator_factory=TimingOut)
    rows = read_results(work / "results.tsv")
    assert rows[0].status == "baseline" and rows[0].failed_stage == "timeout"
    assert rows[1].status == "keep" and rows[1].speedup_vs_start is None
    assert rows[1].description.startswith("first measured kernel, not a gain: the starting kernel's evaluation "
                                          "timed out"), rows[1].description
    assert rows[1].description.endswith("BLOCK_M=64")
    assert kernel_commits(work, "matmul")[0].startswith("exp 1 matmul: first measured kernel, not a gain")


def test_no_evaluation_may_run_past_the_budget(tmp_path, monkeypatch):
    """A CPU run's budget was overrun by one experiment longer than the whole budget (each of an
    evaluation's requests may take ``--timeout``).  Every evaluation of the loop gets the budget's
    end (plus a grace) as its deadline, and one the budget's end cut short is not recorded: it is
    not a timeout of the kernel, and a resumed run evaluates it again."""
    import time

    import autokernel.loop.optimize as optimize_mod

    monkeypatch.setattr(optimize_mod, "BUDGET_GRACE_S", 0.1)
    deadlines = []

    class UntilTheDeadline(FakeEvaluator):
        def evaluate(self, kernel_file, incumbent_file=None):
            deadlines.append(getattr(self, "deadline", None))
            if incumbent_file is None or self.deadline is None:
                return super().evaluate(kernel_file, incumbent_file)
            time.sleep(max(self.deadline - time.monotonic(), 0.0))  # the harness kills it here
            return Evaluation(problem=self.spec, kernel_file=str(kernel_file), correct=False, verdict="timeout",
                              failed_stage="sweep", message="stopped: the run's time budget ended")

    t0 = time.monotonic()
    summary = run_optimize([Target("reduce", "reduce")], tmp_path / "ws", agent=AgentConfig(), budget_s=0.5,
                           device="cpu", show_progress=False, _evaluator_factory=UntilTheDeadline)
    # seconds on a loaded machine (git, the fakes), never the 60 s a request may take
    assert time.monotonic() - t0 < 0.5 + 0.1 + 10.0
    assert summary.stopped_reason == "budget"
    assert len(deadlines) == 2 and all(d is not None and d <= t0 + 0.5 + 0.1 + 0.05 for d in deadlines), deadlines
    rows = read_results(tmp_path / "ws" / "results.tsv")
    assert [r.status for r in rows] == ["baseline"]  # the experiment cut short left no row




@pytest.mark.parametrize("parallel", [None, 2])
def test_an_agent_that_proposes_no_new_kernel_again_and_again_is_done_with_the_problem(tmp_path, parallel):
    """A model stuck on one answer (the current kernel sent back, or no code block) made a
    rejected row per request until the budget ended: about 1400 rows in 35 s from a fast
    endpoint, a request's cost each from a real one.  After ``MAX_UNEVALUATED_IN_A_ROW`` such
    proposals in a row the loop is done with the problem and says why."""
    import io

    from rich.console import Console

    from autokernel.loop.problem_run import MAX_UNEVALUATED_IN_A_ROW
    from cost_judge import CostEvaluator, kernel

    class StuckOnOne:  # as the LLM agent answers a model that sends the current kernel back
        name = "scripted"
        concurrent_proposals = True

        def propose(self, ctx):
            if ctx.experiment == 1:
                return Proposal(kernel(90), "cheaper")
            return Proposal(None, "the same file again", rejected_reason="the proposed file is identical to the current kernel")

    (tmp_path / "start.py").write_text(kernel(100))
    out = io.StringIO()
    summary = run_optimize([Target("stuck", "reduce", start_file=tmp_path / "start.py")], tmp_path / "ws",
                           agent=StuckOnOne(), budget_s=20, device="cpu", parallel=parallel,
                           _evaluator_factory=CostEvaluator, _console=Console(file=out, width=300))
    statuses = [r.status for r in read_results(tmp_path / "ws" / "results.tsv", "stuck")]
    in_flight = (parallel or 1) - 1  # proposals already asked for when the last counted one came back
    assert statuses[:2] == ["baseline", "keep"] and set(statuses[2:]) == {"rejected"}
    assert MAX_UNEVALUATED_IN_A_ROW <= len(statuses) - 2 <= MAX_UNEVALUATED_IN_A_ROW + in_flight
    assert summary.stopped_reason == "all-done" and summary.wall_s < 15
    note = summary.problems[0].note
    assert "no new kernel in 25 tries" in note and "identical to the current kernel" in note, note
    assert "stuck: the agent proposed no new kernel" in out.getvalue(), out.getvalue()
    assert "search space exhausted" not in out.getvalue()


def test_the_stop_line_names_the_problems_done_for_one_reason_once():
    """New-user trial: `run --agent llm` against a model that sent every kernel back stopped with
    `stopped: all-done (matmul: the agent proposed no new kernel in 25 tries in a row (last: ...);
    attention: the agent proposed ...; ...)`, the same note six times on one 1000-character line."""
    from autokernel.loop.optimize import joined_notes

    stuck = "the agent proposed no new kernel in 25 tries in a row (last: the proposed file is identical)"
    assert joined_notes([("matmul", stuck), ("gelu", "at 97% of roofline"), ("attention", stuck), ("embedding", "")]) \
        == f"matmul, attention: {stuck}; gelu: at 97% of roofline"
