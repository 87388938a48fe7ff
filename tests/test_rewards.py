"""GRPO rewards: partial credit by call and argument, execution on rebuilt BFCL backends."""
import json
from pathlib import Path

import pytest

from sandbox import exchange
from trainer import rewards
from chat_format.chat_format import render_assistant
from trainer.rewards import UNPARSEABLE, state_match, tool_call_match


def call(name, **args):
    return f'<tool_call>{json.dumps({"name": name, "arguments": args})}</tool_call>'


def tc(name, **args):
    return {"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


TOOLS = [{"type": "function", "function": {"name": "cd", "parameters": {
    "type": "object", "required": ["folder"], "properties": {"folder": {"type": "string"}}}}}]


def record(*calls, reward="tool_call_match", **extra):
    return {"id": "r", "messages": [{"role": "user", "content": "go"}], "tools": TOOLS,
            "reference": {"tool_calls": list(calls)}, "reward": reward, **extra}


REF = record(tc("get_flight_cost", travel_from="SFO", travel_to="LAX"), tc("cd", folder="docs"))


@pytest.mark.parametrize("completion, expected", [
    (call("get_flight_cost", travel_from="SFO", travel_to="LAX") + call("cd", folder="docs"), 1.0),
    (call("get_flight_cost", travel_from="sfo", travel_to="L.A.X") + call("cd", folder="Docs"), 1.0),  # BFCL string rules
    (call("get_flight_cost", travel_from="SFO", travel_to="JFK") + call("cd", folder="docs"), (0.75 + 1) / 2),
    (call("get_flight_cost", travel_from="SFO") + call("cd", folder="docs"), (0.75 + 1) / 2),  # missing argument
    (call("cd", folder="docs"), 0.5),                            # one call missing
    (call("cd", folder="docs") + call("get_flight_cost", travel_from="SFO", travel_to="LAX"), 0.5),  # order counts
    (call("get_flight_cost", travel_from="SFO", travel_to="LAX") + call("cd", folder="docs") + call("ls"), 2 / 3),
    (call("mkdir", dir="x"), 0.0),                               # wrong function
    ("I will look at the flights.", 0.0),                        # no call
    ("[get_flight_cost(travel_from='SFO', travel_to='LAX'), cd('docs')]", 1.0),  # python list, positional
    ('<tool_call>{"name": "cd", "arguments": {"folder": </tool_call>', UNPARSEABLE),
    ("[cd(folder=__import__('os').getcwd())]", UNPARSEABLE),
])
def test_tool_call_match_gives_partial_credit_by_call_and_argument(completion, expected):
    assert tool_call_match(completion, REF) == pytest.approx(expected)


def test_numbers_compare_by_value():
    ref = record(tc("set_budget_limit", budget_limit=5000))
    assert tool_call_match(call("set_budget_limit", budget_limit=5000.0), ref) == 1.0
    assert tool_call_match(call("set_budget_limit", budget_limit="5000"), ref) == 0.5


def test_a_text_reference_rewards_answering_without_a_call():
    ref = {**REF, "reference": {"content": "The flight costs 400 dollars."}}
    assert tool_call_match("The flight costs 400 dollars.", ref) == 1.0
    assert 0.5 < tool_call_match("It costs 400 dollars.", ref) < 1.0
    assert tool_call_match(call("cd", folder="docs"), ref) == 0.0


# ---------------------------------------------------------------------------------------------
# state_match on the bundled BFCL trajectories


@pytest.fixture(scope="module")
def trip(sample_corpus):
    """bfcl-mt-151: book a flight (booking 3426812), then later cancel it."""
    raw = next(json.loads(line) for line in Path(sample_corpus).read_text().splitlines()
               if json.loads(line)["id"] == "bfcl-mt-151/dbd18cf7")
    return raw


def step(raw, index):
    """The RL record that asks for the assistant turn at `index` of a raw trajectory."""
    return {"id": f"{raw['id']}#{index}", "messages": raw["messages"][:index], "tools": raw["tools"],
            "reference": {"tool_calls": raw["messages"][index]["tool_calls"]}, "reward": "state_match",
            "meta": {"env": raw["meta"]["env"]}}


def test_the_reference_itself_scores_one_on_every_step(trip):
    for i, m in enumerate(trip["messages"]):
        if m.get("tool_calls"):
            assert state_match(render_assistant(m), step(trip, i)) == 1.0


def test_the_prefix_is_executed_before_the_calls(trip):
    cancel = step(trip, 9)  # the booking exists only because the prefix booked it
    assert state_match(call("cancel_booking", access_token="abc123xyz", booking_id="3426812"), cancel) == 1.0
    assert state_match(call("cancel_booking", access_token="abc123xyz", booking_id="999"), cancel) == 0.0


def test_a_right_output_with_a_wrong_final_state_earns_half(trip):
    cancel = step(trip, 9)
    right = call("cancel_booking", access_token="abc123xyz", booking_id="3426812")
    extra = call("set_budget_limit", access_token="abc123xyz", budget_limit=10.0)
    assert state_match(right + extra, cancel) == 0.5


def test_state_match_judges_by_execution_not_by_spelling(trip):
    cost = step(trip, 1)  # get_flight_cost is read-only: another spelling of the same call is as good
    same = '[get_flight_cost(travel_from="SFO", travel_to="LAX", travel_date="2026-11-10", travel_class="business")]'
    assert state_match(same, cost) == 1.0
    assert state_match(call("get_flight_cost", travel_from="SFO", travel_to="LAX", travel_date="2026-11-10",
                            travel_class="economy"), cost) == 0.0
    assert state_match("Sure, one moment.", cost) == 0.0
    assert state_match("<tool_call>{oops}</tool_call>", cost) == UNPARSEABLE


def test_state_match_without_an_environment_falls_back_to_call_matching():
    assert state_match(call("cd", folder="docs"), record(tc("cd", folder="docs"), reward="state_match")) == 1.0


def test_trl_reward_functions_read_the_files_columns_and_score_only_their_own_rows():
    """TRL calls fn(prompts, completions, completion_ids, **columns); the columns are the file
    form of sandbox.exchange (tools and meta as JSON strings, Arrow's nulls in `reference`)."""
    assert [f.__name__ for f in (rewards.tool_call_match_reward, rewards.state_match_reward)] == \
        ["tool_call_match", "state_match"]
    row = exchange.to_file("rl", record(tc("cd", folder="docs")))
    columns = {"reward": [row["reward"]] * 2, "reference": [{**row["reference"], "content": None}] * 2,
               "tools": [row["tools"]] * 2, "meta": [None] * 2, "messages": [row["messages"]] * 2,
               "id": [row["id"]] * 2}
    completions = [call("cd", folder="docs"), [{"role": "assistant", "content": call("cd", folder="x")}]]
    assert rewards.tool_call_match_reward(["p", "p"], completions, None, **columns) == [1.0, 0.5]
    assert rewards.state_match_reward(["p", "p"], completions, None, **columns) == [None, None]
