"""The stages' work that needs no run state: training and evaluation of an epoch's artifacts (the
backend jobs of evolver.evaluation), and the binding of a strategy's ctx.llm to the run's LLM.
`replay RUN --epoch E --retrain` and the quality proxy call them without a `RunContext`."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from experiments.train_eval import evaluate_on, train_on, used
from trainer.length import spec_length_report
from evolver.config import RunConfig
from evolver.results import Evaluation, Training


def channel_answer(llm):
    """The binding of a strategy's ctx.llm to the run's LLM layer: a channel request → one
    recorded, budgeted completion → the channel's response."""
    def answer(request: dict) -> dict:
        reply = llm.complete(request["messages"], purpose="curate", max_tokens=request["max_tokens"])
        return {"text": reply.text, "prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens}
    return answer


def trains_nothing(cfg: RunConfig, artifacts: Path) -> str | None:
    """Why the curation in `artifacts` would train nothing in this run (no SFT or RL record left once
    the ablations and the length limits of `cfg.train` are applied), in one sentence; None when
    something trains, or when the run ablates both SFT and RL (memory alone, by design)."""
    if {"no-sft", "no-rl"} <= set(cfg.ablations):
        return None
    files = used(artifacts, cfg.ablations)
    if files["sft"] is None and files["rl"] is None:
        return "it curates no SFT or RL record" + (" (memory alone)" if files["memory"] else "")
    report = spec_length_report(cfg.train, files["sft"], files["rl"])
    if report.survivors == 0:
        return f"every record is over the length limits: {report.summary()}; {report.advice() or 'curate shorter records'}"
    return None


def train_epoch(cfg: RunConfig, artifacts: Path, out: Path, seed: int, reuse_sft: Sequence[str] = ()) -> dict:
    """The fixed recipe on an epoch's artifacts (in a child process), honouring the data ablations;
    `reuse_sft`: the run's earlier trainings, one of which may hold this one's SFT stage (an edit
    that changed only the RL data: trainer.sft_reuse)."""
    files = used(artifacts, cfg.ablations)
    if files["sft"] is None and files["rl"] is None:
        return Training(adapter=None, skipped="nothing to train", trained={"sft": 0, "rl": 0}).journal()
    result = train_on(cfg.train, files, out, seed, echo=sys.stderr, progress=True, reuse_sft=reuse_sft)
    # what training used, after the ablations and the length limits (log and report show these, not the curated counts)
    return Training(adapter=str(out / "adapter"), trained=result.trained, length=dict(result.length),
                    summary=result.brief).journal()


def evaluate_epoch(cfg: RunConfig, artifacts: Path, out: Path, seed: int, adapter: str | None, samples: int = 1,
                   tasks: int | None = None) -> dict:
    """π_e (+ the epoch's memory unless ablated) on the run's dev tasks (`cfg.eval_spec`): greedy,
    or `samples` rollouts per task at the boundary temperature (episodes only)."""
    temperature = cfg.boundary_temperature if samples > 1 else 0.0
    doc = evaluate_on(cfg.eval_spec, cfg.split, out, base=cfg.train.base, adapter=adapter,
                      memory=used(artifacts, cfg.ablations)["memory"], seed=seed, tasks=tasks, samples=samples,
                      temperature=temperature, progress=True, gold=samples == 1)
    gold = doc.gold   # beside P, never in a strategy's inputs
    m = doc.metrics
    groups = doc.task_groups   # next-call: held-out records, of fewer tasks where several are trials of one
    dev = {"tasks": len(set(groups.values())) if groups else len(doc.tasks),
           **({"records": len(doc.tasks)} if groups else {}), "episodes": m.get("episodes", 0),
           "step_items": m.get("step_items", 0), "step_items_with_calls": m.get("step_items_with_calls")}
    return Evaluation(P=doc.P, metrics=doc.metrics, dev=dev, **({"gold_ll": gold["mean"], "gold_ll_per_category": {
        c: v["mean"] for c, v in gold["per_category"].items()}} if gold else {})).journal()
