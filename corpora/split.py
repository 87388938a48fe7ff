"""The dev and test hold-outs of a corpus without an environment (the paper's 9:1, plus a test
part), and the benchmark a corpus implies.

A split is a small mapping ("spec"), recorded in run.json (`holdout`) and in each manifest:

- `{"rank": "task", "seed", "share", "test_share"}` (the default, `DEFAULT_SPLIT`): records
  are grouped so that trials of one task cannot sit on two sides: by `meta.env.task_id` when the
  record has an environment, else by the task id the record was published with (`meta.task_id`,
  as tau2-bench simulations carry it, or a top-level `task_id` kept as `meta.extra.task_id`, as
  tau-bench's trajectories carry it), qualified by its source; else by its instruction (the `task`
  field, else the first user message), whitespace- and case-folded, else by the sha256 of its
  content without its id.
  Groups are ordered by the sha256 of `"{seed}\\0{group key}"` — the records' content, never
  their ids or the file's name — those holding a record the next-call benchmark can judge (`judgeable`:
  it calls a tool and did not record a failure) before the others, and taken first into the test
  part until it holds `test_share` of the records (at least one when the corpus has three or more),
  then into dev until it holds `share` (at least one when the corpus has two or more). The train
  part is never emptied.
- `dev_ids` / `test_ids` (lists, `run --dev-ids FILE` / `--test-ids FILE`): the user's own
  choice of held-out records; a part not chosen is drawn as above from the other records.
- `{"rank": "content", …}`: the same without the published task id (runs made before it, kept so
  their epochs replay: two trials of one task with different opening words could sit on two sides).
- `{"seed", "share"}` without `rank`: the split of runs made before the test part existed (groups
  ordered by the hash of their smallest id, dev only), kept so their epochs replay.

The loop and the strategy see only the train part (`train_part`); evaluation reads dev; only
`curateevo test` reads test.
"""
from __future__ import annotations

import hashlib
import json
from typing import Mapping, NamedTuple, Sequence

from base.errors import UserError

DEFAULT_SHARE = 0.1
DEFAULT_SEED = 0
DEFAULT_TEST_SHARE = 0.1
DEFAULT_SPLIT = {"rank": "task", "seed": DEFAULT_SEED, "share": DEFAULT_SHARE, "test_share": DEFAULT_TEST_SHARE}
RANKS = ("task", "content")   # ranked splits; no rank: the legacy one
LEGACY_SPLIT = {"seed": DEFAULT_SEED, "share": DEFAULT_SHARE}   # runs made before the test part


class Parts(NamedTuple):
    train: list[str]   # each sorted
    dev: list[str]
    test: list[str]


def task_id(record: Mapping) -> str | None:
    """The task id a record was published with (`meta.task_id`, else `meta.extra.task_id`), as text;
    None without one."""
    meta = record.get("meta") or {}
    extra = meta.get("extra") if isinstance(meta.get("extra"), Mapping) else {}
    value = meta.get("task_id", extra.get("task_id"))
    return None if value is None or isinstance(value, (dict, list)) else str(value)


def group_key(record: Mapping, content: bool = False, by_task: bool = False) -> str:
    env = (record.get("meta") or {}).get("env")
    if isinstance(env, Mapping) and env.get("task_id") is not None:
        return f"env:{env.get('benchmark', '')}:{env['task_id']}"
    if by_task and task_id(record) is not None:
        return f"task_id:{record.get('source') or ''}:{task_id(record)}"
    text = record.get("task") or next((m.get("content") or "" for m in record.get("messages", [])
                                       if m.get("role") == "user"), "")
    text = " ".join(str(text).lower().split())
    if text:
        return f"task:{text}"
    if not content:
        return f"id:{record['id']}"
    body = json.dumps({k: v for k, v in record.items() if k != "id"}, sort_keys=True, ensure_ascii=False)
    return "content:" + hashlib.sha256(body.encode()).hexdigest()


def task_key(record: Mapping, spec: Mapping | None = None) -> str:
    """The task a record is a trial (or copy) of under the split `spec` (None: DEFAULT_SPLIT): the
    group `partition` keeps on one side, which the next-call benchmark's intervals resample."""
    rank = dict(DEFAULT_SPLIT if spec is None else spec).get("rank")
    return group_key(record, rank in RANKS, rank == "task")


def judgeable(record: Mapping) -> bool:
    """The record gives the next-call benchmark something to judge: an assistant turn with tool calls,
    and no recorded failure (a failed trajectory's actions are not ones to copy)."""
    calls = any(m.get("tool_calls") for m in record.get("messages", ()) if m.get("role") == "assistant")
    return calls and (record.get("outcome") or {}).get("success") is not False


def _rank(seed: int, key: str) -> str:
    return hashlib.sha256(f"{seed}\0{key}".encode()).hexdigest()


def _share(value, name: str) -> float:
    if not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise UserError(f"{name} must be a fraction in [0, 1), not {value!r}")
    return float(value)


class Scan(NamedTuple):
    """What a split reads of each record, in corpus order, in one pass (the records are not held)."""
    ids: list[str]
    keys: list[str]           # group_key under the spec: the task a record is a trial of
    judged: dict[str, bool]   # id -> judgeable


def scan(records: Sequence[Mapping], spec: Mapping | None = None) -> Scan:
    """Stored records are read in two halves at once when they are large (`StoredRecords.mapped`)."""
    rank = dict(DEFAULT_SPLIT if spec is None else spec).get("rank")

    def read(r: Mapping) -> tuple[str, str, bool]:
        return r["id"], group_key(r, rank in RANKS, rank == "task"), judgeable(r)

    ids, keys, judged = [], [], {}
    for rid, key, ok in (records.mapped(read) if hasattr(records, "mapped") else map(read, records)):
        ids.append(rid)
        keys.append(key)
        judged[rid] = ok
    return Scan(ids, keys, judged)


def partition(records: Sequence[Mapping], spec: Mapping | None = None, scanned: Scan | None = None) -> Parts:
    """(train, dev, test) ids under `spec` (module docstring; None: DEFAULT_SPLIT); `scanned`: the
    records' `scan` under it, when the caller has it."""
    spec = dict(DEFAULT_SPLIT if spec is None else spec)
    unknown = set(spec) - {"rank", "seed", "share", "test_share", "dev_ids", "test_ids"}
    if unknown:
        raise UserError(f"unknown hold-out setting(s) {', '.join(sorted(unknown))}")
    if spec.get("rank") is not None and spec["rank"] not in RANKS:
        raise UserError(f"unknown hold-out rank {spec['rank']!r} (expected one of {', '.join(RANKS)})")
    content = spec.get("rank") in RANKS
    seed = spec.get("seed", DEFAULT_SEED)
    share = _share(spec.get("share", DEFAULT_SHARE), "the dev share")
    test_share = _share(spec.get("test_share", 0.0), "the test share") if content else 0.0
    if not content and not 0 < share < 1:
        raise UserError(f"holdout must be between 0 and 1, not {share}")
    ids, keys, judged = scanned or scan(records, spec)
    known = set(ids)
    chosen = {part: list(spec.get(f"{part}_ids") or ()) for part in ("dev", "test")}
    for part, wanted in chosen.items():
        missing = [i for i in wanted if i not in known]
        if missing:
            raise UserError(f"the {part} ids name {len(missing)} record(s) the corpus does not hold (first: "
                            f"{missing[0]!r}); an id is the record's `id` field, or FILE:LINE (FILE[INDEX] in a JSON array) "
                            "for a record without one")
    both = set(chosen["dev"]) & set(chosen["test"])
    if both:
        raise UserError(f"record {sorted(both)[0]!r} is chosen for both dev and test; a record is held out once")
    taken = set(chosen["dev"]) | set(chosen["test"])
    if len(taken) >= len(ids) and ids:
        raise UserError("the chosen dev and test ids cover the whole corpus; leave at least one record to curate")
    groups: dict[str, list[str]] = {}
    for rid, key in zip(ids, keys):
        if rid not in taken:
            groups.setdefault(key, []).append(rid)
    # content: judgeable groups first, each by its key (the records' text); legacy: by the smallest id
    ranked = sorted(groups.items(), key=lambda kv: (not any(judged[i] for i in kv[1]), _rank(seed, kv[0]))
                    if content else _rank(seed, min(kv[1])))
    remaining = [sorted(g) for _, g in ranked]
    n = len(ids)
    parts = {"dev": list(chosen["dev"]), "test": list(chosen["test"])}
    targets = {"test": max(1, round(n * test_share)) if test_share and n >= 3 and not chosen["test"] else 0,
               "dev": max(1, round(n * share)) if n >= 2 and not chosen["dev"] else 0}
    held = len(taken)
    for part in ("test", "dev"):
        drawn = 0
        for group in list(remaining):
            if drawn >= targets[part]:
                break
            if held + len(group) >= n:   # never hold out everything
                continue
            parts[part].extend(group)
            remaining.remove(group)
            held += len(group)
            drawn += len(group)
    out = set(parts["dev"]) | set(parts["test"])
    return Parts(sorted(i for i in ids if i not in out), sorted(parts["dev"]), sorted(parts["test"]))


def sides(records: Sequence[Mapping], spec: Mapping | None = None) -> dict:
    """How a split shares the corpus out: per part (train, dev, test) its records, its tasks (the
    groups kept on one side) and its records with tool calls and no failed outcome (`judgeable`)."""
    spec = dict(DEFAULT_SPLIT if spec is None else spec)
    scanned = scan(records, spec)
    parts = partition(records, spec, scanned)
    key = dict(zip(scanned.ids, scanned.keys))   # task_key under the spec
    return {part: {"records": len(ids), "tasks": len({key[i] for i in ids}),
                   "with_calls": sum(scanned.judged[i] for i in ids)}
            for part, ids in parts._asdict().items()}


def sides_note(shares: Mapping) -> str:
    """One line for `curate` and `run`: what each side got, and a warning when the held-out parts
    take most of the records a model could learn tool calls from."""
    text = "split by task: " + "; ".join(f"{part} {s['records']} record(s) of {s['tasks']} task(s) ({s['with_calls']} "
                                         "with tool calls and no failed outcome)" for part, s in shares.items())
    held = shares["dev"]["with_calls"] + shares["test"]["with_calls"]
    if held > shares["train"]["with_calls"]:
        text += (f"\nwarning: the held-out parts take {held} of the {held + shares['train']['with_calls']} records that "
                 "call tools without a failed outcome, leaving the strategy "
                 f"{shares['train']['with_calls']} to learn from; choose fewer held-out records yourself with "
                 "`run --dev-ids FILE` (and --test-ids FILE), one record id a line")
    return text


def split_ids(records: Sequence[Mapping], seed: int = DEFAULT_SEED,
              share: float = DEFAULT_SHARE) -> tuple[list[str], list[str]]:
    """(train ids, held-out ids) of the legacy split (`{"seed", "share"}`: by id, no test part)."""
    parts = partition(records, {"seed": seed, "share": share})
    return parts.train, parts.dev


def holdout(records: Sequence[Mapping], seed: int = DEFAULT_SEED,
            share: float = DEFAULT_SHARE) -> tuple[list[Mapping], list[Mapping]]:
    """(train records, dev records) of the legacy split, each in corpus order."""
    _, dev_ids = split_ids(records, seed, share)
    dev = set(dev_ids)
    return [r for r in records if r["id"] not in dev], [r for r in records if r["id"] in dev]


def train_part(corpus, spec: Mapping | None = None, **legacy):
    """The corpus a strategy may see when the dev (and test) sets are its own held-out records: the
    train part, in corpus order, marked with the spec (the manifest records it, replay re-applies
    it). `train_part(corpus, **manifest_holdout)` reads a recorded spec of either kind."""
    import dataclasses

    spec = dict(spec if spec is not None else legacy or DEFAULT_SPLIT)
    scanned = scan(corpus.records, spec)
    train = set(partition(corpus.records, spec, scanned).train)
    positions = [n for n, rid in enumerate(scanned.ids) if rid in train]
    records = corpus.records
    kept = records.subset(positions) if hasattr(records, "subset") else [records[n] for n in positions]
    return dataclasses.replace(corpus, records=kept, holdout=spec)


def corpus_kind(records: Sequence[Mapping]) -> str:
    """The benchmark to evaluate a corpus on: the environment's (base.registry) when every
    record names the same known one in `meta.env.benchmark`, else the next-call benchmark
    (registry.NO_ENVIRONMENT)."""
    from base import registry

    kinds = {((r.get("meta") or {}).get("env") or {}).get("benchmark") for r in records}
    if len(kinds) == 1:
        environment = registry.by_tag(next(iter(kinds)))
        if environment is not None:
            return environment.name
    return registry.NO_ENVIRONMENT
