"""The next-call benchmark: 9:1 split by id, step items from held-out records,
next action judged against the recorded one."""
import json
from pathlib import Path

import pytest

from environments.next_call import benchmark as rb
from base.registry import get_benchmark
from base.errors import UserError


def _record(i, task=None, env=None, outcome=None, calls=(("get_weather", {"city": "Paris", "days": 2}),)):
    messages = [{"role": "user", "content": task or f"request number {i}"}]
    for j, (name, args) in enumerate(calls):
        cid = f"c{j}"
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]})
        messages.append({"role": "tool", "tool_call_id": cid, "content": "ok"})
    messages.append({"role": "assistant", "content": "Here you go."})
    rec = {"id": f"r{i:03d}", "messages": messages,
           "tools": [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
                     for n in sorted({n for n, _ in calls})]}
    if env:
        rec["meta"] = {"env": env}
    if outcome is not None:
        rec["outcome"] = outcome
    return rec


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_split_is_nine_to_one_seeded_and_disjoint():
    records = [_record(i) for i in range(50)]
    train, dev = rb.split_ids(records, seed=0)
    assert len(dev) == 5 and len(train) == 45
    assert set(train).isdisjoint(dev) and set(train) | set(dev) == {r["id"] for r in records}
    assert rb.split_ids(list(reversed(records)), seed=0) == (train, dev)   # by id, not by order
    assert rb.split_ids(records, seed=1)[1] != dev
    assert rb.split_ids(records[:1], seed=0) == (["r000"], [])


def test_copies_of_one_task_stay_on_one_side():
    records = [_record(i, task=f"Same request {i // 5}") for i in range(40)]
    records += [_record(100 + i, env={"benchmark": "b", "task_id": f"t{i % 3}"}) for i in range(9)]
    train, dev = rb.split_ids(records, seed=3)
    side = {rid: "dev" for rid in dev} | {rid: "train" for rid in train}
    by_group = {}
    for r in records:
        by_group.setdefault(rb._group_key(r), set()).add(side[r["id"]])
    assert all(len(sides) == 1 for sides in by_group.values())
    assert dev and train


def test_trials_of_one_published_task_stay_on_one_side_whatever_their_opening_words():
    """tau-bench's trials of one task open with different user words (an LLM plays the user); the
    task id they were published with (kept as meta.extra.task_id) groups them."""
    from corpora.split import DEFAULT_SPLIT, partition, sides

    records = [{**_record(i, task=f"trial {i} words differ"), "source": "tau-bench",
                "meta": {"extra": {"task_id": i % 7}}} for i in range(42)]
    for seed in range(5):
        train, dev, test = partition(records, {**DEFAULT_SPLIT, "seed": seed})
        side = {i: "train" for i in train} | {i: "dev" for i in dev} | {i: "test" for i in test}
        by_task = {}
        for r in records:
            by_task.setdefault(r["meta"]["extra"]["task_id"], set()).add(side[r["id"]])
        assert dev and test and all(len(v) == 1 for v in by_task.values()), by_task
    shares = sides(records)
    assert shares["dev"]["tasks"] == 1 and shares["dev"]["records"] == 6 and sum(s["tasks"] for s in shares.values()) == 7
    # the content-ranked split of earlier runs is kept as it was, so their epochs replay: it leaks
    old = partition(records, {**DEFAULT_SPLIT, "rank": "content"})
    assert {r["meta"]["extra"]["task_id"] for r in records if r["id"] in old.dev} & \
           {r["meta"]["extra"]["task_id"] for r in records if r["id"] in old.train}


def test_a_small_corpus_losing_most_tool_calls_to_the_hold_out_is_warned():
    from corpora.split import sides, sides_note

    records = [_record(i) for i in range(3)] + [_record(10 + i, calls=()) for i in range(6)]
    note = sides_note(sides(records))
    assert note.startswith("split by task: train ") and "of 1 task(s)" in note
    assert "warning: the held-out parts take" in note and "--dev-ids FILE" in note
    assert "warning" not in sides_note(sides([_record(i) for i in range(40)]))


def test_arguments_are_compared_after_normalisation():
    gold = [{"name": "f", "arguments": '{"a": 1, "b": {"x": [1, 2]}, "c": "Paris"}'}]
    assert rb.same_calls([{"name": "f", "arguments": '{"c":"Paris","b":{"x":[1.0,2]},"a":1.0}'}], gold)
    assert not rb.same_calls([{"name": "f", "arguments": '{"a": 1, "b": {"x": [2, 1]}, "c": "Paris"}'}], gold)
    assert not rb.same_calls([{"name": "f", "arguments": '{"a": 1, "b": {"x": [1, 2]}, "c": "paris"}'}], gold)
    assert not rb.same_calls([{"name": "g", "arguments": '{"a": 1, "b": {"x": [1, 2]}, "c": "Paris"}'}], gold)
    assert not rb.same_calls([{"name": "f", "arguments": '{"a": true, "b": {"x": [1, 2]}, "c": "Paris"}'}],
                             [{"name": "f", "arguments": '{"a": 1, "b": {"x": [1, 2]}, "c": "Paris"}'}])
    two = [{"name": "f", "arguments": "{}"}, {"name": "g", "arguments": '{"k": 1}'}]
    assert rb.same_calls(list(reversed(two)), two)              # parallel calls: any order
    assert not rb.same_calls(two[:1], two) and not rb.same_calls(two + two[:1], two)
    assert rb.same_calls([], [])


def test_benchmark_tasks_step_items_and_judge(tmp_path):
    records = [_record(i, calls=(("search", {"q": f"item {i}"}), ("buy", {"id": i}))) for i in range(20)]
    records[0]["outcome"] = {"success": False, "reward": 0.0}
    bench = get_benchmark("next-call", corpus=str(_write(tmp_path / "c.jsonl", records)))
    assert bench.name == "next-call" and bench.executable is False
    dev = bench.tasks("dev")
    assert [t.id for t in dev] == bench.dev_ids and len(dev) == 2
    assert len(bench.tasks("train")) == 16 and [r["id"] for r in bench.train_records()] == bench.train_ids
    assert len(bench.test_ids) == 2 and not set(bench.test_ids) & set(bench.dev_ids)
    with pytest.raises(UserError, match="read by `curateevo test` only"):
        bench.tasks("test")   # the loop never reads the test part
    task = next(t for t in dev if t.id != "r000")   # r000 failed: it gives no step items
    items = bench.step_items(task)
    assert [i.gold for i in items] == [
        [{"name": "search", "arguments": json.dumps({"q": f"item {int(task.id[1:])}"})}],
        [{"name": "buy", "arguments": json.dumps({"id": int(task.id[1:])})}],
        [],
    ]
    assert [len(i.messages) for i in items] == [1, 3, 5] and items[1].messages[-1]["role"] == "tool"
    assert bench.judge_step(items[0], items[0].gold) and bench.judge_step(items[2], [])
    assert not bench.judge_step(items[2], items[0].gold) and not bench.judge_step(items[0], [])
    with pytest.raises(UserError, match="no environment"):
        bench.episode(task)


def test_failed_records_give_no_step_items_unless_asked(tmp_path):
    records = [_record(i, outcome={"success": False, "reward": 0.0}) for i in range(10)]
    path = _write(tmp_path / "c.jsonl", records)
    with pytest.raises(UserError, match=r"held-out dev part \(1 record\(s\): r00\d\) gives none to judge: 1 recorded a "
                                        r"failed outcome"):
        get_benchmark("next-call", corpus=str(path))   # a hold-out of failures only gives nothing to score
    bench = get_benchmark("next-call", corpus=str(path), include_failed=True)
    assert all(bench.step_items(t) for t in bench.tasks("dev"))
    assert bench.dev["items"] == sum(len(bench.step_items(t)) for t in bench.tasks("dev")) > 0


def test_sample_corpus_loads_and_splits(sample_corpus):
    bench = get_benchmark("next-call", corpus=str(sample_corpus))
    assert len(bench.dev_ids) >= 4 and len(bench.train_ids) + len(bench.dev_ids) + len(bench.test_ids) == 45
    items = [i for t in bench.tasks("dev") for i in bench.step_items(t)]
    assert items and all(bench.judge_step(i, i.gold) for i in items)


EXTERNAL = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "external"
TAU = Path(__file__).resolve().parent / "fixtures" / "external" / "tau-bench-gpt-4o-airline.sample.json"


def test_a_reply_without_a_call_is_wrong_where_the_recorded_step_calls_a_tool():
    # every trajectory of this sample failed (reward 0), so the split has no judgeable record to prefer for
    # dev or test: choose ones that call tools, as a user would (--dev-ids, --test-ids)
    from corpora.split import DEFAULT_SPLIT

    split = {**DEFAULT_SPLIT, "dev_ids": ["tau-bench-gpt-4o-airline.sample.json[0]"],
             "test_ids": ["tau-bench-gpt-4o-airline.sample.json[2]"]}
    bench = get_benchmark("next-call", corpus=str(TAU), include_failed=True, holdout=split)
    items = [i for t in bench.tasks("train") + bench.tasks("dev") for i in bench.step_items(t)]
    call_steps = [i for i in items if i.gold]
    assert call_steps and len(call_steps) < len(items)
    assert not any(bench.judge_step(i, []) for i in call_steps)      # a model that never calls
    never_calls = sum(bench.judge_step(i, []) for i in items) / len(items)
    assert never_calls < 0.7, never_calls


def test_a_corpus_whose_actions_are_text_only_is_refused_not_scored_perfect():
    # FireAct's ReAct text ("Action: search[...]"): no step is a tool call, so a model that
    # never calls would score P = 1.0.
    with pytest.raises(UserError, match=r"held-out dev part \(20 record\(s\): .*gives none to judge: 20 make no tool call.*use a corpus with tool calls"):
        get_benchmark("next-call", corpus=str(EXTERNAL / "fireact-hotpotqa-gpt_format.jsonl"))
