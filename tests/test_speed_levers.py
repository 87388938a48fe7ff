"""The training speed levers (issue 45) keep the method: LoRA dropout's law, length-grouped SFT batches."""
import pytest
import torch
from torch import nn

from trainer import lora_dropout, models
from trainer.recipe import RECIPE, get_profile
from trainer.sft import build_trainer, sft_config


def test_uniform_dropout_keeps_1_minus_p_and_scales_the_rest_like_nn_dropout():
    torch.manual_seed(0)
    x = torch.ones(400, 1000)
    layer = lora_dropout.UniformDropout(0.05).train()
    y = layer(x)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.95) < 0.003          # Bernoulli(0.95) over 400,000 draws
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / 0.95))
    assert abs(y.mean().item() - 1.0) < 0.004                     # unbiased, as nn.Dropout
    assert torch.equal(layer.eval()(x), x)                         # evaluation passes through
    torch.manual_seed(3)
    a = lora_dropout.UniformDropout(0.05).train()(x)
    torch.manual_seed(3)
    assert torch.equal(a, lora_dropout.UniformDropout(0.05).train()(x))   # the seed fixes the masks
    with pytest.raises(ValueError, match="dropout probability"):
        lora_dropout.UniformDropout(1.0)


def test_install_swaps_every_lora_dropout_and_gradients_flow(tmp_path):
    from peft import get_peft_model

    from trainer.sft import lora_config

    model = get_peft_model(models.load_model(models.resolve(models.TINY)), lora_config(RECIPE))
    before = sum(type(m) is nn.Dropout for m in model.modules())
    assert before > 0
    assert lora_dropout.install(model) == before
    assert sum(type(m) is nn.Dropout for m in model.modules()) == 0
    assert lora_dropout.install(model) == 0                        # idempotent
    model.train()
    loss = model(input_ids=torch.tensor([[1, 2, 3, 4]]), labels=torch.tensor([[1, 2, 3, 4]])).loss
    loss.backward()
    grads = [p.grad for n, p in model.named_parameters() if "lora_A" in n]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)


@pytest.fixture(scope="module")
def examples():
    """Pre-tokenized examples of many lengths (8 to 400 tokens), as trainer.data builds them."""
    import random

    tokenizer = models.load_tokenizer(models.resolve(models.TINY))
    rng = random.Random(0)
    built = []
    for _ in range(40):
        ids = [rng.randrange(10, 1000) for _ in range(rng.randrange(8, 400))]
        built.append({"input_ids": ids, "labels": [-100] * (len(ids) // 2) + ids[len(ids) // 2:]})
    return tokenizer, built


def _batch_lengths(tokenizer, built, profile, tmp_path):
    args = sft_config(RECIPE, profile, 4, tmp_path, seed=0, use_cpu=True)
    trainer, padding = build_trainer(models.load_model(models.resolve(models.TINY)), tokenizer, built, RECIPE,
                                     profile, args, [])
    batches = [[int(row.sum()) for row in batch["attention_mask"]] for batch in trainer.get_train_dataloader()]
    return batches, padding


def test_sft_batches_are_length_grouped_and_pad_less_than_a_plain_shuffle(examples, tmp_path):
    tokenizer, built = examples
    profile = get_profile("test")
    assert sft_config(RECIPE, profile, 4, tmp_path, seed=0, use_cpu=True).train_sampling_strategy == "group_by_length"
    grouped, padding = _batch_lengths(tokenizer, built, profile, tmp_path / "g")
    shuffled, _ = _batch_lengths(tokenizer, built, profile.replace(sft_length_grouped=False), tmp_path / "s")
    assert sorted(map(sorted, grouped)) != sorted(map(sorted, shuffled))
    assert sorted(n for b in grouped for n in b) == sorted(n for b in shuffled for n in b)   # the same examples, once

    def waste(batches):
        return sum(max(b) * len(b) - sum(b) for b in batches) / sum(max(b) * len(b) for b in batches)

    assert waste(grouped) < waste(shuffled)
    assert padding.share() == round(waste(grouped), 4)     # the summary's padding share counts the same slots
    again, _ = _batch_lengths(tokenizer, built, profile, tmp_path / "g2")
    assert again == grouped            # the seed fixes the order
