"""`curateevo eval`: refuses the test split, writes trajectories.jsonl, steps.jsonl and
metrics.json, prints the metrics; the real BFCL path with the tiny model."""
import json

import pytest

from experiments import eval_cli
from environments import evaluate
from environments.policies.scripted import OraclePolicy, SilentPolicy
from evolver.cli import main
from base.schemas import check_raw


def _run(capsys, *argv):
    code = main(["eval", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_test_split_is_refused_in_one_line(capsys, tmp_path):
    code, out, err = _run(capsys, "--split", "test", "--out", tmp_path / "e", "--base", "tiny-random")
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and "only `curateevo test`" in err
    assert not (tmp_path / "e").exists()
    with pytest.raises(Exception, match="only `curateevo test`"):
        evaluate.evaluate_to_dir("bfcl", "test", tmp_path / "f", policy=SilentPolicy())


@pytest.mark.parametrize("argv, message", [
    (["--benchmark", "next-call"], "needs --corpus"),
    (["--samples", "3"], "positive --temperature"),
    (["--benchmark", "bfcl-single", "--corpus", "x.jsonl"], "--corpus is for --benchmark next-call"),
    (["--base", "no/such/model/x"], "unknown base model"),
    (["--adapter", "/nonexistent"], "not a trained adapter"),
])
def test_bad_options_are_one_line_errors(capsys, tmp_path, argv, message):
    code, out, err = _run(capsys, "--out", tmp_path / "e", "--base", "tiny-random", *argv) if "--base" not in argv \
        else _run(capsys, "--out", tmp_path / "e", *argv)
    assert code == 2 and message in err and err.strip().count("\n") == 0


def test_out_must_be_new_or_empty(capsys, tmp_path):
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "x").write_text("")
    code, _, err = _run(capsys, "--out", tmp_path / "e", "--base", "tiny-random", "--tasks", "1")
    assert code == 2 and "not an empty directory" in err


def test_bfcl_single_with_the_tiny_model(capsys, tmp_path):
    out_dir = tmp_path / "e"
    code, out, err = _run(capsys, "--benchmark", "bfcl-single", "--base", "tiny-random", "--tasks", "3",
                          "--max-new-tokens", "4", "--threads", "2", "--batch-size", "2", "--out", out_dir, "--quiet")
    assert code == 0, err
    for key in ("task_success", "turn_pass", "step_accuracy", "format errors", "episodes/min", "P "):
        assert key in out
    assert sorted(p.name for p in out_dir.iterdir()) == ["metrics.json", "steps.jsonl", "trajectories.jsonl"]
    doc = json.loads((out_dir / "metrics.json").read_text())
    assert doc["split"] == "dev" and doc["metric"] == "task_success" and doc["P"] == doc["metrics"]["task_success"]
    assert len(doc["tasks"]) == 3 and doc["metrics"]["episodes"] == 3 and doc["metrics"]["step_items"] == 3
    assert doc["policy"]["threads"] == 2 and doc["policy"]["base"] == "tiny-random"
    assert doc["runner"]["max_steps_per_task"] == [1] and doc["chat_format"]["style"] == "compact"
    assert doc["timing"]["episodes_per_minute"] > 0
    records = [json.loads(line) for line in (out_dir / "trajectories.jsonl").read_text().splitlines()]
    assert [r["id"] for r in records] == doc["tasks"]
    assert all(check_raw(r) is None or "not in tools" in check_raw(r) for r in records)
    assert all(r["meta"]["env"]["benchmark"] == "bfcl_single_turn" for r in records)
    # the same run again gives the same records and metrics (timing aside)
    code, _, _ = _run(capsys, "--benchmark", "bfcl-single", "--base", "tiny-random", "--tasks", "3",
                      "--max-new-tokens", "4", "--threads", "2", "--batch-size", "2", "--out", tmp_path / "again",
                      "--quiet", "--json")
    assert code == 0
    assert (tmp_path / "again" / "trajectories.jsonl").read_bytes() == (out_dir / "trajectories.jsonl").read_bytes()
    assert (tmp_path / "again" / "steps.jsonl").read_bytes() == (out_dir / "steps.jsonl").read_bytes()
    again = json.loads((tmp_path / "again" / "metrics.json").read_text())
    assert {k: v for k, v in again.items() if k != "timing"} == {k: v for k, v in doc.items() if k != "timing"}


def test_eval_takes_the_profiles_base_model_and_pinned_threads_as_the_loop_does(capsys, tmp_path):
    from trainer.recipe import PROFILES

    code, _, err = _run(capsys, "--profile", "test", "--tasks", "1", "--max-new-tokens", "2", "--batch-size", "1",
                        "--out", tmp_path / "e", "--quiet")
    assert code == 0, err
    policy = json.loads((tmp_path / "e" / "metrics.json").read_text())["policy"]
    assert (policy["base"], policy["threads"]) == (PROFILES["test"].base, PROFILES["test"].threads) == ("tiny-random", 2)


def test_next_call_benchmark_through_the_cli(capsys, tmp_path, sample_corpus):
    memory = tmp_path / "memory.jsonl"
    memory.write_text(json.dumps({"id": "m", "key": "flight cost travel", "content": "Use get_flight_cost."}) + "\n")
    code, out, err = _run(capsys, "--benchmark", "next-call", "--corpus", sample_corpus, "--base", "tiny-random",
                          "--max-new-tokens", "4", "--threads", "2", "--memory", memory, "--out", tmp_path / "r", "--tasks", "2",
                          "--quiet")
    assert code == 0, err
    doc = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert doc["metric"] == "call_f1" and doc["metrics"]["episodes"] == 0 and doc["metrics"]["step_items"] > 0
    assert len(doc["tasks"]) == 2 and doc["benchmark_config"]["dev"] >= 2 and doc["memory"]["records"] == 1
    assert doc["P"] == doc["metrics"]["call_f1"] and "call_f1" in out
    episodes = [json.loads(line) for line in (tmp_path / "r" / "trajectories.jsonl").read_text().splitlines()]
    assert [e["id"] for e in episodes] == doc["tasks"] and all(e["meta"]["steps"] for e in episodes)
    code, _, err = _run(capsys, "--benchmark", "next-call", "--corpus", sample_corpus, "--base", "tiny-random",
                        "--metric", "task_success", "--out", tmp_path / "r2")
    assert code == 2 and "no environment" in err


def test_evaluate_to_dir_with_an_oracle_on_bfcl(tmp_path):
    from base.registry import get_benchmark

    bench = get_benchmark("bfcl")
    tasks = bench.tasks("dev", limit=2)
    oracle = OraclePolicy.for_tasks(bench, tasks, lambda t: [[{"name": n, "arguments": a} for n, a, _ in turn]
                                                            for turn in bench.gold_turns(t)])
    doc = evaluate.evaluate_to_dir("bfcl", "dev", tmp_path / "o", policy=oracle, tasks=2, steps=False)
    assert doc["metrics"]["task_success"] == 1.0 and doc["metrics"]["turn_pass"] == 1.0
    assert doc["policy"]["backend"] == "oracle"
    text = eval_cli.format_metrics(doc)
    assert "100.0% (2/2 episodes)" in text and "step_accuracy  n/a" in text
