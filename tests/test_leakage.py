"""The leakage guard: the host rejects artifacts holding a dev or test task's user request or gold
call sequence verbatim, in one sentence naming the record and the task; the default corpora's
own records (train only) pass."""
from __future__ import annotations

import json

import pytest

from environments.bfcl import corpus_builder, splits
from environments.bfcl.backends import Episode, load_ground_truth, load_tasks
from environments.bfcl.single_turn import gold_calls
from environments.bfcl.single_turn_data import answers, entries
from curation_strategies import toolkit as tk
from sandbox.checker import CandidateRejected
from corpora import load_corpus
from sandbox.curate import CurationFailed, execute
from sandbox.leakage import check_leakage
from sandbox.process_executor import ProcessExecutor
from workspace.repository import strategy_files

DEV_MT = f"multi_turn_base_{splits.multi_turn_split('dev')[0]}"
TEST_MT = f"multi_turn_base_{splits.multi_turn_split('test')[0]}"
DEV_SIMPLE = splits.single_turn_split("simple_python", "dev")[0]


def Curated(sft, rl, memory) -> dict:   # what check_leakage reads: records by kind
    return {"sft": sft, "rl": rl, "memory": memory}


def seed_artifacts(raws) -> dict:
    sft = [tk.sft_record(r) for r in raws if not tk.is_empty(r)]
    rl = [x for r in raws for x in tk.rl_records(r, tk.tool_call_steps(r))]
    return Curated(sft, rl, [])


def call(name, arguments, n=0):
    return {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def record(rid, messages):
    return {"id": rid, "messages": messages, "tools": [], "meta": {"origin": [rid]}}


@pytest.mark.parametrize("benchmark, limit", [("bfcl", 60), ("bfcl-single", None)])
def test_the_default_wild_corpora_curated_by_rho0_pass(benchmark, limit):
    raws, _, _ = corpus_builder.build(benchmark, "wild", 0, limit=limit)   # (the whole bfcl corpus passes too; slower)
    check_leakage(seed_artifacts(raws))


def test_a_dev_user_request_is_rejected_naming_record_and_task():
    request = load_tasks("multi_turn_base")[DEV_MT]["question"][0][0]["content"]
    leaking = record("made-up-1", [{"role": "user", "content": request}, {"role": "assistant", "content": "Sure."}])
    with pytest.raises(CandidateRejected) as info:
        check_leakage(Curated([leaking], [], []))
    assert str(info.value).startswith(f"sft record 'made-up-1' contains the user request of dev task {DEV_MT} verbatim")


def test_a_test_tasks_gold_call_sequence_is_rejected_even_under_another_request():
    task = load_tasks("multi_turn_base")[TEST_MT]
    episode = Episode(task)
    messages = [{"role": "user", "content": "Do the usual."}]
    n = 0
    for turn in load_ground_truth("multi_turn_base")[TEST_MT]:
        for text in turn:
            name, arguments = episode.to_tool_call(text)
            messages += [{"role": "assistant", "content": None, "tool_calls": [call(name, arguments, n)]},
                         {"role": "tool", "tool_call_id": f"call_{n}", "content": episode.execute(text)}]
            n += 1
    with pytest.raises(CandidateRejected) as info:
        check_leakage(Curated([record("seq", messages)], [], []))
    assert f"the gold call sequence of test task {TEST_MT}" in str(info.value)
    shortened = messages[:-2]   # all but the last gold call: no longer the whole sequence
    check_leakage(Curated([record("seq", shortened)], [], []))


def test_a_single_turn_dev_gold_answer_is_rejected_in_an_rl_reference():
    entry = entries("simple_python")[DEV_SIMPLE]
    (name, arguments), = gold_calls(entry["function"], answers("simple_python")[DEV_SIMPLE])
    rl = {"id": "rl-1", "messages": [{"role": "user", "content": "Compute it."}], "tools": [],
          "reference": {"tool_calls": [call(name, arguments)]}, "reward": "tool_call_match", "meta": {"origin": ["x"]}}
    with pytest.raises(CandidateRejected) as info:
        check_leakage(Curated([], [rl], []))
    assert f"rl record 'rl-1' contains the gold calls of dev task {DEV_SIMPLE} verbatim" in str(info.value)


def test_memory_quoting_a_dev_request_is_rejected():
    request = load_tasks("multi_turn_base")[DEV_MT]["question"][0][0]["content"]
    memory = tk.memory_record("hint", f"When asked '{request}', start with cd.", id="m1")
    with pytest.raises(CandidateRejected, match=f"memory record 'm1' contains the user request of dev task {DEV_MT}"):
        check_leakage(Curated([], [], [memory]))


def test_the_host_fails_a_candidate_that_leaks(tmp_path, sample_corpus):
    request = load_tasks("multi_turn_base")[TEST_MT]["question"][0][0]["content"]
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "strategy.py").write_text(f'''
def curate(raw, ctx):
    r = dict(raw[0], messages=[{{"role": "user", "content": {request!r}}}] + raw[0]["messages"][1:])
    return ctx.toolkit.Curated(sft=[ctx.toolkit.sft_record(r)])
''')
    with pytest.raises(CurationFailed) as info:
        execute(strategy_files(folder), load_corpus([str(sample_corpus)]), tmp_path / "out", executor=ProcessExecutor())
    assert f"contains the user request of test task {TEST_MT} verbatim" in info.value.reason
    assert not (tmp_path / "out").exists()
