"""The sandbox's side of issue 74: the seed and AgentRefine strategies curate 10^4 generated
trajectories within a bound — the corpus is read on access, the toolkit's filters return views of
it, `Curated`'s lists keep their older records on disk — and the measure fails a strategy that
holds the records whole (the control)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench import scale_corpus
from sandbox.runtime import PEAK_LINE

from conftest import ROOT

HOLDS_EVERYTHING = '''
def curate(raw, ctx):
    tk = ctx.toolkit
    kept = [t for t in raw if not tk.is_empty(t)]   # a list of every record: what the bound must catch
    return tk.Curated(sft=[tk.sft_record(t) for t in kept], rl=[], memory=[])
'''


def runtime_peak(strategy, corpus, out) -> int:
    out.mkdir()
    run = subprocess.run([sys.executable, "-m", "sandbox.runtime", "--strategy", str(strategy), "--corpus", str(corpus),
                          "--out", str(out), "--seed", "0"], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr[-2000:]
    assert sorted(os.listdir(out)) == ["memory.jsonl", "rl.jsonl", "sft.jsonl"] or "dropped.jsonl" in os.listdir(out)
    return int(run.stderr.strip().splitlines()[-1].removeprefix(PEAK_LINE))


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    folder = tmp_path_factory.mktemp("scale")
    big, small = folder / "big.jsonl", folder / "small.jsonl"
    # the floor is a curation of the first 2,000 (every code path warm, the lists already on disk):
    # the 8,000 more records, 35 MiB of JSON, are what the bound is about
    size = scale_corpus.write(big, "short", 10_000) - scale_corpus.write(small, "short", 2_000)
    return big, small, size


@pytest.mark.parametrize("strategy", ["seed", "agentrefine"])
def test_a_reference_strategy_curates_ten_thousand_trajectories_in_bounded_memory(strategy, corpora, tmp_path):
    big, small, size = corpora
    folder = ROOT / "curation_strategies" / strategy
    floor = runtime_peak(folder, small, tmp_path / "small")
    peak = runtime_peak(folder, big, tmp_path / "big")
    written = sum(f.stat().st_size for f in (tmp_path / "big").iterdir())
    assert written > size // 4, "the curation must have produced records for the bound to mean anything"
    assert peak - floor < size // 2, \
        f"{strategy} grew by {(peak - floor) / 2**20:.0f} MiB over {size / 2**20:.0f} MiB more of corpus"


def test_the_measure_catches_a_strategy_that_holds_the_corpus(corpora, tmp_path):
    big, small, size = corpora
    folder = tmp_path / "holds"
    folder.mkdir()
    (folder / "strategy.py").write_text(HOLDS_EVERYTHING)
    floor = runtime_peak(folder, small, tmp_path / "small")
    assert runtime_peak(folder, big, tmp_path / "big") - floor > size // 2


WRITES_A_LOT = '''
def curate(raw, ctx):
    out = ctx.toolkit.Curated()
    for n in range(20_000):   # past the test's 1 MiB file cap once the list spills
        out.sft.append({"id": f"r{n}", "text": "x" * 200})
    return out
'''


def test_a_file_past_the_sandbox_cap_is_a_sentence_naming_the_cap_and_the_peak(corpora, tmp_path):
    import resource

    from sandbox.runtime import STRATEGY_FAILED

    big, small, size = corpora
    folder = tmp_path / "writes"
    folder.mkdir()
    (folder / "strategy.py").write_text(WRITES_A_LOT)
    (tmp_path / "out").mkdir()
    run = subprocess.run([sys.executable, "-m", "sandbox.runtime", "--strategy", str(folder), "--corpus", str(small),
                          "--out", str(tmp_path / "out"), "--seed", "0"], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)},
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (2**20, 2**20)))
    assert run.returncode == STRATEGY_FAILED
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("OSError: file too large: the sandbox's cap on one file is 1 MiB,"), last
    assert "the strategy's peak resident memory was" in last and "curate fewer or shorter records" in last
