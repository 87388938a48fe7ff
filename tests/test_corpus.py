"""Corpus loading: canonical JSONL, ShareGPT and ADP input, and `path:line: reason` errors."""
from __future__ import annotations

import json
import os
import tracemalloc

import pytest

from base.errors import UserError
from corpora import Corpus, file_sha256, iter_lines, load_corpus, write_corpus
from base.schemas import canonical_json, check_raw

TOOLS = [{"type": "function", "function": {
    "name": "cd", "description": "change directory",
    "parameters": {"type": "object", "properties": {"folder": {"type": "string"}}}}}]


def raw(rid: str = "r1", **over) -> dict:
    record = {
        "id": rid, "source": "test", "task": "go to documents", "tools": TOOLS,
        "messages": [
            {"role": "user", "content": "go to documents"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "cd", "arguments": '{"folder": "document"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "assistant", "content": "Done."},
        ],
        "outcome": {"success": True, "reward": 1.0},
        "meta": {"env": {"benchmark": "bfcl_multi_turn", "task_id": "t1"}},
    }
    record.update(over)
    return record


def write_lines(path, lines) -> str:
    with open(path, "wb") as f:
        for line in lines:
            f.write(line if isinstance(line, bytes) else line.encode("utf-8"))
            f.write(b"\n")
    return str(path)


def canon(record) -> str:
    return canonical_json(record)


def expect_error(path, fmt="auto", **kw) -> str:
    """The refusal without the hint every invalid-record refusal ends with (tested on its own)."""
    from corpora.loader import SKIP_HINT

    with pytest.raises(UserError) as info:
        load_corpus(path, fmt=fmt, **kw)
    return str(info.value).removesuffix(SKIP_HINT)


# --------------------------------------------------------------------------- canonical


def test_valid_canonical_corpus_loads_in_file_order_and_round_trips_byte_stably(tmp_path):
    src = write_lines(tmp_path / "in.jsonl", [canon(raw("a")), canon(raw("b")), canon(raw("c"))])
    corpus = load_corpus(src)
    assert isinstance(corpus, Corpus)
    assert [r["id"] for r in corpus.records] == ["a", "b", "c"]
    assert corpus.format == "canonical"
    assert corpus.skipped == ()
    assert corpus.paths == (src,)
    assert corpus.sha256 == file_sha256(src)
    out = tmp_path / "out.jsonl"
    write_corpus(corpus.records, out)
    assert out.read_bytes() == open(src, "rb").read()
    assert load_corpus(out).records == corpus.records
    assert open(corpus.staged, "rb").read() == out.read_bytes() and corpus.staged is corpus.staged   # what the sandbox reads, made once
    assert corpus.staged_bytes == out.stat().st_size


def test_write_corpus_replaces_atomically_and_leaves_no_temp_file(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text("old\n")
    write_corpus([raw("a")], out)
    assert out.read_text() == canon(raw("a")) + "\n"
    assert sorted(os.listdir(tmp_path)) == ["out.jsonl"]
    new = tmp_path / "new.jsonl"
    write_corpus([], new)
    assert new.read_bytes() == b"" and (new.stat().st_mode & 0o777) == 0o644
    new.unlink()
    with pytest.raises(ValueError):
        write_corpus([raw("a", outcome={"success": None, "reward": float("nan")})], out)
    assert out.read_text() == canon(raw("a")) + "\n"
    assert sorted(os.listdir(tmp_path)) == ["out.jsonl"]


def test_unknown_top_level_keys_are_kept_under_meta_extra(tmp_path):
    record = raw("a")
    record["difficulty"] = "hard"
    record["annotator"] = {"name": "x"}
    corpus = load_corpus(write_lines(tmp_path / "in.jsonl", [json.dumps(record)]))
    got = corpus.records[0]
    assert "difficulty" not in got
    assert got["meta"]["extra"] == {"difficulty": "hard", "annotator": {"name": "x"}}
    assert got["meta"]["env"] == record["meta"]["env"]
    assert check_raw(got) is None


def test_blank_lines_and_crlf_line_ends_are_ignored_but_counted(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\r\n" + canon(raw("a")).encode() + b"\r\n\n  \n" + canon(raw("b")).encode())
    assert [(n, err) for n, _, err in iter_lines(path, 2**20)] == [(2, None), (5, None)]
    assert [r["id"] for r in load_corpus(path).records] == ["a", "b"]


# --------------------------------------------------------------------------- bad lines

GOOD = canon(raw("good"))


def _bad_message_record(**over) -> str:
    return canon(raw("bad", **over))


BAD_LINES = {
    "not_json": ('{"id": "x", "messages": [', "not JSON"),
    "not_an_object": ('["a", "b"]', "not a JSON object"),
    "wrong_type_names_field_path": (canon(raw("bad", messages="hello")), "messages"),
    "missing_messages_in_canonical": ('{"id": "bad", "messages": []}', "messages"),
    "unknown_role": (_bad_message_record(messages=[{"role": "robot", "content": "hi"}]), "robot"),
    "tool_call_id_answering_nothing": (_bad_message_record(messages=[
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "c9", "content": "ok"}]), "no earlier assistant message makes a tool call"),
    "call_to_tool_not_in_tools": (_bad_message_record(messages=[
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                              "function": {"name": "rm", "arguments": "{}"}}]}]),
        "not in tools"),
    "arguments_not_json": (_bad_message_record(messages=[
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                              "function": {"name": "cd", "arguments": "{folder"}}]}]),
        "arguments: not JSON"),
    "nan_is_not_canonical_json": ('{"id": "bad", "x": NaN, "messages": []}', "NaN"),
    "unrecognised_format": ('{"id": "bad", "text": "hello"}', "unrecognised record"),
    "sharegpt_unknown_from": (json.dumps({"conversations": [{"from": "narrator", "value": "x"}]}),
                              "narrator"),
    "sharegpt_observation_without_call": (json.dumps({"conversations": [
        {"from": "human", "value": "x"}, {"from": "observation", "value": "y"}]}),
        "answers no earlier"),
    "adp_unknown_class": (json.dumps({"id": "bad", "content": [
        {"class_": "text_observation", "content": "x", "source": "user"},
        {"class_": "dance_action", "content": "y"}]}), "dance_action"),
    "adp_observation_answering_unknown_call": (json.dumps({"id": "bad", "content": [
        {"class_": "text_observation", "content": "x", "source": "user"},
        {"class_": "text_observation", "content": "y", "source": "environment",
         "tool_call_id": "zz"}]}), "answers no earlier"),
}


@pytest.mark.parametrize("kind", sorted(BAD_LINES))
def test_each_bad_line_kind_aborts_with_path_line_and_reason(tmp_path, kind):
    line, word = BAD_LINES[kind]
    path = write_lines(tmp_path / "in.jsonl", [GOOD, "", line, canon(raw("after"))])
    message = expect_error(path)
    assert message.startswith(f"{path}:3: "), message
    assert word in message
    assert "\n" not in message


def test_non_utf8_line_is_reported_with_its_byte_offset(tmp_path):
    bad = b'{"id": "bad\xff", "messages": []}'
    path = write_lines(tmp_path / "in.jsonl", [GOOD, bad])
    message = expect_error(path)
    assert message == f"{path}:2: not UTF-8: invalid byte 0xff at byte offset 11 of the line"


def test_duplicate_id_names_the_line_of_the_first_occurrence(tmp_path):
    path = write_lines(tmp_path / "in.jsonl", [canon(raw("a")), GOOD, canon(raw("a"))])
    assert expect_error(path) == f"{path}:3: duplicate id 'a', first seen at line 1; give each record its own id (or drop the repeat)"


def test_duplicate_id_across_files_names_the_other_file(tmp_path):
    one = write_lines(tmp_path / "one.jsonl", [canon(raw("a"))])
    two = write_lines(tmp_path / "two.jsonl", [canon(raw("b")), canon(raw("a"))])
    assert expect_error([one, two]) == f"{two}:2: duplicate id 'a', first seen at {one}:1; give each record its own id (or drop the repeat)"


def test_empty_file_is_reported_at_line_one(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    assert expect_error(path) == f"{path}:1: empty file, no records"
    path.write_bytes(b"\n   \n")
    assert expect_error(path) == f"{path}:1: empty file, no records"


def test_line_longer_than_max_line_bytes_is_reported(tmp_path):
    path = write_lines(tmp_path / "in.jsonl", [GOOD, "[" + "1," * 600 + "1]"])
    message = expect_error(path, max_line_bytes=1000)
    assert message.startswith(f"{path}:2: line is longer than max_line_bytes")


def test_line_of_exactly_max_line_bytes_is_accepted(tmp_path):
    path = write_lines(tmp_path / "in.jsonl", [GOOD])
    assert load_corpus(path, max_line_bytes=len(GOOD.encode())).records[0]["id"] == "good"
    assert "longer" in expect_error(path, max_line_bytes=len(GOOD.encode()) - 1)


def test_missing_file_is_a_user_error_naming_the_path(tmp_path):
    path = str(tmp_path / "nope.jsonl")
    assert expect_error(path) == f"{path}: no such file"
    assert UserError.exit_code == 2


def test_unknown_format_option_is_a_user_error(tmp_path):
    path = write_lines(tmp_path / "in.jsonl", [GOOD])
    assert "unknown corpus format" in expect_error(path, fmt="parquet")


def test_explicit_format_rejects_lines_of_another_format(tmp_path):
    path = write_lines(tmp_path / "in.jsonl", [GOOD])
    assert expect_error(path, fmt="sharegpt") == f"{path}:1: conversations: missing (format sharegpt)"


# --------------------------------------------------------------------------- skip mode


def test_skip_mode_keeps_valid_lines_and_lists_each_bad_one(tmp_path):
    path = write_lines(tmp_path / "in.jsonl", [
        canon(raw("a")), "not json", canon(raw("b")), "[1]", canon(raw("a")), "",
        canon(raw("c")), b"\xfe\xff"])
    corpus = load_corpus(path, on_error="skip")
    assert [r["id"] for r in corpus.records] == ["a", "b", "c"]
    assert len(corpus.skipped) == 4
    assert [s.split(": ", 1)[0] for s in corpus.skipped] == [
        f"{path}:2", f"{path}:4", f"{path}:5", f"{path}:8"]
    assert "duplicate" in corpus.skipped[2]


def test_skip_mode_with_nothing_valid_left_raises(tmp_path):
    path = write_lines(tmp_path / "in.jsonl", ["nope", "[]"])
    message = expect_error(path, on_error="skip")
    assert "no valid records" in message and "2 lines skipped" in message


def test_skip_mode_records_an_empty_file_among_good_ones(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    good = write_lines(tmp_path / "good.jsonl", [GOOD])
    corpus = load_corpus([str(empty), good], on_error="skip")
    assert corpus.skipped == (f"{empty}:1: empty file, no records",)
    assert len(corpus.records) == 1


# --------------------------------------------------------------------------- ShareGPT


def test_sharegpt_with_function_calls_and_observations_converts_to_valid_canonical(tmp_path):
    line = {
        "conversations": [
            {"from": "human", "value": "Weather in Paris and Rome?"},
            {"from": "function_call", "value": json.dumps([
                {"name": "get_weather", "arguments": {"city": "Paris"}},
                {"name": "get_weather", "arguments": '{"city": "Rome"}'}])},
            {"from": "observation", "value": json.dumps([{"t": 20}, {"t": 25}])},
            {"from": "gpt", "value": "Paris 20, Rome 25."},
            {"from": "user", "value": "And Oslo?"},
            {"from": "function_call", "value": json.dumps({"name": "get_weather",
                                                           "arguments": {"city": "Oslo"}})},
            {"from": "tool", "value": "5 degrees"},
            {"from": "assistant", "value": "Oslo 5."},
        ],
        "system": "You are helpful.",
        "tools": json.dumps([{"name": "get_weather", "description": "weather by city",
                              "parameters": {"type": "object",
                                             "properties": {"city": {"type": "string"}}}}]),
        "category": "weather",
    }
    path = write_lines(tmp_path / "sg.jsonl", [json.dumps(line)])
    corpus = load_corpus(path)
    assert corpus.format == "sharegpt"
    rec = corpus.records[0]
    assert check_raw(rec) is None
    assert rec["id"] == "sg.jsonl:1"
    assert rec["task"] == "Weather in Paris and Rome?"
    assert rec["tools"][0] == {"type": "function", "function": {
        "name": "get_weather", "description": "weather by city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
    # one observation for two parallel calls is not split by guessing from its shape (a list as long as
    # the calls): it stays whole, the first call's result, and the next observation answers its own call
    assert [m["role"] for m in rec["messages"]] == [
        "system", "user", "assistant", "tool", "assistant", "user", "assistant", "tool", "assistant"]
    calls = rec["messages"][2]["tool_calls"]
    assert [c["id"] for c in calls] == ["call_0", "call_1"]
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [{"city": "Paris"},
                                                                        {"city": "Rome"}]
    assert (rec["messages"][3]["tool_call_id"], json.loads(rec["messages"][3]["content"])) == ("call_0", [{"t": 20}, {"t": 25}])
    assert rec["messages"][7] == {"role": "tool", "tool_call_id": "call_2", "content": "5 degrees"}
    assert [n for what, n in corpus.quirks if what.startswith("ShareGPT observations answering several")] == [1]
    assert rec["meta"]["extra"] == {"category": "weather"}
    assert rec["outcome"] == {"success": None, "reward": None}


def test_sharegpt_without_tools_synthesizes_them_and_keeps_given_id(tmp_path):
    line = {"id": "sg-7", "conversations": [
        {"from": "human", "value": "list"},
        {"from": "function_call", "value": '{"name": "ls", "arguments": {"path": "/", "all": true}}'},
        {"from": "observation", "value": "bin etc"},
        {"from": "gpt", "value": "bin and etc"}]}
    rec = load_corpus(write_lines(tmp_path / "sg.jsonl", [json.dumps(line)])).records[0]
    assert check_raw(rec) is None
    assert rec["id"] == "sg-7"
    assert rec["tools"] == [{"type": "function", "function": {"name": "ls", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}, "all": {"type": "boolean"}},
        "required": ["all", "path"]}}}]


def test_sharegpt_call_to_tool_missing_from_given_tools_is_reported(tmp_path):
    line = {"conversations": [
        {"from": "human", "value": "x"},
        {"from": "function_call", "value": '{"name": "rm", "arguments": {}}'}],
        "tools": [{"name": "ls", "parameters": {"type": "object"}}]}
    path = write_lines(tmp_path / "sg.jsonl", [json.dumps(line)])
    message = expect_error(path)
    assert message == (f"{path}:1: messages[1].tool_calls[0]: call to tool 'rm', which is not "
                       "in tools (in the canonical record converted from sharegpt); add its schema to "
                       "tools or leave the record out")


# --------------------------------------------------------------------------- ADP

ADP = {
    "schema_version": "1.5.0",
    "id": "adp_1",
    "content": [
        {"class_": "text_observation", "content": "Find the file size of a.txt", "source": "user",
         "name": None},
        {"class_": "api_action", "function": "list_dir", "kwargs": {"path": "."},
         "description": "Let me look.", "tool_call_id": "call_000001"},
        {"class_": "text_observation", "content": "a.txt b.txt", "source": "environment",
         "tool_call_id": "call_000001"},
        {"class_": "code_action", "language": "python3", "description": None,
         "content": "import os; print(os.path.getsize('a.txt'))", "reasoning_content": "hmm"},
        {"class_": "text_observation", "content": "42", "source": "environment"},
        {"class_": "web_observation", "url": "http://x", "axtree": "[1] button 'OK'",
         "html": "<html/>", "image_observation": None, "viewport_size": None},
        {"class_": "message_action", "content": "a.txt is 42 bytes.", "reward": 1.0},
    ],
    "details": {"dataset": "demo_adp"},
    "available_custom_tools": ["list_dir", "stat"],
}


def test_adp_trajectory_with_actions_and_observations_converts_to_valid_canonical(tmp_path):
    path = write_lines(tmp_path / "adp.jsonl", [json.dumps(ADP)])
    corpus = load_corpus(path)
    assert corpus.format == "adp"
    rec = corpus.records[0]
    assert check_raw(rec) is None
    assert rec["id"] == "adp/adp_1" and rec["source"] == "demo_adp"  # qualified by its file
    assert rec["task"] == "Find the file size of a.txt"
    msgs = rec["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "assistant", "tool", "user",
                                         "assistant"]
    assert msgs[1]["content"] == "Let me look."
    assert msgs[1]["tool_calls"][0]["function"] == {"name": "list_dir", "arguments": '{"path":"."}'}
    assert msgs[2]["tool_call_id"] == msgs[1]["tool_calls"][0]["id"]
    code_call = msgs[3]["tool_calls"][0]
    assert code_call["function"]["name"] == "execute_python"
    assert json.loads(code_call["function"]["arguments"]) == {
        "code": "import os; print(os.path.getsize('a.txt'))"}
    assert msgs[4] == {"role": "tool", "tool_call_id": code_call["id"], "content": "42"}
    assert msgs[5]["content"] == "URL: http://x\n[1] button 'OK'"
    assert msgs[6] == {"role": "assistant", "content": "a.txt is 42 bytes."}
    assert [t["function"]["name"] for t in rec["tools"]] == ["list_dir", "execute_python", "stat"]
    assert rec["meta"]["adp"]["details"] == {"dataset": "demo_adp"}
    assert rec["meta"]["adp"]["steps"] == [
        {"content_index": 3, "message_index": 3, "reasoning_content": "hmm"},
        {"content_index": 6, "message_index": 6, "reward": 1.0}]


def test_adp_ids_are_generated_deterministically_when_absent(tmp_path):
    traj = {"id": "db_1", "content": [
        {"class_": "text_observation", "content": "insert a row", "source": "user"},
        {"class_": "code_action", "language": "mysql", "content": "INSERT INTO t VALUES (1)",
         "description": "Insert it."},
        {"class_": "text_observation", "content": "1 row", "source": "environment"},
        {"class_": "api_action", "function": "a", "kwargs": {}},
        {"class_": "api_action", "function": "b", "kwargs": {"n": 1}},
        {"class_": "text_observation", "content": "ra", "source": "environment"},
        {"class_": "text_observation", "content": "rb", "source": "environment"}],
        "details": {}}
    path = write_lines(tmp_path / "adp.jsonl", [json.dumps(traj)])
    first = load_corpus(path).records[0]
    assert first == load_corpus(path).records[0]
    assert check_raw(first) is None
    msgs = first["messages"]
    assert msgs[1]["tool_calls"][0]["id"] == "call_0"
    assert msgs[1]["tool_calls"][0]["function"]["name"] == "execute_mysql"
    assert [c["id"] for c in msgs[3]["tool_calls"]] == ["call_1", "call_2"]  # parallel calls
    assert [(m["tool_call_id"], m["content"]) for m in msgs[4:]] == [("call_1", "ra"),
                                                                   ("call_2", "rb")]
    assert first["source"] == "adp"


def test_mixed_formats_in_one_file_load_as_mixed(tmp_path):
    sg = {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}
    path = write_lines(tmp_path / "mix.jsonl", [GOOD, json.dumps(sg), json.dumps(ADP)])
    corpus = load_corpus(path)
    assert corpus.format == "mixed"
    assert [r["id"] for r in corpus.records] == ["good", "mix.jsonl:2", "mix/adp_1"]


# --------------------------------------------------------------------------- size and hash


def test_huge_line_is_reported_and_skipped_without_holding_it_in_memory(tmp_path):
    path = tmp_path / "huge.jsonl"
    chunk = b"x" * 2**20
    with open(path, "wb") as f:
        f.write(b'{"id": "huge", "messages": [{"role": "user", "content": "')
        for _ in range(200):                   # ~200 MB on one line, written lazily
            f.write(chunk)
        f.write(b'"}]}\n')
        f.write(GOOD.encode() + b"\n")
    del chunk
    tracemalloc.start()
    try:
        corpus = load_corpus(path, on_error="skip", max_line_bytes=2**20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [r["id"] for r in corpus.records] == ["good"]
    assert len(corpus.skipped) == 1
    assert corpus.skipped[0].startswith(f"{path}:1: line is longer than max_line_bytes")
    assert peak < 8 * 2**20, f"peak {peak} bytes"
    assert corpus.sha256 == file_sha256(path)


def test_sha256_changes_with_a_one_byte_change(tmp_path):
    path = write_lines(tmp_path / "in.jsonl", [canon(raw("a"))])
    before = load_corpus(path).sha256
    data = bytearray(open(path, "rb").read())
    data[data.index(b'"a"') + 1] = ord("b")
    open(path, "wb").write(bytes(data))
    after = load_corpus(path)
    assert after.records[0]["id"] == "b"
    assert after.sha256 != before and after.sha256 == file_sha256(path)


def test_several_files_hash_over_names_and_file_hashes_in_order(tmp_path):
    import hashlib
    one = write_lines(tmp_path / "one.jsonl", [canon(raw("a"))])
    two = write_lines(tmp_path / "two.jsonl", [canon(raw("b"))])
    corpus = load_corpus([one, two])
    listing = f"one.jsonl\0{file_sha256(one)}\ntwo.jsonl\0{file_sha256(two)}\n"
    assert corpus.sha256 == hashlib.sha256(listing.encode()).hexdigest()
    assert corpus.paths == (one, two)
    assert load_corpus([two, one]).sha256 != corpus.sha256


# --------------------------------------------------------------------------- fast validation


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, prefix + (i,))


def _mutants(record):
    import copy
    replacements = [None, "", "x", "function", "user", 0, 1.5, True, [], {}, [{}], {"name": "cd"}]
    for path in _paths(record):
        if not path:
            continue
        for value in replacements + ["DELETE", "EXTRA"]:
            mutant = copy.deepcopy(record)
            parent = mutant
            for key in path[:-1]:
                parent = parent[key]
            if value == "DELETE":
                del parent[path[-1]]
            elif value == "EXTRA":
                if not isinstance(parent[path[-1]], dict):
                    continue
                parent[path[-1]]["zz_extra"] = 1
            else:
                parent[path[-1]] = value
            yield path, value, mutant


def test_fast_schema_path_gives_exactly_the_reference_verdict(tmp_path):
    from base.schemas import SCHEMAS, _schema_error, reference_schema_error
    adp = load_corpus(write_lines(tmp_path / "adp.jsonl", [json.dumps(ADP)])).records[0]
    seeds = [raw("a"), adp, {"id": "m", "messages": [{"role": "user", "content": None}]}]
    messages = raw("a")["messages"]
    curated = [("sft", {"id": "s", "messages": messages, "tools": TOOLS, "weights": [0, 1], "meta": {"x": [1]}}),
               ("rl", {"id": "r", "messages": messages[:1], "tools": TOOLS, "reward": "tool_call_match",
                       "reference": {"tool_calls": messages[1]["tool_calls"]}, "meta": {}}),
               ("rl", {"id": "q", "messages": messages[:3], "tools": TOOLS, "reward": "state_match",
                       "reference": {"content": "Done."}})]
    checked = 0
    for kind, seed in [("raw", seed) for seed in seeds] + curated:
        assert _schema_error(kind, seed) is None
        for path, value, mutant in _mutants(seed):
            assert _schema_error(kind, mutant) == reference_schema_error(kind, mutant), (kind, path, value)
            checked += 1
    assert checked > 2000
    assert set(SCHEMAS) == {"raw", "sft", "rl", "memory"}


# --------------------------------------------------------------------------- OpenAI variants


def test_openai_record_without_id_or_tools_gets_its_place_as_id_and_tools_from_its_calls(tmp_path):
    line = {"messages": [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Oslo?"}]},
        {"role": "assistant", "content": None,
         "function_call": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}},
        {"role": "function", "name": "get_weather", "content": "5 degrees"},
        {"role": "assistant", "content": "5 degrees.", "weight": 1, "refusal": None}]}
    rec = load_corpus(write_lines(tmp_path / "ft.jsonl", [json.dumps(line)])).records[0]
    assert check_raw(rec) is None and rec["id"] == "ft.jsonl:1"
    assert rec["messages"][0]["content"] == "Weather in Oslo?"
    call = rec["messages"][1]["tool_calls"][0]
    assert rec["messages"][2] == {"role": "tool", "tool_call_id": call["id"], "name": "get_weather",
                                  "content": "5 degrees"}
    assert [t["function"]["name"] for t in rec["tools"]] == ["get_weather"]
    assert rec["meta"]["message_extra"] == {"3": {"weight": 1}}


def test_a_call_id_reused_after_its_answer_is_renamed_so_each_result_answers_its_own_call(tmp_path):
    def turn(args):
        return [{"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "cd", "arguments": args}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    record = raw("reuse", messages=[{"role": "user", "content": "go"}, *turn('{"folder": "a"}'),
                                    *turn('{"folder": "b"}')], extra_key=1)
    rec = load_corpus(write_lines(tmp_path / "in.jsonl", [json.dumps(record)])).records[0]
    assert [m.get("tool_call_id") or m["tool_calls"][0]["id"] for m in rec["messages"][1:]] == [
        "c1", "c1", "c1~1", "c1~1"]


def test_an_image_part_is_refused_in_one_line_naming_the_fix(tmp_path):
    line = {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image_url", "image_url": {"url": "http://x/cat.png"}}]}]}
    path = write_lines(tmp_path / "in.jsonl", [GOOD, json.dumps(line)])
    assert expect_error(path) == (f"{path}:2: messages[0].content[1]: a part of type 'image_url' cannot be "
                                  "trained on a text model; drop the part (or the record) before "
                                  "loading")


def test_non_finite_numbers_and_lone_surrogates_are_one_line_each(tmp_path):
    """A number that overflows to infinity and a lone surrogate escape cannot be written back as
    canonical UTF-8 JSON: file:line and the reason, or skipped like any bad line."""
    from corpora import load_corpus as load

    good = '{"id":"a","messages":[{"role":"user","content":"add 2 and 3"},{"role":"assistant","content":"5"}]}'
    cases = {"inf.jsonl": (good.replace('"5"', '"5","x":1e999'), "the number 1e999 overflows to infinity"),
             "sur.jsonl": (good.replace('"5"', '"5\\ud800"'), "the escape \\ud800 is a lone surrogate")}
    for name, (bad, reason) in cases.items():
        path = tmp_path / name
        path.write_text(good + "\n" + bad.replace('"a"', '"b"') + "\n")
        with pytest.raises(UserError) as err:
            load([str(path)])
        assert f"{path}:2: " in str(err.value) and reason in str(err.value) and "not JSON: not" not in str(err.value)
        corpus = load([str(path)], on_error="skip")
        assert [r["id"] for r in corpus.records] == ["a"] and len(corpus.skipped) == 1
    pair = tmp_path / "pair.jsonl"   # a whole pair of escapes is one character: fine
    pair.write_text(good.replace('"5"', '"5\\ud83d\\ude00"') + "\n")
    assert load([str(pair)]).records[0]["messages"][1]["content"] == "5\U0001F600"
    array = tmp_path / "array.json"  # in an array, the bad element only: the next one is read on
    array.write_text("[" + good.replace('"5"', '"5\\udfff"') + "," + good.replace('"a"', '"c"') + "]")
    assert [r["id"] for r in load([str(array)], on_error="skip").records] == ["c"]


def test_a_cut_string_reads_starting_at_column_once(tmp_path):
    """The decoder's own "starting at" is not followed by a second "at"."""
    path = write_lines(tmp_path / "in.jsonl", [GOOD, '{"id": "b", "messages": "cut'])
    assert expect_error(path) == f"{path}:2: not JSON: Unterminated string starting at column 25"
    array = tmp_path / "in.json"
    array.write_text('[{"id": "b", "messages": "cut')
    with pytest.raises(UserError) as err:
        load_corpus([str(array)])
    assert "Unterminated string starting at line 1 column 26" in str(err.value) and "at at" not in str(err.value)


def test_a_tool_result_answering_an_unknown_call_blames_the_call(tmp_path):
    """The message really at fault is named: the call that is missing (or was written as text), or the
    extra result after every call was answered."""
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "type": "function",
                                                                   "function": {"name": "cd", "arguments": "{}"}}]}
    cases = {
        "unknown id": ([{"role": "user", "content": "hi"}, call, {"role": "tool", "tool_call_id": "b", "content": "x"}],
                       "messages[1].tool_calls: no call with id 'b', which the tool result messages[2] answers (its calls: 'a')"),
        "call as text": ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "cd(folder='x')"},
                          {"role": "tool", "content": "x"}],
                         "messages[1]: makes no tool call, yet messages[2] is a tool result answering one"),
        "extra result": ([{"role": "user", "content": "hi"}, call, {"role": "tool", "tool_call_id": "a", "content": "x"},
                          {"role": "tool", "content": "y"}],
                         "messages[3]: a tool result, but every call of messages[1] ('a') is answered already"),
    }
    for name, (messages, expected) in cases.items():
        path = write_lines(tmp_path / f"{name}.jsonl", [_bad_message_record(messages=messages)])
        assert expected in expect_error(path), name


def test_a_large_staged_corpus_is_written_in_two_halves_with_the_bytes_of_one_pass(tmp_path, monkeypatch):
    """At SPLIT_BYTES and over, a forked child writes the second half at its place while the host
    writes the first; a failed child's half is written by the host, and halves whose lines come out
    longer than stored are written again in one pass: the file is always what one pass writes."""
    from base import codec, forked
    from conftest import SAMPLE_CORPUS
    from corpora import stored

    records = load_corpus([SAMPLE_CORPUS]).records
    views = {"all": records, "some": records.subset(range(1, len(records), 3)), "one": records.subset([4])}
    halves = []
    worker = forked.Worker
    monkeypatch.setattr(stored.forked, "Worker", lambda *a: halves.append(a[1:]) or worker(*a))
    monkeypatch.setattr(stored, "SPLIT_BYTES", 1)

    def staged(view, name) -> bytes:
        view.write_canonical(str(tmp_path / name))
        return (tmp_path / name).read_bytes()

    for name, view in views.items():
        assert staged(view, name) == b"".join(view.canonical_lines())
        assert len(halves) == (name != "one")   # a lone record: one pass
        assert not halves or 0 < len(halves.pop()[0]) < len(view)

    def failing(view, path, at):
        raise OSError("the child cannot write")
        yield

    monkeypatch.setattr(stored, "_write_half", failing)
    assert staged(records, "failed-child") == b"".join(records.canonical_lines())
    encode = codec.encode
    monkeypatch.setattr(codec, "encode", lambda value: encode(value) + b" ")   # lines longer than stored
    assert staged(records, "longer") == b"".join(records.canonical_lines()) and b"} \n" in (tmp_path / "longer").read_bytes()


def test_a_large_corpus_is_read_in_two_halves_with_the_results_of_one_pass(monkeypatch):
    """`StoredRecords.mapped` (the split's scan): a forked child maps the second half, its results
    spooled a chunk at a time; a child lost after its first chunk leaves its half to the host; the
    results and their order are one pass's."""
    from conftest import SAMPLE_CORPUS
    from corpora import split, stored

    records = load_corpus([SAMPLE_CORPUS]).records
    view = records.subset(range(len(records) - 1, -1, -2))
    one_pass = [(r["id"], len(r["messages"])) for r in view]
    monkeypatch.setattr(stored, "SPLIT_BYTES", 1)
    forks, spooled = [], stored.forked.Spooled
    monkeypatch.setattr(stored.forked, "Spooled", lambda *a: forks.append(len(a[1])) or spooled(*a))
    fn = lambda r: (r["id"], len(r["messages"]))  # noqa: E731
    assert list(view.mapped(fn, chunk=2)) == one_pass == list(view.mapped(fn, chunk=1000))
    assert split.scan(records) == split.scan(list(records))
    assert len(forks) == 3 and all(0 < n < len(records) for n in forks)

    def lost_after_one(records, fn, chunk):
        yield [fn(r) for r in list(records)[:chunk]]
        raise OSError("the child went away")

    monkeypatch.setattr(stored, "_mapped_chunks", lost_after_one)
    assert list(view.mapped(fn, chunk=3)) == one_pass
