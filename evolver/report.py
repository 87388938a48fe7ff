"""`curateevo report RUN`: a static HTML page with PNG plots of a run.

P, C and J per epoch with accept/reject marks; the curated scale per epoch; the failure-family
shares of the diagnosis per epoch; the wall time per stage; a table of time and LLM tokens and
USD per stage. Everything is read from the journal
and the epoch directories; nothing is recomputed.
"""
from __future__ import annotations

import html
import io
import json
from pathlib import Path

from evolver.files import atomic_write
from evolver.tables import epoch_rows, failed_stages, format_log, format_stages
from evolver.store import RunStore


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    return buffer.getvalue()


def _objective_plot(rows, plt):
    fig, ax = plt.subplots(figsize=(7, 3.6))
    epochs = [r["epoch"] for r in rows]
    for key, style in (("P", "-o"), ("C", "--s"), ("J", "-D")):
        ax.plot(epochs, [r.get(key) if r.get(key) is not None else float("nan") for r in rows], style, label=key, lw=1.5, ms=4)
    for r in rows:
        if r.get("J") is not None:
            ax.annotate("✓" if r.get("accepted") else "✗", (r["epoch"], r["J"]), textcoords="offset points", xytext=(0, 8),
                        ha="center", color="green" if r.get("accepted") else "red", fontsize=12)
    ax.set(xlabel="epoch", title="dev performance P, cost C and objective J = P − λC", xticks=epochs)
    ax.legend(loc="best")
    ax.grid(alpha=0.3)
    return fig


def _scale_plot(rows, plt):
    fig, ax = plt.subplots(figsize=(7, 3.6))
    epochs = [r["epoch"] for r in rows]
    bottom = [0] * len(rows)
    for name, color in (("sft.jsonl", "#4C72B0"), ("rl.jsonl", "#DD8452"), ("memory.jsonl", "#55A868")):
        values = [(r.get("scale") or {}).get(name, 0) for r in rows]
        ax.bar(epochs, values, bottom=bottom, label=name.split(".")[0].upper(), color=color)
        bottom = [b + v for b, v in zip(bottom, values)]
    twin = ax.twinx()
    twin.plot(epochs, [r.get("cost_train") or 0 for r in rows], "k-o", label="Cost_train (turns)", ms=4)
    twin.set_ylabel("Cost_train")
    ax.set(xlabel="epoch", ylabel="records", title="curated scale per epoch", xticks=epochs)
    ax.legend(loc="upper left")
    twin.legend(loc="upper right")
    return fig


def _families_plot(store, rows, plt):
    shares = {}
    for r in rows:
        path = store.epoch_dir(r["epoch"]) / "diagnosis" / "signals.json"
        if path.exists():
            families = json.loads(path.read_text())["families"]
            total = sum(families.values()) or 1
            shares[r["epoch"]] = {k: v / total for k, v in families.items()}
    if not shares:
        return None
    names = sorted({k for s in shares.values() for k in s})
    fig, ax = plt.subplots(figsize=(7, 3.6))
    epochs = sorted(shares)
    bottom = [0.0] * len(epochs)
    cmap = plt.get_cmap("tab20")
    for i, name in enumerate(names):
        values = [shares[e].get(name, 0) for e in epochs]
        ax.bar(epochs, values, bottom=bottom, label=name, color=cmap(i % 20))
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set(xlabel="epoch (diagnosis of the best strategy)", ylabel="share of failures", title="failure families", xticks=epochs)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1, 0.5))
    return fig


def _time_plot(rows, plt):
    stages = sorted({s for r in rows for s in r["seconds"]}, key=lambda s: ["curate", "train", "evaluate", "decide",
                                                                              "diagnose", "propose"].index(s.split("-")[0]))
    fig, ax = plt.subplots(figsize=(7, 3.6))
    epochs = [r["epoch"] for r in rows]
    bottom = [0.0] * len(rows)
    for stage in stages:
        values = [r["seconds"].get(stage, 0) / 60 for r in rows]
        ax.bar(epochs, values, bottom=bottom, label=stage)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set(xlabel="epoch", ylabel="minutes", title="wall time per stage", xticks=epochs)
    ax.legend(fontsize=8)
    return fig


def _llm_line(cfg) -> str:
    llm = cfg.get("llm")
    if not llm:
        return f"none (proposer {cfg.get('proposer', 'offline')}, rule-based diagnosis)"
    budget = ", ".join(f"{k} {llm[k]}" for k in ("budget_tokens", "budget_usd") if llm.get(k) is not None) or "no budget"
    return (f"{llm['provider']} {llm['model']}{' at ' + llm['base_url'] if llm.get('base_url') else ''} · mode {llm['mode']} · "
            f"{budget} · proposer {cfg.get('proposer')} · diagnosis {cfg.get('diagnosis')}")


def write_report(run: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    store = RunStore.open(run)
    rows = epoch_rows(store)
    out = store.root / "report"
    plots = {"objective.png": _objective_plot(rows, plt), "scale.png": _scale_plot(rows, plt),
             "families.png": _families_plot(store, rows, plt), "time.png": _time_plot(rows, plt)}
    for name, fig in plots.items():
        if fig is not None:
            atomic_write(out / name, _png(fig))
            plt.close(fig)
    cfg = store.config
    reasons = "".join(f"<li>epoch {r['epoch']}: {html.escape(r.get('reason') or r.get('failed') or '')}</li>" for r in rows)
    reasons += "".join(f"<li>epoch {f['epoch']} · {html.escape(str(f['stage']))} failed: {html.escape(f['error'])}</li>"
                       for f in failed_stages(store))
    images = "".join(f'<img src="{name}" alt="{name}">' for name, fig in plots.items() if fig is not None)
    page = f"""<!doctype html><meta charset="utf-8"><title>curateevo run {html.escape(store.root.name)}</title>
<style>body{{font:14px system-ui,sans-serif;max-width:1100px;margin:2em auto}}img{{max-width:49%}}pre{{background:#f6f6f6;padding:1em}}</style>
<h1>Run {html.escape(store.root.name)}</h1>
<p>{cfg['epochs']} epochs · dev benchmark {html.escape(cfg['benchmark'])} ({html.escape(cfg['metric'])}, {cfg['tasks']} tasks) ·
base {html.escape(cfg['base'])} · profile {html.escape(cfg['profile'])} · λ = {cfg['lambda']} · N_ref = {cfg['n_ref']:g}</p>
<pre>{html.escape(format_log(store))}</pre>
{images}
<h2>Time and LLM usage per stage</h2>
<p>LLM: {html.escape(_llm_line(cfg))}</p>
<pre>{html.escape(format_stages(store))}</pre>
<h2>Decisions</h2><ul>{reasons}</ul>
"""
    atomic_write(out / "index.html", page)
    return out / "index.html"


def cmd_report(args) -> int:
    print(write_report(Path(args.run)))
    return 0


def add_cli(sub) -> None:
    p = sub.add_parser("report", help="static HTML + PNG plots of a run")
    p.add_argument("run")
    p.set_defaults(func=cmd_report)
