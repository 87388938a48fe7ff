"""A scripted LLM server over real HTTP, for tests: it speaks the OpenAI chat-completions API
(`POST /v1/chat/completions`) and the Anthropic messages API (`POST /v1/messages`).

    from llm_server import llm_server            # the fixture; or `with LLMServer() as server:`

    server.script("first reply", lambda req: "echo " + req.messages[-1]["content"])
    server.fail(429, times=2, retry_after=0)     # the next 2 requests get 429 with Retry-After: 0
    server.stall(1.0)                            # the next request waits 1 s, then gets 504
    server.garbage(b"<html>502</html>")          # the next request gets these bytes as its body
    server.models({"id": "m", "max_model_len": 4096})   # GET /v1/models lists these (else: 404)
    server.script("first reply", DIES)           # the second request: the server dies (the connection
                                                 # drops unanswered, the port closes; later ones are refused)
    LLMConfig("openai", "m", base_url=server.openai_url)          # or "anthropic", server.anthropic_url
    server.requests[-1].headers["authorization"]                 # what arrived: path, headers, body

A reply is a string, a dict {"text": str, "usage": (prompt_tokens, completion_tokens) | None}
(None: the answer has no usage block), or a callable of the `Received` request returning either.
Without "usage" the server reports whitespace-separated words (prompt: all message contents).
Faults come before replies, and a failed or stalled request consumes no reply. With no reply
left, or when a callable raises, the server answers 400 (not retried) saying so.
"""
from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import pytest

OPENAI_PATH = "/v1/chat/completions"
DIES = "llm_server: dies here"   # a reply that is the server dying at that request (a crash, a killed process)
ANTHROPIC_PATH = "/v1/messages"


@dataclass
class Received:
    path: str
    headers: dict[str, str]   # names lower-cased
    body: dict
    at: float = field(default_factory=time.monotonic)   # when it arrived

    @property
    def api(self) -> str:
        return "anthropic" if self.path == ANTHROPIC_PATH else "openai"

    @property
    def messages(self) -> list[dict]:
        """The conversation in OpenAI form, Anthropic's `system` put back as the first message."""
        system = self.body.get("system") if self.api == "anthropic" else None
        return ([{"role": "system", "content": system}] if system else []) + list(self.body.get("messages", []))


class LLMServer:
    def __init__(self):
        self.requests: list[Received] = []
        self._replies: deque = deque()
        self._faults: deque = deque()
        self._models: list[dict] | None = None
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name="llm_server",
                                        daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def openai_url(self) -> str:
        return self.url + "/v1"

    @property
    def anthropic_url(self) -> str:
        return self.url   # the Anthropic SDK appends /v1/messages itself

    def script(self, *replies: str | dict | Callable[[Received], str | dict]) -> "LLMServer":
        """Queue replies, served in order to the requests that are not faulted."""
        with self._lock:
            self._replies.extend(replies)
        return self

    def fail(self, status: int, times: int = 1, retry_after: float | None = None,
             message: str | None = None) -> "LLMServer":
        """Answer the next `times` requests with HTTP `status` (and a Retry-After header if given)."""
        with self._lock:
            self._faults.extend([("fail", status, retry_after, message or f"scripted {status}")] * times)
        return self

    def garbage(self, body: bytes, status: int = 200, content_type: str = "text/html") -> "LLMServer":
        """Answer the next request with `body` as it is (an HTML error page, a truncated JSON)."""
        with self._lock:
            self._faults.append(("raw", status, body, content_type))
        return self

    def stall(self, seconds: float, times: int = 1) -> "LLMServer":
        """Hold the next `times` requests for `seconds` (longer than the client's timeout), then answer 504."""
        with self._lock:
            self._faults.extend([("stall", seconds)] * times)
        return self

    def models(self, *entries: dict) -> "LLMServer":
        """Answer GET /v1/models with these model entries (vLLM's carry max_model_len)."""
        self._models = list(entries)
        return self

    @property
    def pending(self) -> int:
        """Replies not yet served."""
        return len(self._replies)

    def stop(self) -> None:
        """Close the port (later connections are refused) and wake stalled requests."""
        if not self._stopped.is_set():
            self._stopped.set()
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join()

    def __enter__(self) -> "LLMServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _answer(self, req: Received) -> tuple[int, dict, dict] | None:
        """(status, JSON body, extra headers) for one request; None: the server dies at it."""
        with self._lock:
            self.requests.append(req)
            fault = self._faults.popleft() if self._faults else None
            reply = self._replies.popleft() if fault is None and self._replies else None
        if fault and fault[0] == "stall":
            self._stopped.wait(fault[1])
            return _error(req.api, 504, "scripted stall")
        if fault and fault[0] == "raw":
            return fault[1], fault[2], {"Content-Type": fault[3]}
        if fault:
            _, status, retry_after, message = fault
            return _error(req.api, status, message, {} if retry_after is None else {"Retry-After": f"{retry_after:g}"})
        if reply is None:
            return _error(req.api, 400, "llm_server: no scripted reply left")
        try:
            reply = reply(req) if callable(reply) else reply
        except Exception as e:   # a broken script shows up as the client's error, not as a hang
            return _error(req.api, 400, f"llm_server: the scripted reply raised {e!r}")
        if reply is DIES:
            return None
        reply = {"text": reply} if isinstance(reply, str) else reply
        usage = reply.get("usage", (_words(m["content"] for m in req.messages), _words([reply["text"]])))
        return 200, _completion(req, reply["text"], usage), {}


def _words(texts) -> int:
    return sum(len(str(t).split()) for t in texts)


def _completion(req: Received, text: str, usage: tuple[int, int] | None) -> dict:
    model = req.body.get("model", "scripted")
    if req.api == "anthropic":
        body = {"id": "msg_scripted", "type": "message", "role": "assistant", "model": model,
                "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None}
        if usage is not None:
            body["usage"] = {"input_tokens": usage[0], "output_tokens": usage[1]}
        return body
    body = {"id": "chatcmpl-scripted", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}
    if usage is not None:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    return body


def _error(api: str, status: int, message: str, headers: dict | None = None) -> tuple[int, dict, dict]:
    kind = "rate_limit_error" if status == 429 else "api_error" if status >= 500 else "invalid_request_error"
    if api == "anthropic":
        return status, {"type": "error", "error": {"type": kind, "message": message}}, headers or {}
    return status, {"error": {"message": message, "type": kind, "code": None}}, headers or {}


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False   # stop() must not wait for a stalled handler
    owner: LLMServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        path = self.path.split("?", 1)[0]
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        if path not in (OPENAI_PATH, ANTHROPIC_PATH):
            return self._send(404, {"error": {"message": f"llm_server: no route {path}"}}, {})
        try:
            body = json.loads(raw)
        except ValueError:
            return self._send(400, {"error": {"message": "llm_server: the body is not JSON"}}, {})
        headers = {k.lower(): v for k, v in self.headers.items()}
        answer = self.server.owner._answer(Received(path, headers, body))
        if answer is None:   # it dies: the port closes, and this connection ends with no answer
            self.server.owner.stop()
            self.close_connection = True
            return
        self._send(*answer)

    def do_GET(self):
        models = self.server.owner._models
        if self.path.split("?", 1)[0] != "/v1/models" or models is None:
            return self._send(404, {"error": {"message": f"llm_server: no route {self.path}"}}, {})
        self._send(200, {"object": "list", "data": [{"object": "model", "created": 0, "owned_by": "test", **m}
                                                    for m in models]}, {})

    def _send(self, status: int, body: dict | bytes, headers: dict) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        try:
            self.send_response(status)
            for name, value in {"Content-Type": "application/json", **headers, "Content-Length": str(len(data))}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass   # the client gave up (a stall past its timeout)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def llm_server():
    """A running LLMServer, stopped after the test."""
    with LLMServer() as server:
        yield server
