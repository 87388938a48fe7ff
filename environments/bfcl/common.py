"""Helpers shared by the BFCL benchmarks and the corpus builders: reading tool calls out of
canonical messages, splitting a trajectory into user turns, bounded feedback values, and the
short assistant reply that closes a turn."""
from __future__ import annotations

import json
from collections import Counter
from typing import Any, Iterable, Mapping, Sequence

from environments.bfcl.backends import ERROR_PREFIX, CallError

MAX_NAME_CHARS = 200
FEEDBACK_CHARS = 400


def call_parts(call: Any) -> tuple[str, dict]:
    """(name, arguments) of a tool call given as `{"name", "arguments"}` or as an OpenAI
    `tool_calls` entry (`{"function": {"name", "arguments"}}`); `arguments` is a JSON object
    text (or already a mapping). Raises CallError for anything else."""
    if not isinstance(call, Mapping):
        raise CallError("a tool call must be an object with a name and arguments")
    fn = call.get("function") if isinstance(call.get("function"), Mapping) else call
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise CallError("a tool call needs a function name")
    if len(name) > MAX_NAME_CHARS:
        raise CallError(f"function name longer than {MAX_NAME_CHARS} characters")
    args = fn.get("arguments", {})
    if args is None:
        args = {}
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except (ValueError, RecursionError):
            raise CallError(f"{short(name, 80)}: arguments are not valid JSON") from None
    if not isinstance(args, Mapping):
        raise CallError(f"{short(name, 80)}: arguments must be a JSON object")
    return name, dict(args)


def error_observation(message: str) -> str:
    return ERROR_PREFIX + message


def is_error(obs: str) -> bool:
    """An observation that reports a failure (BFCL's prefix or a JSON object with "error")."""
    if obs.startswith(ERROR_PREFIX):
        return True
    try:
        parsed = json.loads(obs)
    except (ValueError, RecursionError):
        return False
    return isinstance(parsed, dict) and "error" in parsed


def split_turns(messages: Sequence[Mapping]) -> tuple[list[list[dict]], list[list[list[Mapping]]]]:
    """A trajectory as user turns: (the user messages that open each turn, the tool-call lists
    of each turn's assistant messages, one list per assistant message). Messages before the first
    user message (system prompts) belong to no turn; consecutive user messages open one turn
    together; system messages elsewhere are ignored."""
    opens: list[list[dict]] = []
    steps: list[list[list[Mapping]]] = []
    prev = None
    for m in messages:
        role = m.get("role")
        if role == "system":
            continue
        if role == "user":
            if opens and prev == "user":
                opens[-1].append(dict(m))
            else:
                opens.append([dict(m)])
                steps.append([])
        elif role == "assistant" and opens:
            steps[-1].append(list(m.get("tool_calls") or []))
        prev = role
    return opens, steps


def short(value: Any, limit: int = FEEDBACK_CHARS) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True, default=repr)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def bounded(value: Any, limit: int = FEEDBACK_CHARS, depth: int = 0) -> Any:
    """A JSON-safe copy of `value` with long strings cut and deep or wide structures summarised."""
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else repr(value)
    if isinstance(value, str):
        return short(value, limit)
    if depth >= 4:
        return short(value, limit)
    if isinstance(value, Mapping):
        items = list(value.items())
        out = {str(k): bounded(v, limit, depth + 1) for k, v in items[:40]}
        if len(items) > 40:
            out["..."] = f"{len(items) - 40} more"
        return out
    if isinstance(value, (list, tuple, set)):
        items = list(value)
        out = [bounded(v, limit, depth + 1) for v in items[:40]]
        if len(items) > 40:
            out.append(f"... {len(items) - 40} more")
        return out
    return short(repr(value), limit)


OPENERS = ("Done.", "All set.", "Finished.", "Completed.", "Here is the result.")


def closing_reply(last: tuple[str, str] | None, opener: str = OPENERS[0]) -> str:
    """The short assistant reply that closes a user turn, from the turn's last (name, observation)."""
    if last is None:
        return "There is nothing I can do for that with the available tools."
    name, obs = last
    text = obs if len(obs) <= 200 else obs[:197] + "..."
    if is_error(obs):
        return f"That did not go through: {name} returned {text}"
    return f"{opener} {name} returned {text}"


def tool_call_message(calls: Iterable[tuple[str, str, dict]], content: str | None = None) -> dict:
    """An assistant message with OpenAI tool calls [(id, name, arguments)]."""
    return {"role": "assistant", "content": content, "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}
        for cid, name, args in calls]}


def contains_all(outputs: Iterable[str], expected: Iterable[str]) -> bool:
    """Whether `outputs` hold every result of `expected`, each as often as it occurs there (BFCL's
    response check: the ground truth's results of a turn, as a multiset, within the model's)."""
    return not Counter(expected) - Counter(outputs)
