"""The GRPO budget of a CPU profile, chosen on the tuning slice by a criterion written first.

    .venv/bin/python bench/grpo_budget.py [--profile cpu-small] [--candidates 1x1x4x96,8x2x4x96,16x2x4x64]
                                          [--seeds 1] [--epoch-s 930] [--grpo-s 45]
                                          [--out bench/results/grpo-budget-cpu-small.json]

A candidate is STEPSxPROMPTSxGENERATIONSxLENGTH[@LR] (`grpo_max_steps`, `grpo_prompts_per_step`,
`num_generations`, `max_completion_length`; `grpo_micro_batch` = prompts × generations, one
pass; LR the profile's `grpo_learning_rate`, else the recipe's 5e-6, the paper's). For each, `curateevo bench quality --split tune --rows rho0-wild --ablate rho0-wild:no-rl
--gold --set …` trains ρ0 on the default wild corpus at the profile with that budget — full and
without its RL data (the SFT-only training is the same for every candidate) — and scores both on
bfcl-single's tuning slice (120 train tasks that neither the default corpus, dev nor test holds;
environments/bfcl/splits.py `tuning_slice`). Cells are cached under runs/bench-quality/, so a
stopped run continues where it stopped; after each candidate the table is rewritten to `--out`
and its `.md` sibling. Dev and test tasks are never read here.

The choice criterion (trainer/README.md repeats it; fixed before any candidate ran):

1. **Within the epoch**: the candidate's GRPO wall time (its trainings' `grpo.wall_s`, the median
   over seeds) must keep the default epoch ≤ 20 minutes: `--epoch-s` (today's quiet epoch, 930 s)
   − `--grpo-s` (today's GRPO, 45 s) + the candidate's ≤ 1,200 s. The time is read on the machine
   the sweep runs on; under load it overstates, so a candidate that fails only under a measured
   load is rerun quiet before it is dropped.
2. **Groups that teach**: of the feasible candidates, those whose GRPO groups had zero reward
   variance in at most half the cases (`zero_variance_share` ≤ 0.5, over seeds).
3. **RL that pays**: among those, the largest full − w/o RL difference in P on the slice (paired
   over tasks and seeds); it is chosen only when that difference's 95% interval lies above zero.
   If none does, today's budget stays (1 step × 1 prompt × G 4 × 96 tokens) and the table says RL
   does not pay at this base and budget.
4. Between candidates whose differences lie within each other's intervals: the larger full − w/o
   RL gold-call log-likelihood difference, then the cheaper (GRPO wall time).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = "1x1x4x96"
LIMIT_S = 1200


def parse(candidate: str) -> dict:
    """STEPSxPROMPTSxGENERATIONSxLENGTH[@LR] as profile fields (LR: the GRPO learning rate, else the recipe's)."""
    shape, _, rate = candidate.lower().partition("@")
    try:
        steps, prompts, generations, length = (int(v) for v in shape.split("x"))
        lr = {"grpo_learning_rate": float(rate)} if rate else {}
    except ValueError:
        raise SystemExit(f"candidate {candidate!r}: expected STEPSxPROMPTSxGENERATIONSxLENGTH[@LR], e.g. 8x2x4x96 "
                         "or 8x1x4x96@4e-5") from None
    return {"grpo_max_steps": steps, "grpo_prompts_per_step": prompts, "num_generations": generations,
            "max_completion_length": length, "grpo_micro_batch": prompts * generations, **lr}


def run_candidate(profile: str, candidate: str, seeds: int, cache: Path) -> dict:
    """One candidate's Table 2 for ρ0 on the slice (cached cells are reused): its quality document."""
    out = cache / "grpo-budget" / f"{profile}-{candidate}"
    cmd = [sys.executable, "-m", "evolver.cli", "bench", "quality", "--split", "tune", "--rows", "rho0-wild",
           "--ablate", "rho0-wild:no-rl", "--seeds", str(seeds), "--profile", profile, "--cache", str(cache), "--gold",
           "--out", str(out), "--quiet", "--set", *[f"{k}={v}" for k, v in parse(candidate).items()]]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{candidate}: bench quality failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return json.loads((out / "quality.json").read_text())


def grpo_summaries(cache: Path, profile: str, candidate: str) -> list[dict]:
    """The GRPO summaries of the candidate's full trainings in the cache (one per seed): the trainings
    whose request names this profile with this budget, an SFT file and an RL file (not w/o SFT's)."""
    budget, out, seen = {"grpo_learning_rate": None, **parse(candidate)}, [], set()   # no @LR: the recipe's rate
    for cell in sorted((cache / "cells").glob("*/cell.json")):
        adapter = json.loads(cell.read_text()).get("adapter")
        folder = Path(adapter).parent if adapter else None
        if folder is None or folder in seen or not (folder / "request.json").is_file():
            continue
        seen.add(folder)
        request = json.loads((folder / "request.json").read_text())
        prof = request.get("profile") or {}
        if request.get("rl") and request.get("sft") and prof.get("name") == profile and all(prof.get(k) == v for k, v in budget.items()):
            out.append(json.loads((folder / "summary.json").read_text()).get("grpo") or {})
    return [g for g in out if g]


def summarize(candidate: str, doc: dict, grpo: list[dict], epoch_s: float, grpo_s: float) -> dict:
    rows = {r["id"]: r for r in doc["rows"] if not r.get("pending")}
    full, no_rl = rows.get("rho0-wild"), rows.get("rho0-wild no-rl")
    entry = {"candidate": candidate, **parse(candidate), "tasks": doc["tasks"]}
    if full:
        entry["P"] = full["P"]
    if no_rl and "vs_rho0_wild" in no_rl:   # (w/o RL) − full: the sign turned
        d = no_rl["vs_rho0_wild"]
        entry["full_minus_no_rl"] = {"value": -d["value"], "low": -d["high"], "high": -d["low"]}
        if no_rl.get("gold_vs_rho0_wild"):   # the gold call's log-likelihood per token, paired the same way
            g = no_rl["gold_vs_rho0_wild"]
            entry["gold_full_minus_no_rl"] = {"value": -g["value"], "low": -g["high"], "high": -g["low"]}
    if full and no_rl and full.get("per_task_P") and no_rl.get("per_task_P"):   # tasks whose score RL changed
        entry["tasks_changed"] = sum(full["per_task_P"][t] != no_rl["per_task_P"].get(t) for t in full["per_task_P"])
    if grpo:
        groups = sum(g["groups"] for g in grpo)
        entry["zero_variance_share"] = round(sum(g["zero_variance_groups"] for g in grpo) / groups, 4) if groups else None
        entry["grpo_wall_s"] = statistics.median(g["wall_s"] for g in grpo)
        entry["epoch_s_projected"] = round(epoch_s - grpo_s + entry["grpo_wall_s"], 1)
    return entry


def choose(entries: list[dict]) -> tuple[str, str]:
    """(the chosen candidate, why) by the criterion above."""
    feasible = [e for e in entries if e.get("epoch_s_projected") is not None and e["epoch_s_projected"] <= LIMIT_S]
    teaching = [e for e in feasible if (e.get("zero_variance_share") if e.get("zero_variance_share") is not None else 1) <= 0.5]
    paying = [e for e in teaching if (e.get("full_minus_no_rl") or {}).get("low", 0) > 0]
    if not paying:
        return DEFAULT, (f"{len(feasible)} feasible, {len(teaching)} with groups that teach, none with full − w/o RL "
                         "above zero beyond its interval: today's budget stays")
    best = max(paying, key=lambda e: e["full_minus_no_rl"]["value"])
    close = [e for e in paying if e["full_minus_no_rl"]["high"] >= best["full_minus_no_rl"]["low"]]
    close.sort(key=lambda e: (-(e.get("gold_full_minus_no_rl") or {}).get("value", float("-inf")), e["grpo_wall_s"]))
    return close[0]["candidate"], f"largest resolved full − w/o RL among {len(paying)}; ties by gold LL, then time"


def markdown(entries: list[dict], chosen: tuple[str, str]) -> str:
    def f(d: dict | None, digits: int = 3) -> str:   # + 0.0: a zero reads +0.000, not -0.000
        return "–" if not d else "{:+.{n}f} [{:+.{n}f}, {:+.{n}f}]".format(d["value"] + 0.0, d["low"] + 0.0,
                                                                         d["high"] + 0.0, n=digits)
    lines = ["| steps × prompts × G × length [@ GRPO lr] | P full | full − w/o RL | tasks changed | gold LL full − w/o RL | "
             "zero-variance share | GRPO wall s | projected epoch s |", "|---|---|---|---|---|---|---|---|"]
    for e in entries:
        p = "–" if not e.get("P") else f"{e['P']['value']:.3f}"
        lines.append(f"| {e['candidate']} | {p} | "
                     f"{f(e.get('full_minus_no_rl'))} | {e.get('tasks_changed', '–')} | {f(e.get('gold_full_minus_no_rl'), 4)} | "
                     f"{e.get('zero_variance_share', '–')} | {e.get('grpo_wall_s', '–')} | {e.get('epoch_s_projected', '–')} |")
    return "\n".join(lines) + f"\n\nchosen: **{chosen[0]}** ({chosen[1]})\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/grpo_budget.py", description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cpu-small")
    ap.add_argument("--candidates", default=f"{DEFAULT},8x2x4x96,16x2x4x64,8x4x8x64",
                    help="STEPSxPROMPTSxGENERATIONSxLENGTH, comma-separated, in the order computed")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--epoch-s", type=float, default=930.0, help="today's default epoch, quiet (seconds)")
    ap.add_argument("--grpo-s", type=float, default=45.0, help="today's GRPO stage in that epoch (seconds)")
    ap.add_argument("--cache", type=Path, default=ROOT / "runs" / "bench-quality")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "grpo-budget-cpu-small.json")
    args = ap.parse_args(argv)
    from loop_identity import label   # the tree's commit, `+changes` when its tracked files differ (bench/ is on the path)

    entries = []
    for candidate in args.candidates.split(","):
        started = time.time()
        doc = run_candidate(args.profile, candidate, args.seeds, args.cache)
        entries.append(summarize(candidate, doc, grpo_summaries(args.cache, args.profile, candidate), args.epoch_s,
                                 args.grpo_s))
        print(f"{candidate}: {json.dumps(entries[-1])} ({time.time() - started:.0f} s)", flush=True)
        chosen = choose(entries)
        args.out.write_text(json.dumps({
            "kind": "grpo-budget", "what": f"GRPO budget of {args.profile}, ρ0 wild on the tuning slice",
            "date": time.strftime("%Y-%m-%d", time.gmtime()), "commit": label(ROOT),
            "command": "bench/grpo_budget.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "profile": args.profile, "split": "tune", "seeds": args.seeds,
            "candidates": entries, "chosen": chosen[0], "why": chosen[1]}, indent=2) + "\n")
        args.out.with_suffix(".md").write_text(markdown(entries, chosen))
    print(markdown(entries, choose(entries)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
