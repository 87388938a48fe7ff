"""RunConfig and the quality bench's Setting nest the training and evaluation specs (issue 61,
item 1): `cfg.train` is a `trainer.train.TrainSpec`, `cfg.eval` an `environments.evaluate.EvalSpec`.
A run.json written before, with the specs' fields flat, reads back to the same resolved config,
and the bench's cache keys are the ones computed before the nesting."""
import json
from pathlib import Path

import pytest

from base.errors import UserError
from base.files import json_text, read_json
from environments.evaluate import EvalSpec
from experiments.quality import rows as rows_mod
from experiments.quality.cells import Cells, Setting
from evolver.config import RUN_SETS, RunConfig
from evolver.old_runs import FLAT, FLAT_BUDGET
from sandbox.process_executor import ProcessExecutor
from trainer.recipe import profile_fields
from trainer.train import TrainSpec

# computed on main at abee770, before the nesting, when the decoding budget was 128 (the default until 2026-11-29)
PINNED = {"default": ("cdd2ece79fb6c40fa49243b3", "7744bb19d19c34e457be1b1a"),
          "changed": ("0862e8e1777886e8e5d69fd0", "420b1ccdf05cce2964f7056f")}


def test_a_cells_training_and_cell_keys_are_the_ones_computed_before_the_specs_were_nested(quality_corpora, tmp_path):
    wild, labeled = quality_corpora
    row = rows_mod.table_rows(("rho0-wild",), wild, labeled, [], tmp_path, None)[0]
    settings = {"default": Setting(tasks=5, seeds=(0,), train=TrainSpec(profile="test"), eval=EvalSpec(max_new_tokens=128)),
                "changed": Setting(split="dev", tasks=5, seeds=(0,), eval=EvalSpec(batch_size=4, max_new_tokens=64),
                                   train=TrainSpec(profile="test", base="tiny-random", budget={"sft_max_steps": 2}))}
    keys = {}
    for name, setting in settings.items():
        cells = Cells(tmp_path / "cache", setting, ProcessExecutor())
        keys[name] = (cells.training_key(row, 0), cells.cell_key(row, 0))
    assert keys == PINNED
    # today's default budget (256) is a cell of its own: a cache filled at 128 never answers for it
    today = Cells(tmp_path / "cache", Setting(tasks=5, seeds=(0,), train=TrainSpec(profile="test")), ProcessExecutor())
    assert today.setting.eval.max_new_tokens == 256
    assert today.training_key(row, 0) == PINNED["default"][0] and today.cell_key(row, 0) != PINNED["default"][1]


FIXTURES = Path(__file__).parent / "fixtures" / "run_json"


def test_a_run_json_with_the_specs_fields_flat_reads_back_to_the_config_it_resolved_to_before():
    """flat-1129.json is `RunConfig(...).to_json()` of main before the nesting, with every moved
    field away from its default; flat-1129.resolved.json is what that config gave train_on and
    evaluate_on then (its train_spec and eval_spec), and the candidates' ctx.budget."""
    old, resolved = read_json(FIXTURES / "flat-1129.json"), read_json(FIXTURES / "flat-1129.resolved.json")
    cfg = RunConfig.from_json(old)
    # the budget's prompt cap is named max_prompt_tokens since issue 72 (trainer.recipe.READ_AS)
    resolved["budget_overrides"] = profile_fields(resolved["budget_overrides"])
    resolved["train_spec"]["budget"] = profile_fields(resolved["train_spec"]["budget"])
    assert cfg.train.model_dump(mode="json") == resolved["train_spec"]
    # EvalSpec's corpus_split is named holdout since issue 72 (never in run.json: what the run sets itself)
    then = {("holdout" if k == "corpus_split" else k): v for k, v in resolved["eval_spec"].items()}
    assert cfg.eval_spec.model_dump(mode="json") == then
    assert (cfg.curation_budget, cfg.train.budget) == (resolved["curation_budget"], resolved["budget_overrides"])
    # written again: nested, without the flat keys and without what the run sets itself; read back the same
    written = cfg.to_json()
    assert not set(written) & {*FLAT, *FLAT_BUDGET} and not set(written["eval"]) & set(RUN_SETS)
    assert written["train"] == resolved["train_spec"] and written["eval"]["max_new_tokens"] == 64
    assert RunConfig.from_json(written) == cfg == RunConfig.from_json(json.loads(json_text(written)))
    # settings added since the fixture was written read as what such a run did (final_rule: the paper's;
    # strategy: none of the user's, ρ0)
    added = {"final_rule": "paper-best-dev", "strategy": "", "strategy_sha256": ""}
    assert {k: written[k] for k in added} == added and not set(added) & set(old)
    assert {k: v for k, v in written.items() if k not in ("train", "eval", *added)} == \
        {k: v for k, v in old.items() if k not in (*FLAT, *FLAT_BUDGET)}


def test_the_run_passes_its_specs_as_they_are_and_adds_only_what_it_sets_itself():
    cfg = RunConfig(profile="test", base="tiny-random", batch_size=2, tasks=5)   # flat keywords: the old spelling
    assert cfg.train == TrainSpec(profile="test", base="tiny-random") and cfg.eval == EvalSpec(batch_size=2)
    assert cfg.eval_spec.model_copy(update={f: getattr(EvalSpec(), f) for f in RUN_SETS}) == cfg.eval
    assert (cfg.eval_spec.tasks, cfg.eval_spec.threads) == (5, cfg.train.threads)
    assert RunConfig().train.base == "smollm2-135m"   # the profile's base, resolved
    proxy = cfg.replace(train=cfg.train.with_budget(sft_max_steps=3))
    assert proxy.train.budget == {"sft_max_steps": 3} and proxy.eval == cfg.eval
    with pytest.raises(UserError, match=r"run config: eval\.corpus is the run's own"):
        RunConfig(eval=EvalSpec(corpus=("c.jsonl",)))
    with pytest.raises(UserError, match="run config: profile must be one of"):
        RunConfig(train={"profile": "huge"})


def test_the_quality_setting_is_written_flat_as_before_so_calibration_keys_hold():
    """A table's raw result and a calibration hold the setting as `dataclasses.asdict` wrote it
    before the nesting (calibration._key hashes it)."""
    setting = Setting(split="dev", tasks=5, seeds=(0, 1), train=TrainSpec(profile="test", budget={"sft_max_steps": 2}),
                      eval=EvalSpec(batch_size=4, max_new_tokens=128))
    assert setting.to_json() == {
        "benchmark": "bfcl-single", "split": "dev", "tasks": 5, "profile": "test", "base": None, "seeds": [0, 1],
        "metric": "task_success", "batch_size": 4, "curation_seed": 0, "curation_timeout_s": 900.0,
        "budget": {"sft_max_steps": 2}, "corpus": [], "tools": None, "corpus_sha256": None, "max_new_tokens": 128}
    from experiments.quality.calibration import _key

    assert _key(setting.to_json()) == _key({**setting.to_json(), "corpus": ()})


class Killed(Exception):
    pass


def test_an_old_run_resumes_and_replays_to_what_an_uninterrupted_run_gives(tmp_path, monkeypatch, trained_once):
    """A run killed after epoch 0, its run.json rewritten as it was written before the nesting (the
    specs' fields flat), resumes to the decisions and artifacts of the same run never stopped, and
    `replay RUN --epoch 0` re-executes its curation to the same bytes."""
    from evolver import cli
    from evolver.store import RunStore
    from conftest import SAMPLE_CORPUS, TINY_RUN_ARGS
    from test_resume import fingerprint
    from test_run_settings import flat

    args = ["--profile", "test", "--base", "tiny-random", "--epochs", "2", "--tasks", "2", "--sandbox", "process",
            "--benchmark", "bfcl-single", "--corpus", str(SAMPLE_CORPUS), "--margin", "0.001", "--batch-size", "2",
            "--max-length", "1024", *TINY_RUN_ARGS, "--runs-dir", str(tmp_path)]
    assert cli.main(["run", *args, "--name", "whole"]) == 0
    real_stage = RunStore.stage

    def stop_after_epoch_0(self, epoch, stage, run, outputs=()):
        if epoch == 1:
            raise Killed("after epoch 0")
        return real_stage(self, epoch, stage, run, outputs)

    monkeypatch.setattr(RunStore, "stage", stop_after_epoch_0)
    with pytest.raises(Killed):
        cli.main(["run", *args, "--name", "old"])
    monkeypatch.setattr(RunStore, "stage", real_stage)
    old = flat(read_json(tmp_path / "old" / "run.json"))
    assert old["batch_size"] == 2 and old["max_length"] == 1024 and "train" not in old
    (tmp_path / "old" / "run.json").write_text(json_text(old))
    assert cli.main(["resume", str(tmp_path / "old")]) == 0
    whole, resumed = fingerprint(tmp_path / "whole"), fingerprint(tmp_path / "old")
    assert resumed[:2] == whole[:2] and len(resumed[0]) == 2
    assert cli.main(["replay", str(tmp_path / "old"), "--epoch", "0", "--sandbox", "process"]) == 0


def test_the_quality_bench_evaluates_at_the_decoding_budget_it_is_given_so_an_older_table_is_reported_again():
    import argparse

    from experiments.quality import cli as quality_cli

    sub = argparse.ArgumentParser().add_subparsers(dest="command")
    quality_cli.add_cli(sub)
    parser = sub.choices["bench"]
    assert quality_cli.setting_of(parser.parse_args(["quality"])).eval.max_new_tokens == 256
    older = quality_cli.setting_of(parser.parse_args(["quality", "--max-new-tokens", "128"]))
    assert older.eval.max_new_tokens == 128 and older.to_json()["max_new_tokens"] == 128


def test_a_run_json_written_by_the_nested_code_of_2026_12_06_reads_back_to_the_same_config():
    """nested-1206.json is `RunConfig.to_json()` on 2026-12-06 (made with `--set` of nine settings,
    nested ones and a free mapping's key among them): a later change that stops reading it, or reads
    it otherwise, fails here before it fails a user's resume or replay."""
    doc = read_json(FIXTURES / "nested-1206.json")
    cfg = RunConfig.from_json(doc)
    assert (cfg.train.profile, cfg.train.base, cfg.eval.batch_size, cfg.epochs, cfg.lam) == \
        ("test", "tiny-random", 4, 2, 0.2)
    assert (cfg.agent.step_limit, cfg.final_rule, cfg.boundary_samples, cfg.train.budget) == \
        (12, "accepted-best", 2, {"sft_max_steps": 3})
    assert cfg.to_json() == doc
