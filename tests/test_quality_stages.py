"""The quality bench trains and evaluates through the loop's stage functions (experiments/train_eval.py),
and its cells keep the keys they had when it ran its own pipeline, so a cache filled before still
answers (issue 41, item 3)."""
import dataclasses
import hashlib
import json
from pathlib import Path

from experiments import train_eval as stages
from experiments.quality import cells as cells_mod
from experiments.quality import proxy as proxy_mod
from experiments.quality import rows as rows_mod
from trainer.train import TrainSpec
from experiments.quality.cells import Cells, Setting, consumed_sha256
from sandbox.process_executor import ProcessExecutor


def test_the_bench_and_the_loop_call_one_training_and_one_evaluation():
    import evolver.stages as loop_stages

    assert cells_mod.train_on is loop_stages.train_on is stages.train_on
    assert cells_mod.evaluate_on is loop_stages.evaluate_on is stages.evaluate_on
    assert cells_mod.used is loop_stages.used is stages.used
    assert proxy_mod.train_on is stages.train_on and proxy_mod.evaluate_on is stages.evaluate_on
    assert "evaluate_to_dir" not in proxy_mod.proxy_score.__code__.co_names


def _old_keys(cells: Cells, row, seed: int) -> tuple[str | None, str]:
    """A row's training and cell keys as the bench computed them before it used experiments.train_eval
    (its own file selection: a kind is used unless ablated or without a non-blank line)."""
    def key(payload):
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:24]

    art, used = cells.curation(row), {}
    for kind in ("sft", "rl", "memory"):
        path = art / f"{kind}.jsonl"
        records = sum(1 for line in path.open("rb") if line.strip()) if path.exists() else 0
        used[kind] = (path, consumed_sha256(path)) if f"no-{kind}" not in row.ablations and records > 0 else None
    recipe = cells.recipe_of(cells.setting.train.budget)
    training = None if used["sft"] is None and used["rl"] is None else key(
        {**recipe, "sft": used["sft"] and used["sft"][1], "rl": used["rl"] and used["rl"][1], "seed": seed})
    s = cells.setting
    cell = key({"training": training, "base": cells.base, "memory": used["memory"] and used["memory"][1],
                "benchmark": s.benchmark, "split": s.split, "tasks": [t.id for t in cells.tasks], "metric": s.metric,
                "batch_size": s.eval.batch_size, "seed": seed,
                # a budget other than 128 (the default then, not keyed) was keyed, as it still is
                **({"max_new_tokens": s.eval.max_new_tokens} if s.eval.max_new_tokens != 128 else {})})
    return training, cell


def test_every_cell_keeps_the_key_it_had_before_so_a_filled_cache_still_answers(quality_corpora, tmp_path):
    wild, labeled = quality_corpora
    rows = rows_mod.table_rows(("rho0-wild", "oracle"), wild, labeled, [], tmp_path, "rho0-wild")
    rows.append(dataclasses.replace(rows[0], id="rho0-wild no-sft no-rl").ablated("no-rl").ablated("no-sft"))
    for setting in (Setting(tasks=5, seeds=(0,), train=TrainSpec(profile="test")),
                    Setting(split="dev", tasks=5, seeds=(0, 1), train=TrainSpec(profile="test", budget={"sft_max_steps": 2}))):
        cells = Cells(tmp_path / "cache", setting, ProcessExecutor())
        for row in rows:
            for seed in setting.seeds:
                assert (cells.training_key(row, seed), cells.cell_key(row, seed)) == _old_keys(cells, row, seed), row.id
    assert cells.training_key(rows[-1], 0) is None       # nothing to train: the base model is evaluated


def test_a_cell_with_memory_is_keyed_by_the_retrieval_rule_and_one_without_is_not(quality_corpora, tmp_path, monkeypatch):
    wild, labeled = quality_corpora
    row = rows_mod.table_rows(("rho0-wild",), wild, labeled, [], tmp_path, "rho0-wild")[0]
    setting = Setting(tasks=5, seeds=(0,), train=TrainSpec(profile="test"))
    cells = Cells(tmp_path / "cache", setting, ProcessExecutor())
    plain = cells.cell_key(row, 0)
    monkeypatch.setattr(cells_mod.memory_mod, "RETRIEVAL", "another rule")
    assert cells.cell_key(row, 0) == plain                        # no memory: the rule decides nothing
    # the same curation with a memory file (a fresh Cells reads the cached curation's files again)
    (cells.curation(row) / "memory.jsonl").write_text(json.dumps({"id": "m", "key": "k", "content": "c"}) + "\n")
    under_another = Cells(tmp_path / "cache", setting, ProcessExecutor()).cell_key(row, 0)
    monkeypatch.setattr(cells_mod.memory_mod, "RETRIEVAL", "bm25s")
    assert under_another != Cells(tmp_path / "cache", setting, ProcessExecutor()).cell_key(row, 0) != plain


def test_the_files_a_stage_reads_follow_the_ablations_and_skip_empty_files(tmp_path):
    (tmp_path / "sft.jsonl").write_text('{"a": 1}\n')
    (tmp_path / "rl.jsonl").write_text("\n")
    assert stages.used(tmp_path) == {"sft": tmp_path / "sft.jsonl", "rl": None, "memory": None}
    assert stages.used(tmp_path, ("no-sft",))["sft"] is None


def test_a_profile_at_the_old_behaviour_keeps_the_training_key_main_computed(tmp_path):
    """The profile fields added for issue 59 (grpo_generation, sft_memory_hints) enter a training
    key only when they differ from the behaviour before them, so cpu-small's (and paper's) cached
    cells and adopted runs still match; a profile that changes one of them gets a key of its own."""
    from trainer.recipe import KEYED_WHEN_CHANGED, RECIPE, get_profile, profile_data

    def main_recipe(profile: str, budget: dict) -> dict:   # main's recipe_of: the Profile without the new fields
        fields = profile_data(get_profile(profile).replace(**budget))   # the prompt cap by its name then (WRITTEN_AS)
        return {"recipe": dataclasses.asdict(RECIPE), "base": None,
                "profile": {k: v for k, v in fields.items() if k not in KEYED_WHEN_CHANGED}}

    assert get_profile("paper").grpo_generation == "trl" and not get_profile("cpu-small").sft_memory_hints
    for profile, budget in (("cpu-small", {"grpo_generation": "trl"}), ("paper", {}),
                            ("cpu-small", {"sft_max_steps": 2, "grpo_generation": "trl"}),
                            ("test", {"grpo_generation": "trl"})):
        cells = Cells(tmp_path / "cache", Setting(tasks=5, seeds=(0,), train=TrainSpec(profile=profile, budget=budget)),
                      ProcessExecutor())
        assert cells.recipe_of(budget) == {**main_recipe(profile, budget), "base": cells.base}, profile
    changed = Cells(tmp_path / "cache", Setting(tasks=5, seeds=(0,), train=TrainSpec(profile="paper")), ProcessExecutor())
    for field, value in (("grpo_generation", "merged"), ("sft_memory_hints", True)):
        assert changed.recipe_of({field: value})["profile"][field] == value
        assert changed.recipe_of({field: value}) != changed.recipe_of({})
    for profile in ("test", "cpu-small"):   # their merged rollouts: a key of their own
        assert Cells(tmp_path / "cache", Setting(tasks=5, seeds=(0,), train=TrainSpec(profile=profile)),
                     ProcessExecutor()).recipe_of({})["profile"]["grpo_generation"] == "merged"


def test_a_run_trained_before_the_new_profile_fields_is_still_adopted(tmp_path):
    """adopt() compares a run's request profile as a key holds it: a request written before the
    fields existed (no grpo_generation, no sft_memory_hints) and one written after, at the old
    behaviour, are the same training."""
    from trainer.recipe import get_profile, profile_key

    cells = Cells(tmp_path / "cache", Setting(tasks=5, seeds=(0,), train=TrainSpec(profile="paper")), ProcessExecutor())
    now = dataclasses.asdict(get_profile("paper"))
    before = {k: v for k, v in now.items() if k not in ("grpo_generation", "sft_memory_hints")}
    assert profile_key(now) == profile_key(before) == cells.recipe_of({})["profile"]


def test_a_cell_whose_sft_stage_the_cache_already_trained_reuses_it_under_its_own_key(quality_corpora, tmp_path):
    """Two GRPO budgets of one row (a budget sweep): the second training takes the first's SFT
    stage over (trainer.sft_reuse), and every key stays what it was (the reuse is no input)."""
    wild, labeled = quality_corpora
    row = rows_mod.table_rows(("rho0-wild",), wild, labeled, [], tmp_path, "rho0-wild")[0]
    first = Cells(tmp_path / "cache", Setting(tasks=5, seeds=(0,), train=TrainSpec(profile="test")), ProcessExecutor())
    second = Cells(tmp_path / "cache", Setting(tasks=5, seeds=(0,), train=TrainSpec(
        profile="test", budget={"grpo_max_steps": 1, "max_completion_length": 8})), ProcessExecutor())
    trained = [cells._trained(row, 0, None) for cells in (first, second)]
    summaries = [json.loads((Path(adapter).parent / "summary.json").read_text()) for adapter in trained]
    assert [Path(a).parent.name for a in trained] == [first.training_key(row, 0), second.training_key(row, 0)]
    assert first.training_key(row, 0) != second.training_key(row, 0)
    assert "reused_from" not in summaries[0]["sft"]
    assert summaries[1]["sft"]["reused_from"] == str(Path(trained[0]).parent.resolve())
    assert summaries[1]["grpo"]["steps"] == 1 and summaries[0]["sft_key"] == summaries[1]["sft_key"]
    for cells in (first, second):
        assert (cells.training_key(row, 0), cells.cell_key(row, 0)) == _old_keys(cells, row, 0)


# Training keys (Cells.recipe_of, as experiments.quality.cells._key hashes it: no budget, and the
# GRPO prompt cap at 2,048 tokens) and calibration keys (calibration._key of Setting.to_json: the
# test profile with that cap, and the default setting) before the prompt cap was renamed
# max_prompt_tokens (issue 72), computed at b676dec.
KEYS_BEFORE_THE_RENAME = {"cpu-small": ("a4893dec63816417dca4fc6e", "5174c8e132d0ee69e4ed14f4"),
                          "test": ("2cd59434e4fcd142c46a2330", "5f476ac96cc55bb0a08b1cf1"),
                          "paper": ("ef7e2508aec8d74fa27eb0cc", "1c6aa9d66bf21aea21ac6d89")}
CALIBRATION_KEYS_BEFORE_THE_RENAME = ("b0f7e1d28e301a4e", "b045d7052d571f45")


def test_the_prompt_caps_new_name_keeps_every_training_and_calibration_key():
    """The profile's prompt cap is max_prompt_tokens since issue 72; a key made from a profile or a
    budget names it max_prompt_length, as before (trainer.recipe.WRITTEN_AS), so cached trainings,
    cells, adoptions and calibrations stay valid; a request.json written before the rename and one
    written now are the same training to adopt()."""
    from types import SimpleNamespace

    from experiments.quality.calibration import _key as calibration_key
    from trainer.recipe import get_profile, profile_data, profile_key

    for profile, (plain, capped) in KEYS_BEFORE_THE_RENAME.items():
        cells = SimpleNamespace(setting=Setting(train=TrainSpec(profile=profile)), base=get_profile(profile).base)
        assert cells_mod._key(Cells.recipe_of(cells, {})) == plain, profile
        assert cells_mod._key(Cells.recipe_of(cells, {"max_prompt_tokens": 2048})) == capped, profile
        fields = dataclasses.asdict(get_profile(profile))
        before = {("max_prompt_length" if k == "max_prompt_tokens" else k): v for k, v in fields.items()}
        assert profile_key(before) == profile_key(fields) == profile_key(profile_data(get_profile(profile)))
    capped = Setting(train=TrainSpec(profile="test", budget={"max_prompt_tokens": 2048}))
    assert (calibration_key(capped.to_json()), calibration_key(Setting().to_json())) == \
        CALIBRATION_KEYS_BEFORE_THE_RENAME
