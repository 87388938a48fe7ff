"""LoRA dropout with its masks drawn from `torch.rand` instead of `bernoulli_`: the same method.

The recipe's LoRA dropout (p = 0.05, paper §5.1) zeroes each input element of every adapter with
probability p and scales the rest by 1 / (1 − p). PEFT draws those masks with `nn.Dropout`, i.e.
`bernoulli_` — on a CPU a slow per-element draw: ~210 masks a step (7 adapted linears × 30
layers), measured at 16% of a `cpu-small` SFT step (bench/throughput.py --breakdown). Keeping an
element when a uniform draw is ≥ p is the same Bernoulli(1 − p) law; `torch.rand` fills the mask
~1.6× faster here (trainer/README.md). Seeds still fix every mask, so a run stays reproducible;
the masks differ from `nn.Dropout`'s draws, so adapters are not byte-identical to the old path's.

`install(model)` swaps each `nn.Dropout` of the model's LoRA layers for `UniformDropout` with the
same p; evaluation mode (and p = 0) passes the input through, like `nn.Dropout`.
"""
from __future__ import annotations

import torch
from torch import nn


class UniformDropout(nn.Module):
    def __init__(self, p: float):
        super().__init__()
        if not 0 <= p < 1:
            raise ValueError(f"dropout probability must be in [0, 1), not {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        keep = torch.rand(x.shape, dtype=x.dtype, device=x.device) >= self.p
        return x * keep * (1.0 / (1.0 - self.p))

    def extra_repr(self) -> str:
        return f"p={self.p}"


def install(model) -> int:
    """Replace the `nn.Dropout` of every LoRA layer in `model` (any adapter) by `UniformDropout`;
    returns how many were replaced."""
    replaced = 0
    for module in model.modules():
        table = getattr(module, "lora_dropout", None)
        if not isinstance(table, nn.ModuleDict):
            continue
        for name, layer in list(table.items()):
            if type(layer) is nn.Dropout:
                table[name] = UniformDropout(layer.p)
                table[name].train(layer.training)
                replaced += 1
    return replaced
