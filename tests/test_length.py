"""What a profile's length limits do to a curation, measured before training, on real data:
tau-bench's airline policy prompt and its tools make long records."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from corpora import load_corpus
from trainer import models
from trainer.data import rl_rows
from trainer.length import length_report, profile_length_report

TESTS = Path(__file__).resolve().parent
TAU = TESTS / "fixtures" / "external" / "tau-bench-gpt-4o-airline.sample.json"


@pytest.fixture(scope="module")
def tokenizer():
    return models.load_tokenizer(str(models.embedded_tokenizer_dir()))


@pytest.fixture(scope="module")
def seed_curation():
    sys.path.insert(0, str(TESTS))
    from test_strategies import curate

    return curate("seed", load_corpus(TAU).records)


def test_long_multi_turn_records_are_counted_as_cut_or_dropped(tokenizer, seed_curation):
    sft, rl = seed_curation.sft, seed_curation.rl
    roomy = length_report(sft, rl, tokenizer, max_length=32768, max_prompt_tokens=32768)
    assert (roomy.sft_cut, roomy.sft_dropped, roomy.rl_cut, roomy.rl_dropped) == (0, 0, 0, 0)
    assert roomy.survivors == len(sft) + len(rl) == 5 + 48
    # the airline policy and the corpus's catalogue of 14 tools take ~1,600 tokens before the first turn
    tight = length_report(sft, rl, tokenizer, max_length=1620, max_prompt_tokens=1620)
    assert tight.sft_cut == len(sft) and 0 < tight.sft_dropped < len(sft)
    assert tight.rl_dropped > len(rl) / 2
    assert tight.survivors == len(sft) - tight.sft_dropped + len(rl) - tight.rl_dropped
    assert "SFT 5: 5 cut" in tight.summary()


def test_nothing_survives_limits_shorter_than_the_system_prompt(tokenizer, seed_curation):
    report = length_report(seed_curation.sft, seed_curation.rl, tokenizer, max_length=64,
                           max_prompt_tokens=64)
    assert report.survivors == 0
    assert report.to_json()["survivors"] == 0
    # a run's journal keeps the prompt cap by its name before issue 72, so its stage results are as they were
    assert report.to_json()["max_prompt_length"] == 64 and "max_prompt_tokens" not in report.to_json()


def test_a_profile_supplies_the_tokenizer_and_limits_and_max_length_overrides(seed_curation):
    cpu = profile_length_report(seed_curation.sft, seed_curation.rl, "cpu-small")
    assert (cpu.max_length, cpu.max_prompt_tokens) == (1536, 1536)
    longer = profile_length_report(seed_curation.sft, seed_curation.rl, "cpu-small", max_length=8192)
    assert longer.max_length == 8192 and longer.sft_dropped <= cpu.sft_dropped


@pytest.mark.parametrize("limit, cut, dropped", [(700, 0, 6), (1650, 2, 4), (2000, 4, 0)])
def test_rl_counts_equal_what_the_trainer_does_to_the_prompts(tokenizer, seed_curation, limit,
                                                              cut, dropped):
    rl = seed_curation.rl[::8]                 # a spread of prefix lengths, kept small for speed
    _, stats = rl_rows(rl, tokenizer, limit)
    report = length_report([], rl, tokenizer, max_length=1, max_prompt_tokens=limit)
    assert (report.rl_cut, report.rl_dropped) == (stats.shortened, stats.dropped_too_long) == (cut, dropped)


def test_the_report_says_which_limits_keep_every_record(tokenizer, seed_curation):
    tight = length_report(seed_curation.sft, seed_curation.rl, tokenizer, max_length=1024, max_prompt_tokens=1024)
    whole = length_report(seed_curation.sft, seed_curation.rl, tokenizer, max_length=tight.sft_longest,
                          max_prompt_tokens=tight.rl_longest)
    assert (whole.sft_cut, whole.sft_dropped, whole.rl_cut, whole.rl_dropped) == (0, 0, 0, 0)
    longest = tight.sft_longest
    assert f"--max-length {-(-longest // 256) * 256} keeps every SFT record whole (the longest has {longest} tokens)" \
        in tight.advice()
    assert f"--train-max-prompt-tokens {-(-tight.rl_longest // 256) * 256} keeps every RL prompt" in tight.advice()
    assert whole.advice() == ""


def test_trains_any_answers_as_the_reports_survivors_do(seed_curation):
    from trainer.length import trains_any

    sft, rl = seed_curation.sft, seed_curation.rl
    for max_length, cap in ((64, 64), (64, 4096), (2048, 64), (1024, 1536)):
        for parts in ((sft, rl), (sft, []), ([], rl), (sft[-1:], rl[-1:])):
            report = profile_length_report(*parts, "test", max_length, cap)
            assert trains_any(*parts, "test", max_length, cap) == (report.survivors > 0), (max_length, cap, len(parts[0]))


def test_counting_reads_its_texts_as_it_counts_and_encodes_a_bounded_batch(tokenizer, monkeypatch):
    """`_token_counts` holds at most BATCH_CHARS characters of text (or one longer text) at once and
    asks for the next text only when it has room: the length report on a long-session curation no
    longer holds every cut record's whole text and all their encodings at once (3.6 GiB at 10^3)."""
    from trainer import length

    monkeypatch.setattr(length, "BATCH_CHARS", 10_000)
    texts = [f"call {i}: " + "tool output line\n" * (150 + 40 * (i % 7)) for i in range(40)] + ["x" * 25_000]
    made, batches = [], []

    def lazily():
        for text in texts:
            made.append(text)
            yield text

    def counting(batch, **options):
        batches.append((sum(map(len, batch)), len(made) - sum(map(len, seen)) - len(batch), len(batch)))
        seen.append(list(batch))
        return tokenizer(batch, **options)

    seen = []
    counts = length._token_counts(counting, lazily())
    assert counts == [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
    assert len(batches) > 5
    for chars, made_beyond, size in batches:
        assert chars <= 10_000 or size == 1   # the 25,000-character text goes alone
        assert made_beyond <= 1               # at most the text that did not fit is waiting
