"""Reusing a finished training's SFT stage (trainer.sft_reuse): the same final adapter bytes as
training it again, and no reuse when anything the SFT stage reads differs. Real trainings of the
tiny `test` profile, each in its child process."""
import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.recipe import GRPO_ONLY, Profile, get_profile
from trainer.sft_reuse import reusable, sft_key
from trainer.train import PROJECT_ROOT, child_env, train

SEED = 3
GRPO_BUDGET = {"grpo_max_steps": 1, "num_generations": 4, "grpo_prompts_per_step": 1, "grpo_micro_batch": 2,
               "max_completion_length": 8, "max_prompt_tokens": 1024}
"""GRPO budgets other than the `test` profile's: an SFT-only training with them has the same SFT stage."""


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, sample_corpus):
    raw = [json.loads(line) for line in sample_corpus.read_text().splitlines()]
    folder = tmp_path_factory.mktemp("reuse-inputs")
    sft = [{"id": r["id"], "messages": r["messages"], "tools": r["tools"], "meta": {"origin": [r["id"]]}}
           for r in raw[:5]]
    rl = []
    for r in raw[6:10]:
        k = next(i for i, m in enumerate(r["messages"]) if m.get("tool_calls"))
        rl.append({"id": f"{r['id']}#{k}", "messages": r["messages"][:k], "tools": r["tools"],
                   "reference": {"tool_calls": r["messages"][k]["tool_calls"]}, "reward": "tool_call_match",
                   "meta": r["meta"]})
    return (write_jsonl(folder / "sft.jsonl", sft), write_jsonl(folder / "rl.jsonl", rl),
            write_jsonl(folder / "sft-less.jsonl", sft[:4]))


@pytest.fixture(scope="module")
def trainings(inputs, tmp_path_factory):
    """sft-only: SFT alone with other GRPO budgets; fresh: SFT + GRPO; reusing: SFT + GRPO given the
    SFT-only training to reuse."""
    sft, rl, _ = inputs
    root = tmp_path_factory.mktemp("reuse-trainings")
    train(sft, None, root / "sft-only", profile="test", seed=SEED, **GRPO_BUDGET)
    train(sft, rl, root / "fresh", profile="test", seed=SEED)
    train(sft, rl, root / "reusing", profile="test", seed=SEED, reuse_sft=[root / "fresh-missing", root / "sft-only"])
    return root


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def sft_lines(folder: Path) -> list[str]:
    return [line for line in (folder / "metrics.jsonl").read_text().splitlines() if json.loads(line)["stage"] == "sft"]


def test_grpo_on_a_reused_sft_stage_gives_the_same_adapter_bytes_as_training_it_again(trainings):
    sft_only, fresh, reusing = (json.loads((trainings / n / "summary.json").read_text())
                                for n in ("sft-only", "fresh", "reusing"))
    assert sft_only["sft_key"] == fresh["sft_key"] == reusing["sft_key"] is not None
    assert "reused_from" not in fresh["sft"] and "reused_from" not in sft_only["sft"]
    assert reusing["sft"] == {**sft_only["sft"], "reused_from": str((trainings / "sft-only").resolve())}
    assert json.loads((trainings / "reusing" / "request.json").read_text())["reuse_sft"] == \
        str((trainings / "sft-only").resolve())
    assert "reused from" in (trainings / "reusing" / "train.log").read_text()
    # the SFT adapters are the same bytes; GRPO continued from them ends on the same bytes
    assert files(trainings / "sft-only" / "sft_adapter") == files(trainings / "fresh" / "sft_adapter") == \
        files(trainings / "reusing" / "sft_adapter")
    assert files(trainings / "reusing" / "adapter") == files(trainings / "fresh" / "adapter")
    assert reusing["grpo"]["steps"] == fresh["grpo"]["steps"] == 2
    assert reusing["grpo"]["reward_mean"] == fresh["grpo"]["reward_mean"]
    # the reused stage's metrics lines come along, then this training's GRPO lines
    assert sft_lines(trainings / "reusing") == sft_lines(trainings / "sft-only")
    assert [json.loads(line).get("loss") for line in sft_lines(trainings / "reusing")] == \
        [json.loads(line).get("loss") for line in sft_lines(trainings / "fresh")]   # the timings aside
    assert [json.loads(line)["stage"] for line in (trainings / "reusing" / "metrics.jsonl").read_text().splitlines()
            ][-1] == "grpo"
    assert list((trainings / "reusing" / "tensorboard" / "sft").glob("events.out.tfevents.*"))


def test_grpo_depends_on_its_seed_so_the_equality_above_can_fail(trainings, tmp_path):
    """The same reused SFT adapter under another GRPO seed (the worker given the reusing training's
    request with only the seed and output changed) ends on other bytes: GRPO's rollouts and dropout
    masks follow the RNG, and the reuse leaves it where training the SFT stage would."""
    request = {**json.loads((trainings / "reusing" / "request.json").read_text()), "seed": SEED + 1,
               "out": str(tmp_path / "other-seed")}
    (tmp_path / "other-seed").mkdir()
    (tmp_path / "other-seed" / "request.json").write_text(json.dumps(request))
    subprocess.run([sys.executable, "-m", "trainer.worker", str(tmp_path / "other-seed" / "request.json")],
                   env=child_env(), cwd=PROJECT_ROOT, check=True, capture_output=True)
    assert files(tmp_path / "other-seed" / "sft_adapter") == files(trainings / "fresh" / "sft_adapter")
    assert files(tmp_path / "other-seed" / "adapter") != files(trainings / "fresh" / "adapter")


def test_an_sft_only_training_that_reuses_ends_on_the_sft_adapter(inputs, trainings, tmp_path):
    sft, _, _ = inputs
    summary = train(sft, None, tmp_path / "again", profile="test", seed=SEED, reuse_sft=[trainings / "fresh"])
    assert summary["sft"]["reused_from"] == str((trainings / "fresh").resolve()) and "grpo" not in summary
    assert files(tmp_path / "again" / "adapter") == files(trainings / "sft-only" / "adapter")


def test_another_sft_file_or_seed_trains_its_own_sft_stage(inputs, trainings, tmp_path):
    sft, rl, less = inputs
    candidates = [trainings / n for n in ("sft-only", "fresh", "reusing")]
    summary = train(less, None, tmp_path / "less", profile="test", seed=SEED, reuse_sft=candidates)
    assert "reused_from" not in summary["sft"] and summary["sft_key"] != json.loads(
        (trainings / "fresh" / "summary.json").read_text())["sft_key"]
    assert json.loads((tmp_path / "less" / "request.json").read_text())["reuse_sft"] is None
    summary = train(sft, rl, tmp_path / "seed", profile="test", seed=SEED + 1, reuse_sft=candidates)
    assert "reused_from" not in summary["sft"]
    assert files(tmp_path / "seed" / "sft_adapter") != files(trainings / "fresh" / "sft_adapter")


def test_the_key_holds_every_profile_field_but_the_grpo_only_ones(inputs, tmp_path):
    sft, _, less = inputs
    prof = get_profile("test")
    key = sft_key(sft, base=prof.base, seed=SEED, profile=prof)
    assert set(GRPO_ONLY) <= {f.name for f in dataclasses.fields(Profile)}
    other = {"grpo_max_steps": 5, "grpo_prompts_per_step": 4, "num_generations": 4, "grpo_micro_batch": 1,
             "max_prompt_tokens": 99, "max_completion_length": 3, "grpo_generation": "trl", "grpo_learning_rate": 1e-3,
             "vllm_mode": "server", "vllm_server_url": "http://h:1"}
    assert set(other) == set(GRPO_ONLY)
    for name, value in other.items():
        assert sft_key(sft, base=prof.base, seed=SEED, profile=prof.replace(**{name: value})) == key, name
    for change in ({"sft_max_steps": 2}, {"max_length": 512}, {"sft_learning_rate": 1e-3}, {"threads": 1},
                   {"precision": "fp32"}, {"uniform_dropout": False}, {"sft_length_grouped": False}, {"name": "x"}):
        assert sft_key(sft, base=prof.base, seed=SEED, profile=prof.replace(**change)) != key, change
    assert sft_key(less, base=prof.base, seed=SEED, profile=prof) != key
    assert sft_key(sft, base=prof.base, seed=SEED + 1, profile=prof) != key
    assert sft_key(sft, base="smollm2-135m", seed=SEED, profile=prof) != key
    assert sft_key(sft, base=prof.base, seed=SEED, profile=prof, launcher="torchrun --nproc_per_node 2") != key
    assert sft_key(None, base=prof.base, seed=SEED, profile=prof) is None
    # the memory bank is read by the SFT stage only when the profile puts hints into its prompts
    bank, other_bank = write_jsonl(tmp_path / "m1.jsonl", [{"id": "a"}]), write_jsonl(tmp_path / "m2.jsonl", [{"id": "b"}])
    assert sft_key(sft, base=prof.base, seed=SEED, profile=prof, memory=bank) == key
    hinted = prof.replace(sft_memory_hints=True)
    # hints on without a bank (a w/o-memory ablation) trains the prompts hints off trains: one SFT stage
    assert sft_key(sft, base=prof.base, seed=SEED, profile=hinted) == key
    assert sft_key(sft, base=prof.base, seed=SEED, profile=hinted, memory=bank) != key
    assert sft_key(sft, base=prof.base, seed=SEED, profile=hinted, memory=bank) != \
        sft_key(sft, base=prof.base, seed=SEED, profile=hinted, memory=other_bank)


def test_a_candidate_without_its_summary_or_sft_adapter_is_not_reused(trainings, tmp_path):
    key = json.loads((trainings / "fresh" / "summary.json").read_text())["sft_key"]
    assert reusable(key, [trainings / "fresh"]) == (trainings / "fresh").resolve()
    assert reusable(None, [trainings / "fresh"]) is None
    assert reusable("0" * 64, [trainings / "fresh"]) is None
    for missing in ("summary.json", "sft_adapter"):
        copy = tmp_path / missing
        shutil.copytree(trainings / "fresh", copy)
        target = copy / missing
        shutil.rmtree(target) if target.is_dir() else target.unlink()
        assert reusable(key, [copy]) is None, missing
