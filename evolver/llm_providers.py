"""The two provider APIs behind `evolver.llm.LLM`: one call each (`call_openai`: chat.completions
on any OpenAI-compatible server; `call_anthropic`: messages.create) with the SDK's own retries,
returning (text, raw usage or None, (prompt, completion) tokens or None, finish) where finish is "length"
when the reply was cut at max_tokens (else the server's reason, or None). A failed call is one
`ProviderFailure`: the SDK's last attempt, why it failed and whether the SDK retried it; an `Attempts`
given to a call counts the SDK's attempts and why each retried one failed. `config`
is the run's `evolver.llm.LLMConfig` (model, base_url, timeout_s, max_retries).
"""
from __future__ import annotations

import re
from typing import Any, Mapping

_REASONING = re.compile(r"^(o\d|gpt-5)")   # OpenAI reasoning models: max_completion_tokens, no temperature


# how servers word a prompt longer than the model's window: vLLM and OpenAI ("maximum context length",
# code context_length_exceeded), llama.cpp ("exceeds the available context size"), Anthropic ("prompt is
# too long"), TGI and others ("too many tokens", "input is too long")
_CONTEXT = re.compile(r"context.length|context.size|maximum context|context.window|prompt is too long|"
                      r"too many (input )?tokens|input is too long", re.IGNORECASE)


class ProviderFailure(Exception):
    """The SDK's last failed attempt: whether it was worth retrying (so the SDK retried it), why, and
    whether the server said the request exceeds the model's context window (`context`)."""

    def __init__(self, reason: str, retryable: bool, context: bool = False):
        super().__init__(reason)
        self.reason, self.retryable, self.context = reason, retryable, context


class Attempts:
    """The HTTP attempts of one call as the SDK's own http client saw them (its event hooks): how many
    were sent and what the failed ones got, so the retries the SDK made are recorded with their reasons."""

    def __init__(self):
        self.sent, self.statuses = 0, []

    def hooks(self) -> dict:
        return {"request": [self._request], "response": [self._response]}

    def _request(self, request) -> None:
        self.sent += 1

    def _response(self, response) -> None:
        if response.status_code >= 400:
            self.statuses.append(response.status_code)

    def retried(self, last_failed: bool = False) -> list[str]:
        """Why each attempt before the last failed: an HTTP status, or no answer (a read timeout, a lost
        connection: no response at all)."""
        statuses = self.statuses[:-1] if last_failed and self.statuses else self.statuses
        retries = max(0, self.sent - 1)
        return [f"HTTP {s}" for s in statuses[:retries]] + ["no answer (timeout or lost connection)"] * max(0, retries - len(statuses))


def _server_message(body: Any, fallback: str) -> str:
    """The human part of an error body: OpenAI {"error": {"message"}}, Anthropic the same one level down."""
    while isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]
    text = body.get("message") if isinstance(body, dict) else None
    return " ".join(str(text or fallback).split())[:300]


def _failure(e: Exception, sdk: Any, config) -> ProviderFailure:
    """Sort an SDK exception: 408, 409, 429, 5xx, timeouts and lost connections are what the SDKs retry."""
    if isinstance(e, sdk.APIStatusError):
        status = e.status_code
        message = _server_message(e.body, e.response.text or "no message")
        return ProviderFailure(f"HTTP {status}: {message}", status in (408, 409, 429) or status >= 500,
                               context=status in (400, 413, 422) and bool(_CONTEXT.search(message)))
    if isinstance(e, sdk.APITimeoutError):
        return ProviderFailure(f"no answer within {config.timeout_s:g} s", True)
    if isinstance(e, sdk.APIConnectionError):
        return ProviderFailure(f"connection failed ({e.__cause__ or e})", True)
    return ProviderFailure(f"{type(e).__name__}: {e}", False)


def call_openai(config, key: str, request: Mapping, attempts: Attempts | None = None):
    """(text, raw usage dict or None, (prompt, completion) tokens or None, finish reason) from chat.completions."""
    import openai
    args: dict[str, Any] = {"model": config.model, "messages": request["messages"]}
    if _REASONING.match(config.model):
        args["max_completion_tokens"] = request["max_tokens"]   # these models refuse max_tokens and a temperature
    else:
        args.update(max_tokens=request["max_tokens"], temperature=request["temperature"])
    if "seed" in request:
        args["seed"] = request["seed"]
    try:
        with openai.OpenAI(base_url=config.base_url, api_key=key, timeout=config.timeout_s, max_retries=config.max_retries,
                           http_client=openai.DefaultHttpxClient(event_hooks=(attempts or Attempts()).hooks())) as client:
            response = client.chat.completions.create(**args)
    except openai.OpenAIError as e:
        raise _failure(e, openai, config) from None
    if not (isinstance(response.choices, list) and response.choices):
        raise ValueError("the body holds no choices")
    text, finish = response.choices[0].message.content or "", response.choices[0].finish_reason
    usage = response.usage
    if usage is None:
        return text, None, None, finish
    return text, usage.model_dump(mode="json", exclude_none=True), (usage.prompt_tokens, usage.completion_tokens), finish


def call_anthropic(config, key: str, request: Mapping, attempts: Attempts | None = None):
    """The same from messages.create; system messages are lifted into `system=`. No temperature
    and no seed: API version 2026-10-21 (the SDK 2.x default) refuses sampling parameters."""
    import anthropic
    messages, max_tokens = request["messages"], request["max_tokens"]
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    args: dict[str, Any] = {"model": config.model, "max_tokens": max_tokens,
                            "messages": [m for m in messages if m["role"] != "system"]}
    if system:
        args["system"] = system
    try:
        with anthropic.Anthropic(base_url=config.base_url, api_key=key, timeout=config.timeout_s,
                                 max_retries=config.max_retries,
                                 http_client=anthropic.DefaultHttpxClient(event_hooks=(attempts or Attempts()).hooks())) as client:
            response = client.messages.create(**args)
    except anthropic.AnthropicError as e:
        raise _failure(e, anthropic, config) from None
    if not isinstance(response.content, list):
        raise ValueError("the body holds no content blocks")
    text = "".join(block.text for block in response.content if block.type == "text")
    finish = "length" if getattr(response, "stop_reason", None) == "max_tokens" else getattr(response, "stop_reason", None)
    usage = getattr(response, "usage", None)
    if usage is None:
        return text, None, None, finish
    prompt = usage.input_tokens + (getattr(usage, "cache_creation_input_tokens", 0) or 0) \
        + (getattr(usage, "cache_read_input_tokens", 0) or 0)
    return text, usage.model_dump(mode="json", exclude_none=True), (prompt, usage.output_tokens), finish
