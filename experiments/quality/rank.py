"""Does a dev reading rank strategies as held-out test P does? (the instrument issue, item 3)

Two readings of the same rows: one on dev (P and the gold-call log-likelihood, `bench quality
--split dev --gold`), one on test (P, `bench quality --split test --gold`). Each row carries its
per-task scores (`per_task_P`, `per_task_gold`: task → the mean over the row's seeds), so the
agreement gets an interval: the dev tasks and the test tasks are resampled with replacement (the
same resample for every row, as the rows were scored on the same tasks) and Spearman's ρ between
the rows' dev reading and their test P is computed on each resample. A dev reading that ranks at
ρ ≥ RANKS_WELL where dev P does not is the continuous signal the issue asks for.
"""
from __future__ import annotations

import math
import random
from statistics import fmean

RANKS_WELL = 0.8
"""The issue's bar: a dev signal that ranks like test P at least this well may decide acceptance."""
MIN_ROWS = 6
"""Fewer rows than this give a ρ too coarse to read (the issue asks for at least 6 candidates)."""


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's ρ (average ranks for ties; scipy's definition), None when either side is constant."""
    from scipy.stats import spearmanr

    if len(xs) < 3 or len(set(xs)) < 2 or len(set(ys)) < 2:
        return None
    rho = spearmanr(xs, ys).statistic
    return None if rho is None or math.isnan(rho) else float(rho)


def _means(per_task: dict[str, dict[str, float]], tasks: list[str]) -> dict[str, float]:
    return {rid: fmean(scores[t] for t in tasks) for rid, scores in per_task.items()}


def _common(rows: list[dict], key: str) -> dict[str, dict[str, float]]:
    """row id → its per-task scores under `key`, on the tasks every such row scored."""
    have = {r["id"]: r[key] for r in rows if r.get(key)}
    if not have:
        return {}
    tasks = set.intersection(*(set(s) for s in have.values()))
    return {rid: {t: s[t] for t in sorted(tasks)} for rid, s in have.items()}


def agreement(dev: dict, test: dict, resamples: int = 2000, seed: int = 0, confidence: float = 0.95) -> dict:
    """How the dev reading (`dev`, a quality.json with per-task P and gold) ranks the rows that the
    test reading (`test`, a quality.json with per-task P) scored: Spearman's ρ of dev gold LL and of
    dev P against test P, each with its bootstrap interval over tasks, and the verdict."""
    dev_p, dev_gold = _common(dev["rows"], "per_task_P"), _common(dev["rows"], "per_task_gold")
    test_p = _common(test["rows"], "per_task_P")
    rows = sorted(set(dev_p) & set(dev_gold) & set(test_p))
    out = {"rows": rows, "dev_tasks": len(next(iter(dev_p.values()), {})),
           "test_tasks": len(next(iter(test_p.values()), {})), "resamples": resamples, "confidence": confidence}
    if len(rows) < 3:
        return {**out, "verdict": f"{len(rows)} row(s) scored on both splits: at least 3 are needed for a rank"}
    dev_p, dev_gold, test_p = ({r: d[r] for r in rows} for d in (dev_p, dev_gold, test_p))
    dev_tasks, test_tasks = list(next(iter(dev_p.values()))), list(next(iter(test_p.values())))
    gold_tasks = list(next(iter(dev_gold.values())))
    point = {"test_P": _means(test_p, test_tasks), "dev_P": _means(dev_p, dev_tasks),
             "dev_gold_ll": _means(dev_gold, gold_tasks)}
    out["per_row"] = {r: {k: round(v[r], 6) for k, v in point.items()} for r in rows}
    rng = random.Random(seed)
    draws = {"dev_gold_ll": [], "dev_P": []}
    for _ in range(resamples):
        t = _means(test_p, rng.choices(test_tasks, k=len(test_tasks)))
        d = {"dev_P": _means(dev_p, rng.choices(dev_tasks, k=len(dev_tasks))),
             "dev_gold_ll": _means(dev_gold, rng.choices(gold_tasks, k=len(gold_tasks)))}
        for name, reading in d.items():
            rho = spearman([reading[r] for r in rows], [t[r] for r in rows])
            if rho is not None:
                draws[name].append(rho)
    alpha = (1 - confidence) / 2
    for name in draws:
        rho = spearman([point[name][r] for r in rows], [point["test_P"][r] for r in rows])
        values = sorted(draws[name])
        interval = (values[int(alpha * len(values))], values[min(len(values) - 1, int((1 - alpha) * len(values)))]) \
            if values else (None, None)
        out[name] = {"spearman": None if rho is None else round(rho, 4),
                     "low": None if interval[0] is None else round(interval[0], 4),
                     "high": None if interval[1] is None else round(interval[1], 4), "defined_in": len(values)}
    out["verdict"] = verdict(out)
    return out


def verdict(out: dict) -> str:
    g, p = out["dev_gold_ll"], out["dev_P"]
    few = f" (only {len(out['rows'])} rows: the issue asks for at least {MIN_ROWS})" if len(out["rows"]) < MIN_ROWS else ""
    if g["spearman"] is None:
        return "the dev gold LL or test P is the same for every row: no rank to compare" + few
    good = g["spearman"] >= RANKS_WELL
    p_good = p["spearman"] is not None and p["spearman"] >= RANKS_WELL
    if good and not p_good:
        return (f"dev gold LL ranks the rows like test P (ρ {g['spearman']:+.2f}) where dev P does not "
                f"(ρ {p['spearman'] if p['spearman'] is not None else 'undefined'}): it may decide acceptance" + few)
    if good:
        return f"dev gold LL and dev P both rank the rows like test P (ρ {g['spearman']:+.2f}, {p['spearman']:+.2f})" + few
    return (f"dev gold LL ranks the rows below the bar (ρ {g['spearman']:+.2f} < {RANKS_WELL}); "
            "P stays the acceptance signal" + few)


def markdown(out: dict) -> str:
    seeds = (f" × {out['dev_seeds']} seed(s)", f" × {out['test_seeds']} seed(s)") if "dev_seeds" in out else ("", "")
    lines = [f"**Rank agreement with test P** ({len(out['rows'])} rows, {out['dev_tasks']} dev tasks{seeds[0]}, "
             f"{out['test_tasks']} test tasks{seeds[1]}, {out['resamples']} task resamples)", ""]
    if "per_row" not in out:
        return "\n".join(lines + [out["verdict"], ""])
    lines += ["| row | test P | dev P | dev gold LL (nats/token) |", "|---|---|---|---|"]
    for r, v in sorted(out["per_row"].items(), key=lambda kv: -kv[1]["test_P"]):
        lines.append(f"| {r} | {v['test_P']:.3f} | {v['dev_P']:.3f} | {v['dev_gold_ll']:+.4f} |")
    lines += ["", "| dev reading | Spearman ρ with test P | 95% interval |", "|---|---|---|"]
    for name, label in (("dev_gold_ll", "gold-call log-likelihood"), ("dev_P", "P")):
        s = out[name]
        rho = "undefined" if s["spearman"] is None else f"{s['spearman']:+.3f}"
        ci = "–" if s["low"] is None else f"[{s['low']:+.3f}, {s['high']:+.3f}]"
        lines.append(f"| {label} | {rho} | {ci} |")
    return "\n".join(lines + ["", out["verdict"], ""])
