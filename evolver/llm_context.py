"""The model's context window, and what a request may ask within it (for evolver.llm.LLM).

The window is `LLMConfig.context_window` when set; else what an OpenAI-compatible server says of its
model at GET {base_url}/models: vLLM's `max_model_len`, LM Studio's `max_context_length`, OpenRouter's
and others' `context_length`, llama.cpp's `meta.n_ctx_train`. `transformers serve`, Ollama and the
vendors' /models say nothing of it: the window is then unknown and only the server's own
context-length error stops a request (evolver/llm_providers.py). A window the server gave is written
under the run's record (`llm/server/context-window.json`), so a rerun from the record (offline, no
network) fits its prompts to the same window.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

from base.files import atomic_json, read_json

FIELDS = ("max_model_len", "max_context_length", "context_length", "context_window", "n_ctx", "n_ctx_train")
MIN_REPLY = 16        # a request that leaves less room than this for the reply is refused, not sent
SAFETY = 1.15         # our count (tiktoken cl100k) may undercount the model's own tokenizer


def record_path(record_dir: Path) -> Path:
    return Path(record_dir) / "server" / "context-window.json"


def _window_of(entry: dict) -> tuple[int, str] | None:
    for where in (entry, entry.get("meta") if isinstance(entry.get("meta"), dict) else {}):
        for name in FIELDS:
            value = where.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value, name
    return None


def served_window(base_url: str, key: str, model: str) -> dict:
    """{"context_window": int | None, "source": why} from the server's model list (one request, no retry)."""
    import openai

    try:
        with openai.OpenAI(base_url=base_url, api_key=key, timeout=15.0, max_retries=0) as client:
            entries = [m.model_dump(mode="json") for m in client.models.list()]
    except openai.OpenAIError as exc:
        return {"context_window": None, "source": f"{base_url}/models did not answer ({type(exc).__name__})"}
    entry = next((e for e in entries if e.get("id") == model), None)
    found = _window_of(entry) if entry else None
    if found is None:
        return {"context_window": None, "source": f"{base_url}/models does not give the window of {model}"}
    return {"context_window": found[0], "source": f"{base_url}/models: {found[1]}"}


def context_window(config, key: Callable[[], str], record_dir: Path) -> dict:
    """{"context_window": int | None, "source": str}: the setting, the run's record of it, or the server's word
    (written to the record). Offline, a run without that record has an unknown window."""
    if config.context_window is not None:
        return {"context_window": config.context_window, "source": "the llm.context_window setting"}
    path = record_path(record_dir)
    if config.mode != "live":
        try:
            known = read_json(path)
            if isinstance(known, dict) and known.get("base_url") == config.base_url and known.get("model") == config.model:
                return {"context_window": known["context_window"], "source": known["source"]}
        except (OSError, ValueError, KeyError):
            pass
    if config.mode == "offline" or config.provider != "openai" or config.base_url is None:
        return {"context_window": None, "source": "not given by the setting or the server"}
    found = served_window(config.base_url, key(), config.model)
    if found["context_window"] is not None:   # a server that says nothing is asked again by the next run
        atomic_json(path, {"base_url": config.base_url, "model": config.model, **found})
    return found


def prompt_room(window: int | None, max_tokens: int) -> int | None:
    """The largest prompt (in our count) that leaves the reply `max_tokens`; None: no window known."""
    return None if window is None else math.floor((window - max_tokens) / SAFETY)


def fit(prompt_tokens: int, max_tokens: int, window: dict) -> tuple[int, str | None]:
    """(max_tokens to send, None), the reply shortened to what the window leaves; or (0, why the request
    cannot fit) when the prompt leaves under MIN_REPLY tokens for the reply."""
    size = window["context_window"]
    if size is None:
        return max_tokens, None
    room = size - math.ceil(prompt_tokens * SAFETY)
    if room < MIN_REPLY:
        return 0, (f"the prompt (about {prompt_tokens} tokens) leaves no room for a reply in the model's context window "
                   f"of {size} tokens ({window['source']})")
    return min(max_tokens, room), None
