"""Long sessions on the test profile (issue 74 item 6): a published tau-bench file, whose airline
policy and tools alone outgrow the profile's 1,024 tokens, is no longer refused; the run takes limits
measured from the corpus, says so and says `windows` in its candidates' ctx.budget (RunConfig.windows),
and ρ0 trains each long session as windows that fit them (toolkit.windows). Only then: in every other
run ρ0's artifacts are byte for byte those of ρ0 without a budget (the default loop is unchanged, though
the sample corpus has records longer than cpu-small's and test's max_length). Fixtures:
tests/fixtures/external (see tests/test_real_corpora_path.py for their source), the sample corpus, the
default run's corpus and the shipped glaive corpus."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from base.errors import UserError
from corpora import load_corpus
from curation_strategies import toolkit as tk
from curation_strategies.seed.strategy import curate as rho0
from evolver import cli, launch, run_cli
from environments.bfcl import corpus_builder
from evolver.config import RunConfig
from sandbox.curate import execute
from sandbox.manifest import Manifest
from sandbox.process_executor import ProcessExecutor
from sandbox.strategy_files import strategy_files
from trainer.data import IGNORE, read_records, sft_example
from trainer.length import _profile_tokenizer, profile_length_report
from trainer.recipe import curation_budget, get_profile
from sandbox import exchange

ROOT = Path(__file__).resolve().parents[1]
TAU = ROOT / "tests" / "fixtures" / "external" / "tau-bench-gpt-4o-airline.sample.json"
SAMPLE = ROOT / "environments" / "data" / "sample_corpus.jsonl"
SHORT = (SAMPLE, ROOT / "examples" / "corpora" / "glaive-toolcall-40.json")
SEED = strategy_files(ROOT / "curation_strategies" / "seed")


def created(tmp_path, name, corpus, *more):
    args = cli.build_parser().parse_args(
        ["run", "--corpus", *map(str, corpus), "--profile", "test", "--base", "tiny-random", "--epochs", "1",
         "--sandbox", "process", "--runs-dir", str(tmp_path), "--name", name, *more])
    return run_cli.create_run(run_cli.run_options(args))


def test_a_long_session_corpus_is_not_refused_by_the_test_profile_and_its_windows_fit(tmp_path, capsys):
    store = created(tmp_path, "tau", [TAU], "--benchmark", "bfcl-single", "--tasks", "2")
    err = capsys.readouterr().err
    config = RunConfig.from_json(json.loads((store.root / "run.json").read_text()))
    budget = config.train.budget
    said = next(line for line in err.splitlines() if line.startswith("length: "))
    assert "profile test's limits (1024 / 1536 tokens) hold no record of this corpus" in said
    assert f"--max-length {budget['max_length']} --train-max-prompt-tokens {budget['max_prompt_tokens']}" in said
    assert 1024 < budget["max_length"] <= 4096   # the context plus the profile's 1,024: not the 10,305 of a whole session
    assert config.windows and json.loads((store.root / "run.json").read_text())["windows"] is True   # resume reads it
    sft, rl = launch._rho0(config, launch.registry.get(config.benchmark).train_view(load_corpus([str(TAU)]),
                                                                                      config.effective_holdout).records)
    assert config.curation_budget["max_length"] == budget["max_length"]   # what ρ0 is given in the sandbox
    assert config.curation_budget["windows"] is True and any("window" in r["meta"]["tags"] for r in sft)
    report = profile_length_report(sft, rl, "test", budget["max_length"], budget["max_prompt_tokens"])
    assert report.survivors and report.sft_records - report.sft_dropped > report.sft_records * 3 // 4
    tokenizer = _profile_tokenizer(get_profile("test"))
    for record in sft:
        ex = sft_example(exchange.from_file("sft", record), tokenizer, 1 << 62)
        own = sum(record.get("weights") or [1])
        # a window fits, unless it is one step whose tool results alone outgrow it
        assert len(ex["input_ids"]) <= budget["max_length"] or own == 1, (record["id"], len(ex["input_ids"]))
        assert [label for label in ex["labels"] if label != IGNORE]


def test_windows_train_each_turn_once_with_its_context_and_cut_only_between_steps():
    records = load_corpus([str(TAU)]).records
    for raw in records:
        turns = tk.assistant_indices(raw["messages"])
        windows = tk.windows(raw, 2048)
        assert sum(sum(w.weights) for w in windows) == len(turns)      # every turn trained, once
        assert [w.start for w in windows] == sorted({w.start for w in windows})
        for w in windows:
            assert w.messages[0] == raw["messages"][0] and w.messages[0]["role"] == "system"
            assert any(m["role"] == "user" for m in w.messages)          # the request it answers
            called = {c["id"] for m in w.messages for c in m.get("tool_calls") or ()}
            answered = {m.get("tool_call_id") for m in w.messages if m["role"] == "tool"}
            assert answered <= called and called <= answered              # no call or result cut from its pair
            if len(windows) > 1:
                assert tk.window_tokens(raw, w.messages) <= 2048 * tk.WINDOW_SHARE or sum(w.weights) == 1
    assert any(len(tk.windows(raw, 2048)) > 1 for raw in records)


def test_a_trajectory_within_the_budget_or_whose_context_leaves_no_room_is_one_segment_itself():
    raw = load_corpus([str(TAU)]).records[0]
    body = list(raw["messages"])
    while body[-1]["role"] == "user":   # a closing "thank you" trains nothing (as `segment` leaves it out)
        body.pop()
    for budget in (1 << 20, 64):
        (only,) = tk.windows(raw, budget)
        assert only.messages == body and only.weights == [1] * len(tk.assistant_indices(raw["messages"]))


@pytest.mark.parametrize("corpus", (*SHORT, TAU), ids=lambda p: p.name)
@pytest.mark.parametrize("profile", ["cpu-small", "test", "paper"])
def test_rho0_keeps_every_trajectory_whole_unless_the_budget_says_windows(corpus, profile):
    records = load_corpus([str(corpus)]).records
    without = rho0(records, SimpleNamespace(toolkit=tk, budget=None))
    budget = curation_budget(get_profile(profile))
    assert "windows" not in budget   # the profile's budget never says it: only a run that took its limits does
    for given in (budget, {**budget, "max_length": 256}, {**budget, "windows": False}):
        within = rho0(records, SimpleNamespace(toolkit=tk, budget=given))
        assert within.sft == without.sft and within.memory == without.memory
        assert _bounded(within.rl, without.rl, given["max_length"])
        assert all("window" not in r["meta"]["tags"] for r in within.sft)
    windowed = rho0(records, SimpleNamespace(toolkit=tk, budget={**budget, "windows": True}))
    assert _bounded(windowed.rl, without.rl, budget["max_length"]) and windowed.memory == without.memory   # windows cut SFT records alone


def _bounded(rl, whole, max_tokens) -> bool:
    """Every step's RL record, each the whole prefix's or one cut to its latest messages within
    max_tokens (toolkit.rl.recent_prefix: tests/test_rl_prefix.py)."""
    def cut(a, b):
        step = b["meta"]["provenance"]["steps"][-1]
        kept = iter(a["messages"])
        return (step.get("params", {}).get("max_tokens") == max_tokens and len(b["messages"]) < len(a["messages"])
                and all(m in kept for m in b["messages"]) and {**b, "messages": a["messages"], "meta": a["meta"]} == a)
    return [r["id"] for r in rl] == [r["id"] for r in whole] and all(a == b or cut(a, b) for a, b in zip(whole, rl))


def _artifacts(corpus, out, budget):
    manifest = execute(SEED, corpus, out, executor=ProcessExecutor(), budget=budget).manifest
    return manifest, {name: (out / name).read_bytes() for name in manifest.hashes()}


@pytest.mark.parametrize("profile", ["cpu-small", "test"])
def test_rho0s_artifacts_on_the_default_corpora_are_those_without_a_budget(tmp_path, profile):
    """The sample corpus (the loop-identity and resume runs' corpus: 45 records, some longer than
    cpu-small's 1,536 and test's 1,024 tokens, which windows would make 219 and 77) and the default
    run's corpus sized to the profile, curated by ρ0 in the sandbox with the budget such a run gives
    (RunConfig.curation_budget): every artifact byte for byte ρ0's with no budget."""
    budget = RunConfig(profile=profile).curation_budget
    assert budget == curation_budget(get_profile(profile)) and "windows" not in budget
    default = corpus_builder.cached(tmp_path / "cache", "bfcl-single", "wild", 0, budget["sft_examples"]) / "corpus.jsonl"
    for name, path in (("sample", SAMPLE), ("default", default)):
        corpus = load_corpus([str(path)])
        manifest, files = _artifacts(corpus, tmp_path / f"{name}-budget", budget)
        plain, plain_files = _artifacts(corpus, tmp_path / f"{name}-none", None)
        assert files == plain_files and manifest.hashes() == plain.hashes() and set(files) >= {"sft.jsonl", "rl.jsonl"}
        assert manifest.counts()["sft.jsonl"] == len([t for t in corpus.records if not tk.is_empty(t)])   # one a trajectory
        assert b'"window"' not in files["sft.jsonl"]
    windowed = rho0(load_corpus([str(SAMPLE)]).records, SimpleNamespace(toolkit=tk, budget={**budget, "windows": True}))
    assert len(windowed.sft) == {"cpu-small": 219, "test": 77}[profile]   # what the flag would do to this corpus


def test_windows_happen_only_when_the_run_chose_its_limits_from_the_corpus(tmp_path):
    """A run on the sample corpus (its limits the profile's, or the user's) says no `windows`; a run on
    long sessions that took its limits from the corpus does, and ρ0 in the sandbox then trains windows,
    its manifest keeping the flag for replay; the same limits without the flag keep every session whole."""
    for name, more in (("profile", ()), ("named", ("--max-length", "512"))):
        written = json.loads((created(tmp_path, name, [SAMPLE], *more).root / "run.json").read_text())
        config = RunConfig.from_json(written)
        assert not config.windows and "windows" not in config.curation_budget and "windows" not in written, name
    config = RunConfig.from_json(json.loads((created(tmp_path, "tau", [TAU], "--benchmark", "bfcl-single", "--tasks",
                                                     "2").root / "run.json").read_text()))
    assert config.windows and config.curation_budget["windows"] is True
    corpus = load_corpus([str(TAU)])
    manifest, files = _artifacts(corpus, tmp_path / "windows", config.curation_budget)
    assert manifest.budget == config.curation_budget   # replay passes it again
    tags = [r["meta"]["tags"] for r in read_records(tmp_path / "windows" / "sft.jsonl", "sft")]
    assert sum("window" in t for t in tags) > len(corpus.records) and manifest.counts()["sft.jsonl"] > len(corpus.records)
    whole = {k: v for k, v in config.curation_budget.items() if k != "windows"}
    _, whole_files = _artifacts(corpus, tmp_path / "whole", whole)
    _, plain_files = _artifacts(corpus, tmp_path / "none", None)
    assert whole_files == plain_files and b'"window"' not in whole_files["sft.jsonl"]
    with pytest.raises(UserError, match="windows must be false unless the run's max_length is set"):
        RunConfig(profile="test", windows=True)   # windows of no limit: never a run's


def test_a_limit_the_user_names_is_kept_and_still_refused_when_nothing_fits(tmp_path, capsys):
    assert cli.main(["run", "--corpus", str(TAU), "--profile", "test", "--base", "tiny-random", "--benchmark",
                     "bfcl-single", "--sandbox", "process", "--max-length", "1024", "--runs-dir", str(tmp_path),
                     "--name", "t"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("curateevo: error: nothing would be trained: ρ0 keeps every record whole")
    assert "a run with --max-length " in err[0] and not (tmp_path / "t").exists()


def test_the_length_check_stops_at_the_first_trajectories_rho0_trains_and_decides_as_the_whole_report(monkeypatch):
    """A run's length check curates and measures ρ0's records a few trajectories at a time and stops at
    the first part that trains something (a corpus of 10^5 is not tokenised whole before its run exists);
    it decides as the report over the whole corpus does."""
    config = RunConfig(profile="test", base="tiny-random", benchmark="bfcl-single")
    records = launch.registry.get(config.benchmark).train_view(load_corpus([str(SAMPLE)]),
                                                                config.effective_holdout).records
    monkeypatch.setattr(launch, "RHO0_CHUNK", 8)
    assert len(records) > 2 * launch.RHO0_CHUNK
    seen = []
    measure, curate = launch._rho0_lengths, launch._rho0
    monkeypatch.setattr(launch, "_rho0", lambda cfg, part: seen.append(len(part)) or curate(cfg, part))
    assert launch.check_run_lengths(config, load_corpus([str(SAMPLE)])) == (config, None)
    assert seen == [8]   # one part measured, not the corpus
    assert measure(config, records).survivors   # what the whole report says too
    seen.clear()
    tiny = config.train.with_budget(max_length=8, max_prompt_tokens=8)   # nothing fits: every part, then the report
    with pytest.raises(UserError, match="nothing would be trained"):
        launch.check_run_lengths(config.replace(train=tiny.model_dump()), load_corpus([str(SAMPLE)]))
    assert seen[-1] == len(records) and sum(seen[:-1]) == len(records)
