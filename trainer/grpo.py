"""Stage 2 of the recipe: GRPO on the RL records' prompts, continuing the SFT adapter.

G completions per prompt, scored by the record's named reward (trainer.rewards); advantages are
normalised per group, then clipped to ±`advantage_clip` (the paper's; TRL has no such option).
The reference model of the KL term is the SFT model (TRL copies the loaded adapter as "ref").
A group whose completions all score the same has zero advantage and teaches nothing; their
share is counted, and the summary warns when it is too high to learn from. Rollouts are sampled
by TRL's `generate`, or (`Profile.grpo_generation = "merged"`) by trainer.rollout: the adapter
merged into a plain copy, one prefill per prompt shared by its group, the groups batched.
"""
from __future__ import annotations

import math
import os
import time
from pathlib import Path

from trl import GRPOTrainer

from trainer import lora_dropout, trl_patches
from trainer.launch import vllm_args
from trainer.metrics import MetricsLog, console
from trainer.recipe import Profile, Recipe
from trainer.sft import common_args, lora_config, optimiser_args
from trainer.tracking import trl_report_to

ZERO_VARIANCE_WARNING = 0.8


class RecipeGRPOTrainer(GRPOTrainer):
    """TRL's GRPO plus the recipe's advantage clip and a count of zero-variance groups."""

    def __init__(self, *args, advantage_clip: float, generation: str = "trl", **kwargs):
        trl_patches.apply()
        super().__init__(*args, **kwargs)
        self.advantage_clip = advantage_clip
        self.rollouts = None   # trainer.rollout.MergedGenerator for generation "merged" (built at the first rollout)
        self.merged_generation = generation == "merged" and not (self.use_vllm or self.use_transformers_continuous_batching)
        self.groups = 0
        self.zero_variance_groups = 0
        self.generation_s = 0.0   # rollouts and their rewards; the rest of a step is the update

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        if not self.merged_generation or images or multimodal_fields:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)
        import torch

        from trainer.rollout import MergedGenerator

        if self.rollouts is None:
            self.rollouts = MergedGenerator(torch.bfloat16 if self.args.bf16 else self.model.dtype)
        self.rollouts.refresh(self.accelerator.unwrap_model(self.model))   # the policy as it is now
        completions = self.rollouts.generate(prompt_ids, self.generation_config, self._tokenizer.pad_token_id)
        eos, out = set(self.eos_token_ids), []
        for row in completions.tolist():   # up to and including the first EOS, as TRL cuts them
            end = next((i for i, t in enumerate(row) if t in eos), len(row) - 1)
            out.append(row[:end + 1])
        return out, None

    def _generate_and_score_completions(self, inputs):
        start = time.perf_counter()
        out = super()._generate_and_score_completions(inputs)   # ends on host copies of the completions: synchronised
        self.generation_s += time.perf_counter() - start
        mode = "train" if self.model.training else "eval"
        advantages = out["advantages"]
        clipped = advantages.clamp(-self.advantage_clip, self.advantage_clip)
        self._metrics[mode]["advantages/clipped_ratio"].append((clipped != advantages).float().mean().item())
        out["advantages"] = clipped
        if mode == "train":
            groups = len(inputs) * self.accelerator.num_processes // self.num_generations
            self.groups += groups
            self.zero_variance_groups += round(self._metrics[mode]["frac_reward_zero_std"][-1] * groups)
        return out


def continue_from(adapter_dir: Path, source: str, dtype: str = "float32"):
    """The base model with the SFT adapter loaded as the trainable "default" adapter; GRPOTrainer
    then adds a frozen copy ("ref") as the KL reference, so the reference is the SFT model."""
    from peft import PeftModel

    from trainer.models import load_model

    return PeftModel.from_pretrained(load_model(source, dtype=dtype), str(adapter_dir), is_trainable=True)


def grpo_steps(recipe: Recipe, profile: Profile, n_prompts: int) -> int:
    return max(1, min(profile.grpo_max_steps, math.ceil(recipe.grpo_epochs * n_prompts / profile.grpo_prompts_per_step)))


def grpo_config(recipe: Recipe, profile: Profile, steps: int, out_dir: Path, seed: int, use_cpu: bool,
                progress: bool = False, world_size: int = 1, tracking: dict | None = None):
    from trl import GRPOConfig

    if (profile.grpo_prompts_per_step * profile.num_generations) % (profile.grpo_micro_batch * world_size):
        raise ValueError("prompts × generations per step must divide evenly over processes × micro batch")
    accum = profile.grpo_prompts_per_step * profile.num_generations // (profile.grpo_micro_batch * world_size)
    return GRPOConfig(
        **optimiser_args(recipe, out_dir, profile.grpo_lr(recipe), recipe.grpo_lr_scheduler, recipe.grpo_warmup_ratio,
                         steps, recipe.max_grad_norm),
        beta=recipe.kl_beta,
        epsilon=recipe.ratio_clip,
        epsilon_high=recipe.ratio_clip,
        loss_type=recipe.grpo_loss_type,
        scale_rewards=recipe.scale_rewards,
        use_bias_correction_kl=recipe.kl_bias_correction,
        num_iterations=recipe.num_iterations,
        temperature=recipe.temperature,
        top_p=1.0,
        top_k=0,
        num_generations=profile.num_generations,
        max_completion_length=profile.max_completion_length,
        per_device_train_batch_size=profile.grpo_micro_batch,
        gradient_accumulation_steps=accum,
        shuffle_dataset=True,
        log_completions=False,
        **vllm_args(profile),
        **common_args(profile, seed, use_cpu, progress),
        **(tracking or {"report_to": "none"}),  # trainer.tracking.trl_report_to
    )


def run_grpo(model, tokenizer, rows: list[dict], reward_names: list[str], recipe: Recipe, profile: Profile,
             out_dir: Path, seed: int, use_cpu: bool, progress: bool = False,
             report_to: list[str] = (), prompts=None) -> tuple[object, dict]:
    """GRPO on `rows` (trainer.data.rl_rows: "prompt" plus the reward columns). `model` is a PeftModel with a trainable adapter
    (continued from SFT) or a plain model (a fresh LoRA adapter is added). `prompts`: the dataset's transform
    (trainer.data.PromptsOnDemand) for rows whose prompts are fitted as they are drawn."""
    from datasets import Dataset
    from peft import PeftModel

    from trainer.rewards import trl_reward_functions

    steps = grpo_steps(recipe, profile, len(rows))
    log = MetricsLog(out_dir, "grpo")
    trainer = RecipeGRPOTrainer(
        model=model, reward_funcs=trl_reward_functions(reward_names),
        args=grpo_config(recipe, profile, steps, out_dir / "grpo", seed, use_cpu, progress,
                         world_size=int(os.environ.get("WORLD_SIZE", "1")),
                         tracking=trl_report_to(list(report_to), out_dir, "grpo")),
        train_dataset=Dataset.from_list(rows) if prompts is None else Dataset.from_list(rows).with_transform(prompts),
        processing_class=tokenizer, callbacks=[log],
        peft_config=None if isinstance(model, PeftModel) else lora_config(recipe),
        advantage_clip=recipe.advantage_clip, generation=profile.grpo_generation)
    if profile.uniform_dropout:
        lora_dropout.install(trainer.model)
    console(trainer, "grpo", progress)
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    rewards = log.series("reward")
    lengths = log.series("completions/mean_length")
    per_step = profile.grpo_prompts_per_step * profile.num_generations
    share = trainer.zero_variance_groups / trainer.groups if trainer.groups else None
    summary = {
        "steps": steps, "prompts_seen": steps * profile.grpo_prompts_per_step,
        "prompts_per_step": profile.grpo_prompts_per_step, "num_generations": profile.num_generations,
        "generation": "vllm" if trainer.use_vllm else "merged" if trainer.merged_generation else "trl",
        "epochs_seen": round(steps * profile.grpo_prompts_per_step / len(rows), 3),
        "completions": steps * per_step, "completion_tokens": int(round(sum(lengths) * per_step)),
        "reward_first": rewards[0] if rewards else None, "reward_last": rewards[-1] if rewards else None,
        "reward_mean": sum(rewards) / len(rewards) if rewards else None,
        "rewards": {n: _mean(log.series(f"rewards/{n}/mean")) for n in reward_names},
        "kl_last": (log.series("kl") or [None])[-1],
        "advantage_clipped_ratio": _mean(log.series("advantages/clipped_ratio")),
        "groups": trainer.groups, "zero_variance_groups": trainer.zero_variance_groups,
        "zero_variance_share": None if share is None else round(share, 4),
        "wall_s": round(wall, 2), "steps_per_s": round(steps / wall, 4) if wall else None,
        # a step's cost split: generation (rollouts + rewards) and update (log-probs, loss, backward, optimizer)
        "step_generation_s": round(trainer.generation_s / steps, 3), "step_update_s": round((wall - trainer.generation_s) / steps, 3),
        "generated_tokens_per_s": round(sum(lengths) * per_step / trainer.generation_s, 2) if trainer.generation_s else None,
    }
    return trainer.model, summary


def _mean(values):
    return sum(values) / len(values) if values else None
