"""Which RL records GRPO learns from.

A GRPO group teaches only when its G completions score differently (a group that all pass or all
fail has zero advantage; trainer/grpo.py counts them), and the recipe trains few prompts
(`ctx.budget["rl_prompts"]`), so which records fill that budget decides whether RL teaches at all.
Two things the corpus itself tells about a record:

- **the boundary**: a task the corpus attempted several times with both a recorded success and a
  recorded failure is neither always nor never solved — the records where samples of a policy
  like the corpus's are likely to split (`boundary_tasks`);
- **a clear contrast**: an RL record's reference is the call its trajectory made; one made from a
  trajectory recorded as a success rewards the right call, one from a recorded failure rewards
  the failure (`reference_priority`, `from_successes`).

`fit_rl` keeps at most the budget's RL prompts (or a multiple), balanced over categories, boundary
records with a successful reference first, then other successes, unknown outcomes, failures last.
Deterministic: a seeded draw breaks ties, input order is kept.
"""
from __future__ import annotations

import random
from collections import defaultdict
from typing import Callable, Mapping, Sequence

from .budget import fit_budget
from .trajectory import env_of, task_text


def task_of(raw: Mapping) -> str:
    """The task a trajectory attempts: its environment's task id, else its instruction text."""
    env = env_of(raw) or {}
    return f"task:{env['task_id']}" if env.get("task_id") else f"text:{task_text(raw)}"


def outcome_spread(raws: Sequence[Mapping]) -> dict[str, tuple[int, int]]:
    """{task: (recorded successes, recorded failures)} over the trajectories whose outcome is known."""
    spread: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for raw in raws:
        success = (raw.get("outcome") or {}).get("success")
        if success is not None:
            spread[task_of(raw)][0 if success else 1] += 1
    return {task: (s, f) for task, (s, f) in spread.items()}


def boundary_tasks(raws: Sequence[Mapping]) -> set[str]:
    """Tasks the corpus both solved and failed (neither always nor never solved)."""
    return {task for task, (s, f) in outcome_spread(raws).items() if s and f}


def reference_priority(raws: Sequence[Mapping]) -> Callable[[Mapping], float]:
    """A priority over RL records by their origin trajectories (`meta.origin`): 3 a recorded success
    on a boundary task, 2 another recorded success, 1 an unknown outcome (or an origin not in
    `raws`), 0 a recorded failure; a record of several origins takes their mean."""
    boundary = boundary_tasks(raws)
    score = {}
    for raw in raws:
        success = (raw.get("outcome") or {}).get("success")
        score[raw["id"]] = 1.0 if success is None else 0.0 if not success else 3.0 if task_of(raw) in boundary else 2.0

    def priority(record: Mapping) -> float:
        origin = list((record.get("meta") or {}).get("origin") or [record.get("id")])
        return sum(score.get(o, 1.0) for o in origin) / len(origin)
    return priority


def from_successes(records: Sequence[Mapping], raws: Sequence[Mapping], keep_unknown: bool = True) -> list[Mapping]:
    """The RL records whose reference comes from no trajectory recorded as a failure (and, with
    `keep_unknown`, those of unknown outcome); input order."""
    priority = reference_priority(raws)
    return [r for r in records if (p := priority(r)) >= 2 or (keep_unknown and p >= 1)]


def rl_budget(budget: Mapping | None, multiple: int = 1) -> int | None:
    """The RL prompts the recipe trains (`ctx.budget["rl_prompts"]`) times `multiple`; None without a budget."""
    if budget is None:
        return None
    if multiple < 1:
        raise ValueError("multiple must be 1 or more")
    return int(budget["rl_prompts"]) * multiple


def fit_rl(records: Sequence[Mapping], raws: Sequence[Mapping], limit: int | None, rng: random.Random) -> list[Mapping]:
    """At most `limit` RL records, balanced over categories, boundary records with a successful
    reference first (`reference_priority`), ties drawn by `rng`; input order kept."""
    return fit_budget(records, limit, rng, priority=reference_priority(raws))
