"""The objective of the paper (§4.2), written once: J = P − λ·C.

P ∈ [0, 1] is dev performance, C = tanh(log(1 + Cost_train) / log(1 + N_ref)) the cost of what a
curation trains on (sandbox/checker.py `cost_c`), λ the run's trade-off (`--lambda`, run.json
`lambda`). The loop scores every candidate with it, the quality table's proxy and full-recipe
rows too; both take λ from here unless a run gives its own."""
from __future__ import annotations

LAMBDA = 0.3
"""λ of J = P − λ·C: the run's default (evolver.config.RunConfig.lam) and the quality table's."""


def objective(p, c, lam: float = LAMBDA):
    """J = P − λ·C (numbers, or numpy arrays of resampled P and C alike)."""
    return p - lam * c
