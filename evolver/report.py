"""`curateevo report RUN`: a static HTML page with PNG plots of a run.

P, C and J per epoch with accept/reject marks; the curated scale per epoch; the failure-family
shares of the diagnosis per epoch; the wall time per stage; a table of time and LLM tokens and
USD per stage; per evaluated candidate, the dev tasks it fixed and broke, tied to its edits and
the records it added or removed per operator (evolver/trace.py). Everything is read from the journal
and the epoch directories; nothing is recomputed.
"""
from __future__ import annotations

import html
import io
import json
from pathlib import Path

from base.files import atomic_write
from evolver.tables import STAGE_COLUMNS, dev_scope, epoch_rows, failed_stages, final_line, log_table, stage_table
from evolver.config import RunConfig
from evolver import report_sections
from experiments import journal
from evolver.diagnose import FAMILY_PREFIXES
from evolver.store import RunStore
from evolver.trace import outcome_table


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
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=9)
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
    used = [(r["epoch"], r["trained"].get("sft", 0) + r["trained"].get("rl", 0)) for r in rows if r.get("trained")]
    if used:   # what training used after the length limits and ablations, beside what was curated
        ax.plot([e for e, _ in used], [n for _, n in used], "x", color="crimson", ms=9, mew=2, label="SFT+RL trained")
    twin = ax.twinx()
    twin.plot(epochs, [r.get("cost_train") or 0 for r in rows], "k-o", label="Cost_train (turns)", ms=4)
    twin.set_ylabel("Cost_train")
    ax.set_ylim(0, max(bottom + [1]) * 1.12)   # headroom: the tallest bar and its marker stay whole
    twin.set_ylim(0, max([r.get("cost_train") or 0 for r in rows] + [1]) * 1.12)   # both axes from zero: 9% looks like 9%
    ax.set(xlabel="epoch", ylabel="records", title="curated scale per epoch", xticks=epochs)
    handles = [h for a in (ax, twin) for h in a.get_legend_handles_labels()[0]]
    labels = [t for a in (ax, twin) for t in a.get_legend_handles_labels()[1]]
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.12, 1), fontsize=9)   # outside: no bar hidden
    return fig


def _families_plot(store, rows, plt):
    shares = {}
    for r in rows:
        path = store.epoch_dir(r["epoch"]) / "diagnosis" / "signals.json"
        if path.exists():
            shares[r["epoch"]] = dict(json.loads(path.read_text())["families"])
    names = sorted({k for s in shares.values() for k in s})
    if not names:   # nothing diagnosed, or nothing failed: no empty plot (the page says why)
        return None
    fig, ax = plt.subplots(figsize=(7, 3.6))
    epochs = sorted(shares)
    bottom = [0.0] * len(epochs)
    cmap = plt.get_cmap("tab20")
    for i, name in enumerate(names):
        values = [shares[e].get(name, 0) for e in epochs]
        ax.bar(epochs, values, bottom=bottom, label=name, color=cmap(i % 20))
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set(xlabel="epoch (diagnosis of the best strategy)", ylabel="failed trajectories", title="failure families",
           xticks=epochs)
    ax.legend(fontsize=9, loc="center left", bbox_to_anchor=(1, 0.5))
    return fig


def _training_plot(store, rows, plt):
    """SFT loss and GRPO reward per step, one line per epoch (first seed), from train-s*/metrics.jsonl."""
    seed = RunConfig.from_json(store.config).seeds[0]
    curves = {}
    for r in rows:
        path = store.epoch_dir(r["epoch"]) / f"train-s{seed}" / "metrics.jsonl"
        if path.is_file():
            curves[r["epoch"]] = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not any(curves.values()):
        return None
    fig, (sft, grpo) = plt.subplots(1, 2, figsize=(11, 4))
    for epoch, points in curves.items():
        for ax, stage, key in ((sft, "sft", "loss"), (grpo, "grpo", "reward")):
            xs = [p["step"] for p in points if p.get("stage") == stage and key in p]
            if xs:   # a marker where a curve has few points (cpu-small trains one GRPO step: a line alone draws nothing)
                ax.plot(xs, [p[key] for p in points if p.get("stage") == stage and key in p], "-", lw=1.2,
                        marker="o" if len(xs) < 20 else None, ms=4, label=f"epoch {epoch}")
    sft.set(xlabel="SFT step", ylabel="loss", title="SFT loss")
    grpo.set(xlabel="GRPO step", ylabel="mean reward", title="GRPO reward")
    trained = {r["epoch"]: r.get("trained") or {} for r in rows}
    for ax, kind, what in ((sft, "sft", "SFT examples"), (grpo, "rl", "RL prompts")):
        ax.grid(alpha=0.3)
        steps = sorted({x for line in ax.lines for x in line.get_xdata()})
        if 0 < len(steps) <= 10:   # few steps: tick each (one step would otherwise get fractional ticks)
            ax.set_xticks(steps)
        if ax.lines:
            ax.legend(fontsize=9)
        else:   # an empty panel says why
            used = ", ".join(f"epoch {e}: {t.get(kind, '—')}" for e, t in trained.items())
            ax.text(0.5, 0.5, f"no {kind.upper()} step was trained\n{what} used: {used}\n(the log says what the "
                              "length limits or ablations dropped)", ha="center", va="center", fontsize=8,
                    transform=ax.transAxes, wrap=True)
    fig.tight_layout()
    return fig


def _wilson_cell(k: int, n: int) -> str:
    from experiments.quality.stats import wilson_interval

    if not n:
        return "—"
    est = wilson_interval(k, n)
    return f"{k}/{n} = {est.value:.2f} [{est.low:.2f}, {est.high:.2f}]"


def _f1_cell(tp: int, fp: int, fn: int) -> str:
    return f"{2 * tp / (2 * tp + fp + fn):.3f} ({tp} right, {fp} wrong, {fn} missed)" if tp + fp + fn else "—"


# metric → (the table's title, what a category's P counts from its per-category metrics block, a cell
# from the counts summed over seeds)
_COUNTS = {
    "task_success": ("task success, all seeds; 95% Wilson interval",
                     lambda m: (m.get("successes", 0), m.get("episodes", 0)), _wilson_cell),
    "turn_pass": ("turns passed, all seeds; 95% Wilson interval",
                  lambda m: (m.get("turns_passed", 0), m.get("turns", 0)), _wilson_cell),
    "step_accuracy": ("step items right, all seeds; 95% Wilson interval",
                      lambda m: (round((m.get("step_accuracy") or 0) * m.get("step_items", 0)), m.get("step_items", 0)),
                      _wilson_cell),
    "call_f1": ("call-level F1 over the held-out steps, all seeds",
                lambda m: (m.get("call_tp") or 0, m.get("call_fp") or 0, m.get("call_fn") or 0), _f1_cell),
}


def _category_table(store, rows) -> str:
    """P per category per epoch over all seeds, in the run's metric: passed / n and a 95% Wilson
    interval (call_f1 with its counts on next-call)."""
    cfg = RunConfig.from_json(store.config)
    title, count, cell = _COUNTS[cfg.metric]
    cells, names = {}, set()
    for r in rows:
        for s in cfg.seeds:
            path = store.epoch_dir(r["epoch"]) / f"eval-s{s}" / "metrics.json"
            if path.is_file():
                for name, m in json.loads(path.read_text())["per_category"].items():
                    counts = count(m)
                    got = cells.setdefault((r["epoch"], name), [0] * len(counts))
                    cells[(r["epoch"], name)] = [g + c for g, c in zip(got, counts)]
                    names.add(name)
    if not cells:
        return ""
    head = "".join(f"<th>{html.escape(n)}</th>" for n in sorted(names))
    body = ""
    for r in rows:
        tds = "".join(f"<td>{cell(*cells[(r['epoch'], name)])}</td>" if (r["epoch"], name) in cells else "<td>—</td>"
                      for name in sorted(names))
        body += f"<tr><td>{r['epoch']}</td>{tds}</tr>"
    return f"<h2>P per category ({title})</h2><table><tr><th>epoch</th>{head}</tr>{body}</table>"


def _revisions(store, rows) -> str:
    """Per proposed epoch: the proposer's commit messages (its reasoning) and the strategy diff
    against the best strategy it revised."""
    from workspace.repository import Workspace

    ws = Workspace.open(store.root / "strategy")
    best, parts = None, []
    for r in rows:
        commit = r.get("commit")
        if r["epoch"] > 0 and commit and best:
            messages = []
            for row in ws.log(commit):
                if row["sha"] == best:
                    break
                messages.append(row["message"])
            diff = ws.diff(best, commit, include_inputs=False) or "(no code change)"
            verdict = "accepted" if r.get("accepted") else "rejected"
            parts.append(f"<details><summary>epoch {r['epoch']} ({verdict}): {html.escape(messages[-1].splitlines()[0] if messages else '')}"
                         f"</summary><pre>{html.escape(chr(10).join(reversed(messages)))}</pre>"
                         f"<pre class=\"diff\">{_coloured_diff(diff)}</pre></details>")
        if r.get("accepted") or r["epoch"] == 0:
            best = commit if r.get("accepted") else best
    return "<h2>Strategy revisions</h2>" + "".join(parts) if parts else ""


def _coloured_diff(diff: str) -> str:
    """A unified diff as HTML: added lines green, removed red, hunk headers blue."""
    def line(text: str) -> str:
        kind = ("file" if text.startswith(("+++", "---", "diff ", "index ")) else "add" if text.startswith("+") else
                "del" if text.startswith("-") else "hunk" if text.startswith("@@") else None)
        return f'<span class="{kind}">{html.escape(text)}</span>' if kind else html.escape(text)
    return "\n".join(line(t) for t in diff.splitlines())


def _html_table(columns, body, kind: str) -> str:
    """A text table (columns: name, width; a negative width is left-aligned) as an HTML table."""
    head = "".join(f"<th>{html.escape(name)}</th>" for name, _ in columns)
    rows = "".join("<tr>" + "".join(f'<td class="{"l" if w < 0 else "n"}">{html.escape(c)}</td>'
                                    for c, (_, w) in zip(cells, columns)) + "</tr>" for cells in body)
    return f'<table class="{kind}"><tr>{head}</tr>{rows}</table>'


def _epoch_table(store, rows) -> str:
    """The `log` table as an HTML table, its notes (footnotes, dev size, warnings, why a figure is "—") once, under it."""
    columns, body, notes = log_table(store)
    notes += report_sections.missing_notes(store, rows)
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in notes)
    return _html_table(columns, body, "epochs") + (f'<ul class="notes">{notes}</ul>' if notes else "")


def _failed_label(trajectory: dict) -> str:
    """A failed task's id; a next-call record's with the verdict of its first wrong answer."""
    meta = trajectory["meta"]
    error = str((meta.get("feedback") or {}).get("error_type") or "")
    for prefix in FAMILY_PREFIXES:
        error = error.removeprefix(prefix)
    return f"{meta['task_id']} ({error})" if "steps" in meta and error else meta["task_id"]


def _failures(store, rows) -> str:
    """Links to each evaluated epoch's trajectories and the ids of its failed tasks (on a
    step_accuracy run: its step items, and the tasks of the wrong ones)."""
    cfg = RunConfig.from_json(store.config)
    if cfg.metric == "step_accuracy":
        return _failed_steps(store, rows, cfg.seeds)
    items = ""
    for r in rows:
        for s in cfg.seeds:
            path = store.epoch_dir(r["epoch"]) / f"eval-s{s}" / "trajectories.jsonl"
            if path.is_file():
                failed = [_failed_label(t) for t in map(json.loads, path.read_text().splitlines())
                          if not (t.get("outcome") or {}).get("success")]
                link = f"../epochs/{r['epoch']}/eval-s{s}/trajectories.jsonl"
                items += (f"<li>epoch {r['epoch']} seed {s}: <a href=\"{link}\">trajectories</a> — {len(failed)} failed"
                          f"{': ' + html.escape(', '.join(failed[:12])) + (' …' if len(failed) > 12 else '') if failed else ''}</li>")
    return f"<h2>Failed trajectories</h2><ul>{items}</ul>" if items else ""


def _failed_steps(store, rows, seeds) -> str:
    """A step_accuracy run's misses: per evaluation, the step items judged wrong and their tasks."""
    items = ""
    for r in rows:
        for s in seeds:
            path = store.epoch_dir(r["epoch"]) / f"eval-s{s}" / "steps.jsonl"
            if path.is_file():
                steps = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
                wrong = [x for x in steps if x.get("correct", 0) < 1]
                tasks = sorted({x["task_id"] for x in wrong})
                link = f"../epochs/{r['epoch']}/eval-s{s}/steps.jsonl"
                items += (f"<li>epoch {r['epoch']} seed {s}: <a href=\"{link}\">step items</a> — {len(wrong)} of "
                          f"{len(steps)} wrong" + (f", in {html.escape(', '.join(tasks[:12]))}"
                                                   f"{' …' if len(tasks) > 12 else ''}" if tasks else "") + "</li>")
    return f"<h2>Failed step items</h2><ul>{items}</ul>" if items else ""


def _missing_plots(store, rows, plots) -> str:
    """Why a plot is absent, in a sentence each (an empty plot says nothing)."""
    cfg = RunConfig.from_json(store.config)
    notes = []
    if plots.get("families.png") is None:
        diagnosed = [r["epoch"] for r in rows if (store.epoch_dir(r["epoch"]) / "diagnosis" / "signals.json").exists()]
        if cfg.metric == "step_accuracy":   # whatever was diagnosed: no episode ever fails here
            why = (f"the dev benchmark {cfg.benchmark} is scored by step_accuracy on step items, not on episodes, so "
                   "there is no failed trajectory to put in a family; the wrong step items are listed under "
                   "“Failed step items”")
        elif not diagnosed:
            why = "no epoch was diagnosed (the diagnosis runs after every epoch but the last)"
        else:
            why = "the diagnosed evaluations had no failed trajectory"
        notes.append(f"No failure-family plot: {why}.")
    if plots.get("training.png") is None:
        notes.append("No training curves: no epoch wrote training metrics (nothing was trained; see the log's "
                     "SFT/RL/mem, which counts what training used).")
    return "".join(f"<p><i>{html.escape(n)}</i></p>" for n in notes)


def _header(store, rows) -> str:
    """The run's setting with the real dev size and the run's wall time."""
    from evolver.tables import stage_rows

    cfg = store.config
    started = [e.time for e in store.journal.events() if e.time]
    wall = ""
    if len(started) > 1:
        import datetime

        seconds = (datetime.datetime.fromisoformat(started[-1]) - datetime.datetime.fromisoformat(started[0])).total_seconds()
        staged = sum(r["seconds"] or 0 for r in stage_rows(store))
        wall = (f" · wall time {seconds / 60:.1f} min from the first to the last journal event "
                f"({staged / 60:.1f} min inside stages; process start-up and the corpus check before epoch 0 are not journaled)")
    scope, train = dev_scope(cfg), RunConfig.from_json(cfg).train
    return (f"<p>{cfg['epochs']} epochs · dev benchmark {html.escape(cfg['benchmark'])} ({html.escape(cfg['metric'])}, "
            f"{scope}) · base {html.escape(train.base)} · profile {html.escape(train.profile)} · "
            f"λ = {cfg['lambda']} · N_ref = {cfg['n_ref']:g}{wall}</p>")


def _time_plot(rows, plt):
    order = ["curate", "train", "evaluate", "sample", "decide", "diagnose", "propose"]
    rank = lambda s: (order.index(s.split("-")[0]) if s.split("-")[0] in order else len(order), s)   # noqa: E731
    stages = sorted({s for r in rows for s in r["seconds"]}, key=rank)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    epochs = [r["epoch"] for r in rows]
    bottom = [0.0] * len(rows)
    for stage in stages:
        values = [r["seconds"].get(stage, 0) / 60 for r in rows]
        ax.bar(epochs, values, bottom=bottom, label=stage)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set(xlabel="epoch", ylabel="minutes", title="wall time per stage", xticks=epochs)
    if stages:
        ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


def _llm_line(cfg) -> str:
    llm = cfg.get("llm")
    if not llm:
        return f"none (proposer {cfg.get('proposer', 'offline')}, rule-based diagnosis)"
    budget = ", ".join(f"{k} {llm[k]}" for k in ("budget_tokens", "budget_usd") if llm.get(k) is not None) or "no budget"
    return (f"{llm['provider']} {llm['model']}{' at ' + llm['base_url'] if llm.get('base_url') else ''} · mode {llm['mode']} · "
            f"{budget} · proposer {cfg.get('proposer')} · diagnosis {cfg.get('diagnosis')}")


def _curation_costs(rows: list[dict]) -> str:
    """Per epoch: the curation's wall time (executing, checking), ctx.llm tokens, and both per 1K
    retained turns (the paper's Figure 3). A candidate's curation is its dry run, made while the
    previous epoch proposed it: these are its own seconds, not the stage's."""
    body = ""
    for r in rows:
        c = r.get("curation")
        if not c:
            continue
        f = (lambda v, p=2: "—" if v is None else f"{v:.{p}f}")
        body += (f"<tr><td>{r['epoch']}</td><td>{c['retained_turns']}</td><td>{f(c['seconds'])}</td>"
                 f"<td>{f(c['execute_s'])}</td><td>{f(c['check_s'])}</td><td>{c['llm_tokens']}</td>"
                 f"<td>{f(c['seconds_per_1k_turns'], 3)}</td><td>{f(c['llm_tokens_per_1k_turns'], 1)}</td></tr>")
    if not body:
        return ""
    head = "".join(f"<th>{h}</th>" for h in ("epoch", "retained turns", "curation s", "execute s", "check s",
                                               "ctx.llm tokens", "s / 1K turns", "tokens / 1K turns"))
    return f"<h2>Curation cost</h2><table><tr>{head}</tr>{body}</table>"


def _test_readings(store: RunStore) -> str:
    """Every reading of the test split the journal holds; more than one is said plainly."""
    readings = journal.of_kind(store.journal.events(), journal.Tested)
    if not readings:
        return ""
    items = "".join(f"<li>reading {n}: epoch {e.epoch}'s strategy, {html.escape(str(e.metric))} "
                    f"P = {e.P} ({html.escape(str(e.time or ''))})</li>" for n, e in enumerate(readings, 1))
    warn = (f"<p><b>The test split was read {len(readings)} times</b> (`test --again`): only the first reading is "
            "a held-out result.</p>") if len(readings) > 1 else ""
    return f"<h2>Test split</h2>{warn}<ul>{items}</ul>{_versus_rho0(store)}"


def _versus_rho0(store: RunStore) -> str:
    """The last reading's answer to "did evolution help?": ρ0 and the final strategy, paired (evolver/tested.py)."""
    from evolver import tested

    doc = tested.read(store.root)
    if doc is None:
        return "<p><i>This reading did not pair the final strategy with ρ0 (tested before `test` did).</i></p>"
    columns = [(name, -1 if i == 0 else 1) for i, name in enumerate(tested.HEADER)]
    seeds = f"{doc['seeds']} training seeds, paired over tasks × seeds" if doc["seeds"] > 1 else "one training seed, paired over tasks"
    return (f"<p>Did evolution help? The final strategy (epoch {doc['epoch']}) against ρ0 (epoch 0, no curation) on "
            f"the test split, P in %, 95% intervals, {seeds} ({html.escape(doc['how'])}):</p>"
            + _html_table(columns, tested.rows(doc), "versus"))


def write_report(run: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    store = RunStore.open(run)
    rows = epoch_rows(store)
    out = store.root / "report"
    plots = {"objective.png": _objective_plot(rows, plt), "scale.png": _scale_plot(rows, plt),
             "families.png": _families_plot(store, rows, plt), "training.png": _training_plot(store, rows, plt),
             "time.png": _time_plot(rows, plt)}
    for name, fig in plots.items():
        if fig is not None:
            atomic_write(out / name, _png(fig))
            plt.close(fig)
    cfg = store.config
    reasons = "".join(f"<li>epoch {r['epoch']}: {html.escape(r.get('reason') or r.get('failed') or '')}</li>" for r in rows)
    reasons += "".join(f"<li>epoch {f['epoch']} · {html.escape(str(f['stage']))} failed: {html.escape(f['error'])}</li>"
                       for f in failed_stages(store))
    reasons += f"<li><b>{html.escape(final_line(store))}</b></li>" if final_line(store) else ""
    images = "".join(f'<img src="{name}" alt="{name}">' for name, fig in plots.items() if fig is not None)
    page = f"""<!doctype html><meta charset="utf-8"><title>curateevo run {html.escape(store.root.name)}</title>
<style>body{{font:15px system-ui,sans-serif;max-width:1150px;margin:2em auto;padding:0 1em;color:#222}}
img{{display:block;max-width:100%;margin:1em 0}}pre{{background:#f6f6f6;padding:1em;overflow-x:auto;font-size:13px}}
pre.diff{{white-space:pre-wrap;overflow-wrap:anywhere}}.add{{color:#116611;background:#e6ffec}}.del{{color:#a11;background:#ffebe9}}
.hunk{{color:#0550ae}}.file{{font-weight:bold}}table{{border-collapse:collapse;margin:.5em 0}}
td,th{{border:1px solid #ddd;padding:3px 8px;font-size:13px}}th{{background:#f3f3f3}}td.n{{text-align:right;font-variant-numeric:tabular-nums}}
ul.notes{{font-size:13px;color:#555}}table.answers td{{vertical-align:top;max-width:420px;overflow-wrap:anywhere}}</style>
<h1>Run {html.escape(store.root.name)}</h1>
{_header(store, rows)}
{_epoch_table(store, rows)}
{report_sections.corpus_section(store, rows)}
{images}
{_missing_plots(store, rows, plots)}
<h2>Time and LLM usage per stage</h2>
<p>LLM: {html.escape(_llm_line(cfg))}</p>
{_html_table(STAGE_COLUMNS, stage_table(store), "stages")}
<h2>Decisions</h2><ul>{reasons}</ul>
{_curation_costs(rows)}
{_test_readings(store)}
{_category_table(store, rows)}
{report_sections.per_tool_section(store, rows)}
{outcome_table(store)}
{_revisions(store, rows)}
{_failures(store, rows)}
{report_sections.failed_answers_section(store, rows)}
"""
    atomic_write(out / "index.html", page)
    return out / "index.html"


def cmd_report(args) -> int:
    print(write_report(Path(args.run)))
    return 0


def add_cli(sub) -> None:
    p = sub.add_parser("report", help="static HTML + PNG plots of a run")
    p.add_argument("run", help="the run directory (runs/<name>)")
    p.set_defaults(func=cmd_report)
