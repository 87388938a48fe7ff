"""The prompts ACEBench's own inference gives a model, in English (data/prompts_en.json: the strings
of `model_inference/prompt_en.py` at the pinned commit, kept as sha-checked data).

The system prompt of an item's kind — special for special_*, preference for normal_preference,
normal otherwise — with the item's `time` (or `profile`) filled in; its API specifications are the
offered tools, which the chat format renders right after the system text (so `{function}` is left
empty there, not given twice: ACEBench's own inference pastes the function list's Python repr, which
checker.system_prompt reproduces). The user message is the conversation history 1..t, as ACEBench asks.
"""
from __future__ import annotations

from typing import Mapping

NAMES = {"normal": "SYSTEM_PROMPT_FOR_NORMAL_DATA_EN", "preference": "SYSTEM_PROMPT_FOR_PREFERENCE_DATA_EN",
         "special": "SYSTEM_PROMPT_FOR_SPECIAL_DATA_EN", "user": "USER_PROMPT_EN"}


def _prompts() -> dict:
    from environments.acebench import data

    return {k: data.prompts()[v] for k, v in NAMES.items()}


def kind(category: str) -> str:
    return "special" if category.startswith("special") else "preference" if category == "normal_preference" else "normal"


def system_prompt(category: str, item: Mapping) -> str:
    template = _prompts()[kind(category)]
    filled = template.format(time=item.get("time") or "", profile=item.get("profile") or "", function="")
    return filled.rstrip() if filled.endswith(":\n") else filled


def user_prompt(item: Mapping) -> str:
    return _prompts()["user"].format(question=item["question"])
