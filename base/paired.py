"""The paired comparison of two rows scored on the same tasks with the same number of seeds: the
one routine by which the loop's noise-aware acceptance (evolver/acceptance.py `PairedBootstrap`)
and the quality table (experiments/quality/stats.py `paired_difference`, an interval and p-values
over this module's `paired_resamples`) judge whether a
difference is beyond noise.

A row's scores are `task id → per-seed scores` (seeds in the same order for every task). The
resampling is a **crossed paired bootstrap**: one resample of the tasks (with replacement) is
shared by both rows — the pairing — and so is one resample of the training seeds when both rows
were trained with the same seeds (the same number of them: the quality table's `--seeds N` and
the loop's `--seeds N` both train seeds 0..N−1). Pairing the seeds is measured, not assumed: at
`cpu-small` (SFT lr 2e-4) a training seed moves every curated data set the same way — over nine
rows × seeds 0, 1, 2 on 120 test tasks, 36% of the seed variance of P is shared by the rows
(two-way ANOVA F(2, 16) 6.1; within-row permutation p 0.005), and 32% of eight rows' on the 186
dev tasks (permutation p 0.023; docs/results.md) — so a difference
of two rows at the same seed varies less than two independent draws. Rows with different seed
counts resample their seeds on their own. Resampling both factors counts the task-to-task and the
seed-to-seed variation; it slightly overstates the variance (McCullagh 2000), so a verdict errs
cautious. With one seed the seed resample is the identity and it is the plain paired bootstrap
over tasks.

A scored id need not be a task of its own: in the next-call benchmark each held-out *record* is
scored, and several records may be trials of one published task (tau-bench, tau2-bench). `groups`
(scored id → the task it belongs to; an id it does not name is a task of its own) makes the task
resample a **cluster bootstrap**: tasks are drawn with replacement and each brings all its records,
the resample's mean being over the records drawn (`task_weights`). When every task is one record
it is the plain task resample, draw for draw (the same generator calls, the same numbers).
All resampling takes an explicit seed (numpy's default generator).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

RESAMPLES = 10_000
CONFIDENCE = 0.9
"""The one-sided confidence a difference must reach to count as beyond noise: the loop's paired
acceptance (`PairedBootstrap.confidence`), its default margin (evolver.acceptance.default_margin)
and the quality bench's spread report (`acceptance_margin`'s default), declared once."""

Scores = Mapping[str, Sequence[float]]
Groups = Mapping[str, str]
"""scored id → the task it is a record of (module docstring); an id not named is a task of its own."""


def table(scores: Scores, tasks: Sequence[str] | None = None) -> np.ndarray:
    """The tasks × seeds matrix of `scores` (tasks sorted, or in the order of `tasks`)."""
    tasks = sorted(scores) if tasks is None else list(tasks)
    if not tasks:
        raise ValueError("no task scores")
    missing = [t for t in tasks if t not in scores]
    if missing:
        raise ValueError(f"no scores for task {missing[0]!r}")
    widths = {len(scores[t]) for t in tasks}
    if len(widths) != 1 or 0 in widths:
        raise ValueError("every task needs a score for each seed (the same number of seeds)")
    return np.asarray([[float(x) for x in scores[t]] for t in tasks])


def task_weights(rng: np.random.Generator, n: int, resamples: int, ids: Sequence[str] | None = None,
                 groups: Groups | None = None) -> np.ndarray:
    """resamples × n: how often each of the n scored ids is drawn, over the records drawn (a resample's
    mean is weights @ column). Without `groups` (or when each id is its own task) the ids are the
    tasks drawn; with them the tasks are drawn and each brings its records (the cluster bootstrap)."""
    index, sizes = task_index(ids, groups) if ids is not None and groups else (None, None)
    if index is None:
        return rng.multinomial(n, np.full(n, 1.0 / n), size=resamples) / n
    k = len(sizes)
    drawn = rng.multinomial(k, np.full(k, 1.0 / k), size=resamples)
    return drawn[:, index] / (drawn @ sizes)[:, None]


def task_index(ids: Sequence[str], groups: Groups | None) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Each id's task (numbered in order of first appearance) and each task's count of ids; (None,
    None) when every id is a task of its own."""
    number: dict[str, int] = {}
    index = [number.setdefault(groups.get(i, i) if groups else i, len(number)) for i in ids]
    if len(number) == len(index):
        return None, None
    return np.asarray(index), np.bincount(index)


def count_tasks(ids: Sequence[str], groups: Groups | None) -> int:
    """How many tasks the scored ids are records of."""
    return len({groups.get(i, i) if groups else i for i in ids})


def seed_weights(rng: np.random.Generator, seeds: int, resamples: int) -> np.ndarray:
    """resamples × seeds: how often each training seed is drawn, over the number of seeds."""
    return rng.multinomial(seeds, np.full(seeds, 1.0 / seeds), size=resamples) / seeds


def resampled_means(m: np.ndarray, task_w: np.ndarray, rng: np.random.Generator,
                    seed_w: np.ndarray | None = None) -> np.ndarray:
    """The mean of m (tasks × seeds) over each resample: the shared task weights, and `seed_w`
    (a resample of the seeds shared with another row) or, without it, this row's own."""
    if seed_w is None:
        seed_w = seed_weights(rng, m.shape[1], len(task_w))
    return np.einsum("bs,bs->b", task_w @ m, seed_w)


def shared_seed_weights(rng: np.random.Generator, matrices: Sequence[np.ndarray], resamples: int) -> np.ndarray | None:
    """One seed resample for rows trained with the same seeds (equal seed counts), else None."""
    widths = {m.shape[1] for m in matrices}
    return seed_weights(rng, widths.pop(), resamples) if len(widths) == 1 else None


@dataclass(frozen=True)
class PairedDifference:
    """mean(a) − mean(b) on the ids both rows scored, and its resampled values; `tasks` the tasks
    those ids are records of (what is resampled), `records` the ids."""
    value: float
    tasks: int
    resampled: np.ndarray
    records: int = 0

    def share_above(self, threshold: float = 0.0) -> float:
        """The share of resamples whose difference exceeds `threshold`."""
        return float(np.mean(self.resampled > threshold))


TIE_DECIMALS = 12   # resampled differences are rounded here (paired_resamples): float noise is not a difference


def paired_resamples(a: Scores, b: Scores, resamples: int = RESAMPLES, seed: int = 0,
                     groups: Groups | None = None) -> PairedDifference:
    """The crossed paired bootstrap of mean(a) − mean(b) over the ids both rows scored, their tasks
    drawn as `groups` says (ValueError when they share none, or an id lacks a seed's score): the
    resampled differences themselves, which the loop's acceptance weighs against its margin.
    experiments.quality.stats.paired_difference summarises the same resamples as an interval at a
    confidence, with p-values, for the tables."""
    ids = sorted(set(a) & set(b))
    ma, mb = table(a, ids), table(b, ids)
    rng = np.random.default_rng(seed)
    task_w = task_weights(rng, len(ids), resamples, ids, groups)
    seed_w = shared_seed_weights(rng, (ma, mb), resamples)
    diffs = resampled_means(ma, task_w, rng, seed_w) - resampled_means(mb, task_w, rng, seed_w)
    # The matrix products' summation order follows the CPU's BLAS kernel, so a tie (a difference of
    # exactly 0) came out as 0 on one machine and ±1e-17 on another, moving p-values and verdicts
    # with the CPU: rounded at 1e-12, far below any score's step, every machine reads the same ties.
    diffs = np.round(diffs, TIE_DECIMALS) + 0.0   # + 0.0: no -0.0
    return PairedDifference(float(ma.mean() - mb.mean()), count_tasks(ids, groups), diffs, len(ids))


def acceptance_margin(seed_sd: float, seeds: int, confidence: float = CONFIDENCE, shared: float = 0.0) -> float:
    """The margin on ΔP above which a candidate beats the best by more than training noise with
    one-sided `confidence`, both scored with the same `seeds` seeds on the same tasks:
    z_confidence · seed_sd · sqrt(2 · (1 − shared) / seeds), `shared` the share of the seed
    variance that rows trained at the same seed share (experiments.quality.stats.seed_effect; 0:
    independent draws). The loop's default margin (evolver.acceptance.default_margin) and the
    quality bench's spread report both use it."""
    import math
    from statistics import NormalDist

    return NormalDist().inv_cdf(confidence) * seed_sd * math.sqrt(2 * (1 - shared) / seeds)
