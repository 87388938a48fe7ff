"""The benchmark interface the agent runner and `curateevo eval` code against.

A benchmark hands out `Task`s (sorted by id, per split), runs each as an `Episode` the runner
drives turn by turn, and scores the canonical trajectory the runner produced (`Verdict`). For
`step_accuracy` it also hands out `StepItem`s (a gold prefix and the gold next action) and
judges a policy's next action against the gold one.

An environment (`base/environment.py`) builds its benchmark; `base.registry.get_benchmark(name,
**options)` builds the one registered under `name`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from base.errors import UserError

SPLITS = ("train", "dev", "test")
TUNE = "tune"
"""The tuning slice: train-split tasks kept out of the default corpus, on which a profile's
learning rates are chosen (never on dev or test). Only benchmarks that define one accept it."""


@dataclass(frozen=True)
class Task:
    """One task. Treat it as read-only: its tool schemas may be shared between tasks."""

    id: str                   # the benchmark's own task id (BFCL: its category and number)
    benchmark: str            # "bfcl" | "bfcl-single" | "next-call" | "scienceworld"
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

    # Optional, for an episode whose user is simulated (τ² airline/retail, ACEBench agent multi-turn):
    # `hear(text)` gets the assistant's text that ended a turn (the next turn answers it), and
    # `closing` (a list of messages) holds the user's last words once `next_turn()` returned None.


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

    # Optional: a benchmark that scores steps (the step_accuracy metric) adds
    # `step_items(task) -> [StepItem]` and `judge_step(item, calls) -> bool`; one without them has none.

    # A benchmark without an environment (next-call) may add `judge_calls(item, calls, format_error)`
    # -> {verdict, why, tp, fp, fn} (call-by-call scoring, the runner records it per answer) and
    # `episodes(tasks, step_rows)` -> trajectory records of the scored steps (for the diagnosis).


def check_split(split: str, allow_test: bool, tune: bool = False) -> None:
    """The split-name check every benchmark applies in tasks(); `tune`: the benchmark has a tuning slice."""
    if split == TUNE and not tune:
        raise UserError(f"this benchmark has no tuning slice (split {TUNE!r} is bfcl-single's)")
    if split not in SPLITS and split != TUNE:
        raise UserError(f"unknown split {split!r} (expected one of {', '.join(SPLITS)}, or {TUNE})")
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
