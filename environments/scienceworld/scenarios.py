"""ScienceWorld's `ctx.env` scenarios: the recorded gold runs of the train tasks corpus records name.

The simulator is a Java program (a JRE and a 7.8 MB jar); the sandbox image has no Java and its
runtime is hashed into every manifest (changing it would change every BFCL manifest), so
ScienceWorld does not run inside the sandbox. What a strategy gets there is the *recorded* form
of each train scenario, in the folder format the sandbox's ctx.env already reads
(`scenarios.json`, sandbox/simenv/environment.py): per train task named by a record's `meta.env`,
a scenario with the `act` tool — so `ctx.env.has`, `ctx.env.tools`, `ctx.env.task_ids
("scienceworld")` and `scenario.check_call` work, and `scenario.executable` is False, as for a
BFCL single-turn scenario — plus the recorded gold run (task text, first look, each gold action
with the simulator's real observation and score) under the scenario's `recorded` key, readable
from `ctx.env.folder / "scenarios.json"`. Dev and test tasks are never exported (a record naming
one gets nothing and counts as withheld); the gold runs of train tasks are train data the corpus
already holds. The folder's bytes depend on the records' task ids and the catalog only. One
limit: a corpus mixing BFCL and ScienceWorld records is refused at export (both write
`scenarios.json`).
"""
from __future__ import annotations

import json
from typing import Mapping

from environments.scienceworld import actions as act, catalog

SCENARIOS_FILE = "scenarios.json"   # the name and layout the sandbox's ctx.env reads


def export(named: Mapping[str, set]) -> tuple[dict, dict]:
    """({relative path: bytes}, {"scienceworld": scenarios, "withheld": n}) for the named tasks;
    ({}, {}) when no record names a ScienceWorld task."""
    from environments.scienceworld.benchmark import ENV_BENCHMARK

    ids = set(named.get(ENV_BENCHMARK) or ())
    if not ids:
        return {}, {}
    entries = catalog.entries()
    scenarios, withheld = {}, 0
    for tid in sorted(ids):
        entry = entries.get(tid)
        if entry is None or entry["split"] != "train":
            withheld += 1
            continue
        scenarios[tid] = {"benchmark": ENV_BENCHMARK, "tools": [act.ACT_TOOL], "recorded": {
            "task_type": entry["task"], "variation": entry["variation"], "description": entry["description"],
            "observation": entry["observation"],
            "gold": [{"action": a, "observation": s["observation"], "score": s["score"]}
                     for a, s in zip(entry["gold"], entry["trace"])]}}
    doc = {"scenarios": scenarios, "backend_modules": {}, "multi_turn_tools": {},
           "simplification": catalog.load()["simplification"], "scienceworld": catalog.load()["scienceworld"]}
    data = json.dumps(doc, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()
    return {SCENARIOS_FILE: data}, {ENV_BENCHMARK: len(scenarios), "withheld": withheld}
