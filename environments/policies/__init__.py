"""Policies: what produces the next assistant turn's text for a batch of conversations.

A policy takes `(messages, tools)` pairs and returns, per pair, `n` model texts (the body of the
next assistant turn, without `<|im_end|>`). Rendering of the prompt and parsing of the answer
both belong to `chat_format.chat_format`, so a policy is evaluated on exactly the text it was trained
on. Backends:

- `TransformersPolicy` (`local.py`): a base model (+ an optional LoRA adapter) in this process,
  batched with left padding, CPU or GPU, greedy by default, seeded sampling on request;
- `OpenAIPolicy` (`openai_compat.py`): an OpenAI-compatible HTTP endpoint (vLLM server,
  llama.cpp server, hosted APIs), key from the environment only;
- `ScriptedPolicy`, `SilentPolicy`, `OraclePolicy` (`scripted.py`): fixed behaviours for tests
  and sanity checks of a benchmark.
"""
from __future__ import annotations

from typing import Mapping, Protocol, Sequence, runtime_checkable

Prompt = tuple  # (messages: list[dict], tools: list[dict])


@runtime_checkable
class Policy(Protocol):
    name: str

    def generate(self, prompts: Sequence[Prompt], n: int = 1, temperature: float = 0.0,
                 seed: int | None = None) -> list[list[str]]:
        """`n` texts per prompt, in prompt order. Temperature 0 is greedy; a positive
        temperature samples, reproducibly for a given `seed` and batch."""

    def describe(self) -> Mapping:
        """What a result must record to be reproduced (backend, model, settings; no secrets)."""


def __getattr__(name: str):
    # Backends import heavy packages (torch, openai); load them on first use.
    if name == "TransformersPolicy":
        from environments.policies.local import TransformersPolicy
        return TransformersPolicy
    if name == "OpenAIPolicy":
        from environments.policies.openai_compat import OpenAIPolicy
        return OpenAIPolicy
    if name in ("ScriptedPolicy", "SilentPolicy", "OraclePolicy"):
        from environments.policies import scripted
        return getattr(scripted, name)
    raise AttributeError(name)
