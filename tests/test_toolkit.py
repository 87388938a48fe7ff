"""The operator toolkit strategies import: each operator's behaviour on small, realistic
tool-use trajectories (BFCL's Gorilla file system and a templated weather API)."""
from __future__ import annotations

import ast
import copy
import json
import random
from pathlib import Path

import pytest

from curation_strategies import toolkit as tk
from base.schemas import check_memory, check_raw, check_rl, check_sft

TOOLKIT_DIR = Path(tk.__file__).parent


# --- fixtures: canonical raw corpus records (DESIGN "Raw corpus record") ----------------------

def function(name, description, properties, required=()):
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": list(required)}}}


FS_BLURB = "This tool belongs to the Gorilla file system. Tool description: "
FS_TOOLS = [
    function("cd", FS_BLURB + "Change the current working directory to the specified folder.",
             {"folder": {"type": "string"}}, ["folder"]),
    function("ls", FS_BLURB + "List the contents of the current directory.", {"a": {"type": "boolean"}}),
    function("mkdir", FS_BLURB + "Create a new directory in the current directory.",
             {"dir_name": {"type": "string"}}, ["dir_name"]),
    function("mv", FS_BLURB + "Move a file or directory from one location to another.",
             {"source": {"type": "string"}, "destination": {"type": "string"}}, ["source", "destination"]),
    function("grep", FS_BLURB + "Search for lines in a file that contain the specified pattern.",
             {"file_name": {"type": "string"}, "pattern": {"type": "string"}}, ["file_name", "pattern"]),
    function("cat", FS_BLURB + "Display the contents of a file.", {"file_name": {"type": "string"}}, ["file_name"]),
]
WEATHER_TOOLS = [function("get_weather", "Current weather for a city.",
                          {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                          ["city"])]
SYSTEM = {"role": "system", "content": "You are an agent that uses the tools to do what the user asks."}
ENV = {"benchmark": "bfcl_multi_turn", "task_id": "multi_turn_base_0", "variant": "base"}


def call(cid, name, **args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def assistant(*calls, content=None):
    message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = list(calls)
    return message


def result(cid, payload):
    return {"role": "tool", "tool_call_id": cid, "content": payload if isinstance(payload, str) else json.dumps(payload)}


def user(text):
    return {"role": "user", "content": text}


def raw(id, messages, tools=FS_TOOLS, task=None, success=None, env=None, source="bfcl_multi_turn"):
    record = {"id": id, "source": source, "task": task or next(m["content"] for m in messages if m["role"] == "user"),
              "tools": tools, "messages": messages, "outcome": {"success": success, "reward": None}, "meta": {}}
    if env:
        record["meta"]["env"] = env
    assert check_raw(record) is None, check_raw(record)
    return record


def cd_recovery(id="fs-cd-recovery", file="final_report.pdf"):
    """Two user requests; a failing `cd` then recovery by `ls`, and a `grep` in the wrong folder
    then recovery by `cd`. Assistant turns at 2 4 6 8 10 12 | 14 16 18 20; errors at 2 and 14."""
    return raw(id, [
        SYSTEM,                                                                                   # 0
        user(f"Move '{file}' within document directory to 'temp' directory in document. "
             "Make sure to create the directory."),                                               # 1
        assistant(call("c1", "cd", folder="temp")),                                               # 2
        result("c1", {"error": "cd: temp: No such file or directory"}),                           # 3
        assistant(call("c2", "ls", a=True)),                                                      # 4
        result("c2", {"current_directory_content": ["document", "archive"]}),                     # 5
        assistant(call("c3", "cd", folder="document")),                                           # 6
        result("c3", {"current_working_directory": "document"}),                                  # 7
        assistant(call("c4", "mkdir", dir_name="temp")),                                          # 8
        result("c4", "None"),                                                                     # 9
        assistant(call("c5", "mv", source=file, destination="temp")),                             # 10
        result("c5", {"result": f"'{file}' moved to 'temp/{file}'"}),                             # 11
        assistant(content=f"I created document/temp and moved {file} into it."),                  # 12
        user("Search the file for sections about 'budget analysis'."),                            # 13
        assistant(call("c6", "grep", file_name=file, pattern="budget analysis")),                 # 14
        result("c6", {"error": f"grep: {file}: No such file or directory"}),                      # 15
        assistant(call("c7", "cd", folder="temp")),                                               # 16
        result("c7", {"current_working_directory": "temp"}),                                      # 17
        assistant(call("c8", "grep", file_name=file, pattern="budget analysis")),                 # 18
        result("c8", {"matching_lines": ["This is the final report content including budget analysis."]}),  # 19
        assistant(content="One line mentions budget analysis."),                                  # 20
    ], success=True, env=ENV)


def abandoned(id="fs-abandoned", folder="reports"):
    """The agent fails to `cd` and gives up with text."""
    return raw(id, [
        user(f"Show me notes.txt in the {folder} folder."),
        assistant(call("c1", "cd", folder=folder)),
        result("c1", {"error": f"cd: {folder}: No such file or directory"}),
        assistant(content=f"I could not find a folder named {folder}."),
    ], success=False)


def missing_param(id="fs-missing-param"):
    """An invalid `mv` (no destination), corrected by a valid one."""
    return raw(id, [
        user("Move a.txt into the archive folder."),
        assistant(call("c1", "mv", source="a.txt")),
        result("c1", "Error: mv() missing 1 required positional argument: 'destination'"),
        assistant(call("c2", "mv", source="a.txt", destination="archive")),
        result("c2", {"result": "'a.txt' moved to 'archive/a.txt'"}),
        assistant(content="Moved."),
    ], success=True)


def list_files(id="fs-list", text="What files are in the current directory?", cid="c1"):
    return raw(id, [
        user(text),
        assistant(call(cid, "ls")),
        result(cid, {"current_directory_content": ["notes.txt", "todo.md"]}),
        assistant(content="notes.txt and todo.md."),
    ], success=True)


def read_notes(id="fs-notes", redundant=False):
    """List the folder, read notes.txt, grep it; with `redundant`, `ls` is asked twice in a row
    with the same answer (a redundant read) at message 3."""
    listing = {"current_directory_content": ["notes.txt", "todo.md"]}
    again = [assistant(call("c0", "ls")), result("c0", listing)] if redundant else []
    return raw(id, [
        user("List the files here, then show notes.txt and find its TODO lines."),
        assistant(call("c1", "ls")), result("c1", listing), *again,
        assistant(call("c2", "cat", file_name="notes.txt")), result("c2", {"file_content": "TODO: call Bob\nlunch"}),
        assistant(call("c3", "grep", file_name="notes.txt", pattern="TODO")), result("c3", {"matching_lines": ["TODO: call Bob"]}),
        assistant(content="notes.txt has one TODO: call Bob."),
    ], success=True)


def weather(city, id=None):
    return raw(id or f"weather-{city.lower()}", [
        user(f"What is the weather in {city} today? Answer in celsius please."),
        assistant(call("w1", "get_weather", city=city, unit="celsius")),
        result("w1", {"city": city, "temperature": 18, "unit": "celsius"}),
        assistant(content=f"It is 18 degrees in {city}."),
    ], tools=WEATHER_TOOLS, source="weather", success=True)


def chat_only(id="chat-only"):
    return raw(id, [user("Hello?")])


CITIES = ["Paris", "Berlin", "Madrid", "Rome", "Vienna", "Prague", "Lisbon", "Dublin", "Oslo", "Warsaw"]


def corpus():
    """A small corpus in file order: recoveries, an abandoned run, copies, paraphrases,
    templated tasks and a trajectory without assistant messages."""
    return [cd_recovery(), abandoned(), missing_param(), list_files(),
            list_files("fs-list-copy", cid="x9"),
            list_files("fs-list-paraphrase", text="Please tell me what files are in the current directory."),
            *[weather(c) for c in CITIES[:4]], chat_only()]


def assert_valid(curated_or_records, kind=None):
    if kind is None:
        for kind in ("sft", "rl", "memory"):
            assert_valid(getattr(curated_or_records, kind), kind)
        return
    check = {"sft": check_sft, "rl": check_rl, "memory": check_memory}[kind]
    for record in curated_or_records:
        assert check(record) is None, (record["id"], check(record))
    ids = [r["id"] for r in curated_or_records]
    assert len(ids) == len(set(ids)), f"duplicate {kind} ids"


# --- calls ---------------------------------------------------------------------------------

def test_validate_call_accepts_a_well_formed_call_and_names_each_defect():
    assert tk.validate_call(call("c", "mv", source="a", destination="b"), FS_TOOLS) is None
    assert tk.validate_call(call("c", "ls"), FS_TOOLS) is None  # no required parameters
    assert "not offered" in tk.validate_call(call("c", "rm", path="a"), FS_TOOLS)
    broken = {"id": "c", "type": "function", "function": {"name": "cd", "arguments": "{folder: x"}}
    assert "not a JSON object" in tk.validate_call(broken, FS_TOOLS)
    assert "missing required parameter 'destination'" in tk.validate_call(call("c", "mv", source="a"), FS_TOOLS)
    assert "unknown parameter 'path'" in tk.validate_call(call("c", "cd", folder="a", path="b"), FS_TOOLS)
    assert "should be boolean" in tk.validate_call(call("c", "ls", a="yes"), FS_TOOLS)
    assert "not one of" in tk.validate_call(call("c", "get_weather", city="Oslo", unit="kelvin"), WEATHER_TOOLS)


def test_validate_call_understands_bfcl_python_type_names():
    tools = [function("sort", "", {"opts": {"type": "dict"}, "k": {"type": "float"}, "x": {"type": "any"}})]
    assert tk.validate_call(call("c", "sort", opts={"a": 1}, k=2, x=[1]), tools) is None
    assert "should be dict" in tk.validate_call(call("c", "sort", opts=[1]), tools)


def test_call_signature_is_canonical_and_call_sequence_lists_every_call():
    a = {"id": "1", "type": "function", "function": {"name": "mv", "arguments": '{"source": "a", "destination": "b"}'}}
    b = {"id": "2", "type": "function", "function": {"name": "mv", "arguments": '{"destination":"b","source":"a"}'}}
    assert tk.call_signature(a) == tk.call_signature(b) == 'mv(destination="b", source="a")'
    assert tk.call_sequence(abandoned()) == ['cd(folder="reports")']
    assert len(tk.call_sequence(cd_recovery())) == 8
    # remembered by name and argument text; arguments that are not a JSON object's text say so
    again = copy.deepcopy(a)
    assert tk.call_signature(again) == tk.call_signature(a)
    for bad in ('[1, 2]', "{", {"source": "a"}):
        assert tk.call_signature({"function": {"name": "mv", "arguments": bad}}) == "mv(<invalid arguments>)"
    assert tk.call_signature({"function": {"name": "ls", "arguments": ""}}) == "ls()" == \
        tk.call_signature({"function": {"name": "ls", "arguments": None}})


# --- errors --------------------------------------------------------------------------------

def test_error_message_detects_error_keys_tracebacks_and_shell_errors_but_not_file_contents():
    assert tk.error_message('{"error": "cd: temp: No such file or directory"}') == "cd: temp: No such file or directory"
    assert tk.is_error_result("Traceback (most recent call last):\n  File ...\nKeyError: 'x'")
    assert tk.is_error_result("Error: mv() missing 1 required positional argument")
    assert tk.is_error_result("ValueError: invalid literal for int()")
    assert tk.is_error_result("cat: notes.txt: No such file or directory")
    assert tk.is_error_result('{"success": false, "message": "Booking not found"}')
    assert not tk.is_error_result('{"file_content": "Error: this log line is data, not a failure"}')
    assert not tk.is_error_result('{"error": null, "result": "ok"}')
    assert not tk.is_error_result("None")
    assert not tk.is_error_result("The errors section of the report lists three items.")


def test_error_message_recognises_python_errors_surfaced_by_an_environment():
    text = "Error during execution: TravelAPI.purchase_insurance() missing 1 required positional argument: 'booking_id'"
    assert tk.error_message(text) == text
    assert tk.is_error_result("send() got an unexpected keyword argument 'to'")
    assert tk.is_error_result('{"cancel_status": false, "error": "Booking not found"}')


def test_error_message_shortcuts_answer_as_the_patterns_would():
    """The needles and the JSON first-character check only skip work: every answer is the one the
    plain json.loads-then-every-pattern reading gives, non-ASCII look-alikes and JSON literals included."""
    from curation_strategies.toolkit.errors import ERROR_PATTERNS

    def plain(content):
        if not content:
            return None
        try:
            data = json.loads(content)
        except ValueError:
            data = content
        if isinstance(data, dict):
            return tk.error_message(content)   # the dict branch is unchanged; the shortcuts are before it
        return data.strip() if isinstance(data, str) and any(p.search(data) for p in ERROR_PATTERNS) else None

    samples = ["No ſuch file or directory", "ValueError: bad", "  error: x", "all fine", "\u212aeyError: x",
               '"Error: quoted"', '["error"]', "null", "nothing here", "Infinity", "-1", "tru", "\x0b{}",
               " \n{\"error\": \"E\"}", "mv: cannot move", "FAILED to start", "Permission Denied", "İnvalid",
               "[1, 2", "{not json", "  ", "Traceback (most recent call last):\n  boom", "missing 1 required argument"]
    answers = [tk.error_message(s) for s in samples]
    assert answers == [plain(s) for s in samples]
    assert answers[0] == "No ſuch file or directory"   # IGNORECASE's long s: decided by the patterns, not the needles
    assert answers[3] is None and answers[5] == "Error: quoted" and answers[6] is None


def test_turn_errors_trust_a_successful_result_over_the_schema():
    tools = [function("close_ticket", "Close a ticket.", {"ticket_id": {"type": "integer"}}, ["ticket_id"])]
    accepted = raw("accepted", [user("Close ticket_001."), assistant(call("c1", "close_ticket", ticket_id="ticket_001")),
                                result("c1", {"status": "Ticket ticket_001 has been closed successfully."}),
                                assistant(content="Closed.")], tools=tools)
    assert tk.turn_errors(accepted) == {}
    unanswered = raw("unanswered", accepted["messages"][:2], tools=tools)
    assert tk.turn_errors(unanswered) == {1: "close_ticket: parameter 'ticket_id' should be integer"}
    assert tk.turn_errors(unanswered, validate=False) == {}


def test_redundant_turns_are_repeated_successful_calls_without_a_state_change_between():
    assert tk.redundant_turns(read_notes(redundant=True)) == [3]
    assert tk.redundant_turns(read_notes()) == []
    # Re-running a call that failed is a retry, and re-reading after cd is a new question.
    assert tk.redundant_turns(cd_recovery()) == []
    reread = raw("reread", [user("List, enter docs, list."), assistant(call("c1", "ls")), result("c1", {"current_directory_content": ["docs"]}),
                            assistant(call("c2", "cd", folder="docs")), result("c2", {"current_working_directory": "docs"}),
                            assistant(call("c3", "ls")), result("c3", {"current_directory_content": []}),
                            assistant(content="docs is empty.")])
    assert tk.redundant_turns(reread) == []


def test_turn_errors_flag_failed_calls_and_invalid_calls():
    assert tk.turn_errors(cd_recovery()) == {2: "cd: temp: No such file or directory",
                                             14: "grep: final_report.pdf: No such file or directory"}
    assert tk.turn_errors(missing_param()) == {1: "mv: missing required parameter 'destination'"}
    assert tk.erroneous_turns(missing_param(), validate=False) == [1]  # its result is an error too
    assert tk.turn_errors(list_files()) == {}


def test_corrections_map_each_error_to_the_first_successful_call_of_the_same_request():
    assert tk.corrections(cd_recovery()) == {2: 4, 14: 16}
    assert tk.corrections(abandoned()) == {1: None}
    # An error left at the end of one request is not "corrected" by a call for the next request.
    later = raw("later", abandoned()["messages"] + [user("Then list the files."), assistant(call("c2", "ls")),
                                                     result("c2", {"current_directory_content": []})])
    assert tk.corrections(later) == {1: None}
    assert tk.corrected_turns(cd_recovery()) == [2, 14] and tk.uncorrected_turns(later) == [1]


# --- dedup ---------------------------------------------------------------------------------

def test_exact_dedup_drops_copies_that_differ_only_in_call_ids_and_keeps_the_first():
    records = [list_files("a"), list_files("b", cid="zz"), list_files("c", text="List the files here.")]
    assert tk.content_hash(records[0]) == tk.content_hash(records[1]) != tk.content_hash(records[2])
    assert tk.exact_duplicates(records) == {"b": "a"}
    assert [r["id"] for r in tk.exact_dedup(records)] == ["a", "c"]


def test_near_dedup_merges_paraphrased_duplicates_but_not_templated_tasks_with_different_calls():
    templated = [weather(c) for c in CITIES]
    # The instructions alone are near-identical: a whole-text signature would merge them.
    paris, berlin = (tk.task_shingles(tk.task_text(r)) for r in templated[:2])
    assert len(paris & berlin) / len(paris | berlin) >= 0.7
    records = [list_files(), *templated, list_files("fs-list-paraphrase",
                                                    text="Please tell me what files are in the current directory.")]
    assert tk.near_duplicates(records) == {"fs-list-paraphrase": "fs-list"}
    assert [r["id"] for r in tk.near_dedup(records)] == [r["id"] for r in records[:-1]]


def test_near_dedup_keeps_the_first_of_each_cluster_in_corpus_order():
    para = list_files("para", text="Please tell me what files are in the current directory.")
    records = [para, list_files("orig"), list_files("orig-2", text="Tell me what files are in the current directory.")]
    assert tk.near_duplicates(records) == {"orig": "para", "orig-2": "para"}
    assert [r["id"] for r in tk.near_dedup(records)] == ["para"]


def test_near_dedup_prefer_chooses_which_member_of_a_cluster_is_kept():
    records = [read_notes("redundant", redundant=True), read_notes("clean")]
    assert tk.near_duplicates(records) == {"clean": "redundant"}
    prefer_clean = lambda r: len(tk.redundant_turns(r))  # noqa: E731
    assert tk.near_duplicates(records, prefer=prefer_clean) == {"redundant": "clean"}
    assert [r["id"] for r in tk.near_dedup(records, prefer=prefer_clean)] == ["clean"]


def test_near_dedup_is_seeded_and_independent_of_python_hashing():
    records = corpus()
    assert tk.near_duplicates(records, seed=7) == tk.near_duplicates(copy.deepcopy(records), seed=7)


# --- filters -------------------------------------------------------------------------------

def test_is_abandoned_and_is_empty_recognise_given_up_and_unanswered_trajectories():
    assert tk.is_abandoned(abandoned()) and not tk.is_empty(abandoned())
    assert tk.is_empty(chat_only()) and tk.is_abandoned(chat_only())
    assert not tk.is_abandoned(cd_recovery()) and not tk.is_abandoned(missing_param())
    # Ending on a user message is not giving up (tau-bench's user closes the conversation).
    closed = raw("closed", list_files()["messages"] + [user("Thanks, that's all. ###STOP###")])
    assert not tk.is_abandoned(closed)
    stopped = raw("stopped", list_files()["messages"][:3])  # a call's result and then nothing
    assert tk.is_abandoned(stopped)
    assert not tk.is_abandoned({**stopped, "outcome": {"success": True, "reward": 1.0}})
    assert [r["id"] for r in tk.drop_abandoned(corpus())] == [
        r["id"] for r in corpus() if r["id"] not in ("fs-abandoned", "chat-only")]


def test_filters_by_turns_tokens_outcome_and_tool_use_keep_corpus_order():
    records = corpus()
    assert [tk.n_turns(r) for r in records[:3]] == [10, 2, 3]
    assert [r["id"] for r in tk.by_turns(records, min_turns=3, max_turns=9)] == ["fs-missing-param"]
    assert [r["id"] for r in tk.by_tokens(records, max_tokens=30)] == ["fs-list", "fs-list-copy", "chat-only"]
    assert "fs-abandoned" not in {r["id"] for r in tk.by_outcome(records)}
    assert [r["id"] for r in tk.by_outcome(records, success=False)] == ["fs-abandoned", "chat-only"]
    assert "chat-only" not in {r["id"] for r in tk.by_outcome(records, keep_unknown=False)}
    assert [r["id"] for r in tk.with_tool_calls(records)] == [r["id"] for r in records[:-1]]


def test_by_outcome_uses_the_reward_when_success_is_not_recorded():
    low, high = list_files("low"), list_files("high")
    low["outcome"], high["outcome"] = {"success": None, "reward": 0.2}, {"success": None, "reward": 0.9}
    assert [r["id"] for r in tk.by_outcome([low, high], min_reward=0.5, keep_unknown=False)] == ["high"]


def test_truncate_cuts_where_every_call_keeps_its_result_and_stays_a_valid_record():
    source = cd_recovery()
    cut = tk.truncate(source, max_turns=3)
    assert cut["messages"] == source["messages"][:8] and cut["messages"][-1]["role"] == "tool"
    assert check_raw(cut) is None and check_sft(tk.sft_record(cut)) is None
    # At the request boundary the dangling user message is dropped.
    assert tk.truncate(source, max_turns=6)["messages"] == source["messages"][:13]
    assert tk.truncate(source, max_tokens=tk.trajectory_tokens(source["messages"][:5]))["messages"] == source["messages"][:4]
    assert tk.truncate(source, max_tokens=1) is None
    assert source == cd_recovery()  # the corpus record is untouched


# --- masking -------------------------------------------------------------------------------

def test_refinement_weights_mask_exactly_the_erroneous_turns_that_are_corrected_later():
    source = cd_recovery()
    weights = tk.refinement_weights(source)
    assert weights == [0, 1, 1, 1, 1, 1, 0, 1, 1, 1]
    assert tk.masked_indices(source, weights) == [2, 14]
    assert tk.refinement_weights(missing_param()) == [0, 1, 1]
    # An uncorrected error is not a refinement: masked only on request.
    assert tk.refinement_weights(abandoned()) == [1, 1]
    assert tk.refinement_weights(abandoned(), mask_uncorrected=True) == [0, 1]
    record = tk.sft_record(source, weights)
    assert check_sft(record) is None and record["weights"] == weights


def test_trainable_is_false_only_when_every_turn_is_masked():
    assert tk.trainable(None) and tk.trainable([0, 1]) and not tk.trainable([0, 0])


# --- records -------------------------------------------------------------------------------

def test_sft_record_copies_the_trajectory_and_records_origin_env_and_tags():
    source = cd_recovery()
    record = tk.sft_record(source, tags=["x"])
    stamp = record["meta"].pop("provenance")
    assert record["meta"] == {"origin": ["fs-cd-recovery"], "tags": ["x"], "env": ENV}
    assert stamp["steps"] == [{"op": "sft_record", "how": "kept"}]
    assert "weights" not in record and check_sft(record) is None
    record["messages"][0]["content"] = "changed"
    assert source["messages"][0]["content"] == SYSTEM["content"]
    assert "env" not in tk.sft_record(list_files())["meta"]
    with pytest.raises(ValueError):
        tk.sft_record(source, [1, 1])
    with pytest.raises(ValueError):
        tk.sft_record(list_files(), [0, 0])


# --- segmentation --------------------------------------------------------------------------

def test_decision_points_follow_errors_new_requests_and_state_changes():
    assert tk.decision_points(cd_recovery()) == [
        (4, "after_error"), (8, "state_change"), (10, "state_change"), (12, "state_change"),
        (14, "new_request"), (16, "after_error"), (18, "state_change")]
    assert tk.is_state_changing("mkdir") and tk.is_state_changing("bookFlight")
    assert not tk.is_state_changing("ls") and not tk.is_state_changing("get_weather")


def test_segment_splits_a_long_trajectory_at_decision_points_with_weight_zero_context():
    source = cd_recovery()
    m = source["messages"]
    segments = tk.segment(source, tk.refinement_weights(source), max_turns=4, context_turns=1)
    assert [(s.start, s.kind) for s in segments] == [(2, "start"), (10, "state_change"), (16, "after_error")]
    first, middle, last = segments
    assert first.messages == m[:10] and first.weights == [0, 1, 1, 1]
    # The later request's segment: system, its user request, one context turn, then its own turns.
    assert last.messages == [m[0], m[13]] + m[14:21] and last.weights == [0, 1, 1, 1]
    assert middle.messages == [m[0], m[1]] + m[8:16] and middle.weights == [0, 1, 1, 0]
    for s in segments:
        assert check_sft(tk.sft_record(source, s.weights, id=f"seg{s.start}", messages=s.messages)) is None


def test_segment_leaves_a_short_trajectory_whole_and_drops_segments_that_train_nothing():
    source = cd_recovery()
    whole = tk.segment(source, max_turns=10)
    assert len(whole) == 1 and whole[0].messages == source["messages"] and whole[0].weights == [1] * 10
    # With max_turns=1 and no context, the masked first turn alone would train nothing.
    tiny = tk.segment(source, tk.refinement_weights(source), max_turns=1, context_turns=0)
    assert 2 not in [s.start for s in tiny] and len(tiny) == 8


# --- RL ------------------------------------------------------------------------------------

def test_rl_record_prompt_is_the_prefix_and_reference_the_recorded_call():
    source = cd_recovery()
    record = tk.rl_record(source, 4)
    assert record["messages"] == source["messages"][:4] and record["messages"][-1]["role"] == "tool"
    assert record["reference"] == {"tool_calls": source["messages"][4]["tool_calls"]}
    assert record["reward"] == "state_match" and record["meta"]["env"] == ENV
    assert record["meta"]["origin"] == ["fs-cd-recovery"] and record["meta"]["step"] == 4
    assert check_rl(record) is None
    plain = tk.rl_record(weather("Oslo"), 1)
    assert plain["reward"] == "tool_call_match" and check_rl(plain) is None
    final = tk.rl_record(source, 12)
    assert final["reference"] == {"content": "I created document/temp and moved final_report.pdf into it."}
    assert check_rl(final) is None


def test_rl_record_is_none_when_the_prefix_does_not_end_with_user_or_tool():
    source = raw("two-step", [user("hi"), assistant(content="Let me look."), assistant(call("c1", "ls")),
                              result("c1", {"current_directory_content": []})])
    assert tk.rl_record(source, 2) is None
    assert tk.tool_call_steps(source) == []


def test_step_selection_recovery_clean_and_seeded_sample():
    source = cd_recovery()
    assert tk.tool_call_steps(source) == [2, 4, 6, 8, 10, 14, 16, 18]
    assert tk.clean_steps(source) == [4, 6, 8, 10, 16, 18]
    assert tk.recovery_steps(source) == [4, 16]
    steps = list(range(100))
    sample = tk.sample_steps(steps, random.Random("1:rl"), fraction=0.1)
    assert sample == sorted(sample) and len(sample) == 10
    assert sample == tk.sample_steps(steps, random.Random("1:rl"), fraction=0.1)
    assert sample != tk.sample_steps(steps, random.Random("2:rl"), fraction=0.1)
    assert tk.sample_steps(steps, random.Random(0), k=500) == steps
    assert_valid(tk.rl_records(source, tk.tool_call_steps(source)), "rl")


# --- memory --------------------------------------------------------------------------------

def test_tool_signature_memories_give_one_compact_signature_per_tool():
    memories = tk.tool_signature_memories(corpus())
    assert [m["id"] for m in memories] == [f"mem-tool-{t['function']['name']}" for t in FS_TOOLS + WEATHER_TOOLS]
    cd = memories[0]
    assert cd["content"] == "cd(folder: string) - Change the current working directory to the specified folder."
    assert cd["key"].split()[:2] == ["cd", "folder"] and "gorilla" not in cd["key"]
    assert "ls(a?: boolean)" in memories[1]["content"]
    assert [m["meta"]["tool"] for m in tk.tool_signature_memories(corpus(), only_called=True)] == [
        "cd", "ls", "mkdir", "mv", "grep", "get_weather"]
    assert_valid(memories, "memory")


def test_error_constraints_group_one_failure_across_arguments_and_name_the_recovery():
    records = [cd_recovery(), abandoned(), abandoned("fs-abandoned-2", folder="drafts"), missing_param()]
    constraints = tk.error_constraints(records)
    assert [c["meta"]["tool"] for c in constraints] == ["cd", "grep", "mv"]
    cd = constraints[0]
    assert cd["meta"]["count"] == 3
    assert "cd: <folder>: No such file or directory" in cd["content"]
    assert 'Recovered by: ls(a=true)' in cd["content"]
    assert tk.error_template("grep: final_report.pdf: No such file or directory (line 12)",
                             {"file_name": "final_report.pdf"}) == "grep: <file_name>: No such file or directory (line <n>)"
    assert [c["meta"]["tool"] for c in tk.error_constraints(records, min_count=2)] == ["cd"]
    assert_valid(constraints, "memory")


def test_task_family_facts_summarise_families_seen_often_enough():
    facts = tk.task_family_facts(corpus())
    families = [f["meta"]["family"] for f in facts]
    assert families == [tk.family_of(cd_recovery()), tk.family_of(weather("Oslo"))]
    weather_fact = facts[1]
    assert weather_fact["content"] == "In 4 similar tasks the agent used: get_weather. They usually start with get_weather."
    assert "weather" in weather_fact["key"].split()
    assert_valid(facts, "memory")


def test_cap_tokens_keeps_records_in_order_within_the_budget():
    memories = tk.tool_signature_memories(corpus())
    sizes = [tk.memory_tokens(m) for m in memories]
    capped = tk.cap_tokens(memories, sizes[0] + sizes[1])
    assert [m["id"] for m in capped] == [m["id"] for m in memories[:2]]
    assert sum(tk.memory_tokens(m) for m in tk.cap_tokens(memories, 100)) <= 100
    assert tk.cap_tokens(memories, 0) == []


def test_retrieval_key_keeps_salient_words_once_in_order():
    assert tk.retrieval_key("get_weather", "What is the weather in Paris?", "bookFlight") == \
        "get weather paris book flight"


# --- stats ---------------------------------------------------------------------------------

def test_corpus_stats_count_turns_tool_frequencies_errors_and_outcomes():
    stats = tk.corpus_stats(corpus())
    assert stats["trajectories"] == 11 and stats["with_tool_calls"] == 10
    assert stats["assistant_turns"]["total"] == 10 + 2 + 3 + 2 * 3 + 2 * 4
    # Most frequent first, ties by name: deterministic whatever the corpus order.
    assert stats["tool_frequency"] == {"cd": 4, "get_weather": 4, "ls": 4, "mv": 3, "grep": 2, "mkdir": 1}
    assert stats["error_rate"] == round(4 / 18, 4)
    assert stats["erroneous_turns"] == 4 and stats["tool_call_turns"] == 8 + 1 + 2 + 3 * 1 + 4
    assert stats["outcomes"] == {"success": 9, "failure": 1, "unknown": 1}
    assert json.dumps(stats) == json.dumps(tk.corpus_stats(corpus()))


def test_curated_stats_report_cost_train_and_masked_turns():
    source = cd_recovery()
    curated = tk.Curated(sft=[tk.sft_record(source, tk.refinement_weights(source))],
                         rl=tk.rl_records(source, [4, 16]), memory=tk.error_constraints([source]))
    stats = tk.curated_stats(curated)
    assert stats["cost_train"] == 10 + (1 + 1) + (7 + 1)
    assert stats["sft_turns"] == {"trained": 8, "masked": 2}
    assert stats["rl_rewards"] == {"state_match": 2} and stats["memory"] == 2


# --- the sandbox contract ------------------------------------------------------------------

ALLOWED_IMPORTS = {"__future__", "array", "collections", "copy", "dataclasses", "functools", "hashlib", "json", "os",
                   "random", "re", "sys", "tempfile", "typing", "datasketch", "numpy", "tiktoken"}
# the one definition of a provenance stamp's digest, shared with the host's checker: stdlib only
# (test below), and mounted beside the toolkit in both executors
SHARED_WITH_HOST = {"base.provenance"}


def test_toolkit_imports_only_stdlib_datasketch_numpy_and_tiktoken_and_no_clock_or_global_random():
    for path in sorted(TOOLKIT_DIR.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                names = []
            for name in names:
                assert name.split(".")[0] in ALLOWED_IMPORTS or name in SHARED_WITH_HOST, f"{path.name} imports {name}"
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "random":
                assert node.attr == "Random", f"{path.name} uses the global random.{node.attr}"


def test_the_provenance_digest_the_toolkit_shares_with_the_host_imports_only_the_stdlib():
    tree = ast.parse((TOOLKIT_DIR.parents[1] / "base" / "provenance.py").read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert names <= {"__future__", "collections.abc", "hashlib", "json", "typing"}


def test_operators_never_modify_the_corpus():
    records = corpus()
    before = copy.deepcopy(records)
    for r in records:
        tk.refinement_weights(r), tk.segment(r, max_turns=2), tk.truncate(r, max_turns=1)
        tk.rl_records(r, tk.tool_call_steps(r))
        if not tk.is_empty(r):
            tk.sft_record(r)
    tk.near_dedup(records), tk.exact_dedup(records), tk.error_constraints(records), tk.corpus_stats(records)
    assert records == before
