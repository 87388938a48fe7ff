"""What the wild corpora of both BFCL builders share: seeded draws, opaque ids, the noise kind of a
record (a kind a task cannot take falls through to the next feasible one, then to clean), the
duplicate copies, the final check of every record, and the loop that builds a corpus from a
builder (environments/bfcl/corpus_multi_turn.py, corpus_single_turn.py)."""
from __future__ import annotations

import copy
import random
from typing import Any, Callable, Mapping, Protocol, Sequence

from base.benchmark import Task
from base.schemas import check_raw

SPLIT = "train"
SECOND_RECORD = 0.3      # chance that a task gets a second, independently drawn record
EXACT_DUPLICATES = 0.04  # share of exact copies (new ids)
NEAR_DUPLICATES = 0.04   # share of near copies


class Builder(Protocol):
    """One benchmark's way of writing records of its train tasks."""
    bench: Any
    seed: int
    progress_every: int   # a progress line every so many tasks
    unit: str             # what the progress line counts

    def prefix(self, task: Task) -> str: ...
    def labeled(self, rid: str, task: Task) -> dict | None: ...
    def weights(self, task: Task) -> Mapping[str, int]: ...
    def noisy(self, task: Task, kind: str, rng: random.Random) -> tuple[Any, dict] | None: ...
    def wild_record(self, rid: str, task: Task, variant: Any, k: int) -> dict: ...
    def near(self, rec: dict, rng: random.Random) -> dict: ...


def seeded(seed: int, *parts: Any) -> random.Random:
    return random.Random(":".join(map(str, (seed,) + parts)))


def opaque_id(prefix: str, seed: int, key: str, taken: set[str]) -> str:
    rng = seeded(seed, "id", prefix, key)
    while True:
        rid = f"{prefix}/{rng.getrandbits(32):08x}"
        if rid not in taken:
            taken.add(rid)
            return rid


def _draw(rng: random.Random, weights: Mapping[str, int]) -> str:
    kinds = list(weights)
    return rng.choices(kinds, weights=[weights[k] for k in kinds])[0]


def noisy_variant(builder: Builder, task: Task, pick: random.Random, weights: Mapping[str, int], k: int) -> tuple[Any, dict]:
    """The k-th wild record of `task`: draw a noise kind from `weights`; when it does not apply to
    the task, fall back through the other kinds in order, clean last. Returns the builder's
    variant (a plan or a message list) and its label."""
    first = _draw(pick, weights)
    for kind in [first] + [x for x in weights if x not in (first, "clean")] + ["clean"]:
        made = builder.noisy(task, kind, seeded(builder.seed, kind, task.id, k))
        if made is not None:
            break
    variant, detail = made
    return variant, {"noise": kind, "task_id": task.id, **({"drawn": first} if kind != first else {}), **detail}


def typo(value: str) -> str | None:
    """A near miss of a string: the last digit bumped, else two adjacent letters swapped."""
    for k in range(len(value) - 1, -1, -1):
        if value[k] in "0123456789":
            return value[:k] + str((int(value[k]) + 1) % 10) + value[k + 1:]
    letters = [k for k in range(len(value) - 1) if value[k].isalpha() and value[k + 1].isalpha()
               and value[k] != value[k + 1]]
    if not letters:
        return value + "x" if value else None
    k = letters[-1]
    return value[:k] + value[k + 1] + value[k] + value[k + 2:]


def _add_duplicates(records: dict, labels: dict, seed: int, taken: set[str], near: Callable) -> None:
    rng = seeded(seed, "duplicates")
    ids = sorted(records)
    n_exact = max(1, round(EXACT_DUPLICATES * len(ids))) if ids else 0
    n_near = max(1, round(NEAR_DUPLICATES * len(ids))) if ids else 0
    picks = rng.sample(ids, min(len(ids), n_exact + n_near))
    for k, rid in enumerate(picks):
        exact = k < n_exact
        prefix = rid.split("/")[0]
        new = opaque_id(prefix, seed, f"dup{k}", taken)
        copy_ = copy.deepcopy(records[rid]) if exact else near(records[rid], seeded(seed, "near", rid))
        copy_["id"] = new
        records[new] = copy_
        labels[new] = {"noise": "exact_duplicate" if exact else "near_duplicate",
                       "task_id": labels[rid]["task_id"], "duplicate_of": rid, "of_noise": labels[rid]["noise"]}


def _finish(records: dict) -> list[dict]:
    out = [records[rid] for rid in sorted(records)]
    for rec in out:
        error = check_raw(rec)
        if error:
            raise RuntimeError(f"{rec['id']}: {error}")
    return out


def build_records(builder: Builder, setting: str, variants: Sequence[str] | None, limit: int | None,
                  progress: Callable[[str], None] | None) -> tuple[list[dict], dict]:
    """(records sorted by id, noise labels by id) of the builder's train tasks."""
    tasks = builder.bench.tasks(SPLIT, categories=variants)
    if limit is not None:
        tasks = tasks[:limit]
    records: dict[str, dict] = {}
    labels: dict[str, dict] = {}
    taken: set[str] = set()
    for i, task in enumerate(tasks):
        if progress and i % builder.progress_every == 0:
            progress(f"{i}/{len(tasks)} {builder.unit}")
        prefix = builder.prefix(task)
        if setting == "labeled":
            rec = builder.labeled(prefix, task)
            if rec is not None:
                records[prefix] = rec
            continue
        pick = seeded(builder.seed, "pick", task.id)
        count = 2 if pick.random() < SECOND_RECORD else 1
        for k in range(count):
            variant, label = noisy_variant(builder, task, pick, builder.weights(task), k)
            rid = opaque_id(prefix, builder.seed, f"{k}", taken)
            records[rid] = builder.wild_record(rid, task, variant, k)
            labels[rid] = label
    if setting == "wild":
        _add_duplicates(records, labels, builder.seed, taken, builder.near)
    return _finish(records), {rid: labels[rid] for rid in sorted(labels)}
