"""The leakage guard (DESIGN: the trust boundary): the host rejects artifacts that contain a dev
or test task's gold call sequence or user request verbatim.

    check_record(kind, record)   # on each checked record: checker.CandidateRejected naming the record and the task

The tasks come from the environments (`base.environment`: `leakage_rows`); what counts, as
BFCL-V4 fills it in (environments/bfcl/leakage.py):
- a user request: the text of a user message of a dev/test task (multi-turn: every turn's;
  single-turn: the question), equal to a user message of an SFT or RL record, or found inside a
  memory record's key or content;
- a gold call sequence: a multi-turn dev/test task's ground-truth calls of all its turns in order
  (two calls or more), found as a contiguous run of an artifact's tool calls; a single-turn
  dev/test task's gold calls, equal (as a multiset) to the calls of one assistant message.
Texts and call sequences that train tasks share with dev/test tasks (generic follow-ups, common
calls) are not evidence of leakage and are left out. Calls are compared by name and arguments
(JSON, keys sorted; positional ground-truth arguments bound to their parameter names).
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping   # not typing's: isinstance runs per record
from functools import lru_cache
from pathlib import Path

from base.files import cache_root
from sandbox.checker import CandidateRejected
from base.schemas import canonical_json

MIN_MEMORY_TEXT = 40   # shorter requests are not looked for inside memory text


def call_key(name: str, arguments: Mapping) -> str:
    return f"{name}({canonical_json(dict(arguments))})"


class _Index:
    def __init__(self):
        self.requests: dict[str, str] = {}              # text → "dev task X"
        self.sequences: dict[str, list[tuple[tuple, str]]] = {}   # first call → [(calls, task)]
        self.call_sets: dict[tuple, str] = {}           # sorted calls of one message → task

    def add(self, split: str, tid: str, texts: Iterable[str], calls: tuple, *, multi: bool,
            train_texts: set, train_calls: set) -> None:
        where = f"{split} task {tid}"
        for text in texts:
            if text and text.strip() and text not in train_texts:
                self.requests.setdefault(text, where)
        if multi and len(calls) >= 2 and calls not in train_calls:
            self.sequences.setdefault(calls[0], []).append((calls, where))
        elif not multi and calls and tuple(sorted(calls)) not in train_calls:
            self.call_sets.setdefault(tuple(sorted(calls)), where)


@lru_cache(maxsize=1)
def gold_index() -> _Index:
    """Dev and test requests and gold calls of every registered environment (`leakage_rows`),
    minus what train tasks share: loaded once per process, and cached on disk under a key of this
    module's source and the environments' `leakage_key` (building it reads every task file)."""
    from base import registry

    source = Path(__file__).read_bytes() + b"".join(e.leakage_key() for e in registry.environments())
    cached = _cache_dir() / f"gold-index-{hashlib.sha256(source).hexdigest()[:16]}.json"
    try:
        data = json.loads(cached.read_text(encoding="utf-8"))
        index = _Index()
        index.requests = data["requests"]
        index.sequences = {k: [(tuple(calls), where) for calls, where in v] for k, v in data["sequences"].items()}
        index.call_sets = {tuple(json.loads(k)): where for k, where in data["call_sets"].items()}
        return index
    except (OSError, ValueError, KeyError, TypeError):
        pass
    index = _build_index()
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".tmp-{os.getpid()}")
        tmp.write_text(json.dumps({"requests": index.requests, "sequences": index.sequences,
                                   "call_sets": {json.dumps(k): w for k, w in index.call_sets.items()}}),
                       encoding="utf-8")
        os.replace(tmp, cached)
    except OSError:   # a read-only home only costs the rebuild next time
        pass
    return index


def _cache_dir() -> Path:
    return cache_root() / "leakage"


def _build_index() -> _Index:
    from base import registry

    rows = [tuple(row) for e in registry.environments() for row in e.leakage_rows()]   # (split, tid, texts, calls, multi)
    train_texts = {t for split, _, texts, _, _ in rows if split == "train" for t in texts}
    train_calls = {calls if multi else tuple(sorted(calls)) for split, _, _, calls, multi in rows if split == "train"}
    starts: dict[str, list] = {}   # call → [(train gold run, position)] where the run holds it
    for split, _, _, calls, multi in rows:
        if split == "train" and multi:
            for i, c in enumerate(calls):
                starts.setdefault(c, []).append((calls, i))
    index = _Index()
    for split, tid, texts, calls, multi in rows:
        if split != "train":
            if multi and calls and any(run[i:i + len(calls)] == calls for run, i in starts.get(calls[0], ())):
                train_calls.add(calls)   # a train task's gold holds the same run: no evidence of leakage
            index.add(split, tid, texts, calls, multi=multi, train_texts=train_texts, train_calls=train_calls)
    return index


def _key_of(name, text: str) -> str | None:
    """The key of a call whose arguments are the JSON text `text`, or None when they are not an object."""
    try:
        arguments = json.loads(text)
    except ValueError:
        return None
    return call_key(name, arguments) if isinstance(arguments, dict) else None


_memo_key = lru_cache(maxsize=4096)(_key_of)   # RL prefixes repeat their calls: parsed and keyed once


def _calls(message: Mapping) -> list[str]:
    out = []
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        name, text = function.get("name"), function.get("arguments") or "{}"
        memo = type(name) is str and type(text) is str and len(text) <= 4096
        key = (_memo_key if memo else _key_of)(name, text)
        if key is not None:
            out.append(key)
    return out


def _leak(record: Mapping, index: _Index) -> str | None:
    """What of a dev/test task the SFT or RL record holds verbatim, or None."""
    messages = list(record.get("messages") or ())
    reference = record.get("reference")
    if isinstance(reference, Mapping) and reference.get("tool_calls"):
        messages.append({"role": "assistant", "tool_calls": reference["tool_calls"]})
    flat: list[str] = []
    for m in messages:
        if m.get("role") == "user" and isinstance(m.get("content"), str) and m["content"] in index.requests:
            return f"the user request of {index.requests[m['content']]}"
        if m.get("role") == "assistant":
            calls = _calls(m)
            where = index.call_sets.get(tuple(sorted(calls))) if calls else None
            if where:
                return f"the gold calls of {where}"
            flat.extend(calls)
    for i, call in enumerate(flat):
        for seq, where in index.sequences.get(call, ()):
            if tuple(flat[i:i + len(seq)]) == seq:
                return f"the gold call sequence of {where}"
    return None


def check_record(kind: str, record: Mapping) -> None:
    """Raise CandidateRejected, one sentence naming the record and the task, when the record holds
    a dev or test task's request or gold calls verbatim (called on each checked record)."""
    index = gold_index()
    if kind in ("sft", "rl"):
        leak = _leak(record, index)
        if leak:
            raise CandidateRejected(f"{kind} record {record.get('id')!r} contains {leak} verbatim: artifacts "
                                    "must not hold dev or test tasks (drop that record or its source)")
        return
    text = f"{record.get('key', '')}\n{record.get('content', '')}"
    for request, where in _long_requests_of_gold():
        if request in text:
            raise CandidateRejected(f"memory record {record.get('id')!r} contains the user request of {where} "
                                    "verbatim: artifacts must not hold dev or test tasks")


def check_leakage(records: Mapping[str, Iterable[Mapping]]) -> None:
    """`check_record` over {"sft": [...], "rl": [...], "memory": [...]}."""
    for kind, rows in records.items():
        for record in rows:
            check_record(kind, record)


@lru_cache(maxsize=1)
def _long_requests_of_gold() -> tuple:
    return tuple((t, w) for t, w in gold_index().requests.items() if len(t) >= MIN_MEMORY_TEXT)