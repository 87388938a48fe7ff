"""Rule-based diagnosis: each family is recognised from the checker's feedback or the trajectory's shape."""
import copy
import json

import pytest

from evolver.diagnose import FAMILIES, diagnose, families


@pytest.fixture(scope="module")
def real(sample_corpus):
    return [json.loads(line) for line in sample_corpus.read_text().splitlines()]


def failed(record, **meta):
    t = copy.deepcopy(record)
    t["outcome"] = {"success": False, "reward": 0.0}
    t["meta"] = {"task_id": t["meta"]["env"]["task_id"], "sample": 0, "format_errors": [], "step_limit_turn": None,
                 "turn_pass": [True], "feedback": {}, **meta}
    return t


def call(cid, name, args):
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}


def result(cid, text):
    return {"role": "tool", "tool_call_id": cid, "content": text}


def test_checker_state_mismatch_is_its_own_family_and_a_recovered_error_is_not_unrecovered(real):
    clean = next(r for r in real if not any("error" in (m.get("content") or "").lower() for m in r["messages"] if m["role"] == "tool"))
    t = failed(clean, feedback={"error_type": "multi_turn:instance_state_mismatch", "state_diff": {"TravelAPI": "budget"}})
    assert [f for f, _ in families(t)] == ["state_mismatch"]


def test_format_errors_unknown_tools_bad_arguments_and_unrecovered_errors(real):
    base = real[0]
    t = failed(base, format_errors=[{"turn": 0, "step": 0, "error": "no JSON object in <tool_call>"}])
    assert "unparseable_call" in dict(families(t))
    t = failed(base)
    t["messages"] = [t["messages"][0], call("c1", "fly_me", {}), result("c1", "Error during execution: name 'fly_me' is not defined")]
    found = dict(families(t))
    assert "unknown_tool" in found and "tool_error_not_recovered" in found
    t["messages"] += [call("c2", "fly_me", {"x": 1}), result("c2", '{"ok": true}')]
    assert "tool_error_not_recovered" not in dict(families(t))
    t = failed(base, feedback={"error_type": "type_error:simple", "checker_message": "Nested type checking failed for parameter 'x'"})
    t["messages"] = t["messages"][:1]
    assert "bad_arguments" in dict(families(t))


def test_loops_step_limits_and_premature_stops(real):
    base = real[0]
    t = failed(base, step_limit_turn=0, max_steps=5)
    t["messages"] = [t["messages"][0]] + [m for i in range(4) for m in (call(f"c{i}", "ls", {"a": 1}), result(f"c{i}", "x"))]
    found = dict(families(t))
    assert "repeated_call_loop" in found and "step_limit" in found
    t = failed(base, turn_pass=[True, False])
    t["messages"] = [{"role": "user", "content": "one"}, call("c1", "ls", {}), result("c1", "x"),
                     {"role": "assistant", "content": "done"}, {"role": "user", "content": "two"},
                     {"role": "assistant", "content": "I cannot help."}]
    assert [f for f, _ in families(t)] == ["premature_stop"]


def test_failed_points_and_signals_follow_designs_format(real):
    distinct = list({r["meta"]["env"]["task_id"]: r for r in real}.values())[:12]
    runs = []
    for i, r in enumerate(distinct):
        t = failed(r, feedback={"error_type": "multi_turn:instance_state_mismatch"}) if i % 3 == 0 else copy.deepcopy(r)
        if i % 3:
            t["meta"] = {"task_id": r["meta"]["env"]["task_id"], "sample": 0}
            t["outcome"] = {"success": True, "reward": 1.0}
        runs.append(t)
    mixed = copy.deepcopy(runs[1])
    mixed["outcome"] = {"success": False, "reward": 0.0}
    mixed["meta"]["sample"] = 1
    runs.append(mixed)
    points, signals = diagnose(runs, passed_before=[runs[0]["meta"]["task_id"]])
    assert set(signals) == {"families", "forgetting", "boundary", "rare"}
    assert signals["forgetting"] == [runs[0]["meta"]["task_id"]]
    assert signals["boundary"] == [runs[1]["meta"]["task_id"]]
    top = points[0]
    assert set(top) >= {"failed_point", "evidence", "curation_hint", "family", "task_ids", "count"}
    assert top["family"] == "state_mismatch" and top["count"] == 4
    assert all(p["family"] in FAMILIES for p in points)
    assert signals["families"]["state_mismatch"] == 4
    for r in signals["rare"]:
        assert len(r["task_ids"]) >= 2 and r["count"] >= 2
