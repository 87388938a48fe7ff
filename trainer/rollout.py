"""GRPO rollouts generated fast (`Profile.grpo_generation = "merged"`): the same sampling law as
TRL's `generate` path, computed with less work.

- **Merged weights.** Before each generation the policy's adapter is merged into a plain copy of the
  base model (W + scale·B·A per LoRA layer): a decoding step is then one matmul per linear layer
  instead of three, and no dropout module runs (TRL samples in train mode, LoRA dropout on).
- **One prefill per prompt.** A step's batch holds each prompt G times; its prompt is encoded once
  and the key/value cache copied to its G rows, so the prompt's forward pass is not repeated G times.
- **Batched groups.** Every distinct prompt of the generation batch is prefilled and decoded in one
  batch (left padding), with the KV cache (transformers' `generate`, `past_key_values`).
- **Precision.** The copy takes the training's compute dtype: bf16 where the trainer resolved bf16
  (a GPU or a CPU with bf16 units), fp32 elsewhere.

The policy's log-probabilities (and so the loss) are still computed by the trained model; only the
sampling is done on the merged copy.
"""
from __future__ import annotations

import torch


def lora_layers(peft_model, adapter: str = "default") -> list[tuple[str, object]]:
    """(name in the plain model, LoRA layer) of every layer that holds `adapter`."""
    from peft.tuners.lora import LoraLayer

    return [(name, module) for name, module in peft_model.get_base_model().named_modules()
            if isinstance(module, LoraLayer) and adapter in module.lora_A]


def merged_state(peft_model, adapter: str = "default") -> dict:
    """The base model's state with `adapter` merged into every LoRA layer (names as the plain model's)."""
    with torch.no_grad():
        deltas = {f"{name}.weight": module.get_delta_weight(adapter) for name, module in lora_layers(peft_model, adapter)}
        state = {}
        for key, value in peft_model.get_base_model().state_dict().items():
            if "lora_" in key:
                continue
            plain = key.replace(".base_layer.", ".")
            state[plain] = value + deltas[plain] if plain in deltas else value
    return state


class MergedGenerator:
    """Rollouts on a merged copy of the policy; `refresh` before each generation: the first copies
    the whole merged state, later ones only the LoRA layers' weights (W + scale·B·A), the rest of
    the model being frozen."""

    def __init__(self, dtype: torch.dtype):
        self.dtype, self.model, self._layers = dtype, None, []

    def refresh(self, peft_model) -> None:
        from transformers import AutoModelForCausalLM

        if self.model is not None:
            with torch.no_grad():
                for weight, module in self._layers:
                    weight.copy_(module.base_layer.weight + module.get_delta_weight("default"))
            return
        from transformers.initialization import no_init_weights

        base = peft_model.get_base_model()
        with no_init_weights():   # every weight is loaded below: no random initialisation to pay for
            self.model = AutoModelForCausalLM.from_config(base.config, dtype=self.dtype)
        self.model.to(peft_model.device).eval()
        self.model.generation_config = base.generation_config
        state = {k: v.to(self.dtype) for k, v in merged_state(peft_model).items()}
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        tied = set(getattr(self.model, "_tied_weights_keys", None) or {})
        if unexpected or set(missing) - tied:
            raise RuntimeError(f"merged rollout model: missing {missing}, unexpected {unexpected}")
        self._layers = [(self.model.get_submodule(name).weight, module) for name, module in lora_layers(peft_model)]

    @torch.no_grad()
    def generate(self, prompt_ids: list[list[int]], generation_config, pad_id: int) -> torch.Tensor:
        """Completion token ids (rows as `prompt_ids`, right-padded to the longest; callers cut at
        EOS). Each distinct prompt is prefilled once; its rows share that cache."""
        from transformers import DynamicCache

        distinct: dict[tuple, int] = {}
        rows = [distinct.setdefault(tuple(p), len(distinct)) for p in prompt_ids]
        prompts = list(distinct)
        width = max(len(p) for p in prompts)
        device = self.model.device
        ids = torch.full((len(prompts), width), pad_id, dtype=torch.long, device=device)
        mask = torch.zeros((len(prompts), width), dtype=torch.long, device=device)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)   # as generate derives them from the mask
        cache = DynamicCache(config=self.model.config)
        if width > 1:   # the prompts but their last token: generate feeds that one and samples after it
            self.model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1], position_ids=positions[:, :-1],
                       cache=cache, use_cache=True)
        index = torch.tensor(rows, device=device)
        cache.reorder_cache(index)   # each prompt's cache copied to its G rows
        out = self.model.generate(input_ids=ids[index], attention_mask=mask[index], cache=cache,
                                  generation_config=generation_config)
        return out[:, width:]
