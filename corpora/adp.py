"""Agent Data Protocol (neulab/agent-data-protocol standardized schema): `{"id", "content":
[actions and observations with "class_"], "details"?, "schema_version"?, ...}`.

Read as ADP's own reference converter (`agents/openhands/std_to_sft.py`) reads it:

- an action's `description` (the agent's reasoning) is the assistant turn's content, before its
  call; a `message_action`'s description comes before its text, separated by a blank line;
- a text observation right after an action answers that action's call whatever its `source`
  (ADP labels many such results `source: "user"`); an observation with a `tool_call_id` answers
  that call; other environment text answers the oldest unanswered call, or reads as user input;
- the outcome a dataset publishes at the top level or in `details` (`resolved`, `success`, `target`,
  a `reward` in [0, 1]) is the record's outcome (`common.published_outcome`);
- ADP ids are unique within a dataset only, so a record's id is qualified by the file it comes
  from (`<file stem>/<id>`), and a repeat inside one file gets `#<position>` appended.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

from corpora.common import (TOOLS_SOURCE, BadRecord, ToolSynth, first_user_text, json_type,
                                   published_outcome, record_id, tools_from, unanswered_outcome)
from base.schemas import canonical_json

_ADP_KEYS = frozenset(("id", "content", "details", "schema_version", "available_apis",
                       "available_custom_tools", "available_code_languages", "tools"))
_LANG_ALIASES = {"py": "python", "python3": "python", "python4": "python", "ipython": "python",
                 "sh": "bash", "shell": "bash", "console": "bash", "commandline": "bash",
                 "cmd": "bash", "js": "javascript", "node": "javascript", "ts": "typescript"}
_OBS_SOURCES = {"user": "user", "environment": "environment", "agent": "assistant",
                "assistant": "assistant", "system": "system"}


def _adp_class(item: Mapping) -> str:
    cls = item.get("class_")
    if not isinstance(cls, str):
        return ""
    # Tolerate the CamelCase spelling (ApiAction -> api_action).
    return re.sub(r"(?<!^)(?=[A-Z])", "_", cls).lower() if cls[:1].isupper() else cls


def code_tool_name(language: str) -> str:
    lang = language.strip().lower()
    lang = _LANG_ALIASES.get(lang, lang)
    return "execute_" + (re.sub(r"[^a-z0-9]+", "_", lang).strip("_") or "code")


def _adp_str(item: Mapping, key: str, where: str, required: bool = True) -> str | None:
    value = item.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        what = "missing" if value is None else f"must be a string, not {json_type(value)}"
        raise BadRecord(f"{where}.{key}: {what}")
    return value


def _web_text(item: Mapping, where: str) -> str:
    parts = []
    for key, label in (("url", "URL"), ("axtree", None), ("html", None)):
        value = item.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise BadRecord(f"{where}.{key}: must be a string, not {json_type(value)}")
        if key == "html" and item.get("axtree"):
            continue  # the accessibility tree already says it, far shorter
        parts.append(f"{label}: {value}" if label else value)
    return "\n".join(parts)


def convert_adp(obj: dict, default_id: str, scope: str = "") -> dict:
    """One ADP trajectory as a canonical record; `scope` (the file's stem) qualifies its id."""
    content = obj["content"]
    if not isinstance(content, list):
        raise BadRecord(f"content: must be a list, not {json_type(content)}")
    details = obj.get("details", {})
    if not isinstance(details, dict):
        raise BadRecord(f"details: must be an object, not {json_type(details)}")
    given = tools_from(obj.get("tools", details.get("tools")), "tools")
    synth = ToolSynth()
    messages: list[dict] = []
    pending: list[str] = []          # our call ids awaiting a result, in call order
    id_map: dict[str, str] = {}      # ADP tool_call_id -> our call id
    used_ids: set[str] = set()
    steps: list[dict] = []
    n_calls = 0
    prev_was_call = False
    for j, item in enumerate(content):
        where = f"content[{j}]"
        if not isinstance(item, dict):
            raise BadRecord(f"{where}: must be an object, not {json_type(item)}")
        cls = _adp_class(item)
        is_call = cls in ("api_action", "code_action")
        if is_call:
            if cls == "api_action":
                name = _adp_str(item, "function", where)
                if not name:
                    raise BadRecord(f"{where}.function: empty function name")
                kwargs = item.get("kwargs", {})
                if not isinstance(kwargs, dict):
                    raise BadRecord(f"{where}.kwargs: must be an object, not {json_type(kwargs)}")
            else:
                lang = _adp_str(item, "language", where)
                name = code_tool_name(lang)
                kwargs = {"code": _adp_str(item, "content", where)}
            synth.see(name, kwargs)
            adp_id = item.get("tool_call_id")
            if adp_id is not None and not isinstance(adp_id, str):
                raise BadRecord(f"{where}.tool_call_id: must be a string, not {json_type(adp_id)}")
            call_id = adp_id if adp_id and adp_id not in used_ids else None
            while call_id is None or call_id in used_ids:
                call_id = f"call_{n_calls}"
                n_calls += 1
            used_ids.add(call_id)
            if adp_id:
                id_map[adp_id] = call_id
            pending.append(call_id)
            call = {"id": call_id, "type": "function",
                    "function": {"name": name, "arguments": canonical_json(kwargs)}}
            thought = _adp_str(item, "description", where, required=False)
            if prev_was_call and not thought and messages and messages[-1].get("tool_calls"):
                messages[-1]["tool_calls"].append(call)   # parallel calls: one assistant turn
            else:
                messages.append({"role": "assistant", "content": thought or None,
                                 "tool_calls": [call]})
        elif cls == "message_action":
            text = _adp_str(item, "content", where)
            thought = _adp_str(item, "description", where, required=False)
            messages.append({"role": "assistant", "content": f"{thought}\n\n{text}" if thought else text})
        elif cls in ("text_observation", "web_observation", "image_observation"):
            if cls == "text_observation":
                text = _adp_str(item, "content", where)
            elif cls == "web_observation":
                text = _web_text(item, where)
            else:
                text = f"[image: {_adp_str(item, 'content', where)}]"
            source = item.get("source", "environment")
            role = _OBS_SOURCES.get(source) if isinstance(source, str) else None
            if role is None:
                raise BadRecord(f"{where}.source: unknown source {source!r} (expected user, "
                                 "environment or agent)")
            adp_id = item.get("tool_call_id")
            if adp_id is not None:
                if not isinstance(adp_id, str) or adp_id not in id_map:
                    raise BadRecord(f"{where}.tool_call_id: {adp_id!r} answers no earlier action")
                call_id = id_map.pop(adp_id)
                if call_id not in pending:
                    raise BadRecord(f"{where}.tool_call_id: {adp_id!r} was already answered")
                pending.remove(call_id)
                messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
            elif pending and (role == "environment" or (prev_was_call and cls == "text_observation")):
                # Right after an action, ADP's converter reads any text observation as its result.
                messages.append({"role": "tool", "tool_call_id": pending.pop(0), "content": text})
            else:
                # Environment text with no call to answer (e.g. the first page) reads as user input.
                messages.append({"role": "user" if role == "environment" else role, "content": text})
        else:
            raise BadRecord(f"{where}.class_: unknown ADP class {item.get('class_')!r} (expected "
                             "api_action, code_action, message_action, text_observation, "
                             "web_observation or image_observation)")
        prev_was_call = is_call
        step = {k: item[k] for k in ("reasoning_content", "reward") if item.get(k) is not None}
        if step:
            steps.append({"content_index": j, "message_index": len(messages) - 1, **step})
    for key in ("available_custom_tools", "available_apis"):
        names = obj.get(key)
        if names is not None:
            if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
                raise BadRecord(f"{key}: must be a list of tool names")
            for n in names:
                synth.add_name(n)
    rid = record_id(obj, default_id)
    if scope and "id" in obj:
        rid = f"{scope}/{rid}"
    adp_meta: dict[str, Any] = {"details": details}
    for key in ("schema_version", "available_code_languages"):
        if key in obj:
            adp_meta[key] = obj[key]
    if steps:
        adp_meta["steps"] = steps
    meta: dict[str, Any] = {"origin_format": "adp", "adp": adp_meta}
    extra = {k: obj[k] for k in obj if k not in _ADP_KEYS}
    if extra:
        meta["extra"] = extra
    source = details.get("dataset") if isinstance(details.get("dataset"), str) else "adp"
    if not given and synth.props:
        meta[TOOLS_SOURCE] = "calls"   # corpora.catalogue: one catalogue per source after loading
    return {"id": rid, "source": source, "task": first_user_text(messages),
            "tools": given or synth.tools(), "messages": messages,
            "outcome": published_outcome(obj, details) or unanswered_outcome(), "meta": meta}

