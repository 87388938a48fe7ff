"""AgentRefine's Refinement Tuning loss mask (§3.3): an erroneous assistant turn that the agent
later corrects stays in the context, so the model sees the error and its repair, but gets
weight 0 so the model is not trained to make the error."""
from __future__ import annotations

from typing import Mapping

from .errors import corrections
from .provenance import traced
from .trajectory import assistant_indices


def refinement_weights(raw: Mapping, mask_uncorrected: bool = False, validate: bool = True) -> list[int]:
    """One weight per assistant message: 0 for erroneous turns that are corrected later (and,
    with mask_uncorrected, for those that are not), 1 otherwise."""
    masked = {i for i, fix in corrections(raw, validate).items() if fix is not None or mask_uncorrected}
    weights = [0 if i in masked else 1 for i in assistant_indices(raw["messages"])]
    return traced(weights, "refinement_weights", "masked", mask_uncorrected=mask_uncorrected) if masked else weights


def masked_indices(raw: Mapping, weights: list[int]) -> list[int]:
    """Message indices of the assistant turns that `weights` does not train."""
    return [i for i, w in zip(assistant_indices(raw["messages"]), weights) if w == 0]


def trainable(weights: list[int] | None) -> bool:
    """True when a record with these weights trains at least one turn (None trains all)."""
    return weights is None or any(weights)
