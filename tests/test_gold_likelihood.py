"""The low-variance dev signal: the policy's teacher-forced log-likelihood of the dev tasks' gold
calls, computed in the evaluation stage beside P (tiny-random model, real tokenizer and format)."""
import json
import math

import pytest

from environments import runner
from base.registry import get_benchmark
from environments.evaluate import evaluate_to_dir
from environments.gold_likelihood import IGNORE, examples, gold_log_likelihood, token_log_likelihoods
from environments.policies.local import TransformersPolicy


@pytest.fixture(scope="module")
def policy():
    return TransformersPolicy("tiny-random", threads=2, batch_size=4, max_new_tokens=6)


@pytest.fixture(scope="module")
def dev():
    bench = get_benchmark("bfcl-single")
    tasks = bench.tasks("dev", limit=10)
    return bench, tasks, runner.step_items(bench, tasks)


def test_only_the_gold_turn_is_scored_and_irrelevance_is_left_out(policy, dev):
    bench, tasks, items = dev
    pairs = examples(items, policy.tokenizer, policy.style)
    scored = {item.task_id for item, _ in pairs}
    assert scored == {t.id for t in tasks if t.category != "irrelevance"} and len(scored) == 8
    item, ex = pairs[0]
    gold_text = policy.tokenizer.decode([t for t, label in zip(ex["input_ids"], ex["labels"]) if label != IGNORE])
    for call in item.gold:
        assert call["name"] in gold_text                      # the labelled tokens are the gold call
    prompt = policy.tokenizer.decode(ex["input_ids"][:ex["labels"].index(next(l for l in ex["labels"] if l != IGNORE))])
    assert item.messages[0]["content"][:40] in prompt         # after the task's own request


def test_batching_does_not_change_a_score(policy, dev):
    _, _, items = dev
    pairs = examples(items, policy.tokenizer, policy.style)[:3]
    pad = policy.tokenizer.pad_token_id or 0
    together = token_log_likelihoods(policy.model, [ex for _, ex in pairs], pad)
    alone = [token_log_likelihoods(policy.model, [ex], pad)[0] for _, ex in pairs]
    assert together == pytest.approx(alone, abs=1e-4) and all(v < 0 for v in alone)


def test_the_signal_per_task_and_category_and_in_the_evaluation(policy, dev, tmp_path):
    bench, tasks, items = dev
    category = {t.id: t.category for t in tasks}
    doc = gold_log_likelihood(policy.model, policy.tokenizer, items, category, policy.style, batch_size=3)
    assert doc["tasks"] == 8 and math.isfinite(doc["mean"])
    assert doc["mean"] == pytest.approx(sum(doc["per_task"].values()) / 8, abs=1e-5)
    assert set(doc["per_category"]) == {"simple_python", "multiple", "parallel", "parallel_multiple"}
    metrics = evaluate_to_dir("bfcl-single", "dev", tmp_path / "eval", policy=policy, tasks=10, gold=True)
    assert metrics["gold_log_likelihood"]["per_task"] == pytest.approx(doc["per_task"], abs=1e-4)
    assert "gold_log_likelihood" in json.loads((tmp_path / "eval" / "metrics.json").read_text())


def test_the_signal_is_read_on_the_prompts_the_memory_hints_changed(policy, dev, tmp_path):
    """With a bank the gold calls are scored after the same hints the policy is shown (runner.hinted,
    THE retrieval): the tasks whose offered tool a record is about move, the others do not."""
    from trainer import memory as memory_mod

    bench, tasks, items = dev
    category = {t.id: t.category for t in tasks}
    scored = [item for item in items if item.gold]
    tool = scored[0].tools[0]["function"]["name"]
    query = " ".join(m["content"] for m in scored[0].messages if m.get("role") == "user")
    bank = tmp_path / "memory.jsonl"
    bank.write_text(json.dumps({"id": "hint", "key": query, "content": f"Call {tool} with every argument it requires.",
                                "meta": {"tool": tool}}) + "\n")
    index = memory_mod.MemoryIndex.from_file(str(bank), 3)
    shown = runner.hinted(items, index)
    changed = {a.task_id for a, b in zip(items, shown) if a.messages != b.messages}
    assert scored[0].task_id in changed and len(changed) < len(tasks)
    assert runner.hinted(items, None) == list(items)
    plain = gold_log_likelihood(policy.model, policy.tokenizer, items, category, policy.style)["per_task"]
    hinted = gold_log_likelihood(policy.model, policy.tokenizer, shown, category, policy.style)["per_task"]
    assert {t for t in plain if abs(plain[t] - hinted[t]) > 1e-6} == changed & set(plain)
    metrics = evaluate_to_dir("bfcl-single", "dev", tmp_path / "eval", policy=policy, tasks=10, gold=True,
                              memory=str(bank), memory_k=3)
    assert metrics["gold_log_likelihood"]["per_task"] == pytest.approx(hinted, abs=1e-4)
