"""Trajectory filters (turns, tokens, outcome, tool use, abandoned) and truncation that keeps a
record valid. Filters keep corpus order and return the records themselves, not copies — a list;
given the sandbox's corpus (or a view of it), a view of it that reads them again on access
(`kept_at`), so filtering a large corpus holds no records."""
from __future__ import annotations

import copy
import re
from typing import Mapping, Sequence

from .calls import tool_calls
from .errors import corrections
from .provenance import stamp, step
from .tokens import message_tokens, trajectory_tokens
from .trajectory import assistant_indices, kept_at, step_boundaries, tool_call_count


def n_turns(raw: Mapping) -> int:
    """Assistant messages of a trajectory (its turn cost as an SFT record)."""
    return len(assistant_indices(raw["messages"]))


def has_tool_call(raw: Mapping) -> bool:
    return tool_call_count(raw) > 0


def is_empty(raw: Mapping) -> bool:
    """No assistant message at all: nothing to train on."""
    return n_turns(raw) == 0


# Calls that end an episode by design (ToolBench's Finish, tau-bench's transfer_to_human_agents,
# SWE-agent's submit): a trajectory may stop on their result without having given up.
_ENDING_CALL = re.compile(r"(?i)^(finish|submit|transfer|terminate|exit|give_?up|end_)")


def is_abandoned(raw: Mapping) -> bool:
    """The agent gave up part-way: it never answered at all; or the trajectory stops on the
    result of an ordinary call (not an episode-ending one, see `_ENDING_CALL`) and its outcome
    does not say it succeeded; or its last erroneous turn was never corrected and nothing but
    text followed it. Ending on a user message is not giving up: tau-bench's user closes with
    "###STOP###" after the agent's answer, FireAct's last message is the environment's
    "Observation: Episode finished"."""
    messages = raw["messages"]
    turns = assistant_indices(messages)
    if not turns:
        return True
    succeeded = (raw.get("outcome") or {}).get("success") is True
    if messages[-1]["role"] == "tool" and not succeeded and not any(
            _ENDING_CALL.match(c["function"]["name"]) for c in tool_calls(messages[turns[-1]])):
        return True
    pending = [i for i, j in corrections(raw).items() if j is None]
    return bool(pending) and not any(
        messages[j].get("tool_calls") for j in turns if j > pending[-1])


def by_turns(raws: Sequence[Mapping], min_turns: int = 1, max_turns: int | None = None) -> Sequence[Mapping]:
    """Trajectories with min_turns <= assistant messages <= max_turns."""
    return kept_at(raws, [n for n, r in enumerate(raws)
                          if n_turns(r) >= min_turns and (max_turns is None or n_turns(r) <= max_turns)])


def by_tokens(raws: Sequence[Mapping], max_tokens: int) -> Sequence[Mapping]:
    """Trajectories of at most max_tokens (contents plus call names and arguments)."""
    return kept_at(raws, [n for n, r in enumerate(raws) if trajectory_tokens(r["messages"]) <= max_tokens])


def by_outcome(raws: Sequence[Mapping], success: bool = True, keep_unknown: bool = True,
               min_reward: float | None = None) -> Sequence[Mapping]:
    """Trajectories whose outcome.success equals `success` (and reward >= min_reward when one is
    recorded); those without a recorded outcome are kept only with keep_unknown."""
    kept = []
    for n, raw in enumerate(raws):
        outcome = raw.get("outcome") or {}
        ok, reward = outcome.get("success"), outcome.get("reward")
        if ok is None and (reward is None or min_reward is None):
            if keep_unknown:
                kept.append(n)
            continue
        if ok is not None and ok != success:
            continue
        if min_reward is not None and reward is not None and reward < min_reward:
            continue
        kept.append(n)
    return kept_at(raws, kept)


def with_tool_calls(raws: Sequence[Mapping]) -> Sequence[Mapping]:
    """Drop trajectories that never call a tool."""
    return kept_at(raws, [n for n, r in enumerate(raws) if has_tool_call(r)])


def drop_abandoned(raws: Sequence[Mapping]) -> Sequence[Mapping]:
    """Drop empty and abandoned trajectories."""
    return kept_at(raws, [n for n, r in enumerate(raws) if not is_abandoned(r)])


def truncate(raw: Mapping, max_turns: int | None = None, max_tokens: int | None = None) -> dict | None:
    """A copy of `raw` cut to its longest prefix with at most max_turns assistant messages and
    max_tokens tokens, cut only where every call keeps its result; trailing user messages are
    dropped. None when no such prefix holds an assistant message."""
    messages = raw["messages"]
    best = None
    turns = tokens = 0
    cuts = set(step_boundaries(messages))
    for k, m in enumerate(messages, start=1):
        turns += m["role"] == "assistant"
        tokens += message_tokens(m) if max_tokens is not None else 0
        if (max_turns is not None and turns > max_turns) or (max_tokens is not None and tokens > max_tokens):
            break
        if k in cuts and turns:
            best = k
    if best is None:
        return None
    kept = list(messages[:best])
    while kept[-1]["role"] == "user":
        kept.pop()
    out = copy.deepcopy(dict(raw))
    out["messages"] = copy.deepcopy(kept)
    return stamp(out, step("truncate", "truncated", max_turns=max_turns, max_tokens=max_tokens), parent=raw)
