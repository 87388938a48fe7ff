"""`curateevo trace RUN --record ID | --task TASK`: lineage questions asked of a run, and the
per-epoch outcome table `report` shows (evolver/lineage.py computes the deltas).

--record ID (a record id, `kind:id`, or a raw id): raw ids → operator steps (name, parameters,
how) → the record in each epoch's artifacts (its strategy commit) → the epochs that trained on it;
and the epochs whose strategy dropped it, with the operator that noted the drop.
--task TASK (a dev task id, or the task id a next-call corpus published its held-out records with:
tau-bench `1`, a tau2 task id): its outcome per evaluated epoch and seed (pass, or the failure family)
and, where it changed against the parent, the edits and the records near it that the edit added or
removed; an id it cannot find gets the valid ones listed (the first SHOWN_IDS).
"""
from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Mapping, Sequence

from evolver.config import RunConfig
from base.errors import UserError
from evolver.lineage import artifact_index, decisions, drop_notes, evaluated_tasks, failure_family, outcome_deltas
from evolver.store import RunStore
from sandbox.manifest import Manifest


def step_text(step: Mapping) -> str:
    params = step.get("params") or {}
    args = ", ".join(f"{k}={params[k]!r}" for k in sorted(params))
    return f"{step['op']}({args}) {step['how']}"


def _epochs(store: RunStore) -> list[int]:
    root = store.root / "epochs"
    return sorted(int(p.name) for p in root.iterdir() if p.name.isdigit()) if root.is_dir() else []


def _trained(store: RunStore, epoch: int, seeds: Sequence[int]) -> list[int]:
    return [s for s in seeds if store.done(epoch, f"train-s{s}") is not None]


def _sft_use(store: RunStore, epoch: int, seeds: Sequence[int], line: int | None) -> str:
    """Whether the SFT record on line `line` of the epoch's sft.jsonl was reached by each seed's
    training budget (the trainer records the lines its steps used); "not trained" without a training."""
    reached, missed, unknown = [], [], []
    for seed in _trained(store, epoch, seeds):
        trained = store.done(epoch, f"train-s{seed}")
        sft = (((trained.result if trained else None) or {}).get("summary") or {}).get("sft") or {}
        lines, seen = sft.get("records_reached"), sft.get("epochs_seen")
        if lines is not None and line is not None:
            (reached if line in lines else missed).append((seed, seen))
        elif seen is not None and seen < 1:   # a run trained before the lines were recorded: which is unknown
            unknown.append((seed, seen))
        else:
            reached.append((seed, seen))
    seeds_of = lambda rows: ", ".join(str(s) for s, _ in rows)   # noqa: E731
    parts = [f"trained (seed {seeds_of(reached)})"] if reached else []
    if missed:
        parts.append(f"not reached by the training budget (seed {seeds_of(missed)}: it saw {missed[0][1]}× of the SFT set)")
    if unknown:
        parts.append(f"in the SFT set, of which seed {seeds_of(unknown)} saw {unknown[0][1]}× (which records: not recorded)")
    return "; ".join(parts) or "not trained"


def trace_record(store: RunStore, wanted: str) -> list[str]:
    """The chain of every record whose id (or `kind:id`) is `wanted`, or that was made from raw id `wanted`."""
    seeds = RunConfig.from_json(store.config).seeds
    verdicts = {d["epoch"]: d for d in decisions(store)}
    chains: dict[tuple, dict] = {}   # (kind, id, steps) → first sighting and the epochs holding it
    dropped = []   # (epoch, commit, kind, operator) of the epochs whose strategy noted it dropped `wanted`
    for epoch in _epochs(store):
        folder = store.epoch_dir(epoch) / "artifacts"
        if not Manifest.exists(folder):
            continue
        commit = Manifest.read(folder).strategy.commit or "?"
        dropped += [(epoch, commit, kind, op) for (kind, rid), op in drop_notes(folder).items()
                    if wanted in (rid, f"{kind}:{rid}")]
        index = artifact_index(folder)
        sft_lines = {key: n for n, key in enumerate(k for k in index if k.startswith("sft:"))}   # file order
        for key, r in index.items():
            if wanted not in (key, r["id"]) and wanted not in r["origin"]:
                continue
            chain = chains.setdefault((r["kind"], r["id"], json.dumps(r["steps"], sort_keys=True)),
                                      {"record": r, "epochs": []})
            chain["epochs"].append((epoch, commit, sft_lines.get(key)))
    if not chains and not dropped:
        raise UserError(f"no artifact of {store.root} holds a record {wanted!r} or one made from raw id {wanted!r}")
    lines = []
    for (kind, rid, _), chain in sorted(chains.items(), key=lambda kv: (kv[1]["epochs"][0][0], kv[0][:2])):
        r = chain["record"]
        lines.append(f"{kind}:{rid}")
        lines.append(f"  raw: {', '.join(r['origin']) or '(none named)'}")
        lines.append("  made by: " + " → ".join(step_text(s) for s in r["steps"]))
        for epoch, commit, line in chain["epochs"]:
            d = verdicts.get(epoch) or {}
            trained = _trained(store, epoch, seeds) if kind != "memory" else []
            use = (_sft_use(store, epoch, seeds, line) if trained and kind == "sft" else
                   f"trained (seed {', '.join(map(str, trained))})" if trained else
                   "retrieved as memory" if kind == "memory" and d.get("P") is not None else "not trained")
            verdict = "" if "accepted" not in d else (" accepted" if d["accepted"] else " rejected")
            lines.append(f"  epoch {epoch}: strategy {commit[:10]}, {use}{verdict}"
                         + (f", P = {d['P']:.4f}" if isinstance(d.get("P"), (int, float)) else ""))
    for epoch, commit, kind, op in dropped:
        what = "the raw trajectory" if kind == "raw" else f"the {kind} record"
        lines.append(f"epoch {epoch}: strategy {commit[:10]} dropped {what} {wanted} ({op})")
    return lines


SHOWN_IDS = 20
"""How many valid dev task ids `trace --task` lists when it cannot find the one given."""


def dev_tasks(store: RunStore, seeds: Sequence[int]) -> dict[str, str | None]:
    """Every evaluated dev task id → the task id it was published with (next-call: a held-out record's
    `meta.published_task_id`), or None."""
    named: dict[str, str | None] = {}
    for epoch in _epochs(store):
        for seed in seeds:
            for tid, t in evaluated_tasks(store, epoch, seed).items():
                named[tid] = named.get(tid) or (t.get("meta") or {}).get("published_task_id")
    return named


def _published_in_corpus(store: RunStore, ids) -> dict[str, str]:
    """Our id → the task id the run's corpus published it with, for the ids it holds ({} when the
    corpus cannot be read again, or names none)."""
    from corpora import load_corpus
    from corpora.split import task_id

    cfg = RunConfig.from_json(store.config)
    if not cfg.corpus:
        return {}
    try:
        records = load_corpus(list(cfg.corpus), on_error=cfg.on_error).records
    except (UserError, OSError):
        return {}
    wanted = set(ids)
    return {r["id"]: task_id(r) for r in records if r["id"] in wanted and task_id(r) is not None}


def resolve_task(store: RunStore, task: str, seeds: Sequence[int]) -> list[str]:
    """The dev task ids `task` names: itself when the run evaluated it, else the held-out records
    published with task id `task` (tau-bench `1`, a tau2 task id); UserError listing valid ids."""
    named = dev_tasks(store, seeds)
    if task in named:
        return [task]
    if named and all(v is None for v in named.values()):   # evaluated before trajectories named it: the corpus says
        named.update(_published_in_corpus(store, named))
    records = sorted(i for i, published in named.items() if published == task)
    if records:
        return records
    if not named:
        raise UserError(f"no epoch of {store.root} was evaluated yet, so it has no dev task {task!r} to trace")
    shown = [i + (f" (task {named[i]})" if named[i] else "") for i in sorted(named)[:SHOWN_IDS]]
    more = f" … ({len(named)} in all)" if len(named) > SHOWN_IDS else ""
    raise UserError(f"no evaluated epoch of {store.root} has a dev task {task!r}, as the run names it or as its "
                    f"corpus published it; its dev tasks: {', '.join(shown)}{more}")


def trace_task(store: RunStore, task: str) -> list[str]:
    """The task's outcome per evaluated epoch and seed, and the edits and records near each change;
    a published task id traces each held-out record of that task in turn."""
    seeds = RunConfig.from_json(store.config).seeds
    ids = resolve_task(store, task, seeds)
    if ids == [task]:
        return _task_lines(store, task, seeds)
    lines = [f"task {task} as its corpus published it: {len(ids)} held-out record(s), {', '.join(ids)}"]
    for rid in ids:
        lines += [f"record {rid}:"] + ["  " + line for line in _task_lines(store, rid, seeds)]
    return lines


def _task_lines(store: RunStore, task: str, seeds: Sequence[int]) -> list[str]:
    rows = decisions(store)
    deltas = {d["epoch"]: d for d in outcome_deltas(store, seeds)}
    lines = []
    for d in rows:
        if d.get("P") is None:
            continue
        parts = []
        for seed in seeds:
            t = evaluated_tasks(store, d["epoch"], seed).get(task)
            if t is not None:
                parts.append(f"seed {seed}: " + ("pass" if t["outcome"]["success"] else f"fail ({failure_family(t)})"))
        verdict = "accepted" if d.get("accepted") else "rejected"
        lines.append(f"epoch {d['epoch']} ({verdict}, P = {d['P']:.4f}): " + ("; ".join(parts) or "not evaluated"))
        delta = deltas.get(d["epoch"])
        for change in ("fixed", "broken"):
            for row in (delta or {}).get(change, ()):
                if row["task"] != task:
                    continue
                lines.append(f"  {change} against epoch {delta['parent']} (seed {row['seed']}: "
                             f"{row['family_before'] or 'pass'} → {row['family_after'] or 'pass'}) by edits: "
                             f"{'; '.join(delta['edits']) or '(none named)'}")
                for what in ("added", "removed", "changed"):
                    for op, near in row["near"][what].items():
                        lines.append(f"    {what} {near['count']} record(s) by {op} near it: {', '.join(near['ids'])}"
                                     + (" …" if near["count"] > len(near["ids"]) else ""))
    return lines


def outcome_rows(store: RunStore) -> list[dict]:
    return outcome_deltas(store, RunConfig.from_json(store.config).seeds)


def outcome_table(store: RunStore) -> str:
    """`report`'s table: per evaluated candidate, edit → fixed / broken tasks → records per operator."""
    deltas = outcome_rows(store)
    if not deltas:
        return ""

    def tasks(rows):
        return "<br>".join(html.escape(f"{r['task']} (s{r['seed']}: {r['family_before'] or 'pass'} → "
                                       f"{r['family_after'] or 'pass'}; near: "
                                       f"{', '.join(sorted({op for p in r['near'].values() for op in p})) or '—'})")
                           for r in rows) or "—"

    def ops(counts, sign):
        return "<br>".join(html.escape(f"{op} {sign}{n}") for op, n in counts.items()) or "—"
    body = "".join(
        f"<tr><td>{d['epoch']} ← {d['parent']}</td><td>{'accepted' if d['accepted'] else 'rejected'}</td>"
        f"<td>{'<br>'.join(html.escape(e) for e in d['edits']) or '—'}</td><td>{tasks(d['fixed'])}</td>"
        f"<td>{tasks(d['broken'])}</td><td>{ops(d['records']['added'], '+')}</td>"
        f"<td>{ops(d['records']['removed'], '−')}</td><td>{ops(d['records']['changed'], '~')}</td></tr>" for d in deltas)
    return ("<h2>Outcomes per edit</h2><p>Dev tasks each evaluated candidate fixed and broke against the strategy "
            "it revised (per seed, failure family before → after, the operators whose records near the task "
            "changed) and the records its artifacts added, removed or changed, per operator "
            "(<code>curateevo trace RUN --task T</code> / <code>--record ID</code> for one). A removed record is "
            "counted under the operator that dropped it or the raw trajectory it was made from (noted by the "
            "toolkit in the candidate's <code>dropped.jsonl</code>); one that no operator noted is counted as "
            "<i>made by</i> the operator that had made it.</p>"
            "<table><tr><th>epoch ← parent</th><th>decision</th><th>edits</th><th>fixed</th><th>broken</th>"
            f"<th>records added</th><th>removed (by)</th><th>changed</th></tr>{body}</table>")


def cmd_trace(args) -> int:
    store = RunStore.open(Path(args.run))
    lines = trace_record(store, args.record) if args.record else trace_task(store, args.task)
    print("\n".join(lines))
    return 0


def add_cli(sub) -> None:
    p = sub.add_parser("trace", help="lineage: a record's raw ids, operators and epochs, or a dev task's outcome per epoch")
    p.add_argument("run", help="the run directory")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--record", metavar="ID", help="a record id (or kind:id), or a raw id the records were made from")
    which.add_argument("--task", metavar="TASK", help="a dev task id, or the task id the corpus published it with "
                       "(tau-bench `1`, a tau2 task id): its outcome per epoch and the edits and records near each change")
    p.set_defaults(func=cmd_trace)
