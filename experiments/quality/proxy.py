"""How well the loop's cheap proxy ranks strategies against the full recipe (issue 13, item 4).

The proxy is the one `curateevo run --candidates K` ranks candidates by (evolver.evaluation.proxy_scores): a short
SFT on the candidate's curated SFT records (`SFT_STEPS_PER_UNIT` steps per unit, no RL) and a
balanced dev subset of `TASKS_PER_UNIT` tasks per unit, training seed 0, memory as the row uses
it; its score is J = P − λ·C with the curation's C. Here each row of the quality benchmark gets
that score at the asked units, cached like a cell under CACHE/proxies/<key>/, and the rows'
proxy ranking is compared with their full-recipe ranking (mean P, and J with the same λ, over
the benchmark's seeds): Spearman's ρ, Kendall's τ, the share of row pairs ordered alike, and
whether the proxy's best row is the full recipe's best.
"""
from __future__ import annotations

import itertools
from pathlib import Path
from statistics import fmean

from base.files import atomic_json, read_json, read_jsonl
from base.objective import LAMBDA, objective
from sandbox.manifest import Manifest
from experiments.train_eval import PROXY_SFT_STEPS, PROXY_TASKS, evaluate_on, proxy_specs, train_on

SFT_STEPS_PER_UNIT = PROXY_SFT_STEPS
TASKS_PER_UNIT = PROXY_TASKS


def proxy_score(cells, row, units: int, seed: int = 0, compute: bool = True) -> dict:
    """The row's proxy at `units`: {"P", "C", "J", "tasks", "sft_steps"}, from the cache, else
    computed now (with `compute`; else P and J are None)."""
    from experiments.quality.cells import _key, _whole

    used = cells.inputs(row)
    # the loop's proxy (evolver.evaluation.proxy_scores): SFT only, then a small balanced dev subset
    train, evaluation = proxy_specs(cells.train_spec, cells.eval_spec.model_copy(update={"tasks": None}), units)
    steps, n_tasks = train.budget["sft_max_steps"], evaluation.tasks
    c = float(Manifest.read(cells.curation(row)).C)
    if used["sft"] is None:
        return {"P": None, "C": c, "J": None, "tasks": n_tasks, "sft_steps": steps, "why": "no SFT records"}
    memory = used["memory"]
    key = _key({"recipe": cells.recipe_of(train.budget), "sft": used["sft"][1], "seed": seed,
                "memory": memory and memory[1], "benchmark": evaluation.benchmark, "split": "dev", "tasks": n_tasks,
                "metric": evaluation.metric, "batch_size": evaluation.batch_size})
    out = cells.root / "proxies" / key
    if not (out / "proxy.json").is_file() and not compute:
        return {"P": None, "C": c, "J": None, "tasks": n_tasks, "sft_steps": steps, "why": "not computed yet"}
    if not (out / "proxy.json").is_file():
        def make(tmp: Path) -> None:
            train_on(train, {"sft": used["sft"][0], "rl": None, "memory": memory and memory[0]}, tmp / "train", seed)
            doc = evaluate_on(evaluation, "dev", tmp / "eval", base=cells.base, adapter=str(tmp / "train" / "adapter"),
                              memory=memory and memory[0], seed=seed)
            solved = sum(t["outcome"]["success"] for t in read_jsonl(tmp / "eval" / "trajectories.jsonl"))
            atomic_json(tmp / "proxy.json", {"key": key, "P": doc.P, "solved": solved, "tasks": len(doc.tasks),
                                             "sft_steps": steps, "seed": seed})

        _whole(out, make)
    doc = read_json(out / "proxy.json")
    return {"P": doc["P"], "C": c, "J": objective(doc["P"], c), "tasks": doc["tasks"], "sft_steps": steps}


def agreement(proxy: dict[str, float], full: dict[str, float]) -> dict:
    """How alike two scorings order the same rows: Spearman's ρ, Kendall's τ (None below 3 rows
    or with a constant scoring), concordant / discordant / tied pairs, and whether the best rows agree."""
    from scipy.stats import kendalltau, spearmanr

    ids = sorted(set(proxy) & set(full))
    a, b = [proxy[i] for i in ids], [full[i] for i in ids]
    pairs = {"concordant": 0, "discordant": 0, "tied": 0}
    for i, j in itertools.combinations(range(len(ids)), 2):
        s = (a[i] - a[j]) * (b[i] - b[j])
        pairs["concordant" if s > 0 else "discordant" if s < 0 else "tied"] += 1
    varied = len(ids) >= 3 and len(set(a)) > 1 and len(set(b)) > 1
    def best(scores: list[float]) -> str | None:
        return min(ids, key=lambda i: (-scores[ids.index(i)], i)) if ids else None

    return {"rows": ids, "n": len(ids), "pairs": pairs,
            "spearman": float(spearmanr(a, b).statistic) if varied else None,
            "kendall": float(kendalltau(a, b).statistic) if varied else None,
            "best_proxy": best(a), "best_full": best(b)}


def report(cells, rows, units: list[int], results: dict[str, list[dict]], compute: bool = True) -> dict:
    """Every row's proxy at each of `units` beside its full-recipe P and J, and the agreement of
    the orderings (rows with all their full cells only)."""
    scored, seen = {}, set()
    for row in rows:   # a strategy that curates what another row curates is one point, not two
        if row.ablations or not results.get(row.id) or cells.curation(row) in seen:
            continue
        seen.add(cells.curation(row))
        proxies = {str(u): proxy_score(cells, row, u, compute=compute) for u in units}
        p, c = fmean(cell["P"] for cell in results[row.id]), proxies[str(units[0])]["C"]
        scored[row.id] = {"full": {"P": p, "C": c, "J": objective(p, c)}, "proxy": proxies}
    out = {"definition": f"SFT only, {SFT_STEPS_PER_UNIT} steps and {TASKS_PER_UNIT} dev tasks per unit, seed 0; "
                         f"J = P − {LAMBDA}·C", "rows": scored, "agreement": {}}
    for u in units:
        got = {rid: s for rid, s in scored.items() if s["proxy"][str(u)]["P"] is not None}
        out["agreement"][str(u)] = {
            metric: agreement({rid: s["proxy"][str(u)][metric] for rid, s in got.items()},
                              {rid: s["full"][metric] for rid, s in got.items()}) for metric in ("P", "J")}
    return out


def markdown(doc: dict, labels: dict[str, str]) -> str:
    """The proxy's scores per row and its agreement with the full recipe, as a table and a sentence per unit."""
    units = list(doc["agreement"])
    lines = [f"**Proxy vs full recipe** (proxy: {doc['definition']}; full: the table's mean P over its seeds)", "",
             "| row | full P | full J | " + " | ".join(f"proxy P ({u}u) | proxy J ({u}u)" for u in units) + " |",
             "|" + "---|" * (3 + 2 * len(units))]
    def fmt(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.3f}"

    for rid, s in doc["rows"].items():
        cols = " | ".join(f"{fmt(s['proxy'][u]['P'])} | {fmt(s['proxy'][u]['J'])}" for u in units)
        lines.append(f"| {labels.get(rid, rid)} | {fmt(s['full']['P'])} | {fmt(s['full']['J'])} | {cols} |")
    lines.append("")
    for u in units:
        for metric in ("P", "J"):
            a = doc["agreement"][u][metric]
            rho = "n/a (fewer than 3 rows or a constant score)" if a["spearman"] is None else f"{a['spearman']:+.2f}"
            tau = "" if a["kendall"] is None else f", Kendall τ {a['kendall']:+.2f}"
            p = a["pairs"]
            lines.append(f"- {u} unit(s), {metric}: Spearman ρ {rho}{tau} over {a['n']} rows; pairs ordered alike "
                         f"{p['concordant']}, reversed {p['discordant']}, tied {p['tied']}; best by proxy "
                         f"{labels.get(a['best_proxy'], a['best_proxy'])}, by the full recipe "
                         f"{labels.get(a['best_full'], a['best_full'])}")
    return "\n".join(lines) + "\n"
