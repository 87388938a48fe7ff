"""The next-call benchmark's P measures tool use: call-level F1 over the held-out steps, a text step
counting only through an unwanted call; its evaluation writes episodes the diagnoses read."""
import json
from pathlib import Path

import pytest

from environments import evaluate
from environments.next_call import scoring as rs
from base.registry import get_benchmark
from environments.metrics import summarize
from environments.policies.baselines import MostCommonToolPolicy
from environments.policies.scripted import ScriptedPolicy
from evolver import cli
from evolver.diagnose import diagnose
from base.errors import UserError
from evolver.llm_diagnose import render_prompt
from chat_format import chat_format as cf

EXTERNAL = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "external"
GLAIVE = EXTERNAL / "llamafactory-glaive_toolcall_en_demo.json"
WEATHER = {"name": "get_weather", "arguments": '{"city": "Paris", "days": 2}'}
OFFERED = ["get_weather", "get_time"]


def _step(gold, answer_calls=(), error=None):
    """A runner step row with one judged answer."""
    calls = list(answer_calls)
    judged = rs.judge_calls(gold, calls, error, OFFERED)
    right = judged["verdict"] == "right"
    return {"task_id": "t", "index": 0, "category": "c", "gold": list(gold), "correct": float(right),
            "samples": [{"output": "", "calls": calls, "format_error": error, "correct": right, **judged}]}


def test_a_call_step_is_right_only_with_the_same_calls_compared_after_normalisation():
    same = {"name": "get_weather", "arguments": '{"days": 2.0, "city": "Paris"}'}
    assert rs.judge_calls([WEATHER], [same], None, OFFERED) == {
        "verdict": "right", "why": 'the recorded step calls get_weather({"city": "Paris", "days": 2})',
        "tp": 1, "fp": 0, "fn": 0}
    wrong = rs.judge_calls([WEATHER], [{"name": "get_weather", "arguments": '{"city": "paris", "days": 2}'}], None, OFFERED)
    assert (wrong["verdict"], wrong["tp"], wrong["fp"], wrong["fn"]) == ("bad_arguments", 0, 1, 1)
    assert wrong["why"].endswith("city differs")
    assert rs.judge_calls([WEATHER], [{"name": "get_time", "arguments": "{}"}], None, OFFERED)["verdict"] == "wrong_tool"
    assert rs.judge_calls([WEATHER], [{"name": "rm_rf", "arguments": "{}"}], None, OFFERED)["verdict"] == "unknown_tool"
    assert rs.judge_calls([WEATHER], [WEATHER, WEATHER], None, OFFERED) | {"why": ""} == {
        "verdict": "wrong_call_count", "why": "", "tp": 1, "fp": 1, "fn": 0}
    missing = rs.judge_calls([WEATHER], [], None, OFFERED)
    assert (missing["verdict"], missing["fn"]) == ("missing_call", 1)
    broken = rs.judge_calls([WEATHER], [WEATHER], "tool call 1 is not valid JSON", OFFERED)
    assert (broken["verdict"], broken["tp"], broken["fp"], broken["fn"]) == ("unparseable_call", 0, 0, 1)
    two = [WEATHER, {"name": "get_time", "arguments": '{"tz": "UTC"}'}]
    assert rs.judge_calls(two, list(reversed(two)), None, OFFERED)["verdict"] == "right"   # one step's calls: any order


def test_a_text_step_counts_only_through_an_unwanted_call():
    quiet = rs.judge_calls([], [], None, OFFERED)
    assert (quiet["verdict"], quiet["tp"], quiet["fp"], quiet["fn"]) == ("right", 0, 0, 0)
    noisy = rs.judge_calls([], [WEATHER], None, OFFERED)
    assert (noisy["verdict"], noisy["tp"], noisy["fp"], noisy["fn"]) == ("unwanted_call", 0, 1, 0)


def test_call_f1_precision_recall_and_no_call_false_positives_over_hand_made_steps():
    right, wrong = _step([WEATHER], [WEATHER]), _step([WEATHER], [{"name": "get_time", "arguments": "{}"}])
    text_quiet, text_noisy = _step([]), _step([], [WEATHER])
    m = summarize([], [right, wrong, text_quiet, text_noisy])["metrics"]
    # TP 1; FP: the wrong call and the unwanted one; FN: the missed weather call
    assert (m["call_tp"], m["call_fp"], m["call_fn"]) == (1, 2, 1)
    assert m["call_f1"] == round(2 / 5, 6) and m["call_precision"] == round(1 / 3, 6) and m["call_recall"] == 0.5
    assert m["no_call_fp_rate"] == 0.5 and m["text_step_answers"] == 2
    assert m["verdicts"] == {"right": 2, "unwanted_call": 1, "wrong_tool": 1}
    # a model that never calls gets nothing from the text steps
    silent = summarize([], [_step([WEATHER]), _step([WEATHER]), _step([]), _step([])])["metrics"]
    assert silent["call_f1"] == 0.0 and silent["call_recall"] == 0.0 and silent["call_precision"] is None
    assert silent["no_call_fp_rate"] == 0.0
    tools = summarize([], [right, wrong, text_noisy])["per_tool"]
    assert tools["get_weather"] | {"f1": None} == {"recorded": 2, "called": 2, "tp": 1, "fp": 1, "fn": 1,
                                                   "precision": 0.5, "recall": 0.5, "f1": None}
    assert tools["get_time"]["called"] == 1 and tools["get_time"]["fp"] == 1 and tools["get_time"]["f1"] == 0.0


def test_bfcl_keeps_its_checker_and_next_call_refuses_the_share_of_right_steps_as_p(sample_corpus, tmp_path):
    with pytest.raises(UserError, match="call_f1 is measured on the next-call benchmark"):
        evaluate.evaluate_to_dir("bfcl-single", "dev", tmp_path / "a", policy=ScriptedPolicy(lambda m, t: ""),
                                 tasks=1, metric="call_f1")
    with pytest.raises(UserError, match="a random model passes it"):
        evaluate.evaluate_to_dir("next-call", "dev", tmp_path / "b", policy=ScriptedPolicy(lambda m, t: ""),
                                 corpus=str(sample_corpus), metric="step_accuracy")


# ---------------------------------------------------------------------------------------------
# episodes for the diagnoses

BEHAVIOURS = ("wrong_tool", "bad_arguments", "missing_call", "unparseable_call", "unwanted_call")


def _corpus(path: Path, n: int = 60) -> Path:
    lines = []
    for i in range(n):
        calls = [("search", {"q": f"item {i}"}), ("buy", {"id": i})]
        messages = [{"role": "user", "content": f"request number {i}"}]
        for j, (name, args) in enumerate(calls):
            messages += [{"role": "assistant", "content": None, "tool_calls": [
                {"id": f"c{j}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]},
                         {"role": "tool", "tool_call_id": f"c{j}", "content": "ok"}]
        messages.append({"role": "assistant", "content": "Bought."})
        tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in ("buy", "search")]
        lines.append(json.dumps({"id": f"r{i:03d}", "messages": messages, "tools": tools}))
    path.write_text("\n".join(lines) + "\n")
    return path


def _misbehaving(dev_ids):
    """Each held-out record gets one kind of mistake, by its place among the held-out ids."""
    behaviour = {int(rid[1:]): BEHAVIOURS[k % len(BEHAVIOURS)] for k, rid in enumerate(dev_ids)}

    def answer(messages, tools):
        i = int(messages[0]["content"].split()[-1])
        done = sum(1 for m in messages if m["role"] == "tool")
        gold = [("search", {"q": f"item {i}"}), ("buy", {"id": i})]
        kind = behaviour[i]
        if done == 2:   # the text step
            return cf.render_assistant({"content": "", "tool_calls": cf.to_openai_tool_calls(
                [{"name": "search", "arguments": {"q": "more"}}])}) if kind == "unwanted_call" else "Bought."
        name, args = gold[done]
        if kind == "wrong_tool":
            name = "buy" if name == "search" else "search"
        elif kind == "bad_arguments":
            args = {k: "wrong" for k in args}
        elif kind == "missing_call":
            return "I would rather not."
        elif kind == "unparseable_call":
            return "<tool_call>{not json</tool_call>"
        return cf.render_assistant({"content": "", "tool_calls": cf.to_openai_tool_calls([{"name": name, "arguments": args}])})
    return answer


def test_a_next_call_evaluation_writes_episodes_the_diagnosis_turns_into_failure_families(tmp_path):
    corpus = _corpus(tmp_path / "c.jsonl")
    bench = get_benchmark("next-call", corpus=str(corpus))
    assert len(bench.dev_ids) >= len(BEHAVIOURS)
    doc = evaluate.evaluate_to_dir("next-call", "dev", tmp_path / "e", corpus=str(corpus),
                                   policy=ScriptedPolicy(_misbehaving(bench.dev_ids)))
    assert doc["metric"] == "call_f1" and doc["P"] == doc["metrics"]["call_f1"] < 0.5
    episodes = [json.loads(line) for line in (tmp_path / "e" / "trajectories.jsonl").read_text().splitlines()]
    assert [e["id"] for e in episodes] == bench.dev_ids and not any(e["outcome"]["success"] for e in episodes)
    first = episodes[0]
    assert first["messages"] == bench.records[first["id"]]["messages"]      # the held-out trajectory itself
    assert [s["message_index"] for s in first["meta"]["steps"]] == [1, 3, 5]
    assert all({"reply", "calls", "verdict", "why", "gold"} <= set(s) for s in first["meta"]["steps"])
    points, signals = diagnose(episodes)
    assert set(BEHAVIOURS) <= set(signals["families"]), signals["families"]
    by_family = {p["family"]: p for p in points}
    assert by_family["unwanted_call"]["task_ids"] == [rid for k, rid in enumerate(bench.dev_ids)
                                                      if BEHAVIOURS[k % len(BEHAVIOURS)] == "unwanted_call"]
    assert "the recorded step answers in text; the model called search" in by_family["unwanted_call"]["evidence"]
    assert "repeated_call_loop" not in signals["families"]      # the recorded calls are not the agent's
    # the LLM diagnosis is shown what the agent wrote at the wrong step, beside the recorded trajectory
    prompt = render_prompt(next(e for e in episodes if e["meta"]["feedback"]["error_type"] == "next-call:missing_call"))
    assert "I would rather not." in prompt and "the next call at each recorded step of a trajectory" in prompt


# ---------------------------------------------------------------------------------------------
# what a model that learnt nothing scores on the real corpora

def _external_corpora():
    found = []
    for path in sorted(EXTERNAL.glob("*.json*")) + sorted((EXTERNAL / "adp").glob("*.json")):
        try:
            bench = get_benchmark("next-call", corpus=str(path))
        except UserError:   # no held-out record makes a call: refused, never scored
            continue
        if any(i.gold for t in bench.tasks("dev") for i in bench.step_items(t)):
            found.append(path)
    return found


def test_a_random_init_model_scores_below_005_on_every_shared_external_corpus(tmp_path):
    corpora = _external_corpora()
    assert GLAIVE in corpora and EXTERNAL / "llamafactory-reason_tool_use_demo_50.jsonl" in corpora
    policy = evaluate.build_policy(base="tiny-random", threads=2)
    scores = {}
    for k, path in enumerate(corpora):
        doc = evaluate.evaluate_to_dir("next-call", "dev", tmp_path / str(k), corpus=str(path), policy=policy)
        scores[path.name] = doc["P"]
        assert doc["metric"] == "call_f1" and doc["metrics"]["call_tp"] + doc["metrics"]["call_fn"] > 0
    assert all(p < 0.05 for p in scores.values()), scores


def test_the_always_call_the_most_common_tool_baseline_on_the_glaive_demo(tmp_path, capsys):
    assert cli.main(["eval", "--benchmark", "next-call", "--corpus", str(GLAIVE), "--policy", "most-common-tool",
                     "--out", str(tmp_path / "b"), "--quiet"]) == 0
    assert "call_f1" in capsys.readouterr().out
    doc = json.loads((tmp_path / "b" / "metrics.json").read_text())
    m = doc["metrics"]
    assert doc["policy"]["backend"] == "most-common-tool" and m["call_rate"] == 1.0
    assert m["no_call_fp_rate"] == 1.0 and doc["P"] < 0.05      # docs/results.md: Your own corpus
    policy = MostCommonToolPolicy.from_records(get_benchmark("next-call", corpus=str(GLAIVE)).train_records())
    assert policy.counts and all(isinstance(a, dict) for a in policy.arguments.values())
    assert cli.main(["eval", "--benchmark", "bfcl-single", "--policy", "most-common-tool", "--out", str(tmp_path / "x")]) == 2
    assert "a baseline for --benchmark next-call" in capsys.readouterr().err
