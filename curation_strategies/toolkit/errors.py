"""Erroneous turns: a tool result that reports an error, an assistant turn whose call failed or
was invalid, and whether the agent corrected it later (the refinement of AgentRefine §3)."""
from __future__ import annotations

import functools
import json
import re
from typing import Mapping

from .calls import call_signature, is_state_changing, tool_calls, validate_call
from .trajectory import assistant_indices, same_user_turn, tool_results

# Text that marks a tool result as a failure. Anchored where a word alone would be too loose.
ERROR_PATTERNS = [re.compile(p, re.IGNORECASE | re.MULTILINE) for p in (
    r"Traceback \(most recent call last\)",
    r"^\s*(error|exception)\b",                   # Error: ..., Error during execution: ...
    r"^\s*(failed|failure)\b\s*([:!-]|to\b)",
    r"\bmissing \d+ required (positional|keyword)(-only)? arguments?\b",
    r"\bgot an unexpected keyword argument\b",
    r"^\s*\w*(Error|Exception)\s*:",            # KeyError: ..., ValueError: ...
    r"No such file or directory",
    r"\bcommand not found\b",
    r"\bpermission denied\b",
    r"^\s*\w+: cannot\b",                         # mv: cannot move ...
    r"^\s*invalid\b",
)]
_ERROR_KEYS = ("error", "errors", "error_message", "exception")
# A word at least one of ERROR_PATTERNS needs (lower-cased): ASCII text holding none of them matches
# none, so the patterns (most of the time spent on long tool outputs) are searched only when one is there.
_NEEDLES = ("traceback", "error", "exception", "fail", "missing", "unexpected", "no such file",
            "command not found", "permission denied", "cannot", "invalid")
_JSON_START = frozenset('"{[ntfNI-0123456789')   # the first characters json.loads can decode from


def _reports_error(text: str) -> bool:
    """Whether one of ERROR_PATTERNS matches `text` (the needles first: IGNORECASE can match
    non-ASCII letters such as 'ſ' to ASCII ones, so only ASCII text is decided by them alone)."""
    if text.isascii():
        lowered = text.lower()
        if not any(map(lowered.__contains__, _NEEDLES)):
            return False
    return any(p.search(text) for p in ERROR_PATTERNS)


def error_message(content: str | None) -> str | None:
    """The error a tool result reports, or None when it reports none.

    JSON results count as errors only through an error key ({"error": "..."}) or
    {"success"|"status": false|"error"}, so file contents that mention errors do not."""
    if not content:
        return None
    if type(content) is str:
        return _text_error(content)
    return _error_message(content)


@functools.lru_cache(maxsize=4096)
def _text_error(content: str) -> str | None:
    """error_message of a text, remembered: a strategy asks about the same tool result several times
    while it reads one trajectory (its errors, their corrections, its redundant turns, its steps),
    and parsing it (JSON, ERROR_PATTERNS) was a sixth of AgentRefine's time at 10^4 records."""
    return _error_message(content)


def _error_message(content) -> str | None:
    start = content.lstrip(" \t\n\r")[:1]   # JSON's own whitespace
    try:
        data = json.loads(content) if start in _JSON_START else content   # else json.loads would refuse it
    except ValueError:
        data = content
    if isinstance(data, dict):
        for key in _ERROR_KEYS:
            if data.get(key):
                value = data[key]
                return value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)
        status = data.get("status")
        if data.get("success") is False or status is False or status in ("error", "failed"):
            return str(data.get("message") or data.get("detail") or content)
        return None
    if isinstance(data, str) and _reports_error(data):
        return data.strip()
    return None


def is_error_result(content: str | None) -> bool:
    return error_message(content) is not None


def turn_errors(raw: Mapping, validate: bool = True) -> dict[int, str]:
    """Erroneous assistant turns of a trajectory: message index -> reason. A turn is erroneous
    when the result of one of its calls is an error, or (with `validate`) when a call is invalid
    for `tools` and no successful result says otherwise: the environment's word beats the schema
    (BFCL's own ground truth passes "ticket_001" where its schema says integer)."""
    messages, tools = raw["messages"], raw.get("tools") or []
    found: dict[int, str] = {}
    for i in assistant_indices(messages):
        results = tool_results(messages, i)
        for call in tool_calls(messages[i]):
            result = results.get(call["id"])
            failure = error_message(result.get("content")) if result else None
            if result is not None and failure is None:
                continue
            reason = (validate_call(call, tools) if validate else None) or failure
            if reason:
                found[i] = reason
                break
    return found


def erroneous_turns(raw: Mapping, validate: bool = True) -> list[int]:
    """Message indices of the erroneous assistant turns, in order."""
    return sorted(turn_errors(raw, validate))


def corrections(raw: Mapping, validate: bool = True) -> dict[int, int | None]:
    """For each erroneous turn, the index of the turn that corrects it: the first later assistant
    turn of the same user request that makes calls without error (None if the agent never does)."""
    messages = raw["messages"]
    errors = turn_errors(raw, validate)
    turns = assistant_indices(messages)
    result: dict[int, int | None] = {}
    for i in sorted(errors):
        result[i] = next((j for j in turns if j > i and j not in errors and tool_calls(messages[j])
                          and same_user_turn(messages, i, j)), None)
    return result


def corrected_turns(raw: Mapping, validate: bool = True) -> list[int]:
    """Erroneous turns that are corrected later (the ones AgentRefine keeps but does not train)."""
    return [i for i, j in corrections(raw, validate).items() if j is not None]


def uncorrected_turns(raw: Mapping, validate: bool = True) -> list[int]:
    return [i for i, j in corrections(raw, validate).items() if j is None]


def redundant_turns(raw: Mapping) -> list[int]:
    """Assistant turns that only repeat calls which already succeeded earlier in the same user
    request with no state-changing call since (a redundant read: same question, same answer)."""
    messages = raw["messages"]
    errors = turn_errors(raw, validate=False)
    found = []
    seen: set[str] = set()
    for prev, i in zip([None] + assistant_indices(messages), assistant_indices(messages)):
        if prev is not None and not same_user_turn(messages, prev, i):
            seen = set()
        calls = tool_calls(messages[i])
        signatures = [call_signature(c) for c in calls]
        if calls and all(s in seen for s in signatures):
            found.append(i)
        if i in errors:
            continue
        if any(is_state_changing(c["function"]["name"]) for c in calls):
            seen = set()
        else:
            seen.update(signatures)
    return found
