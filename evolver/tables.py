"""The run's tables, read from its journal: one row per finished stage, one per epoch, and their
text forms — what `log`, `status`, `run` and `report` show."""
from __future__ import annotations

import datetime

from base.files import read_json
from base import registry
from experiments import journal
from evolver.store import RunStore
from sandbox.manifest import Manifest


def stage_rows(store: RunStore) -> list[dict]:
    """Every finished stage: epoch, stage, wall seconds and the LLM usage it caused."""
    started, rows = {}, []
    for event in store.journal.events():
        key = (event.epoch, event.stage)
        if isinstance(event, journal.StageStarted):
            started[key] = event.time
        elif isinstance(event, journal.StageDone):
            seconds = None
            if key in started:
                seconds = (datetime.datetime.fromisoformat(event.time) - datetime.datetime.fromisoformat(started[key])).total_seconds()
            llm = event.llm or {}
            rows.append({"epoch": key[0], "stage": key[1], "seconds": seconds, "result": event.result or {},
                         "tokens": llm.get("prompt_tokens", 0) + llm.get("completion_tokens", 0),
                         "usd": llm.get("usd", 0.0), "calls": llm.get("calls", 0), "unpriced": llm.get("unpriced", False)})
    return rows


def epoch_rows(store: RunStore) -> list[dict]:
    rows: dict[int, dict] = {}
    for stage in stage_rows(store):
        if stage["epoch"] is None or stage["epoch"] < 0:
            continue
        row = rows.setdefault(stage["epoch"], {"epoch": stage["epoch"], "seconds": {}, "tokens": 0, "usd": 0.0})
        result = stage["result"]
        if stage["stage"] == "curate":
            row.update(cost_train=result.get("cost_train"), scale=result.get("counts"), failed=result.get("failed"),
                       curation=curation_cost(store, stage["epoch"]))
        elif stage["stage"].startswith("train-s"):   # how much of the curated SFT set the recipe trained
            seen = ((result.get("summary") or {}).get("sft") or {}).get("epochs_seen")
            if seen is not None:
                row.setdefault("sft_epochs_seen", []).append(seen)
            grpo = (result.get("summary") or {}).get("grpo") or {}
            if grpo.get("groups"):   # GRPO groups over the seeds, and those whose completions all scored alike
                row["grpo_groups"] = row.get("grpo_groups", 0) + grpo["groups"]
                row["grpo_zero_variance"] = row.get("grpo_zero_variance", 0) + grpo["zero_variance_groups"]
            if result.get("trained") is not None:   # after ablations and length limits (seeds train the same data)
                row["trained"] = result["trained"]
        elif stage["stage"] == "decide":
            row.update({k: result.get(k) for k in ("P", "C", "J", "accepted", "reason", "commit", "gold_ll", "c_only",
                                                   "dev", "no_candidate")})
        if stage["seconds"] is not None:
            row["seconds"][stage["stage"]] = stage["seconds"]
        row["tokens"] += stage["tokens"]
        row["usd"] += stage["usd"]
    return [rows[e] for e in sorted(rows)]


def curation_cost(store: RunStore, epoch: int) -> dict | None:
    """The epoch's curation as its execution recorded it (execution.json: wall seconds of executing
    and checking, ctx.llm tokens) and per 1K retained turns (the paper's Figure 3: turns of the
    curated data, Cost_train before ablations). None when the artifacts are not there."""
    folder = store.epoch_dir(epoch) / "artifacts"
    try:
        execution = read_json(folder / "execution.json")
        turns = Manifest.read(folder).cost_train
    except (OSError, ValueError, KeyError, TypeError):
        return None
    seconds = execution.get("seconds") or {}
    tokens = (execution.get("llm") or {}).get("tokens") or 0   # sandbox.llm_channel usage: prompt + completion
    per_1k = (lambda v: round(v * 1000 / turns, 4) if turns else None)
    return {"seconds": seconds.get("total"), "execute_s": seconds.get("execute"), "check_s": seconds.get("check"),
            "llm_tokens": tokens, "retained_turns": turns,
            "peak_rss_bytes": (execution.get("execution") or {}).get("peak_rss_bytes"),   # the strategy's, as reported
            "memory_cap_bytes": (execution.get("limits") or {}).get("memory_bytes"),
            "seconds_per_1k_turns": per_1k(seconds.get("total") or 0), "llm_tokens_per_1k_turns": per_1k(tokens)}


def failed_stages(store: RunStore) -> list[dict]:
    """Stages that failed and have not been done since: epoch, stage, error."""
    failed: dict = {}
    for event in store.journal.events():
        key = (event.epoch, event.stage)
        if isinstance(event, journal.StageFailed):
            failed[key] = {"epoch": key[0], "stage": key[1], "error": event.error}
        elif isinstance(event, journal.StageDone):
            failed.pop(key, None)
    return list(failed.values())


def trained_counts(row: dict) -> tuple[str, bool]:
    """"SFT/RL/mem" as trained (SFT examples and RL prompts the recipe used after ablations and
    length limits; memory as curated) and whether that differs from the curated counts."""
    scale = row.get("scale") or {}
    curated = [scale.get(k) for k in ("sft.jsonl", "rl.jsonl", "memory.jsonl")]
    trained = row.get("trained")
    shown = curated if trained is None else [trained.get("sft"), trained.get("rl"), curated[2]]
    text = "/".join("—" if v is None else str(v) for v in shown)
    return text, trained is not None and shown != curated


LOG_COLUMNS = (("epoch", 5), ("P", 7), ("gold LL", 8), ("C", 7), ("J", 8), ("Cost_train", 10), ("SFT/RL/mem", 14),
               ("SFT seen", 8), ("RL 0-var", 8), ("cur s/1K", 8), ("decision", -9), ("time", 7))
"""The epoch table's columns and their text widths (negative: left-aligned)."""
LLM_COLUMNS = (("LLM tokens", 10), ("USD", 8))


def log_table(store: RunStore) -> tuple[list[tuple[str, int]], list[list[str]], list[str]]:
    """The epoch table `log` prints and `report` shows: its columns (name, text width), one row of
    cells per epoch, and the notes under it (footnotes, the dev set's size, why an epoch had no
    candidate)."""
    llm = bool(store.config.get("llm"))
    columns = list(LOG_COLUMNS) + (list(LLM_COLUMNS) if llm else [])
    body, notes = [], []
    rows = epoch_rows(store)
    for r in rows:
        f = lambda v, p: f"{v:.{p}f}" if isinstance(v, (int, float)) else "—"   # noqa: E731
        counts, differs = trained_counts(r)
        if differs:
            scale = r.get("scale") or {}
            counts += "*"
            notes.append(f"* epoch {r['epoch']}: curated " + "/".join(str(scale.get(k, "—")) for k in
                                                               ("sft.jsonl", "rl.jsonl", "memory.jsonl"))
                         + "; SFT/RL/mem shows what training used after the ablations and the profile's length limits")
        decision = "—" if r.get("accepted") is None else (
            "C only" if r.get("c_only") else "accepted" if r["accepted"] else
            "no cand." if r.get("no_candidate") else "rejected")
        seen = r.get("sft_epochs_seen")   # passes over the curated SFT set (mean over seeds); < 1: some never trained
        cur = (r.get("curation") or {}).get("seconds_per_1k_turns")   # curation wall time per 1K retained turns
        cells = [str(r["epoch"]), f(r.get("P"), 4), f(r.get("gold_ll"), 3), f(r.get("C"), 4), f(r.get("J"), 4),
                 str(r.get("cost_train")) if r.get("cost_train") is not None else "—", counts,
                 f"{sum(seen) / len(seen):.2f}×" if seen else "—",
                 f"{r['grpo_zero_variance']}/{r['grpo_groups']}" if r.get("grpo_groups") else "—",
                 f"{cur:.3f}" if cur is not None else "—",
                 decision, f"{sum(r['seconds'].values()):.0f}s"]
        body.append(cells + ([str(r["tokens"]), f"{r['usd']:.4f}"] if llm else []))
    if any(r.get("grpo_groups") for r in rows):
        notes.append("RL 0-var: GRPO groups (over the seeds' trainings) whose completions all scored alike, of all "
                     "groups; such a group has zero advantage and teaches nothing")
    if any(r.get("c_only") for r in rows):
        notes.append("C only: accepted on a lower C alone with P unchanged (a cheaper curation, not a better policy)")
    notes += dev_notes(store, rows)
    notes += memory_note(rows)
    notes += [f"epoch {r['epoch']}: {r['reason']}" for r in rows if r.get("no_candidate")]   # why
    empty = untrained_choice(store, rows)
    return columns, body, notes + ([f"warning: {empty}"] if empty else [])


def memory_note(rows: list[dict]) -> list[str]:
    """What each epoch's strategy held in memory in the sandbox (its peak resident memory, as the
    runtime reported it), beside the sandbox's cap: a candidate killed for memory says both in its reason."""
    peaks = [(r["epoch"], r["curation"]) for r in rows if (r.get("curation") or {}).get("peak_rss_bytes")]
    if not peaks:
        return []
    cap = peaks[-1][1].get("memory_cap_bytes")
    return ["sandbox memory (the strategy's peak" + (f", of a {cap / 2**30:.1f} GiB cap" if cap else "") + "): "
            + ", ".join(f"epoch {e} {c['peak_rss_bytes'] / 2**20:.0f} MiB" for e, c in peaks)]


def untrained_choice(store: RunStore, rows: list[dict] | None = None) -> str | None:
    """One plain sentence when the run's chosen strategy (the final one, else the best so far) trained
    nothing, so that its P is the base model's; None otherwise."""
    rows = epoch_rows(store) if rows is None else rows
    final = final_of(store)
    epoch = final.get("epoch") if final else next((r["epoch"] for r in reversed(rows) if r.get("accepted")), None)
    row = next((r for r in rows if r["epoch"] == epoch), None)
    if row is None or row.get("trained") is None or any(row["trained"].values()):
        return None
    memory = (row.get("scale") or {}).get("memory.jsonl")
    return (f"the chosen strategy (epoch {epoch}) trains nothing: its training used no SFT example and no RL prompt, "
            "so its P is the base model's" + (f" helped by its {memory} memory records" if memory else ""))


def final_of(store: RunStore) -> dict | None:
    """The journal's final choice (epoch, commit, P, C, rule, why); None before the run finished. A
    run finished before the final rules had names chose by paper-best-dev, and says so."""
    final = next((e.result for e in reversed(journal.done(store.journal.events(), "final"))), None)
    if final is None or final.get("rule"):
        return final
    from evolver.final_rules import PAPER

    return {**final, "rule": "paper-best-dev", "why": f"{PAPER}, the only rule when this run finished"}


def final_line(store: RunStore) -> str | None:
    """One line: the final strategy and the rule that chose it, with why; None before the run finished."""
    final = final_of(store)
    if final is None:
        return None
    return (f"final strategy: epoch {final['epoch']} ({final['commit'][:10]}), P = {final['P']:.4f}, "
            f"C = {final['C']:.4f}; chosen by the final rule {final['rule']}: {final['why']}")


def format_log(store: RunStore) -> str:
    columns, body, notes = log_table(store)
    pad = lambda text, w: f"{text:<{-w}}" if w < 0 else f"{text:>{w}}"   # noqa: E731
    head = " ".join(pad(name, w) for name, w in columns)
    lines = [head, "-" * len(head)] + [" ".join(pad(c, w) for c, (_, w) in zip(cells, columns)) for cells in body]
    return "\n".join(lines + notes)


def dev_counted(dev: dict, config: dict) -> str:
    """What an evaluation scored, counted right: "7 record(s) of 3 task(s)" where it scored held-out
    records (next-call; a run evaluated before records were told apart counted its records as tasks),
    else "N task(s)"."""
    if "records" in dev:
        return f"{dev['records']} record(s) of {dev['tasks']} task(s)"
    if registry.get(config.get("benchmark", registry.DEFAULT)).holds_out_corpus():
        return f"{dev['tasks']} record(s)"
    return f"{dev['tasks']} task(s)"


def dev_size(rows: list[dict]) -> dict | None:
    """The dev set the epochs were scored on, as the last evaluation recorded it (tasks, episodes,
    step items); None before any evaluation."""
    return next((r["dev"] for r in reversed(rows) if r.get("dev")), None)


def dev_scope(config: dict) -> str:
    """What the dev set is: `--tasks N` of an executable benchmark, or the corpus's held-out tenth
    (next-call, where --tasks does not apply), or the records `--dev-ids` chose."""
    if not registry.get(config.get("benchmark", registry.DEFAULT)).holds_out_corpus():
        return f"--tasks {config.get('tasks')}"
    chosen = (config.get("holdout") or {}).get("dev_ids")
    return "the records --dev-ids chose" if chosen else "the held-out tenth of the corpus"


def dev_notes(store: RunStore, rows: list[dict]) -> list[str]:
    """The real dev size, and a warning when it is too small to tell strategies apart."""
    from environments.metrics import resolution_warning

    dev = dev_size(rows)
    if dev is None:
        return []
    metric = store.config.get("metric")
    stepwise = metric in ("step_accuracy", "call_f1")   # the next-call metrics score step items, not episodes
    items = dev["step_items"] if stepwise else dev["episodes"]
    what = "step items" if stepwise else "episodes"
    chosen = dev_scope(store.config)
    if stepwise:   # no episodes here: the held-out records' steps are put to the model one by one
        calls = dev.get("step_items_with_calls")
        scored = f"{dev['step_items']} step items" + (f" ({calls} with a recorded call)" if calls is not None else "")
    else:
        scored = f"{dev['episodes']} episodes, {dev['step_items']} step items"
    text = f"dev: {dev_counted(dev, store.config)} evaluated per epoch ({chosen}), {scored}; P is {metric} over the {what}"
    warning = resolution_warning(items, what)
    return [text] + ([f"warning: {warning}"] if warning else [])


STAGE_COLUMNS = (("epoch", 5), ("stage", -14), ("time", 8), ("LLM calls", 9), ("tokens", 9), ("USD", 8))


def stage_table(store: RunStore) -> list[list[str]]:
    """Time and LLM usage per stage, one row of cells (STAGE_COLUMNS) per stage: `log` prints it,
    `report` shows it as a table."""
    body = []
    for r in stage_rows(store):
        epoch = "run" if r["epoch"] is None or r["epoch"] < 0 else r["epoch"]   # the final choice is the run's
        seconds = f"{r['seconds']:.1f}s" if r["seconds"] is not None else "—"
        usd = "unpriced" if r["unpriced"] else f"{r['usd']:.4f}"   # a model with no known price: its tokens only
        body.append([str(epoch), r["stage"], seconds, str(r["calls"]), str(r["tokens"]), usd])
    return body


def format_stages(store: RunStore) -> str:
    """Time and LLM usage per stage, as text."""
    def line(cells):
        return " ".join(f"{c:<{-w}}" if w < 0 else f"{c:>{w}}" for c, (_, w) in zip(cells, STAGE_COLUMNS))
    head = line([name for name, _ in STAGE_COLUMNS])
    return "\n".join([head, "-" * len(head), *map(line, stage_table(store))])
