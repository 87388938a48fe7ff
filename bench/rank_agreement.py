"""Does the dev gold-call log-likelihood rank strategies like held-out test P, where dev P does not?

    .venv/bin/python bench/rank_agreement.py [--profile cpu-small] [--rows rho0-wild,agentrefine,...]
        [--run RUN ...] [--run-epochs] [--dev-tasks 60] [--test-tasks 120] [--seeds 1]
        [--dev-seeds S] [--test-seeds S] [--set FIELD=VALUE ...]
        [--out bench/results/rank-agreement-cpu-small.json]

The instrument issue's item 3. Every row (the hand-written strategies and calibration rows of
`bench quality`, and the final strategies of the given runs, with `--run-epochs` every other
candidate they ran) is trained once per seed and read twice:
`curateevo bench quality --split dev --gold` (dev P and gold LL, per task) and
`curateevo bench quality --split test --gold` (test P, per task) — the trainings are shared,
every cell is cached under runs/bench-quality/, so a stopped measurement continues where it
stopped. experiments/quality/rank.py then computes Spearman's ρ of each dev reading against test P
with a bootstrap interval over the tasks of both splits, and says whether gold LL ranks at
ρ ≥ 0.8 where dev P does not. Test tasks are read here only to score rows, never to choose one.

`--dev-seeds 1 --test-seeds 3` reads dev as the loop does (one training seed) against a test P
of three: the trainings of seed 0 are shared, the test reading's other seeds are its own.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from experiments.quality import rank  # noqa: E402

ROWS = "rho0-wild,agentrefine,oracle,rho0-labeled,augment,noisy,poisoned"


def reading(args, split: str, tasks: int, seeds: int) -> dict:
    out = Path(args.cache) / "rank-agreement" / f"{args.profile}-{split}"
    rows = args.rows + (",runs" if args.run else "")
    cmd = [sys.executable, "-m", "evolver.cli", "bench", "quality", "--gold", "--split", split, "--rows", rows,
           "--tasks", str(tasks), "--seeds", str(seeds), "--profile", args.profile, "--cache", str(args.cache),
           "--out", str(out), *(["--set", *args.budget] if args.budget else []),
           *(["--run", *map(str, args.run)] if args.run else []), *(["--run-epochs"] if args.run_epochs else []),
           *(["--base", args.base] if args.base else []), *(["--quiet"] if args.quiet else [])]
    done = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if done.returncode:
        raise SystemExit(f"bench quality --split {split} failed ({done.returncode}); its error is above")
    return json.loads((out / "quality.json").read_text())


def add_rows(ap: argparse.ArgumentParser, rows: str = ROWS) -> None:
    """The setting and the rows an agreement benchmark reads (bench/screen_agreement.py's too)."""
    ap.add_argument("--profile", default="cpu-small")
    ap.add_argument("--base", help="base model (default: the profile's)")
    ap.add_argument("--rows", default=rows, help=f"bench quality rows (default {rows})")
    ap.add_argument("--run", type=Path, nargs="+", help="finished runs: their final strategies are rows too")
    ap.add_argument("--run-epochs", action="store_true", help="and every other candidate those runs trained")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/rank_agreement.py", description=__doc__.splitlines()[0])
    add_rows(ap)
    ap.add_argument("--dev-tasks", type=int, default=60)
    ap.add_argument("--test-tasks", type=int, default=120)
    ap.add_argument("--seeds", type=int, default=1, help="training seeds per row (both readings share them)")
    ap.add_argument("--dev-seeds", type=int, help="the dev reading's seeds (default --seeds; the loop reads 1)")
    ap.add_argument("--test-seeds", type=int, help="the test reading's seeds (default --seeds)")
    ap.add_argument("--set", "--budget", dest="budget", nargs="+", default=[], metavar="FIELD=VALUE",
                    help="as bench quality --set (--budget: its old spelling)")
    ap.add_argument("--cache", type=Path, default=ROOT / "runs" / "bench-quality")
    ap.add_argument("--out", type=Path, help="default bench/results/rank-agreement-PROFILE.json (and .md)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    dev_seeds, test_seeds = args.dev_seeds or args.seeds, args.test_seeds or args.seeds
    dev = reading(args, "dev", args.dev_tasks, dev_seeds)
    test = reading(args, "test", args.test_tasks, test_seeds)
    out = rank.agreement(dev, test)
    out.update(profile=args.profile, seeds=args.seeds, dev_seeds=dev_seeds, test_seeds=test_seeds, budget=args.budget)
    path = args.out or ROOT / "bench" / "results" / f"rank-agreement-{args.profile}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    path.with_suffix(".md").write_text(rank.markdown(out))
    print(rank.markdown(out))
    print(f"results: {path}, {path.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
