"""ShareGPT (LLaMA-Factory style): `{"conversations": [{"from", "value"}], "system"?, "tools"?,
"id"?}` with `from` in human|user|gpt|assistant|system|function_call|observation|tool."""
from __future__ import annotations

from typing import Any

from corpora.common import (TOOLS_SOURCE, BadRecord, ToolSynth, arguments_json, as_list, first_user_text,
                            json_type, note_quirk, parsed_args, published_outcome, record_id,
                            result_envelopes, tools_from, unanswered_outcome)
from base.schemas import canonical_json

SHARED_OBSERVATION = ("ShareGPT observations answering several parallel calls at once, kept whole as the first "
                      "call's result (the others stay unanswered)")
_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                   "system": "system", "function_call": "call", "observation": "tool",
                   "tool": "tool"}
_SHAREGPT_KEYS = frozenset(("conversations", "system", "tools", "id", "source"))


def convert_sharegpt(obj: dict, default_id: str) -> dict:
    conv = obj["conversations"]
    if not isinstance(conv, list):
        raise BadRecord(f"conversations: must be a list, not {json_type(conv)}")
    given = tools_from(obj.get("tools"), "tools")
    synth = ToolSynth()
    messages: list[dict] = []
    system = obj.get("system")
    if system is not None:
        if not isinstance(system, str):
            raise BadRecord(f"system: must be a string, not {json_type(system)}")
        if system:
            messages.append({"role": "system", "content": system})
    pending: list[str] = []
    n_calls = 0
    for i, turn in enumerate(conv):
        where = f"conversations[{i}]"
        if not isinstance(turn, dict):
            raise BadRecord(f"{where}: must be an object, not {json_type(turn)}")
        speaker = turn.get("from", turn.get("role"))
        value = turn.get("value", turn.get("content"))
        if speaker is None:
            raise BadRecord(f"{where}: missing 'from'")
        role = _SHAREGPT_ROLES.get(speaker) if isinstance(speaker, str) else None
        if role is None:
            raise BadRecord(f"{where}.from: unknown speaker {speaker!r} (expected one of "
                             f"{', '.join(_SHAREGPT_ROLES)})")
        if role != "tool":   # a turn after the results: the calls no observation answered stay unanswered
            pending.clear()
        if role == "call":
            calls = as_list(value, f"{where}.value", "function_call")
            if not isinstance(calls, list) or not calls:
                raise BadRecord(f"{where}.value: function_call must be an object "
                                 "{name, arguments} or a non-empty list of them")
            tool_calls = []
            for j, call in enumerate(calls):
                cw = f"{where}.value[{j}]"
                if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
                    raise BadRecord(f"{cw}: a function_call needs a string 'name'")
                args = arguments_json(call.get("arguments", call.get("parameters")), f"{cw}.arguments")
                synth.see(call["name"], parsed_args(args))
                call_id = f"call_{n_calls}"
                n_calls += 1
                pending.append(call_id)
                tool_calls.append({"id": call_id, "type": "function",
                                   "function": {"name": call["name"], "arguments": args}})
            messages.append({"role": "assistant", "content": None, "tool_calls": tool_calls})
        elif role == "tool":
            if not pending:
                raise BadRecord(f"{where}: observation answers no earlier function_call")
            results = [value]
            envelopes = result_envelopes(value) if len(pending) > 1 and isinstance(value, str) else None
            if envelopes is not None and len(envelopes) <= len(pending):   # one result object per call
                results = [e["content"] for e in envelopes]
            elif len(pending) > 1:   # one observation for several calls: the first call's result, kept whole
                note_quirk(SHARED_OBSERVATION)
            for result in results:
                text = result if isinstance(result, str) else canonical_json(result)
                messages.append({"role": "tool", "tool_call_id": pending.pop(0), "content": text})
        else:
            if not isinstance(value, str):
                raise BadRecord(f"{where}.value: must be a string, not {json_type(value)}")
            messages.append({"role": role, "content": value})
    rid = record_id(obj, default_id)
    source = obj.get("source") if isinstance(obj.get("source"), str) else "sharegpt"
    meta: dict[str, Any] = {"origin_format": "sharegpt"}
    extra = {k: obj[k] for k in obj if k not in _SHAREGPT_KEYS}
    if extra:
        meta["extra"] = extra
    if not given and synth.props:
        meta[TOOLS_SOURCE] = "calls"   # corpora.catalogue: one catalogue per source after loading
    return {"id": rid, "source": source, "task": first_user_text(messages),
            "tools": given or synth.tools(), "messages": messages,
            "outcome": published_outcome(obj) or unanswered_outcome(), "meta": meta}

