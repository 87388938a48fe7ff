"""τ²-bench solo mode ("tau2") through the published package: gold runs, perturbations, agreement
with the package's own orchestrator + evaluator (tests/fixtures/tau2/), refusals, malformed calls."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from base.errors import UserError
from base.benchmark import Benchmark, Episode
from environments.tau2 import package as pkg
from environments.tau2.benchmark import USER_FLAGS, Tau2Benchmark

FIXTURE = Path(__file__).parent / "fixtures" / "tau2" / "trajectories.json"


@pytest.fixture(scope="module")
def bench():
    return Tau2Benchmark(allow_test=True, domains=("telecom", "mock"))


@pytest.fixture(scope="module")
def telecom(bench):
    return [t for t in bench.tasks("dev") + bench.tasks("test") if t.meta["env"]["variant"] == "telecom"]


def closing(messages, text):
    return messages + [{"role": "assistant", "content": text}] if text is not None else messages


def test_protocol_splits_and_tasks(bench, telecom):
    assert isinstance(bench, Benchmark)
    assert len([t for t in telecom if t.meta["split"] == "dev"]) == 74
    assert len([t for t in telecom if t.meta["split"] == "test"]) == 40
    assert bench.tasks("train") == []
    with pytest.raises(UserError, match="test split"):
        Tau2Benchmark().tasks("test")
    ids = [t.id for t in telecom]
    assert len(set(ids)) == len(ids) and all(i.startswith("tau2-telecom-[") for i in ids)
    task = telecom[0]
    names = [s["function"]["name"] for s in task.tools]
    assert "done" in names and "get_customer_by_phone" in names and "toggle_data_saver_mode" in names
    system, user = task.turns[0]
    assert system["role"] == "system" and "<policy>" in system["content"] and len(system["content"]) > 20000
    assert user["role"] == "user" and user["content"].startswith("<ticket>")
    assert {t.category for t in telecom} == {"telecom-mms_issue", "telecom-mobile_data_issue", "telecom-service_issue"}
    limited = bench.tasks("dev", limit=4, categories=["telecom"])
    assert len(limited) == 4 and len({t.category for t in limited}) == 3
    assert isinstance(bench.episode(task), Episode)


def test_every_telecom_gold_run_scores_one(bench, telecom):
    for task in telecom:
        verdict = bench.score(task, bench.gold_messages(task))
        assert verdict.reward == 1.0 and verdict.success, (task.id, verdict.feedback)
        assert verdict.feedback["observation_mismatches"] == 0


def test_wrong_actions_score_below_one(bench, telecom):
    task = next(t for t in telecom if len(bench.gold_calls(t)) >= 3)
    gold = bench.gold_calls(task)
    dropped = bench.score(task, bench.run_calls(task, [[c] for c in gold[:-2] + gold[-1:]]))
    assert dropped.reward < 1 and not dropped.success
    assert dropped.feedback["error_type"] in ("tau2:env_assertion_failed", "tau2:action_missing")
    no_done = bench.score(task, bench.run_calls(task, [[c] for c in gold[:-1]]))
    assert no_done.reward == 0 and no_done.feedback["termination_reason"] == "max_steps"
    text_end = bench.score(task, closing(bench.run_calls(task, [[c] for c in gold[:-1]]), "Solved."))
    assert text_end.reward == 0 and text_end.feedback["termination_reason"] == "agent_error"


def test_agreement_with_the_package_itself(bench):
    data = json.loads(FIXTURE.read_text())
    rows = data["trajectories"]
    assert len(rows) >= 20 and {r["package_reward"] for r in rows} == {0.0, 1.0}
    for row in rows:
        task = bench.make_task(row["domain"], row["package_task_id"], "test")
        verdict = bench.score(task, closing(bench.run_calls(task, row["answers"]), row["final_text"]))
        assert verdict.reward == row["package_reward"], (row["package_task_id"], row["kind"], verdict.feedback)
        assert verdict.feedback["termination_reason"] == row["package_termination"], (row["kind"], verdict.feedback)


def test_user_simulated_domains_are_refused():
    with pytest.raises(UserError) as err:
        Tau2Benchmark(domains=("airline",))
    assert str(err.value) == f"tau2 airline needs an LLM user simulator: give {USER_FLAGS}"
    assert USER_FLAGS == "--user-model MODEL --user-base-url URL"
    with pytest.raises(UserError, match="retail"):
        Tau2Benchmark(domains=("telecom", "retail"))
    with pytest.raises(UserError, match="unknown tau2 domain"):
        Tau2Benchmark(domains=("banking",))


def test_malformed_and_unknown_calls(bench, telecom):
    task = telecom[0]
    ep = bench.episode(task)
    assert ep.next_turn() == task.turns[0] and ep.next_turn() is None
    phone = '{"phone_number": "555-123-2002"}'
    bad, unknown, fine = ep.execute([{"name": "get_customer_by_phone", "arguments": "{not json"},
                                     {"name": "no_such_tool", "arguments": "{}"},
                                     {"name": "get_customer_by_phone", "arguments": phone}])
    assert bad.startswith("Error: arguments are not valid JSON")
    assert unknown.startswith("Error:") and "no_such_tool" in unknown
    assert "John Smith" in fine or "C1001" in fine
    stop = ep.execute([{"name": "done", "arguments": "{}"}, {"name": "get_customer_by_phone", "arguments": "{}"}])
    assert stop == ["###STOP###", "Not run: this answer called `done`, which ends the task."]
    assert ep.execute([{"name": "get_customer_by_phone", "arguments": "{}"}])[0].startswith("The task is over")
    gold = bench.gold_calls(task)
    answers = [[{"name": gold[0]["name"], "arguments": "[1, 2]"}]] + [[c] for c in gold]
    verdict = bench.score(task, bench.run_calls(task, answers))
    assert not verdict.success and verdict.reward == 0
    assert verdict.feedback["error_type"] == "tau2:malformed_call" and "JSON object" in verdict.feedback["error"]
    assert bench.score(task, [{"role": "assistant", "content": None, "tool_calls": "oops"}]).reward == 0
    assert bench.score(task, []).feedback["termination_reason"] == "agent_error"


def test_step_items(bench, telecom):
    task = telecom[0]
    items = bench.step_items(task)
    gold = bench.gold_calls(task)
    assert [i.gold[0] for i in items] == gold
    assert all(bench.judge_step(i, i.gold) for i in items)
    assert not bench.judge_step(items[-1], [gold[0]]) or gold[0]["name"] == "done"
    assert not bench.judge_step(items[0], [])


def _mutable_ids(value, out: set) -> set:
    """The ids of every model, dict, list and set reachable from `value`."""
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        out.add(id(value))
        for name in type(value).model_fields:
            _mutable_ids(getattr(value, name), out)
    elif isinstance(value, dict):
        out.add(id(value))
        for item in value.values():
            _mutable_ids(item, out)
    elif isinstance(value, (list, set, tuple)):
        if not isinstance(value, tuple):
            out.add(id(value))
        for item in value:
            _mutable_ids(item, out)
    return out


DB_FILES = {"airline": ["AIRLINE_DB_PATH"], "retail": ["RETAIL_DB_PATH"],
            "telecom": ["TELECOM_DB_PATH", "TELECOM_USER_DB_PATH"], "mock": ["MOCK_DB_PATH"]}


@pytest.mark.parametrize("domain", sorted(DB_FILES))
def test_databases_parsed_once_share_no_object_and_equal_the_packages_own_load(domain):
    """The package's DB.load parses each file once per process (package._load_parsed_once): two
    environments' databases, and the parsed file, share no mutable object, and each database is the
    one the package's own load (model_validate of the file read again) gives, hash included."""
    import importlib
    import os

    from tau2.utils import load_file

    first = pkg.new_environment(domain)
    hits = pkg._parsed.cache_info().hits
    second = pkg.new_environment(domain)
    assert pkg._parsed.cache_info().hits > hits   # the second parsed nothing
    pairs = [(a, b) for a, b in ((first.tools.db, second.tools.db),
                                 (getattr(first.user_tools, "db", None), getattr(second.user_tools, "db", None)))
             if a is not None]
    assert len(pairs) == len(DB_FILES[domain])
    utils = importlib.import_module(f"tau2.domains.{domain}.utils")
    for (mine, theirs), name in zip(pairs, DB_FILES[domain]):
        path = str(getattr(utils, name))
        stat = os.stat(path)
        parsed = _mutable_ids(pkg._parsed(path, (stat.st_mtime_ns, stat.st_size)), set())
        a, b = _mutable_ids(mine, set()), _mutable_ids(theirs, set())
        assert a and not a & b and not a & parsed and not b & parsed
        fresh = type(mine).model_validate(load_file(path))
        assert mine == theirs == fresh and mine.get_hash() == fresh.get_hash()
