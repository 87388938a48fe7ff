"""The objective J = P − λ·C and the choice of the final strategy (paper §4.2–4.3); the
acceptance rules are in evolver/acceptance.py."""
from __future__ import annotations

from typing import Mapping, Sequence

LAMBDA = 0.3


def objective(p: float, c: float, lam: float = LAMBDA) -> float:
    """J = P − λ·C."""
    return p - lam * c


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


def c_only(p: float, c: float, best: dict | None) -> str | None:
    """What to add to an accepted candidate's reason when it ties the best P and wins on a lower C
    alone (a cheaper curation, not a better policy); None otherwise."""
    if best is None or p != best.get("P") or best.get("C") is None or not c < best["C"]:
        return None
    return (f"P is unchanged ({p:.4f}): accepted on a lower C alone ({best['C']:.4f} → {c:.4f}), "
            "a cheaper curation, not a better policy")
