"""Propose: the brief of the best strategy (its files with this epoch's inputs/, diagnosis, signals,
lessons, history), the proposer's effectiveness then efficiency revision — or k of them ranked by
the screen (evolver.screen) — each validated by a dry run, and the chosen ones handed to the candidate gate."""
from __future__ import annotations

import dataclasses
import math
import tempfile
from pathlib import Path

from base.errors import RunFailed
from base.files import atomic_json, read_json
from evolver import candidate as gate
from evolver.context import RunContext, say
from evolver.diagnosis_stage import summary_line
from evolver.proposers.brief import Brief
from evolver.results import Decision, Proposal
from evolver.screen import screen
from sandbox.manifest import CURATION_STATS_FILE
from sandbox.strategy_files import inputs_files


def propose(run: RunContext, epoch: int) -> Proposal:
    """Effectiveness, then efficiency revision of `best`: each dry-run with this epoch's
    inputs, committed on `candidates/epoch-(e+1)`; the last one is tagged `epoch-(e+1)` and
    its dry run's artifacts become epoch e+1's."""
    best = run.best()
    brief, inputs = brief_of(run, epoch, best)
    out = run.fresh_dir(epoch, "evolve")
    run.fresh_dir(epoch + 1, "artifacts")
    out.mkdir(parents=True)
    phases = [p for p in ("effectiveness", "efficiency") if f"no-{p}" not in run.cfg.ablations]
    k = run.cfg.candidates if hasattr(run.proposer, "candidates") and phases[:1] == ["effectiveness"] else 1
    selection = None
    with tempfile.TemporaryDirectory(prefix=".dry-runs-", dir=run.store.root) as tmp:
        dry = gate.DryRuns(Path(tmp), inputs, run.corpus, run.executor, run.cfg,
                           gate.artifact_hashes(run.store.epoch_dir(best.epoch) / "artifacts"), run.curation_llm)
        if k > 1:   # k effectiveness revisions, each with its efficiency revision; the proxy picks one pair
            chain, log, exhausted, selection = ranked(run, brief, dry, out, phases, k)
        else:
            chain, log, exhausted = revise(run, brief, dry, out, phases, [])
        failure = llm_failure(log)   # a half-asked proposer's candidate is no candidate: nothing is committed
        sha, edits = (None, []) if failure else gate.commit(run, epoch + 1, chain, dry)
    atomic_json(out / "proposals.json", log if selection is None else {"attempts": log, "rungs": selection.rungs,
                                                                       "chosen": selection.index})
    if failure:   # not a rejected proposal: the stage fails (journaled), and resume proposes again from the brief
        raise RunFailed(f"the LLM failed while proposing the candidate of epoch {epoch + 1} "
                        f"({' '.join(failure.split())[:200]}); nothing of that candidate was kept: when the server "
                        f"answers again, `curateevo resume {run.store.root}` proposes again (add --base-url URL if "
                        "its address changed)")
    proposal = Proposal(candidate=sha, edits=edits, dry_runs=dry.count, budget_exhausted=exhausted)
    if sha is None:
        proposal.refused = refused_reasons(log)
        proposal.refused_edits = sorted({e for a in log for e in a.get("edits", ())})
    if selection:
        proposal.candidates = len(selection.rungs[0]["scores"]) if selection.rungs else 1
        proposal.proposed, proposal.chosen = k, selection.index
    return proposal


def brief_of(run: RunContext, epoch: int, best: Decision) -> tuple[Brief, dict[str, bytes]]:
    """What the proposer is given, and this epoch's inputs/ (the files every candidate carries)."""
    cfg, diag = run.cfg, run.store.epoch_dir(epoch) / "diagnosis"
    failed_points, signals = read_json(diag / "failed_points.json"), read_json(diag / "signals.json")
    lessons = read_json(diag / "rejected.json") if (diag / "rejected.json").is_file() else []   # older runs: none
    stats = read_json(run.store.epoch_dir(best.epoch) / "artifacts" / CURATION_STATS_FILE)
    inputs = inputs_files({"failed_points": failed_points, "signals": signals, "profile": stats,   # inputs/profile.json
                           "rejected": lessons, "params": cfg.params()})
    parent = {k: v for k, v in run.ws.files("best").items() if not k.startswith("inputs/")}
    rejected = [k for d in run.decisions() if not d.accepted for k in d.edits]
    brief = Brief(files={**parent, **inputs}, failed_points=failed_points, signals=signals, curation_stats=stats,
                  lam=cfg.lam, rejected_edits=rejected, history=history(run), corpus=run.corpus,
                  seed=cfg.seed, score=best.scores(), budget=cfg.curation_budget,
                  outcomes=read_json(diag / "outcomes.json") if (diag / "outcomes.json").is_file() else (),
                  rejected=lessons, benchmark=cfg.benchmark)
    return brief, inputs


def ranked(run: RunContext, brief: Brief, dry, out: Path, phases: list[str], k: int):
    """k effectiveness revisions, each with its efficiency revision, ranked by the proxy: (the chosen
    chain, the attempt log, LLM budget exhausted, the selection or None when none was found)."""
    firsts = run.proposer.candidates("effectiveness", brief, dry.validate, k, out)
    log = [{"phase": "effectiveness", **a, "candidate": i} for i, o in enumerate(firsts) for a in o.attempts]
    exhausted = any(o.budget_exhausted for o in firsts)
    if llm_failure(log):   # the server is gone: no efficiency revision, no proxy training
        return [], log, exhausted, None
    pairs = {}   # candidate number → (chain, attempt log, budget exhausted)
    for i, first in enumerate(firsts):
        if first.files:
            pairs[i] = revise(run, brief, dry, out / f"candidate-{i}", phases[1:], [first])
    log += [{**row, "candidate": i} for i, (_, rows, _) in pairs.items() for row in rows]
    exhausted = exhausted or any(e for _, _, e in pairs.values())
    if not pairs or llm_failure(log):
        return [], log, exhausted, None
    numbers = list(pairs)
    selection = screen([pairs[i][0] for i in numbers], run.cfg.proxy_budget or   # each scored cell kept: resumable
                       len(pairs) * max(1, math.ceil(math.log2(len(pairs)))), folder=out.parent / "screen", run=run, dry=dry)
    # rungs and the choice by candidate number (a candidate that found nothing is not ranked)
    selection.index = numbers[selection.index]
    selection.rungs = [{**r, "scores": {numbers[i]: v for i, v in r["scores"].items()},
                        "survivors": [numbers[i] for i in r["survivors"]]} for r in selection.rungs]
    return selection.best, log, exhausted, selection


def revise(run: RunContext, brief: Brief, dry, out: Path, phases: list[str], chain: list) -> tuple[list, list, bool]:
    """The revisions of `phases` in order, each from the last one of `chain` (validated
    outcomes): (chain, attempt log, LLM budget exhausted)."""
    chain, log = list(chain), []
    for phase in phases:
        if chain:
            files = dry.candidate(chain[-1].files)
            brief, dry.parent = dataclasses.replace(brief, files=files), gate.artifact_hashes(dry.output(files))
        outcome = run.proposer.revise(phase, brief, dry.validate, out)
        log += [{"phase": phase, **attempt} for attempt in outcome.attempts]
        if llm_failure(outcome.attempts):   # the server failed past its retries: the next phase would too
            return chain, log, False
        if outcome.budget_exhausted:
            say("the run's LLM budget is spent; no more proposals")
            return chain, log, True
        if outcome.files is not None:
            chain.append(outcome)
    return chain, log, False


def llm_failure(attempts: list[dict]) -> str | None:
    """Why the LLM failed for good in one of `attempts` (past the SDK's retries, or refusing the request:
    exit status LLMError; a spent budget or an outgrown context window is no such failure), else None."""
    return next((a["error"] for a in attempts if a.get("exit_status") == "LLMError"), None)


def history(run: RunContext) -> list[dict]:
    """The rolled-back attempts, for the code agent: what each changed and how it scored."""
    rows, best_j = [], None
    for d in run.decisions():
        if not d.accepted and d.epoch > 0:
            rows.append({"epoch": d.epoch, "summary": summary_line(run, d),
                         "diff": run.ws.diff_summary("best", d.commit) if d.commit else "",
                         "P": d.P, "C": d.C, "J": d.J, "best_J": best_j, "reason": d.reason})
        elif d.accepted:
            best_j = d.J
    return rows


def refused_reasons(attempts: list[dict], most: int = 5) -> list[str]:
    """Why the proposals of a propose stage were refused, as distinct sentences with their counts
    (the dry run's verdict, the host's refusal of a file, the agent's stop), at most `most`."""
    counts: dict[str, int] = {}
    for attempt in attempts:
        reason = attempt.get("error") or (f"dry run: {attempt['dry_run']}" if attempt.get("dry_run") else None)
        if reason:
            reason = " ".join(str(reason).split())[:300]
            counts[reason] = counts.get(reason, 0) + 1
    shown = [f"{reason} (×{n})" if n > 1 else reason for reason, n in counts.items()]
    return shown[:most] + ([f"{len(shown) - most} other reasons"] if len(shown) > most else [])
