"""Sections of `curateevo report` a user reads first: what the run curated and was judged on (the
corpus by file, hash and record count; the held-out sizes), the per-tool table where the metrics
carry one, each failed dev task's answer beside its gold call, and why a figure of the epoch table
is missing where it shows "—". Everything is read from the run's files; nothing is recomputed
(the gold calls of an environment's dev tasks come from the benchmark, as the evaluation took them).
"""
from __future__ import annotations

import html
import json
from pathlib import Path

from base.files import read_json, read_jsonl
from base import registry
from evolver.config import RunConfig
from evolver.store import RunStore
from evolver.tables import dev_counted, dev_size
from sandbox.manifest import Manifest

MAX_SHOWN = 400
"""Characters of an answer or a gold call shown in a cell (the .jsonl holds the whole)."""


def _e(value) -> str:
    return html.escape(str(value))


def corpus_section(store: RunStore, rows: list[dict]) -> str:
    """The corpus (each file, its sha256, its records) and the held-out sizes: what curation saw,
    what dev scored, what test holds."""
    cfg = RunConfig.from_json(store.config)
    artifacts = store.epoch_dir(0) / "artifacts"
    corpus = Manifest.read(artifacts).corpus.to_json() if Manifest.exists(artifacts) else {}
    files = "".join(f"<li><code>{_e(p)}</code> — sha256 <code>{_e(_file_sha256(Path(p)))}</code></li>" for p in cfg.corpus)
    seen = corpus.get("records")
    skipped = corpus.get("skipped_lines")
    parts = [f"<p>Corpus ({len(cfg.corpus)} file(s), corpus sha256 <code>{_e(cfg.corpus_sha256)}</code>"
             f"{', format ' + _e(corpus['format']) if corpus.get('format') else ''}):</p><ul>{files}</ul>"]
    held = _held_out(store, cfg, rows)
    seen_text = "—: epoch 0 has no curated artifacts to count them from" if seen is None else f"{seen} record(s)"
    items = [f"<li>curated by every strategy: {seen_text}"
             + (f" ({skipped} line(s) skipped on loading, listed in skipped.jsonl)" if skipped else "") + "</li>"]
    items += [f"<li>{_e(h)}</li>" for h in held]
    return f"<h2>Corpus and held-out sizes</h2>{parts[0]}<ul>{''.join(items)}</ul>"


def _file_sha256(path: Path) -> str:
    from base.files import sha256_file, sha256_tree

    if path.is_dir():
        return sha256_tree(path)
    return sha256_file(path) if path.is_file() else "— (the file is no longer there)"


def _held_out(store: RunStore, cfg: RunConfig, rows: list[dict]) -> list[str]:
    dev, tested = dev_size(rows), _tested_tasks(store)
    read = f"`curateevo test` read {tested} of them" if tested else "not read yet (`curateevo test RUN`)"
    if registry.get(cfg.benchmark).holds_out_corpus():   # the corpus's own held-out parts
        from evolver.launch import dev_check

        try:
            held = dev_check(cfg)
        except Exception as exc:   # a corpus moved or changed since the run: said, not fatal to the report
            return [f"held-out parts: — (the corpus cannot be read again: {exc})"]
        return [f"held out for dev: {held['records']} record(s), {held['items']} step item(s) "
                f"({held['items_with_calls']} with a recorded call); the epochs scored "
                + (dev_counted(dev, store.config) if dev else "— (no epoch was evaluated)"),
                f"held out for test: {held['test_records']} record(s), never seen by a strategy; {read}"]
    return [f"dev: {dev['tasks']} task(s) of {cfg.benchmark}'s dev split scored per epoch (--tasks {cfg.tasks})"
            if dev else f"dev: — (no epoch was evaluated; --tasks {cfg.tasks})",
            f"test: {cfg.benchmark}'s test split, never read by the loop; {read}"]


def _tested_tasks(store: RunStore) -> int | None:
    path = store.root / "test" / "metrics.json"
    if path.is_file():
        return len(read_json(path)["tasks"])
    from evolver import tested

    doc = tested.read(store.root)   # a reading through bench quality's cells keeps only the comparison
    return doc.get("records", doc["tasks"]) if doc else None   # next-call: its test records


def per_tool_section(store: RunStore, rows: list[dict]) -> str:
    """Call F1 per tool per epoch (first seed) where the evaluation's metrics carry `per_tool`."""
    cfg = RunConfig.from_json(store.config)
    tables = {}
    for r in rows:
        path = store.epoch_dir(r["epoch"]) / f"eval-s{cfg.seeds[0]}" / "metrics.json"
        if path.is_file() and read_json(path).get("per_tool"):
            tables[r["epoch"]] = read_json(path)["per_tool"]
    if not tables:   # a checker's benchmark scores tasks, not calls by tool
        return (f"<h2>Per tool</h2><p><i>No per-tool table: {_e(cfg.benchmark)} is scored by {_e(cfg.metric)} per task "
                "and category; call F1 per tool is measured where the next call is scored at recorded steps (a corpus without an "
                "environment).</i></p>")
    tools = sorted({t for table in tables.values() for t in table})
    head = "<th>tool</th><th>recorded calls</th>" + "".join(f"<th>epoch {e}: F1 (right/wrong/missed)</th>"
                                                              for e in tables)
    body = ""
    for tool in tools:
        recorded = next((t[tool]["recorded"] for t in tables.values() if tool in t), 0)
        cells = ""
        for table in tables.values():
            m = table.get(tool)
            cells += ("<td>—</td>" if m is None else
                      f"<td class=\"n\">{'—' if m['f1'] is None else format(m['f1'], '.2f')} "
                      f"({m['tp']}/{m['fp']}/{m['fn']})</td>")
        body += f"<tr><td>{_e(tool)}</td><td class=\"n\">{recorded}</td>{cells}</tr>"
    return (f"<h2>Per tool (call F1 on dev, seed {cfg.seeds[0]})</h2><p>Each tool the recorded or the called calls "
            "name; F1 is “—” where the tool was never recorded nor rightly called.</p>"
            f"<table><tr>{head}</tr>{body}</table>")


def _call(c: dict) -> str:
    fn = c.get("function") or c
    args = fn.get("arguments")
    return f"{fn.get('name')}({args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)})"


def _cut(text: str) -> str:
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + " …"


def _answer(trajectory: dict) -> str:
    """What the agent said after the task's first request: its calls, else its text."""
    said = []
    for m in trajectory.get("messages", [])[1:]:
        if m.get("role") == "assistant":
            said += [_call(c) for c in m.get("tool_calls") or []] or [repr(m.get("content") or "")]
    return "; ".join(said) or "(no answer)"


def _gold_of(cfg: RunConfig, task_ids: list[str]) -> dict[str, str]:
    """An environment's dev tasks' gold calls, as the benchmark's step items state them."""
    from environments import runner
    from base.registry import get_benchmark

    bench = get_benchmark(cfg.benchmark)
    wanted = set(task_ids)
    tasks = [t for t in bench.tasks("dev") if t.id in wanted]
    out: dict[str, list[str]] = {}
    for item in runner.step_items(bench, tasks):
        out.setdefault(item.task_id, []).append("; ".join(_call(c) for c in item.gold) or "(no call: a reply)")
    return {t: " | ".join(v) for t, v in out.items()}


def failed_answers_section(store: RunStore, rows: list[dict]) -> str:
    """Each evaluated epoch's failed dev tasks (first seed): the answer beside the gold call and the verdict."""
    cfg = RunConfig.from_json(store.config)
    seed, parts = cfg.seeds[0], []
    paths = [(r["epoch"], store.epoch_dir(r["epoch"]) / f"eval-s{seed}" / "trajectories.jsonl") for r in rows]
    failures = {e: [t for t in read_jsonl(p) if not (t.get("outcome") or {}).get("success")]
                for e, p in paths if p.is_file()}
    episodic = sorted({t["meta"]["task_id"] for ts in failures.values() for t in ts if "steps" not in t["meta"]})
    gold = _gold_of(cfg, episodic) if episodic else {}   # an environment's tasks: the benchmark's gold, read once
    for epoch, failed in failures.items():
        lines = []
        for t in failed:
            meta = t["meta"]
            if "steps" in meta:   # a next-call record: each wrong answer beside its recorded call
                for s in meta["steps"]:
                    if s.get("verdict") != "right":
                        answer = "; ".join(_call(c) for c in s.get("calls") or []) or repr(s.get("reply") or "")
                        gold_text = "; ".join(_call(c) for c in s.get("gold") or []) or "(no call: a reply)"
                        lines.append((f"{meta['task_id']} step {s.get('step')}", answer, gold_text,
                                      f"{s.get('verdict')}: {s.get('why', '')}"))
                continue
            feedback = meta.get("feedback") or {}
            verdict = " — ".join(str(x) for x in (feedback.get("error_type"), feedback.get("checker_message")) if x)
            lines.append((meta["task_id"], _answer(t), gold.get(meta["task_id"], "— (the benchmark states none)"),
                          verdict or "—"))
        if not lines:
            continue
        body = "".join(f"<tr><td>{_e(a)}</td><td><code>{_e(_cut(b))}</code></td><td><code>{_e(_cut(c))}</code></td>"
                       f"<td>{_e(_cut(d))}</td></tr>" for a, b, c, d in lines)
        parts.append((epoch, len(failed), body))
    unit = "record" if registry.get(cfg.benchmark).holds_out_corpus() else "task"   # next-call scores held-out records
    shown = [f"<details{' open' if n == len(parts) else ''}><summary>epoch {epoch}: {count} failed dev {unit}(s), "
             f"seed {seed}</summary><table class=\"answers\"><tr><th>task</th><th>the agent's answer</th>"
             f"<th>gold call</th><th>verdict</th></tr>{body}</table></details>"
             for n, (epoch, count, body) in enumerate(parts, 1)]   # the last epoch's unfolded
    return "<h2>Failed dev tasks: the answer beside the gold call</h2>" + "".join(shown) if shown else ""


def missing_notes(store: RunStore, rows: list[dict]) -> list[str]:
    """Why the epoch table shows "—" where it does: P, J and gold LL."""
    cfg = RunConfig.from_json(store.config)
    notes = []
    for r in rows:
        if r.get("P") is None:
            why = r.get("reason") or r.get("failed") or "the epoch was not evaluated (stopped or failed before it)"
            notes.append(f"epoch {r['epoch']}: P, C and J are — because {why}")
            continue
        if r.get("gold_ll") is None:
            notes.append(f"epoch {r['epoch']}: gold LL is — because {_gold_missing(store, cfg, r['epoch'])}")
    return notes


def _gold_missing(store: RunStore, cfg: RunConfig, epoch: int) -> str:
    path = store.epoch_dir(epoch) / f"eval-s{cfg.seeds[0]}" / "metrics.json"
    if not path.is_file():
        return "the evaluation's metrics are not in the run directory"
    doc = read_json(path)
    gold = doc.get("gold_log_likelihood")
    if gold is None:
        return ("the evaluation computed none (it is computed from the policy's own weights, greedy, one sample: a "
                "served model or a sampled evaluation has none)")
    if not gold.get("items"):
        return "no dev task has a gold call to score (the held-out part records no scorable tool call)"
    return "a gold call's log-likelihood was not finite"
