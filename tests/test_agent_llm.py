"""The llm agent against a scripted model server on loopback (OpenAI and Anthropic protocols)."""
from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("openai")
pytest.importorskip("anthropic")

from agent_stubs import KERNEL, SIGNATURE, make_context  # noqa: E402
from fake_llm_server import FakeLLMServer, Step  # noqa: E402

from autokernel.agents.base import AgentConfig, AgentConfigError, AgentExhausted, make_agent  # noqa: E402

FAKE_KEY = "sk-test-FAKEKEY-5f2b9c7e1d"
GOOD = KERNEL.replace('"BLOCK_N": 256', '"BLOCK_N": 512')


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
                 "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    monkeypatch.setenv("AUTOKERNEL_LLM_BACKOFF_S", "0.01")
    monkeypatch.setenv("AUTOKERNEL_LLM_ATTEMPTS", "3")


def _agent(server: FakeLLMServer, provider: str = "openai", **kw):
    url = server.openai_url if provider == "openai" else server.anthropic_url
    return make_agent(AgentConfig(name="llm", llm=f"{provider}:fake-model", llm_base_url=url,
                                  llm_timeout_s=kw.pop("timeout", 5.0), **kw))


def _context(tmp_path, **kw):
    return make_context(tmp_path / "ws" / "problems" / "rowsum", extra={"log_dir": str(tmp_path / "logs")}, **kw)


def _file_reply(source: str, description: str = "bigger blocks") -> Step:
    return Step.reply(f"DESCRIPTION: {description}\n\n```python\n{source}```\n", 1200, 800)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_rate_limit_then_a_kernel(tmp_path, provider):
    failure = {"status": "incorrect", "stage": "heldout", "message": "wrong at shape 7x301", "description": "x"}
    with FakeLLMServer([Step.status(429), _file_reply(GOOD)]) as server:
        proposal = _agent(server, provider).propose(_context(tmp_path, last_failure=failure))
    assert proposal.source == GOOD
    assert proposal.description == "bigger blocks"
    assert proposal.tokens == 2000 and proposal.rejected_reason is None
    assert len(server.requests) == 2  # the 429 was retried
    request = server.requests[-1]
    if provider == "openai":
        assert request.path == "/v1/chat/completions"
        assert request.headers["authorization"] == f"Bearer {FAKE_KEY}"
    else:
        assert request.path == "/v1/messages"
        # older SDKs send x-api-key, newer ones a bearer token
        assert FAKE_KEY in (request.headers.get("x-api-key", ""), request.headers.get("authorization", "")[7:])
        assert request.body["max_tokens"] > 0 and "kernel engineer" in request.body["system"]
    assert request.body["model"] == "fake-model"
    assert SIGNATURE in request.prompt and KERNEL.strip() in request.prompt
    assert "wrong at shape 7x301" in request.prompt and "heldout" in request.prompt


def test_reply_without_code_is_rejected_with_a_reason(tmp_path):
    with FakeLLMServer([Step.reply("I would try larger blocks.", 500, 20)]) as server:
        proposal = _agent(server).propose(_context(tmp_path))
    assert proposal.source is None
    assert "no ```python block" in proposal.rejected_reason
    assert proposal.tokens == 520  # a useless reply still cost tokens


def test_hung_server_times_out_and_is_rejected(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOKERNEL_LLM_ATTEMPTS", "2")
    with FakeLLMServer([Step.hang(20)]) as server:
        proposal = _agent(server, timeout=0.5).propose(_context(tmp_path))
    assert proposal.source is None
    assert "timed out" in proposal.rejected_reason and "2 attempts" in proposal.rejected_reason
    assert len(server.requests) == 2


def test_rate_limits_exhaust_the_retries(tmp_path):
    # (a server error that persists is an outage: waited out, test_llm_outage.py)
    with FakeLLMServer([Step.status(429)]) as server:
        proposal = _agent(server).propose(_context(tmp_path))
    assert proposal.source is None and "HTTP 429" in proposal.rejected_reason
    assert len(server.requests) == 3


def test_an_endpoint_that_keeps_failing_stops_the_agent(tmp_path):
    ctx = _context(tmp_path)
    with FakeLLMServer([Step.status(400)]) as server:  # e.g. a parameter the server refuses
        agent = _agent(server)
        waits: list[float] = []
        agent._sleep = waits.append
        first, second = agent.propose(ctx), agent.propose(ctx)
        assert first.source is None and "HTTP 400" in second.rejected_reason
        with pytest.raises(AgentExhausted, match="3 requests in a row"):
            agent.propose(ctx)
    assert len(server.requests) == 3  # not retried within a proposal
    assert waits[0] == 0 and 0 < waits[1] < waits[2]  # a growing pause between failed proposals
    with FakeLLMServer([Step.status(429)]) as server:  # a rate limit that never lifts (5xx: see test_llm_outage.py)
        agent = _agent(server)
        agent._sleep = lambda s: None
        for _ in range(agent.retry.max_failed_in_a_row - 1):
            assert agent.propose(ctx).source is None
        with pytest.raises(AgentExhausted, match="in a row failed"):
            agent.propose(ctx)


def test_bad_key_stops_the_agent(tmp_path):
    with FakeLLMServer([Step.status(401)]) as server:
        with pytest.raises(AgentExhausted, match="HTTP 401"):
            _agent(server).propose(_context(tmp_path))
    assert len(server.requests) == 1  # not retried


def test_call_budget(tmp_path):
    with FakeLLMServer([_file_reply(GOOD)]) as server:
        agent = _agent(server, llm_max_calls=2)
        ctx = _context(tmp_path)
        assert agent.propose(ctx).source == GOOD
        assert agent.propose(ctx).source == GOOD
        with pytest.raises(AgentExhausted, match="budget spent"):
            agent.propose(ctx)
    assert len(server.requests) == 2


def test_keys_never_reach_disk_or_the_proposal(tmp_path, monkeypatch):
    # A model that echoes a secret (as if it had leaked into its context) must not get it
    # into the kernel file, the description, or the logs.
    monkeypatch.setenv("SOME_SERVICE_TOKEN", "tok-ANOTHER-SECRET-99")
    leaky = GOOD.replace("import torch\n", f"import torch  # {FAKE_KEY}\n", 1)
    with FakeLLMServer([_file_reply(leaky, f"uses {FAKE_KEY} and tok-ANOTHER-SECRET-99")]) as server:
        ctx = _context(tmp_path)
        proposal = _agent(server).propose(ctx)
    assert proposal.source is not None
    assert FAKE_KEY not in proposal.source and FAKE_KEY not in proposal.description
    assert "ANOTHER-SECRET" not in proposal.description and "[redacted]" in proposal.description
    logs = list((tmp_path / "logs").iterdir())
    assert any(p.name.endswith("prompt.md") for p in logs) and any(p.name.endswith("reply.md") for p in logs)
    found = subprocess.run(["grep", "-rl", "-e", FAKE_KEY, "-e", "ANOTHER-SECRET", str(tmp_path)],
                           capture_output=True, text=True)
    assert found.stdout == ""


def test_local_server_without_a_key_gets_a_placeholder(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    with FakeLLMServer([_file_reply(GOOD)]) as server:
        _agent(server).propose(_context(tmp_path))
    assert server.requests[0].headers["authorization"] == "Bearer no-key-needed"


@pytest.mark.parametrize("config, message", [
    (AgentConfig(name="llm"), "needs --llm"),
    (AgentConfig(name="llm", llm="gemini:pro"), "unknown LLM provider"),
    (AgentConfig(name="llm", llm="openai:"), "names no model"),
    (AgentConfig(name="llm", llm="openai:m", llm_max_calls=0), "at least 1"),
    (AgentConfig(name="llm", llm="anthropic:m"), "ANTHROPIC_API_KEY"),
])
def test_bad_configurations(monkeypatch, config, message):
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(AgentConfigError, match=message):
        make_agent(config)


def test_missing_sdk_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "openai", None)  # import fails as if not installed
    with pytest.raises(AgentConfigError, match=r"autokernel\[llm\]"):
        make_agent(AgentConfig(name="llm", llm="openai:m", llm_base_url="http://127.0.0.1:9/v1"))


# ------------------------------------------------------------------ end to end
def test_llm_agent_through_the_loop(tmp_path, monkeypatch):
    """A real run on the reduce problem (CPU, interpreter): a good kernel is kept, a broken
    one is recorded incorrect, a reply without code is rejected and the reason goes back to
    the model, a 429 is retried, a hung response times out and the loop goes on."""
    from agent_e2e import BROKEN, FAST, FAST_WARPS, grep_everywhere, git, start_file
    from autokernel.loop.optimize import Target, run_optimize
    from autokernel.loop.results import read_results

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("AUTOKERNEL_LLM_ATTEMPTS", "2")
    script = [
        _file_reply(FAST, "one chunk per row"),                                   # exp 1: keep
        Step.reply(f"DESCRIPTION: pad with ones\n```python\n{BROKEN}```", 900, 700),  # exp 2: incorrect
        Step.reply("Sorry, I cannot help with that.", 300, 10),                  # exp 3: rejected
        Step.status(429), _file_reply(FAST_WARPS, "eight warps"),               # exp 4: retried
        Step.hang(30), Step.hang(30),                                            # exp 5: timed out
    ]
    work = tmp_path / "ws"
    with FakeLLMServer(script) as server:
        config = AgentConfig(name="llm", llm="openai:fake-model", llm_base_url=server.openai_url,
                             llm_timeout_s=1.0, llm_max_calls=50)
        summary = run_optimize([Target("reduce", "reduce", start_file=start_file(tmp_path), dtype="fp32")], work, agent=config,
                               budget_s=None, max_experiments=5, device="cpu", show_progress=False)
    rows = read_results(work / "results.tsv")
    assert [r.status for r in rows][:4] == ["baseline", "keep", "incorrect", "rejected"]
    assert rows[4].status in ("keep", "revert") and rows[5].status == "rejected"
    assert rows[2].failed_stage == "smoke"
    assert "no ```python block" in rows[3].description and "timed out" in rows[5].description
    assert [r.tokens for r in rows] == [0, 2000, 1600, 310, 2000, 0]
    assert all(r.agent == "llm" for r in rows)
    assert summary.problems[0].kept >= 1

    prompts = [r.prompt for r in server.requests]
    assert len(prompts) == 7
    assert all(SIGNATURE_OF_REDUCE in p for p in prompts)
    assert FAST.strip() in prompts[1]                                  # the kept kernel is the current one
    assert "relative norm error" in prompts[2] and "failed stage: smoke" in prompts[2]
    assert "no ```python block" in prompts[3]                          # the rejection is fed back
    kept = (work / "problems/reduce/kernel.py").read_text()
    assert kept in (FAST, FAST_WARPS)
    assert git(work, "status", "--porcelain") == ""
    assert grep_everywhere(work, FAKE_KEY) == ""
    assert list((work / "logs").rglob("llm-0003-reply.md"))  # prompts and replies are logged


SIGNATURE_OF_REDUCE = "kernel_fn(x"


class _PassingEvaluator:
    """Stand-in for the harness: every file is correct and as fast as the last."""

    def __init__(self, spec, **kwargs):
        self.spec = spec

    def evaluate(self, kernel_file, incumbent_file=None):
        from autokernel.harness.records import Comparison, Evaluation, ShapeTiming

        timing = ShapeTiming(shape={"M": 16, "N": 256}, dtype="fp32", latency_us=10.0, spread_us=0.1)
        ev = Evaluation(problem=self.spec, kernel_file=str(kernel_file), correct=True, verdict="pass",
                        timing_kind="interpreter", timings=[timing], score_us=10.0)
        if incumbent_file is not None:
            ev.vs_incumbent = Comparison(candidate_us=10.0, incumbent_us=10.0, noise_frac=0.01, significant=False)
        return ev

    def close(self):
        pass


def test_spent_call_budget_ends_the_run_cleanly(tmp_path):
    from agent_e2e import FAST, start_file
    from autokernel.loop.optimize import Target, run_optimize
    from autokernel.loop.results import read_results

    work = tmp_path / "ws"
    with FakeLLMServer([_file_reply(FAST)]) as server:
        config = AgentConfig(name="llm", llm="openai:fake-model", llm_base_url=server.openai_url, llm_max_calls=2)
        summary = run_optimize([Target("reduce", "reduce", start_file=start_file(tmp_path), dtype="fp32")], work, agent=config,
                               budget_s=None, max_experiments=10, device="cpu", show_progress=False,
                               _evaluator_factory=_PassingEvaluator)
    assert summary.stopped_reason == "agent-exhausted" and "budget spent" in summary.message
    assert [r.status for r in read_results(work / "results.tsv")] == ["baseline", "revert", "revert"]
    assert len(server.requests) == 2


def test_refused_key_ends_the_run_as_a_user_mistake(tmp_path, monkeypatch):
    """HTTP 401 is not worth a night of retries: the run stops at once with reason
    'agent-refused', and `autokernel optimize` exits 2 with the server's message."""
    from agent_e2e import start_file
    from autokernel.cli.optimize_cmd import _exit_for
    from autokernel.loop.optimize import Target, run_optimize
    from autokernel.loop.results import read_results

    work = tmp_path / "ws"
    with FakeLLMServer([Step.status(401)]) as server:
        config = AgentConfig(name="llm", llm="openai:fake-model", llm_base_url=server.openai_url)
        summary = run_optimize([Target("reduce", "reduce", start_file=start_file(tmp_path), dtype="fp32")], work, agent=config,
                               budget_s=None, max_experiments=10, device="cpu", show_progress=False,
                               _evaluator_factory=_PassingEvaluator)
    assert summary.stopped_reason == "agent-refused" and "HTTP 401" in summary.message
    assert [r.status for r in read_results(work / "results.tsv")] == ["baseline"]
    assert _exit_for(summary) == 2
