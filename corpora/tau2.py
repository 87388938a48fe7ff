"""tau2-bench `Results` files, read as tau2-bench writes them (sierra-research/tau2-bench,
`src/tau2/data_model/simulation.py`): one JSON object per run,
`{timestamp, info{…, environment_info{domain_name, policy, tool_defs}}, tasks[…], simulations[…]}`.

Each simulation `{id, task_id, trial, seed, reward_info{reward, …}, messages[…], …}` is one record:

- its id is the simulation's `id`; its source `tau2-bench/<domain_name>` (each domain has its own
  tools, so each gets its own catalogue when the file carries no schemas);
- the outcome is `reward_info.reward` (success when it is 1);
- the policy (`info.environment_info.policy`) is the system message, as the agent was given it; a
  run without a user simulator (tau2's solo mode) gave the agent the task's `ticket` after it, in
  `<ticket>` tags, and so does the record;
- the tools are `info.environment_info.tool_defs` when the run wrote them (`{name: {name, doc,
  params}}`, tau2's `ToolSignature`), else the source's catalogue of the calls made;
- a message's `tool_calls[{id, name, arguments, requestor}]` are OpenAI calls; a tool message's `id`
  names the call it answers; `error: true` on a result is kept in `meta.message_extra`;
- in some domains (telecom) the *user* calls tools on their own device (`requestor: "user"`). The
  agent never saw those calls or their results, so they are dropped, each counted (a quirk said on
  stderr); a user message left with no text by that is dropped too;
- `meta.task_id` is the simulation's `task_id` (several trials of one task share it: the held-out
  split keeps them on one side), with `trial`, `seed` and `termination_reason` beside it.
"""
from __future__ import annotations

from typing import Any, Iterator, Mapping

from corpora.common import (TOOLS_SOURCE, BadRecord, as_tool, first_user_text, json_type, note_quirk,
                            unanswered_outcome)

USER_TOOL_CALLS = "user-side tool calls (tau2-bench, requestor \"user\") left out with their results: the agent never saw them"
_KEPT = ("trial", "seed", "termination_reason")


def is_results(obj: Any) -> bool:
    """A tau2-bench Results document (a run's file), as opposed to one record."""
    return isinstance(obj, dict) and isinstance(obj.get("simulations"), list) and isinstance(obj.get("info"), dict)


def _environment(doc: Mapping) -> Mapping:
    env = doc["info"].get("environment_info")
    if not isinstance(env, dict) or not isinstance(env.get("policy"), str):
        raise BadRecord("info.environment_info.policy: missing (a tau2-bench Results file names the agent's "
                        "policy there)")
    return env


def _tools(env: Mapping) -> list[dict] | None:
    defs = env.get("tool_defs")
    if not defs:
        return None
    if not isinstance(defs, dict):
        raise BadRecord(f"info.environment_info.tool_defs: must be an object of tool signatures, not {json_type(defs)}")
    return [as_tool({"name": s.get("name", name), "description": s.get("doc") or "",
                     "parameters": s.get("params") or {"type": "object", "properties": {}}},
                    f"info.environment_info.tool_defs.{name}") if isinstance(s, dict)
            else as_tool(s, f"info.environment_info.tool_defs.{name}") for name, s in defs.items()]


def _messages(raw: Any, where: str) -> tuple[list[dict], dict[str, dict]]:
    """The messages the agent saw, OpenAI-style, and `{index: {"error": true}}` for failed results."""
    if not isinstance(raw, list):
        raise BadRecord(f"{where}: must be a list of messages, not {json_type(raw)}")
    out: list[dict] = []
    errors: dict[str, dict] = {}
    users: set[str] = set()   # ids of the calls the user made
    for i, m in enumerate(raw):
        mw = f"{where}[{i}]"
        if not isinstance(m, dict):
            raise BadRecord(f"{mw}: must be an object, not {json_type(m)}")
        role, calls = m.get("role"), m.get("tool_calls") or []
        if not isinstance(calls, list):
            raise BadRecord(f"{mw}.tool_calls: must be a list, not {json_type(calls)}")
        if role == "tool":
            if m.get("requestor") == "user" or m.get("id") in users:
                continue
            if m.get("error") is True:
                errors[str(len(out))] = {"error": True}
            out.append({"role": "tool", "tool_call_id": m.get("id"), "content": m.get("content") or ""})
            continue
        kept = []
        for k, call in enumerate(calls):
            if not isinstance(call, dict):
                raise BadRecord(f"{mw}.tool_calls[{k}]: a tool call must be an object, not {json_type(call)}")
            if call.get("requestor") == "user" or role == "user":
                users.add(call.get("id"))
                note_quirk(USER_TOOL_CALLS)
            else:
                kept.append({"id": call.get("id"), "function": {"name": call.get("name"),
                                                                 "arguments": call.get("arguments")}})
        if role == "user" and not m.get("content"):
            continue
        message = {"role": role, "content": m.get("content")}
        if kept:
            message["tool_calls"] = kept
        out.append(message)
    return out, errors


def simulations(doc: dict, default_id: str) -> Iterator[tuple[str, dict | BadRecord]]:
    """(where, OpenAI-style record or the reason it cannot be one) for each simulation of a Results
    document, `where` being `simulations[k]`; a fault of the whole document raises BadRecord."""
    env = _environment(doc)
    tools = _tools(env)
    domain = env.get("domain_name") if isinstance(env.get("domain_name"), str) else "unnamed"
    tickets = {t.get("id"): t.get("ticket") for t in doc.get("tasks") or () if isinstance(t, dict)}
    for k, sim in enumerate(doc["simulations"]):
        where = f"simulations[{k}]"
        try:
            yield where, _simulation(sim, env["policy"], tools, domain, tickets, f"{default_id}/{where}")
        except BadRecord as exc:
            yield where, BadRecord(f"{where}: {exc}")


def _simulation(sim: Any, policy: str, tools: list[dict] | None, domain: str, tickets: Mapping,
                default_id: str) -> dict:
    from corpora.openai import convert_openai

    if not isinstance(sim, dict):
        raise BadRecord(f"must be an object, not {json_type(sim)}")
    messages, errors = _messages(sim.get("messages"), "messages")
    system = policy
    ticket = tickets.get(sim.get("task_id"))
    if not any(m["role"] == "user" for m in messages) and isinstance(ticket, str):
        system += f"\n\n<ticket>\n{ticket}\n</ticket>"   # solo mode: tau2's agent prompt carries the ticket
    info = sim.get("reward_info")
    reward = info.get("reward") if isinstance(info, dict) else None
    if reward is not None and (isinstance(reward, bool) or not isinstance(reward, (int, float))):
        raise BadRecord(f"reward_info.reward: must be a number, not {json_type(reward)}")
    meta: dict[str, Any] = {"task_id": sim.get("task_id"), **{key: sim[key] for key in _KEPT if key in sim}}
    if errors:
        meta["message_extra"] = {str(int(i) + 1): e for i, e in errors.items()}   # + 1: the system message
    record = convert_openai({"id": sim.get("id") if sim.get("id") is not None else default_id,
                             "messages": [{"role": "system", "content": system}, *messages],
                             **({"tools": tools} if tools else {})}, default_id)
    record["source"] = f"tau2-bench/{domain}"
    record["task"] = first_user_text(record["messages"]) or (ticket if isinstance(ticket, str) else "")
    record["outcome"] = unanswered_outcome() if reward is None else {"success": reward >= 1.0, "reward": float(reward)}
    record["meta"] = {**record.get("meta", {}), **meta}
    if not tools:   # the episode was offered the domain's tools all the same: its source's catalogue
        record["meta"][TOOLS_SOURCE] = "calls"
    return record
