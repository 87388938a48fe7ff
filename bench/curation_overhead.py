"""Seed strategy wall time per 1,000 trajectories and per 1,000 retained turns, measured in one run:
a plain in-process call of the strategy beside the full host path through an executor
(corpus staging, sandboxed execution, host-side checking, profile, manifest).

    .venv/bin/python bench/curation_overhead.py [--copies 40] [--repeats 3] [--sandbox process docker] [--json F]

The corpus is the bundled sample corpus repeated `--copies` times under new ids.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from curation_strategies import toolkit  # noqa: E402
from sandbox import checker  # noqa: E402
from corpora import load_corpus, write_corpus  # noqa: E402
from sandbox.curate import execute, make_executor  # noqa: E402
from sandbox.runtime import Context, load_strategy  # noqa: E402
from sandbox.strategy_files import strategy_files  # noqa: E402

SEED = ROOT / "curation_strategies" / "seed"
SAMPLE = ROOT / "environments" / "data" / "sample_corpus.jsonl"


def scaled_corpus(copies: int, folder: Path) -> Path:
    base = load_corpus([str(SAMPLE)]).records
    records = [{**r, "id": f"{r['id']}#{k}"} for k in range(copies) for r in base]
    path = folder / "corpus.jsonl"
    write_corpus(records, path)
    return path


def in_process(corpus_path: Path) -> tuple[float, int]:
    """The obvious alternative: import the strategy and call it, then serialise its records."""
    raw = tuple(json.loads(line) for line in corpus_path.open(encoding="utf-8"))
    t0 = time.perf_counter()
    curated = load_strategy(SEED).curate(raw, Context({}, 0, toolkit))
    for kind in ("sft", "rl", "memory"):
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in getattr(curated, kind))
    wall = time.perf_counter() - t0
    turns = sum(checker.turn_cost("sft", r) for r in curated.sft) + sum(checker.turn_cost("rl", r) for r in curated.rl)
    return wall, turns


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sandbox", nargs="+", default=["process", "docker"])
    ap.add_argument("--json", type=Path, help="also write the table here, with the commit and the machine's load")
    args = ap.parse_args()
    load_before = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="curateevo-bench-"))
    try:
        corpus_path = scaled_corpus(args.copies, work)
        corpus = load_corpus([str(corpus_path)])
        files = strategy_files(SEED)
        executors = [make_executor(name) for name in args.sandbox]
        plain, turns = [], 0
        full = {e.name: [] for e in executors}
        sandboxed = {e.name: [] for e in executors}
        for i in range(args.repeats):  # interleaved, so machine load hits every path alike
            wall, turns = in_process(corpus_path)
            plain.append(wall)
            for executor in executors:
                t0 = time.perf_counter()
                result = execute(files, corpus, work / f"{executor.name}{i}", executor=executor)
                full[executor.name].append(time.perf_counter() - t0)
                sandboxed[executor.name].append(result.execution["seconds"]["execute"])
        n = len(corpus.records)
        rows = [("plain in-process call", statistics.median(plain))]
        for executor in executors:
            rows += [(f"{executor.name} executor (execution only)", statistics.median(sandboxed[executor.name])),
                     (f"{executor.name} executor + host checking (full curate)", statistics.median(full[executor.name]))]
        print(f"{n} trajectories, {turns} retained turns (Cost_train), median of {args.repeats}")
        print(f"{'path':<48} {'s/1k traj':>10} {'s/1k turns':>11} {'ratio':>7}")
        for name, wall in rows:
            print(f"{name:<48} {wall * 1000 / n:>10.3f} {wall * 1000 / turns:>11.4f} {wall / rows[0][1]:>6.1f}x")
        if args.json:
            commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                    text=True).stdout.strip()
            args.json.write_text(json.dumps({
                "command": " ".join(sys.argv), "commit": commit,
                "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "cores": os.cpu_count(), "load_average": {"before": round(load_before, 2),
                                                          "after": round(os.getloadavg()[0], 2)},
                "trajectories": n, "retained_turns": turns, "repeats": args.repeats,
                "rows": [{"path": name, "median_s": round(wall, 4), "s_per_1k_traj": round(wall * 1000 / n, 4),
                          "s_per_1k_turns": round(wall * 1000 / turns, 5), "ratio": round(wall / rows[0][1], 3)}
                         for name, wall in rows]}, indent=1) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
