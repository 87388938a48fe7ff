"""`curateevo bench quality` on tiny real corpora (the first 40 bfcl-single train tasks), the
`test` recipe profile and five test tasks: the rows, the cells' cache, the report."""
import json

import pytest
from conftest import bench_quality

from experiments.quality import rows as rows_mod
from trainer.train import TrainSpec
from experiments.quality.cells import Cells, Setting
from base.errors import UserError
from base.files import atomic_json
from corpora import corpus_sha256, load_corpus
from sandbox.process_executor import ProcessExecutor
from sandbox.strategy_files import strategy_files
from workspace.repository import Workspace

pytestmark = pytest.mark.usefixtures("trained_once")   # the rows' tiny trainings, each trained once


def test_the_benchmark_fills_its_table_then_answers_from_the_cache_without_training(quality_corpora, tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    assert bench_quality(quality_corpora, cache, "--rows", "rho0-wild,rho0-labeled", "--seeds", "1") == 0
    printed = capsys.readouterr().out
    doc = json.loads((cache / "report-test" / "quality.json").read_text())
    assert [r["id"] for r in doc["rows"]] == ["rho0-wild", "rho0-labeled"]
    assert doc["tasks"] == 5 and doc["setting"]["split"] == "test"
    for row in doc["rows"]:
        assert not row.get("pending")
        assert 0 <= row["P"]["low"] <= row["P"]["value"] <= row["P"]["high"] <= 1
        assert row["P"]["method"] == "wilson"          # one seed
        assert set(row["per_category"]) == {"simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance"}
    assert "vs_rho0_wild" in doc["rows"][1] and "vs_rho0_wild" not in doc["rows"][0]
    assert (cache / "report-test" / "quality.png").stat().st_size > 1000
    assert "minimal detectable difference" in printed and "| ρ0 on the wild corpus (no curation) |" in printed
    assert len(list((cache / "trainings").iterdir())) == 2 and len(list((cache / "cells").iterdir())) == 2

    def no_work(*args, **kwargs):
        raise AssertionError("a cached cell was computed again")

    monkeypatch.setattr("trainer.train.train", no_work)
    monkeypatch.setattr("environments.evaluate.evaluate_to_dir", no_work)
    assert bench_quality(quality_corpora, cache, "--rows", "rho0-wild,rho0-labeled", "--seeds", "1") == 0
    assert json.loads((cache / "report-test" / "quality.json").read_text()) == doc


def test_the_oracle_trains_on_exactly_the_wild_records_labelled_clean(quality_corpora, tmp_path):
    wild, _ = quality_corpora
    labels = json.loads((wild / "noise_labels.json").read_text())["labels"]
    oracle = load_corpus([str(rows_mod.oracle_corpus(wild, tmp_path))])
    assert sorted(r["id"] for r in oracle.records) == sorted(k for k, v in labels.items() if v["noise"] == "clean")
    assert 0 < len(oracle.records) < len(labels)


def test_table_two_ablates_one_row_and_shares_what_an_ablation_does_not_change(quality_corpora, tmp_path):
    wild, labeled = quality_corpora
    rows = rows_mod.table_rows(("rho0-wild",), wild, labeled, [], tmp_path, "rho0-wild")
    assert [r.id for r in rows] == ["rho0-wild", "rho0-wild no-sft", "rho0-wild no-rl", "rho0-wild no-memory"]
    assert [r.table for r in rows] == [1, 2, 2, 2]
    cells = Cells(tmp_path / "cache", Setting(tasks=5, seeds=(0,), train=TrainSpec(profile="test")), ProcessExecutor())
    full, no_sft, no_rl, no_memory = rows
    assert cells.inputs(no_sft)["sft"] is None and cells.inputs(no_sft)["rl"] is not None
    assert cells.inputs(no_rl)["rl"] is None and cells.inputs(no_rl)["sft"] is not None
    keys = {r.id: cells.training_key(r, 0) for r in rows}
    assert len({keys[full.id], keys[no_sft.id], keys[no_rl.id]}) == 3
    assert keys[no_memory.id] == keys[full.id]             # without memory, the same training is evaluated
    assert cells.training_key(full, 1) != keys[full.id]     # a seed is its own cell
    both = no_sft.ablated("no-rl")
    assert cells.training_key(both, 0) is None              # nothing to train: the base model is evaluated
    some = rows_mod.table_rows(("rho0-wild",), wild, labeled, [], tmp_path, "rho0-wild:no-rl,no-memory")
    assert [r.id for r in some] == ["rho0-wild", "rho0-wild no-rl", "rho0-wild no-memory"]   # some of them


def test_the_augmenting_strategy_is_a_row_on_request_and_adds_to_what_it_trains_on(quality_corpora, tmp_path):
    wild, labeled = quality_corpora
    rho0, augment = rows_mod.table_rows(("rho0-wild", "augment"), wild, labeled, [], tmp_path, None)
    assert augment.files == strategy_files(rows_mod.AUGMENT) and augment.corpus == rho0.corpus
    cells = Cells(tmp_path / "cache", Setting(tasks=5, seeds=(0,), train=TrainSpec(profile="test")), ProcessExecutor())
    assert cells.training_key(augment, 0) != cells.training_key(rho0, 0)
    tags = [json.loads(json.loads(line)["meta"])["tags"] for line in cells.inputs(augment)["sft"][0].read_text().splitlines()]
    assert any("synthesised" in t for t in tags)
    with pytest.raises(UserError, match="one of rho0-wild, agentrefine, runs, oracle, rho0-labeled, augment"):
        rows_mod.table_rows(("augmented",), wild, labeled, [], tmp_path, None)


def test_a_runs_row_is_its_recorded_final_commit_with_its_ablations(quality_corpora, tmp_path):
    wild, labeled = quality_corpora
    run = tmp_path / "run-x"
    ws = Workspace.create(run / "strategy", rows_mod.SEED_STRATEGY, params={"lambda": 0.3})
    code = (rows_mod.SEED_STRATEGY / "strategy.py").read_text() + "\n# epoch 1's change\n"
    sha = ws.commit_candidate(1, {**ws.files("best"), "strategy.py": code.encode()}, "epoch 1 candidate")
    corpus = wild / "corpus.jsonl"
    atomic_json(run / "run.json", {"corpus": [str(corpus)], "corpus_sha256": corpus_sha256([str(corpus)]),
                                   "ablations": ["no-memory", "no-efficiency"]})
    (run / "journal.jsonl").write_text(json.dumps({"event": "stage_done", "epoch": -1, "stage": "final",
                                                   "result": {"epoch": 1, "commit": sha, "P": 0.2, "C": 0.1}}) + "\n")
    [row] = rows_mod.table_rows(("runs",), wild, labeled, [run], tmp_path, None)
    assert row.id == "run:run-x" and row.ablations == ("no-memory",) and row.table == 2
    assert row.label == "run run-x final (epoch 1) (no-efficiency, no-memory)"
    assert row.files["strategy.py"].decode() == code
    assert row.files["strategy.py"] != strategy_files(rows_mod.SEED_STRATEGY)["strategy.py"]


def test_what_a_user_gets_wrong_is_one_sentence_before_any_training(quality_corpora, tmp_path, capsys):
    wild, labeled = quality_corpora
    with pytest.raises(UserError, match="no such row"):
        rows_mod.table_rows(("rho0-wild",), wild, labeled, [], tmp_path, "agentrefine")
    with pytest.raises(UserError, match="unknown ablation 'no-data'"):
        rows_mod.table_rows(("rho0-wild",), wild, labeled, [], tmp_path, "rho0-wild:no-data")
    unfinished = tmp_path / "unfinished"
    Workspace.create(unfinished / "strategy", rows_mod.SEED_STRATEGY, params={})
    atomic_json(unfinished / "run.json", {"corpus_sha256": "x"})
    (unfinished / "journal.jsonl").write_text("")
    with pytest.raises(UserError, match="no final strategy"):
        rows_mod.run_row(unfinished, wild / "corpus.jsonl")
    with pytest.raises(UserError, match="noise labels"):
        rows_mod.oracle_corpus(labeled, tmp_path)
    assert bench_quality(quality_corpora, tmp_path / "c", "--spread", "--seeds", "1") == 2
    assert bench_quality(quality_corpora, tmp_path / "c", "--budget", "sft_max_steps") == 2
    with pytest.raises(SystemExit) as parse_error:
        bench_quality(quality_corpora, tmp_path / "c", "--shard", "2/2")
    assert parse_error.value.code == 2
    assert not (tmp_path / "c").exists()
    err = capsys.readouterr().err
    assert "error:" in err and "argument --shard: '2/2': write I/N with 0 <= I < N" in err


def test_a_second_invocation_does_not_compute_in_a_cache_another_is_filling(quality_corpora, tmp_path, capsys):
    import fcntl

    cache = tmp_path / "busy"
    cache.mkdir()
    with open(cache / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert bench_quality(quality_corpora, cache, "--rows", "rho0-wild", "--seeds", "1") == 2
    assert "another `bench quality` is computing" in capsys.readouterr().err
    assert not (cache / "trainings").exists()


def test_curations_made_where_the_sandbox_runs_are_reused_where_the_gpu_is(quality_corpora, tmp_path, monkeypatch):
    """`--curated-runtime`: a training machine without the sandbox reuses another machine's
    curations (same keys, executor None) and curates nothing; a row it lacks is one sentence."""
    wild, labeled = quality_corpora
    rho0, oracle = rows_mod.table_rows(("rho0-wild", "oracle"), wild, labeled, [], tmp_path, None)
    setting = Setting(tasks=5, seeds=(0,), train=TrainSpec(profile="test"))
    here = Cells(tmp_path / "cache", setting, ProcessExecutor())
    made = here.curation(rho0)
    monkeypatch.setattr("experiments.quality.cells.execute", lambda *a, **k: pytest.fail("a reused curation was executed"))
    monkeypatch.setattr("experiments.quality.cells.runtime_sha256", lambda: pytest.fail("the GPU machine hashed its own runtime"))
    there = Cells(tmp_path / "cache", setting, None, curated_runtime=here.runtime)
    assert not there.curate_here and there.curation(rho0) == made
    assert there.training_key(rho0, 0) == here.training_key(rho0, 0)
    with pytest.raises(UserError, match=r"row 'oracle' has no curation made under runtime .* curations/[0-9a-f]{24} here"):
        there.curation(oracle)
    other = Cells(tmp_path / "cache", setting, None, curated_runtime="0" * 64)
    with pytest.raises(UserError, match="row 'rho0-wild' has no curation made under runtime 000000000000"):
        other.curation(rho0)


def test_a_setting_may_score_some_categories_and_names_them_only_then(tmp_path):
    from experiments.quality.cells import Cells, Setting
    from sandbox.process_executor import ProcessExecutor
    from trainer.train import TrainSpec

    plain = Setting(benchmark="acebench", tasks=6, seeds=(0,), train=TrainSpec(profile="test"))
    assert "categories" not in plain.to_json()   # a setting made before the option keeps its key
    chosen = Setting(benchmark="acebench", tasks=6, seeds=(0,), train=TrainSpec(profile="test"),
                     categories=("special_irrelevant", "normal_atom_bool"))
    assert chosen.to_json()["categories"] == ("special_irrelevant", "normal_atom_bool")
    cells = Cells(tmp_path / "cache", chosen, ProcessExecutor())
    assert {t.category for t in cells.tasks} == {"special_irrelevant", "normal_atom_bool"} and len(cells.tasks) == 6
