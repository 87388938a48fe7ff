"""Did evolution help? The final strategy against ρ0 on the test split, paired task by task.

`curateevo test RUN` reads the test split for the run's final strategy and for ρ0 (epoch 0, no
curation: its adapter and memory are in the run already) and compares them here: each one's P with
its interval, the paired difference final − ρ0 with its interval, overall and per category, by the
quality benchmark's statistics (experiments/quality/stats.py on base/paired.py's crossed paired
bootstrap). `test --seeds N` scores both as `bench quality` scores rows — its cells, seeds 0..N−1,
the run's own trainings adopted — and pairs them the same way (`cells_scores`).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from base.errors import UserError
from base.files import atomic_json, read_json, read_jsonl
from environments.evaluate import EvalSpec
from trainer.train import TrainSpec

FILE = "versus-rho0.json"
"""RUN/test/FILE: the comparison of the last reading (the report shows it)."""
HELD_OUT_FILE = "held-out.json"
"""RUN/test/HELD_OUT_FILE: the comparison on each held-out benchmark (the paper's Table 1 for the run)."""
HELD_OUT = ("bfcl-single", "acebench", "tau2")
"""The paper's held-out benchmarks (§4, Table 1: BFCL, ACEBench, τ²-bench): `test` scores the run on each
one it did not evolve on, beside its own test split."""


def held_out_for(benchmark: str, named: str | None) -> list[str]:
    """The held-out benchmarks `test` scores for a run that evolved on `benchmark`: `named` (a comma list,
    "none" for none), else every one of HELD_OUT but its own; UserError for an unknown name."""
    from base import registry

    if named is not None:
        chosen = [] if named.strip() == "none" else [n.strip() for n in named.split(",") if n.strip()]
        for name in chosen:
            registry.get(name)   # UserError naming the known ones
        return [n for n in chosen if n != benchmark]
    return [n for n in HELD_OUT if n != benchmark]


def held_out_spec(spec: EvalSpec, benchmark: str, tasks: int | None) -> EvalSpec:
    """The run's evaluation (decoding budget, batches, memory rule, threads) on another benchmark's test
    split: its own default metric, no step pass, no corpus of the run's."""
    from base import registry

    return spec.model_copy(update={"benchmark": benchmark, "metric": registry.get(benchmark).metrics[0], "tasks": tasks,
                                   "steps": False,
                                   "corpus": (), "corpus_tools": None, "holdout": None})


def held_out_rows(docs: dict[str, dict]) -> list[list[str]]:
    """One row per held-out benchmark: benchmark, tasks, ρ0, final, final − ρ0."""
    return [[name, *rows(d)[0][1:]] for name, d in docs.items()]


def held_out_text(docs: dict[str, dict], epoch: int, skipped: dict[str, str]) -> str:
    """The paper's Table 1 for the run: each held-out benchmark's test split, then its categories."""
    if not docs and not skipped:
        return ""
    lines = [f"held-out benchmarks (the run never read them): final strategy (epoch {epoch}) against ρ0, "
             "task_success in %"]
    lines += aligned([["benchmark", *HEADER[1:]]] + held_out_rows(docs))
    for name, why in skipped.items():
        lines.append(f"{name}: not run ({why})")
    for name, d in docs.items():
        lines.append(f"\n{name} by category:")
        lines += aligned([HEADER] + rows(d)[1:])
    return "\n".join(lines)


def scores_of(trajectories: Path, metric: str) -> tuple[dict[str, float], dict[str, str], dict[str, str]]:
    """task id → its score in one evaluation (call_f1: the held-out record's own call F1, else
    success), task id → category, and task id → the task it is a record of where the evaluation
    named one (next-call: `meta.task_group`), from the evaluation's trajectories.jsonl."""
    outcome = "reward" if metric == "call_f1" else "success"
    rows = read_jsonl(trajectories)
    return ({t["meta"]["task_id"]: float(t["outcome"][outcome]) for t in rows},
            {t["meta"]["task_id"]: t["meta"]["category"] for t in rows},
            {t["meta"]["task_id"]: t["meta"]["task_group"] for t in rows if "task_group" in t["meta"]})


NO_INTERVAL = "no interval: one task (resampling one task gives it back every time)"


def no_interval(a: dict, b: dict) -> dict:
    """The difference of two rows scored on one task (one or several records of it): its value, and
    no interval (low, high None)."""
    from statistics import fmean

    mean = lambda row: fmean(fmean(v) for v in row.values())   # noqa: E731
    return {"value": round(mean(a) - mean(b), 6), "low": None, "high": None, "method": NO_INTERVAL, "tasks": 1}


def compare(final: dict, rho0: dict, category: dict[str, str], groups: dict[str, str] | None = None) -> dict:
    """Both rows' P with a 95% interval and the paired difference final − ρ0, overall and per
    category. `final`, `rho0`: scored id → per-seed scores (the same seeds); `category`: id →
    category; `groups`: id → the task it is a record of (next-call), so `tasks` counts tasks, `records`
    the ids when they are more, and the intervals resample tasks (base/paired.py)."""
    from base.paired import count_tasks
    from experiments.quality import stats

    def block(ids: list[str]) -> dict:
        a, b = ({t: s[t] for t in ids} for s in (final, rho0))
        n = count_tasks(ids, groups)
        return {"tasks": n, **({"records": len(ids)} if n != len(ids) else {}),
                "final": stats.mean_interval(a, groups=groups).to_json(),
                "rho0": stats.mean_interval(b, groups=groups).to_json(),
                "difference": stats.paired_difference(a, b, groups=groups) if n > 1 else no_interval(a, b)}

    tasks = sorted(set(final) & set(rho0))
    if not tasks:
        raise UserError("the final strategy and ρ0 scored no test task in common; nothing can be paired")
    by_cat: dict[str, list[str]] = {}
    for t in tasks:
        by_cat.setdefault(category.get(t, "?"), []).append(t)
    return {**block(tasks), "seeds": len(next(iter(final.values()))),
            "per_category": {c: block(ts) for c, ts in sorted(by_cat.items())}}


DECODING = ("metric", "max_new_tokens", "max_prompt_tokens", "memory_k", "threads", "batch_size")
"""What an evaluation's scores depend on besides the policy, the tasks and the seed (EvalSpec's fields)."""


def same_evaluation(run: EvalSpec, bench: EvalSpec, steps: bool = True) -> None:
    """UserError unless `bench quality`'s cells (`bench`) evaluate as the run did (`run`, its
    EvalSpec): the same metric, decoding budget, memory retrieval, threads, batches and step pass,
    so `test --seeds` pairs what the run and `test` would score."""
    differ = [f"{f} {getattr(bench, f)} (the run: {getattr(run, f)})" for f in DECODING
              if getattr(run, f) != getattr(bench, f)]
    if steps and run.step_pass() != bench.step_pass():
        differ.append(f"step items {'scored' if bench.step_pass() else 'not scored'} (the run: the other way)")
    if differ:
        raise UserError("--seeds scores the test split through `bench quality`'s cells, which evaluate with "
                        + "; ".join(differ) + ": test this run without --seeds")


def cells_scores(store, cfg, seeds: int, cache: Path, tasks: int | None,
                 sandbox: str, benchmark: str | None = None, user=None) -> tuple[dict, dict, dict]:
    """The final strategy and ρ0 as two rows of `bench quality` (experiments/quality/cells.py) on the
    test split with seeds 0..seeds−1, the run's own trainings adopted where they match: every
    missing seed of both is trained and evaluated there, cached in `cache` like any cell. Returns
    the final row's and ρ0's task → per-seed scores, task → category and task → its group (Cells.groups)."""
    from base import registry
    from experiments.quality.cells import Cells, Row, Setting
    from experiments.quality.rows import run_row
    from experiments.quality.table import row_scores
    from sandbox.executor import make_executor
    from workspace.repository import Workspace

    if not registry.get(cfg.benchmark).executable or len(cfg.corpus) != 1:
        raise UserError(f"--seeds scores the test split as `bench quality` does, which takes a benchmark with an "
                        f"environment and one corpus file; this run evolved on {cfg.benchmark} with "
                        f"{len(cfg.corpus)} corpus file(s): test it without --seeds")
    held_out = benchmark is not None and benchmark != cfg.benchmark
    setting = Setting(benchmark=benchmark or cfg.benchmark, split="test", tasks=tasks, seeds=tuple(range(seeds)),
                      metric=registry.get(benchmark).metrics[0] if held_out else cfg.metric,
                      train=TrainSpec(base=cfg.train.base, profile=cfg.train.profile, budget=cfg.train.budget),
                      eval=EvalSpec(batch_size=cfg.eval.batch_size, max_new_tokens=cfg.eval.max_new_tokens),
                      curation_seed=cfg.seed, curation_timeout_s=cfg.curation_timeout_s,
                      user=dataclasses.astuple(user) if user and held_out else None)
    cells = Cells(cache, setting, make_executor(sandbox))
    same_evaluation(held_out_spec(cfg.eval_spec, setting.benchmark, tasks) if held_out else cfg.eval_spec,
                    cells.eval_spec, steps=not held_out)   # the cells decode as the run and `test` do (P alike)
    cells.adopt(store.root)
    wild = Path(cfg.corpus[0])
    evolved = run_row(store.root, wild)
    first = store.done(0, "curate").result["commit"]
    rho0 = Row(id="rho0-wild", label="ρ0 (epoch 0 of the run)", corpus=wild, ablations=evolved.ablations,
               files=Workspace.open(store.root / "strategy").files(first))
    got = {row.id: [cells.cell(row, s) for s in setting.seeds] for row in (evolved, rho0)}
    return row_scores(got[evolved.id]), row_scores(got[rho0.id]), dict(cells.category), dict(cells.groups)


def record(out: Path, doc: dict, epoch: int, how: str) -> dict:
    """Write the comparison to OUT/FILE; returns what the journal's `tested` event keeps of it."""
    atomic_json(out / FILE, {"epoch": epoch, "how": how, **doc})
    d = doc["difference"]
    return {"P_rho0": doc["rho0"]["value"], "difference": {k: d[k] for k in ("value", "low", "high")},
            "seeds": doc["seeds"]}


def read(run_root: Path) -> dict | None:
    """The last reading's comparison, when the run was tested so."""
    path = Path(run_root) / "test" / FILE
    return read_json(path) if path.is_file() else None


def _ci(e: dict, signed: bool = False) -> str:
    f = (lambda x: f"{100 * x:+.1f}") if signed else (lambda x: f"{100 * x:.1f}")
    if e.get("low") is None:   # one task: nothing to resample
        return f"{f(e['value'])} (no interval: 1 task)"
    return f"{f(e['value'])} [{f(e['low'])}, {f(e['high'])}]"


def counted(block: dict) -> str:
    """A block's tasks, and the records scored of them where they are more (next-call: '3 (7 records)')."""
    return f"{block['tasks']}" + (f" ({block['records']} records)" if block.get("records") else "")


def rows(doc: dict) -> list[list[str]]:
    """The comparison as table rows: scope, tasks, ρ0, final, final − ρ0 (points, 95% intervals)."""
    out = [["all", counted(doc), _ci(doc["rho0"]), _ci(doc["final"]), _ci(doc["difference"], signed=True)]]
    return out + [[c, counted(b), _ci(b["rho0"]), _ci(b["final"]), _ci(b["difference"], signed=True)]
                  for c, b in doc["per_category"].items()]


HEADER = ["category", "tasks", "ρ0 P [95% CI]", "final P [95% CI]", "final − ρ0 [95% CI]"]


def aligned(body: list[list[str]]) -> list[str]:
    """Table rows as lines, each column padded to its widest cell."""
    widths = [max(len(r[i]) for r in body) for i in range(len(body[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in body]


def text(doc: dict, metric: str, epoch: int) -> str:
    """The comparison as `test` prints it, with a one-line verdict."""
    lines = aligned([HEADER] + rows(doc))
    d = doc["difference"]
    verdict = ("no interval can be had: the test split holds one task, and a paired difference needs two or more "
               "to resample (test a run whose corpus holds out more tasks)" if d["low"] is None else
               "evolution helped: the final strategy is above ρ0 beyond the interval" if d["low"] > 0 else
               "evolution hurt: the final strategy is below ρ0 beyond the interval" if d["high"] < 0 else
               "not resolved: the interval of the difference includes 0")
    seeds = f"{doc['seeds']} training seed(s), paired over tasks × seeds" if doc["seeds"] > 1 else "one training seed, paired over tasks"
    unit = (f"{metric} in %" if metric != "call_f1" else
            "call_f1 in %, each held-out record's own, averaged over the records (the pairing resamples the tasks "
            "they are records of, each with its records; the pooled call_f1 above counts every call alike)")
    return (f"final strategy (epoch {epoch}) against ρ0 (epoch 0, no curation) on the test split: {unit}, "
            f"{seeds}\n" + "\n".join(lines) + f"\n{verdict}.")
