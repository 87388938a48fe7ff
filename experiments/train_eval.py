"""Train and evaluate a curation: the two stages between a strategy's artifacts and a decision.

Which artifact files a stage reads (the ablations), the fixed recipe's training on them
(`train_on`, with a `trainer.train.TrainSpec`) and the trained policy's evaluation with the
curation's memory (`evaluate_on`, with an `environments.evaluate.EvalSpec`). Every training and
evaluation of the project goes through these two: the loop's stages (`evolver.stages`), its proxy
of k candidates, the quality benchmark's cells and its proxy (`experiments/quality/`), `curateevo
test` and `curateevo eval`, so the length check, the thread pinning, the memory rule and the
decoding budget are the same wherever a curation is trained or scored. They sit on the experiments
floor, above the environments and below the loop, so that the quality bench can call them too.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Mapping, Sequence

from environments.evaluate import EvalResult, EvalSpec, steps_pass
from trainer.length import check_lengths
from trainer.train import TrainSpec

KINDS = ("sft", "rl", "memory")
PROXY_SFT_STEPS = 10
"""The proxy's SFT steps per unit (`proxy_specs`; RunConfig.proxy_sft_steps's default)."""
PROXY_TASKS = 10
"""The proxy's dev tasks per unit (`proxy_specs`; RunConfig.proxy_tasks's default)."""
PROXY_ABLATION = "no-rl"
"""The proxy trains SFT only."""


def records(path: Path | None) -> int:
    """The records of an artifact file (its non-blank lines; 0 when there is no file)."""
    if path is None or not Path(path).exists():
        return 0
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def used(artifacts: Path, ablations=()) -> dict[str, Path | None]:
    """The artifact files the stages read, per kind ("sft", "rl", "memory"): None when the kind is
    ablated (`no-sft`, `no-rl`, `no-memory`) or its file holds no record."""
    artifacts = Path(artifacts)
    return {kind: None if f"no-{kind}" in ablations or not records(artifacts / f"{kind}.jsonl")
            else artifacts / f"{kind}.jsonl" for kind in KINDS}


def memory_used(memory: Path | str | None) -> str | None:
    """The memory rule of every evaluation: a memory file is retrieved from when it holds a record
    (a missing file is passed on, so evaluation says so)."""
    if memory is None or (Path(memory).is_file() and not records(Path(memory))):
        return None
    return str(memory)


@dataclass(frozen=True)
class TrainResult:
    """What a training returns (`train_on`): its `summary.json` document (`summary`, exactly as the
    trainer wrote it) and the length report of the records it was given (`length`, trainer.length's
    `to_json()`), with the fields their readers take from them."""
    summary: Mapping[str, Any]
    length: Mapping[str, Any]

    @property
    def trained(self) -> dict[str, int]:
        """What training used after the length limits: {"sft": examples, "rl": prompts}."""
        data = self.summary.get("data") or {}
        return {"sft": (data.get("sft") or {}).get("examples", 0), "rl": (data.get("rl") or {}).get("prompts", 0)}

    @property
    def brief(self) -> dict:
        """The summary's wall time, steps and per-stage figures (what the loop's journal keeps)."""
        return {k: self.summary.get(k) for k in ("wall_s", "steps", "sft", "grpo")}


def train_on(spec: TrainSpec, files: dict, out: Path, seed: int, *, echo: IO[str] | None = None,
             progress: bool = False, reuse_sft: Sequence[Path] = ()) -> TrainResult:
    """The fixed recipe (trainer.train.train, in a child process) on `files`' SFT and RL records
    (either may be None), as `spec` says, after the length check (`check_lengths`, said to `echo`
    or stderr); `files`' memory bank goes with it (read only when the profile's `sft_memory_hints`
    puts hints into the SFT prompts). `reuse_sft`: finished trainings whose SFT stage this one may
    take over when it would repeat it (trainer.sft_reuse). Returns the training's typed result
    (its summary and the length report)."""
    from trainer.train import train_as

    length = check_lengths(spec, files["sft"], files["rl"], echo or sys.stderr)
    summary = train_as(spec, files["sft"], files["rl"], out, seed=seed, echo=echo, progress=progress,
                       memory=files.get("memory"), reuse_sft=reuse_sft)
    return TrainResult(summary=summary, length=length.to_json())


def prompt_cap(spec: EvalSpec) -> int:
    """The prompt cap an evaluation decodes with: the spec's, raised to what the benchmark's prompts need
    (an environment's `prompt_tokens`: τ²'s policy is long)."""
    from base import registry

    return max(spec.max_prompt_tokens, registry.get(spec.benchmark).prompt_tokens)


def evaluate_on(spec: EvalSpec, split: str, out: Path, *, base: str, adapter: str | None, memory: Path | None,
                seed: int, tasks: int | None = None, samples: int = 1, temperature: float = 0.0, gold: bool = False,
                progress: bool = False, allow_test: bool = False, policy_options: dict | None = None,
                **options) -> EvalResult:
    """The policy (base + adapter; the base alone without one), retrieving from `memory` when that
    file holds a record, on the benchmark's `split` (environments.evaluate.evaluate_to_dir into
    `out`), as `spec` says; `tasks` overrides the spec's (a proxy's subset). Greedy, or `samples`
    rollouts per task at `temperature` (episodes only). `policy_options` adds to the local policy's
    (an endpoint, a device; environments.evaluate.build_policy), `options` to evaluate_to_dir's
    (`curateevo eval`'s categories, max_steps, a ready policy, …). Returns the evaluation's typed
    result (its `doc` is metrics.json's object)."""
    from environments.evaluate import evaluate_to_dir

    policy = {"base": base, "adapter": adapter, "threads": spec.threads, "max_new_tokens": spec.max_new_tokens,
              "max_prompt_tokens": prompt_cap(spec), **(policy_options or {})}
    corpus = {"corpus": list(spec.corpus), "corpus_tools": spec.corpus_tools, "corpus_on_error": spec.corpus_on_error,
              "holdout": spec.holdout} if spec.corpus else {}
    return EvalResult(evaluate_to_dir(
        spec.benchmark, split, out, tasks=tasks or spec.tasks, metric=spec.metric, memory=memory_used(memory),
        memory_k=spec.memory_k, seed=seed, batch_size=spec.batch_size, samples=samples, temperature=temperature,
        steps=spec.step_pass() if samples == 1 else False, gold=gold, progress=progress, allow_test=allow_test,
        policy_options=policy, **corpus, **options))


def proxy_specs(train: TrainSpec, evaluation: EvalSpec, units: int, sft_steps: int = PROXY_SFT_STEPS,
                tasks: int = PROXY_TASKS) -> tuple[TrainSpec, EvalSpec]:
    """The cheap proxy of a candidate's J, as the loop's `--candidates K` ranks candidates and the
    quality bench's `--proxy` measures it: `sft_steps` SFT steps per unit (no RL: `PROXY_ABLATION`)
    and a balanced subset of `tasks` dev tasks per unit (at most the spec's own)."""
    n = tasks * units if evaluation.tasks is None else min(evaluation.tasks, tasks * units)
    return train.with_budget(sft_max_steps=sft_steps * units), evaluation.model_copy(update={"tasks": n})
