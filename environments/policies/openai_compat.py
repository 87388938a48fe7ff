"""A policy behind an OpenAI-compatible HTTP endpoint (vLLM server, llama.cpp server, hosted APIs).

Two request shapes, both built from `chat_format.chat_format`:

- `api="completions"` (default; vLLM and llama.cpp serve it): the prompt is exactly
  `chat_format.render_prompt(messages, tools)` — the text a local policy gets — sent to
  `/v1/completions` with `stop=["<|im_end|>"]`. Use it for models trained here.
- `api="chat"` (hosted chat models that have no raw completions): `/v1/chat/completions` with the
  chat format's pieces as message contents — the system message carries `render_tools(tools)`,
  assistant messages are `render_assistant(m)` (their calls as `<tool_call>` text), and a tool
  result becomes a user message `"Tool result:\n<content>"` (hosted APIs refuse `tool` messages
  that answer no structured call). The server's own chat template wraps these texts.

The answer is returned as text; the runner parses it with `chat_format.parse_tool_calls`, as
for every policy. The API key is read from the environment variable named by `api_key_env`
(default `OPENAI_API_KEY`; "EMPTY" when unset, what local servers expect) and is never
recorded. Requests run `concurrency` at a time; results keep prompt order. Sampling passes
`seed` to the server (honoured by vLLM and OpenAI, best effort elsewhere).
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Mapping, Sequence

from base.errors import UserError
from environments.policies.limits import DEFAULT_MAX_NEW_TOKENS
from chat_format import chat_format as cf

APIS = ("completions", "chat")
TOOL_RESULT_PREFIX = "Tool result:\n"


def chat_messages(messages: Sequence[Mapping], tools: Sequence[Mapping], style: str = cf.DEFAULT_STYLE) -> list[dict]:
    """The chat-API messages of a conversation, their texts made by the chat format."""
    rest = list(messages)
    system = cf.DEFAULT_SYSTEM
    if rest and rest[0].get("role") == "system":
        system, rest = rest[0].get("content") or "", rest[1:]
    block = cf.render_tools(tools or [], style)
    out = [{"role": "system", "content": system + ("\n\n" + block if block else "")}]
    for m in cf.normalize_messages(rest):
        role = m.get("role")
        if role == "assistant":
            out.append({"role": "assistant", "content": cf.render_assistant(m)})
        elif role == "tool":
            out.append({"role": "user", "content": TOOL_RESULT_PREFIX + (m.get("content") or "")})
        else:
            out.append({"role": role, "content": m.get("content") or ""})
    return out


class OpenAIPolicy:
    name = "openai"

    def __init__(self, base_url: str, model: str, *, api: str = "completions", api_key_env: str = "OPENAI_API_KEY",
                 max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, style: str = cf.DEFAULT_STYLE,
                 concurrency: int = 4, timeout: float = 120.0, max_retries: int = 2):
        from openai import OpenAI

        if api not in APIS:
            raise UserError(f"unknown endpoint API {api!r} (one of {', '.join(APIS)})")
        if style not in cf.STYLES:
            raise UserError(f"unknown chat style {style!r} (one of {', '.join(cf.STYLES)})")
        if not base_url.startswith(("http://", "https://")):
            raise UserError(f"endpoint {base_url!r} is not an http(s) URL")
        self.base_url, self.model, self.api, self.api_key_env = base_url, model, api, api_key_env
        self.max_new_tokens, self.style, self.concurrency = max_new_tokens, style, max(1, concurrency)
        self._client = OpenAI(base_url=base_url, api_key=os.environ.get(api_key_env) or "EMPTY",
                              timeout=timeout, max_retries=max_retries)
        self.stats = {"calls": 0, "requests": 0, "prompt_tokens": 0, "generated_tokens": 0, "generate_s": 0.0}

    def describe(self) -> dict:
        return {"backend": self.name, "base_url": self.base_url, "model": self.model, "api": self.api,
                "api_key_env": self.api_key_env, "max_new_tokens": self.max_new_tokens, "chat_style": self.style,
                "concurrency": self.concurrency}

    def _request(self, prompt: tuple, n: int, temperature: float, seed: int | None) -> list[str]:
        from openai import OpenAIError

        messages, tools = prompt
        common = dict(model=self.model, n=n, temperature=temperature, max_tokens=self.max_new_tokens,
                      stop=[cf.STOP])
        if seed is not None and temperature > 0:
            common["seed"] = seed
        try:
            if self.api == "completions":
                response = self._client.completions.create(
                    prompt=cf.render_prompt(messages, tools or [], style=self.style), **common)
                choices = sorted(response.choices, key=lambda c: c.index)
                texts = [c.text or "" for c in choices]
            else:
                response = self._client.chat.completions.create(
                    messages=chat_messages(messages, tools or [], self.style), **common)
                choices = sorted(response.choices, key=lambda c: c.index)
                texts = [c.message.content or "" for c in choices]
        except OpenAIError as exc:
            raise UserError(f"endpoint {self.base_url} failed: {exc.__class__.__name__}: "
                            f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
        if len(texts) != n:
            raise UserError(f"endpoint {self.base_url} returned {len(texts)} choices, {n} were asked")
        usage = getattr(response, "usage", None)
        if usage is not None:
            self.stats["prompt_tokens"] += usage.prompt_tokens or 0
            self.stats["generated_tokens"] += usage.completion_tokens or 0
        return [t.split(cf.STOP)[0] for t in texts]

    def generate(self, prompts: Sequence[tuple], n: int = 1, temperature: float = 0.0,
                 seed: int | None = None) -> list[list[str]]:
        if n < 1:
            raise ValueError("n must be at least 1")
        if temperature == 0 and n > 1:
            raise ValueError("several samples need a positive temperature (greedy decoding repeats itself)")
        self.stats["calls"] += 1
        self.stats["requests"] += len(prompts)
        started = time.perf_counter()
        seeds = [None if seed is None else seed + i for i in range(len(prompts))]
        if self.concurrency == 1 or len(prompts) <= 1:
            out = [self._request(p, n, temperature, s) for p, s in zip(prompts, seeds)]
        else:
            with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
                out = list(pool.map(lambda ps: self._request(ps[0], n, temperature, ps[1]), zip(prompts, seeds)))
        self.stats["generate_s"] += time.perf_counter() - started
        return out
