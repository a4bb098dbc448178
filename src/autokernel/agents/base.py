"""The agent protocol: ``propose(context) -> Proposal``.

An agent sees what a human expert would look at (``Context``) and returns a whole new kernel
file (``Proposal.source``) with a one-line description.  The loop owns the file on disk, git
and the evaluation; an agent never writes to the workspace except the ``command`` agent, whose
external tool edits ``kernel.py`` in place (the loop reads it back and undoes anything else).

Agents:

* ``tuner``   — offline, deterministic for a seed: turns the knobs a kernel file declares.
* ``llm``     — an OpenAI-compatible or Anthropic chat model rewrites the kernel.
* ``command`` — an external coding agent CLI run as a subprocess in the problem directory.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from ..harness.records import Evaluation
from ..problems.base import Problem


@dataclass
class Proposal:
    source: str | None  # the whole new kernel file; None when the agent produced nothing valid
    description: str
    # When the agent could not produce a file, why (recorded as status "rejected", and shown
    # to the agent next time as the last failure).
    rejected_reason: str | None = None
    tokens: int = 0  # model tokens spent on this proposal (0 for offline agents)


@dataclass
class Context:
    problem: Problem
    problem_spec: str  # the kind or problem-file path, as given
    problem_dir: Path  # the directory that holds kernel.py
    kernel_path: Path  # <problem_dir>/kernel.py (the current best, on disk)
    best_source: str
    best: Evaluation | None  # evaluation of the current best (None before the first one)
    start: Evaluation | None  # evaluation of the starting kernel
    history: list[dict[str, str]]  # rows of results.tsv for this problem, oldest first
    last_failure: dict[str, str] | None  # {"status", "stage", "message", "description"}
    experiment: int  # number of the experiment being proposed
    device: str
    seed: int = 0
    playbook: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    # When the run's budget ends (``time.monotonic()`` seconds; None: no budget): an agent that
    # waits (for a model endpoint that went away) waits no longer, and raises ``NoProposal``.
    deadline: float | None = None
    # Where an agent says something the user should see at once (the loop's progress lines).
    notify: Callable[[str], None] | None = None


class Agent(Protocol):
    name: str

    def propose(self, context: Context) -> Proposal: ...


@dataclass
class AgentConfig:
    """Everything any agent may be configured with from the command line."""

    name: str = "tuner"
    seed: int = 0
    llm: str | None = None  # "openai:MODEL" | "anthropic:MODEL"
    llm_base_url: str | None = None
    llm_max_calls: int | None = None
    llm_timeout_s: float = 300.0
    agent_cmd: str | None = None  # command agent: shell command with {prompt_file}
    agent_timeout_s: float = 1800.0


AGENT_NAMES = ("tuner", "llm", "command")


class AgentConfigError(ValueError):
    """A bad agent configuration (user mistake, exit code 2)."""


class AgentExhausted(RuntimeError):
    """Raised by ``propose`` when the agent can make no more proposals: its call budget
    (``--llm-max-calls``) is spent, or the endpoint refuses it for good (bad key, unknown
    model).  No experiment happened: the loop records no row, stops asking this agent, and
    ends the run cleanly with ``str(exc)`` as the reason (a message on screen, exit 0)."""


class NoProposal(RuntimeError):
    """Raised by ``propose`` when no proposal came and no experiment happened, but the run may
    go on (the budget ended while the model endpoint was unreachable): the loop records no
    row and makes no commit for it."""


class AgentRefused(AgentExhausted):
    """The agent's service refuses it for good (bad key, unknown model): a user mistake, so
    the run ends like ``AgentExhausted`` but the command exits 2."""


def make_agent(config: AgentConfig) -> Agent:
    if config.name == "tuner":
        from .tuner import TunerAgent

        return TunerAgent(seed=config.seed)
    if config.name == "llm":
        from .llm import make_llm_agent

        return make_llm_agent(config)
    if config.name == "command":
        from .command import CommandAgent

        if not config.agent_cmd:
            raise AgentConfigError("--agent command needs --agent-cmd \"...{prompt_file}...\"")
        return CommandAgent(config.agent_cmd, timeout_s=config.agent_timeout_s)
    raise AgentConfigError(f"unknown agent {config.name!r}; choose one of {', '.join(AGENT_NAMES)}")
