"""The record formats of DESIGN.md as JSON Schemas, plus the checks a schema cannot say.

One module serves the corpus loader (raw records) and the host-side artifact checker (SFT, RL
and memory records), so a trajectory is judged by the same rules wherever it appears.
`check_*` return None when the record is valid, else one sentence naming the field.
"""
from __future__ import annotations

import json
from typing import Any, Mapping

import fastjsonschema
import jsonschema

from sandbox.canonical import canonical_json, shared

ROLES = ("system", "user", "assistant", "tool")
REWARDS = ("tool_call_match", "state_match")

_STR_OR_NULL = {"type": ["string", "null"]}
# OpenAI allows 64 characters; the bound keeps the host's per-name counters small (sandbox.checker)
_TOOL_NAME = {"type": "string", "minLength": 1, "maxLength": 256}
_TOOL_CALL = {
    "type": "object",
    "required": ["id", "type", "function"],
    "additionalProperties": False,
    "properties": {
        "id": {"type": "string", "minLength": 1},
        "type": {"const": "function"},
        "function": {
            "type": "object",
            "required": ["name", "arguments"],
            "additionalProperties": False,
            "properties": {"name": _TOOL_NAME, "arguments": {"type": "string"}},
        },
    },
}
_MESSAGE = {
    "type": "object",
    "required": ["role"],
    "additionalProperties": False,
    "properties": {
        "role": {"enum": list(ROLES)},
        "content": _STR_OR_NULL,
        "tool_calls": {"type": "array", "items": _TOOL_CALL},
        "tool_call_id": {"type": "string", "minLength": 1},
        "name": {"type": "string"},
    },
}
_TOOL = {
    "type": "object",
    "required": ["type", "function"],
    "properties": {
        "type": {"const": "function"},
        "function": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": _TOOL_NAME,
                "description": {"type": "string"},
                "parameters": {"type": "object"},
            },
        },
    },
}
_ID = {"type": "string", "minLength": 1}
_MESSAGES = {"type": "array", "items": _MESSAGE, "minItems": 1}
_TOOLS = {"type": "array", "items": _TOOL}
_META = {"type": "object"}

RAW_SCHEMA = {
    "type": "object",
    "required": ["id", "messages"],
    "additionalProperties": False,
    "properties": {
        "id": _ID,
        "source": {"type": "string"},
        "task": {"type": "string"},
        "tools": _TOOLS,
        "messages": _MESSAGES,
        "outcome": {
            "type": ["object", "null"],
            "properties": {"success": {"type": ["boolean", "null"]}, "reward": {"type": ["number", "null"]}},
        },
        "meta": _META,
    },
}
SFT_SCHEMA = {
    "type": "object",
    "required": ["id", "messages", "tools"],
    "additionalProperties": False,
    "properties": {
        "id": _ID,
        "messages": _MESSAGES,
        "tools": _TOOLS,
        "weights": {"type": "array", "items": {"enum": [0, 1]}},
        "meta": _META,
    },
}
RL_SCHEMA = {
    "type": "object",
    "required": ["id", "messages", "tools", "reference", "reward"],
    "additionalProperties": False,
    "properties": {
        "id": _ID,
        "messages": _MESSAGES,
        "tools": _TOOLS,
        "reference": {
            "oneOf": [
                {"type": "object", "required": ["tool_calls"], "additionalProperties": False,
                 "properties": {"tool_calls": {"type": "array", "items": _TOOL_CALL, "minItems": 1}}},
                {"type": "object", "required": ["content"], "additionalProperties": False,
                 "properties": {"content": {"type": "string"}}},
            ]
        },
        "reward": {"enum": list(REWARDS)},
        "meta": _META,
    },
}
MEMORY_SCHEMA = {
    "type": "object",
    "required": ["id", "key", "content"],
    "additionalProperties": False,
    "properties": {
        "id": _ID,
        "key": {"type": "string", "minLength": 1},
        "content": {"type": "string", "minLength": 1},
        "tags": {"type": "array", "items": {"type": "string"}},
        "meta": _META,
    },
}

SCHEMAS = {"raw": RAW_SCHEMA, "sft": SFT_SCHEMA, "rl": RL_SCHEMA, "memory": MEMORY_SCHEMA}
# fastjsonschema (compiled, ~1/30 of the time) answers for valid records; jsonschema, the
# reference implementation, names the field when a record is invalid.
_FAST = {name: fastjsonschema.compile(schema) for name, schema in SCHEMAS.items()}
_VALIDATORS = {name: jsonschema.Draft202012Validator(schema) for name, schema in SCHEMAS.items()}
# An SFT or RL record is valid iff it is valid with `tools` any array and its tools are valid (no
# keyword relates two fields): the tool list, shared by a trajectory's records, is judged once.
_FAST_BESIDE_TOOLS = {name: fastjsonschema.compile({**SCHEMAS[name], "properties": {
    **SCHEMAS[name]["properties"], "tools": {"type": "array"}}}) for name in ("sft", "rl")}
_FAST_TOOLS = fastjsonschema.compile(_TOOLS)


@shared
def _tools_valid(tools: Any) -> bool:
    try:
        _FAST_TOOLS(tools)
        return True
    except fastjsonschema.JsonSchemaException:
        return False


def _schema_error(kind: str, record: Any) -> str | None:
    try:
        if kind in _FAST_BESIDE_TOOLS:
            _FAST_BESIDE_TOOLS[kind](record)
            if _tools_valid(record["tools"]):
                return None
        else:
            _FAST[kind](record)
            return None
    except fastjsonschema.JsonSchemaException:
        pass
    return reference_schema_error(kind, record)


def reference_schema_error(kind: str, record: Any) -> str | None:
    """The jsonschema verdict alone (the reference the fast path is tested against)."""
    error = jsonschema.exceptions.best_match(_VALIDATORS[kind].iter_errors(record))
    if error is None:
        return None
    where = error.json_path.removeprefix("$.").removeprefix("$") or "record"
    return f"{where}: {error.message}"


def tool_names(tools: list[Mapping]) -> list[str]:
    return [t["function"]["name"] for t in tools]


def _check_calls(calls: list[Mapping], known: set[str], where: str) -> str | None:
    for j, call in enumerate(calls):
        name = call["function"]["name"]
        if name not in known:
            return f"{where}[{j}]: call to tool {name!r}, which is not in tools"
        try:
            args = json.loads(call["function"]["arguments"])
        except ValueError as exc:
            return f"{where}[{j}].function.arguments: not JSON ({exc.msg})"
        if not isinstance(args, dict):
            return f"{where}[{j}].function.arguments: must be a JSON object, not {type(args).__name__}"
    return None


def check_messages(messages: list[Mapping], tools: list[Mapping]) -> str | None:
    """Checks a schema cannot express: calls name offered tools with JSON-object arguments,
    every tool result answers an earlier call, call ids are unique within the trajectory."""
    known = set(tool_names(tools))
    pending: set[str] = set()
    seen: set[str] = set()
    for i, msg in enumerate(messages):
        role = msg["role"]
        if "tool_calls" in msg and role != "assistant":
            return f"messages[{i}].tool_calls: only assistant messages make tool calls"
        if "tool_call_id" in msg and role != "tool":
            return f"messages[{i}].tool_call_id: only tool messages answer tool calls"
        if role == "assistant":
            calls = msg.get("tool_calls") or []
            error = _check_calls(calls, known, f"messages[{i}].tool_calls")
            if error:
                return error
            for j, call in enumerate(calls):
                if call["id"] in seen:
                    return f"messages[{i}].tool_calls[{j}].id: duplicate call id {call['id']!r}"
                seen.add(call["id"])
                pending.add(call["id"])
        elif role == "tool":
            call_id = msg.get("tool_call_id")
            if call_id is None:
                return f"messages[{i}]: tool message without tool_call_id"
            if call_id not in pending:
                return f"messages[{i}].tool_call_id: {call_id!r} answers no earlier tool call"
            pending.discard(call_id)
    return None


def assistant_count(messages: list[Mapping]) -> int:
    return sum(1 for m in messages if m["role"] == "assistant")


def check_raw(record: Any) -> str | None:
    """None if `record` is a valid canonical raw corpus record, else the reason."""
    return _schema_error("raw", record) or check_messages(record["messages"], record.get("tools", []))


def check_sft(record: Any) -> str | None:
    error = _schema_error("sft", record) or check_messages(record["messages"], record["tools"])
    if error:
        return error
    n = assistant_count(record["messages"])
    if n == 0:
        return "messages: an SFT record needs at least one assistant message"
    weights = record.get("weights")
    if weights is not None:
        if len(weights) != n:
            return f"weights: {len(weights)} weights for {n} assistant messages"
        if not any(weights):
            return "weights: every assistant message has weight 0, nothing would be trained"
    return None


def check_rl(record: Any) -> str | None:
    error = _schema_error("rl", record) or check_messages(record["messages"], record["tools"])
    if error:
        return error
    if record["messages"][-1]["role"] not in ("user", "tool"):
        return "messages: an RL prefix must end before an assistant turn (last role user or tool)"
    calls = record["reference"].get("tool_calls")
    if calls:
        error = _check_calls(calls, set(tool_names(record["tools"])), "reference.tool_calls")
        if error:
            return error
    if record["reward"] == "state_match" and not (record.get("meta") or {}).get("env"):
        return "reward: state_match needs meta.env to rebuild the scenario"
    return None


def check_memory(record: Any) -> str | None:
    return _schema_error("memory", record)


CHECKS = {"sft": check_sft, "rl": check_rl, "memory": check_memory}
ARTIFACT_KINDS = ("sft", "rl", "memory")


def turn_cost(kind: str, record: Mapping) -> int:
    """ℓ(z): assistant messages of an SFT record (weight 0 or 1); an RL prefix's plus one."""
    if kind == "sft":
        return assistant_count(record["messages"])
    if kind == "rl":
        return assistant_count(record["messages"]) + 1
    return 0
