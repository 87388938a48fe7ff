"""A low-variance dev signal beside P: the trained policy's log-likelihood of the dev tasks' gold calls.

For every step item with a known gold call (base.benchmark.StepItem; irrelevance items, whose
gold is "no call", and items without ground truth are left out), the gold assistant message is
rendered after the item's prefix with the training chat format (trainer.data.sft_example: the
same tokens and assistant mask the recipe trains on, only the gold turn weighted), and the
policy's mean log-probability per gold token is read off one teacher-forced forward pass. The
signal is the mean over items (nats per token, higher is better), with per-category means.

Unlike P, which counts tasks solved by greedy decoding (0/1 per task), it moves with every
change of the model's distribution, so two candidates separated by a few tasks of P are told
apart on far fewer tasks. It is computed in the evaluation stage, reported beside P and never
written where a strategy can read it; J = P − λ·C stays the decision rule.
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Mapping, Sequence

IGNORE = -100
GOLD_BATCH = 8
"""Teacher-forced sequences per forward pass (the faster of those tried on 2 cores, docs/results/training.md)."""


def gold_message(item) -> dict:
    """The gold assistant turn of a step item with gold calls."""
    calls = [{"id": f"call_{n}", "type": "function", "function": {"name": g["name"], "arguments": g["arguments"]}}
             for n, g in enumerate(item.gold)]
    return {"role": "assistant", "content": None, "tool_calls": calls}


def scored(item) -> bool:
    return bool(item.gold) and not (item.meta or {}).get("gold_unknown")


def examples(items: Sequence, tokenizer, style: str, max_length: int = 4096) -> list[tuple[object, dict]]:
    """(item, {"input_ids", "labels"}) for the scored items: only the gold turn carries labels."""
    from trainer.data import sft_example

    out = []
    for item in items:
        if not scored(item):
            continue
        messages = [*item.messages, gold_message(item)]
        turns = sum(m.get("role") == "assistant" for m in messages)
        record = {"messages": messages, "tools": item.tools, "weights": [0] * (turns - 1) + [1]}
        ex = sft_example(record, tokenizer, max_length, style)
        if any(label != IGNORE for label in ex["labels"]):   # a gold turn cut off by max_length is not scored
            out.append((item, ex))
    return out


def token_log_likelihoods(model, batch: Sequence[dict], pad_id: int) -> list[float]:
    """Mean log-probability per labelled token of each example (one right-padded forward pass)."""
    import torch

    width = max(len(ex["input_ids"]) for ex in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, ex in enumerate(batch):
        n = len(ex["input_ids"])
        ids[row, :n] = torch.tensor(ex["input_ids"])
        labels[row, :n] = torch.tensor(ex["labels"])
        mask[row, :n] = 1
    device = next(model.parameters()).device
    target = labels[:, 1:].to(device)
    keep = target != IGNORE
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    with torch.no_grad():   # the LM head and softmax at the gold tokens only, not at every position
        hidden = base.get_decoder()(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state
        logits = base.get_output_embeddings()(hidden[:, :-1][keep]).float()
    picked = torch.log_softmax(logits, dim=-1).gather(-1, target[keep].unsqueeze(-1)).squeeze(-1)
    rows = keep.nonzero()[:, 0]
    sums = torch.zeros(len(batch), dtype=picked.dtype, device=device).index_add_(0, rows, picked)
    counts = keep.sum(dim=1)
    return [float(s / c) for s, c in zip(sums.tolist(), counts.tolist())]


def gold_log_likelihood(model, tokenizer, items: Sequence, category: Mapping[str, str], style: str,
                        batch_size: int = GOLD_BATCH) -> dict:
    """{"mean", "items", "per_category": {cat: {"mean", "items"}}, "per_task": {task id: mean}}:
    nats per gold token, the mean over the scored items (None when none is scored)."""
    pairs = examples(items, tokenizer, style)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    per_task: dict[str, list[float]] = defaultdict(list)
    pairs = sorted(pairs, key=lambda pair: len(pair[1]["input_ids"]))   # like lengths batched: little padding
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start:start + batch_size]
        for (item, _), value in zip(chunk, token_log_likelihoods(model, [ex for _, ex in chunk], pad)):
            per_task[item.task_id].append(value)
    task_mean = {t: sum(v) / len(v) for t, v in sorted(per_task.items())}
    by_cat: dict[str, list[float]] = defaultdict(list)
    for task, value in task_mean.items():
        by_cat[category.get(task, "?")].append(value)

    def mean(values):
        return round(sum(values) / len(values), 6) if values else None

    if not all(math.isfinite(v) for v in task_mean.values()):
        raise RuntimeError("a gold log-likelihood is not finite: the policy's logits overflowed")
    return {"mean": mean(list(task_mean.values())), "items": len(pairs), "tasks": len(task_mean),
            "per_category": {c: {"mean": mean(v), "tasks": len(v)} for c, v in sorted(by_cat.items())},
            "per_task": {t: round(v, 6) for t, v in task_mean.items()},
            "unit": "mean log-probability per gold-call token (nats), teacher-forced"}
