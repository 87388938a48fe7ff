"""The environment seam: every registered environment implements the protocol, the registry is the
one list of benchmarks, and what used to be special cases of "next-call" (named "replay" before issue 61) follow from its attributes."""
import pytest

from base.errors import UserError
from base import registry
from base.environment import Environment, GoldRow
from corpora import corpus_kind


def test_every_registered_environment_implements_the_protocol_under_its_own_name():
    envs = registry.environments()
    assert [e.name for e in envs] == registry.names() == ["bfcl", "bfcl-single", "next-call", "scienceworld", "acebench", "tau2"]
    for e in envs:
        assert isinstance(e, Environment), e.name
        assert e.metrics and all(isinstance(m, str) for m in e.metrics)
    tags = [e.env_tag for e in envs if e.env_tag]
    assert len(tags) == len(set(tags))


def test_an_unknown_name_is_one_sentence_naming_the_known_ones():
    with pytest.raises(UserError, match=r"unknown benchmark 'nope' \(known: acebench, bfcl, bfcl-single, next-call, scienceworld, tau2\)"):
        registry.get("nope")


def test_a_corpus_implies_the_environment_its_records_name_else_the_next_call_benchmark():
    def rec(i, tag):
        return {"id": str(i), "messages": [], "meta": {"env": {"benchmark": tag, "task_id": f"t{i}"}} if tag else {}}

    assert corpus_kind([rec(1, "bfcl_multi_turn"), rec(2, "bfcl_multi_turn")]) == "bfcl"
    assert corpus_kind([rec(1, "bfcl_single_turn")]) == "bfcl-single"
    assert corpus_kind([rec(1, "bfcl_single_turn"), rec(2, "bfcl_multi_turn")]) == registry.NO_ENVIRONMENT
    assert corpus_kind([rec(1, None)]) == registry.NO_ENVIRONMENT == "next-call"
    assert registry.by_tag("bfcl_multi_turn").name == "bfcl" and registry.by_tag(["x"]) is None


def test_next_call_has_no_environment_behind_it_and_bfcl_does():
    next_call, multi, single = registry.get("next-call"), registry.get("bfcl"), registry.get("bfcl-single")
    assert next_call.declares("held_out") and not multi.declares("held_out") and multi.declares("corpus")
    assert not next_call.declares("corpus") and not next_call.declares("leakage") and multi.declares("reward")
    assert not single.declares("reward") and single.declares("leakage") and single.declares("scenarios")
    assert not next_call.executable and next_call.holds_out_corpus() and next_call.metrics == ("call_f1",) and next_call.export_group is None
    assert list(next_call.leakage_rows()) == [] and next_call.checker_rules() == () and next_call.corpus_settings == ()
    assert next_call.family_prefix == "next-call:" and multi.family_prefix is None
    assert multi.executable and single.executable and not multi.holds_out_corpus() and not single.holds_out_corpus()
    assert multi.export_group == single.export_group
    assert multi.rebuilds({"benchmark": "bfcl_multi_turn", "task_id": "multi_turn_base_0"})
    assert not single.rebuilds({"benchmark": "bfcl_single_turn", "task_id": "simple_python_0"})
    assert single.single_step and not multi.single_step
    assert multi.category_of("multi_turn_miss_func_12") == "miss_func"
    assert single.category_of("parallel_multiple_3") == "parallel_multiple"


def test_the_multi_turn_reward_scenario_executes_calls_and_names_a_bad_task():
    multi = registry.get("bfcl")
    env = {"benchmark": "bfcl_multi_turn", "task_id": "multi_turn_base_0", "variant": "base"}
    episode = multi.reward_episode(env, None)
    before = episode.state()
    assert isinstance(episode.call("ls", {}), str)
    assert episode.state() == before   # ls changes nothing
    assert multi.reward_error(env) is None
    assert "is not a task of BFCL multi_turn_base" in multi.reward_error({**env, "task_id": "multi_turn_base_99999"})
    assert "is not a BFCL multi-turn category" in multi.reward_error({**env, "variant": "nope"})


def test_bfcl_leakage_rows_cover_every_split_of_both_benchmarks():
    rows = [r for e in registry.environments() for r in e.leakage_rows()]
    assert all(isinstance(r, GoldRow) for r in rows[:50])
    assert {r.split for r in rows} == {"train", "dev", "test"}
    assert {r.multi for r in rows} == {True, False}
