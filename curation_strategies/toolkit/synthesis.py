"""Data added by simulated interaction (ctx.env) and by the host's LLM (ctx.llm): AgentRefine's
refinement synthesis, CoEvolve's environment-validated variants and LLM refinement. Every
operator executes what it makes in ctx.env (or checks it against the schemas) and keeps it only
when that validates; each is deterministic under the `random.Random` passed in (and, with an LLM,
under the host's recorded replies)."""
from __future__ import annotations

import json
import random
import re
from typing import Any, Mapping, Sequence

from .calls import is_state_changing, parse_arguments, tool_calls, validate_call
from .provenance import stamp, step
from .records import sft_record
from .trajectory import assistant_indices, canonical_json, copy_messages, env_of

ERROR_KINDS = ("wrong_tool", "missing_argument", "mistyped_argument")
MAX_ATTEMPTS = 6   # erroneous calls tried per trajectory before giving up on it


def _call(name: str, arguments: Mapping, call_id: str) -> dict:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}


def _typo(value: str) -> str | None:
    """The value with its last two adjacent letters swapped (None when that changes nothing)."""
    for k in range(len(value) - 2, -1, -1):
        if value[k].isalpha() and value[k + 1].isalpha() and value[k] != value[k + 1]:
            return value[:k] + value[k + 1] + value[k] + value[k + 2:]
    return None


def erroneous_call(call: Mapping, tools: Sequence[Mapping], kind: str, rng: random.Random,
                   call_id: str = "call_err") -> dict | None:
    """A plausible wrong version of `call`: another offered tool with the same arguments
    (`wrong_tool`), a required argument left out (`missing_argument`) or a string argument
    mistyped (`mistyped_argument`); None when `call` admits no such error."""
    name, args = call["function"]["name"], parse_arguments(call)
    if args is None:
        return None
    if kind == "wrong_tool":
        others = sorted(t["function"]["name"] for t in tools if t["function"]["name"] != name
                        and not is_state_changing(t["function"]["name"]))
        return _call(rng.choice(others), args, call_id) if others else None
    if kind == "missing_argument":
        schema = next((t["function"] for t in tools if t["function"]["name"] == name), {})
        required = sorted(p for p in (schema.get("parameters") or {}).get("required") or () if p in args)
        if not required:
            return None
        dropped = rng.choice(required)
        return _call(name, {k: v for k, v in args.items() if k != dropped}, call_id)
    if kind == "mistyped_argument":
        typos = sorted((k, t) for k, v in args.items() if isinstance(v, str) and (t := _typo(v)))
        if not typos:
            return None
        key, typo = rng.choice(typos)
        return _call(name, {**args, key: typo}, call_id)
    raise ValueError(f"unknown error kind {kind!r} (one of {', '.join(ERROR_KINDS)})")


def _tool_message(call: Mapping, content: str) -> dict:
    return {"role": "tool", "tool_call_id": call["id"], "name": call["function"]["name"], "content": content}


def refinement_synthesis(raw: Mapping, env, rng: random.Random, kinds: Sequence[str] = ERROR_KINDS,
                         tags: Sequence[str] = ()) -> dict | None:
    """AgentRefine: from a successful trajectory whose scenario ctx.env can rebuild, one SFT record
    with an erroneous call inserted before one of its calls, answered by the *real* error ctx.env
    returns, then the correct call and the rest; the erroneous turn has weight 0. Kept only when
    the error left the state unchanged and the whole trajectory still validates against the
    original by execution (same state after every turn, same results). None when no attempt does."""
    meta_env = env_of(raw)
    if env is None or (raw.get("outcome") or {}).get("success") is not True or not env.has(meta_env):
        return None
    messages = raw["messages"]
    positions = [i for i in assistant_indices(messages) if len(tool_calls(messages[i])) == 1]
    attempts = [(i, k) for i in positions for k in kinds]
    rng.shuffle(attempts)
    for i, kind in attempts[:MAX_ATTEMPTS]:
        scenario = env.start(meta_env)
        if not scenario.executable:
            return None
        scenario.run(messages[:i])
        before = scenario.state()
        wrong = erroneous_call(tool_calls(messages[i])[0], scenario.tools, kind, rng, f"call_err_{i}")
        if wrong is None:
            continue
        observation = scenario.execute(wrong)
        if not observation.error or scenario.state() != before:
            continue
        made = [*messages[:i], {"role": "assistant", "content": None, "tool_calls": [wrong]},
                _tool_message(wrong, observation.content), *messages[i:]]
        if not env.validate(made, messages, meta_env).valid:
            continue
        weights = [0 if n == i else 1 for n in assistant_indices(made)]
        return stamp(sft_record(raw, weights, id=f"{raw['id']}#refine-{kind}-{i}", messages=made,
                                tags=["refinement", kind, *tags]),
                     step("refinement_synthesis", "validated", kind=kind), replace=True)
    return None


# ------------------------------------------------------------------------ CoEvolve variants


def _siblings(state: Any, out: dict[str, list[tuple[str, ...]]]) -> None:
    """value → groups of sibling strings in the state: a dict's keys, a list's string items."""
    stack, seen = [state], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:   # backend objects point back to their parents
            continue
        seen.add(id(node))
        if isinstance(node, dict):
            group = tuple(sorted(k for k in node if isinstance(k, str)))
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            group = tuple(sorted({v for v in node if isinstance(v, str)}))
            stack.extend(node)
        elif hasattr(node, "__dict__"):   # backend objects (files, directories) hold state too
            stack.append(vars(node))
            continue
        else:
            continue
        if len(group) > 1:
            for value in group:
                out.setdefault(value, []).append(group)


def _replace(value: Any, old: str, new: str) -> Any:
    if value == old:
        return new
    if isinstance(value, list):
        return [_replace(v, old, new) for v in value]
    if isinstance(value, dict):
        return {k: _replace(v, old, new) for k, v in value.items()}
    return value


def environment_variants(raw: Mapping, env, rng: random.Random, limit: int = 1, tags: Sequence[str] = ()) -> list[dict]:
    """CoEvolve: new tasks from a successful trajectory by varying one argument within the scenario's
    state: a string argument the user request names verbatim is swapped for a sibling of it in the
    initial state (another file of the same folder, another key of the same table), in the request
    and in every call; the trajectory is re-executed for its new observations and kept only when
    every call fails or succeeds as in the original. Closing replies keep weight 0 (their text may
    describe the old results). At most `limit` variants."""
    meta_env = env_of(raw)
    if env is None or (raw.get("outcome") or {}).get("success") is not True or not env.has(meta_env):
        return []
    scenario = env.start(meta_env)
    if not scenario.executable:
        return []
    groups: dict[str, list] = {}
    _siblings(scenario.state(), groups)
    messages = raw["messages"]
    texts = " ".join(m.get("content") or "" for m in messages if m.get("role") in ("user", "assistant")) + \
        " ".join(c["function"]["arguments"] for m in messages for c in tool_calls(m))
    users = " ".join(m.get("content") or "" for m in messages if m.get("role") == "user")
    values = sorted({v for m in messages for c in tool_calls(m) for v in _strings(parse_arguments(c))
                     if len(v) >= 3 and v in groups and re.search(rf"\b{re.escape(v)}\b", users)})
    swaps = [(v, w) for v in values for g in groups[v] for w in g if w != v and len(w) >= 3 and w not in texts]
    swaps = sorted(set(swaps))
    rng.shuffle(swaps)
    original = env.start(meta_env).run(messages)
    out = []
    for old, new in swaps[:4 * limit]:
        made, observations = _vary(messages, old, new, env.start(meta_env))
        if [o.error for o in observations] != [o.error for o in original] or \
                _stale(made, [o.content for o in original], [o.content for o in observations]):
            continue
        weights = [1 if tool_calls(made[n]) else 0 for n in assistant_indices(made)]
        if not any(weights):
            continue
        record = sft_record({**raw, "task": next(m["content"] for m in made if m["role"] == "user")}, weights,
                            id=f"{raw['id']}#variant-{len(out)}", messages=made, tags=["variant", *tags])
        out.append(stamp(record, step("environment_variants", "validated", limit=limit, swap=[old, new]), replace=True))
        if len(out) >= limit:
            break
    return out


def _stale(made: Sequence[Mapping], before: Sequence[str], after: Sequence[str]) -> bool:
    """Does a call pass on a value read from a result the variation changed (a price quoted for
    the old item, say)? Then the calls no longer follow from the results and the variant is void."""
    calls = [c for m in made for c in tool_calls(m)]
    for k, call in enumerate(calls):
        for value in _leaves(parse_arguments(call)):
            text = value if isinstance(value, str) else json.dumps(value)
            if len(text) < 2:
                continue
            if any(text in before[j] and before[j] != after[j] for j in range(k)) and \
                    not any(text in after[j] for j in range(k)):
                return True
    return False


def _leaves(value: Any) -> list:
    if isinstance(value, list):
        return [x for v in value for x in _leaves(v)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)]
    return [] if value is None or isinstance(value, bool) else [value]


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    return []


def _vary(messages: Sequence[Mapping], old: str, new: str, scenario):
    """`messages` with `old` swapped for `new` and fresh observations; (messages, observations)."""
    word = re.compile(rf"\b{re.escape(old)}\b")
    made, observations = [], []
    for m in copy_messages(messages):
        if m["role"] in ("user", "assistant") and isinstance(m.get("content"), str):
            m["content"] = word.sub(new, m["content"])
        if m["role"] == "tool":
            continue
        made.append(m)
        for call in tool_calls(m):
            args = parse_arguments(call)
            call["function"]["arguments"] = json.dumps(_replace(args, old, new), ensure_ascii=False)
            observation = scenario.execute(call)
            observations.append(observation)
            made.append(_tool_message(call, observation.content))
    return made, observations


# ------------------------------------------------------------------------ LLM refinement

REFINE_PROMPT = """A tool call failed. Write the corrected call.
Tool: {schema}
User request: {request}
Failed call: {call}
Error: {error}
Reply with one JSON object only: {{"name": "<tool name>", "arguments": {{...}}}}"""


def _json_object(text: str) -> dict | None:
    start, end = text.find("{"), text.rfind("}")
    try:
        value = json.loads(text[start:end + 1]) if start >= 0 else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def llm_refine(raw: Mapping, llm, env, index: int, error: str, tags: Sequence[str] = (),
               max_tokens: int = 256) -> dict | None:
    """LLM refinement: the host's LLM rewrites the malformed or failing call of assistant message
    `index` given `error`; kept only when the rewrite passes the schema and, where ctx.env can
    rebuild the scenario, executes without error after the trajectory's prefix. The SFT record is
    the prefix (weight 0) and the corrected call (weight 1); None when the rewrite does not hold."""
    messages = raw["messages"]
    calls = tool_calls(messages[index])
    if llm is None or len(calls) != 1:
        return None
    name = calls[0]["function"]["name"]
    schema = next((t["function"] for t in raw.get("tools") or () if t["function"]["name"] == name), None)
    request = next((m["content"] for m in reversed(messages[:index]) if m["role"] == "user"), "")
    prompt = REFINE_PROMPT.format(schema=canonical_json(schema) if schema else "(not offered)", request=request,
                                  call=canonical_json(calls[0]["function"]), error=error)
    answer = _json_object(llm.complete([{"role": "user", "content": prompt}], max_tokens=max_tokens))
    if not answer or not isinstance(answer.get("name"), str) or not isinstance(answer.get("arguments"), dict):
        return None
    fixed = _call(answer["name"], answer["arguments"], calls[0]["id"])
    if validate_call(fixed, raw.get("tools") or []) is not None:
        return None
    made = [*messages[:index], {"role": "assistant", "content": None, "tool_calls": [fixed]}]
    meta_env = env_of(raw)
    if env is not None and env.has(meta_env):
        scenario = env.start(meta_env)
        if scenario.executable:
            scenario.run(messages[:index])
            if scenario.execute(fixed).error:
                return None
    weights = [0] * (len(assistant_indices(made)) - 1) + [1]
    return stamp(sft_record(raw, weights, id=f"{raw['id']}#llm-refine-{index}", messages=made,
                            tags=["llm_refinement", *tags]), step("llm_refine", "asked_llm", index=index), replace=True)
