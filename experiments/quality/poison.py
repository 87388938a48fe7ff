"""A deliberately corrupted copy of a corpus: the calibration row that *must* score below clean data.

Every record is corrupted one way, chosen per record by a seeded draw over its id, so the copy
is a function of the corpus and the seed alone:

- `wrong_tool`: every call names another tool (of the record's tools where it lists several,
  else of the corpus's, whose schema then joins the record's tools), arguments unchanged;
- `shuffled_arguments`: the values of every call's arguments are permuted among its keys (a
  one-argument call gets another call's value for it, of the corpus's calls to that tool);
- `wrong_request`: the user's request is another record's, so the calls answer the wrong request
  (a derangement over the corpus: no record keeps its own).

Records whose drawn corruption would change nothing (no call, a lone argument with no other
value in the corpus) fall back to `wrong_request`. Ids, tools, outcomes and everything else are kept: nothing tells a strategy the
data are poisoned, as in the wild.
"""
from __future__ import annotations

import copy
import json
import random
from collections import defaultdict
from typing import Iterable

KINDS = ("wrong_tool", "shuffled_arguments", "wrong_request")


def _calls(record: dict) -> list[dict]:
    return [c for m in record.get("messages", []) if m.get("role") == "assistant" for c in m.get("tool_calls") or []]


def _arguments(call: dict) -> dict | None:
    try:
        value = json.loads(call["function"].get("arguments") or "{}")
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _tool_names(record: dict) -> list[str]:
    return sorted({t.get("function", {}).get("name") for t in record.get("tools", []) if t.get("function", {}).get("name")})


def _first_user(record: dict) -> int | None:
    return next((i for i, m in enumerate(record.get("messages", [])) if m.get("role") == "user"), None)


def poison(records: Iterable[dict], seed: int = 0) -> tuple[list[dict], dict[str, str]]:
    """(the corrupted copy in the input order, {record id: kind})."""
    records = [copy.deepcopy(r) for r in records]
    schemas = {}   # tool name → its first schema in the corpus (a wrong tool joins the record's tools)
    for r in records:
        for t in r.get("tools", []):
            schemas.setdefault(t.get("function", {}).get("name"), t)
    all_tools = sorted(n for n in schemas if n)
    values = defaultdict(list)   # (tool, argument) → values seen in the corpus, for one-argument shuffles
    for r in records:
        for c in _calls(r):
            for key, value in (_arguments(c) or {}).items():
                values[(c["function"]["name"], key)].append(value)
    kinds: dict[str, str] = {}
    requests = []   # (record index, user message index) of the records that get another's request
    for i, r in enumerate(records):
        rng = random.Random(f"poison:{seed}:{r.get('id', i)}")
        kind = rng.choice(KINDS)
        calls = _calls(r)
        before = json.dumps(calls, sort_keys=True)
        if kind == "wrong_tool" and calls:
            names = _tool_names(r) if len(_tool_names(r)) > 1 else all_tools
            for c in calls:
                others = [n for n in names if n != c["function"]["name"]]
                if others:
                    c["function"]["name"] = rng.choice(others)
                    if c["function"]["name"] not in _tool_names(r):
                        r["tools"] = [*r.get("tools", []), copy.deepcopy(schemas[c["function"]["name"]])]
        elif kind == "shuffled_arguments" and any(_arguments(c) for c in calls):
            for c in calls:
                args = _arguments(c)
                if not args:
                    continue
                keys = list(args)
                if len(keys) > 1:
                    vals = [args[k] for k in keys]
                    order = list(range(len(keys)))
                    while order == sorted(order):
                        rng.shuffle(order)
                    args = {k: vals[j] for k, j in zip(keys, order)}
                else:
                    pool = [v for v in values[(c["function"]["name"], keys[0])] if v != args[keys[0]]]
                    if pool:
                        args = {keys[0]: rng.choice(pool)}
                c["function"]["arguments"] = json.dumps(args, ensure_ascii=False)
        if json.dumps(calls, sort_keys=True) == before:   # nothing to corrupt that way
            kind = "wrong_request"
        if kind == "wrong_request":
            user = _first_user(r)
            if user is None:
                continue
            requests.append((i, user))
        kinds[r.get("id", str(i))] = kind
    if len(requests) > 1:   # a derangement: record k takes the request of record k+1 (shuffled ring)
        ring = list(requests)
        random.Random(f"poison-ring:{seed}").shuffle(ring)
        texts = [records[i]["messages"][u]["content"] for i, u in ring]
        for k, (i, u) in enumerate(ring):
            records[i]["messages"][u]["content"] = texts[(k + 1) % len(ring)]
            if "task" in records[i]:
                records[i]["task"] = texts[(k + 1) % len(ring)]
    return records, kinds
