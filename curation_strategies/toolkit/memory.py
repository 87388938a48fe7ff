"""Memory records (CurateEvo App. C: long-tail knowledge goes to retrievable memory, not into
the weights): tool signatures, constraints mined from tool errors, task-family facts, worked
examples of similar requests. Keys are
bags of salient words for BM25 retrieval; cap_tokens bounds the memory's size."""
from __future__ import annotations

import hashlib
import re
from collections import Counter
from typing import Callable, Iterable, Mapping, Sequence

from .calls import call_signature, parse_arguments, tool_calls
from .provenance import stamp, step
from .errors import corrections, error_message
from .tokens import count_tokens
from .trajectory import assistant_indices, task_text, tool_results

STOPWORDS = frozenset(
    "a an and are as at be by can do does for from has have i in into is it its me my of on or "
    "please should that the their them then there this to was we what when which will with you "
    "your".split())
_WORD = re.compile(r"[A-Za-z][a-z]+|[A-Z]+(?![a-z])|\d+")


def retrieval_key(*texts: str, limit: int = 32) -> str:
    """Lower-cased salient words of `texts` (snake/camel case split, stopwords out), first
    occurrence order, at most `limit`: what BM25 matches against a task."""
    words: list[str] = []
    for text in texts:
        for w in _WORD.findall(text or ""):
            w = w.lower()
            if w not in STOPWORDS and len(w) > 1 and w not in words:
                words.append(w)
    return " ".join(words[:limit])


def memory_record(key: str, content: str, id: str | None = None, tags: Iterable[str] = (),
                  meta: Mapping | None = None, made: Mapping | None = None) -> dict:
    """A memory record; the default id is a hash of key and content. Stamped as synthesised by
    `made` (the calling operator's provenance step), else by `memory_record`."""
    digest = hashlib.sha256(f"{key}\n{content}".encode()).hexdigest()[:12]
    record = {"id": id or f"mem-{digest}", "key": key, "content": content, "tags": list(tags),
              "meta": dict(meta or {})}
    return stamp(record, made or step("memory_record", "synthesised"))


def tool_signature(function: Mapping) -> str:
    """Compact signature of a tool, e.g. `cd(folder: string) - Change directory.`; optional
    parameters carry a `?`."""
    params = function.get("parameters") or {}
    props = params.get("properties") or {}
    required = [r for r in params.get("required") or [] if r in props]
    parts = []
    # Required ones in their declared order, then the optional ones by name: JSON objects have no
    # key order, and a canonical (sorted-keys) corpus must give the same text as the original.
    for name in required + sorted(set(props) - set(required)):
        spec = props[name]
        kind = spec.get("type", "any")
        kind = "|".join(kind) if isinstance(kind, list) else kind
        parts.append(f"{name}{'' if name in required else '?'}: {kind}")
    description = (function.get("description") or "").strip()
    # BFCL prefixes every tool of a class with the class blurb; the part after it is the tool's.
    description = description.split("Tool description:")[-1].strip().split("\n")[0]
    return f"{function['name']}({', '.join(parts)})" + (f" - {description}" if description else "")


def tool_signature_memories(raws: Sequence[Mapping], only_called: bool = False) -> list[dict]:
    """One memory per distinct tool name (its first schema in corpus order)."""
    called = {c["function"]["name"] for r in raws for m in r["messages"] for c in tool_calls(m)}
    seen: dict[str, Mapping] = {}
    for raw in raws:
        for tool in raw.get("tools") or []:
            fn = tool["function"]
            if fn["name"] not in seen and (not only_called or fn["name"] in called):
                seen[fn["name"]] = fn
    return [memory_record(retrieval_key(tool_signature(fn)), tool_signature(fn),
                          id=f"mem-tool-{name}", tags=["tool_signature"], meta={"tool": name},
                          made=step("tool_signature_memories", "synthesised", only_called=only_called))
            for name, fn in seen.items()]


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def error_template(message: str, args: Mapping | None) -> str:
    """The error text with the call's argument values (where they stand as whole tokens) and
    numbers replaced by placeholders, so the same failure on different arguments groups together."""
    text = _short(message, 200)
    for name, value in sorted((args or {}).items(), key=lambda kv: (-len(str(kv[1])), kv[0])):
        if isinstance(value, (str, int, float)) and not isinstance(value, bool) and str(value).strip() \
                and str(value) in text:   # (a value the text does not hold replaces nothing: no pattern compiled)
            # Whole tokens only: a value "no" must not rewrite "doesn't" or "not".
            text = re.sub(rf"(?<![\w']){re.escape(str(value))}(?![\w'])", f"<{name}>", text)
    return re.sub(r"\b\d+(\.\d+)?\b", "<n>", text)


def error_constraints(raws: Sequence[Mapping], min_count: int = 1, max_items: int | None = None) -> list[dict]:
    """Constraints mined from failed tool calls: per (tool, error template), how often it failed,
    one example, and the calls that recovered from it. Most frequent first, ties in corpus order."""
    groups: dict[tuple[str, str], dict] = {}
    for raw in raws:
        messages = raw["messages"]
        fixes = corrections(raw, validate=False)
        for i in assistant_indices(messages):
            results = tool_results(messages, i)
            for call in tool_calls(messages[i]):
                result = results.get(call["id"])
                message = error_message(result.get("content")) if result else None
                if message is None:
                    continue
                name = call["function"]["name"]
                group = groups.setdefault((name, error_template(message, parse_arguments(call))), {
                    "count": 0, "example": _short(call_signature(call)), "error": _short(message),
                    "recovery": None, "origin": raw["id"]})
                group["count"] += 1
                fix = fixes.get(i)
                if group["recovery"] is None and fix is not None:
                    group["recovery"] = [_short(call_signature(c)) for c in tool_calls(messages[fix])]
    ranked = sorted(groups.items(), key=lambda kv: -kv[1]["count"])  # stable: ties keep corpus order
    ranked = [kv for kv in ranked if kv[1]["count"] >= min_count][:max_items]
    records = []
    for (name, template), g in ranked:
        content = f"{name} can fail with: {template} (seen {g['count']}x; e.g. {g['example']} -> {g['error']})."
        if g["recovery"]:
            content += f" Recovered by: {'; '.join(g['recovery'])}."
        records.append(memory_record(retrieval_key(name, template), content,
                                     tags=["constraint", "tool_error"],
                                     meta={"tool": name, "count": g["count"], "origin": [g["origin"]]},
                                     made=step("error_constraints", "synthesised", min_count=min_count)))
    return records


def family_of(raw: Mapping) -> str:
    """A trajectory's task family: meta.family or meta.env.family when given, else its source
    and the sorted names of the tools it is offered."""
    meta = raw.get("meta") or {}
    explicit = meta.get("family") or (meta.get("env") or {}).get("family")
    if explicit:
        return str(explicit)
    names = sorted(t["function"]["name"] for t in raw.get("tools") or [])
    return f"{raw.get('source') or 'unknown'}:{'+'.join(names)}"


def task_family_facts(raws: Sequence[Mapping], family: Callable[[Mapping], str] = family_of,
                      min_count: int = 2, top_tools: int = 6) -> list[dict]:
    """Per task family of at least min_count trajectories: the tools it uses most and the call
    it most often starts with. Families in corpus order of first appearance."""
    members: dict[str, list[Mapping]] = {}
    for raw in raws:
        members.setdefault(family(raw), []).append(raw)
    records = []
    for name, group in members.items():
        if len(group) < min_count:
            continue
        used = Counter(c["function"]["name"] for r in group for m in r["messages"] for c in tool_calls(m))
        firsts = Counter(next((c["function"]["name"] for m in r["messages"] for c in tool_calls(m)), None)
                         for r in group)
        firsts.pop(None, None)
        if not used:
            continue
        tools = [t for t, _ in sorted(used.items(), key=lambda kv: (-kv[1], kv[0]))[:top_tools]]
        content = f"In {len(group)} similar tasks the agent used: {', '.join(tools)}."
        if firsts:
            start = sorted(firsts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
            content += f" They usually start with {start}."
        words = Counter(w for r in group for w in set(retrieval_key(task_text(r), limit=64).split()))
        common = [w for w, _ in sorted(words.items(), key=lambda kv: (-kv[1], kv[0]))[:12]]
        records.append(memory_record(retrieval_key(" ".join(tools), " ".join(common)), content,
                                     tags=["task_family"], meta={"family": name, "count": len(group)},
                                     made=step("task_family_facts", "synthesised", min_count=min_count)))
    return records


def worked_examples(raws: Sequence[Mapping], limit: int | None = None, max_calls: int = 3) -> list[dict]:
    """Worked examples of similar requests (issue 59's alternative to tool facts): per distinct
    request of a recorded success (`outcome.success`), in corpus order, at most `limit`, what the
    agent did — its first `max_calls` calls, or that it answered without a call — keyed by the
    request's words. About no one tool, so a task offered other tools may retrieve one; `meta.origin`
    and `meta.task_id` name where it came from, so retrieval never gives a record its own example."""
    records, seen = [], set()
    for raw in raws:
        request = task_text(raw)
        if not (raw.get("outcome") or {}).get("success") or not request or request in seen:
            continue
        seen.add(request)
        calls = [call_signature(c) for m in raw["messages"] for c in tool_calls(m)]
        did = "; ".join(calls[:max_calls]) + (" …" if len(calls) > max_calls else "") if calls else \
            "no tool fits: answered without calling one"
        env = (raw.get("meta") or {}).get("env") or {}
        meta = {"origin": [raw["id"]], **({"task_id": env["task_id"]} if env.get("task_id") else {})}
        records.append(memory_record(retrieval_key(request), f"Request like: {_short(request)} → {did}",
                                     tags=["worked_example"], meta=meta,
                                     made=step("worked_examples", "synthesised", max_calls=max_calls)))
        if limit is not None and len(records) >= limit:
            break
    return records


def memory_tokens(record: Mapping) -> int:
    return count_tokens(record["key"]) + count_tokens(record["content"])


def cap_tokens(records: Sequence[Mapping], max_tokens: int) -> list[Mapping]:
    """Records in order while their key + content tokens fit in max_tokens; one that does not fit
    is skipped and smaller later ones may still go in."""
    kept, used = [], 0
    for record in records:
        n = memory_tokens(record)
        if used + n <= max_tokens:
            kept.append(record)
            used += n
    return kept


def unique_ids(records: Sequence[Mapping]) -> list[Mapping]:
    """First record of each id (memory builders may mint the same id from different passes)."""
    seen: set[str] = set()
    return [r for r in records if not (r["id"] in seen or seen.add(r["id"]))]
