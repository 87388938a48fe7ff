"""LoRA dropout with cheaper masks: the same method, a faster draw.

The recipe's LoRA dropout (p = 0.05, paper §5.1) zeroes each input element of every adapter with
probability p and scales the rest by 1 / (1 − p). PEFT draws those masks with `nn.Dropout`
(`bernoulli_`), on a CPU a slow per-element draw: ~210 masks a step (7 adapted linears × 30
layers), 21–25% of a `cpu-small` SFT step's operator time in bf16 (bench/throughput.py --breakdown).
`UniformDropout` draws one 31-bit uniform integer per element (`random_` on int32, the cheapest
draw torch has on a CPU) and keeps the element when it is ≥ round(p · 2³¹): Bernoulli(1 − p) with p
exact to 2⁻³¹. The mask is applied as one float tensor (mask × scale), so forward and backward
each cost one multiply. Measured here, forward + backward of one mask on a 2 × 300 × 576 input,
2 threads: 5.5 ms with `nn.Dropout`, 2.9 ms with this (trainer/README.md). Seeds still fix every
mask, so a run stays reproducible; the masks differ from `nn.Dropout`'s draws, so adapters are
not byte-identical to the old path's.

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
        self.threshold = round(p * 2**31)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        draws = torch.empty(x.shape, dtype=torch.int32, device=x.device).random_()   # uniform on [0, 2³¹)
        mask = (draws >= self.threshold).to(x.dtype).mul_(1.0 / (1.0 - self.p))
        return x * mask

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
