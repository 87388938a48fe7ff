"""The BFCL multi-turn benchmark ("bfcl"): episodes, the official checker on fresh instances,
per-turn checks, step items, and safety. Subsets of tasks keep it fast; the all-200 measurement
is in the issue's closing note."""
from __future__ import annotations

import itertools
import json
import os
import random
import tempfile
import threading
from pathlib import Path

os.environ.setdefault("BFCL_PROJECT_ROOT", str(Path(tempfile.gettempdir()) / "curateevo-bfcl"))

import pytest  # noqa: E402

from base.benchmark import Benchmark, Episode, Task, Verdict  # noqa: E402
from base.registry import get_benchmark  # noqa: E402
from environments.bfcl import multi_turn as mt  # noqa: E402
from environments.bfcl.backends import ERROR_PREFIX, format_call, parse_call  # noqa: E402
from environments.bfcl.common import closing_reply, tool_call_message  # noqa: E402
from base.errors import UserError  # noqa: E402

SCENARIOS = range(0, 200, 13)  # 16 scenarios over every domain


@pytest.fixture(scope="module")
def bench():
    return get_benchmark("bfcl", allow_test=True)


def _task(bench, variant: str, n: int) -> Task:
    return bench.make_task(mt.task_id(variant, n))


def play(bench, task: Task, policy) -> list[dict]:
    """Drive an episode: policy(task, turn) -> list of (name, arguments) calls, made one per
    assistant message; each turn closed by a short reply. Returns the canonical messages."""
    ep = bench.episode(task)
    messages: list[dict] = []
    n, t = 0, 0
    while (turn := ep.next_turn()) is not None:
        messages.extend(turn)
        last = None
        for name, args in policy(task, t):
            cid = f"c{n}"
            n += 1
            messages.append(tool_call_message([(cid, name, args)]))
            obs = ep.execute([{"name": name, "arguments": json.dumps(args)}])[0]
            messages.append({"role": "tool", "tool_call_id": cid, "content": obs})
            last = (name, obs)
        messages.append({"role": "assistant", "content": closing_reply(last)})
        t += 1
    return messages


def oracle(bench):
    cache = {}

    def policy(task, t):
        if task.id not in cache:
            cache[task.id] = bench.gold_turns(task)
        return [(name, args) for name, args, _ in cache[task.id][t]]
    return policy


def silent(task, t):
    return []


# ------------------------------------------------------------------------------ interface


def test_registry_and_protocols(bench):
    assert isinstance(bench, Benchmark)
    task = _task(bench, "base", 0)
    assert isinstance(bench.episode(task), Episode)
    assert task.benchmark == "bfcl" and task.category == "base"
    assert task.meta["env"] == {"benchmark": "bfcl_multi_turn", "task_id": "multi_turn_base_0", "variant": "base"}
    with pytest.raises(UserError):
        get_benchmark("no-such-benchmark")


def test_test_split_is_refused_unless_allowed():
    plain = get_benchmark("bfcl")
    with pytest.raises(UserError, match="test split"):
        plain.tasks("test")
    with pytest.raises(UserError):
        plain.tasks("validation")
    dev = plain.tasks("dev", limit=3)
    assert len(dev) == 3 and all(t.meta["split"] == "dev" for t in dev)
    assert len({t.category for t in dev}) == 3  # a subset spreads over the variants
    everything = [t.id for t in plain.tasks("dev")]
    assert all(everything.index(t.id) < everything.index(u.id) for t, u in zip(dev, dev[1:]))  # in split order


def test_splits_partition_every_variant(bench):
    ids = {s: {t.id for t in bench.tasks(s)} for s in ("train", "dev", "test")}
    assert not (ids["train"] & ids["dev"]) and not (ids["train"] & ids["test"]) and not (ids["dev"] & ids["test"])
    everything = set().union(*ids.values())
    assert len(everything) == 4 * 200 - len(mt.EXCLUDED)
    assert not everything & set(mt.EXCLUDED)
    by_variant = bench.tasks("dev", categories=["miss_param"])
    assert {t.category for t in by_variant} == {"miss_param"}


# ------------------------------------------------------------------------------ oracle / silent


@pytest.mark.parametrize("variant", mt.VARIANTS)
def test_oracle_passes_and_silent_fails_every_category(bench, variant):
    policy = oracle(bench)
    for n in SCENARIOS:
        if mt.task_id(variant, n) in mt.EXCLUDED:
            continue
        task = _task(bench, variant, n)
        good = bench.score(task, play(bench, task, policy))
        assert good.success and good.reward == 1.0 and all(good.turn_pass), (task.id, good.feedback)
        assert good.feedback["error_type"] is None
        bad = bench.score(task, play(bench, task, silent))
        assert not bad.success and bad.reward < 1.0, task.id
        assert bad.feedback["error_type"] == "multi_turn:empty_turn_model_response"
        assert bad.feedback["failed_turn"] is not None
        assert len(bad.turn_pass) == len(task.turns)


def test_verdict_fields_and_feedback_on_a_wrong_answer(bench):
    task = _task(bench, "base", 0)
    gold = bench.gold_turns(task)

    def wrong(task, t):
        calls = [(name, args) for name, args, _ in gold[t]]
        if t == 1:  # a wrong directory in the second turn
            calls = [(n, {**a, "folder": "nowhere"} if "folder" in a else a) for n, a in calls]
        return calls
    v = bench.score(task, play(bench, task, wrong))
    assert isinstance(v, Verdict) and not v.success
    assert v.turn_pass[0] is True and v.turn_pass[1] is False
    assert 0 < v.reward < 1
    fb = v.feedback
    assert fb["failed_turn"] == 1
    assert fb["error_type"] in ("multi_turn:instance_state_mismatch", "multi_turn:execution_response_mismatch")
    assert "state_diff" in fb or "missing_items" in fb
    assert any("nowhere" in e["call"] for e in fb["tool_errors"])
    json.dumps(fb)  # feedback is JSON-safe


def test_a_trajectory_that_stops_early_is_force_terminated(bench):
    task = _task(bench, "base", 26)
    messages = play(bench, task, oracle(bench))
    first_turn_end = max(i for i, m in enumerate(messages) if m["role"] == "user" and i > 0)
    v = bench.score(task, messages[:first_turn_end])
    assert not v.success and v.feedback["error_type"] == "multi_turn:force_terminated"
    assert v.turn_pass[-1] is False and v.turn_pass[0] is True


# ------------------------------------------------------------------------------ official checker


def _official(entry, decoded, gt, counter=itertools.count()):
    """BFCL's own checker with its own executor (eval + module-global instances), each call
    under a fresh model name; the globals it leaves are removed afterwards."""
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    name = f"curateevo_cmp_{next(counter)}"
    try:
        return multi_turn_checker(decoded, gt, entry, entry["id"].rsplit("_", 1)[0], name)
    finally:
        for key in [k for k in vars(multi_turn_utils) if k.startswith(name)]:
            del vars(multi_turn_utils)[key]


def _corrupt(gt, rng):
    kind = rng.choice(["drop", "value", "dup", "empty", "extra", "swap"])
    decoded = [[list(turn)] if turn else [] for turn in gt]
    t = rng.choice([i for i, turn in enumerate(gt) if turn])
    calls = list(gt[t])
    if kind == "drop":
        calls.pop(rng.randrange(len(calls)))
    elif kind == "dup":
        i = rng.randrange(len(calls))
        calls.insert(i, calls[i])
    elif kind == "swap":
        rng.shuffle(calls)
    elif kind == "value":
        i = rng.randrange(len(calls))
        name, _, kwargs = parse_call(calls[i])
        for key, value in kwargs.items():
            if isinstance(value, str):
                kwargs[key] = value + "x"
                break
            if isinstance(value, int) and not isinstance(value, bool):
                kwargs[key] = value + 1
                break
        if kwargs:
            calls[i] = format_call(name, kwargs)
    elif kind == "empty":
        calls = []
    else:  # a call from another turn, already revealed at this one
        calls.append(rng.choice([c for turn in gt[:t + 1] for c in turn]))
    decoded[t] = [calls] if calls else []
    return decoded


def test_verdicts_equal_the_official_checker_on_ground_truth_and_corrupted_answers(bench):
    rng = random.Random(4)
    compared = 0
    for variant in mt.VARIANTS:
        for n in range(3, 200, 19):
            tid = mt.task_id(variant, n)
            if tid in mt.EXCLUDED:
                continue
            gt = bench._ground_truth(tid)
            for decoded in [[[list(turn)] if turn else [] for turn in gt]] + [_corrupt(gt, rng) for _ in range(3)]:
                ours = mt.official_check(bench._entry(tid), decoded, gt)
                theirs = _official(bench._entry(tid), decoded, gt)
                assert (ours["valid"], ours.get("error_type")) == (theirs["valid"], theirs.get("error_type")), tid
                compared += 1
    assert compared > 150


def test_success_is_the_checker_and_turn_pass_agrees(bench):
    rng = random.Random(7)
    for n in range(5, 200, 23):
        tid = mt.task_id("miss_param", n)
        gt = bench._ground_truth(tid)
        decoded = _corrupt(gt, rng)
        official = mt.official_check(bench._entry(tid), decoded, gt)
        per_turn = mt.turn_checks(bench._entry(tid), decoded, gt)
        checked = [r["valid"] for r, g in zip(per_turn, gt) if g]
        assert official["valid"] == all(checked), tid


# ------------------------------------------------------------------------------ episodes


def test_miss_func_withholds_the_function_until_its_turn(bench):
    task = _task(bench, "miss_func", 0)  # `sort` is revealed at turn 3
    assert task.meta["revealed_functions"] == {"3": ["sort"]}
    assert task.turns[3] == [{"role": "user", "content": mt.REVEAL_MESSAGE}]
    ep = bench.episode(task)
    ep.next_turn()
    names = lambda: {t["function"]["name"] for t in ep.offered_tools()}  # noqa: E731
    assert "sort" not in names() and "sort" not in {t["function"]["name"] for t in task.tools}
    obs = ep.execute([{"name": "sort", "arguments": '{"file_name": "final_report.pdf"}'}])
    assert obs == [f"{ERROR_PREFIX}name 'sort' is not defined"]
    for _ in range(3):
        ep.next_turn()
    assert "sort" in names()
    assert not ep.execute([{"name": "cd", "arguments": '{"folder": "document"}'}])[0].startswith(ERROR_PREFIX)


def test_execute_never_raises_and_reports_bad_calls(bench):
    ep = bench.episode(_task(bench, "base", 0))
    ep.next_turn()
    bad = [
        {"name": "cd", "arguments": "{not json"},
        {"name": "cd", "arguments": "[1, 2]"},
        {"name": "", "arguments": "{}"},
        {"arguments": "{}"},
        "cd(folder='document')",
        {"name": "cd", "arguments": '{"nope": 1}'},
        {"name": "no_such_function", "arguments": "{}"},
        {"name": "_load_scenario", "arguments": "{}"},
        {"name": "__init__", "arguments": "{}"},
    ]
    out = ep.execute(bad)
    assert len(out) == len(bad) and all(o.startswith(ERROR_PREFIX) for o in out), out
    ok = ep.execute([{"type": "function", "function": {"name": "ls", "arguments": "{}"}}])
    assert not ok[0].startswith(ERROR_PREFIX)


def test_code_injection_through_a_tool_name_or_argument_is_an_error_observation(bench, tmp_path):
    marker = tmp_path / "pwned"
    payload = f"__import__('os').system('touch {marker}')"
    task = _task(bench, "base", 0)
    ep = bench.episode(task)
    ep.next_turn()
    attempts = [
        {"name": payload, "arguments": "{}"},
        {"name": f"ls(); {payload}", "arguments": "{}"},
        {"name": "cd", "arguments": json.dumps({"folder": f"'); {payload}; ('"})},
        {"name": "cd", "arguments": json.dumps({"folder": payload})},
        {"name": "echo", "arguments": json.dumps({"content": payload, "file_name": "x.txt"})},
    ]
    out = ep.execute(attempts)
    assert all(isinstance(o, str) for o in out)
    assert out[0].startswith(ERROR_PREFIX) and out[1].startswith(ERROR_PREFIX)
    # the scorer re-executes the trajectory: it must not run the payload either
    messages = list(task.turns[0]) + [tool_call_message([(f"c{i}", a["name"], json.loads(a["arguments"]))
                                                         for i, a in enumerate(attempts)])]
    bench.score(task, messages)
    item = bench.step_items(task)[0]
    assert bench.judge_step(item, attempts) is False
    assert not marker.exists()


def test_episodes_are_independent_and_safe_concurrently(bench):
    task = _task(bench, "base", 0)
    results = {}

    def run(k):
        policy = oracle(bench) if k % 2 == 0 else silent
        results[k] = bench.score(task, play(bench, task, policy)).success

    threads = [threading.Thread(target=run, args=(k,)) for k in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert results == {k: k % 2 == 0 for k in range(6)}
    a, b = bench.episode(task), bench.episode(task)
    a.next_turn(), b.next_turn()
    a.execute([{"name": "mkdir", "arguments": '{"dir_name": "fresh"}'}])
    assert a.state() != b.state()
    assert bench.episode(task).state() == b.state()


# ------------------------------------------------------------------------------ step items


def test_step_items_gold_is_right_silence_only_at_turn_ends(bench):
    for variant in mt.VARIANTS:
        task = _task(bench, variant, 60)
        items = bench.step_items(task)
        gold = bench.gold_turns(task)
        assert len(items) == sum(len(t) + 1 for t in gold)
        assert [i.index for i in items] == list(range(len(items)))
        for item in items:
            assert item.messages[-1]["role"] in ("user", "tool")
            assert bench.judge_step(item, item.gold), (task.id, item.index)
            assert bench.judge_step(item, []) == (not item.gold)
            assert (item.meta["kind"] == "call") == bool(item.gold)
            if item.gold:
                tool_names = {t["function"]["name"] for t in item.tools}
                assert item.gold[0]["name"] in tool_names


def test_step_judgement_is_by_execution(bench):
    task = _task(bench, "base", 0)
    items = [i for i in bench.step_items(task) if i.gold]
    item = items[0]  # ls(a=True) style read: the same call with another argument spelling
    gold = item.gold[0]
    args = json.loads(gold["arguments"])
    assert bench.judge_step(item, [{"name": gold["name"], "arguments": json.dumps(args, indent=2)}])
    # a different, state-changing call is wrong; gold plus a harmless extra read is still right
    assert not bench.judge_step(item, [{"name": "mkdir", "arguments": '{"dir_name": "zzz"}'}])
    assert bench.judge_step(item, [gold, {"name": "pwd", "arguments": "{}"}])
    assert not bench.judge_step(item, [{"name": gold["name"], "arguments": "{bad"}])
