"""Train and evaluate: every seed's training, evaluation (and boundary rollouts) of an epoch on the
run's backend, and the cheap proxy that ranks k candidates before one gets the full recipe. The
jobs themselves are `evolver.stages.train_epoch` / `evaluate_epoch` (the fixed recipe, the dev set)."""
from __future__ import annotations

import tempfile
from pathlib import Path

from base.files import read_json
from base.objective import objective
from experiments.train_eval import PROXY_ABLATION, proxy_specs
from evolver.final_rules import charged_cost
from evolver.results import Evaluation, Training
from evolver.context import RunContext
from sandbox.checker import cost_c
from sandbox.manifest import CURATION_STATS_FILE, Manifest


def train_and_evaluate(run: RunContext, epoch: int) -> list[Evaluation]:
    """Every seed's training, evaluation (and boundary rollouts) of the epoch, submitted to the
    backend at once and journaled in seed order, whatever order they finish in."""
    jobs, adopted = run.jobs.pending(epoch, samples(run, epoch))
    batch = run.backend.submit(jobs, landed=lambda job, result: run.jobs.land(epoch, job, result))

    def take(key: str, kind):
        return lambda: kind.from_journal(adopted[key] if key in adopted else batch.result(key))

    folder, evaluations = run.store.epoch_dir(epoch), []
    for seed in run.cfg.seeds:
        run.stage(epoch, f"train-s{seed}", take(f"train-s{seed}", Training),
                  lambda trained: [Path(trained.adapter)] if trained.adapter else [])
        evaluations.append(run.stage(epoch, f"evaluate-s{seed}", take(f"evaluate-s{seed}", Evaluation),
                                     [folder / f"eval-s{seed}"]))
        if samples(run, epoch):
            run.stage(epoch, f"sample-s{seed}", take(f"sample-s{seed}", Evaluation), [folder / f"sample-s{seed}"])
    return evaluations


def samples(run: RunContext, epoch: int) -> bool:
    """Whether the epoch samples K rollouts per dev task for the boundary signal (only a diagnosis
    reads them, so the last epoch does not; an environment without episodes, next-call, has none)."""
    return run.cfg.boundary_samples > 1 and run.env.executable and epoch + 1 < run.cfg.epochs


def proxy_scores(run: RunContext, dry, chains: list[list], units: int) -> list[float]:
    """The cheap estimates of candidates' J, submitted to the backend at once: a short SFT on each
    one's dry-run artifacts (no RL) and a small balanced dev subset, both scaled by `units`."""
    train, evaluation = proxy_specs(run.cfg.train, run.cfg.eval_spec, units, run.cfg.proxy_sft_steps,
                                    run.cfg.proxy_tasks)
    # the jobs carry the run's config (a backend ships it to its workers): the proxy's, whose specs are those
    cfg = run.cfg.replace(train=train, ablations=tuple(sorted({*run.cfg.ablations, PROXY_ABLATION})))
    common = {"cfg": cfg, "seed": run.cfg.seeds[0]}
    with tempfile.TemporaryDirectory(prefix=".proxy-", dir=run.store.root) as tmp:
        jobs, costs = [], []
        for i, chain in enumerate(chains):
            folder = dry.output(dry.candidate(chain[-1].files))
            costs.append(proxy_cost(run.cfg, folder))
            jobs += [run.jobs.job(f"proxy-train-c{i}", Path(tmp) / str(i) / "train", None, artifacts=folder, **common),
                     run.jobs.job(f"proxy-evaluate-c{i}", Path(tmp) / str(i) / "eval", None, artifacts=folder, **common,
                                  after={"adapter": (f"proxy-train-c{i}", "adapter")},
                                  tasks=evaluation.tasks)]
        batch = run.backend.submit(jobs)
        return [objective(Evaluation.from_journal(batch.result(f"proxy-evaluate-c{i}")).P, c, run.cfg.lam)
                for i, c in enumerate(costs)]


def proxy_cost(cfg, folder: Path) -> float:
    """C of a candidate's dry run, charged as the full recipe will be (the curate stage)."""
    if {"no-sft", "no-rl"} & set(cfg.ablations):
        return cost_c(charged_cost(read_json(folder / CURATION_STATS_FILE), cfg.ablations), cfg.n_ref)
    return Manifest.read(folder).C
