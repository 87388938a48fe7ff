"""The learning-rate sweep that chooses a CPU profile's optimiser scale, on the tuning slice.

    .venv/bin/python bench/lr_sweep.py [--profile cpu-small] [--rates 2e-4,1e-4,5e-4,2.5e-5] [--seeds 1]
                                       [--out bench/results/lr-sweep-cpu-small.json]

For each SFT learning rate, `curateevo bench quality --calibrate --split tune --rows
oracle,poisoned,rho0-wild --set sft_learning_rate=R` trains the three calibration rows at the
profile and scores them on bfcl-single's tuning slice (120 train tasks that neither the default
corpus, dev nor test holds: environments/bfcl/splits.py `tuning_slice`). Every cell is cached under
runs/bench-quality/, so a stopped sweep continues where it stopped; after each rate the table is
rewritten to `--out` (JSON) and its `.md` sibling.

The choice criterion, fixed before the sweep ran (trainer/README.md repeats it):

1. the rate whose oracle − poisoned difference in P on the slice is largest, among the rates
   whose ρ0-wild P is not below the best ρ0-wild P of the sweep by more than its 95% interval's
   half-width (no rate that makes the uncurated agent worse);
2. where two rates' oracle − poisoned differences are within each other's intervals, the one with
   the larger oracle − poisoned gold-call log-likelihood difference;
3. then the lower rate.

Dev and test tasks are never read here.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROWS = ("oracle", "poisoned", "rho0-wild")


def run_rate(profile: str, rate: float, seeds: int, cache: Path) -> dict:
    """One rate's calibration on the slice (cached cells are reused); its quality and calibration documents."""
    out = cache / "lr-sweep" / f"{profile}-sft-lr-{rate:g}"
    cmd = [sys.executable, "-m", "evolver.cli", "bench", "quality", "--calibrate", "--split", "tune",
           "--rows", ",".join(ROWS), "--seeds", str(seeds), "--profile", profile, "--cache", str(cache),
           "--set", f"sft_learning_rate={rate}", "--out", str(out), "--quiet"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"lr {rate:g}: bench quality failed ({done.returncode}):\n{done.stderr[-2000:]}")
    calibration = next((line.split("calibration: ", 1)[1].strip() for line in done.stdout.splitlines()
                        if line.startswith("calibration: ")), None)
    return {"quality": json.loads((out / "quality.json").read_text()),
            "calibration": json.loads(Path(calibration).read_text()) if calibration else None}


def summarize(rate: float, docs: dict) -> dict:
    rows = {r["id"]: r for r in docs["quality"]["rows"] if not r.get("pending")}
    cal = docs["calibration"] or {}
    pairs = {(p["a"], p["b"]): p for p in cal.get("pairs", [])}
    entry = {"sft_learning_rate": rate, "tasks": docs["quality"]["tasks"],
             "mdd": docs["quality"]["minimal_detectable_difference"]["value"], "rows": {}}
    for rid in ROWS:
        row = rows.get(rid)
        if row:
            entry["rows"][rid] = {"P": row["P"], "call_rate": row.get("call_rate"),
                                  "format_error_rate": row.get("format_error_rate"),
                                  "sft_loss_last": row.get("sft_loss_last"),
                                  "per_category": {c: v["value"] for c, v in row["per_category"].items()},
                                  "gold_ll": (cal.get("rows", {}).get(rid) or {}).get("gold_ll")}
    for (a, b), key in (((ROWS[0], ROWS[1]), "oracle_minus_poisoned"), ((ROWS[0], ROWS[2]), "oracle_minus_wild")):
        if (a, b) in pairs:
            p = pairs[(a, b)]
            entry[key] = {k: p.get(k) for k in ("value", "low", "high", "resolved", "gold")}
    return entry


def markdown(entries: list[dict]) -> str:
    lines = ["| SFT lr | oracle P | poisoned P | ρ0 wild P | oracle − poisoned [95%] | gold LL diff | call rate o/p/w | "
             "format errors o/p/w | final SFT loss o/p/w |", "|---|---|---|---|---|---|---|---|---|"]

    def p(e, rid):
        r = e["rows"].get(rid)
        return "–" if not r else f"{r['P']['value']:.3f} [{r['P']['low']:.3f}, {r['P']['high']:.3f}]"

    def trio(e, key):
        return " / ".join("–" if e["rows"].get(r, {}).get(key) is None else f"{e['rows'][r][key]:.2f}" for r in ROWS)

    for e in entries:
        d = e.get("oracle_minus_poisoned") or {}
        diff = "–" if not d else f"{d['value']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"
        g = d.get("gold")
        gold = "–" if not g else f"{g['value']:+.3f} [{g['low']:+.3f}, {g['high']:+.3f}]"
        lines.append(f"| {e['sft_learning_rate']:g} | {p(e, 'oracle')} | {p(e, 'poisoned')} | {p(e, 'rho0-wild')} | {diff} | "
                     f"{gold} | {trio(e, 'call_rate')} | {trio(e, 'format_error_rate')} | {trio(e, 'sft_loss_last')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/lr_sweep.py", description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cpu-small")
    ap.add_argument("--rates", default="2e-4,1e-4,5e-4,2.5e-5", help="SFT learning rates, in the order computed")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--cache", type=Path, default=ROOT / "runs" / "bench-quality")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "lr-sweep-cpu-small.json")
    args = ap.parse_args(argv)
    entries = []
    for rate in (float(r) for r in args.rates.split(",")):
        started = time.time()
        entries.append(summarize(rate, run_rate(args.profile, rate, args.seeds, args.cache)))
        print(f"lr {rate:g}: {json.dumps(entries[-1].get('oracle_minus_poisoned'))} ({time.time() - started:.0f} s)",
              flush=True)
        args.out.write_text(json.dumps({"profile": args.profile, "split": "tune", "seeds": args.seeds,
                                        "rates": entries}, indent=2) + "\n")
        args.out.with_suffix(".md").write_text(markdown(entries))
    print(markdown(entries))
    return 0


if __name__ == "__main__":
    sys.exit(main())
