"""The quality benchmark's results: one JSON document, a markdown table and a PNG with intervals."""
from __future__ import annotations

import functools
import math
import textwrap
from pathlib import Path
from statistics import fmean

from base.files import atomic_json, atomic_write

from base import paired
from experiments.quality import stats
from experiments.quality.cells import Row, Setting

BASE_RATE = 0.25
"""P assumed for the minimal detectable difference until ρ0 on the wild corpus is measured."""


def row_scores(cells: list[dict]) -> dict[str, list[float]]:
    """task id → the per-seed scores of a row's cells (seeds in the order of the cells)."""
    return {task: [c["scores"][task] for c in cells] for task in cells[0]["scores"]}


def pooled_seed_sd(per_row: dict[str, list[float]]) -> float | None:
    """The between-seed spread of P pooled over rows (root of the mean per-row variance)."""
    variances = [stats.seed_spread(p)["sd"] ** 2 for p in per_row.values() if len(p) > 1]
    return math.sqrt(fmean(variances)) if variances else None


def declining() -> set[str]:
    """The categories whose right answer is no call, over every environment (`declining`: BFCL's irrelevance,
    ACEBench's special items); category names do not collide between benchmarks."""
    from base import registry

    return {c for e in registry.environments() for c in e.declining}


def by_kind(a: dict, b: dict, category: dict, seed: int = 0, groups: dict | None = None) -> dict | None:
    """a − b (task → per-seed scores) paired on the tasks that want a call (`calling`) and on those whose
    right answer is no call (`declining()`: BFCL's irrelevance categories, ACEBench's special items), so a gain made by declining more
    is not read as a better agent; None when the tasks hold only one kind."""
    kind = {t: "declining" if category.get(t) in declining() else "calling" for t in a}
    if len(set(kind.values())) < 2:
        return None
    return {k: {"n": sum(v == k for v in kind.values()),
                **stats.paired_difference({t: v for t, v in a.items() if kind[t] == k},
                                          {t: v for t, v in b.items() if kind.get(t) == k}, seed=seed, groups=groups)}
            for k in ("calling", "declining")}


def _diagnostics(row_cells: list[dict]) -> dict:
    """Seed means of what the trained agent did besides P (cells computed before these were kept lack them)."""
    out = {}
    for name in ("call_rate", "format_error_rate", "sft_loss_last"):
        values = [c[name] for c in row_cells if c.get(name) is not None]
        if values:
            out[name] = round(fmean(values), 4)
    return out


def summarize(rows: list[Row], cells: dict[str, list[dict]], setting: Setting, n_tasks: int, seed: int = 0,
              groups: dict[str, str] | None = None) -> dict:
    """Every row with its mean, interval, per-seed P, per-category means and intervals, the
    paired difference with ρ0 on the wild corpus and the share of the wild → labeled gap it
    recovers, and (when the oracle row is computed) the paired difference with the oracle — the
    bar an evolved strategy must match; rows without all their cells are marked pending. `groups`:
    a scored id → the task it is a record of (Cells.groups), so the intervals resample tasks."""
    scores = {rid: row_scores(c) for rid, c in cells.items() if c}
    compare = functools.cache(lambda a, b: stats.paired_difference(scores[a], scores[b], seed=seed, groups=groups))
    task_category = {t: c for got in cells.values() for cell in got[:1] for t, c in cell["category"].items()}
    kinds = functools.cache(lambda a, b: by_kind(scores[a], scores[b], task_category, seed=seed, groups=groups))
    wild, labeled, oracle = scores.get("rho0-wild"), scores.get("rho0-labeled"), scores.get("oracle")
    per_seed = {rid: [c["P"] for c in cells[rid]] for rid in scores}
    out_rows = []
    for row in rows:
        entry = {"id": row.id, "label": row.label, "table": row.table, "ablations": list(row.ablations)}
        s = scores.get(row.id)
        if s is None:
            out_rows.append({**entry, "pending": True})
            continue
        category = cells[row.id][0]["category"]
        by_cat = {}
        for cat in sorted(set(category.values())):
            by_cat[cat] = stats.mean_interval({t: v for t, v in s.items() if category[t] == cat}, seed=seed,
                                              groups=groups).to_json()
        entry.update(P=stats.mean_interval(s, seed=seed, groups=groups).to_json(), per_seed_P=per_seed[row.id], per_category=by_cat,
                     **_diagnostics(cells[row.id]))
        if wild is not None and row.id != "rho0-wild":
            entry["vs_rho0_wild"] = compare(row.id, "rho0-wild")
            if kinds(row.id, "rho0-wild"):
                entry["vs_rho0_wild_by_kind"] = kinds(row.id, "rho0-wild")
        if oracle is not None and row.id != "oracle" and row.table == 1:
            entry["vs_oracle"] = compare(row.id, "oracle")
        full = row.id.split(" ")[0] if row.table == 2 and " " in row.id else None
        if full in scores:   # what the ablated component is worth: the full row minus this one, paired
            entry["full_minus_this"] = compare(full, row.id)
            if kinds(full, row.id):
                entry["full_minus_this_by_kind"] = kinds(full, row.id)
        if wild is not None and labeled is not None and row.id not in ("rho0-wild", "rho0-labeled"):
            entry["gap_recovered"] = stats.gap_recovered(s, wild, labeled, seed=seed, groups=groups)   # 0 and 1 by definition there
        out_rows.append(entry)
    n, n_seeds = n_tasks, len(setting.seeds)
    table1 = [r.id for r in rows if r.table == 1 and r.id in scores]
    base_rate = fmean(per_seed["rho0-wild"]) if "rho0-wild" in per_seed else BASE_RATE
    seed_sd = pooled_seed_sd(per_seed)
    effect = stats.seed_effect({rid: per_seed[rid] for rid in table1}, seed=seed)
    shared = effect["shared"] if effect else 0.0
    from trainer.devices import machine

    return {
        "setting": setting.to_json(),
        "machine": machine(setting.train.resolved.precision),
        "tasks": n,
        "interval": ("95%: a crossed bootstrap over tasks (each drawn with its records) × seeds"
                     if groups and len(set(groups.values())) < len(groups) else
                     "95%: Wilson for one seed, else a crossed bootstrap over tasks × seeds")
                    + f" ({stats.RESAMPLES} resamples, seed {seed})",
        "rows": out_rows,
        "pairs": pairwise(table1, compare),
        "seed_sd": seed_sd,
        "seed_effect": effect,
        "minimal_detectable_difference": {
            "power": 0.8, "alpha": 0.05, "base_rate": base_rate, "seed_sd": seed_sd or 0.0, "shared": shared,
            "value": stats.minimal_detectable_difference(n, n_seeds, base_rate, seed_sd or 0.0, shared=shared)
            if n else None,
            "seed_sd_measured": seed_sd is not None,
        },
    }


def pairwise(ids: list[str], compare) -> list[dict]:
    """Every later Table 1 row minus every earlier one (`compare(a, b)`: the paired difference
    a − b, the one the Δ columns show), with `apart` true where the 95% interval excludes 0: which
    rows P tells apart; `apart_holm` where it stays apart after Holm's correction for all the pairs
    (family-wise α 0.05 on the two-sided bootstrap p)."""
    out = []
    for i, a in enumerate(ids):
        for b in ids[:i]:
            d = compare(a, b)
            out.append({"a": a, "b": b, **d, "apart": d["low"] > 0 or d["high"] < 0})
    for pair, kept in zip(out, stats.holm([p["p_two_sided"] for p in out])):
        pair["apart_holm"] = kept and pair["apart"]
    return out


def pairs_markdown(doc: dict) -> list[str]:
    """The lower triangle of row − column differences in points; bold where the interval excludes 0,
    † where the pair stays apart after Holm's correction."""
    pairs = doc.get("pairs") or []
    if not pairs:
        return []
    ids = list(dict.fromkeys([pairs[0]["b"]] + [p["a"] for p in pairs]))
    cell = {(p["a"], p["b"]): p for p in pairs}
    lines = ["**Which Table 1 rows P tells apart** (row − column in points, paired over tasks × seeds, "
             "95% CI; bold: the interval excludes 0; †: still apart after Holm's correction for every pair)", "",
             "| row − column | " + " | ".join(ids[:-1]) + " |", "|---|" + "---|" * (len(ids) - 1)]
    for a in ids[1:]:
        shown = []
        for b in ids[:-1]:
            p = cell.get((a, b))
            text = f"{100 * p['value']:+.1f} [{100 * p['low']:+.1f}, {100 * p['high']:+.1f}]" if p else ""
            shown.append((f"**{text}**" if p and p["apart"] else text) + (" †" if p and p.get("apart_holm") else ""))
        lines.append(f"| {a} | " + " | ".join(shown) + " |")
    apart = sum(p["apart"] for p in pairs)
    holm = sum(bool(p.get("apart_holm")) for p in pairs)
    return lines + ["", f"{apart} of {len(pairs)} pairs told apart (each interval on its own); {holm} of them "
                         f"also with Holm's correction for the {len(pairs)} comparisons (family-wise α 0.05, "
                         "two-sided bootstrap p).", ""]


def kinds_markdown(doc: dict) -> list[str]:
    """Each row's difference with ρ0 on the wild corpus, and each Table 2 row's full − row, split into
    the tasks that want a call and those that want none (`by_kind`); nothing when the tasks hold one kind."""
    shown = [(r, key, what) for r in doc["rows"] if not r.get("pending")
             for key, what in (("vs_rho0_wild_by_kind", "row − ρ0 wild"), ("full_minus_this_by_kind", "full − row"))
             if r.get(key)]
    if not shown:
        return []
    n = shown[0][0][shown[0][1]]
    lines = [f"**Calling and declining** (points, paired over tasks × seeds, 95% CI; calling: the {n['calling']['n']} "
             f"tasks that want a call; declining: the {n['declining']['n']} whose right answer is no call)", "",
             "| row | difference | calling | declining |", "|---|---|---|---|"]
    for r, key, what in shown:
        d = r[key]
        lines.append(f"| {r['label']} | {what} | {_signed(d['calling'])} | {_signed(d['declining'])} |")
    return lines + [""]


def add_per_task(doc: dict, cells: dict[str, list[dict]], golds: dict[str, list[dict | None]]) -> None:
    """Each computed row's per-task P and gold-call log-likelihood (task → mean over its seeds, on the
    tasks every seed scored) and its gold LL mean with an interval over tasks, in place; a row beside
    ρ0 on the wild corpus also gets its paired gold-LL difference with it (`gold_vs_rho0_wild`)."""
    per_seed_gold = {}
    for entry in doc["rows"]:
        row_cells = cells.get(entry["id"])
        if not row_cells:
            continue
        entry["per_task_P"] = {t: round(fmean(v), 6) for t, v in row_scores(row_cells).items()}
        g = golds.get(entry["id"]) or []
        if g and all(g):
            tasks = set.intersection(*(set(x["per_task"]) for x in g))
            entry["per_task_gold"] = {t: round(fmean(x["per_task"][t] for x in g), 6) for t in sorted(tasks)}
            per_seed_gold[entry["id"]] = {t: [x["per_task"][t] for x in g] for t in sorted(tasks)}
            entry["gold_ll"] = stats.mean_interval(per_seed_gold[entry["id"]]).to_json()
    wild = per_seed_gold.get("rho0-wild")
    for entry in doc["rows"]:
        mine = per_seed_gold.get(entry["id"])
        if wild is not None and mine is not None and entry["id"] != "rho0-wild" and len(next(iter(mine.values()))) == \
                len(next(iter(wild.values()))):
            entry["gold_vs_rho0_wild"] = stats.paired_difference(mine, wild)
        full = per_seed_gold.get(entry["id"].split(" ")[0]) if entry["table"] == 2 and " " in entry["id"] else None
        if full is not None and mine is not None and len(next(iter(mine.values()))) == len(next(iter(full.values()))):
            entry["gold_full_minus_this"] = stats.paired_difference(full, mine)   # Table 2: what the component moves


def _signed(e: dict) -> str:
    """A paired difference in points, signed: +1.2 [−0.4, +2.9]."""
    return f"{100 * e['value']:+.1f} [{100 * e['low']:+.1f}, {100 * e['high']:+.1f}]"


def _ci(e: dict | None, pct: bool = True) -> str:
    if e is None:
        return "n/a"
    f = (lambda x: f"{100 * x:.1f}") if pct else (lambda x: f"{x:+.2f}")
    return f"{f(e['value'])} [{f(e['low'])}, {f(e['high'])}]"


def markdown(doc: dict) -> str:
    """Table 1 and Table 2 (P in %, with 95% intervals) and the minimal detectable difference."""
    done = [r for r in doc["rows"] if not r.get("pending")]
    cats = sorted({c for r in done for c in r["per_category"]})
    s = doc["setting"]
    lines = [f"Quality benchmark: {s['benchmark']} {s['split']} ({doc['tasks']} tasks, balanced), profile "
             f"{s['profile']}, seeds {', '.join(map(str, s['seeds']))}; P = {s['metric']} in %, {doc['interval']}.", ""]
    for number, title in ((1, "Table 1"), (2, "Table 2 (ablations)")):
        rows = [r for r in doc["rows"] if r["table"] == number]
        if not rows:
            continue
        if number == 2:   # the full row above its ablations
            ablated = {r["id"].split(" ")[0] for r in rows}
            rows = [r for r in doc["rows"] if r["table"] == 1 and r["id"] in ablated] + rows
        with_oracle = number == 1 and any(r.get("vs_oracle") for r in rows)
        with_full = number == 2 and any(r.get("full_minus_this") for r in rows)
        header = ["row", "P [95% CI]", *cats, "Δ vs ρ0 wild [95% CI]", "gap recovered [95% CI]",
                  *(["Δ vs oracle [95% CI]"] if with_oracle else []), *(["full − row [95% CI]"] if with_full else [])]
        lines += [f"**{title}**", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for r in rows:
            if r.get("pending"):
                lines.append(f"| {r['label']} | pending |" + " |" * (len(header) - 2))
                continue
            per_cat = "".join((f"{100 * r['per_category'][c]['value']:.1f}" if c in r["per_category"] else "") + " | "
                              for c in cats)
            vs = r.get("vs_rho0_wild")
            gap = r.get("gap_recovered")
            shown = {"rho0-wild": "0 (reference)", "rho0-labeled": "1 (reference)"}.get(r["id"])
            if shown is None:
                shown = _ci(gap, pct=False) if gap else ("no gap" if "gap_recovered" in r else "—")
            vs_oracle = (" " + (_ci(r["vs_oracle"]) if r.get("vs_oracle") else "—") + " |") if with_oracle else ""
            vs_full = (" " + (_signed(r["full_minus_this"]) if r.get("full_minus_this") else "—") + " |") if with_full else ""
            lines.append(f"| {r['label']} | {_ci(r['P'])} | {per_cat}{_ci(vs) if vs else '—'} | {shown} |{vs_oracle}{vs_full}")
        lines.append("")
    lines += kinds_markdown(doc)
    lines += pairs_markdown(doc)
    gold = [r for r in done if r.get("gold_ll")]
    if gold:   # the continuous signal beside P (--gold)
        with_full = any(r.get("gold_full_minus_this") for r in gold)
        lines += ["**Gold-call log-likelihood** (nats/token; mean over tasks of the seeds' mean)", "",
                  "| row | gold LL [95% CI] | Δ vs ρ0 wild, paired [95% CI] |" + (" full − row, paired [95% CI] |" if with_full else ""),
                  "|---|---|---|" + ("---|" if with_full else "")]

        def nats(e: dict | None) -> str:
            return f"{e['value']:+.4f} [{e['low']:+.4f}, {e['high']:+.4f}]" if e else "—"
        for r in gold:
            lines.append(f"| {r['label']} | {nats(r['gold_ll'])} | {nats(r.get('gold_vs_rho0_wild'))} |"
                         + (f" {nats(r.get('gold_full_minus_this'))} |" if with_full else ""))
        lines.append("")
    lines.append(mdd_sentence(doc))
    if doc.get("proxy"):
        from experiments.quality import proxy

        lines += ["", proxy.markdown(doc["proxy"], {r["id"]: r["label"] for r in doc["rows"]})]
    return "\n".join(lines) + "\n"


def mdd_sentence(doc: dict) -> str:
    m = doc["minimal_detectable_difference"]
    if m["value"] is None:
        return "minimal detectable difference: no tasks"
    spread = (f"measured seed spread {m['seed_sd']:.3f}" if m["seed_sd_measured"]
              else "seed spread not measured: a lower bound")
    if m.get("shared"):
        spread += f", {m['shared']:.0%} of its variance shared by rows at the same seed"
    text = (f"minimal detectable difference in P between two rows (power 0.8, α 0.05, {doc['tasks']} tasks × "
            f"{len(doc['setting']['seeds'])} seeds, base rate {m['base_rate']:.3f}, {spread}): {100 * m['value']:.1f} points")
    e = doc.get("seed_effect")
    if e:   # what pairing the seeds (base/paired.py) rests on
        text += (f"\n\nthe training seed's effect shared by the {len(e['rows'])} Table 1 rows (rows × seeds analysis of "
                 f"variance): {e['shared']:.0%} of the seed variance, "
                 + (f"F({e['df'][0]}, {e['df'][1]}) {e['F']:.2f}, p {e['p']:.3g}" if e["F"] is not None
                    else "every row moved alike between seeds")
                 + f" (permutation p {e['p_permutation']:.3g}); the paired comparisons pair the seeds")
    return text


def plot(doc: dict, path: Path) -> None:
    """A dot per row with its 95% interval (one panel, Table 2 rows below Table 1)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in doc["rows"] if not r.get("pending")]
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(done) + 1.4))
    for y, r in enumerate(reversed(done)):
        p = r["P"]
        ax.errorbar(100 * p["value"], y, xerr=[[100 * (p["value"] - p["low"])], [100 * (p["high"] - p["value"])]],
                    fmt="o", color="tab:blue" if r["table"] == 1 else "tab:orange", capsize=3)
    # long labels wrapped, so the panel keeps its width and the axis label is not cut off
    ax.set_yticks(range(len(done)), [textwrap.fill(r["label"], 44) for r in reversed(done)], fontsize=8)
    s = doc["setting"]
    ax.set_xlabel(f"{s['metric']} on {doc['tasks']} {s['split']} tasks (%), 95% interval")
    ax.set_title(f"{s['benchmark']} · {s['profile']} · {len(s['seeds'])} seed(s)", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    tmp = path.with_name("." + path.name + ".tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    atomic_write(path, tmp.read_bytes())
    tmp.unlink()


def write(doc: dict, out: Path) -> dict[str, Path]:
    """quality.json, quality.md and quality.png in `out`, each replaced whole."""
    paths = {"json": out / "quality.json", "markdown": out / "quality.md", "png": out / "quality.png"}
    atomic_json(paths["json"], doc)
    atomic_write(paths["markdown"], markdown(doc))
    if any(not r.get("pending") for r in doc["rows"]):
        plot(doc, paths["png"])
    return paths


def spread(doc: dict, seeds_options: tuple[int, ...] = (1, 2, 3, 4),
           confidence: float = paired.CONFIDENCE) -> dict:
    """The run-to-run spread of P per row (same data, different training seeds) and the margin
    on ΔP that an acceptance with S seeds would need to beat that noise at `confidence` — counting
    only the part of it that the rows do not share when trained at the same seeds (`seed_effect`,
    measured where the table has enough rows and seeds; else 0: independent draws)."""
    effect = doc.get("seed_effect")
    shared = effect["shared"] if effect else 0.0
    rows = {}
    for r in doc["rows"]:
        if r.get("pending") or len(r["per_seed_P"]) < 2:
            continue
        sp = stats.seed_spread(r["per_seed_P"])
        rows[r["id"]] = {**sp, "margin_for_seeds": {s: paired.acceptance_margin(sp["sd"], s, confidence, shared)
                                                    for s in seeds_options}}
    return {"confidence": confidence, "rows": rows, "pooled_sd": doc["seed_sd"], "seed_effect": effect,
            "shared": shared}


def spread_text(result: dict, doc: dict) -> str:
    lines = [f"run-to-run spread of P ({doc['setting']['split']}, {doc['tasks']} tasks, one curation, "
             f"training seeds {', '.join(map(str, doc['setting']['seeds']))}):"]
    for rid, r in result["rows"].items():
        margins = ", ".join(f"{s} seed(s) {m:.3f}" for s, m in r["margin_for_seeds"].items())
        lines.append(f"  {rid}: P per seed {', '.join(f'{p:.3f}' for p in r['P'])}; sd {r['sd']:.3f}, "
                     f"range {r['range']:.3f}; acceptance margin on ΔP at {result['confidence']:.0%}: {margins}")
    if not result["rows"]:
        lines.append("  no row has two seeds yet")
    e = result.get("seed_effect")
    lines.append(f"  shared by the {len(e['rows'])} Table 1 rows at the same seed: {e['shared']:.0%} of the seed variance "
                 f"(permutation p {e['p_permutation']:.3g}); the margins count the rest" if e else
                 "  the seed effect the rows share is not measured (needs ≥ 3 Table 1 rows × 2 seeds or 2 × 3): "
                 "the margins treat the rows' seeds as independent draws")
    return "\n".join(lines)
