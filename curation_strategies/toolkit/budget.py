"""Choosing which records fill the recipe's budget (`ctx.budget`, trainer.recipe.curation_budget).

The recipe trains at most `ctx.budget["sft_examples"]` SFT examples; records beyond that are
curated and never trained. `fit_budget` keeps at most a limit of records, balanced over their
categories (a category with fewer records than its share keeps all of them, the rest is shared
among the others), a `priority` first within a category, then a seeded draw; input order kept.
`recorded_success(raw)` is the priority the offline proposer's operator uses: records made from
trajectories the corpus recorded as successes fill the budget before those of unknown outcome,
and those before failures, so a budget smaller than the data drops the likely-wrong records first.
"""
from __future__ import annotations

import random
from collections import defaultdict
from typing import Callable, Mapping, Sequence

from .compose import category

PASSES = ("recipe", "once")


def budget_examples(budget: Mapping | None, passes: str = "recipe") -> int | None:
    """How many SFT examples the budget trains `passes` = "recipe" (the recipe's epochs: the paper
    trains its curated set twice) or "once" (each at least once); None without a budget."""
    if budget is None:
        return None
    if passes not in PASSES:
        raise ValueError(f"passes is one of {PASSES}, not {passes!r}")
    return int(budget["sft_examples_at_recipe_epochs" if passes == "recipe" else "sft_examples"])


def recorded_success(raws: Sequence[Mapping]) -> Callable[[Mapping], float]:
    """A priority over derived records: the mean over a record's `meta.origin` of its raw
    trajectory's recorded outcome (1 success, 0 failure, 0.5 unknown or not in `raws`)."""
    score = {}
    for raw in raws:
        success = (raw.get("outcome") or {}).get("success")
        score[raw["id"]] = 0.5 if success is None else float(bool(success))

    def priority(record: Mapping) -> float:
        origin = list((record.get("meta") or {}).get("origin") or [record.get("id")])
        return sum(score.get(o, 0.5) for o in origin) / len(origin)
    return priority


def _quotas(sizes: Mapping, limit: int, rng: random.Random) -> dict:
    """Water-filling: each group gets an equal share of `limit`, capped at its size; what a small
    group leaves is shared among the others; the remainder goes to groups drawn by `rng`."""
    quota, left, pending = {}, limit, sorted(sizes, key=str)
    while pending:
        share = left // len(pending)
        small = [g for g in pending if sizes[g] <= share]
        if not small:
            order = list(pending)
            rng.shuffle(order)
            extra = left - share * len(order)
            quota.update({g: share + (1 if i < extra else 0) for i, g in enumerate(order)})
            break
        for g in small:
            quota[g] = sizes[g]
            left -= sizes[g]
            pending.remove(g)
    return quota


def fit_budget(records: Sequence[Mapping], limit: int | None, rng: random.Random,
               key: Callable[[Mapping], str | None] = category,
               priority: Callable[[Mapping], float] | None = None) -> list[Mapping]:
    """At most `limit` of `records` (all of them when they fit or `limit` is None), balanced over
    `key`, higher `priority` first within a group, ties drawn by `rng`; in input order."""
    if limit is None or len(records) <= limit:
        return list(records)
    if limit < 0:
        raise ValueError("limit must be 0 or more")
    groups = defaultdict(list)
    for n, record in enumerate(records):
        groups[key(record)].append(n)
    keep = set()
    for group, count in _quotas({g: len(v) for g, v in groups.items()}, limit, rng).items():
        order = list(groups[group])
        rng.shuffle(order)
        if priority is not None:
            order.sort(key=lambda n: -priority(records[n]))   # stable: the draw breaks ties
        keep.update(order[:count])
    return [records[n] for n in sorted(keep)]
