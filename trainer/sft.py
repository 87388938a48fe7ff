"""Stage 1 of the recipe: LoRA SFT on the SFT records, loss on weight-1 assistant turns only.

Examples arrive pre-tokenized with their labels (trainer.data), so TRL neither re-renders nor
re-masks them (`skip_prepare_dataset`); its collator pads labels with -100 and the loss is the
mean over the batch's trained tokens.
"""
from __future__ import annotations

import math
import os
import time
from pathlib import Path

from trainer import lora_dropout, trl_patches
from trainer.metrics import MetricsLog, console
from trainer.recipe import Profile, Recipe
from trainer.tracking import trl_report_to


def lora_config(recipe: Recipe):
    from peft import LoraConfig

    return LoraConfig(r=recipe.lora_r, lora_alpha=recipe.lora_alpha, lora_dropout=recipe.lora_dropout,
                      target_modules=recipe.lora_target_modules, bias="none", task_type="CAUSAL_LM")


def common_args(profile: Profile, seed: int, use_cpu: bool, progress: bool) -> dict:
    """TrainingArguments shared by both stages: precision, device, seeds, no checkpoints."""
    return dict(bf16=profile.precision == "bf16", fp16=False, use_cpu=use_cpu,
                activation_checkpointing=profile.gradient_checkpointing, seed=seed, data_seed=seed,
                logging_steps=1, save_strategy="no",
                dataloader_num_workers=0, disable_tqdm=not progress, remove_unused_columns=False)


def optimiser_args(recipe: Recipe, out_dir: Path, lr: float, scheduler: str, warmup_ratio: float, steps: int,
                   max_grad_norm: float) -> dict:
    """What an SFT and a GRPO config of the recipe set alike: the output folder and the optimiser's schedule."""
    return dict(output_dir=str(out_dir), learning_rate=lr, lr_scheduler_type=scheduler,
                warmup_steps=warmup_ratio,  # transformers 5: a float below 1 is a ratio
                max_steps=steps, max_grad_norm=max_grad_norm, weight_decay=recipe.weight_decay, optim=recipe.optimizer)


def sft_steps(recipe: Recipe, profile: Profile, n_examples: int, world_size: int = 1) -> int:
    per_step = profile.sft_batch_size * profile.sft_grad_accum * world_size
    return max(1, min(profile.sft_max_steps, math.ceil(recipe.sft_epochs * n_examples / per_step)))


def sft_config(recipe: Recipe, profile: Profile, steps: int, out_dir: Path, seed: int, use_cpu: bool,
               progress: bool = False, tracking: dict | None = None):
    from trl import SFTConfig

    return SFTConfig(
        **optimiser_args(recipe, out_dir, profile.sft_lr(recipe), recipe.sft_lr_scheduler, recipe.sft_warmup_ratio,
                         steps, recipe.sft_max_grad_norm),
        per_device_train_batch_size=profile.sft_batch_size,
        gradient_accumulation_steps=profile.sft_grad_accum,
        max_length=profile.max_length,
        truncation_mode="keep_start",
        packing=False,
        train_sampling_strategy="group_by_length" if profile.sft_length_grouped else "random",
        dataset_kwargs={"skip_prepare_dataset": True},
        include_num_input_tokens_seen="non_padding",
        **common_args(profile, seed, use_cpu, progress),
        **(tracking or {"report_to": "none"}),  # trainer.tracking.trl_report_to
    )


def build_trainer(model, tokenizer, examples: list[dict], recipe: Recipe, profile: Profile, args, callbacks: list):
    """TRL's `SFTTrainer` as the recipe trains: a fresh LoRA adapter, the profile's LoRA dropout
    masks, and a collator that counts padding; returns (trainer, its `PaddingCount`)."""
    from datasets import Dataset
    from trl import SFTTrainer

    trl_patches.apply()
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(examples),
                         processing_class=tokenizer, peft_config=lora_config(recipe), callbacks=callbacks)
    if profile.uniform_dropout:
        lora_dropout.install(trainer.model)
    trainer.data_collator = padding = PaddingCount(trainer.data_collator)
    return trainer, padding


def run_sft(model, tokenizer, examples: list[dict], recipe: Recipe, profile: Profile, out_dir: Path,
            seed: int, use_cpu: bool, progress: bool = False, report_to: list[str] = ()) -> tuple[object, dict]:
    """Train a fresh LoRA adapter on `examples`; returns (the PEFT model, stage summary).
    `report_to`: the trackers TRL logs to (trainer.tracking)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))  # under a launcher, each process takes its share
    steps = sft_steps(recipe, profile, len(examples), world)
    log = MetricsLog(out_dir, "sft")
    args = sft_config(recipe, profile, steps, out_dir / "sft", seed, use_cpu, progress,
                      tracking=trl_report_to(list(report_to), out_dir, "sft"))
    trainer, padding = build_trainer(model, tokenizer, examples, recipe, profile, args, [log])
    console(trainer, "sft", progress)
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    losses = log.series("loss")
    seen = steps * profile.sft_batch_size * profile.sft_grad_accum * world
    tokens = int(trainer.state.num_input_tokens_seen)
    return trainer.model, {
        "steps": steps, "examples_seen": seen, "epochs_seen": round(seen / len(examples), 3),
        "tokens_seen": tokens, "tokens_per_s": round(tokens / wall, 1) if wall else None,
        "loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None,
        # one step's loss is one batch's: with length-grouped batches the last is the shortest pair
        "loss_last_10": round(sum(losses[-10:]) / len(losses[-10:]), 4) if losses else None,
        "padding_share": padding.share(), "wall_s": round(wall, 2),
    }


class PaddingCount:
    """The collator TRL built, counting the padded positions of the batches it makes (the share of
    each batch's rows × longest row that is padding: compute spent on nothing)."""

    def __init__(self, inner):
        self.inner, self.slots, self.tokens = inner, 0, 0

    def __call__(self, examples):
        lengths = [len(e["input_ids"]) for e in examples]
        self.slots += max(lengths, default=0) * len(lengths)
        self.tokens += sum(lengths)
        return self.inner(examples)

    def share(self) -> float | None:
        return round(1 - self.tokens / self.slots, 4) if self.slots else None
