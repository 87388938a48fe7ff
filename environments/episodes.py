"""Episodes of one user turn, shared by the benchmarks whose answer is one assistant message.

`OneTurn` gives the task's first turn once and offers its tools; `Recorded` adds an `execute` that
runs nothing: each call is checked (a JSON-object call naming an offered function) and answered with
the benchmark's `recorded` sentence, or an error observation, and kept in `calls` (BFCL single-turn,
ACEBench's normal and special items). A benchmark whose calls do run (ACEBench's agent items)
subclasses `OneTurn` with its own `execute`.
"""
from __future__ import annotations

import copy
from typing import Any

from base.benchmark import Task
from environments.bfcl.common import CallError, call_parts, error_observation, short


class OneTurn:
    def __init__(self, task: Task):
        self.task, self._given = task, False

    def next_turn(self) -> list | None:
        if self._given:
            return None
        self._given = True
        return copy.deepcopy(self.task.turns[0])

    def offered_tools(self) -> list:
        return copy.deepcopy(self.task.tools)


class Recorded(OneTurn):
    recorded = "The call was recorded."

    def __init__(self, task: Task):
        super().__init__(task)
        self._names = {t["function"]["name"] for t in task.tools}
        self.calls: list[tuple[Any, str]] = []

    def execute(self, calls: list) -> list:
        out = []
        for call in calls if isinstance(calls, (list, tuple)) else [calls]:
            try:
                name, _ = call_parts(call)
                obs = self.recorded if name in self._names else error_observation(f"name '{short(name, 80)}' is not defined")
            except CallError as exc:
                obs = error_observation(str(exc))
            self.calls.append((call, obs))
            out.append(obs)
        return out
