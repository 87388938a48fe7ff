"""One way to train and one way to evaluate (issue 61, item 1): the loop's stages and every
`bench quality` cell train with a `TrainSpec` and evaluate with an `EvalSpec` through the same
`experiments.train_eval.train_on` / `evaluate_on`, so the same candidate gives the same adapter bytes
and the same per-task results whichever path scores it."""
import hashlib
import json

from experiments import train_eval as stages
from environments.evaluate import EvalSpec
from experiments.quality import rows as rows_mod
from experiments.quality.cells import Cells, Setting
from evolver.config import RunConfig
from sandbox.process_executor import ProcessExecutor
from trainer.train import TrainSpec


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_one_candidate_through_the_loop_and_through_bench_quality_gives_the_same_adapter_and_results(
        quality_corpora, tmp_path):
    import evolver.stages as loop

    wild, labeled = quality_corpora
    row = rows_mod.table_rows(("rho0-wild",), wild, labeled, [], tmp_path, None)[0]
    setting = Setting(split="dev", tasks=4, seeds=(0,), train=TrainSpec(profile="test", base="tiny-random"))
    cells = Cells(tmp_path / "cache", setting, ProcessExecutor())
    artifacts = cells.curation(row)                       # the candidate: ρ0's artifacts on the wild corpus
    cell = cells.cell(row, 0)                             # bench quality's path: trained, then evaluated

    cfg = RunConfig(corpus=(str(row.corpus),), profile="test", base="tiny-random", tasks=4, sandbox="process")
    assert cfg.train == cells.train_spec             # one training ...
    assert cfg.eval_spec.model_copy(update={"steps": None, "holdout": None}) == cells.eval_spec   # ... one evaluation
    trained = loop.train_epoch(cfg, artifacts, tmp_path / "loop" / "train-s0", 0)
    evaluated = loop.evaluate_epoch(cfg, artifacts, tmp_path / "loop" / "eval-s0", 0, trained["adapter"])

    assert _sha(tmp_path / "loop" / "train-s0" / "adapter" / "adapter_model.safetensors") == \
        _sha(tmp_path / "cache" / "trainings" / cell["training"] / "adapter" / "adapter_model.safetensors")
    trajectories = [json.loads(line) for line in (tmp_path / "loop" / "eval-s0" / "trajectories.jsonl").open()]
    assert {t["meta"]["task_id"]: float(t["outcome"]["success"]) for t in trajectories} == cell["scores"]
    assert evaluated["P"] == cell["P"] and len(cell["scores"]) == 4


def test_every_default_of_training_and_evaluation_is_declared_once_in_its_spec():
    from experiments import eval_cli
    from environments.policies.local import TransformersPolicy
    import inspect

    cfg, spec = RunConfig(), EvalSpec()
    assert (cfg.eval.batch_size, cfg.eval.max_new_tokens) == (spec.batch_size, spec.max_new_tokens)
    assert (cfg.train.profile, cfg.train.report_to) == (TrainSpec().profile, TrainSpec().report_to)
    assert Setting().eval.batch_size == spec.batch_size and eval_cli.DEFAULTS == spec
    policy = inspect.signature(TransformersPolicy).parameters
    assert (policy["batch_size"].default, policy["max_new_tokens"].default) == (spec.batch_size, spec.max_new_tokens)
    assert (cfg.proxy_sft_steps, cfg.proxy_tasks) == (stages.PROXY_SFT_STEPS, stages.PROXY_TASKS)


def test_the_memory_rule_is_one_an_empty_file_is_no_memory_and_a_missing_one_is_passed_on(tmp_path):
    empty, full = tmp_path / "empty.jsonl", tmp_path / "memory.jsonl"
    empty.write_text("\n")
    full.write_text('{"id": "m"}\n')
    assert stages.memory_used(None) is None and stages.memory_used(empty) is None
    assert stages.memory_used(full) == str(full)
    assert stages.memory_used(tmp_path / "missing.jsonl") == str(tmp_path / "missing.jsonl")


def test_the_proxy_is_one_definition_sft_only_a_few_steps_and_a_subset_of_the_tasks():
    train, evaluation = stages.proxy_specs(TrainSpec(profile="test", budget={"max_length": 512}),
                                           EvalSpec(tasks=15), units=2)
    assert train.budget == {"max_length": 512, "sft_max_steps": 2 * stages.PROXY_SFT_STEPS}
    assert evaluation.tasks == 15                          # never more than the run's own tasks
    assert stages.proxy_specs(TrainSpec(), EvalSpec(), 1)[1].tasks == stages.PROXY_TASKS


def test_the_typed_manifest_writes_exactly_the_json_a_curation_wrote_and_names_its_counts_and_hashes(tmp_path):
    from base.files import json_text, read_json
    from corpora import load_corpus
    from sandbox.curate import execute
    from sandbox.manifest import Manifest
    from sandbox.process_executor import ProcessExecutor
    from sandbox.strategy_files import strategy_files
    from conftest import SAMPLE_CORPUS
    from experiments.quality.rows import SEED_STRATEGY

    result = execute(strategy_files(SEED_STRATEGY), load_corpus([str(SAMPLE_CORPUS)]), tmp_path / "out",
                     executor=ProcessExecutor())
    written = (tmp_path / "out" / "manifest.json").read_text()
    assert json_text(result.manifest.to_json()) == written                    # the bytes as they always were
    again = Manifest.from_json(read_json(tmp_path / "out" / "manifest.json"))
    assert again == result.manifest and json_text(again.to_json()) == written
    assert again.counts() == {k: v["count"] for k, v in read_json(tmp_path / "out" / "manifest.json")["artifacts"].items()
                              if "count" in v}
    assert set(again.hashes()) == {"sft.jsonl", "rl.jsonl", "memory.jsonl"}
    bound = again.bound_to("a" * 40)
    assert bound.strategy.commit == "a" * 40 and bound.to_json()["strategy"]["files_sha256"] == again.strategy.files_sha256
