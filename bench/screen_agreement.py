"""Does the screen rank candidates as the full recipe's dev P does? (issue 60, item 1)

    .venv/bin/python bench/screen_agreement.py [--profile cpu-small] [--rows ROWS] [--run RUN ...]
        [--run-epochs] [--units 1,4,14] [--dev-tasks 186] [--seeds 1] [--resamples 2000]
        [--set FIELD=VALUE ...] [--cache runs/bench-quality] [--out bench/results/screen-agreement-PROFILE.json]

The screen (evolver/screen.py) ranks an epoch's k candidates by the loop's proxy: a short SFT
(10 steps a unit, no RL) and a balanced dev subset (10 tasks a unit), successive halving over the
units. Here every candidate — the quality benchmark's rows, the final strategies of the `--run`
runs and, with `--run-epochs`, every other candidate they evaluated — is read by one
`curateevo bench quality --split dev --proxy UNITS` (the full recipe on the dev tasks the loop
reads, and the proxy at each of UNITS). Every cell is cached under `--cache`, so a stopped
measurement continues where it stopped: run the same command again. Reported per units: Spearman's ρ
of the proxy's P and J against the full recipe's, with a bootstrap interval over the candidates
(resampled with replacement); and the candidate successive halving over UNITS would pick, with its
full-recipe rank. At 14 units the proxy trains as long as `cpu-small`'s recipe (140 SFT steps) on
140 dev tasks: the curve over UNITS says how much fidelity the ranking needs. The issue's bar is
ρ ≥ 0.8 over at least 8 candidates; fewer are reported with a warning.

The measurement at the default (hours on a 2-core machine):
    .venv/bin/python bench/screen_agreement.py --run runs/evo4-dev186 runs/default-quiet --run-epochs
        --rows rho0-wild,agentrefine,oracle,rho0-labeled,augment,noisy,poisoned --units 1,4,14
A smoke reading (minutes): --profile test --base tiny-random --dev-tasks 5 --units 1,2 --sandbox process
"""
from __future__ import annotations

import argparse
import json
import math
import random
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from experiments.quality.rank import RANKS_WELL, spearman  # noqa: E402
from rank_agreement import add_rows  # noqa: E402  (bench/, beside this script)
MIN_CANDIDATES = 8
"""The issue's floor: fewer candidates give an interval too wide to read."""


def reading(args) -> dict:
    """`bench quality --split dev --proxy UNITS` over the candidates: its quality.json."""
    out = Path(args.cache) / "screen-agreement" / f"{args.profile}-dev"
    rows = args.rows + (",runs" if args.run else "")
    cmd = [sys.executable, "-m", "evolver.cli", "bench", "quality", "--split", "dev", "--rows", rows,
           "--tasks", str(args.dev_tasks), "--seeds", str(args.seeds), "--profile", args.profile,
           "--proxy", args.units, "--cache", str(args.cache), "--out", str(out), "--sandbox", args.sandbox,
           *(["--set", *args.budget] if args.budget else []),
           *(["--run", *map(str, args.run)] if args.run else []), *(["--run-epochs"] if args.run_epochs else []),
           *(["--wild", str(args.wild)] if args.wild else []), *(["--labeled", str(args.labeled)] if args.labeled else []),
           *(["--base", args.base] if args.base else []), *(["--quiet"] if args.quiet else [])]
    done = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if done.returncode:
        raise SystemExit(f"bench quality --split dev --proxy {args.units} failed ({done.returncode}); its error is above")
    return json.loads((out / "quality.json").read_text())


def interval(proxy: dict[str, float], full: dict[str, float], resamples: int, seed: int,
             confidence: float = 0.95) -> dict:
    """Spearman's ρ of `proxy` against `full` over their candidates, with a percentile bootstrap
    interval over the candidates (drawn with replacement; a draw with a constant side is skipped)."""
    ids = sorted(set(proxy) & set(full))
    rho = spearman([proxy[i] for i in ids], [full[i] for i in ids])
    rng, draws = random.Random(seed), []
    for _ in range(resamples if rho is not None else 0):
        pick = rng.choices(ids, k=len(ids))
        r = spearman([proxy[i] for i in pick], [full[i] for i in pick])
        if r is not None:
            draws.append(r)
    draws.sort()
    alpha = (1 - confidence) / 2
    low, high = (draws[int(alpha * len(draws))], draws[min(len(draws) - 1, int((1 - alpha) * len(draws)))]) \
        if draws else (None, None)
    return {"n": len(ids), "spearman": None if rho is None else round(rho, 4),
            "low": None if low is None else round(low, 4), "high": None if high is None else round(high, 4),
            "draws": len(draws), "confidence": confidence}


def halving(rows: dict, units: list[str]) -> dict:
    """The candidate successive halving over `units` (ascending) would keep, by proxy J, ties by id;
    its full-recipe rank by J (1 is the best) and what it gives up against the best (full J)."""
    alive = sorted(rows)
    for n, u in enumerate(units):
        if len(alive) == 1:
            break
        keep = 1 if n == len(units) - 1 else max(1, math.ceil(len(alive) / 2))
        alive = sorted(alive, key=lambda i: (-rows[i]["proxy"][u]["J"], i))[:keep]
    by_full = sorted(rows, key=lambda i: (-rows[i]["full"]["J"], i))
    pick = alive[0]
    return {"picked": pick, "full_rank": by_full.index(pick) + 1, "full_best": by_full[0],
            "regret_J": round(rows[by_full[0]]["full"]["J"] - rows[pick]["full"]["J"], 6)}


def agreement(doc: dict, resamples: int = 2000, seed: int = 0) -> dict:
    """From `bench quality --proxy`'s proxy section: per units and metric, ρ with its interval; the halving's pick."""
    rows = {rid: r for rid, r in doc["rows"].items()
            if all(r["proxy"][u]["P"] is not None for u in r["proxy"])}
    units = sorted({u for r in rows.values() for u in r["proxy"]}, key=int)
    out = {"definition": doc["definition"], "candidates": sorted(rows), "units": units, "per_units": {},
           "per_candidate": {rid: {"full": r["full"], "proxy": {u: {k: r["proxy"][u][k] for k in ("P", "J")} for u in units}}
                             for rid, r in rows.items()}}
    for u in units:
        out["per_units"][u] = {metric: interval({i: r["proxy"][u][metric] for i, r in rows.items()},
                                                {i: r["full"][metric] for i, r in rows.items()}, resamples, seed)
                               for metric in ("P", "J")}
    out["halving"] = halving(rows, units) if rows else None
    best = max(units, key=lambda u: out["per_units"][u]["P"]["spearman"] or -2) if units else None
    rho = out["per_units"][best]["P"]["spearman"] if best else None
    out["verdict"] = (f"only {len(rows)} candidates: at least {MIN_CANDIDATES} are needed to read the interval; " if
                      len(rows) < MIN_CANDIDATES else "") + (
        "no proxy ranks (a constant score)" if rho is None else
        f"the proxy ranks like full dev P at {best} unit(s) (ρ {rho:+.2f} ≥ {RANKS_WELL})" if rho >= RANKS_WELL else
        f"no proxy reaches ρ {RANKS_WELL}: the best is {best} unit(s) at ρ {rho:+.2f}; spend the minutes on full evaluations")
    return out


def markdown(out: dict) -> str:
    lines = [f"**Screen vs full dev P** ({out['definition']}; {len(out['candidates'])} candidates: "
             f"{', '.join(out['candidates'])})", "", "| units | ρ proxy P vs full P [95% CI] | ρ proxy J vs full J [95% CI] |",
             "|---|---|---|"]

    def fmt(a: dict) -> str:
        return "n/a" if a["spearman"] is None else f"{a['spearman']:+.2f} [{a['low']:+.2f}, {a['high']:+.2f}]"

    for u, m in out["per_units"].items():
        lines.append(f"| {u} | {fmt(m['P'])} | {fmt(m['J'])} |")
    h = out["halving"]
    if h:
        lines += ["", f"Successive halving over units {', '.join(out['units'])} picks {h['picked']} (full-recipe rank "
                      f"{h['full_rank']} by J; the best is {h['full_best']}, {h['regret_J']:.4f} of J given up)."]
    return "\n".join(lines + ["", out["verdict"], ""])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/screen_agreement.py", description=__doc__.splitlines()[0])
    add_rows(ap)
    ap.add_argument("--units", default="1,4,14", help="the proxy's units, ascending (default 1,4,14)")
    ap.add_argument("--dev-tasks", type=int, default=186, help="the full reading's dev tasks (default 186, the loop's)")
    ap.add_argument("--seeds", type=int, default=1, help="training seeds of the full reading (default 1, the loop's)")
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--set", "--budget", dest="budget", nargs="+", default=[], metavar="FIELD=VALUE",
                    help="as bench quality --set")
    ap.add_argument("--sandbox", default="auto")
    ap.add_argument("--wild", type=Path, help="as bench quality --wild")
    ap.add_argument("--labeled", type=Path, help="as bench quality --labeled")
    ap.add_argument("--cache", type=Path, default=ROOT / "runs" / "bench-quality")
    ap.add_argument("--out", type=Path, help="default bench/results/screen-agreement-PROFILE.json (and .md)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    out = agreement(reading(args)["proxy"], args.resamples)
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    out.update(date=datetime.now(timezone.utc).strftime("%Y-%m-%d"), command=" ".join(["bench/screen_agreement.py", *sys.argv[1:]]),
               commit=commit.stdout.strip() or None, profile=args.profile, base=args.base, dev_tasks=args.dev_tasks,
               seeds=args.seeds, budget=args.budget)
    path = args.out or ROOT / "bench" / "results" / f"screen-agreement-{args.profile}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    path.with_suffix(".md").write_text(markdown(out))
    print(markdown(out))
    print(f"results: {path}, {path.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
