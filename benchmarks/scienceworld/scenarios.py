"""ScienceWorld's `ctx.env` scenarios: the recorded gold runs of the train tasks corpus records name.

The simulator is a Java program (a JRE and a 7.8 MB jar); the sandbox image has no Java and its
runtime is hashed into every manifest, so ScienceWorld does not run inside the sandbox. What a
strategy may execute there is the *recorded* form of each train scenario, exported like BFCL's
scenario folder: per train task named by a record's `meta.env`, the task text, the first look,
and the gold run's actions with the simulator's real observation and score after each. A
strategy can follow a record along the gold run, see where it leaves it, and read the score a
gold prefix reaches. Dev and test tasks are never exported (a record naming one gets nothing and
counts as withheld), and the gold runs of train tasks are train data the corpus already holds.
The folder's bytes depend on the records' task ids and the catalog only.
"""
from __future__ import annotations

import json
from typing import Mapping

from benchmarks.scienceworld import catalog

SCENARIOS_FILE = "scienceworld/scenarios.json"


def export(named: Mapping[str, set]) -> tuple[dict, dict]:
    """({relative path: bytes}, {"scienceworld": scenarios, "withheld": n}) for the named tasks;
    ({}, {}) when no record names a ScienceWorld task."""
    from benchmarks.scienceworld.benchmark import ENV_BENCHMARK

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
        scenarios[tid] = {"benchmark": ENV_BENCHMARK, "task_type": entry["task"], "variation": entry["variation"],
                          "description": entry["description"], "observation": entry["observation"],
                          "gold": [{"action": a, "observation": s["observation"], "score": s["score"]}
                                   for a, s in zip(entry["gold"], entry["trace"])]}
    doc = {"scenarios": scenarios, "simplification": catalog.load()["simplification"],
           "scienceworld": catalog.load()["scienceworld"]}
    data = json.dumps(doc, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()
    return {SCENARIOS_FILE: data}, {ENV_BENCHMARK: len(scenarios), "withheld": withheld}
