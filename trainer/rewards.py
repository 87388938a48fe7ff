"""GRPO rewards, by the name an RL record gives (`"reward": "tool_call_match" | "state_match"`).

Every reward reads the completion through `chat_format.chat_format.parse_tool_calls` (never `eval`)
and lies in [UNPARSEABLE, 1]:

- `tool_call_match`: the completion's calls against the reference's, aligned in order. A pair
  with the same name earns 0.5 plus 0.5 × the share of argument names (union of both sides) whose
  values agree after normalisation (numbers by value, strings as BFCL's checker standardises
  them, containers element-wise); the sum is divided by the longer of the two lists, so missing
  and extra calls both cost. A reference answer in text (`{"content": …}`) is matched by making no
  call: 0.5 + 0.5 × token F1 with the reference text. Unparseable output scores UNPARSEABLE.
- `state_match` (records whose `meta.env` names a scenario its environment rebuilds: BFCL
  multi-turn): the scenario is rebuilt twice (`base.environment`: reward_episode, literal
  arguments, fresh instances), the prefix's calls executed on both, the completion's calls
  executed on one and the reference's on the other.
  Reward = the share of the reference's outputs that the completion's outputs contain, halved
  when the final states differ — full credit only for what BFCL's turn check accepts. Records
  without an environment fall back to `tool_call_match`.
"""
from __future__ import annotations

import functools
import json
import re
from collections import Counter
from typing import Any, Callable, Mapping, Sequence

from base import registry
from chat_format.chat_format import ToolCall, parse_tool_calls

UNPARSEABLE = -0.5


# --------------------------------------------------------------------------------------------
# tool_call_match


def normalize_value(value: Any) -> Any:
    """A value as compared: bools kept, numbers as floats, strings standardised like BFCL's AST
    checker (lower case, without spaces and , . / - _ * ^), containers element-wise."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        return re.sub(r"[ ,./\-_*^]", "", value).lower().replace("'", '"')
    if isinstance(value, (list, tuple)):
        return [normalize_value(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): normalize_value(v) for k, v in value.items()}
    return repr(value)


def call_score(pred: ToolCall, ref: ToolCall) -> float:
    """0 for another function; 0.5 + 0.5 × share of agreeing arguments for the same one."""
    if pred.name != ref.name:
        return 0.0
    keys = set(pred.arguments) | set(ref.arguments)
    if not keys:
        return 1.0
    same = sum(1 for k in keys if k in pred.arguments and k in ref.arguments
               and normalize_value(pred.arguments[k]) == normalize_value(ref.arguments[k]))
    return 0.5 + 0.5 * same / len(keys)


def calls_score(pred: Sequence[ToolCall], ref: Sequence[ToolCall]) -> float:
    """Best in-order alignment of two call lists, normalised by the longer one."""
    if not pred and not ref:
        return 1.0
    n, m = len(pred), len(ref)
    best = [[0.0] * (m + 1) for _ in range(n + 1)]
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            best[i][j] = max(best[i - 1][j], best[i][j - 1], best[i - 1][j - 1] + call_score(pred[i - 1], ref[j - 1]))
    return best[n][m] / max(n, m)


def reference_calls(record: Mapping) -> list[ToolCall]:
    calls = []
    for c in record["reference"].get("tool_calls") or []:
        args = c["function"]["arguments"]
        calls.append(ToolCall(c["function"]["name"], json.loads(args) if isinstance(args, str) else dict(args)))
    return calls


def _f1(a: str, b: str) -> float:
    x, y = Counter(a.lower().split()), Counter(b.lower().split())
    if not x and not y:
        return 1.0
    common = sum((x & y).values())
    if not common:
        return 0.0
    p, r = common / sum(x.values()), common / sum(y.values())
    return 2 * p * r / (p + r)


def tool_call_match(completion: str, record: Mapping) -> float:
    parsed = parse_tool_calls(completion, record.get("tools"))
    if parsed.error:
        return UNPARSEABLE
    if "content" in record["reference"]:
        return 0.0 if parsed.calls else 0.5 + 0.5 * _f1(parsed.content, record["reference"]["content"])
    return calls_score(parsed.calls, reference_calls(record)) if parsed.calls else 0.0


# --------------------------------------------------------------------------------------------
# state_match


def _episode(record: Mapping):
    """Fresh backends for the record's scenario with its prefix's calls executed."""
    env = record["meta"]["env"]
    names = [t["function"]["name"] for t in record.get("tools") or []] or None
    episode = registry.by_tag(env.get("benchmark")).reward_episode(env, names)
    for m in record["messages"]:
        for c in m.get("tool_calls") or []:
            episode.call(c["function"]["name"], json.loads(c["function"]["arguments"]))
    return episode


@functools.lru_cache(maxsize=1024)
def _reference_outcome(record_json: str) -> tuple[dict, list[str]]:
    record = json.loads(record_json)
    episode = _episode(record)
    outputs = [episode.call(c.name, c.arguments) for c in reference_calls(record)]
    return episode.state(), outputs


def has_environment(record: Mapping) -> bool:
    """Whether the record's `meta.env` names a scenario its environment rebuilds for state_match."""
    env = (record.get("meta") or {}).get("env") or {}
    environment = registry.by_tag(env.get("benchmark"))
    return environment is not None and environment.rebuilds(env)


def state_match(completion: str, record: Mapping) -> float:
    if not has_environment(record) or "tool_calls" not in record["reference"]:
        return tool_call_match(completion, record)
    parsed = parse_tool_calls(completion, record.get("tools"))
    if parsed.error:
        return UNPARSEABLE
    if not parsed.calls:
        return 0.0
    ref_state, ref_outputs = _reference_outcome(json.dumps(record, sort_keys=True))
    episode = _episode(record)
    outputs = Counter(episode.call(c.name, c.arguments) for c in parsed.calls)
    found = sum((Counter(ref_outputs) & outputs).values()) / len(ref_outputs)
    return found if episode.state() == ref_state else found / 2


REWARDS: dict[str, Callable[[str, Mapping], float]] = {
    "tool_call_match": tool_call_match,
    "state_match": state_match,
}


def score(completion: str, record: Mapping) -> float:
    """The record's own reward for one completion."""
    return REWARDS[record["reward"]](completion, record)


# --------------------------------------------------------------------------------------------
# TRL reward functions: fn(prompts, completions, completion_ids=None, **columns)


def _json(value):
    return json.loads(value) if isinstance(value, str) else value


def _completion_text(completion) -> str:
    """A completion as TRL passes it: text, or (conversational prompts) a list of messages."""
    if isinstance(completion, str):
        return completion
    return "".join(m.get("content") or "" for m in completion if m.get("role", "assistant") == "assistant")


def row_record(reward: str, reference: Mapping, tools=None, meta=None, messages=None) -> dict:
    """The record a reward reads, from one row's dataset columns (the file form of
    sandbox.exchange: `tools` and `meta` as JSON strings; keys Arrow filled with null dropped)."""
    return {"reward": reward, "reference": {k: v for k, v in reference.items() if v is not None},
            "tools": _json(tools) or [], "meta": _json(meta) or {}, "messages": messages or []}


def reward_function(name: str) -> Callable:
    """The TRL reward function of one reward name. It scores the completions whose row names
    this reward (`reward` column) and returns None for the others (TRL leaves them out of this
    reward's mean), so several rewards can share a dataset and each is logged under its name.
    It reads the columns `reward`, `reference`, `tools`, `meta` and `messages`."""
    fn = REWARDS[name]

    def reward_fn(prompts, completions, completion_ids=None, *, reward, reference, tools=None, meta=None,
                  messages=None, **_):
        n = len(completions)
        tools, meta, messages = (col if col is not None else [None] * n for col in (tools, meta, messages))
        return [fn(_completion_text(c), row_record(r, ref, t, m, msgs)) if r == name else None
                for c, r, ref, t, m, msgs in zip(completions, reward, reference, tools, meta, messages)]

    reward_fn.__name__ = name
    return reward_fn


tool_call_match_reward = reward_function("tool_call_match")
state_match_reward = reward_function("state_match")


def trl_reward_functions(names: Sequence[str]) -> list[Callable]:
    """The TRL reward functions of these reward names."""
    return [reward_function(n) for n in names]
