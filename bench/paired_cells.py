"""Rows of different `bench quality` reports, paired over the tasks both scored.

    .venv/bin/python bench/paired_cells.py \
        --pair "hints on − off=OUT_ON/quality.json:run:X,OUT_OFF/quality.json:run:X" ... \
        --command "the bench quality commands" --what "..." --out bench/results/NAME.json

A setting that is part of the cache key (`--set sft_memory_hints=true`) makes its own report; this
pairs a row of one report with a row of another (per-task P of `--gold` reports, the same split
and seeds), by `experiments.quality.stats.paired_difference` — the quality table's own paired
bootstrap, over tasks (a report keeps each task's mean over its seeds) — and counts, per category
(the benchmark's own category rule), the tasks each solved and the tasks that changed.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from base.files import atomic_json  # noqa: E402
from bench.loop_identity import label  # noqa: E402
from experiments.quality.stats import paired_difference  # noqa: E402
from evolver.proposers.offline import categorizer  # noqa: E402


def row_of(spec: str) -> tuple[dict, dict]:
    """`REPORT.json:ROW_ID` → (the row, the report's setting)."""
    path, _, row_id = spec.partition(":")
    doc = json.loads(Path(path).read_text())
    row = next((r for r in doc["rows"] if r["id"] == row_id), None)
    if row is None or "per_task_P" not in row:
        raise SystemExit(f"{path}: no row {row_id!r} with per-task P (rows: {', '.join(r['id'] for r in doc['rows'])}; "
                         "the report needs --gold)")
    return row, doc["setting"]


def compare(name: str, a_spec: str, b_spec: str) -> dict:
    (a, sa), (b, sb) = row_of(a_spec), row_of(b_spec)
    if (sa["split"], sa["seeds"]) != (sb["split"], sb["seeds"]):
        raise SystemExit(f"{name}: the rows were scored on different splits or seeds ({sa['split']} {sa['seeds']} "
                         f"against {sb['split']} {sb['seeds']}); pair rows of the same setting")
    # a report keeps each task's mean over its seeds: the pairing is over tasks
    scores = lambda row: {t: [p] for t, p in row["per_task_P"].items()}   # noqa: E731
    tasks = sorted(a["per_task_P"].keys() & b["per_task_P"].keys())
    category = categorizer(sa.get("benchmark"))
    per_category: dict = {}
    for t in tasks:
        c = per_category.setdefault(category(t), {"a": 0.0, "b": 0.0, "tasks": 0, "changed": 0})
        c["a"] += a["per_task_P"][t]
        c["b"] += b["per_task_P"][t]
        c["tasks"] += 1
        c["changed"] += a["per_task_P"][t] != b["per_task_P"][t]
    return {"name": name, "a": a_spec, "b": b_spec, "a_label": a["label"], "b_label": b["label"],
            "a_P": a["P"]["value"], "b_P": b["P"]["value"],
            "difference": paired_difference(scores(a), scores(b)),
            "changed_tasks": sum(c["changed"] for c in per_category.values()),
            "per_category": {k: {**v, "a": round(v["a"], 3), "b": round(v["b"], 3)} for k, v in sorted(per_category.items())}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", action="append", required=True, metavar="NAME=A.json:ROW,B.json:ROW")
    ap.add_argument("--command", required=True, help="the bench quality commands that made the reports")
    ap.add_argument("--what", default="")
    ap.add_argument("--commit", default="", help="the code the cells ran (default: this checkout's commit)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    comparisons = []
    for pair in args.pair:
        name, sep, rest = pair.partition("=")
        a_spec, comma, b_spec = rest.partition(",")
        if not (sep and comma):
            raise SystemExit(f"--pair {pair}: expected NAME=A.json:ROW,B.json:ROW")
        comparisons.append(compare(name, a_spec, b_spec))
    atomic_json(args.out, {"date": datetime.date.today().isoformat(), "command": args.command,
                           "commit": args.commit or label(Path(__file__).resolve().parents[1]),
                           "what": args.what, "comparisons": comparisons})
    for c in comparisons:
        d = c["difference"]
        print(f"{c['name']}: {c['a_P']:.3f} − {c['b_P']:.3f} = {d['value']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] "
              f"({c['changed_tasks']} tasks changed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
