"""Step-level RL records (DESIGN "RL record"): the messages before an assistant tool-call turn as
the prompt, the recorded call as the reference, rewarded by `tool_call_match`, or by
`state_match` when meta.env lets an environment replay the scenario. Plus step selection.

A step late in a long session has a prompt of the whole session before it, so a session's RL
records grow with the square of its length (a coding-agent session of 300 messages: tens of MB).
With `max_tokens` (a strategy passes its ctx.budget's max_length), a prompt keeps what the
trainer would keep of it: its leading messages up to the first user request and its latest
messages, up to PROMPT_CHARS_PER_TOKEN characters a token of `max_tokens` (`recent_prefix`)."""
from __future__ import annotations

import random
from typing import Iterable, Mapping, Sequence

from .calls import tool_calls
from .errors import corrections, turn_errors
from .provenance import stamp, step
from .records import record_meta
from .trajectory import assistant_indices, copy_messages, copy_tools, env_of

PROMPT_CHARS_PER_TOKEN = 16
"""`recent_prefix`'s bound: characters of a prompt's latest messages kept per token of the limit.
The trainer shortens a prompt over its max_prompt_tokens by dropping the oldest messages after the
first user request (trainer.data.fit_prompt); tokenizers take 2-7 characters a token on agent logs
(SmolLM2's: 2.2-5.0 on the published SWE-agent trajectory in tests/fixtures/external, 5.1-7.0 on
bench/scale_corpus.py's coding sessions), so 16 characters a token of max_length keep every
message a prompt of twice max_length tokens would keep (the profiles' max_prompt_tokens is at most
1.5x their max_length)."""


def recent_prefix(messages: Sequence[Mapping], index: int, max_tokens: int) -> list[int]:
    """Positions of the prompt of the step at messages[index] within `max_tokens` (module docstring):
    all of messages[:index] when its messages after the first user request hold at most
    PROMPT_CHARS_PER_TOKEN * max_tokens characters; else the messages up to that request and the
    latest ones within that bound, starting at a message that is not a tool result (a call's results
    stay with their call)."""
    first_user = next((i for i in range(index) if messages[i]["role"] == "user"), None)
    if first_user is None:
        return list(range(index))
    room = PROMPT_CHARS_PER_TOKEN * max_tokens
    start = index
    for i in range(index - 1, first_user, -1):
        room -= _chars(messages[i])
        if room < 0:
            break
        if messages[i]["role"] != "tool":
            start = i
    else:
        return list(range(index))
    if start == index:   # the step's own observation is over the bound: kept (the trainer drops what cannot fit)
        start = next((i for i in range(index - 1, first_user, -1) if messages[i]["role"] != "tool"), first_user + 1)
    return list(range(first_user + 1)) + list(range(start, index))


def _chars(message: Mapping) -> int:
    calls = message.get("tool_calls") or ()
    return len(message.get("content") or "") + sum(len(str(c.get("function", c))) for c in calls)


def rl_record(raw: Mapping, index: int, id: str | None = None, reward: str | None = None,
              tags: Iterable[str] = (), max_tokens: int | None = None) -> dict | None:
    """The RL record for the assistant turn at messages[index], or None when its prefix does not
    end with a user or tool message (the format's requirement) or is empty. With `max_tokens`, the
    prefix is `recent_prefix`'s (all of it when it is within the bound)."""
    messages = raw["messages"]
    turn = messages[index]
    if turn["role"] != "assistant":
        raise ValueError(f"{raw['id']}: messages[{index}] is not an assistant message")
    if index == 0 or messages[index - 1]["role"] not in ("user", "tool"):
        return None
    calls = tool_calls(turn)
    reference = {"tool_calls": copy_messages([turn])[0]["tool_calls"]} if calls else {"content": turn.get("content") or ""}
    if reward is None:
        reward = "state_match" if env_of(raw) and calls else "tool_call_match"
    kept = recent_prefix(messages, index, max_tokens) if max_tokens else None
    cut = kept is not None and len(kept) < index
    prefix = [messages[i] for i in kept] if cut else messages[:index]
    record = {"id": id or f"{raw['id']}#step{index}", "messages": copy_messages(prefix),
              "tools": copy_tools(raw.get("tools")), "reference": reference,
              "reward": reward, "meta": record_meta(raw, tags, step=index)}
    # the prefix before the step; cut, it names the bound and the message the latest part starts at
    made = step("rl_record", "truncated", max_tokens=max_tokens,
                resumed_at=next(b for a, b in zip(kept, kept[1:]) if b != a + 1)) if cut else step("rl_record", "truncated")
    return stamp(record, made, parent=raw)


def tool_call_steps(raw: Mapping) -> list[int]:
    """Assistant turns that make tool calls and follow a user or tool message."""
    messages = raw["messages"]
    return [i for i in assistant_indices(messages)
            if tool_calls(messages[i]) and i > 0 and messages[i - 1]["role"] in ("user", "tool")]


def clean_steps(raw: Mapping) -> list[int]:
    """Tool-call steps whose calls are valid and did not fail: safe references."""
    errors = turn_errors(raw)
    return [i for i in tool_call_steps(raw) if i not in errors]


def recovery_steps(raw: Mapping) -> list[int]:
    """Decision points following an error: the turns that correct an erroneous turn, whose
    prefixes end with the error's observation (and any further failed attempts)."""
    steps = set(tool_call_steps(raw))
    return sorted({fix for fix in corrections(raw).values() if fix is not None and fix in steps})


def sample_steps(steps: Sequence, rng: random.Random, fraction: float | None = None,
                 k: int | None = None) -> list:
    """A seeded sample of `steps` (k of them, or round(fraction * len)), in their original order."""
    n = k if k is not None else round((fraction or 0.0) * len(steps))
    n = max(0, min(n, len(steps)))
    chosen = set(rng.sample(range(len(steps)), n))
    return [s for pos, s in enumerate(steps) if pos in chosen]


def rl_records(raw: Mapping, steps: Iterable[int], tags: Iterable[str] = (),
               max_tokens: int | None = None) -> list[dict]:
    """RL records for the given assistant-turn indices (skipping those that cannot be one); with
    `max_tokens`, each prompt is `recent_prefix`'s."""
    tags = list(tags)
    records = [rl_record(raw, i, tags=tags, max_tokens=max_tokens) for i in steps]
    return [r for r in records if r is not None]
