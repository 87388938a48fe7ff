"""Memory retrieval at evaluation: BM25 over `key` (bm25s), top-k into the system prompt."""
import json

import pytest

from benchmarks import memory as mem
from base.errors import UserError
from formats import chat_format as cf

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

