"""Lineage: from a raw trajectory through the operators that made a record to the dev tasks an
edit fixed or broke (issue 29).

Outcome delta of an evaluated candidate (epoch e > 0): per seed, the dev tasks it fixed (failed
under the best strategy so far, its parent, and pass now) and broke (the reverse), each with its
failure family before and after (`evolver.diagnose.families`); the edits that made it (the
decide stage's `edits`); the records its artifacts added, removed or changed against the
parent's (by id and bytes), counted per operator (the step of their provenance that made them:
the first that is not a plain `sft_record` / `rl_record` / `memory_record`; a removed record by
the operator that noted it dropped the record or its raw trajectory, the candidate's
`dropped.jsonl`, else `made by` its maker); and per changed task
the records near it, those sharing its category or one of its tools. Everything is read from the
run's files, so `trace`, `report` and the diagnosis compute the same deltas.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from pydantic_core import from_json   # pydantic's JSON parser: faster than json.loads on artifact rows (checked rows: valid UTF-8)

from evolver.diagnose import families
from base.files import read_jsonl
from evolver.proposers.offline import categorizer
from evolver.store import RunStore
from experiments import journal
from base.provenance import DROPPED

BUILDERS = ("sft_record", "rl_record", "memory_record")   # a record's plain making, not an operator's choice
KINDS = ("sft", "rl", "memory")
NEAR_IDS = 5     # example record ids kept per operator for a changed task


def decisions(store: RunStore) -> list[dict]:
    """The decide stages' results in epoch order (a rerun epoch: its last decision)."""
    found = {}
    for event in journal.done(store.journal.events(), "decide"):
        if event.result:
            found[event.epoch] = event.result
    return [found[e] for e in sorted(found)]


def parent_of(store: RunStore, epoch: int, rows: Sequence[Mapping] | None = None) -> dict | None:
    """The best decision before `epoch`: the strategy its candidate revised and is compared to."""
    accepted = [d for d in (rows if rows is not None else decisions(store)) if d["epoch"] < epoch and d.get("accepted")]
    return accepted[-1] if accepted else None


def record_ops(meta: Mapping) -> list[str]:
    """The operators a record's stored provenance names, in order."""
    return [s["op"] for s in meta.get("provenance") or () if isinstance(s, dict) and "op" in s]   # parsed JSON: dicts


def maker(meta: Mapping, ops: list[str] | None = None) -> str:
    """The operator a record is counted under: the first of its steps that is not a plain builder;
    `custom` when the strategy's own code changed it last (`ops`: its `record_ops`, when known)."""
    ops = record_ops(meta) if ops is None else ops
    if ops and ops[-1] == "custom":
        return "custom"
    return next((op for op in ops if op not in BUILDERS), ops[-1] if ops else "custom")


def _meta(row: Mapping) -> dict:
    meta = row.get("meta")
    return from_json(meta) if isinstance(meta, str) else dict(meta or {})


def _called(row: Mapping) -> set[str]:
    calls = [c for m in row.get("messages") or () for c in m.get("tool_calls") or ()]
    calls += list((row.get("reference") or {}).get("tool_calls") or ())
    return {c["function"]["name"] for c in calls if isinstance(c, dict) and "function" in c}


ROW_ID = re.compile(rb'"id":"((?:[^"\\]|\\.)*)"')   # a row's own id: its first "id" (keys sorted, no object before it)


def artifact_lines(folder: Path) -> dict[str, bytes]:
    """`kind:id` → the bytes of its row, without parsing the rows."""
    lines = {}
    for kind in KINDS:
        path = folder / f"{kind}.jsonl"
        if path.is_file():
            for line in path.read_bytes().splitlines():
                raw = ROW_ID.search(line).group(1)
                rid = json.loads(b'"' + raw + b'"') if b"\\" in raw else raw.decode()   # escapes are rare
                lines[f"{kind}:{rid}"] = line
    return lines


def artifact_index(folder: Path, only: set[str] | None = None) -> dict[str, dict]:
    """`kind:id` → {kind, id, line (bytes of its row), maker, ops, origin, category, tools} of an
    epoch's artifacts (of the keys in `only`, when given: rows are parsed only for those)."""
    index = {}
    for key, line in artifact_lines(folder).items():
        if only is None or key in only:
            kind = key.split(":", 1)[0]
            row = from_json(line)
            meta = _meta(row)
            ops = record_ops(meta)
            made_by = maker(meta, ops)
            index[f"{kind}:{row['id']}"] = {
                "kind": kind, "id": row["id"], "line": line, "maker": made_by, "by": made_by, "ops": ops,
                "steps": meta.get("provenance") or [], "origin": list(meta.get("origin") or ()),
                "category": meta.get("category") or (meta.get("env") or {}).get("variant"), "tools": _called(row)}
    return index


def evaluated_tasks(store: RunStore, epoch: int, seed: int) -> dict[str, Mapping]:
    path = store.epoch_dir(epoch) / f"eval-s{seed}" / "trajectories.jsonl"
    return {(t.get("meta") or {}).get("task_id", t["id"]): t for t in read_jsonl(path)} if path.is_file() else {}


def failure_family(trajectory: Mapping | None) -> str | None:
    if trajectory is None or (trajectory.get("outcome") or {}).get("success"):
        return None
    found = families(trajectory)
    return found[0][0] if found else "unclassified"


def drop_notes(folder: Path) -> dict[tuple[str, str], str]:
    """(kind, id) → the operator that noted it dropped that raw trajectory ("raw") or record: the
    artifacts' dropped.jsonl (toolkit.dropped), {} without one."""
    path = folder / DROPPED
    return {(r["kind"], r["id"]): r["op"] for r in read_jsonl(path)} if path.is_file() else {}


def remover(record: Mapping, notes: Mapping[tuple[str, str], str]) -> str:
    """The operator a removed record is counted under: the one that dropped the record, else the
    one that dropped a raw trajectory it was made from; `made by M` (its maker) when none noted it."""
    keys = [(record["kind"], record["id"]), *(("raw", o) for o in record["origin"])]
    return next((notes[k] for k in keys if k in notes), f"made by {record['maker']}")


def _per_op(records: Iterable[Mapping]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in records:
        counts[r["by"]] = counts.get(r["by"], 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _near(task: str, category: str, tools: set[str], records: Sequence[Mapping]) -> dict[str, dict]:
    """Per operator, the records sharing the task's category or one of its tools: count, examples."""
    out = {}
    for r in records:
        if r["category"] == category or tools & r["tools"]:
            got = out.setdefault(r["by"], {"count": 0, "ids": []})
            got["count"] += 1
            if len(got["ids"]) < NEAR_IDS:
                got["ids"].append(f"{r['kind']}:{r['id']}")
    return dict(sorted(out.items()))


def record_changes(old_folder: Path, new_folder: Path) -> tuple[list[dict], list[dict], list[dict]]:
    """The artifact records (`artifact_index` rows) added, removed and changed from `old_folder`
    to `new_folder`, a removed one counted `by` its `remover`; only the rows whose bytes differ are parsed."""
    old, new = artifact_lines(old_folder), artifact_lines(new_folder)
    differ = {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)}
    before, after = artifact_index(old_folder, differ), artifact_index(new_folder, differ)
    added = [after[k] for k in sorted(after.keys() - before.keys())]
    notes = drop_notes(new_folder)
    removed = [{**before[k], "by": remover(before[k], notes)} for k in sorted(before.keys() - after.keys())]
    changed = [after[k] for k in sorted(after.keys() & before.keys()) if after[k]["line"] != before[k]["line"]]
    return added, removed, changed


def outcome_delta(store: RunStore, epoch: int, seeds: Sequence[int], rows: Sequence[Mapping] | None = None) -> dict | None:
    """The outcome delta of evaluated epoch `epoch` against its parent (module docstring); None for
    ρ0, an epoch not evaluated, or one without a parent."""
    rows = rows if rows is not None else decisions(store)
    decision = next((d for d in rows if d["epoch"] == epoch), None)
    parent = parent_of(store, epoch, rows)
    if decision is None or decision.get("P") is None or parent is None or epoch == 0:
        return None
    added, removed, changed = record_changes(store.epoch_dir(parent["epoch"]) / "artifacts",
                                             store.epoch_dir(epoch) / "artifacts")
    fixed, broken = [], []
    category_of = categorizer(store.config.get("benchmark"))
    for seed in seeds:
        old, new = evaluated_tasks(store, parent["epoch"], seed), evaluated_tasks(store, epoch, seed)
        for task in sorted(old.keys() & new.keys()):
            was, now = bool(old[task]["outcome"]["success"]), bool(new[task]["outcome"]["success"])
            if was == now:
                continue
            tools = {t["function"]["name"] for t in new[task].get("tools") or () if "function" in t}
            category = category_of(task)
            row = {"task": task, "seed": seed, "category": category,
                   "family_before": failure_family(old[task]), "family_after": failure_family(new[task]),
                   "near": {"added": _near(task, category, tools, added), "removed": _near(task, category, tools, removed),
                            "changed": _near(task, category, tools, changed)}}
            (fixed if now else broken).append(row)
    return {"epoch": epoch, "parent": parent["epoch"], "accepted": bool(decision.get("accepted")),
            "P": decision.get("P"), "parent_P": parent.get("P"), "edits": list(decision.get("edits") or ()),
            "fixed": fixed, "broken": broken,
            "records": {"added": _per_op(added), "removed": _per_op(removed), "changed": _per_op(changed)}}


def outcome_deltas(store: RunStore, seeds: Sequence[int], until: int | None = None) -> list[dict]:
    """The outcome delta of every evaluated candidate (up to epoch `until`), oldest first."""
    rows = decisions(store)
    found = (outcome_delta(store, d["epoch"], seeds, rows) for d in rows if until is None or d["epoch"] <= until)
    return [d for d in found if d is not None]


def brief_of(deltas: Sequence[Mapping]) -> list[dict]:
    """The deltas as proposers and the diagnosis read them: fixed and broken tasks with their
    families and the operators whose near records changed, without record ids."""
    def tasks(rows):
        return [{"task": r["task"], "seed": r["seed"], "family_before": r["family_before"],
                 "family_after": r["family_after"],
                 "near_ops": sorted({op for part in r["near"].values() for op in part})} for r in rows]
    return [{"epoch": d["epoch"], "parent": d["parent"], "accepted": d["accepted"], "edits": d["edits"],
             "fixed": tasks(d["fixed"]), "broken": tasks(d["broken"]), "records": d["records"]} for d in deltas]


def annotate(failed_points: list[dict], deltas: Sequence[Mapping]) -> list[dict]:
    """Failed points with `broken_by` where the last accepted edit broke some of their tasks:
    {epoch, edits, task_ids} (in place, returned)."""
    accepted = [d for d in deltas if d.get("accepted")]
    if not accepted:
        return failed_points
    last = accepted[-1]
    broken = {r["task"] for r in last["broken"]}
    for point in failed_points:
        hit = sorted(broken & set(point.get("task_ids") or ()))
        if hit:
            point["broken_by"] = {"epoch": last["epoch"], "edits": list(last["edits"]), "task_ids": hit}
    return failed_points
