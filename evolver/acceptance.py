"""Acceptance rules (paper §4.2: accept when J improves, else roll back), one small class each.

The loop scores a candidate as a `Scores` (P, C, J and per-task scores over the seeds) and asks
the run's rule `decide(candidate, best, lam)`; `best` is None before any strategy is accepted
(the first evaluated strategy, ρ0, is the first best). A new rule is one class in this file (or
one module) plus one line in ACCEPTANCE.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Protocol, Sequence

import numpy as np

from base.objective import objective
from base.paired import CONFIDENCE, RESAMPLES, acceptance_margin, paired_resamples
from base import registry


@dataclass(frozen=True)
class Scores:
    """A strategy's evaluation: P (mean over seeds), C, J = P − λ·C, task id → per-seed scores, and
    `groups`: a scored id → the task it is a record of, where several are (next-call; base/paired.py)."""
    P: float
    C: float
    J: float
    per_task: Mapping[str, Sequence[float]] = field(default_factory=dict)
    groups: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Ruling:
    """An acceptance rule's answer on a candidate (the `decide` stage makes it an evolver.results.Decision)."""
    accepted: bool
    reason: str            # one sentence, written into the commit message and the journal
    delta_j: float


class AcceptanceRule(Protocol):
    name: str

    def decide(self, candidate: Scores, best: Scores | None, lam: float) -> Ruling: ...


def first_is_best(candidate: Scores) -> Ruling:
    """Before any acceptance: the first evaluated strategy (ρ0) is the first best."""
    return Ruling(True, "the seed strategy ρ0 is the first best", 0.0)


@dataclass(frozen=True)
class Margin:
    """Accept when the candidate's J beats the best J by more than `margin`."""
    margin: float = 0.0
    name: str = "margin"

    def decide(self, candidate: Scores, best: Scores | None, lam: float) -> Ruling:
        if best is None:
            return first_is_best(candidate)
        delta = candidate.J - best.J
        if delta > self.margin:
            return Ruling(True, f"J {candidate.J:.4f} beats the best {best.J:.4f} by {delta:+.4f} "
                                  f"(> margin {self.margin:g})", delta)
        return Ruling(False, f"J {candidate.J:.4f} does not beat the best {best.J:.4f} by more than "
                               f"{self.margin:g} ({delta:+.4f}); rolled back", delta)


@dataclass(frozen=True)
class PairedBootstrap:
    """Noise-aware: both strategies scored on the same tasks with several seeds. ΔP is resampled
    with base.paired's crossed paired bootstrap (the tasks — a cluster of records each where the
    scores name their task, `Scores.groups` — and the seeds shared, as both
    strategies train the run's seeds; the routine the quality table's paired difference uses too);
    accept when ΔJ > margin in at least `confidence` of the resamples. C is deterministic per
    strategy: ΔJ = ΔP − λ·ΔC."""
    margin: float = 0.0
    confidence: float = CONFIDENCE
    resamples: int = RESAMPLES
    seed: int = 0
    name: str = "paired"

    def decide(self, candidate: Scores, best: Scores | None, lam: float) -> Ruling:
        if best is None:
            return first_is_best(candidate)
        if not set(candidate.per_task) & set(best.per_task):
            return Ruling(False, "no task scored under both strategies; rolled back", 0.0)
        d = paired_resamples(candidate.per_task, best.per_task, self.resamples, self.seed,
                             {**best.groups, **candidate.groups})
        delta = objective(d.value, candidate.C - best.C, lam)
        share = float(np.mean(objective(d.resampled, candidate.C - best.C, lam) > self.margin))
        over = f"{d.tasks} tasks" + (f" ({d.records} records)" if d.records != d.tasks else "")
        said = (f"paired over {over}: ΔJ {delta:+.4f}, above margin {self.margin:g} "
                   f"in {share:.0%} of resamples")
        if share >= self.confidence:
            return Ruling(True, said + f" (≥ {self.confidence:.0%})", delta)
        return Ruling(False, said + f" (< {self.confidence:.0%}); rolled back", delta)


MEASURED_SEED_SD: dict[tuple[str, str, str, int], float] = {
    # ρ0 and augment on the balanced dev subset, seeds 0 and 1, pooled, at the paper's SFT lr 2.5e-5
    # (before cpu-small's lr became 2e-4); written down before raw files were kept
    ("cpu-small", "smollm2-135m", "bfcl-single", 60): 0.0264,
    # Table 1's eight rows × training seeds 0, 1, 2 on the 186 dev tasks at SFT lr 2e-4: the pooled sd
    # of bench/results/seed-spread-dev186-cpu-small-2026-11-28.json (per row there)
    ("cpu-small", "smollm2-135m", "bfcl-single", 186): 0.0202,
}
"""The run-to-run spread of P (sample sd over training seeds, one curated data set, pooled over
the strategies measured) from `curateevo bench quality --split dev --spread` for (profile, base,
benchmark, dev tasks); trainer/README.md gives the per-seed values. Two degrees of freedom: an
estimate, not a certainty. The default margin is derived from it (`default_margin`)."""

MEASURED_SEED_SHARED: dict[tuple[str, str, str, int], float] = {
    # the same eight rows × seeds 0, 1, 2 on the 186 dev tasks (`stats.seed_effect` in
    # bench/results/seed-spread-dev186-cpu-small-2026-11-28.json): a seed that trains one curated set
    # well trains the others well too (test's share, not used to set it, is in
    # bench/results/table1-test-cpu-small-2026-11-28-seeds-paired.json)
    ("cpu-small", "smollm2-135m", "bfcl-single", 186): 0.32,
}
"""The share of the training seed's variance of P that curated data sets trained at the same
seed share (`stats.seed_effect`) for (profile, base, benchmark, dev tasks), measured beside the
`MEASURED_SEED_SD` of the same setting (the 60-task spread was measured at another recipe: none). The loop trains every candidate
at the same seeds, so a candidate and the best differ by the rest: the margin counts only that."""


def default_margin(profile: str, base: str, benchmark: str, tasks: int, seeds: int, rule: str) -> tuple[float, str]:
    """The margin on ΔJ a run uses when none is given, and one sentence saying where it comes from.

    The margin rule: a candidate and the best, each scored with the same S seeds, differ by
    training noise alone with sd ≈ sd_P·√(2·(1 − shared)/S), `shared` the measured share of the seed
    variance that both carry (`MEASURED_SEED_SHARED`, 0 where unmeasured), so the margin is
    z · sd_P · √(2·(1 − shared)/S), z the normal quantile of `CONFIDENCE` — an accepted candidate
    beats the best by more than that noise with that one-sided confidence. The paired bootstrap
    resamples the tasks and the seeds both strategies trained (base.paired), so it already carries
    the seed noise: the margin is 0 and the confidence is the bootstrap's. A setting with no
    measured spread gets 0."""
    if rule == "paired":
        return 0.0, (f"paired bootstrap over {seeds} seed(s), accepted at {CONFIDENCE:.0%} of the resamples, "
                     "margin 0 (tasks and seeds are resampled, so the seed noise is in the verdict)")
    sd = MEASURED_SEED_SD.get((profile, base, benchmark, tasks))
    held_out = benchmark in registry.names() and registry.get(benchmark).holds_out_corpus()
    if sd is None and held_out:   # its dev is the corpus's held-out tenth, not `tasks` tasks
        return 0.0, (f"margin 0: no run-to-run spread of P is measured for {profile}, {base} on a corpus's held-out "
                     "tenth (next-call); with --seeds 2 or more the paired bootstrap accepts only a change beyond "
                     "the training-seed noise, or give --margin")
    if sd is None:
        return 0.0, (f"margin 0: no run-to-run spread of P is measured for {profile}, {base}, {benchmark}, {tasks} "
                     "dev tasks (measure it with `curateevo bench quality --spread --seeds 3`, then give --margin)")
    shared = MEASURED_SEED_SHARED.get((profile, base, benchmark, tasks), 0.0)
    margin = round(acceptance_margin(sd, seeds, CONFIDENCE, shared), 4)
    return margin, (f"margin {margin:g} on ΔJ: {CONFIDENCE:.0%} one-sided above the training-seed spread of P "
                    f"measured for {profile}, {base}, {benchmark}, {tasks} dev tasks (sd {sd:.3f}, {seeds} seed(s)"
                    + (f", {shared:.0%} of its variance shared by candidates trained at the same seed" if shared else "")
                    + "; trainer/README.md)")


# name → factory(run config) of the rule
ACCEPTANCE = {
    "margin": lambda config: Margin(config.margin),
    "paired": lambda config: PairedBootstrap(config.margin, seed=config.seed),
}


def rule_name(acceptance: str, seeds: int) -> str:
    """The acceptance rule in force: `auto` is paired with several seeds, else margin."""
    if acceptance != "auto":
        return acceptance
    return "paired" if seeds > 1 else "margin"


def make_rule(config) -> AcceptanceRule:
    """The acceptance rule a run config names (`auto`: `rule_name`)."""
    return ACCEPTANCE[config.acceptance_rule](config)
