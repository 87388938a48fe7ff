"""Decide: the candidate's P, C and J, the run's acceptance rule against the best, and the
decision settled in git (evolver.candidate.settle_in_git) and sent to the run's trackers."""
from __future__ import annotations

from statistics import fmean

from base.errors import RunFailed
from base.files import read_json
from base.objective import objective
from evolver.acceptance import Scores
from evolver.candidate import settle_in_git
from evolver.final_rules import c_only
from evolver.results import Curation, Decision, Evaluation, Proposal
from evolver.context import RunContext


def decide(run: RunContext, epoch: int, curation: Curation, evaluations: list[Evaluation], edits: list[str]) -> Decision:
    """Accept or roll back the candidate of `epoch` (a failed curation is rolled back unevaluated)."""
    if curation.failed is not None:
        what = "it would train nothing, so it is rolled back unevaluated" if curation.untrainable else "curation failed"
        decision = Decision(epoch=epoch, commit=curation.commit, accepted=False, edits=edits,
                            reason=f"{what}: {curation.failed}")
    else:
        decision = judged(run, epoch, curation, evaluations, edits)
    settle_in_git(run, decision)
    track(run, decision, curation)
    return decision


def judged(run: RunContext, epoch: int, curation: Curation, evaluations: list[Evaluation], edits: list[str]) -> Decision:
    """The acceptance rule's ruling on an evaluated candidate: J = P − λ·C against the best's."""
    cfg = run.cfg
    if any(e.P is None for e in evaluations):   # nothing was scored: no P to decide on
        raise RunFailed(f"epoch {epoch}: the evaluation scored nothing (dev {evaluations[0].dev or None}), so P is "
                        f"undefined; the dev set gives no {cfg.metric} item for this run")
    p = fmean(e.P for e in evaluations)
    candidate = Scores(p, curation.C, objective(p, curation.C, cfg.lam), run.per_task(epoch), run.task_groups(epoch))
    best = run.best()
    ruling = run.rule.decide(candidate, None if best is None else
                             Scores(best.P, best.C, best.J, run.per_task(best.epoch), run.task_groups(best.epoch)), cfg.lam)
    decision = Decision(epoch=epoch, commit=curation.commit, accepted=ruling.accepted, reason=ruling.reason, P=p,
                        C=curation.C, J=candidate.J, edits=edits, dev=evaluations[0].dev or None)
    empty = trained_nothing(run, epoch)
    if empty and decision.accepted:   # the base model's P must not win on C: never the best
        decision.accepted, decision.reason = False, f"rejected: {empty}, so P measures the base model ({ruling.reason})"
    cheaper = c_only(p, curation.C, best and best.scores()) if decision.accepted else None
    if cheaper:   # said so wherever the decision is shown (commit message, log, report)
        decision.c_only, decision.reason = True, f"{decision.reason}; {cheaper}"
    gold = [e.gold_ll for e in evaluations if e.gold_ll is not None]
    if gold:   # the low-variance signal beside P (environments/gold_likelihood.py); not part of J
        decision.gold_ll = round(fmean(gold), 6)
    return decision


def trained_nothing(run: RunContext, epoch: int) -> str | None:
    """Why the candidate of `epoch` trained nothing in any seed (no SFT example, no RL prompt), or None:
    ρ0, a run that ablates both SFT and RL, or a candidate that trained something."""
    if epoch == 0 or {"no-sft", "no-rl"} <= set(run.cfg.ablations):
        return None
    trainings = [run.result(epoch, f"train-s{seed}") for seed in run.cfg.seeds]
    if all(t is not None and not any((t.trained or {}).values()) for t in trainings):
        return "its training used no SFT example and no RL prompt"
    return None


def no_candidate(run: RunContext, epoch: int) -> Decision:
    """The decision of an epoch for which every proposal was refused: not evaluated, nothing
    committed, the reasons recorded; its refused edits are not proposed again."""
    proposed = run.result(epoch - 1, "propose") or Proposal(candidate=None)
    reasons = proposed.refused or ["the proposer offered no candidate"]
    if proposed.budget_exhausted:
        reasons = ["the run's LLM budget is spent", *reasons]
    return Decision(epoch=epoch, accepted=False, no_candidate=True, reason="no valid candidate: " + "; ".join(reasons),
                    edits=proposed.refused_edits or [], budget_exhausted=proposed.budget_exhausted)


def track(run: RunContext, decision: Decision, curation: Curation) -> None:
    """P, C, J, the decision, P per category and the curated scale of the epoch, to the run's trackers."""
    from trainer.tracking import log_epoch_metrics

    cfg, per_category = run.cfg, {}
    for s in cfg.seeds:
        path = run.store.epoch_dir(decision.epoch) / f"eval-s{s}" / "metrics.json"
        if path.is_file():
            for name, m in read_json(path)["per_category"].items():
                if m.get(cfg.metric) is not None:
                    per_category.setdefault(name, []).append(m[cfg.metric])
    log_epoch_metrics(cfg.train.report_to, run.store.root, decision.epoch, {
        "P": decision.P, "C": decision.C, "J": decision.J, "accepted": decision.accepted,
        "P_per_category": {k: fmean(v) for k, v in per_category.items()},
        "scale": {k.split(".")[0]: v for k, v in curation.counts.items()}})
