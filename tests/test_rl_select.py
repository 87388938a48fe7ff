"""Which RL records GRPO learns from (curation_strategies/toolkit/rl_select.py) and the offline
proposer's operators that use them: tasks the corpus both solved and failed (the boundary),
references from recorded successes (clear contrasts); ρ0 stays as it is."""
from __future__ import annotations

import random
from pathlib import Path

from curation_strategies import toolkit as tk
from curation_strategies.toolkit.provenance import drops
from evolver.proposers.offline import EFFICIENCY, REMEDIES
from evolver.proposers.operators import compose
from test_strategies import Context, curate

ROOT = Path(__file__).resolve().parents[1]


def attempt(id, task, city, success, variant="simple_python"):
    """One single-call trajectory of BFCL-like task `task` calling get_weather(city)."""
    return {"id": id, "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
            "messages": [{"role": "user", "content": f"Weather for task {task}?"},
                         {"role": "assistant", "content": "", "tool_calls": [
                             {"id": "c1", "type": "function",
                              "function": {"name": "get_weather", "arguments": f'{{"city": "{city}"}}'}}]}],
            "outcome": {"success": success, "reward": None},
            "meta": {"env": {"benchmark": "bfcl_single_turn", "task_id": task, "variant": variant}}}


RAW = [attempt("a/ok", "t_a", "Paris", True), attempt("a/bad", "t_a", "Pariss", False),   # boundary: solved and failed
       attempt("b/ok", "t_b", "Rome", True), attempt("b/ok2", "t_b", "Rome", True),          # always solved
       attempt("c/bad", "t_c", "Oslo", False),                                             # never solved
       attempt("d/unk", "t_d", "Lima", None)]


def test_the_boundary_is_the_tasks_the_corpus_both_solved_and_failed():
    assert tk.outcome_spread(RAW) == {"task:t_a": (1, 1), "task:t_b": (2, 0), "task:t_c": (0, 1)}
    assert tk.boundary_tasks(RAW) == {"task:t_a"}
    no_env = {**RAW[0], "meta": {}, "task": "say hi"}
    assert tk.task_of(no_env) == "text:say hi"


def test_references_rank_boundary_successes_first_and_failures_last():
    rl = [r for raw in RAW for r in tk.rl_records(raw, tk.tool_call_steps(raw))]
    priority = tk.reference_priority(RAW)
    assert [priority(r) for r in rl] == [3.0, 0.0, 2.0, 2.0, 0.0, 1.0]
    assert [r["meta"]["origin"] for r in tk.from_successes(rl, RAW)] == [["a/ok"], ["b/ok"], ["b/ok2"], ["d/unk"]]
    assert [r["meta"]["origin"] for r in tk.from_successes(rl, RAW, keep_unknown=False)] == [["a/ok"], ["b/ok"], ["b/ok2"]]
    # a budget of one prompt goes to the boundary task's successful step; of three, no failure is kept
    assert [r["meta"]["origin"] for r in tk.fit_rl(rl, RAW, 1, random.Random(0))] == [["a/ok"]]
    kept = tk.fit_rl(rl, RAW, 3, random.Random(0))
    assert len(kept) == 3 and all(priority(r) >= 2 for r in kept)
    assert tk.fit_rl(rl, RAW, None, random.Random(0)) == rl
    assert tk.rl_budget({"rl_prompts": 4}, 2) == 8 and tk.rl_budget(None) is None


def test_the_operators_fill_the_rl_budget_from_the_boundary_and_rho0_is_unchanged():
    genome = {"rl_boundary": {"multiple": 1}, "rl_successes": {"keep_unknown": True}}
    namespace: dict = {}
    exec(compile(compose(genome), "strategy.py", "exec"), namespace)
    ctx = Context()
    ctx.budget = {"rl_prompts": 2}
    drops(clear=True)
    out = namespace["curate"](RAW, ctx)
    assert [r["meta"]["origin"] for r in out.rl] == [["a/ok"], ["b/ok"]] or \
        [r["meta"]["origin"] for r in out.rl] == [["a/ok"], ["b/ok2"]]
    # what the operators dropped is noted for lineage, and SFT is untouched
    dropped = {d["id"]: d["op"] for d in drops(clear=True) if d["kind"] == "rl"}
    assert dropped["a/bad#step1"] == "rl_successes" and dropped["d/unk#step1"] == "rl_boundary"
    assert len(out.sft) == len(RAW)
    # ρ0 makes an RL record of every step, failures included, as before
    assert [r["meta"]["origin"] for r in curate("seed", RAW).rl] == [[r["id"]] for r in RAW]


def test_the_offline_proposer_reaches_the_rl_operators():
    assert "+rl_boundary" in REMEDIES["boundary"] and "+rl_boundary" in REMEDIES["rl_no_signal"]
    assert "+rl_successes" in REMEDIES["trained_failures"] and "+rl_boundary" not in EFFICIENCY


def test_an_epoch_whose_grpo_groups_scored_alike_is_diagnosed_and_remedied():
    from evolver.diagnose import grpo_point
    from evolver.proposers.offline import OfflineProposer, motives
    from conftest import SEED_STRATEGY
    from workspace.repository import strategy_files

    quiet = {"grpo": {"groups": 16, "zero_variance_groups": 4}}
    flat = {"grpo": {"groups": 8, "zero_variance_groups": 8}}
    assert grpo_point([quiet, quiet]) is None and grpo_point([{"grpo": None}]) is None
    assert grpo_point([{"grpo": {"groups": 1, "zero_variance_groups": 1}}]) is None   # one group says little
    point = grpo_point([flat, flat])
    assert (point["family"], point["count"], point["source"]) == ("rl_no_signal", 16, "training")
    sigs = {"families": {}, "forgetting": [], "boundary": [], "rare": []}
    assert motives([point], sigs) == [("rl_no_signal", 16)]
    first = next(OfflineProposer().effectiveness(strategy_files(SEED_STRATEGY), [point], sigs))
    assert first.edits[0].op == "rl_boundary"
