"""Whether a run's evaluation of a training is the evaluation a quality cell would make of it.

A finished run's epochs hold their trainings and the evaluation of each (`epochs/<e>/eval-s<seed>`,
written by `experiments.train_eval.evaluate_on`, the one evaluation path). `Cells.adopt` reuses such a
training; its evaluation is reused too when everything that decides the per-task results is the
cell's: the benchmark and its version (splits, checker, excluded tasks), the split, the task ids
in order, the metric, greedy decoding with the same seed, batch size, decoding budget, threads and
library versions, the chat template, and the memory bank (its bytes, k and retrieval rule). On a
2-core machine that is five minutes a candidate of a run read again on the 186 dev tasks.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Mapping, Sequence

from base.files import sha256_file
from environments.evaluate import EvalSpec
from chat_format import chat_format as cf
from trainer import memory as memory_mod


def _without_paths(value: Any) -> Any:
    """`value` without its `path` entries (a checkout's location is no part of the benchmark)."""
    if isinstance(value, Mapping):
        return {k: _without_paths(v) for k, v in value.items() if k != "path"}
    if isinstance(value, list):
        return [_without_paths(v) for v in value]
    return value


def expected_evaluation(spec: EvalSpec, split: str, tasks: Sequence[str], base: str, seed: int,
                        memory: str | None, benchmark_options: Mapping) -> dict:
    """The fields of a `metrics.json` (dotted paths) that decide an evaluation's per-task results,
    as a cell of `spec` on `split` × `tasks` with `base`, `seed` and the bank `memory` would write them."""
    import torch
    import transformers

    from base.registry import get_benchmark

    bench = get_benchmark(spec.benchmark, **benchmark_options)
    expected = {
        "benchmark": spec.benchmark, "split": split, "categories": None, "tasks": list(tasks), "metric": spec.metric,
        "benchmark_config": _without_paths(bench.describe() if hasattr(bench, "describe") else {}),
        "runner.episodes": True, "runner.steps": spec.step_pass(), "runner.batch_size": spec.batch_size,
        "runner.samples": 1, "runner.temperature": 0.0, "runner.seed": seed, "runner.max_steps": None,
        "runner.step_limit": None,
        "policy.base": base, "policy.max_new_tokens": spec.max_new_tokens,
        "policy.max_prompt_tokens": spec.max_prompt_tokens, "policy.torch": torch.__version__,
        "policy.transformers": transformers.__version__,
        "chat_format.template_sha256": hashlib.sha256(cf.CHAT_TEMPLATE.encode()).hexdigest(),
        "memory.sha256": memory and sha256_file(Path(memory)), "memory.k": memory and spec.memory_k,
        "memory.retrieval": memory and memory_mod.RETRIEVAL,
    }
    if spec.threads is not None:
        expected["policy.threads"] = spec.threads
    return expected


def _at(doc: Mapping, dotted: str) -> Any:
    value: Any = doc
    for part in dotted.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def same_evaluation(doc: Mapping, expected: Mapping[str, Any]) -> str | None:
    """None when `doc` (a metrics.json) is the evaluation `expected` describes; else the first
    field that differs, as `field: theirs != ours`."""
    for field, want in expected.items():
        have = _at(doc, field)
        if field == "benchmark_config":
            have = _without_paths(have or {})
        if have != want:
            return f"{field}: {have!r} != {want!r}"
    return None
