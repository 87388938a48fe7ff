"""The quality benchmark's statistics on fixed numbers (the closed forms checked by hand and
against scipy.stats: binomtest(...).proportion_ci(method="wilson"), norm.ppf)."""
import math

import pytest

from base import paired
from experiments.quality import stats


def binary(successes: int, n: int, seeds: int = 1, prefix: str = "t") -> dict:
    """n tasks, the first `successes` solved under every seed."""
    return {f"{prefix}{i:03d}": [1.0 if i < successes else 0.0] * seeds for i in range(n)}


def test_one_seed_gets_the_wilson_score_interval():
    # 15 of 60 (a P near the 0.25 of the default run): scipy gives [0.157765, 0.372321]
    est = stats.mean_interval(binary(15, 60))
    assert est.method == "wilson"
    assert est.value == 0.25
    assert est.low == pytest.approx(0.1577652253, abs=1e-9)
    assert est.high == pytest.approx(0.3723207008, abs=1e-9)


def test_the_wilson_interval_of_no_success_starts_at_zero():
    est = stats.wilson_interval(0, 10)
    assert est.low == 0.0 and est.high == pytest.approx(0.2775327999, abs=1e-9)
    with pytest.raises(ValueError):
        stats.wilson_interval(11, 10)


def test_identical_seeds_give_the_task_bootstrap_near_the_normal_interval():
    # 60 of 200 solved by both seeds: the seeds add nothing, the half-width is ≈ 1.96·sqrt(.3·.7/200) = 0.0635
    est = stats.mean_interval(binary(60, 200, seeds=2), seed=1)
    assert est.method.startswith("bootstrap")
    assert est.value == pytest.approx(0.3)
    assert (est.high - est.low) / 2 == pytest.approx(1.96 * math.sqrt(0.3 * 0.7 / 200), abs=0.006)


def test_seeds_that_disagree_widen_the_interval():
    # seed 0 solves 50 of 200, seed 1 solves 70: the same mean 0.3, but the model itself varies
    scores = {f"t{i:03d}": [1.0 if i < 50 else 0.0, 1.0 if i < 70 else 0.0] for i in range(200)}
    agreeing = stats.mean_interval(binary(60, 200, seeds=2), seed=1)
    est = stats.mean_interval(scores, seed=1)
    assert est.value == pytest.approx(0.3)
    assert est.high - est.low > agreeing.high - agreeing.low
    assert est.low <= 0.25 + 1e-9 and est.high >= 0.35 - 1e-9   # both seeds' own P lie inside


def test_the_bootstrap_is_seeded():
    scores = {f"t{i}": [float(i % 3 == 0), float(i % 4 == 0)] for i in range(50)}
    assert stats.mean_interval(scores, seed=5) == stats.mean_interval(scores, seed=5)
    # few resamples, so two seeds' percentiles differ (with 10,000 they agree on a 0.02 grid)
    assert stats.mean_interval(scores, resamples=40, seed=5) != stats.mean_interval(scores, resamples=40, seed=6)


def test_every_task_needs_one_score_per_seed():
    with pytest.raises(ValueError, match="each seed"):
        stats.mean_interval({"a": [1.0, 0.0], "b": [1.0]})


def test_pairing_on_the_same_tasks_sees_a_difference_an_unpaired_look_cannot():
    # b solves 30 of 100; a solves the same 30 and 10 more: a +0.10 difference
    b = binary(30, 100)
    a = binary(40, 100)
    paired = stats.paired_difference(a, b, seed=0)
    assert paired["value"] == pytest.approx(0.10)
    assert paired["tasks"] == 100
    # the per-task differences are 10 ones among 100: SE = sqrt(.1·.9/100) = 0.03
    assert paired["low"] == pytest.approx(0.10 - 1.96 * 0.03, abs=0.015)
    assert paired["low"] > 0 and paired["p_not_better"] == 0.0
    # unpaired, the two Wilson intervals overlap
    assert stats.wilson_interval(40, 100).low < stats.wilson_interval(30, 100).high


def test_a_paired_difference_of_equal_rows_is_zero_in_every_resample():
    # the same tasks and the same seeds are resampled for both rows: identical rows never differ
    a = {f"t{i}": [float(i % 2), float(i % 3 == 0)] for i in range(60)}
    paired = stats.paired_difference(a, dict(a), seed=0)
    assert paired["value"] == paired["low"] == paired["high"] == 0.0
    assert paired["p_not_better"] == 1.0


def test_rows_trained_at_the_same_seeds_are_compared_seed_by_seed():
    # seed 1 is the better seed for both rows (a shared seed effect); a is one task better at each
    # seed. Paired by seed, the difference is +1 task whatever the resample of the seeds; with one
    # row's seed labels swapped the pairing is broken and the seed effect widens the interval.
    b = {f"t{i}": [float(i < 20), float(i < 40)] for i in range(100)}
    a = {t: [float(v[0] or t == "t20"), float(v[1] or t == "t40")] for t, v in b.items()}
    paired = stats.paired_difference(a, b, seed=0)
    swapped = stats.paired_difference({t: v[::-1] for t, v in a.items()}, b, seed=0)
    assert paired["value"] == swapped["value"] == pytest.approx(0.01)
    assert paired["low"] == 0.0 and paired["high"] <= 0.03   # only the task resample moves it
    assert swapped["low"] < -0.2 and swapped["high"] > 0.2       # the 20-task seed effect, unpaired


def test_the_seed_effect_shared_by_rows_is_measured_by_an_analysis_of_variance():
    # Table 1 on 120 test tasks at cpu-small, seeds 0, 1, 2 (bench/results/table1-test-cpu-small-2026-11-28.json):
    # seed 2 is below the others in most rows
    table1 = {"rho0-wild": [0.183333, 0.191667, 0.166667], "oracle": [0.266667, 0.25, 0.233333],
              "poisoned": [0.133333, 0.125, 0.125], "agentrefine": [0.2, 0.241667, 0.183333],
              "rho0-labeled": [0.225, 0.266667, 0.2], "augment": [0.316667, 0.266667, 0.2],
              "noisy": [0.166667, 0.166667, 0.158333], "run:evo4-dev186": [0.3, 0.341667, 0.283333]}
    e = stats.seed_effect(table1)
    assert e["df"] == [2, 14] and e["F"] == pytest.approx(6.0, abs=0.01) and e["p"] == pytest.approx(0.0131, abs=1e-4)
    assert e["p_permutation"] < 0.02 and e["shared"] == pytest.approx(0.385, abs=0.001)
    assert e["shared_var"] + e["residual_var"] == pytest.approx(
        sum(stats.seed_spread(v)["sd"] ** 2 for v in table1.values()) / len(table1), abs=1e-7)
    # a pure seed effect is all shared; rows whose seeds move them in opposite ways share none
    pure = stats.seed_effect({"a": [0.1, 0.2, 0.3], "b": [0.2, 0.3, 0.4], "c": [0.0, 0.1, 0.2]})
    assert pure["shared"] == 1.0 and pure["residual_var"] == 0.0 and pure["F"] is None and pure["p"] == 0.0
    none = stats.seed_effect({"a": [0.1, 0.2, 0.3], "b": [0.3, 0.2, 0.1], "c": [0.2, 0.2, 0.2]})
    assert none["shared"] == 0.0 and none["p_permutation"] > 0.5
    # with too few residual degrees of freedom there is nothing to say
    assert stats.seed_effect({"a": [0.1, 0.2], "b": [0.2, 0.3]}) is None and stats.seed_effect({"a": [0.1]}) is None


def test_a_shared_seed_effect_lowers_the_margin_and_the_minimal_detectable_difference():
    assert paired.acceptance_margin(0.02, 1, 0.9, shared=0.0) == paired.acceptance_margin(0.02, 1, 0.9)
    assert paired.acceptance_margin(0.02, 1, 0.9, shared=0.75) == pytest.approx(paired.acceptance_margin(0.02, 1, 0.9) / 2)
    assert stats.minimal_detectable_difference(60, 2, seed_sd=0.03, shared=1.0) == pytest.approx(
        stats.minimal_detectable_difference(60, 2))


def test_the_gap_recovered_is_the_share_of_the_wild_to_labeled_gap():
    wild, row, labeled = binary(20, 100), binary(30, 100), binary(40, 100)
    gap = stats.gap_recovered(row, wild, labeled, seed=0)
    assert gap["value"] == pytest.approx(0.5) and gap["gap"] == pytest.approx(0.2)
    assert gap["low"] <= 0.5 <= gap["high"] and 0 <= gap["low"] and gap["high"] <= 1
    assert gap["gap_positive"] == 1.0
    assert stats.gap_recovered(labeled, wild, labeled)["value"] == pytest.approx(1.0)


def test_no_gap_means_nothing_to_recover():
    assert stats.gap_recovered(binary(30, 100), binary(30, 100), binary(30, 100)) is None
    assert stats.gap_recovered(binary(30, 100), binary(40, 100), binary(20, 100)) is None


def test_the_minimal_detectable_difference_for_60_tasks_and_one_seed_is_22_points():
    # (z_.975 + z_.8) · sqrt(2 · .25·.75 / 60) = 2.80159 · 0.079057 = 0.221485
    assert stats.minimal_detectable_difference(60, 1) == pytest.approx(0.2214847587, abs=1e-9)
    # two seeds and a measured seed spread of 0.03: sqrt(2 · (.1875/120 + .0009/2)) · 2.80159
    assert stats.minimal_detectable_difference(60, 2, seed_sd=0.03) == pytest.approx(0.1777406564, abs=1e-9)
    assert stats.minimal_detectable_difference(240, 1) == pytest.approx(0.2214847587 / 2, abs=1e-9)


def test_rows_that_agree_on_most_tasks_are_told_apart_paired_at_a_smaller_difference():
    # 100 tasks, both rows solve the first 20; a solves 10 more: d is 1 on 10 tasks, 0 elsewhere
    a, b = binary(30, 100), binary(20, 100)
    var_d = (10 * 0.9 ** 2 + 90 * 0.1 ** 2) / 99          # the sample variance of d
    z = 1.959963985 + 0.841621234
    assert stats.paired_minimal_detectable_difference(a, b) == pytest.approx(z * math.sqrt(var_d / 100), abs=1e-6)
    assert stats.paired_minimal_detectable_difference(a, b) < stats.minimal_detectable_difference(100, 1, 0.25) / 2
    # a measured seed spread adds 2·sd²/S; two seeds per row average the per-task outcomes
    with_seeds = stats.paired_minimal_detectable_difference(a, b, seed_sd=0.02)
    assert with_seeds == pytest.approx(z * math.sqrt(var_d / 100 + 2 * 0.02 ** 2), abs=1e-6)
    assert stats.paired_minimal_detectable_difference(binary(30, 100, 2), binary(20, 100, 2), seed_sd=0.02) == \
        pytest.approx(z * math.sqrt(var_d / 100 + 0.02 ** 2), abs=1e-6)
    with pytest.raises(ValueError):
        stats.paired_minimal_detectable_difference(binary(1, 1), binary(0, 1))


def test_the_spread_and_the_acceptance_margin_it_implies():
    spread = stats.seed_spread([0.20, 0.25, 0.30])
    assert spread["sd"] == pytest.approx(0.05) and spread["range"] == pytest.approx(0.10)
    # z_.9 · 0.03 · sqrt(2 / 2) = 1.28155 · 0.03
    assert paired.acceptance_margin(0.03, 2, 0.9) == pytest.approx(0.0384465470, abs=1e-9)
    assert paired.acceptance_margin(0.03, 1, 0.9) == pytest.approx(0.0384465470 * math.sqrt(2), abs=1e-9)
    with pytest.raises(ValueError):
        stats.seed_spread([0.2])


def test_a_base_rate_measured_at_zero_or_one_still_leaves_a_detectable_difference():
    # nothing solved on 20 tasks is no proof of zero variance: half a success in 21 trials
    edge = 0.5 / 21
    assert stats.minimal_detectable_difference(20, 1, 0.0) == pytest.approx(
        stats.minimal_detectable_difference(20, 1, edge), abs=1e-12) and stats.minimal_detectable_difference(20, 1, 0.0) > 0.1
    assert stats.minimal_detectable_difference(20, 1, 1.0) == pytest.approx(stats.minimal_detectable_difference(20, 1, 0.0))


def test_holm_rejects_step_down_against_alpha_over_the_hypotheses_left():
    # m = 4: the smallest p against .05/4, the next against .05/3, then .05/2, then .05
    assert stats.holm([0.01, 0.04, 0.012, 0.3]) == [True, False, True, False]   # .01 ≤ .0125, .012 ≤ .0167, .04 > .025
    assert stats.holm([0.013, 0.5]) == [True, False] and stats.holm([0.03, 0.04]) == [False, False]
    assert stats.holm([0.02, 0.03]) == [True, True] and stats.holm([]) == []
    # a bootstrap p is never 0: (k + 1)/(R + 1); two-sided, at most 1
    b = binary(30, 100)
    far = stats.paired_difference(binary(60, 100), b, seed=0)
    assert far["p_two_sided"] == pytest.approx(2 / 10_001, abs=1e-6)
    assert stats.paired_difference(b, dict(b), seed=0)["p_two_sided"] == 1.0
