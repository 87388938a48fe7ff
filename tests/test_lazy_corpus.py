"""The corpus reaches the strategy as a sequence decoded on access: it behaves as the tuple of
parsed dicts it replaced, and the in-sandbox runtime's memory no longer grows with the corpus."""
import copy
import json
import os
import pickle
import random
import subprocess
import sys

import pytest

from bench import scale_corpus
from sandbox.lazy_corpus import LazyCorpus
from sandbox.runtime import PEAK_LINE

from conftest import ROOT, SAMPLE_CORPUS, write_strategy


@pytest.fixture(scope="module")
def both():
    """(the sample as LazyCorpus, the same records as the tuple the runtime used to build)."""
    with open(SAMPLE_CORPUS, encoding="utf-8") as lines:
        return LazyCorpus(SAMPLE_CORPUS), tuple(json.loads(line) for line in lines)


def test_length_indexing_and_iteration_equal_the_tuple_of_dicts(both):
    lazy, records = both
    assert len(lazy) == len(records) == 45
    assert list(lazy) == list(records)
    assert lazy[0] == records[0] and lazy[-1] == records[-1] and lazy[17] == records[17]
    assert list(reversed(lazy)) == list(reversed(records))
    assert lazy == records and lazy[::-1] != records
    with pytest.raises(IndexError):
        lazy[45]
    with pytest.raises(TypeError):
        lazy["0"]


def test_slices_are_lazy_views_that_compare_and_concatenate_as_tuples(both):
    lazy, records = both
    for cut in (slice(3, 9), slice(None, None, 4), slice(-5, None), slice(40, 2, -3), slice(50, 60)):
        assert isinstance(lazy[cut], LazyCorpus)
        assert list(lazy[cut]) == list(records[cut]) and len(lazy[cut]) == len(records[cut])
    assert lazy[2:10][3] == records[5] and list(lazy[2:30][::5]) == list(records[2:30][::5])
    assert lazy[:3] + lazy[3:] == records and (records[:1] + lazy[1:]) == records
    assert isinstance(lazy[:2] + records[2:4], tuple)


def test_membership_index_count_and_sampling_work_as_on_a_tuple(both):
    lazy, records = both
    assert records[7] in lazy and {"id": "nope"} not in lazy
    assert lazy.index(records[7]) == 7 and lazy.count(records[7]) == 1
    assert random.Random(3).sample(lazy, 5) == random.Random(3).sample(records, 5)
    assert sorted(lazy, key=lambda r: r["id"]) == sorted(records, key=lambda r: r["id"])


def test_each_access_decodes_a_fresh_record_so_a_strategy_cannot_change_the_corpus(both):
    lazy, records = both
    first = lazy[0]
    first["messages"].clear()
    assert lazy[0] == records[0] and lazy[0] is not lazy[0]


def test_unhashable_deep_copied_and_pickled_as_where_it_reads_from(both):
    lazy, records = both
    with pytest.raises(TypeError):
        hash(lazy)
    assert copy.deepcopy(lazy) == records
    again = pickle.loads(pickle.dumps(lazy[5:9]))
    assert list(again) == list(records[5:9])
    assert len(pickle.dumps(lazy)) < os.path.getsize(SAMPLE_CORPUS) / 10


def test_a_last_line_without_newline_is_a_record_and_an_empty_file_holds_none(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(b'{"id": "a"}\n{"id": "b"}')
    assert [r["id"] for r in LazyCorpus(path)] == ["a", "b"]
    path.write_bytes(b"")
    assert len(LazyCorpus(path)) == 0 and list(LazyCorpus(path)) == []


# Keeps one trajectory in a hundred, walking the corpus once: what it holds is its output.
SAMPLER = """
def curate(raw, ctx):
    tk = ctx.toolkit
    out = tk.Curated()
    for n, trajectory in enumerate(raw):
        if n % 100 == 0 and not tk.is_empty(trajectory):
            out.sft.append(tk.sft_record(trajectory, tags=["sample"]))
    return out
"""
# The same, holding the corpus whole first, as the runtime did when it handed over a tuple of dicts.
HOLDER = SAMPLER.replace("    out = tk.Curated()\n", "    raw = tuple(raw)\n    out = tk.Curated()\n")


def runtime_peak_bytes(strategy, corpus, out) -> int:
    """Peak resident memory of `python -m sandbox.runtime` curating `corpus`, as it reports it (its own
    memory's high-water mark: a wait4 here would count the forking test worker's memory too)."""
    out.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "sandbox.runtime", "--strategy", str(strategy),
                             "--corpus", str(corpus), "--out", str(out), "--seed", "0"],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE)
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait() == 0, err[-2000:]
    return int(err.rsplit(PEAK_LINE, 1)[1].split()[0])


def test_runtime_memory_stays_bounded_on_ten_thousand_generated_trajectories(tmp_path):
    """10^4 varied trajectories (44 MB): the runtime's peak grows by under half the corpus's size over
    its peak on one trajectory; holding the corpus as parsed dicts grows it by several times the size."""
    big, one = tmp_path / "big.jsonl", tmp_path / "one.jsonl"
    size = scale_corpus.write(big, "short", 10_000)
    scale_corpus.write(one, "short", 1)
    sampler = write_strategy(tmp_path / "sampler", SAMPLER)
    holder = write_strategy(tmp_path / "holder", HOLDER)
    floor = runtime_peak_bytes(sampler, one, tmp_path / "floor")
    lazy = runtime_peak_bytes(sampler, big, tmp_path / "lazy") - floor
    held = runtime_peak_bytes(holder, big, tmp_path / "held") - floor
    bound = size // 2
    assert lazy < bound, f"the runtime grew by {lazy / 2**20:.0f} MiB on a {size / 2**20:.0f} MiB corpus"
    assert held > bound, "the measure must catch a runtime that holds the corpus whole"
    sampled = (tmp_path / "lazy" / "sft.jsonl").read_bytes()
    assert sampled == (tmp_path / "held" / "sft.jsonl").read_bytes() and sampled.count(b"\n") == 100


def test_the_toolkits_deduplication_reads_the_corpus_in_few_passes_and_answers_as_on_the_tuple(both, monkeypatch):
    """exact_dedup of the read-only corpus is remembered (AgentRefine asks again for its memory);
    near_dedup with a preference reads each record twice, in two passes (its preference, then the
    records in that order), never one record at a time (a file opened per record); both answer as
    they do on the tuple of dicts."""
    from curation_strategies import toolkit as tk
    from sandbox.progress import DECODED

    lazy, records = both
    first = tk.exact_dedup(lazy)
    before = DECODED.count
    assert tk.exact_dedup(lazy) is first and DECODED.count == before
    assert list(first) == list(tk.exact_dedup(records))
    prefer = lambda r: len(tk.redundant_turns(r))  # noqa: E731
    one_at_a_time, index = [], LazyCorpus.__getitem__
    monkeypatch.setattr(LazyCorpus, "__getitem__", lambda self, i: one_at_a_time.append(i) or index(self, i))
    before = DECODED.count
    kept = tk.near_dedup(lazy, prefer=prefer)
    assert DECODED.count - before == 2 * len(lazy) and not [i for i in one_at_a_time if isinstance(i, int)]
    monkeypatch.undo()
    assert list(kept) == list(tk.near_dedup(records, prefer=prefer))


def test_a_list_given_to_exact_dedup_is_read_again_each_time():
    """Only a sequence read on access is remembered: a strategy's own list may change between calls."""
    from curation_strategies import toolkit as tk

    records = [{"id": "a", "task": "x", "messages": [{"role": "user", "content": "hi"}]}]
    records.append({**records[0], "id": "b"})
    assert [r["id"] for r in tk.exact_dedup(records)] == ["a"]
    records[1] = {**records[1], "task": "y"}
    assert [r["id"] for r in tk.exact_dedup(records)] == ["a", "b"]


def test_a_staged_line_decodes_as_json_decodes_it(tmp_path):
    """The runtime's decoding skips json's look for another encoding only for a line that starts
    as a canonical one does; any other line is json's to read (one with a byte order mark)."""
    path = tmp_path / "odd.jsonl"
    lines = ['{"id":"a","x":"\u00e9\\ud83d\\ude00","n":1e-05,"big":123456789012345678901234567890}',
             '\ufeff{"id":"b"}']
    path.write_bytes(lines[0].encode() + b"\n" + lines[1].encode("utf-8") + b"\n")
    lazy = LazyCorpus(path)
    assert lazy[0] == json.loads(lines[0]) and lazy[1] == {"id": "b"} and list(lazy) == [lazy[0], lazy[1]]
