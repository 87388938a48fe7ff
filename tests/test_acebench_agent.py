"""ACEBench agent_multi_step: our scenarios and scoring (environments/acebench/agent.py) give the
official end-state verdict and process accuracy on every call sequence of
tests/fixtures/acebench/agent_official.jsonl (pinned by running the official code:
tests/fixtures/acebench/agent_README.md); every item is solvable through Episode + score; bad
calls are scored failures, never crashes."""
import json
from pathlib import Path

import pytest

from base.errors import UserError
from environments.acebench import agent, data
from environments.acebench.benchmark import ACEBenchBenchmark, scored_categories
from base.benchmark import Task

FIXTURE = Path(__file__).parent / "fixtures" / "acebench" / "agent_official.jsonl"
CAT = "agent_multi_step"


def _rows():
    return [json.loads(line) for line in FIXTURE.read_text(encoding="utf-8").splitlines()]


def _task(tid):
    return ACEBenchBenchmark(allow_test=True).make_task(tid, "test")


def _tool_call(c, k=0):
    args = c["arguments"] if isinstance(c["arguments"], str) else json.dumps(c["arguments"], ensure_ascii=False)
    return {"id": f"call_{k}", "type": "function", "function": {"name": c["name"], "arguments": args}}


def _play(task, steps):
    """Drive the Episode as the runner does: each step an assistant message, its calls executed."""
    ep = agent.episode(task)
    messages = list(ep.next_turn())
    assert ep.next_turn() is None
    for step in steps:
        if "text" in step:
            messages.append({"role": "assistant", "content": step["text"]})
            continue
        calls = [_tool_call(c, k) for k, c in enumerate(step["calls"])]
        messages.append({"role": "assistant", "content": "", "tool_calls": calls})
        obs = ep.execute([{"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in calls])
        assert len(obs) == len(calls) and all(isinstance(o, str) for o in obs)
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": o} for c, o in zip(calls, obs)]
    return ep, messages


def test_agrees_with_the_official_evaluation_on_every_pinned_sequence():
    rows = _rows()
    assert len(rows) >= 60
    assert {r["id"] for r in rows} == set(data.items(CAT))
    assert {r["valid"] for r in rows} == {True, False}
    tasks = {tid: _task(tid) for tid in data.items(CAT)}
    disagreements = []
    for r in rows:
        _, messages = _play(tasks[r["id"]], r["steps"])
        v = agent.score(tasks[r["id"]], messages)
        if v.success is not r["valid"] or v.reward != r["process"]:
            disagreements.append((r["id"], r["kind"], r["valid"], r["process"], v.success, v.reward, v.feedback))
    assert not disagreements, f"{len(disagreements)} of {len(rows)} disagree: {disagreements[:3]}"


def test_every_item_is_solved_by_its_corrected_gold_calls():
    rows = _rows()
    for tid in data.items(CAT):
        gold = next(r for r in rows if r["id"] == tid and r["kind"] in ("gold", "gold_fixed") and r["valid"])
        ep, messages = _play(_task(tid), gold["steps"])
        v = agent.score(_task(tid), messages)
        assert v.success and v.reward == 1.0 and v.turn_pass == [True], (tid, v.feedback)
        assert v.feedback["error_type"] is None
        # the episode's own instances reached the same end state as the replay
        assert agent.end_state_errors(ep.world.state(), data.answer(tid)["ground_truth"]) == (None, [])


def test_task_shape():
    assert CAT in scored_categories()
    t = _task("agent_multi_step_4")
    assert t.category == CAT and t.benchmark == "acebench"
    assert t.meta["max_steps_per_turn"] == 20 and t.meta["split"] == "test"
    assert t.meta["env"] == {"benchmark": "acebench", "task_id": "agent_multi_step_4", "variant": CAT}
    system, user = t.turns[0]
    assert system["role"] == "system" and "finish conversation" in system["content"]
    assert user["role"] == "user" and user["content"].endswith(
        "Conversation history: user:" + data.items(CAT)["agent_multi_step_4"]["question"] + "\n\n")
    assert {x["function"]["name"] for x in t.tools} == {f["name"] for f in data.items(CAT)["agent_multi_step_4"]["function"]}


def test_malformed_and_unknown_calls_are_scored_failures():
    t = _task("agent_multi_step_5")
    ep = agent.episode(t)
    ep.next_turn()
    obs = ep.execute([{"name": "delete_message", "arguments": "{not json"}])
    assert len(obs) == 1 and obs[0].startswith("Error during execution: ")
    assert ep.execute([{"name": "search_reminders", "arguments": "{}"}])[0].startswith("Error during execution: ")
    assert ep.execute([{"name": "delete_message", "arguments": '{"id": 4}'}])[0].startswith("Error during execution: ")
    assert ep.execute(["garbage", None])[0].startswith("Error during execution: ")
    assert json.loads(ep.execute([{"name": "delete_message", "arguments": '{"message_id": 4}'}])[0])["status"] is True
    msgs = [{"role": "user", "content": "q"},
            {"role": "assistant", "content": "", "tool_calls": [_tool_call({"name": "delete_message", "arguments": "{x"})]},
            {"role": "assistant", "content": None},
            {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": 7}}]}]
    v = agent.score(t, msgs)
    assert v.success is False and v.reward == 0.0 and v.turn_pass == [False]
    assert v.feedback["error_type"] == "acebench:agent_multi_step:wrong_number_of_classes"
    v = agent.score(t, [])
    assert v.success is False and v.reward == 0.0
    # a wrong end state names the mismatching attribute
    v = agent.score(t, [{"role": "user", "content": "q"},
                        {"role": "assistant", "content": "[delete_message(message_id=1)]"}])
    assert v.feedback["error_type"] == "acebench:agent_multi_step:class_attributes_wrong"
    assert any("inbox.1" in e for e in v.feedback["mismatch"])


def test_unimplemented_scenarios_are_a_user_error():
    item = dict(data.items(CAT)["agent_multi_step_0"], involved_classes=["BaseApi", "Travel"])
    with pytest.raises(UserError, match="Travel"):
        agent.make_task("x", item, [], None)
    with pytest.raises(UserError):
        agent.episode(Task(id="normal_atom_bool_1", benchmark="acebench", category=CAT, tools=[], turns=[[]], meta={}))


def test_step_cap_and_finish():
    t = _task("agent_multi_step_3")
    gold = [{"role": "assistant", "content": "[login_food_platform(username='Jack', password='password654')]"},
            {"role": "assistant", "content": "[add_food_delivery_order(username='Jack', merchant_name='Jiutian BBQ', "
                                             "items=[{'product': 'Grilled Pork Belly', 'quantity': 1}])]"}]
    user = [{"role": "user", "content": "q"}]
    assert agent.score(t, user + gold).success
    # "finish conversation" after the first step ends the episode; 20 steps at most
    assert not agent.score(t, user + gold[:1] + [{"role": "assistant", "content": "finish conversation"}] + gold[1:]).success
    filler = [{"role": "assistant", "content": "[get_products(merchant_name='Heytea')]"}] * 19
    assert not agent.score(t, user + gold[:1] + filler + gold[1:]).success
    assert agent.score(t, user + gold[:1] + filler[:18] + gold[1:]).success
