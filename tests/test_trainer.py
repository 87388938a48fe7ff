"""The recipe as data, the base models, and SFT's loss mask (decoded token by token)."""
import dataclasses
import json
from pathlib import Path

import pytest

from base.errors import UserError
from chat_format import chat_format as cf
from trainer import data, models
from trainer.recipe import PROFILES, RECIPE, Profile, get_profile
from trainer.sft import sft_config, sft_steps


@pytest.fixture(scope="module")
def tokenizer():
    return models.load_tokenizer(models.resolve(models.TINY))


@pytest.fixture(scope="module")
def raw(sample_corpus):
    return [json.loads(line) for line in sample_corpus.read_text().splitlines()]


# ---------------------------------------------------------------------------------------------
# the recipe


def test_the_recipe_is_the_papers():
    r = RECIPE
    assert (r.lora_r, r.lora_alpha, r.lora_dropout) == (16, 32, 0.05)
    assert (r.sft_learning_rate, r.sft_warmup_ratio, r.sft_lr_scheduler, r.sft_max_steps) == (2.5e-5, 0.03, "cosine", 140)
    assert (r.grpo_learning_rate, r.grpo_warmup_ratio, r.kl_beta, r.ratio_clip, r.advantage_clip, r.max_grad_norm) == \
        (5e-6, 0.03, 0.14, 0.05, 1.4, 1.0)


def test_paper_keeps_the_papers_grpo_budget_and_generation():
    paper = get_profile("paper")
    assert (paper.grpo_max_steps, paper.grpo_prompts_per_step, paper.num_generations, paper.max_completion_length) == \
        (200, 8, 8, 512)
    assert (paper.grpo_generation, paper.sft_memory_hints, paper.vllm_mode) == ("trl", False, None)
    with pytest.raises(ValueError, match="grpo_generation"):
        paper.replace(grpo_generation="fast")


def test_profiles_hold_budgets_and_their_learning_rates_only():
    recipe_fields = {f.name for f in dataclasses.fields(type(RECIPE))}
    # the shared names: a budget under the recipe's cap, and the optimiser's scale for a small base
    assert recipe_fields & {f.name for f in dataclasses.fields(Profile)} == \
        {"sft_max_steps", "sft_learning_rate", "grpo_learning_rate"}
    assert set(PROFILES) == {"paper", "cpu-small", "test"}
    with pytest.raises(ValueError, match="above the recipe"):
        get_profile("test").replace(sft_max_steps=141)
    with pytest.raises(UserError, match="unknown recipe profile"):
        get_profile("huge")


def test_trl_receives_the_recipe_not_its_own_defaults(tmp_path):
    from trainer.grpo import grpo_config
    from trainer.recipe import departures

    prof = get_profile("cpu-small")
    sft = sft_config(RECIPE, prof, 10, tmp_path, seed=3, use_cpu=True)
    # cpu-small's SFT rate was chosen on the tuning slice (bench/lr_sweep.py); the rest is the paper's
    assert (sft.learning_rate, sft.lr_scheduler_type.value, sft.warmup_steps, sft.max_grad_norm) == (2e-4, "cosine", 0.03, 1.0)
    assert departures(prof) == {"sft_learning_rate": {"paper": 2.5e-5, "profile": 2e-4}}
    # cpu-small asks for bf16 compute (trainer.worker resolves it to fp32 on a CPU without bf16 units)
    assert (sft.bf16, sft.gradient_checkpointing, sft.seed, sft.max_steps) == (True, False, 3, 10)
    grpo = grpo_config(RECIPE, prof, 4, tmp_path, seed=3, use_cpu=True)
    assert (grpo.learning_rate, grpo.lr_scheduler_type.value, grpo.warmup_steps) == (5e-6, "cosine", 0.03)
    assert (grpo.beta, grpo.epsilon, grpo.epsilon_high, grpo.max_grad_norm) == (0.14, 0.05, 0.05, 1.0)
    assert (grpo.loss_type, grpo.scale_rewards, grpo.use_bias_correction_kl, grpo.bf16) == ("grpo", "group", False, True)
    assert grpo.num_generations == prof.num_generations
    assert grpo.per_device_train_batch_size * grpo.gradient_accumulation_steps == prof.grpo_prompts_per_step * prof.num_generations


def test_a_profiles_learning_rates_reach_trl_and_are_recorded_and_paper_keeps_the_papers(tmp_path):
    from trainer.grpo import grpo_config
    from trainer.recipe import as_dict, departures

    paper = get_profile("paper")
    assert (paper.sft_lr(RECIPE), paper.grpo_lr(RECIPE)) == (2.5e-5, 5e-6) and departures(paper) == {}
    tuned = get_profile("test").replace(sft_learning_rate=2e-4, grpo_learning_rate=4e-5)
    assert sft_config(RECIPE, tuned, 10, tmp_path, seed=0, use_cpu=True).learning_rate == 2e-4
    assert grpo_config(RECIPE, tuned, 2, tmp_path, seed=0, use_cpu=True).learning_rate == 4e-5
    assert as_dict(RECIPE, tuned)["departures"] == {
        "sft_learning_rate": {"paper": 2.5e-5, "profile": 2e-4}, "grpo_learning_rate": {"paper": 5e-6, "profile": 4e-5}}
    with pytest.raises(ValueError, match="learning rate"):
        get_profile("test").replace(sft_learning_rate=3)


def test_a_training_writes_the_prompt_cap_by_its_old_name_and_reads_it_back():
    """request.json and summary.json keep the profile's prompt cap as `max_prompt_length`, its name
    before issue 72 (trainer.recipe.WRITTEN_AS): what adoption keys and older readers find; the
    worker reads it back as the field `max_prompt_tokens`."""
    from trainer.recipe import as_dict, profile_data, profile_fields

    prof = get_profile("cpu-small")
    written = profile_data(prof)
    assert written["max_prompt_length"] == prof.max_prompt_tokens == 1536 and "max_prompt_tokens" not in written
    assert as_dict(RECIPE, prof)["profile"] == written and Profile(**profile_fields(written)) == prof


def test_sft_stops_at_two_epochs_or_the_step_budget():
    prof = get_profile("cpu-small")
    assert sft_steps(RECIPE, prof, 5) == 5   # two epochs of 5 examples in batches of 2
    assert sft_steps(RECIPE, prof, 500) == prof.sft_max_steps


# ---------------------------------------------------------------------------------------------
# base models


def test_the_tiny_model_speaks_smollm2s_tokenizer_and_the_chat_format(tokenizer):
    model = models.load_model(models.resolve(models.TINY))
    assert model.config.vocab_size == len(tokenizer) == 49152
    assert sum(p.numel() for p in model.parameters()) < 2_000_000
    assert tokenizer.convert_ids_to_tokens([model.config.eos_token_id]) == [cf.IM_END]
    assert tokenizer.chat_template == cf.CHAT_TEMPLATE
    assert (models.cache_dir() / models.TINY / "chat_template.jinja").read_text() == cf.CHAT_TEMPLATE


def test_the_embedded_model_is_a_plain_trainable_llama():
    path = models.resolve(models.EMBEDDED)   # converted on first use (~30 s), once under a lock
    config = json.loads((Path(path) / "config.json").read_text())
    assert "quantization_config" not in config  # the GGUF marking would make trainers refuse it
    model = models.load_model(path)
    assert getattr(model, "hf_quantizer", None) is None
    assert round(sum(p.numel() for p in model.parameters()) / 1e6, 1) == 134.5


def test_unknown_base_models_are_one_sentence(tmp_path):
    with pytest.raises(UserError, match="unknown base model"):
        models.resolve("gpt-17")
    with pytest.raises(UserError, match="not a model directory"):
        models.resolve(str(tmp_path))
    assert models.resolve("Qwen/Qwen3-4B") == "Qwen/Qwen3-4B"


# ---------------------------------------------------------------------------------------------
# SFT: which tokens are trained


def trained_runs(input_ids, labels, tokenizer):
    """The decoded text of each maximal run of trained positions."""
    runs, current = [], []
    for tok, label in zip(input_ids, labels):
        if label != data.IGNORE:
            assert label == tok
            current.append(tok)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return [tokenizer.decode(r) for r in runs]


def sft_record(raw_record, weights):
    return {"id": raw_record["id"], "messages": raw_record["messages"], "tools": raw_record["tools"], "weights": weights}


def expected_runs(record):
    assistant = [m for m in record["messages"] if m["role"] == "assistant"]
    return [cf.render_assistant(m) + cf.IM_END for m, w in zip(assistant, record["weights"]) if w]


def test_exactly_the_weight_1_assistant_turns_and_their_end_token_are_trained(raw, tokenizer):
    r = raw[1]
    n = sum(m["role"] == "assistant" for m in r["messages"])
    record = sft_record(r, [1, 0] * (n // 2) + [1] * (n % 2))
    ex = data.sft_example(record, tokenizer, max_length=100_000)
    assert not ex["truncated"]
    runs = trained_runs(ex["input_ids"], ex["labels"], tokenizer)
    assert runs == expected_runs(record)
    assert any(w == 0 for w in record["weights"]) and len(runs) < n  # masked turns stay untrained
    assert tokenizer.decode(ex["input_ids"]) == cf.render(r["messages"], r["tools"])  # ...and in context


def test_the_mask_survives_trls_collator(raw, tokenizer, tmp_path):
    """What the model is trained on: the labels of a batch as TRL's SFT pipeline builds it."""
    from datasets import Dataset
    from trl import SFTTrainer

    from trainer.sft import lora_config

    n = sum(m["role"] == "assistant" for m in raw[0]["messages"])
    masked = sft_record(raw[0], [i % 2 for i in range(n)])
    unweighted = {k: raw[1][k] for k in ("id", "messages", "tools")}  # no weights: every turn trained
    examples, _ = data.sft_examples([masked, unweighted], tokenizer, max_length=100_000)
    prof = get_profile("test").replace(sft_batch_size=2, max_length=100_000)
    trainer = SFTTrainer(model=models.load_model(models.resolve(models.TINY)),
                         args=sft_config(RECIPE, prof, 1, tmp_path, seed=0, use_cpu=True),
                         train_dataset=Dataset.from_list(examples), processing_class=tokenizer,
                         peft_config=lora_config(RECIPE))
    batch = next(iter(trainer.get_train_dataloader()))
    got = sorted(trained_runs(ids.tolist(), labels.tolist(), tokenizer)
                 for ids, labels in zip(batch["input_ids"], batch["labels"]))
    n1 = sum(m["role"] == "assistant" for m in raw[1]["messages"])
    assert got == sorted([expected_runs(masked), expected_runs({**unweighted, "weights": [1] * n1})])


def test_long_examples_lose_their_end_and_keep_the_tools_and_task(raw, tokenizer):
    r = raw[1]
    record = sft_record(r, [1] * sum(m["role"] == "assistant" for m in r["messages"]))
    full = data.sft_example(record, tokenizer, max_length=100_000)
    cut = len(full["input_ids"]) * 3 // 4
    ex = data.sft_example(record, tokenizer, max_length=cut)
    assert ex["truncated"] and ex["input_ids"] == full["input_ids"][:cut]
    text = tokenizer.decode(ex["input_ids"])
    assert text.startswith(cf.IM_START + "system\n" + cf.DEFAULT_SYSTEM + "\n\n" + cf.render_tools(r["tools"]))
    assert r["messages"][0]["content"] in text
    runs = trained_runs(ex["input_ids"], ex["labels"], tokenizer)
    assert runs[:-1] == expected_runs(record)[:len(runs) - 1]


def test_examples_truncated_to_nothing_trained_are_dropped_and_counted(raw, tokenizer):
    records = [sft_record(r, [1] * sum(m["role"] == "assistant" for m in r["messages"])) for r in raw[:3]]
    examples, stats = data.sft_examples(records, tokenizer, max_length=300)  # shorter than the tool list
    assert examples == [] and stats.dropped_untrained == 3 and stats.truncated == 3


def test_rl_prompts_drop_old_turns_to_fit_and_keep_the_task_and_latest_turn(raw, tokenizer):
    r = raw[1]
    k = max(i for i, m in enumerate(r["messages"]) if m["role"] == "assistant")
    record = {"id": "x", "messages": r["messages"][:k], "tools": r["tools"], "reward": "tool_call_match",
              "reference": {"content": "ok"}}
    full = len(tokenizer(cf.render_prompt(record["messages"], r["tools"]))["input_ids"])
    rows, stats = data.rl_rows([record], tokenizer, max_prompt_tokens=full - 50)
    assert stats.shortened == 1 and stats.prompts == 1
    prompt = rows[0]["prompt"]
    assert r["messages"][0]["content"] in prompt and record["messages"][-1]["content"] in prompt
    assert prompt.endswith(cf.GENERATION_PROMPT)
    assert len(tokenizer(prompt)["input_ids"]) <= full - 50
    _, stats = data.rl_rows([record], tokenizer, max_prompt_tokens=100)
    assert stats.dropped_too_long == 1


def test_bad_records_fail_with_file_and_line(tmp_path):
    path = tmp_path / "sft.jsonl"
    good = {"id": "a", "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}], "tools": []}
    path.write_text(json.dumps(good) + '\n{"id": "b"}\n')
    with pytest.raises(UserError, match=r"sft.jsonl:2: not a valid SFT record"):
        data.read_records(path, "sft")
    path.write_text("{oops\n")
    with pytest.raises(UserError, match=r"sft.jsonl:1: not JSON"):
        data.read_records(path, "sft")


def test_the_probe_reports_parseable_calls_and_rewards_on_held_out_steps(raw, tmp_path):
    from environments.evaluate import EvalSpec
    from experiments.probe import probe

    r = raw[0]
    k = next(i for i, m in enumerate(r["messages"]) if m.get("tool_calls"))
    step = {"id": "s", "messages": r["messages"][:k], "tools": r["tools"], "reward": "state_match",
            "reference": {"tool_calls": r["messages"][k]["tool_calls"]}, "meta": r["meta"]}
    path = tmp_path / "dev.jsonl"
    path.write_text(json.dumps(step) + "\n")
    result = probe(models.TINY, None, str(path), spec=EvalSpec(max_new_tokens=4, threads=2))
    assert result["steps"] == 1 and result["parseable_rate"] == 0.0  # a random model writes no tool call
    assert -0.5 <= result["reward_mean"] <= 1 and len(result["samples"]) == 1


def test_an_adapter_naming_a_hub_base_saves_without_looking_it_up_online(tmp_path):
    """The embedded model's adapters name its hub id; saving one offline raised PEFT's "Unable to fetch
    remote file … Name or service not known" warning per save: the recipe never trains the embeddings,
    so the lookup is not made. The saved adapter is the same either way (no embedding weights)."""
    import warnings

    from peft import get_peft_model
    from safetensors.torch import load_file

    from trainer.sft import lora_config

    model = get_peft_model(models.load_model(models.resolve(models.TINY)), lora_config(RECIPE))
    models.name_base(model, models.HUB_IDS[models.EMBEDDED])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        models.save_adapter(model, tmp_path / "adapter", selected_adapters=["default"])
    assert not [w for w in caught if "fetch remote file" in str(w.message) or "config file" in str(w.message)], \
        [str(w.message) for w in caught]
    saved = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    assert saved and all("lora_" in name for name in saved)
    assert json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())["base_model_name_or_path"] == \
        models.HUB_IDS[models.EMBEDDED]


def test_prompts_fitted_on_demand_are_the_prompts_fitted_first(raw, tokenizer):
    """rl_rows(on_demand=True) keeps the same rows (can_fit's verdict) with their prompts left to
    GRPO's draw; PromptsOnDemand gives each drawn row the prompt the eager fit gives, once a row."""
    records = []
    for r in raw[:8]:
        for k in (i for i, m in enumerate(r["messages"]) if m["role"] == "assistant"):
            records.append({"id": f"{r['id']}#{k}", "messages": r["messages"][:k], "tools": r["tools"],
                            "reward": "tool_call_match", "reference": {"content": "ok"}})
    cap = sorted(len(tokenizer(cf.render_prompt(r["messages"], r["tools"]))["input_ids"]) for r in records)[len(records) // 2]
    eager, stats = data.rl_rows(records, tokenizer, cap)
    lazy, lazy_stats = data.rl_rows(records, tokenizer, cap, on_demand=True)
    assert stats.shortened   # the cap cuts some prompts
    assert (lazy_stats.prompts, lazy_stats.dropped_too_long, lazy_stats.fitted) == (stats.prompts, stats.dropped_too_long, 0)
    assert [{k: v for k, v in row.items() if k not in ("prompt", "row")} for row in lazy] == \
        [{k: v for k, v in row.items() if k != "prompt"} for row in eager]
    fit = data.PromptsOnDemand(records, tokenizer, cap, lazy_stats)
    drawn = [0, 2, 2, len(lazy) - 1]   # a row drawn twice is fitted once
    batch = fit({key: [lazy[i][key] for i in drawn] for key in lazy[0]})
    assert "row" not in batch and batch["prompt"] == [eager[i]["prompt"] for i in drawn]
    assert batch["reward"] == [eager[i]["reward"] for i in drawn]
    assert lazy_stats.fitted == 3
    assert lazy_stats.prompt_tokens == sum(len(tokenizer(eager[i]["prompt"], add_special_tokens=False)["input_ids"])
                                           for i in (0, 2, len(lazy) - 1))
