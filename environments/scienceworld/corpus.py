"""The ScienceWorld raw corpora, built from the train split only.

    python -m environments.scienceworld.corpus build --setting labeled|wild --out D [--seed N] [--limit N]

writes `D/corpus.jsonl` (canonical raw records, sorted by id), `D/build.json` (what was built
from what, with the catalog's and the corpus's sha256) and, for `wild`, `D/noise_labels.json`
(the noise kind of every record; never in the records, whose ids are opaque). The same arguments
give byte-identical files. Only the catalog's train entries are read.

- labeled: the simulator's gold run of each train task (the catalog's recorded trace): the task
  as the user message, one `act` call per gold action with the simulator's real observation, and a
  closing reply. `outcome` = the official score (all 100).
- wild: the same tasks with seeded, realistic noise, every record's actions really run in the
  simulator and its `outcome` the simulator's own score of the record as written (honest, whatever
  the noise did): `invalid_action` (a garbled action answered "No known action matches that
  input.", then the right one), `redundant_look` (an extra "look around"), `off_task_chatter`
  (text beside some calls), `abandoned` (stops part-way), `wrong_focus` (a `focus on` the wrong
  object, which fails the task for good — ScienceWorld's classic fatal error), `clean`, and
  `exact_duplicate` copies. One record per task, a second for about 30% of tasks. On tasks where
  time matters (boiling: every action is a tick of the simulated world), an extra look or a
  garbled action can fail a run that would have completed; the outcome then says so.
"""
from __future__ import annotations

import argparse
import copy
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Mapping

from base.errors import UserError
from base.files import atomic_write, sha256_file
from environments.scienceworld import actions as act
from environments.scienceworld import catalog
from environments.scienceworld.benchmark import ENV_BENCHMARK, run_actions

SETTINGS = ("labeled", "wild")
CORPUS_FILE, LABELS_FILE, BUILD_FILE = "corpus.jsonl", "noise_labels.json", "build.json"
SOURCE = "scienceworld"
SECOND_RECORD = 0.3
EXACT_DUPLICATES = 0.04
WEIGHTS = {"clean": 3, "invalid_action": 2, "redundant_look": 2, "off_task_chatter": 1, "abandoned": 2,
           "wrong_focus": 2}
CHATTER = ("Let me think about what to do next.", "Okay, that worked.", "I should check my surroundings.",
           "Next step.")
GIVE_UP = "I am not sure how to finish this task."


def _rng(seed: int, *parts) -> random.Random:
    return random.Random(":".join(map(str, (seed, *parts))))


def _opaque(seed: int, key: str, taken: set[str]) -> str:
    rng = _rng(seed, "id", key)
    while True:
        rid = f"sciworld/{rng.getrandbits(32):08x}"
        if rid not in taken:
            taken.add(rid)
            return rid


def _garble(action: str) -> str:
    """A near miss of an action's verb that the simulator's parser cannot read (two letters swapped)."""
    verb, _, rest = action.partition(" ")
    if len(verb) < 3:
        verb = verb + "x"
    else:
        verb = verb[:-2] + verb[-1] + verb[-2] if verb[-1] != verb[-2] else verb + "x"
    return f"{verb} {rest}".strip()


def _other_object(entry: Mapping, target: str) -> str | None:
    """An object of the first observation that is not the focus target ('a substance called air')."""
    for line in entry["observation"].splitlines():
        line = line.strip().rstrip(".")
        for lead in ("a substance called ", "the ", "a ", "an "):
            if line.startswith(lead):
                name = line[len(lead):].split(" (")[0].split(".")[0].strip()
                if name and name != "agent" and name not in target and target not in name and len(name.split()) <= 3:
                    return name
    return None


def _plan(entry: Mapping, kind: str, rng: random.Random) -> tuple[list[str], dict, dict] | None:
    """(actions, chatter by step, label detail) of one noise kind, or None when it does not apply."""
    gold = list(entry["gold"])
    if kind == "clean":
        return gold, {}, {}
    if kind == "invalid_action":
        i = rng.randrange(len(gold))
        bad = _garble(gold[i])
        return gold[:i] + [bad] + gold[i:], {}, {"step": i, "action": bad}
    if kind == "redundant_look":
        i = rng.randrange(len(gold))   # before the last action: nothing is taken after the task is over
        return gold[:i] + ["look around"] + gold[i:], {}, {"step": i}
    if kind == "off_task_chatter":
        steps = sorted(rng.sample(range(len(gold)), min(len(gold), 2)))
        return gold, {s: rng.choice(CHATTER) for s in steps}, {"steps": steps}
    if kind == "abandoned":
        if len(gold) < 3:
            return None
        cut = rng.randrange(1, len(gold) - 1)
        return gold[:cut], {}, {"kept": cut}
    if kind == "wrong_focus":
        focus = [i for i, a in enumerate(gold) if a.startswith("focus on ")]
        if not focus:
            return None
        i = focus[0]
        other = _other_object(entry, gold[i][len("focus on "):])
        if other is None:
            return None
        return gold[:i] + [f"focus on {other}"] + gold[i + 1:], {}, {"step": i, "action": f"focus on {other}"}
    raise ValueError(kind)


def _record(rid: str, entry: Mapping, actions: list[str], observations: list[str], score: int, *,
            chatter: Mapping[int, str] | None = None, closing: str = act.CLOSING_REPLY) -> dict:
    user = act.user_text(entry["description"], entry["observation"])
    return {"id": rid, "source": SOURCE, "task": user, "tools": [act.ACT_TOOL],
            "messages": act.render(user, actions[:len(observations)], observations, closing=closing, chatter=chatter),
            "outcome": {"success": score >= 100, "reward": max(score, 0) / 100.0},
            "meta": {"env": {"benchmark": ENV_BENCHMARK, "task_id": entry["id"], "variant": entry["task"]}}}


def _train_entries(categories, limit: int | None, max_records: int | None) -> list[dict]:
    """The train entries a build reads: sorted by id; of `categories` (task types) only; with
    `max_records`, round robin over the task types (a small corpus covers them all)."""
    entries = [catalog.entries()[i] for i in catalog.split_ids("train")]
    if categories:
        unknown = sorted(set(categories) - {e["task"] for e in entries})
        if unknown:
            raise UserError(f"unknown ScienceWorld task type(s): {', '.join(unknown)}")
        entries = [e for e in entries if e["task"] in set(categories)]
    if max_records is not None:
        types = sorted({e["task"] for e in entries})
        rank = {tid: k for k, tid in enumerate(_round_robin([[e["id"] for e in entries if e["task"] == t] for t in types]))}
        entries = sorted(entries, key=lambda e: rank[e["id"]])
    return entries[:limit] if limit is not None else entries


def _round_robin(groups: list[list[str]]) -> list[str]:
    out = []
    for k in range(max((len(g) for g in groups), default=0)):
        out.extend(g[k] for g in groups if k < len(g))
    return out


def build(setting: str, seed: int = 0, *, limit: int | None = None, categories=None, max_records: int | None = None,
          progress: Callable[[str], None] | None = None) -> tuple[list[dict], dict, dict]:
    """(records sorted by id, noise labels by id ({} for labeled), build info). `max_records`: whole
    train tasks, round robin over task types, while their records fit in that many."""
    if setting not in SETTINGS:
        raise UserError(f"unknown setting {setting!r} (one of {', '.join(SETTINGS)})")
    entries = _train_entries(categories, limit, max_records)
    records: dict[str, dict] = {}
    labels: dict[str, dict] = {}
    taken: set[str] = set()
    for n, entry in enumerate(entries):
        if progress:
            progress(f"{n}/{len(entries)} train tasks")
        if max_records is not None and len(records) + (2 if setting == "wild" else 1) > max_records:
            break
        if setting == "labeled":
            rid = f"sciworld/{entry['id']}"
            records[rid] = _record(rid, entry, entry["gold"], [s["observation"] for s in entry["trace"]],
                                   entry["trace"][-1]["score"])
            continue
        pick = _rng(seed, "pick", entry["id"])
        for k in range(2 if pick.random() < SECOND_RECORD else 1):
            drawn = pick.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
            for kind in [drawn] + [x for x in WEIGHTS if x not in (drawn, "clean")] + ["clean"]:
                made = _plan(entry, kind, _rng(seed, kind, entry["id"], k))
                if made is not None:
                    break
            actions, chatter, detail = made
            score, _, observations = run_actions(entry, actions)
            rid = _opaque(seed, f"{entry['id']}:{k}", taken)
            closing = GIVE_UP if kind == "abandoned" else act.CLOSING_REPLY
            records[rid] = _record(rid, entry, actions, observations, score, chatter=chatter, closing=closing)
            labels[rid] = {"noise": kind, "task_id": entry["id"], **({"drawn": drawn} if kind != drawn else {}),
                           **detail}
    if setting == "wild" and records:
        rng = _rng(seed, "duplicates")
        n_dup = max(1, round(EXACT_DUPLICATES * len(records)))
        if max_records is not None:
            n_dup = min(n_dup, max(0, max_records - len(records)))
        for k, rid in enumerate(rng.sample(sorted(records), n_dup)):
            new = _opaque(seed, f"dup{k}", taken)
            records[new] = {**copy.deepcopy(records[rid]), "id": new}
            labels[new] = {"noise": "exact_duplicate", "task_id": labels[rid]["task_id"], "duplicate_of": rid,
                           "of_noise": labels[rid]["noise"]}
    out = [records[r] for r in sorted(records)]
    from base.schemas import check_raw

    for rec in out:
        error = check_raw(rec)
        if error:
            raise RuntimeError(f"{rec['id']}: {error}")
    info = {"benchmark": "scienceworld", "setting": setting, "seed": seed, "split": "train", "limit": limit,
            "categories": sorted(categories) if categories else None, "max_records": max_records,
            "records": len(out), "tasks": len({r["meta"]["env"]["task_id"] for r in out}),
            "success": sum(1 for r in out if r["outcome"]["success"]),
            "by_variant": dict(sorted(Counter(r["meta"]["env"]["variant"] for r in out).items())),
            "catalog_sha256": sha256_file(catalog.CATALOG_PATH), "scienceworld": catalog.load()["scienceworld"]}
    if labels:
        info["noise"] = dict(sorted(Counter(v["noise"] for v in labels.values()).items()))
    return out, {r: labels[r] for r in sorted(labels)}, info


def write(out: Path, setting: str, seed: int = 0, **options) -> dict:
    """Build and write the corpus into directory `out`; the build info (plus wall time, not written)."""
    from corpora.loader import write_corpus

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    records, labels, info = build(setting, seed, **options)
    write_corpus(records, out / CORPUS_FILE)
    info["corpus_sha256"] = sha256_file(out / CORPUS_FILE)
    if setting == "wild":
        atomic_write(out / LABELS_FILE, json.dumps({"benchmark": "scienceworld", "seed": seed, "counts": info["noise"],
                                                    "labels": labels}, sort_keys=True, ensure_ascii=False, indent=1) + "\n")
    else:
        (out / LABELS_FILE).unlink(missing_ok=True)
    atomic_write(out / BUILD_FILE, json.dumps(info, sort_keys=True, ensure_ascii=False, indent=1) + "\n")
    return {**info, "seconds": round(time.perf_counter() - started, 2), "bytes": (out / CORPUS_FILE).stat().st_size}


def cached(root: Path, setting: str = "wild", seed: int = 0, max_records: int | None = None) -> Path:
    """The folder of a ScienceWorld corpus under `root`, built on first use."""
    folder = Path(root) / (f"scienceworld-{setting}-seed{seed}" + (f"-max{max_records}" if max_records else ""))
    if not (folder / CORPUS_FILE).is_file():
        write(folder, setting, seed, max_records=max_records)
    return folder


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m environments.scienceworld.corpus")
    p.add_argument("command", choices=["build"])
    p.add_argument("--setting", required=True, choices=SETTINGS)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit", type=int)
    args = p.parse_args(argv)
    try:
        info = write(args.out, args.setting, args.seed, limit=args.limit,
                     progress=lambda s: print(f"  {s}", file=sys.stderr, flush=True))
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{info['records']} records from {info['tasks']} train tasks, {info['success']} successful, "
          f"in {info['seconds']:.1f} s; sha256 {info['corpus_sha256']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
