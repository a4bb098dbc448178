"""The loop with several experiments in flight (CPU, stand-in judge in lane processes)."""
from __future__ import annotations

import pytest

from autokernel.agents.base import AgentConfig
from autokernel.loop.executor import plan_lanes
from autokernel.loop.optimize import OptimizeError, Target, run_optimize
from autokernel.loop.results import read_results
from fake_llm_server import FakeLLMServer, Step
from parallel_stubs import (EVAL_DELAY_ENV, CostEvaluator, ListAgent, check_workspace, costs, file_reply_text, git,
                            kernel)


def start(tmp_path):
    path = tmp_path / "start.py"
    path.write_text(kernel(100))
    return [Target("reduce", "reduce", start_file=path)]


def llm_config(server):
    return AgentConfig(name="llm", llm="openai:fake-model", llm_base_url=server.openai_url, llm_timeout_s=30.0)


def test_llm_requests_overlap_and_rows_numbers_commits_stay_serial(tmp_path, monkeypatch):
    monkeypatch.setenv(EVAL_DELAY_ENV, "0.05")
    script = [Step.reply(file_reply_text(c)) for c in costs(30)]
    with FakeLLMServer(script, reply_delay_s=0.4) as server:
        summary = run_optimize(start(tmp_path), tmp_path / "ws", agent=llm_config(server), budget_s=None,
                               max_experiments=12, device="cpu", parallel=4, show_progress=False,
                               _evaluator_factory=CostEvaluator)
    assert server.max_open >= 3  # the model had several requests open at once
    assert summary.stopped_reason == "max-experiments" and summary.experiments_run == 12
    assert summary.parallel == 4 and summary.lanes == ["cpu0", "cpu1", "cpu2", "cpu3"]
    assert len(summary.evaluation_s) >= 13 and sum(summary.lane_busy_s) > 0
    rows = check_workspace(tmp_path / "ws", "reduce")
    assert len(rows) == 13 and sum(r.status == "keep" for r in rows) >= 2


@pytest.mark.parametrize("first,second,statuses", [(80, 70, ["keep", "keep"]), (70, 80, ["keep", "revert"])])
def test_two_candidates_beating_one_incumbent(tmp_path, monkeypatch, first, second, statuses):
    """Both are judged against the start (100) at the same time; the second one recorded is
    judged again against the first when the first was kept, so the faster one ends up kept."""
    monkeypatch.setenv(EVAL_DELAY_ENV, "0.3")
    agent = ListAgent([kernel(first), kernel(second)])
    summary = run_optimize(start(tmp_path), tmp_path / "ws", agent=agent, budget_s=None, max_experiments=2,
                           device="cpu", parallel=2, show_progress=False, _evaluator_factory=CostEvaluator)
    assert summary.experiments_run == 2
    assert [c.best_source for c in agent.contexts] == [kernel(100), kernel(100)]  # same incumbent
    rows = check_workspace(tmp_path / "ws", "reduce")
    assert [r.status for r in rows[1:]] == statuses
    assert "judged again against the new incumbent" in rows[2].description
    subject = lambda commit: git(tmp_path / "ws", "log", "-1", "--format=%s", commit)  # noqa: E731
    assert subject(rows[1].commit).startswith("exp 0 reduce: baseline")
    assert subject(rows[2].commit).startswith("exp 1 reduce:")  # exp 2 names the incumbent it was judged against
    assert summary.problems[0].best_score_us == 70


def test_a_dead_evaluation_process_costs_one_experiment(tmp_path):
    agent = ListAgent([kernel(90), kernel(95, " DIE"), kernel(80)])
    summary = run_optimize(start(tmp_path), tmp_path / "ws", agent=agent, budget_s=None, max_experiments=3,
                           device="cpu", parallel=2, show_progress=False, _evaluator_factory=CostEvaluator)
    assert summary.stopped_reason == "max-experiments"
    rows = check_workspace(tmp_path / "ws", "reduce")
    assert [r.status for r in rows] == ["baseline", "keep", "crash", "keep"]
    message = (tmp_path / "ws/logs/reduce/reduce/exp_0002.json").read_text()
    assert "the evaluation process on cpu" in message and "died" in message


def test_lanes_one_per_gpu_by_default_or_as_picked():
    assert plan_lanes("cuda", None, None, None, gpu_count=8).names == [f"gpu{i}" for i in range(8)]
    lanes = plan_lanes("cuda", None, [0, 2, 5], None, gpu_count=8)
    assert (lanes.parallel, lanes.gpus, lanes.device) == (3, [0, 2, 5], "cuda")
    assert plan_lanes("cuda", 2, [0, 2, 5], None, gpu_count=8).gpus == [0, 2]
    assert not plan_lanes("cuda", None, None, None, gpu_count=1).spread  # one GPU: the serial loop
    assert not plan_lanes("cuda", 1, None, None, gpu_count=8).spread
    assert plan_lanes("cuda", 1, [3], None, gpu_count=8).gpus == [3]  # pinned to GPU 3
    assert plan_lanes("cpu", 4, None, None).names == ["cpu0", "cpu1", "cpu2", "cpu3"]
    assert not plan_lanes("cpu", None, None, None).spread
    from autokernel.loop.executor import pin

    assert pin(1, "") == "1" and pin(1, "4,6,7") == "6" and pin(0, "GPU-aa,GPU-bb") == "GPU-aa"
    for bad in [("cuda", None, [9], None), ("cuda", None, [1, 1], None), ("cpu", None, [0], None),
                ("cpu", 0, None, None), ("cuda", None, [0], "local")]:
        with pytest.raises(OptimizeError):
            plan_lanes(*bad, gpu_count=8)


def _rows_written(work):
    path = work / "results.tsv"
    return path.read_text().count("\n") - 1 if path.exists() else 0


def _drive(work, targets, url):
    """The run a test kills: in a forked child, which has everything imported already."""
    run_optimize(targets, work, agent=AgentConfig(name="llm", llm="openai:fake-model", llm_base_url=url,
                                                  llm_timeout_s=30.0),
                 budget_s=None, max_experiments=12, device="cpu", parallel=4, show_progress=False,
                 _evaluator_factory=CostEvaluator)


def test_kill_9_at_any_moment_loses_nothing_and_the_rerun_resumes(tmp_path, monkeypatch):
    import multiprocessing
    import os
    import signal
    import time

    from autokernel.loop.results import read_results

    monkeypatch.setenv(EVAL_DELAY_ENV, "0.05")
    work, targets, seen = tmp_path / "ws", start(tmp_path), []
    with FakeLLMServer([Step.reply(file_reply_text(c)) for c in costs(40)], reply_delay_s=0.15) as server:
        for kill_after in (3, 7):  # rows written when the run is killed
            proc = multiprocessing.get_context("fork").Process(target=_drive, args=(work, targets, server.openai_url))
            proc.start()
            deadline = time.monotonic() + 60
            while _rows_written(work) < kill_after and proc.is_alive() and time.monotonic() < deadline:
                time.sleep(0.01)
            os.kill(proc.pid, signal.SIGKILL)
            proc.join()
            seen.append([r.to_line() for r in read_results(work / "results.tsv")])
        summary = run_optimize(targets, work, agent=llm_config(server), budget_s=None, max_experiments=12,
                               device="cpu", parallel=4, show_progress=False, _evaluator_factory=CostEvaluator)
    assert summary.stopped_reason == "max-experiments"
    rows = check_workspace(work, "reduce")
    assert len(rows) == 13
    lines = [r.to_line() for r in rows]
    for before in seen:  # every complete row written before a kill is still there, unchanged
        assert len(before) >= 3 and lines[:len(before)] == before


def test_slow_endpoint_parallel_4_records_at_least_2_5x_parallel_1(tmp_path, monkeypatch):
    """The issue's 6 s a reply, scaled down six times (1 s a reply, an 8 s budget instead of
    48 s): the model's latency bounds the loop, so four requests open at once record about
    four times as many experiments (less the start of the lane processes and the driver's git
    work, both counted in the budget)."""
    import openai  # noqa: F401  (imported before the clock starts, like the CLI has it by then)

    monkeypatch.setenv(EVAL_DELAY_ENV, "0.02")
    counts = {}
    for parallel in (1, 4):
        with FakeLLMServer([Step.reply(file_reply_text(c)) for c in costs(60)], reply_delay_s=1.0) as server:
            summary = run_optimize(start(tmp_path), tmp_path / f"ws{parallel}", agent=llm_config(server),
                                   budget_s=8.0, device="cpu", parallel=parallel, show_progress=False,
                                   _evaluator_factory=CostEvaluator)
        assert summary.stopped_reason == "budget"
        check_workspace(tmp_path / f"ws{parallel}", "reduce")
        counts[parallel] = summary.experiments_run
    print("experiments in 8 s at 1 s a reply:", counts)
    assert counts[1] >= 2
    assert counts[4] >= 2.5 * counts[1], counts


@pytest.mark.parametrize("args,words", [
    (["--parallel", "0"], "--parallel must be at least 1"),
    (["--gpus", "a,b"], "give GPU indices"),
    (["--gpus", "0"], "--gpus needs a CUDA device"),
    (["--ray", " "], "--ray needs an address"),
])
def test_bad_scale_flags_exit_2_and_write_nothing(tmp_path, args, words):
    from typer.testing import CliRunner

    from autokernel.cli import app

    result = CliRunner().invoke(app, ["optimize", "--problem", "reduce", "--workdir", str(tmp_path / "ws"),
                                      "--device", "cpu", *args])
    assert result.exit_code == 2
    assert words in result.output and "Traceback" not in result.output
    assert not (tmp_path / "ws").exists()


@pytest.mark.slow
@pytest.mark.skipif(not __import__("os").environ.get("AUTOKERNEL_SLOW_TESTS"),
                    reason="about a minute on two busy cores (four processes import torch); AUTOKERNEL_SLOW_TESTS=1 runs it")
def test_real_harness_in_two_lane_processes(tmp_path):
    """The CLI with the real judge (Triton interpreter, a tiny shape) and the tuner, two
    experiments in flight: evaluations run in the lane processes, the summary and the report's
    throughput section say so."""
    import os
    import subprocess
    import sys

    from autokernel.loop.summary import throughput_markdown

    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-m", "autokernel", "optimize", "--problem", "reduce", "--shape", "3x40",
                           "--workdir", str(tmp_path / "ws"), "--device", "cpu", "--parallel", "2",
                           "--max-experiments", "3"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "up to 2 in flight on cpu0, cpu1" in proc.stdout and "evaluations/h" in proc.stdout
    rows = read_results(tmp_path / "ws/results.tsv")
    assert [r.experiment for r in rows] == [0, 1, 2, 3] and rows[0].correct
    assert all(r.status in ("keep", "revert") for r in rows[1:]), [r.status for r in rows]
    assert len({r.description for r in rows[1:]}) == 3  # the tuner, asked while others are in flight, never repeats
    section = "\n".join(throughput_markdown(tmp_path / "ws"))
    assert "cpu0" in section and "cpu1" in section


def test_command_agent_gets_a_git_clone_per_slot(tmp_path, monkeypatch):
    """Each slot's agent edits kernel.py in its own clone (never the workspace's), starting
    from the branch head; the clones are gone when the run ends.  (With git worktrees, which
    share branches, the agent's clean-up moved the run branch back over the loop's commits.)"""
    import sys

    monkeypatch.setenv(EVAL_DELAY_ENV, "0.05")
    edit = tmp_path / "edit.py"
    edit.write_text(
        "import os, re, sys, time\n"
        "n = int(re.search(r'command-(\\d+)-prompt', sys.argv[1]).group(1))\n"
        "open(os.path.join(os.environ['LOG'], f'cwd-{n}'), 'w').write(os.getcwd())\n"
        "time.sleep(0.3)\n"
        f"open('kernel.py', 'w').write({kernel(0)!r}.replace('COST = 0', f'COST = {{100 - 5 * n}}'))\n"
        "print(f'cost {100 - 5 * n}')\n")
    log = tmp_path / "cwd"
    log.mkdir()
    monkeypatch.setenv("LOG", str(log))
    config = AgentConfig(name="command", agent_cmd=f"{sys.executable} {edit} {{prompt_file}}", agent_timeout_s=60)
    work = tmp_path / "ws"
    summary = run_optimize(start(tmp_path), work, agent=config, budget_s=None, max_experiments=4, device="cpu",
                           parallel=2, show_progress=False, _evaluator_factory=CostEvaluator)
    assert summary.experiments_run == 4
    rows = check_workspace(work, "reduce")
    assert [r.status for r in rows[1:]] == ["keep"] * 4 and rows[-1].latency_us == 80
    cwds = {p.read_text() for p in log.iterdir()}
    assert len(cwds) == 2 and all("/slots/" in c and str(work / "problems") not in c for c in cwds)
    assert not (work / "logs/reduce/slots").exists() or not any((work / "logs/reduce/slots").iterdir())


def test_experiments_in_flight_spread_the_width_over_problems():
    from autokernel.orchestrator import ProblemState, pick_next

    big, small = ProblemState("big", fraction=0.6), ProblemState("small", fraction=0.4)
    assert pick_next([big, small]) == "big"
    assert pick_next([big, small], {"big": 1}) == "big"  # still the larger expected gain
    assert pick_next([big, small], {"big": 3}) == "small"  # three in flight on big: small's turn
    parked = ProblemState("parked", fraction=0.9, since_improvement=5)
    assert pick_next([parked, small], {"small": 10}) == "small"  # in-flight work never parks a problem


def test_throughput_per_hour_and_utilisation_per_lane(tmp_path):
    """The per-hour figure counts the judge's evaluations, not the experiments: new-user trial, a
    command agent's two rows, both rejected before judging, read as 1655 "experiments/h"."""
    from autokernel.loop.summary import OptimizeSummary, log_throughput, throughput_markdown, throughput_text

    summary = OptimizeSummary(problems=[], stopped_reason="budget", workdir=tmp_path, branch="b", run_name="r",
                              experiments_run=30, rejected_run=10, wall_s=600.0, parallel=2, lanes=["gpu0", "gpu1"],
                              lane_busy_s=[540.0, 300.0], evaluation_s=[20.0, 40.0] * 11)
    assert summary.evaluations_per_hour == 132.0 and summary.utilisation == [0.9, 0.5]
    assert throughput_text(summary) == ("132 evaluations/h; 10 proposal(s) rejected unevaluated; evaluation 30 s mean; "
                                        "gpu0 90% gpu1 50% busy")
    log_throughput(tmp_path, summary)
    with open(tmp_path / "logs/throughput.jsonl", "a") as fh:  # a line written before evaluations were counted
        fh.write('{"run_name": "old", "wall_s": 60, "experiments": 5, "lanes": ["cpu"], "lane_busy_s": [30]}\n')
    table = "\n".join(throughput_markdown(tmp_path))
    assert "| r | 2 | 30 | 22 | 600 s | 132 | 30 s | gpu0 90%, gpu1 50% |" in table
    assert "| old | 1 | 5 | — | 60 s | — | — | cpu 50% |" in table


@pytest.mark.parametrize("parallel", [1, 2])
def test_a_rejected_proposal_is_an_experiment_but_no_evaluation(tmp_path, parallel):
    from autokernel.agents.base import Proposal

    class SometimesNothing(ListAgent):
        def propose(self, context):
            if context.experiment % 2 == 0:
                return Proposal(source=None, description="nothing", rejected_reason="no file in the reply")
            return super().propose(context)

    summary = run_optimize(start(tmp_path), tmp_path / "ws", agent=SometimesNothing([kernel(90), "", kernel(80)]),
                           budget_s=None, max_experiments=4, device="cpu", parallel=parallel, show_progress=False,
                           _evaluator_factory=CostEvaluator)
    assert (summary.experiments_run, summary.rejected_run) == (4, 2)
    # the baseline and the two kernels; in parallel a kernel may be judged again against a new incumbent
    assert len(summary.evaluation_s) == 3 if parallel == 1 else len(summary.evaluation_s) >= 3


def test_llm_call_budget_holds_with_requests_in_flight(tmp_path, monkeypatch):
    """--llm-max-calls 3 with four requests allowed at once: exactly three requests are made,
    even when building a prompt is slow (the check and the count are one step)."""
    import time

    import autokernel.agents.llm as llm

    build = llm.build_messages
    monkeypatch.setattr(llm, "build_messages", lambda context: (time.sleep(0.3), build(context))[1])
    monkeypatch.setenv(EVAL_DELAY_ENV, "0.02")
    with FakeLLMServer([Step.reply(file_reply_text(c)) for c in costs(10)], reply_delay_s=0.3) as server:
        config = AgentConfig(name="llm", llm="openai:fake-model", llm_base_url=server.openai_url, llm_max_calls=3)
        summary = run_optimize(start(tmp_path), tmp_path / "ws", agent=config, budget_s=None, device="cpu",
                               parallel=4, show_progress=False, _evaluator_factory=CostEvaluator)
    assert len(server.requests) == 3
    assert summary.stopped_reason == "agent-exhausted" and summary.experiments_run == 3
    check_workspace(tmp_path / "ws", "reduce")


def test_run_refuses_bad_scale_flags_before_profiling(tmp_path):
    from typer.testing import CliRunner

    from autokernel.cli import app

    for args, words in [(["--parallel", "0"], "--parallel must be at least 1"),
                        (["--gpus", "1"], "--gpus needs a CUDA device")]:
        result = CliRunner().invoke(app, ["run", "--workdir", str(tmp_path / "ws"), "--device", "cpu", *args])
        assert result.exit_code == 2 and words in result.output, result.output
        assert not (tmp_path / "ws").exists()


def test_progress_says_what_every_slot_is_doing(tmp_path, monkeypatch):
    import io

    from rich.console import Console

    import autokernel.loop.parallel as parallel
    from autokernel.loop.progress import slots_line

    assert slots_line([("softmax", "proposing", 88.0), None], 100.0) == "slots: [0] softmax proposing 12s | [1] idle"
    monkeypatch.setattr(parallel, "SLOTS_LINE_EVERY_S", 0.0)
    monkeypatch.setenv(EVAL_DELAY_ENV, "0.2")
    out = io.StringIO()
    run_optimize(start(tmp_path), tmp_path / "ws", agent=ListAgent([kernel(90), kernel(80)], delay_s=0.2),
                 budget_s=None, max_experiments=2, device="cpu", parallel=2, show_progress=True,
                 _evaluator_factory=CostEvaluator, _console=Console(file=out, width=2000))
    text = out.getvalue()  # wide: at 200 columns a longer temporary path wrapped the first line (a CI run)
    assert "up to 2 in flight on cpu0, cpu1" in text
    assert "[0] reduce proposing" in text and "reduce evaluating on cpu" in text
    assert "reduce exp   2 keep" in text and "[slot " in text


def test_each_lane_process_sees_only_its_gpu(monkeypatch):
    """Pinning without a GPU: lanes for GPUs 3 and 5 run in processes that see only that GPU,
    with four evaluations asked for at once."""
    import threading

    from autokernel.loop.executor import EvalJob, Lanes, LocalExecutor
    from cost_judge import EnvEvaluator

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    executor = LocalExecutor(Lanes(parallel=2, names=["gpu3", "gpu5"], gpus=[3, 5], device="cpu"), EnvEvaluator)
    outcomes = []
    job = EvalJob(spec="reduce", kernel_source=kernel(1), incumbent_source=None, evaluator={"device": "cpu"})
    threads = [threading.Thread(target=lambda: outcomes.append(executor.evaluate(job))) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        executor.close()
    seen = {(o.lane, o.evaluation.message.split(" sees ")[1]) for o in outcomes}
    assert seen == {(0, "3"), (1, "5")} and len(outcomes) == 4
    assert len({o.evaluation.message.split(" sees ")[0] for o in outcomes}) == 2  # one process per lane


def test_ctrl_c_with_experiments_in_flight(tmp_path, monkeypatch):
    """Ctrl-C ends the run as "interrupted": rows so far stay, the tree is clean, the lane
    processes are gone, and the rerun resumes."""
    import os
    import signal

    class InterruptingAgent(ListAgent):
        def propose(self, context):
            if context.experiment == 4:
                os.kill(os.getpid(), signal.SIGINT)  # the driver (main thread) gets KeyboardInterrupt
            return super().propose(context)

    monkeypatch.setenv(EVAL_DELAY_ENV, "0.1")
    sources = [kernel(c) for c in costs(8)]
    s1 = run_optimize(start(tmp_path), tmp_path / "ws", agent=InterruptingAgent(sources, delay_s=0.1), budget_s=None,
                      max_experiments=8, device="cpu", parallel=2, show_progress=False,
                      _evaluator_factory=CostEvaluator)
    assert s1.stopped_reason == "interrupted"
    rows = check_workspace(tmp_path / "ws", "reduce")
    assert 1 <= len(rows) <= 5
    assert not (tmp_path / "ws/.autokernel.lock").exists()
    import multiprocessing

    assert not [p for p in multiprocessing.active_children() if p.name == "autokernel-lane"]
    s2 = run_optimize(start(tmp_path), tmp_path / "ws", agent=ListAgent(sources), budget_s=None, max_experiments=8,
                      device="cpu", parallel=2, show_progress=False, _evaluator_factory=CostEvaluator)
    assert s2.stopped_reason == "max-experiments"
    assert len(check_workspace(tmp_path / "ws", "reduce")) == 9


def test_two_problems_side_by_side(tmp_path, monkeypatch):
    monkeypatch.setenv(EVAL_DELAY_ENV, "0.1")
    path = tmp_path / "start.py"
    path.write_text(kernel(100))
    targets = [Target("reduce", "reduce", start_file=path, fraction=0.5),
               Target("softmax", "softmax", start_file=path, fraction=0.5)]
    agent = ListAgent([kernel(c) for c in costs(6)], delay_s=0.2)
    summary = run_optimize(targets, tmp_path / "ws", agent=agent, budget_s=None, max_experiments=3, device="cpu",
                           parallel=3, show_progress=False, _evaluator_factory=CostEvaluator)
    assert summary.stopped_reason == "max-experiments" and summary.experiments_run == 6
    for name in ("reduce", "softmax"):
        assert len(check_workspace(tmp_path / "ws", name)) == 4
    first_three = [c.problem_dir.name for c in agent.contexts[:3]]
    assert set(first_three) == {"reduce", "softmax"}  # the width went to both problems at once


def test_the_tuner_screen_is_off_beside_gpu_lanes(tmp_path):
    """The tuner's screen would time on a GPU that a lane is timing on: with GPU lanes it is off
    (the lanes here are CPU processes standing in for GPUs 0 and 1)."""
    from autokernel.loop.executor import Lanes
    from autokernel.loop.parallel import Scheduler
    from autokernel.loop.progress import Printer

    class Tuner:
        name, screen = "tuner", None

    class Session:
        agent, factory, runs, printer = Tuner(), CostEvaluator, [], Printer(False)

        class ws:
            head = staticmethod(lambda: "abc")

    stats = type("Stats", (), {"use_lanes": lambda self, names: None, "parallel": 1})()
    cpu = Scheduler(Session, Lanes(parallel=2, names=["cpu0", "cpu1"], device="cpu"), stats)
    cpu.executor.close()
    assert Session.agent.screen is None
    gpu = Scheduler(Session, Lanes(parallel=2, names=["gpu0", "gpu1"], gpus=[0, 1], device="cpu"), stats)
    gpu.executor.close()
    assert Session.agent.screen is False


def test_a_job_goes_to_a_free_lane_that_already_holds_its_evaluator():
    from autokernel.loop.executor import EvalJob, Lanes, LocalExecutor
    from cost_judge import EnvEvaluator

    executor = LocalExecutor(Lanes(parallel=2, names=["cpu0", "cpu1"], device="cpu"), EnvEvaluator)
    try:
        jobs = {spec: EvalJob(spec=spec, kernel_source=kernel(1), incumbent_source=None, evaluator={"device": "cpu"})
                for spec in ("softmax", "rmsnorm")}
        lanes = [executor.evaluate(jobs[spec]).lane for spec in ("softmax", "rmsnorm", "rmsnorm", "softmax")]
    finally:
        executor.close()
    assert lanes == [0, 1, 1, 0]  # a new problem goes to the lane holding fewest; then each stays warm
