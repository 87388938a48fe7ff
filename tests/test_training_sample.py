"""A training reads at most `TRAIN_SAMPLE` records of a file: all of a small curation (as before,
byte for byte), a fixed uniform sample of a large one — the same records for the length report and
the worker, and only those decoded, so the host's training stage holds a bounded amount at any
corpus size (issue 74: at 10^5 trajectories the length report held 6.3 GiB)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from base.errors import UserError
from corpora import load_corpus
from sandbox import exchange
from trainer import data, models
from trainer.length import files_length_report, profile_length_report

TESTS = Path(__file__).resolve().parent
TAU = TESTS / "fixtures" / "external" / "tau-bench-gpt-4o-airline.sample.json"


@pytest.fixture(scope="module")
def curated(tmp_path_factory) -> dict[str, Path]:
    """The seed strategy's SFT and RL files of real tau-bench trajectories (5 and 48 records)."""
    sys.path.insert(0, str(TESTS))
    from test_strategies import curate

    result = curate("seed", load_corpus(TAU).records)
    folder = tmp_path_factory.mktemp("curated")
    files = {}
    for kind, records in (("sft", result.sft), ("rl", result.rl)):
        files[kind] = folder / f"{kind}.jsonl"
        files[kind].write_text("".join(json.dumps(exchange.to_file(kind, r)) + "\n" for r in records))
    return files


def test_a_file_within_the_sample_is_read_whole_and_its_report_is_unchanged(curated):
    for kind in ("sft", "rl"):
        read = data.training_sample(curated[kind], kind)
        assert not read.sampled and read.places is None
        assert read.records == data.read_records(curated[kind], kind) and read.of == len(read.records)
    report = files_length_report(curated["sft"], curated["rl"], "test")
    whole = profile_length_report(data.read_records(curated["sft"], "sft"), data.read_records(curated["rl"], "rl"), "test")
    assert report == whole and report.to_json() == whole.to_json()
    assert "sft_of" not in report.to_json() and "sample" not in report.summary()


def test_a_larger_file_gives_a_fixed_uniform_sample_in_file_order(curated, monkeypatch):
    monkeypatch.setattr(data, "TRAIN_SAMPLE", 10)
    every = data.read_records(curated["rl"], "rl")
    read = data.training_sample(curated["rl"], "rl")
    assert read.sampled and read.of == len(every) == 48 and len(read.records) == 10
    assert read.places == sorted(read.places) and len(set(read.places)) == 10
    assert read.records == [every[i] for i in read.places]
    assert data.training_sample(curated["rl"], "rl") == read                 # the same sample every time
    assert read.places != list(range(10)) and max(read.places) > 24         # drawn from the whole file


def test_only_the_sampled_records_are_decoded(curated, monkeypatch):
    monkeypatch.setattr(data, "TRAIN_SAMPLE", 7)
    decoded = []
    real = exchange.from_file
    monkeypatch.setattr(data.exchange, "from_file", lambda kind, row: decoded.append(kind) or real(kind, row))
    data.training_sample(curated["rl"], "rl")
    assert len(decoded) == 7


def test_the_length_report_of_a_sample_says_so(curated, monkeypatch):
    monkeypatch.setattr(data, "TRAIN_SAMPLE", 10)
    report = files_length_report(curated["sft"], curated["rl"], "test")
    assert (report.sft_records, report.sft_of, report.rl_records, report.rl_of) == (5, None, 10, 48)
    assert "RL 10 (a sample of the file's 48)" in report.summary() and report.to_json()["rl_of"] == 48
    assert "sft_of" not in report.to_json()


def test_sft_examples_of_a_sample_name_their_records_in_the_file(curated, monkeypatch):
    monkeypatch.setattr(data, "TRAIN_SAMPLE", 3)
    read = data.training_sample(curated["sft"], "sft")
    tokenizer = models.load_tokenizer(str(models.embedded_tokenizer_dir()))
    examples, stats = data.sft_examples(read.records, tokenizer, 1 << 20, places=read.places)
    assert stats.records == 3 and [e["record"] for e in examples] == read.places


def test_a_bad_record_the_training_would_read_fails_before_a_child_starts_with_its_line(curated, tmp_path):
    from trainer.train import train

    bad = tmp_path / "rl.jsonl"
    lines = curated["rl"].read_text().splitlines(keepends=True)
    bad.write_text("".join(lines[:30]) + '{"messages": 3}\n' + "".join(lines[30:]))
    with pytest.raises(UserError, match=r"rl.jsonl:31: not a valid RL record"):
        train(None, bad, tmp_path / "out", profile="test")
    assert not (tmp_path / "out").exists()


def test_the_training_summary_says_when_it_read_a_sample(tmp_path):
    from trainer.cli import format_summary

    stats = {"examples": 9, "records": 10, "trained_tokens": 1, "tokens": 2, "truncated": 0, "dropped_untrained": 1}
    rl = {"prompts": 10, "records": 10, "shortened": 0, "dropped_too_long": 0}
    summary = {"base": "tiny-random", "device": "cpu", "threads": 2, "profile": {"name": "test"}, "wall_s": 1,
               "peak_memory_mb": 1, "data": {"sft": stats, "rl": rl, "sampled": {"rl": {"records": 10, "of": 48}}}}
    text = format_summary(summary, tmp_path)
    assert "9 of 10 records, 1 trained" in text and "10 of 10 prompts (a sample of the file's 48)" in text


def test_every_profile_trains_fewer_examples_and_prompts_than_the_sample_holds():
    from trainer.recipe import PROFILES

    for profile in PROFILES.values():
        assert profile.sft_max_steps * profile.sft_batch_size * profile.sft_grad_accum < data.TRAIN_SAMPLE, profile.name
        assert profile.grpo_max_steps * profile.grpo_prompts_per_step < data.TRAIN_SAMPLE, profile.name
