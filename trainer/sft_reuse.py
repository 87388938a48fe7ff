"""Reusing a finished training's SFT stage: the same SFT inputs train the same SFT adapter.

A training's SFT stage reads only its SFT file, the memory bank (when the profile puts hints into
the SFT prompts; the switch without a bank changes no prompt and is keyed as off),
the base, the seed, the recipe, the profile's fields other than the GRPO-only ones
(trainer.recipe.GRPO_ONLY), the launcher and the training libraries. `sft_key` hashes exactly
those; trainer.train records it in request.json and summary.json (`sft_key`) and, given finished
trainings as candidates (`reuse_sft`), passes the first whose summary holds the same key to the
worker, which takes its SFT stage over (`take_over`) instead of training it again and then goes on
with GRPO from the copied adapter as it would from its own. A GRPO-budget sweep, or an edit that
changes only the RL data, then trains its SFT stage once. GRPO starts from the same state either
way (transformers' Trainer reseeds from the seed when it is built), so the final adapter's bytes
are the same as without reuse (tests/test_sft_reuse.py).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Iterable

from base.files import sha256_file
from trainer.recipe import GRPO_ONLY, RECIPE, Profile

LIBRARIES = ("torch", "transformers", "trl", "peft")
"""The libraries whose versions decide an SFT adapter's bytes (part of the key)."""


def sft_key(sft: str | Path | None, *, base: str, seed: int, profile: Profile, memory: str | Path | None = None,
            launcher: str | None = None, accelerate_config: str | Path | None = None) -> str | None:
    """sha256 of the canonical JSON of what the SFT stage reads (None without an SFT file: no stage)."""
    if sft is None:
        return None
    payload = {"sft": sha256_file(sft), "base": base, "seed": seed, "recipe": dataclasses.asdict(RECIPE),
               # hints on without a bank change no SFT prompt: keyed as hints off
               "profile": {**{k: v for k, v in dataclasses.asdict(profile).items() if k not in GRPO_ONLY},
                           "sft_memory_hints": bool(profile.sft_memory_hints and memory)},
               "memory": sha256_file(memory) if profile.sft_memory_hints and memory else None,
               "launcher": launcher or "",
               "accelerate_config": sha256_file(accelerate_config) if accelerate_config else None,
               "versions": {name: _version(name) for name in LIBRARIES}}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def reusable(key: str | None, candidates: Iterable[str | Path]) -> Path | None:
    """The first of the finished training directories `candidates` (summary.json and sft_adapter/
    present) whose summary's `sft_key` is `key`; None when none is (or there is no key)."""
    if key is None:
        return None
    for folder in map(Path, candidates):
        if not (folder / "sft_adapter" / "adapter_model.safetensors").is_file():
            continue
        try:
            summary = json.loads((folder / "summary.json").read_text())
        except (OSError, ValueError):
            continue
        if isinstance(summary, dict) and summary.get("sft_key") == key and isinstance(summary.get("sft"), dict):
            return folder.resolve()
    return None


def take_over(source: Path, out: Path) -> dict:
    """Make `source`'s SFT stage this training's (`out`): its sft_adapter/, its SFT lines of
    metrics.jsonl and TensorBoard files; returns its summary's "sft" section (wall time as measured
    there) marked `reused_from`."""
    source, out = Path(source), Path(out)
    shutil.copytree(source / "sft_adapter", out / "sft_adapter")
    if (source / "tensorboard" / "sft").is_dir():
        shutil.copytree(source / "tensorboard" / "sft", out / "tensorboard" / "sft")
    metrics = source / "metrics.jsonl"
    lines = metrics.read_text(encoding="utf-8").splitlines(keepends=True) if metrics.is_file() else []
    with (out / "metrics.jsonl").open("a", encoding="utf-8") as f:
        f.writelines(line for line in lines if line.strip() and json.loads(line).get("stage") == "sft")
    summary = json.loads((source / "summary.json").read_text())
    return {**summary["sft"], "reused_from": str(source)}
