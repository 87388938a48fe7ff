"""OpenAI-style chat records (the canonical format, DESIGN.md "Formats") and the real variants of
it that public corpora publish. Each quirk is converted to the canonical form:

- no `id`: the record's place in its file (`file:line`, `file[index]`) is its id;
- no `tools`: schemas are synthesised from the calls made; `tools` (or the legacy `functions`)
  as a JSON string or as bare function schemas `{name, description, parameters}` are read;
- content-part lists (`[{"type": "text", "text"|"value": ...}]`): text parts are joined with a
  newline; a `reasoning`/`thinking` part is kept before the text as `<think>…</think>`; a
  `tool_call` part (LLaMA-Factory v1, `{"name", "arguments"}` as JSON) is a tool call; an image
  or audio part is refused (a text model cannot be trained on it);
- the legacy `function_call` on an assistant message is a tool call, and a role `function`
  message is its result (answering the oldest unanswered call of that name);
- several results as one tool message holding a JSON list of result objects `{content,
  tool_call_id|name}` (LLaMA-Factory, after parallel calls) become one tool message each
  (`common.result_envelopes`); any other content, a JSON list of hits included, is one result;
- a call id used again after it was answered (tau-bench) is renamed `<id>~<n>` so each result
  answers its own call; a call without an id gets `call_<n>`;
- per-message keys the canonical message has no place for (`valid`, `weight`, `refusal`, ...)
  are kept, when not null, under `meta.message_extra[<index in the source messages>]`;
- unknown top-level keys are kept under `meta.extra`; an outcome published beside the messages
  (`resolved`, `success`, `target`, or a `reward` in [0, 1]: `common.published_outcome`) is the
  record's outcome when it has no `outcome` of its own.

Two published file layouts carry such messages under another key:

- tau-bench historical trajectories: `{"task_id", "trial", "reward", "info", "traj": [messages]}`;
  `reward` (1.0 or 0.0, tau-bench's task success) becomes the outcome;
- ToolBench answer files: `{"win", "answer_generation": {"train_messages": [[...], ...],
  "function": [schemas], ...}, ...}`; the last (longest) of `train_messages` is the trajectory,
  `function` its tools and `win` its success;
- SWE-agent `.traj` files: `{"history": [messages], "trajectory": [steps], "info", ...}`; the
  history is what the model saw (a tool result names its call in `tool_call_ids`, a list of one);
  `trajectory` repeats it step by step and is not kept; `info` (exit status, submission) is.
"""
from __future__ import annotations

import re
from typing import Any

from corpora.common import (TOOLS_SOURCE, BadRecord, ToolSynth, arguments_json, json_type, parsed_args,
                            published_outcome, record_id, result_envelopes, tools_from)
from base.schemas import ROLES, canonical_json, orphan_result

CANONICAL_KEYS = frozenset(("id", "source", "task", "tools", "messages", "outcome", "meta"))
_MESSAGE_KEYS = frozenset(("role", "content", "tool_calls", "tool_call_id", "name"))
_SWE_AGENT_DROPPED = ("trajectory", "replay_config")
_TEXT_PARTS = ("text", "input_text", "output_text")
_REASONING_PARTS = ("reasoning", "thinking")
_MEDIA_PARTS = ("image_url", "image", "input_image", "input_audio", "audio", "file", "video")


class _Calls:
    """Call ids of one record: fresh ids for missing or reused ones, and which are unanswered."""

    def __init__(self) -> None:
        self.used: set[str] = set()
        self.open: dict[str, str] = {}     # the record's id -> our id, unanswered, in call order
        self.names: dict[str, str] = {}    # our id -> function name
        self.n = 0

    def new(self, given: Any, name: str) -> str:
        if isinstance(given, str) and given:
            ours, k = given, 1
            while ours in self.used:
                ours, k = f"{given}~{k}", k + 1
            self.open[given] = ours
        else:
            while (ours := f"call_{self.n}") in self.used:
                self.n += 1
            self.open[ours] = ours
        self.used.add(ours)
        self.names[ours] = name
        return ours

    def answer(self, given: Any, name: Any) -> str | None:
        """Our id for a result naming `given` (as given when no open call has it: the schema
        check then names the fault), or without one the oldest open call (of `name` if given)."""
        if isinstance(given, str) and given:
            return self.open.pop(given, given)
        for key, ours in self.open.items():
            if not isinstance(name, str) or self.names[ours] == name:
                del self.open[key]
                return ours
        return None


def _part_text(part: dict, where: str) -> str:
    text = part.get("text", part.get("value"))
    if not isinstance(text, str):
        raise BadRecord(f"{where}: a {part.get('type')!r} part needs a string 'text' or 'value'")
    return text


def _content(content: Any, where: str) -> tuple[str | None, list[Any]]:
    """(text, tool calls given as content parts) of a message's content."""
    if content is None or isinstance(content, str):
        return content, []
    if not isinstance(content, list):
        raise BadRecord(f"{where}: must be a string, a list of content parts or null, "
                        f"not {json_type(content)}")
    texts, thoughts, calls = [], [], []
    for j, part in enumerate(content):
        pw = f"{where}[{j}]"
        if isinstance(part, str):
            texts.append(part)
            continue
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS:
            texts.append(_part_text(part, pw))
        elif kind in _REASONING_PARTS:
            thoughts.append(_part_text(part, pw))
        elif kind == "tool_call":
            value = part.get("value", part.get("tool_call"))
            parsed = parsed_args(value) if isinstance(value, str) else None
            calls.append(value if parsed is None else parsed)
        elif kind in _MEDIA_PARTS:
            raise BadRecord(f"{pw}: a part of type {kind!r} cannot be trained on a text model; drop the "
                            "part (or the record) before loading")
        else:
            raise BadRecord(f"{pw}: unknown content part type {kind!r} (expected text, reasoning "
                            "or tool_call)")
    text = "\n".join(texts)
    if thoughts:
        text = "<think>\n" + "\n".join(thoughts) + "\n</think>" + (f"\n\n{text}" if text else "")
    return (text if texts or thoughts else None), calls


def _tool_call(call: Any, where: str, calls: _Calls, synth: ToolSynth) -> dict:
    if not isinstance(call, dict):
        raise BadRecord(f"{where}: a tool call must be an object, not {json_type(call)}")
    fn = call.get("function", call)
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str) or not name:
        raise BadRecord(f"{where}: a tool call needs a string function name")
    args = arguments_json(fn.get("arguments", fn.get("parameters")), f"{where}.arguments")
    synth.see(name, parsed_args(args))
    return {"id": calls.new(call.get("id"), name), "type": "function",
            "function": {"name": name, "arguments": args}}


def _result(result: dict, calls: _Calls, where: str) -> dict:
    """One of several result objects given as a JSON list in one tool message (LLaMA-Factory): it
    answers the call it names (its `tool_call_id`, else the oldest open call of its `name`)."""
    ours = calls.answer(result.get("tool_call_id") if result.get("tool_call_id") in calls.open
                        else None, result.get("name"))
    if ours is None:
        raise BadRecord(f"{where}: a result in this tool message answers no earlier unanswered call "
                        f"(named {result.get('tool_call_id') or result.get('name')!r})")
    content = result["content"]
    return {"role": "tool", "tool_call_id": ours,
            "content": content if isinstance(content, str) else canonical_json(content)}


def normalise_messages(raw: Any, where: str = "messages") -> tuple[list[dict], ToolSynth, dict]:
    """(canonical messages, the tools their calls imply, per-message extras by index)."""
    if not isinstance(raw, list):
        raise BadRecord(f"{where}: must be a list of messages, not {json_type(raw)}")
    calls, synth = _Calls(), ToolSynth()
    messages: list[dict] = []
    origin: list[int] = []   # the source index of each message made
    extras: dict[str, dict] = {}
    for i, m in enumerate(raw):
        mw = f"{where}[{i}]"
        if not isinstance(m, dict):
            raise BadRecord(f"{mw}: must be an object, not {json_type(m)}")
        role = m.get("role")
        if role == "function":
            role = "tool"
        if role not in ROLES:
            raise BadRecord(f"{mw}.role: unknown role {role!r} (expected one of {', '.join(ROLES)} "
                            "or the legacy function)")
        text, part_calls = _content(m.get("content"), f"{mw}.content")
        out: dict[str, Any] = {"role": role, "content": text}
        given = m.get("tool_calls") or []
        if not isinstance(given, list):
            raise BadRecord(f"{mw}.tool_calls: must be a list, not {json_type(given)}")
        legacy = [m["function_call"]] if m.get("function_call") is not None else []
        every = [*given, *legacy, *part_calls]
        if every and role != "assistant":
            raise BadRecord(f"{mw}: a {role} message cannot make tool calls")
        if every:
            out["tool_calls"] = [_tool_call(c, f"{mw}.tool_calls[{k}]", calls, synth)
                                 for k, c in enumerate(every)]
        if role == "tool" and m.get("tool_call_id") is None and len(calls.open) > 1:
            results = result_envelopes(text or "")
            if results is not None:
                messages += [_result(r, calls, mw) for r in results]
                origin += [i] * len(results)
                continue
        if role == "tool":
            ours = calls.answer(m.get("tool_call_id"), m.get("name"))
            out["tool_call_id"] = ours or m.get("tool_call_id")
            if out["tool_call_id"] is None:   # named by the source's message indices
                reason = orphan_result([*messages, out], len(messages))
                raise BadRecord(re.sub(r"messages\[(\d+)\]", lambda g: f"{where}[{[*origin, i][int(g[1])]}]", reason))
            if out["content"] is None:
                out["content"] = ""
        if isinstance(m.get("name"), str):
            out["name"] = m["name"]
        extra = {k: v for k, v in m.items() if k not in _MESSAGE_KEYS and k != "function_call"
                 and v not in (None, "", [], {})}
        if extra:
            extras[str(i)] = extra
        messages.append(out)
        origin.append(i)
    return messages, synth, extras


def convert_openai(obj: dict, default_id: str) -> dict:
    """An OpenAI-style record (canonical records pass unchanged) as a canonical record."""
    messages, synth, extras = normalise_messages(obj["messages"])
    tools_key = "tools" if "tools" in obj else "functions"
    given = tools_from(obj.get(tools_key), tools_key)
    record = {k: obj[k] for k in obj if k in CANONICAL_KEYS}
    record["id"] = record_id(obj, default_id)
    record["messages"] = messages
    if "outcome" not in obj and published_outcome(obj):   # `resolved`, `success`, `reward` beside the messages
        record["outcome"] = published_outcome(obj)
    inferred = given is None and bool(synth.props)
    if given is not None:
        record["tools"] = given
    elif inferred:
        record["tools"] = synth.tools()
    extra = {k: obj[k] for k in obj if k not in CANONICAL_KEYS and k != "functions"}
    if extra or extras or inferred:
        meta = record.get("meta", {})
        if not isinstance(meta, dict):
            raise BadRecord(f"meta: must be an object, not {json_type(meta)}")
        meta = dict(meta)
        if inferred:
            meta[TOOLS_SOURCE] = "calls"   # corpora.catalogue: one catalogue per source after loading
        for key, value in (("extra", extra), ("message_extra", extras)):
            if not value:
                continue
            kept = meta.get(key)
            if kept is not None and not isinstance(kept, dict):
                raise BadRecord(f"meta.{key}: must be an object to keep the record's other keys")
            meta[key] = {**(kept or {}), **value}
        record["meta"] = meta
    return record


def convert_tau_bench(obj: dict, default_id: str) -> dict:
    reward = obj.get("reward")
    if reward is not None and (isinstance(reward, bool) or not isinstance(reward, (int, float))):
        raise BadRecord(f"reward: must be a number, not {json_type(reward)}")
    extra = {k: v for k, v in obj.items() if k not in ("traj", "reward")}
    record = convert_openai({"messages": obj["traj"], **extra}, default_id)
    record["source"] = "tau-bench"
    if "tools" not in record:   # the episode was offered the environment's tools all the same: its source's catalogue
        record["meta"] = {**record.get("meta", {}), TOOLS_SOURCE: "calls"}
    record["outcome"] = {"success": None if reward is None else reward >= 1.0, "reward": reward}
    return record


def convert_toolbench(obj: dict, default_id: str) -> dict:
    answer = obj["answer_generation"]
    if not isinstance(answer, dict):
        raise BadRecord(f"answer_generation: must be an object, not {json_type(answer)}")
    chains = answer.get("train_messages")
    if not isinstance(chains, list) or not chains or not isinstance(chains[-1], list):
        raise BadRecord("answer_generation.train_messages: missing or empty, so this answer has "
                        "no trajectory to train on (ToolBench writes none for an invalid answer); "
                        "leave the file out")
    win = obj.get("win")
    extra = {"query": answer.get("query"), "final_answer": answer.get("final_answer"),
             "valid_data": answer.get("valid_data")}
    record = convert_openai({"messages": chains[-1], "tools": answer.get("function"),
                             "toolbench": {k: v for k, v in extra.items() if v is not None}},
                            default_id)
    record["source"] = "toolbench"
    record["outcome"] = {"success": win if isinstance(win, bool) else None, "reward": None}
    return record


def convert_swe_agent(obj: dict, default_id: str) -> dict:
    history = obj["history"]
    if not isinstance(history, list):
        raise BadRecord(f"history: must be a list of messages, not {json_type(history)}")
    messages = []
    for i, m in enumerate(history):
        ids = m.get("tool_call_ids") if isinstance(m, dict) else None
        if ids is not None:
            if not (isinstance(ids, list) and len(ids) == 1 and isinstance(ids[0], str)):
                raise BadRecord(f"history[{i}].tool_call_ids: one observation answering "
                                f"{ids!r} cannot be split into one result per call; leave the "
                                "record out")
            m = {**{k: v for k, v in m.items() if k != "tool_call_ids"}, "tool_call_id": ids[0]}
        messages.append(m)
    kept = {k: v for k, v in obj.items() if k != "history" and k not in _SWE_AGENT_DROPPED}
    record = convert_openai({**kept, "messages": messages}, default_id)
    record["source"] = "swe-agent"
    return record


def canonical_unchanged(obj: dict) -> bool:
    """True when `obj` needs no conversion (the common case, kept fast)."""
    return set(obj) <= CANONICAL_KEYS and isinstance(obj.get("id"), str)

