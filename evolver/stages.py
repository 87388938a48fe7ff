"""The stages' work that needs no run state: training and evaluation of an epoch's artifacts (the
backend jobs of evolver.evaluation), and the binding of a strategy's ctx.llm to the run's LLM.
`replay RUN --epoch E --retrain` and the quality proxy call them without a `RunContext`."""
from __future__ import annotations

import sys
from pathlib import Path

from benchmarks import registry
from benchmarks.stages import evaluate_on, train_on, used
from evolver.config import RunConfig
from base.errors import RunFailed
from evolver.results import Evaluation, Training


def channel_answer(llm):
    """The binding of a strategy's ctx.llm to the run's LLM layer: a channel request → one
    recorded, budgeted completion → the channel's response."""
    def answer(request: dict) -> dict:
        reply = llm.complete(request["messages"], purpose="curate", max_tokens=request["max_tokens"])
        return {"text": reply.text, "prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens}
    return answer


def length_report(cfg: RunConfig, sft: Path | None, rl: Path | None):
    """What the profile's length limits (or the run's own) cut or drop of these files (trainer.length)."""
    from trainer.data import read_records
    from trainer.length import profile_length_report

    return profile_length_report(read_records(sft, "sft"), read_records(rl, "rl"), cfg.profile, cfg.max_length or None,
                                 cfg.max_prompt_length or None)


def trains_nothing(cfg: RunConfig, artifacts: Path) -> str | None:
    """Why the curation in `artifacts` would train nothing in this run (no SFT or RL record left once
    the ablations and the length limits are applied), in one sentence; None when something trains,
    or when the run ablates both SFT and RL (memory alone, by design)."""
    if {"no-sft", "no-rl"} <= set(cfg.ablations):
        return None
    files = used(artifacts, cfg.ablations)
    if files["sft"] is None and files["rl"] is None:
        return "it curates no SFT or RL record" + (" (memory alone)" if files["memory"] else "")
    report = length_report(cfg, files["sft"], files["rl"])
    if report.survivors == 0:
        return f"every record is over the length limits: {report.summary()}; {report.advice() or 'curate shorter records'}"
    return None


def check_lengths(cfg: RunConfig, sft: Path | None, rl: Path | None):
    """What the profile's length limits cut or drop, said on stderr before training (the
    trainer.length report); RunFailed when nothing is left to train on (every SFT record and
    every RL prompt too long): one sentence with the numbers and the fix."""
    report = length_report(cfg, sft, rl)
    advice = report.advice()
    if report.survivors == 0:
        raise RunFailed(f"nothing would be trained: {report.summary()}; {advice or 'curate shorter records'} "
                        f"(profile {cfg.profile})")
    print(f"length ({cfg.profile}): {report.summary()}", file=sys.stderr, flush=True)
    if report.sft_records and report.sft_dropped == report.sft_records:
        print(f"warning: every one of the {report.sft_records} SFT records is dropped at max_length "
              f"{report.max_length}, so this epoch trains on RL alone; {advice}", file=sys.stderr, flush=True)
    elif report.sft_dropped or report.rl_dropped:
        print(f"note: {advice}", file=sys.stderr, flush=True)
    return report


def train_epoch(cfg: RunConfig, artifacts: Path, out: Path, seed: int) -> dict:
    """The fixed recipe on an epoch's artifacts (in a child process), honouring the data ablations."""
    files = used(artifacts, cfg.ablations)
    if files["sft"] is None and files["rl"] is None:
        return Training(adapter=None, skipped="nothing to train", trained={"sft": 0, "rl": 0}).journal()
    length = check_lengths(cfg, files["sft"], files["rl"])
    summary = train_on(files, out, base=cfg.base, profile=cfg.profile, seed=seed, budget=cfg.budget_overrides,
                       echo=sys.stderr, progress=True, report_to=cfg.report_to, launcher=cfg.launcher or None,
                       accelerate_config=cfg.accelerate_config or None)
    data = summary.get("data") or {}
    # what training used, after the ablations and the length limits (log and report show these, not the curated counts)
    trained = {"sft": (data.get("sft") or {}).get("examples", 0), "rl": (data.get("rl") or {}).get("prompts", 0)}
    return Training(adapter=str(out / "adapter"), trained=trained, length=length.to_json(),
                    summary={k: summary.get(k) for k in ("wall_s", "steps", "sft", "grpo")}).journal()


def evaluate_epoch(cfg: RunConfig, artifacts: Path, out: Path, seed: int, adapter: str | None, samples: int = 1,
                   tasks: int | None = None) -> dict:
    """π_e (+ the epoch's memory unless ablated) on the run's dev tasks: greedy, or `samples`
    rollouts per task at the boundary temperature (episodes only), on the profile's pinned CPU
    threads when it pins them (so any machine of a cluster decodes alike)."""
    from trainer.recipe import get_profile

    sampling = {"samples": samples, "temperature": cfg.boundary_temperature, "steps": False} if samples > 1 else \
        {"steps": cfg.eval_steps}
    doc = evaluate_on(cfg.benchmark, cfg.split, out, base=cfg.base, adapter=adapter,
                      memory=used(artifacts, cfg.ablations)["memory"], seed=seed, tasks=tasks or cfg.tasks,
                      metric=cfg.metric, batch_size=cfg.batch_size, threads=get_profile(cfg.profile).threads,
                      max_new_tokens=cfg.max_new_tokens,
                      corpus=registry.get(cfg.benchmark).dev_corpus(cfg.corpus), corpus_on_error=cfg.on_error,
                      corpus_tools=cfg.tools or None, corpus_split=cfg.split_spec, **sampling, progress=True, gold=samples == 1)
    gold = doc.get("gold_log_likelihood")   # beside P, never in a strategy's inputs
    m = doc["metrics"]
    dev = {"tasks": len(doc["tasks"]), "episodes": m.get("episodes", 0), "step_items": m.get("step_items", 0),
           "step_items_with_calls": m.get("step_items_with_calls")}
    return Evaluation(P=doc["P"], metrics=doc["metrics"], dev=dev, **({"gold_ll": gold["mean"], "gold_ll_per_category": {
        c: v["mean"] for c, v in gold["per_category"].items()}} if gold else {})).journal()
