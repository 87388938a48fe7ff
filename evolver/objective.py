"""The objective J = P − λ·C, the acceptance rule, and the choice of the final strategy (paper §4.2–4.3)."""
from __future__ import annotations

import random
from dataclasses import dataclass
from statistics import fmean
from typing import Mapping, Sequence

LAMBDA = 0.3


def objective(p: float, c: float, lam: float = LAMBDA) -> float:
    """J = P − λ·C."""
    return p - lam * c


@dataclass(frozen=True)
class Decision:
    accepted: bool
    reason: str            # one sentence, written into the commit message and the journal
    delta_j: float


def accept(candidate_j: float, best_j: float, margin: float = 0.0) -> Decision:
    """Accept when the candidate's J beats the best J by more than `margin`."""
    delta = candidate_j - best_j
    if delta > margin:
        return Decision(True, f"J {candidate_j:.4f} beats the best {best_j:.4f} by {delta:+.4f} (> margin {margin:g})", delta)
    return Decision(False, f"J {candidate_j:.4f} does not beat the best {best_j:.4f} by more than {margin:g} "
                           f"({delta:+.4f}); rolled back", delta)


def accept_paired(candidate: Mapping[str, Sequence[float]], best: Mapping[str, Sequence[float]],
                  candidate_c: float, best_c: float, lam: float = LAMBDA, margin: float = 0.0,
                  confidence: float = 0.9, resamples: int = 2000, seed: int = 0) -> Decision:
    """Noise-aware acceptance: both strategies scored on the same tasks with several seeds.

    `candidate` / `best` map task id → per-seed scores. The per-task mean differences are
    resampled (paired bootstrap, seeded); accept when ΔJ > margin in at least `confidence` of
    the resamples. C is deterministic per strategy, so ΔJ = ΔP − λ·ΔC.
    """
    tasks = sorted(set(candidate) & set(best))
    if not tasks:
        return Decision(False, "no task scored under both strategies; rolled back", 0.0)
    diffs = [fmean(candidate[t]) - fmean(best[t]) for t in tasks]
    cost = lam * (candidate_c - best_c)
    delta = fmean(diffs) - cost
    rng = random.Random(f"accept_paired:{seed}")
    wins = sum(fmean(rng.choices(diffs, k=len(diffs))) - cost > margin for _ in range(resamples))
    share = wins / resamples
    verdict = f"paired over {len(tasks)} tasks: ΔJ {delta:+.4f}, above margin {margin:g} in {share:.0%} of resamples"
    if share >= confidence:
        return Decision(True, verdict + f" (≥ {confidence:.0%})", delta)
    return Decision(False, verdict + f" (< {confidence:.0%}); rolled back", delta)


def final_choice(epochs: Sequence[Mapping]) -> Mapping:
    """The final strategy: the best dev P, lower C breaking ties, then the earlier epoch (paper §4.3)."""
    scored = [e for e in epochs if e.get("P") is not None]
    if not scored:
        raise ValueError("no evaluated epoch to choose from")
    return min(scored, key=lambda e: (-e["P"], e["C"], e["epoch"]))
