"""ScienceWorld, the second environment (environments/scienceworld/): its splits, its official
score, its corpus, its ctx.env scenarios and its leakage rows — run on the real simulator (the
`scienceworld` wheel's Java program), so each test that steps it costs seconds."""
import copy
import json

import pytest

from environments.scienceworld import actions as act
from environments.scienceworld import benchmark as bm
from environments.scienceworld import catalog, corpus, scenarios
from base.errors import UserError


def _shortest(split: str) -> dict:
    """The split's task with the shortest gold run (the cheapest to step)."""
    return min((catalog.entries()[i] for i in catalog.split_ids(split)), key=lambda e: (len(e["gold"]), e["id"]))


def test_splits_are_disjoint_seeded_draws_from_the_simulators_own_variation_lists():
    doc = catalog.load()
    ids = {s: set(catalog.split_ids(s)) for s in catalog.SPLITS}
    assert all(ids.values()) and not (ids["train"] & ids["dev"]) and not (ids["train"] & ids["test"]) \
        and not (ids["dev"] & ids["test"])
    failed = {n.split(":")[0] for n in doc["notes"]}
    for task, lists in doc["variations"].items():
        assert not (set(lists["train"]) & set(lists["dev"])) and not (set(lists["dev"]) & set(lists["test"])) \
            and not (set(lists["train"]) & set(lists["test"]))
        tried = catalog.selection(task, lists)
        for split in catalog.SPLITS:
            taken = [e["variation"] for e in doc["tasks"] if e["task"] == task and e["split"] == split]
            # the first PER_SPLIT variations of the seeded order whose gold completes the task
            expected = [v for v in tried[split] if catalog.task_id(task, v) not in failed][:catalog.PER_SPLIT[split]]
            assert sorted(taken) == sorted(expected), (task, split)
            assert set(taken) <= set(lists[split])
    assert all(e["trace"][-1]["score"] == 100 for e in doc["tasks"])


def test_a_task_type_rebuilt_in_a_fresh_simulator_gives_the_catalogs_entries():
    """The rebuild draws the same variations with the same texts, and each catalog gold run, executed again, comes
    to its recorded trace. The gold *route* itself may differ: ScienceWorld's oracle picks among
    equally short paths by Scala set order, which changes between JVM runs (allenai/ScienceWorld#15),
    so a rebuilt gold is only required to complete the task."""
    from environments.scienceworld.simulator import Simulator

    task = _shortest("train")["task"]
    entries, notes, lists = catalog._task_type(task)
    stored = [e for e in catalog.load()["tasks"] if e["task"] == task]
    fixed = ("id", "task", "variation", "split", "description", "observation")
    assert [{k: e[k] for k in fixed} for e in entries] == [{k: e[k] for k in fixed} for e in stored]
    assert lists == catalog.load()["variations"][task]
    assert all(e["trace"][-1]["score"] == 100 and len(e["trace"]) == len(e["gold"]) for e in entries)
    sim = Simulator()
    try:
        for e in stored:
            sim.start(task, e["variation"])
            trace = [{"observation": s.observation, "score": s.score} for s in map(sim.step, e["gold"])]
            assert trace == e["trace"], e["id"]
    finally:
        sim.close()


def test_the_test_split_is_refused_and_tasks_are_balanced_over_task_types():
    bench = bm.ScienceWorldBenchmark()
    with pytest.raises(UserError):
        bench.tasks("test")
    tasks = bench.tasks("dev", limit=3)
    assert len(tasks) == 3 and len({t.category for t in tasks}) == 3
    assert [t.id for t in bench.tasks("dev")] == [t.id for t in bench.tasks("dev")]


def test_the_gold_run_scores_full_and_a_broken_one_lower():
    bm._SCORED.clear()
    bench = bm.ScienceWorldBenchmark()
    entry = _shortest("dev")
    task = bm.make_task(entry)
    gold = bench.gold_messages(task)
    verdict = bench.score(task, gold)
    assert verdict.success and verdict.reward == 1.0 and verdict.feedback["error_type"] is None
    half = act.render(task.turns[0][0]["content"], entry["gold"][:len(entry["gold"]) // 2],
                      [s["observation"] for s in entry["trace"]])
    cut = bench.score(task, half)
    assert not cut.success and cut.reward < 1.0 and cut.feedback["error_type"] == "scienceworld:force_terminated"
    assert bench.score(task, gold[:1]).feedback["error_type"] == "scienceworld:empty_turn_model_response"


def test_an_episode_steps_the_simulator_and_its_score_matches_a_fresh_run():
    bm._SCORED.clear()
    bench = bm.ScienceWorldBenchmark()
    entry = _shortest("dev")
    task = bm.make_task(entry)
    episode = bench.episode(task)
    assert episode.next_turn() == task.turns[0]
    observations = [episode.execute([{"name": "act", "arguments": json.dumps({"action": a})}])[0]
                    for a in entry["gold"]]
    assert observations == [s["observation"] for s in entry["trace"]]
    assert episode.execute([{"name": "act", "arguments": '{"action": "look around"}'}]) == [act.DONE_MESSAGE]
    assert episode.execute([{"name": "shell", "arguments": "{}"}])[0].startswith("Error:")
    assert episode.next_turn() is None
    assert bench.score(task, bench.gold_messages(task)).success


def test_a_wrong_focus_fails_the_task_for_good():
    bm._SCORED.clear()
    bench = bm.ScienceWorldBenchmark()
    entry = next(e for e in sorted(catalog.entries().values(), key=lambda e: len(e["gold"]))
                 if e["split"] == "dev" and any(a.startswith("focus on ") for a in e["gold"]))
    actions, _, _ = corpus._plan(entry, "wrong_focus", corpus._rng(0, "t"))
    score, over, observations = bm.run_actions(entry, actions)
    verdict = bench.score(bm.make_task(entry), act.render("x", actions, observations))
    assert over and score < 0 and verdict.reward == 0.0
    assert verdict.feedback["error_type"] == "scienceworld:instance_state_mismatch"


def test_the_corpus_build_is_deterministic_honest_and_train_only(tmp_path):
    infos = []
    for k in range(2):
        bm._SCORED.clear()
        infos.append(corpus.write(tmp_path / f"c{k}", "wild", seed=1, limit=3))
    assert infos[0]["corpus_sha256"] == infos[1]["corpus_sha256"]
    assert (tmp_path / "c0" / corpus.CORPUS_FILE).read_bytes() == (tmp_path / "c1" / corpus.CORPUS_FILE).read_bytes()
    records = [json.loads(line) for line in (tmp_path / "c0" / corpus.CORPUS_FILE).read_text().splitlines()]
    labels = json.loads((tmp_path / "c0" / corpus.LABELS_FILE).read_text())["labels"]
    train = set(catalog.split_ids("train"))
    assert {r["meta"]["env"]["task_id"] for r in records} <= train and set(labels) == {r["id"] for r in records}
    bm._SCORED.clear()
    for r in records:
        noise = labels[r["id"]]["noise"]
        if noise in ("abandoned", "wrong_focus"):   # cut before completion, or failed for good
            assert not r["outcome"]["success"], noise
        # honest: the outcome is the simulator's score of the record's own actions, run afresh
        actions, _ = act.actions_of(r["messages"])
        score, _, observations = bm.run_actions(catalog.entries()[r["meta"]["env"]["task_id"]], actions)
        assert r["outcome"] == {"success": score >= 100, "reward": max(score, 0) / 100.0}, noise
        assert observations == [m["content"] for m in r["messages"] if m["role"] == "tool"]
    labeled = corpus.build("labeled", limit=2)[0]
    assert all(r["outcome"] == {"success": True, "reward": 1.0} for r in labeled)


def test_ctx_env_scenarios_hold_train_tasks_only_and_the_sandboxs_ctx_env_reads_them(tmp_path):
    train, dev = catalog.split_ids("train")[0], catalog.split_ids("dev")[0]
    files, summary = scenarios.export({"scienceworld": {train, dev}})
    doc = json.loads(files[scenarios.SCENARIOS_FILE])
    assert set(doc["scenarios"]) == {train} and summary == {"scienceworld": 1, "withheld": 1}
    text = files[scenarios.SCENARIOS_FILE].decode()
    assert catalog.entries()[dev]["observation"] not in text or catalog.entries()[dev]["observation"] in \
        catalog.entries()[train]["observation"]
    assert scenarios.export({"bfcl_multi_turn": {"multi_turn_base_0"}}) == ({}, {})
    # the sandbox's own ctx.env reads the folder: the train scenario is there, with the act tool
    from sandbox.simenv.environment import Environment

    folder = tmp_path / "env"
    folder.mkdir()
    (folder / scenarios.SCENARIOS_FILE).write_bytes(files[scenarios.SCENARIOS_FILE])
    env = Environment(folder)
    meta = {"benchmark": "scienceworld", "task_id": train, "variant": catalog.entries()[train]["task"]}
    assert env.task_ids("scienceworld") == [train] and not env.has({**meta, "task_id": dev})
    scenario = env.start(meta)
    assert not scenario.executable and scenario.tools == [act.ACT_TOOL]
    assert scenario.check_call({"function": {"name": "act", "arguments": '{"action": "look around"}'}}) is None
    assert scenario.check_call({"function": {"name": "act", "arguments": '{"verb": 1}'}}) is not None


def test_step_items_judge_the_gold_action_right_and_another_wrong():
    bench = bm.ScienceWorldBenchmark()
    task = bm.make_task(_shortest("dev"))
    items = bench.step_items(task)
    assert len(items) == task.meta["gold_steps"]
    item = items[1]
    assert bench.judge_step(item, copy.deepcopy(item.gold))
    assert not bench.judge_step(item, [{"name": "act", "arguments": '{"action": "inventory"}'}])
    assert not bench.judge_step(item, [])


def test_the_leakage_guard_refuses_a_dev_tasks_text_and_gold_run_and_passes_train_records():
    from sandbox.checker import CandidateRejected
    from sandbox.leakage import check_record

    entries = catalog.entries()
    train_texts = {entries[i]["description"] for i in catalog.split_ids("train")}
    dev = next(entries[i] for i in catalog.split_ids("dev") if entries[i]["description"] not in train_texts)
    text = act.user_text(dev["description"], dev["observation"])
    asked = {"id": "leak-1", "tools": [act.ACT_TOOL],
             "messages": [{"role": "user", "content": text}, {"role": "assistant", "content": "ok"}]}
    with pytest.raises(CandidateRejected, match=dev["id"]):
        check_record("sft", asked)
    acted = {"id": "leak-2", "tools": [act.ACT_TOOL],
             "messages": act.render("Do the task.", dev["gold"], [s["observation"] for s in dev["trace"]])}
    with pytest.raises(CandidateRejected, match=f"gold call sequence of dev task {dev['id']}"):
        check_record("sft", acted)
    with pytest.raises(CandidateRejected, match=dev["id"]):
        check_record("memory", {"id": "leak-3", "key": "science", "content": f"Remember: {dev['description']}"})
    for record in corpus.build("labeled", limit=3)[0]:
        check_record("sft", {"id": record["id"], "messages": record["messages"], "tools": record["tools"]})


def test_the_diagnosis_reads_scienceworld_verdicts_as_failure_families():
    from base import registry
    from evolver.diagnose import primary_family

    environment = registry.get("scienceworld")
    assert environment.category_of("boil-v12") == "boil" and environment.env_tag == "scienceworld"

    def family(error_type, **meta):
        return primary_family({"messages": [], "meta": {"feedback": {"error_type": error_type}, **meta}})[0]

    assert family("scienceworld:instance_state_mismatch") == "state_mismatch"
    assert family("scienceworld:empty_turn_model_response") == "empty_turn"
    assert family("scienceworld:force_terminated") == "premature_stop"
    assert family("scienceworld:force_terminated", step_limit_turn=0, max_steps=50) == "step_limit"


def test_the_state_match_reward_runs_the_simulator_on_a_train_scenario():
    from chat_format.chat_format import render_assistant
    from trainer.rewards import state_match

    entry = _shortest("train")
    gold = corpus.build("labeled", categories=[entry["task"]])[0]
    raw = next(r for r in gold if r["meta"]["env"]["task_id"] == entry["id"])
    index = 3   # the assistant turn of the 2nd gold action
    record = {"id": "rl-1", "messages": raw["messages"][:index], "tools": raw["tools"], "reward": "state_match",
              "reference": {"tool_calls": raw["messages"][index]["tool_calls"]}, "meta": {"env": raw["meta"]["env"]}}
    assert state_match(render_assistant(raw["messages"][index]), record) == 1.0
    wrong = act.call_message("c9", "inventory")
    assert state_match(render_assistant(wrong), record) < 1.0
