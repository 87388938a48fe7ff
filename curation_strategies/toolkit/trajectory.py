"""Message-level helpers every operator shares: where the assistant turns, user turns and step
boundaries of a canonical trajectory are, and which tool results answer which call."""
from __future__ import annotations

import copy
import json
from typing import Any, Mapping, Sequence


def canonical_json(obj: Any) -> str:
    """Sorted keys, compact, UTF-8 text: the same form the host writes (base.schemas)."""
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def assistant_indices(messages: Sequence[Mapping]) -> list[int]:
    """Positions of the assistant messages, in order."""
    return [i for i, m in enumerate(messages) if m["role"] == "assistant"]


def user_indices(messages: Sequence[Mapping]) -> list[int]:
    return [i for i, m in enumerate(messages) if m["role"] == "user"]


def last_user_before(messages: Sequence[Mapping], index: int) -> int | None:
    """Position of the user message that the turn at `index` answers (None if there is none)."""
    for i in range(index - 1, -1, -1):
        if messages[i]["role"] == "user":
            return i
    return None


def same_user_turn(messages: Sequence[Mapping], i: int, j: int) -> bool:
    """True when no user message lies between positions i < j."""
    return all(messages[k]["role"] != "user" for k in range(i + 1, j))


def step_boundaries(messages: Sequence[Mapping]) -> list[int]:
    """Cut points k (0 < k <= len) such that messages[:k] leaves no tool call unanswered and
    messages[k:] holds no answer to a call before k: a prefix or suffix cut there stays valid."""
    pending: set[str] = set()
    cuts = []
    for k, m in enumerate(messages, start=1):
        for call in m.get("tool_calls") or []:
            pending.add(call["id"])
        if m["role"] == "tool":
            pending.discard(m.get("tool_call_id"))
        if not pending:
            cuts.append(k)
    return cuts


def tool_results(messages: Sequence[Mapping], index: int) -> dict[str, Mapping]:
    """The tool messages answering the calls of the assistant message at `index`, by call id."""
    ids = {c["id"] for c in messages[index].get("tool_calls") or []}
    found: dict[str, Mapping] = {}
    for m in messages[index + 1:]:
        if m["role"] == "tool" and m.get("tool_call_id") in ids:
            found[m["tool_call_id"]] = m
        elif m["role"] in ("assistant", "user") and found:
            break
    return found


def task_text(raw: Mapping) -> str:
    """The task instruction: `task`, else the first user message."""
    if raw.get("task"):
        return raw["task"]
    for m in raw["messages"]:
        if m["role"] == "user" and m.get("content"):
            return m["content"]
    return ""


def tool_call_count(raw: Mapping) -> int:
    return sum(len(m.get("tool_calls") or []) for m in raw["messages"])


def env_of(raw: Mapping) -> Mapping | None:
    return (raw.get("meta") or {}).get("env") or None


def copy_messages(messages: Sequence[Mapping]) -> list[dict]:
    """A copy of canonical messages (string fields, calls copied), much faster than deepcopy."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [{**c, "function": dict(c["function"])} for c in m["tool_calls"]]
        out.append(m)
    return out


def kept_at(raws: Sequence[Mapping], positions: Sequence[int]) -> Sequence[Mapping]:
    """The records of `raws` at `positions`, in that order: a view when `raws` is read on access
    (the sandbox's corpus, or a view of it: it has `subset`), so a filter over the corpus holds
    positions, not records; otherwise a list of the records themselves."""
    subset = getattr(raws, "subset", None)
    return subset(positions) if callable(subset) else [raws[n] for n in positions]


def copy_json(value: Any) -> Any:
    """A deep copy of JSON data (dicts, lists, strings, numbers, booleans, None) several times faster
    than copy.deepcopy; any other value inside is copied by copy.deepcopy."""
    kind = type(value)
    if kind is dict:
        return {k: copy_json(v) for k, v in value.items()}
    if kind is list:
        return [copy_json(v) for v in value]
    if kind in (str, int, float, bool) or value is None:
        return value
    return copy.deepcopy(value)


_TOOLS_COPIES: dict[int, tuple[Any, list]] = {}


def copy_tools(tools: Sequence[Mapping] | None) -> list:
    """A deep copy of a `tools` list, made once per list and shared by the records built from it
    (tool schemas are large; an RL record per step would otherwise copy them again and again)."""
    tools = tools or []
    cached = _TOOLS_COPIES.get(id(tools))
    if cached is None or cached[0] is not tools:
        if len(_TOOLS_COPIES) >= 256:
            _TOOLS_COPIES.clear()
        cached = _TOOLS_COPIES[id(tools)] = (tools, copy_json(list(tools)))
    return cached[1]
