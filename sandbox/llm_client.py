"""`ctx.llm` inside the sandbox: the client of the host's LLM channel (sandbox/llm_channel.py).

    text = ctx.llm.complete([{"role": "user", "content": "..."}], max_tokens=256)

The container has no network and no key: each request is one JSON line over the unix socket the
host mounted, answered by the run's LLM layer (with its budgets and record/replay). A refused or
failed request raises LLMError; the host then fails the execution whatever the strategy does.
"""
from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Mapping, Sequence



MAX_REPLY_BYTES = 4 << 20


def read_line(conn: socket.socket, cap: int) -> bytes | None:
    """One newline-ended message of the channel (or what came before the peer closed); None when
    it passes `cap` bytes. Both ends read with it."""
    data = bytearray()
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
        if len(data) > cap:
            return None
    return bytes(data)

class LLMError(RuntimeError):
    """The host refused or could not answer a request (budget spent, malformed, LLM failure)."""


class LLMClient:
    def __init__(self, path: Path, timeout_s: float = 600.0):
        self.path, self.timeout_s = str(path), timeout_s
        self.requests = 0

    def complete(self, messages: Sequence[Mapping[str, str]], max_tokens: int = 512) -> str:
        """The model's reply text to `messages` ([{"role": "system"|"user"|"assistant", "content"}])."""
        line = json.dumps({"messages": [{"role": m["role"], "content": m["content"]} for m in messages],
                           "max_tokens": max_tokens}, ensure_ascii=False).encode() + b"\n"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(self.timeout_s)
            conn.connect(self.path)
            conn.sendall(line)
            data = read_line(conn, MAX_REPLY_BYTES) or b""
        self.requests += 1
        try:
            reply = json.loads(data)
        except ValueError:
            raise LLMError("the host's LLM channel closed without an answer") from None
        if "error" in reply:
            raise LLMError(reply["error"])
        return reply["text"]
