"""The record formats of DESIGN.md as JSON Schemas, plus the checks a schema cannot say.

One module serves the corpus loader (raw records) and the host-side artifact checker (SFT, RL
and memory records), so a trajectory is judged by the same rules wherever it appears.
`check_*` return None when the record is valid, else one sentence naming the field.
"""
from __future__ import annotations

import functools
import json
from typing import Annotated, Any, Literal, Mapping, Sequence, Union

import fastjsonschema
import jsonschema
import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from base.canonical import canonical_json, shared

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


def _record(required: list[str], **properties) -> dict:
    """A record kind's schema: an object of exactly these properties, `id` and `meta` always among them."""
    return {"type": "object", "required": required, "additionalProperties": False,
            "properties": {"id": _ID, **properties, "meta": _META}}


RAW_SCHEMA = _record(
    ["id", "messages"], source={"type": "string"}, task={"type": "string"}, tools=_TOOLS, messages=_MESSAGES,
    outcome={"type": ["object", "null"],
             "properties": {"success": {"type": ["boolean", "null"]}, "reward": {"type": ["number", "null"]}}})
SFT_SCHEMA = _record(["id", "messages", "tools"], messages=_MESSAGES, tools=_TOOLS,
                     weights={"type": "array", "items": {"enum": [0, 1]}})
RL_SCHEMA = _record(
    ["id", "messages", "tools", "reference", "reward"], messages=_MESSAGES, tools=_TOOLS,
    reference={"oneOf": [
        {"type": "object", "required": ["tool_calls"], "additionalProperties": False,
         "properties": {"tool_calls": {"type": "array", "items": _TOOL_CALL, "minItems": 1}}},
        {"type": "object", "required": ["content"], "additionalProperties": False,
         "properties": {"content": {"type": "string"}}},
    ]},
    reward={"enum": list(REWARDS)})
MEMORY_SCHEMA = _record(["id", "key", "content"], key={"type": "string", "minLength": 1},
                        content={"type": "string", "minLength": 1}, tags={"type": "array", "items": {"type": "string"}})

SCHEMAS = {"raw": RAW_SCHEMA, "sft": SFT_SCHEMA, "rl": RL_SCHEMA, "memory": MEMORY_SCHEMA}


# _MESSAGES and an RL `reference` as msgspec types, for the fast path: msgspec takes them only
# where the schema does (tests/test_corpus.py compares the verdicts on mutants of real records), in C.
class _Function(Struct, forbid_unknown_fields=True):
    name: Annotated[str, Meta(min_length=1, max_length=256)]   # _TOOL_NAME
    arguments: str


class _ToolCall(Struct, forbid_unknown_fields=True):
    id: Annotated[str, Meta(min_length=1)]
    type: Literal["function"]
    function: _Function


class _Message(Struct, forbid_unknown_fields=True):
    role: Literal[ROLES]
    content: Union[str, None, UnsetType] = UNSET
    tool_calls: Union[list[_ToolCall], UnsetType] = UNSET
    tool_call_id: Union[Annotated[str, Meta(min_length=1)], UnsetType] = UNSET
    name: Union[str, UnsetType] = UNSET


_MESSAGE_LIST = Annotated[list[_Message], Meta(min_length=1)]


class _CallsReference(Struct, forbid_unknown_fields=True):
    tool_calls: Annotated[list[_ToolCall], Meta(min_length=1)]


class _ContentReference(Struct, forbid_unknown_fields=True):
    content: str


_REFERENCES = (_CallsReference, _ContentReference)   # oneOf: no object is both (each forbids the other's field)

# fastjsonschema (compiled, ~1/30 of the time) and msgspec answer for valid records; jsonschema,
# the reference implementation, names the field when a record is invalid.
_FAST = {name: fastjsonschema.compile(schema) for name, schema in SCHEMAS.items()}
_VALIDATORS = {name: jsonschema.Draft202012Validator(schema) for name, schema in SCHEMAS.items()}
# A record is valid iff it is valid with `tools` and `messages` any arrays (messages: one at
# least), `reference` anything, and its tools, messages and reference are valid (no keyword relates
# two fields): the tool list, shared by a trajectory's records, is judged once, the rest by msgspec.
_FAST_BESIDE = {name: fastjsonschema.compile({**SCHEMAS[name], "properties": {
    **SCHEMAS[name]["properties"], "tools": {"type": "array"}, "messages": {"type": "array", "minItems": 1},
    **({"reference": {}} if name == "rl" else {})}}) for name in ("raw", "sft", "rl")}
_FAST_TOOLS = fastjsonschema.compile(_TOOLS)


@shared
def _tools_valid(tools: Any) -> bool:
    try:
        _FAST_TOOLS(tools)
        return True
    except fastjsonschema.JsonSchemaException:
        return False


def _takes(kind: Any, value: Any) -> bool:
    """Whether msgspec takes `value` (read from JSON: lists, never tuples) as `kind`."""
    try:
        msgspec.convert(value, kind)
        return True
    except msgspec.ValidationError:
        return False


def _schema_error(kind: str, record: Any) -> str | None:
    try:
        if kind in _FAST_BESIDE:
            _FAST_BESIDE[kind](record)
            if (_tools_valid(record.get("tools", [])) and _takes(_MESSAGE_LIST, record["messages"])
                    and (kind != "rl" or any(_takes(t, record["reference"]) for t in _REFERENCES))):
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


MEMO_ARGUMENTS = 4096   # call arguments of at most this many characters have their verdict memoised


def _arguments_verdict(arguments: str) -> str | None:
    """None when call arguments are a JSON object, else why not."""
    try:
        args = json.loads(arguments)
    except ValueError as exc:
        return f"not JSON ({exc.msg})"
    if not isinstance(args, dict):
        return f"must be a JSON object, not {type(args).__name__}"
    return None


_memo_verdict = functools.lru_cache(maxsize=4096)(_arguments_verdict)   # RL prefixes repeat their calls


def _check_calls(calls: list[Mapping], known: frozenset[str], where: str) -> str | None:
    for j, call in enumerate(calls):
        name = call["function"]["name"]
        if name not in known:
            return f"{where}[{j}]: call to tool {name!r}, which is not in tools"
        arguments = call["function"]["arguments"]
        why = (_memo_verdict if len(arguments) <= MEMO_ARGUMENTS else _arguments_verdict)(arguments)
        if why is not None:
            return f"{where}[{j}].function.arguments: {why}"
    return None


@shared
def _known_names(tools: list[Mapping]) -> frozenset:
    return frozenset(tool_names(tools))   # a shared tool list's once


def orphan_result(messages: Sequence[Mapping], i: int, call_id: str | None = None) -> str:
    """Why the tool result `messages[i]` answers no open call, naming the message really at fault: the
    nearest earlier assistant message (whose call is missing, or was not read as one), or the result
    itself when it repeats an answer."""
    before = [k for k in range(i) if messages[k].get("role") == "assistant"]
    calling = [k for k in before if messages[k].get("tool_calls")]
    if not calling and not before:
        return f"messages[{i}]: a tool result, but no earlier assistant message makes a tool call"
    if not calling:
        return (f"messages[{before[-1]}]: makes no tool call, yet messages[{i}] is a tool result answering one; a call "
                "written in the assistant's text is not read as one")
    k = calling[-1]
    ids = [c.get("id") for c in messages[k]["tool_calls"] if isinstance(c, Mapping)]
    answered = {m.get("tool_call_id") for m in messages[k + 1:i] if m.get("role") == "tool"}
    if call_id is not None and call_id not in ids:
        return (f"messages[{k}].tool_calls: no call with id {call_id!r}, which the tool result messages[{i}] answers "
                f"(its calls: {', '.join(map(repr, ids))})")
    if call_id is not None or set(ids) <= answered:
        return (f"messages[{i}]: a tool result, but every call of messages[{k}] ({', '.join(map(repr, ids))}) is "
                f"answered already: an extra result, or a call missing from messages[{k}]")
    return f"messages[{i}]: a tool result answers no earlier unanswered call"


def check_messages(messages: list[Mapping], tools: list[Mapping]) -> str | None:
    """Checks a schema cannot express: calls name offered tools with JSON-object arguments,
    every tool result answers an earlier call, call ids are unique within the trajectory."""
    known = _known_names(tools)
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
                return orphan_result(messages, i, call_id)
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
        error = _check_calls(calls, _known_names(record["tools"]), "reference.tool_calls")
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
