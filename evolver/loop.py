"""The epoch loop (paper §4), top to bottom: each stage is one call into the module that owns it.

    curate ρ_e (evolver.candidate) → train π_e → evaluate on dev (evolver.evaluation) → P, C, J:
    accept or roll back (evolver.decision) → diagnose the best (evolver.diagnosis_stage)
    → propose ρ_{e+1}: revisions dry-run, committed and tagged with their inputs/ (evolver.propose)

Every stage goes through `RunContext.stage` (evolver.context; `RunStore.stage` underneath), so
`resume` skips what is done and intact and reaches the same decisions; each returns its typed
result (evolver.results), whose journal form is what the journal records.
"""
from __future__ import annotations

from evolver.candidate import curate_candidate, trainable
from evolver.context import RunContext, say
from evolver.decision import decide, no_candidate
from evolver.diagnosis_stage import diagnose_best
from evolver.evaluation import train_and_evaluate
from evolver.final import choose_final
from evolver.propose import propose
from evolver.results import Decision, Final
from evolver.store import RunStore


class BudgetSpent(Exception):
    """The run's LLM budget is spent: nothing more can be proposed, so the run ends."""


def run_epochs(store: RunStore, backend=None) -> dict:
    """Run (or resume) every epoch of the run in `store` (trainings and evaluations on `backend`,
    else the run's own); returns the final choice."""
    run = RunContext(store, backend)
    try:
        _ = run.needs   # a cluster that cannot run the profile's stages is refused before any work
        try:
            for epoch in range(run.cfg.epochs):
                one_epoch(run, epoch)
        except BudgetSpent:
            say("the run's LLM budget is spent; the run ends here")
        return run.stage(-1, "final", lambda: final(run)).journal()
    finally:
        run.backend.close()


def one_epoch(run: RunContext, epoch: int) -> None:
    """Decide the candidate tagged `epoch-<e>`; then diagnose the best strategy and propose ρ_{e+1}."""
    if epoch and run.ws.epochs().get(epoch) is None:   # every proposal was refused: recorded, and on to the next
        decision = run.stage(epoch, "decide", lambda: no_candidate(run, epoch))
        say(f"epoch {epoch}: {decision.reason}")
        if decision.budget_exhausted:
            run.finished(epoch)
            raise BudgetSpent
    else:
        evaluate_candidate(run, epoch)
    if epoch + 1 < run.cfg.epochs:
        folder, next_folder = run.store.epoch_dir(epoch), run.store.epoch_dir(epoch + 1)
        run.stage(epoch, "diagnose", lambda: diagnose_best(run, epoch), [folder / "diagnosis"])
        run.stage(epoch, "propose", lambda: propose(run, epoch),   # a candidate's dry run is the next epoch's artifacts
                  lambda p: [folder / "evolve"] + ([next_folder / "artifacts"] if p.candidate else []))
    run.finished(epoch)


def evaluate_candidate(run: RunContext, epoch: int) -> Decision:
    """Curate, train, evaluate and decide the candidate tagged `epoch-<e>`."""
    curation = run.stage(epoch, "curate", lambda: curate_candidate(run, epoch),   # a failed curation leaves no artifacts
                         lambda c: [] if c.failed is not None else [run.store.epoch_dir(epoch) / "artifacts"])
    curation = trainable(run, epoch, curation)   # one that would train nothing is rolled back unevaluated
    evaluations = train_and_evaluate(run, epoch) if curation.failed is None else []
    proposal = run.result(epoch - 1, "propose") if epoch else None
    decision = run.stage(epoch, "decide", lambda: decide(run, epoch, curation, evaluations,
                                                        proposal.edits if proposal else []))
    say(f"epoch {epoch}: {'ACCEPTED' if decision.accepted else 'rejected'} — {decision.reason}")
    return decision


def final(run: RunContext) -> Final:
    """The final strategy, by the run's final rule (evolver.final: by default the accepted lineage's head)."""
    return choose_final(run)
