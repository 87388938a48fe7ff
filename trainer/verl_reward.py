"""The recipe's rewards behind verl's custom reward signature (data from `curateevo export verl`).

verl calls `compute_score(data_source, solution_str, ground_truth, extra_info)` once per rollout;
`extra_info["record"]` is the whole RL record as JSON (tools, reference, environment), so the
score is exactly `trainer.rewards.score(completion, record)`: the record's own reward
(`tool_call_match` or `state_match`), in [-0.5, 1]. The completion is cut at the first
`<|im_end|>` in case the engine decoded special tokens.
"""
from __future__ import annotations

import json
from typing import Mapping

from chat_format import chat_format as cf
from trainer import rewards


def compute_score(data_source: str, solution_str: str, ground_truth: str | None = None,
                  extra_info: Mapping | None = None, **_) -> float:
    if not extra_info or "record" not in extra_info:
        raise ValueError(f"{data_source}: extra_info has no 'record' (export the data with `curateevo export verl`)")
    record = json.loads(extra_info["record"])
    return float(rewards.score(solution_str.split(cf.STOP)[0], record))
