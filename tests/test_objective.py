import math

import pytest

from evolver.acceptance import ACCEPTANCE, Margin, PairedBootstrap, Scores, make_rule
from evolver.config import RunConfig
from base.objective import LAMBDA, objective
from experiments.quality import proxy, stats
from evolver.final_rules import final_choice
from sandbox.checker import cost_c


def test_objective_is_p_minus_lambda_c_with_the_papers_cost():
    c = cost_c(1611)
    assert c == pytest.approx(math.tanh(math.log(1 + 1611) / math.log(1 + 1e5)))
    assert objective(0.35, c) == pytest.approx(0.35 - 0.3 * c)
    assert objective(0.35, c, lam=0.0) == 0.35
    # written once: the run's default λ and the quality table's are base.objective's
    assert RunConfig().lam == LAMBDA == 0.3 and proxy.LAMBDA is LAMBDA and proxy.objective is objective


def j(value):
    return Scores(P=value, C=0.0, J=value)


def accept(candidate_j, best_j, margin=0.0):
    return Margin(margin).decide(j(candidate_j), j(best_j), 0.3)


def accept_paired(candidate, best, candidate_c, best_c, lam=0.3, seed=0):
    return PairedBootstrap(seed=seed).decide(Scores(0, candidate_c, 0, candidate), Scores(0, best_c, 0, best), lam)


def test_accept_needs_more_than_the_margin():
    assert accept(0.30, 0.20).accepted
    assert not accept(0.20, 0.20).accepted          # a tie is not an improvement
    assert not accept(0.21, 0.20, margin=0.02).accepted
    decision = accept(0.10, 0.20)
    assert "rolled back" in decision.reason and decision.delta_j == pytest.approx(-0.1)


def test_the_first_evaluated_strategy_is_the_first_best_under_every_rule():
    for rule in (Margin(0.5), PairedBootstrap()):
        decision = rule.decide(j(0.0), None, 0.3)
        assert decision.accepted and "first best" in decision.reason


def test_the_run_config_picks_the_rule_and_a_new_rule_is_one_registration(monkeypatch):
    assert isinstance(make_rule(RunConfig()), Margin)
    assert isinstance(make_rule(RunConfig(seeds=(0, 1))), PairedBootstrap)
    assert isinstance(make_rule(RunConfig(seeds=(0, 1), acceptance="margin")), Margin)

    class NeverWorse:   # a rule of its own: accept unless J got worse
        name = "never-worse"

        def decide(self, candidate, best, lam):
            return Margin(-1e-12).decide(candidate, best, lam)

    monkeypatch.setitem(ACCEPTANCE, "never-worse", lambda config: NeverWorse())
    rule = make_rule(RunConfig(acceptance="never-worse"))
    assert rule.decide(j(0.2), j(0.2), 0.3).accepted and not rule.decide(j(0.1), j(0.2), 0.3).accepted


def test_paired_acceptance_sees_through_noise_and_pays_for_cost():
    tasks = [f"t{i}" for i in range(40)]
    # every seed solves a third of the tasks under the best, two thirds under the better strategy
    best = {t: [float((i + s) % 3 == 0) for s in range(3)] for i, t in enumerate(tasks)}
    better = {t: [float((i + s) % 3 != 2) for s in range(3)] for i, t in enumerate(tasks)}
    same = {t: [float((i + s + 1) % 3 == 0) for s in range(3)] for i, t in enumerate(tasks)}
    assert accept_paired(better, best, 0.5, 0.5).accepted
    assert not accept_paired(same, best, 0.5, 0.5).accepted
    # ΔP = +0.333 pays for ΔC = 0.8 at λ = 0.3 (ΔJ +0.093), not at λ = 0.5 (ΔJ −0.067)
    assert accept_paired(better, best, 0.9, 0.1, lam=0.3).accepted
    decision = accept_paired(better, best, 0.9, 0.1, lam=0.5)
    assert not decision.accepted and decision.delta_j == pytest.approx(1 / 3 - 0.4)
    assert accept_paired(better, best, 0.5, 0.5, seed=1) == accept_paired(better, best, 0.5, 0.5, seed=1)


def test_a_gain_that_rides_on_one_seed_is_not_beyond_the_seed_noise():
    # seed 1 solves every task under both; the candidate gains on seed 0 for half the tasks. The
    # per-task seed means differ by +1/3 on half the tasks, but the seeds themselves are resampled
    # too (base.paired): with three seeds this far apart the gain is within the training noise
    tasks = [f"t{i}" for i in range(40)]
    best = {t: [0.0, 1.0, 0.0] for t in tasks}
    better = {t: [1.0, 1.0, 0.0] if i % 2 else [0.0, 1.0, 0.0] for i, t in enumerate(tasks)}
    decision = accept_paired(better, best, 0.5, 0.5)
    assert not decision.accepted and decision.delta_j == pytest.approx(1 / 6)
    assert "rolled back" in decision.reason and "(< 90%)" in decision.reason


def test_the_loop_and_the_quality_table_judge_a_difference_with_the_same_routine():
    a = {f"t{i}": [float(i % 2), float(i % 3 == 0)] for i in range(60)}
    b = {f"t{i}": [float(i % 3 == 0), float(i % 4 == 0)] for i in range(60)}
    table = stats.paired_difference(a, b, resamples=2000, seed=7)
    decision = PairedBootstrap(resamples=2000, seed=7).decide(Scores(0, 0.4, 0, a), Scores(0, 0.4, 0, b), 0.3)
    # equal C: the rule's share of resamples above margin 0 is the table's 1 − p_not_better
    share = 1 - table["p_not_better"]
    assert decision.delta_j == pytest.approx(table["value"], abs=1e-6)
    assert f"in {share:.0%} of resamples" in decision.reason
    assert decision.accepted == (share >= 0.9)


def test_final_choice_is_best_p_then_lower_c_then_earlier():
    epochs = [{"epoch": 0, "P": 0.3, "C": 0.6}, {"epoch": 1, "P": 0.4, "C": 0.7},
              {"epoch": 2, "P": 0.4, "C": 0.5}, {"epoch": 3, "P": 0.4, "C": 0.5}, {"epoch": 4, "P": None, "C": 0.1}]
    assert final_choice(epochs)["epoch"] == 2
    with pytest.raises(ValueError):
        final_choice([{"epoch": 0, "P": None, "C": 0.2}])


def test_the_default_margin_is_derived_from_the_measured_seed_spread(monkeypatch):
    from evolver import acceptance

    monkeypatch.setitem(acceptance.MEASURED_SEED_SD, ("cpu-small", "smollm2-135m", "bfcl-single", 60), 0.025)
    monkeypatch.setitem(acceptance.MEASURED_SEED_SHARED, ("cpu-small", "smollm2-135m", "bfcl-single", 60), 0.0)
    margin, why = acceptance.default_margin("cpu-small", "smollm2-135m", "bfcl-single", 60, 1, "margin")
    assert margin == pytest.approx(1.2816 * 0.025 * math.sqrt(2), abs=1e-4)   # z₀.₉ · sd · √(2/S)
    assert "sd 0.025" in why and "trainer/README.md" in why and "shared" not in why
    # the share of the seed variance every candidate trained at the same seed carries is not noise
    monkeypatch.setitem(acceptance.MEASURED_SEED_SHARED, ("cpu-small", "smollm2-135m", "bfcl-single", 60), 0.5)
    halved, why = acceptance.default_margin("cpu-small", "smollm2-135m", "bfcl-single", 60, 1, "margin")
    assert halved == pytest.approx(1.2816 * 0.025, abs=1e-4) and "50% of its variance shared" in why
    assert acceptance.default_margin("cpu-small", "smollm2-135m", "bfcl-single", 60, 4, "margin")[0] == pytest.approx(halved / 2, abs=1e-4)
    assert acceptance.default_margin("cpu-small", "smollm2-135m", "bfcl-single", 60, 2, "paired")[0] == 0.0
    margin, why = acceptance.default_margin("paper", "qwen3-4b", "bfcl-single", 60, 1, "margin")
    assert margin == 0.0 and "--spread" in why          # nothing measured there: said, not guessed
    margin, why = acceptance.default_margin("cpu-small", "smollm2-135m", "next-call", 60, 1, "margin")
    assert margin == 0.0 and "held-out tenth" in why and "60" not in why and "--spread" not in why   # bench quality has no next-call


def test_a_run_without_margin_gets_the_derived_one_and_an_explicit_margin_wins(tmp_path):
    from evolver.acceptance import MEASURED_SEED_SD, MEASURED_SEED_SHARED, default_margin
    from evolver.config import resolve

    from test_run_config import configured

    derived = default_margin("cpu-small", "smollm2-135m", "bfcl-single", 60, 1, "margin")[0]
    assert MEASURED_SEED_SD[("cpu-small", "smollm2-135m", "bfcl-single", 60)] > 0 and derived > 0
    assert resolve(configured(tmp_path, "epochs: 3\n", "--tasks", "60"), ("c.jsonl",), "0" * 64).margin == derived
    # the default (all 186 dev tasks): the spread measured there, eight rows × three seeds, pooled sd
    # 0.0202, of which the measured shared part is common to every candidate
    shared = MEASURED_SEED_SHARED[("cpu-small", "smollm2-135m", "bfcl-single", 186)]
    assert 0 < shared < 1
    assert resolve(configured(tmp_path, "epochs: 3\n"), ("c.jsonl",), "0" * 64).margin == \
        default_margin("cpu-small", "smollm2-135m", "bfcl-single", 186, 1, "margin")[0] == \
        pytest.approx(1.2816 * 0.0202 * math.sqrt(2 * (1 - shared)), abs=1e-4)
    assert resolve(configured(tmp_path, "epochs: 3\n", "--seeds", "2"), ("c.jsonl",), "0" * 64).margin == 0.0
    assert resolve(configured(tmp_path, "epochs: 3\n", "--margin", "0.01"), ("c.jsonl",), "0" * 64).margin == 0.01
