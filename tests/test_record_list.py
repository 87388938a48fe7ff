"""toolkit.RecordList, what `Curated` holds: a list whose older records live on disk. It must answer
every list operation as a list would, write the bytes a plain list writes, and leave no file."""
from __future__ import annotations

import json
import os
import random

import pytest

from curation_strategies import toolkit as tk
from curation_strategies.toolkit import spill
from curation_strategies.toolkit.spill import RecordList, encode_record
from sandbox.lazy_corpus import LazyCorpus
from sandbox.runtime import write_records


def record(n: int) -> dict:
    return {"id": f"r{n}", "z": n % 3, "text": "é" * (n % 5), "w": [1.5, None, True], "n": n}


def test_a_record_list_answers_every_list_operation_as_a_list_does():
    rng = random.Random(7)
    plain, spilled = [], RecordList(keep=2)
    made = 0
    for _ in range(600):
        op = rng.choice(["append", "append", "append", "extend", "set", "del", "insert", "pop", "sort",
                         "reverse", "slice", "get", "iadd"])
        if op in ("append", "extend", "iadd", "insert") or not plain:
            items = [record(made + k) for k in range(rng.randint(1, 4))]
            made += len(items)
            if op == "insert" and plain:
                at = rng.randint(-len(plain) - 1, len(plain) + 1)
                plain.insert(at, items[0])
                spilled.insert(at, items[0])
            elif op == "iadd":
                plain += items
                spilled += items
            else:
                plain.extend(items)
                spilled.extend(items)
        elif op == "set":
            at = rng.randrange(-len(plain), len(plain))
            plain[at] = spilled[at] = record(made)
            made += 1
        elif op == "del":
            at = rng.randrange(-len(plain), len(plain))
            del plain[at]
            del spilled[at]
        elif op == "pop":
            assert plain.pop() == spilled.pop()
        elif op == "sort":
            backwards = rng.random() < 0.5
            plain.sort(key=lambda r: r["z"], reverse=backwards)
            spilled.sort(key=lambda r: r["z"], reverse=backwards)
        elif op == "reverse":
            plain.reverse()
            spilled.reverse()
        elif op == "slice":
            a, b = sorted(rng.randrange(-len(plain), len(plain) + 1) for _ in range(2))
            assert spilled[a:b] == plain[a:b] and spilled[::-2] == plain[::-2]
        else:
            at = rng.randrange(-len(plain), len(plain))
            assert spilled[at] == plain[at]
        assert len(spilled) == len(plain) and spilled == plain
    assert spilled.spilled > 0, "the list must have gone to disk for this test to mean anything"
    assert list(spilled) == plain and list(spilled.encoded_lines()) == [encode_record(r) for r in plain]
    assert plain[3] in spilled and spilled.index(plain[3]) == plain.index(plain[3])
    assert spilled.count(plain[0]) == plain.count(plain[0]) and list(reversed(spilled)) == plain[::-1]


@pytest.mark.parametrize("reverse", [False, True])
def test_sorting_a_spilled_list_is_stable_as_list_sort(reverse):
    items = [record(n) for n in range(40)]
    plain, spilled = list(items), RecordList(items, keep=3)
    assert spilled.spilled > 0
    plain.sort(key=lambda r: r["z"], reverse=reverse)
    spilled.sort(key=lambda r: r["z"], reverse=reverse)
    assert list(spilled) == plain


def test_records_on_disk_are_fresh_copies_and_the_newest_stay_the_objects_appended():
    out = RecordList(keep=4)
    mine = [record(n) for n in range(20)]
    out.extend(mine)
    assert out.spilled >= 12 and out[-1] is mine[-1]
    out[-1]["text"] = "changed after appending"   # still held: the change is written
    first = out[0]
    first["text"] = "a change to a copy read back from disk"
    assert out[0] == mine[0] and out[0] is not mine[0]
    out[0] = first                                 # put in its place: written
    lines = [json.loads(line) for line in out.encoded_lines()]
    assert lines[0]["text"] == "a change to a copy read back from disk"
    assert lines[-1]["text"] == "changed after appending"


def test_a_record_json_cannot_encode_fails_when_it_reaches_disk():
    out = RecordList(keep=1)
    out.append({"id": "x", "bad": {1, 2}})
    with pytest.raises(TypeError, match="set"):
        out.append({"id": "y"})


def test_a_spilled_curation_writes_the_bytes_a_plain_list_writes_and_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(spill, "SPILL_DIR", str(tmp_path / "out"))
    (tmp_path / "out").mkdir()
    (tmp_path / "plain").mkdir()
    records = [record(n) for n in range(3000)]   # past 2 * KEEP: the default list spills
    spilled = tk.Curated()
    spilled.sft.extend(records)
    spilled.rl.extend(records[:10])
    assert spilled.sft.spilled > 0 and not spilled.rl.spilled
    assert os.listdir(tmp_path / "out") == [], "the spill file is unnamed"
    write_records(tmp_path / "out", spilled)
    write_records(tmp_path / "plain", tk.Curated(sft=list(records), rl=records[:10], memory=[]))
    for kind in ("sft", "rl", "memory"):
        assert (tmp_path / "out" / f"{kind}.jsonl").read_bytes() == (tmp_path / "plain" / f"{kind}.jsonl").read_bytes()
    assert sorted(os.listdir(tmp_path / "out")) == ["memory.jsonl", "rl.jsonl", "sft.jsonl"]
    assert os.fstat(spilled.sft._file.fileno()).st_blocks == 0   # the spill given back as it was written out


def test_a_list_that_is_two_parts_is_written_twice_and_its_spill_kept_until_then(tmp_path, monkeypatch):
    monkeypatch.setattr(spill, "SPILL_DIR", str(tmp_path))
    records = [record(n) for n in range(3000)]
    both = RecordList(records)
    assert both.spilled
    write_records(tmp_path, tk.Curated(sft=both, rl=both, memory=[]))
    expected = b"".join(map(encode_record, records))
    assert (tmp_path / "sft.jsonl").read_bytes() == (tmp_path / "rl.jsonl").read_bytes() == expected


def test_filters_over_the_sandbox_corpus_return_views_with_the_records_a_list_would_give(tmp_path):
    raws = [{"id": f"t{n}", "task": f"find flight {n % 7}", "outcome": {"success": n % 4 != 0},
             "messages": [{"role": "user", "content": f"find flight {n % 7}"},
                          {"role": "assistant", "content": None, "tool_calls": [
                              {"id": f"c{n}", "type": "function",
                               "function": {"name": "search", "arguments": json.dumps({"to": n % 7})}}]},
                          {"role": "tool", "tool_call_id": f"c{n}", "content": "ok" if n % 5 else "Error: no"},
                          {"role": "assistant", "content": "done"}][: 4 if n % 6 else 2],
             "tools": [{"type": "function", "function": {"name": "search", "parameters": {
                 "type": "object", "properties": {"to": {"type": "integer"}}}}}]} for n in range(60)]
    raws.append(dict(raws[3], id="copy-of-t3"))
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in raws))
    lazy = LazyCorpus(path)
    for name, apply in [("exact_dedup", tk.exact_dedup), ("drop_abandoned", tk.drop_abandoned),
                        ("by_outcome", tk.by_outcome), ("with_tool_calls", tk.with_tool_calls),
                        ("by_turns", lambda r: tk.by_turns(r, 2)), ("by_tokens", lambda r: tk.by_tokens(r, 30)),
                        ("schema_valid", tk.schema_valid),
                        ("near_dedup", lambda r: tk.near_dedup(r, prefer=lambda t: len(t["messages"])))]:
        view, listed = apply(lazy), apply(raws)
        assert isinstance(view, LazyCorpus) and isinstance(listed, list), name
        assert list(view) == listed and 0 < len(listed) <= len(raws), name
        assert list(apply(view)) == apply(listed), name   # a filter of a view is a view of the corpus
    assert len(tk.exact_dedup(lazy)) < len(raws) and "copy-of-t3" not in {r["id"] for r in tk.exact_dedup(lazy)}
    assert tk.near_duplicates(lazy) == tk.near_duplicates(raws)
