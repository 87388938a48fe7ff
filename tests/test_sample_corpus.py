"""The bundled BFCL sample corpus and the safe BFCL multi-turn executor behind it."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

os.environ.setdefault("BFCL_PROJECT_ROOT", str(Path(tempfile.gettempdir()) / "curateevo-bfcl"))

import pytest  # noqa: E402

from environments.bfcl import sample_corpus as sc  # noqa: E402
from environments.bfcl import backends  # noqa: E402
from environments.bfcl.backends import (  # noqa: E402
    ERROR_PREFIX,
    CallError,
    Episode,
    format_call,
    load_ground_truth,
    load_tasks,
    parse_call,
    tool_schemas,
)
from environments.bfcl.splits import SPLIT_ORDER_TASKS, multi_turn_split  # noqa: E402
from base.schemas import check_raw  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "environments" / "data" / "sample_corpus.jsonl"
LABELS = ROOT / "environments" / "data" / "sample_corpus.labels.json"


@pytest.fixture(scope="module")
def tasks():
    return load_tasks("multi_turn_base")


@pytest.fixture(scope="module")
def ground_truth():
    return load_ground_truth("multi_turn_base")


@pytest.fixture(scope="module")
def records():
    return [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def labels():
    return json.loads(LABELS.read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------ corpus


def test_shipped_file_equals_a_fresh_generation_byte_for_byte(labels):
    records, fresh_labels = sc.build_corpus(labels["seed"])
    assert sc.render(records).encode("utf-8") == CORPUS.read_bytes()
    assert sc.render_labels(fresh_labels, labels["seed"]).encode("utf-8") == LABELS.read_bytes()


def test_generator_cli_writes_the_same_bytes(tmp_path):
    out = tmp_path / "corpus.jsonl"
    assert sc.main(["--out", str(out), "--seed", "0"]) == 0
    assert out.read_bytes() == CORPUS.read_bytes()
    assert sc.labels_path(out).read_bytes() == LABELS.read_bytes()


def test_another_seed_gives_other_noise_but_the_same_clean_trajectories():
    a, la = sc.build_corpus(0)
    b, lb = sc.build_corpus(1)
    assert sc.render(a) != sc.render(b)
    clean = lambda recs, lab: sorted(json.dumps({**r, "id": None}, sort_keys=True)  # noqa: E731
                                     for r in recs if lab[r["id"]]["noise"] == "clean")
    assert len(clean(a, la)) == len(sc.SAMPLE_TASKS)
    # the closing sentences are seeded, the calls and observations are not
    strip = lambda recs, lab: sorted(  # noqa: E731
        json.dumps([m for m in r["messages"] if m["role"] != "assistant" or m.get("tool_calls")], sort_keys=True)
        for r in recs if lab[r["id"]]["noise"] == "clean")
    assert strip(a, la) == strip(b, lb)


TRAIN = set(multi_turn_split("train"))


def test_the_sample_holds_train_scenarios_only_and_the_splits_stay_as_cut(records):
    numbers = {backends.task_number(r["meta"]["env"]["task_id"]) for r in records}
    assert numbers == set(sc.SAMPLE_TASKS) and numbers <= TRAIN
    dev_test = set(multi_turn_split("dev")) | set(multi_turn_split("test"))
    assert not numbers & dev_test
    # the frozen sample the splits were cut with still reproduces splits.json (its 4 dev/test scenarios included)
    assert sorted(set(SPLIT_ORDER_TASKS) & dev_test) == [157, 168, 175, 184]


def test_every_record_is_a_valid_raw_record(records, tasks):
    assert 40 <= len(records) <= 60
    assert len({r["id"] for r in records}) == len(records)
    assert CORPUS.stat().st_size < 1_500_000
    for rec in records:
        assert check_raw(rec) is None, rec["id"]
        env = rec["meta"]["env"]
        assert env["benchmark"] == "bfcl_multi_turn" and env["variant"] == "base"
        task = tasks[env["task_id"]]
        assert backends.task_number(env["task_id"]) in TRAIN
        assert rec["source"] == "bfcl_multi_turn"
        assert rec["task"] == task["question"][0][0]["content"] == rec["messages"][0]["content"]
        # tools: exactly the functions of the task's involved classes
        assert [t["function"]["name"] for t in rec["tools"]] == [d["name"] for d in task["function"]]
        assert rec["outcome"]["reward"] == (1.0 if rec["outcome"]["success"] else 0.0)
        call_ids = [c["id"] for m in rec["messages"] for c in m.get("tool_calls", [])]
        assert call_ids == [f"call_{i}" for i in range(len(call_ids))]


def test_corpus_records_do_not_carry_noise_labels(records, labels):
    kinds = {"clean", "wrong_call_recovery", "redundant_read", "abandoned", "duplicate"}
    assert set(labels["labels"]) == {r["id"] for r in records}
    assert {v["noise"] for v in labels["labels"].values()} == kinds
    for rec in records:
        assert set(rec) == {"id", "source", "task", "tools", "messages", "outcome", "meta"}
        assert set(rec["meta"]) == {"env"}
        assert not any(k.replace("_", "") in rec["id"].replace("_", "") for k in kinds)


def test_noise_is_what_the_labels_say(records, labels):
    by_id = {r["id"]: r for r in records}
    lab = labels["labels"]
    counts = labels["counts"]
    assert counts["clean"] == len(sc.SAMPLE_TASKS) and counts["duplicate"] == 2
    assert sum(counts.values()) == len(records)
    for rid, info in lab.items():
        rec = by_id[rid]
        observations = [m["content"] for m in rec["messages"] if m["role"] == "tool"]
        if info["noise"] in ("clean", "duplicate", "redundant_read", "wrong_call_recovery"):
            assert rec["outcome"]["success"] is True
            assert rec["messages"][-1]["role"] == "assistant" and not rec["messages"][-1].get("tool_calls")
        if info["noise"] == "abandoned":
            assert rec["outcome"] == {"success": False, "reward": 0.0}
            assert rec["messages"][-1]["role"] == "tool"
        if info["noise"] == "duplicate":
            original = by_id[info["duplicate_of"]]
            assert {**original, "id": rid} == rec and lab[original["id"]]["noise"] == "clean"
        if info["noise"] == "wrong_call_recovery":
            assert sum(sc._is_error(o) for o in observations) == 1
        if info["noise"] == "redundant_read":
            calls = [(c["function"]["name"], c["function"]["arguments"])
                     for m in rec["messages"] for c in m.get("tool_calls", [])]
            assert any(a == b for a, b in zip(calls, calls[1:]))
    for info in lab.values():
        if info["noise"] == "clean":
            assert info["task_id"] in {f"multi_turn_base_{n}" for n in sc.SAMPLE_TASKS}


def _calls_by_turn(rec):
    turns = []
    for m in rec["messages"]:
        if m["role"] == "user":
            turns.append([])
        for c in m.get("tool_calls", []):
            turns[-1].append((c["function"]["name"], json.loads(c["function"]["arguments"])))
    return turns


def test_executing_a_records_calls_again_on_fresh_backends_reproduces_its_observations(records, tasks):
    for rec in records:
        task = tasks[rec["meta"]["env"]["task_id"]]
        by_json, by_text = Episode(task), Episode(task)
        pending = {}
        for m in rec["messages"]:
            for c in m.get("tool_calls", []):
                pending[c["id"]] = (c["function"]["name"], json.loads(c["function"]["arguments"]))
            if m["role"] == "tool":
                name, args = pending.pop(m["tool_call_id"])
                assert by_json.call(name, args) == m["content"], (rec["id"], name)
                assert by_text.execute(format_call(name, args)) == m["content"], (rec["id"], name)
        assert not pending
        assert by_json.state() == by_text.state()


def test_outcomes_agree_with_the_official_multi_turn_checker(records, tasks, ground_truth):
    """The official checker runs calls with eval() and caches instances in module globals; it
    only sees our own ground-truth-derived call strings here, and its globals are cleared."""
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    model = "curateevo_sample_corpus_test"
    try:
        for rec in records:
            task = tasks[rec["meta"]["env"]["task_id"]]
            gt = ground_truth[task["id"]]
            turns = _calls_by_turn(rec)
            decoded = [[[format_call(n, a)] for n, a in (turns[i] if i < len(turns) else [])]
                       for i in range(len(gt))]
            result = multi_turn_checker(decoded, gt, task, "multi_turn_base", f"{model}_{rec['id']}")
            assert result["valid"] is rec["outcome"]["success"], (rec["id"], result.get("error_type"))
            assert sc.judge(task, gt, turns) is rec["outcome"]["success"]
    finally:
        for key in [k for k in vars(multi_turn_utils) if k.startswith(model)]:
            delattr(multi_turn_utils, key)


def test_judge_passes_every_base_ground_truth_and_fails_a_skipped_turn(tasks, ground_truth):
    for tid, task in tasks.items():
        gt = ground_truth[tid]
        turns = [[Episode(task).to_tool_call(c) for c in turn] for turn in gt]
        assert sc.judge(task, gt, turns), tid
    task = tasks["multi_turn_base_157"]
    gt = ground_truth["multi_turn_base_157"]
    turns = [[Episode(task).to_tool_call(c) for c in turn] for turn in gt]
    assert not sc.judge(task, gt, turns[:-1] + [[]])


# ------------------------------------------------------------------------------------ executor


def test_executor_matches_the_official_one_on_every_base_ground_truth(tasks, ground_truth):
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    model = "curateevo_executor_parity"
    try:
        for tid, task in tasks.items():
            ep = Episode(task)
            for turn in ground_truth[tid]:
                ours = ep.execute_all(turn)
                theirs, instances = multi_turn_utils.execute_multi_turn_func_call(
                    turn, task["initial_config"], task["involved_classes"], model, tid)
                assert ours == theirs, tid
                assert ep.state() == {c: {k: v for k, v in vars(i).items() if not k.startswith("_")}
                                      for c, i in instances.items()}, tid
    finally:
        for key in [k for k in vars(multi_turn_utils) if k.startswith(model)]:
            delattr(multi_turn_utils, key)


def _fs_task(tasks):
    return tasks["multi_turn_base_1"]  # GorillaFileSystem only


INJECTIONS = [
    "__import__('os').system('touch {marker}')",
    "ls(a=open('/etc/passwd').read())",
    "ls(a=__import__('os').system('touch {marker}'))",
    "ls(a=True); __import__('os').system('touch {marker}')",
    "ls(a=True) or __import__('os').system('touch {marker}')",
    "ls.__globals__['subprocess'].run(['touch', '{marker}'])",
    "getattr(ls, '__globals__')",
    "(lambda: __import__('os').system('touch {marker}'))()",
    "ls(*[__import__('os').system('touch {marker}')])",
    "ls(**{{'a': __import__('os').system('touch {marker}')}})",
    "ls(a=[x for x in ().__class__.__base__.__subclasses__()])",
    "ls(a=f'{{__import__(\"os\").system(\"touch {marker}\")}}')",
    "eval(\"__import__('os').system('touch {marker}')\")",
    "exec('import os')",
    "__builtins__['eval']('1')",
    "_load_scenario({{}})",
    "__init__()",
    "ls(a=True)\n__import__('os').system('touch {marker}')",
    "ls(a=True) if __import__('os').system('touch {marker}') else ls(a=True)",
]


@pytest.mark.parametrize("payload", INJECTIONS)
def test_code_injection_is_an_error_observation_and_nothing_runs(tasks, tmp_path, payload):
    marker = tmp_path / "pwned"
    ep = Episode(_fs_task(tasks))
    before = ep.state()
    obs = ep.execute(payload.format(marker=marker))
    assert obs.startswith(ERROR_PREFIX), obs
    assert not marker.exists()
    assert ep.state() == before


def test_injection_through_a_tool_name_or_argument_mapping(tasks, tmp_path):
    marker = tmp_path / "pwned"
    ep = Episode(_fs_task(tasks))
    before = ep.state()
    for name in (f"__import__('os').system('touch {marker}')", "__class__", "_load_scenario", "__init__",
                 "__eq__", "ls.__globals__", "eval", "open"):
        obs = ep.call(name, {})
        assert obs.startswith(ERROR_PREFIX), (name, obs)
    assert ep.call("ls", {"a": object()}).startswith(ERROR_PREFIX)
    # a string argument stays a string: it is data, never code
    assert not ep.call("cat", {"file_name": f"__import__('os').system('touch {marker}')"}).startswith("{\"file_content\"")
    assert not marker.exists()
    assert ep.state() == before


def test_only_offered_functions_can_be_called(tasks):
    task = tasks["multi_turn_base_157"]  # MathAPI + TravelAPI
    ep = Episode(task)
    assert "mean" in ep.functions and "ls" not in ep.functions
    assert ep.execute("ls(a=True)") == f"{ERROR_PREFIX}name 'ls' is not defined"
    narrow = Episode(task, functions=["list_all_airports"])
    assert narrow.functions == {"list_all_airports"}
    assert narrow.execute("mean(numbers=[1, 2])").startswith(ERROR_PREFIX)
    assert narrow.execute("list_all_airports()").startswith("['RMS'")


def test_bad_calls_are_error_observations(tasks):
    ep = Episode(tasks["multi_turn_base_157"])
    for bad in ("mean(", "mean(numbers=[1,2]", "", "   ", "1 + 1", "mean", "mean(numbers=x)",
                "mean(numbers=[1, 2], numbers=[3])", "mean(numbers=" + "[" * 300 + "]" * 300 + ")",
                "x" * (backends.MAX_CALL_CHARS + 1), None, 42):
        obs = ep.execute(bad)
        assert obs.startswith(ERROR_PREFIX), (bad, obs)
    # a real backend error is reported the way BFCL reports it
    assert ep.execute("get_nearest_airport_by_city()") == (
        ERROR_PREFIX + "TravelAPI.get_nearest_airport_by_city() missing 1 required positional argument: 'location'")
    with pytest.raises(CallError):
        parse_call("a.b(c=1)")
    assert parse_call("sort('final_report.pdf', lines=-2)") == ("sort", ("final_report.pdf",), {"lines": -2})


def test_episodes_of_the_same_task_do_not_share_state(tasks):
    task = tasks["multi_turn_base_160"]
    config_before = json.dumps(task["initial_config"], sort_keys=True)
    first, second = Episode(task), Episode(task)
    initial = second.state()
    assert first.instances["TravelAPI"] is not second.instances["TravelAPI"]
    assert first.execute("set_budget_limit(access_token='abc123xyz', budget_limit=2857.14)") == '{"budget_limit": 2857.14}'
    assert first.state()["TravelAPI"]["budget_limit"] == 2857.14
    assert second.state() == initial and second.state()["TravelAPI"]["budget_limit"] != 2857.14
    # the same RNG-driven ids in each episode: nothing is carried over between them
    book = ("book_flight(access_token='abc123xyz', card_id='card_3478', travel_date='2026-02-28', "
            "travel_from='JFK', travel_to='LAX', travel_class='business')")
    assert first.execute(book) == second.execute(book) == Episode(task).execute(book)
    assert json.dumps(task["initial_config"], sort_keys=True) == config_before
    # state() is a copy
    snap = second.state()
    snap["TravelAPI"]["booking_record"].clear()
    assert second.state()["TravelAPI"]["booking_record"]


def test_tool_schemas_are_openai_function_schemas(tasks):
    schemas = tool_schemas(tasks["multi_turn_base_157"])
    names = [s["function"]["name"] for s in schemas]
    assert "mean" in names and "book_flight" in names and len(names) == len(set(names))
    text = json.dumps(schemas)
    for bfcl_type in ('"dict"', '"float"', '"tuple"', '"any"'):
        assert f'"type": {bfcl_type}' not in text
    for s in schemas:
        assert s["type"] == "function" and set(s["function"]) == {"name", "description", "parameters"}
        assert s["function"]["parameters"]["type"] == "object"
    doc = {"name": "f", "description": "d", "parameters": {"type": "dict", "properties": {
        "x": {"type": "float"}, "t": {"type": "tuple", "items": {"type": "dict", "properties": {"a": {"type": "any"}}}},
        "y": {"type": "any", "description": "anything"}}, "required": ["x"]},
        "response": {"type": "dict"}}
    assert backends.tool_schema(doc) == {"type": "function", "function": {"name": "f", "description": "d", "parameters": {
        "type": "object", "properties": {
            "x": {"type": "number"}, "t": {"type": "array", "items": {"type": "object", "properties": {"a": {}}}},
            "y": {"description": "anything"}}, "required": ["x"]}}}


@pytest.mark.parametrize("module", ["environments/bfcl/backends.py", "sandbox/simenv/calls.py", "sandbox/simenv/episode.py"])
def test_backends_module_never_evaluates_text(module):
    import ast

    tree = ast.parse((ROOT / module).read_text(encoding="utf-8"))
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    attrs = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not names & {"eval", "exec", "compile", "globals", "__import__"}
    assert not attrs & {"eval", "exec", "system", "popen"}
    if module.endswith("calls.py"):   # where call strings are read: literals only
        assert attrs & {"literal_eval"}
