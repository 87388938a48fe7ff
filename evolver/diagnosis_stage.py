"""Diagnose: the failures of the best strategy's evaluation (rules, and the LLM when the run has one),
CoEvolve's signals, what each evaluated edit fixed and broke, and the lessons of the candidates
rolled back since the best. Writes `epochs/<e>/diagnosis/`, which the next candidate's inputs/ copy."""
from __future__ import annotations

from base.files import atomic_json, read_json
from evolver.diagnose import diagnose, rejected_lesson
from evolver.lineage import annotate, brief_of, outcome_deltas
from evolver.results import Decision, Diagnosis
from evolver.signals import summarize
from evolver.context import RunContext, say
from sandbox.manifest import CURATION_STATS_FILE

LESSONS = 3   # rolled-back candidates since the best whose lessons the next brief carries (most recent)


def diagnose_best(run: RunContext, epoch: int) -> Diagnosis:
    """failed_points.json, signals.json, outcomes.json and rejected.json of the best strategy so far."""
    cfg, best = run.cfg, run.best()
    trajectories = run.evaluated(best.epoch)
    # every policy evaluated before the diagnosed one, rejected ones too (each was a trained policy)
    history = [summarize(run.evaluated(d.epoch)) for d in run.decisions() if d.epoch < best.epoch and d.P is not None]
    stats = run.store.epoch_dir(best.epoch) / "artifacts" / CURATION_STATS_FILE
    trainings = [read_json(p) for p in sorted(run.store.epoch_dir(best.epoch).glob("train-s*/summary.json"))]
    failed_points, signals = diagnose(trajectories, history=history, sampled=run.evaluated(best.epoch, "sample"),
                                      params=cfg.signal_params(), curation_stats=read_json(stats) if stats.is_file() else None,
                                      trainings=trainings)
    result = Diagnosis(of_epoch=best.epoch, families=signals["families"])
    if run.llm is not None and cfg.diagnosis == "rules+llm":
        from evolver.llm_diagnose import llm_diagnose

        points, result.llm_diagnosis = llm_diagnose(trajectories, run.llm, run.store.root / "llm" / "diagnosis-cache",
                                                    progress=True)
        failed_points += points
        stopped = result.llm_diagnosis["stopped"]   # a server gone mid-run: recorded in the journal, said, not fatal
        if stopped:
            say(f"epoch {epoch}: the LLM diagnosis stopped early ({' '.join(stopped.split())[:300]}); the rule-based "
                "failed points stand in for the trajectories it did not read")
    lessons = rolled_back_lessons(run, best)
    if lessons:
        result.rejected = {str(x["epoch"]): {"broke": len(x["broke"]), "fixed": len(x["fixed"])} for x in lessons}
    out = run.fresh_dir(epoch, "diagnosis")
    deltas = outcome_deltas(run.store, cfg.seeds, until=epoch)   # what each evaluated edit fixed and broke
    atomic_json(out / "failed_points.json", annotate(failed_points, deltas))
    atomic_json(out / "signals.json", signals)
    atomic_json(out / "outcomes.json", brief_of(deltas))
    atomic_json(out / "rejected.json", lessons)
    return result


def rolled_back_lessons(run: RunContext, best: Decision) -> list[dict]:
    """What the candidates rolled back since `best` was accepted teach (the last LESSONS of
    them, oldest first): each one's evaluation against the best's (diagnose.rejected_lesson:
    the tasks it broke and fixed, its failures, its own signals), with its edits and scores."""
    best_trajectories, lessons = run.evaluated(best.epoch), []
    for d in run.decisions():
        if d.accepted or d.epoch <= best.epoch or d.P is None:
            continue
        lesson = rejected_lesson(run.evaluated(d.epoch), best_trajectories, sampled=run.evaluated(d.epoch, "sample"),
                                 params=run.cfg.signal_params())
        lessons.append({"epoch": d.epoch, "summary": summary_line(run, d), "edits": list(d.edits),
                        **{k: getattr(d, k) for k in ("P", "C", "J", "reason")},
                        "against": {k: getattr(best, k) for k in ("epoch", "P", "C", "J")}, **lesson})
    return lessons[-LESSONS:]


def summary_line(run: RunContext, decision: Decision) -> str:
    """The first line of the commit message of a decision's candidate ("" without one)."""
    message = run.ws.log(decision.commit)[0]["message"] if decision.commit else ""
    return message.splitlines()[0] if message else ""
