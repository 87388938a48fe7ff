"""Memory retrieval at evaluation: BM25 over `key` (bm25s), top-k into the system prompt."""
import json

import pytest

from trainer import memory as mem
from base.errors import UserError
from chat_format import chat_format as cf

RECORDS = [
    {"id": "m1", "key": "book a flight ticket to another city", "content": "Check the airport codes first."},
    {"id": "m2", "key": "list files in a directory and move a file", "content": "Use ls before mv."},
    {"id": "m3", "key": "post a tweet mentioning users", "content": "Authenticate before posting."},
    {"id": "m4", "key": "move a file into another directory", "content": "cd into the folder, then mv."},
]


def test_top_k_by_bm25_best_first():
    index = mem.MemoryIndex(RECORDS, k=2)
    hits = index.retrieve("Please move the report file to the archive directory")
    assert [h["id"] for h in hits] == ["m4", "m2"]
    assert index.retrieve("tweet something nice about cats", k=5)[0]["id"] == "m3"


def test_no_shared_word_means_no_hint_and_ties_keep_file_order():
    index = mem.MemoryIndex(RECORDS, k=3)
    assert index.retrieve("zebra quantum") == []
    assert index.retrieve("") == []
    twins = mem.MemoryIndex([{"id": "a", "key": "alpha beta", "content": "A"},
                             {"id": "b", "key": "alpha beta", "content": "B"}], k=2)
    assert [h["id"] for h in twins.retrieve("alpha")] == ["a", "b"]


def test_empty_memory_and_stopword_only_keys():
    assert mem.MemoryIndex([], k=3).retrieve("anything") == []
    assert mem.MemoryIndex([{"id": "x", "key": "the a of", "content": "c"}]).retrieve("the") == []


def test_inject_appends_to_system_or_adds_the_default_one():
    hits = RECORDS[:2]
    with_system = mem.inject([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}], hits)
    assert with_system[0]["content"] == ("Be brief.\n\n" + mem.HEADER + "\n- Check the airport codes first."
                                         "\n- Use ls before mv.")
    without = mem.inject([{"role": "user", "content": "hi"}], hits)
    assert without[0] == {"role": "system", "content": cf.DEFAULT_SYSTEM + "\n\n" + mem.hint_block(hits)}
    assert without[1] == {"role": "user", "content": "hi"}
    original = [{"role": "user", "content": "hi"}]
    assert mem.inject(original, []) == original and mem.inject(original, []) is not original


def test_read_memory_checks_lines(tmp_path):
    good = tmp_path / "memory.jsonl"
    good.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    assert len(mem.MemoryIndex.from_file(good)) == 4
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(RECORDS[0]) + "\n" + json.dumps({"id": "x", "key": ""}) + "\n")
    with pytest.raises(UserError, match=r"bad.jsonl:2: "):
        mem.read_memory(bad)
    dup = tmp_path / "dup.jsonl"
    dup.write_text(json.dumps(RECORDS[0]) + "\n" + json.dumps(RECORDS[0]) + "\n")
    with pytest.raises(UserError, match="duplicate id"):
        mem.read_memory(dup)
    with pytest.raises(UserError, match="no such memory file"):
        mem.read_memory(tmp_path / "missing.jsonl")


def test_a_hint_about_a_tool_the_task_does_not_offer_is_not_retrieved():
    records = [{"id": "sig-area", "key": "circle area radius", "content": "area(radius: number)", "meta": {"tool": "area"}},
               {"id": "sig-volume", "key": "circle volume radius height", "content": "volume(radius, height)",
                "meta": {"tool": "volume"}},
               {"id": "fact", "key": "circle radius units", "content": "Give the radius in metres."}]
    index = mem.MemoryIndex(records, k=3)
    query = "What is the area of a circle of radius 3?"
    assert [h["id"] for h in index.retrieve(query)] == ["sig-area", "fact", "sig-volume"]
    # the task offers `area` only: the other tool's signature would invite a call the task cannot take
    assert [h["id"] for h in index.retrieve(query, offered=["area"])] == ["sig-area", "fact"]
    assert [h["id"] for h in index.retrieve(query, offered=[])] == ["fact"]



# --- one retrieval at both ends: hints in the SFT prompts as at evaluation ---------------------

ADD_TOOL = [{"type": "function", "function": {"name": "add", "description": "Add to the counter.",
                                               "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}}}}]
BANK = [{"id": "own", "key": "task add numbers counter", "content": "From this very trajectory.",
         "meta": {"origin": ["raw-7"]}},
        {"id": "same-task", "key": "task add numbers", "content": "From another attempt at the same task.",
         "meta": {"env": {"task_id": "train_3"}}},
        {"id": "general", "key": "add numbers", "content": "Call add once per number.", "meta": {"tool": "add"}},
        {"id": "other-tool", "key": "task add numbers", "content": "mul(n) multiplies.", "meta": {"tool": "mul"}}]
SFT = {"id": "raw-7", "tools": ADD_TOOL,
       "messages": [{"role": "user", "content": "task 0: add 1"},
                    {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
                        "name": "add", "arguments": "{\"n\": 1}"}}]}],
       "meta": {"origin": ["raw-7"], "env": {"benchmark": "counter", "task_id": "train_3", "variant": "c"}}}


def test_a_train_record_never_retrieves_its_own_record_or_task():
    index = mem.MemoryIndex(BANK, k=4)
    assert {h["id"] for h in mem.hints(index, SFT["messages"], ADD_TOOL)} == {"own", "same-task", "general"}
    assert [h["id"] for h in mem.hints(index, SFT["messages"], ADD_TOOL, own=SFT)] == ["general"]
    assert mem.provenance(SFT) == {"origin:raw-7", "task:train_3"}
    assert mem.provenance({"id": "x"}) == frozenset()


def test_training_and_evaluation_retrieve_by_the_same_function(monkeypatch):
    """The SFT example of a conversation gets the hint block evaluation gives the same conversation,
    both through trainer.memory.hints."""
    import trainer.memory
    from test_runner import CounterBenchmark, Recording, solver
    from environments import runner
    from trainer import data, models

    calls = []

    def spy(*args, **kwargs):
        calls.append(args[1][0]["content"])
        return hints(*args, **kwargs)

    hints = trainer.memory.hints
    monkeypatch.setattr(trainer.memory, "hints", spy)
    monkeypatch.setattr(mem, "hints", spy)
    index = mem.MemoryIndex(BANK, k=4)
    bench = CounterBenchmark(n_tasks=1, turns=1)   # its dev task t0 asks "task 0: add 1", offering `add`
    policy = Recording(solver)
    record = runner.run_episodes(bench, bench.tasks("dev"), policy, memory=index)[0]
    tokenizer = models.load_tokenizer(models.resolve(models.TINY))
    examples, stats = data.sft_examples([SFT], tokenizer, 4096, memory=index)
    assert calls == ["task 0: add 1", "task 0: add 1"]   # evaluation, then training: one function
    assert set(record["meta"]["memory"]) == {"own", "same-task", "general"}   # the dev task is neither's task
    text = tokenizer.decode(examples[0]["input_ids"])
    assert mem.hint_block([BANK[2]]) in text and "this very trajectory" not in text and "mul(n)" not in text
    assert stats.with_hints == 1
    assert mem.hint_block([BANK[2]]) not in tokenizer.decode(data.sft_examples([SFT], tokenizer, 4096)[0][0]["input_ids"])


def test_a_bank_record_of_the_evaluated_task_is_never_its_hint():
    """At evaluation the task's own id is excluded as a train record's is: a bank record naming a dev
    task (which the host's leakage guard keeps out of every bank, tests/test_leakage.py) never
    comes back for it."""
    from test_runner import CounterBenchmark, Recording, solver
    from environments import runner

    bench = CounterBenchmark(n_tasks=1, turns=1)
    index = mem.MemoryIndex([{"id": "dev-t0", "key": "task add", "content": "Answer: add 1.",
                              "meta": {"env": {"task_id": "t0"}}},
                             {"id": "general", "key": "add numbers", "content": "Call add once per number."}])
    policy = Recording(solver)
    record = runner.run_episodes(bench, bench.tasks("dev"), policy, memory=index)[0]
    steps_policy = Recording(solver)
    runner.run_steps(bench, bench.tasks("dev"), steps_policy, memory=index)
    assert record["meta"]["memory"] == ["general"]
    assert all("Answer: add 1." not in p for batch in policy.batches + steps_policy.batches for p in batch)


def test_worked_examples_are_retrieved_for_similar_requests_but_never_a_records_own():
    """toolkit.worked_examples: one per distinct request of a recorded success (its calls, or that it
    called none), about no one tool (a task offered other tools may retrieve it), and the one
    retrieval never gives an SFT record or a task its own example."""
    from curation_strategies import toolkit as tk

    def raw(i, request, calls, success=True, task=None):
        msgs = [{"role": "user", "content": request}]
        msgs += [{"role": "assistant", "content": "", "tool_calls": [
            {"id": f"c{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for n, (name, args) in enumerate(calls)]}] if calls else [{"role": "assistant", "content": "No tool fits."}]
        return {"id": f"raw-{i}", "tools": ADD_TOOL, "messages": msgs, "outcome": {"success": success},
                "meta": {"env": {"benchmark": "counter", "task_id": task or f"train_{i}", "variant": "c"}}}

    raws = [raw(1, "add the numbers 2 and 3 to the counter", [("add", {"n": 2}), ("add", {"n": 3})]),
            raw(2, "add the number 5 to the counter", [("add", {"n": 5})]),
            raw(3, "add the numbers 2 and 3 to the counter", [("add", {"n": 9})]),   # the same request again
            raw(4, "multiply 4 by 7", [("mul", {"n": 4})], success=False),           # not a recorded success
            raw(5, "what is the weather in Paris", [])]
    bank = tk.worked_examples(raws)
    assert [r["meta"]["origin"] for r in bank] == [["raw-1"], ["raw-2"], ["raw-5"]]
    assert bank[0]["content"] == "Request like: add the numbers 2 and 3 to the counter → add(n=2); add(n=3)"
    assert bank[2]["content"].endswith("→ no tool fits: answered without calling one")
    assert all(mem.about_tool(r) is None for r in bank) and tk.worked_examples(raws, limit=1) == bank[:1]
    index = mem.MemoryIndex(bank, k=3)
    own = raws[0]
    other_tools = [{"type": "function", "function": {"name": "sum_up", "parameters": {}}}]
    got = [h["meta"]["origin"][0] for h in mem.hints(index, own["messages"], other_tools, own=own)]
    assert "raw-1" not in got and got[0] == "raw-2"   # its own example never; a similar request's, whatever the tools
    task = {"id": "t", "meta": {"task_id": "train_2"}}   # an evaluated task never retrieves its own task's example
    assert "raw-2" not in [h["meta"]["origin"][0] for h in mem.hints(index, raws[1]["messages"], ADD_TOOL, own=task)]
