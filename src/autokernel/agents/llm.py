"""The ``llm`` agent: a chat model rewrites the kernel file.

``--llm openai:MODEL`` talks to any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM,
Ollama, llama.cpp server, OpenRouter; ``--llm-base-url``, key from ``OPENAI_API_KEY``, a
placeholder key for local servers that need none).  ``--llm anthropic:MODEL`` talks to the
Anthropic Messages API (key from ``ANTHROPIC_API_KEY``).  The SDKs are the optional extra
``autokernel[llm]``, imported only when this agent is built.

Before the first experiment ``preflight`` lists the endpoint's models once: an endpoint that
cannot be reached at all (connection refused, no such host, no connection in time) or that
refuses the key (401/403) is an ``AgentConfigError`` (exit 2, nothing written).

Each proposal is one stateless request (system + user message from ``prompt.py``); the reply
is parsed by ``parse.py``.  Transient errors (429, 5xx, timeouts, dropped connections) are
retried with exponential backoff, a bounded number of times.  When they persist:

* an outage (no connection, or HTTP 5xx): the agent waits for the endpoint, asking again
  further and further apart (``RetryPolicy.outage_wait``), says once when it went away and
  once when it is back (``Context.notify``), and answers when it does; no experiment is
  recorded meanwhile.  The budget's end (``Context.deadline``) ends the wait with
  ``NoProposal``; ``unreachable_seconds()`` is the time it was gone, for the summary;
* anything else (429, a slow answer): the experiment is ``rejected`` with the reason and the
  loop goes on, after a pause that grows with each such failure in a row (8 in a row, or 3
  refused requests such as HTTP 400, end the run through ``AgentExhausted``).

``--llm-max-calls`` bounds
the requests of one run (retries of a failed request are not counted): when it is spent,
``propose`` raises ``AgentExhausted``, as it does when the endpoint refuses the key or the
model.  Prompts and replies are logged, with every credential scrubbed.
"""
from __future__ import annotations

import os
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from .base import AgentConfig, AgentConfigError, AgentExhausted, AgentRefused, Context, NoProposal, Proposal
from .parse import parse_reply
from .prompt import build_messages
from .redact import scrub, secret_values
from .workdirs import agent_log_dir

PROVIDERS = ("openai", "anthropic")
PLACEHOLDER_KEY = "no-key-needed"
DEFAULT_MAX_OUTPUT_TOKENS = 8192
RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529}
FATAL_STATUS = {401, 403, 404}
CHECK_TIMEOUT_S = 20.0  # the check before the first experiment


@dataclass
class Reply:
    text: str
    tokens: int  # prompt + completion tokens, as the server reported them (estimated if not)


class ChatClient(Protocol):
    model: str

    def complete(self, system: str, user: str) -> Reply: ...


class TransientError(Exception):
    """A failure worth retrying (rate limit, server error, timeout).  ``outage``: the endpoint
    gave no answer at all (connection refused or dropped, no such host) or answered that it is
    down (HTTP 5xx): the agent waits for it to come back instead of failing experiments."""

    def __init__(self, message: str, retry_after: float | None = None, outage: bool = False):
        super().__init__(message)
        self.retry_after = retry_after
        self.outage = outage


class FatalError(Exception):
    """The endpoint refuses us for good (bad key, unknown model)."""


class RequestError(Exception):
    """This request failed, but the next one may work (e.g. the prompt was too long)."""


# ------------------------------------------------------------------ SDK clients
def _import_sdk(name: str):
    try:
        return __import__(name)
    except ImportError:
        raise AgentConfigError(
            f"the llm agent needs the {name} package: pip install 'autokernel[llm]'") from None


def _classify(exc: Exception, sdk) -> Exception:
    """Map an SDK exception to TransientError / FatalError / RequestError."""
    if isinstance(exc, sdk.APITimeoutError):
        if _connect_timed_out(exc):  # no TCP connection at all (a host that drops packets): an outage
            return TransientError("connection timed out", outage=True)
        return TransientError("request timed out")
    if isinstance(exc, sdk.APIConnectionError):
        return TransientError(f"request connection failed ({_connection_cause(exc)})", outage=True)
    status = getattr(exc, "status_code", None)
    message = _error_message(exc)
    if status in RETRYABLE_STATUS or (status is not None and status >= 500):
        return TransientError(f"HTTP {status}: {message}", _retry_after(exc), outage=status >= 500)
    if status in FATAL_STATUS:
        return FatalError(f"HTTP {status}: {message}")
    return RequestError(f"HTTP {status}: {message}" if status else message)


def _connect_timed_out(exc: BaseException) -> bool:
    """The timeout came before any connection was made (httpx's ConnectTimeout in the chain)."""
    while exc is not None:
        if type(exc).__name__ == "ConnectTimeout":
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _connection_cause(exc: BaseException) -> str:
    """The innermost reason of a failed connection: 'Connection refused', 'Name or service not known'."""
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__
    text = str(exc)
    if "] " in text and text.startswith("["):  # "[Errno 111] Connection refused"
        text = text.split("] ", 1)[1]
    return text[:200] or type(exc).__name__


def _check_endpoint(list_models: Callable[[], Any], sdk, endpoint: str, fix_hint: str, key_hint: str) -> None:
    """Before the first experiment: one cheap request (list the models).  An endpoint that
    cannot be reached at all, or that refuses the key, is a configuration mistake
    (``AgentConfigError``, exit 2).  Anything else (no such route, a server error, a slow
    answer) lets the run start: the experiments' own requests will tell."""
    try:
        list_models()
    except sdk.APIConnectionError as exc:  # APITimeoutError included
        if isinstance(exc, sdk.APITimeoutError) and not _connect_timed_out(exc):
            return  # connected, but slow to answer
        cause = "connection timed out" if isinstance(exc, sdk.APITimeoutError) else _connection_cause(exc)
        raise AgentConfigError(f"cannot reach the model endpoint {endpoint} ({cause}): {fix_hint}") from None
    except sdk.APIStatusError as exc:
        if exc.status_code in (401, 403):
            raise AgentConfigError(f"the model endpoint {endpoint} refused the key (HTTP {exc.status_code}: "
                                   f"{_error_message(exc)}): {key_hint}") from None
    except Exception:
        return


def _endpoint_check(client, sdk, endpoint: str, base_url: str | None, timeout_s: float,
                    key_variable: str) -> Callable[[], None]:
    """The chat client's ``check`` (``LLMAgent.preflight``): its model list, asked once, within
    ``CHECK_TIMEOUT_S`` at most."""
    quick = client.with_options(timeout=min(timeout_s, CHECK_TIMEOUT_S))
    return lambda: _check_endpoint(quick.models.list, sdk, endpoint, _fix_hint(base_url),
                                   f"set {key_variable} to a key this endpoint accepts")


def _fix_hint(base_url: str | None) -> str:
    if base_url:
        return "start the server, or fix --llm-base-url (scheme, host, port and path, e.g. http://localhost:8000/v1)"
    return "check this machine's network access and proxy settings (HTTPS_PROXY, NO_PROXY)"


def _error_message(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:300]
    return str(exc)[:300]


def _retry_after(exc: Exception) -> float | None:
    response = getattr(exc, "response", None)
    try:
        value = response.headers.get("retry-after") if response is not None else None
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _estimate_tokens(*texts: str) -> int:
    return sum(len(t) for t in texts) // 4


class OpenAIChat:
    def __init__(self, model: str, api_key: str, base_url: str | None, timeout_s: float,
                 max_output_tokens: int | None = None):
        self.sdk = _import_sdk("openai")
        self.model = model
        self.max_output_tokens = max_output_tokens
        self.client = self.sdk.OpenAI(api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=0)
        self.endpoint = str(self.client.base_url).rstrip("/")
        self.check = _endpoint_check(self.client, self.sdk, self.endpoint, base_url, timeout_s, "OPENAI_API_KEY")

    def complete(self, system: str, user: str) -> Reply:
        kwargs: dict[str, Any] = {}
        if self.max_output_tokens:
            kwargs["max_tokens"] = self.max_output_tokens
        try:
            resp = self.client.chat.completions.create(
                model=self.model,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                **kwargs)
        except self.sdk.OpenAIError as exc:
            raise _classify(exc, self.sdk) from None
        except Exception as exc:  # a malformed answer from a home-grown server
            raise RequestError(f"{type(exc).__name__}: {str(exc)[:300]}") from None
        choices = getattr(resp, "choices", None) or []
        text = (choices[0].message.content or "") if choices else ""
        usage = getattr(resp, "usage", None)
        tokens = getattr(usage, "total_tokens", None) if usage is not None else None
        if tokens is None and usage is not None:
            tokens = (getattr(usage, "prompt_tokens", 0) or 0) + (getattr(usage, "completion_tokens", 0) or 0)
        return Reply(text, int(tokens) if tokens else _estimate_tokens(system, user, text))


class AnthropicChat:
    def __init__(self, model: str, api_key: str, base_url: str | None, timeout_s: float,
                 max_output_tokens: int | None = None):
        self.sdk = _import_sdk("anthropic")
        self.model = model
        self.max_output_tokens = max_output_tokens or DEFAULT_MAX_OUTPUT_TOKENS
        self.client = self.sdk.Anthropic(api_key=api_key, base_url=base_url, timeout=timeout_s, max_retries=0)
        self.endpoint = str(self.client.base_url).rstrip("/")
        self.check = _endpoint_check(self.client, self.sdk, self.endpoint, base_url, timeout_s, "ANTHROPIC_API_KEY")

    def complete(self, system: str, user: str) -> Reply:
        try:
            resp = self.client.messages.create(
                model=self.model, max_tokens=self.max_output_tokens, system=system,
                messages=[{"role": "user", "content": user}])
        except self.sdk.AnthropicError as exc:
            raise _classify(exc, self.sdk) from None
        except Exception as exc:
            raise RequestError(f"{type(exc).__name__}: {str(exc)[:300]}") from None
        text = "".join(getattr(block, "text", "") for block in (resp.content or [])
                       if getattr(block, "type", "") == "text")
        usage = getattr(resp, "usage", None)
        tokens = ((getattr(usage, "input_tokens", 0) or 0) + (getattr(usage, "output_tokens", 0) or 0)) if usage else 0
        return Reply(text, int(tokens) if tokens else _estimate_tokens(system, user, text))


# ------------------------------------------------------------------ retries
@dataclass
class RetryPolicy:
    attempts: int = 4  # requests per proposal, first one included
    base_delay_s: float = 2.0
    max_delay_s: float = 60.0
    # Across proposals: after a proposal whose request failed for good (not an outage: a rate
    # limit that does not lift, timeouts, refused requests), wait before the next one (15x the
    # base delay, doubling per failure in a row, at most 10 minutes), and give up after this
    # many in a row — an endpoint that rejects every request must not fill the night with
    # rejected experiments.
    max_failed_in_a_row: int = 8
    max_rejected_in_a_row: int = 3  # HTTP 400-like errors repeat identically: stop sooner
    # An outage (no connection, HTTP 5xx, after ``attempts`` requests): wait for the endpoint,
    # retrying after outage_first_s, doubling, at most outage_max_s apart, until it answers or
    # the budget ends.  No experiment is recorded meanwhile.
    outage_first_s: float = 5.0
    outage_max_s: float = 180.0

    def outage_wait(self, tries: int) -> float:
        """Seconds before the request number ``tries`` (1-based) made during an outage."""
        return max(min(self.outage_first_s * 2 ** (tries - 1), self.outage_max_s), 0.01)

    def cooldown(self, failed_in_a_row: int) -> float:
        if failed_in_a_row <= 0:
            return 0.0
        return min(15.0 * self.base_delay_s * 2 ** (failed_in_a_row - 1), 600.0)

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        backoff = self.base_delay_s * (2 ** (attempt - 1)) * (1.0 + 0.25 * random.random())
        if retry_after is not None:
            backoff = max(backoff, retry_after)
        return min(backoff, self.max_delay_s)


def call_with_retries(call: Callable[[], Reply], policy: RetryPolicy,
                      sleep: Callable[[float], None] = time.sleep) -> tuple[Reply, int]:
    """Run ``call`` until it succeeds; returns the reply and the number of attempts.
    Raises the last TransientError when every attempt failed; FatalError and RequestError
    are raised at once."""
    for attempt in range(1, policy.attempts + 1):
        try:
            return call(), attempt
        except TransientError as exc:
            if attempt == policy.attempts:
                raise TransientError(f"{exc} (after {attempt} attempts)", outage=exc.outage) from None
            sleep(policy.delay(attempt, exc.retry_after))
    raise AssertionError("unreachable")


# ------------------------------------------------------------------ the agent
class LLMAgent:
    name = "llm"

    def __init__(self, client: ChatClient, *, max_calls: int | None = None,
                 retry: RetryPolicy | None = None, secrets: list[str] | None = None):
        self.client = client
        self.max_calls = max_calls
        self.retry = retry or RetryPolicy()
        self.calls = 0
        self.tokens = 0
        self.failed_in_a_row = 0  # proposals whose request failed, since the last answer
        self.rejected_in_a_row = 0  # of those, requests the endpoint refused (HTTP 400...)
        self._secrets = secrets or []
        self._sleep = time.sleep
        self._count_lock = threading.Lock()
        self._outage_lock = threading.Lock()
        self._endpoint_back = threading.Condition(self._outage_lock)
        self._outage_since: float | None = None  # time.monotonic() when the endpoint went away
        self._outages_ended = 0  # slots waiting out an outage (--parallel) wake when this grows
        self.unreachable_s = 0.0  # over the outages that ended
        self.outages = 0

    @property
    def endpoint(self) -> str:
        return getattr(self.client, "endpoint", "") or f"of {self.client.model}"

    def preflight(self) -> None:
        """Before the first experiment: ``AgentConfigError`` when the endpoint cannot be reached
        at all or refuses the key (the client's ``check``, where it has one)."""
        check = getattr(self.client, "check", None)
        if check is not None:
            check()

    def unreachable_seconds(self) -> float:
        """How long the endpoint was unreachable in this run, an outage still going on included."""
        with self._outage_lock:
            ongoing = time.monotonic() - self._outage_since if self._outage_since is not None else 0.0
            return self.unreachable_s + ongoing

    def _outage_begins(self, since: float, reason: str, context: Context) -> None:
        with self._outage_lock:
            if self._outage_since is not None:
                return
            self._outage_since = since
            self.outages += 1
        _say(context, f"model endpoint {self.endpoint} unreachable ({reason}); waiting for it, no experiment "
                      f"is recorded meanwhile (retrying from every {self.retry.outage_first_s:g} s to every "
                      f"{self.retry.outage_max_s:g} s; Ctrl-C stops the run)", secret_values(self._secrets))

    def _outage_ends(self, context: Context) -> None:
        with self._outage_lock:
            if self._outage_since is None:
                return
            gone = time.monotonic() - self._outage_since
            self._outage_since = None
            self.unreachable_s += gone
            self._outages_ended += 1
            self._endpoint_back.notify_all()
        _say(context, f"model endpoint {self.endpoint} is back after {_duration(gone)} unreachable",
             secret_values(self._secrets))

    def _wait_unless_back(self, seconds: float, outages_ended: int) -> None:
        """Sleep ``seconds`` of an outage's backoff, or less: until another slot's request is
        answered (``--parallel``), so that no slot sleeps on once the endpoint is back."""
        with self._endpoint_back:
            self._endpoint_back.wait_for(lambda: self._outages_ended != outages_ended, timeout=seconds)

    def _pause(self, seconds: float, context: Context, log: "_Log") -> None:
        """The pause after failed proposals, never past the budget's end (then ``NoProposal``)."""
        if seconds > 0 and context.deadline is not None and time.monotonic() + seconds >= context.deadline:
            self._sleep(max(context.deadline - time.monotonic(), 0.0))
            log.write("error.txt", "the budget ended during the pause after failed model requests\n")
            raise NoProposal("the budget ended during the pause after failed model requests")
        self._sleep(seconds)

    def _wait_for_endpoint(self, call: Callable[[], Reply], since: float, exc: TransientError,
                           context: Context, log: "_Log") -> Reply:
        """An outage: ask again, further and further apart, until an answer or the deadline
        (``NoProposal``).  An answer that is not an outage (even an error) ends it."""
        self._outage_begins(since, str(exc), context)
        with self._outage_lock:
            outages_ended = self._outages_ended
        tries = 0
        while True:
            tries += 1
            wait = self.retry.outage_wait(tries)
            if context.deadline is not None:
                left = context.deadline - time.monotonic()
                if left <= 0:
                    log.write("error.txt", f"the budget ended while the model endpoint was unreachable ({exc})\n")
                    raise NoProposal(f"the budget ended while the model endpoint was unreachable ({exc})")
                wait = min(wait, left)
            self._wait_unless_back(wait, outages_ended)
            with self._outage_lock:
                if self._outages_ended != outages_ended:  # back for another slot: its backoff starts over
                    outages_ended, tries = self._outages_ended, 0
            if context.deadline is not None and time.monotonic() >= context.deadline:
                continue  # said above, on the next turn
            try:
                reply = call()
            except TransientError as again:
                if again.outage:
                    exc = again
                    self._outage_begins(time.monotonic(), str(exc), context)  # unless one is on (--parallel)
                    with self._outage_lock:
                        outages_ended = self._outages_ended
                    continue
                self._outage_ends(context)
                raise
            except (FatalError, RequestError):
                self._outage_ends(context)
                raise
            self._outage_ends(context)
            return reply

    def propose(self, context: Context) -> Proposal:
        with self._count_lock:  # the loop may ask from several threads (--parallel): check and count at once
            if self.max_calls is not None and self.calls >= self.max_calls:
                raise AgentExhausted(f"LLM call budget spent ({self.calls} of --llm-max-calls {self.max_calls})")
            self.calls += 1
        secrets = secret_values(self._secrets)
        system, user = build_messages(context)
        log = _Log(context, secrets)
        log.write("prompt.md", f"# system\n\n{system}\n\n# user\n\n{user}\n")
        self._pause(self.retry.cooldown(self.failed_in_a_row), context, log)
        call = lambda: self.client.complete(system, user)  # noqa: E731
        try:
            since = time.monotonic()
            try:
                reply, _ = call_with_retries(call, self.retry, self._sleep)
            except TransientError as exc:
                if not exc.outage:
                    raise
                reply = self._wait_for_endpoint(call, since, exc, context, log)
            else:
                self._outage_ends(context)  # an answer here ends another slot's outage (--parallel)
        except FatalError as exc:
            reason = scrub(f"the model endpoint refused the request: {exc}", secrets)
            log.write("error.txt", reason + "\n")
            raise AgentRefused(reason) from None
        except (TransientError, RequestError) as exc:
            reason = scrub(f"LLM request failed: {exc}", secrets)
            log.write("error.txt", reason + "\n")
            self.failed_in_a_row += 1
            self.rejected_in_a_row = self.rejected_in_a_row + 1 if isinstance(exc, RequestError) else 0
            if self.rejected_in_a_row >= self.retry.max_rejected_in_a_row:
                raise AgentExhausted(f"the model endpoint rejected {self.rejected_in_a_row} requests in a row; last: {reason}")
            if self.failed_in_a_row >= self.retry.max_failed_in_a_row:
                raise AgentExhausted(f"{self.failed_in_a_row} model requests in a row failed; last: {reason}")
            return Proposal(None, "LLM request failed", rejected_reason=reason, tokens=0)
        self.failed_in_a_row = self.rejected_in_a_row = 0
        self.tokens += reply.tokens
        log.write("reply.md", reply.text)
        parsed = parse_reply(reply.text, context.best_source)
        description = scrub(parsed.description, secrets)
        if parsed.source is None:
            return Proposal(None, description, rejected_reason=scrub(parsed.error or "no file", secrets),
                            tokens=reply.tokens)
        return Proposal(scrub(parsed.source, secrets), description, tokens=reply.tokens)


def _say(context: Context, line: str, secrets: list[str]) -> None:
    if context.notify is not None:
        context.notify(scrub(line, secrets))


def _duration(seconds: float) -> str:
    from ..loop.budget import format_duration

    return format_duration(seconds)


class _Log:
    """Prompt and reply files of one experiment in the agent log directory."""

    def __init__(self, context: Context, secrets: list[str]):
        self.dir = agent_log_dir(context)
        self.stem = f"llm-{context.experiment:04d}"
        self.secrets = secrets

    def write(self, suffix: str, text: str) -> Path:
        path = self.dir / f"{self.stem}-{suffix}"
        path.write_text(scrub(text, self.secrets), encoding="utf-8")
        return path


# ------------------------------------------------------------------ construction
def parse_llm_spec(spec: str | None) -> tuple[str, str]:
    if not spec or ":" not in spec:
        raise AgentConfigError("--agent llm needs --llm openai:MODEL or --llm anthropic:MODEL")
    provider, _, model = spec.partition(":")
    provider = provider.strip().lower()
    if provider not in PROVIDERS:
        raise AgentConfigError(f"unknown LLM provider {provider!r} in --llm {spec!r}; use openai:MODEL or anthropic:MODEL")
    if not model.strip():
        raise AgentConfigError(f"--llm {spec!r} names no model; use {provider}:MODEL")
    return provider, model.strip()


def make_client(config: AgentConfig) -> tuple[ChatClient, str]:
    provider, model = parse_llm_spec(config.llm)
    if config.llm_timeout_s is None or config.llm_timeout_s <= 0:
        raise AgentConfigError("the LLM request timeout must be a positive number of seconds")
    max_out = _env_int("AUTOKERNEL_LLM_MAX_TOKENS")
    if provider == "openai":
        key = os.environ.get("OPENAI_API_KEY", "").strip()
        if not key:
            if not config.llm_base_url:
                raise AgentConfigError("set OPENAI_API_KEY (or pass --llm-base-url for a local server that needs no key)")
            key = PLACEHOLDER_KEY
        return OpenAIChat(model, key, config.llm_base_url, config.llm_timeout_s, max_out), key
    key = os.environ.get("ANTHROPIC_API_KEY", "").strip()
    if not key:
        if not config.llm_base_url:
            raise AgentConfigError("set ANTHROPIC_API_KEY to use --llm anthropic:MODEL")
        key = PLACEHOLDER_KEY
    return AnthropicChat(model, key, config.llm_base_url, config.llm_timeout_s, max_out), key


def make_llm_agent(config: AgentConfig) -> LLMAgent:
    if config.llm_max_calls is not None and config.llm_max_calls < 1:
        raise AgentConfigError("--llm-max-calls must be at least 1")
    client, key = make_client(config)
    retry = RetryPolicy()
    attempts = _env_int("AUTOKERNEL_LLM_ATTEMPTS")
    if attempts:
        retry.attempts = attempts
    for name, attr in (("AUTOKERNEL_LLM_BACKOFF_S", "base_delay_s"), ("AUTOKERNEL_LLM_OUTAGE_WAIT_S", "outage_first_s"),
                       ("AUTOKERNEL_LLM_OUTAGE_MAX_WAIT_S", "outage_max_s")):
        value = os.environ.get(name, "").strip()
        if value:
            try:
                setattr(retry, attr, max(0.0, float(value)))
            except ValueError:
                raise AgentConfigError(f"{name} must be a number, not {value!r}") from None
    retry.outage_max_s = max(retry.outage_max_s, retry.outage_first_s)
    return LLMAgent(client, max_calls=config.llm_max_calls, retry=retry, secrets=[key])


def _env_int(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    try:
        return max(1, int(value))
    except ValueError:
        raise AgentConfigError(f"{name} must be an integer, not {value!r}") from None
