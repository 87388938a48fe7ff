"""The statistics of the quality benchmark: intervals, paired comparison, gap recovered, power.

A row's scores are `task id → per-seed scores` (one 0/1 task success per training seed, seeds
in the same order for every task). Every interval is a two-sided 95% interval unless told:

- one seed: the **Wilson score interval** of the proportion of tasks solved (binary scores);
- several seeds: a **crossed percentile bootstrap** — tasks and training seeds are resampled
  independently with replacement and the mean of the resampled task × seed table is taken.
  Resampling both factors counts the task-to-task and the seed-to-seed variation (a trained
  model is one draw of the seed); it slightly overstates the variance (McCullagh 2000), so the
  interval errs wide, never narrow.

Two rows are compared on the same tasks with base/paired.py's crossed paired bootstrap (one task
resample shared by both rows, and one seed resample when both were trained with the same seeds):
the same routine by which the loop's noise-aware acceptance judges a candidate. `seed_effect`
measures how much of the training seed's effect on P the rows share — what pairing the seeds
removes. Where the scored ids are records of fewer tasks (next-call: several held-out records of
one published task) `groups` names each id's task and the bootstrap draws tasks
(base/paired.py's cluster bootstrap); a row's interval is then that bootstrap, never Wilson's
(which counts each record as an independent trial). All resampling takes an explicit seed.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Sequence

import numpy as np

from base.paired import RESAMPLES, TIE_DECIMALS, Groups, Scores, resampled_means, shared_seed_weights, table, task_index, task_weights
from base.paired import paired_resamples


@dataclass(frozen=True)
class Estimate:
    value: float
    low: float
    high: float
    method: str

    def to_json(self) -> dict:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def _z(confidence: float) -> float:
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> Estimate:
    """The Wilson score interval of a proportion `successes / n`."""
    if n < 1 or not 0 <= successes <= n:
        raise ValueError("need 0 <= successes <= n and n >= 1")
    z, p = _z(confidence), successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    low = 0.0 if successes == 0 else max(0.0, centre - half)   # exact at the ends (no rounding residue)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return Estimate(p, low, high, "wilson")


def _percentiles(values: np.ndarray, confidence: float) -> tuple[float, float]:
    low, high = np.quantile(values, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(low), float(high)


def mean_interval(scores: Scores, confidence: float = 0.95, resamples: int = RESAMPLES, seed: int = 0,
                  groups: Groups | None = None) -> Estimate:
    """The mean score of a row with its interval: Wilson for one seed of 0/1 scores of one record a
    task, else the crossed bootstrap over tasks (`groups`: the task of each scored id) and seeds."""
    ids = sorted(scores)
    m = table(scores, ids)
    clustered = task_index(ids, groups)[0] is not None
    if m.shape[1] == 1 and set(np.unique(m)) <= {0.0, 1.0} and not clustered:
        return wilson_interval(int(m.sum()), m.shape[0], confidence)
    rng = np.random.default_rng(seed)
    means = resampled_means(m, task_weights(rng, m.shape[0], resamples, ids, groups), rng)
    return Estimate(float(m.mean()), *_percentiles(means, confidence), "bootstrap over tasks × seeds")


def paired_difference(a: Scores, b: Scores, confidence: float = 0.95, resamples: int = RESAMPLES,
                      seed: int = 0, groups: Groups | None = None) -> dict:
    """Mean(a) − mean(b) on the ids both rows scored: the estimate, its interval, and the
    one-sided share of resamples where a does not beat b (`p_not_better`) and the two-sided
    bootstrap p of no difference (`p_two_sided`, (k + 1)/(R + 1) so never 0): the summary, for
    the tables, of base.paired.paired_resamples' resamples (the loop's acceptance reads those directly).
    `tasks` counts the tasks resampled; `records` the ids, when they are more (`groups`)."""
    d = paired_resamples(a, b, resamples, seed, groups)
    est = Estimate(d.value, *_percentiles(d.resampled, confidence), "paired bootstrap over tasks × seeds")
    tail = min(int(np.sum(d.resampled <= 0)), int(np.sum(d.resampled >= 0)))
    return {**est.to_json(), "tasks": d.tasks, **({"records": d.records} if d.records != d.tasks else {}),
            "p_not_better": round(float(np.mean(d.resampled <= 0)), 6),
            "p_two_sided": round(min(1.0, 2 * (tail + 1) / (len(d.resampled) + 1)), 6)}


def holm(p_values: Sequence[float], alpha: float = 0.05) -> list[bool]:
    """Holm's step-down correction: which of m hypotheses are rejected with family-wise error
    ≤ alpha (the i-th smallest p against alpha/(m − i), stopping at the first that is not).
    Written here: scipy has no Holm (only Benjamini–Hochberg), statsmodels is not a dependency."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rejected = [False] * len(p_values)
    for rank, i in enumerate(order):
        if p_values[i] > alpha / (len(p_values) - rank):
            break
        rejected[i] = True
    return rejected


def gap_recovered(row: Scores, wild: Scores, labeled: Scores, confidence: float = 0.95,
                  resamples: int = RESAMPLES, seed: int = 0, groups: Groups | None = None) -> dict | None:
    """The share of the wild → labeled gap a row recovers, (row − wild) / (labeled − wild), with
    a paired-bootstrap interval over the resamples whose gap is positive. None when the measured
    gap is not positive (there is nothing to recover). `gap_positive` is the share of resamples
    with a positive gap: below 0.95, the share itself is not established."""
    tasks = sorted(set(row) & set(wild) & set(labeled))
    mr, mw, ml = (table(x, tasks) for x in (row, wild, labeled))
    gap = ml.mean() - mw.mean()
    if gap <= 0:
        return None
    rng = np.random.default_rng(seed)
    task_w = task_weights(rng, len(tasks), resamples, tasks, groups)
    seed_w = shared_seed_weights(rng, (mr, mw, ml), resamples)
    r, w, lab = (resampled_means(m, task_w, rng, seed_w) for m in (mr, mw, ml))
    gaps, gains = (np.round(x - w, TIE_DECIMALS) for x in (lab, r))   # ties read alike on every CPU (base.paired)
    positive = gaps > 0
    shares = gains[positive] / gaps[positive]
    est = Estimate(float((mr.mean() - mw.mean()) / gap), *_percentiles(shares, confidence),
                   "paired bootstrap over tasks × seeds")
    return {**est.to_json(), "gap": round(float(gap), 6), "gap_positive": round(float(positive.mean()), 6)}


def minimal_detectable_difference(n_tasks: int, seeds: int, p: float = 0.25, seed_sd: float = 0.0,
                                  alpha: float = 0.05, power: float = 0.8, shared: float = 0.0) -> float:
    """The smallest true difference in P between two rows (n tasks, S seeds each) that a
    two-sided test at level `alpha` detects with probability `power`:

        MDD = (z_{1−α/2} + z_{power}) · sqrt(2 · (p(1−p)/(n·S) + (1 − shared) · seed_sd²/S))

    where p is the base success rate, seed_sd the measured spread of P between training seeds (0
    when unmeasured: then it is a lower bound) and `shared` the share of its variance that two rows
    trained at the same seeds share (`seed_effect`; 0: independent draws). A base rate measured at 0 or 1 is no
    evidence of zero variance: it counts as half a success (or failure) in n·S + 1 trials."""
    if n_tasks < 1 or seeds < 1:
        raise ValueError("need at least one task and one seed")
    if p <= 0 or p >= 1:
        edge = 0.5 / (n_tasks * seeds + 1)
        p = edge if p <= 0 else 1 - edge
    variance = p * (1 - p) / (n_tasks * seeds) + (1 - shared) * seed_sd ** 2 / seeds
    return (_z(1 - alpha) + NormalDist().inv_cdf(power)) * math.sqrt(2 * variance)


def paired_minimal_detectable_difference(a: Scores, b: Scores, seed_sd: float = 0.0, alpha: float = 0.05,
                                         power: float = 0.8, shared: float = 0.0) -> float:
    """The minimal detectable difference of two rows compared on the same tasks, as the loop
    compares a candidate with the best: the measured per-task differences d_t (each row's mean
    over its seeds) give the task part, the training-seed spread the rest:

        MDD = (z_{1−α/2} + z_{power}) · sqrt(var(d)/n + 2 · (1 − shared) · seed_sd²/S)

    Rows that agree on most tasks (a curation edit changes a few outcomes) are told apart at a far
    smaller difference than `minimal_detectable_difference` assumes for independent samples.
    `shared`: the share of the seed variance both rows share when trained at the same seeds
    (`seed_effect`), which their difference does not carry. With seed_sd 0 (unmeasured) it is a
    lower bound."""
    tasks = sorted(set(a) & set(b))
    if len(tasks) < 2:
        raise ValueError("need at least two tasks scored by both rows")
    ma, mb = table(a, tasks), table(b, tasks)
    d = ma.mean(axis=1) - mb.mean(axis=1)
    seeds = min(ma.shape[1], mb.shape[1])
    variance = float(np.var(d, ddof=1)) / len(tasks) + 2 * (1 - shared) * seed_sd ** 2 / seeds
    return (_z(1 - alpha) + NormalDist().inv_cdf(power)) * math.sqrt(variance)


def seed_spread(per_seed: Sequence[float]) -> dict:
    """The run-to-run spread of P: its per-seed values, sample standard deviation and range."""
    values = [float(x) for x in per_seed]
    if len(values) < 2:
        raise ValueError("the spread needs at least two seeds")
    return {"seeds": len(values), "P": values, "mean": float(np.mean(values)),
            "sd": float(np.std(values, ddof=1)), "range": max(values) - min(values)}


def seed_effect(per_row: dict[str, Sequence[float]], permutations: int = 10_000, seed: int = 0) -> dict | None:
    """How much of the training seed's effect on P the rows share: a two-way analysis of variance
    of P over rows × seeds (one value per cell, rows with the most common seed count ≥ 2). The
    seed mean square against the residual gives F and its p; `p_permutation` permutes each row's
    seed labels (`permutations` times, seeded), which assumes no normality. `shared_var` is the
    variance of the seed effect every row shares (a method-of-moments estimate, floored at 0),
    `residual_var` the rest of a row's seed variance and `shared` the former's share: two rows trained at the same seeds differ by seed noise of variance 2·residual_var,
    not 2·(shared_var + residual_var). F is None where the residual is 0. None with fewer than 2
    residual degrees of freedom."""
    from collections import Counter

    from scipy.stats import f as f_dist

    widths = Counter(len(v) for v in per_row.values() if len(v) >= 2)
    if not widths:
        return None
    width = max(widths, key=lambda w: (widths[w], w))
    ids = sorted(r for r, v in per_row.items() if len(v) == width)
    m = np.asarray([[float(x) for x in per_row[r]] for r in ids])
    rows, seeds = m.shape
    df_seed, df_res = seeds - 1, (rows - 1) * (seeds - 1)
    if df_res < 2:
        return None

    def mean_squares(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:   # over the last two axes
        grand = x.mean(axis=(-2, -1), keepdims=True)
        seed_ms = rows * ((x.mean(axis=-2, keepdims=True) - grand) ** 2).sum(axis=(-2, -1)) / df_seed
        res = x - x.mean(axis=-1, keepdims=True) - x.mean(axis=-2, keepdims=True) + grand
        return seed_ms, (res ** 2).sum(axis=(-2, -1)) / df_res

    seed_ms, res_ms = (float(v) for v in mean_squares(m))
    res_ms = 0.0 if res_ms < 1e-12 else res_ms   # rounding, where every row moves alike
    shuffled = np.random.default_rng(seed).permuted(np.broadcast_to(m, (permutations, rows, seeds)), axis=-1)
    perm_seed, perm_res = mean_squares(shuffled)
    # F's order without dividing by a residual that can be 0
    as_large = int(np.sum(perm_seed - perm_res >= seed_ms - res_ms - 1e-12))
    shared_var = max(0.0, (seed_ms - res_ms) / rows)
    total = shared_var + res_ms
    F = round(seed_ms / res_ms, 4) if res_ms > 0 else None   # None: no residual, every row moved alike
    return {"rows": ids, "seeds": seeds, "F": F, "df": [df_seed, df_res],
            "p": round(float(f_dist.sf(F, df_seed, df_res)), 6) if res_ms > 0 else 0.0,
            "p_permutation": round((as_large + 1) / (permutations + 1), 6), "permutations": permutations,
            "shared_var": round(shared_var, 8), "residual_var": round(res_ms, 8),
            "shared": round(shared_var / total, 4) if total > 0 else 0.0}
