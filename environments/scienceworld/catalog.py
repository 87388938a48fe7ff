"""The ScienceWorld tasks this project uses, their splits and their gold runs, as one data file.

    python -m environments.scienceworld.catalog build      # runs the simulator (minutes), writes data/catalog.json.gz

Tasks are (task type × variation) pairs. ScienceWorld itself splits each task type's variations
into train, dev and test lists that share no variation; per task type we draw, seeded by
(SEED, task type), `PER_SPLIT[split]` variations from the simulator's own list of that split,
keeping only variations whose gold action sequence completes the task (score 100) — so every
task here is solvable and its gold run is a full-score reference. The three splits are
disjoint by construction (different variations) and deterministic (seeded draws over the
simulator's fixed lists).

Each entry: id "<task type>-v<variation>", task type, variation, split, the task description,
the first observation (the simulator's "look around" after reset), the gold actions and the gold
trace (observation and score after each action). The file is canonical JSON, gzip'd with a fixed
mtime. Rebuilding it with the same ScienceWorld version draws the same variations with the same
texts, and every stored gold run, executed again, gives its stored trace; the gold *route* may differ between
builds, since the simulator's oracle picks among equally short paths by Scala set order, which
changes between JVM runs (allenai/ScienceWorld#15). The stored file is the reference.
"""
from __future__ import annotations

import gzip
import io
import json
import random
import sys
from concurrent.futures import ProcessPoolExecutor
from functools import lru_cache
from pathlib import Path

from base.errors import UserError

CATALOG_PATH = Path(__file__).with_name("data") / "catalog.json.gz"
SEED = 31
PER_SPLIT = {"train": 2, "dev": 1, "test": 1}
MAX_TRIES = 4      # variations tried per wanted one before the slot stays empty
SPLITS = ("train", "dev", "test")


def task_id(task: str, variation: int) -> str:
    return f"{task}-v{int(variation)}"


def _gold_run(sim, task: str, variation: int) -> dict | None:
    first = sim.start(task, variation, gold=True)
    try:
        gold = sim.gold()
    except RuntimeError:
        return None
    trace = []
    for action in gold:
        step = sim.step(action)
        trace.append({"observation": step.observation, "score": step.score})
        if step.done:
            break
    if not trace or trace[-1]["score"] < 100:
        return None
    return {"description": first["description"], "observation": first["observation"],
            "gold": gold[:len(trace)], "trace": trace}


def selection(task: str, lists: dict) -> dict[str, list[int]]:
    """Per split, the seeded order in which a task type's variations are tried (the simulator's own
    list of that split, shuffled by (SEED, task type, split), the first PER_SPLIT × MAX_TRIES)."""
    out = {}
    for split in SPLITS:
        order = sorted(lists[split])
        random.Random(f"scienceworld-splits:{SEED}:{task}:{split}").shuffle(order)
        out[split] = order[:PER_SPLIT[split] * MAX_TRIES]
    return out


def _task_type(task: str) -> tuple[list[dict], list[str], dict]:
    """(entries, notes, the simulator's variation lists) for one task type, every split."""
    from environments.scienceworld.simulator import Simulator

    sim = Simulator()
    try:
        lists = sim.variations(task)
        entries, notes = [], []
        tried = selection(task, lists)
        for split in SPLITS:
            taken = 0
            for variation in tried[split]:
                if taken == PER_SPLIT[split]:
                    break
                run = _gold_run(sim, task, variation)
                if run is None:
                    notes.append(f"{task_id(task, variation)}: gold does not complete the task")
                    continue
                entries.append({"id": task_id(task, variation), "task": task, "variation": variation,
                                "split": split, **run})
                taken += 1
        return entries, notes, lists
    finally:
        sim.close()


def build(out: Path = CATALOG_PATH, workers: int = 2, tasks: list[str] | None = None) -> dict:
    """Run every task type's gold variations in the simulator and write the catalog."""
    from environments.scienceworld.simulator import Simulator
    import scienceworld

    if tasks is None:
        sim = Simulator()
        tasks = sim.task_names()
        sim.close()
    entries, notes, variations = [], [], {}
    with ProcessPoolExecutor(max_workers=workers) as pool:
        for task, (found, why, lists) in zip(tasks, pool.map(_task_type, tasks)):
            print(f"{task}: {len(found)} tasks", file=sys.stderr, flush=True)
            entries.extend(found)
            notes.extend(why)
            variations[task] = lists
    doc = {"scienceworld": scienceworld.__version__ if hasattr(scienceworld, "__version__") else _version(),
           "seed": SEED, "per_split": PER_SPLIT, "simplification": "easy", "task_types": sorted(tasks),
           "notes": notes, "variations": variations, "tasks": sorted(entries, key=lambda e: e["id"])}
    data = json.dumps(doc, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, filename="") as gz:
        gz.write(data)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(buf.getvalue())
    return doc


def _version() -> str:
    from importlib.metadata import version

    return version("scienceworld")


@lru_cache(maxsize=1)
def load() -> dict:
    """The catalog (shared: treat as read-only)."""
    try:
        return json.loads(gzip.decompress(CATALOG_PATH.read_bytes()))
    except OSError as exc:
        raise UserError(f"the ScienceWorld catalog {CATALOG_PATH} cannot be read ({exc}); "
                        "rebuild it with `python -m environments.scienceworld.catalog build`") from None


@lru_cache(maxsize=1)
def entries() -> dict[str, dict]:
    """{task id: entry}."""
    return {e["id"]: e for e in load()["tasks"]}


def split_ids(split: str) -> list[str]:
    return sorted(i for i, e in entries().items() if e["split"] == split)


if __name__ == "__main__":
    if sys.argv[1:2] != ["build"]:
        print("usage: python -m environments.scienceworld.catalog build [TASK ...]", file=sys.stderr)
        raise SystemExit(2)
    d = build(tasks=sys.argv[2:] or None)
    print(f"{len(d['tasks'])} tasks, {len(d['notes'])} notes -> {CATALOG_PATH}")
