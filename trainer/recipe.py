"""The fixed post-training recipe, as data: π_e = Train_SFT+GRPO(π_base, D_sft, D_rl).

`RECIPE` is the paper's (CurateEvo §5.1): LoRA r=16, alpha=32, dropout 0.05; SFT at lr 2.5e-5,
warmup ratio 0.03, cosine schedule, at most 140 steps; GRPO at lr 5e-6, warmup ratio 0.03,
KL β=0.14, ratio clip 0.05, advantage clip 1.4, max grad norm 1.0. Where the paper is silent the
choice is written here, and every TRL default that would change the meaning is set explicitly
(TRL: β=0, loss "dapo", bias-corrected KL, bf16, linear schedule).

A `Profile` changes budgets (steps, batch sizes, lengths, precision, threads) and, for a base and
batch far from the paper's, the optimiser's scale: its own SFT/GRPO learning rates, chosen by
measurement on the tuning slice (never dev or test; trainer/README.md). Nothing else of the recipe
changes, and every candidate of a run trains with the same values. `paper` keeps the paper's
values; `cpu-small` runs one evolution epoch in minutes on a 2-core machine; `test` is a tiny model
in seconds. `departures(profile)` lists what a profile changes from the paper; every training
summary and run records it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Mapping

from base.errors import UserError


@dataclass(frozen=True)
class Recipe:
    """The training method; identical for every epoch, profile and base model."""

    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    lora_target_modules: str = "all-linear"
    """Paper silent: every linear layer of the transformer blocks (the LM head excluded)."""

    sft_learning_rate: float = 2.5e-5
    """The paper's SFT learning rate (a small base's profile scales it: `Profile.sft_lr`)."""
    sft_warmup_ratio: float = 0.03
    """Of the SFT steps, the share spent warming the learning rate up (the paper's)."""
    sft_lr_scheduler: str = "cosine"
    sft_max_steps: int = 140
    sft_epochs: float = 2.0
    """Paper silent: two passes over the SFT data, stopped at `sft_max_steps` whichever comes first."""
    sft_max_grad_norm: float = 1.0
    """Paper silent for SFT: the GRPO value (also the transformers default)."""

    grpo_learning_rate: float = 5e-6
    grpo_warmup_ratio: float = 0.03
    grpo_lr_scheduler: str = "cosine"
    """Paper silent: cosine, as for SFT (TRL's default is linear)."""
    grpo_epochs: float = 1.0
    """Paper silent: one pass over the RL prompts, stopped at the profile's step budget."""
    kl_beta: float = 0.14
    ratio_clip: float = 0.05
    """PPO clip ε, symmetric (TRL `epsilon` and `epsilon_high`)."""
    advantage_clip: float = 1.4
    """|advantage| ≤ 1.4 after group normalisation (TRL has none: trainer.grpo.RecipeGRPOTrainer)."""
    max_grad_norm: float = 1.0
    grpo_loss_type: str = "grpo"
    """The original GRPO objective (per-sequence token mean), not TRL's default "dapo"."""
    scale_rewards: str = "group"
    """Advantages = (r − group mean) / group std, as in GRPO."""
    kl_bias_correction: bool = False
    """The plain k3 KL estimator of GRPO (TRL's default multiplies it by the importance ratio)."""
    num_iterations: int = 1
    """Paper silent: one policy update per generation batch (TRL default). The ratio is then 1 at
    every step and the ratio clip only matters with more iterations; kept as the paper states it."""
    temperature: float = 1.0
    """Sampling temperature of GRPO rollouts (evaluation decodes greedily, paper §5.1)."""
    weight_decay: float = 0.0
    optimizer: str = "adamw_torch"
    sft_loss: str = "mean over trained tokens of the batch (weight-1 assistant turns only)"


RECIPE = Recipe()


@dataclass(frozen=True)
class Profile:
    """Budgets: how much of the recipe a machine can afford. Changing one never changes the method."""

    name: str
    base: str
    """The default base model for this profile."""
    sft_max_steps: int
    """At most `RECIPE.sft_max_steps`."""
    sft_batch_size: int
    sft_grad_accum: int
    max_length: int
    """SFT sequence length in tokens; longer examples lose their end (trainer/README.md)."""
    grpo_max_steps: int
    grpo_prompts_per_step: int
    num_generations: int
    """G completions per prompt."""
    grpo_micro_batch: int
    """Completions per forward/backward pass; the rest is gradient accumulation."""
    max_prompt_tokens: int
    """GRPO prompt cap in tokens; a longer prompt loses old messages or is dropped (trainer/README.md).
    Written and keyed as `max_prompt_length`, its name before issue 72 (`WRITTEN_AS`)."""
    max_completion_length: int
    precision: str = "auto"
    """"auto" or "bf16": bfloat16 on a GPU that has it, float32 elsewhere; "fp32" always float32
    (trainer.devices.placement decides)."""
    gradient_checkpointing: bool = False
    threads: int | None = None
    """CPU threads (fixed so a run is reproducible; None: torch's default)."""
    device: str = "auto"
    """"cpu" forces the CPU; "auto" takes a GPU when there is one; "cuda" demands one."""
    vllm_mode: str | None = None
    """GRPO generation with vLLM (TRL `use_vllm`): "colocate" (in the training process) or "server"
    (a `trl vllm-serve` process at `vllm_server_url`); None: transformers' generate."""
    vllm_server_url: str | None = None
    """For vllm_mode "server": e.g. http://10.0.0.5:8000 (None: TRL's default, port 8000 on this host)."""
    grpo_generation: str = "trl"
    """How GRPO samples its rollouts: "trl" (TRL's `generate` on the training model, adapter unmerged)
    or "merged" (trainer.rollout: the adapter merged into a plain copy, one prefill per prompt shared
    by its group, all groups in one batch; the same sampling law, less work). vLLM, when set, wins."""
    sft_memory_hints: bool = False
    """Hints in the SFT prompts: each SFT example's system prompt gets the memory hints the curated
    bank gives it by the evaluation's own retrieval (trainer.memory.hints: never its own record's or
    task's), so the policy learns to read hints as it will see them at evaluation. Off by default:
    not yet measured to help at a profile's budget (trainer/README.md)."""
    sft_learning_rate: float | None = None
    """The SFT learning rate for this profile's base and batch (None: the recipe's, the paper's 2.5e-5)."""
    grpo_learning_rate: float | None = None
    """The GRPO learning rate for this profile's base and batch (None: the recipe's, the paper's 5e-6)."""
    sft_length_grouped: bool = True
    """SFT batches of like lengths (transformers' `LengthGroupedSampler`: a seeded shuffle, then sorted
    by length within groups of 50 batches), so little of a batch is padding; False: a plain shuffle."""
    uniform_dropout: bool = True
    """LoRA dropout masks drawn by `torch.rand` (trainer.lora_dropout: the same law, faster on a CPU);
    False: PEFT's `nn.Dropout`."""

    def __post_init__(self):
        if self.sft_max_steps > RECIPE.sft_max_steps:
            raise ValueError(f"profile {self.name}: sft_max_steps above the recipe's {RECIPE.sft_max_steps}")
        if self.num_generations < 2:
            raise ValueError(f"profile {self.name}: GRPO needs at least 2 generations per prompt")
        if (self.grpo_prompts_per_step * self.num_generations) % self.grpo_micro_batch:
            raise ValueError(f"profile {self.name}: grpo_micro_batch must divide prompts × generations")
        if self.precision not in ("auto", "bf16", "fp32") or self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"profile {self.name}: precision is auto|bf16|fp32 and device auto|cpu|cuda")
        if self.grpo_generation not in ("trl", "merged"):
            raise ValueError(f"profile {self.name}: grpo_generation is trl or merged")
        if self.vllm_mode not in (None, "colocate", "server"):
            raise ValueError(f"profile {self.name}: vllm_mode is colocate or server")
        for rate in (self.sft_learning_rate, self.grpo_learning_rate):
            if rate is not None and not (isinstance(rate, (int, float)) and 0 < rate < 1):
                raise ValueError(f"profile {self.name}: a learning rate is a number between 0 and 1, not {rate!r}")

    def sft_lr(self, recipe: "Recipe") -> float:
        return recipe.sft_learning_rate if self.sft_learning_rate is None else float(self.sft_learning_rate)

    def grpo_lr(self, recipe: "Recipe") -> float:
        return recipe.grpo_learning_rate if self.grpo_learning_rate is None else float(self.grpo_learning_rate)

    def replace(self, **changes) -> "Profile":
        return dataclasses.replace(self, **changes)


GRPO_ONLY = ("grpo_max_steps", "grpo_prompts_per_step", "num_generations", "grpo_micro_batch", "max_prompt_tokens",
             "max_completion_length", "grpo_generation", "grpo_learning_rate", "vllm_mode", "vllm_server_url")
"""The `Profile` fields only the GRPO stage reads (trainer.grpo, trainer.launch's vLLM options, the RL
prompts' fit in trainer.data.rl_rows): an SFT stage does not depend on them, so two trainings that
differ only there share their SFT stage (trainer.sft_reuse.sft_key leaves them out)."""


PROFILES = {
    "paper": Profile(
        name="paper", base="Qwen/Qwen3-4B", sft_max_steps=140, sft_batch_size=4, sft_grad_accum=4,
        max_length=8192, grpo_max_steps=200, grpo_prompts_per_step=8, num_generations=8, grpo_micro_batch=8,
        max_prompt_tokens=6144, max_completion_length=512, precision="bf16", gradient_checkpointing=True),
    # One evolution epoch (curate + train + eval) within the budget of 2 CPU cores: the recipe's
    # full SFT steps and a token GRPO step on SmolLM2-135M (fewer, smaller SFT steps left the call
    # rate at 0, so P(ρ0) = 0). GRPO on agent prompts is slow on 2 cores: it is exercised, not relied
    # on. What an epoch costs: docs/results/main-job.md and the leaderboard's run rows.
    "cpu-small": Profile(
        name="cpu-small", base="smollm2-135m", sft_max_steps=140, sft_batch_size=2, sft_grad_accum=1,
        max_length=1536, grpo_max_steps=1, grpo_prompts_per_step=1, num_generations=4, grpo_micro_batch=4,
        max_prompt_tokens=1536, max_completion_length=96, threads=2, device="cpu",
        # bf16 matmuls under autocast (fp32 weights) on CPUs with bf16 units, faster than fp32 there
        # (docs/results/training.md); fp32 elsewhere (trainer.devices)
        precision="bf16",
        # chosen on the tuning slice by bench/lr_sweep.py's written criterion: at the paper's 2.5e-5
        # the model barely calls and clean and poisoned data score alike; at 2e-4 oracle beats
        # poisoned beyond the interval (bench/results/lr-sweep-cpu-small.json)
        sft_learning_rate=2e-4,
        # GRPO rollouts on a merged copy, one prefill per prompt, groups batched (trainer/rollout.py):
        # faster than TRL's generate (bench/results/grpo-generation-quiet-3prompts-cpu-small-2026-11-29.json)
        grpo_generation="merged"),
    "test": Profile(
        name="test", base="tiny-random", sft_max_steps=3, sft_batch_size=2, sft_grad_accum=1,
        max_length=1024, grpo_max_steps=2, grpo_prompts_per_step=2, num_generations=2, grpo_micro_batch=4,
        max_prompt_tokens=1536, max_completion_length=12, threads=2, device="cpu", grpo_generation="merged"),
}


DEFAULT_PROFILE = "cpu-small"
"""The profile every training takes when none is named (`TrainSpec.profile`, `--profile`)."""


PROFILE_HELP = ("paper (a GPU: Qwen3-4B, the paper's budgets), cpu-small (2 CPU cores: SmolLM2-135M, about 20 "
                "minutes an epoch), test (tiny-random: a smoke test, about 2.5 minutes a run, about 4 on long sessions)")
"""What each profile is, in the help of every option that takes one."""


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise UserError(f"unknown recipe profile {name!r} (one of {', '.join(PROFILES)})") from None


KEYED_WHEN_CHANGED = {"grpo_generation": "trl", "sft_memory_hints": False}
"""Profile fields added after trainings were first cached and adopted by key (`bench quality`), with
the behaviour every training had before them: a key holds such a field only when it differs, so a
profile that keeps the old behaviour (cpu-small, paper) keeps its keys, cached cells and adoptions."""


WRITTEN_AS = {"max_prompt_tokens": "max_prompt_length"}
"""Profile fields renamed after trainings were first written, cached and adopted by key, by the
name they had (issue 72: the prompt cap is `max_prompt_tokens`, as evaluation names it). A
profile's plain data keeps the old name: what a training writes (`profile_data`: request.json,
summary.json), the budget of a quality setting's record (`written_as`) and every key made from a
profile (`profile_key`), so cached trainings, adoptions, cells and calibrations keep their keys."""
READ_AS = {old: new for new, old in WRITTEN_AS.items()}
"""The other way: a profile's plain data, or a budget given by the old names, as the fields are named."""


def written_as(fields: Mapping) -> dict:
    """Profile fields (a profile's, or budget overrides) by the names they are written and keyed by (`WRITTEN_AS`)."""
    return {WRITTEN_AS.get(k, k): v for k, v in fields.items()}


def profile_data(profile: Profile) -> dict:
    """A profile as plain data, written beside a training (request.json, summary.json): `WRITTEN_AS`."""
    return written_as(dataclasses.asdict(profile))


def profile_fields(data: Mapping) -> dict:
    """Plain data of a profile (`profile_data`; a budget by old names) as Profile's fields (`READ_AS`)."""
    return {READ_AS.get(k, k): v for k, v in data.items()}


def profile_key(profile: Mapping) -> dict:
    """A profile's fields (dataclasses.asdict, or a training request's `profile`) as a cache key
    holds them: by the names they are written by (`WRITTEN_AS`), those of `KEYED_WHEN_CHANGED` left
    out where at their old behaviour."""
    return {k: v for k, v in written_as(profile).items() if k not in KEYED_WHEN_CHANGED or v != KEYED_WHEN_CHANGED[k]}


def curation_budget(profile: Profile, recipe: Recipe = RECIPE) -> dict:
    """`ctx.budget`: what the recipe will train on with this profile, so a strategy can choose which
    records fill it. `sft_examples` SFT examples are trained at most (steps × batch × accumulation):
    a curated set of that many is seen once, one of `sft_examples_at_recipe_epochs` the recipe's
    `sft_epochs` times (the paper trains its curated set twice); beyond `sft_examples`, records are
    never trained. An example longer than `max_length` tokens loses its end; `sft_tokens` bounds
    the SFT tokens; `rl_prompts` RL records are trained at most (GRPO steps × prompts per step)."""
    examples = profile.sft_max_steps * profile.sft_batch_size * profile.sft_grad_accum
    return {"profile": profile.name, "sft_examples": examples, "sft_epochs": recipe.sft_epochs,
            "sft_examples_at_recipe_epochs": int(examples // recipe.sft_epochs), "max_length": profile.max_length,
            "sft_tokens": examples * profile.max_length,
            "rl_prompts": profile.grpo_max_steps * profile.grpo_prompts_per_step}


def departures(profile: Profile, recipe: Recipe = RECIPE) -> dict:
    """What `profile` changes of the paper's optimiser: {field: {"paper": value, "profile": value}}."""
    out = {}
    for name, value in (("sft_learning_rate", profile.sft_lr(recipe)), ("grpo_learning_rate", profile.grpo_lr(recipe))):
        if value != getattr(recipe, name):
            out[name] = {"paper": getattr(recipe, name), "profile": value}
    return out


def as_dict(recipe: Recipe = RECIPE, profile: Profile | None = None) -> dict:
    """Recipe and profile as plain data (written to every training output), with the profile's
    departures from the paper's optimiser."""
    out = {"recipe": dataclasses.asdict(recipe)}
    if profile is not None:
        out["profile"] = profile_data(profile)
        out["departures"] = departures(profile, recipe)
    return out
