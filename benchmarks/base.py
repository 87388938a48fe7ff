"""The benchmark interface the agent runner and `curateevo eval` code against.

A benchmark hands out `Task`s (sorted by id, per split), runs each as an `Episode` the runner
drives turn by turn, and scores the canonical trajectory the runner produced (`Verdict`). For
`step_accuracy` it also hands out `StepItem`s (a gold prefix and the gold next action) and
judges a policy's next action against the gold one.

Benchmarks register a factory in `REGISTRY` under their name; `get_benchmark(name, **options)`
builds one. "bfcl" and "bfcl-single" are registered lazily here (importing them loads the
`bfcl_eval` package, which is slow); other modules add their own with `register`.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, runtime_checkable

from base.errors import UserError

SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class Task:
    """One task. Treat it as read-only: its tool schemas may be shared between tasks."""

    id: str                   # "multi_turn_base_12", "simple_python_3", ...
    benchmark: str            # "bfcl" | "bfcl-single" | "replay"
    category: str             # "base", "miss_func", ..., "simple_python", ...
    tools: list               # OpenAI tool schemas offered at the start
    turns: list               # per user turn: the list of messages the environment adds (role user)
    meta: dict                # {"env": {"benchmark", "task_id", "variant"}, ...}


@dataclass
class Verdict:
    success: bool             # y
    reward: float             # r in [0,1]
    turn_pass: list           # one bool per user turn
    feedback: dict = field(default_factory=dict)  # φ: error type, state diff, missing items, tool errors, checker message


@dataclass(frozen=True)
class StepItem:               # for step_accuracy: gold prefix given, judge the next action
    task_id: str
    index: int
    messages: list            # canonical prefix ending before an assistant turn
    tools: list
    gold: list                # gold tool calls [{"name", "arguments"(JSON str)}], or [] when the gold action is a plain reply
    meta: dict


@runtime_checkable
class Episode(Protocol):
    def next_turn(self) -> list | None:
        """The next user turn's messages; None when the task is over (miss_func reveals happen here)."""

    def offered_tools(self) -> list:
        """OpenAI tool schemas offered right now."""

    def execute(self, calls: list) -> list:
        """calls [{"name", "arguments"(JSON str)}] -> one observation string per call; never
        raises; unknown or ill-formed calls give error observations."""


@runtime_checkable
class Benchmark(Protocol):
    name: str

    def tasks(self, split: str, limit: int | None = None, categories=None) -> list[Task]:
        """Tasks of a split sorted by id; `limit` takes a subset balanced over the categories
        (`balanced_subset`); split "test" raises UserError unless the benchmark was built with
        allow_test=True."""

    def episode(self, task: Task) -> Episode: ...

    def score(self, task: Task, messages: list) -> Verdict:
        """Score the canonical trajectory (messages) the runner produced for `task`."""

    def step_items(self, task: Task) -> list[StepItem]: ...

    def judge_step(self, item: StepItem, calls: list) -> bool: ...

    # A benchmark without an environment (replay) may add `judge_calls(item, calls, format_error)`
    # -> {verdict, why, tp, fp, fn} (call-by-call scoring, the runner records it per answer) and
    # `episodes(tasks, step_rows)` -> trajectory records of the scored steps (for the diagnosis).


# name -> factory(**options) -> Benchmark
REGISTRY: dict[str, Callable[..., Benchmark]] = {}
# name -> "module:attribute" imported on first use
_LAZY: dict[str, str] = {
    "bfcl": "benchmarks.bfcl.multi_turn:MultiTurnBenchmark",
    "bfcl-single": "benchmarks.bfcl.single_turn:SingleTurnBenchmark",
    "replay": "benchmarks.replay_benchmark:ReplayBenchmark",
}


def register(name: str, factory: Callable[..., Benchmark]) -> None:
    """Make `get_benchmark(name, **options)` call `factory(**options)`."""
    REGISTRY[name] = factory


def benchmark_names() -> list[str]:
    return sorted(set(REGISTRY) | set(_LAZY))


def get_benchmark(name: str, **options: Any) -> Benchmark:
    """Build the benchmark registered under `name` (options go to its factory, e.g.
    allow_test=True)."""
    factory = REGISTRY.get(name)
    if factory is None and name in _LAZY:
        module, attr = _LAZY[name].split(":")
        factory = getattr(importlib.import_module(module), attr)
        REGISTRY.setdefault(name, factory)
    if factory is None:
        raise UserError(f"unknown benchmark {name!r} (known: {', '.join(benchmark_names())})")
    return factory(**options)


def check_split(split: str, allow_test: bool) -> None:
    """The split-name check every benchmark applies in tasks()."""
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r} (expected one of {', '.join(SPLITS)})")
    if split == "test" and not allow_test:
        raise UserError("the test split is only read by `curateevo test`; "
                        "use split 'dev' for evaluation")


def balanced_subset(groups: list[list[str]], limit: int | None) -> list[str]:
    """The ids of `groups` (one ordered list per category) in group order; with `limit`, only
    the first `limit` of a round robin over the groups (the 1st of each, then the 2nd of each,
    ...), so a small dev subset covers every category instead of exhausting the first one."""
    if limit is None or limit >= sum(map(len, groups)):
        return [i for g in groups for i in g]
    taken = [0] * len(groups)
    left = max(limit, 0)
    while left:
        for k, g in enumerate(groups):
            if left and taken[k] < len(g):
                taken[k] += 1
                left -= 1
    return [i for k, g in enumerate(groups) for i in g[:taken[k]]]
