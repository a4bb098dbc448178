"""A scripted model endpoint on loopback for the llm agent tests.

Speaks the two protocols the agent uses: OpenAI chat completions (``POST
/v1/chat/completions``) and Anthropic messages (``POST /v1/messages``).  Each request takes
the next scripted step:

* ``Step.text("...", prompt_tokens, completion_tokens)`` — a normal answer;
* ``Step.status(429)`` — an error answer with that HTTP status;
* ``Step.hang(seconds)`` — no answer for that long (the client times out first).

When the script runs out, the last step repeats.  Every request is recorded (path, headers,
JSON body).  ``reply_delay_s`` makes every answer wait that long (a slow model); requests are
served concurrently, and ``max_open`` says how many were open at once at most.  The server
runs on a daemon thread, never longer than ``lifetime_s``, and stops when the context manager
exits.  ``GET .../models`` (the agent's check before the first experiment) answers a model list,
or the status ``models_status`` when set; it is counted in ``model_lists``, not in ``requests``.
``port`` binds a given port (0: any free one).
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Step:
    kind: str  # "text" | "status" | "hang"
    text: str = ""
    status_code: int = 200
    seconds: float = 0.0
    prompt_tokens: int = 100
    completion_tokens: int = 50

    @classmethod
    def reply(cls, text: str, prompt_tokens: int = 100, completion_tokens: int = 50) -> "Step":
        return cls("text", text=text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)

    @classmethod
    def status(cls, code: int) -> "Step":
        return cls("status", status_code=code)

    @classmethod
    def hang(cls, seconds: float) -> "Step":
        return cls("hang", seconds=seconds)


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: dict

    @property
    def prompt(self) -> str:
        """The whole prompt text (system + messages) of either protocol."""
        parts = []
        system = self.body.get("system")
        if isinstance(system, str):
            parts.append(system)
        for m in self.body.get("messages", []):
            content = m.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts.extend(c.get("text", "") for c in content if isinstance(c, dict))
        return "\n".join(parts)


@dataclass
class FakeLLMServer:
    script: list[Step]
    lifetime_s: float = 600.0
    requests: list[Request] = field(default_factory=list)
    reply_delay_s: float = 0.0
    max_open: int = 0
    models_status: int = 200
    port_wanted: int = 0
    model_lists: int = 0

    def __post_init__(self):
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._next = 0
        self._open = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def do_GET(self):
                if not self.path.rstrip("/").endswith("/models"):
                    self._send(404, {"error": {"message": "not found"}})
                    return
                with server._lock:
                    server.model_lists += 1
                if server.models_status != 200:
                    self._send(server.models_status, {"error": {"message": "invalid api key", "type": "auth"}})
                    return
                self._send(200, {"object": "list", "data": [{"id": "fake-model", "object": "model",
                                                              "type": "model", "created_at": "2024-01-01T00:00:00Z",
                                                              "display_name": "fake", "created": 0,
                                                              "owned_by": "test"}],
                                 "has_more": False, "first_id": "fake-model", "last_id": "fake-model"})

            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                step = server._take(Request(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                with server._lock:
                    server._open += 1
                    server.max_open = max(server.max_open, server._open)
                try:
                    if server.reply_delay_s:
                        server._stop.wait(server.reply_delay_s)
                    self._answer(step, body)
                finally:
                    with server._lock:
                        server._open -= 1

            def _answer(self, step, body):
                if step.kind == "hang":
                    server._stop.wait(step.seconds)
                    return
                anthropic = self.path.rstrip("/").endswith("/messages")
                if step.kind == "status":
                    payload = ({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
                               if anthropic else {"error": {"message": "slow down", "type": "rate_limit"}})
                    self._send(step.status_code, payload, {"retry-after": "0"})
                    return
                self._send(200, _anthropic_answer(step, body) if anthropic else _openai_answer(step, body))

            def _send(self, code: int, payload: dict, headers: dict | None = None):
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port_wanted), Handler)
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._timer = threading.Timer(self.lifetime_s, self.close)
        self._timer.daemon = True

    # -------------------------------------------------------------- control
    def start(self) -> "FakeLLMServer":
        self._thread.start()
        self._timer.start()
        return self

    def close(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._timer.cancel()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "FakeLLMServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _take(self, request: Request) -> Step:
        with self._lock:
            self.requests.append(request)
            step = self.script[min(self._next, len(self.script) - 1)]
            self._next += 1
            return step


def _openai_answer(step: Step, body: dict) -> dict:
    return {
        "id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": body.get("model", "fake"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": step.text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": step.prompt_tokens, "completion_tokens": step.completion_tokens,
                  "total_tokens": step.prompt_tokens + step.completion_tokens},
    }


def _anthropic_answer(step: Step, body: dict) -> dict:
    return {
        "id": "msg_fake", "type": "message", "role": "assistant", "model": body.get("model", "fake"),
        "content": [{"type": "text", "text": step.text}], "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": step.prompt_tokens, "output_tokens": step.completion_tokens},
    }
