"""What every format converter shares: the conversion error, JSON type names, tool schemas
(given, or synthesised from the calls seen) and call arguments as JSON strings."""
from __future__ import annotations

import json
from typing import Any

from sandbox.schemas import canonical_json


# meta key naming where a record's tool schemas came from when its file had none:
# "calls" (its own calls), "catalogue" (its source's calls), "file" (--tools); sandbox.corpus.catalogue
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


def as_tool(tool: Any, where: str) -> dict:
    """An OpenAI tool entry; a bare function schema {name, description, parameters} is wrapped."""
    if not isinstance(tool, dict):
        raise BadRecord(f"{where}: a tool must be an object, not {json_type(tool)}")
    if "function" in tool:
        return tool if "type" in tool else {"type": "function", **tool}
    if "name" in tool:
        return {"type": "function", "function": tool}
    raise BadRecord(f"{where}: a tool needs 'function' or 'name'")


def as_list(value: Any, where: str, what: str) -> Any:
    """A JSON string is parsed and a lone object wrapped in a list; anything else is returned as is."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise BadRecord(f"{where}: {what} is not JSON ({exc})") from None
    return [value] if isinstance(value, dict) else value


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
