"""ACEBench: the shipped data is intact and complete, and our checker gives the official verdict on
every answer of tests/fixtures/acebench/official_verdicts.jsonl (produced by the official code:
tests/fixtures/acebench/README.md)."""
import collections
import json
import shutil
from pathlib import Path

import pytest

from base.errors import UserError
from environments.acebench import checker, data

FIXTURE = Path(__file__).parent / "fixtures" / "acebench" / "official_verdicts.jsonl"
COUNTS = {"normal_atom_bool": 50, "normal_atom_enum": 50, "normal_atom_number": 50, "normal_atom_list": 50,
          "normal_atom_object_short": 50, "normal_atom_object_deep": 50,
          "normal_single_turn_single_function": 100, "normal_single_turn_parallel_function": 100,
          "normal_multi_turn_user_adjust": 123, "normal_multi_turn_user_switch": 100, "normal_similar_api": 50,
          "normal_preference": 50, "special_incomplete": 50, "special_error_param": 50, "special_irrelevant": 50,
          "agent_multi_step": 20, "agent_multi_turn": 30}


@pytest.fixture
def shipped_root():
    yield
    data.set_root(None)


def test_agrees_with_the_official_checker_on_every_fixture_answer():
    rows = [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]
    assert len(rows) >= 300
    assert {r["category"] for r in rows} == {c for c in data.CATEGORIES if not c.startswith("agent")}
    assert {r["valid"] for r in rows} == {True, False}
    disagreements = []
    for r in rows:
        got = checker.check(r["category"], r["id"], r["answer"])
        if got["valid"] is not r["valid"]:
            disagreements.append((r["id"], r["kind"], r["valid"], got, r["answer"][:120]))
    assert not disagreements, f"{len(disagreements)} of {len(rows)} disagree: {disagreements[:5]}"


def test_counts_as_published():
    assert set(data.CATEGORIES) == set(COUNTS)
    assert {c: len(data.items(c)) for c in data.CATEGORIES} == COUNTS
    assert len(data.all_ids()) == 993 and len(data.all_ids(include_needs_user=True)) == 1023
    assert data.NEEDS_USER == ("agent_multi_turn",)
    assert data.category_of("normal_multi_turn_user_adjust_0_1") == "normal_multi_turn_user_adjust"
    assert "ground_truth" in data.answer("special_irrelevant_0")
    assert data.source()["commit"].startswith("e6db74b") and len(data.source()["commit"]) == 40


@pytest.mark.parametrize("damage", ["corrupt", "missing"])
def test_a_damaged_data_file_is_a_clear_user_error(tmp_path, shipped_root, damage):
    copy = tmp_path / "data"
    shutil.copytree(data.root(), copy)
    victim = copy / "possible_answer" / "data_normal_atom_bool.json"
    if damage == "corrupt":
        victim.write_bytes(victim.read_bytes().replace(b"true", b"false", 1))
    else:
        victim.unlink()
    data.set_root(copy)
    with pytest.raises(UserError, match=r"data_normal_atom_bool\.json.*(reinstall|git checkout)"):
        data.items("normal_atom_bool")


def test_duplicate_ids_across_categories_are_refused(tmp_path, shipped_root):
    copy = tmp_path / "data"
    shutil.copytree(data.root(), copy)
    source = json.loads((copy / "SOURCE.json").read_text())
    extra = copy / "data_en" / "data_normal_atom_enum.json"
    extra.write_text(extra.read_text() + (copy / "data_en" / "data_normal_atom_bool.json").read_text().splitlines()[0] + "\n")
    import hashlib
    source["files"]["data_en/data_normal_atom_enum.json"] = hashlib.sha256(extra.read_bytes()).hexdigest()
    (copy / "SOURCE.json").write_text(json.dumps(source))
    data.set_root(copy)
    with pytest.raises(UserError, match="normal_atom_bool_0"):
        data.items("normal_atom_bool")


@pytest.mark.parametrize("text", ["", "[", "[f(", "Sure, here you go.", "[get(x=1)", "[1, 2]", "{'a': 1}",
                                  "[f(x={**y})]", "[f(x=1/0)]", "[f(x=2**99999999)]", "[f(x='a'*10**12)]",
                                  "[f(x=lambda:1)]", "\x00", "[" * 500 + "]" * 500, None])
def test_a_malformed_answer_is_an_invalid_verdict(text):
    for category, item_id in (("normal_atom_number", "normal_atom_number_3"),
                              ("normal_multi_turn_user_switch", "normal_multi_turn_user_switch_0_0")):
        got = checker.check(category, item_id, text)
        assert got["valid"] is False and got["error"] and got["error_type"]


def test_calls_round_trip_through_the_official_syntax():
    calls = [("get_weather", {"city": "Beijing", "days": 3, "units": ["c"], "opts": {"a": True, "b": None}}),
             ("noargs", {})]
    text = checker.calls_to_text(calls)
    assert text == "[get_weather(city='Beijing', days=3, units=['c'], opts={'a': True, 'b': None}), noargs()]"
    assert checker.parse_calls(text) == [{name: args} for name, args in calls]
    gt = data.answer("normal_atom_number_3")["ground_truth"]
    assert checker.check("normal_atom_number", "normal_atom_number_3", checker.calls_to_text(gt.items()))["valid"]


def test_prompts_are_acebench_english_inference_prompts():
    item = data.items("special_incomplete")["special_incomplete_0"]
    system = checker.system_prompt("special_incomplete", item)
    assert system.startswith('You are an AI assistant with the role name "assistant".')
    assert "Missing necessary parameters (key1, key2, ...) for the api (ApiName)" in system
    assert str(item["function"]) in system and item["time"] in system
    pref = data.items("normal_preference")["normal_preference_0"]
    assert pref["profile"] in checker.system_prompt("normal_preference", pref)
    assert checker.user_prompt(item) == "Conversation history 1..t:\n" + item["question"]
    assert "{function}" in checker.SYSTEM_PROMPT_NORMAL and "{profile}" in checker.SYSTEM_PROMPT_PREFERENCE
