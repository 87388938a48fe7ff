"""The final rules and what they weigh (paper §4.2–4.3): the final choice (which evaluated epoch the run
ends on; evolver/final.py applies it), the cost a run with ablations is charged, and the "C only"
label. J = P − λ·C itself is base/objective.py (the quality table uses it too); the acceptance
rules are in evolver/acceptance.py. (Was evolver/objective.py: two modules shared that name.)"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence


def charged_cost(profile: Mapping, ablations: Sequence[str]) -> int:
    """Cost_train of what the recipe consumes in a run with `ablations`: the curated profile's SFT
    and RL turns, less what an ablation leaves untrained (memory costs no training turns)."""
    return (0 if "no-sft" in ablations else int(profile["sft"]["turns"])) + \
        (0 if "no-rl" in ablations else int(profile["rl"]["turns"]))


def final_choice(epochs: Sequence[Mapping]) -> Mapping:
    """The final strategy: the best dev P, lower C breaking ties, then the earlier epoch (paper §4.3)."""
    scored = [e for e in epochs if e.get("P") is not None]
    if not scored:
        raise ValueError("no evaluated epoch to choose from")
    return min(scored, key=lambda e: (-e["P"], e["C"], e["epoch"]))


PAPER = "the best dev P, lower C breaking ties, then the earlier epoch (paper §4.3)"


Judge = Callable[[Any], Any]
"""The run's acceptance rule's Ruling on an epoch's Decision as the candidate against the accepted
lineage's head (None: the epoch trained nothing, so its P is the base model's: never chosen)."""


def paper_best_dev(evaluated: list, head, judge: Judge) -> tuple[Any, str]:
    """The final rule `paper-best-dev`: `final_choice` among the evaluated epochs' Decisions."""
    choice = final_choice([d.journal() for d in evaluated])
    return next(d for d in evaluated if d.epoch == choice["epoch"]), PAPER


def accepted_best(evaluated: list, head, judge: Judge) -> tuple[Any, str]:
    """The final rule `accepted-best`: the head of the accepted lineage, unless `judge` accepts a
    rejected epoch against it (then the paper's order among those); with no head, the paper's order."""
    if head is None or head.P is None:   # nothing was accepted (ρ0's curation failed): the paper's order
        return paper_best_dev(evaluated, head, judge)[0], f"no epoch was accepted, so {PAPER}"
    beyond = {}
    for d in evaluated:
        ruling = None if d.accepted else judge(d)
        if ruling is not None and ruling.accepted:
            beyond[d.epoch] = ruling.reason
    if not beyond:
        return head, "the head of the accepted lineage (the best tag)"
    chosen, _ = paper_best_dev([d for d in evaluated if d.epoch in beyond], head, judge)
    return chosen, (f"rejected when it was decided, but it beats the head of the accepted lineage (epoch "
                    f"{head.epoch}) beyond the acceptance margin: {beyond[chosen.epoch]}")


FINAL_RULES: dict[str, Callable[[list, Any, Judge], tuple[Any, str]]] = {
    "accepted-best": accepted_best,
    "paper-best-dev": paper_best_dev,
}


def c_only(p: float, c: float, best: dict | None) -> str | None:
    """What to add to an accepted candidate's reason when it ties the best P and wins on a lower C
    alone (a cheaper curation, not a better policy); None otherwise."""
    if best is None or p != best.get("P") or best.get("C") is None or not c < best["C"]:
        return None
    return (f"P is unchanged ({p:.4f}): accepted on a lower C alone ({best['C']:.4f} → {c:.4f}), "
            "a cheaper curation, not a better policy")
