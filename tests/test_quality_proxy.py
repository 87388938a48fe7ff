"""The quality benchmark's proxy column (how well the loop's candidate proxy ranks strategies
against the full recipe), a run's other candidates as rows, and a run's trainings reused by the
benchmark's cache — on tiny real corpora, the `test` profile and five tasks."""
import json
import shutil

import pytest
from conftest import bench_quality

from experiments.quality import proxy
from experiments.quality import rows as rows_mod
from trainer.train import TrainSpec
from experiments.quality.cells import Cells, Setting
from evolver.config import RunConfig
from base.files import atomic_json, read_json
from corpora import corpus_sha256
from sandbox.process_executor import ProcessExecutor
from workspace.repository import Workspace

pytestmark = pytest.mark.usefixtures("trained_once")   # the rows' tiny trainings, each trained once


def test_the_benchmarks_proxy_is_the_one_the_loop_ranks_candidates_by():
    import evolver.evaluation as loop_evaluation
    from experiments import train_eval as stages

    cfg = RunConfig()
    assert (proxy.SFT_STEPS_PER_UNIT, proxy.TASKS_PER_UNIT, proxy.LAMBDA) == (cfg.proxy_sft_steps, cfg.proxy_tasks, cfg.lam)
    assert proxy.proxy_specs is loop_evaluation.proxy_specs is stages.proxy_specs   # one definition of the proxy


def test_agreement_counts_pairs_and_ranks_and_says_when_a_correlation_cannot_be_told():
    full = {"a": 0.1, "b": 0.2, "c": 0.3, "d": 0.4}
    same = proxy.agreement({"a": 1, "b": 2, "c": 3, "d": 4}, full)
    assert same["spearman"] == pytest.approx(1) and same["kendall"] == pytest.approx(1)
    assert same["pairs"] == {"concordant": 6, "discordant": 0, "tied": 0} and same["best_proxy"] == same["best_full"] == "d"
    reversed_ = proxy.agreement({"a": 4, "b": 3, "c": 2, "d": 1}, full)
    assert reversed_["spearman"] == pytest.approx(-1) and reversed_["pairs"]["discordant"] == 6
    assert reversed_["best_proxy"] == "a" and reversed_["best_full"] == "d"
    tied = proxy.agreement({"a": 1, "b": 1, "c": 2, "d": 3}, full)
    assert tied["pairs"] == {"concordant": 5, "discordant": 0, "tied": 1}
    two = proxy.agreement({"a": 1, "b": 2}, full)
    assert two["n"] == 2 and two["spearman"] is None and two["pairs"]["concordant"] == 1
    assert proxy.agreement({"a": 1, "b": 1, "c": 1}, full)["spearman"] is None   # a constant proxy ranks nothing


def test_the_proxy_column_scores_each_row_once_and_answers_again_from_its_cache(quality_corpora, tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    assert bench_quality(quality_corpora, cache, "--rows", "rho0-wild", "--seeds", "1", "--proxy", "0") == 2
    assert "--proxy '0': give the proxy's units as whole numbers of 1 or more" in capsys.readouterr().err
    assert bench_quality(quality_corpora, cache, "--rows", "rho0-wild,rho0-labeled,oracle", "--seeds", "1", "--proxy", "1") == 0
    printed = capsys.readouterr().out
    doc = json.loads((cache / "report-test" / "quality.json").read_text())["proxy"]
    assert set(doc["rows"]) == {"rho0-wild", "rho0-labeled", "oracle"}
    for scored in doc["rows"].values():
        p = scored["proxy"]["1"]
        assert 0 <= p["P"] <= 1 and p["tasks"] == 10 and p["sft_steps"] == 10
        assert p["J"] == pytest.approx(p["P"] - 0.3 * p["C"]) and scored["full"]["C"] == p["C"]
    agreement = doc["agreement"]["1"]["P"]
    assert agreement["n"] == 3 and sum(agreement["pairs"].values()) == 3
    assert len(list((cache / "proxies").iterdir())) == 3
    assert "**Proxy vs full recipe**" in printed and "1 unit(s), P:" in printed
    for proxied in (cache / "proxies").iterdir():   # the proxy trained 10 SFT steps, no RL, on 10 dev tasks
        got = read_json(proxied / "proxy.json")
        assert got["sft_steps"] == 10 and got["tasks"] == 10

    def no_work(*args, **kwargs):
        raise AssertionError("a cached proxy was computed again")

    monkeypatch.setattr("trainer.train.train", no_work)
    monkeypatch.setattr("environments.evaluate.evaluate_to_dir", no_work)
    assert bench_quality(quality_corpora, cache, "--rows", "rho0-wild,rho0-labeled,oracle", "--seeds", "1", "--proxy", "1") == 0
    assert json.loads((cache / "report-test" / "quality.json").read_text())["proxy"] == doc
    assert bench_quality(quality_corpora, cache, "--rows", "rho0-wild,rho0-labeled,oracle", "--seeds", "1", "--proxy", "1,2",
                 "--report-only") == 0   # a proxy not computed yet is reported as such, not computed
    again = json.loads((cache / "report-test" / "quality.json").read_text())["proxy"]
    assert again["rows"]["oracle"]["proxy"]["2"]["P"] is None and again["agreement"]["2"]["P"]["n"] == 0


def _run(tmp_path, wild, decisions, final):
    run = tmp_path / "run-x"
    ws = Workspace.create(run / "strategy", rows_mod.SEED_STRATEGY, params={"lambda": 0.3})
    commits = {}
    for epoch in sorted({d[0] for d in decisions}):
        code = (rows_mod.SEED_STRATEGY / "strategy.py").read_text() + f"\n# epoch {epoch}'s change\n"
        commits[epoch] = ws.commit_candidate(epoch, {**ws.files("best"), "strategy.py": code.encode()}, f"epoch {epoch}")
    corpus = wild / "corpus.jsonl"
    atomic_json(run / "run.json", {"corpus": [str(corpus)], "corpus_sha256": corpus_sha256([str(corpus)]), "ablations": []})
    events = [{"event": "stage_done", "epoch": e, "stage": "decide", "result": {"epoch": e, "commit": commits[e],
                                                                                 "accepted": ok}} for e, ok in decisions]
    events.append({"event": "stage_done", "epoch": -1, "stage": "final", "result": {"epoch": final, "commit": commits[final]}})
    (run / "journal.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return run, ws, commits


def test_a_runs_other_candidates_are_rows_beside_its_final_strategy(quality_corpora, tmp_path, capsys):
    wild, labeled = quality_corpora
    run, ws, commits = _run(tmp_path, wild, [(1, False), (2, True)], final=2)
    rows = rows_mod.table_rows(("runs",), wild, labeled, [run], tmp_path, None, run_epochs=True)
    assert [r.id for r in rows] == ["run:run-x", "run:run-x@1"]
    assert rows[1].label == "run run-x epoch 1 (rolled back)" and rows[1].files == ws.files(commits[1])
    assert [r.id for r in rows_mod.table_rows(("runs",), wild, labeled, [run], tmp_path, None)] == ["run:run-x"]
    assert bench_quality(quality_corpora, tmp_path / "c", "--rows", "rho0-wild", "--run-epochs") == 2
    assert "--run-epochs names the candidates of the runs given with --run" in capsys.readouterr().err


def test_a_runs_training_with_the_same_data_recipe_and_seed_is_reused_not_trained_again(quality_corpora, tmp_path, monkeypatch):
    wild, labeled = quality_corpora
    [row] = rows_mod.table_rows(("rho0-wild",), wild, labeled, [], tmp_path, None)
    setting = Setting(tasks=5, seeds=(0,), train=TrainSpec(profile="test"))
    first = Cells(tmp_path / "a", setting, ProcessExecutor())
    trained = tmp_path / "a" / "trainings" / first.training_key(row, 0)
    first.cell(row, 0)
    # a run that trained the same curated data: its epoch's artifacts and train-s0 as the loop writes them
    run = tmp_path / "run"
    artifacts = run / "epochs" / "0" / "artifacts"
    shutil.copytree(first.curation(row), artifacts)
    shutil.copytree(trained, run / "epochs" / "0" / "train-s0")
    request = read_json(trained / "request.json")
    atomic_json(run / "epochs" / "0" / "train-s0" / "request.json",
                {**request, "sft": str(artifacts / "sft.jsonl"), "rl": str(artifacts / "rl.jsonl")})
    shutil.copytree(run / "epochs" / "0", run / "epochs" / "1")   # the same data with another seed
    atomic_json(run / "epochs" / "1" / "train-s0" / "request.json",
                {**request, "seed": 5, "sft": str(artifacts / "sft.jsonl"), "rl": str(artifacts / "rl.jsonl")})

    second = Cells(tmp_path / "b", setting, ProcessExecutor())
    assert second.adopt(run) == 2
    monkeypatch.setattr("trainer.train.train", lambda *a, **k: pytest.fail("an adopted training was trained again"))
    cell = second.cell(row, 0)
    key = second.training_key(row, 0)
    assert read_json(tmp_path / "b" / "trainings" / key / "adopted.json")["from"].endswith("epochs/0/train-s0")
    assert cell["P"] == first.cached(row, 0)["P"]
    # another profile budget is another recipe: nothing of that run is offered
    other = Cells(tmp_path / "c", Setting(tasks=5, seeds=(0,), train=TrainSpec(profile="test", budget={"sft_max_steps": 99})),
                  ProcessExecutor())
    assert other.adopt(run) == 0


def test_a_runs_evaluation_of_an_adopted_training_is_the_cell_unless_a_deciding_field_differs(quality_corpora, tmp_path, monkeypatch):
    """The epoch's `eval-s<seed>` beside an adopted training is read as the cell when it is the
    cell's evaluation (experiments.quality.adopted); a run evaluated otherwise is evaluated again."""
    wild, labeled = quality_corpora
    from environments.evaluate import EvalSpec
    from conftest import TINY_MAX_NEW_TOKENS

    [row] = rows_mod.table_rows(("rho0-wild",), wild, labeled, [], tmp_path, None)
    # the decoding budget the tests' tiny policies get anyway, said outright: the run's metrics.json names it
    setting = Setting(tasks=5, seeds=(0,), train=TrainSpec(profile="test"), eval=EvalSpec(max_new_tokens=TINY_MAX_NEW_TOKENS))
    first = Cells(tmp_path / "a", setting, ProcessExecutor())
    done = first.cell(row, 0)
    trained = tmp_path / "a" / "trainings" / first.training_key(row, 0)
    run = tmp_path / "run"
    for epoch, batch in (("0", None), ("1", 7)):   # epoch 1: evaluated at another batch size
        artifacts = run / "epochs" / epoch / "artifacts"
        shutil.copytree(first.curation(row), artifacts)
        shutil.copytree(trained, run / "epochs" / epoch / "train-s0")
        atomic_json(run / "epochs" / epoch / "train-s0" / "request.json",
                    {**read_json(trained / "request.json"), "sft": str(artifacts / "sft.jsonl"), "rl": str(artifacts / "rl.jsonl")})
        evaluation = run / "epochs" / epoch / "eval-s0"
        shutil.copytree(tmp_path / "a" / "cells" / done["key"] / "eval", evaluation)
        if batch:
            metrics = read_json(evaluation / "metrics.json")
            atomic_json(evaluation / "metrics.json", {**metrics, "runner": {**metrics["runner"], "batch_size": batch}})

    def adopted_from(epoch: str):
        cells = Cells(tmp_path / f"from-{epoch}", setting, ProcessExecutor())
        only = tmp_path / f"run-{epoch}"
        (only / "epochs").mkdir(parents=True)
        shutil.copytree(run / "epochs" / epoch, only / "epochs" / epoch)
        assert cells.adopt(only) == 1
        return cells

    monkeypatch.setattr("experiments.quality.cells.evaluate_on", lambda *a, **k: pytest.fail("an adopted evaluation was run again"))
    same = adopted_from("0")
    cell = same.cell(row, 0)
    assert cell["scores"] == done["scores"] and cell["P"] == done["P"]
    assert read_json(tmp_path / "from-0" / "cells" / cell["key"] / "adopted.json")["from"].endswith("epochs/0/eval-s0")

    other = adopted_from("1")
    with pytest.raises(pytest.fail.Exception, match="an adopted evaluation was run again"):
        other.cell(row, 0)
