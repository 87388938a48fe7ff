"""The two provider APIs behind `evolver.llm.LLM`: one call each (`call_openai`: chat.completions
on any OpenAI-compatible server; `call_anthropic`: messages.create) with the SDK's own retries,
returning (text, raw usage or None, (prompt, completion) tokens or None). A failed call is one
`ProviderFailure`: the SDK's last attempt, why it failed and whether the SDK retried it. `config`
is the run's `evolver.llm.LLMConfig` (model, base_url, timeout_s, max_retries).
"""
from __future__ import annotations

import re
from typing import Any, Mapping

_REASONING = re.compile(r"^(o\d|gpt-5)")   # OpenAI reasoning models: max_completion_tokens, no temperature


class ProviderFailure(Exception):
    """The SDK's last failed attempt: whether it was worth retrying (so the SDK retried it), and why."""

    def __init__(self, reason: str, retryable: bool):
        super().__init__(reason)
        self.reason, self.retryable = reason, retryable


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
        return ProviderFailure(f"HTTP {status}: {message}", status in (408, 409, 429) or status >= 500)
    if isinstance(e, sdk.APITimeoutError):
        return ProviderFailure(f"no answer within {config.timeout_s:g} s", True)
    if isinstance(e, sdk.APIConnectionError):
        return ProviderFailure(f"connection failed ({e.__cause__ or e})", True)
    return ProviderFailure(f"{type(e).__name__}: {e}", False)


def call_openai(config, key: str, request: Mapping):
    """(text, raw usage dict or None, (prompt, completion) tokens or None) from chat.completions."""
    import openai
    args: dict[str, Any] = {"model": config.model, "messages": request["messages"]}
    if _REASONING.match(config.model):
        args["max_completion_tokens"] = request["max_tokens"]   # these models refuse max_tokens and a temperature
    else:
        args.update(max_tokens=request["max_tokens"], temperature=request["temperature"])
    if "seed" in request:
        args["seed"] = request["seed"]
    try:
        with openai.OpenAI(base_url=config.base_url, api_key=key, timeout=config.timeout_s,
                           max_retries=config.max_retries) as client:
            response = client.chat.completions.create(**args)
    except openai.OpenAIError as e:
        raise _failure(e, openai, config) from None
    if not (isinstance(response.choices, list) and response.choices):
        raise ValueError("the body holds no choices")
    text = response.choices[0].message.content or ""
    usage = response.usage
    if usage is None:
        return text, None, None
    return text, usage.model_dump(mode="json", exclude_none=True), (usage.prompt_tokens, usage.completion_tokens)


def call_anthropic(config, key: str, request: Mapping):
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
                                 max_retries=config.max_retries) as client:
            response = client.messages.create(**args)
    except anthropic.AnthropicError as e:
        raise _failure(e, anthropic, config) from None
    if not isinstance(response.content, list):
        raise ValueError("the body holds no content blocks")
    text = "".join(block.text for block in response.content if block.type == "text")
    usage = getattr(response, "usage", None)
    if usage is None:
        return text, None, None
    prompt = usage.input_tokens + (getattr(usage, "cache_creation_input_tokens", 0) or 0) \
        + (getattr(usage, "cache_read_input_tokens", 0) or 0)
    return text, usage.model_dump(mode="json", exclude_none=True), (prompt, usage.output_tokens)
