"""The sandbox's limits and the checker's caps follow a large corpus, said before the work; a small
corpus gets exactly today's defaults, and a limit the caller set is kept."""
import json
import math
import shutil

import pytest

from base.errors import UserError
from corpora import load_corpus
from sandbox import corpus_limits
from sandbox.artifact_records import CAPS, OutputCaps
from sandbox.corpus_limits import for_corpus
from sandbox.curate import CurationFailed, execute, room_for_corpus
from sandbox.executor import Limits
from sandbox.process_executor import ProcessExecutor
from workspace.repository import strategy_files

GiB = 2**30


def test_a_small_corpus_gets_exactly_todays_limits_and_caps_and_nothing_is_said():
    edge = (62_500, 2 * GiB // corpus_limits.OUTPUT_PER_BYTE)   # each multiple at or below its default
    for records, size in ((45, 887_257), edge):   # the sample corpus; the edge
        assert for_corpus(Limits(), records, size) == (Limits(), CAPS, None)
    assert Limits().to_json() == for_corpus(Limits(), 45, 887_257)[0].to_json()   # execution.json's record unchanged


def test_a_large_corpus_raises_each_default_to_its_multiple_and_says_which():
    limits, caps, said = for_corpus(Limits(), 1_000_000, 4 * GiB)
    assert (limits.max_file_bytes, limits.output_dir_bytes, caps.max_output_bytes) == (64 * GiB,) * 3
    assert caps.max_records == 8_000_000
    assert (limits.timeout_s, limits.cpu_s) == (4 * 4096.0, 8 * 4096)
    assert (limits.memory_bytes, limits.max_processes, caps.max_record_bytes, caps.max_depth) == \
           (Limits().memory_bytes, Limits().max_processes, CAPS.max_record_bytes, CAPS.max_depth)   # not the corpus's
    assert said == ("sandbox: a corpus of 1,000,000 records (4.00 GiB staged) raises the sandbox's limits with it: "
                    "file 64.00 GiB, output folder 64.00 GiB, checked output 64.00 GiB, records 8,000,000, "
                    "timeout 16,384 s, CPU time 32,768 s")


def test_long_sessions_raise_the_records_cap_by_their_bytes():
    """ρ0 emits an RL record a tool call: 680,000 records of 7,998 long sessions (2.60 GiB staged),
    past 8× their count and the default cap; their bytes raise it."""
    _, caps, said = for_corpus(Limits(), 7_998, int(2.60 * GiB))
    assert caps.max_records == math.ceil(int(2.60 * GiB) / corpus_limits.BYTES_PER_RECORD) > 680_000
    assert "records 1,363,149" in said


def test_a_limit_the_caller_set_is_kept_on_a_large_corpus():
    limits, _, said = for_corpus(Limits(timeout_s=600, max_file_bytes=2**20), 1_000_000, 4 * GiB)
    assert (limits.timeout_s, limits.max_file_bytes) == (600, 2**20)
    assert limits.output_dir_bytes == 64 * GiB
    assert "timeout" not in said and "file 64" not in said


def test_the_free_disk_refuses_the_corpus_and_warns_of_the_output(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "disk_usage", lambda folder: shutil._ntuple_diskusage(100 * GiB, 90 * GiB, 10 * GiB))
    assert room_for_corpus(2 * GiB, tmp_path, 4 * GiB) is None
    assert room_for_corpus(2 * GiB, tmp_path, 0) is None
    warning = room_for_corpus(2 * GiB, tmp_path, 64 * GiB)
    assert warning.startswith(f"sandbox: {tmp_path} has 10.00 GiB free, less than the staged corpus and the "
                              "64.00 GiB of output its limits allow")
    with pytest.raises(UserError, match="the corpus takes 11.00 GiB staged for the sandbox"):
        room_for_corpus(11 * GiB, tmp_path, 0)


PADDED = """
def curate(raw, ctx):
    out = honest(raw)
    for record in out["sft"]:
        record["meta"]["pad"] = "x" * 100_000   # 45 records: some 5 MB in sft.jsonl
    return out
"""
SMALL = Limits(timeout_s=60, max_file_bytes=2**20)   # a 1 MiB file cap: the sample corpus's scaled one is 16× 0.85 MiB


def curate(strategy_dir, corpus_path, out, limits=SMALL):
    return execute(strategy_files(strategy_dir), load_corpus([str(corpus_path)]), out, executor=ProcessExecutor(),
                   limits=limits)


def test_an_output_past_the_default_file_cap_passes_where_the_corpus_raised_it(strategy, sample_corpus, tmp_path,
                                                                               monkeypatch, capsys):
    s = strategy(PADDED)
    monkeypatch.setattr(corpus_limits, "DEFAULT_LIMITS", SMALL)   # as if 1 MiB were today's default
    result = curate(s, sample_corpus, tmp_path / "scaled")
    assert (tmp_path / "scaled" / "sft.jsonl").stat().st_size > 4 * 2**20
    size = load_corpus([str(sample_corpus)]).staged_bytes
    assert result.execution["limits"]["max_file_bytes"] == 16 * size
    assert result.execution["limits"]["timeout_s"] == 60   # its multiple (a few seconds) is below it
    assert "raises the sandbox's limits with it: file 0.01 GiB" in capsys.readouterr().err
    monkeypatch.undo()   # the same 1 MiB now a limit the caller set: kept, and the output refused
    with pytest.raises(CurationFailed) as info:
        curate(s, sample_corpus, tmp_path / "kept")
    assert "file size limit" in info.value.reason or "the sandbox's cap on one file is 1 MiB" in info.value.reason
    assert "raises the sandbox's limits" not in capsys.readouterr().err


def test_the_checker_takes_the_records_cap_the_corpus_raised(strategy, sample_corpus, tmp_path, monkeypatch):
    s = strategy("""
        def curate(raw, ctx):
            return honest(raw)
    """)
    monkeypatch.setattr(corpus_limits, "DEFAULT_CAPS", OutputCaps(max_records=10))   # as if 10 were today's cap
    scaled = curate(s, sample_corpus, tmp_path / "scaled", Limits(timeout_s=60)).out_dir
    kept = json.loads((scaled / "manifest.json").read_text())
    assert kept["artifacts"]["sft.jsonl"]["count"] > 10
    monkeypatch.setattr(corpus_limits, "RECORDS_PER_RECORD", 0.1)   # the corpus no longer raises it
    monkeypatch.setattr(corpus_limits, "BYTES_PER_RECORD", 1 << 40)
    with pytest.raises(CurationFailed, match=r"more than 10 records in all \(the cap\)"):
        curate(s, sample_corpus, tmp_path / "capped", Limits(timeout_s=60))
