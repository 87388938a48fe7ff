"""Host side of ctx.llm: a unix socket, served for one execution, answered by the run's LLM layer.

    with LLMChannel(answer, LLMBudget(max_requests=32), job_root / "llm") as channel:
        executor.run(CurationJob(..., llm_socket=channel.socket), limits)
    channel.failure            # one sentence when the candidate broke its budget or the LLM failed
    channel.records_sha256()   # the manifest's llm_record_sha256

`answer(request) -> response` is the caller's: request {"messages": [{"role", "content"}],
"max_tokens"}, response {"text", "prompt_tokens", "completion_tokens"}; the loop binds it to
evolver/llm.py (budgets, content-addressed records read back offline), so a replay answers from the records
without a network. The candidate sends one JSON line per connection and gets one back; nothing
else crosses: no key, no URL, no header. Requests and tokens are counted here, on the host; a
request past the budget is refused and the execution fails even if the strategy catches the error.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from sandbox.llm_client import read_line
from base.schemas import canonical_json

SOCKET_NAME = "llm.sock"
ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class LLMBudget:
    """What one candidate may ask of the host's LLM."""

    max_requests: int = 64
    max_tokens: int = 200_000           # prompt + completion, all requests together
    max_request_bytes: int = 256 * 2**10
    max_tokens_per_request: int = 2048  # the largest max_tokens a request may ask for


class LLMChannel:
    def __init__(self, answer: Callable[[dict], Mapping], budget: LLMBudget, folder: Path):
        self.answer, self.budget, self.folder = answer, budget, Path(folder)
        self.socket = self.folder / SOCKET_NAME
        self.exchanges: list[dict] = []
        self.failure: str | None = None
        self.tokens = 0
        self._server: socket.socket | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------- lifecycle

    def __enter__(self) -> "LLMChannel":
        self.folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o755)
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(self.socket))
        os.chmod(self.socket, 0o666)   # the sandbox's unprivileged user connects
        self._server.listen(4)
        self._server.settimeout(0.1)
        self._thread = threading.Thread(target=self._serve, name="llm-channel", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self._server is not None:
            self._server.close()

    def usage(self) -> dict:
        return {"requests": len(self.exchanges), "tokens": self.tokens, "failure": self.failure}

    def records_sha256(self) -> str:
        """One hash of the exchanges this execution used, independent of their arrival order."""
        digests = sorted(hashlib.sha256(canonical_json(e).encode()).hexdigest() for e in self.exchanges)
        return hashlib.sha256("\n".join(digests).encode()).hexdigest()

    # ---------------------------------------------------------------- serving

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except (socket.timeout, OSError):
                continue
            with conn:
                conn.settimeout(30)
                try:
                    reply = self._reply(self._read(conn))
                    conn.sendall(json.dumps(reply, ensure_ascii=False).encode() + b"\n")
                except (OSError, ValueError):
                    continue

    def _read(self, conn: socket.socket) -> bytes | None:
        """One line, or None when it passes the size cap."""
        return read_line(conn, self.budget.max_request_bytes)

    def _fail(self, sentence: str) -> dict:
        self.failure = self.failure or sentence
        return {"error": sentence}

    def _reply(self, line: bytes | None) -> dict:
        b = self.budget
        if self.failure:
            return {"error": self.failure}
        if line is None:
            return self._fail(f"an LLM request was larger than {b.max_request_bytes} bytes")
        request = _request(line, b.max_tokens_per_request)
        if isinstance(request, str):
            return self._fail(f"a malformed LLM request: {request}")
        if len(self.exchanges) >= b.max_requests:
            return self._fail(f"the candidate's LLM budget of {b.max_requests} requests is spent")
        if self.tokens >= b.max_tokens:
            return self._fail(f"the candidate's LLM budget of {b.max_tokens} tokens is spent")
        try:
            response = self.answer(request)
            response = {"text": str(response["text"]), "prompt_tokens": int(response["prompt_tokens"]),
                        "completion_tokens": int(response["completion_tokens"])}
        except Exception as exc:  # the LLM layer's failure (budget, a reply missing from the records offline, provider) fails the candidate
            return self._fail(f"the host's LLM could not answer: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        self.tokens += response["prompt_tokens"] + response["completion_tokens"]
        self.exchanges.append({"request": request, "response": response})
        return response


def _request(line: bytes, max_tokens: int) -> dict | str:
    """The checked request, or why it is not one."""
    try:
        value: Any = json.loads(line)
    except (ValueError, RecursionError):
        return "not one JSON line"
    if not isinstance(value, dict) or set(value) != {"messages", "max_tokens"}:
        return 'expected {"messages": [...], "max_tokens": N}'
    messages, tokens = value["messages"], value["max_tokens"]
    if not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) and set(m) == {"role", "content"} and m["role"] in ROLES
            and isinstance(m["content"], str) for m in messages):
        return "messages must be a non-empty list of {role: system|user|assistant, content: string}"
    if type(tokens) is not int or not 1 <= tokens <= max_tokens:
        return f"max_tokens must be an integer in 1..{max_tokens}"
    return {"messages": messages, "max_tokens": tokens}
