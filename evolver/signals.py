"""CoEvolve's behavioural signals (CoEvolve §3.1), as pure functions of what the loop stores
per evaluated epoch.

- **forgetting**: per task, a sliding window H of its last W scores over the evaluated epochs
  before this one; fired when some s ∈ H has s ≥ 0.5 and the current score s_now < 0.5.
- **boundary**: K rollouts of the same policy per dev task, sampled at a temperature > 0 (the
  evaluation draws them beside the greedy run, whose P stays the metric); fired when the K
  outcomes hold both a success and a failure.
- **rare**: cumulative counts c_p of action patterns over all evaluated epochs, N = Σ c_p;
  when N ≥ N_min, a pattern p seen in this epoch fires when c_p / N < θ/100 and it recurs
  (c_p ≥ `min_count`: "low frequency yet recurring across trajectories").

A task's score is its success averaged over the trajectories of that task in one evaluation
(one per training seed), so s ∈ [0, 1]. A trajectory's action patterns (for a next-call
record, of the model's calls at its scored steps) are its distinct
consecutive call pairs "a → b"; a trajectory with one call has the pattern "a", one with no call
"(no call)".

The loop keeps `summarize(trajectories)` of every evaluated epoch and calls
`signals(current, history, sampled, params)`.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

SUCCESS = 0.5      # CoEvolve's threshold on a [0, 1] score
NO_CALL = "(no call)"


@dataclass(frozen=True)
class SignalParams:
    """CoEvolve's signal parameters, each default declared here once: `RunConfig`'s signal
    settings (evolver/config.py) take theirs from these."""
    window: int = 3             # W: how many earlier evaluated epochs the forgetting window holds
    samples: int = 0            # K: sampled rollouts per dev task for the boundary signal (0 or 1: off; costs K× the episodes)
    temperature: float = 0.9    # sampling temperature of those rollouts (CoEvolve's rollout temperature)
    theta: float = 5.0          # θ: a pattern is rare below θ percent of all observed patterns
    n_min: int = 20             # N_min: no rare signal before this many patterns were observed
    min_count: int = 2          # a rare pattern must recur: seen at least this often

    def __post_init__(self):
        if self.window < 1 or self.samples < 0 or self.n_min < 0 or self.min_count < 1:
            raise ValueError("window and min_count must be ≥ 1, samples and n_min ≥ 0")
        if not 0 < self.theta < 100:
            raise ValueError("theta is a percentage in (0, 100)")
        if self.samples > 1 and self.temperature <= 0:
            raise ValueError("boundary sampling needs a temperature > 0")


def calls_of(messages: Sequence[Mapping]) -> Iterable[tuple[int, Mapping, str | None]]:
    """(turn, call, its observation) in order; turns count user messages."""
    results = {m.get("tool_call_id"): m.get("content") for m in messages if m["role"] == "tool"}
    turn = -1
    for m in messages:
        if m["role"] == "user":
            turn += 1
        for call in m.get("tool_calls") or ():
            yield turn, call, results.get(call["id"])


def task_id_of(trajectory: Mapping) -> str:
    return (trajectory.get("meta") or {}).get("task_id", trajectory["id"])


def _success(trajectory: Mapping) -> bool:
    return bool((trajectory.get("outcome") or {}).get("success"))


def action_patterns(trajectory: Mapping) -> set[str]:
    steps = (trajectory.get("meta") or {}).get("steps")
    if steps is not None:   # a next-call record: the model's calls at its steps, not the recorded ones
        names = [c["name"] for s in steps for c in s.get("calls") or ()]
    else:
        names = [call["function"]["name"] for _, call, _ in calls_of(trajectory["messages"])]
    if len(names) < 2:
        return {names[0]} if names else {NO_CALL}
    return {f"{a} → {b}" for a, b in zip(names, names[1:])}


def summarize(trajectories: Sequence[Mapping]) -> dict:
    """What the signals need of one evaluated epoch: {"scores": {task: s}, "patterns": {task: [p]},
    "failed": [task]} (JSON-ready; the loop may store it)."""
    outcomes: dict[str, list[bool]] = defaultdict(list)
    patterns: dict[str, set] = defaultdict(set)
    for t in trajectories:
        outcomes[task_id_of(t)].append(_success(t))
        patterns[task_id_of(t)] |= action_patterns(t)
    scores = {task: sum(o) / len(o) for task, o in sorted(outcomes.items())}
    return {"scores": scores, "patterns": {task: sorted(p) for task, p in sorted(patterns.items())},
            "failed": sorted(task for task, s in scores.items() if s < SUCCESS)}


def forgetting(current: Mapping[str, float], history: Sequence[Mapping[str, float]], window: int) -> list[str]:
    """Tasks that failed now although one of their last `window` earlier scores was a success.
    `history`: per earlier evaluated epoch (oldest first), task → score."""
    fired = []
    for task, now in sorted(current.items()):
        recent = [scores[task] for scores in history if task in scores][-window:]
        if now < SUCCESS and any(s >= SUCCESS for s in recent):
            fired.append(task)
    return fired


def fixed(current: Mapping[str, float], against: Mapping[str, float]) -> list[str]:
    """Tasks that succeed now and failed under `against` (forgetting's mirror: what an edit fixed)."""
    return sorted(task for task, now in current.items() if now >= SUCCESS and task in against and against[task] < SUCCESS)


def boundary(sampled: Sequence[Mapping]) -> list[str]:
    """Tasks whose sampled rollouts hold both a success and a failure."""
    outcomes: dict[str, set] = defaultdict(set)
    for t in sampled:
        outcomes[task_id_of(t)].add(_success(t))
    return sorted(task for task, seen in outcomes.items() if len(seen) == 2)


def rare(current: Mapping[str, Sequence[str]], history: Sequence[Mapping[str, Sequence[str]]], theta: float,
         n_min: int, min_count: int = 2, failed: Iterable[str] = ()) -> list[dict]:
    """Rare action patterns among this epoch's (`current`: task → patterns), counted cumulatively
    over `history` and this epoch. Each: {pattern, count c_p, share c_p/N, task_ids, failed_task_ids}."""
    counts = Counter(p for epoch in (*history, current) for patterns in epoch.values() for p in patterns)
    total = sum(counts.values())
    if total < n_min:
        return []
    failed = set(failed)
    holders: dict[str, list[str]] = defaultdict(list)
    for task, patterns in sorted(current.items()):
        for p in patterns:
            holders[p].append(task)
    return [{"pattern": p, "count": counts[p], "share": round(counts[p] / total, 6), "task_ids": tasks,
             "failed_task_ids": [t for t in tasks if t in failed]}
            for p, tasks in sorted(holders.items())
            if counts[p] >= min_count and counts[p] / total < theta / 100]


def signals(current: Mapping, history: Sequence[Mapping], sampled: Sequence[Mapping], params: SignalParams) -> dict:
    """{"forgetting", "boundary", "rare"} of an epoch: `current` and `history` are `summarize`
    results (history oldest first), `sampled` the epoch's sampled rollouts."""
    return {
        "forgetting": forgetting(current["scores"], [h["scores"] for h in history], params.window),
        "boundary": boundary(sampled),
        "rare": rare(current["patterns"], [h["patterns"] for h in history], params.theta, params.n_min,
                     params.min_count, current.get("failed", ())),
    }
