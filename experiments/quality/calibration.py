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

import numpy as np

from base.files import atomic_json

from base import registry
from experiments.quality import stats

PAIRS = (
    ("oracle", "poisoned", "clean vs poisoned (must differ)"),
    ("rho0-wild", "poisoned", "wild vs poisoned"),
    ("oracle", "rho0-wild", "clean vs wild (what a filter can recover)"),
    ("oracle", "noisy", "clean vs noisy records"),
    ("augment", "rho0-wild", "added skills vs none"),
)


def _key(setting_doc: dict) -> str:
    fields = {k: setting_doc[k] for k in ("benchmark", "split", "tasks", "profile", "base", "seeds", "budget")}
    if setting_doc.get("corpus_sha256"):   # next-call: a user's corpus is part of the setting
        fields["corpus_sha256"] = setting_doc["corpus_sha256"]
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def _gold_scores(golds: list[dict]) -> dict[str, list[float]]:
    """task → per-seed gold log-likelihood, on the tasks every seed scored."""
    tasks = set.intersection(*(set(g["per_task"]) for g in golds))
    return {t: [g["per_task"][t] for g in golds] for t in sorted(tasks)}


def summarize(doc: dict, results: dict[str, list[dict]], golds: dict[str, list[dict]] | None = None) -> dict:
    """The calibration of the quality document `doc` (table.summarize) and its cells; `golds`:
    each row's per-seed gold-call log-likelihoods (Cells.gold), the low-variance signal beside P."""
    from experiments.quality.table import row_scores

    scores = {rid: row_scores(c) for rid, c in results.items() if c}
    gold = {rid: _gold_scores(g) for rid, g in (golds or {}).items() if g and all(g)}
    pairs = []
    mdd = doc["minimal_detectable_difference"]
    for a, b, what in PAIRS:
        if a in scores and b in scores:
            d = stats.paired_difference(scores[a], scores[b])
            pair = {"a": a, "b": b, "what": what, **d, "resolved": d["low"] > 0 or d["high"] < 0,
                    "mdd_paired": round(stats.paired_minimal_detectable_difference(
                        scores[a], scores[b], mdd.get("seed_sd") or 0.0, shared=mdd.get("shared", 0.0)), 6)}
            if a in gold and b in gold:
                g = stats.paired_difference(gold[a], gold[b])
                pair["gold"] = {**g, "resolved": g["low"] > 0 or g["high"] < 0}
            pairs.append(pair)
    # the pair that must differ: clean vs poisoned; on a corpus with no labels (no oracle row),
    # the corpus itself vs its poisoned copy
    must = ("oracle", "poisoned") if any(r["id"] == "oracle" for r in doc["rows"]) else ("rho0-wild", "poisoned")
    sees = next((p for p in pairs if (p["a"], p["b"]) == must), None)
    setting = doc["setting"]
    out = {"setting": setting, "key": _key(setting), "tasks": doc["tasks"],
           "measured_on": datetime.date.today().isoformat(),
           "rows": {r["id"]: {"P": r["P"], "per_seed_P": r["per_seed_P"],
                              **({"gold_ll": stats.mean_interval(gold[r["id"]]).to_json()} if r["id"] in gold else {})}
                    for r in doc["rows"] if not r.get("pending")},
           "pairs": pairs, "minimal_detectable_difference": mdd, "must_differ": list(must),
           # what a comparison on the same tasks resolves (the loop's), the median over the pairs
           "paired_mdd": None if not pairs else {
               "value": round(float(np.median([p["mdd_paired"] for p in pairs])), 6), "pairs": len(pairs),
               "seed_sd_measured": bool(mdd.get("seed_sd_measured"))},
           "sees_poison": None if sees is None else bool(sees["low"] > 0)}
    ranked = [rid for rid in out["rows"] if "gold_ll" in out["rows"][rid]]
    if len(ranked) >= 3:   # does the gold signal order the rows as P does?
        from scipy.stats import spearmanr

        xs = [out["rows"][r]["P"]["value"] for r in ranked]
        ys = [out["rows"][r]["gold_ll"]["value"] for r in ranked]
        rho = spearmanr(xs, ys).statistic if len(set(xs)) > 1 and len(set(ys)) > 1 else None   # constant: undefined
        out["gold_vs_P_spearman"] = {"rows": len(ranked), "rho": None if rho is None else round(float(rho), 4)}
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
    if cal.get("paired_mdd"):
        pm = cal["paired_mdd"]
        resolves += (f", about {100 * pm['value']:.1f} between two rows on the same tasks (the loop's comparison; "
                     f"median of {pm['pairs']} pairs" + ("" if pm["seed_sd_measured"] else ", a lower bound") + ")")
    a, b = cal.get("must_differ", ("oracle", "poisoned"))
    clean_poison = next((p for p in cal["pairs"] if (p["a"], p["b"]) == (a, b)), None)
    if clean_poison is None:
        return f"calibration of {where}: incomplete (the {a} or {b} row has no cells); {resolves}"
    what = "clean from poisoned data" if a == "oracle" else "the corpus from its poisoned copy"
    told = f"tells {what}" if cal["sees_poison"] else f"CANNOT tell {what}"
    return (f"calibration of {where}: it {told} ({a} − {b} {_pts(clean_poison['value'])} "
            f"[{_pts(clean_poison['low'])}, {_pts(clean_poison['high'])}] points); {resolves}")


def markdown(cal: dict) -> str:
    lines = ["**Calibration**", "", "| pair | Δ P, points [95% CI] | beyond noise | paired MDD, points "
             "| Δ gold LL, nats/token [95% CI] | beyond noise |", "|---|---|---|---|---|---|"]
    for p in cal["pairs"]:
        g = p.get("gold")
        gold = (f"{g['value']:+.3f} [{g['low']:+.3f}, {g['high']:+.3f}] | {'yes' if g['resolved'] else 'no'}"
                if g else "— | —")
        paired = f"{100 * p['mdd_paired']:.1f}" if p.get("mdd_paired") is not None else "—"
        lines.append(f"| {p['what']} ({p['a']} − {p['b']}) | {_pts(p['value'])} [{_pts(p['low'])}, {_pts(p['high'])}] "
                     f"| {'yes' if p['resolved'] else 'no'} | {paired} | {gold} |")
    rows = [f"{rid} {r['gold_ll']['value']:+.3f}" for rid, r in cal["rows"].items() if "gold_ll" in r]
    extra = [f"gold-call log-likelihood per row (nats/token): {', '.join(rows)}"] if rows else []
    if cal.get("gold_vs_P_spearman"):
        s = cal["gold_vs_P_spearman"]
        extra.append(f"rank agreement of gold LL with P over the {s['rows']} rows: Spearman {s['rho']}")
    return "\n".join(lines + [""] + extra + ["", cal["verdict"], ""])


def write(cal: dict, cache: Path) -> Path:
    path = Path(cache) / "calibrations" / f"{cal['key']}.json"
    atomic_json(path, cal)
    return path


def lookup(cache: Path, *, benchmark: str, profile: str, base: str | None,
           corpus_sha256: str | None = None) -> dict | None:
    """The cached dev calibration of this setting with the most tasks × seeds (None: none yet);
    `corpus_sha256`: a next-call setting's corpus."""
    found = []
    for path in sorted((Path(cache) / "calibrations").glob("*.json")):
        try:
            cal = json.loads(path.read_text())
            s = cal["setting"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if (registry.current(s.get("benchmark")), s.get("profile"), s.get("split")) == (benchmark, profile, "dev") \
                and s.get("base") in (None, base) and not s.get("budget") \
                and s.get("corpus_sha256") == corpus_sha256:
            found.append(cal)
    return max(found, key=lambda c: (c["tasks"] * len(c["setting"]["seeds"]), c["key"]), default=None)


def run_note(cache: Path, *, benchmark: str, profile: str, base: str | None, tasks: int, seeds: int,
             margin: float | None, corpus: tuple[str, ...] = (), corpus_sha256: str | None = None) -> str:
    """One sentence for a run's start: its margin against what the instrument of its setting resolves
    (`corpus`, `corpus_sha256`: a next-call run's corpus)."""
    cal = lookup(cache, benchmark=benchmark, profile=profile, base=base, corpus_sha256=corpus_sha256)
    if cal is None:
        on = f" --benchmark {benchmark} --corpus {' '.join(corpus)}" if corpus else ""
        return (f"instrument: no calibration of {profile} / {base} / {benchmark} yet; `curateevo bench quality "
                f"--calibrate --profile {profile}{on}` measures whether this setting sees data")
    m = cal["minimal_detectable_difference"]
    tasks = tasks or cal["tasks"]   # all of the split: as many as the calibration had
    resolved = stats.minimal_detectable_difference(tasks, seeds, m["base_rate"], m["seed_sd"], shared=m.get("shared", 0.0))
    head = f"instrument ({cal['measured_on']}, {cal['tasks']} tasks × {len(cal['setting']['seeds'])} seed(s)): "
    what = "clean from poisoned data" if cal.get("must_differ", ["oracle"])[0] == "oracle" else "the corpus from its poisoned copy"
    sees = f"it tells {what}" if cal.get("sees_poison") else f"it did NOT tell {what}"
    if margin is None:   # the paired rule: its bootstrap carries the noise
        return head + f"{sees}; with {tasks} dev tasks × {seeds} seed(s) it resolves about {100 * resolved:.0f} points of P"
    if margin < resolved:
        return (head + f"{sees}; with {tasks} dev tasks × {seeds} seed(s) it resolves about {100 * resolved:.0f} "
                f"points of P, above the acceptance margin {margin:g}: a candidate accepted by less may be noise")
    return head + f"{sees}; the margin {margin:g} is at least the {100 * resolved:.0f} points it resolves"
