"""GRPO rewards, by the name an RL record gives (`"reward": "tool_call_match" | "state_match"`).

Every reward reads the completion through `trainer.chat_format.parse_tool_calls` (never `eval`)
and lies in [UNPARSEABLE, 1]:

- `tool_call_match`: the completion's calls against the reference's, aligned in order. A pair
  with the same name earns 0.5 plus 0.5 × the share of argument names (union of both sides) whose
  values agree after normalisation (numbers by value, strings as BFCL's checker standardises
  them, containers element-wise); the sum is divided by the longer of the two lists, so missing
  and extra calls both cost. A reference answer in text (`{"content": …}`) is matched by making no
  call: 0.5 + 0.5 × token F1 with the reference text. Unparseable output scores UNPARSEABLE.
- `state_match` (records with `meta.env` of BFCL multi-turn): the scenario's backends are rebuilt
  twice, the prefix's calls replayed on both, the completion's calls executed on one and the
  reference's on the other (benchmarks.bfcl.backends.Episode: literal arguments, fresh instances).
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

from benchmarks.bfcl.backends import Episode, load_tasks
from trainer.chat_format import ToolCall, parse_tool_calls

UNPARSEABLE = -0.5
BFCL_BENCHMARK = "bfcl_multi_turn"


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


@functools.lru_cache(maxsize=8)
def _bfcl_tasks(category: str) -> dict:
    return load_tasks(category)


def _episode(record: Mapping):
    """Fresh backends for the record's scenario with its prefix's calls replayed."""
    env = record["meta"]["env"]
    task = _bfcl_tasks("multi_turn_" + env.get("variant", "base"))[env["task_id"]]
    names = [t["function"]["name"] for t in record.get("tools") or []] or None
    episode = Episode(task, functions=names)
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
    env = (record.get("meta") or {}).get("env") or {}
    return env.get("benchmark") == BFCL_BENCHMARK and "task_id" in env


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
# TRL adapters


@functools.lru_cache(maxsize=4096)
def _record(record_json: str) -> dict:
    return json.loads(record_json)


def trl_reward_functions(names: Sequence[str]) -> list[Callable]:
    """One TRL reward function per reward name. Each scores the completions whose record names it
    and returns None for the others (TRL then leaves them out of that reward's mean), so every
    reward is logged under its own name. Rows carry their record as canonical JSON (`record`)."""
    def make(name: str) -> Callable:
        fn = REWARDS[name]

        def reward(prompts, completions, completion_ids=None, record=None, **_):
            out = []
            for completion, rec_json in zip(completions, record):
                rec = _record(rec_json)
                out.append(fn(completion, rec) if rec["reward"] == name else None)
            return out

        reward.__name__ = name
        return reward

    return [make(n) for n in names]
