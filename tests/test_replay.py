"""Replay re-executes into an empty directory and matches every artifact byte for byte — or says why not."""
import shutil
from pathlib import Path

import pytest

from evolver import cli
from base.errors import UserError
from conftest import curate_files
from sandbox.process_executor import ProcessExecutor
from sandbox.leftovers import reap_temporary_dirs
from sandbox.replay import replay

from conftest import SEED_STRATEGY


NOISY_MEMORY = """
    import os
    def curate(raw, ctx):
        out = honest(raw)
        out["memory"] = [{"id": "m", "key": "k", "content": os.urandom(8).hex()}]
        return out
"""   # a strategy whose memory differs on every run


def curated(strategy_dir, corpus, out, **kw):
    return curate_files(strategy_dir, [corpus], out, executor=ProcessExecutor(), **kw).out_dir


def test_seed_strategy_replays_byte_for_byte(sample_corpus, tmp_path):
    out = curated(SEED_STRATEGY, sample_corpus, tmp_path / "out")
    report = replay(out, tmp_path / "again", executor=ProcessExecutor())
    assert report.identical, report.differences
    for name in ("sft.jsonl", "rl.jsonl", "memory.jsonl", "profile.json", "manifest.json"):
        assert (out / name).read_bytes() == (tmp_path / "again" / name).read_bytes()


def test_seeded_rng_per_name_replays(strategy, sample_corpus, tmp_path):
    s = strategy("""
        def curate(raw, ctx):
            out = honest(raw)
            ctx.rng("order").shuffle(out["sft"])
            return out
    """)
    out = curated(s, sample_corpus, tmp_path / "out")
    assert replay(out, tmp_path / "again", executor=ProcessExecutor()).identical


def test_replay_fails_when_the_strategy_reads_unseeded_randomness(strategy, sample_corpus, tmp_path):
    s = strategy("""
        import random
        def curate(raw, ctx):
            out = honest(raw)
            random.shuffle(out["sft"])     # the global generator, seeded from the OS
            return out
    """)
    out = curated(s, sample_corpus, tmp_path / "out")
    report = replay(out, tmp_path / "again", executor=ProcessExecutor())
    assert not report.identical
    assert "sft.jsonl" in report.differences and "line" in report.differences["sft.jsonl"]


def test_replay_fails_when_the_hash_seed_is_not_pinned(strategy, sample_corpus, tmp_path):
    s = strategy("""
        def curate(raw, ctx):
            out = honest(raw)
            order = list({r["id"] for r in out["sft"]})   # set order follows the string hash seed
            by_id = {r["id"]: r for r in out["sft"]}
            out["sft"] = [by_id[i] for i in order]
            return out
    """)
    pinned = curated(s, sample_corpus, tmp_path / "pinned")
    assert replay(pinned, tmp_path / "pinned-again", executor=ProcessExecutor()).identical
    unpinned = curated(s, sample_corpus, tmp_path / "unpinned", hash_seed=None)
    assert not replay(unpinned, tmp_path / "unpinned-again", executor=ProcessExecutor()).identical


class ExplodingExecutor:
    name = "exploding"

    def run(self, job, limits):
        raise AssertionError("replay ran the strategy although an input had changed")


def test_one_byte_corpus_change_is_reported_before_running_anything(sample_corpus, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    shutil.copy(sample_corpus, corpus)
    out = curated(SEED_STRATEGY, corpus, tmp_path / "out")
    data = bytearray(corpus.read_bytes())
    data[data.index(b'"task":"') + 8] ^= 0x01   # one byte of the first task text
    corpus.write_bytes(bytes(data))
    with pytest.raises(UserError, match="corpus mismatch"):
        replay(out, tmp_path / "again", executor=ExplodingExecutor())
    assert not (tmp_path / "again").exists()


def test_changed_strategy_snapshot_is_reported_before_running_anything(sample_corpus, tmp_path):
    out = curated(SEED_STRATEGY, sample_corpus, tmp_path / "out")
    with open(out / "strategy" / "strategy.py", "a") as f:
        f.write("\n# edited\n")
    with pytest.raises(UserError, match="strategy mismatch"):
        replay(out, tmp_path / "again", executor=ExplodingExecutor())


def test_replay_command_exit_codes(strategy, sample_corpus, tmp_path, capsys):
    out = curated(SEED_STRATEGY, sample_corpus, tmp_path / "out")
    assert cli.main(["replay", str(out)]) == 0
    said = capsys.readouterr().out
    assert "replay identical" in said and "temporary output is removed" in said
    assert not [w for w in said.split() if w.startswith("/") and not Path(w.strip("();,")).exists()], said   # no path it deleted
    s = strategy(NOISY_MEMORY)
    noisy = curated(s, sample_corpus, tmp_path / "noisy")
    assert cli.main(["replay", str(noisy)]) == 1
    printed = capsys.readouterr().out
    assert "replay differs" in printed and "memory.jsonl: line 1 differs" in printed
    (kept,) = {Path(w.strip("();,:")) for w in printed.split() if w.startswith("/") and Path(w.strip("();,:")).is_dir()}
    assert (kept / "memory.jsonl").is_file()
    # kept for the user to read, it carries no owner mark: no later command removes it
    assert not list(kept.parent.glob(".curateevo-owner")) and reap_temporary_dirs() == 0 and kept.is_dir()


def test_a_manifest_lacking_fields_is_one_sentence(sample_corpus, tmp_path, capsys):
    import json as _json

    from evolver import cli
    from conftest import curate_files
    from sandbox.process_executor import ProcessExecutor
    from conftest import SEED_STRATEGY

    out = curate_files(SEED_STRATEGY, [sample_corpus], tmp_path / "out", executor=ProcessExecutor()).out_dir
    manifest = _json.loads((out / "manifest.json").read_text())
    del manifest["strategy"]["files_sha256"]
    (out / "manifest.json").write_text(_json.dumps(manifest))
    assert cli.main(["replay", str(out), "--sandbox", "process"]) == 2
    err = capsys.readouterr().err
    assert "the field 'strategy.files_sha256' is missing" in err and err.count("\n") == 1


def test_a_changed_runtime_is_said_and_the_bytes_still_compared(sample_corpus, tmp_path, monkeypatch):
    # a refactor of the toolkit or the checker changes the runtime hash; replay is how a user sees
    # that it left the outputs as they were: it compares anyway, setting aside only that field
    import sandbox.curate
    import sandbox.replay

    out = curated(SEED_STRATEGY, sample_corpus, tmp_path / "out")
    recorded = sandbox.curate.runtime_sha256()
    monkeypatch.setattr(sandbox.curate, "runtime_sha256", lambda: "f" * 64)
    monkeypatch.setattr(sandbox.replay, "runtime_sha256", lambda: "f" * 64)
    report = replay(out, tmp_path / "again", executor=ProcessExecutor())
    assert report.identical, report.differences
    assert report.runtime_changed == (recorded, "f" * 64)
    assert "the runtime changed since the output was made" in report.summary()
    assert '"runtime_sha256": "' + "f" * 64 in (tmp_path / "again" / "manifest.json").read_text()
    # an artifact that does differ is still caught
    (out / "sft.jsonl").write_bytes((out / "sft.jsonl").read_bytes().replace(b'"user"', b'"User"', 1))
    assert not replay(out, tmp_path / "third", executor=ProcessExecutor()).identical


@pytest.mark.parametrize("deleted", ["sft.jsonl", "profile.json"])
def test_a_deleted_artifact_is_one_sentence_naming_it_before_anything_runs(sample_corpus, tmp_path, capsys, deleted):
    out = curated(SEED_STRATEGY, sample_corpus, tmp_path / "out")
    (out / deleted).unlink()
    assert cli.main(["replay", str(out), "--sandbox", "process", "--out", str(tmp_path / "again")]) == 2
    err = capsys.readouterr().err
    assert f"{out / deleted} is missing" in err and "restore the file" in err and err.count("\n") == 1
    assert not (tmp_path / "again").exists(), "nothing was run"


def test_a_replay_that_cannot_keep_a_copy_compares_hashes_as_it_checks(strategy, sample_corpus, tmp_path,
                                                                       monkeypatch, capsys):
    """Where a second copy of the record files would not fit, a temporary replay hashes them as the
    check streams them, writes none, and compares the recorded files' bytes by sha256 — and says so;
    `--hashes` asks for it; a difference is still found, naming the file."""
    from sandbox import replay as replay_module

    out = curated(SEED_STRATEGY, sample_corpus, tmp_path / "out")
    said = []
    monkeypatch.setattr(replay_module, "ROOM", 1e15)   # no disk has room for this many copies
    report = replay(out, executor=ProcessExecutor(), say=said.append)
    assert report.identical and report.hashed, report.differences
    assert len(said) == 1 and "compared by sha256" in said[0] and "--out DIR" in said[0]
    assert not [n for n in ("sft.jsonl", "rl.jsonl", "memory.jsonl") if (report.out_dir / n).exists()]
    assert (report.out_dir / "manifest.json").read_bytes() == (out / "manifest.json").read_bytes()
    assert "by sha256" in report.summary(kept=False)
    monkeypatch.setattr(replay_module, "ROOM", 0.0)
    kept = replay(out, executor=ProcessExecutor(), say=said.append)   # room enough: the files written as before
    assert kept.identical and not kept.hashed and (kept.out_dir / "sft.jsonl").read_bytes() == (out / "sft.jsonl").read_bytes()
    assert len(said) == 1

    s = strategy(NOISY_MEMORY)
    noisy = curated(s, sample_corpus, tmp_path / "noisy")
    assert cli.main(["replay", str(noisy), "--hashes", "--out", str(tmp_path / "noisy-again")]) == 1
    printed = capsys.readouterr().out
    assert "memory.jsonl: sha256 differs" in printed and "--out DIR" in printed
    assert not (tmp_path / "noisy-again" / "memory.jsonl").exists() and (tmp_path / "noisy-again" / "manifest.json").exists()
    assert "sft.jsonl" not in printed   # what did not change is not named
