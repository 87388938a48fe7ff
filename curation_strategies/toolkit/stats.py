"""Statistics over a raw corpus or a curation's output: what a strategy (or the code agent
revising it) looks at before deciding what to keep."""
from __future__ import annotations

from collections import Counter
from typing import Mapping, Sequence

from .calls import tool_calls
from .errors import turn_errors
from .tokens import count_tokens, trajectory_tokens
from .trajectory import assistant_indices


def _summary(values: Sequence[int]) -> dict:
    if not values:
        return {"total": 0, "mean": 0.0, "max": 0}
    return {"total": sum(values), "mean": round(sum(values) / len(values), 4), "max": max(values)}


def _ranked(counter: Counter) -> dict:
    """Counts as a dict, most frequent first, ties by name (deterministic)."""
    return dict(sorted(counter.items(), key=lambda kv: (-kv[1], str(kv[0]))))


def corpus_stats(raws: Sequence[Mapping], tokens: bool = True) -> dict:
    """Trajectories, assistant turns, tokens, tool-call frequencies, erroneous-turn rate and
    outcomes of a raw corpus."""
    turns, toks, tools, sources = [], [], Counter(), Counter()
    outcomes = Counter()
    call_turns = erroneous = 0
    for raw in raws:
        messages = raw["messages"]
        turns.append(len(assistant_indices(messages)))
        if tokens:
            toks.append(trajectory_tokens(messages))
        for m in messages:
            for c in tool_calls(m):
                tools[c["function"]["name"]] += 1
        call_turns += sum(1 for m in messages if tool_calls(m))
        erroneous += len(turn_errors(raw))
        success = (raw.get("outcome") or {}).get("success")
        outcomes["unknown" if success is None else "success" if success else "failure"] += 1
        sources[raw.get("source") or "unknown"] += 1
    return {
        "trajectories": len(raws),
        "with_tool_calls": sum(1 for raw in raws if any(tool_calls(m) for m in raw["messages"])),
        "assistant_turns": _summary(turns),
        "tokens": _summary(toks),
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
