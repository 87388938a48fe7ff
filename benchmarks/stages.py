"""Train and evaluate a curation: the two stages between a strategy's artifacts and a decision.

Which artifact files a stage reads (the ablations), the fixed recipe's training on them, and the
trained policy's evaluation with the curation's memory. The loop's stages
(`evolver.stages.train_epoch` / `evaluate_epoch`), the quality benchmark's cells and its proxy
(`benchmarks/quality/`) all call these, so a change to training or evaluation is made once. They
sit on the benchmarks floor so that the bench, below the loop, can call them too.
"""
from __future__ import annotations

from pathlib import Path

KINDS = ("sft", "rl", "memory")


def records(path: Path) -> int:
    """The records of an artifact file (its non-blank lines; 0 when there is no file)."""
    if not path.exists():
        return 0
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def used(artifacts: Path, ablations=()) -> dict[str, Path | None]:
    """The artifact files the stages read, per kind ("sft", "rl", "memory"): None when the kind is
    ablated (`no-sft`, `no-rl`, `no-memory`) or its file holds no record."""
    artifacts = Path(artifacts)
    return {kind: None if f"no-{kind}" in ablations or not records(artifacts / f"{kind}.jsonl")
            else artifacts / f"{kind}.jsonl" for kind in KINDS}


def steps_pass(benchmark: str, metric: str) -> bool:
    """Whether evaluation adds the step-level pass: single-turn tasks are one step each, so the
    step pass would score the same answers again (unless the metric is the steps' own)."""
    from benchmarks import registry

    return not (registry.get(benchmark).single_step and metric != "step_accuracy")


def train_on(files: dict, out: Path, *, base: str, profile: str, seed: int, budget: dict | None = None,
             **options) -> dict:
    """The fixed recipe (trainer.train.train, in a child process) on `files`' SFT and RL records
    (either may be None); `budget` overrides the profile's budgets, `options` are train()'s
    (echo, progress, report_to, launcher, accelerate_config). Returns the training's summary."""
    from trainer.train import train

    return train(files["sft"], files["rl"], out, base=base, profile=profile, seed=seed, memory=files.get("memory"),
                 **options, **(budget or {}))


def evaluate_on(benchmark: str, split: str, out: Path, *, base: str, adapter: str | None, memory: Path | None,
                seed: int, tasks: int | None, metric: str, batch_size: int, threads: int | None = None,
                max_new_tokens: int | None = None, **options) -> dict:
    """The policy (base + adapter; the base alone without one), retrieving from `memory`, on the
    benchmark's `split` (benchmarks.evaluate.evaluate_to_dir into `out`); `threads` pins the CPU
    threads it decodes on, `max_new_tokens` caps each turn (None: the policy's default), `options`
    are evaluate_to_dir's (steps, samples, corpus, gold, …). Returns the metrics document."""
    from benchmarks.evaluate import evaluate_to_dir

    policy = {"base": base, "adapter": adapter, "threads": threads,
              **({"max_new_tokens": max_new_tokens} if max_new_tokens is not None else {})}
    return evaluate_to_dir(benchmark, split, out, tasks=tasks, metric=metric, memory=str(memory) if memory else None,
                           seed=seed, batch_size=batch_size, policy_options=policy, **options)
