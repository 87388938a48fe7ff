"""Statistics over a raw corpus or a curation's output: what a strategy (or the code agent
revising it) looks at before deciding what to keep."""
from __future__ import annotations

from collections import Counter
from typing import Mapping, Sequence

from .calls import tool_calls
from .errors import turn_errors
from .tokens import count_tokens, trajectory_tokens
from .trajectory import assistant_indices


def _ranked(counter: Counter) -> dict:
    """Counts as a dict, most frequent first, ties by name (deterministic)."""
    return dict(sorted(counter.items(), key=lambda kv: (-kv[1], str(kv[0]))))


class _Running:
    """Total, mean and largest of values seen one at a time, holding three numbers, not the values."""

    def __init__(self):
        self.total = self.count = 0
        self.largest = None

    def add(self, value: int) -> None:
        self.total += value
        self.count += 1
        self.largest = value if self.largest is None else max(self.largest, value)

    def summary(self) -> dict:
        if not self.count:
            return {"total": 0, "mean": 0.0, "max": 0}
        return {"total": self.total, "mean": round(self.total / self.count, 4), "max": self.largest}


def corpus_stats(raws: Sequence[Mapping], tokens: bool = True) -> dict:
    """Trajectories, assistant turns, tokens, tool-call frequencies, erroneous-turn rate and
    outcomes of a raw corpus, in one pass holding counts (a corpus read on access stays unread)."""
    turns, toks, tools, sources = _Running(), _Running(), Counter(), Counter()
    outcomes = Counter()
    call_turns = erroneous = with_calls = 0
    for raw in raws:
        messages = raw["messages"]
        turns.add(len(assistant_indices(messages)))
        if tokens:
            toks.add(trajectory_tokens(messages))
        for m in messages:
            for c in tool_calls(m):
                tools[c["function"]["name"]] += 1
        calling = sum(1 for m in messages if tool_calls(m))
        call_turns += calling
        with_calls += calling > 0
        erroneous += len(turn_errors(raw))
        success = (raw.get("outcome") or {}).get("success")
        outcomes["unknown" if success is None else "success" if success else "failure"] += 1
        sources[raw.get("source") or "unknown"] += 1
    return {
        "trajectories": len(raws),
        "with_tool_calls": with_calls,
        "assistant_turns": turns.summary(),
        "tokens": toks.summary(),
        "tool_calls": sum(tools.values()),
        "tool_frequency": _ranked(tools),
        "tool_call_turns": call_turns,
        "erroneous_turns": erroneous,
        "error_rate": round(erroneous / call_turns, 4) if call_turns else 0.0,
        "outcomes": _ranked(outcomes),
        "sources": _ranked(sources),
    }


def curated_stats(curated) -> dict:
    """Counts of a `Curated`, its Cost_train (Σ turn cost ℓ), trained vs masked SFT turns, RL
    rewards and reference kinds, memory tags and tokens."""
    sft_turns = [len(assistant_indices(r["messages"])) for r in curated.sft]
    rl_turns = [len(assistant_indices(r["messages"])) + 1 for r in curated.rl]
    masked = sum(r.get("weights", []).count(0) for r in curated.sft)
    return {
        "sft": len(curated.sft),
        "rl": len(curated.rl),
        "memory": len(curated.memory),
        "cost_train": sum(sft_turns) + sum(rl_turns),
        "sft_turns": {"trained": sum(sft_turns) - masked, "masked": masked},
        "rl_rewards": _ranked(Counter(r["reward"] for r in curated.rl)),
        "rl_references": _ranked(Counter(next(iter(r["reference"])) for r in curated.rl)),
        "memory_tags": _ranked(Counter(t for r in curated.memory for t in r.get("tags", []))),
        "memory_tokens": sum(count_tokens(r["key"]) + count_tokens(r["content"]) for r in curated.memory),
    }
