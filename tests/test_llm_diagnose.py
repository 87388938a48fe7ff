"""LLM diagnosis: replies become validated failed points (repaired or dropped), cached by content
hash, merged into recurring failure modes shaped like the rule-based ones."""
import copy
import json
import random

import pytest
from llm_server import llm_server  # noqa: F401  (the fixture)

from evolver.diagnose import FAMILIES
from evolver.llm import LLM, BudgetExceeded, LLMConfig, LLMError, LLMUnavailable, Reply
from evolver.failure_modes import family_of, merge
from evolver.llm_diagnose import (FIELDS, PROMPT_TOKEN_CAP, count_tokens, llm_diagnose,
                                  parse_points, render_prompt, select)

ARGS = {"failed_point": "Passed a string where set_budget_limit wants a number for the argument budget_limit",
        "evidence": "set_budget_limit({\"budget_limit\": \"22000\"})", "curation_hint": "Keep calls whose argument types match the schema"}
RECOVER = {"failed_point": "Did not recover after book_flight returned an error",
           "evidence": "[tool book_flight] {\"error\": \"invalid card\"}", "curation_hint": "Add trajectories that retry after errors"}
CODES = {"failed_point": "Confuses airport codes with city names",
         "evidence": "travel_from: Rivermist", "curation_hint": "Memory: the city-to-airport code table"}
CODES2 = {"failed_point": "Confused city names with airport codes in bookings",
          "evidence": "book_flight(travel_to='Stonebrook')", "curation_hint": "SFT examples resolving cities to codes first"}
CURRENCY = {"failed_point": "Ignores the currency the user asked for",
            "evidence": "user: in GBP; agent: USD", "curation_hint": "Select examples with explicit currency conversion"}


@pytest.fixture(scope="module")
def real(sample_corpus):
    """Failed copies of distinct real BFCL trajectories, with the runner's meta."""
    records = [json.loads(line) for line in sample_corpus.read_text().splitlines()]
    out = []
    for r in {r["meta"]["env"]["task_id"]: r for r in records}.values():
        t = copy.deepcopy(r)
        t["outcome"] = {"success": False, "reward": 0.0}
        t["meta"] = {"task_id": r["meta"]["env"]["task_id"], "sample": 0, "format_errors": [], "step_limit_turn": None,
                     "turn_pass": [True, False], "feedback": {"error_type": "multi_turn:instance_state_mismatch"}}
        out.append(t)
    return out


def reply(text):
    return Reply(text=text, prompt_tokens=10, completion_tokens=5, usd=0.0, record="r", from_record=False, wall_s=0.0)


class ScriptedLLM:
    """A stand-in for evolver.llm.LLM: `answer(messages)` gives the reply text or an exception."""

    model = "scripted"

    def __init__(self, answer):
        self.answer, self.requests = answer, []

    def complete(self, messages, *, purpose, max_tokens=None):
        self.requests.append((purpose, messages))
        out = self.answer(messages)
        if isinstance(out, Exception):
            raise out
        return reply(out)


def by_task(table):
    """An answer that picks the reply of the trajectory whose first user message is in the prompt."""
    def answer(messages):
        return next(json.dumps(points) for t, points in table if t["task"][:80] in messages[0]["content"])
    return answer


# --- parsing and repair -----------------------------------------------------------------------

def test_a_valid_reply_is_kept_as_is():
    parsed = parse_points(json.dumps([ARGS, RECOVER]))
    assert parsed.points == [ARGS, RECOVER]
    assert (parsed.repaired, parsed.dropped, parsed.repairs, parsed.error) == (0, 0, [], None)


@pytest.mark.parametrize("text, repair", [
    ("```json\n" + json.dumps([ARGS]) + "\n```", "code_fence"),
    ("Here is my analysis.\n" + json.dumps([ARGS]) + "\nHope this helps!", "surrounding_text"),
    (json.dumps(ARGS), "single_object"),
    (json.dumps({"failed_points": [ARGS]}), "wrapped_array"),
    (json.dumps([{**ARGS, "severity": "high", "step": 3}]), "extra_keys"),
    (json.dumps([{k: f"  {v}\n  " for k, v in ARGS.items()}]), "whitespace"),
    (json.dumps([{**ARGS, "evidence": "x" * 5000}]), "long_field"),
])
def test_repairable_replies_are_repaired(text, repair):
    parsed = parse_points(text)
    assert repair in parsed.repairs
    assert len(parsed.points) == 1 and parsed.repaired == 1 and parsed.dropped == 0
    assert set(parsed.points[0]) == set(FIELDS)
    assert parsed.points[0]["failed_point"] == ARGS["failed_point"]


def test_more_than_three_points_are_truncated_to_the_first_three():
    parsed = parse_points(json.dumps([ARGS, RECOVER, CODES, CURRENCY]))
    assert parsed.points == [ARGS, RECOVER, CODES]
    assert "truncated" in parsed.repairs and parsed.dropped == 1


def test_invalid_items_are_dropped_and_the_valid_ones_kept():
    items = [ARGS, "a string", {**RECOVER, "evidence": 3}, {**CODES, "curation_hint": "   "},
             {"failed_point": "x", "evidence": "y"}, {**ARGS, "evidence": "the same point again"}, None]
    parsed = parse_points(json.dumps(items))
    assert parsed.points == [ARGS] and parsed.dropped == 6 and parsed.repaired == 0


@pytest.mark.parametrize("text", ["I could not find a failure.", "[]", "[1, 2]", '{"answer": 42}', "[{\"failed_point\": "])
def test_a_reply_without_a_valid_point_says_why(text):
    parsed = parse_points(text)
    assert parsed.points == [] and parsed.error


# --- one trajectory, re-ask, cache --------------------------------------------------------------

def test_nothing_valid_gets_one_reask_with_the_validation_error(real, tmp_path):
    replies = iter(["Sorry, no JSON here.", json.dumps([RECOVER])])
    llm = ScriptedLLM(lambda messages: next(replies))
    points, stats = llm_diagnose(real[:1], llm, tmp_path)
    assert [p["family"] for p in points] == ["tool_error_not_recovered"]
    assert [purpose for purpose, _ in llm.requests] == ["diagnose", "diagnose-reask"]
    reask = llm.requests[1][1]
    assert [m["role"] for m in reask] == ["user", "assistant", "user"] and "no JSON array" in reask[2]["content"]
    assert stats["calls"] == 2 and stats["per_trajectory"][0]["reasked"]


def test_the_reask_is_bounded_to_one(real, tmp_path):
    llm = ScriptedLLM(lambda messages: '[{"failed_point": ""}]')
    points, stats = llm_diagnose(real[:1], llm, tmp_path)
    assert points == [] and stats["calls"] == 2 and stats["points_kept"] == 0 and stats["points_dropped"] == 2
    assert stats["diagnosed"] == 1 and stats["per_trajectory"][0]["error"]


def test_a_cache_hit_makes_no_llm_call(real, tmp_path):
    table = [(real[0], [ARGS]), (real[1], [CODES])]
    first = ScriptedLLM(by_task(table))
    points, stats = llm_diagnose(real[:2], first, tmp_path, progress=True)
    assert stats["calls"] == 2 and stats["cached"] == 0 and len(list(tmp_path.glob("*.json"))) == 2
    again = ScriptedLLM(lambda messages: pytest.fail("a cached trajectory was sent to the LLM"))
    points2, stats2 = llm_diagnose(real[:2], again, tmp_path)
    assert points2 == points and stats2["calls"] == 0 and stats2["cached"] == 2
    other_model = ScriptedLLM(by_task(table))
    other_model.model = "another"
    assert llm_diagnose(real[:2], other_model, tmp_path)[1]["calls"] == 2  # the model id is part of the key


def test_budget_exceeded_midway_keeps_what_was_diagnosed(real, tmp_path):
    table = [(t, [ARGS]) for t in real[:4]]
    answer, calls = by_task(table), []

    def until_budget(messages):
        calls.append(1)
        return BudgetExceeded("budget of $0.01 spent") if len(calls) > 2 else answer(messages)

    points, stats = llm_diagnose(real[:4], ScriptedLLM(until_budget), tmp_path)
    assert stats["stopped"].startswith("BudgetExceeded") and stats["diagnosed"] == 2 and stats["calls"] == 3
    assert points[0]["family"] == "bad_arguments" and points[0]["count"] == 2
    # a later run with the LLM unreachable still reads what the cache holds
    points2, stats2 = llm_diagnose(real[:4], ScriptedLLM(lambda m: LLMUnavailable("no API key")), tmp_path)
    assert points2 == points and stats2["cached"] == 2 and stats2["stopped"].startswith("LLMUnavailable")


def test_another_llm_error_skips_that_trajectory_only(real, tmp_path):
    table = dict((t["task"][:80], [CODES]) for t in real[:3])
    failing = real[1]["task"][:80]

    def answer(messages):
        text = messages[0]["content"]
        return LLMError("HTTP 400") if failing in text else json.dumps(next(v for k, v in table.items() if k in text))

    points, stats = llm_diagnose(real[:3], ScriptedLLM(answer), tmp_path)
    assert stats["diagnosed"] == 2 and len(stats["errors"]) == 1 and stats["stopped"] is None
    assert points[0]["count"] == 2


# --- merge --------------------------------------------------------------------------------------

def test_points_merge_into_rule_families_and_word_clusters_with_counts_and_task_ids():
    triples = [("a", "t1", ARGS), ("b", "t2", ARGS), ("b", "t2", {**ARGS, "failed_point": "Wrong parameter name in book_flight"}),
               ("c", "t3", RECOVER), ("a", "t1", CODES), ("c", "t3", CODES2), ("d", "t4", CURRENCY)]
    modes = merge(triples)
    by_family = {m["family"]: m for m in modes}
    assert by_family["bad_arguments"]["count"] == 2 and by_family["bad_arguments"]["task_ids"] == ["t1", "t2"]
    assert by_family["tool_error_not_recovered"]["task_ids"] == ["t3"]
    codes = next(m for f, m in by_family.items() if f.startswith("llm:") and m["count"] == 2)
    assert codes["task_ids"] == ["t1", "t3"] and codes["failed_point"] in (CODES["failed_point"], CODES2["failed_point"])
    assert len(modes) == 4
    assert [(-m["count"], m["family"]) for m in modes] == sorted((-m["count"], m["family"]) for m in modes)
    for m in modes:
        assert set(m) == {"failed_point", "evidence", "curation_hint", "family", "task_ids", "count", "source", "examples"}
        assert m["source"] == "llm" and 1 <= len(m["examples"]) <= 3
        assert m["family"] in FAMILIES or m["family"].startswith("llm:")
    for seed in range(5):
        shuffled = triples[:]
        random.Random(seed).shuffle(shuffled)
        assert merge(shuffled) == modes


@pytest.mark.parametrize("text, family", [
    ("Repeated the same get_flight_cost call instead of moving on", "repeated_call_loop"),
    ("Called a function that is not offered (fly_me)", "unknown_tool"),
    ("Did not retry after the authentication error", "tool_error_not_recovered"),
    ("Emitted a malformed tool call that could not be parsed", "unparseable_call"),
    ("Used a stale booking id from an earlier turn", "state_mismatch"),
    ("Stopped early before booking the flight", "premature_stop"),
    ("Gave the wrong value for the travel_class argument", "bad_arguments"),
    ("Misreads which date the user means", None),
])
def test_a_point_joins_a_rule_family_only_when_its_text_names_one(text, family):
    assert family_of({"failed_point": text}) == family


def test_a_damaged_cache_entry_is_diagnosed_again(real, tmp_path):
    llm = ScriptedLLM(lambda messages: json.dumps([ARGS]))
    llm_diagnose(real[:1], llm, tmp_path)
    entry = next(tmp_path.glob("*.json"))
    entry.write_text('{"points": [{"failed_point": 1}]}')
    points, stats = llm_diagnose(real[:1], llm, tmp_path)
    assert stats["calls"] == 1 and stats["cached"] == 0 and points[0]["family"] == "bad_arguments"
    assert json.loads(entry.read_text())["points"] == [ARGS]


def test_the_result_does_not_depend_on_the_order_of_the_trajectories(real, tmp_path):
    table = [(real[0], [ARGS, CODES]), (real[1], [CODES2]), (real[2], [RECOVER, ARGS]), (real[3], [CURRENCY])]
    points, stats = llm_diagnose(real[:4], ScriptedLLM(by_task(table)), tmp_path / "a")
    shuffled = real[:4][::-1]
    points2, stats2 = llm_diagnose(shuffled, ScriptedLLM(by_task(table)), tmp_path / "b")
    assert points2 == points and stats2 == stats
    assert stats["points_kept"] == 6 and stats["trajectories_failed"] == 4
    assert json.loads(json.dumps(points)) == points  # JSON as failed_points.json holds it


# --- prompt and selection -----------------------------------------------------------------------

def test_the_prompt_stays_under_its_token_cap_for_a_huge_trajectory(real):
    t = copy.deepcopy(real[0])
    t["messages"] = [{"role": "user", "content": "FIRST " + "plan my trip " * 3000}]
    for i in range(300):
        t["messages"] += [{"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": f"step_{i}", "arguments": json.dumps({"x": "y" * 2000})}}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": "lorem ipsum " * 500}]
    t["meta"]["feedback"] = {"details": ["state differs"] * 5000}
    prompt = render_prompt(t)
    assert count_tokens(prompt) <= PROMPT_TOKEN_CAP
    assert "step_0(" in prompt and "step_299(" in prompt and "lines omitted" in prompt and "tokens cut" in prompt
    assert render_prompt(t) == prompt
    small = render_prompt(real[0])
    assert real[0]["messages"][1]["tool_calls"][0]["function"]["name"] + "(" in small and "omitted" not in small


def test_the_prompt_shows_task_tools_trajectory_and_feedback(real):
    t = copy.deepcopy(real[0])
    t["meta"]["format_errors"] = [{"turn": 1, "step": 0, "error": "no JSON object in <tool_call>", "text": "..."}]
    prompt = render_prompt(t)
    assert t["task"][:60] in prompt and t["tools"][0]["function"]["name"] in prompt
    assert "instance_state_mismatch" in prompt and "no JSON object in <tool_call>" in prompt
    assert "[tool " in prompt and "[assistant] " in prompt


def test_limit_takes_a_stratified_deterministic_subset_sorted_by_task_id(real):
    pool = []
    for i, t in enumerate(real[:12]):
        t = copy.deepcopy(t)
        if i % 3 == 1:
            t["meta"]["format_errors"] = [{"turn": 0, "step": 0, "error": "bad"}]
        if i % 3 == 2:
            t["meta"]["step_limit_turn"] = 0
        pool.append(t)
    chosen = select(pool, 6)
    ids = [t["meta"]["task_id"] for t in chosen]
    assert len(chosen) == 6 and ids == sorted(ids)
    assert {i % 3 for i, t in enumerate(pool) if t in chosen} == {0, 1, 2}
    assert select(pool[::-1], 6) == chosen and select(pool, None) == sorted(pool, key=lambda t: t["meta"]["task_id"])


# --- end to end through evolver.llm.LLM and a real HTTP server ------------------------------------

def http_llm(server, tmp_path, monkeypatch, provider="openai", mode="record", **config):
    monkeypatch.delenv("CURATEEVO_TEST_NO_KEY", raising=False)  # a local server needs no key
    url = server.openai_url if provider == "openai" else server.anthropic_url
    return LLM(LLMConfig(provider, "diagnoser-1", base_url=url, api_key_env="CURATEEVO_TEST_NO_KEY", mode=mode,
                         max_retries=0, **config), tmp_path / "llm")


def test_end_to_end_over_http_then_an_offline_rerun_makes_no_request(real, tmp_path, monkeypatch, llm_server):
    table = [(real[0], "```json\n" + json.dumps([ARGS, CODES]) + "\n```"), (real[1], "Findings: " + json.dumps([CODES2])),
             (real[2], json.dumps(RECOVER))]
    llm_server.script(*[lambda req: next(text for t, text in table if t["task"][:80] in req.messages[0]["content"])] * 3)
    llm = http_llm(llm_server, tmp_path, monkeypatch)
    points, stats = llm_diagnose(real[:3], llm, tmp_path / "cache")
    assert len(llm_server.requests) == 3 and stats["calls"] == 3 and stats["points_repaired"] == 4
    assert [(m["family"], m["count"]) for m in points] == [
        ("llm:confused-city-name-airport", 2), ("bad_arguments", 1), ("tool_error_not_recovered", 1)]
    assert llm.usage()["by_purpose"]["diagnose"]["calls"] == 3
    # a fresh diagnosis cache, the LLM in offline mode over the same record: no request at all
    offline = http_llm(llm_server, tmp_path, monkeypatch, mode="offline")
    points2, stats2 = llm_diagnose(real[:3], offline, tmp_path / "cache2")
    assert points2 == points and stats2["calls"] == 3 and stats2["cached"] == 0
    assert len(llm_server.requests) == 3 and offline.usage()["from_record"] == 3


def test_end_to_end_reask_and_a_token_budget_spent_midway(real, tmp_path, monkeypatch, llm_server):
    llm_server.script({"text": "I think the agent did fine.", "usage": (900, 10)},
                      {"text": json.dumps([CURRENCY]), "usage": (1500, 10)})
    llm = http_llm(llm_server, tmp_path, monkeypatch, provider="anthropic", budget_tokens=3000)
    points, stats = llm_diagnose(real[:3], llm, tmp_path / "cache")
    assert [p["family"] for p in points] == ["llm:ignore-currency-user-asked"]
    assert stats["diagnosed"] == 1 and stats["per_trajectory"][0]["reasked"]
    assert stats["stopped"].startswith("BudgetExceeded") and len(llm_server.requests) == 2
    assert "could not be used" in llm_server.requests[1].messages[-1]["content"]
