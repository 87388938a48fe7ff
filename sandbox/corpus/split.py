"""The dev hold-out of a corpus without an environment (the paper's 9:1), and the benchmark a
corpus implies.

`split_ids` / `holdout`: records are grouped so that copies of one task cannot sit on both
sides: by `meta.env.task_id` when the record has an environment, else by its instruction (the
`task` field, else the first user message), whitespace- and case-folded; a record without
either is its own group. Groups are ordered by the sha256 of `"{seed}\\0{smallest id}"` and
taken into the held-out side until it holds `share` (10%) of the records (at least one when the
corpus has two or more; never all of it). The split depends on the ids and the seed alone, not on
record order, and adding records moves few others across.
"""
from __future__ import annotations

import hashlib
from typing import Mapping, Sequence

from base.errors import UserError

DEFAULT_SHARE = 0.1
DEFAULT_SEED = 0
# meta.env.benchmark of a record -> the benchmark that can run its environment
# (benchmarks/bfcl/multi_turn.py and single_turn.py, ENV_BENCHMARK -> NAME).
ENV_BENCHMARKS = {"bfcl_multi_turn": "bfcl", "bfcl_single_turn": "bfcl-single"}
REPLAY = "replay"


def group_key(record: Mapping) -> str:
    env = (record.get("meta") or {}).get("env")
    if isinstance(env, Mapping) and env.get("task_id") is not None:
        return f"env:{env.get('benchmark', '')}:{env['task_id']}"
    text = record.get("task") or next((m.get("content") or "" for m in record.get("messages", [])
                                       if m.get("role") == "user"), "")
    text = " ".join(str(text).lower().split())
    return f"task:{text}" if text else f"id:{record['id']}"


def _rank(seed: int, rid: str) -> str:
    return hashlib.sha256(f"{seed}\0{rid}".encode()).hexdigest()


def split_ids(records: Sequence[Mapping], seed: int = DEFAULT_SEED,
              share: float = DEFAULT_SHARE) -> tuple[list[str], list[str]]:
    """(train ids, held-out ids), each sorted; see the module docstring."""
    if not 0 < share < 1:
        raise UserError(f"holdout must be between 0 and 1, not {share}")
    groups: dict[str, list[str]] = {}
    for r in records:
        groups.setdefault(group_key(r), []).append(r["id"])
    ordered = sorted((sorted(ids) for ids in groups.values()), key=lambda ids: _rank(seed, ids[0]))
    n = len(records)
    target = max(1, round(n * share)) if n >= 2 else 0
    dev: list[str] = []
    for ids in ordered:
        if len(dev) >= target:
            break
        if len(dev) + len(ids) >= n:  # never hold out everything
            continue
        dev.extend(ids)
    held = set(dev)
    return sorted(r["id"] for r in records if r["id"] not in held), sorted(dev)


def holdout(records: Sequence[Mapping], seed: int = DEFAULT_SEED,
            share: float = DEFAULT_SHARE) -> tuple[list[Mapping], list[Mapping]]:
    """(train records, dev records), each in corpus order: the strategy sees only the first."""
    _, dev_ids = split_ids(records, seed, share)
    dev = set(dev_ids)
    return [r for r in records if r["id"] not in dev], [r for r in records if r["id"] in dev]


def train_part(corpus, seed: int = DEFAULT_SEED, share: float = DEFAULT_SHARE):
    """The corpus a strategy may see when the dev set is its own held-out tenth: the other nine
    tenths, in corpus order, marked with the hold-out (the manifest records it, replay re-applies it)."""
    import dataclasses

    train, _ = holdout(corpus.records, seed, share)
    return dataclasses.replace(corpus, records=train, holdout={"seed": seed, "share": share})


def corpus_kind(records: Sequence[Mapping]) -> str:
    """The benchmark to evaluate a corpus on: the environment's benchmark when every record
    names the same known one in `meta.env.benchmark`, else the replay benchmark."""
    kinds = {((r.get("meta") or {}).get("env") or {}).get("benchmark") for r in records}
    if len(kinds) == 1:
        (kind,) = kinds
        if kind in ENV_BENCHMARKS:
            return ENV_BENCHMARKS[kind]
    return REPLAY
