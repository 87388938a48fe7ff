import math

import pytest

from evolver.objective import accept, accept_paired, final_choice, objective
from sandbox.checker import cost_c


def test_objective_is_p_minus_lambda_c_with_the_papers_cost():
    c = cost_c(1611)
    assert c == pytest.approx(math.tanh(math.log(1 + 1611) / math.log(1 + 1e5)))
    assert objective(0.35, c) == pytest.approx(0.35 - 0.3 * c)
    assert objective(0.35, c, lam=0.0) == 0.35


def test_accept_needs_more_than_the_margin():
    assert accept(0.30, 0.20).accepted
    assert not accept(0.20, 0.20).accepted          # a tie is not an improvement
    assert not accept(0.21, 0.20, margin=0.02).accepted
    decision = accept(0.10, 0.20)
    assert "rolled back" in decision.reason and decision.delta_j == pytest.approx(-0.1)


def test_paired_acceptance_sees_through_noise_and_pays_for_cost():
    tasks = [f"t{i}" for i in range(40)]
    best = {t: [0.0, 1.0, 0.0] for t in tasks}
    better = {t: [1.0, 1.0, 0.0] if i % 2 else [0.0, 1.0, 0.0] for i, t in enumerate(tasks)}
    same = {t: [1.0, 0.0, 0.0] for t in tasks}
    assert accept_paired(better, best, 0.5, 0.5).accepted
    assert not accept_paired(same, best, 0.5, 0.5).accepted
    # the same gain no longer pays for a much larger curated set
    assert not accept_paired(better, best, 0.9, 0.1, lam=0.3).accepted
    assert accept_paired(better, best, 0.5, 0.5, seed=1).accepted == accept_paired(better, best, 0.5, 0.5, seed=1).accepted


def test_final_choice_is_best_p_then_lower_c_then_earlier():
    epochs = [{"epoch": 0, "P": 0.3, "C": 0.6}, {"epoch": 1, "P": 0.4, "C": 0.7},
              {"epoch": 2, "P": 0.4, "C": 0.5}, {"epoch": 3, "P": 0.4, "C": 0.5}, {"epoch": 4, "P": None, "C": 0.1}]
    assert final_choice(epochs)["epoch"] == 2
    with pytest.raises(ValueError):
        final_choice([{"epoch": 0, "P": None, "C": 0.2}])
