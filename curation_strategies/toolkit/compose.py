"""Data that single-turn items add by composition (BFCL's categories from one another), category
rebalancing and the schema-validity filter. Inputs are raw records of one user request and one
answering assistant message (`bfcl_single_turn`); outputs are synthesised raw-like records
(`meta.origin`: the raw ids used, `meta.category`: what they now are) for `sft_record`.
Deterministic under the `random.Random` passed in."""
from __future__ import annotations

import json
import random
import re
from collections import defaultdict
from typing import Callable, Mapping, Sequence

from .calls import parse_arguments, tool_calls, validate_call
from .provenance import stamp, step
from .trajectory import canonical_json, copy_tools, env_of, kept_at

NO_CALL_REPLY = "None of the functions I have can answer that."


def category(raw: Mapping) -> str | None:
    """What a record is an item of: a synthesised record's `meta.category`, else its BFCL variant."""
    meta = raw.get("meta") or {}
    return meta.get("category") or (env_of(raw) or {}).get("variant")


def synthesised(sources: Sequence[Mapping], kind: str, request: str, tools: Sequence[Mapping],
                answer: Mapping, tags: Sequence[str] = (), made: Mapping | None = None, suffix: str | None = None) -> dict:
    """A raw-like record made from `sources`: one user request, one assistant answer; stamped as
    synthesised by `made` (the calling operator's provenance step). Its id is the sources' ids and
    `#suffix` (default: `#kind`)."""
    record = {"id": "+".join(s["id"] for s in sources) + f"#{suffix or kind}", "task": request,
            "messages": [{"role": "user", "content": request}, dict(answer)],
            "tools": [dict(t) for t in copy_tools(tools)],
            "meta": {"origin": [i for s in sources for i in ((s.get("meta") or {}).get("origin") or [s["id"]])],
                     "category": kind, "tags": ["synthesised", kind, *tags]}}
    return stamp(record, made or step("synthesised", "synthesised", kind=kind))


def single_call_items(raws: Sequence[Mapping]) -> list[tuple[Mapping, str, Mapping, Mapping]]:
    """(raw, request, the called tool, the call) of every successful single-turn record whose answer
    is one valid tool call, the first record of each task only, in corpus order."""
    out, seen = [], set()
    for raw in raws:
        messages = raw.get("messages") or []
        if (raw.get("outcome") or {}).get("success") is not True or len(messages) != 2:
            continue
        user, answer = messages
        calls = tool_calls(answer) if answer.get("role") == "assistant" else []
        task = (env_of(raw) or {}).get("task_id", raw["id"])
        if user.get("role") != "user" or len(calls) != 1 or task in seen or validate_call(calls[0], raw["tools"]):
            continue
        seen.add(task)
        tool = next(t for t in raw["tools"] if t["function"]["name"] == calls[0]["function"]["name"])
        out.append((raw, user["content"], tool, calls[0]))
    return out


def join_requests(requests: Sequence[str]) -> str:
    """Several requests as one: "A. Also, b." (a lower-case start kept only for a plain word)."""
    parts = []
    for n, text in enumerate(r.strip() for r in requests):
        if n and len(text) > 1 and text[0].isupper() and text[1].islower() and text.split()[0] != "I":
            text = text[0].lower() + text[1:]
        parts.append(text if not n else f"Also, {text}")
    return " ".join(p if p[-1] in ".?!" else p + "." for p in parts)


def _answer(calls: Sequence[Mapping]) -> dict:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": f"call_{i}", "type": "function", "function": dict(c["function"])}
                           for i, c in enumerate(calls)]}


def _tool_key(tool: Mapping) -> str:
    return canonical_json(tool["function"])


def compose_parallel(raws: Sequence[Mapping], rng: random.Random, limit: int) -> list[dict]:
    """Parallel items: pairs of successful single-call items over the same function (same schema)
    with different requests and arguments, their requests joined, both calls in one message."""
    groups, made = defaultdict(list), step("compose_parallel", "synthesised", limit=limit)
    for item in single_call_items(raws):
        groups[_tool_key(item[2])].append(item)
    out = []
    for _, group in sorted(groups.items()):
        rng.shuffle(group)
        used: set[int] = set()
        for i, a in enumerate(group):
            for j in range(i + 1, len(group)):
                b = group[j]
                if i in used or j in used or a[1] == b[1] or \
                        canonical_json(parse_arguments(a[3])) == canonical_json(parse_arguments(b[3])):
                    continue
                used.update((i, j))
                out.append(synthesised([a[0], b[0]], "parallel", join_requests([a[1], b[1]]), [a[2]],
                                       _answer([a[3], b[3]]), made=made))
    rng.shuffle(out)
    return out[:limit]


def compose_parallel_multiple(raws: Sequence[Mapping], rng: random.Random, limit: int, size: int = 2) -> list[dict]:
    """Parallel-multiple items: `size` successful single-call items over different functions, their
    requests joined, every function offered, all calls answered together in one message."""
    items, made = single_call_items(raws), step("compose_parallel_multiple", "synthesised", limit=limit, size=size)
    order = list(range(len(items)))
    rng.shuffle(order)
    out, used = [], set()
    for i in order:
        if len(out) >= limit or i in used:
            continue
        chosen = [i]
        for j in order:
            if len(chosen) == size:
                break
            if j not in used and j not in chosen and items[j][2]["function"]["name"] not in \
                    {items[c][2]["function"]["name"] for c in chosen}:
                chosen.append(j)
        if len(chosen) == size:
            used.update(chosen)
            picked = [items[c] for c in chosen]
            tools = [c[2] for c in picked]
            rng.shuffle(tools)
            out.append(synthesised([c[0] for c in picked], "parallel_multiple", join_requests([c[1] for c in picked]),
                                   tools, _answer([c[3] for c in picked]), made=made))
    return out


def _distractors(items, exclude: set[str], rng: random.Random, k: int) -> list[Mapping]:
    names, picked = set(exclude), []
    for n in rng.sample(range(len(items)), min(len(items), 4 * k + len(exclude))):
        tool = items[n][2]
        if tool["function"]["name"] not in names and len(picked) < k:
            picked.append(tool)
            names.add(tool["function"]["name"])
    return picked


def add_distractors(raws: Sequence[Mapping], rng: random.Random, limit: int, k: int = 3) -> list[dict]:
    """Multiple-function items: a successful single-call item with `k` other items' functions offered
    beside the needed one (in a seeded order); the same call answers."""
    items, out, made = single_call_items(raws), [], step("add_distractors", "synthesised", limit=limit, k=k)
    for n in rng.sample(range(len(items)), min(limit, len(items))):
        raw, request, tool, call = items[n]
        tools = [tool, *_distractors(items, {tool["function"]["name"]}, rng, k)]
        rng.shuffle(tools)
        out.append(synthesised([raw], "multiple", request, tools, _answer([call]), made=made))
    return out


def irrelevance_items(raws: Sequence[Mapping], rng: random.Random, limit: int, k: int = 2,
                      reply: str = NO_CALL_REPLY) -> list[dict]:
    """Irrelevance items: a successful single-call item's request with the needed function removed
    and `k` unrelated functions offered instead; the answer is `reply`, no call."""
    items, out, made = single_call_items(raws), [], step("irrelevance_items", "synthesised", limit=limit, k=k)
    for n in rng.sample(range(len(items)), min(limit, len(items))):
        raw, request, tool, _ = items[n]
        tools = _distractors(items, {tool["function"]["name"]}, rng, k)
        out.append(synthesised([raw], "irrelevance", request, tools, {"role": "assistant", "content": reply}, made=made))
    return out


def rebalance(raws: Sequence[Mapping], target: Mapping[str, float], rng: random.Random, total: int | None = None,
              key: Callable[[Mapping], str | None] = category, max_repeat: int = 1) -> list[Mapping]:
    """Records resampled towards the `target` mix ({category: share}) of `total` (default: as many
    as given): a category over its share is sampled down, one under it is repeated up to
    `max_repeat` times each (copies get ids `<id>#rep<n>`); categories missing from `target` are
    dropped. Output in input order, repeats last."""
    total = len(raws) if total is None else total
    shares = sum(target.values())
    by_cat = defaultdict(list)
    for n, raw in enumerate(raws):
        by_cat[key(raw)].append(n)
    keep, repeats = set(), []
    for cat in sorted(target):
        have = by_cat.get(cat, [])
        want = min(round(total * target[cat] / shares), len(have) * max_repeat)
        if not have:
            continue
        keep.update(rng.sample(have, min(want, len(have))))
        for r in range(max(0, want - len(have))):
            raw = raws[have[r % len(have)]]
            repeats.append(stamp({**raw, "id": f"{raw['id']}#rep{r // len(have) + 1}",
                                  "meta": {**(raw.get("meta") or {}), "origin": (raw.get("meta") or {}).get("origin") or [raw["id"]]}},
                                 step("rebalance", "repeated", max_repeat=max_repeat), parent=raw))
    return [raws[n] for n in sorted(keep)] + repeats


TEXT_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)


def text_calls(content: str | None) -> list[dict] | None:
    """Calls written as text in a message's content (the project's `<tool_call>{"name", "arguments"}
    </tool_call>` blocks), as OpenAI tool calls; None when a block is not such a call."""
    calls = []
    for n, block in enumerate(TEXT_CALL.findall(content or "")):
        try:
            value = json.loads(block)
        except ValueError:
            return None
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            return None
        calls.append({"id": f"text_{n}", "type": "function",
                      "function": {"name": value["name"], "arguments": json.dumps(value.get("arguments", {}))}})
    return calls


def schema_valid(raws: Sequence[Mapping]) -> Sequence[Mapping]:
    """Records whose every assistant tool call (structured, or written as a `<tool_call>` block in
    the content) names an offered tool with schema-valid arguments."""
    def valid(raw: Mapping) -> bool:
        for m in raw["messages"]:
            if m.get("role") != "assistant":
                continue
            calls = text_calls(m.get("content"))
            if calls is None or any(validate_call(c, raw.get("tools") or []) for c in [*tool_calls(m), *calls]):
                return False
        return True
    return kept_at(raws, [n for n, r in enumerate(raws) if valid(r)])
