"""BFCL's ctx.env scenario folder (the export of both BFCL environments, one folder they share).

    files, summary = export({"bfcl_multi_turn": task ids, "bfcl_single_turn": task ids})

It holds only what rebuilding the named *train-split* scenarios needs: per task, the multi-turn
backend classes and initial config (or the single-turn function docs) as `scenarios.json`, and
verbatim copies of the backend class sources BFCL ships (`func_source_code/*.py`, pure Python).
Questions, ground truth and every dev or test scenario stay outside: a task of dev or test gets no
scenario. The bytes depend on the task ids and the installed bfcl-eval only; sandbox/simenv/export.py
writes them and the manifest carries their hash.
"""
from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Mapping

from sandbox.simenv.environment import BACKENDS_DIR, MULTI_TURN, SCENARIOS_FILE, SINGLE_TURN


def _multi_turn(task_ids: set[str]) -> tuple[dict, set[str], int, dict]:
    from environments.bfcl import backends, splits
    from environments.bfcl.multi_turn import _category_entries, parse_task_id
    from environments.bfcl.multi_turn_check import Schedule

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
        schedule = Schedule(entry)
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
    from environments.bfcl import splits
    from environments.bfcl.backends import tool_schema
    from environments.bfcl.single_turn_data import entries

    scenarios, withheld = {}, 0
    for tid in sorted(task_ids):
        category = tid.rsplit("_", 1)[0]
        if category not in splits.SINGLE_TURN_CATEGORIES or tid not in set(splits.single_turn_split(category, "train")):
            withheld += 1
            continue
        scenarios[tid] = {"benchmark": SINGLE_TURN,
                          "tools": [tool_schema(d) for d in entries(category)[tid]["function"]]}
    return scenarios, withheld


def export(named: Mapping[str, set]) -> tuple[dict[str, bytes], dict]:
    """The scenario folder's files (relative path → bytes) of the named train-split tasks, and a
    summary {env tag: scenarios, "withheld": named tasks outside train}."""
    from environments.bfcl.backends import CLASS_FILE_PATH_MAPPING

    multi_ids, single_ids = named.get(MULTI_TURN) or set(), named.get(SINGLE_TURN) or set()
    multi, classes, withheld_multi, tools = _multi_turn(multi_ids) if multi_ids else ({}, set(), 0, {})
    single, withheld_single = _single_turn(single_ids) if single_ids else ({}, 0)
    modules = {c: CLASS_FILE_PATH_MAPPING[c].rsplit(".", 1)[1] for c in sorted(classes)}
    doc = {"scenarios": {**multi, **single}, "backend_modules": modules, "multi_turn_tools": tools}
    files = {SCENARIOS_FILE: json.dumps(doc, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()}
    if modules:
        source_dir = Path(importlib.import_module(CLASS_FILE_PATH_MAPPING[next(iter(modules))]).__file__).parent
        for stem in sorted({*modules.values(), "long_context"}):
            files[f"{BACKENDS_DIR}/{stem}.py"] = (source_dir / f"{stem}.py").read_bytes()
    summary = {MULTI_TURN: len(multi), SINGLE_TURN: len(single), "withheld": withheld_multi + withheld_single}
    return files, summary
