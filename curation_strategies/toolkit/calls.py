"""Tool calls: read them out of messages, parse their arguments, and check a call against the
`tools` JSON schemas (tool offered, required parameters present, known parameters, types)."""
from __future__ import annotations

import functools
import json
import re
from typing import Any, Mapping, Sequence

# First word of a tool name that marks it as changing the environment's state.
STATE_CHANGING_VERBS = frozenset(
    "activate add adjust authenticate book buy cancel cd close comment cp create delete echo edit "
    "fill follow lock login logout make mkdir modify move mute mv pay place post purchase put "
    "register remove rename reserve retweet rm rmdir send set sell start stop submit touch transfer "
    "turn unfollow unlock update upload write".split())
# Type names seen in the wild (BFCL's raw docs use Python names) mapped to JSON Schema's.
_TYPE_ALIASES = {"dict": "object", "float": "number", "tuple": "array", "list": "array",
                 "int": "integer", "bool": "boolean", "str": "string"}
_TYPE_CHECKS = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def tool_calls(message: Mapping) -> list[Mapping]:
    """The calls an assistant message makes ([] for any other message)."""
    return list(message.get("tool_calls") or []) if message["role"] == "assistant" else []


def parse_arguments(call: Mapping) -> dict | None:
    """The call's arguments as a dict, or None when they are not a JSON object."""
    try:
        args = json.loads(call["function"]["arguments"] or "{}")
    except (ValueError, TypeError):
        return None
    return args if isinstance(args, dict) else None


def call_signature(call: Mapping) -> str:
    """A canonical one-line form, e.g. cd(folder="document"), equal for equal calls."""
    name, arguments = call["function"]["name"], call["function"]["arguments"]
    if type(name) is str and type(arguments) is str:   # remembered: deduplication and redundancy ask again
        return _signature(name, arguments)
    return _signature.__wrapped__(name, arguments)


@functools.lru_cache(maxsize=8192)
def _signature(name, arguments) -> str:
    args = parse_arguments({"function": {"arguments": arguments}})
    if args is None:
        return f"{name}(<invalid arguments>)"
    inner = ", ".join(f"{k}={json.dumps(args[k], sort_keys=True, ensure_ascii=False)}" for k in sorted(args))
    return f"{name}({inner})"


def call_sequence(raw: Mapping) -> list[str]:
    """Signatures of every call of a trajectory, in order."""
    return [call_signature(c) for m in raw["messages"] for c in tool_calls(m)]


def tool_schema(tools: Sequence[Mapping], name: str) -> Mapping | None:
    """The `function` object of the offered tool called `name`."""
    for tool in tools:
        if tool["function"]["name"] == name:
            return tool["function"]
    return None


def _type_ok(value: Any, schema: Mapping) -> bool:
    declared = schema.get("type")
    if declared is None:
        return True
    names = declared if isinstance(declared, list) else [declared]
    for name in names:
        check = _TYPE_CHECKS.get(_TYPE_ALIASES.get(name, name))
        if check is None or check(value):  # an unknown type name ("any") accepts everything
            return True
    return False


def validate_call(call: Mapping, tools: Sequence[Mapping]) -> str | None:
    """None if the call is well formed for `tools`, else the first reason it is not."""
    name = call["function"]["name"]
    schema = tool_schema(tools, name)
    if schema is None:
        return f"tool {name!r} is not offered"
    args = parse_arguments(call)
    if args is None:
        return f"{name}: arguments are not a JSON object"
    params = schema.get("parameters") or {}
    props = params.get("properties") or {}
    for required in params.get("required") or []:
        if required not in args:
            return f"{name}: missing required parameter {required!r}"
    for key in sorted(args):
        if key not in props:
            if props and params.get("additionalProperties") is not True:
                return f"{name}: unknown parameter {key!r}"
            continue
        if not _type_ok(args[key], props[key]):
            return f"{name}: parameter {key!r} should be {props[key].get('type')}"
        if "enum" in props[key] and args[key] not in props[key]["enum"]:
            return f"{name}: parameter {key!r} is not one of {props[key]['enum']}"
    return None


def is_state_changing(tool_name: str) -> bool:
    """Heuristic: the tool's first word (snake_case or camelCase) is a mutating verb."""
    words = re.findall(r"[a-z]+|[A-Z][a-z]*", tool_name)
    return bool(words) and words[0].lower() in STATE_CHANGING_VERBS
