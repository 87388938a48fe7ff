"""Host-side checking: a strategy cannot influence its own scores except through its records."""
import json
import re
import subprocess
import sys

import pytest

from evolver import cli
from base.errors import UserError
from sandbox.curate import CurationFailed
from conftest import curate_files
from sandbox.process_executor import ProcessExecutor

from conftest import SEED_STRATEGY


def curated(strategy_dir, corpus, out, **kw):
    return curate_files(strategy_dir, [corpus], out, executor=ProcessExecutor(), **kw)


def test_seed_strategy_artifacts_manifest_and_profile(sample_corpus, tmp_path):
    result = curated(SEED_STRATEGY, sample_corpus, tmp_path / "out")
    out = result.out_dir
    assert sorted(p.name for p in out.iterdir()) == [
        "execution.json", "manifest.json", "memory.jsonl", "profile.json", "rl.jsonl", "sft.jsonl", "strategy"]
    manifest = json.loads((out / "manifest.json").read_text())
    raw = [json.loads(line) for line in sample_corpus.read_text().splitlines()]
    assistant = sum(1 for r in raw for m in r["messages"] if m["role"] == "assistant")
    calls = [(r, i) for r in raw for i, m in enumerate(r["messages"]) if m["role"] == "assistant" and m.get("tool_calls")]
    # ρ0: every trajectory → SFT with every assistant turn; every tool-call turn → RL
    assert manifest["artifacts"]["sft.jsonl"]["count"] == len(raw)
    assert manifest["artifacts"]["rl.jsonl"]["count"] == len(calls)
    assert manifest["artifacts"]["memory.jsonl"]["count"] == 0
    rl_cost = sum(sum(1 for m in r["messages"][:i] if m["role"] == "assistant") + 1 for r, i in calls)
    assert manifest["cost_train"] == assistant + rl_cost
    profile = result.curation_stats
    assert profile["sft"]["trained_turns"] == assistant and profile["sft"]["masked_turns"] == 0
    assert profile["raw"]["retention"] == 1.0
    import math
    assert manifest["C"] == pytest.approx(math.tanh(math.log1p(manifest["cost_train"]) / math.log1p(1e5)))


def _numbers(out):
    return json.loads((out / "profile.json").read_text()), json.loads((out / "manifest.json").read_text())["artifacts"]


def test_strategy_writing_its_own_manifest_is_rejected(strategy, sample_corpus, tmp_path):
    s = strategy("""
        import json
        def curate(raw, ctx):
            open("manifest.json", "w").write(json.dumps({"C": 0.0, "cost_train": 0}))
            open("profile.json", "w").write("{}")
            return honest(raw)
    """)
    with pytest.raises(CurationFailed, match="unexpected output entry 'manifest.json'"):
        curated(s, sample_corpus, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_monkeypatched_runtime_does_not_change_the_hosts_numbers(strategy, sample_corpus, tmp_path):
    honest_dir = strategy("""
        def curate(raw, ctx):
            return honest(raw)
    """)
    patched = strategy("""
        import __main__ as runtime, sandbox.checker as checker   # the live runtime module
        checker.cost_c = lambda *a, **k: 0.0          # the host's checker is not the sandbox's copy
        real_write = runtime.write_records
        def curate(raw, ctx):
            def write_records(out_dir, curated):
                real_write(out_dir, curated)
                (out_dir / "sft.jsonl").open("a").write('{"id": "x", "cost_train": 0}\\n')
            runtime.write_records = write_records
            return honest(raw)
    """)
    reference = curated(honest_dir, sample_corpus, tmp_path / "ref")
    with pytest.raises(CurationFailed, match=r"sft.jsonl:\d+: "):
        curated(patched, sample_corpus, tmp_path / "out")
    only_patch_cost = strategy("""
        import sandbox.checker as checker
        checker.cost_c = lambda *a, **k: 0.0
        checker.profile = lambda *a, **k: {"C": 0}
        def curate(raw, ctx):
            return honest(raw)
    """)
    result = curated(only_patch_cost, sample_corpus, tmp_path / "out2")
    assert _numbers(result.out_dir) == _numbers(reference.out_dir)
    assert result.curation_stats["C"] > 0


@pytest.mark.parametrize("plant", [
    'os.symlink("/etc/passwd", "sft.jsonl")',
    'os.mkfifo("rl.jsonl")',
    'os.mkdir("memory.jsonl")',
])
def test_non_regular_artifact_files_are_rejected(strategy, sample_corpus, tmp_path, plant):
    s = strategy(f"""
        import os
        import __main__ as runtime
        real_write = runtime.write_records
        def write_records(out_dir, curated):
            real_write(out_dir, curated)
            os.chdir(out_dir)
            name = {plant.split('"')[-2]!r}
            os.unlink(name)
            {plant}
        runtime.write_records = write_records
        def curate(raw, ctx):
            return honest(raw)
    """)
    with pytest.raises(CurationFailed, match="not a regular file|symbolic link"):
        curated(s, sample_corpus, tmp_path / "out")


def test_duplicate_ids_are_rejected_naming_both_lines(strategy, sample_corpus, tmp_path):
    s = strategy("""
        def curate(raw, ctx):
            out = honest(raw)
            out["sft"].append(out["sft"][0])
            return out
    """)
    with pytest.raises(CurationFailed, match=r"sft.jsonl:\d+: duplicate id '.*' \(first on line 1\)"):
        curated(s, sample_corpus, tmp_path / "out")


def test_invalid_record_is_rejected_with_file_line_and_field(strategy, sample_corpus, tmp_path):
    s = strategy("""
        def curate(raw, ctx):
            out = honest(raw)
            out["rl"] = [{"id": "r1", "messages": raw[0]["messages"][:1], "tools": raw[0]["tools"],
                          "reference": {"tool_calls": [{"id": "c", "type": "function",
                                        "function": {"name": "no_such_tool", "arguments": "{}"}}]},
                          "reward": "tool_call_match"}]
            return out
    """)
    with pytest.raises(CurationFailed, match=r"rl.jsonl:1: reference.tool_calls\[0\]: call to tool 'no_such_tool'"):
        curated(s, sample_corpus, tmp_path / "out")


def test_nan_in_a_record_is_rejected(strategy, sample_corpus, tmp_path):
    s = strategy("""
        import json
        import __main__ as runtime
        runtime.json.dumps = lambda obj, **kw: json.JSONEncoder(allow_nan=True).encode(obj)
        def curate(raw, ctx):
            out = honest(raw)
            out["memory"] = [{"id": "m", "key": "k", "content": "c", "meta": {"score": float("nan")}}]
            return out
    """)
    with pytest.raises(CurationFailed, match=r"memory.jsonl:1: not JSON \(NaN"):
        curated(s, sample_corpus, tmp_path / "out")


def test_output_directory_that_is_not_empty_is_refused(sample_corpus, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    assert cli.main(["curate", "--corpus", str(sample_corpus), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine"


def test_a_corpus_larger_than_the_free_disk_is_refused_in_one_sentence_before_any_job(sample_corpus, tmp_path,
                                                                                     monkeypatch):
    import shutil
    from sandbox import curate

    from corpora import load_corpus
    from sandbox.strategy_files import strategy_files

    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(curate.tempfile, "tempdir", str(tmp_path / "tmp"))
    corpus = load_corpus([sample_corpus])   # loaded while there is room; the staging is what does not fit
    monkeypatch.setattr(curate.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(2**30, 2**30 - 1000, 1000))
    with pytest.raises(UserError) as info:
        curate.execute(strategy_files(SEED_STRATEGY), corpus, tmp_path / "out", executor=ProcessExecutor())
    assert str(info.value).startswith("the corpus takes 0.00 GiB staged for the sandbox but ")
    assert str(info.value).endswith(" has 0.00 GiB free; free space there or set TMPDIR to a larger disk")
    from corpora.stored import SPILL_PREFIX   # the loaded corpus's own records file is there, nothing else

    made = [p.name for p in (tmp_path / "tmp").iterdir() if not p.name.startswith(SPILL_PREFIX)]
    assert not (tmp_path / "out").exists() and not made, "no job folder was made"


def test_each_job_is_given_the_staged_corpus_itself_and_no_strategy_can_write_it(strategy, sample_corpus, tmp_path):
    """No byte of the corpus is copied per job (a hard link to the staged file, 4.6 GB at 10^6
    trajectories), and the link is as read-only to a candidate as a copy was."""
    import hashlib
    import os

    from corpora import load_corpus
    from sandbox.curate import execute
    from sandbox.strategy_files import strategy_files

    hostile = strategy("""
        import os, sys
        def curate(raw, ctx):
            path = sys.argv[sys.argv.index("--corpus") + 1]
            tried = []
            for how in (lambda: open(path, "a").write("owned"), lambda: os.truncate(path, 0), lambda: os.chmod(path, 0o777)):
                try:
                    how()
                    tried.append("done")
                except OSError as exc:
                    tried.append(type(exc).__name__)
            raise RuntimeError(f"links={os.stat(path).st_nlink} tried={tried}")
    """)
    corpus = load_corpus([sample_corpus])
    before = (hashlib.sha256(open(corpus.staged, "rb").read()).hexdigest(), os.stat(corpus.staged).st_mode)
    with pytest.raises(CurationFailed) as info:
        execute(strategy_files(hostile), corpus, tmp_path / "hostile", executor=ProcessExecutor())
    assert "links=2 tried=['OSError', 'OSError', 'OSError']" in info.value.reason, info.value.reason
    assert (hashlib.sha256(open(corpus.staged, "rb").read()).hexdigest(), os.stat(corpus.staged).st_mode) == before
    assert os.stat(corpus.staged).st_nlink == 1   # the job's link went with its folder
    honest = execute(strategy_files(SEED_STRATEGY), corpus, tmp_path / "seed", executor=ProcessExecutor())
    assert honest.manifest.corpus.sha256 == corpus.sha256


def test_console_script_curates_the_bundled_corpus_and_prints_the_profile(tmp_path):
    done = subprocess.run([sys.executable, "-m", "evolver.cli", "curate", "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Cost_train" in done.stdout and "SFT records" in done.stdout
    said = re.search(r"memory: the strategy's peak resident memory was (\d+\.\d\d) GiB of the sandbox's (\d+\.\d\d) GiB cap",
                     done.stdout)
    assert said and 0 < float(said[1]) < float(said[2]), done.stdout   # what a user reads when a candidate is killed


def test_what_the_check_needs_is_read_while_the_sandbox_runs_and_a_failure_to_read_it_stops_the_curation(
        sample_corpus, tmp_path, monkeypatch):
    """The corpus's outcomes (by id, in corpus order) are read by a thread beside the sandbox; should
    the reading fail, its error is the curation's, and nothing is left in the output folder."""
    import threading
    from types import SimpleNamespace

    from corpora import load_corpus
    from sandbox import curate
    from sandbox.strategy_files import strategy_files

    records = [{"id": "b", "outcome": {"success": False}}, {"id": "a", "outcome": {"success": True}}, {"id": "c"}]
    thread = curate._raw_outcomes(SimpleNamespace(records=records))
    thread.join()
    assert thread.error is None and list(thread.outcomes.items()) == [("b", "failure"), ("a", "success"), ("c", "unknown")]

    class Unreadable:
        def __iter__(self):
            raise OSError("the records file went away")

    thread = curate._raw_outcomes(SimpleNamespace(records=Unreadable()))
    thread.join()
    assert isinstance(thread.error, OSError)
    monkeypatch.setattr(curate, "_raw_outcomes", lambda corpus: thread)
    with pytest.raises(OSError, match="went away"):
        curate.execute(strategy_files(SEED_STRATEGY), load_corpus([sample_corpus]), tmp_path / "out",
                       executor=ProcessExecutor())
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    assert not list(tmp_path.glob(".out.partial-*"))
    assert not [t for t in threading.enumerate() if t.name in ("load-check", "raw-outcomes")]
