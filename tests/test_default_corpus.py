"""The default corpus is sized to the profile's training budget, so what ρ0 curates on the default
setting is all trained (epochs_seen ≥ 1), and the default profile's trainer consumes every curated
SFT example of a small corpus."""
import json
from collections import Counter

import pytest

from environments.bfcl import corpus_builder
from evolver import cli
from evolver import run_cli
from evolver.config import RunConfig
from corpora import load_corpus
from sandbox.curate import execute
from sandbox.process_executor import ProcessExecutor
from sandbox.strategy_files import strategy_files
from trainer.recipe import RECIPE, curation_budget, get_profile
from trainer.sft import sft_steps
from trainer.train import train

from conftest import SEED_STRATEGY


def _task(record):
    return record["meta"]["env"]["task_id"]


def test_a_sized_corpus_takes_whole_tasks_seeded_and_keeps_each_categorys_share():
    full, full_labels, _ = corpus_builder.build("bfcl-single", "wild", 0)
    sized, labels, info = corpus_builder.build("bfcl-single", "wild", 0, max_records=280)
    assert len(sized) <= 280 and info["records"] == len(sized) and info["records_unsized"] == len(full) == 1230
    assert len(sized) >= 270   # the budget is filled, not merely respected
    tasks = {_task(r) for r in sized}
    assert [r["id"] for r in full if _task(r) in tasks] == [r["id"] for r in sized]   # whole tasks, order kept
    assert set(labels) == {r["id"] for r in sized} and all(labels[k] == full_labels[k] for k in labels)
    share = Counter(r["meta"]["env"]["variant"] for r in full)
    got = Counter(r["meta"]["env"]["variant"] for r in sized)
    for variant, n in share.items():
        assert abs(got[variant] - n * len(sized) / len(full)) <= 6, (variant, got[variant])
    again, _, _ = corpus_builder.build("bfcl-single", "wild", 0, max_records=280)
    assert [r["id"] for r in again] == [r["id"] for r in sized]
    other, _, _ = corpus_builder.build("bfcl-single", "wild", 1, max_records=280)
    assert {_task(r) for r in other} != tasks   # another seed draws other tasks
    labeled, _, _ = corpus_builder.build("bfcl-single", "labeled", 0, max_records=280)
    assert {_task(r) for r in labeled} == tasks   # the labeled corpus of the same tasks


def test_the_default_run_trains_every_record_rho0_curates(tmp_path, monkeypatch):
    monkeypatch.setattr(run_cli, "RUNS", tmp_path / "cache")
    args = cli.build_parser().parse_args(["run", "--runs-dir", str(tmp_path / "runs"), "--name", "r"])
    config = RunConfig.from_json(json.loads((run_cli.create_run(run_cli.run_options(args)).root / "run.json").read_text()))
    budget = curation_budget(get_profile("cpu-small"))
    assert config.train.profile == "cpu-small" and config.curation_budget == budget
    (path,) = config.corpus
    assert path.endswith(f"bfcl-single-wild-seed0-max{budget['sft_examples']}/corpus.jsonl")
    corpus = load_corpus([path])
    curated = execute(strategy_files(SEED_STRATEGY), corpus, tmp_path / "rho0", executor=ProcessExecutor(), budget=budget).manifest
    examples = curated.counts()["sft.jsonl"]
    assert 0 < examples <= budget["sft_examples"]
    profile = get_profile("cpu-small")
    seen = sft_steps(RECIPE, profile, examples) * profile.sft_batch_size * profile.sft_grad_accum
    assert seen / examples >= 1   # summary.json's sft.epochs_seen


def test_the_default_profiles_trainer_consumes_every_curated_example_of_a_small_corpus(tmp_path):
    corpus = load_corpus([str(corpus_builder.cached(tmp_path, "bfcl-single", "wild", 0, 12) / "corpus.jsonl")])
    out = execute(strategy_files(SEED_STRATEGY), corpus, tmp_path / "curated", executor=ProcessExecutor()).out_dir
    n = sum(1 for _ in open(out / "sft.jsonl"))
    summary = train(out / "sft.jsonl", None, tmp_path / "train", base="tiny-random", profile="cpu-small", seed=0)
    assert summary["sft"]["examples_seen"] >= n and summary["sft"]["epochs_seen"] >= 1
    assert summary["sft"]["epochs_seen"] == RECIPE.sft_epochs   # a small set is trained the recipe's two passes
    assert sorted(summary["sft"]["records_reached"]) == list(range(n))   # every line of sft.jsonl
    budgeted = train(out / "sft.jsonl", None, tmp_path / "train-test", base="tiny-random", profile="test", seed=0)
    reached = budgeted["sft"]["records_reached"]   # 3 steps × 2: the lines the budget reached, no more
    assert len(reached) == len(set(reached)) == budgeted["sft"]["examples_seen"] < n and set(reached) <= set(range(n))


def test_corpus_build_sizes_on_request(tmp_path, capsys):
    assert cli.main(["corpus", "build", "bfcl-single", "--setting", "wild", "--out", str(tmp_path), "--quiet",
                     "--max-records", "40"]) == 0
    info = json.loads((tmp_path / "build.json").read_text())
    assert info["max_records"] == 40 and info["records"] <= 40 and info["records_unsized"] == 1230
    assert capsys.readouterr().out.startswith(f"{info['records']} records from")
    with pytest.raises(SystemExit) as exited:
        cli.main(["corpus", "build", "bfcl-single", "--setting", "wild", "--out", str(tmp_path), "--max-records", "0"])
    assert exited.value.code == 2 and "--max-records: '0': give a whole number of 1 or more" in capsys.readouterr().err
