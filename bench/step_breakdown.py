"""Where one SFT step's time goes (`bench/throughput.py --breakdown`): forward, backward and
optimizer seconds, the share of the step's operator time by kind (`OP_GROUPS`, torch profiler) and
the padding share of the batches, on the recipe's LoRA model and a profile's batches.
"""
from __future__ import annotations

import contextlib
import time

from trainer import devices, models
from trainer.recipe import RECIPE


OP_GROUPS = (("matmul", ("aten::mm", "aten::addmm", "aten::bmm")),
             ("attention", ("flash_attention", "scaled_dot_product")),
             ("dropout RNG", ("aten::bernoulli_", "aten::random_")),
             ("dtype casts", ("aten::copy_", "aten::_to_copy")),
             ("log-softmax (LM head loss)", ("log_softmax",)))


def breakdown(source: str, examples: list[dict], profile, steps: int = 6, seed: int = 0) -> dict:
    """Where one SFT step's time goes, on the recipe's LoRA model and the profile's batches: forward,
    backward and optimizer seconds (timed), the share of the step's operator time by kind (torch
    profiler, last step), and the padding share of the batches. A plain loop, not TRL's: TRL adds its
    metrics (entropy, token accuracy), so its steps are slower than the sum shown here."""
    import torch
    from peft import get_peft_model

    from trainer.sft import lora_config

    torch.manual_seed(seed)
    model = get_peft_model(models.load_model(source, dtype="float32"), lora_config(RECIPE))
    if profile.uniform_dropout:
        from trainer import lora_dropout

        lora_dropout.install(model)
    model.train()
    optim = torch.optim.AdamW([w for w in model.parameters() if w.requires_grad], lr=RECIPE.sft_learning_rate)
    compute = devices.compute_dtype("cpu", "float32", profile.precision, cpu_bf16=devices.cpu_has_bf16())
    bs, phases, real, slots = profile.sft_batch_size, {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}, 0, 0
    table = None
    for step in range(steps + 1):
        batch = examples[step * bs:(step + 1) * bs] or examples[:bs]
        width = max(len(e["input_ids"]) for e in batch)
        ids = torch.tensor([e["input_ids"] + [0] * (width - len(e["input_ids"])) for e in batch])
        labels = torch.tensor([e["labels"] + [-100] * (width - len(e["labels"])) for e in batch])
        mask = torch.tensor([[1] * len(e["input_ids"]) + [0] * (width - len(e["input_ids"])) for e in batch])
        profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) if step == steps else None
        with profiler or contextlib.nullcontext():
            t0 = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=compute == "bfloat16"):
                loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            optim.step()
            optim.zero_grad()
            t3 = time.perf_counter()
        if step:   # the first step warms up
            for name, dt in zip(phases, (t1 - t0, t2 - t1, t3 - t2)):
                phases[name] += dt / steps
            real, slots = real + int(mask.sum()), slots + mask.numel()
        if profiler is not None:
            table = profiler.key_averages()
    total = sum(e.self_cpu_time_total for e in table)
    shares = {group: round(sum(e.self_cpu_time_total for e in table if any(k in e.key for k in keys)) / total, 3)
              for group, keys in OP_GROUPS}
    shares["other"] = round(1 - sum(shares.values()), 3)
    return {"compute_dtype": compute, "uniform_dropout": profile.uniform_dropout, "step_s": {k: round(v, 3) for k, v in phases.items()},
            "tokens_per_s": round(real / steps / sum(phases.values()), 1), "padding_share": round(1 - real / slots, 3),
            "operator_time_share": shares}
