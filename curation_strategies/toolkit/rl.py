"""Step-level RL records (DESIGN "RL record"): the messages before an assistant tool-call turn as
the prompt, the recorded call as the reference, rewarded by `tool_call_match`, or by
`state_match` when meta.env lets an environment replay the scenario. Plus step selection."""
from __future__ import annotations

import random
from typing import Iterable, Mapping, Sequence

from .calls import tool_calls
from .errors import corrections, turn_errors
from .provenance import stamp, step
from .records import record_meta
from .trajectory import assistant_indices, copy_messages, copy_tools, env_of


def rl_record(raw: Mapping, index: int, id: str | None = None, reward: str | None = None,
              tags: Iterable[str] = ()) -> dict | None:
    """The RL record for the assistant turn at messages[index], or None when its prefix does not
    end with a user or tool message (the format's requirement) or is empty."""
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
    record = {"id": id or f"{raw['id']}#step{index}", "messages": copy_messages(messages[:index]),
              "tools": copy_tools(raw.get("tools")), "reference": reference,
              "reward": reward, "meta": record_meta(raw, tags, step=index)}
    return stamp(record, step("rl_record", "truncated"), parent=raw)   # the prefix before the step


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


def rl_records(raw: Mapping, steps: Iterable[int], tags: Iterable[str] = ()) -> list[dict]:
    """RL records for the given assistant-turn indices (skipping those that cannot be one)."""
    tags = list(tags)
    records = [rl_record(raw, i, tags=tags) for i in steps]
    return [r for r in records if r is not None]
