"""Train / dev / test splits of the BFCL-V4 benchmarks, shipped as environments/data/splits.json.

    python -m environments.bfcl.splits            # rewrite environments/data/splits.json
    python -m environments.bfcl.splits --check    # exit 1 if the shipped file is not what this makes

Multi-turn ("bfcl"): the unit is the base scenario number 0..199, shared by `multi_turn_base`,
`miss_func`, `miss_param` and `long_context` (the variants of one scenario are aligned by the
trailing number), so every variant of a scenario lands in the same split. Scenarios that share an
`initial_config` or a first user message are grouped and kept in one split (found here by
comparing them; shared/FIELD-NOTES.md lists 40/43, 63/83, 66/70/74, 100/104/133 and the check
below asserts that the groups found are exactly those). Groups are stratified by backend-class
combination (`involved_classes`; a group that spans two combinations counts under its lowest
number's): within a stratum the groups are shuffled with a fixed seed and handed out in turn to
the split that is furthest below its share (70/15/15), strata one after another in sorted
order, so every split gets its share of every combination it can.

The sample corpus (environments/data/sample_corpus.jsonl, built from scenarios 150..199, which are
all TravelAPI scenarios) cannot lie wholly in train: stratification must give dev and test their
TravelAPI scenarios too, and only 12 of the 50 travel scenarios are outside the sample. Within a
stratum the scenarios that are not in the sample are therefore handed to dev/test first (still in
seeded order), which keeps the overlap to what is unavoidable; the sample-corpus scenarios that
still land in dev or test are listed in splits.json under `bfcl.sample_corpus_in_dev_test` and
printed by this generator. With the shipped seed they are 157 and 168 (dev) and 175 and 184
(test): 157 because its stratum (MathAPI+TravelAPI) has only 157 and 161, both in the sample;
168, 175 and 184 because their strata have fewer scenarios outside the sample than dev/test slots. A run that evaluates on dev should not train on the sample corpus's
records of those scenarios (DESIGN's leakage guard rejects artifacts that contain a dev or test
task's gold call sequence verbatim).

Single-turn ("bfcl-single"): per category, ids shuffled with a fixed seed and cut 70/15/15
(`simple_python`, `multiple`, `parallel`, `parallel_multiple`, `irrelevance`); the `live_*`
categories are a harder held-out set, cut 0/50/50 (no train). The four live entries whose ground
truth no answer can satisfy are excluded and named under `bfcl-single.excluded`.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from collections import defaultdict
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Iterable

from base.benchmark import SPLITS
from environments.bfcl.single_turn_data import LIVE_CATEGORIES, SINGLE_TURN_CATEGORIES, load_category
from base.errors import UserError
from base.files import atomic_write, sha256_file

SPLITS_PATH = Path(__file__).resolve().parent.parent / "data" / "splits.json"
SEED = 20260323  # the bfcl-eval release the splits were cut from
MULTI_TURN_SHARES = {"train": 0.70, "dev": 0.15, "test": 0.15}
SINGLE_TURN_SHARES = {"train": 0.70, "dev": 0.15, "test": 0.15}
HELD_OUT_SHARES = {"train": 0.0, "dev": 0.5, "test": 0.5}
N_SCENARIOS = 200
# Scenarios sharing configs or first messages (shared/FIELD-NOTES.md); the generator re-derives
# them from the data and refuses to write splits if they differ.
KNOWN_GROUPS = ((40, 43), (63, 83), (66, 70, 74), (100, 104, 133))
# The sample corpus's scenarios when the splits were cut (the generator hands dev/test slots to
# other scenarios first). Frozen: the sample has since dropped 157, 168, 175 and 184, which landed
# in dev/test, and taken 176; the shipped splits stay as they were cut.
SPLIT_ORDER_TASKS: tuple[int, ...] = (
    157, 161, 154, 166, 168, 169, 171, 184, 197, 199, 152, 156, 160, 162, 165, 173, 177, 181, 190,
    150, 153, 155, 158, 159, 163, 164, 179, 191, 151, 170, 174, 175, 183, 186, 189, 195,
)

# Ground-truth entries no answer satisfies (shared/FIELD-NOTES.md): never offered as tasks.
UNSATISFIABLE = ("live_simple_106-63-0", "live_simple_112-68-0", "live_multiple_862-181-3",
                 "live_multiple_964-207-0")


# --------------------------------------------------------------------------------------------
# generation


def _apportion(sizes: list[int], shares: dict[str, float]) -> list[str]:
    """The split of each unit (of the given sizes), handed out in order, each to the split
    furthest below its share of the elements handed out so far (ties: train, dev, test)."""
    labels: list[str] = []
    got = {s: 0 for s in SPLITS}
    total = 0
    for size in sizes:
        total += size
        split = max((s for s in SPLITS if shares[s] > 0),
                    key=lambda s: (shares[s] * total - got[s], -SPLITS.index(s)))
        labels.append(split)
        got[split] += size
    return labels


def multi_turn_groups(entries: dict[str, dict]) -> list[list[int]]:
    """Scenario numbers that share an initial_config or a first user message, as sorted groups
    (singletons included), ordered by their first number."""
    parent = list(range(N_SCENARIOS))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    seen: dict[str, int] = {}
    for task_id, entry in entries.items():
        n = int(task_id.rsplit("_", 1)[1])
        for key in ("config:" + json.dumps(entry["initial_config"], sort_keys=True),
                    "first:" + json.dumps(entry["question"][0], sort_keys=True)):
            if key in seen:
                parent[find(n)] = find(seen[key])
            else:
                seen[key] = n
    groups: dict[int, list[int]] = defaultdict(list)
    for n in range(N_SCENARIOS):
        groups[find(n)].append(n)
    return sorted((sorted(g) for g in groups.values()), key=lambda g: g[0])


def build_multi_turn(seed: int = SEED, sample_tasks: Iterable[int] = ()) -> dict:
    from environments.bfcl.backends import load_tasks, task_number

    entries = load_tasks("multi_turn_base")
    if len(entries) != N_SCENARIOS:
        raise RuntimeError(f"expected {N_SCENARIOS} multi_turn_base scenarios, found {len(entries)}")
    groups = multi_turn_groups(entries)
    shared = sorted(tuple(g) for g in groups if len(g) > 1)
    if shared != sorted(KNOWN_GROUPS):
        raise RuntimeError(f"config-sharing groups changed: found {shared}, expected {sorted(KNOWN_GROUPS)}")
    combo = {task_number(tid): "+".join(sorted(e["involved_classes"])) for tid, e in entries.items()}
    sample = set(sample_tasks)
    strata: dict[str, list[list[int]]] = defaultdict(list)
    for g in groups:
        strata[combo[g[0]]].append(g)
    units: list[tuple[str, list[int]]] = []
    for name in sorted(strata):
        members = list(strata[name])
        random.Random(f"{seed}:bfcl:{name}").shuffle(members)
        units.extend((name, g) for g in members)
    labels = _apportion([len(g) for _, g in units], MULTI_TURN_SHARES)
    # Within each stratum the dev/test slots go first to the groups outside the sample corpus
    # (each kind keeps its seeded order); the train slots take the rest.
    split: dict[str, list[list[int]]] = {s: [] for s in SPLITS}
    for name in sorted(strata):
        slots = [labels[i] for i, (n, _) in enumerate(units) if n == name]
        members = [g for n, g in units if n == name]
        outside = [g for g in members if not sample.intersection(g)]
        inside = [g for g in members if sample.intersection(g)]
        held = [s for s in slots if s != "train"]
        ordered = outside + inside
        for s, g in zip(held, ordered):
            split[s].append(g)
        split["train"].extend(ordered[len(held):])
    out = {s: sorted(n for g in split[s] for n in g) for s in SPLITS}
    by_combo: dict[str, dict[str, int]] = {}
    for name in sorted(strata):
        by_combo[name] = {s: sum(1 for n in out[s] if combo[n] == name) for s in SPLITS}
    return {
        **out,
        "groups": [list(g) for g in shared],
        "strata": by_combo,
        "sample_corpus_in_dev_test": {s: sorted(sample.intersection(out[s])) for s in ("dev", "test")},
    }


def build_single_turn(seed: int = SEED) -> dict:
    cats: dict[str, dict[str, list[str]]] = {}
    for category in SINGLE_TURN_CATEGORIES + LIVE_CATEGORIES:
        ids = sorted((e["id"] for e in load_category(category) if e["id"] not in UNSATISFIABLE), key=id_key)
        rng = random.Random(f"{seed}:bfcl-single:{category}")
        rng.shuffle(ids)
        shares = HELD_OUT_SHARES if category in LIVE_CATEGORIES else SINGLE_TURN_SHARES
        n_train = round(shares["train"] * len(ids))
        n_dev = round(shares["dev"] * len(ids))
        parts = {"train": ids[:n_train], "dev": ids[n_train:n_train + n_dev], "test": ids[n_train + n_dev:]}
        cats[category] = {s: sorted(v, key=id_key) for s, v in parts.items()}
    return {"categories": cats, "held_out_categories": list(LIVE_CATEGORIES), "excluded": list(UNSATISFIABLE)}


def build(seed: int = SEED) -> dict:
    return {
        "generator": "python -m environments.bfcl.splits",
        "seed": seed,
        "shares": {"bfcl": MULTI_TURN_SHARES, "bfcl-single": SINGLE_TURN_SHARES,
                   "bfcl-single live_*": HELD_OUT_SHARES},
        "bfcl": build_multi_turn(seed, SPLIT_ORDER_TASKS),
        "bfcl-single": build_single_turn(seed),
    }


def render(doc: dict) -> str:
    """Compact enough to read: one line per id list."""
    def dump(value, indent: int) -> str:
        pad = " " * indent
        if isinstance(value, dict) and value and not all(isinstance(v, (int, float, str)) for v in value.values()):
            inner = ",\n".join(f'{pad} {json.dumps(k)}: {dump(v, indent + 1)}' for k, v in value.items())
            return "{\n" + inner + "\n" + pad + "}"
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    return dump(doc, 0) + "\n"


# --------------------------------------------------------------------------------------------
# reading


def id_key(task_id: str) -> tuple:
    """Natural order of BFCL ids: `simple_python_2` before `simple_python_10`,
    `live_simple_9-3-0` before `live_simple_10-4-0`."""
    head, _, tail = task_id.rpartition("_")
    return (head, tuple(int(p) if p.isdigit() else p for p in tail.split("-")))


@lru_cache(maxsize=None)
def load(path: str | None = None) -> dict:
    p = Path(path) if path else SPLITS_PATH
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{p}: splits file missing (python -m environments.bfcl.splits writes it)") from None


def bfcl_eval_version() -> str:
    try:
        return version("bfcl-eval")
    except PackageNotFoundError:
        return "unknown"


def describe(path: str | None = None) -> dict:
    """The splits file a benchmark reads: its path, sha256, seed, and the bfcl-eval version."""
    p = Path(path) if path else SPLITS_PATH
    return {"path": str(p), "sha256": sha256_file(p), "seed": load(path)["seed"], "bfcl_eval": bfcl_eval_version()}


def multi_turn_split(split: str, path: str | None = None) -> list[int]:
    """The base scenario numbers of `split` (sorted)."""
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r} (expected one of {', '.join(SPLITS)})")
    return list(load(path)["bfcl"][split])


TUNE_PER_CATEGORY = 24
"""Tasks per trained category in the tuning slice: 120 over the five, ~14% of the train split."""


def tuning_slice(category: str, path: str | None = None) -> list[str]:
    """The tuning slice of `category` (natural order): its last `TUNE_PER_CATEGORY` train tasks in
    the order the default corpus draws whole tasks (seed 0, environments/bfcl/corpus_size.py), so a
    default corpus sized to a CPU profile's budget never reaches them (the cpu-small corpus takes
    its first ~40 per category; tests/test_tuning_slice.py checks it has none). Categories without
    train tasks (live_*) have none. The train split itself is unchanged: a corpus of the whole
    train split (the `paper` profile's) contains the slice, and `paper` tunes nothing."""
    from environments.bfcl.corpus_size import draw_key

    train = single_turn_split(category, "train", path)
    tail = sorted(train, key=lambda tid: draw_key(0, tid))[-TUNE_PER_CATEGORY:] if len(train) > 2 * TUNE_PER_CATEGORY else []
    return [tid for tid in train if tid in set(tail)]


def single_turn_split(category: str, split: str, path: str | None = None) -> list[str]:
    """The ids of `category` in `split` (natural order); split "tune": `tuning_slice`."""
    from base.benchmark import TUNE

    if split == TUNE:
        return tuning_slice(category, path)
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r} (expected one of {', '.join(SPLITS)})")
    cats = load(path)["bfcl-single"]["categories"]
    if category not in cats:
        raise UserError(f"unknown bfcl-single category {category!r} (known: {', '.join(cats)})")
    return list(cats[category][split])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m environments.bfcl.splits", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=SPLITS_PATH)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    args = parser.parse_args(argv)
    doc = build(args.seed)
    text = render(doc)
    mt = doc["bfcl"]
    print("bfcl scenarios: " + ", ".join(f"{s} {len(mt[s])}" for s in SPLITS), file=sys.stderr)
    overlap = mt["sample_corpus_in_dev_test"]
    print(f"sample-corpus scenarios in dev: {overlap['dev']}, in test: {overlap['test']}", file=sys.stderr)
    st = doc["bfcl-single"]["categories"]
    print("bfcl-single: " + "; ".join(f"{c} " + "/".join(str(len(v[s])) for s in SPLITS) for c, v in st.items()),
          file=sys.stderr)
    if args.check:
        same = args.out.is_file() and args.out.read_text(encoding="utf-8") == text
        print(f"{args.out}: {'up to date' if same else 'DIFFERS'}", file=sys.stderr)
        return 0 if same else 1
    atomic_write(args.out, text)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
