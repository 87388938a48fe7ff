"""Reading run.json files of earlier shapes: the one module that knows them.

A run's run.json is a plain dump of `evolver.config.RunConfig`. Runs made by earlier code wrote
other shapes, and they must still resume, replay, report and be tested. Every difference is
spelled here, so adding or renaming a setting touches RunConfig and, when an older run.json named
it otherwise, one entry below:

- `FLAT`, `FLAT_BUDGET`: before the specs were nested (2026-12), the fields of `train` and `eval`
  stood at the top (`base`, `profile`, `batch_size`, `max_new_tokens`, `train_budget`,
  `max_length`, …); `nest` moves them in. The same flat keys stay accepted as keywords of
  `RunConfig(...)` / `replace(...)` (a flat key wins over the nested field).
- `OLD_BUDGET`: before issue 72's names (2026-12), the prompt cap of GRPO was `max_prompt_length`
  (flat, or a key of `train.budget`); it reads as `max_prompt_tokens`, evaluation's name for its own
  cap. A training's request.json and summary.json and every key made from a profile still spell it
  the old way (trainer/recipe.py `WRITTEN_AS`): they are no run.json shape.
- `NO_DECODING_BUDGET`: a run.json naming no `max_new_tokens` (before 2026-11-29) decoded with
  128 tokens (`environments.policies.limits.LEGACY_MAX_NEW_TOKENS`), not today's default.
- an old benchmark name (`base.registry.OLD_NAMES`: `replay` before issue 61) reads as its new one.

Not here, because they are no run.json shape: the benchmark aliases of the command line and of
stored records (base/registry.py `OLD_NAMES`, `given`; evolver/diagnose.py's `replay:` family
prefix), the quality bench's cache keys (experiments/quality/cells.py: a cell keyed under an old
name, a budget keyed only when changed) and the training keys (trainer/recipe.py
`KEYED_WHEN_CHANGED`). The legacy hold-out of a run.json whose `holdout` is `{}` is its meaning,
not a shape: `RunConfig.effective_holdout`.
"""
from __future__ import annotations

from typing import Any, Mapping

from base import registry
from base.errors import UserError
from environments.policies.limits import LEGACY_MAX_NEW_TOKENS
from trainer.recipe import READ_AS

FLAT = {"base": ("train", "base"), "profile": ("train", "profile"), "report_to": ("train", "report_to"),
        "launcher": ("train", "launcher"), "accelerate_config": ("train", "accelerate_config"),
        "train_budget": ("train", "budget"), "batch_size": ("eval", "batch_size"),
        "max_new_tokens": ("eval", "max_new_tokens"), "eval_steps": ("eval", "steps")}
"""The keys of a run.json written before the specs were nested → (spec, its field)."""
FLAT_BUDGET = {"max_length": "max_length", "max_prompt_length": "max_prompt_tokens"}
"""Keys of such a run.json that are budget overrides of `train` when not 0 (the profile's) → the budget's field."""
OLD_BUDGET = READ_AS
"""Fields of `train.budget` by their names in a run.json written before issue 72 → their names now."""
OLD_KEYS = (*FLAT, *FLAT_BUDGET)
"""Every top-level key an earlier run.json may hold that RunConfig has no field of."""
NO_DECODING_BUDGET = LEGACY_MAX_NEW_TOKENS
"""What a run whose run.json names no `max_new_tokens` (flat or in `eval`) decoded with."""


def nest(data: dict, nested: dict[str, dict]) -> None:
    """Move the flat keys of `data` (FLAT, FLAT_BUDGET) into `nested["train"]` / `nested["eval"]`,
    in place, and name the budget's fields as they are named now (OLD_BUDGET); a flat budget key
    must be 0 (the profile's) or a positive number of tokens."""
    for old, (spec, field) in FLAT.items():
        if old in data:
            nested[spec][field] = data.pop(old)
    for old in FLAT_BUDGET:
        value = data.pop(old, 0)
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
            raise UserError(f"run config: {old} must be 0 (the profile's) or a positive number of tokens, "
                            f"not {value!r}"[:200])
        if value:
            nested["train"]["budget"] = {**nested["train"].get("budget", {}), FLAT_BUDGET[old]: value}
    budget = nested["train"].get("budget")
    if isinstance(budget, Mapping) and OLD_BUDGET.keys() & budget.keys():
        nested["train"]["budget"] = {OLD_BUDGET.get(k, k): v for k, v in budget.items()}


def current_benchmark(data: Any) -> Any:
    """`data` with a benchmark by its old name (registry.OLD_NAMES) as its new one."""
    if isinstance(data, Mapping) and data.get("benchmark") in registry.OLD_NAMES:
        return {**data, "benchmark": registry.current(data["benchmark"])}
    return data


def absent_then(doc: Mapping) -> dict:
    """The settings a run.json leaves out whose value then was not today's default."""
    named = "max_new_tokens" in doc or (isinstance(doc.get("eval"), Mapping) and "max_new_tokens" in doc["eval"])
    return {} if named else {"max_new_tokens": NO_DECODING_BUDGET}
