"""What every format converter shares: the conversion error, JSON type names, tool schemas
(given, or synthesised from the calls seen) and call arguments as JSON strings."""
from __future__ import annotations

import contextvars
import json
from collections import Counter
from typing import Any, Mapping

from base.schemas import canonical_json


# meta key naming where a record's tool schemas came from when its file had none:
# "calls" (its own calls), "catalogue" (its source's calls), "file" (--tools); corpora.catalogue
TOOLS_SOURCE = "tools_source"


class BadRecord(ValueError):
    """A conversion failure; its message is the reason (with a field path and, where there is
    one, the fix)."""


def json_type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer",
            float: "number", type(None): "null"}.get(type(value), type(value).__name__)


def first_user_text(messages: list[dict]) -> str:
    for m in messages:
        if m["role"] == "user":
            return m.get("content") or ""
    return ""


def record_id(obj: dict, default_id: str) -> str:
    """The record's own `id` (an integer id becomes its decimal string), else `default_id`."""
    rid = obj.get("id")
    if rid is None:
        return default_id
    if isinstance(rid, int) and not isinstance(rid, bool):
        return str(rid)
    if not isinstance(rid, str) or not rid:
        raise BadRecord(f"id: must be a non-empty string or an integer, not {json_type(rid)}")
    return rid


# Quirks a whole published format shares, normalised on load and counted here for one line on stderr
# (corpora.loader sets a Counter per load_corpus call; None: not counted).
QUIRKS: contextvars.ContextVar[Counter | None] = contextvars.ContextVar("corpus_quirks", default=None)
NULL_PARAMETERS = "tool schemas with \"parameters\": null read as a tool without parameters (an empty object schema)"
EMPTY_PARAMETERS = {"type": "object", "properties": {}}


def note_quirk(name: str) -> None:
    counter = QUIRKS.get()
    if counter is not None:
        counter[name] += 1


def _function_schema(function: Any) -> Any:
    """A function schema with `"parameters": null` (Agent Data Protocol's OpenHands exports write it for
    a tool without arguments) as one with an empty object schema; anything else unchanged."""
    if isinstance(function, dict) and "parameters" in function and function["parameters"] is None:
        note_quirk(NULL_PARAMETERS)
        return {**function, "parameters": dict(EMPTY_PARAMETERS)}
    return function


def as_tool(tool: Any, where: str) -> dict:
    """An OpenAI tool entry; a bare function schema {name, description, parameters} is wrapped."""
    if not isinstance(tool, dict):
        raise BadRecord(f"{where}: a tool must be an object, not {json_type(tool)}")
    if "function" in tool:
        tool = {**tool, "function": _function_schema(tool["function"])}
        return tool if "type" in tool else {"type": "function", **tool}
    if "name" in tool:
        return {"type": "function", "function": _function_schema(tool)}
    raise BadRecord(f"{where}: a tool needs 'function' or 'name'")


# Outcome fields published formats carry beside the trajectory, in the order they are read:
# SWE-bench's `resolved` (ADP's SWE-Gym / OpenHands exports), `success`, nebius SWE-agent's `target`;
# else a numeric `reward` in [0, 1] (success when it is 1).
OUTCOME_FLAGS = ("resolved", "success", "target")


def published_outcome(*places: Any) -> dict | None:
    """The record's outcome from the first of `places` (mappings: the record's top level, its details)
    that carries one of OUTCOME_FLAGS as a boolean or a numeric reward; None when none does."""
    for place in places:
        if not isinstance(place, Mapping):
            continue
        reward = place.get("reward")
        reward = float(reward) if isinstance(reward, (int, float)) and not isinstance(reward, bool) \
            and 0 <= reward <= 1 else None
        for key in OUTCOME_FLAGS:
            if isinstance(place.get(key), bool):
                return {"success": place[key], "reward": reward}
        if reward is not None:
            return {"success": reward >= 1.0, "reward": reward}
    return None


def as_list(value: Any, where: str, what: str) -> Any:
    """A JSON string is parsed and a lone object wrapped in a list; anything else is returned as is."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise BadRecord(f"{where}: {what} is not JSON ({exc})") from None
    return [value] if isinstance(value, dict) else value


_ENVELOPE_KEYS = frozenset(("content", "tool_call_id", "name", "role"))


def result_envelopes(value: Any) -> list[dict] | None:
    """Several results given as one tool message (LLaMA-Factory, after parallel calls): a JSON list
    whose every element is a result object `{"content", "tool_call_id" and/or "name"}` and no other
    key; None for anything else. A list of other values (a search's hits) is one result, however
    long: a split is never guessed from the content's shape."""
    if isinstance(value, str):
        value = parsed_args(value)
    if not isinstance(value, list) or not value:
        return None
    if all(isinstance(r, dict) and "content" in r and set(r) <= _ENVELOPE_KEYS
           and ("tool_call_id" in r or "name" in r) for r in value):
        return value
    return None


def tools_from(value: Any, where: str) -> list[dict] | None:
    """Tools given as a list or a JSON string of one (bare function schemas wrapped); None when
    absent or an empty string."""
    if value is None or value == "":
        return None
    value = as_list(value, where, "tools string")
    if not isinstance(value, list):
        raise BadRecord(f"{where}: must be a list of tools, not {json_type(value)}")
    return [as_tool(t, f"{where}[{i}]") for i, t in enumerate(value)]


class ToolSynth:
    """Builds tool schemas from the calls seen when a record offers none."""

    def __init__(self) -> None:
        self.props: dict[str, dict[str, Any]] = {}
        self.required: dict[str, set[str]] = {}

    def see(self, name: str, args: Any) -> None:
        props = self.props.setdefault(name, {})
        keys = set(args) if isinstance(args, dict) else set()
        if name in self.required:
            self.required[name] &= keys
        else:
            self.required[name] = keys
        if isinstance(args, dict):
            for key, value in args.items():
                t = json_type(value)
                if t == "null":
                    props.setdefault(key, {})
                elif key not in props:
                    props[key] = {"type": t}
                elif {props[key].get("type"), t} == {"integer", "number"}:
                    props[key] = {"type": "number"}   # 3 in one call, 2.5 in another
                elif props[key].get("type") != t:
                    props[key] = {}

    def add_name(self, name: str) -> None:
        self.props.setdefault(name, {})
        self.required.setdefault(name, set())

    def tools(self) -> list[dict]:
        out = []
        for name, props in self.props.items():
            params: dict[str, Any] = {"type": "object", "properties": props}
            req = sorted(self.required.get(name) or ())
            if req:
                params["required"] = req
            out.append({"type": "function", "function": {"name": name, "parameters": params}})
        return out


def arguments_json(args: Any, where: str) -> str:
    if args is None:
        return "{}"
    if isinstance(args, str):
        return args
    if isinstance(args, dict):
        return canonical_json(args)
    raise BadRecord(f"{where}: arguments must be an object or a JSON string, not {json_type(args)}")


def parsed_args(args_json: str) -> Any:
    try:
        return json.loads(args_json)
    except ValueError:
        return None


def unanswered_outcome() -> dict:
    return {"success": None, "reward": None}
