"""Rule-based diagnosis: the failure family of a failed trajectory comes from the official
checker's verdict in a documented order of precedence (evolver/diagnose.py). The table below is
checked against real checker outputs: deliberately wrong answers to real BFCL dev/train tasks,
played through the real runner and scored by bfcl_eval's ast_checker / multi_turn_checker."""
import copy
import json
import os
import tempfile
from pathlib import Path

os.environ.setdefault("BFCL_PROJECT_ROOT", str(Path(tempfile.gettempdir()) / "curateevo-bfcl"))

import pytest  # noqa: E402

from base.registry import get_benchmark  # noqa: E402
from environments.policies.scripted import ScriptedPolicy  # noqa: E402
from environments.runner import run_episodes  # noqa: E402
from evolver.diagnose import FAMILIES, diagnose, families  # noqa: E402
from evolver.proposers.offline import REMEDIES  # noqa: E402
from chat_format import chat_format as cf  # noqa: E402


def render(calls):
    return cf.render_assistant({"content": "", "tool_calls": cf.to_openai_tool_calls(calls)})


def first_call(gold):
    name, args = gold[0]
    return name, args, next(iter(args))


# (case, task, answer(gold calls, offered names) -> the model's text) → checker error type → family
SINGLE_TURN = [
    ("text, no call", "simple_python_0", lambda g, o: "The area is 25.",
     "ast_decoder:decoder_failed", "missing_call"),
    ("broken JSON call", "simple_python_0", lambda g, o: '<tool_call>{"name": "x", "arguments": {</tool_call>',
     "ast_decoder:decoder_failed", "unparseable_call"),
    ("a tool not on offer", "simple_python_0", lambda g, o: render([{"name": "no_such_tool", "arguments": {}}]),
     "simple_function_checker:wrong_func_name", "unknown_tool"),
    ("another offered tool", "multiple_25", lambda g, o: render([{"name": next(n for n in o if n != g[0][0]), "arguments": g[0][1]}]),
     "simple_function_checker:wrong_func_name", "wrong_tool"),
    ("required argument left out", "simple_python_0", lambda g, o: render([{"name": g[0][0], "arguments": {}}]),
     "simple_function_checker:missing_required", "bad_arguments"),
    ("an argument the tool lacks", "multiple_25", lambda g, o: render([{"name": g[0][0], "arguments": {**g[0][1], "zzz": 1}}]),
     "simple_function_checker:unexpected_param", "bad_arguments"),
    ("a list for an integer", "simple_python_0", lambda g, o: render([{"name": g[0][0], "arguments": {**g[0][1], "base": [1, 2]}}]),
     "type_error:simple", "bad_arguments"),
    ("a wrong string value", "multiple_25", lambda g, o: render([{"name": g[0][0], "arguments": {**g[0][1], "game_title": "Tetris"}}]),
     "value_error:string", "bad_arguments"),
    ("the call twice", "simple_python_0", lambda g, o: render([{"name": g[0][0], "arguments": g[0][1]}] * 2),
     "simple_function_checker:wrong_count", "wrong_call_count"),
    ("two calls where one is wanted", "multiple_25", lambda g, o: render([{"name": g[0][0], "arguments": g[0][1]}] * 2),
     "multiple_function_checker:wrong_count", "wrong_call_count"),
    ("one of two parallel calls", "parallel_1", lambda g, o: render([{"name": g[0][0], "arguments": g[0][1]}]),
     "parallel_function_checker_no_order:wrong_count", "wrong_call_count"),
    ("parallel calls, one wrong", "parallel_1", lambda g, o: render([{"name": g[0][0], "arguments": g[0][1]}] * 2),
     "parallel_function_checker_no_order:cannot_find_match", "bad_arguments"),
    ("parallel_multiple, one missing", "parallel_multiple_4", lambda g, o: render([{"name": g[0][0], "arguments": g[0][1]}]),
     "parallel_function_checker_no_order:wrong_count", "wrong_call_count"),
    ("a call where none is wanted", "irrelevance_12", lambda g, o: render([{"name": o[0], "arguments": {"start": 1, "end": 9}}]),
     "irrelevance_error:decoder_success", "unwanted_call"),
]


@pytest.fixture(scope="module")
def single():
    return get_benchmark("bfcl-single", categories=["simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance"])


@pytest.fixture(scope="module")
def multi():
    return get_benchmark("bfcl")


def play_single(bench, task_id, answer):
    task = bench.make_task(task_id)
    gold, offered = bench.gold(task_id), [t["function"]["name"] for t in task.tools]
    return run_episodes(bench, [task], ScriptedPolicy(lambda m, t: answer(gold, offered)))[0]


@pytest.mark.parametrize("case,task_id,answer,error_type,family", SINGLE_TURN, ids=[c[0] for c in SINGLE_TURN])
def test_single_turn_checker_error_types_map_to_families(single, case, task_id, answer, error_type, family):
    record = play_single(single, task_id, answer)
    assert not record["outcome"]["success"]
    assert record["meta"]["feedback"]["error_type"] == error_type
    assert families(record)[0][0] == family
    # one step, no chance to recover and no step limit reached: neither is reported
    assert {f for f, _ in families(record)}.isdisjoint({"step_limit", "tool_error_not_recovered"})


def play_multi(bench, task_id, change):
    """Each turn: the gold calls (changed by `change(turn, calls)`) in one message, then "Done."."""
    task = bench.make_task(task_id)
    gold = [[{"name": n, "arguments": a} for n, a, _ in turn] for turn in bench.gold_turns(task)]

    def answer(messages, tools):
        if messages[-1]["role"] != "user":
            return "Done."
        turn = sum(m["role"] == "user" for m in messages) - 1
        calls = change(turn, [dict(c) for c in gold[turn]])
        return render(calls) if calls else "Nothing to do."
    return run_episodes(bench, [task], ScriptedPolicy(answer))[0]


MULTI_TURN = [
    ("nothing said", "multi_turn_base_3", lambda t, c: [], "multi_turn:empty_turn_model_response", "empty_turn"),
    ("a wrong directory made", "multi_turn_base_0",
     lambda t, c: [{**x, "arguments": {"dir_name": "other"}} if x["name"] == "mkdir" else x for x in c],
     "multi_turn:instance_state_mismatch", "state_mismatch"),
    ("ls instead of find", "multi_turn_base_3", lambda t, c: [{"name": "ls", "arguments": {}}] if t == 0 else c,
     "multi_turn:execution_response_mismatch", "missing_output"),
    ("the same call until the step limit", "multi_turn_base_1", lambda t, c: [{"name": "pwd", "arguments": {}}],
     "multi_turn:force_terminated", "step_limit"),
]


@pytest.mark.parametrize("case,task_id,change,error_type,family", MULTI_TURN, ids=[c[0] for c in MULTI_TURN])
def test_multi_turn_checker_error_types_map_to_families(multi, case, task_id, change, error_type, family):
    if case == "the same call until the step limit":   # one call per message, again and again
        task = multi.make_task(task_id)
        record = run_episodes(multi, [task], ScriptedPolicy(lambda m, t: render([{"name": "pwd", "arguments": {}}])))[0]
    else:
        record = play_multi(multi, task_id, change)
    assert not record["outcome"]["success"]
    assert record["meta"]["feedback"]["error_type"] == error_type
    found = [f for f, _ in families(record)]
    assert found[0] == family
    if family == "step_limit":
        assert "repeated_call_loop" in found


def test_a_call_in_a_turn_that_wants_none_passes_bfcl_but_the_turn_check_names_it(multi):
    record = play_multi(multi, "multi_turn_miss_func_1", lambda t, c: [{"name": "ls", "arguments": {}}] if t == 1 else c)
    assert record["outcome"]["success"]   # BFCL's multi-turn verdict ignores it
    assert record["meta"]["feedback"]["turn_errors"] == [{"turn": 1, "error_type": "multi_turn:irrelevance_error:decoder_success"}]
    failed = copy.deepcopy(record)
    failed["outcome"]["success"] = False
    failed["meta"]["feedback"]["error_type"] = "multi_turn:instance_state_mismatch"
    assert [f for f, _ in families(failed)] == ["state_mismatch", "unwanted_call"]


def test_every_family_has_a_remedy_in_the_offline_proposer():
    assert set(FAMILIES) <= set(REMEDIES)
    assert all(REMEDIES[f] for f in FAMILIES)


def test_a_recovered_tool_error_is_not_unrecovered(multi):
    record = play_multi(multi, "multi_turn_base_0",
                        lambda t, c: [{"name": "cd", "arguments": {"folder": "nowhere"}}] + c if t == 0 else c)
    assert any("nowhere" in e["call"] for e in record["meta"]["feedback"]["tool_errors"])
    assert record["outcome"]["success"]
    record["outcome"]["success"] = False
    assert "tool_error_not_recovered" not in dict(families(record))   # the next cd succeeded


def test_failed_points_follow_designs_format_and_signals_join_them(single):
    bad = [play_single(single, "simple_python_0", lambda g, o: "No."),
           play_single(single, "multiple_25", lambda g, o: "No."),
           play_single(single, "irrelevance_12", lambda g, o: render([{"name": o[0], "arguments": {}}]))]
    good = play_single(single, "parallel_1", lambda g, o: render([{"name": n, "arguments": a} for n, a in g]))
    assert good["outcome"]["success"]
    points, signals = diagnose(bad + [good])
    assert [(p["family"], p["count"]) for p in points] == [("missing_call", 2), ("unwanted_call", 1)]
    top = points[0]
    assert set(top) >= {"failed_point", "evidence", "curation_hint", "family", "task_ids", "count"}
    assert top["task_ids"] == ["multiple_25", "simple_python_0"] and "No function call" in top["evidence"]
    assert set(signals) == {"families", "forgetting", "boundary", "rare"}
    assert signals["families"] == {"missing_call": 2, "unwanted_call": 1}
    json.dumps(signals)


def test_a_call_to_a_tool_a_memory_hint_named_and_the_task_does_not_offer_is_misled_by_memory():
    from trainer.memory import HEADER

    def trajectory(called, hints):
        system = "You are a helpful assistant." + (f"\n\n{HEADER}\n" + "\n".join(f"- {h}" for h in hints) if hints else "")
        return {"messages": [{"role": "system", "content": system},
                             {"role": "user", "content": "How much CO2 does a 12000-mile drive emit?"},
                             {"role": "assistant", "content": "", "tool_calls": [
                                 {"id": "c", "type": "function", "function": {"name": called, "arguments": "{}"}}]},
                             {"role": "tool", "tool_call_id": "c", "content": f"Error during execution: name '{called}' is not defined"}],
                "tools": [{"type": "function", "function": {"name": "calculate_emissions", "parameters": {}}}],
                "outcome": {"success": False},
                "meta": {"feedback": {"error_type": "simple_function_checker:wrong_func_name"}, "max_steps": 1}}

    misled = dict(families(trajectory("get_case_result", ["get_case_result(case_year: integer) - a court case.",
                                                         "math.sum(numbers: array) - a sum."])))
    assert list(misled)[:2] == ["unknown_tool", "misled_by_memory"]
    assert misled["misled_by_memory"] == "called get_case_result: not offered, named in a memory hint"
    # an unknown tool no hint names, a hint naming a longer tool, and no hints at all are not memory's doing
    assert "misled_by_memory" not in dict(families(trajectory("find_roots", ["math.sum(numbers: array) - a sum."])))
    assert "misled_by_memory" not in dict(families(trajectory("get_case", ["get_case_result(case_year) - a case."])))
    assert "misled_by_memory" not in dict(families(trajectory("get_case_result", [])))
