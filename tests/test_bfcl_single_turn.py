"""The BFCL single-turn benchmark ("bfcl-single") through the official ast_checker."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

os.environ.setdefault("BFCL_PROJECT_ROOT", str(Path(tempfile.gettempdir()) / "curateevo-bfcl"))

import pytest  # noqa: E402

from base.benchmark import Benchmark, Episode  # noqa: E402
from base.registry import get_benchmark  # noqa: E402
from environments.bfcl import single_turn as st  # noqa: E402
from environments.bfcl.single_turn_data import load_category  # noqa: E402
from environments.bfcl.common import tool_call_message  # noqa: E402
from environments.bfcl.splits import UNSATISFIABLE  # noqa: E402
from base.errors import UserError  # noqa: E402


@pytest.fixture(scope="module")
def bench():
    return get_benchmark("bfcl-single", allow_test=True)


def answer(task, calls=None, content=None):
    msg = tool_call_message([(f"c{i}", n, a) for i, (n, a) in enumerate(calls)], content) if calls \
        else {"role": "assistant", "content": content}
    return list(task.turns[0]) + [msg]


def test_protocols_splits_and_test_refusal(bench):
    assert isinstance(bench, Benchmark)
    plain = get_benchmark("bfcl-single")
    with pytest.raises(UserError, match="test split"):
        plain.tasks("test")
    dev = plain.tasks("dev")
    assert {t.category for t in dev} == set(st.SINGLE_TURN_CATEGORIES)
    assert not any(t.meta["held_out"] for t in dev)
    ids = {s: {t.id for t in bench.tasks(s, categories=st.CATEGORIES)} for s in ("train", "dev", "test")}
    assert not ids["train"] & ids["dev"] and not ids["dev"] & ids["test"] and not ids["train"] & ids["test"]
    assert not any(i.startswith("live_") for i in ids["train"])  # live_* is held out
    assert not set(UNSATISFIABLE) & set().union(*ids.values())
    total = sum(len(load_category(c)) for c in st.CATEGORIES)
    assert len(set().union(*ids.values())) == total - len(UNSATISFIABLE)
    with pytest.raises(UserError, match="unsatisfiable"):
        bench.make_task(UNSATISFIABLE[0])
    limited = bench.tasks("dev", limit=5, categories=["multiple"])
    assert [t.id for t in limited] == [t.id for t in bench.tasks("dev", categories=["multiple"])][:5]
    # a dev subset (the run's --tasks 60) covers every category, 12 each, not the first category alone
    subset = plain.tasks("dev", limit=60)
    full = {c: [t.id for t in dev if t.category == c] for c in st.SINGLE_TURN_CATEGORIES}
    assert len(subset) == 60
    assert {c: [t.id for t in subset if t.category == c] for c in st.SINGLE_TURN_CATEGORIES} == \
        {c: ids[:12] for c, ids in full.items()}


def test_gold_answers_pass_and_silence_fails(bench):
    for category in st.CATEGORIES:
        for task in bench.tasks("dev", categories=[category])[:12]:
            gold = bench.gold(task.id)
            if category == "live_relevance":
                continue  # no ground truth: any call passes
            v = bench.score(task, answer(task, gold, None if gold else "I cannot do that."))
            assert v.success and v.turn_pass == [True] and v.reward == 1.0, (task.id, v.feedback)
            silent = bench.score(task, answer(task, None, "Sorry, I cannot help."))
            assert silent.success == (category in ("irrelevance", "live_irrelevance")), task.id


def test_wrong_answers_fail_with_the_checker_reason(bench):
    task = bench.make_task("simple_python_0")  # calculate_triangle_area(base=10, height=5)
    ok = [("calculate_triangle_area", {"base": 10, "height": 5})]
    assert bench.score(task, answer(task, ok)).success
    cases = {
        "value_error": [("calculate_triangle_area", {"base": 11, "height": 5})],
        "type_error": [("calculate_triangle_area", {"base": "10", "height": 5})],
        "missing": [("calculate_triangle_area", {"base": 10})],
        "wrong_func": [("area_of_triangle", {"base": 10, "height": 5})],
        "count": ok + ok,
    }
    for why, calls in cases.items():
        v = bench.score(task, answer(task, calls))
        assert not v.success and v.feedback["error_type"], why
        assert v.feedback["checker_message"]
    irr = bench.make_task(bench.tasks("dev", categories=["irrelevance"])[0].id)
    name = irr.tools[0]["function"]["name"]
    v = bench.score(irr, answer(irr, [(name, {})]))
    assert not v.success and v.feedback["error_type"] == "irrelevance_error:decoder_success"


def test_text_answers_are_read_with_the_chat_format(bench):
    task = bench.make_task("simple_python_0")
    hermes = '<tool_call>{"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}}</tool_call>'
    assert bench.score(task, answer(task, None, hermes)).success
    assert bench.score(task, answer(task, None, "[calculate_triangle_area(base=10, height=5)]")).success
    broken = bench.score(task, answer(task, None, '<tool_call>{"name": "calculate_triangle_area", "arguments": {"base": 1'))
    assert not broken.success and broken.feedback["parse_error"]
    # dotted names are kept (the checker is run with a model key that keeps dots)
    dotted = bench.make_task("simple_python_1")
    assert dotted.tools[0]["function"]["name"] == "math.factorial"
    assert bench.score(dotted, answer(dotted, [("math.factorial", {"number": 5})])).success


def test_episode_and_step_items(bench):
    task = bench.make_task("parallel_0")
    ep = bench.episode(task)
    assert isinstance(ep, Episode)
    assert ep.next_turn() == task.turns[0] and ep.next_turn() is None
    name = task.tools[0]["function"]["name"]
    out = ep.execute([{"name": name, "arguments": "{}"}, {"name": "nope", "arguments": "{}"},
                      {"name": name, "arguments": "{bad"}, {"name": "__import__('os').system('x')", "arguments": "{}"}])
    assert out[0] == st.RECORDED and all(o.startswith("Error during execution: ") for o in out[1:])
    assert task.meta["max_steps_per_turn"] == 1
    (item,) = bench.step_items(task)
    assert item.messages == task.turns[0] and item.gold
    assert bench.judge_step(item, item.gold)
    assert bench.judge_step(item, list(reversed(item.gold)))  # parallel: order does not matter
    assert not bench.judge_step(item, item.gold[:1])
    assert not bench.judge_step(item, [])
    irr = bench.tasks("dev", categories=["irrelevance"])[0]
    (item,) = bench.step_items(irr)
    assert item.gold == [] and bench.judge_step(item, []) and not bench.judge_step(
        item, [{"name": irr.tools[0]["function"]["name"], "arguments": json.dumps({})}])


def test_ast_checker_is_loaded_without_the_api_sdks():
    import sys

    assert "bfcl_eval.constants.model_config" not in sys.modules or \
        hasattr(sys.modules["bfcl_eval.constants.model_config"], "MODEL_CONFIG_MAPPING")
    assert st._ast.ast_checker.__module__ == "bfcl_eval.eval_checker.ast_eval.ast_checker"


def test_balanced_subset_takes_a_round_robin_over_the_groups():
    from base.benchmark import balanced_subset
    groups = [["a1", "a2", "a3", "a4"], ["b1"], ["c1", "c2", "c3"]]
    assert balanced_subset(groups, None) == ["a1", "a2", "a3", "a4", "b1", "c1", "c2", "c3"]
    assert balanced_subset(groups, 2) == ["a1", "b1"]
    assert balanced_subset(groups, 5) == ["a1", "a2", "b1", "c1", "c2"]
    assert balanced_subset(groups, 7) == ["a1", "a2", "a3", "b1", "c1", "c2", "c3"]
    assert balanced_subset(groups, 99) == balanced_subset(groups, None)
    assert balanced_subset(groups, 0) == []
