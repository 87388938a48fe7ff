"""tau2-bench `Results` files load as tau2-bench publishes them: one record per simulation, the
outcome from `reward_info.reward`, the policy as the system message, the user's own tool calls
left out and counted; a tool result is never split by guessing from its content's shape.

Fixtures (tests/fixtures/external/tau2-bench/, MIT, sierra-research/tau2-bench): excerpts of three
Results files as published — the top level and `info` whole, `simulations` cut to the ones named,
`tasks` to theirs, re-serialised with indent=2 as the originals are:
- `telecom-default-gpt-4.1.excerpt.json`: @ 59d0fb96f4292815e1f6463fb2f139ffef47dc7f
  src/experiments/model_training/results/gpt-4.1_telecom_default_gpt-4.1_1trials.json, the two
  shortest of 40 simulations (the user simulator calls tools: `requestor: "user"`);
- `telecom-no-user-gpt-4.1-4trials.excerpt.json`: @ 4bcddd539b973262e8b5a1ab3ddfd103bdc836ad
  data/exp/test_run_1/gpt-4.1-2025-04-14_telecom_no-user_gpt-4.1-2025-04-14_4trials_5tasks.json,
  the 4 trials of each of 2 of its 5 tasks (solo mode: no user messages, the ticket in the prompt);
- `airline-default-gpt-4.1.excerpt.json`: @ 59d0fb96 src/experiments/model_training/results/
  gpt-4.1_airline_default_gpt-4.1_1trials.json, simulation 8 (task 24), where six parallel calls
  are answered one by one and a search result is a JSON list as long as the calls still open."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from base.errors import UserError
from corpora import load_corpus
from corpora.split import partition
from corpora.tau2 import USER_TOOL_CALLS
from base.schemas import check_raw

TAU2 = Path(__file__).resolve().parent / "fixtures" / "external" / "tau2-bench"
TELECOM = TAU2 / "telecom-default-gpt-4.1.excerpt.json"
SOLO = TAU2 / "telecom-no-user-gpt-4.1-4trials.excerpt.json"
AIRLINE = TAU2 / "airline-default-gpt-4.1.excerpt.json"


def test_a_results_file_loads_one_record_per_simulation_with_its_reward_and_policy():
    doc = json.loads(TELECOM.read_text())
    corpus = load_corpus(TELECOM)
    assert (corpus.format, len(corpus.records), corpus.skipped) == ("tau2-bench", 2, ())
    assert all(check_raw(r) is None for r in corpus.records)
    for sim, record in zip(doc["simulations"], corpus.records):
        assert record["id"] == sim["id"] and record["source"] == "tau2-bench/telecom"
        assert record["outcome"] == {"success": sim["reward_info"]["reward"] >= 1, "reward": sim["reward_info"]["reward"]}
        assert record["messages"][0] == {"role": "system", "content": doc["info"]["environment_info"]["policy"]}
        assert record["meta"]["task_id"] == sim["task_id"] and record["meta"]["trial"] == sim["trial"]
        assert record["task"] == next(m["content"] for m in sim["messages"] if m["role"] == "user" and m.get("content"))


def test_the_users_own_tool_calls_are_left_out_and_counted():
    doc = json.loads(TELECOM.read_text())
    user_calls = sum(1 for s in doc["simulations"] for m in s["messages"] for c in m.get("tool_calls") or []
                     if c["requestor"] == "user")
    agent_calls = sum(1 for s in doc["simulations"] for m in s["messages"] for c in m.get("tool_calls") or []
                      if c["requestor"] == "assistant")
    corpus = load_corpus(TELECOM)
    assert user_calls == 6 and dict(corpus.quirks) == {USER_TOOL_CALLS: user_calls}
    kept = [m for r in corpus.records for m in r["messages"]]
    assert sum(len(m.get("tool_calls") or []) for m in kept) == agent_calls
    assert sum(m["role"] == "tool" for m in kept) == agent_calls           # each agent call keeps its result
    assert not any(m.get("tool_calls") for m in kept if m["role"] != "assistant")
    assert all(m.get("content") for m in kept if m["role"] == "user")     # no user turn left empty


def test_solo_runs_carry_the_ticket_and_trials_of_one_task_share_its_id():
    doc = json.loads(SOLO.read_text())
    corpus = load_corpus(SOLO)
    assert len(corpus.records) == 8 and len({r["meta"]["task_id"] for r in corpus.records}) == 2
    ticket = {t["id"]: t["ticket"] for t in doc["tasks"]}
    for record in corpus.records:
        assert record["messages"][0]["content"].endswith(f"<ticket>\n{ticket[record['meta']['task_id']]}\n</ticket>")
        assert record["task"] == ticket[record["meta"]["task_id"]]
    assert {r["outcome"]["reward"] for r in corpus.records} == {0.0, 1.0}


def test_the_split_never_puts_one_tau2_task_on_both_sides():
    records = load_corpus([SOLO, TELECOM, AIRLINE]).records
    assert len(records) == 11
    for seed in range(6):
        train, dev, test = partition(records, {"rank": "task", "seed": seed, "share": 0.1, "test_share": 0.1})
        side = {i: "train" for i in train} | {i: "dev" for i in dev} | {i: "test" for i in test}
        by_task: dict = {}
        for r in records:
            by_task.setdefault(r["meta"]["task_id"], set()).add(side[r["id"]])
        assert all(len(sides) == 1 for sides in by_task.values()), by_task
        assert dev and test


def test_a_search_result_list_is_one_result_even_when_as_long_as_the_open_calls(tmp_path):
    """The airline simulation's messages as an OpenAI export without result ids would carry them:
    the answer to the fifth of six parallel calls is a list of two flights while two calls are open."""
    sim = json.loads(AIRLINE.read_text())["simulations"][0]
    messages = [{"role": m["role"], "content": m.get("content"),
                 **({"tool_calls": [{"id": c["id"], "type": "function",
                                     "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
                                    for c in m["tool_calls"]]} if m.get("tool_calls") else {})}
                for m in sim["messages"]]
    listed = next(i for i, m in enumerate(sim["messages"]) if m["role"] == "tool"
                  and isinstance(json.loads(m["content"]), list) and len(json.loads(m["content"])) == 2)
    source = tmp_path / "airline.jsonl"
    source.write_text(json.dumps({"id": "airline-24", "messages": messages}) + "\n")
    record = load_corpus(source).records[0]
    assert len(record["messages"]) == len(messages)                       # nothing split
    ours = record["messages"][listed]
    assert ours["role"] == "tool" and json.loads(ours["content"]) == json.loads(sim["messages"][listed]["content"])
    assert ours["tool_call_id"] == sim["messages"][listed]["id"]           # the oldest open call, as published


def test_format_tau_bench_on_a_tau2_file_names_the_right_format():
    with pytest.raises(UserError) as err:
        load_corpus(TELECOM, fmt="tau-bench")
    assert "traj: missing (format tau-bench); this is a tau2-bench Results file: --format tau2-bench" in str(err.value)
    assert len(load_corpus(TELECOM, fmt="tau2-bench").records) == 2


def test_a_bad_simulation_is_named_and_skipped_alone(tmp_path):
    doc = json.loads(AIRLINE.read_text())
    doc["simulations"] = [doc["simulations"][0], {**doc["simulations"][0], "id": "broken", "messages": "lost"}]
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(UserError, match=r"results.json:1: simulations\[1\]: messages: must be a list of messages"):
        load_corpus(path)
    corpus = load_corpus(path, on_error="skip")
    assert [r["id"] for r in corpus.records] == [doc["simulations"][0]["id"]] and len(corpus.skipped) == 1


def test_curate_reads_a_results_file_says_the_split_and_takes_runs_dir(tmp_path, capsys):
    from evolver import cli

    assert cli.main(["curate", "--corpus", str(SOLO), "--sandbox", "process", "--profile", "test",
                     "--runs-dir", str(tmp_path / "runs")]) == 0
    err = capsys.readouterr().err
    assert "corpus: curated whole here; a run holds out dev and test parts. split by task: train " in err
    assert "record(s) of 1 task(s)" in err
    made = list((tmp_path / "runs").iterdir())
    assert len(made) == 1 and made[0].name.startswith("curate-") and (made[0] / "manifest.json").is_file()


def test_tool_defs_when_the_run_wrote_them_are_the_records_tools(tmp_path):
    """tau2 writes `tool_defs` (`{name: ToolSignature{name, doc, params, returns}}`,
    src/tau2/environment/toolkit.py) when asked to include the tool info; the excerpts' runs did not,
    so the signatures are made here in that shape from the calls the simulation makes."""
    doc = json.loads(AIRLINE.read_text())
    called = {c["name"]: c["arguments"] for m in doc["simulations"][0]["messages"] for c in m.get("tool_calls") or []}
    doc["info"]["environment_info"]["tool_defs"] = {
        name: {"name": name, "doc": f"The {name} tool.", "returns": None,
               "params": {"type": "object", "properties": {k: {"type": "string"} for k in args}}}
        for name, args in called.items()}
    path = tmp_path / "with-defs.json"
    path.write_text(json.dumps(doc))
    record = load_corpus(path).records[0]
    assert [t["function"]["name"] for t in record["tools"]] == list(called)
    assert record["tools"][0]["function"]["description"] == f"The {next(iter(called))} tool."
    assert "tools_source" not in record["meta"]                            # the file's own schemas, no catalogue
