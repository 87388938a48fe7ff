"""Calibration: does a setting's instrument (profile, base, benchmark, dev tasks, seeds) see data?

`curateevo bench quality --calibrate` trains and scores rows that *must* differ when the trained
agent reflects its data (`CALIBRATION`: ρ0 on the wild corpus, the records labelled clean, the
records labelled noisy, a deliberately corrupted copy, a skill-adding strategy), then says, from
the paired differences on the same tasks and the minimal detectable difference:

- whether the setting tells clean from poisoned data (oracle − poisoned beyond its 95% interval);
- the smallest effect it resolves (the minimal detectable difference at power 0.8, α 0.05, with
  the measured base rate and, from two seeds on, the measured seed spread);
- what each other pair shows (wild noise, the noisy records, the added skills).

The result is cached per setting under CACHE/calibrations/; `curateevo run` reads the one of its
setting and says at start when its acceptance margin is below what the instrument resolves.
"""
from __future__ import annotations

import datetime
import hashlib
import json
from pathlib import Path

from evolver.files import atomic_json

from benchmarks.quality import stats

PAIRS = (
    ("oracle", "poisoned", "clean vs poisoned (must differ)"),
    ("rho0-wild", "poisoned", "wild vs poisoned"),
    ("oracle", "rho0-wild", "clean vs wild (what a filter can recover)"),
    ("oracle", "noisy", "clean vs noisy records"),
    ("augment", "rho0-wild", "added skills vs none"),
)


def _scores(cells: list[dict]) -> dict[str, list[float]]:
    from benchmarks.quality.table import row_scores

    return row_scores(cells)


def _key(setting_doc: dict) -> str:
    fields = {k: setting_doc[k] for k in ("benchmark", "split", "tasks", "profile", "base", "seeds", "budget")}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def summarize(doc: dict, results: dict[str, list[dict]]) -> dict:
    """The calibration of the quality document `doc` (table.summarize) and its cells."""
    scores = {rid: _scores(c) for rid, c in results.items() if c}
    pairs = []
    for a, b, what in PAIRS:
        if a in scores and b in scores:
            d = stats.paired_difference(scores[a], scores[b])
            pairs.append({"a": a, "b": b, "what": what, **d, "resolved": d["low"] > 0 or d["high"] < 0})
    mdd = doc["minimal_detectable_difference"]
    sees = next((p for p in pairs if (p["a"], p["b"]) == ("oracle", "poisoned")), None)
    setting = doc["setting"]
    out = {"setting": setting, "key": _key(setting), "tasks": doc["tasks"],
           "measured_on": datetime.date.today().isoformat(),
           "rows": {r["id"]: {"P": r["P"], "per_seed_P": r["per_seed_P"]} for r in doc["rows"] if not r.get("pending")},
           "pairs": pairs, "minimal_detectable_difference": mdd,
           "sees_poison": None if sees is None else bool(sees["low"] > 0)}
    out["verdict"] = verdict(out)
    return out


def _pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def verdict(cal: dict) -> str:
    s = cal["setting"]
    where = (f"{s['profile']} / {s['base'] or 'the profile base'} / {s['benchmark']} {s['split']} "
             f"({cal['tasks']} tasks × {len(s['seeds'])} seed(s))")
    mdd = cal["minimal_detectable_difference"]
    resolves = (f"it resolves differences of about {100 * mdd['value']:.0f} points of P"
                + ("" if mdd["seed_sd_measured"] else " (seed spread not measured: a lower bound)"))
    clean_poison = next((p for p in cal["pairs"] if (p["a"], p["b"]) == ("oracle", "poisoned")), None)
    if clean_poison is None:
        return f"calibration of {where}: incomplete (the oracle or poisoned row has no cells); {resolves}"
    told = "tells clean from poisoned data" if cal["sees_poison"] else "CANNOT tell clean from poisoned data"
    return (f"calibration of {where}: it {told} (oracle − poisoned {_pts(clean_poison['value'])} "
            f"[{_pts(clean_poison['low'])}, {_pts(clean_poison['high'])}] points); {resolves}")


def markdown(cal: dict) -> str:
    lines = ["**Calibration**", "", "| pair | Δ P, points [95% CI] | beyond noise |", "|---|---|---|"]
    for p in cal["pairs"]:
        lines.append(f"| {p['what']} ({p['a']} − {p['b']}) | {_pts(p['value'])} [{_pts(p['low'])}, {_pts(p['high'])}] "
                     f"| {'yes' if p['resolved'] else 'no'} |")
    return "\n".join(lines + ["", cal["verdict"], ""])


def write(cal: dict, cache: Path) -> Path:
    path = Path(cache) / "calibrations" / f"{cal['key']}.json"
    atomic_json(path, cal)
    return path


def lookup(cache: Path, *, benchmark: str, profile: str, base: str | None) -> dict | None:
    """The cached dev calibration of this setting with the most tasks × seeds (None: none yet)."""
    found = []
    for path in sorted((Path(cache) / "calibrations").glob("*.json")):
        try:
            cal = json.loads(path.read_text())
            s = cal["setting"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if (s.get("benchmark"), s.get("profile"), s.get("split")) == (benchmark, profile, "dev") \
                and s.get("base") in (None, base) and not s.get("budget"):
            found.append(cal)
    return max(found, key=lambda c: (c["tasks"] * len(c["setting"]["seeds"]), c["key"]), default=None)


def run_note(cache: Path, *, benchmark: str, profile: str, base: str | None, tasks: int, seeds: int,
             margin: float | None) -> str:
    """One sentence for a run's start: its margin against what the instrument of its setting resolves."""
    cal = lookup(cache, benchmark=benchmark, profile=profile, base=base)
    if cal is None:
        return (f"instrument: no calibration of {profile} / {base} / {benchmark} yet; `curateevo bench quality "
                f"--calibrate --profile {profile}` measures whether this setting sees data")
    m = cal["minimal_detectable_difference"]
    resolved = stats.minimal_detectable_difference(tasks, seeds, m["base_rate"], m["seed_sd"])
    head = f"instrument ({cal['measured_on']}, {cal['tasks']} tasks × {len(cal['setting']['seeds'])} seed(s)): "
    sees = ("it tells clean from poisoned data" if cal.get("sees_poison")
            else "it did NOT tell clean from poisoned data")
    if margin is None:   # the paired rule: its bootstrap carries the noise
        return head + f"{sees}; with {tasks} dev tasks × {seeds} seed(s) it resolves about {100 * resolved:.0f} points of P"
    if margin < resolved:
        return (head + f"{sees}; with {tasks} dev tasks × {seeds} seed(s) it resolves about {100 * resolved:.0f} "
                f"points of P, above the acceptance margin {margin:g}: a candidate accepted by less may be noise")
    return head + f"{sees}; the margin {margin:g} is at least the {100 * resolved:.0f} points it resolves"
