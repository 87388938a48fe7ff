"""GRPO: the advantage clip, the zero-variance count, continuing the SFT adapter."""
import pytest
import torch
from datasets import Dataset

from chat_format import chat_format as cf
from trainer import models
from trainer.grpo import RecipeGRPOTrainer, continue_from, grpo_config
from trainer.recipe import RECIPE, get_profile
from trainer.sft import lora_config

G = 8


@pytest.fixture(scope="module")
def tiny():
    source = models.resolve(models.TINY)
    return source, models.load_tokenizer(source)


def make_trainer(tiny, tmp_path, rewards, model=None):
    """A one-prompt GRPO trainer whose reward function returns `rewards` for the G completions."""
    source, tokenizer = tiny

    def scripted(prompts, completions, **_):
        return list(rewards)

    prof = get_profile("test").replace(num_generations=G, grpo_prompts_per_step=1, grpo_micro_batch=G,
                                       max_completion_length=4)
    rows = [{"prompt": cf.render_prompt([{"role": "user", "content": "hi"}], []), "record": "{}"}]
    trainer = RecipeGRPOTrainer(
        model=model or models.load_model(source), reward_funcs=[scripted],
        args=grpo_config(RECIPE, prof, 1, tmp_path, seed=0, use_cpu=True), train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer, peft_config=None if model is not None else lora_config(RECIPE),
        advantage_clip=RECIPE.advantage_clip)
    trainer.model.train()
    return trainer, rows * G


def test_advantages_are_clipped_to_the_recipes_bound(tiny, tmp_path):
    rewards = [1.0] + [0.0] * (G - 1)  # one success in eight: its normalised advantage is about 2.5
    unclipped = (1 - 1 / G) / torch.tensor(rewards).std().item()
    assert unclipped > RECIPE.advantage_clip
    trainer, batch = make_trainer(tiny, tmp_path, rewards)
    advantages = trainer._generate_and_score_completions(batch)["advantages"]
    assert advantages.max().item() == pytest.approx(RECIPE.advantage_clip)
    assert advantages[1:].tolist() == pytest.approx([-1 / G / torch.tensor(rewards).std().item()] * (G - 1), rel=1e-3)
    assert trainer._metrics["train"]["advantages/clipped_ratio"][-1] == pytest.approx(1 / G)


def test_groups_whose_completions_all_score_the_same_are_counted(tiny, tmp_path):
    trainer, batch = make_trainer(tiny, tmp_path, [0.5] * G)
    assert trainer._generate_and_score_completions(batch)["advantages"].abs().max().item() == 0
    trainer._generate_and_score_completions(batch)
    assert (trainer.groups, trainer.zero_variance_groups) == (2, 2)
    trainer, batch = make_trainer(tiny, tmp_path, [1.0, 0.0] * (G // 2))
    trainer._generate_and_score_completions(batch)
    assert (trainer.groups, trainer.zero_variance_groups) == (1, 0)


def test_grpo_continues_the_sft_adapter_and_measures_kl_against_it(tiny, tmp_path):
    from peft import get_peft_model

    source, _ = tiny
    sft = get_peft_model(models.load_model(source), lora_config(RECIPE))
    torch.manual_seed(0)
    for name, p in sft.named_parameters():
        if "lora_B" in name:
            p.data.normal_(std=0.02)  # a trained adapter (a fresh one has B = 0)
    sft.save_pretrained(tmp_path / "sft_adapter")
    saved = {n: p.detach().clone() for n, p in sft.named_parameters() if "lora_" in n}

    trainer, _ = make_trainer(tiny, tmp_path, [0.0] * G, model=continue_from(tmp_path / "sft_adapter", source))
    params = dict(trainer.model.named_parameters())
    for name, value in saved.items():
        assert torch.equal(params[name], value)  # the policy starts as the SFT model...
        assert torch.equal(params[name.replace(".default.", ".ref.")], value)  # ...and so does the KL reference
        assert params[name].requires_grad and not params[name.replace(".default.", ".ref.")].requires_grad


def test_merged_rollouts_generate_what_the_policy_itself_generates(tiny):
    """trainer.rollout: the adapter merged into a plain copy, each distinct prompt prefilled once and
    its cache shared by its rows, prompts of different lengths batched (left padding): greedy
    decoding gives the unmerged policy's own tokens, row by row."""
    from peft import get_peft_model
    from transformers import GenerationConfig

    from trainer.rollout import MergedGenerator

    source, tokenizer = tiny
    torch.manual_seed(0)
    policy = get_peft_model(models.load_model(source), lora_config(RECIPE))
    for name, p in policy.named_parameters():
        if "lora_B" in name:
            p.data.normal_(std=0.5)   # a trained adapter that changes what the model says
    policy.eval()
    short, long = (tokenizer(t)["input_ids"] for t in ("list the files", "move the report into the archive folder now"))
    config = GenerationConfig(max_new_tokens=6, do_sample=False, pad_token_id=tokenizer.pad_token_id, eos_token_id=None)
    rollouts = MergedGenerator(torch.float32)
    rollouts.refresh(policy)
    batch = [short, short, long, long, short]
    got = rollouts.generate(batch, config, tokenizer.pad_token_id).tolist()
    for prompt, row in zip(batch, got):
        own = policy.generate(input_ids=torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                              generation_config=config)[0, len(prompt):].tolist()
        assert row == own
    base = models.load_model(source).eval()
    plain = base.generate(input_ids=torch.tensor([long]), generation_config=config)[0, len(long):].tolist()
    assert got[2] != plain   # the adapter is merged in: not the base model's answer
    # after an optimisation step the next refresh merges the new adapter (only the LoRA layers are copied)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_A" in name:
                p.mul_(-1.5)
    rollouts.refresh(policy)
    again = rollouts.generate([long], config, tokenizer.pad_token_id)[0].tolist()
    own = policy.generate(input_ids=torch.tensor([long]), generation_config=config)[0, len(long):].tolist()
    assert again == own and again != got[2]


def test_a_trainer_with_merged_generation_samples_its_groups_on_the_merged_copy(tiny, tmp_path):
    source, tokenizer = tiny
    prof = get_profile("test").replace(num_generations=4, grpo_prompts_per_step=2, grpo_micro_batch=8,
                                       max_completion_length=5)
    rows = [{"prompt": cf.render_prompt([{"role": "user", "content": text}], []), "record": "{}"}
            for text in ("hi", "list my files please")]
    trainer = RecipeGRPOTrainer(
        model=models.load_model(source), reward_funcs=[lambda prompts, completions, **_: [0.0] * len(prompts)],
        args=grpo_config(RECIPE, prof, 1, tmp_path, seed=0, use_cpu=True), train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer, peft_config=lora_config(RECIPE), advantage_clip=RECIPE.advantage_clip,
        generation="merged")
    trainer.model.train()
    out = trainer._generate_and_score_completions([rows[0]] * 4 + [rows[1]] * 4)
    assert trainer.rollouts is not None and trainer.rollouts.model.dtype == torch.float32
    assert out["completion_ids"].shape[0] == 8 and 1 <= out["completion_mask"].sum(1).min() <= 5
    assert trainer.model.training   # the policy itself stays in training mode
