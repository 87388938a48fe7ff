"""CoEvolve's signals (§3.1) on scripted evaluations: forgetting over a sliding window of
evaluated epochs, boundary over K sampled rollouts, rare over cumulative pattern counts."""
import json
import os
import random
import tempfile
from pathlib import Path

os.environ.setdefault("BFCL_PROJECT_ROOT", str(Path(tempfile.gettempdir()) / "curateevo-bfcl"))

import pytest  # noqa: E402

from base.registry import get_benchmark  # noqa: E402
from environments.runner import run_episodes  # noqa: E402
from evolver.diagnose import diagnose  # noqa: E402
from evolver.signals import SignalParams, action_patterns, boundary, forgetting, rare, signals, summarize  # noqa: E402
from chat_format import chat_format as cf  # noqa: E402


def trajectory(task, success, calls=(), seed_sample=0):
    messages = [{"role": "user", "content": "do it"}]
    for n, name in enumerate(calls):
        messages += [{"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{n}", "type": "function", "function": {"name": name, "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": f"c{n}", "content": "ok"}]
    return {"id": f"{task}/s{seed_sample}", "messages": messages, "outcome": {"success": success, "reward": float(success)},
            "meta": {"task_id": task, "sample": seed_sample}}


def epoch(outcomes):
    return summarize([trajectory(task, ok) for task, ok in outcomes.items()])


def test_a_task_that_passed_two_epochs_ago_and_fails_now_fires_forgetting():
    e0, e1 = epoch({"a": True, "b": False, "c": True}), epoch({"a": False, "b": False, "c": True})
    now = epoch({"a": False, "b": False, "c": False})
    assert forgetting(now["scores"], [e0["scores"], e1["scores"]], window=3) == ["a", "c"]
    # the window holds the last W evaluated epochs only: with W = 1 the pass two epochs ago is out of it
    assert forgetting(now["scores"], [e0["scores"], e1["scores"]], window=1) == ["c"]
    assert forgetting(now["scores"], [], window=3) == []            # nothing evaluated before


def test_forgetting_reads_a_score_over_training_seeds_against_the_half():
    before = summarize([trajectory("a", True, seed_sample=0), trajectory("a", True, seed_sample=1)])
    half = summarize([trajectory("a", True, seed_sample=0), trajectory("a", False, seed_sample=1)])
    assert before["scores"] == {"a": 1.0} and half["scores"] == {"a": 0.5}
    assert forgetting(half["scores"], [before["scores"]], 3) == []   # 0.5 is still a success
    low = summarize([trajectory("a", False, seed_sample=0), trajectory("a", False, seed_sample=1)])
    assert forgetting(low["scores"], [before["scores"]], 3) == ["a"]


def test_mixed_outcomes_among_k_samples_fire_boundary():
    sampled = [trajectory("a", ok, seed_sample=k) for k, ok in enumerate([True, False, True, True])]
    sampled += [trajectory("b", False, seed_sample=k) for k in range(4)]
    sampled += [trajectory("c", True, seed_sample=k) for k in range(4)]
    assert boundary(sampled) == ["a"]
    assert boundary([]) == []


def test_rare_respects_theta_and_n_min_over_cumulative_counts():
    common = {f"t{i}": ["cd → ls"] for i in range(30)}
    history = [dict(common), dict(common)]
    current = {**common, "x": ["cd → mv"], "y": ["cd → mv"], "z": ["rm → rm"]}
    found = rare(current, history, theta=5, n_min=20)
    # N = 93: "cd → mv" 2/93 < 5% and recurs; "rm → rm" is seen once; "cd → ls" is common
    assert [(r["pattern"], r["count"], r["task_ids"]) for r in found] == [("cd → mv", 2, ["x", "y"])]
    assert rare(current, history, theta=2, n_min=20) == []               # 2/93 ≥ 2%
    assert rare(current, history, theta=5, n_min=100) == []              # N < N_min: too few observations
    assert [r["pattern"] for r in rare(current, history, theta=5, n_min=20, min_count=1)] == ["cd → mv", "rm → rm"]
    assert rare(current, [], theta=5, n_min=20) == []   # this epoch alone: N = 33, 2/33 ≥ 5% (counts are cumulative)


def test_action_patterns_are_call_pairs():
    assert action_patterns(trajectory("a", True, ["cd", "ls", "cd", "ls"])) == {"cd → ls", "ls → cd"}
    assert action_patterns(trajectory("a", True, ["cd"])) == {"cd"}
    assert action_patterns(trajectory("a", True)) == {"(no call)"}


def test_parameters_are_checked_and_signals_join_the_diagnosis():
    with pytest.raises(ValueError):
        SignalParams(theta=0)
    with pytest.raises(ValueError):
        SignalParams(samples=4, temperature=0.0)
    history = [epoch({"a": True, "b": True})]
    now = [trajectory("a", False, ["cd", "mv"]), trajectory("b", True, ["cd", "mv"])]
    sampled = [trajectory("b", ok, seed_sample=k) for k, ok in enumerate([True, False])]
    points, found = diagnose(now, history=history, sampled=sampled, params=SignalParams(n_min=1, theta=99))
    assert found["forgetting"] == ["a"] and found["boundary"] == ["b"]
    assert found["rare"][0]["pattern"] == "cd → mv" and found["rare"][0]["failed_task_ids"] == ["a"]
    assert found == {"families": {"unclassified": 1}, **signals(summarize(now), history, sampled, SignalParams(n_min=1, theta=99))}
    json.dumps(found)


class SeededCoin:
    """A test double for a sampling model: at temperature > 0 each answer is a seeded coin flip
    between the right call and no call; at temperature 0 it always answers right."""
    name = "coin"

    def __init__(self, gold):
        self.gold = gold

    def generate(self, prompts, n=1, temperature=0.0, seed=None):
        rng = random.Random(seed)
        right = cf.render_assistant({"content": "", "tool_calls": cf.to_openai_tool_calls(self.gold)})
        return [[right if temperature == 0 or rng.random() < 0.5 else "I cannot." for _ in range(n)] for _ in prompts]


def test_sampled_rollouts_are_seeded_apart_from_the_greedy_run():
    bench = get_benchmark("bfcl-single", categories=["simple_python"])
    tasks = bench.tasks("dev")[:3]
    policy = SeededCoin([{"name": n, "arguments": a} for n, a in bench.gold(tasks[0].id)])
    greedy = run_episodes(bench, tasks[:1], policy)
    assert greedy[0]["outcome"]["success"]
    # the loop's boundary rollouts: evaluate_to_dir(samples=K, temperature=T) → runner.run_episodes
    one = run_episodes(bench, tasks[:1], policy, samples=8, temperature=0.9, seed=5)
    assert [t["meta"]["sample"] for t in one] == list(range(8))
    assert one == run_episodes(bench, tasks[:1], policy, samples=8, temperature=0.9, seed=5)
    assert boundary(one) == [tasks[0].id]          # 8 coin flips: both outcomes (fixed by the seed)
