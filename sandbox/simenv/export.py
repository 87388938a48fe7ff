"""Host side of ctx.env: the scenario folder one execution mounts read-only.

    files = prepare(corpus.records, job_root / "env")     # {} when the corpus names no BFCL task

It holds only what rebuilding the corpus's *train-split* scenarios needs: per task named by a
record's `meta.env`, the multi-turn backend classes and initial config (or the single-turn
function docs) as `scenarios.json`, and verbatim copies of the backend class sources BFCL ships
(`func_source_code/*.py`, pure Python). Questions, ground truth and every dev or test scenario
stay outside: a record that names a dev or test task gets no scenario. The folder's bytes depend
on the corpus and the installed bfcl-eval only; their hash goes into the manifest.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping, Sequence

from sandbox.simenv.environment import BACKENDS_DIR, MULTI_TURN, SCENARIOS_FILE, SINGLE_TURN

BENCHMARKS = (MULTI_TURN, SINGLE_TURN)


def named_tasks(records: Sequence[Mapping]) -> dict[str, set[str]]:
    """{benchmark: task ids} of the BFCL tasks the records' `meta.env` name."""
    out: dict[str, set[str]] = {b: set() for b in BENCHMARKS}
    for record in records:
        env = (record.get("meta") or {}).get("env")
        if isinstance(env, Mapping) and env.get("benchmark") in out and isinstance(env.get("task_id"), str):
            out[env["benchmark"]].add(env["task_id"])
    return out


def _multi_turn(task_ids: set[str]) -> tuple[dict, set[str], int, dict]:
    from benchmarks.bfcl import backends, splits
    from benchmarks.bfcl.multi_turn import _Schedule, _category_entries, parse_task_id

    train = set(splits.multi_turn_split("train"))
    scenarios, classes, withheld, tools = {}, set(), 0, {}
    for tid in sorted(task_ids):
        try:
            variant, number = parse_task_id(tid)
        except Exception:  # not a BFCL id: nothing to rebuild
            withheld += 1
            continue
        entry = _category_entries(variant).get(tid)
        if number not in train or entry is None:
            withheld += 1
            continue
        schedule = _Schedule(entry)
        docs = schedule.docs_at(10**6)   # every function the scenario ever offers
        scenarios[tid] = {
            "benchmark": MULTI_TURN, "involved_classes": list(entry["involved_classes"]),
            "initial_config": entry.get("initial_config") or {}, "functions": schedule.all_names,
            "stateless": [c for c in entry["involved_classes"] if c in backends.STATELESS_CLASSES],
            "long_context": variant == "long_context"}
        tools.update((d["name"], backends.tool_schema(d)) for d in docs)   # 128 unique names in BFCL
        classes.update(entry["involved_classes"])
    return scenarios, classes, withheld, tools


def _single_turn(task_ids: set[str]) -> tuple[dict, int]:
    from benchmarks.bfcl import splits
    from benchmarks.bfcl.backends import tool_schema
    from benchmarks.bfcl.single_turn_data import entries

    scenarios, withheld = {}, 0
    for tid in sorted(task_ids):
        category = tid.rsplit("_", 1)[0]
        if category not in splits.SINGLE_TURN_CATEGORIES or tid not in set(splits.single_turn_split(category, "train")):
            withheld += 1
            continue
        scenarios[tid] = {"benchmark": SINGLE_TURN,
                          "tools": [tool_schema(d) for d in entries(category)[tid]["function"]]}
    return scenarios, withheld


def prepare(records: Sequence[Mapping], dest: Path) -> tuple[dict[str, bytes], dict]:
    """Write the scenario folder of the records' train-split BFCL tasks into `dest`; the files
    written (relative path → bytes; empty, and nothing written, when no record names a BFCL task)
    and a summary {benchmark: scenarios, "withheld": records' tasks outside train}."""
    named = named_tasks(records)
    if not any(named.values()):
        return {}, {}
    from benchmarks.bfcl.backends import CLASS_FILE_PATH_MAPPING

    multi, classes, withheld_multi, tools = _multi_turn(named[MULTI_TURN]) if named[MULTI_TURN] else ({}, set(), 0, {})
    single, withheld_single = _single_turn(named[SINGLE_TURN]) if named[SINGLE_TURN] else ({}, 0)
    modules = {c: CLASS_FILE_PATH_MAPPING[c].rsplit(".", 1)[1] for c in sorted(classes)}
    doc = {"scenarios": {**multi, **single}, "backend_modules": modules, "multi_turn_tools": tools}
    files = {SCENARIOS_FILE: json.dumps(doc, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()}
    if modules:
        import importlib

        source_dir = Path(importlib.import_module(CLASS_FILE_PATH_MAPPING[next(iter(modules))]).__file__).parent
        for stem in sorted({*modules.values(), "long_context"}):
            files[f"{BACKENDS_DIR}/{stem}.py"] = (source_dir / f"{stem}.py").read_bytes()
    for rel, data in files.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes(data)
    summary = {MULTI_TURN: len(multi), SINGLE_TURN: len(single), "withheld": withheld_multi + withheld_single}
    return files, summary
