"""The host holds where a corpus's records are, not the records: loading, the split, the
leakage-free train part and the staged file stay within a bound at 10^4 trajectories, and fail
when the host holds the corpus whole (issue 74 item 2, host side)."""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

import pytest

from bench import scale_corpus
from corpora import load_corpus, train_part
from corpora.stored import SPILL_PREFIX, ById, StoredRecords, by_id

from conftest import ROOT

# What `curate`, `run`'s checks and the loop do with a corpus on the host before the sandbox runs; HOLD keeps
# the records as parsed dicts too (what the host did before), so the measure must catch it.
STEPS = """
import json, sys
from corpora import load_corpus, train_part
from corpora.split import sides
loaded = load_corpus([sys.argv[1]])
held = list(loaded.records) if sys.argv[2] == "hold" else None
part = train_part(loaded)
note = sides(loaded.records)
from evolver.config import RunConfig
from evolver.launch import dev_check
dev = dev_check(RunConfig(corpus=(sys.argv[1],), benchmark="next-call"))   # what `run` checks before any work
with open(part.staged, "rb") as f:
    staged = sum(1 for _ in f)
peak = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
print(json.dumps({"records": len(loaded.records), "train": len(part.records), "staged": staged,
                  "peak": int(peak) * 1024}))
"""


def host_peak(corpus, mode: str = "lazy") -> dict:
    out = subprocess.run([sys.executable, "-c", STEPS, str(corpus), mode], cwd=ROOT, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_host_memory_stays_bounded_on_ten_thousand_generated_trajectories(tmp_path):
    big, one = tmp_path / "big.jsonl", tmp_path / "one.jsonl"
    size = scale_corpus.write(big, "short", 10_000)
    scale_corpus.write(one, "short", 20)   # the few records the checks of `run` need
    floor = host_peak(one)["peak"]
    lazy = host_peak(big)
    held = host_peak(big, "hold")
    bound = size // 2
    assert lazy["records"] == 10_000 and 0 < lazy["train"] == lazy["staged"] < 10_000
    assert lazy["peak"] - floor < bound, f"the host grew by {(lazy['peak'] - floor) / 2**20:.0f} MiB on a {size / 2**20:.0f} MiB corpus"
    assert held["peak"] - floor > bound, "the measure must catch a host that holds the corpus whole"


def test_stored_records_read_as_the_list_they_replace(tmp_path):
    records = [{"id": "b", "z": 1, "a": [1.5, None, "é"]}, {"id": "a", "messages": []}, {"id": "c"}]
    stored = StoredRecords.write(iter(records), str(tmp_path))
    assert stored == records and list(stored) == records and len(stored) == 3
    assert [list(r) for r in stored] == [list(r) for r in records]   # key order kept, not sorted
    assert stored[-1] == records[-1] and stored[1:] == records[1:] and stored[::-1] == records[::-1]
    assert stored.subset([2, 0]) == [records[2], records[0]]
    stored[0]["z"] = 2   # a fresh dict each time: the corpus does not change
    assert stored[0]["z"] == 1
    with pytest.raises(IndexError):
        stored[3]
    mapped = by_id(stored)   # the next-call benchmark's records by id: ids and positions held
    assert isinstance(mapped, ById) and dict(mapped) == {r["id"]: r for r in records}
    assert list(mapped) == ["b", "a", "c"] and mapped["c"] == records[2] and list(mapped.items())[1] == ("a", records[1])
    lines = list(stored.canonical_lines())
    assert lines[0] == b'{"a":[1.5,null,"\xc3\xa9"],"id":"b","z":1}\n'
    assert stored.stored_bytes == sum(map(len, lines))
    folder = stored._spill.folder
    view = stored[1:]
    del stored, lines, mapped
    gc.collect()
    assert view[0] == records[1], "a view keeps the file"
    del view
    gc.collect()
    assert not os.path.exists(folder), "the records folder goes with the last view of it"


def test_a_killed_processs_records_folder_is_removed_by_the_next_command(tmp_path):
    from base.lifetime import OWNER_FILE
    from sandbox.leftovers import reap_record_dirs

    live = StoredRecords.write([{"id": "a"}], str(tmp_path))
    dead = tmp_path / (SPILL_PREFIX + "killed")
    dead.mkdir()
    (dead / "records.jsonl").write_text("{}\n")
    (dead / OWNER_FILE).write_text("boot:999999999:1")   # no such process
    assert reap_record_dirs(tmp_path) == 1
    assert not dead.exists() and list(live) == [{"id": "a"}]


def test_a_corpus_needing_a_catalogue_is_written_again_with_it(tmp_path):
    src = tmp_path / "c.jsonl"
    calls = [{"role": "user", "content": "go"},
             {"role": "assistant", "content": None,
              "tool_calls": [{"id": "1", "type": "function", "function": {"name": "cd", "arguments": '{"folder": "x"}'}}]},
             {"role": "tool", "tool_call_id": "1", "content": "ok"}]
    src.write_text("".join(json.dumps({"id": f"r{i}", "messages": calls}) + "\n" for i in range(3)))
    loaded = load_corpus([str(src)])
    assert isinstance(loaded.records, StoredRecords)
    assert all(r["tools"][0]["function"]["name"] == "cd" for r in loaded.records)
    part = train_part(loaded)
    assert loaded.tool_lists and isinstance(part.records, StoredRecords)
    assert list(part.records) == [r for r in loaded.records if r["id"] in {x["id"] for x in part.records}]


def test_a_corpus_larger_than_the_free_temporary_disk_is_one_sentence_before_reading(tmp_path, monkeypatch):
    import shutil as real_shutil

    from base.errors import UserError
    from corpora import loader

    src = tmp_path / "c.jsonl"
    scale_corpus.write(src, "short", 20)
    monkeypatch.setattr(loader.shutil, "disk_usage", lambda path: real_shutil._ntuple_diskusage(2**30, 2**30 - 100, 100))
    monkeypatch.setattr(loader, "units", lambda *a: pytest.fail("nothing is read"))
    with pytest.raises(UserError, match=r"^the corpus files take 0\.00 GiB and its records are kept on disk while it "
                                        r"is used, but .* has 0\.00 GiB free; free space there or set TMPDIR"):
        load_corpus([str(src)])
