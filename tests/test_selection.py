"""Successive halving over an epoch's candidates, with a scripted proxy."""
import pytest

from evolver.selection import select


def proxy(truth, noise=None):
    calls = []

    def score(candidate, units):
        calls.append((candidate, units))
        return truth[candidate] + (noise or {}).get((candidate, units), 0.0)
    return score, calls


def test_one_candidate_is_the_one_candidate_loop_and_costs_nothing():
    score, calls = proxy({"a": 0.1})
    chosen = select(["a"], score, budget=0)
    assert chosen.best == "a" and chosen.index == 0 and calls == [] and chosen.units_spent == 0


def test_halving_keeps_the_better_half_with_twice_the_units_until_one_is_left():
    score, calls = proxy({"a": 0.2, "b": 0.5, "c": 0.4, "d": 0.1})
    chosen = select(["a", "b", "c", "d"], score, budget=16)
    assert chosen.best == "b" and chosen.index == 1
    assert [r["units"] for r in chosen.rungs] == [2, 4]
    assert [r["survivors"] for r in chosen.rungs] == [[1, 2], [1]]
    assert chosen.units_spent == 4 * 2 + 2 * 4 <= 16
    assert sorted(c for c, u in calls if u == 4) == ["b", "c"]


def test_a_noisy_short_proxy_can_be_corrected_at_the_longer_rung():
    # at 2 units d looks best, but the halving keeps b too, and at 4 units b wins
    score, _ = proxy({"a": 0.2, "b": 0.5, "c": 0.1, "d": 0.3}, noise={("d", 2): 0.4, ("d", 4): 0.0})
    assert select(["a", "b", "c", "d"], score, budget=16).best == "b"


def test_odd_counts_ties_and_too_small_budgets():
    score, _ = proxy({"a": 0.3, "b": 0.3, "c": 0.3})
    chosen = select(["a", "b", "c"], score, budget=12)
    assert chosen.best == "a"                              # ties keep the proposer's order
    assert [len(r["survivors"]) for r in chosen.rungs] == [2, 1]
    with pytest.raises(ValueError, match="at least 6"):
        select(["a", "b", "c"], score, budget=5)
    with pytest.raises(ValueError):
        select([], score, budget=10)
