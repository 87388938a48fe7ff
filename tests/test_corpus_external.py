"""Real public corpora, as their repositories publish them, load without any conversion by the
user; what cannot be converted is refused in one line naming the file and the record.

Fixtures: ../shared/fixtures/external (see its README) and tests/fixtures/external
(tau-bench: sierra-research/tau-bench @ 59a200c historical_trajectories/gpt-4o-airline.json,
5 of 200 trajectories re-serialised with indent=2; ToolBench: OpenBMB/ToolBench @ d56fdd8
data_example/answer/, 4 answer files as published; SWE-agent: SWE-agent/SWE-agent @ 3ea751c
trajectories/demonstrations/function_calling_simple.traj, .../ctf/misc/networking_1.traj and
tests/test_data/trajectories/gpt4__swe-agent-test-repo__.../6e44b9__sweagenttestrepo-1c2844.traj)."""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from base.errors import UserError
from corpora import corpus_kind, corpus_sha256, holdout, load_corpus
from base.schemas import check_raw

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "fixtures" / "external"
LOCAL = ROOT / "tests" / "fixtures" / "external"
TAU = LOCAL / "tau-bench-gpt-4o-airline.sample.json"
TOOLBENCH = LOCAL / "toolbench-answer"
SWE_AGENT = LOCAL / "swe-agent"


def unanswered(record) -> int:
    open_calls = set()
    for m in record["messages"]:
        open_calls |= {c["id"] for c in m.get("tool_calls") or []}
        if m["role"] == "tool":
            open_calls.discard(m["tool_call_id"])
    return len(open_calls)


@pytest.mark.parametrize("name, fmt, n", [
    ("fireact-hotpotqa-gpt_format.jsonl", "canonical", 200),           # OpenAI, no id, no tools
    ("llamafactory-glaive_toolcall_en_demo.json", "sharegpt", 200),    # JSON array, tools string
    ("llamafactory-reason_tool_use_demo_50.jsonl", "canonical", 50),   # content parts, no id
])
def test_each_published_file_loads_whole(name, fmt, n):
    corpus = load_corpus(SHARED / name)
    assert (corpus.format, len(corpus.records), corpus.skipped) == (fmt, n, ())
    assert all(check_raw(r) is None for r in corpus.records)
    assert len({r["id"] for r in corpus.records}) == n


def test_content_parts_keep_reasoning_text_and_tool_calls():
    records = load_corpus(SHARED / "llamafactory-reason_tool_use_demo_50.jsonl").records
    first_call = next(m for r in records for m in r["messages"] if m.get("tool_calls"))
    assert first_call["content"].startswith("<think>\nAlright, the user wants information")
    assert first_call["tool_calls"][0]["function"] == {"name": "get_movie_details",
                                                       "arguments": '{"title":"Inception"}'}
    # Parallel calls answered by one tool message holding a JSON list become one result each;
    # what stays unanswered are calls a trajectory ends on.
    assert all(unanswered(r) == 0 or r["messages"][-1].get("tool_calls") for r in records)


def test_adp_folder_loads_as_the_reference_converter_reads_it():
    corpus = load_corpus(SHARED / "adp")
    assert (corpus.format, len(corpus.records), corpus.skipped) == ("adp", 72, ())
    ids = [r["id"] for r in corpus.records]
    assert len(set(ids)) == 72
    assert ids.count("webarena_successful.sample_std/0") == 1          # six samples share id "0"
    assert "webarena_successful.sample_std/0#5" in ids
    assert {"toucan_1_5m.sample_std/toucan_sample_0",
            "neulab-toucan_1_5m-sample0-v1.5.0/toucan_sample_0"} <= set(ids)
    calls = sum(len(m.get("tool_calls") or []) for r in corpus.records for m in r["messages"])
    assert calls == 300 and sum(map(unanswered, corpus.records)) == 11  # was 256 of 299
    os_task = next(r for r in corpus.records if r["id"].endswith("/os_42"))
    after_call = os_task["messages"][os_task["messages"].index(
        next(m for m in os_task["messages"] if m.get("tool_calls"))) + 1]
    assert after_call["role"] == "tool"                                  # labelled source "user"
    described = [m for r in corpus.records for m in r["messages"]
                 if m["role"] == "assistant" and m.get("tool_calls") and m.get("content")]
    assert len(described) > 100                                          # the action's reasoning


def test_tau_bench_reused_call_ids_get_their_own_ids_and_reward_is_the_outcome():
    corpus = load_corpus(TAU)
    assert (corpus.format, len(corpus.records), corpus.skipped) == ("tau-bench", 5, ())
    first = corpus.records[0]
    ids = [c["id"] for m in first["messages"] for c in m.get("tool_calls") or []]
    assert "call_HGn16KZh9oNCruxsMJ4gYXan~1" in ids and len(set(ids)) == len(ids)
    assert all(unanswered(r) == 0 for r in corpus.records)
    assert first["outcome"] == {"success": False, "reward": 0.0}
    assert first["meta"]["extra"]["task_id"] == 0 and first["tools"]      # tools from the calls


def test_toolbench_answer_folder_converts_legacy_function_calls_and_refuses_an_empty_answer():
    corpus = load_corpus(TOOLBENCH, on_error="skip")
    assert [r["id"] for r in corpus.records] == [
        "toolbench-answer/G1_answer/10_ChatGPT_DFS_woFilter_w2.json",
        "toolbench-answer/G2_answer/127_ChatGPT_DFS_woFilter_w2.json"]
    record = corpus.records[0]
    assert [m["role"] for m in record["messages"]][:4] == ["system", "user", "assistant", "tool"]
    assert record["messages"][3]["tool_call_id"] == record["messages"][2]["tool_calls"][0]["id"]
    assert record["outcome"]["success"] is True
    assert corpus.records[1]["meta"]["message_extra"]                      # ToolBench's "valid" key
    skipped = corpus.skipped
    assert len(skipped) == 2 and all("\n" not in s for s in skipped)
    assert skipped[0].startswith(f"{TOOLBENCH}/G1_answer/69_ChatGPT_DFS_woFilter_w2.json:1: "
                                 "answer_generation.train_messages: missing")
    assert skipped[1].startswith(f"{TOOLBENCH}/G3_answer/21_ChatGPT_DFS_woFilter_w2.json:1: ")
    assert "'dota_2_steam_web', which is not in tools" in skipped[1]
    with pytest.raises(UserError, match=r"69_ChatGPT_DFS_woFilter_w2.json:1: answer_generation"):
        load_corpus(TOOLBENCH)


def test_swe_agent_traj_files_load_from_their_history():
    from curation_strategies import toolkit as tk

    corpus = load_corpus(SWE_AGENT)
    assert corpus.format == "swe-agent" and corpus.skipped == ()
    by_name = {r["id"].rsplit("/", 1)[1]: r for r in corpus.records}
    assert set(by_name) == {"6e44b9__sweagenttestrepo-1c2844.traj", "function_calling_simple.traj",
                            "networking_1.traj"}
    calls = by_name["function_calling_simple.traj"]
    # the files carry no schemas: both function-calling trajectories share one catalogue of their calls
    assert [t["function"]["name"] for t in calls["tools"]] == ["find_file", "open", "edit", "bash", "submit"]
    assert calls["meta"]["tools_source"] == "catalogue"
    assert by_name["6e44b9__sweagenttestrepo-1c2844.traj"]["tools"] == calls["tools"]
    assert all(unanswered(r) == 0 for r in corpus.records)
    assert "trajectory" not in calls["meta"].get("extra", {})     # it repeats the history
    assert not tk.is_abandoned(calls)                              # ends on submit's result
    text_only = by_name["networking_1.traj"]                       # older SWE-agent: actions as text
    assert "tools" not in text_only and text_only["meta"]["extra"]["info"]["exit_status"]


def test_several_real_sources_load_together_with_unique_ids_and_a_stable_hash():
    paths = [SHARED / "adp", TAU, SHARED / "fireact-hotpotqa-gpt_format.jsonl", SWE_AGENT]
    corpus = load_corpus(paths)
    assert corpus.format == "mixed" and len(corpus.records) == 72 + 5 + 200 + 3
    assert len({r["id"] for r in corpus.records}) == len(corpus.records)
    assert corpus.sha256 == corpus_sha256(paths) == load_corpus(paths).sha256
    assert corpus_kind(corpus.records) == "next-call"


def test_holdout_is_a_deterministic_tenth_that_ignores_record_order():
    records = load_corpus(SHARED / "fireact-hotpotqa-gpt_format.jsonl").records
    train, dev = holdout(records)
    assert len(dev) == 20 and len(train) == 180
    assert {r["id"] for r in train}.isdisjoint(r["id"] for r in dev)
    _, again_dev = holdout(list(reversed(records)))
    assert sorted(r["id"] for r in again_dev) == sorted(r["id"] for r in dev)
    assert holdout(records, seed=1)[1] != dev


def test_a_bad_array_element_is_named_by_line_and_index_and_the_others_load(tmp_path):
    records = json.loads((SHARED / "llamafactory-glaive_toolcall_en_demo.json").read_text())
    records[3]["conversations"][0]["from"] = "narrator"
    path = tmp_path / "glaive.json"
    path.write_text(json.dumps(records, indent=2))
    starts = [i + 1 for i, text in enumerate(path.read_text().splitlines()) if text == "  {"]
    corpus = load_corpus(path, on_error="skip")
    assert len(corpus.records) == 199
    (skip,) = corpus.skipped_lines
    assert (skip.path, skip.line, skip.index) == (str(path), starts[3], 3)
    assert str(skip).startswith(f"{path}:{starts[3]} [3]: conversations[0].from: unknown speaker 'narrator'")
    assert corpus.records[3]["id"] == "glaive.json[4]"                          # ids by position


def test_an_array_cut_short_is_one_line_naming_the_file_and_line(tmp_path):
    text = (SHARED / "adp" / "eto.sample_std.json").read_text()
    cut = tmp_path / "eto.json"
    cut.write_text(text[: len(text) // 2])
    with pytest.raises(UserError) as info:
        load_corpus(cut)
    message = str(info.value)
    assert message.startswith(f"{cut}:") and "not JSON" in message and "\n" not in message
    assert not any(p.name != "eto.json" for p in tmp_path.iterdir())     # nothing written


@pytest.mark.parametrize("make, what", [
    (lambda d: (os.mkfifo(d / "pipe.jsonl"), d / "pipe.jsonl")[1], "is a FIFO"),
    (lambda d: Path("/dev/zero"), "is a character device"),
    (lambda d: (d / "empty").mkdir() or d / "empty", "is a directory with no .json, .jsonl or .traj files"),
])
def test_a_fifo_a_device_or_an_empty_folder_is_refused_at_once(tmp_path, make, what):
    path = make(tmp_path)
    result = {}
    worker = threading.Thread(target=lambda: result.setdefault("error", _error(path)), daemon=True)
    worker.start()
    worker.join(timeout=5)
    assert not worker.is_alive(), "loading blocked"
    assert result["error"].startswith(f"{path}: {what}") and "\n" not in result["error"]


def _error(path) -> str:
    try:
        load_corpus(path)
    except UserError as exc:
        return str(exc)
    return "loaded"


def test_a_huge_json_array_is_refused_with_the_conversion_to_jsonl(tmp_path):
    path = tmp_path / "big.json"
    path.write_text(json.dumps([{"messages": [{"role": "user", "content": "x" * 2000}]}] * 10))
    with pytest.raises(UserError, match=r"big.json:1: a JSON array file is read whole .* jq -c"):
        load_corpus(path, max_line_bytes=4096)
