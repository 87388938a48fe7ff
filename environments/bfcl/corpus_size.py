"""A default corpus sized to a training budget: which train tasks to keep so that the wild corpus
holds at most `max_records` records.

The recipe trains at most `sft_examples` examples (trainer.recipe.curation_budget); a corpus
larger than that is mostly never seen (on `cpu-small` the full wild bfcl-single corpus is 1,230
records for 280 trained examples). The default run therefore builds its corpus to the profile's
budget: whole train tasks (every record of a task, duplicates included) are taken in a seeded
order, the categories interleaved so each keeps its share of the full corpus, while the count stays
within the budget. The labeled setting takes the same tasks. Noise shares are those of the full
corpus up to sampling: nothing is cleaned to make curation easier or harder.
"""
from __future__ import annotations

import hashlib
from collections import defaultdict
from typing import Mapping, Sequence


def _task(record: Mapping) -> tuple[str, str]:
    env = record["meta"]["env"]
    return env["variant"], env["task_id"]


def draw_key(seed: int, task_id: str) -> str:
    """A task's place in its category's draw order (ascending)."""
    return hashlib.sha256(f"{seed}:size:{task_id}".encode()).hexdigest()


def sized_tasks(wild_records: Sequence[Mapping], max_records: int, seed: int) -> set[str]:
    """Task ids whose wild records number at most `max_records`: seeded order within each
    category, the category furthest behind its share drawn next."""
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for rec in wild_records:
        counts[_task(rec)] += 1
    queues: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for (variant, task_id), n in counts.items():
        queues[variant].append((task_id, n))
    for variant, queue in queues.items():
        queue.sort(key=lambda t: draw_key(seed, t[0]))
    sizes = {v: len(q) for v, q in queues.items()}
    drawn = dict.fromkeys(queues, 0)
    chosen: set[str] = set()
    total = 0
    while total < max_records and any(queues.values()):
        variant = min((v for v in queues if queues[v]), key=lambda v: (drawn[v] / sizes[v], v))
        task_id, n = queues[variant].pop(0)
        drawn[variant] += 1
        if total + n <= max_records:
            chosen.add(task_id)
            total += n
    return chosen


def keep_tasks(records: list[dict], labels: dict, tasks: set[str]) -> tuple[list[dict], dict]:
    """The records (and their noise labels) of the chosen tasks, order kept."""
    kept = [r for r in records if _task(r)[1] in tasks]
    ids = {r["id"] for r in kept}
    return kept, {rid: label for rid, label in labels.items() if rid in ids}
